// torchtune's MultiHeadAttention (docs/formulas.md#torchtune-attention): K and V expanded to every
// query head before SDPA, which then saves the full-head copies instead of the KV-head tensors.
#include <catch2/catch.hpp>

#include <utility>
#include <vector>

#include "core/sim/program.hpp"
#include "memplan/engine.hpp"
#include "support/invariants.hpp"
#include "support/models.hpp"
#include "support/step_events.hpp"

using namespace memplan;
using namespace memplan::sim;
using memplan::testing::at;
using memplan::testing::at_backward_start;
using memplan::testing::bf16_program;

TEST_CASE("torchtune's attention saves K and V at every query head") {
  // The toy Llama: 4 heads of 64, 2 KV heads, 3 layers. As backward begins each layer's SDPA node
  // holds K and V at 4 heads where transformers' enable_gqa path holds them at 2:
  // 2 tensors x b s x (4 - 2) heads x 64 x 2 bytes more per layer, and nothing else changes.
  const ModelSpec m = memplan::testing::toy_llama(3);
  const ProgramSpec hf = bf16_program(m);
  ProgramSpec tt = hf;
  tt.expand_kv = true;
  const CatVec p = at_backward_start(run_step(hf));
  const CatVec q = at_backward_start(run_step(tt));
  for (const auto& [b, s] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 64}, {2, 128}, {3, 1000}}) {
    CHECK(at(q, Cat::kActivations, b, s) - at(p, Cat::kActivations, b, s) == 3 * 2 * b * s * 2 * 64 * 2);
    CHECK(at(q, Cat::kInputs, b, s) == at(p, Cat::kInputs, b, s));
    CHECK(at(q, Cat::kLogits, b, s) == at(p, Cat::kLogits, b, s));
  }
  SECTION("one KV head: expand + flatten is a view, nothing is copied") {
    ModelSpec mqa = m;
    mqa.num_kv_heads = 1;
    ProgramSpec a = bf16_program(mqa);
    ProgramSpec b = a;
    b.expand_kv = true;
    CHECK(at(at_backward_start(run_step(b)), Cat::kActivations, 2, 128) ==
          at(at_backward_start(run_step(a)), Cat::kActivations, 2, 128));
  }
}

TEST_CASE("--model-code torchtune reaches the estimate: Llama 3.1 8B LoRA, one sequence of 2,048") {
  // 32 layers, 32 heads of 128, 8 KV heads: without checkpointing every layer keeps its expanded
  // K and V to backward, 2 x 2,048 x (32 - 8) x 128 x 2 bytes = 24 MiB per layer, 768 MiB in all.
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.device = Device::kCuda;
  c.attn = AttnImpl::kSdpa;
  c.seq_len = 2048;
  c.lora.enabled = true;
  TrainingConfig tt = c;
  tt.model_code = ModelCode::kTorchtune;
  auto a = estimate(memplan::testing::llama31_8b(), c);
  auto b = estimate(memplan::testing::llama31_8b(), tt);
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  memplan::testing::require_consistent(*b);
  CHECK(b->peak - a->peak == Bytes::mib(768));
  CHECK(parse_model_code("torchtune").value() == ModelCode::kTorchtune);
  CHECK_FALSE(parse_model_code("torchtitan").has_value());
}

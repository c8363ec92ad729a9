// Granite's multipliers in the step (modeling_granite.py, modeling_granitemoehybrid.py):
// inputs_embeds * embedding_multiplier, residual + out * residual_multiplier in both halves of
// every layer, logits / logits_scaling. Each product with a Python float is a new tensor that
// saves nothing for backward, so the step allocates exactly 1 + 2 x layers more hidden-sized
// tensors and one more logits-sized tensor in the forward than the same shapes read as a Llama.
#include <catch2/catch.hpp>

#include <string>

#include "io/model/model_source.hpp"
#include "support/step_events.hpp"

using namespace memplan;

namespace {

const std::string kShape = R"("hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": false)";

// Allocations of the forward (after the parameters, before the loss's backward begins) whose
// size is `bytes` at (b, s).
int allocations_of(const sim::ProgramResult& r, std::int64_t bytes, std::int64_t b, std::int64_t s) {
  std::size_t end = r.trace.ops.size();
  for (const auto& mk : r.trace.marks)
    if (mk.segment == sim::kSegHeadBwd) {
      end = mk.at;
      break;
    }
  int n = 0;
  for (std::size_t i = r.trace.step_begin; i < end; ++i) {
    const std::int32_t op = r.trace.ops[i];
    if (op > 0 && r.trace.bytes[static_cast<std::size_t>(op - 1)].eval(b, s) == bytes) ++n;
  }
  return n;
}

sim::ProgramResult traced(const std::string& type) {
  auto m = io::parse_hf_config(R"({"model_type": ")" + type + "\", " + kShape + "}", "c.json");
  REQUIRE(m.has_value());
  sim::ProgramSpec sp = memplan::testing::bf16_program(*m);
  sp.full_finetune = true;
  sp.trace = true;
  return sim::run_step(sp);
}

}  // namespace

TEST_CASE("Granite 3.x: the embedding, residual and logits multipliers are tensors of their own") {
  const auto granite = traced("granite");
  const auto llama = traced("llama");
  // b = 2, s = 96 in bf16: hidden rows 2 x 96 x 64 x 2 bytes, logits 2 x 96 x 1,000 x 2 bytes.
  const std::int64_t hidden = 2 * 96 * 64 * 2, logits = 2 * 96 * 1000 * 2;
  CHECK(allocations_of(granite, hidden, 2, 96) == allocations_of(llama, hidden, 2, 96) + 1 + 2 * 3);
  CHECK(allocations_of(granite, logits, 2, 96) == allocations_of(llama, logits, 2, 96) + 1);
}

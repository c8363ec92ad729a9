// ModernBERT's training step (docs/formulas.md#modernbert): what each attention path keeps of the
// global and local masks and the rotary tables, the parameters the step trains, and the engine's
// answer for ModernBERT-base. The whole step is checked against CPU measurements in
// tests/data/measurements/cpu_encoders.json (modernbert-* cases, tools/measure/hf_modernbert.py).
#include <catch2/catch.hpp>


#include "core/sim/program.hpp"
#include "memplan/engine.hpp"
#include "support/encoder_step.hpp"
#include "support/invariants.hpp"
#include "support/models.hpp"

using namespace memplan;
using namespace memplan::sim;
using memplan::testing::modernbert_base;

namespace {

// Every layer simulated: layer 0 (global, attn_norm = Identity), 1 and 2 (local), 3 (global).
ProgramSpec program(const ModelSpec& m, DT weights, std::optional<DT> autocast, AttnImpl attn, bool cuda) {
  return memplan::testing::every_layer_program(m, weights, cuda, attn, autocast);
}

// The inputs-and-masks bytes alive as backward begins: what the forward left saved.
std::int64_t inputs_at_backward_start(const ProgramSpec& sp, std::int64_t b, std::int64_t s) {
  return memplan::testing::at_backward_start(sp, Cat::kInputs, b, s);
}

}  // namespace

TEST_CASE("ModernBERT under SDPA: every layer's kernel saves its mask, shared or cast per layer") {
  // 4 layers of 768 (12 heads of 64), b = 2, s = 256: T = 512 tokens. Always alive: input_ids and
  // attention_mask, int64 (16 T bytes). The rotary tables, cos and sin of (1, s, 64) for each of
  // the two layer types, are saved by apply_rotary_pos_emb's products, in the embeddings' dtype.
  const ModelSpec m = modernbert_base(4, 1000);
  const std::int64_t b = 2, s = 256, T = b * s, L = 4;
  const std::int64_t ids = 16 * T;
  const std::int64_t mask_elems = b * s * s;  // one (b, 1, s, s) mask
  SECTION("bf16 weights: the global and the local bf16 mask, each saved as it is") {
    const ProgramSpec sp = program(m, DT::kBF16, std::nullopt, AttnImpl::kSdpa, true);
    CHECK(inputs_at_backward_start(sp, b, s) == ids + 2 * mask_elems * 2 + 4 * s * 64 * 2);
  }
  SECTION("fp32 weights under bf16 autocast: each layer saves its own bf16 cast of its mask") {
    // The fp32 masks themselves die with the model's forward; the tables are fp32 (the
    // LayerNorm output is fp32 under autocast).
    const ProgramSpec sp = program(m, DT::kF32, DT::kBF16, AttnImpl::kSdpa, true);
    CHECK(inputs_at_backward_start(sp, b, s) == ids + L * mask_elems * 2 + 4 * s * 64 * 4);
  }
  SECTION("eager: the masks are only added, nothing keeps them") {
    const ProgramSpec sp = program(m, DT::kF32, std::nullopt, AttnImpl::kEager, false);
    CHECK(inputs_at_backward_start(sp, b, s) == ids + 4 * s * 64 * 4);
  }
  SECTION("flash_attention_2 on unpadded tokens: no mask; the model's tables are unused and die") {
    // The gathered (unpadded) input ids, int64, are what tok_embeddings saves for its backward.
    const ProgramSpec sp = program(m, DT::kBF16, std::nullopt, AttnImpl::kFlashAttention2, true);
    CHECK(inputs_at_backward_start(sp, b, s) == ids + 8 * T);
  }
  SECTION("checkpointed layers keep both masks and the tables for their recomputation") {
    ProgramSpec sp = program(m, DT::kF32, std::nullopt, AttnImpl::kEager, false);
    sp.gradient_checkpointing = true;
    CHECK(inputs_at_backward_start(sp, b, s) == ids + 2 * mask_elems * 4 + 4 * s * 64 * 4);
  }
}

TEST_CASE("ModernBERT's step trains exactly the parameters transformers builds, for every head") {
  for (const EncoderHead head : {EncoderHead::kPooling, EncoderHead::kMaskedLm, EncoderHead::kSequenceClassification})
    for (const bool norm_bias : {false, true}) {
      ModelSpec m = modernbert_base(4, 1000);
      m.head = head;
      m.norm_bias = norm_bias;
      m.num_labels = 3;
      const ProgramResult r = run_step(program(m, DT::kF32, std::nullopt, AttnImpl::kEager, false));
      INFO("head " << to_string(head) << ", norm_bias " << norm_bias);
      CHECK(memplan::testing::simulated_parameters(r) == count_encoder_parameters(m).total);
    }
}

TEST_CASE("ModernBERT-base through the engine: its published parameters, a plain estimate") {
  TrainingConfig c;
  c.micro_batch = 8;
  c.seq_len = 1024;
  c.torch_dtype = DType::kBFloat16;
  c.attn = AttnImpl::kSdpa;
  ModelSpec m = modernbert_base();
  auto pooled = estimate(m, c);
  REQUIRE(pooled.has_value());
  memplan::testing::require_consistent(*pooled);
  CHECK(pooled->params.trainable == 149'014'272);  // ModernBertModel, the model card's 149M
  // ModernBertForMaskedLM adds the prediction head (768 x 768 dense, a 768 LayerNorm weight)
  // and the decoder's 50,368 biases; the decoder weight is the tied embedding.
  m.head = EncoderHead::kMaskedLm;
  auto mlm = estimate(m, c);
  REQUIRE(mlm.has_value());
  CHECK(mlm->params.trainable == 149'014'272 + 768 * 768 + 768 + 50'368);
  // ForMaskedLMLoss upcasts the bf16 logits: the fp32 log-probs and, in backward, their fp32
  // gradient and the upcast's: 12 bytes per score, b s V of them, plus the 4-byte loss.
  CHECK(memplan::testing::component(*mlm, "logits_and_loss") == 12 * 8 * 1024 * 50'368LL + 4);
  // What is modelled exactly and what is an upper bound (torch.compile) is said.
  const auto says = [](const Estimate& e, const std::string& text) {
    return memplan::testing::mentions(e.assumptions, text);
  };
  CHECK(says(*mlm, "ModernBERT: padded batches with a global and a local (b, 1, s, s) additive mask"));
  CHECK(says(*mlm, "reference_compile unset (on where triton is installed): transformers compiles the MLP"));
  m.reference_compile = false;
  auto eager = estimate(m, c);
  REQUIRE(eager.has_value());
  CHECK(says(*eager, "its modules run eagerly (reference_compile false), as modelled"));
  CHECK(eager->peak == mlm->peak);
  c.device = Device::kCpu;
  c.attn = AttnImpl::kEager;
  c.torch_dtype = DType::kFloat32;
  m.reference_compile = true;
  auto cpu = estimate(m, c);
  REQUIRE(cpu.has_value());
  CHECK(says(*cpu, "its modules run eagerly (transformers does not compile on the CPU)"));
}

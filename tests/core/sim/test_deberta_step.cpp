// DeBERTa-v2/v3's training step (docs/formulas.md#deberta): what the disentangled attention keeps
// for backward (the c2p/p2c products gather saves, their (s, s) int64 indices, the inverted bool
// mask), the parameters the step trains, and the engine's answers for the v3 checkpoints. The
// whole step is checked against CPU measurements in tests/data/measurements/cpu_encoders.json
// (deberta-* cases, tools/measure/hf_deberta.py).
#include <catch2/catch.hpp>

#include "core/sim/program.hpp"
#include "memplan/engine.hpp"
#include "support/encoder_step.hpp"
#include "support/invariants.hpp"
#include "support/models.hpp"

using namespace memplan;
using namespace memplan::sim;
using memplan::testing::at_backward_start;
using memplan::testing::deberta_v3_base;

namespace {

ProgramSpec program(const ModelSpec& m, DT weights, bool cuda) {
  return memplan::testing::every_layer_program(m, weights, cuda);
}

}  // namespace

TEST_CASE("DeBERTa's attention keeps both position products and their int64 gather indices per layer") {
  // 2 layers of deberta-v3-base (12 heads of 64, 2 x 256 relative rows), bf16 weights on CUDA,
  // b = 2, s = 128: T = 256 tokens.
  const ModelSpec m = deberta_v3_base(2, 1000);
  const std::int64_t b = 2, s = 128, T = b * s, L = 2, n = 12, h = 768, P = 512;
  // input_ids, token_type_ids, attention_mask: int64.
  const std::int64_t batch = 3 * 8 * T;
  SECTION("inputs: the clamped c2p and p2c index tensors, (s, s) int64 each, every layer") {
    CHECK(at_backward_start(program(m, DT::kBF16, true), Cat::kInputs, b, s) == batch + L * 2 * 8 * s * s);
  }
  SECTION("one term (pos_att_type c2p) keeps one index") {
    ModelSpec c2p = m;
    c2p.p2c = false;
    CHECK(at_backward_start(program(c2p, DT::kBF16, true), Cat::kInputs, b, s) == batch + L * 8 * s * s);
  }
  SECTION("attention scores: k^T / scale, the (b x heads, s, 2 span) products, the inverted mask, probs") {
    // Per layer, in bf16: bmm saves the scaled k^T (b s h); gather saves its c2p and p2c inputs
    // (b n s P each); masked_fill the inverted bool mask (b s s); softmax its output, dropout its
    // bool mask and bmm the dropped probabilities (2 + 1 + 2 bytes per score). The gathered terms,
    // their sum and the masked scores are freed when the attention returns.
    const std::int64_t per_layer = 2 * b * s * h + 2 * 2 * b * n * s * P + b * s * s + 5 * b * n * s * s;
    CHECK(at_backward_start(program(m, DT::kBF16, true), Cat::kAttentionScores, b, s) == L * per_layer);
  }
  SECTION("checkpointed layers hold the (b, 1, s, s) int64 mask and the (s, s) relative positions instead") {
    ProgramSpec sp = program(m, DT::kF32, false);
    sp.gradient_checkpointing = true;
    sp.checkpoint_reentrant = false;
    CHECK(at_backward_start(sp, Cat::kInputs, b, s) == batch + 8 * b * s * s + 8 * s * s);
  }
}

TEST_CASE("DeBERTa's step trains exactly the parameters transformers builds, for every head and variant") {
  for (const EncoderHead head : {EncoderHead::kPooling, EncoderHead::kMaskedLm, EncoderHead::kSequenceClassification})
    for (int variant = 0; variant < 3; ++variant) {
      ModelSpec m = deberta_v3_base(2, 1000);
      m.head = head;
      m.num_labels = 3;
      if (variant == 1) {  // position_biased_input with token types
        m.learned_positions = true;
        m.type_vocab_size = 2;
      } else if (variant == 2) {  // no relative attention
        m.relative_span = 0;
        m.c2p = m.p2c = m.rel_layer_norm = false;
      }
      const ProgramResult r = run_step(program(m, DT::kF32, false));
      REQUIRE(r.leaked.empty());
      INFO("head " << to_string(head) << ", variant " << variant);
      CHECK(memplan::testing::simulated_parameters(r) == count_encoder_parameters(m).total);
    }
}

TEST_CASE("DeBERTa-v3 through the engine: published parameter totals, LoRA's default targets, eager only") {
  TrainingConfig c;
  c.micro_batch = 8;
  c.seq_len = 512;
  c.autocast = DType::kBFloat16;
  ModelSpec m = deberta_v3_base();
  m.head = EncoderHead::kSequenceClassification;
  auto cls = estimate(m, c);
  REQUIRE(cls.has_value());
  memplan::testing::require_consistent(*cls);
  // ContextPooler (768 x 768 + 768) and a 2-label classifier on DebertaV2Model's 183,831,552:
  // 184,423,682, the total published for protectai/deberta-v3-base-prompt-injection-v2.
  CHECK(cls->params.trainable == 184'423'682);
  CHECK(memplan::testing::mentions(cls->assumptions, "DeBERTa: eager disentangled attention"));
  // PEFT's default deberta-v2 targets (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING since
  // its first release): query_proj and value_proj; the SEQ_CLS classifier is saved in full.
  // 12 x 2 x 16 x (768 + 768) + (768 x 2 + 2) = 589,824 + 1,538 = 591,362.
  c.lora.enabled = true;
  c.lora.r = 16;
  auto lora = estimate(m, c);
  REQUIRE(lora.has_value());
  const std::int64_t square = 16 * (768 + 768), wide = 16 * (768 + 3072);
  CHECK(lora->params.trainable == 12 * 2 * square + (768 * 2 + 2));
  // Naming query_proj, key_proj, value_proj and "dense" (every dense suffix: the attention output,
  // intermediate, output and ContextPooler denses) adapts those too.
  c.lora.target_modules = {"query_proj", "key_proj", "value_proj", "dense"};
  lora = estimate(m, c);
  REQUIRE(lora.has_value());
  CHECK(lora->params.trainable == 12 * (4 * square + 2 * wide) + square + (768 * 2 + 2));
  // Reentrant checkpointing with trained rel_embeddings fails in PyTorch: said as a warning.
  c.lora.enabled = false;
  c.gradient_checkpointing = true;
  c.checkpoint_reentrant = true;
  auto reentrant = estimate(m, c);
  REQUIRE(reentrant.has_value());
  CHECK(memplan::testing::mentions(reentrant->warnings, "Trying to backward through the graph a second time"));
  c.checkpoint_reentrant = false;
  auto plain = estimate(m, c);
  REQUIRE(plain.has_value());
  CHECK_FALSE(memplan::testing::mentions(plain->warnings, "Trying to backward"));
  // transformers has no SDPA or flash path for DeBERTa: asking for one is refused.
  c.attn = AttnImpl::kSdpa;
  auto sdpa = estimate(m, c);
  REQUIRE_FALSE(sdpa.has_value());
  CHECK(sdpa.error().message.find("DeBERTa-v2/v3 has only the eager attention in transformers (asked for sdpa)") == 0);
  // deberta-v3-large's classifier: 435,063,810 as published (434,012,160 + 1024 x 1024 + 1024 + 2 x 1024 + 2).
  ModelSpec large = deberta_v3_base(24);
  large.hidden_size = 1024;
  large.intermediate_size = 4096;
  large.num_heads = large.num_kv_heads = 16;
  large.head = EncoderHead::kSequenceClassification;
  CHECK(count_parameters(large).total == 435'063'810);
}

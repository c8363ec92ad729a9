// NomicBERT's training step (docs/formulas.md#nomicbert), as nomic-ai's remote code runs it: the
// per-layer rotary caches, the parameters the step trains, and the engine's answers. The whole
// step is checked against CPU measurements in tests/data/measurements/cpu_encoders.json (nomic-*
// cases, tools/measure/hf_nomic.py).
#include <catch2/catch.hpp>

#include "core/sim/program.hpp"
#include "io/model/model_source.hpp"
#include "memplan/engine.hpp"
#include "support/encoder_step.hpp"
#include "support/invariants.hpp"

using namespace memplan;
using namespace memplan::sim;

namespace {

// nomic-ai/nomic-embed-text-v1.5's config.json (GPT-2 field names), with `layers` layers.
ModelSpec nomic(int layers, const std::string& extra = "") {
  auto m = io::parse_hf_config(
      R"({"model_type": "nomic_bert", "vocab_size": 30528, "n_embd": 768, "n_head": 12, "n_inner": 3072, "n_layer": )" +
          std::to_string(layers) +
          R"(, "activation_function": "swiglu", "qkv_proj_bias": false, "mlp_fc1_bias": false, "mlp_fc2_bias": false,
          "rotary_emb_fraction": 1.0, "type_vocab_size": 2, "resid_pdrop": 0.0, "attn_pdrop": 0.0, "embd_pdrop": 0.0,
          "pad_vocab_size_multiple": 64, "prenorm": false, "n_positions": 8192)" +
          extra + "}",
      "config.json");
  REQUIRE(m.has_value());
  return *m;
}

ProgramSpec program(const ModelSpec& m, DT weights) { return memplan::testing::every_layer_program(m, weights, true); }

}  // namespace

TEST_CASE("NomicBERT's config.json: GPT-2 names, SwiGLU width rounded to 256, padded vocabulary") {
  const ModelSpec m = nomic(12);
  CHECK(m.is_nomic_bert());
  CHECK(m.hidden_size == 768);
  CHECK(m.intermediate_size == 3072);
  CHECK(m.gated_mlp);
  CHECK(m.activation == Activation::kSilu);
  CHECK_FALSE(m.learned_positions);  // full rotary: no position table
  // The hub's safetensors metadata: F32 136,731,648 (NomicBertModel without its pooler).
  CHECK(count_parameters(m).total == 136'731'648);
  // NomciBertGatedMLP rounds n_inner up to a multiple of 256; NomicBertModel pads the vocabulary.
  const ModelSpec odd = nomic(1, R"(, "n_inner": 3000, "vocab_size": 30522)");
  CHECK(odd.intermediate_size == 3072);
  CHECK(odd.vocab_size == 30528);
  // The plain GELU MLP keeps n_inner; biases and an absolute position table where config.json says so.
  const ModelSpec plain = nomic(1, R"(, "activation_function": "gelu", "n_inner": 3000, "rotary_emb_fraction": 0.0,
                                     "qkv_proj_bias": true, "mlp_fc1_bias": true, "mlp_fc2_bias": true)");
  CHECK_FALSE(plain.gated_mlp);
  CHECK(plain.intermediate_size == 3000);
  const std::int64_t h = 768;
  CHECK(count_parameters(plain).total == 30528 * h + 2 * h + 8192 * h + 2 * h +  // embeddings, emb_ln
                                             (h * 3 * h + 3 * h) + (h * h + h) +  // Wqkv, out_proj
                                             (h * 3000 + 3000) + (3000 * h + h) + 4 * h);  // fc1, fc2, norms
}

TEST_CASE("NomicBERT variants memplan does not model are refused at the file") {
  const auto error = [](const std::string& extra) {
    auto m = io::parse_hf_config(R"({"model_type": "nomic_bert", "n_embd": 768, "n_head": 12, "n_layer": 2)" + extra + "}",
                                 "config.json");
    REQUIRE_FALSE(m.has_value());
    CHECK(m.error().where->file == "config.json");
    return m.error().message;
  };
  CHECK(error(R"(, "prenorm": true)") == "\"prenorm\": true is not modelled");
  CHECK(error(R"(, "rotary_emb_fraction": 0.5)") == "a partial rotary embedding (\"rotary_emb_fraction\": 0.5) is not modelled");
  CHECK(error(R"(, "num_experts": 8, "moe_every_n_layers": 2)") ==
        "NomicBERT's mixture-of-experts layers (nomic-embed-text-v2-moe: 8 experts every 2 layers) are not modelled");
  CHECK(error(R"(, "activation_function": "glu")") ==
        "\"activation_function\" \"glu\" is not modelled (swiglu, geglu and the gelu variants are)");
  CHECK(error(R"(, "resid_pdrop": 1.5)") == "\"resid_pdrop\" must be a probability (0 <= p < 1), got 1.5");
  CHECK(error(R"(, "n_head": 5)") == "\"n_embd\" 768 is not divisible by \"n_head\" 5");
}

TEST_CASE("NomicBERT keeps every layer's rotary cos/sin cache; its step trains the parameters it builds") {
  // The caches, (s, d/2) cos and sin per layer in qkv's dtype, are alive from the step's start:
  // with 2 layers, s = 128, d = 64 in bf16 that is 2 x 128 x 64 x 2 bytes, besides the three
  // int64 (b, s) inputs.
  const ModelSpec m = nomic(2);
  const ProgramResult r = run_step(program(m, DT::kBF16));
  REQUIRE(r.leaked.empty());
  const std::int64_t b = 4, s = 128;
  CHECK(r.cats.at(r.events.front(), Cat::kInputs).eval(b, s) == 3 * 8 * b * s + 2 * s * 64 * 2);
  for (const EncoderHead head : {EncoderHead::kPooling, EncoderHead::kMaskedLm, EncoderHead::kSequenceClassification}) {
    ModelSpec h = m;
    h.head = head;
    const ProgramResult hr = run_step(program(h, DT::kF32));
    INFO("head " << to_string(head));
    CHECK(memplan::testing::simulated_parameters(hr) == count_encoder_parameters(h).total);
  }
}

TEST_CASE("NomicBERT through the engine: eager only, non-reentrant checkpointing, LoRA needs targets") {
  TrainingConfig c;
  c.micro_batch = 16;
  c.seq_len = 512;
  c.autocast = DType::kBFloat16;
  c.contrastive.texts_per_example = 4;
  const ModelSpec m = nomic(12);
  auto est = estimate(m, c);
  REQUIRE(est.has_value());
  memplan::testing::require_consistent(*est);
  CHECK(est->params.trainable == 136'731'648);
  CHECK(memplan::testing::mentions(est->assumptions, "NomicBERT (nomic-ai's remote code): eager attention"));
  CHECK(memplan::testing::mentions(est->assumptions, "4 texts per example, one forward per text column (sentence-transformers)"));
  // The remote code calls checkpoint(..., use_reentrant=False) itself: asking for reentrant
  // changes nothing.
  c.gradient_checkpointing = true;
  c.checkpoint_reentrant = false;
  auto plain = estimate(m, c);
  c.checkpoint_reentrant = true;
  auto reentrant = estimate(m, c);
  REQUIRE(plain.has_value());
  REQUIRE(reentrant.has_value());
  CHECK(reentrant->peak.count() == plain->peak.count());
  CHECK(plain->peak.count() < est->peak.count());
  c.attn = AttnImpl::kSdpa;
  auto sdpa = estimate(m, c);
  REQUIRE_FALSE(sdpa.has_value());
  CHECK(sdpa.error().message.find("NomicBERT's remote code has only its eager attention (asked for sdpa)") == 0);
  c.attn.reset();
  c.lora.enabled = true;
  auto lora = estimate(m, c);
  REQUIRE_FALSE(lora.has_value());
  CHECK(lora.error().message.find("PEFT has no default LoRA target modules for model_type 'nomic_bert'") == 0);
  c.lora.target_modules = {"Wqkv"};
  auto targeted = estimate(m, c);
  REQUIRE(targeted.has_value());
  CHECK(targeted->params.trainable == 12 * 16 * (768 + 3 * 768));  // r (in + out) per Wqkv
}

// Gemma 3n (gemma3n / gemma3n_text; docs/models.md#gemma-3n), read from the catalog's E2B and E4B
// configs (configs/models/gemma-3n-*.json, provenance in each file), counted and estimated end to
// end. Every total is derived by hand from the modules of transformers' modeling_gemma3n.py (the
// sums are in the comments); with timm's MobileNetV5-300M encoder (294,284,096, keras-hub's
// published preset) they are the model cards' 5.44B and 7.85B.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "io/model/model_source.hpp"
#include "memplan/engine.hpp"
#include "support/catalog.hpp"
#include "support/invariants.hpp"

using namespace memplan;
using memplan::testing::catalog_spec;

namespace {

std::vector<std::string> names(const ModelSpec& m, int layer) {
  std::vector<std::string> out;
  for (const auto& l : layer_linears(m, layer)) out.push_back(l.name);
  return out;
}

// One Gemma3nTextDecoderLayer of hidden 2,048, 8 heads and 2 KV heads of 256, MLP width `width`:
// q/o 2,048 x 2,048 and k/v 2,048 x 512 (the KV-shared layers keep theirs), q/k norms 2 x 256,
// the MLP 3 x 2,048 x width, 4 norms; AltUp: correct_output_scale 2,048, correction_coefs 4 x 4,
// prediction_coefs 4 x 16, modality_router 2,048 x 4, router_norm 2,048; Laurel: 2 x 2,048 x 64
// and post_laurel_norm 2,048; per_layer_input_gate / per_layer_projection 2 x 2,048 x 256 and
// post_per_layer_input_norm 2,048.
std::int64_t layer_params(std::int64_t width) {
  const std::int64_t h = 2'048;
  return 2 * h * h + 2 * h * 512 + 2 * 256 + 3 * h * width + 4 * h + (h + 16 + 64 + 4 * h + h) + (2 * h * 64 + h) +
         (2 * h * 256 + h);
}

}  // namespace

TEST_CASE("Gemma 3n E2B: AltUp, Laurel and per-layer inputs counted by hand to the card's 5.44B") {
  const ModelSpec& m = catalog_spec("gemma-3n-e2b");
  CHECK(m.model_type == "gemma3n_text");
  CHECK(m.num_layers == 30);
  CHECK(m.altup_inputs == 4);
  CHECK(m.laurel_rank == 64);
  CHECK(m.kv_shared_layers == 10);
  CHECK(m.per_layer_input_dim == 256);
  CHECK(m.sliding_window == 512);
  CHECK(m.final_logit_softcap == 30.0);
  CHECK(m.full_attention_layers == std::vector<int>{4, 9, 14, 19, 24, 29});
  CHECK(m.sparse_mlp_layers == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(m.vision.kind == VisionKind::kGemma3n);
  CHECK(m.audio.enabled());
  // A KV-shared layer (29) keeps k_proj and v_proj: Gemma3nTextAttention builds them in every layer.
  CHECK(names(m, 29) == std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                  "down_proj", "altup.modality_router", "altup.prediction_coefs",
                                                  "altup.correction_coefs", "laurel.linear_left", "laurel.linear_right",
                                                  "per_layer_input_gate", "per_layer_projection"});
  CHECK(layer_params(8'192) == 62'153'296);
  const ParameterCounts c = count_parameters(m);
  // PLE: embed_tokens_per_layer 262,144 x 30 x 256 + per_layer_model_projection 2,048 x 7,680 + its norm 256.
  CHECK(c.per_layer_embedding == 262'144LL * 7'680 + 2'048LL * 7'680 + 256);
  // Language model: embed_tokens 262,400 x 2,048 (tied), PLE, altup_projections and
  // altup_unembed_projections 6 x 2,048^2, 30 layers, the final norm.
  const std::int64_t text = 262'400LL * 2'048 + c.per_layer_embedding + 6 * 2'048LL * 2'048 + 30 * 62'153'296LL + 2'048;
  CHECK(text == 4'456'156'768LL);
  // Vision: MobileNetV5-300M 294,284,096; embed_vision 128 x 2,048 + 2 x 2,048 + 2,048 x 2,048.
  CHECK(c.vision == 294'284'096LL);
  CHECK(c.projector == 128 * 2'048 + 2 * 2'048 + 2'048LL * 2'048);
  // Audio (Gemma3nAudioEncoder): subsampling 9 x 128 + 128 + 9 x 128 x 32 + 32 + (32 x 32) x 1,536;
  // 12 Conformer layers of 2 feed-forwards (8 x 1,536^2 + 2 x 1,536), attention (5 x 1,536^2 +
  // 192), light conv (3 x 1,536^2 + 5 x 1,536 + 2 x 1,536) and 3 norms; embed_audio 128 x 1,536 +
  // 2 x 1,536 + 1,536 x 2,048.
  const std::int64_t d = 1'536;
  const std::int64_t audio_layer = 2 * (8 * d * d + 2 * d) + 5 * d * d + 192 + 3 * d * d + 7 * d + 3 * d;
  CHECK(audio_layer == 56'644'800);
  CHECK(c.audio == 1'611'040 + 12 * audio_layer + 128 * d + 2 * d + d * 2'048);
  CHECK(c.total == text + c.vision + c.projector + c.audio);
  CHECK(c.total == 5'439'595'456LL);  // the model card's 5.44B
}

TEST_CASE("Gemma 3n E4B: 35 layers of MLP width 16,384, 15 KV-shared, to the card's 7.85B") {
  const ModelSpec& m = catalog_spec("gemma-3n-e4b");
  CHECK(m.num_layers == 35);
  CHECK(m.kv_shared_layers == 15);
  CHECK(m.layer_intermediate_size(34) == 16'384);
  const ParameterCounts c = count_parameters(m);
  const std::int64_t text = 262'400LL * 2'048 + 262'144LL * 8'960 + 2'048LL * 8'960 + 256 + 6 * 2'048LL * 2'048 +
                            35 * layer_params(16'384) + 2'048;
  CHECK(text == 6'866'696'688LL);
  CHECK(c.total == text + 294'284'096LL + 4'460'544 + 681'348'640LL + 3'345'408);
  CHECK(c.total == 7'850'135'376LL);  // the model card's 7.85B
}

TEST_CASE("Gemma 3n configs: Gemma3nTextConfig's defaults, MatFormer widths, and what is refused") {
  // A bare gemma3n_text config is the E4B layout: 35 layers, every fifth full, the first 10 sparse.
  auto m = io::parse_hf_config(R"({"model_type": "gemma3n_text"})", "c.json");
  REQUIRE(m.has_value());
  CHECK(m->num_layers == 35);
  CHECK(m->full_attention_layers.size() == 7);
  CHECK(m->sparse_mlp_layers.size() == 10);
  CHECK(m->kv_shared_layers == 15);
  CHECK_FALSE(m->vision.enabled());
  // A MatFormer slice: one width per layer, the widest read as intermediate_size.
  auto sliced = io::parse_hf_config(
      R"({"model_type": "gemma3n_text", "num_hidden_layers": 5, "num_kv_shared_layers": 0,
          "intermediate_size": [8192, 8192, 16384, 8192, 16384]})",
      "c.json");
  REQUIRE(sliced.has_value());
  CHECK(sliced->intermediate_size == 16'384);
  CHECK(sliced->layer_intermediate_size(0) == 8'192);
  CHECK(sliced->layer_intermediate_size(2) == 16'384);
  auto wrong = io::parse_hf_config(R"({"model_type": "gemma3n_text", "num_hidden_layers": 5, "intermediate_size": [1, 2]})",
                                   "c.json");
  REQUIRE_FALSE(wrong.has_value());
  CHECK(wrong.error().message == "\"intermediate_size\" lists 2 widths, \"num_hidden_layers\" is 5");
  auto pattern = io::parse_hf_config(
      R"({"model_type": "gemma3n_text", "num_hidden_layers": 5, "num_kv_shared_layers": 0,
          "activation_sparsity_pattern": [0.95]})",
      "c.json");
  REQUIRE_FALSE(pattern.has_value());
  CHECK(pattern.error().message == "\"activation_sparsity_pattern\" must list one value per layer (5)");
  auto no_text = io::parse_hf_config(R"({"model_type": "gemma3n"})", "c.json");
  REQUIRE_FALSE(no_text.has_value());
  CHECK(no_text.error().message == "model_type 'gemma3n' has no \"text_config\" object");
  auto tower = io::parse_hf_config(
      R"({"model_type": "gemma3n", "text_config": {}, "vision_config": {"architecture": "resnet50"}})", "c.json");
  REQUIRE_FALSE(tower.has_value());
  CHECK(tower.error().message ==
        "vision_config \"architecture\" \"resnet50\" is not modelled (Gemma 3n ships \"mobilenetv5_300m_enc\")");
  // The reader's private key for the per-layer widths is not taken from a file (a string there
  // once threw out of the parser): a scalar intermediate_size gives every layer that width.
  auto hostile = io::parse_hf_config(
      R"({"model_type": "gemma3n_text", "num_hidden_layers": 5, "num_kv_shared_layers": 0,
          "intermediate_size": 4096, "_memplan_intermediate_sizes": ["x", 1e300]})",
      "c.json");
  REQUIRE(hostile.has_value());
  CHECK(hostile->layer_intermediate_size(3) == 4'096);
}

TEST_CASE("Gemma 3n estimates text-only fine-tuning end to end; images and tensor parallelism are refused") {
  for (const char* name : {"gemma-3n-e2b", "gemma-3n-e4b"}) {
    INFO(name);
    const ModelSpec& m = catalog_spec(name);
    for (const bool checkpointing : {true, false}) {
      TrainingConfig c = memplan::testing::lora_qv_checkpointed(1024);
      c.gradient_checkpointing = checkpointing;
      auto e = estimate(m, c);
      REQUIRE(e.has_value());
      memplan::testing::require_consistent(*e);
      // The frozen bf16 weights alone: every parameter, the towers and the per-layer embeddings too.
      CHECK(e->peak.count() > 2 * count_parameters(m).total);
    }
  }
  auto e2b = estimate(catalog_spec("gemma-3n-e2b"), memplan::testing::lora_qv_checkpointed(1024));
  REQUIRE(e2b.has_value());
  CHECK(std::find(e2b->assumptions.begin(), e2b->assumptions.end(),
                  "audio tower (Gemma 3n, 12 Conformer layers): loaded and counted, never run: text-only batches; "
                  "audio fine-tuning is not modelled") != e2b->assumptions.end());
  TrainingConfig images = memplan::testing::lora_qv_checkpointed(1024);
  images.vision.images = 1;
  auto refused = estimate(catalog_spec("gemma-3n-e4b"), images);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().suggestion == "estimate text-only fine-tuning (--images 0), the default for Gemma 3n");
  TrainingConfig tp = memplan::testing::lora_checkpointed(1024);
  tp.parallel.num_gpus = 2;
  tp.parallel.tensor_parallel = 2;
  auto split = estimate(catalog_spec("gemma-3n-e2b"), tp);
  REQUIRE_FALSE(split.has_value());
  CHECK(split.error().message ==
        "Gemma 3n with tensor, context or pipeline parallelism is not modelled: its AltUp stack of residual streams "
        "is simulated on one rank");
}

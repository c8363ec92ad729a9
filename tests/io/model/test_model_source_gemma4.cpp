// Gemma 4 (gemma4 / gemma4_text, transformers 5.5+; docs/models.md#gemma-4), read from the real
// config.json files of the four released sizes (configs/models/gemma-4-*.json, provenance in each
// file), counted and estimated end to end. Every total is derived by hand from the modules of
// transformers' modeling_gemma4.py (the sums are in the comments) and agrees with the published
// totals: a module dump's safetensors total for the 31B, the model cards' rounded totals for the
// others (26B total / 3.8B active, E2B 2.3B effective / 5.1B with embeddings, E4B 4.5B / 8B).
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

const LinearModule& module(const std::vector<LinearModule>& mods, const std::string& name) {
  const auto it = std::find_if(mods.begin(), mods.end(), [&](const LinearModule& l) { return l.name == name; });
  REQUIRE(it != mods.end());
  return *it;
}

}  // namespace

TEST_CASE("Gemma 4 31B: full layers of global_head_dim 512 whose V is K (attention_k_eq_v), by hand") {
  const ModelSpec& m = catalog_spec("gemma-4-31b");
  CHECK(m.model_type == "gemma4_text");
  CHECK(m.tie_word_embeddings);
  CHECK(m.final_logit_softcap == 30.0);
  CHECK(m.sliding_window == 1024);
  CHECK(m.full_attention_layers == std::vector<int>{5, 11, 17, 23, 29, 35, 41, 47, 53, 59});
  CHECK(m.vision.kind == VisionKind::kGemma4);
  CHECK_FALSE(m.audio.enabled());
  // A sliding layer: 16 KV heads of 256; a full one: 4 global KV heads of 512, no v_proj.
  CHECK(names(m, 0) == std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"});
  CHECK(names(m, 5) == std::vector<std::string>{"q_proj", "k_proj", "o_proj", "gate_proj", "up_proj", "down_proj"});
  const auto full = layer_linears(m, 5);
  CHECK(module(full, "q_proj").out_features == 32 * 512);
  CHECK(module(full, "k_proj").out_features == 4 * 512);
  CHECK(module(layer_linears(m, 0), "k_proj").out_features == 16 * 256);
  const ParameterCounts c = count_parameters(m);
  // Sliding layer: q 5,376 x 8,192 + k, v 5,376 x 4,096 + o 8,192 x 5,376 + q/k norms 2 x 256 +
  // MLP 3 x 5,376 x 21,504 + 4 norms x 5,376 = 478,959,104. Full layer: q 5,376 x 16,384 + k 5,376 x
  // 2,048 + o + norms 2 x 512 + MLP + 4 norms = 534,009,856. Language model: embed_tokens 262,144 x
  // 5,376 (tied) + 50 + 10 layers + final norm = 30,697,345,280 (the model card's 30.7B).
  CHECK(c.total - c.vision - c.projector == 262'144LL * 5'376 + 50 * 478'959'104LL + 10 * 534'009'856LL + 5'376);
  CHECK(c.total - c.vision - c.projector == 30'697'345'280LL);
  // Tower: 27 blocks of q/k/v/o 1,152^2 + gate/up/down 1,152 x 4,304 + 4 norms + q/k norms 2 x 72 =
  // 20,187,792; patch input_proj 768 x 1,152; position_embedding_table 2 x 10,240 x 1,152.
  CHECK(c.vision == 27 * 20'187'792LL + 768 * 1'152 + 2 * 10'240 * 1'152);
  CHECK(c.projector == 1'152 * 5'376);  // embed_vision.embedding_projection (its norm has no weight)
  // A module dump of google/gemma-4-31B-it lists a safetensors total of 31,273,088,876: these
  // parameters plus 60 layer_scalar and 2 x 1,152 std_bias/std_scale buffers.
  CHECK(c.total + 60 + 2 * 1'152 == 31'273'088'876LL);
}

TEST_CASE("Gemma 4 26B-A4B: 128 experts beside a dense MLP in every layer, 25.2B total / 3.8B active by hand") {
  const ModelSpec& m = catalog_spec("gemma-4-26b-a4b");
  CHECK(m.moe_beside_mlp);
  CHECK(m.moe.num_experts == 128);
  CHECK(m.moe.experts_per_token == 8);
  CHECK(m.moe.expert_intermediate_size == 704);
  const auto mods = layer_linears(m, 0);
  CHECK(names(m, 0) == std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                 "down_proj", "gate", "experts.gate_up_proj", "experts.down_proj"});
  CHECK(module(mods, "gate_proj").out_features == 2'112);
  CHECK(module(mods, "gate").nn_linear);  // Gemma4TextRouter.proj is an nn.Linear
  CHECK_FALSE(module(mods, "experts.gate_up_proj").nn_linear);  // 3-D Parameters: no PEFT, no bitsandbytes
  CHECK(module(mods, "experts.gate_up_proj").weight_params() == 128LL * 1'408 * 2'816);
  const ParameterCounts c = count_parameters(m);
  // Per layer beside attention: MLP 3 x 2,816 x 2,112 + router 2,816 x 128 + scale 2,816 +
  // per_expert_scale 128 + experts 128 x (1,408 + 704) x 2,816 + 7 norms x 2,816 = 779,491,456.
  // Sliding attention: q 2,816 x 4,096, k/v 2,816 x 2,048, o, q/k norms 2 x 256 = 34,603,520; full:
  // q 2,816 x 8,192, k 2,816 x 1,024 (2 KV heads of 512, V = K), o, 2 x 512 = 49,021,952.
  const std::int64_t text = 262'144LL * 2'816 + 25 * 34'603'520LL + 5 * 49'021'952LL + 30 * 779'491'456LL + 2'816;
  CHECK(text == 25'233'141'760LL);  // the model card's 25.2B
  CHECK(c.total - c.vision - c.projector == text);
  CHECK(c.total == text + 569'548'080LL + 1'152 * 2'816);  // the 31B's tower, embed_vision into 2,816
  // Active: 8 of the 128 experts, 120 x 2,112 x 2,816 idle per layer: the model card's 3.8B.
  CHECK(c.active_per_token == text - 30 * 120LL * 2'112 * 2'816);
  CHECK(c.active_per_token == 3'822'530'560LL);
}

TEST_CASE("Gemma 4 E2B: per-layer embeddings, 20 KV-shared layers with double-wide MLPs, audio tower, by hand") {
  const ModelSpec& m = catalog_spec("gemma-4-e2b");
  CHECK(m.per_layer_input_dim == 256);
  CHECK(m.kv_shared_layers == 20);
  CHECK(m.double_wide_mlp);
  CHECK_FALSE(m.attention_k_eq_v);
  CHECK(m.audio.enabled());
  CHECK(m.full_attention_layers == std::vector<int>{4, 9, 14, 19, 24, 29, 34});
  // Layer 14: the last full layer with its own K/V (1 head of 512); layer 15 reads layer 13's.
  CHECK(names(m, 14) == std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                  "down_proj", "per_layer_input_gate", "per_layer_projection"});
  CHECK(names(m, 15) == std::vector<std::string>{"q_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                                                  "per_layer_input_gate", "per_layer_projection"});
  CHECK(module(layer_linears(m, 15), "gate_proj").out_features == 2 * 6'144);
  CHECK(module(layer_linears(m, 14), "k_proj").out_features == 512);
  const ParameterCounts c = count_parameters(m);
  // PLE: embed_tokens_per_layer 262,144 x 35 x 256 + per_layer_model_projection 1,536 x 8,960 + norm 256.
  CHECK(c.per_layer_embedding == 262'144LL * 8'960 + 1'536 * 8'960 + 256);
  // Attention: 12 sliding layers of 7,078,400 (q 1,536 x 2,048, k/v 1,536 x 256, o, norms 2 x 256),
  // 3 full of 14,156,800 (head 512); shared: 16 sliding of 6,291,712 (q, o, q_norm), 4 full of
  // 12,583,424. MLP 15 x 3 x 1,536 x 6,144 + 20 x 3 x 1,536 x 12,288. Per layer 4 norms and the PLE
  // gate/projection 2 x 1,536 x 256 + its norm 1,536.
  const std::int64_t layers = 12 * 7'078'400LL + 3 * 14'156'800LL + 16 * 6'291'712LL + 4 * 12'583'424LL +
                              15 * 28'311'552LL + 20 * 56'623'104LL + 35 * (4 * 1'536LL + 787'968);
  const std::int64_t text = 262'144LL * 1'536 + c.per_layer_embedding + layers + 1'536;
  CHECK(text == 4'628'569'344LL);
  // Tower: 16 blocks of 4 x 768^2 + 3 x 768 x 3,072 + 4 x 768 + 2 x 64 = 9,440,384; patch 768 x 768;
  // positions 2 x 10,240 x 768. Audio (Conformer): subsampling 9 x 128 + 128 + 9 x 128 x 32 + 32 + 1,024 x
  // 1,024; 12 layers of 2 feed-forwards (8 x 1,024^2 + 2 x 1,024 each), attention (5 x 1,024^2 + 128),
  // light conv (3 x 1,024^2 + 5 x 1,024 + 2 x 1,024), 3 norms; output_proj 1,024 x 1,536 + 1,536.
  CHECK(c.vision == 16 * 9'440'384LL + 589'824 + 15'728'640);
  CHECK(c.projector == 768 * 1'536);
  const std::int64_t audio_layer = 2 * (8 * 1'048'576LL + 2'048) + 5 * 1'048'576LL + 128 +
                                   3 * 1'048'576LL + 7 * 1'024 + 3 * 1'024;
  CHECK(audio_layer == 25'180'288);
  CHECK(c.audio == 1'086'752 + 12 * audio_layer + 1'024 * 1'536 + 1'536 + 1'536LL * 1'536);  // + embed_audio
  CHECK(c.total == text + c.vision + c.projector + c.audio);
  CHECK(c.total == 5'104'297'504LL);  // the model card's 5.1B with embeddings
  // Without the token and per-layer embedding tables: the model card's 2.3B effective.
  CHECK(c.total - 262'144LL * 1'536 - 262'144LL * 8'960 == 2'352'834'080LL);
}

TEST_CASE("Gemma 4 E4B: 42 layers, 18 KV-shared, 2 KV heads, 4.5B effective / 8B with embeddings") {
  const ModelSpec& m = catalog_spec("gemma-4-e4b");
  CHECK(m.kv_shared_layers == 18);
  CHECK_FALSE(m.double_wide_mlp);
  CHECK(module(layer_linears(m, 41), "gate_proj").out_features == 10'240);
  CHECK(names(m, 24).size() == 7);  // q_proj, o_proj, the MLP, the PLE pair
  const ParameterCounts c = count_parameters(m);
  // Attention: 20 sliding of 13,107,712 (q 2,560 x 2,048, k/v 2,560 x 512, o, 2 x 256), 4 full of
  // 26,215,424; shared 15 sliding of 10,486,016 and 3 full of 20,972,032. MLP 42 x 3 x 2,560 x 10,240;
  // per layer 4 norms + PLE 2 x 2,560 x 256 + 2,560.
  const std::int64_t layers = 20 * 13'107'712LL + 4 * 26'215'424LL + 15 * 10'486'016LL + 3 * 20'972'032LL +
                              42 * 78'643'200LL + 42 * (4 * 2'560LL + 1'313'280);
  const std::int64_t ple = 262'144LL * 10'752 + 2'560LL * 10'752 + 256;
  CHECK(c.per_layer_embedding == ple);
  const std::int64_t text = 262'144LL * 2'560 + ple + layers + 2'560;
  CHECK(text == 7'463'013'376LL);
  CHECK(c.total == text + 167'364'608LL + 768 * 2'560 + 304'824'608LL + 1'536 * 2'560);
  CHECK(c.total == 7'941'100'832LL);
  CHECK(c.total - 262'144LL * 2'560 - 262'144LL * 10'752 == 4'451'439'904LL);
}

TEST_CASE("Gemma 4 configs: Gemma4TextConfig's defaults, and what is refused") {
  // A bare gemma4_text config: hidden_size_per_layer_input 256 (PLE), global_head_dim 512, every
  // sixth layer full and the last layer forced full (Gemma4TextConfig.__post_init__).
  auto m = io::parse_hf_config(R"({"model_type": "gemma4_text", "num_hidden_layers": 8})", "c.json");
  REQUIRE(m.has_value());
  CHECK(m->hidden_size == 2304);
  CHECK(m->per_layer_input_dim == 256);
  CHECK(m->global_head_dim == 512);
  CHECK(m->sliding_window == 512);
  CHECK(m->full_attention_layers == std::vector<int>{5, 7});
  CHECK(m->layer_head_dim(0) == 256);
  CHECK(m->layer_head_dim(7) == 512);
  auto no_heads = io::parse_hf_config(R"({"model_type": "gemma4_text", "attention_k_eq_v": true})", "c.json");
  REQUIRE_FALSE(no_heads.has_value());
  CHECK(no_heads.error().message == "\"attention_k_eq_v\" is true but \"num_global_key_value_heads\" is not set");
  auto moe = io::parse_hf_config(R"({"model_type": "gemma4_text", "enable_moe_block": true, "num_experts": 4})", "c.json");
  REQUIRE_FALSE(moe.has_value());
  CHECK(moe.error().message == "missing \"top_k_experts\"");
  auto no_text = io::parse_hf_config(R"({"model_type": "gemma4"})", "c.json");
  REQUIRE_FALSE(no_text.has_value());
  CHECK(no_text.error().message == "model_type 'gemma4' has no \"text_config\" object");
}

TEST_CASE("Gemma 4 estimates text-only fine-tuning end to end; batches with images are refused") {
  for (const char* name : {"gemma-4-e2b", "gemma-4-e4b", "gemma-4-26b-a4b", "gemma-4-31b"}) {
    INFO(name);
    const ModelSpec& m = catalog_spec(name);
    auto e = estimate(m, memplan::testing::lora_checkpointed(1024));
    REQUIRE(e.has_value());
    memplan::testing::require_consistent(*e);
    // The frozen bf16 weights alone: every parameter, the towers and the per-layer embeddings too.
    CHECK(e->peak.count() > 2 * count_parameters(m).total);
  }
  auto e2b = estimate(catalog_spec("gemma-4-e2b"), memplan::testing::lora_checkpointed(1024));
  REQUIRE(e2b.has_value());
  CHECK(std::find(e2b->assumptions.begin(), e2b->assumptions.end(),
                  "audio tower (Gemma 4, 12 Conformer layers): loaded and counted, never run: text-only batches; audio "
                  "fine-tuning is not modelled") != e2b->assumptions.end());
  TrainingConfig images = memplan::testing::lora_checkpointed(1024);
  images.vision.images = 1;
  auto refused = estimate(catalog_spec("gemma-4-31b"), images);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().suggestion == "estimate text-only fine-tuning (--images 0), the default for Gemma 4");
}

TEST_CASE("Gemma 4 refuses tensor parallelism: its global K/V heads are not split over ranks") {
  TrainingConfig c = memplan::testing::lora_checkpointed(1024);
  c.parallel.num_gpus = 2;
  c.parallel.tensor_parallel = 2;
  auto e = estimate(catalog_spec("gemma-4-31b"), c);
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().message ==
        "Gemma 4 with tensor or context parallelism is not modelled: its full-attention layers' own key/value heads "
        "(num_global_key_value_heads) are not split over ranks");
}

TEST_CASE("Gemma 4: a hostile config's global head width counts toward the size guard before any exact count") {
  // 2,048 full layers of 65,536 query heads at global_head_dim 65,536 over hidden 2^20: per layer
  // 2 x 2^20 x 2^32 = 2^53 attention weights, about 1.8e19 in all, far past the 1e15 guard (which
  // counted head_dim 1 before: about 5.6e14, and the exact int64 count then overflowed).
  std::string types;
  for (int l = 0; l < 2048; ++l) types += std::string(l ? ", " : "") + "\"full_attention\"";
  const std::string cfg = R"({"model_type": "gemma4_text", "vocab_size": 16, "hidden_size": 1048576,
      "intermediate_size": 16, "num_hidden_layers": 2048, "num_attention_heads": 65536, "num_key_value_heads": 1,
      "head_dim": 1, "global_head_dim": 65536, "layer_types": [)" + types + "]}";
  auto m = io::parse_hf_config(cfg, "c.json");
  REQUIRE_FALSE(m.has_value());
  INFO(m.error().message);
  CHECK(m.error().message.find("more than memplan models") != std::string::npos);
}

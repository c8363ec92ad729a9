// Issue 31's wrappers and attention variants: Qwen3-VL / Qwen3-VL-MoE (DeepStack), Llama 4
// (interleaved MoE with a shared expert, chunked attention, NoPE layers) and DeepSeek-V3.2 (the
// lightning indexer), read from their config.json, counted and estimated end to end
// (docs/models.md#qwen3-vl, #llama-4, #deepseek-v32). Every total is derived by hand from the
// modules of the transformers / reference modelling code (the sums are in the comments) and
// agrees with the published rounded totals.
#include <catch2/catch.hpp>

#include <algorithm>

#include "io/model/model_source.hpp"
#include "memplan/engine.hpp"
#include "support/catalog.hpp"
#include "support/invariants.hpp"

using namespace memplan;
using memplan::testing::catalog_spec;

namespace {

TrainingConfig lora_config() {
  TrainingConfig c = memplan::testing::lora_checkpointed(1024);
  c.lora.target_modules = {"q_proj", "v_proj"};
  return c;
}

}  // namespace

TEST_CASE("Qwen3-VL-8B: the Qwen3-8B text model and a DeepStack vision tower, counted by hand") {
  const ModelSpec& m = catalog_spec("qwen3-vl-8b");
  CHECK(m.model_type == "qwen3");
  CHECK(m.qk_norm);
  CHECK_FALSE(m.mrope);  // interleaved MRoPE folds into one (b, s, head_dim) table pair
  CHECK(m.vision.kind == VisionKind::kQwen3Vl);
  CHECK(m.vision.deepstack_indexes == std::vector<int>{8, 16, 24});
  CHECK(m.vision.num_position_embeddings == 2304);
  const ParameterCounts c = count_parameters(m);
  // Tower: 27 blocks of 15,239,504 (LayerNorms 4 x 1,152; qkv 1,152 x 3,456 + 3,456; proj
  // 1,152^2 + 1,152; linear_fc1 1,152 x 4,304 + 4,304; linear_fc2 4,304 x 1,152 + 1,152) =
  // 411,466,608, patch_embed 1,536 x 1,152 + 1,152, pos_embed 2,304 x 1,152.
  CHECK(c.vision == 411'466'608LL + 1'770'624 + 2'654'208);
  // Merger: LayerNorm(1,152) 2,304 + linear_fc1 4,608^2 + 4,608 + linear_fc2 4,608 x 4,096 + 4,096 =
  // 40,119,040; each DeepStack merger the same with LayerNorm(4,608): 40,125,952.
  CHECK(c.projector == 40'119'040LL + 3 * 40'125'952LL);
  // Qwen3-8B 8,190,735,360 + 576,388,336: the model card's 8.77B.
  CHECK(c.total == 8'767'123'696LL);
  for (const auto& l : vision_projector_linears(m.vision, m.hidden_size)) CHECK(l.bias);
}

TEST_CASE("Qwen3-VL-4B: tied embeddings, a 24-block tower, DeepStack after blocks 5, 11 and 17") {
  const ModelSpec& m = catalog_spec("qwen3-vl-4b");
  CHECK(m.tie_word_embeddings);
  CHECK(m.vision.deepstack_indexes == std::vector<int>{5, 11, 17});
  const ParameterCounts c = count_parameters(m);
  // 24 blocks of 12,596,224 (LayerNorms 4 x 1,024; qkv 1,024 x 3,072 + 3,072; proj 1,024^2 + 1,024;
  // linear_fc1 1,024 x 4,096 + 4,096; linear_fc2 4,096 x 1,024 + 1,024), patch_embed 1,536 x 1,024 +
  // 1,024, pos_embed 2,304 x 1,024.
  CHECK(c.vision == 24 * 12'596'224LL + 1'573'888 + 2'359'296);
  // Merger LayerNorm(1,024) + 4,096^2 + 4,096 + 4,096 x 2,560 + 2,560; DeepStack mergers with LayerNorm(4,096).
  CHECK(c.projector == 27'271'680LL + 3 * 27'277'824LL);
  CHECK(c.total == 4'022'468'096LL + 415'347'712LL);  // Qwen3-4B + the tower: the card's 4.44B
}

TEST_CASE("Qwen3-VL-30B-A3B: fused experts (no nn.Linear), 31.07B total and 3.35B active by hand") {
  const ModelSpec& m = catalog_spec("qwen3-vl-30b-a3b");
  CHECK(m.model_type == "qwen3_moe");
  CHECK(m.moe.num_experts == 128);
  const ParameterCounts c = count_parameters(m);
  // Qwen3-30B-A3B 30,532,122,624 + tower 415,891,440 + merger 30,679,808 + 3 DeepStack mergers of
  // 30,686,720 (their linear_fc2 into 2,048).
  CHECK(c.total == 31'070'754'032LL);
  // Active (the text model): embeddings 2 x 151,936 x 2,048 + final norm + 48 x (attention
  // 18,874,624 + router 262,144 + 8 experts x 4,718,592 + norms 4,096).
  CHECK(c.active_per_token == 622'329'856LL + 2'048 + 48 * 56'889'600LL);
  for (const auto& l : layer_linears(m, 0)) {
    INFO(l.name);
    CHECK(l.nn_linear == (l.role != LinearRole::kRoutedExpert));  // Qwen3VLMoeTextExperts: two Parameters
  }
}

TEST_CASE("Qwen3-VL's vision_config: defaults, and the fields it checks") {
  const std::string text = R"("text_config": {"model_type": "qwen3_vl_text", "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 16, "vocab_size": 100}, )";
  auto ok = io::parse_hf_config(R"({"model_type": "qwen3_vl", )" + text +
                                    R"("vision_config": {"depth": 4, "hidden_size": 32, "intermediate_size": 64,
      "num_heads": 4, "out_hidden_size": 64, "num_position_embeddings": 64, "deepstack_visual_indexes": [1, 2]}})",
                                "c.json");
  REQUIRE(ok.has_value());
  CHECK(ok->vision.patch_size == 16);
  CHECK(ok->vision.deepstack_indexes == std::vector<int>{1, 2});
  auto outside = io::parse_hf_config(R"({"model_type": "qwen3_vl", )" + text +
                                         R"("vision_config": {"depth": 4, "hidden_size": 32, "num_heads": 4,
      "out_hidden_size": 64, "num_position_embeddings": 64, "deepstack_visual_indexes": [4]}})",
                                     "c.json");
  REQUIRE_FALSE(outside.has_value());
  CHECK(outside.error().message == "vision_config \"deepstack_visual_indexes\" names block 4, outside 0..3");
  auto wide = io::parse_hf_config(R"({"model_type": "qwen3_vl", )" + text +
                                      R"("vision_config": {"depth": 4, "hidden_size": 32, "num_heads": 4,
      "out_hidden_size": 128, "num_position_embeddings": 64, "deepstack_visual_indexes": [1]}})",
                                  "c.json");
  REQUIRE_FALSE(wide.has_value());
  CHECK(wide.error().message == "vision_config's output width 128 differs from the language model's hidden_size 64");
}

TEST_CASE("Llama 4 Scout: 16 experts with a shared expert in every layer, NoPE every fourth, by hand") {
  const ModelSpec& m = catalog_spec("llama-4-scout");
  CHECK(m.model_type == "llama4_text");
  CHECK(m.vision.kind == VisionKind::kLlama4);
  CHECK(m.attention_chunk_size == 8192);
  CHECK(m.qk_l2_norm);
  CHECK_FALSE(m.qk_norm);  // Llama4TextL2Norm has no weight
  CHECK(m.nope_layers.size() == 12);
  CHECK(m.nope_layers.front() == 3);
  CHECK(m.nope_layers.back() == 47);
  // The chunked (rotary) layers are carried as the windowed kind, the chunk as the window, the
  // NoPE layers as the full ones (docs/models.md#llama-4-chunked).
  CHECK(m.sliding_window == 8192);
  CHECK(m.full_attention_layers == m.nope_layers);
  CHECK(m.is_sliding_layer(0));
  CHECK_FALSE(m.is_sliding_layer(3));
  for (int l = 0; l < 48; ++l) CHECK(m.moe.is_moe_layer(l));
  CHECK(m.moe.num_shared_experts == 1);
  CHECK(m.moe.shared_intermediate_size == 8192);
  const ParameterCounts c = count_parameters(m);
  // Text: embed_tokens + lm_head 2 x 202,048 x 5,120 = 2,068,971,520; final norm 5,120; 48 layers
  // of attention 62,914,560 (q, o 5,120^2; k, v 5,120 x 1,024), norms 10,240, router 81,920,
  // 16 experts x 125,829,120 (3 x 5,120 x 8,192) and the shared expert 125,829,120.
  const std::int64_t text = 2'068'971'520LL + 5'120 + 48 * (62'914'560LL + 10'240 + 81'920 + 17 * 125'829'120LL);
  CHECK(text == 107'769'861'120LL);
  // Vision model: patch Linear 588 x 1,408, class_embedding, 577 positions, layernorm_pre/post,
  // 34 layers of 23,807,872 (q/k/v/o with biases, fc1/fc2 with biases, 2 LayerNorms), adapter fc1
  // 5,632 x 4,096 and fc2 4,096 x 4,096 = 850,960,896; projector linear_1 4,096 x 5,120.
  CHECK(c.vision == 850'960'896LL);
  CHECK(c.projector == 20'971'520LL);
  CHECK(c.total == 108'641'793'536LL);  // the model card's 109B
  // Active: one routed expert of 16: the model card's 17B.
  CHECK(c.active_per_token == text - 48 * 15 * 125'829'120LL);
  CHECK(c.active_per_token == 17'172'894'720LL);
}

TEST_CASE("Llama 4 Maverick: 128 experts in every other layer, dense layers of intermediate_size_mlp") {
  // meta-llama/Llama-4-Maverick-17B-128E's text_config differs from Scout's in num_local_experts
  // (128), interleave_moe_layer_step (2: moe_layers 1, 3, ..., 47) and use_qk_norm (false).
  std::string rope;
  for (int l = 0; l < 48; ++l) rope += (l ? ", " : "") + std::string((l + 1) % 4 == 0 ? "0" : "1");
  const std::string cfg = R"({"model_type": "llama4", "tie_word_embeddings": false,
      "text_config": {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
        "head_dim": 128, "vocab_size": 202048, "num_local_experts": 128, "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 2, "use_qk_norm": false, "attention_chunk_size": 8192,
        "no_rope_layers": [)" + rope + R"(]},
      "vision_config": {"hidden_size": 1408, "image_size": 336, "intermediate_size": 5632, "num_attention_heads": 16,
        "num_hidden_layers": 34, "patch_size": 14, "projector_input_dim": 4096, "projector_output_dim": 4096,
        "vision_output_dim": 4096}})";
  auto m = io::parse_hf_config(cfg, "c.json");
  REQUIRE(m.has_value());
  CHECK_FALSE(m->moe.is_moe_layer(0));
  CHECK(m->moe.is_moe_layer(1));
  CHECK(m->moe.is_moe_layer(47));
  CHECK_FALSE(m->qk_l2_norm);
  const ParameterCounts c = count_parameters(*m);
  // 24 dense layers of 3 x 5,120 x 16,384 = 251,658,240; 24 MoE layers of router 655,360 + 129 x
  // 125,829,120; attention and norms as Scout's; embeddings; + Scout's vision model and projector.
  const std::int64_t text = 2'068'971'520LL + 5'120 + 48 * (62'914'560LL + 10'240) + 24 * 251'658'240LL +
                            24 * (655'360LL + 129 * 125'829'120LL);
  CHECK(c.total == text + 850'960'896LL + 20'971'520LL);
  CHECK(c.total == 401'583'781'376LL);  // the model card's 400B (401.6B)
  CHECK(c.active_per_token == text - 24 * 127 * 125'829'120LL);
  CHECK(c.active_per_token == 17'184'691'200LL);  // 17B active
}

TEST_CASE("Llama 4's text model alone (Llama4ForCausalLM's llama4_text config) counts without the tower") {
  // Scout's text_config saved on its own, as text-only fine-tunes of Scout are (no moe_layers or
  // no_rope_layers: Llama4TextConfig's defaults give every layer MoE and every fourth NoPE).
  auto m = io::parse_hf_config(R"({"model_type": "llama4_text", "architectures": ["Llama4ForCausalLM"],
      "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_hidden_layers": 48,
      "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 202048,
      "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1})",
                               "c.json");
  REQUIRE(m.has_value());
  CHECK_FALSE(m->vision.enabled());
  CHECK(m->nope_layers.size() == 12);
  CHECK(count_parameters(*m).total == 107'769'861'120LL);  // Scout's text model, by hand above
  auto no_text = io::parse_hf_config(R"({"model_type": "llama4", "vision_config": {}})", "c.json");
  REQUIRE_FALSE(no_text.has_value());
  CHECK(no_text.error().message == "model_type 'llama4' has no \"text_config\" object");
}

TEST_CASE("Llama 4's MoE runs every token through every expert, whatever num_experts_per_tok") {
  // Llama4TextMoe: hidden_states.repeat(num_experts, 1) and two bmm over all experts; top-k only
  // decides which scores are not zero. A top-1 and a top-4 model allocate the same but for the
  // router's top-k indices, which topk and scatter_ keep for backward: int64 (tokens, k), so 3 x
  // 1,024 x 8 bytes more in each of the 4 MoE layers (no checkpointing: all kept at the peak). Three
  // more routed rows per token would instead be 3 x 1,024 x (64 + 3 x 32) values per layer.
  const auto step = [](int k) {
    auto m = io::parse_hf_config(R"({"model_type": "llama4_text", "hidden_size": 64, "intermediate_size": 32,
        "intermediate_size_mlp": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "vocab_size": 100, "num_local_experts": 4, "num_experts_per_tok": )" +
                                     std::to_string(k) + "}",
                                 "c.json");
    REQUIRE(m.has_value());
    TrainingConfig c = lora_config();
    c.gradient_checkpointing = false;
    auto e = estimate(*m, c);
    REQUIRE(e.has_value());
    return e->peak.count();
  };
  CHECK(step(4) - step(1) == 4 * 3 * 1024 * 8);
}

TEST_CASE("Llama 4 under SDPA: the chunked layers get a mask, repeated K/V, from s = attention_chunk_size") {
  // masking_utils' _ignore_causal_mask_sdpa skips the chunked mask while kv_length < chunk_size;
  // from there the three rotary layers (layer 3 is NoPE) are given a (b, 1, s, s) mask, so
  // transformers repeats K and V to every head for them and the memory-efficient kernel keeps the
  // mask as an additive bf16 (b, 1, s, s). At b 1, s 64, bf16, the same model with a chunk of 64
  // (masked) and of 128 (not) differ at the backward peak by, per rotary layer, the kept mask
  // 64 x 64 x 2 = 8,192 bytes and K and V at 4 heads instead of 2: 2 x 64 x 2 x 16 x 2 = 8,192
  // bytes; 3 x 16,384 = 49,152 (the bool mask itself is gone with the forward's locals).
  const auto peak = [](int chunk) {
    auto m = io::parse_hf_config(R"({"model_type": "llama4_text", "hidden_size": 64, "intermediate_size": 32,
        "intermediate_size_mlp": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "vocab_size": 100, "num_local_experts": 4, "attention_chunk_size": )" +
                                     std::to_string(chunk) + "}",
                                 "c.json");
    REQUIRE(m.has_value());
    TrainingConfig c;
    c.micro_batch = 1;
    c.seq_len = 64;
    c.torch_dtype = DType::kBFloat16;
    c.device = Device::kCuda;
    c.attn = AttnImpl::kSdpa;
    auto e = estimate(*m, c);
    REQUIRE(e.has_value());
    return e->peak.count();
  };
  CHECK(peak(64) - peak(128) == 3 * (8192 + 8192));
  CHECK(peak(128) == peak(65));  // below the chunk nothing is materialized
  const ModelSpec& scout = catalog_spec("llama-4-scout");
  TrainingConfig c = lora_config();
  c.attn = AttnImpl::kSdpa;
  auto e = estimate(scout, c);
  REQUIRE(e.has_value());
  CHECK(memplan::testing::mentions(
      e->assumptions, "chunked attention (Llama 4): 36 of 48 layers attend within 8192-token chunks; from a sequence "
                      "of 8192 tokens transformers gives SDPA their (b, 1, s, s) mask"));
}

TEST_CASE("Llama 4's reduced models repeat whole periods of NoPE layers: the peak of simulating every layer") {
  // 14 layers, NoPE at 3, 7 and 11, MoE on the odd layers: a NoPE layer keeps less than a rotary
  // one (no rotary products, no L2 norm), so one middle layer cannot stand for all of them; the
  // period of 4 after the first layer can. Eager (both masks at every length) and SDPA below and
  // from the chunk of 64.
  auto m = io::parse_hf_config(R"({"model_type": "llama4_text", "hidden_size": 64, "intermediate_size": 32,
      "intermediate_size_mlp": 128, "num_hidden_layers": 14, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 16, "vocab_size": 100, "num_local_experts": 4, "interleave_moe_layer_step": 2,
      "attention_chunk_size": 64})",
                               "c.json");
  REQUIRE(m.has_value());
  for (const AttnImpl impl : {AttnImpl::kEager, AttnImpl::kSdpa}) {
    for (const bool checkpointing : {false, true}) {
      TrainingConfig c;
      c.torch_dtype = DType::kBFloat16;
      c.device = Device::kCuda;
      c.attn = impl;
      c.gradient_checkpointing = checkpointing;
      memplan::testing::same_as_every_layer(*m, c, {{1, 32}, {2, 64}, {1, 96}});
    }
  }
}

TEST_CASE("Llama 4 estimates text-only fine-tuning by default, and batches with images when asked") {
  const ModelSpec& m = catalog_spec("llama-4-scout");
  CHECK(m.vision.spatial_merge_size == 2);  // 1 / pixel_shuffle_ratio (0.5)
  auto e = estimate(m, lora_config());
  REQUIRE(e.has_value());
  memplan::testing::require_consistent(*e);
  CHECK(image_tokens_per_sequence(m, lora_config()) == 0);
  TrainingConfig images = lora_config();
  images.seq_len = 2048;
  images.vision.images = 1;
  // The default 768 x 768 image, by hand from Llama4ImageProcessorFast.get_best_fit over the grids
  // of at most 16 tiles of 336 px: the smallest upscale >= 1 is 1008 / 768 = 1.3125, first reached
  // by 3 x 3 tiles (2 x 2 would scale by 0.875); 9 tiles and a global one, 24 x 24 patches each,
  // 144 features after the 2 x 2 pixel shuffle: 1,440 <|patch|> tokens, <|image_start|>,
  // <|image|>, <|image_end|> and 3 x 2 <|tile_x_separator|> + 3 <|tile_y_separator|>: 1,452.
  CHECK(image_tokens_per_sequence(m, images) == 1452);
  auto with_images = estimate(m, images);
  REQUIRE(with_images.has_value());
  memplan::testing::require_consistent(*with_images);
  CHECK(with_images->peak.count() > e->peak.count());
  // A trained tower under reentrant checkpointing: transformers passes hidden_state to each vision
  // layer as a keyword, so torch.utils.checkpoint runs the layers without a graph (checked on the
  // CPU mirror, tools/measure/hf_llama4.py): said, and the layers' weights get no gradient.
  TrainingConfig tower = images;
  tower.vision.train_vision_tower = true;
  tower.checkpoint_reentrant = true;
  auto reentrant = estimate(m, tower);
  REQUIRE(reentrant.has_value());
  const auto warned = [](const Estimate& est) {
    return std::any_of(est.warnings.begin(), est.warnings.end(), [](const std::string& w) {
      return w.rfind("Llama 4's vision layers get no gradient under reentrant gradient checkpointing", 0) == 0;
    });
  };
  CHECK(warned(*reentrant));
  tower.checkpoint_reentrant = false;
  auto nonreentrant = estimate(m, tower);
  REQUIRE(nonreentrant.has_value());
  CHECK_FALSE(warned(*nonreentrant));
  // Scout's vision_config with a pixel shuffle the adapter cannot read (fc1 takes intermediate_size
  // 5,632 = 1,408 x 2^2): refused with images, estimated without.
  ModelSpec odd = m;
  odd.vision.intermediate_size = 4096;
  auto refused = estimate(odd, images);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message ==
        "Llama 4's vision adapter cannot run an image with this vision_config: fc1 takes intermediate_size (4096) "
        "for the pixel-shuffled width (5632), and fc2 projector_output_dim (4096) for fc1's projector_input_dim (4096)");
  CHECK(estimate(odd, lora_config()).has_value());
  auto ratio = io::parse_hf_config(R"({"model_type": "llama4", "text_config": {"model_type": "llama4_text",
      "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
      "vocab_size": 100}, "vision_config": {"hidden_size": 64, "intermediate_size": 576, "num_attention_heads": 4,
      "num_hidden_layers": 1, "image_size": 84, "patch_size": 14, "pixel_shuffle_ratio": 0.4,
      "projector_input_dim": 64, "projector_output_dim": 64, "vision_output_dim": 64}})",
                                   "c.json");
  REQUIRE_FALSE(ratio.has_value());
  CHECK(ratio.error().message == "vision_config \"pixel_shuffle_ratio\" 0.4 is not modelled (1 / ratio must be "
                                 "a whole number: 0.5 in every Llama 4 checkpoint)");
}

TEST_CASE("DeepSeek-V3.2: DeepSeek-V3 plus a lightning indexer per layer, counted from the reference code") {
  const ModelSpec& m = catalog_spec("deepseek-v3.2");
  CHECK(m.model_type == "deepseek_v32");
  CHECK(m.index_heads == 64);
  CHECK(m.index_head_dim == 128);
  CHECK(m.index_topk == 2048);
  // Indexer (DeepSeek-V3.2-Exp inference/model.py): wq_b 1,536 x 8,192, wk 7,168 x 128, k_norm
  // LayerNorm(128) with a bias, weights_proj 7,168 x 64 = 13,959,424 per layer, 61 layers, on top
  // of DeepSeek-V3's 671,026,419,200.
  const ParameterCounts c = count_parameters(m);
  CHECK(c.total == 671'026'419'200LL + 61 * 13'959'424LL);
  CHECK(c.total - count_parameters(catalog_spec("deepseek-v3")).total == 851'524'864LL);
  std::vector<std::string> names;
  for (const auto& l : layer_linears(m, 0)) names.push_back(l.name);
  CHECK(std::find(names.begin(), names.end(), "indexer.wq_b") != names.end());
  auto no_q_lora = io::parse_hf_config(R"({"model_type": "deepseek_v32", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 128, "kv_lora_rank": 16,
      "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 8})",
                                       "c.json");
  REQUIRE_FALSE(no_q_lora.has_value());
  CHECK(no_q_lora.error().message ==
        "deepseek_v32's indexer reads the query latent: \"q_lora_rank\" must be positive");
}

TEST_CASE("Qwen3-VL and DeepSeek-V3.2 estimate end to end under LoRA with checkpointing") {
  for (const char* name : {"qwen3-vl-8b", "qwen3-vl-30b-a3b", "deepseek-v3.2"}) {
    INFO(name);
    TrainingConfig c = lora_config();
    if (std::string(name) == "deepseek-v3.2") c.lora.target_modules = {"q_b_proj", "o_proj"};  // MLA: no q_proj
    auto e = estimate(catalog_spec(name), c);
    REQUIRE(e.has_value());
    memplan::testing::require_consistent(*e);
  }
  // An image adds the tower's activations and the DeepStack features to the text-only step.
  TrainingConfig text_only = lora_config();
  text_only.vision.images = 0;
  auto t = estimate(catalog_spec("qwen3-vl-8b"), text_only);
  auto i = estimate(catalog_spec("qwen3-vl-8b"), lora_config());
  REQUIRE(t.has_value());
  REQUIRE(i.has_value());
  CHECK(i->peak.count() > t->peak.count());
}

// Qwen3.5 / Qwen3.6 (docs/models.md#qwen3-5): Qwen3-Next's hybrid layers with split Gated DeltaNet
// projections under Qwen3-VL's tower without DeepStack mergers. Sums by hand from
// modular_qwen3_5.py / modular_qwen3_5_moe.py (transformers 5.x).
TEST_CASE("Qwen3.6-35B-A3B: split Gated DeltaNet projections, 256 experts, a tower without DeepStack") {
  const ModelSpec& m = catalog_spec("qwen3.6-35b-a3b");
  CHECK(m.model_type == "qwen3_5_moe_text");
  CHECK(m.hybrid.gdn_split_projections);
  CHECK(m.mrope_interleaved);
  CHECK(m.attn_output_gate);
  CHECK(m.vision.kind == VisionKind::kQwen3Vl);
  CHECK(m.vision.deepstack_indexes.empty());  // Qwen3_5VisionConfig deletes deepstack_visual_indexes
  CHECK(m.qk_rope_head_dim == 64);            // 256 x partial_rotary_factor 0.25
  std::vector<std::string> gdn;
  const auto linears = layer_linears(m, 0);
  for (const auto& l : linears) gdn.push_back(l.name);
  CHECK(std::find(gdn.begin(), gdn.end(), "in_proj_qkv") != gdn.end());
  CHECK(std::find(gdn.begin(), gdn.end(), "in_proj_z") != gdn.end());
  CHECK(std::find(gdn.begin(), gdn.end(), "in_proj_qkvz") == gdn.end());
  const ParameterCounts c = count_parameters(m);
  // Tower: patch_embed 1,536 x 1,152 + 1,152, pos_embed 2,304 x 1,152, 27 blocks of 15,239,504.
  CHECK(c.vision == 1'770'624LL + 2'654'208 + 27 * 15'239'504LL);
  // Merger only: LayerNorm(1,152) + 4,608^2 + 4,608 + 4,608 x 2,048 + 2,048.
  CHECK(c.projector == 30'679'808LL);
  // Text: embeddings 2 x 248,320 x 2,048; 30 DeltaNet mixers of 33,718,464 (in_proj_qkv 2,048 x
  // 8,192, in_proj_z 2,048 x 4,096, in_proj_b/a 2,048 x 32, conv1d 8,192 x 4, dt_bias + A_log 64,
  // norm 128, out_proj 4,096 x 2,048); 10 gated attentions of 27,263,488; 40 MoE blocks of
  // 808,978,432 (router 2,048 x 256, 257 experts of 3 x 2,048 x 512, shared_expert_gate 2,048) and
  // 2 norms each; final norm.
  const std::int64_t text = 1'017'118'720LL + 30 * 33'718'464LL + 10 * 27'263'488LL + 40 * (808'978'432LL + 4'096) + 2'048;
  CHECK(text == 34'660'610'688LL);
  CHECK(c.total == text + c.vision + c.projector);
  CHECK(c.total == 35'107'181'936LL);  // the card's 35B
  // Active: 8 of 256 experts per token, the shared expert always.
  CHECK(c.active_per_token == text - 40 * 248 * 3'145'728LL);
}

TEST_CASE("Qwen3.5-0.8B: a dense SwiGLU MLP in every layer, tied embeddings, a 12-block tower") {
  const ModelSpec& m = catalog_spec("qwen3.5-0.8b");
  CHECK(m.model_type == "qwen3_5_text");
  CHECK_FALSE(m.moe.enabled());
  CHECK(m.tie_word_embeddings);
  CHECK(m.qk_rope_head_dim == 64);  // partial_rotary_factor only inside rope_parameters
  const ParameterCounts c = count_parameters(m);
  // 248,320 x 1,024 tied; 18 DeltaNet mixers of 10,543,264; 6 attentions of 7,340,544; 24 MLPs of
  // 3 x 1,024 x 3,584 + 2 norms; final norm: 752,393,024. Tower 88,004,352, merger 12,588,544.
  CHECK(c.vision == 88'004'352LL);
  CHECK(c.projector == 12'588'544LL);
  CHECK(c.total == 752'393'024LL + 88'004'352LL + 12'588'544LL);
}

TEST_CASE("Qwen3.5 text-only checkpoints (qwen3_5_text) read as the same layout; the layer_types error names the type") {
  const std::string cfg = R"({"model_type": "qwen3_5_text", "vocab_size": 1000, "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
      "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
      "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4})";
  auto m = io::parse_hf_config(cfg, "c.json");
  REQUIRE(m.has_value());
  CHECK(m->hybrid.gdn_split_projections);
  CHECK(m->hybrid.mixers == std::vector<MixerKind>{MixerKind::kGatedDeltaNet, MixerKind::kGatedDeltaNet,
                                                   MixerKind::kGatedDeltaNet, MixerKind::kAttention});
  // Per DeltaNet layer: in_proj_qkv 64 x (2 x 32 + 64), in_proj_z 64 x 64, in_proj_b/a 64 x 4 each,
  // conv1d 128 x 4, dt_bias + A_log 8, norm 16, out_proj 64 x 64 = 21,016.
  CHECK(mixer_params(*m, 0) == 128 * 4 + 8 + 16);
  std::int64_t proj = 0;
  for (const auto& l : layer_linears(*m, 0))
    if (l.role == LinearRole::kAttention) proj += l.in_features * l.out_features;
  CHECK(proj == 64 * 128 + 64 * 64 + 2 * 64 * 4 + 64 * 64);
  auto bad = io::parse_hf_config(
      R"({"model_type": "qwen3_5_text", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
          "num_hidden_layers": 1, "num_attention_heads": 1, "layer_types": ["mamba"]})",
      "c.json");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message == "\"layer_types\"[0] is \"mamba\"; qwen3_5_text has \"linear_attention\" and \"full_attention\" layers");
}

TEST_CASE("Qwen3.5 estimates end to end, text-only and with an image through the tower") {
  const ModelSpec& m = catalog_spec("qwen3.5-0.8b");
  TrainingConfig c = memplan::testing::lora_checkpointed(1024);
  c.lora.target_modules = {"in_proj_qkv", "in_proj_z", "out_proj", "q_proj", "k_proj", "v_proj", "o_proj"};
  auto text = estimate(m, c);
  REQUIRE(text.has_value());
  memplan::testing::require_consistent(*text);
  c.vision.images = 1;
  auto image = estimate(m, c);
  REQUIRE(image.has_value());
  memplan::testing::require_consistent(*image);
  // 768 x 768 after resizing: 48 x 48 patches of 16, merged 2 x 2 into 576 tokens of the sequence.
  CHECK(memplan::testing::mentions(image->assumptions, "2304 patches through the tower and 576 image tokens"));
}

TEST_CASE("DeepSeek-V3.2: an implausible index_topk is refused at the file, not simulated") {
  const std::string text = R"({"model_type": "deepseek_v32", "vocab_size": 100, "hidden_size": 64,
      "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
      "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
      "index_n_heads": 2, "index_head_dim": 16, "index_topk": 1099511627776})";
  auto m = io::parse_hf_config(text, "c.json");
  REQUIRE_FALSE(m.has_value());
  CHECK(m.error().message == "\"index_n_heads\" 2, \"index_head_dim\" 16 or \"index_topk\" 1099511627776 is implausibly "
                             "large (at most 4096, 65536 and 1048576)");
}

TEST_CASE("Mistral Small 3.1: the Mistral-Small-24B text model, a Pixtral tower and a patch-merging projector") {
  const ModelSpec& m = catalog_spec("mistral-small-3.1-24b");
  CHECK(m.model_type == "mistral");
  CHECK(m.vision.kind == VisionKind::kPixtral);
  CHECK(m.vision.model_type == "mistral3");
  CHECK(m.vision.depth == 24);
  CHECK(m.vision.spatial_merge_size == 2);
  const ParameterCounts c = count_parameters(m);
  // Pixtral: patch_conv 1,024 x 3 x 14 x 14 (no bias) + ln_pre 1,024, and 24 blocks of q/k/v/o
  // 4 x 1,024^2, gate/up/down 3 x 1,024 x 4,096 and two RMSNorms (16,779,264 each).
  CHECK(c.vision == 602'112LL + 1'024 + 24 * 16'779'264LL);
  CHECK(c.vision == 403'305'472LL);
  // Projector: RMSNorm 1,024, patch_merger 4,096 x 1,024, linear_1 1,024 x 5,120, linear_2
  // 5,120 x 5,120, no biases (multimodal_projector_bias false).
  CHECK(c.projector == 1'024 + 4'194'304LL + 5'242'880LL + 26'214'400LL);
  // The text model is the catalog's mistral-small-24b (23,572,403,200, its Hub safetensors
  // total); with the tower and projector, keras-hub's Mistral Small 3.1 figure.
  CHECK(c.total - c.vision - c.projector == 23'572'403'200LL);
  CHECK(c.total == 24'011'361'280LL);
}

TEST_CASE("Mistral 3 with images: the Pixtral tower runs; [IMG_BREAK] and [IMG_END] take sequence tokens") {
  auto m = io::parse_hf_config(R"({"model_type": "mistral3", "vision_feature_layer": -1,
      "vision_config": {"model_type": "pixtral", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "patch_size": 16, "image_size": 256},
      "text_config": {"model_type": "mistral", "hidden_size": 128, "intermediate_size": 256,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
      "vocab_size": 1000}})",
                               "c.json");
  REQUIRE(m.has_value());
  TrainingConfig t = lora_config();
  t.vision.images = 1;
  t.vision.image_height = t.vision.image_width = 256;
  auto text_only = estimate(*m, lora_config());
  auto with_image = estimate(*m, t);
  REQUIRE(text_only.has_value());
  REQUIRE(with_image.has_value());
  memplan::testing::require_consistent(*with_image);
  CHECK(with_image->total.count() > text_only->total.count());
  // 256 x 256 at patch 16: 16 x 16 patches, 8 x 8 = 64 [IMG] tokens, one [IMG_BREAK] per row
  // but the last, which is [IMG_END]: 72 tokens in the sequence.
  t.seq_len = 71;
  auto short_seq = estimate(*m, t);
  REQUIRE_FALSE(short_seq.has_value());
  CHECK(short_seq.error().message == "a sequence of 71 tokens cannot hold 1 image(s) of 256x256: 72 image tokens");
  t.seq_len = 72;
  CHECK(estimate(*m, t).has_value());
}

TEST_CASE("Mistral 3: Ministral 3 text reads as Mistral's layout; projector biases and feature layers; other text types refused") {
  const char* vision = R"("vision_config": {"model_type": "pixtral", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "patch_size": 16, "image_size": 256})";
  const std::string text = R"("text_config": {"model_type": "ministral3", "hidden_size": 128, "intermediate_size": 256,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 1000,
      "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "llama_4_scaling_beta": 0.1,
      "original_max_position_embeddings": 16384}})";
  auto m = io::parse_hf_config(std::string(R"({"model_type": "mistral3", "multimodal_projector_bias": true,
      "vision_feature_layer": [-1, -2], "tie_word_embeddings": true, )") + vision + ", " + text + "}",
                               "c.json");
  REQUIRE(m.has_value());
  CHECK(m->model_type == "mistral");
  const ParameterCounts c = count_parameters(*m);
  // Tower: patch_conv 64 x 3 x 16 x 16 + ln_pre 64 + 2 x (4 x 64^2 + 3 x 64 x 128 + 2 x 64).
  CHECK(c.vision == 49'152 + 64 + 2 * (16'384 + 24'576 + 128));
  // Projector: norm 64; merging 256 x 64; linear_1 (64 x 2 feature layers) x 128 + 128;
  // linear_2 128 x 128 + 128.
  CHECK(c.projector == 64 + 16'384 + (16'384 + 128) + (16'384 + 128));
  auto images = estimate(*m, [] {
    TrainingConfig t = lora_config();
    t.vision.images = 1;
    return t;
  }());
  REQUIRE_FALSE(images.has_value());
  CHECK(images.error().message ==
        "Mistral 3 with a list of vision_feature_layer entries (the chosen hidden states concatenated before the "
        "projector) is not modelled with images");
  auto text_only = estimate(*m, lora_config());
  REQUIRE(text_only.has_value());
  memplan::testing::require_consistent(*text_only);
  // Ministral3ForCausalLM saved alone (Devstral 2's config.json shape) is the same text model.
  auto alone = io::parse_hf_config(R"({"model_type": "ministral3", "architectures": ["Ministral3ForCausalLM"],
      "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 1000, "tie_word_embeddings": true})",
                                   "c.json");
  REQUIRE(alone.has_value());
  CHECK(alone->model_type == "mistral");
  CHECK(count_parameters(*alone).total == c.total - c.vision - c.projector);
  auto far = io::parse_hf_config(std::string(R"({"model_type": "mistral3", "vision_feature_layer": -4, )") + vision +
                                     ", " + text + "}",
                                 "c.json");
  REQUIRE_FALSE(far.has_value());
  CHECK(far.error().message == "\"vision_feature_layer\" -4 is outside the tower's 3 hidden states");
  auto other = io::parse_hf_config(R"({"model_type": "mistral3", "text_config": {"model_type": "mistral4"}})", "c.json");
  REQUIRE_FALSE(other.has_value());
  CHECK(other.error().message ==
        "model_type 'mistral3' with a text_config of model_type 'mistral4' is not modelled");
}

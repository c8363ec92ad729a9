// gpt-oss, MiniMax-M2 and StarCoder2 from their real config.json (issue 31,
// docs/models.md#gpt_oss, #minimax_m2, #starcoder2): the modules their transformers classes
// build, parameter totals derived by hand and checked against the published ones, and estimates
// end to end.
#include <catch2/catch.hpp>

#include <string>

#include "io/model/model_source.hpp"
#include "memplan/engine.hpp"
#include "support/catalog.hpp"
#include "support/invariants.hpp"

using namespace memplan;
using memplan::testing::catalog_spec;
using memplan::testing::lora_checkpointed;
using memplan::testing::lora_qv_checkpointed;

namespace {

const LinearModule* find_linear(const std::vector<LinearModule>& ls, const std::string& name) {
  for (const auto& l : ls)
    if (l.name == name) return &l;
  return nullptr;
}

}  // namespace

TEST_CASE("gpt-oss-20b: the published total by hand, sinks, biases and 3-D expert parameters") {
  const ModelSpec& m = catalog_spec("openai/gpt-oss-20b");
  CHECK(m.model_type == "gpt_oss");
  CHECK(m.attention_sinks);
  CHECK(m.qkv_bias);
  CHECK(m.o_bias);
  CHECK(m.sliding_window == 128);
  CHECK_FALSE(m.tie_word_embeddings);
  CHECK(m.is_sliding_layer(0));
  CHECK_FALSE(m.is_sliding_layer(1));
  CHECK(m.moe.num_experts == 32);
  CHECK(m.moe.experts_per_token == 4);
  CHECK(m.moe.expert_intermediate_size == 2880);
  // By hand (python, from GptOssForCausalLM's modules): embed_tokens and lm_head 2 x 201,088 x
  // 2,880 = 1,158,266,880; per layer q 2,880 x 4,096 + 4,096, k and v 2,880 x 512 + 512, o
  // 4,096 x 2,880 + 2,880 and 64 sinks = 26,550,144; router 32 x 2,880 + 32; experts
  // 32 x (2,880 x 5,760 + 5,760) + 32 x (2,880 x 2,880 + 2,880) = 796,538,880; 2 norms 5,760;
  // 24 layers and the final norm: 20,914,757,184, OpenAI's model card's 20.91B.
  const ParameterCounts c = count_parameters(m);
  CHECK(c.total == 20'914'757'184LL);
  // Active: 4 of the 32 experts. The model card's 3.61B leaves the embedding table out:
  // 4,187,440,704 - 579,133,440 = 3,608,307,264.
  CHECK(c.active_per_token == 4'187'440'704LL);
  const auto ls = layer_linears(m, 0);
  const LinearModule* router = find_linear(ls, "gate");
  REQUIRE(router != nullptr);
  CHECK(router->bias);
  CHECK_FALSE(router->nn_linear);  // GptOssTopKRouter.weight is a bare Parameter
  const LinearModule* gu = find_linear(ls, "gate_up_proj");
  REQUIRE(gu != nullptr);
  CHECK(gu->out_features == 2 * 2880);
  CHECK(gu->count == 32);
  CHECK(gu->bias);
  CHECK_FALSE(gu->nn_linear);  // GptOssExperts.gate_up_proj is a 3-D Parameter
}

TEST_CASE("gpt-oss-120b: the published total by hand") {
  const ModelSpec& m = catalog_spec("gpt-oss-120b");
  // By hand as for 20b: 36 layers of 26,550,144 (attention) + 368,768 (router) + 3,186,155,520
  // (128 experts) + 5,760 (norms), embeddings 1,158,266,880, final norm 2,880: 116,829,156,672,
  // the model card's 116.83B; active 5,711,982,912, without the embedding table 5,132,849,472
  // (the card's 5.13B).
  const ParameterCounts c = count_parameters(m);
  CHECK(c.total == 116'829'156'672LL);
  CHECK(c.active_per_token == 5'711'982'912LL);
}

TEST_CASE("gpt_oss config.json: experts_per_token alone, attention_bias false, a bad layer type") {
  const std::string keys = R"("hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100,
      "num_local_experts": 4, "sliding_window": 8)";
  auto m = io::parse_hf_config(R"({"model_type": "gpt_oss", "experts_per_token": 2, "attention_bias": false, )" +
                                   keys + "}",
                               "c.json");
  REQUIRE(m.has_value());
  CHECK(m->moe.experts_per_token == 2);
  CHECK_FALSE(m->qkv_bias);
  // No layer_types: every layer slides (GptOssConfig's default alternates; the released configs
  // always list them).
  // By hand: embeddings 2 x 100 x 64 = 12,800; per layer q 64 x 64, k and v 64 x 32, o 64 x 64
  // (no biases) and 4 sinks = 12,292; router 4 x 64 + 4 = 260; experts 4 x (64 x 64 + 64) +
  // 4 x (32 x 64 + 64) = 25,088; norms 128; final norm 64.
  CHECK(count_parameters(*m).total == 12'800 + 2 * (12'292 + 260 + 25'088 + 128) + 64);
  auto bad = io::parse_hf_config(R"({"model_type": "gpt_oss", "num_experts_per_tok": 2,
      "layer_types": ["sliding_attention", "linear_attention"], )" + keys + "}",
                                 "c.json");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message == "\"layer_types\"[1] is \"linear_attention\"; memplan models \"sliding_attention\" and "
                               "\"full_attention\" layers");
}

TEST_CASE("gpt-oss-20b from its config.json path, with the MXFP4 quantization_config read as dequantized") {
  auto r = io::resolve_model_source(std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/models/gpt-oss-20b/config.json",
                                    io::ModelSearchEnv{});
  REQUIRE(r.has_value());
  CHECK(count_parameters(r->spec).total == 20'914'757'184LL);  // the model card's 20.91B, by hand above
  CHECK_FALSE(r->prequantized_4bit);  // from_pretrained dequantizes the MXFP4 experts for training
  CHECK(r->via == std::string(MEMPLAN_SOURCE_DIR) +
                      "/tests/data/models/gpt-oss-20b/config.json: its experts are stored in MXFP4; from_pretrained "
                      "dequantizes them to bf16 for training (Mxfp4Config(dequantize=True)), which is what is counted");
}

TEST_CASE("MiniMax-M2: the total by hand, q/k norms over all heads, sigmoid router with its correction bias") {
  const ModelSpec& m = catalog_spec("MiniMaxAI/MiniMax-M2");
  CHECK(m.model_type == "minimax_m2");
  CHECK(m.qk_norm);
  CHECK_FALSE(m.qk_norm_per_head);
  CHECK(m.moe.num_experts == 256);
  CHECK(m.moe.experts_per_token == 8);
  CHECK(m.moe.expert_intermediate_size == 1536);
  // By hand (python, from MiniMaxM2ForCausalLM's modules): embeddings 2 x 200,064 x 3,072 =
  // 1,229,193,216; per layer attention 44,040,192 + q_norm 6,144 + k_norm 1,024, router 256 x
  // 3,072 + e_score_correction_bias 256, 256 experts of 3 x 3,072 x 1,536, norms 6,144; 62
  // layers and the final norm: 228,689,764,864 (the model card: 230B; the Hub: 229B).
  const ParameterCounts c = count_parameters(m);
  CHECK(c.total == 228'689'764'864LL);
  // Active: 8 of 256 experts; without the embedding table 10,415,956,480 (the card's "10B active").
  CHECK(c.active_per_token == 11'030'553'088LL);
  const std::vector<LinearModule> linears = layer_linears(m, 0);
  const LinearModule* gu = find_linear(linears, "gate_up_proj");
  REQUIRE(gu != nullptr);
  CHECK_FALSE(gu->bias);
  CHECK_FALSE(gu->nn_linear);
  auto shared = io::parse_hf_config(R"({"model_type": "minimax_m2", "shared_intermediate_size": 64,
      "hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 100})",
                                    "c.json");
  REQUIRE_FALSE(shared.has_value());
  CHECK(shared.error().message ==
        "\"shared_intermediate_size\" > 0: MiniMax-M2's transformers model has no shared expert");
}

TEST_CASE("StarCoder2-3B: biases everywhere, LayerNorm, c_fc/c_proj, tied embeddings, the published total") {
  const ModelSpec& m = catalog_spec("bigcode/starcoder2-3b");
  CHECK(m.norm == NormKind::kLayerNorm);
  CHECK(m.norm_bias);
  CHECK_FALSE(m.gated_mlp);
  CHECK(m.activation == Activation::kGeluTanh);
  CHECK(m.tie_word_embeddings);
  CHECK(m.sliding_window == 4096);
  CHECK(m.hidden_dropout == 0.1);
  CHECK(m.attention_dropout == 0.1);
  const auto ls = layer_linears(m, 0);
  REQUIRE(find_linear(ls, "c_fc") != nullptr);
  CHECK(find_linear(ls, "c_fc")->bias);
  REQUIRE(find_linear(ls, "c_proj") != nullptr);
  // By hand: embeddings 49,152 x 3,072 = 150,994,944 (tied); per layer q and o 3,072 x 3,072 +
  // 3,072, k and v 3,072 x 256 + 256, c_fc 3,072 x 12,288 + 12,288, c_proj 12,288 x 3,072 +
  // 3,072, two LayerNorms 4 x 3,072 = 95,979,008; 30 layers and the final LayerNorm 6,144:
  // 3,030,371,328 (the Hub: 3.03B).
  CHECK(count_parameters(m).total == 3'030'371'328LL);
  auto odd = io::parse_hf_config(R"({"model_type": "starcoder2", "residual_dropout": 0.1, "embedding_dropout": 0.0,
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 100})",
                                 "c.json");
  REQUIRE_FALSE(odd.has_value());
  CHECK(odd.error().message ==
        "\"embedding_dropout\" 0 differs from \"residual_dropout\" 0.1: memplan models one probability for both");
}

TEST_CASE("gpt-oss, MiniMax-M2 and StarCoder2 estimate end to end under LoRA with checkpointing") {
  for (const char* name : {"gpt-oss-20b", "gpt-oss-120b", "minimax-m2", "starcoder2-3b"}) {
    INFO(name);
    TrainingConfig c = lora_qv_checkpointed();
    auto e = estimate(catalog_spec(name), c);
    REQUIRE(e.has_value());
    memplan::testing::require_consistent(*e);
  }
}

TEST_CASE("gpt-oss: SDPA is refused (transformers has none for it); eager by default, the hub flash kernel") {
  TrainingConfig c = lora_qv_checkpointed();
  c.attn = AttnImpl::kSdpa;
  auto e = estimate(catalog_spec("gpt-oss-20b"), c);
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().message == "gpt-oss has no SDPA attention in transformers (GptOssForCausalLM: _supports_sdpa = "
                             "False); its attention sinks run in the eager attention or in the vllm-flash-attn3 hub "
                             "kernel");
  // Unset, the engine runs eager for it; flash_attention_2 stands for the hub kernel, with no
  // (b, heads, s, s) scores, so less memory than eager at a long sequence.
  c.attn.reset();
  c.seq_len = 4096;
  auto eager = estimate(catalog_spec("gpt-oss-20b"), c);
  REQUIRE(eager.has_value());
  c.attn = AttnImpl::kFlashAttention2;
  auto flash = estimate(catalog_spec("gpt-oss-20b"), c);
  REQUIRE(flash.has_value());
  CHECK(flash->peak < eager->peak);
}

// DeepSeek-V2/V3 and Kimi K2 config.json parsing, exact parameter counts and a consistent
// estimate (docs/formulas.md#mla).
#include <catch2/catch.hpp>

#include "io/model/model_source.hpp"
#include "memplan/engine.hpp"
#include "support/catalog.hpp"
#include "support/invariants.hpp"

using namespace memplan;
using memplan::testing::catalog_spec;

namespace {

std::int64_t module_params(const ModelSpec& m, int layer, const std::string& name) {
  for (const auto& l : layer_linears(m, layer))
    if (l.name == name) return l.weight_params() + l.bias_params();
  return -1;
}

}  // namespace

TEST_CASE("DeepSeek-V3: MLA modules, MoE layout and the 671,026,419,200 total by hand") {
  const ModelSpec& m = catalog_spec("deepseek-ai/DeepSeek-V3");
  CHECK(m.is_mla());
  CHECK(m.head_dim == 192);  // qk_nope 128 + qk_rope 64
  CHECK(m.mtp_layers == 1);
  // Attention per layer: q_a 7168 x 1536, q_b 1536 x 128*192, kv_a 7168 x (512 + 64),
  // kv_b 512 x 128*(128 + 128), o 128*128 x 7168.
  CHECK(module_params(m, 0, "q_a_proj") == 11'010'048);
  CHECK(module_params(m, 0, "q_b_proj") == 37'748'736);
  CHECK(module_params(m, 0, "kv_a_proj_with_mqa") == 4'128'768);
  CHECK(module_params(m, 0, "kv_b_proj") == 16'777'216);
  CHECK(module_params(m, 0, "o_proj") == 117'440'512);
  CHECK(module_params(m, 0, "q_proj") == -1);
  // first_k_dense_replace 3: layers 0-2 dense (3 x 7168 x 18432), 3-60 MoE.
  CHECK(module_params(m, 2, "gate_proj") == 132'120'576);
  CHECK(module_params(m, 3, "gate_proj") == 256LL * 7168 * 2048);
  // The router: 256 x 7168 weight plus e_score_correction_bias (256).
  CHECK(module_params(m, 3, "gate") == 1'835'008 + 256);
  const ParameterCounts c = count_parameters(m);
  // 61 x (187,105,280 projections + 2,048 q_a/kv_a norms) = 11,413,547,008.
  CHECK(c.attention == 11'413'547'008LL);
  // 3 x 396,361,728 + 58 x (11,274,289,152 + 44,040,192 + 1,835,264) = 657,758,632,448.
  CHECK(c.mlp == 657'758'632'448LL);
  CHECK(c.embedding == 926'679'040);
  CHECK(c.lm_head == 926'679'040);
  CHECK(c.norms == 61LL * 2 * 7168 + 7168);
  CHECK(c.total == 671'026'419'200LL);
  // The Hub's safetensors total adds the MTP module (layer 61 as a MoE layer 11,507,286,272,
  // eh_proj 2 x 7168 x 7168, enorm/hnorm/shared_head.norm, its own embed_tokens and head) and
  // the FP8 block scales: 684,531,386,000.
  const std::int64_t mtp = (187'107'328 + 11'320'164'608LL + 2 * 7168) + 2LL * 7168 * 7168 + 3 * 7168 +
                           2LL * 926'679'040;
  CHECK(mtp == 13'463'426'304LL);
  CHECK(c.total + mtp + 41'540'496 == 684'531'386'000LL);
}

TEST_CASE("DeepSeek-V2-Lite: no q LoRA (q_proj), softmax router without a bias") {
  const ModelSpec& m = catalog_spec("deepseek-v2-lite");
  CHECK(m.q_lora_rank == 0);
  CHECK(module_params(m, 0, "q_proj") == 2048LL * 16 * 192);
  CHECK(module_params(m, 0, "q_a_proj") == -1);
  CHECK(module_params(m, 1, "gate") == 64 * 2048);
  CHECK(module_params(m, 1, "shared.gate_proj") == -1);
  const ParameterCounts c = count_parameters(m);
  // 27 x (13,762,560 + 512 kv_a_layernorm) attention; layer 0 dense 67,239,936; 26 MoE layers of
  // 553,648,128 routed + 17,301,504 shared (2 x 1408 wide) + 131,072 router.
  CHECK(c.attention == 27LL * 13'763'072);
  CHECK(c.mlp == 67'239'936LL + 26LL * 571'080'704);
  CHECK(c.total == 15'706'484'224LL);
  // Active per token: 6 of 64 routed experts.
  CHECK(c.active_per_token == c.total - 26LL * 58 * 3 * 2048 * 1408);
}

TEST_CASE("MLA config.json errors name the field") {
  const std::string base =
      R"({"model_type": "deepseek_v3", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
          "moe_intermediate_size": 32, "n_shared_experts": 1, "first_k_dense_replace": 1, "q_lora_rank": 16,
          "kv_lora_rank": 16, "qk_nope_head_dim": 8, "v_head_dim": 8, )";
  auto ok = io::parse_hf_config(base + R"("qk_rope_head_dim": 4})", "c.json");
  REQUIRE(ok.has_value());
  CHECK(ok->head_dim == 12);
  // 2 layers: attention 64*16 + 16 + 16*48 + 64*20 + 16 + 16*64 + 32*64 = 6,176 each.
  CHECK(count_parameters(*ok).attention == 2 * 6'176);
  CHECK(io::parse_hf_config(base + R"("qk_rope_head_dim": 3})", "c.json").error().to_string() ==
        "c.json: model qk_rope_head_dim = 3 must be positive and even");
  CHECK(io::parse_hf_config(base + R"("qk_rope_head_dim": "x"})", "c.json").error().to_string() ==
        "c.json: \"qk_rope_head_dim\" must be an integer, got \"x\"");
  const std::string zero_kv =
      R"({"model_type": "kimi_k2", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 1, "num_attention_heads": 4, "kv_lora_rank": 0})";
  CHECK(io::parse_hf_config(zero_kv, "c.json").error().to_string() == "c.json: \"kv_lora_rank\" must be positive, got 0");
}

TEST_CASE("MLA estimates: consistent, LoRA needs target_modules, all-linear covers the latent projections") {
  const ModelSpec& m = catalog_spec("deepseek-v2-lite");
  TrainingConfig c;
  c.micro_batch = 1;
  c.seq_len = 512;
  c.torch_dtype = DType::kBFloat16;
  c.device = Device::kCuda;
  for (AttnImpl impl : {AttnImpl::kEager, AttnImpl::kSdpa, AttnImpl::kFlashAttention2}) {
    c.attn = impl;
    auto e = estimate(m, c);
    REQUIRE(e.has_value());
    memplan::testing::require_consistent(*e);
    CHECK(e->params.total == 15'706'484'224LL);
  }
  c.lora.enabled = true;
  auto none = estimate(m, c);
  REQUIRE_FALSE(none.has_value());
  CHECK(none.error().message == "PEFT has no default LoRA target modules for model_type 'deepseek_v2'");
  CHECK(none.error().suggestion ==
        "set target_modules (its attention projections: q_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj) or all-linear");
  c.lora.all_linear = true;
  c.lora.r = 8;
  auto all = estimate(m, c);
  REQUIRE(all.has_value());
  memplan::testing::require_consistent(*all);
  // r = 8 on q_proj (2048 -> 3072), kv_a (2048 -> 576), kv_b (512 -> 4096), o_proj (2048 -> 2048)
  // in 27 layers; the dense layer's MLP (2048 <-> 10944) and 26 MoE layers' 64 routed + shared
  // experts (2048 <-> 1408, shared 2816); the bare-Parameter router is not a Linear.
  const std::int64_t attn = 8 * ((2048 + 3072) + (2048 + 576) + (512 + 4096) + (2048 + 2048));
  const std::int64_t dense = 8 * 3 * (2048 + 10944);
  const std::int64_t moe = 8 * 3 * (64LL * (2048 + 1408) + (2048 + 2816));
  CHECK(all->params.trainable == 27 * attn + dense + 26 * moe);
}

TEST_CASE("DeepSeek-V3's middle layers are simulated as MoE layers, not as its dense layer 1") {
  // first_k_dense_replace 3: layers 0-2 dense, 3-60 MoE. The reduced model's middle layer stands
  // for layers 1-59; it is taken MoE (56 of 59), so layers 1 and 2 count as MoE: trainable
  // parameters exceed the exact total by 2 x (11,320,164,608 - 396,361,728) = 21,847,605,760
  // (before this, layer 1 stood for all 59 and 48.4B of 671B were trained).
  const ModelSpec& m = catalog_spec("deepseek-v3");
  TrainingConfig c;
  c.micro_batch = 1;
  c.seq_len = 256;
  c.torch_dtype = DType::kBFloat16;
  c.device = Device::kCuda;
  auto e = estimate(m, c);
  REQUIRE(e.has_value());
  memplan::testing::require_consistent(*e);
  CHECK(e->params.total == 671'026'419'200LL);
  CHECK(e->params.trainable == 671'026'419'200LL + 21'847'605'760LL);
}

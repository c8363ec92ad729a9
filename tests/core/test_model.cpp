#include <catch2/catch.hpp>

#include "memplan/model.hpp"
#include "support/models.hpp"

using namespace memplan;
using memplan::testing::llama31_8b;

TEST_CASE("Llama-3.1-8B parameter count matches the published total") {
  const auto c = count_parameters(llama31_8b());
  CHECK(c.total == 8'030'261'248);
  CHECK(c.embedding == 128256LL * 4096);
  CHECK(c.lm_head == 128256LL * 4096);
  CHECK(c.norms == 65LL * 4096);
}

TEST_CASE("tied embeddings drop the lm_head") {
  auto m = llama31_8b();
  m.tie_word_embeddings = true;
  CHECK(count_parameters(m).total == 8'030'261'248 - 128256LL * 4096);
}

TEST_CASE("validate names the bad field") {
  auto m = llama31_8b();
  m.num_kv_heads = 5;
  CHECK(validate(m).error().message == "model num_key_value_heads = 5 must divide num_attention_heads (32)");
  m = llama31_8b();
  m.num_layers = 0;
  CHECK(validate(m).error().message == "model num_hidden_layers = 0 must be positive");
}

namespace {

std::vector<std::string> names(const std::vector<LinearModule>& ls) {
  std::vector<std::string> out;
  for (const auto& l : ls) out.push_back(l.name);
  return out;
}

// Components must add up to the total, whatever the family.
void check_sums(const ModelSpec& m) {
  const auto c = count_parameters(m);
  CHECK(c.total == c.embedding + c.position_embedding + c.attention + c.mlp + c.norms + c.lm_head);
  CHECK(c.active_per_token <= c.total);
}

ModelSpec gpt2_small() {
  ModelSpec m;
  m.model_type = "gpt2";
  m.vocab_size = 50257;
  m.hidden_size = 768;
  m.intermediate_size = 3072;
  m.num_layers = 12;
  m.num_heads = m.num_kv_heads = 12;
  m.head_dim = 64;
  m.norm = NormKind::kLayerNorm;
  m.norm_bias = true;
  m.gated_mlp = false;
  m.learned_positions = true;
  m.max_position_embeddings = 1024;
  m.tie_word_embeddings = true;
  return m;
}

}  // namespace

TEST_CASE("layer_linears: the module names PEFT's target_modules match") {
  CHECK(names(layer_linears(llama31_8b(), 0)) ==
        std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"});
  auto phi3 = llama31_8b();
  phi3.model_type = "phi3";
  phi3.fused_qkv = phi3.fused_gate_up = true;
  const auto fused = layer_linears(phi3, 0);
  CHECK(names(fused) == std::vector<std::string>{"qkv_proj", "o_proj", "gate_up_proj", "down_proj"});
  CHECK(fused[0].out_features == 4096 + 2 * 1024);
  CHECK(fused[2].out_features == 2 * 14336);
  CHECK(names(layer_linears(gpt2_small(), 0)) == std::vector<std::string>{"c_attn", "c_proj", "c_fc", "c_proj"});
}

TEST_CASE("GPT-2 124M, part by part") {
  const auto c = count_parameters(gpt2_small());
  CHECK(c.embedding == 50257LL * 768);
  CHECK(c.position_embedding == 1024LL * 768);
  CHECK(c.attention == 12LL * (768 * 2304 + 2304 + 768 * 768 + 768));
  CHECK(c.mlp == 12LL * (768 * 3072 + 3072 + 3072 * 768 + 768));
  CHECK(c.norms == (12 * 2 + 1) * 2 * 768);  // LayerNorm weight and bias
  CHECK(c.lm_head == 0);                     // tied to wte
  CHECK(c.total == 124'439'808);
  check_sums(gpt2_small());
}

TEST_CASE("Mixtral MoE layer: router 'gate' and experts w1/w3/w2, counted once with count 8") {
  auto m = llama31_8b();
  m.model_type = "mixtral";
  m.vocab_size = 32000;
  m.moe.num_experts = 8;
  m.moe.experts_per_token = 2;
  m.moe.expert_intermediate_size = 14336;
  const auto ls = layer_linears(m, 0);
  CHECK(names(ls) == std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate", "w1", "w3", "w2"});
  CHECK(ls[4].role == LinearRole::kRouter);
  CHECK(ls[4].out_features == 8);
  CHECK(ls[5].count == 8);
  CHECK(ls[5].weight_params() == 8LL * 4096 * 14336);
  CHECK(count_parameters(m).total == 46'702'792'704);  // Mixtral-8x7B's published total
  check_sums(m);
}

TEST_CASE("shared experts: Qwen2-MoE's gated one, DeepSeek's fused pair") {
  ModelSpec q;
  q.model_type = "qwen2_moe";
  q.vocab_size = 100;
  q.hidden_size = 64;
  q.num_layers = 2;
  q.num_heads = q.num_kv_heads = 4;
  q.head_dim = 16;
  q.moe.num_experts = 4;
  q.moe.experts_per_token = 2;
  q.moe.expert_intermediate_size = 32;
  q.moe.num_shared_experts = 1;
  q.moe.shared_intermediate_size = 96;
  q.moe.shared_expert_gate = true;
  q.moe.layer_freq_offset = 1;
  auto ls = layer_linears(q, 0);
  CHECK(names(ls) == std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate", "gate_proj", "up_proj",
                                              "down_proj", "gate_proj", "up_proj", "down_proj",
                                              "shared_expert_gate"});
  CHECK(ls[8].role == LinearRole::kSharedExpert);
  CHECK(ls[8].out_features == 96);
  CHECK(ls[11].out_features == 1);
  check_sums(q);

  ModelSpec d = q;
  d.model_type = "deepseek";
  d.intermediate_size = 128;
  d.moe.num_shared_experts = 2;
  d.moe.shared_intermediate_size = 32;
  d.moe.shared_expert_gate = false;
  d.moe.first_dense_layers = 1;
  d.moe.layer_freq_offset = 0;
  CHECK(names(layer_linears(d, 0)) ==
        std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"});
  ls = layer_linears(d, 1);
  REQUIRE(ls.size() == 11);
  CHECK(ls[4].name == "gate");
  CHECK_FALSE(ls[4].nn_linear);  // MoEGate holds a bare weight Parameter
  CHECK(ls[8].out_features == 2 * 32);
  // Dense layer 0: 4 x 64 x 64 + 3 x 64 x 128; MoE layer 1: the same attention, router 64 x 4,
  // 4 experts of 3 x 64 x 32, shared 3 x 64 x 64; 2 norms of 64 each; embeddings 2 x 100 x 64; final norm.
  const std::int64_t attn = 4 * 64 * 64;
  CHECK(count_parameters(d).total ==
        (attn + 3 * 64 * 128 + 128) + (attn + 256 + 4 * 3 * 64 * 32 + 3 * 64 * 64 + 128) + 2 * 100 * 64 + 64);
  CHECK(count_parameters(d).active_per_token == count_parameters(d).total - 2 * 3 * 64 * 32);
  check_sums(d);
}

TEST_CASE("which layers are MoE") {
  MoeSpec dense;
  CHECK_FALSE(dense.is_moe_layer(0));
  MoeSpec all;
  all.num_experts = 8;
  for (int l = 0; l < 4; ++l) CHECK(all.is_moe_layer(l));
  // DeepSeek: layer >= first_k_dense_replace and layer % moe_layer_freq == 0.
  MoeSpec ds = all;
  ds.first_dense_layers = 1;
  ds.layer_freq = 2;
  std::vector<bool> got;
  for (int l = 0; l < 6; ++l) got.push_back(ds.is_moe_layer(l));
  CHECK(got == std::vector<bool>{false, false, true, false, true, false});
  // Qwen: (layer + 1) % decoder_sparse_step == 0, except mlp_only_layers.
  MoeSpec qw = all;
  qw.layer_freq = 2;
  qw.layer_freq_offset = 1;
  qw.dense_layers = {3};
  got.clear();
  for (int l = 0; l < 6; ++l) got.push_back(qw.is_moe_layer(l));
  CHECK(got == std::vector<bool>{false, true, false, false, false, true});
  MoeSpec zero_freq = all;  // a 0 in the config behaves as 1 here; validate() rejects it
  zero_freq.layer_freq = 0;
  CHECK(zero_freq.is_moe_layer(3));
}

TEST_CASE("q/k norms: per head (Qwen3, Gemma 3) or over the whole projection (OLMo 2)") {
  auto m = llama31_8b();
  m.qk_norm = true;
  CHECK(count_parameters(m).total == 8'030'261'248 + 32LL * 2 * 128);
  m.qk_norm_per_head = false;
  CHECK(count_parameters(m).total == 8'030'261'248 + 32LL * (32 + 8) * 128);
  m.norms_per_layer = 4;  // Gemma 2/3
  CHECK(count_parameters(m).norms == (32LL * 4 + 1) * 4096);
}

TEST_CASE("validate: MoE and size limits") {
  auto m = llama31_8b();
  m.moe.num_experts = 8;
  m.moe.experts_per_token = 0;
  m.moe.expert_intermediate_size = 128;
  CHECK(validate(m).error().message == "model num_experts_per_tok = 0 must be between 1 and the number of experts (8)");
  m.moe.experts_per_token = 9;
  CHECK(validate(m).error().message == "model num_experts_per_tok = 9 must be between 1 and the number of experts (8)");
  m.moe.experts_per_token = 8;
  CHECK(validate(m).has_value());
  m.moe.expert_intermediate_size = 0;
  CHECK(validate(m).error().message == "model moe_intermediate_size = 0 must be positive");
  m.moe.expert_intermediate_size = 128;
  m.moe.num_shared_experts = 1;
  CHECK(validate(m).error().message == "model shared_expert_intermediate_size = 0 must be positive");
  m.moe.num_shared_experts = 0;
  // All layers MoE: no dense width needed; one dense layer needs it.
  m.intermediate_size = 0;
  CHECK(validate(m).has_value());
  m.moe.dense_layers = {5};
  CHECK(validate(m).error().message == "model intermediate_size = 0 must be positive");

  auto big = llama31_8b();
  big.hidden_size = (1 << 20) + 1;
  CHECK(validate(big).error().message == "model dimensions are implausibly large");
  big = llama31_8b();
  big.hidden_size = 1 << 20;
  big.num_heads = big.num_kv_heads = 8192;
  big.intermediate_size = 1 << 22;
  big.num_layers = 4096;
  CHECK(validate(big).error().code == ErrorCode::kOverflow);
  // The largest published dense model stays well inside.
  auto l405 = llama31_8b();
  l405.hidden_size = 16384;
  l405.intermediate_size = 53248;
  l405.num_layers = 126;
  l405.num_heads = 128;
  CHECK(validate(l405).has_value());
  CHECK(count_parameters(l405).total == 405'853'388'800);
}

TEST_CASE("Llama 3.2 Vision's language model: Llama-3.1-8B plus 8 cross-attention layers and 8 embedding rows") {
  // MllamaTextModel for 11B: 40 layers, cross-attention at 3, 8, ..., 38. A cross-attention layer
  // has a self-attention layer's projections, MLP and norms, plus q_norm and k_norm over head_dim
  // (2 x 128) and two scalar tanh gates: 218,112,000 + 258. embed_tokens has 128,256 + 8 rows.
  auto m = llama31_8b();
  m.model_type = "mllama";
  m.num_layers = 40;
  m.cross_attention_layers = {3, 8, 13, 18, 23, 28, 33, 38};
  m.extra_embedding_rows = 8;
  const auto c = count_parameters(m);
  CHECK(c.embedding == 128264LL * 4096);
  CHECK(c.total == 8'030'261'248 + 8 * (218'112'000 + 258) + 8LL * 4096);
  CHECK(c.total == 9'249'855'504 + 525'336'576);  // MllamaTextModel + lm_head
  CHECK(layer_linears(m, 3).size() == layer_linears(m, 2).size());  // same Linears, the norms and gates apart
  CHECK(m.is_cross_attention_layer(38));
  CHECK_FALSE(m.is_cross_attention_layer(39));
}

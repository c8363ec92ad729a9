#include "io/model/model_source_moe2025.hpp"

#include <fmt/format.h>

#include "io/model/config_keys.hpp"

namespace memplan::io {

namespace {

using nlohmann::json;
using keys::flag;
using keys::key_error;
using keys::probability;

}  // namespace

bool is_moe2025_type(const std::string& t) { return t == "gpt_oss" || t == "minimax_m2" || t == "starcoder2"; }

Status apply_moe2025_fields(const json& j, ModelSpec& m, const std::string& origin) {
  const std::string& t = m.model_type;
  if (t == "gpt_oss") {
    // GptOssConfig (transformers 4.55-4.57): attention_bias defaults to True and gives q, k, v
    // and o a bias; GptOssAttention.sinks; GptOssTopKRouter with a bias; GptOssExperts fused
    // gate_up_proj and down_proj with biases (clamped SwiGLU); untied lm_head. The MXFP4
    // quantization_config is the checkpoint's storage: from_pretrained dequantizes the experts to
    // bf16 for training (Mxfp4Config(dequantize=True)), which is what is counted here.
    MEMPLAN_TRY(const bool bias, flag(j, "attention_bias", true, origin));
    m.qkv_bias = m.o_bias = bias;
    m.attention_sinks = true;
    m.mlp_bias = true;
    m.fused_gate_up = true;
    m.moe.router_bias = true;
    m.hidden_dropout = m.attention_dropout = 0.0;
    return Ok{};
  }
  if (t == "minimax_m2") {
    // MiniMaxM2Attention: no biases; q_norm / k_norm RMSNorm over all heads (heads x head_dim);
    // MiniMaxM2SparseMoeBlock: a bias-free TopKRouter (bare Parameter) scored by sigmoid, its
    // e_score_correction_bias stored in the checkpoint (counted like DeepSeek-V3's and GLM's);
    // MiniMaxM2Experts fused gate_up_proj / down_proj. MTP modules (use_mtp) are not loaded by
    // MiniMaxM2ForCausalLM.
    m.qkv_bias = m.o_bias = false;
    MEMPLAN_TRY(const bool qk, flag(j, "use_qk_norm", true, origin));
    m.qk_norm = qk;
    m.qk_norm_per_head = false;
    if (const auto it = j.find("qk_norm_type"); it != j.end() && it->is_string() && it->get<std::string>() != "per_layer")
      return key_error(origin, fmt::format("\"qk_norm_type\" is \"{}\"; MiniMax-M2 normalizes q and k over all heads "
                                           "(\"per_layer\")", it->get<std::string>()));
    m.fused_gate_up = true;
    m.moe.router_bias = m.moe.enabled();
    m.hidden_dropout = m.attention_dropout = 0.0;
    if (const auto it = j.find("shared_intermediate_size"); it != j.end() && it->is_number_integer() &&
                                                             it->get<std::int64_t>() > 0)
      return key_error(origin, "\"shared_intermediate_size\" > 0: MiniMax-M2's transformers model has no shared "
                               "expert");
    return Ok{};
  }
  if (t == "starcoder2") {
    // Starcoder2Config: use_bias (True) on q, k, v, o, c_fc and c_proj; nn.LayerNorm with a bias;
    // gelu_pytorch_tanh between c_fc and c_proj; tie_word_embeddings defaults to True; dropout on
    // the embeddings (embedding_dropout), after o_proj and after the MLP (residual_dropout) and on
    // the eager attention probabilities (attention_dropout).
    MEMPLAN_TRY(const bool bias, flag(j, "use_bias", true, origin));
    m.qkv_bias = m.o_bias = m.mlp_bias = bias;
    m.norm = NormKind::kLayerNorm;
    m.norm_bias = true;
    m.gated_mlp = false;
    MEMPLAN_TRY(const bool tie, flag(j, "tie_word_embeddings", true, origin));
    m.tie_word_embeddings = tie;
    MEMPLAN_TRY(m.hidden_dropout, probability(j, "residual_dropout", 0.0, origin));
    MEMPLAN_TRY(m.attention_dropout, probability(j, "attention_dropout", 0.0, origin));
    MEMPLAN_TRY(const double emb, probability(j, "embedding_dropout", 0.0, origin));
    // One probability for both residual sites and the embeddings: Starcoder2's released configs
    // use 0.1 everywhere; a config with another embedding_dropout is refused rather than misread.
    if (emb != m.hidden_dropout)
      return key_error(origin, fmt::format("\"embedding_dropout\" {} differs from \"residual_dropout\" {}: memplan "
                                           "models one probability for both", emb, m.hidden_dropout));
    return Ok{};
  }
  return Ok{};
}

}  // namespace memplan::io

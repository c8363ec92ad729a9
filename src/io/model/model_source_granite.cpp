#include "io/model/model_source_granite.hpp"

#include <fmt/format.h>

#include "io/model/config_keys.hpp"

namespace memplan::io {

namespace {

using nlohmann::json;
using keys::flag;
using keys::key_error;

// An integer key: its value, `fallback` when absent or null (GraniteMoeHybridConfig's default).
Result<std::int64_t> count(const json& j, const char* key, std::int64_t fallback, const std::string& origin) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) return key_error(origin, fmt::format("\"{}\" must be an integer", key));
  const std::int64_t v = it->get<std::int64_t>();
  if (v < 0 || v > (std::int64_t{1} << 20))
    return key_error(origin, fmt::format("\"{}\" must be between 0 and 1048576, got {}", key, v));
  return v;
}

int narrow(std::int64_t v) { return static_cast<int>(v); }  // count() bounds it by 2^20

}  // namespace

// The Mamba-2 mixer's keys, as GraniteMoeHybridConfig and FalconH1Config name them and default
// them (the same defaults in both): in_proj to (gate, x, B, C, dt), a depthwise conv1d, dt_bias,
// A_log, D, out_proj. `inner` is the mixer's width, which both configs check equals mamba_n_heads x
// mamba_d_head ("auto": inner / heads); `inner_name` names it in the error.
Status read_mamba2_keys(const json& j, ModelSpec& m, std::int64_t inner, const std::string& inner_name,
                        const std::string& origin) {
  HybridSpec& y = m.hybrid;
  MEMPLAN_TRY(const std::int64_t heads, count(j, "mamba_n_heads", 128, origin));
  std::int64_t head_dim = heads > 0 ? inner / heads : 0;  // mamba_d_head "auto"
  if (const auto it = j.find("mamba_d_head"); it != j.end() && !it->is_null() && !it->is_string()) {
    MEMPLAN_TRY(head_dim, count(j, "mamba_d_head", 0, origin));
  }
  if (heads > 0 && head_dim * heads != inner)
    return key_error(origin, fmt::format("\"mamba_n_heads\" {} x \"mamba_d_head\" {} must equal {} ({})", heads,
                                         head_dim, inner_name, inner));
  MEMPLAN_TRY(y.ssm_state, count(j, "mamba_d_state", 256, origin));
  MEMPLAN_TRY(const std::int64_t groups, count(j, "mamba_n_groups", 1, origin));
  MEMPLAN_TRY(const std::int64_t kernel, count(j, "mamba_d_conv", 4, origin));
  MEMPLAN_TRY(y.mamba_chunk, count(j, "mamba_chunk_size", 256, origin));
  MEMPLAN_TRY(y.mamba_conv_bias, flag(j, "mamba_conv_bias", true, origin));
  MEMPLAN_TRY(y.mamba_proj_bias, flag(j, "mamba_proj_bias", false, origin));
  y.mamba_heads = narrow(heads);
  y.mamba_head_dim = head_dim;
  y.mamba_groups = narrow(groups);
  y.conv_kernel = narrow(kernel);
  return Ok{};
}

Result<std::int64_t> read_count_key(const json& j, const char* key, std::int64_t fallback, const std::string& origin) {
  return count(j, key, fallback, origin);
}

Status apply_granite_hybrid_fields(const json& j, ModelSpec& m, const std::string& origin) {
  HybridSpec& y = m.hybrid;
  const int n = m.num_layers;
  // GraniteMoeHybridConfig.layers_block_type: layer_types ("mamba" / "attention", also spelt
  // layers_block_type), every layer Mamba-2 when absent. Each GraniteMoeHybridDecoderLayer is
  // norm -> mixer -> residual add, norm -> MoE + shared MLP (or the shared MLP alone) -> add.
  const json* lt = nullptr;
  for (const char* key : {"layer_types", "layers_block_type"})
    if (const auto it = j.find(key); !lt && it != j.end() && !it->is_null() && !(it->is_array() && it->empty()))
      lt = &*it;
  y.mixers.clear();
  if (lt) {
    if (!lt->is_array() || lt->size() != static_cast<std::size_t>(n))
      return key_error(origin, fmt::format("\"layer_types\" must list one entry per layer ({})", n));
    for (std::size_t i = 0; i < lt->size(); ++i) {
      const json& v = (*lt)[i];
      const std::string s = v.is_string() ? v.get<std::string>() : "";
      if (s == "mamba") y.mixers.push_back(MixerKind::kMamba2);
      else if (s == "attention") y.mixers.push_back(MixerKind::kAttention);
      else
        return key_error(origin, fmt::format("\"layer_types\"[{}] is {}; granitemoehybrid has \"mamba\" and "
                                             "\"attention\" layers", i, v.dump()));
    }
  } else {
    y.mixers.assign(static_cast<std::size_t>(std::max(n, 0)), MixerKind::kMamba2);
  }
  // GraniteMoeHybridMambaLayer (BambaMixer): in_proj to (gate, x, B, C, dt), a depthwise conv1d,
  // dt_bias, A_log, D, a gated RMSNorm over the whole inner width, out_proj. Its inner width is
  // mamba_expand x hidden_size, which the config checks equals mamba_n_heads x mamba_d_head.
  // An all-attention config (granite-4.0-micro) builds no mixer: its mamba_* keys are not read.
  bool any_mamba = false;
  for (const MixerKind k : y.mixers) any_mamba = any_mamba || k == MixerKind::kMamba2;
  if (any_mamba) {
    // GraniteMoeHybridMambaLayer (BambaMixer): its gated RMSNorm spans the whole inner width,
    // mamba_expand x hidden_size.
    MEMPLAN_TRY(const std::int64_t expand, count(j, "mamba_expand", 2, origin));
    if (m.hidden_size <= 0 || m.hidden_size > (std::int64_t{1} << 30))
      return key_error(origin, fmt::format("\"hidden_size\" {} must be between 1 and 2^30", m.hidden_size));
    if (auto s = read_mamba2_keys(j, m, expand * m.hidden_size, "\"mamba_expand\" x \"hidden_size\"", origin); !s)
      return s.error();
  }
  // GraniteMoeHybridMLP (the shared MLP, in every layer): input_linear (hidden -> 2 x
  // shared_intermediate_size, gate and up in one) and output_linear, no biases. With
  // num_local_experts > 0, GraniteMoeHybridMoE beside it: a bias-free Linear router (top-k of the
  // fp32 logits, softmax over the k) and two 3-D ParallelExperts Parameters, input_linear
  // (E, 2 x intermediate_size, hidden) and output_linear (E, hidden, intermediate_size).
  MEMPLAN_TRY(const std::int64_t shared, count(j, "shared_intermediate_size", 1024, origin));
  MEMPLAN_TRY(const std::int64_t experts, count(j, "num_local_experts", 8, origin));
  MEMPLAN_TRY(const std::int64_t topk, count(j, "num_experts_per_tok", 2, origin));
  m.fused_gate_up = true;
  m.mlp_bias = false;
  m.moe = MoeSpec{};
  if (experts > 0) {
    if (topk <= 0 || topk > experts)
      return key_error(origin, fmt::format("\"num_experts_per_tok\" must be between 1 and \"num_local_experts\" ({}), "
                                           "got {}", experts, topk));
    m.moe.num_experts = narrow(experts);
    m.moe.experts_per_token = narrow(topk);
    m.moe.expert_intermediate_size = m.intermediate_size;
    m.moe.num_shared_experts = 1;
    m.moe.shared_intermediate_size = shared;
  } else {
    m.intermediate_size = shared;  // the shared MLP alone: a dense model (granite-4.0-h-micro, h-1b, micro)
  }
  // position_embedding_type "rope": GraniteMoeHybridRotaryEmbedding; anything else (None, the
  // class default, or "nope" as the H checkpoints write it): no rotary embedding at all.
  const auto pe = j.find("position_embedding_type");
  const bool rope = pe != j.end() && pe->is_string() && pe->get<std::string>() == "rope";
  m.nope_layers.clear();
  if (!rope)
    for (int l = 0; l < n; ++l) m.nope_layers.push_back(l);
  // No dropout in the model but the eager attention's (attention_dropout, 0.0 in every release).
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  MEMPLAN_TRY(const double attention_dropout, keys::probability(j, "attention_dropout", 0.0, origin));
  if (attention_dropout != 0.0)
    return key_error(origin, fmt::format("\"attention_dropout\" {} is not modelled for granitemoehybrid (the released "
                                         "checkpoints use 0.0)", attention_dropout));
  return Ok{};
}

}  // namespace memplan::io

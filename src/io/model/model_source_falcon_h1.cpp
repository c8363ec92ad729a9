#include "io/model/model_source_falcon_h1.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "io/model/config_keys.hpp"
#include "io/model/model_source_granite.hpp"

namespace memplan::io {

using nlohmann::json;
using keys::flag;
using keys::key_error;

Status apply_falcon_h1_fields(const json& j, ModelSpec& m, const std::string& origin) {
  HybridSpec& y = m.hybrid;
  // FalconH1Config.layers_block_type: "hybrid" for every layer. FalconH1DecoderLayer: norm ->
  // Mamba-2 mixer and attention on the same normed input, summed -> residual add; norm -> MLP -> add.
  y.mixers.assign(static_cast<std::size_t>(std::max(m.num_layers, 0)), MixerKind::kMamba2);
  y.parallel_attention = true;
  // FalconH1Mixer's width: mamba_d_ssm (the class default is 1024), or mamba_expand x hidden_size
  // when it is null.
  std::int64_t inner = 0;
  std::string inner_name = "\"mamba_d_ssm\"";
  if (const auto it = j.find("mamba_d_ssm"); it != j.end() && it->is_null()) {
    MEMPLAN_TRY(const std::int64_t expand, read_count_key(j, "mamba_expand", 2, origin));
    if (m.hidden_size <= 0 || m.hidden_size > (std::int64_t{1} << 30))
      return key_error(origin, fmt::format("\"hidden_size\" {} must be between 1 and 2^30", m.hidden_size));
    inner = expand * m.hidden_size;
    inner_name = "\"mamba_expand\" x \"hidden_size\"";
  } else {
    MEMPLAN_TRY(inner, read_count_key(j, "mamba_d_ssm", 1024, origin));
  }
  if (auto s = read_mamba2_keys(j, m, inner, inner_name, origin); !s) return s.error();
  // mamba_rms_norm (default false): FalconH1RMSNormGated exists, per group, before or after the
  // gate (mamba_norm_before_gate, default true); without it the output is y * silu(gate).
  // projectors_bias: out_proj's bias; mamba_proj_bias: in_proj's.
  MEMPLAN_TRY(y.mamba_norm, flag(j, "mamba_rms_norm", false, origin));
  MEMPLAN_TRY(y.mamba_norm_before_gate, flag(j, "mamba_norm_before_gate", true, origin));
  MEMPLAN_TRY(const bool projectors_bias, flag(j, "projectors_bias", false, origin));
  y.mamba_out_bias = projectors_bias;
  // FalconH1Attention: q/k/v/o with attention_bias; FalconH1MLP: gate/up/down with mlp_bias.
  MEMPLAN_TRY(const bool attention_bias, flag(j, "attention_bias", false, origin));
  MEMPLAN_TRY(const bool mlp_bias, flag(j, "mlp_bias", false, origin));
  m.qkv_bias = m.o_bias = attention_bias;
  m.mlp_bias = mlp_bias;
  m.gated_mlp = true;
  m.fused_gate_up = m.fused_qkv = false;
  // The mixer's convolution runs ACT2FN[hidden_act] and the MLP too; the simulator runs SiLU.
  if (m.activation != Activation::kSilu)
    return key_error(origin, "\"hidden_act\" must be \"silu\" for falcon_h1 (every released checkpoint uses it; "
                             "the Mamba-2 mixer's convolution runs it too)");
  // FalconH1MLP unpacks gate_multiplier, down_multiplier = mlp_multipliers; compute_mup_vector
  // reads five ssm_multipliers. Their values change no memory; their counts are the layout's.
  for (const auto& [key, n] : {std::pair<const char*, std::size_t>{"mlp_multipliers", 2}, {"ssm_multipliers", 5}})
    if (const auto it = j.find(key);
        it != j.end() && !it->is_null() &&
        (!it->is_array() || it->size() != n ||
         !std::all_of(it->begin(), it->end(), [](const json& v) { return v.is_number(); })))
      return key_error(origin, fmt::format("\"{}\" must list {} numbers", key, n));
  m.hidden_dropout = 0.0;
  MEMPLAN_TRY(const double attention_dropout, keys::probability(j, "attention_dropout", 0.0, origin));
  if (attention_dropout != 0.0)
    return key_error(origin, fmt::format("\"attention_dropout\" {} is not modelled for falcon_h1 (the released "
                                         "checkpoints use 0.0)", attention_dropout));
  m.attention_dropout = 0.0;
  return Ok{};
}

}  // namespace memplan::io

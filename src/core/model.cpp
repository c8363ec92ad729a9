#include "memplan/model.hpp"

#include <algorithm>
#include <cstddef>

#include <fmt/format.h>

namespace memplan {

bool MoeSpec::is_moe_layer(int layer) const {
  if (!enabled() || layer < first_dense_layers) return false;
  if (std::find(dense_layers.begin(), dense_layers.end(), layer) != dense_layers.end()) return false;
  const int step = layer_freq > 0 ? layer_freq : 1;
  return (layer + layer_freq_offset) % step == 0;
}

namespace {

Error field_error(const std::string& field, std::int64_t value, const std::string& why) {
  return make_error(ErrorCode::kInvalidConfig, fmt::format("model {} = {} {}", field, value, why));
}

// Mixtral names its expert projections w1 (gate), w3 (up), w2 (down); PEFT targets them by these names.
bool is_mixtral_naming(const ModelSpec& m) { return m.model_type == "mixtral"; }

void add_gated_mlp(std::vector<LinearModule>& out, const ModelSpec& m, std::int64_t width, int count,
                   LinearRole role, bool mixtral_names) {
  const std::int64_t h = m.hidden_size;
  if (!m.gated_mlp) {  // NemotronHMLP (its MoE's experts and shared expert too): up_proj, relu2, down_proj
    out.push_back({"up_proj", h, width, m.mlp_bias, count, role});
    out.push_back({"down_proj", width, h, m.mlp_bias, count, role});
    return;
  }
  if (mixtral_names) {
    out.push_back({"w1", h, width, m.mlp_bias, count, role});
    out.push_back({"w3", h, width, m.mlp_bias, count, role});
    out.push_back({"w2", width, h, m.mlp_bias, count, role});
    return;
  }
  if (m.fused_gate_up) {
    out.push_back({"gate_up_proj", h, 2 * width, m.mlp_bias, count, role});
  } else {
    out.push_back({"gate_proj", h, width, m.mlp_bias, count, role});
    out.push_back({"up_proj", h, width, m.mlp_bias, count, role});
  }
  out.push_back({"down_proj", width, h, m.mlp_bias, count, role});
}

std::int64_t norm_params(const ModelSpec& m, std::int64_t width) {
  return m.norm == NormKind::kLayerNorm && m.norm_bias ? 2 * width : width;
}

// DeepSeek families whose MoEGate / TopkRouter weight is a bare Parameter.
bool is_deepseek_family(const ModelSpec& m) {
  return m.model_type == "deepseek" || m.model_type == "deepseek_v2" || m.model_type == "deepseek_v3" ||
         m.model_type == "kimi_k2" || m.model_type == "glm4_moe" || m.model_type == "deepseek_v32";
}

// gpt-oss and MiniMax-M2 (docs/models.md#gpt_oss): GptOssTopKRouter / MiniMaxM2TopKRouter hold a
// bare weight Parameter, and the experts are 3-D Parameters (GptOssExperts: gate_up_proj
// [E, H, 2I] + gate_up_proj_bias, down_proj [E, I, H] + down_proj_bias; MiniMaxM2Experts the same
// without biases), none of them an nn.Linear PEFT can wrap or bitsandbytes quantize.
bool has_parameter_experts(const ModelSpec& m) {
  return m.model_type == "gpt_oss" || m.model_type == "minimax_m2" || m.model_type == "deepseek_v32";
}

std::int64_t qk_norm_params(const ModelSpec& m) {
  // MLA: q_a_layernorm (q_lora_rank, absent without q LoRA) and kv_a_layernorm (kv_lora_rank).
  // DeepSeek-V3.2's indexer adds k_norm, a LayerNorm (weight and bias) over index_head_dim.
  if (m.is_mla()) return m.q_lora_rank + m.kv_lora_rank + (m.index_heads > 0 ? 2 * m.index_head_dim : 0);
  if (!m.qk_norm) return 0;
  if (m.qk_norm_per_head) return 2 * m.head_dim;
  return (static_cast<std::int64_t>(m.num_heads) + m.num_kv_heads) * m.head_dim;
}

// count_parameters() in floating point (biases and norms left out), so validate() can refuse a
// shape whose exact int64 count could overflow before anything counts it exactly.
double approximate_total(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden_size);
  const double q = static_cast<double>(m.num_heads) * static_cast<double>(m.head_dim);
  const double kv = static_cast<double>(m.num_kv_heads) * static_cast<double>(m.head_dim);
  const double dense = 3 * h * static_cast<double>(std::max<std::int64_t>(m.intermediate_size, 0));
  double moe = dense;
  if (m.moe.enabled()) {
    const double e = m.moe.num_experts;
    moe = e * (3 * h * static_cast<double>(m.moe.expert_intermediate_size) + h) +
          3 * h * static_cast<double>(m.moe.shared_intermediate_size) * std::max(m.moe.num_shared_experts, 0);
  }
  double layers = 0;
  for (int l = 0; l < m.num_layers; ++l) {
    // Per layer: Gemma 4's full layers have their own head width and K/V heads, its shared layers
    // a double-wide MLP, and with enable_moe_block the experts run beside the dense MLP.
    const double hd = static_cast<double>(m.layer_head_dim(l));
    const double lq = static_cast<double>(m.num_heads) * hd, lkv = static_cast<double>(m.layer_kv_heads(l)) * hd;
    const double ldense = 3 * h * static_cast<double>(std::max<std::int64_t>(m.layer_intermediate_size(l), 0));
    const double ffn = m.moe.is_moe_layer(l) ? moe + (m.moe_beside_mlp ? ldense : 0) : ldense;
    layers += 2 * h * (q > lq ? q : lq) + 2 * h * (kv > lkv ? kv : lkv) + ffn +
              2 * h * static_cast<double>(m.per_layer_input_dim);
  }
  const double ple = static_cast<double>(m.per_layer_input_vocab) * m.num_layers * static_cast<double>(m.per_layer_input_dim) +
                     h * m.num_layers * static_cast<double>(m.per_layer_input_dim);
  return layers + ple + static_cast<double>(m.vocab_size) * h * (m.tie_word_embeddings ? 1 : 2) +
         (m.learned_positions ? static_cast<double>(m.max_position_embeddings) * h : 0);
}

// docs/models.md#hybrid-layers: the layout a hybrid config describes must be one per layer, with
// the sizes of the mixers it uses.
Status validate_hybrid(const ModelSpec& m) {
  const HybridSpec& y = m.hybrid;
  if (!y.enabled()) return Ok{};
  if (static_cast<std::int64_t>(y.mixers.size()) != m.num_layers)
    return field_error("num_hidden_layers", m.num_layers,
                       fmt::format("must equal the layers the layout names ({})", y.mixers.size()));
  bool gdn = false, mamba = false, conv = false;
  for (const MixerKind k : y.mixers) {
    gdn = gdn || k == MixerKind::kGatedDeltaNet;
    mamba = mamba || k == MixerKind::kMamba2;
    conv = conv || k == MixerKind::kShortConv;
  }
  if (gdn) {
    if (y.gdn_key_heads <= 0) return field_error("linear_num_key_heads", y.gdn_key_heads, "must be positive");
    if (y.gdn_value_heads <= 0 || y.gdn_value_heads % y.gdn_key_heads != 0)
      return field_error("linear_num_value_heads", y.gdn_value_heads,
                         fmt::format("must be a positive multiple of linear_num_key_heads ({})", y.gdn_key_heads));
    if (y.gdn_key_head_dim <= 0 || y.gdn_key_head_dim > (1 << 16))
      return field_error("linear_key_head_dim", y.gdn_key_head_dim, "must be between 1 and 65536");
    if (y.gdn_value_head_dim <= 0 || y.gdn_value_head_dim > (1 << 16))
      return field_error("linear_value_head_dim", y.gdn_value_head_dim, "must be between 1 and 65536");
    if (y.gdn_value_heads > (1 << 16))
      return field_error("linear_num_value_heads", y.gdn_value_heads, "is implausibly large");
  }
  if (mamba) {
    if (y.mamba_heads <= 0 || y.mamba_heads > (1 << 16))
      return field_error("mamba_num_heads", y.mamba_heads, "must be between 1 and 65536");
    if (y.mamba_head_dim <= 0 || y.mamba_head_dim > (1 << 16))
      return field_error("mamba_head_dim", y.mamba_head_dim, "must be between 1 and 65536");
    if (y.ssm_state <= 0 || y.ssm_state > (1 << 16))
      return field_error("ssm_state_size", y.ssm_state, "must be between 1 and 65536");
    if (y.mamba_groups <= 0 || y.mamba_heads % y.mamba_groups != 0)
      return field_error("n_groups", y.mamba_groups,
                         fmt::format("must be positive and divide mamba_num_heads ({})", y.mamba_heads));
    if (y.mamba_chunk <= 0 || y.mamba_chunk > (1 << 16))
      return field_error("chunk_size", y.mamba_chunk, "must be between 1 and 65536");
  }
  if ((gdn || mamba || conv) && (y.conv_kernel <= 0 || y.conv_kernel > 1024))
    return field_error(conv ? "conv_L_cache" : mamba ? "conv_kernel" : "linear_conv_kernel_dim", y.conv_kernel,
                       "must be between 1 and 1024");
  return Ok{};
}

}  // namespace

Status validate(const ModelSpec& m) {
  if (m.vocab_size <= 0) return field_error("vocab_size", m.vocab_size, "must be positive");
  if (m.hidden_size <= 0) return field_error("hidden_size", m.hidden_size, "must be positive");
  if (m.num_layers <= 0) return field_error("num_hidden_layers", m.num_layers, "must be positive");
  // Before any per-layer loop below: 2^40 layers must not take seconds to refuse.
  if (m.num_layers > 4096) return field_error("num_hidden_layers", m.num_layers, "must be at most 4096");
  if (m.num_heads <= 0) return field_error("num_attention_heads", m.num_heads, "must be positive");
  if (m.num_kv_heads <= 0) return field_error("num_key_value_heads", m.num_kv_heads, "must be positive");
  if (m.num_heads % m.num_kv_heads != 0)
    return field_error("num_key_value_heads", m.num_kv_heads,
                       fmt::format("must divide num_attention_heads ({})", m.num_heads));
  if (m.head_dim <= 0) return field_error("head_dim", m.head_dim, "must be positive");
  if (m.is_mla()) {  // docs/formulas.md#mla
    if (m.qk_rope_head_dim <= 0 || m.qk_rope_head_dim % 2 != 0)
      return field_error("qk_rope_head_dim", m.qk_rope_head_dim, "must be positive and even");
    if (m.qk_nope_head_dim < 0) return field_error("qk_nope_head_dim", m.qk_nope_head_dim, "must not be negative");
    if (m.v_head_dim <= 0) return field_error("v_head_dim", m.v_head_dim, "must be positive");
    if (m.q_lora_rank < 0) return field_error("q_lora_rank", m.q_lora_rank, "must not be negative");
    if (m.head_dim != m.qk_nope_head_dim + m.qk_rope_head_dim)
      return field_error("head_dim", m.head_dim,
                         fmt::format("must be qk_nope_head_dim + qk_rope_head_dim ({})",
                                     m.qk_nope_head_dim + m.qk_rope_head_dim));
    if (m.kv_lora_rank > (1 << 20) || m.q_lora_rank > (1 << 20) || m.v_head_dim > (1 << 16) ||
        m.qk_rope_head_dim > (1 << 16) || m.qk_nope_head_dim > (1 << 16))
      return make_error(ErrorCode::kInvalidConfig, "model MLA dimensions are implausibly large",
                        "check q_lora_rank, kv_lora_rank and the head dimensions");
  }
  bool any_dense = !m.moe.enabled() || m.moe.first_dense_layers > 0 || !m.moe.dense_layers.empty();
  for (int l = 0; l < m.num_layers && !any_dense; ++l) any_dense = !m.moe.is_moe_layer(l);
  if (any_dense && m.intermediate_size <= 0)
    return field_error("intermediate_size", m.intermediate_size, "must be positive");
  if (m.moe.enabled()) {
    if (m.moe.experts_per_token <= 0 || m.moe.experts_per_token > m.moe.num_experts)
      return field_error("num_experts_per_tok", m.moe.experts_per_token,
                         fmt::format("must be between 1 and the number of experts ({})", m.moe.num_experts));
    if (m.moe.expert_intermediate_size <= 0)
      return field_error("moe_intermediate_size", m.moe.expert_intermediate_size, "must be positive");
    if (m.moe.layer_freq <= 0) return field_error("moe_layer_freq", m.moe.layer_freq, "must be positive");
    if (m.moe.num_shared_experts < 0)
      return field_error("n_shared_experts", m.moe.num_shared_experts, "must not be negative");
    if (m.moe.num_shared_experts > 0 && m.moe.shared_intermediate_size <= 0)
      return field_error("shared_expert_intermediate_size", m.moe.shared_intermediate_size, "must be positive");
  }
  // Guard the arithmetic: sizes beyond these are not models, they are typos.
  if (m.hidden_size > (1 << 20) || m.vocab_size > (1 << 24) || m.num_layers > 4096 || m.intermediate_size > (1 << 22) ||
      m.head_dim > (1 << 16) || m.num_heads > (1 << 16) || m.max_position_embeddings > (1LL << 32) ||
      m.moe.num_experts > (1 << 16) || m.moe.expert_intermediate_size > (1 << 22) ||
      m.moe.shared_intermediate_size > (1 << 22) || m.moe.num_shared_experts > (1 << 10))
    return make_error(ErrorCode::kInvalidConfig, "model dimensions are implausibly large",
                      "check hidden_size, vocab_size, num_hidden_layers and intermediate_size");
  // Gemma 4 (docs/models.md#gemma-4).
  if (m.global_head_dim < 0 || m.global_head_dim > (1 << 16))
    return field_error("global_head_dim", m.global_head_dim, "must be between 0 and 65536");
  if (m.num_global_kv_heads < 0 || (m.num_global_kv_heads > 0 && m.num_heads % m.num_global_kv_heads != 0))
    return field_error("num_global_key_value_heads", m.num_global_kv_heads,
                       fmt::format("must divide num_attention_heads ({})", m.num_heads));
  if (m.attention_k_eq_v && m.num_global_kv_heads <= 0)
    return field_error("num_global_key_value_heads", m.num_global_kv_heads, "must be set with attention_k_eq_v");
  if (m.kv_shared_layers < 0 || m.kv_shared_layers >= m.num_layers)
    return field_error("num_kv_shared_layers", m.kv_shared_layers,
                       fmt::format("must be between 0 and num_hidden_layers - 1 ({})", m.num_layers - 1));
  for (int l = m.num_layers - m.kv_shared_layers; l < m.num_layers && m.kv_shared_layers > 0; ++l) {
    bool source = false;  // Gemma4TextAttention: the last non-shared layer of the same type
    for (int p = 0; p < m.num_layers - m.kv_shared_layers && !source; ++p) source = m.is_sliding_layer(p) == m.is_sliding_layer(l);
    if (!source)
      return field_error("num_kv_shared_layers", m.kv_shared_layers,
                         fmt::format("leaves shared layer {} no earlier layer of its type to read K/V from", l));
  }
  // Gemma 3n (docs/models.md#gemma-3n).
  if (m.altup_inputs < 0 || m.altup_inputs > 64) return field_error("altup_num_inputs", m.altup_inputs, "must be between 0 and 64");
  if (m.laurel_rank < 0 || m.laurel_rank > (1 << 16)) return field_error("laurel_rank", m.laurel_rank, "must be between 0 and 65536");
  if (!m.intermediate_sizes.empty() && m.intermediate_sizes.size() != static_cast<std::size_t>(m.num_layers))
    return field_error("intermediate_size", static_cast<std::int64_t>(m.intermediate_sizes.size()),
                       fmt::format("(entries) must be one per layer ({})", m.num_layers));
  for (const std::int64_t w : m.intermediate_sizes)
    if (w <= 0 || w > (1 << 22)) return field_error("intermediate_size", w, "must be between 1 and 4194304 in every layer");
  if (m.per_layer_input_dim < 0 || m.per_layer_input_dim > (1 << 14))
    return field_error("hidden_size_per_layer_input", m.per_layer_input_dim, "must be between 0 and 16384");
  if (m.per_layer_input_dim > 0 && (m.per_layer_input_vocab <= 0 || m.per_layer_input_vocab > (1 << 24)))
    return field_error("vocab_size_per_layer_input", m.per_layer_input_vocab, "must be between 1 and 16777216");
  // 1e15 parameters is a thousand times the largest published model; past it a count is a typo.
  if (const double total = approximate_total(m); total > 1e15)
    return make_error(ErrorCode::kOverflow,
                      fmt::format("model has about {:.3g} parameters, more than memplan models", total),
                      "check the sizes in the config");
  if (m.sliding_window < 0) return field_error("sliding_window", m.sliding_window, "must not be negative");
  for (const int l : m.full_attention_layers)
    if (l < 0 || l >= m.num_layers)
      return field_error("layer_types", l, fmt::format("names a full-attention layer outside 0..{}", m.num_layers - 1));
  if (auto h = validate_hybrid(m); !h) return h;
  if (m.audio.enabled() && (m.audio.depth > 1024 || m.audio.hidden_size <= 0 || m.audio.hidden_size > (1 << 16) ||
                            m.audio.num_heads <= 0 || m.audio.hidden_size % m.audio.num_heads != 0 ||
                            m.audio.conv_channels0 <= 0 || m.audio.conv_channels0 > (1 << 12) ||
                            m.audio.conv_channels1 <= 0 || m.audio.conv_channels1 > (1 << 12) ||
                            m.audio.conv_kernel <= 0 || m.audio.conv_kernel > 1024 || m.audio.output_dims < 0 ||
                            m.audio.output_dims > (1 << 16) || m.audio.embed_vocab < 0 ||
                            m.audio.embed_vocab > (1 << 20) ||
                            // Gemma 4's tower projects to output_proj_dims; Gemma 3n's has no projection
                            // and an embedder of embed_vocab rows instead: one of the two
                            (m.audio.output_dims == 0) == (m.audio.embed_vocab == 0)))
    return make_error(ErrorCode::kInvalidConfig, "model audio_config sizes are not plausible",
                      "check hidden_size, num_attention_heads, subsampling_conv_channels, conv_kernel_size and "
                      "output_proj_dims of audio_config");
  return validate_vision(m.vision);
}

std::int64_t ModelSpec::layer_head_dim(int layer) const {
  return global_head_dim > 0 && !is_sliding_layer(layer) ? global_head_dim : head_dim;
}

bool ModelSpec::layer_k_eq_v(int layer) const { return attention_k_eq_v && !is_sliding_layer(layer); }

int ModelSpec::layer_kv_heads(int layer) const { return layer_k_eq_v(layer) ? num_global_kv_heads : num_kv_heads; }

bool ModelSpec::is_kv_shared_layer(int layer) const {
  return kv_shared_layers > 0 && layer >= num_layers - kv_shared_layers;
}

std::int64_t ModelSpec::layer_intermediate_size(int layer) const {
  // Gemma 3n's MatFormer widths: one per layer.
  if (!intermediate_sizes.empty() && layer >= 0 && static_cast<std::size_t>(layer) < intermediate_sizes.size())
    return intermediate_sizes[static_cast<std::size_t>(layer)];
  return double_wide_mlp && is_kv_shared_layer(layer) ? 2 * intermediate_size : intermediate_size;
}

bool ModelSpec::is_sliding_layer(int layer) const {
  return sliding_window > 0 &&
         std::find(full_attention_layers.begin(), full_attention_layers.end(), layer) == full_attention_layers.end();
}

bool ModelSpec::mixes_attention_kinds() const {
  if (sliding_window <= 0) return false;
  int full = 0;
  for (const int l : full_attention_layers) full += l >= 0 && l < num_layers ? 1 : 0;
  return full > 0 && full < num_layers;
}

bool ModelSpec::is_cross_attention_layer(int layer) const {
  return std::find(cross_attention_layers.begin(), cross_attention_layers.end(), layer) != cross_attention_layers.end();
}

std::string attention_out_name(const ModelSpec& m) { return m.model_type == "lfm2" ? "out_proj" : "o_proj"; }

std::int64_t mixer_params(const ModelSpec& m, int layer) {
  const HybridSpec& y = m.hybrid;
  const std::int64_t k = y.conv_kernel;
  switch (y.mixer(layer)) {
    case MixerKind::kGatedDeltaNet: {
      // conv1d (depthwise over q, k, v; no bias), dt_bias, A_log, norm (RMSNormGated over head_v_dim).
      const std::int64_t conv_dim = 2 * y.gdn_key_dim() + y.gdn_value_dim();
      return conv_dim * k + 2 * static_cast<std::int64_t>(y.gdn_value_heads) + y.gdn_value_head_dim;
    }
    case MixerKind::kMamba2: {
      // conv1d over (x, B, C) with use_conv_bias; dt_bias, A_log, D per head; norm over the inner
      // width (Falcon-H1: only with mamba_rms_norm).
      const std::int64_t conv_dim = y.mamba_inner() + 2 * y.mamba_groups * y.ssm_state;
      return conv_dim * k + (y.mamba_conv_bias ? conv_dim : 0) + 3 * static_cast<std::int64_t>(y.mamba_heads) +
             (y.mamba_norm ? y.mamba_inner() : 0);
    }
    case MixerKind::kShortConv:  // depthwise Conv1d(hidden, hidden, L_cache) with conv_bias
      return m.hidden_size * k + (y.short_conv_bias ? m.hidden_size : 0);
    case MixerKind::kAttention:
    case MixerKind::kNone: return 0;
  }
  return 0;
}

int layer_norm_count(const ModelSpec& m, int layer) {
  // Every layer has the same norms (Nemotron-H: one, its parser sets norms_per_layer to 1).
  (void)layer;
  return m.norms_per_layer;
}

std::vector<LinearModule> layer_linears(const ModelSpec& m, int layer) {
  if (m.is_encoder()) return encoder_layer_linears(m);
  std::vector<LinearModule> out;
  out.reserve(12);
  const std::int64_t h = m.hidden_size;
  // Gemma 4's full-attention layers have their own head width and K/V heads (layer_head_dim).
  const std::int64_t q = static_cast<std::int64_t>(m.num_heads) * m.layer_head_dim(layer);
  const std::int64_t kv = static_cast<std::int64_t>(m.layer_kv_heads(layer)) * m.layer_head_dim(layer);
  if (m.model_type == "gpt2") {
    // Conv1D modules with biases; attention and MLP output projections are both named c_proj.
    out.push_back({"c_attn", h, 3 * h, true, 1, LinearRole::kAttention});
    out.push_back({"c_proj", h, h, true, 1, LinearRole::kAttention});
    out.push_back({"c_fc", h, m.intermediate_size, true, 1, LinearRole::kMlp});
    out.push_back({"c_proj", m.intermediate_size, h, true, 1, LinearRole::kMlp});
    return out;
  }
  const MixerKind mixer = m.hybrid.mixer(layer);
  if (mixer == MixerKind::kGatedDeltaNet) {
    // Qwen3NextGatedDeltaNet: in_proj_qkvz (q, k, v and the output gate z), in_proj_ba (beta and
    // the decay's input, one each per value head), out_proj; no biases.
    // Qwen3_5GatedDeltaNet splits them: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a.
    const HybridSpec& y = m.hybrid;
    const std::int64_t vh = y.gdn_value_heads;
    if (y.gdn_split_projections) {
      out.push_back({"in_proj_qkv", h, 2 * y.gdn_key_dim() + y.gdn_value_dim(), false, 1, LinearRole::kAttention});
      out.push_back({"in_proj_z", h, y.gdn_value_dim(), false, 1, LinearRole::kAttention});
      out.push_back({"in_proj_b", h, vh, false, 1, LinearRole::kAttention});
      out.push_back({"in_proj_a", h, vh, false, 1, LinearRole::kAttention});
    } else {
      out.push_back({"in_proj_qkvz", h, 2 * y.gdn_key_dim() + 2 * y.gdn_value_dim(), false, 1, LinearRole::kAttention});
      out.push_back({"in_proj_ba", h, 2 * vh, false, 1, LinearRole::kAttention});
    }
    out.push_back({"out_proj", y.gdn_value_dim(), h, false, 1, LinearRole::kAttention});
  } else if (mixer == MixerKind::kMamba2) {
    // NemotronHMamba2Mixer: in_proj to (gate z, x, B, C, dt), out_proj; both with use_bias
    // (Falcon-H1: out_proj's is projectors_bias).
    const HybridSpec& y = m.hybrid;
    const std::int64_t d_in = 2 * y.mamba_inner() + 2 * y.mamba_groups * y.ssm_state + y.mamba_heads;
    out.push_back({"in_proj", h, d_in, y.mamba_proj_bias, 1, LinearRole::kAttention});
    out.push_back({"out_proj", y.mamba_inner(), h, y.mamba_out_proj_bias(), 1, LinearRole::kAttention});
    if (y.parallel_attention) {  // FalconH1Attention beside the mixer: q/k/v here, o_proj below
      out.push_back({"q_proj", h, q, m.qkv_bias, 1, LinearRole::kAttention});
      out.push_back({"k_proj", h, kv, m.qkv_bias, 1, LinearRole::kAttention});
      out.push_back({"v_proj", h, kv, m.qkv_bias, 1, LinearRole::kAttention});
    }
  } else if (mixer == MixerKind::kShortConv) {
    // Lfm2ShortConv: in_proj to (B, C, x), out_proj; both with conv_bias.
    out.push_back({"in_proj", h, 3 * h, m.hybrid.short_conv_bias, 1, LinearRole::kAttention});
    out.push_back({"out_proj", h, h, m.hybrid.short_conv_bias, 1, LinearRole::kAttention});
  } else if (mixer == MixerKind::kNone) {
    // Nemotron-H MLP / MoE layers
  } else if (m.is_mla()) {
    // DeepseekV3Attention / DeepseekV2Attention (docs/formulas.md#mla); attention_bias gives
    // q_a_proj, kv_a_proj_with_mqa and o_proj a bias, never q_proj, q_b_proj or kv_b_proj.
    const std::int64_t heads = m.num_heads;
    if (m.q_lora_rank > 0) {
      out.push_back({"q_a_proj", h, m.q_lora_rank, m.qkv_bias, 1, LinearRole::kAttention});
      out.push_back({"q_b_proj", m.q_lora_rank, q, false, 1, LinearRole::kAttention});
    } else {
      out.push_back({"q_proj", h, q, false, 1, LinearRole::kAttention});
    }
    out.push_back({"kv_a_proj_with_mqa", h, m.kv_lora_rank + m.qk_rope_head_dim, m.qkv_bias, 1,
                   LinearRole::kAttention});
    out.push_back({"kv_b_proj", m.kv_lora_rank, heads * (m.qk_nope_head_dim + m.v_head_dim), false, 1,
                   LinearRole::kAttention});
    out.push_back({"o_proj", heads * m.v_head_dim, h, m.o_bias, 1, LinearRole::kAttention});
    if (m.index_heads > 0) {
      // DeepSeek-V3.2's lightning indexer (inference/model.py Indexer, docs/models.md#deepseek-v32):
      // wq_b reads the query latent, wk and weights_proj the layer input; no biases.
      const std::int64_t ih = m.index_heads;
      out.push_back({"indexer.wq_b", m.q_lora_rank, ih * m.index_head_dim, false, 1, LinearRole::kAttention});
      out.push_back({"indexer.wk", h, m.index_head_dim, false, 1, LinearRole::kAttention});
      out.push_back({"indexer.weights_proj", h, ih, false, 1, LinearRole::kAttention});
    }
  } else if (m.fused_qkv) {
    out.push_back({"qkv_proj", h, q + 2 * kv, m.qkv_bias, 1, LinearRole::kAttention});
  } else {
    // Qwen3-Next gated attention: q_proj gives the queries and their output gate.
    out.push_back({"q_proj", h, m.attn_output_gate ? 2 * q : q, m.qkv_bias, 1, LinearRole::kAttention});
    // Gemma 4: a KV-shared layer has no k/v projections; a k_eq_v layer no v_proj. Gemma 3n's
    // shared layers keep theirs (Gemma3nTextAttention builds them all; only a cache bypasses them).
    if (!m.is_kv_shared_layer(layer) || m.altup_inputs > 0) {
      out.push_back({"k_proj", h, kv, m.qkv_bias, 1, LinearRole::kAttention});
      if (!m.layer_k_eq_v(layer)) out.push_back({"v_proj", h, kv, m.qkv_bias, 1, LinearRole::kAttention});
    }
  }
  if ((mixer == MixerKind::kAttention || (mixer == MixerKind::kMamba2 && m.hybrid.parallel_attention)) && !m.is_mla())
    out.push_back({attention_out_name(m), q, h, m.o_bias, 1, LinearRole::kAttention});

  if (!m.hybrid.has_ffn(layer)) return out;
  if (m.altup_inputs > 0) {
    // Gemma3nTextDecoderLayer (docs/models.md#gemma-3n): the MLP, then AltUp's modality_router
    // (hidden -> n), prediction_coefs (n -> n^2) and correction_coefs (n -> n), Laurel's
    // linear_left / linear_right, and the per-layer input gate and projection; no biases.
    const std::int64_t n = m.altup_inputs;
    add_gated_mlp(out, m, m.layer_intermediate_size(layer), 1, LinearRole::kMlp, false);
    out.push_back({"altup.modality_router", h, n, false, 1, LinearRole::kMlp});
    out.push_back({"altup.prediction_coefs", n, n * n, false, 1, LinearRole::kMlp});
    out.push_back({"altup.correction_coefs", n, n, false, 1, LinearRole::kMlp});
    out.push_back({"laurel.linear_left", h, m.laurel_rank, false, 1, LinearRole::kMlp});
    out.push_back({"laurel.linear_right", m.laurel_rank, h, false, 1, LinearRole::kMlp});
    out.push_back({"per_layer_input_gate", h, m.per_layer_input_dim, false, 1, LinearRole::kMlp});
    out.push_back({"per_layer_projection", m.per_layer_input_dim, h, false, 1, LinearRole::kMlp});
    return out;
  }
  // Gemma 4 (docs/models.md#gemma-4): the per-layer input gate and projection (PLE), after the MLP.
  const auto per_layer_input = [&]() {
    if (m.per_layer_input_dim <= 0) return;
    out.push_back({"per_layer_input_gate", h, m.per_layer_input_dim, false, 1, LinearRole::kMlp});
    out.push_back({"per_layer_projection", m.per_layer_input_dim, h, false, 1, LinearRole::kMlp});
  };
  if (m.moe_beside_mlp) {
    // Gemma4TextDecoderLayer with enable_moe_block: the dense MLP, then Gemma4TextRouter.proj (an
    // nn.Linear) and Gemma4TextExperts' 3-D gate_up_proj (E, 2I, H) and down_proj (E, H, I)
    // Parameters, which PEFT cannot wrap (named experts.* so they do not clash with the MLP's).
    add_gated_mlp(out, m, m.layer_intermediate_size(layer), 1, LinearRole::kMlp, false);
    if (m.moe.is_moe_layer(layer)) {
      out.push_back({"gate", h, m.moe.num_experts, false, 1, LinearRole::kRouter});
      const int experts = m.moe.local_experts > 0 ? m.moe.local_experts : m.moe.num_experts;
      LinearModule gu{"experts.gate_up_proj", h, 2 * m.moe.expert_intermediate_size, false, experts,
                      LinearRole::kRoutedExpert};
      LinearModule dp{"experts.down_proj", m.moe.expert_intermediate_size, h, false, experts, LinearRole::kRoutedExpert};
      gu.nn_linear = dp.nn_linear = false;
      out.push_back(gu);
      out.push_back(dp);
    }
    per_layer_input();
    return out;
  }
  if (!m.moe.is_moe_layer(layer)) {
    if (m.gated_mlp) {
      add_gated_mlp(out, m, m.layer_intermediate_size(layer), 1, LinearRole::kMlp, m.model_type == "lfm2");
      per_layer_input();
    } else if (m.model_type == "starcoder2") {  // Starcoder2MLP: c_fc, gelu_pytorch_tanh, c_proj (use_bias)
      out.push_back({"c_fc", h, m.intermediate_size, m.mlp_bias, 1, LinearRole::kMlp});
      out.push_back({"c_proj", m.intermediate_size, h, m.mlp_bias, 1, LinearRole::kMlp});
    } else if (m.model_type == "nemotron_h" || m.model_type == "arcee") {  // NemotronHMLP (ArceeMLP): up_proj, relu2, down_proj
      out.push_back({"up_proj", h, m.intermediate_size, m.mlp_bias, 1, LinearRole::kMlp});
      out.push_back({"down_proj", m.intermediate_size, h, m.mlp_bias, 1, LinearRole::kMlp});
    } else {
      out.push_back({"fc1", h, m.intermediate_size, m.mlp_bias, 1, LinearRole::kMlp});
      out.push_back({"fc2", m.intermediate_size, h, m.mlp_bias, 1, LinearRole::kMlp});
    }
    return out;
  }
  const bool mixtral = is_mixtral_naming(m);
  // Llama 4's Llama4Router is an nn.Linear (PEFT matches it as "router"; memplan names every router gate).
  const bool llama4 = m.model_type == "llama4_text";
  LinearModule router{"gate", h, m.moe.num_experts, m.moe.router_bias, 1, LinearRole::kRouter};
  router.nn_linear = !is_deepseek_family(m) && m.model_type != "nemotron_h" && !has_parameter_experts(m);  // NemotronHTopkRouter: F.linear
  out.push_back(router);
  const std::size_t first_expert = out.size();
  add_gated_mlp(out, m, m.moe.expert_intermediate_size, m.moe.local_experts > 0 ? m.moe.local_experts : m.moe.num_experts,
                  LinearRole::kRoutedExpert, mixtral);
  // Llama4TextExperts and Qwen3VLMoeTextExperts hold the experts as two fused Parameters,
  // gate_up_proj (E, H, 2I) and down_proj (E, I, H): the same count, but no nn.Linear for PEFT or
  // bitsandbytes (docs/models.md#qwen3-vl). The names stay gate/up/down for the simulator.
  // gpt-oss and MiniMax-M2 likewise (has_parameter_experts), and DeepSeek-V3.2 in transformers 5
  // (DeepseekV32Experts: gate_up_proj [E, 2I, H], down_proj [E, H, I]; its dense and shared MLPs
  // keep separate gate_proj / up_proj Linears).
  if (m.model_type == "deepseek_v32" && !m.fused_gate_up && out.size() >= first_expert + 2) {
    out[first_expert].name = "gate_up_proj";
    out[first_expert].out_features *= 2;
    out.erase(out.begin() + static_cast<std::ptrdiff_t>(first_expert) + 1);
  }
  // GraniteMoeHybridParallelExperts: input_linear (E, 2I, H) and output_linear (E, H, I) Parameters.
  if (has_parameter_experts(m) || llama4 || (m.vision.kind == VisionKind::kQwen3Vl && m.moe.enabled()) ||
      m.model_type == "granitemoehybrid")
    for (std::size_t i = first_expert; i < out.size(); ++i) out[i].nn_linear = false;
  if (m.moe.num_shared_experts > 0) {
    // DeepSeek fuses n shared experts into one MLP of n x width; Qwen2-MoE has one.
    add_gated_mlp(out, m, m.moe.shared_intermediate_size * m.moe.num_shared_experts, 1, LinearRole::kSharedExpert,
                  false);
    if (m.moe.shared_expert_gate) out.push_back({"shared_expert_gate", h, 1, false, 1, LinearRole::kRouter});
  }
  return out;
}

namespace {
ParameterCounts count_model_parameters(const ModelSpec& m);  // the model alone, below
}  // namespace

std::int64_t dense_module_params(const ModelSpec& m) {
  std::int64_t n = 0;
  for (const DenseModule& d : m.st_dense) n += d.in_features * d.out_features + (d.bias ? d.out_features : 0);
  return n;
}

ParameterCounts count_parameters(const ModelSpec& m) {
  ParameterCounts c = count_model_parameters(m);
  // sentence-transformers Dense modules after the pooling: counted with the head.
  const std::int64_t dense = m.embeds() ? dense_module_params(m) : 0;
  c.lm_head += dense;
  c.total += dense;
  c.active_per_token += dense;
  return c;
}

namespace {

ParameterCounts count_model_parameters(const ModelSpec& m) {
  if (m.is_encoder()) return count_encoder_parameters(m);
  ParameterCounts c;
  const std::int64_t h = m.hidden_size;
  c.embedding = (m.vocab_size + m.extra_embedding_rows) * h;
  c.position_embedding = m.learned_positions ? m.max_position_embeddings * h : 0;
  std::int64_t active = c.embedding + c.position_embedding;
  for (int l = 0; l < m.num_layers; ++l) {
    for (const auto& lin : layer_linears(m, l)) {
      const std::int64_t p = lin.weight_params() + lin.bias_params();
      if (lin.role == LinearRole::kAttention) c.attention += p;
      else c.mlp += p;
      c.layer_linear_weights += lin.weight_params();
      if (lin.role == LinearRole::kRoutedExpert)
        active += p / lin.count * m.moe.experts_per_token;
      else
        active += p;
    }
    // gpt-oss: GptOssAttention.sinks, one logit per head.
    std::int64_t qk = qk_norm_params(m);
    if (m.model_type == "gemma4_text")  // q_norm over the layer's head width; k_norm unless KV-shared
      qk = m.layer_head_dim(l) * (m.is_kv_shared_layer(l) ? 1 : 2);
    const std::int64_t mixer_extra =
        (m.hybrid.mixer(l) == MixerKind::kAttention ? qk + (m.attention_sinks ? m.num_heads : 0) : 0) +
        mixer_params(m, l);
    c.attention += mixer_extra;
    active += mixer_extra;
    if (m.is_cross_attention_layer(l)) {
      // MllamaCrossAttentionDecoderLayer: q_norm and k_norm (RMSNorm over head_dim) and the two
      // scalar tanh gates, cross_attn_attn_gate and cross_attn_mlp_gate.
      c.attention += 2 * m.head_dim + 1;
      c.mlp += 1;
      active += 2 * m.head_dim + 2;
    }
    c.norms += layer_norm_count(m, l) * norm_params(m, h);
    active += layer_norm_count(m, l) * norm_params(m, h);
    if (m.moe_beside_mlp && m.moe.is_moe_layer(l)) {
      // Gemma4TextRouter.scale (hidden) and per_expert_scale (experts); the MoE branch's
      // post_feedforward_layernorm_1/_2 and pre_feedforward_layernorm_2.
      c.mlp += h + m.moe.num_experts;
      active += h + m.moe.num_experts;
      c.norms += 3 * h;
      active += 3 * h;
    }
    if (m.per_layer_input_dim > 0) {  // post_per_layer_input_norm
      c.norms += h;
      active += h;
    }
    if (m.altup_inputs > 0) {
      // Gemma 3n: AltUp's router_norm and Laurel's post_laurel_norm; AltUp's correct_output_scale
      // (a hidden-size Parameter).
      c.norms += 2 * h;
      c.mlp += h;
      active += 3 * h;
    }
  }
  if (m.altup_inputs > 0) {
    // Gemma3nTextModel's altup_projections and altup_unembed_projections: n - 1 each, hidden x hidden.
    const std::int64_t proj = 2 * (m.altup_inputs - 1) * h * h;
    c.mlp += proj;
    active += proj;
  }
  if (m.per_layer_input_dim > 0) {
    // Gemma 4 PLE: embed_tokens_per_layer (vocab_size_per_layer_input x layers x dim),
    // per_layer_model_projection (hidden -> layers x dim) and per_layer_projection_norm (dim).
    const std::int64_t packed = static_cast<std::int64_t>(m.num_layers) * m.per_layer_input_dim;
    c.per_layer_embedding = m.per_layer_input_vocab * packed + h * packed + m.per_layer_input_dim;
    active += c.per_layer_embedding;
  }
  c.norms += norm_params(m, h);  // final norm
  active += norm_params(m, h);
  // An embedding model is loaded as AutoModel (Qwen3Model, MistralModel): no lm_head at all.
  c.lm_head = m.tie_word_embeddings || m.decoder_embedding ? 0 : m.vocab_size * h + (m.lm_head_bias ? m.vocab_size : 0);
  active += c.lm_head;
  const VisionCounts vc = count_vision_parameters(m.vision, h);
  c.vision = vc.tower;
  c.projector = vc.projector;
  const VisionCounts ac = count_audio_parameters(m.audio, h);
  c.audio = ac.tower + ac.projector;
  c.total = c.embedding + c.position_embedding + c.attention + c.mlp + c.norms + c.lm_head + c.vision + c.projector +
            c.audio + c.per_layer_embedding;
  c.active_per_token = active;
  return c;
}

}  // namespace

std::string to_string(Activation a) {
  switch (a) {
    case Activation::kSilu: return "silu";
    case Activation::kGelu: return "gelu";
    case Activation::kGeluTanh: return "gelu_pytorch_tanh";
    case Activation::kRelu: return "relu";
    case Activation::kRelu2: return "relu2";
  }
  return "?";
}

std::string to_string(NormKind n) { return n == NormKind::kRmsNorm ? "rmsnorm" : "layernorm"; }

}  // namespace memplan

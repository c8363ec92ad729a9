#include "io/model/model_source_wrappers.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include <fmt/format.h>

namespace memplan::io {

using nlohmann::json;

namespace {

Error wrap_error(const std::string& origin, std::string msg, std::string suggestion = {}) {
  Error e = make_error(ErrorCode::kInvalidConfig, std::move(msg), std::move(suggestion));
  e.where = SourceLocation{origin, 0, 0};
  return e;
}

const json* field(const json& j, const char* name) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// A non-negative integer up to 2^40 (as model_source.cpp's reader), or the fallback when absent.
Result<std::int64_t> integer(const json& j, const char* name, const std::string& where,
                             std::optional<std::int64_t> fallback = std::nullopt) {
  constexpr std::int64_t kMax = std::int64_t{1} << 40;
  const json* v = field(j, name);
  if (!v) {
    if (fallback) return *fallback;
    return wrap_error(where, fmt::format("missing \"{}\"", name));
  }
  double d = 0;
  if (v->is_number_integer() || v->is_number_unsigned()) {
    if (v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(kMax))
      return wrap_error(where, fmt::format("\"{}\" is out of range", name));
    const std::int64_t n = v->is_number_unsigned() ? static_cast<std::int64_t>(v->get<std::uint64_t>()) : v->get<std::int64_t>();
    if (n < 0) return wrap_error(where, fmt::format("\"{}\" must not be negative, got {}", name, n));
    if (n > kMax) return wrap_error(where, fmt::format("\"{}\" is out of range: {}", name, n));
    return n;
  }
  if (v->is_number_float()) d = v->get<double>();
  if (!v->is_number_float() || std::floor(d) != d || !(std::fabs(d) <= static_cast<double>(kMax)))
    return wrap_error(where, fmt::format("\"{}\" must be an integer", name));
  if (d < 0) return wrap_error(where, fmt::format("\"{}\" must not be negative, got {}", name, d));
  return static_cast<std::int64_t>(d);
}

Result<std::optional<bool>> boolean(const json& j, const char* name, const std::string& where) {
  const json* v = field(j, name);
  if (!v) return std::optional<bool>();
  if (!v->is_boolean()) return wrap_error(where, fmt::format("\"{}\" must be true or false", name));
  return std::optional<bool>(v->get<bool>());
}

Result<std::vector<int>> int_list(const json& j, const char* name, const std::string& where, bool& present) {
  std::vector<int> out;
  const json* v = field(j, name);
  present = v != nullptr;
  if (!v) return out;
  if (!v->is_array()) return wrap_error(where, fmt::format("\"{}\" must be a list of integers", name));
  if (v->size() > 4096) return wrap_error(where, fmt::format("\"{}\" has {} entries; at most 4096", name, v->size()));
  for (const auto& item : *v) {
    if (item.is_boolean()) {  // no_rope_layers may be written as booleans
      out.push_back(item.get<bool>() ? 1 : 0);
      continue;
    }
    MEMPLAN_TRY(std::int64_t n, integer(json{{"v", item}}, "v", where));
    out.push_back(static_cast<int>(std::min<std::int64_t>(n, std::numeric_limits<int>::max())));
  }
  return out;
}

int narrow(std::int64_t v) { return static_cast<int>(std::min<std::int64_t>(v, 1 << 30)); }

}  // namespace

Result<VisionSpec> parse_qwen3_vl_vision(const json& vc, const std::string& origin, std::int64_t& out_hidden,
                                         bool deepstack_by_default) {
  VisionSpec v;
  const std::string where = origin + " vision_config";
  v.kind = VisionKind::kQwen3Vl;
  // Qwen3VLVisionConfig defaults (transformers 4.57).
  MEMPLAN_TRY(std::int64_t depth, integer(vc, "depth", where, 27));
  MEMPLAN_TRY(v.hidden_size, integer(vc, "hidden_size", where, 1152));
  MEMPLAN_TRY(v.intermediate_size, integer(vc, "intermediate_size", where, 4304));
  MEMPLAN_TRY(std::int64_t heads, integer(vc, "num_heads", where, 16));
  MEMPLAN_TRY(v.patch_size, integer(vc, "patch_size", where, 16));
  MEMPLAN_TRY(std::int64_t tps, integer(vc, "temporal_patch_size", where, 2));
  MEMPLAN_TRY(std::int64_t merge, integer(vc, "spatial_merge_size", where, 2));
  MEMPLAN_TRY(std::int64_t chans, integer(vc, "in_channels", where, 3));
  MEMPLAN_TRY(out_hidden, integer(vc, "out_hidden_size", where, 3584));
  MEMPLAN_TRY(v.num_position_embeddings, integer(vc, "num_position_embeddings", where, 2304));
  bool present = false;
  MEMPLAN_TRY(v.deepstack_indexes, int_list(vc, "deepstack_visual_indexes", where, present));
  if (!present && deepstack_by_default) v.deepstack_indexes = {8, 16, 24};
  if (chans != 3) return wrap_error(origin, fmt::format("vision_config \"in_channels\" = {} is not modelled (3)", chans));
  if (const json* act = field(vc, "hidden_act"); act && !(act->is_string() && act->get<std::string>() == "gelu_pytorch_tanh"))
    return wrap_error(origin, "vision_config \"hidden_act\" is not modelled (Qwen3-VL uses gelu_pytorch_tanh)");
  v.depth = narrow(depth);
  v.num_heads = narrow(heads);
  v.temporal_patch_size = narrow(tps);
  v.spatial_merge_size = narrow(merge);
  if (v.depth <= 0) return wrap_error(origin, fmt::format("vision_config depth = {} must be positive", v.depth));
  for (const int i : v.deepstack_indexes)
    if (i < 0 || i >= v.depth)
      return wrap_error(origin, fmt::format("vision_config \"deepstack_visual_indexes\" names block {}, outside 0..{}", i,
                                            v.depth - 1));
  // fast_pos_embed_interpolate reads the table as a square grid of int(sqrt(n)) per side.
  const auto side = static_cast<std::int64_t>(std::sqrt(static_cast<double>(v.num_position_embeddings)));
  if (v.num_position_embeddings <= 0 || side * side != v.num_position_embeddings)
    return wrap_error(origin, fmt::format("vision_config \"num_position_embeddings\" = {} must be a positive square",
                                          v.num_position_embeddings));
  return v;
}

Result<VisionSpec> parse_llama4_vision(const json& vc, const std::string& origin, std::int64_t& out_dim) {
  VisionSpec v;
  const std::string where = origin + " vision_config";
  v.kind = VisionKind::kLlama4;
  // Llama4VisionConfig defaults (transformers 4.51+).
  MEMPLAN_TRY(std::int64_t depth, integer(vc, "num_hidden_layers", where, 34));
  MEMPLAN_TRY(v.hidden_size, integer(vc, "hidden_size", where, 768));
  MEMPLAN_TRY(v.intermediate_size, integer(vc, "intermediate_size", where, 5632));
  MEMPLAN_TRY(std::int64_t heads, integer(vc, "num_attention_heads", where, 16));
  MEMPLAN_TRY(v.image_size, integer(vc, "image_size", where, 448));
  MEMPLAN_TRY(v.patch_size, integer(vc, "patch_size", where, 14));
  MEMPLAN_TRY(std::int64_t chans, integer(vc, "num_channels", where, 3));
  MEMPLAN_TRY(v.projector_input_dim, integer(vc, "projector_input_dim", where, 4096));
  MEMPLAN_TRY(v.projector_output_dim, integer(vc, "projector_output_dim", where, 4096));
  MEMPLAN_TRY(out_dim, integer(vc, "vision_output_dim", where, 7680));
  if (chans != 3) return wrap_error(origin, fmt::format("vision_config \"num_channels\" = {} is not modelled (3)", chans));
  v.depth = narrow(depth);
  v.num_heads = narrow(heads);
  v.temporal_patch_size = 1;
  // pixel_shuffle_ratio (0.5 in every released config): the adapter folds (1 / ratio)^2 patches
  // into one feature; kept as spatial_merge_size = 1 / ratio, which must be a whole number.
  double ratio = 0.5;
  if (const json* r = field(vc, "pixel_shuffle_ratio"); r && !r->is_null()) {
    if (!r->is_number()) return wrap_error(origin, "vision_config \"pixel_shuffle_ratio\" must be a number");
    ratio = r->get<double>();
  }
  const double inverse = ratio > 0.0 ? 1.0 / ratio : 0.0;
  if (!(ratio > 0.0 && ratio <= 1.0) || std::abs(inverse - std::round(inverse)) > 1e-9)
    return wrap_error(origin, fmt::format("vision_config \"pixel_shuffle_ratio\" {} is not modelled (1 / ratio must be "
                                          "a whole number: 0.5 in every Llama 4 checkpoint)", ratio));
  v.spatial_merge_size = static_cast<int>(std::lround(inverse));
  if (v.depth <= 0) return wrap_error(origin, fmt::format("vision_config num_hidden_layers = {} must be positive", v.depth));
  if (v.patch_size <= 0 || v.image_size % v.patch_size != 0)
    return wrap_error(origin, fmt::format("vision_config \"image_size\" {} must be a multiple of \"patch_size\" {}",
                                          v.image_size, v.patch_size));
  if ((v.image_size / v.patch_size) % v.spatial_merge_size != 0)
    return wrap_error(origin, fmt::format("vision_config: the {} patches per tile side do not divide by 1 / "
                                          "pixel_shuffle_ratio ({})", v.image_size / v.patch_size, v.spatial_merge_size));
  return v;
}

Status read_llama4_text(const json& j, ModelSpec& m, const std::string& origin) {
  // Llama4TextDecoderLayer: a layer in moe_layers has Llama4TextMoe (num_local_experts routed
  // experts of intermediate_size, a shared expert of the same width, a bias-free router); the
  // others Llama4TextMLP(intermediate_size_mlp).
  MEMPLAN_TRY(std::int64_t expert, integer(j, "intermediate_size", origin, 8192));
  MEMPLAN_TRY(std::int64_t dense, integer(j, "intermediate_size_mlp", origin, 16384));
  MEMPLAN_TRY(std::int64_t experts, integer(j, "num_local_experts", origin, 16));
  MEMPLAN_TRY(std::int64_t top_k, integer(j, "num_experts_per_tok", origin, 1));
  MEMPLAN_TRY(std::int64_t step, integer(j, "interleave_moe_layer_step", origin, 1));
  m.intermediate_size = dense;
  m.moe.num_experts = narrow(experts);
  m.moe.experts_per_token = narrow(top_k);
  m.moe.expert_intermediate_size = expert;
  m.moe.num_shared_experts = 1;
  m.moe.shared_intermediate_size = expert;
  m.moe.router_bias = false;
  const int n = m.num_layers;
  bool present = false;
  MEMPLAN_TRY(std::vector<int> moe_layers, int_list(j, "moe_layers", origin, present));
  if (!present) {
    // Llama4TextConfig: list(range(step - 1, num_hidden_layers, step)).
    if (step <= 0) return wrap_error(origin, "\"interleave_moe_layer_step\" must be positive, got 0");
    for (std::int64_t l = step - 1; l < n; l += step) moe_layers.push_back(static_cast<int>(l));
  }
  for (const int l : moe_layers)
    if (l < 0 || l >= n) return wrap_error(origin, fmt::format("\"moe_layers\" names layer {}, outside 0..{}", l, n - 1));
  // MoeSpec marks MoE layers by exclusion: every layer not listed is a dense one.
  m.moe.layer_freq = 1;
  m.moe.layer_freq_offset = 0;
  m.moe.dense_layers.clear();
  for (int l = 0; l < n; ++l)
    if (std::find(moe_layers.begin(), moe_layers.end(), l) == moe_layers.end()) m.moe.dense_layers.push_back(l);
  // no_rope_layers[i] == 0: layer i is a NoPE layer attending in full; else a rotary layer with
  // chunked local attention. Default: every no_rope_layer_interval-th layer (from the interval's last) is NoPE.
  MEMPLAN_TRY(std::vector<int> rope, int_list(j, "no_rope_layers", origin, present));
  if (!present || rope.empty()) {
    MEMPLAN_TRY(std::int64_t interval, integer(j, "no_rope_layer_interval", origin, 4));
    if (interval <= 0) return wrap_error(origin, "\"no_rope_layer_interval\" must be positive, got 0");
    rope.clear();
    for (int l = 0; l < n; ++l) rope.push_back((l + 1) % interval != 0 ? 1 : 0);
  }
  if (static_cast<int>(rope.size()) != n)
    return wrap_error(origin, fmt::format("\"no_rope_layers\" lists {} layers, \"num_hidden_layers\" is {}", rope.size(), n));
  m.nope_layers.clear();
  for (int l = 0; l < n; ++l)
    if (rope[static_cast<std::size_t>(l)] == 0) m.nope_layers.push_back(l);
  MEMPLAN_TRY(m.attention_chunk_size, integer(j, "attention_chunk_size", origin, 8192));
  if (m.attention_chunk_size <= 0)
    return wrap_error(origin, fmt::format("\"attention_chunk_size\" must be positive, got {}", m.attention_chunk_size));
  MEMPLAN_TRY(auto qk, boolean(j, "use_qk_norm", origin));
  m.qk_l2_norm = qk.value_or(true);
  // For memory a chunked layer is a windowed one whose window is the chunk: under eager attention
  // its scores are (b, heads, s, s) like a full layer's, beside a second (b, 1, s, s) mask built
  // every forward; under SDPA transformers materializes its mask (and repeats K/V) once s reaches
  // attention_chunk_size, as it does a sliding layer's at sliding_window (masking_utils: the
  // same _ignore_causal_mask_sdpa test with local_size). So the rotary layers are carried as the
  // sliding kind, the NoPE layers as the full ones (docs/models.md#llama-4).
  m.sliding_window = m.attention_chunk_size;
  m.full_attention_layers = m.nope_layers;
  if (static_cast<int>(m.nope_layers.size()) == n) {
    m.sliding_window = 0;
    m.full_attention_layers.clear();
  }
  return Ok{};
}

Result<VisionSpec> parse_pixtral_vision(const json& vc, const json& top, const std::string& origin) {
  VisionSpec v;
  const std::string where = origin + " vision_config";
  v.kind = VisionKind::kPixtral;
  // PixtralVisionConfig and Mistral3Config defaults (transformers 4.50+).
  MEMPLAN_TRY(std::int64_t depth, integer(vc, "num_hidden_layers", where, 24));
  MEMPLAN_TRY(v.hidden_size, integer(vc, "hidden_size", where, 1024));
  MEMPLAN_TRY(v.intermediate_size, integer(vc, "intermediate_size", where, 4096));
  MEMPLAN_TRY(std::int64_t heads, integer(vc, "num_attention_heads", where, 16));
  MEMPLAN_TRY(v.image_size, integer(vc, "image_size", where, 1024));
  MEMPLAN_TRY(v.patch_size, integer(vc, "patch_size", where, 16));
  MEMPLAN_TRY(std::int64_t chans, integer(vc, "num_channels", where, 3));
  MEMPLAN_TRY(std::int64_t merge, integer(top, "spatial_merge_size", origin, 2));
  MEMPLAN_TRY(auto bias, boolean(top, "multimodal_projector_bias", origin));
  if (chans != 3) return wrap_error(origin, fmt::format("vision_config \"num_channels\" = {} is not modelled (3)", chans));
  // vision_feature_layer: one index (-1) or a list whose hidden states are concatenated.
  // Each index picks one of the tower's depth + 1 hidden states (embeddings, then every block).
  std::vector<json> picks;
  if (const json* fl = field(top, "vision_feature_layer"); fl && fl->is_array()) {
    if (fl->empty()) return wrap_error(origin, "\"vision_feature_layer\" must not be an empty list");
    picks.assign(fl->begin(), fl->end());
  } else if (fl) {
    picks.push_back(*fl);
  }
  for (const json& p : picks) {
    if (!p.is_number_integer())
      return wrap_error(origin, "\"vision_feature_layer\" must be an integer or a list of integers");
    const std::int64_t i = p.get<std::int64_t>();
    if (i > depth || i < -(depth + 1))
      return wrap_error(origin, fmt::format("\"vision_feature_layer\" {} is outside the tower's {} hidden states", i,
                                            depth + 1));
  }
  if (static_cast<std::int64_t>(picks.size()) > depth + 1)
    return wrap_error(origin, fmt::format("\"vision_feature_layer\" lists {} hidden states; the tower has {}",
                                          picks.size(), depth + 1));
  const std::int64_t feature_layers = picks.empty() ? 1 : static_cast<std::int64_t>(picks.size());
  v.depth = narrow(depth);
  v.num_heads = narrow(heads);
  v.spatial_merge_size = narrow(merge);
  v.temporal_patch_size = 1;
  v.projector_bias = bias.value_or(false);
  v.projector_input_dim = v.hidden_size * feature_layers;
  if (v.depth <= 0) return wrap_error(origin, fmt::format("vision_config num_hidden_layers = {} must be positive", v.depth));
  if (v.patch_size <= 0) return wrap_error(origin, "vision_config \"patch_size\" must be positive");
  return v;
}

Result<VisionSpec> parse_gemma4_vision(const json& vc, const std::string& origin) {
  VisionSpec v;
  const std::string where = origin + " vision_config";
  v.kind = VisionKind::kGemma4;
  // Gemma4VisionConfig defaults (transformers 5.5+).
  MEMPLAN_TRY(std::int64_t depth, integer(vc, "num_hidden_layers", where, 16));
  MEMPLAN_TRY(v.hidden_size, integer(vc, "hidden_size", where, 768));
  MEMPLAN_TRY(v.intermediate_size, integer(vc, "intermediate_size", where, 3072));
  MEMPLAN_TRY(std::int64_t heads, integer(vc, "num_attention_heads", where, 12));
  MEMPLAN_TRY(std::int64_t kv_heads, integer(vc, "num_key_value_heads", where, heads));
  MEMPLAN_TRY(std::int64_t head_dim, integer(vc, "head_dim", where, 64));
  MEMPLAN_TRY(v.patch_size, integer(vc, "patch_size", where, 16));
  MEMPLAN_TRY(v.num_position_embeddings, integer(vc, "position_embedding_size", where, 10240));
  if (const json* act = field(vc, "hidden_activation");
      act && !(act->is_string() && act->get<std::string>() == "gelu_pytorch_tanh"))
    return wrap_error(origin, "vision_config \"hidden_activation\" is not modelled (Gemma 4 uses gelu_pytorch_tanh)");
  v.depth = narrow(depth);
  v.num_heads = narrow(heads);
  if (v.depth <= 0) return wrap_error(origin, fmt::format("vision_config num_hidden_layers = {} must be positive", v.depth));
  if (heads > (1 << 16) || head_dim > (1 << 16))  // before their product
    return wrap_error(origin, fmt::format("vision_config has {} heads of {}: implausibly large (at most 65536 each)",
                                          heads, head_dim));
  if (kv_heads != heads || heads * head_dim != v.hidden_size)
    return wrap_error(origin, fmt::format("vision_config has {} heads of {} and {} key/value heads for hidden_size {}; "
                                          "memplan counts Gemma 4's tower with heads x head_dim = hidden_size and as "
                                          "many key/value heads as heads",
                                          heads, head_dim, kv_heads, v.hidden_size));
  if (v.num_position_embeddings <= 0)
    return wrap_error(origin, "vision_config \"position_embedding_size\" must be positive");
  return v;
}

Result<AudioSpec> parse_gemma4_audio(const json& ac, const std::string& origin) {
  AudioSpec a;
  const std::string where = origin + " audio_config";
  // Gemma4AudioConfig defaults (transformers 5.5+).
  MEMPLAN_TRY(std::int64_t depth, integer(ac, "num_hidden_layers", where, 12));
  MEMPLAN_TRY(a.hidden_size, integer(ac, "hidden_size", where, 1024));
  MEMPLAN_TRY(std::int64_t heads, integer(ac, "num_attention_heads", where, 8));
  MEMPLAN_TRY(a.conv_kernel, integer(ac, "conv_kernel_size", where, 5));
  MEMPLAN_TRY(a.output_dims, integer(ac, "output_proj_dims", where, 1536));
  bool present = false;
  MEMPLAN_TRY(std::vector<int> channels, int_list(ac, "subsampling_conv_channels", where, present));
  if (!present) channels = {128, 32};
  if (channels.size() != 2)
    return wrap_error(origin, fmt::format("audio_config \"subsampling_conv_channels\" must list 2 channel counts, got {}",
                                          channels.size()));
  a.conv_channels0 = channels[0];
  a.conv_channels1 = channels[1];
  a.depth = narrow(depth);
  a.num_heads = narrow(heads);
  if (a.depth <= 0) return wrap_error(origin, fmt::format("audio_config num_hidden_layers = {} must be positive", a.depth));
  return a;
}

Status read_gemma4_text(const json& j, ModelSpec& m, const std::string& origin) {
  // Gemma4TextConfig (transformers 5.5+) and its __post_init__: full-attention layers take
  // global_head_dim, and with attention_k_eq_v num_global_key_value_heads.
  MEMPLAN_TRY(m.global_head_dim, integer(j, "global_head_dim", origin, 512));
  MEMPLAN_TRY(std::int64_t global_kv, integer(j, "num_global_key_value_heads", origin, 0));
  MEMPLAN_TRY(auto k_eq_v, boolean(j, "attention_k_eq_v", origin));
  MEMPLAN_TRY(std::int64_t shared, integer(j, "num_kv_shared_layers", origin, 0));
  MEMPLAN_TRY(auto wide, boolean(j, "use_double_wide_mlp", origin));
  MEMPLAN_TRY(m.per_layer_input_dim, integer(j, "hidden_size_per_layer_input", origin, 256));
  MEMPLAN_TRY(m.per_layer_input_vocab, integer(j, "vocab_size_per_layer_input", origin, 262144));
  MEMPLAN_TRY(auto moe, boolean(j, "enable_moe_block", origin));
  m.attention_k_eq_v = k_eq_v.value_or(false);
  m.num_global_kv_heads = m.attention_k_eq_v ? narrow(global_kv) : 0;
  if (m.attention_k_eq_v && global_kv == 0)
    return wrap_error(origin, "\"attention_k_eq_v\" is true but \"num_global_key_value_heads\" is not set",
                      "set num_global_key_value_heads (Gemma 4 31B: 4, 26B A4B: 2)");
  m.kv_shared_layers = narrow(shared);
  m.double_wide_mlp = wide.value_or(false);
  m.v_norm = true;
  if (moe.value_or(false)) {
    // Gemma4TextDecoderLayer: router and experts beside the dense MLP in every layer.
    MEMPLAN_TRY(std::int64_t experts, integer(j, "num_experts", origin));
    MEMPLAN_TRY(std::int64_t top_k, integer(j, "top_k_experts", origin));
    MEMPLAN_TRY(m.moe.expert_intermediate_size, integer(j, "moe_intermediate_size", origin));
    m.moe.num_experts = narrow(experts);
    m.moe.experts_per_token = narrow(top_k);
    m.moe.router_bias = false;
    m.moe_beside_mlp = true;
  }
  return Ok{};
}

Result<VisionSpec> parse_gemma3n_vision(const json& vc, const std::string& origin) {
  // Gemma3nVisionConfig: a TimmWrapper around timm's mobilenetv5_300m_enc (the one architecture
  // Gemma 3n ships), counted from its published total; hidden_size and vocab_size size the
  // Gemma3nMultimodalEmbedder.
  VisionSpec v;
  const std::string where = origin + " vision_config";
  v.kind = VisionKind::kGemma3n;
  if (const json* arch = field(vc, "architecture");
      arch && !(arch->is_string() && arch->get<std::string>() == "mobilenetv5_300m_enc"))
    return wrap_error(origin, fmt::format("vision_config \"architecture\" {} is not modelled (Gemma 3n ships "
                                          "\"mobilenetv5_300m_enc\")", arch->dump()));
  MEMPLAN_TRY(v.hidden_size, integer(vc, "hidden_size", where, 2048));
  MEMPLAN_TRY(v.embed_vocab, integer(vc, "vocab_size", where, 128));
  v.depth = 1;  // one tower, counted whole
  return v;
}

Result<AudioSpec> parse_gemma3n_audio(const json& ac, const std::string& origin) {
  // Gemma3nAudioConfig defaults. The subsampling's input_proj_linear reads sscp_conv_channel_size[1]
  // x (input_feat_size / 4) values: memplan's count takes input_feat_size = channels[0] (128, 128).
  AudioSpec a;
  const std::string where = origin + " audio_config";
  MEMPLAN_TRY(std::int64_t depth, integer(ac, "conf_num_hidden_layers", where, 12));
  MEMPLAN_TRY(a.hidden_size, integer(ac, "hidden_size", where, 1536));
  MEMPLAN_TRY(std::int64_t heads, integer(ac, "conf_num_attention_heads", where, 8));
  MEMPLAN_TRY(a.conv_kernel, integer(ac, "conf_conv_kernel_size", where, 5));
  MEMPLAN_TRY(a.embed_vocab, integer(ac, "vocab_size", where, 128));
  MEMPLAN_TRY(std::int64_t feat, integer(ac, "input_feat_size", where, 128));
  bool present = false;
  MEMPLAN_TRY(std::vector<int> channels, int_list(ac, "sscp_conv_channel_size", where, present));
  if (!present) channels = {128, 32};
  if (channels.size() != 2)
    return wrap_error(origin, fmt::format("audio_config \"sscp_conv_channel_size\" must list 2 channel counts, got {}",
                                          channels.size()));
  if (feat != channels[0])
    return wrap_error(origin, fmt::format("audio_config \"input_feat_size\" {} differs from \"sscp_conv_channel_size\"[0] "
                                          "{}: memplan counts the released layout, where they are equal",
                                          feat, channels[0]));
  a.conv_channels0 = channels[0];
  a.conv_channels1 = channels[1];
  a.output_dims = 0;  // no output_proj
  a.depth = narrow(depth);
  a.num_heads = narrow(heads);
  if (a.depth <= 0) return wrap_error(origin, fmt::format("audio_config conf_num_hidden_layers = {} must be positive", a.depth));
  return a;
}

Status normalize_gemma3n_text(json& t, const std::string& origin) {
  // Gemma3nTextConfig's defaults (the E4B layout) and __post_init__: layer_types with every fifth
  // layer full, intermediate_size one per layer (a list, or one value for all), the first 10
  // layers sparse (0.95) when there are more than 10.
  static const std::pair<const char*, json> kDefaults[] = {
      {"vocab_size", 262400},        {"hidden_size", 2048},          {"intermediate_size", 16384},
      {"num_hidden_layers", 35},     {"num_attention_heads", 8},     {"num_key_value_heads", 2},
      {"head_dim", 256},             {"max_position_embeddings", 32768},
      {"sliding_window", 512},       {"hidden_activation", "gelu_pytorch_tanh"},
      {"final_logit_softcapping", 30.0}};
  // The per-layer widths travel to read_gemma3n_text under a private key; a file's own is not trusted.
  t.erase("_memplan_intermediate_sizes");
  for (const auto& [k, v] : kDefaults)
    if (!t.contains(k) || t[k].is_null()) t[k] = v;
  if (!t["num_hidden_layers"].is_number_integer()) return Ok{};  // the common reader reports it
  const std::int64_t n = t["num_hidden_layers"].get<std::int64_t>();
  if (n <= 0 || n > 4096) return Ok{};
  if (!t.contains("layer_types") || t["layer_types"].is_null()) {
    json types = json::array();
    for (std::int64_t i = 0; i < n; ++i) types.push_back((i + 1) % 5 == 0 ? "full_attention" : "sliding_attention");
    t["layer_types"] = std::move(types);
  }
  if (t["intermediate_size"].is_array()) {
    const json widths = t["intermediate_size"];
    if (widths.size() != static_cast<std::size_t>(n))
      return wrap_error(origin, fmt::format("\"intermediate_size\" lists {} widths, \"num_hidden_layers\" is {}",
                                            widths.size(), n));
    std::int64_t widest = 0;
    for (const json& w : widths) {
      if (!w.is_number_integer() || w.get<std::int64_t>() <= 0)
        return wrap_error(origin, fmt::format("\"intermediate_size\" lists {}, not a positive integer", w.dump()));
      widest = std::max(widest, w.get<std::int64_t>());
    }
    t["intermediate_size"] = widest;  // the common reader's scalar; the widths go to read_gemma3n_text
    t["_memplan_intermediate_sizes"] = widths;
  }
  return Ok{};
}

Status read_gemma3n_text(const json& j, ModelSpec& m, const std::string& origin) {
  MEMPLAN_TRY(std::int64_t altup, integer(j, "altup_num_inputs", origin, 4));
  MEMPLAN_TRY(std::int64_t active, integer(j, "altup_active_idx", origin, 0));
  MEMPLAN_TRY(m.laurel_rank, integer(j, "laurel_rank", origin, 64));
  MEMPLAN_TRY(std::int64_t shared, integer(j, "num_kv_shared_layers", origin, 15));
  MEMPLAN_TRY(m.per_layer_input_dim, integer(j, "hidden_size_per_layer_input", origin, 256));
  MEMPLAN_TRY(m.per_layer_input_vocab, integer(j, "vocab_size_per_layer_input", origin, 262144));
  if (altup < 1 || altup > 64) return wrap_error(origin, fmt::format("\"altup_num_inputs\" = {} must be between 1 and 64", altup));
  if (active != 0)
    return wrap_error(origin, fmt::format("\"altup_active_idx\" = {} is not modelled (the released models use 0)", active));
  if (m.per_layer_input_dim <= 0) return wrap_error(origin, "\"hidden_size_per_layer_input\" must be positive");
  m.altup_inputs = narrow(altup);
  m.kv_shared_layers = narrow(shared);
  m.v_norm = true;
  m.intermediate_sizes.clear();
  if (const json* w = field(j, "_memplan_intermediate_sizes"))
    for (const json& x : *w) m.intermediate_sizes.push_back(x.get<std::int64_t>());
  m.sparse_mlp_layers.clear();
  if (const json* sp = field(j, "activation_sparsity_pattern")) {
    if (!sp->is_array() || sp->size() != static_cast<std::size_t>(m.num_layers))
      return wrap_error(origin, fmt::format("\"activation_sparsity_pattern\" must list one value per layer ({})",
                                            m.num_layers));
    for (std::size_t l = 0; l < sp->size(); ++l) {
      if (!(*sp)[l].is_number())
        return wrap_error(origin, fmt::format("\"activation_sparsity_pattern\"[{}] is {}, not a number", l, (*sp)[l].dump()));
      if ((*sp)[l].get<double>() > 0.0) m.sparse_mlp_layers.push_back(static_cast<int>(l));
    }
  } else {
    for (int l = 0; l < 10 && m.num_layers > 10; ++l) m.sparse_mlp_layers.push_back(l);
  }
  return Ok{};
}

Status read_dsa_indexer(const json& j, ModelSpec& m, const std::string& origin) {
  // DeepseekV32 (inference/model.py Indexer): defaults of its ModelArgs.
  MEMPLAN_TRY(std::int64_t heads, integer(j, "index_n_heads", origin, 64));
  MEMPLAN_TRY(m.index_head_dim, integer(j, "index_head_dim", origin, 128));
  MEMPLAN_TRY(m.index_topk, integer(j, "index_topk", origin, 2048));
  if (heads <= 0 || m.index_head_dim <= 0 || m.index_topk <= 0)
    return wrap_error(origin, "\"index_n_heads\", \"index_head_dim\" and \"index_topk\" must be positive");
  if (heads > (1 << 12) || m.index_head_dim > (1 << 16) || m.index_topk > (1 << 20))
    return wrap_error(origin, fmt::format("\"index_n_heads\" {}, \"index_head_dim\" {} or \"index_topk\" {} is implausibly "
                                          "large (at most 4096, 65536 and 1048576)",
                                          heads, m.index_head_dim, m.index_topk));
  if (m.q_lora_rank <= 0)
    return wrap_error(origin, "deepseek_v32's indexer reads the query latent: \"q_lora_rank\" must be positive");
  if (m.index_head_dim < m.qk_rope_head_dim)
    return wrap_error(origin, fmt::format("\"index_head_dim\" {} must hold the rotary part (\"qk_rope_head_dim\" {})",
                                          m.index_head_dim, m.qk_rope_head_dim));
  m.index_heads = narrow(heads);
  return Ok{};
}

}  // namespace memplan::io

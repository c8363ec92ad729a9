// Vision towers and projectors of vision-language models (docs/formulas.md#vision-language-models):
// the modules transformers builds in Qwen2VisionTransformerPretrainedModel,
// Qwen2_5_VisionTransformerPretrainedModel and SiglipVisionModel (Gemma 3), their exact parameter
// counts, and what one image becomes under each model's image processor.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "memplan/bytes.hpp"
#include "memplan/model.hpp"

namespace memplan {

namespace {

// LayerNorm (weight + bias) in every tower but Qwen2.5-VL's and Pixtral's RMSNorms.
bool layer_norms(const VisionSpec& v) { return v.kind != VisionKind::kQwen25Vl && v.kind != VisionKind::kPixtral; }

// mllama: rows of the aspect-ratio embedding tables (id 0 is padding).
std::int64_t aspect_rows(const VisionSpec& v) { return static_cast<std::int64_t>(v.max_aspect_ratio_id) + 1; }

std::int64_t norm_numel(const VisionSpec& v) { return layer_norms(v) ? 2 * v.hidden_size : v.hidden_size; }

Error vision_error(const std::string& field, std::int64_t value, const std::string& why) {
  return make_error(ErrorCode::kInvalidConfig, fmt::format("model vision_config {} = {} {}", field, value, why));
}

}  // namespace

std::string to_string(VisionKind k) {
  switch (k) {
    case VisionKind::kNone: return "none";
    case VisionKind::kQwen2Vl: return "qwen2_vl";
    case VisionKind::kQwen25Vl: return "qwen2_5_vl";
    case VisionKind::kSiglip: return "siglip";
    case VisionKind::kMllama: return "mllama";
    case VisionKind::kQwen3Vl: return "qwen3_vl";
    case VisionKind::kLlama4: return "llama4";
    case VisionKind::kGemma4: return "gemma4";
    case VisionKind::kPixtral: return "pixtral";
    case VisionKind::kGemma3n: return "gemma3n";
  }
  return "?";
}

Status validate_vision(const VisionSpec& v) {
  if (!v.enabled()) return Ok{};
  if (v.depth > 1024) return vision_error("depth", v.depth, "must be at most 1024");
  if (v.hidden_size <= 0 || v.hidden_size > (1 << 16)) return vision_error("hidden_size", v.hidden_size, "must be between 1 and 65536");
  if (v.kind == VisionKind::kGemma3n) {  // a fixed timm tower: only the embedder's sizes vary
    if (v.embed_vocab < 0 || v.embed_vocab > (1 << 20)) return vision_error("vocab_size", v.embed_vocab, "must be between 0 and 1048576");
    return Ok{};
  }
  if (v.intermediate_size <= 0 || v.intermediate_size > (1 << 18))
    return vision_error("intermediate_size", v.intermediate_size, "must be between 1 and 262144");
  if (v.num_heads <= 0 || v.hidden_size % v.num_heads != 0)
    return vision_error("num_heads", v.num_heads, fmt::format("must divide hidden_size ({})", v.hidden_size));
  if (v.patch_size <= 0 || v.patch_size > 1024) return vision_error("patch_size", v.patch_size, "must be between 1 and 1024");
  if (v.num_position_embeddings < 0 || v.num_position_embeddings > (1 << 24))
    return vision_error("num_position_embeddings", v.num_position_embeddings, "must be between 0 and 16777216");
  if (v.temporal_patch_size <= 0 || v.temporal_patch_size > 64)
    return vision_error("temporal_patch_size", v.temporal_patch_size, "must be between 1 and 64");
  if (v.spatial_merge_size <= 0 || v.spatial_merge_size > 64)
    return vision_error("spatial_merge_size", v.spatial_merge_size, "must be between 1 and 64");
  if (v.hidden_size * v.spatial_merge_size * v.spatial_merge_size > (1 << 20))
    return vision_error("spatial_merge_size", v.spatial_merge_size,
                        fmt::format("makes the merged width hidden_size x merge^2 larger than 2^20 (hidden_size {})",
                                    v.hidden_size));
  if (v.kind == VisionKind::kMllama) {
    if (v.image_size <= 0 || v.image_size > (1 << 14) || v.image_size % v.patch_size != 0)
      return vision_error("image_size", v.image_size, fmt::format("must be a positive multiple of patch_size ({})", v.patch_size));
    if (v.max_num_tiles <= 0 || v.max_num_tiles > 64) return vision_error("max_num_tiles", v.max_num_tiles, "must be between 1 and 64");
    if (v.max_aspect_ratio_id <= 0 || v.max_aspect_ratio_id > 4096)
      return vision_error("supported_aspect_ratios", v.max_aspect_ratio_id, "(entries) must be between 1 and 4096");
    if (v.global_depth < 0 || v.global_depth > 1024) return vision_error("num_global_layers", v.global_depth, "must be between 0 and 1024");
    if (v.intermediate_layers.size() > 64)
      return vision_error("intermediate_layers_indices", static_cast<std::int64_t>(v.intermediate_layers.size()),
                          "(entries) must be at most 64");
    for (const int i : v.intermediate_layers)
      if (i < 0 || i >= v.depth)
        return vision_error("intermediate_layers_indices", i, fmt::format("must name a local layer (0..{})", v.depth - 1));
  }
  if (v.kind == VisionKind::kSiglip) {
    if (v.image_size <= 0 || v.image_size > (1 << 14) || v.image_size % v.patch_size != 0)
      return vision_error("image_size", v.image_size, fmt::format("must be a positive multiple of patch_size ({})", v.patch_size));
    const std::int64_t side = v.image_size / v.patch_size;
    const auto pooled = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(v.tokens_per_image))));
    if (v.tokens_per_image <= 0 || pooled * pooled != v.tokens_per_image || side % pooled != 0)
      return make_error(ErrorCode::kInvalidConfig,
                        fmt::format("model mm_tokens_per_image = {} must be a square whose side divides the {} "
                                    "patches per image side",
                                    v.tokens_per_image, side));
  }
  return Ok{};
}

std::vector<LinearModule> vision_block_linears(const VisionSpec& v) {
  const std::int64_t h = v.hidden_size, f = v.intermediate_size;
  std::vector<LinearModule> out;
  if (v.kind == VisionKind::kSiglip) {  // SiglipAttention, SiglipMLP
    for (const char* n : {"q_proj", "k_proj", "v_proj"}) out.push_back({n, h, h, true, 1, LinearRole::kAttention});
    out.push_back({"out_proj", h, h, true, 1, LinearRole::kAttention});
    out.push_back({"fc1", h, f, true, 1, LinearRole::kMlp});
    out.push_back({"fc2", f, h, true, 1, LinearRole::kMlp});
    return out;
  }
  if (v.kind == VisionKind::kLlama4) {  // Llama4VisionAttention and Llama4VisionMLP: all with biases
    for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"}) out.push_back({n, h, h, true, 1, LinearRole::kAttention});
    out.push_back({"fc1", h, f, true, 1, LinearRole::kMlp});
    out.push_back({"fc2", f, h, true, 1, LinearRole::kMlp});
    return out;
  }
  if (v.kind == VisionKind::kPixtral || v.kind == VisionKind::kGemma4) {
    // PixtralAttention (q, k, v, o: hidden x hidden, no biases) and PixtralMLP (Mistral's gated
    // MLP, no biases); Gemma4VisionAttention (heads x head_dim = hidden, as many K/V heads as
    // heads) and Gemma4VisionMLP, each a Gemma4ClippableLinear around a bias-free nn.Linear.
    for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"}) out.push_back({n, h, h, false, 1, LinearRole::kAttention});
    out.push_back({"gate_proj", h, f, false, 1, LinearRole::kMlp});
    out.push_back({"up_proj", h, f, false, 1, LinearRole::kMlp});
    out.push_back({"down_proj", f, h, false, 1, LinearRole::kMlp});
    return out;
  }
  // Gemma 3n's MobileNetV5 (timm) has no transformer blocks, and its embedder no Linear a LoRA
  // target name could reach in the tower: nothing to list (the counts are in count_vision_parameters).
  if (v.kind == VisionKind::kGemma3n) return out;
  if (v.kind == VisionKind::kMllama) {  // MllamaVisionAttention (no biases), MllamaVisionMLP
    for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"}) out.push_back({n, h, h, false, 1, LinearRole::kAttention});
    out.push_back({"fc1", h, f, true, 1, LinearRole::kMlp});
    out.push_back({"fc2", f, h, true, 1, LinearRole::kMlp});
    return out;
  }
  // Qwen2-VL VisionAttention / Qwen2.5-VL Qwen2_5_VLVisionAttention / Qwen3VLVisionAttention:
  // one qkv Linear and proj.
  out.push_back({"qkv", h, 3 * h, true, 1, LinearRole::kAttention});
  out.push_back({"proj", h, h, true, 1, LinearRole::kAttention});
  if (v.kind == VisionKind::kQwen3Vl) {  // Qwen3VLVisionMLP: linear_fc1, GELU-tanh, linear_fc2, with biases
    out.push_back({"linear_fc1", h, f, true, 1, LinearRole::kMlp});
    out.push_back({"linear_fc2", f, h, true, 1, LinearRole::kMlp});
  } else if (v.kind == VisionKind::kQwen25Vl) {  // Qwen2_5_VLMLP(bias=True)
    out.push_back({"gate_proj", h, f, true, 1, LinearRole::kMlp});
    out.push_back({"up_proj", h, f, true, 1, LinearRole::kMlp});
    out.push_back({"down_proj", f, h, true, 1, LinearRole::kMlp});
  } else {  // Qwen2-VL VisionMlp: fc1, QuickGELU, fc2
    out.push_back({"fc1", h, f, true, 1, LinearRole::kMlp});
    out.push_back({"fc2", f, h, true, 1, LinearRole::kMlp});
  }
  return out;
}

std::vector<LinearModule> vision_projector_linears(const VisionSpec& v, std::int64_t text_hidden) {
  if (v.kind == VisionKind::kGemma3n) return {};  // Gemma3nMultimodalEmbedder: counted in count_vision_parameters
  if (v.kind == VisionKind::kSiglip) {
    // Gemma3MultiModalProjector.mm_input_projection_weight: a bare Parameter used with matmul.
    LinearModule w{"mm_input_projection_weight", v.hidden_size, text_hidden, false, 1, LinearRole::kMlp};
    w.nn_linear = false;
    return {w};
  }
  if (v.kind == VisionKind::kGemma4)  // Gemma4MultimodalEmbedder.embedding_projection, no bias
    return {{"embedding_projection", v.hidden_size, text_hidden, false, 1, LinearRole::kMlp}};
  if (v.kind == VisionKind::kPixtral) {
    // Mistral3MultiModalProjector: patch_merger.merging_layer (merge^2 x h -> h, no bias), linear_1
    // (h x vision feature layers -> text hidden), GELU, linear_2 (text hidden -> text hidden), both
    // with multimodal_projector_bias.
    const std::int64_t merged = v.hidden_size * v.spatial_merge_size * v.spatial_merge_size;
    return {{"patch_merger.merging_layer", merged, v.hidden_size, false, 1, LinearRole::kMlp},
            {"linear_1", v.projector_input_dim, text_hidden, v.projector_bias, 1, LinearRole::kMlp},
            {"linear_2", text_hidden, text_hidden, v.projector_bias, 1, LinearRole::kMlp}};
  }
  if (v.kind == VisionKind::kLlama4)  // Llama4MultiModalProjector.linear_1, no bias
    return {{"linear_1", v.projector_output_dim, text_hidden, false, 1, LinearRole::kMlp}};
  if (v.kind == VisionKind::kMllama)  // MllamaModel.multi_modal_projector: Linear(vision_output_dim, text hidden)
    return {{"multi_modal_projector", mllama_output_dim(v), text_hidden, true, 1, LinearRole::kMlp}};
  // Qwen2VLPatchMerger / Qwen2_5_VLPatchMerger: mlp = Linear(4h, 4h), GELU, Linear(4h, text hidden).
  const std::int64_t m = v.hidden_size * v.spatial_merge_size * v.spatial_merge_size;
  if (v.kind == VisionKind::kQwen3Vl) {
    // Qwen3VLVisionPatchMerger (merger, then one per deepstack_visual_indexes entry in
    // deepstack_merger_list): linear_fc1 (4h, 4h), GELU, linear_fc2 (4h, text hidden), with biases.
    std::vector<LinearModule> out{{"linear_fc1", m, m, true, 1, LinearRole::kMlp},
                                  {"linear_fc2", m, text_hidden, true, 1, LinearRole::kMlp}};
    for (std::size_t i = 0; i < v.deepstack_indexes.size(); ++i) {
      out.push_back({fmt::format("deepstack_merger_list.{}.linear_fc1", i), m, m, true, 1, LinearRole::kMlp});
      out.push_back({fmt::format("deepstack_merger_list.{}.linear_fc2", i), m, text_hidden, true, 1, LinearRole::kMlp});
    }
    return out;
  }
  return {{"mlp.0", m, m, true, 1, LinearRole::kMlp}, {"mlp.2", m, text_hidden, true, 1, LinearRole::kMlp}};
}

VisionCounts count_vision_parameters(const VisionSpec& v, std::int64_t text_hidden) {
  VisionCounts c;
  if (!v.enabled()) return c;
  const std::int64_t h = v.hidden_size;
  if (v.kind == VisionKind::kGemma3n) {
    // timm's mobilenetv5_300m_enc (the only architecture Gemma 3n ships): 294,284,096 parameters,
    // keras-hub's mobilenetv5_300m_enc_gemma3n preset (keras-team/keras-hub@b93373ad,
    // keras_hub/src/models/mobilenetv5/mobilenetv5_presets.py). Gemma3nMultimodalEmbedder:
    // embedding (vocab_size x h), hard_ and soft_embedding_norm (h each), embedding_projection
    // (h -> text hidden); embedding_post_projection_norm has no weight.
    c.tower = 294'284'096;
    c.projector = v.embed_vocab * h + 2 * h + h * text_hidden;
    return c;
  }
  // Gemma4VisionEncoderLayer: four RMSNorms (weight only), q_norm and k_norm over head_dim (v_norm
  // has no weight).
  std::int64_t block = v.kind == VisionKind::kGemma4 ? 4 * h + 2 * (h / v.num_heads) : 2 * norm_numel(v);
  for (const auto& l : vision_block_linears(v)) block += l.weight_params() + l.bias_params();
  c.tower = block * v.depth;
  if (v.kind == VisionKind::kMllama) {
    // MllamaVisionModel: the global layers carry gate_attn and gate_ffn; patch_embedding is a
    // Conv2d without bias; class_embedding; gated_positional_embedding (embedding, gate, and a
    // tile_embedding of max_num_tiles x positions x h per aspect-ratio id); pre- and
    // post-tile positional embeddings (max_num_tiles x h per id, and a gate); layernorm_pre/post.
    const std::int64_t T = v.max_num_tiles, P = v.tile_positions(), A = aspect_rows(v);
    c.tower += (block + 2) * v.global_depth;
    c.tower += v.patch_values() * h + h;
    c.tower += P * h + 1 + A * T * P * h;
    c.tower += 2 * (A * T * h + 1);
    c.tower += 4 * h;
  } else if (v.kind == VisionKind::kSiglip) {
    const std::int64_t side = v.image_size / v.patch_size;
    c.tower += v.patch_values() * h + h;  // patch_embedding Conv2d with bias
    c.tower += side * side * h;           // position_embedding
    c.tower += 2 * h;                     // post_layernorm
    c.projector = h;                      // mm_soft_emb_norm (Gemma3RMSNorm)
  } else if (v.kind == VisionKind::kLlama4) {
    // Llama4VisionModel: patch_embedding (Unfold + Linear(3 x p x p, h), no bias), class_embedding,
    // positional_embedding_vlm ((image/patch)^2 + 1 rows), layernorm_pre/post, and the
    // vision_adapter's pixel-shuffle MLP: fc1 (intermediate_size -> projector_input_dim) and fc2
    // (projector_output_dim -> projector_output_dim), no biases.
    const std::int64_t side = v.image_size / v.patch_size;
    c.tower += v.patch_values() * h + h + (side * side + 1) * h + 4 * h;
    c.tower += v.intermediate_size * v.projector_input_dim + v.projector_output_dim * v.projector_output_dim;
  } else if (v.kind == VisionKind::kPixtral) {
    // PixtralVisionModel: patch_conv (Conv2d, no bias) and ln_pre (RMSNorm); no post-norm (the
    // rotary table is a buffer). The projector's RMSNorm over the vision width.
    c.tower += v.patch_values() * h + h;
    c.projector = h;
  } else if (v.kind == VisionKind::kGemma4) {
    // Gemma4VisionPatchEmbedder: input_proj Linear(3 x p x p, h), no bias, and the
    // position_embedding_table (2, position_embedding_size, h). std_bias / std_scale (standardize)
    // are buffers; the pooler and the embedder's pre-projection norm have no weights.
    c.tower += v.patch_values() * h + 2 * v.num_position_embeddings * h;
  } else if (v.kind == VisionKind::kQwen3Vl) {
    // patch_embed.proj Conv3d with a bias; pos_embed (num_position_embeddings x h). The merger's
    // LayerNorm is over h; each DeepStack merger's (use_postshuffle_norm) over 4h.
    c.tower += v.patch_values() * h + h + v.num_position_embeddings * h;
    const std::int64_t m = h * v.spatial_merge_size * v.spatial_merge_size;
    c.projector = 2 * h + 2 * m * static_cast<std::int64_t>(v.deepstack_indexes.size());
  } else if (v.kind != VisionKind::kMllama) {
    c.tower += v.patch_values() * h;      // patch_embed.proj Conv3d, no bias
    c.projector = norm_numel(v);          // merger.ln_q
  }
  for (const auto& l : vision_projector_linears(v, text_hidden)) c.projector += l.weight_params() + l.bias_params();
  return c;
}

VisionCounts count_audio_parameters(const AudioSpec& a, std::int64_t text_hidden) {
  // Gemma4AudioModel (docs/models.md#gemma-4): the subsampling convolutions (two bias-free 3 x 3
  // Conv2d, each with a bias-free LayerNorm) and input_proj_linear ((channels0 / 4) x channels1 ->
  // h); per Conformer layer two feed-forward modules (h -> 4h -> h, two RMSNorms each), attention
  // (q, k, v, post and relative_k_proj, h x h; per_dim_scale over head_dim), the light convolution
  // (linear_start h -> 2h, depthwise kernel x h, linear_end, two RMSNorms) and three RMSNorms;
  // output_proj (h -> output_proj_dims, with a bias). embed_audio: Linear(output_proj_dims, text
  // hidden) after a weightless norm.
  // Gemma3nAudioEncoder has the same subsampling and Conformer layers and no output_proj
  // (output_dims 0); its embed_audio is a Gemma3nMultimodalEmbedder (embedding rows x h, two
  // norms, h -> text hidden).
  VisionCounts c;
  if (!a.enabled()) return c;
  const std::int64_t h = a.hidden_size, c0 = a.conv_channels0, c1 = a.conv_channels1;
  const std::int64_t subsample = 9 * c0 + c0 + 9 * c0 * c1 + c1 + (c0 / 4) * c1 * h;
  const std::int64_t ffw = 2 * (2 * 4 * h * h + 2 * h);
  const std::int64_t attn = 5 * h * h + h / a.num_heads;
  const std::int64_t conv = 2 * h * h + h * h + a.conv_kernel * h + 2 * h;
  c.tower = subsample + (ffw + attn + conv + 3 * h) * a.depth + h * a.output_dims + a.output_dims;
  c.projector = a.output_dims > 0 ? a.output_dims * text_hidden : a.embed_vocab * h + 2 * h + h * text_hidden;
  return c;
}

std::int64_t mllama_output_dim(const VisionSpec& v) {
  return v.hidden_size * (1 + static_cast<std::int64_t>(v.intermediate_layers.size()));
}

std::int64_t default_image_side(const VisionSpec& v) {
  if (v.kind == VisionKind::kMllama) return v.image_size;  // one tile; the tensor has max_num_tiles anyway
  // SigLIP resizes every image to its fixed size. For Qwen the processor keeps the resolution up
  // to max_pixels = 12,845,056; memplan assumes LLaMA-Factory's image_max_pixels default, 768 x 768.
  return v.kind == VisionKind::kSiglip ? v.image_size : 768;
}

std::pair<std::int64_t, std::int64_t> llama4_tile_grid(std::int64_t height, std::int64_t width, std::int64_t tile,
                                                       int max_patches) {
  // find_supported_resolutions: every (h, w) grid of at most max_patches tiles, grouped by aspect
  // ratio h / w in the order first met (chunks from max_patches down, factors ascending).
  std::vector<std::pair<double, std::vector<std::pair<std::int64_t, std::int64_t>>>> by_ratio;
  for (int chunk = max_patches; chunk >= 1; --chunk)
    for (int f = 1; f <= chunk; ++f) {
      if (chunk % f != 0) continue;
      const double ratio = static_cast<double>(f) / static_cast<double>(chunk / f);
      auto it = std::find_if(by_ratio.begin(), by_ratio.end(), [ratio](const auto& e) { return e.first == ratio; });
      if (it == by_ratio.end()) it = by_ratio.insert(by_ratio.end(), {ratio, {}});
      it->second.emplace_back(f, chunk / f);
    }
  // get_best_fit (resize_to_max_canvas false), in float32 as torch divides an int64 tensor: the
  // smallest scale >= 1 that fits without distortion, else the largest below 1; among the
  // canvases of that scale the smallest area (the first of equal ones).
  std::vector<std::pair<std::int64_t, std::int64_t>> grids;
  for (const auto& [ratio, list] : by_ratio) grids.insert(grids.end(), list.begin(), list.end());
  const auto scale = [&](const std::pair<std::int64_t, std::int64_t>& r) {
    const float sh = static_cast<float>(r.first * tile) / static_cast<float>(height);
    const float sw = static_cast<float>(r.second * tile) / static_cast<float>(width);
    return sh > sw ? sw : sh;
  };
  bool up = false;
  float best = 0.0F;
  for (const auto& r : grids) {
    const float s = scale(r);
    if (s >= 1.0F && (!up || s < best)) best = s, up = true;
  }
  if (!up)
    for (const auto& r : grids) best = std::max(best, scale(r));
  std::pair<std::int64_t, std::int64_t> out{1, 1};
  std::int64_t area = -1;
  for (const auto& r : grids)
    if (scale(r) == best && (area < 0 || r.first * r.second < area)) {
      out = r;
      area = r.first * r.second;
    }
  return out;
}

ImageGrid image_grid(const VisionSpec& v, std::int64_t height, std::int64_t width) {
  ImageGrid g;
  if (!v.enabled() || height <= 0 || width <= 0) return g;
  if (v.kind == VisionKind::kMllama) {
    // MllamaImageProcessor fits the image to a canvas of at most max_num_tiles tiles, but
    // pack_images always gives every image max_num_tiles tiles (unused ones zero): the tower
    // runs on tiles x positions padded to a multiple of 8, and one <|image|> token stands for the
    // image in the text (its features reach the text through cross-attention).
    g.height = height;
    g.width = width;
    g.rows = g.cols = v.image_size / v.patch_size;
    g.patches = checked_mul(v.max_num_tiles, v.tile_positions_padded());
    g.tokens = 1;
    return g;
  }
  if (v.kind == VisionKind::kSiglip) {
    // Gemma3ImageProcessor resizes to image_size x image_size (pan-and-scan off); the projector
    // average-pools the patch grid down to mm_tokens_per_image.
    g.height = g.width = v.image_size;
    g.rows = g.cols = v.image_size / v.patch_size;
    g.patches = g.rows * g.cols;
    g.tokens = v.tokens_per_image;
    return g;
  }
  if (v.kind == VisionKind::kLlama4) {
    // Llama4ImageProcessorFast (docs/formulas.md#llama-4-vision): the canvas of whole tiles of
    // image_size pixels (at most max_patches = 16) the image fits without distortion, then one
    // global tile more when there are several. rows / cols: patches down and across the canvas;
    // patches: rows through the tower (each tile's patches and its class token); tokens: the
    // features after the pixel shuffle (spatial_merge_size = 1 / pixel_shuffle_ratio).
    const auto [tr, tc] = llama4_tile_grid(height, width, v.image_size);
    const std::int64_t side = v.image_size / v.patch_size, merge = std::max(1, v.spatial_merge_size);
    const std::int64_t tiles = tr * tc + (tr * tc > 1 ? 1 : 0);
    g.height = tr * v.image_size;
    g.width = tc * v.image_size;
    g.rows = tr * side;
    g.cols = tc * side;
    g.patches = checked_mul(tiles, side * side + 1);
    g.tokens = checked_mul(tiles, (side / merge) * (side / merge));
    return g;
  }
  if (v.kind == VisionKind::kPixtral) {
    // PixtralImageProcessor (docs/formulas.md#pixtral): scaled down (floor) to fit longest_edge,
    // taken to be vision_config.image_size (Mistral Small 3.1: 1540 both), then each side rounded
    // up to whole units of patch_size x spatial_merge_size: PixtralProcessor (transformers 4.50+,
    // the processor Mistral 3 checkpoints name) passes patch_size * spatial_merge_size to the image
    // processor, so the patch grid is always whole merged patches, one [IMG] each.
    const double hh = static_cast<double>(height), ww = static_cast<double>(width);
    const double edge = static_cast<double>(v.image_size);
    const double ratio = std::max(hh / edge, ww / edge);
    std::int64_t ht = height, wt = width;
    if (ratio > 1.0) {
      ht = static_cast<std::int64_t>(std::floor(hh / ratio));
      wt = static_cast<std::int64_t>(std::floor(ww / ratio));
    }
    const std::int64_t merge = std::max<std::int64_t>(1, v.spatial_merge_size);
    const std::int64_t unit = v.patch_size * merge;
    g.rows = ((std::max<std::int64_t>(ht, 1) - 1) / unit + 1) * merge;
    g.cols = ((std::max<std::int64_t>(wt, 1) - 1) / unit + 1) * merge;
    g.height = g.rows * v.patch_size;
    g.width = g.cols * v.patch_size;
    g.patches = g.rows * g.cols;
    g.tokens = (g.rows / v.spatial_merge_size) * (g.cols / v.spatial_merge_size);
    return g;
  }
  // Qwen2VLImageProcessor smart_resize: each side rounded (half to even, as Python's round) to a
  // multiple of patch x merge, then scaled to stay within [min_pixels, max_pixels].
  const double factor = static_cast<double>(v.patch_size * v.spatial_merge_size);
  // Qwen3-VL's processor: size {shortest_edge: 65536, longest_edge: 16777216}.
  const bool q3 = v.kind == VisionKind::kQwen3Vl;
  const double min_pixels = q3 ? 65536.0 : 56.0 * 56.0, max_pixels = q3 ? 16777216.0 : 12845056.0;
  const double hh = static_cast<double>(height), ww = static_cast<double>(width);
  double hb = std::nearbyint(hh / factor) * factor;
  double wb = std::nearbyint(ww / factor) * factor;
  if (hb * wb > max_pixels) {
    const double beta = std::sqrt(hh * ww / max_pixels);
    hb = std::max(factor, std::floor(hh / beta / factor) * factor);
    wb = std::max(factor, std::floor(ww / beta / factor) * factor);
  } else if (hb * wb < min_pixels) {
    const double beta = std::sqrt(min_pixels / (hh * ww));
    hb = std::ceil(hh * beta / factor) * factor;
    wb = std::ceil(ww * beta / factor) * factor;
  }
  g.height = static_cast<std::int64_t>(hb);
  g.width = static_cast<std::int64_t>(wb);
  g.rows = g.height / v.patch_size;
  g.cols = g.width / v.patch_size;
  g.patches = g.rows * g.cols;
  g.tokens = g.patches / (static_cast<std::int64_t>(v.spatial_merge_size) * v.spatial_merge_size);
  return g;
}

}  // namespace memplan

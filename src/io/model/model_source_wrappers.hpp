// config.json parsing for the multimodal wrappers and attention variants of issue 31
// (docs/models.md#qwen3-vl, #llama-4, #deepseek-v32): Qwen3-VL's vision_config, Llama 4's
// text_config / vision_config, DeepSeek-V3.2's lightning indexer. The common decoder keys are read
// by model_source.cpp; these read what each family adds.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "memplan/model.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

// Qwen3VLVisionConfig (qwen3_vl, qwen3_vl_moe; Qwen3.5's Qwen3_5VisionConfig, which has no
// DeepStack mergers: deepstack_by_default false), with its defaults where a key is absent.
// out_hidden: out_hidden_size, the mergers' output width (the text hidden size).
Result<VisionSpec> parse_qwen3_vl_vision(const nlohmann::json& vc, const std::string& origin, std::int64_t& out_hidden,
                                         bool deepstack_by_default = true);

// Llama4VisionConfig: the tower is counted, not simulated. out_dim: vision_output_dim, the
// projector's input width.
Result<VisionSpec> parse_llama4_vision(const nlohmann::json& vc, const std::string& origin, std::int64_t& out_dim);

// Llama4TextConfig after the common keys: intermediate_size_mlp (dense layers) and
// intermediate_size (each expert and the shared expert), moe_layers / interleave_moe_layer_step,
// no_rope_layers, attention_chunk_size, use_qk_norm.
Status read_llama4_text(const nlohmann::json& j, ModelSpec& m, const std::string& origin);

// Gemma4VisionConfig (counted, not simulated) and Gemma4AudioConfig (counted; audio is never
// simulated), with transformers' defaults where a key is absent (docs/models.md#gemma-4).
Result<VisionSpec> parse_gemma4_vision(const nlohmann::json& vc, const std::string& origin);
Result<AudioSpec> parse_gemma4_audio(const nlohmann::json& ac, const std::string& origin);

// Mistral3Config's PixtralVisionConfig (counted, not simulated; docs/models.md#mistral-3), with
// the wrapper's spatial_merge_size, multimodal_projector_bias and vision_feature_layer from top.
Result<VisionSpec> parse_pixtral_vision(const nlohmann::json& vc, const nlohmann::json& top, const std::string& origin);

// Gemma4TextConfig after the common keys: global_head_dim, num_global_key_value_heads,
// attention_k_eq_v, num_kv_shared_layers, use_double_wide_mlp, hidden_size_per_layer_input,
// vocab_size_per_layer_input, enable_moe_block (num_experts, top_k_experts, moe_intermediate_size).
Status read_gemma4_text(const nlohmann::json& j, ModelSpec& m, const std::string& origin);

// Gemma 3n (docs/models.md#gemma-3n): Gemma3nVisionConfig (timm's MobileNetV5, counted whole)
// and Gemma3nAudioConfig (a Conformer, counted), with transformers' defaults.
Result<VisionSpec> parse_gemma3n_vision(const nlohmann::json& vc, const std::string& origin);
Result<AudioSpec> parse_gemma3n_audio(const nlohmann::json& ac, const std::string& origin);

// Gemma3nTextConfig's defaults and __post_init__ on the text config before the common keys are
// read (layer_types, a per-layer intermediate_size list kept for read_gemma3n_text); then, after
// them, altup_num_inputs, laurel_rank, num_kv_shared_layers, the per-layer inputs and
// activation_sparsity_pattern.
Status normalize_gemma3n_text(nlohmann::json& t, const std::string& origin);
Status read_gemma3n_text(const nlohmann::json& j, ModelSpec& m, const std::string& origin);

// DeepSeek-V3.2: index_n_heads, index_head_dim, index_topk (all three, or none).
Status read_dsa_indexer(const nlohmann::json& j, ModelSpec& m, const std::string& origin);

}  // namespace memplan::io

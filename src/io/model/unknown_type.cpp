#include "io/model/unknown_type.hpp"

#include <algorithm>
#include <cstdint>
#include <string_view>

#include <fmt/format.h>

namespace memplan::io {

using nlohmann::json;

namespace {

// A value that switches something on: not null, false, zero or empty.
bool truthy(const json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  return !v.empty();
}

bool has(std::string_view key, std::string_view part) { return key.find(part) != std::string_view::npos; }

const json* find_object(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? &*it : nullptr;
}

// head_dim as a Llama reads it: the key, else hidden_size / num_attention_heads; 0 when unknown.
std::int64_t head_dim(const json& j) {
  auto hd = j.find("head_dim");
  if (hd != j.end() && hd->is_number_integer()) return hd->get<std::int64_t>();
  auto h = j.find("hidden_size"), n = j.find("num_attention_heads");
  if (h == j.end() || n == j.end() || !h->is_number_integer() || !n->is_number_integer()) return 0;
  const std::int64_t heads = n->get<std::int64_t>();
  return heads > 0 ? h->get<std::int64_t>() / heads : 0;
}

// The keys of blocks a Llama-compatible layout does not have, by name: present and not null, the
// config is refused with the key named.
constexpr const char* kBlockKeys[] = {
    // mixture of experts: only known model types say how experts are named, routed and shared
    "num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size", "num_experts_per_tok",
    // latent attention, sparse-attention indexers
    "kv_lora_rank", "q_lora_rank", "index_n_heads",
    // state-space, linear-attention and convolution layers
    "ssm_state_size", "state_size", "mamba_num_heads", "mamba_d_state", "hybrid_override_pattern",
    "layers_block_type", "linear_num_value_heads", "linear_key_head_dim", "conv_L_cache", "block_types",
    "full_attn_idxs",
    // attention variants that change the activations
    "sliding_window", "attention_chunk_size", "no_rope_layers", "sliding_window_pattern", "attn_logit_softcapping",
    "final_logit_softcapping", "cross_attention_layers",
    // wrappers around a language model
    "text_config", "vision_config", "audio_config", "llm_config",
    // bidirectional encoders (BERT-like token types), never a causal Llama
    "type_vocab_size",
    // per-layer widths
    "num_key_value_heads_per_layer", "intermediate_size_per_layer", "altup_num_inputs", "per_layer_input_dim"};

// Switches that add modules or change the attention when on (HunYuan's use_qk_norm and
// cross-layer K/V sharing, OLMo-style qk_layernorm, Apertus-style qk_norm).
constexpr const char* kOnKeys[] = {"use_qk_norm", "qk_layernorm", "qk_norm", "use_cla", "use_qk_layernorm"};

// Keys whose value changes the layout, with what it changes (transformers' GPTNeoXConfig,
// StableLmConfig, PhiConfig, FalconConfig, OlmoConfig, Qwen2Config, T5Config spell them so).
struct Switch {
  const char* key;
  const char* meaning;
};
constexpr Switch kSwitches[] = {
    {"use_parallel_residual", "attention and MLP in parallel"},
    {"parallel_attn", "attention and MLP in parallel"},
    {"parallel_residual", "attention and MLP in parallel"},
    {"parallel_block", "attention and MLP in parallel"},
    {"use_sliding_window", "sliding-window attention"},
    {"is_encoder_decoder", "an encoder-decoder"},
    {"clip_qkv", "q, k and v clamped"},
    {"rotary_dim", "a rotary embedding on part of each head"},
};

// Keys a Llama reader reads (docs/models.md#unknown-types) and keys that never change what a
// training step allocates: PretrainedConfig's common and generation attributes, identifiers,
// the rotary embedding's base and scaling (its tables are sized by head_dim), caching.
constexpr const char* kReadOrInert[] = {
    // read as a Llama's
    "model_type", "hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
    "num_key_value_heads", "vocab_size", "head_dim", "hidden_act", "tie_word_embeddings", "attention_bias",
    "mlp_bias", "attention_out_bias", "rms_norm_eps", "torch_dtype", "dtype", "quantization_config",
    "max_position_embeddings", "original_max_position_embeddings", "initializer_range", "pretraining_tp",
    // PretrainedConfig (transformers configuration_utils.py): outputs, identifiers, tasks
    "architectures", "auto_map", "transformers_version", "_name_or_path", "name_or_path", "_commit_hash",
    "use_cache", "return_dict", "use_return_dict", "output_hidden_states", "output_attentions", "torchscript",
    "use_bfloat16", "tf_legacy_loss", "pruned_heads", "chunk_size_feed_forward", "is_decoder",
    "add_cross_attention", "tie_encoder_decoder", "finetuning_task", "id2label", "label2id", "num_labels",
    "tokenizer_class", "prefix", "task_specific_params", "problem_type", "custom_pipelines",
    "cross_attention_hidden_size", "gradient_checkpointing", "keys_to_ignore_at_inference",
    "_attn_implementation", "_attn_implementation_autoset", "attn_implementation", "use_flash_attn",
    "unsloth_version", "unsloth_fixed", "model_name",
    // generation defaults
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
    "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences",
    "output_scores", "return_dict_in_generate", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens",
    // only meaningful with blocks refused above (a sliding window, experts)
    "max_window_layers", "router_aux_loss_coef", "output_router_logits"};

bool read_or_inert(std::string_view key, const json& v) {
  for (const char* k : kReadOrInert)
    if (key == k) return true;
  if (has(key, "token_id")) return true;  // bos/eos/pad/sep/decoder_start/forced_*_token_id(s)
  if (has(key, "rope")) return true;      // rope_theta, rope_scaling, rope_parameters, rope_type
  // rotary_emb_base; a partial rotary factor of 1 (less is refused before this is asked)
  if (has(key, "rotary")) return true;
  if (has(key, "dropout") || has(key, "pdrop")) return !truthy(v);  // a zero dropout draws no mask
  return false;
}

// The meaning of a key, by the words in its name, when its value switches it on; nullptr when
// the name says nothing. Checked after the exact lists: these catch the spellings nobody listed
// (moe_num_experts, n_shared_experts, mamba_d_conv, use_post_norm, use_qkv_bias, embd_layer ...).
const char* meaning_by_name(std::string_view key, const json& v) {
  // DeepSeek-V3's and Xiaomi MiMo's num_nextn_predict_layers, mtp_num_hidden_layers: whole decoder
  // layers (with their own norms and projections) the checkpoint holds and trains besides the stack.
  if (has(key, "nextn") || key.rfind("mtp", 0) == 0 || has(key, "_mtp")) return "multi-token-prediction layers";
  if (has(key, "expert") || key.rfind("moe", 0) == 0 || has(key, "_moe")) return "a mixture of experts";
  if (has(key, "mamba") || key.rfind("ssm", 0) == 0 || has(key, "_ssm") || has(key, "linear_attn"))
    return "state-space or linear-attention layers";
  if (has(key, "window")) return "windowed attention";
  if (has(key, "vision") || has(key, "image") || has(key, "audio") || has(key, "visual"))
    return "a vision or audio tower";
  if (has(key, "lora")) return "low-rank projections or adapters";
  if (has(key, "conv")) return "convolution layers";
  if (has(key, "cross_attention") || has(key, "encoder")) return "an encoder or cross-attention";
  if (v.is_boolean() && has(key, "bias")) return "biases a Llama's projections do not have";
  if (v.is_boolean() && has(key, "norm") && key != "norm_topk_prob") return "normalization layers a Llama does not have";
  if (v.is_object()) return "a nested module configuration";
  return nullptr;
}

}  // namespace

UnknownLayout inspect_unknown_layout(const json& j) {
  UnknownLayout out;
  auto refuse = [&](std::string key, std::string meaning) {
    out.block = std::move(key);
    out.meaning = std::move(meaning);
    out.unread.clear();
    return out;
  };
  if (!j.is_object()) return out;
  // Qwen2-derived configs carry a sliding_window that only applies with use_sliding_window
  // (Qwen2Config; Xiaomi MiMo writes 32768 with the switch off).
  const auto usw = j.find("use_sliding_window");
  const bool window_off = usw != j.end() && usw->is_boolean() && !usw->get<bool>();
  for (const char* k : kBlockKeys) {
    if (window_off && std::string_view(k) == "sliding_window") continue;
    if (auto it = j.find(k); it != j.end() && truthy(*it)) return refuse(k, "");
  }
  for (const char* k : kOnKeys)
    if (auto it = j.find(k); it != j.end() && it->is_boolean() && it->get<bool>()) return refuse(k, "");
  if (auto it = j.find("layer_types"); it != j.end() && it->is_array())
    for (const auto& v : *it)
      if (!v.is_string() || v.get<std::string>() != "full_attention") return refuse("layer_types", "");
  for (const auto& [k, meaning] : kSwitches) {
    auto it = j.find(k);
    if (it == j.end() || !truthy(*it)) continue;
    if (std::string_view(k) == "rotary_dim" && it->is_number_integer() && it->get<std::int64_t>() == head_dim(j))
      continue;  // the whole head: a Llama's rotary embedding
    return refuse(k, meaning);
  }
  // A rotary embedding on part of each head (GPT-NeoX's rotary_pct, Phi's partial_rotary_factor),
  // at the top level or, as transformers 5 writes it, inside rope_parameters (or rope_scaling).
  const char* const kPartial = "a rotary embedding on part of each head";
  for (const json* o : {&j, find_object(j, "rope_parameters"), find_object(j, "rope_scaling")}) {
    if (o == nullptr) continue;
    for (const char* k : {"partial_rotary_factor", "rotary_pct", "rope_pct", "rotary_emb_fraction"}) {
      auto it = o->find(k);
      if (it == o->end() || it->is_null()) continue;
      if (!it->is_number() || it->get<double>() < 1.0) return refuse(k, kPartial);
    }
  }
  // A norm epsilon under a LayerNorm's name and none under RMSNorm's: GPT-NeoX, StableLM, Phi and
  // Falcon normalize with LayerNorm (mean subtraction and a bias), not a Llama's RMSNorm.
  if (!j.contains("rms_norm_eps"))
    for (const char* k : {"layer_norm_eps", "layer_norm_epsilon", "layernorm_epsilon", "norm_epsilon", "norm_eps"})
      if (auto it = j.find(k); it != j.end() && !it->is_null())
        return refuse(k, "a LayerNorm's epsilon and no rms_norm_eps: its norms may not be a Llama's RMSNorm");
  for (const auto& [k, v] : j.items()) {
    if (read_or_inert(k, v) || !truthy(v)) continue;
    if (k == "layer_types") continue;  // every layer full attention: a Llama's
    if (window_off && k == "sliding_window") continue;  // switched off by use_sliding_window
    // MLX's "quantization" ({group_size, bits}) says how the weights are stored, not which
    // modules there are: named in the note, never a block.
    if (has(k, "quantiz")) {
      out.unread.push_back(k);
      continue;
    }
    if (const char* m = meaning_by_name(k, v)) return refuse(k, m);
    out.unread.push_back(k);
  }
  // attention_bias true says that some attention projections carry a bias, not which: a Llama puts
  // one on q, k, v and o_proj, Qwen2-derived remote code (Xiaomi MiMo) on q, k and v only. Only a
  // config that also writes attention_out_bias (Seed-OSS) says which. Asked last, so that a block
  // the config names (MiMo's multi-token-prediction layers) is the one the refusal names.
  if (auto it = j.find("attention_bias");
      it != j.end() && it->is_boolean() && it->get<bool>() && !j.contains("attention_out_bias"))
    return refuse("attention_bias",
                  "biases on the attention projections: a Llama puts one on o_proj, Qwen2-derived code does not, "
                  "and no attention_out_bias says which");
  return out;
}

std::string describe_block(const UnknownLayout& layout) {
  if (layout.meaning.empty()) return fmt::format("\"{}\"", layout.block);
  return fmt::format("\"{}\" ({})", layout.block, layout.meaning);
}

}  // namespace memplan::io

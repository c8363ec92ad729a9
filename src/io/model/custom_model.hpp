// A model architecture written out by the user instead of named: the project's own model in a
// training config (`model: {n_layers: 8, d_model: 1024, ...}`, seed 001; LLM Foundry's MPT
// `model:` section), or the HF-style flags --hidden-size --num-hidden-layers ... Built through
// the same config.json reader as a downloaded model; what is not written is assumed, and each
// assumption is stated so the output can say which parts of the estimate rest on a guess.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memplan/model.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

struct CustomModel {
  std::optional<std::int64_t> hidden_size;          // d_model, hidden_size, n_embd, dim
  std::optional<std::int64_t> num_layers;           // n_layers, num_hidden_layers, n_layer
  std::optional<std::int64_t> num_heads;            // n_heads, num_attention_heads, n_head
  std::optional<std::int64_t> num_kv_heads;         // n_kv_heads, num_key_value_heads (default: num_heads)
  std::optional<std::int64_t> intermediate_size;    // d_ffn, intermediate_size, ffn_dim
  std::optional<double> expansion_ratio;            // MPT expansion_ratio / mlp_ratio: ffn = ratio x hidden
  std::optional<std::int64_t> vocab_size;
  std::optional<std::int64_t> head_dim;
  std::optional<std::int64_t> max_position_embeddings;
  std::optional<bool> tie_word_embeddings;
  // "llama" (gated SwiGLU MLP, RMSNorm: the default), "mpt" (GELU MLP without gate or biases,
  // LayerNorm without bias, tied embeddings) or "bert" (an encoder: Hugging Face's BertModel of
  // this shape).
  std::string family = "llama";
  std::string name;  // how the output names it: "custom model (train.yaml:12)"
};

// The vocabulary assumed when none is written: Llama 2's 32000-token tokenizer.
inline constexpr std::int64_t kAssumedVocab = 32000;

// The model, and in `assumptions` one sentence per part that was not written.
Result<ModelSpec> build_custom_model(const CustomModel& c, std::vector<std::string>& assumptions);

}  // namespace memplan::io

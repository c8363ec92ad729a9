#include "io/model/custom_model.hpp"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/model/model_source.hpp"

namespace memplan::io {

namespace {

// A BERT-style encoder of the written shape (Megatron's BERT, `mcore_bert`), built as Hugging
// Face's BertModel: post-LN LayerNorm, GELU MLP and attention with biases, learned positions,
// two token types, the pooler (docs/configs.md#custom-models).
Result<ModelSpec> build_custom_bert(const CustomModel& c, std::vector<std::string>& assumptions) {
  nlohmann::json j;
  j["model_type"] = "bert";
  j["hidden_size"] = *c.hidden_size;
  j["num_hidden_layers"] = *c.num_layers;
  j["num_attention_heads"] = *c.num_heads;
  if (c.intermediate_size) {
    j["intermediate_size"] = *c.intermediate_size;
  } else {
    j["intermediate_size"] = 4 * *c.hidden_size;
    assumptions.push_back(fmt::format("no MLP width: assumed {} (BERT's 4 x hidden)", 4 * *c.hidden_size));
  }
  constexpr std::int64_t kBertVocab = 30522;  // bert-base-uncased's WordPiece vocabulary
  j["vocab_size"] = c.vocab_size.value_or(kBertVocab);
  if (!c.vocab_size)
    assumptions.push_back(fmt::format("no vocabulary size: assumed {} (BERT's WordPiece)", kBertVocab));
  j["max_position_embeddings"] = c.max_position_embeddings.value_or(512);
  auto spec = parse_hf_config(j.dump(), c.name);
  if (!spec) return spec.error();
  ModelSpec m = std::move(*spec);
  m.name = c.name;
  assumptions.push_back("layers assumed BERT-style (Hugging Face BertModel): post-LN LayerNorm, GELU MLP and "
                        "attention with biases, learned positions; Megatron's fused kernels are not modelled");
  return m;
}

}  // namespace

Result<ModelSpec> build_custom_model(const CustomModel& c, std::vector<std::string>& assumptions) {
  std::vector<std::string> missing;
  if (!c.hidden_size) missing.emplace_back("the hidden size (d_model / hidden_size)");
  if (!c.num_layers) missing.emplace_back("the number of layers (n_layers / num_hidden_layers)");
  if (!c.num_heads) missing.emplace_back("the number of attention heads (n_heads / num_attention_heads)");
  if (!missing.empty())
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{}: cannot build the model without {}", c.name, fmt::join(missing, ", ")),
                      "write them, or give --model ID|PATH for an equivalent architecture, or --model-params N");
  if (c.family == "bert") return build_custom_bert(c, assumptions);
  const bool mpt = c.family == "mpt";
  nlohmann::json j;
  // MPT goes through GPT-2's layout (the engine's one non-gated MLP): fused qkv, GELU MLP,
  // LayerNorm, tied embeddings, no position table (ALiBi), below.
  j["model_type"] = mpt ? "gpt2" : "llama";
  j["hidden_size"] = *c.hidden_size;
  j["num_hidden_layers"] = *c.num_layers;
  j["num_attention_heads"] = *c.num_heads;
  if (c.num_kv_heads) {
    j["num_key_value_heads"] = *c.num_kv_heads;
  } else if (!mpt) {
    assumptions.push_back(fmt::format("no key/value head count: assumed {} (one per attention head, no GQA)",
                                      *c.num_heads));
  }
  if (c.head_dim) j["head_dim"] = *c.head_dim;
  std::int64_t ffn = 0;
  if (c.intermediate_size) {
    ffn = *c.intermediate_size;
  } else if (c.expansion_ratio) {
    ffn = static_cast<std::int64_t>(std::llround(*c.expansion_ratio * static_cast<double>(*c.hidden_size)));
  } else {
    // Llama's rule: 2/3 of 4 x hidden for a gated MLP, rounded up to a multiple of 256.
    ffn = mpt ? 4 * *c.hidden_size : ((8 * *c.hidden_size / 3 + 255) / 256) * 256;
    assumptions.push_back(fmt::format("no MLP width: assumed {} ({})", ffn,
                                      mpt ? "4 x hidden" : "Llama's 8/3 x hidden rounded up to 256"));
  }
  j["intermediate_size"] = ffn;
  if (c.vocab_size) {
    j["vocab_size"] = *c.vocab_size;
  } else {
    j["vocab_size"] = kAssumedVocab;
    assumptions.push_back(fmt::format("no vocabulary size: assumed {} (Llama 2's tokenizer); the logits scale with it",
                                      kAssumedVocab));
  }
  if (c.max_position_embeddings) j["max_position_embeddings"] = *c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings.value_or(mpt);
  if (!c.tie_word_embeddings && !mpt) assumptions.push_back("embeddings and output head assumed untied");
  if (mpt) j["activation_function"] = "gelu_new";
  else j["hidden_act"] = "silu";
  auto spec = parse_hf_config(j.dump(), c.name);
  if (!spec) return spec.error();
  ModelSpec m = std::move(*spec);
  m.name = c.name;
  if (mpt) {
    // MPT (llm-foundry mpt_causal_lm) has ALiBi instead of a position table.
    m.learned_positions = false;
    m.norm_bias = false;
    assumptions.push_back("MPT modelled with GPT-2's layer layout: fused qkv, GELU MLP, LayerNorm, tied embeddings; "
                          "the linear layers carry biases that MPT (no_bias) does not have: +9 x hidden parameters "
                          "per layer");
  } else {
    assumptions.push_back("layers assumed Llama-style: RMSNorm, gated SiLU MLP, no biases");
  }
  // model_type stays llama / gpt2: PEFT's default LoRA targets and the engine's module names follow it.
  return m;
}

}  // namespace memplan::io

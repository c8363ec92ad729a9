#include "io/model_source_encoders.hpp"

#include <cmath>

#include <fmt/format.h>

namespace memplan::io {

namespace {

using nlohmann::json;

Error field_error(const std::string& origin, std::string msg) {
  Error e = make_error(ErrorCode::kInvalidConfig, std::move(msg));
  e.where = SourceLocation{origin, 0, 0};
  return e;
}

// A non-negative integer field (at most 2^40), or `fallback` when absent.
Result<std::int64_t> integer(const json& j, const char* key, std::int64_t fallback, const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback < 0) return field_error(origin, fmt::format("missing \"{}\"", key));
    return fallback;
  }
  double v = 0;
  if (it->is_number_integer() || it->is_number_unsigned()) v = static_cast<double>(it->get<std::int64_t>());
  else if (it->is_number_float()) v = it->get<double>();
  else return field_error(origin, fmt::format("\"{}\" must be an integer, got {}", key, it->dump()));
  if (std::floor(v) != v || v < 0 || v > static_cast<double>(std::int64_t{1} << 40))
    return field_error(origin, fmt::format("\"{}\" must be a non-negative integer, got {}", key, it->dump()));
  return static_cast<std::int64_t>(v);
}

Result<bool> boolean(const json& j, const char* key, bool fallback, const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return field_error(origin, fmt::format("\"{}\" must be true or false, got {}", key, it->dump()));
  return it->get<bool>();
}

int narrow(std::int64_t v) { return static_cast<int>(std::min<std::int64_t>(v, 1 << 30)); }

}  // namespace

bool is_encoder_model_type(const std::string& t) {
  return t == "bert" || t == "roberta" || t == "xlm-roberta" || t == "modernbert";
}

Result<ModelSpec> parse_encoder_config(const json& j, const std::string& origin) {
  ModelSpec m;
  m.model_type = j.value("model_type", std::string());
  m.encoder = true;
  m.norm = NormKind::kLayerNorm;
  m.gated_mlp = false;
  const bool modern = m.is_modernbert();
  MEMPLAN_TRY(m.vocab_size, integer(j, "vocab_size", -1, origin));
  MEMPLAN_TRY(m.hidden_size, integer(j, "hidden_size", -1, origin));
  MEMPLAN_TRY(std::int64_t layers, integer(j, "num_hidden_layers", -1, origin));
  MEMPLAN_TRY(std::int64_t heads, integer(j, "num_attention_heads", -1, origin));
  MEMPLAN_TRY(m.intermediate_size, integer(j, "intermediate_size", -1, origin));
  m.num_layers = narrow(layers);
  m.num_heads = narrow(heads);
  m.num_kv_heads = m.num_heads;
  if (heads > 0 && m.hidden_size % heads != 0)
    return field_error(origin, fmt::format("\"hidden_size\" {} is not divisible by \"num_attention_heads\" {}",
                                           m.hidden_size, heads));
  m.head_dim = heads > 0 ? m.hidden_size / heads : 0;
  m.tie_word_embeddings = true;  // the MLM decoder is tied to the word embeddings
  if (modern) {
    // ModernBertConfig defaults: norm_bias, attention_bias, mlp_bias false; decoder_bias true;
    // hidden_activation gelu; global attention every 3 layers, local window 128.
    MEMPLAN_TRY(m.max_position_embeddings, integer(j, "max_position_embeddings", 8192, origin));
    MEMPLAN_TRY(m.norm_bias, boolean(j, "norm_bias", false, origin));
    MEMPLAN_TRY(m.qkv_bias, boolean(j, "attention_bias", false, origin));
    m.o_bias = m.qkv_bias;
    MEMPLAN_TRY(m.mlp_bias, boolean(j, "mlp_bias", false, origin));
    MEMPLAN_TRY(m.decoder_bias, boolean(j, "decoder_bias", true, origin));
    MEMPLAN_TRY(std::int64_t every, integer(j, "global_attn_every_n_layers", 3, origin));
    MEMPLAN_TRY(m.local_attention, integer(j, "local_attention", 128, origin));
    if (every < 1)  // ModernBertAttention takes layer_id % global_attn_every_n_layers
      return field_error(origin, fmt::format("\"global_attn_every_n_layers\" is {}: ModernBERT needs at least 1 "
                                             "(every layer global)", every));
    m.global_attn_every_n_layers = narrow(every);
    if (auto p = j.find("classifier_pooling"); p != j.end() && !p->is_null()) {
      if (!p->is_string() || (*p != "cls" && *p != "mean"))
        return field_error(origin, fmt::format("\"classifier_pooling\" is {}: ModernBertConfig accepts \"cls\" or \"mean\"",
                                               p->dump()));
      m.mean_pooled_classifier = *p == "mean";
    }
    if (auto rc = j.find("reference_compile"); rc != j.end() && rc->is_boolean()) m.reference_compile = rc->get<bool>();
    m.gated_mlp = true;  // Wi produces input and gate of GeGLU
    m.activation = Activation::kGelu;
  } else {
    // BertConfig defaults: max_position_embeddings 512, type_vocab_size 2, hidden_act gelu.
    MEMPLAN_TRY(m.max_position_embeddings, integer(j, "max_position_embeddings", 512, origin));
    MEMPLAN_TRY(m.type_vocab_size, integer(j, "type_vocab_size", 2, origin));
    m.norm_bias = true;
    m.qkv_bias = m.o_bias = m.mlp_bias = true;
    m.learned_positions = true;
    m.activation = Activation::kGelu;
    m.pooler = true;
  }
  m.head = EncoderHead::kPooling;
  if (auto a = j.find("architectures"); a != j.end() && a->is_array()) {
    for (const auto& name : *a) {
      if (name.is_string() && name.get<std::string>().find("ForSequenceClassification") != std::string::npos)
        m.head = EncoderHead::kSequenceClassification;
    }
  }
  if (auto l = j.find("id2label"); l != j.end() && l->is_object() && !l->empty())
    m.num_labels = narrow(static_cast<std::int64_t>(l->size()));
  if (auto d = j.find("torch_dtype"); d != j.end() && d->is_string()) m.torch_dtype = d->get<std::string>();
  if (auto s = validate(m); !s) {
    Error e = s.error();
    e.where = SourceLocation{origin, 0, 0};
    return e;
  }
  return m;
}

}  // namespace memplan::io

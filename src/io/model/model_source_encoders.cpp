#include "io/model/model_source_encoders.hpp"

#include <cmath>

#include <fmt/format.h>

#include "io/model/config_keys.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

using nlohmann::json;
using keys::probability;

Error field_error(const std::string& origin, std::string msg) {
  Error e = make_error(ErrorCode::kInvalidConfig, std::move(msg));
  e.where = SourceLocation{origin, 0, 0};
  return e;
}

// A config.json variant memplan does not model: at the file, with what it models instead.
Error unsupported_variant(const std::string& origin, std::string msg, std::string models) {
  Error e = make_error(ErrorCode::kUnsupported, std::move(msg), std::move(models));
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


// An integer field where a negative value means "unset" (DeBERTa's -1), or `fallback`.
Result<std::int64_t> signed_integer(const json& j, const char* key, std::int64_t fallback, const std::string& origin) {
  auto it = j.find(key);
  if (it != j.end() && (it->is_number_integer() || it->is_number_float()) && it->get<double>() < 0)
    return std::int64_t{-1};
  if (it == j.end() || it->is_null()) return fallback;
  return integer(j, key, 0, origin);
}

// "a|b|c" as DebertaV2Config splits pos_att_type and norm_rel_ebd: lower-cased, trimmed parts.
std::vector<std::string> split_bars(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t bar = s.find('|', start);
    out.push_back(to_lower(trim(std::string_view(s).substr(start, bar == std::string::npos ? std::string::npos : bar - start))));
    if (bar == std::string::npos) return out;
    start = bar + 1;
  }
}

// DebertaV2Config (docs/formulas.md#deberta): defaults position_biased_input true, type_vocab_size
// 0, relative_attention false, max_relative_positions -1 (then max_position_embeddings),
// position_buckets -1, pos_att_type none, norm_rel_ebd "none", share_att_key false. Every v3
// checkpoint sets relative_attention, position_buckets 256, share_att_key, "p2c|c2p" and
// "layer_norm"; the encoder's ConvLayer (deberta-v2-xlarge's conv_kernel_size), an
// embedding_size other than hidden_size and separate position projections are refused.
Status parse_deberta(const json& j, const std::string& origin, ModelSpec& m) {
  MEMPLAN_TRY(m.max_position_embeddings, integer(j, "max_position_embeddings", 512, origin));
  MEMPLAN_TRY(m.type_vocab_size, integer(j, "type_vocab_size", 0, origin));
  MEMPLAN_TRY(m.learned_positions, boolean(j, "position_biased_input", true, origin));
  MEMPLAN_TRY(const bool relative, boolean(j, "relative_attention", false, origin));
  MEMPLAN_TRY(const bool share, boolean(j, "share_att_key", false, origin));
  m.norm_bias = true;
  m.qkv_bias = m.o_bias = m.mlp_bias = true;
  m.activation = Activation::kGelu;
  auto unsupported = [&](std::string what) {
    return unsupported_variant(origin, std::move(what),
                               "memplan models DeBERTa-v2/v3 as the v3 checkpoints configure it (microsoft/deberta-v3-*)");
  };
  MEMPLAN_TRY(const std::int64_t conv, integer(j, "conv_kernel_size", 0, origin));
  if (conv > 0) return unsupported(fmt::format("DeBERTa's ConvLayer (\"conv_kernel_size\": {}) is not modelled", conv));
  MEMPLAN_TRY(const std::int64_t emb, integer(j, "embedding_size", m.hidden_size, origin));
  if (emb != m.hidden_size)
    return unsupported(fmt::format("\"embedding_size\" {} differs from \"hidden_size\" {} (embed_proj is not modelled)",
                                   emb, m.hidden_size));
  MEMPLAN_TRY(const std::int64_t pooler, integer(j, "pooler_hidden_size", m.hidden_size, origin));
  if (pooler != m.hidden_size)
    return field_error(origin, fmt::format("\"pooler_hidden_size\" {} differs from \"hidden_size\" {}: "
                                           "DebertaV2ForSequenceClassification's classifier reads hidden_size features",
                                           pooler, m.hidden_size));
  // pos_att_type: a list, or the "p2c|c2p" string DebertaV2Config splits.
  std::vector<std::string> types;
  if (auto p = j.find("pos_att_type"); p != j.end() && !p->is_null()) {
    if (p->is_string()) {
      types = split_bars(p->get<std::string>());
    } else if (p->is_array()) {
      for (const auto& t : *p) {
        if (!t.is_string()) return field_error(origin, fmt::format("\"pos_att_type\" must list strings, got {}", p->dump()));
        types.push_back(to_lower(trim(t.get<std::string>())));
      }
    } else {
      return field_error(origin, fmt::format("\"pos_att_type\" must be a string or a list, got {}", p->dump()));
    }
  }
  for (const auto& t : types) {
    if (t == "c2p") m.c2p = true;
    else if (t == "p2c") m.p2c = true;
    else if (!t.empty())
      return field_error(origin, fmt::format("\"pos_att_type\" has '{}': DeBERTa-v2 knows c2p and p2c", t));
  }
  if (relative) {
    MEMPLAN_TRY(const std::int64_t buckets, signed_integer(j, "position_buckets", -1, origin));
    MEMPLAN_TRY(std::int64_t max_rel, signed_integer(j, "max_relative_positions", -1, origin));
    if (max_rel < 1) max_rel = m.max_position_embeddings;
    m.relative_buckets = buckets > 0;
    m.relative_span = buckets > 0 ? buckets : max_rel;
    if (m.relative_span > (std::int64_t{1} << 24))
      return field_error(origin, fmt::format("the relative attention span {} is larger than 2^24 positions", m.relative_span));
    if ((m.c2p || m.p2c) && !share)
      return unsupported("separate position projections (\"share_att_key\": false) are not modelled");
    if (auto n = j.find("norm_rel_ebd"); n != j.end() && n->is_string())
      for (const auto& t : split_bars(n->get<std::string>())) m.rel_layer_norm |= t == "layer_norm";
  } else {
    m.c2p = m.p2c = false;  // DisentangledSelfAttention adds no position terms without relative_attention
  }
  return Ok{};
}

// NomicBertConfig (nomic-ai's remote code, configuration_hf_nomic_bert.py: a GPT2Config) with its
// GPT-2 field names; docs/formulas.md#nomicbert. Defaults are GPT2Config's and NomicBertConfig's:
// qkv_proj_bias, mlp_fc1_bias and mlp_fc2_bias true, rotary_emb_fraction 0 (absolute positions),
// activation gelu_new, dropouts 0.1; every released checkpoint (nomic-bert-2048,
// nomic-embed-text-v1/v1.5) sets swiglu, no biases, full rotary and dropout 0.
Result<ModelSpec> parse_nomic_bert(const json& j, const std::string& origin) {
  ModelSpec m;
  m.model_type = "nomic_bert";
  m.encoder = true;
  m.norm = NormKind::kLayerNorm;
  m.norm_bias = true;
  m.tie_word_embeddings = true;
  auto unsupported = [&](std::string what) {
    return unsupported_variant(origin, std::move(what),
                               "memplan models NomicBERT as nomic-bert-2048 and nomic-embed-text-v1/v1.5 configure it");
  };
  MEMPLAN_TRY(m.vocab_size, integer(j, "vocab_size", 50257, origin));
  MEMPLAN_TRY(m.hidden_size, integer(j, "n_embd", 768, origin));
  MEMPLAN_TRY(const std::int64_t layers, integer(j, "n_layer", 12, origin));
  MEMPLAN_TRY(const std::int64_t heads, integer(j, "n_head", 12, origin));
  MEMPLAN_TRY(const std::int64_t pad, integer(j, "pad_vocab_size_multiple", 1, origin));
  if (pad > 1 && m.vocab_size % pad != 0) m.vocab_size += pad - m.vocab_size % pad;  // NomicBertModel pads it
  m.num_layers = narrow_count(layers);
  m.num_heads = m.num_kv_heads = narrow_count(heads);
  if (heads < 1 || m.hidden_size % heads != 0)
    return field_error(origin, fmt::format("\"n_embd\" {} is not divisible by \"n_head\" {}", m.hidden_size, heads));
  m.head_dim = m.hidden_size / heads;
  const std::string act = j.contains("activation_function") && j["activation_function"].is_string()
                              ? j["activation_function"].get<std::string>()
                              : "gelu_new";
  if (act == "swiglu" || act == "geglu") {
    m.gated_mlp = true;
    m.activation = act == "swiglu" ? Activation::kSilu : Activation::kGelu;
  } else if (act == "gelu" || act == "gelu_new" || act == "gelu_fast" || act == "gelu_pytorch_tanh") {
    m.gated_mlp = false;
    m.activation = act == "gelu" ? Activation::kGelu : Activation::kGeluTanh;
  } else {
    return unsupported(fmt::format("\"activation_function\" {} is not modelled (swiglu, geglu and the gelu variants are)",
                                   j["activation_function"].dump()));
  }
  // NomciBertGatedMLP rounds its width up to a multiple of 256; the plain MLP keeps n_inner.
  MEMPLAN_TRY(std::int64_t inner, integer(j, "n_inner", 0, origin));
  if (inner == 0) inner = m.gated_mlp ? 8 * m.hidden_size / 3 : 4 * m.hidden_size;
  m.intermediate_size = m.gated_mlp ? (inner + 255) / 256 * 256 : inner;
  MEMPLAN_TRY(m.qkv_bias, boolean(j, "qkv_proj_bias", true, origin));
  m.o_bias = m.qkv_bias;
  MEMPLAN_TRY(m.mlp_bias, boolean(j, "mlp_fc1_bias", true, origin));
  MEMPLAN_TRY(m.mlp_out_bias, boolean(j, "mlp_fc2_bias", true, origin));
  MEMPLAN_TRY(m.type_vocab_size, integer(j, "type_vocab_size", 2, origin));
  MEMPLAN_TRY(m.max_position_embeddings, integer(j, "n_positions", 1024, origin));
  MEMPLAN_TRY(m.hidden_dropout, probability(j, "resid_pdrop", 0.1, origin));
  MEMPLAN_TRY(m.attention_dropout, probability(j, "attn_pdrop", 0.1, origin));
  double fraction = 0.0;
  if (auto f = j.find("rotary_emb_fraction"); f != j.end() && !f->is_null()) {
    if (!f->is_number()) return field_error(origin, fmt::format("\"rotary_emb_fraction\" must be a number, got {}", f->dump()));
    fraction = f->get<double>();
  }
  if (fraction != 0.0 && fraction != 1.0)
    return unsupported(fmt::format("a partial rotary embedding (\"rotary_emb_fraction\": {}) is not modelled", fraction));
  m.learned_positions = fraction == 0.0;  // NomicBertEmbeddings has a position table only without rotary
  for (const char* key : {"prenorm", "parallel_block", "use_rms_norm", "causal"}) {
    MEMPLAN_TRY(const bool on, boolean(j, key, false, origin));
    if (on) return unsupported(fmt::format("\"{}\": true is not modelled", key));
  }
  MEMPLAN_TRY(const std::int64_t experts, integer(j, "num_experts", 0, origin));
  MEMPLAN_TRY(const std::int64_t moe_every, integer(j, "moe_every_n_layers", 0, origin));
  if (experts > 0 && moe_every > 0)
    return unsupported(fmt::format("NomicBERT's mixture-of-experts layers (nomic-embed-text-v2-moe: {} experts every {} "
                                   "layers) are not modelled",
                                   experts, moe_every));
  return m;
}

// The head from "architectures" and "id2label", the checkpoint's dtype, validate().
Result<ModelSpec> finish_encoder(const json& j, const std::string& origin, ModelSpec m) {
  m.head = EncoderHead::kPooling;
  if (auto a = j.find("architectures"); a != j.end() && a->is_array()) {
    for (const auto& name : *a) {
      if (name.is_string() && name.get<std::string>().find("ForSequenceClassification") != std::string::npos)
        m.head = EncoderHead::kSequenceClassification;
    }
  }
  if (auto l = j.find("id2label"); l != j.end() && l->is_object() && !l->empty())
    m.num_labels = narrow_count(static_cast<std::int64_t>(l->size()));
  if (auto d = j.find("torch_dtype"); d != j.end() && d->is_string()) m.torch_dtype = d->get<std::string>();
  if (auto s = validate(m); !s) {
    Error e = s.error();
    e.where = SourceLocation{origin, 0, 0};
    return e;
  }
  return m;
}

}  // namespace

const std::vector<std::string>& encoder_model_types() {
  static const std::vector<std::string> t = {"bert", "roberta", "xlm-roberta", "modernbert", "deberta-v2", "nomic_bert",
                                             "mpnet"};
  return t;
}

bool is_encoder_model_type(const std::string& t) {
  const auto& types = encoder_model_types();
  return std::find(types.begin(), types.end(), t) != types.end();
}

Result<ModelSpec> parse_encoder_config(const json& j, const std::string& origin) {
  ModelSpec m;
  m.model_type = j.value("model_type", std::string());
  if (m.is_nomic_bert()) {
    MEMPLAN_TRY(m, parse_nomic_bert(j, origin));
    return finish_encoder(j, origin, std::move(m));
  }
  m.encoder = true;
  m.norm = NormKind::kLayerNorm;
  m.gated_mlp = false;
  const bool modern = m.is_modernbert();
  MEMPLAN_TRY(m.vocab_size, integer(j, "vocab_size", -1, origin));
  MEMPLAN_TRY(m.hidden_size, integer(j, "hidden_size", -1, origin));
  MEMPLAN_TRY(std::int64_t layers, integer(j, "num_hidden_layers", -1, origin));
  MEMPLAN_TRY(std::int64_t heads, integer(j, "num_attention_heads", -1, origin));
  MEMPLAN_TRY(m.intermediate_size, integer(j, "intermediate_size", -1, origin));
  m.num_layers = narrow_count(layers);
  m.num_heads = narrow_count(heads);
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
    m.global_attn_every_n_layers = narrow_count(every);
    if (auto p = j.find("classifier_pooling"); p != j.end() && !p->is_null()) {
      if (!p->is_string() || (*p != "cls" && *p != "mean"))
        return field_error(origin, fmt::format("\"classifier_pooling\" is {}: ModernBertConfig accepts \"cls\" or \"mean\"",
                                               p->dump()));
      m.mean_pooled_classifier = *p == "mean";
    }
    if (auto rc = j.find("reference_compile"); rc != j.end() && rc->is_boolean()) m.reference_compile = rc->get<bool>();
    m.gated_mlp = true;  // Wi produces input and gate of GeGLU
    m.activation = Activation::kGelu;
  } else if (m.is_deberta()) {
    if (auto s = parse_deberta(j, origin, m); !s) return s.error();
  } else {
    // BertConfig defaults: max_position_embeddings 512, type_vocab_size 2, hidden_act gelu.
    // MPNetConfig: 514 positions, no token types (MPNetEmbeddings has no such table), 32
    // relative-attention buckets (docs/models.md#mpnet).
    const bool mpnet = m.is_mpnet();
    MEMPLAN_TRY(m.max_position_embeddings, integer(j, "max_position_embeddings", mpnet ? 514 : 512, origin));
    if (mpnet) {
      MEMPLAN_TRY(m.relative_attention_buckets, integer(j, "relative_attention_num_buckets", 32, origin));
      if (m.relative_attention_buckets < 1 || m.relative_attention_buckets > 4096)
        return field_error(origin, fmt::format("\"relative_attention_num_buckets\" is {}: MPNet needs 1 to 4096",
                                               m.relative_attention_buckets));
    } else {
      MEMPLAN_TRY(m.type_vocab_size, integer(j, "type_vocab_size", 2, origin));
    }
    m.norm_bias = true;
    m.qkv_bias = m.o_bias = m.mlp_bias = true;
    m.learned_positions = true;
    m.activation = Activation::kGelu;
    m.pooler = true;
  }
  if (!modern) {  // BertConfig / DebertaV2Config: 0.1 each by default
    MEMPLAN_TRY(m.hidden_dropout, probability(j, "hidden_dropout_prob", 0.1, origin));
    MEMPLAN_TRY(m.attention_dropout, probability(j, "attention_probs_dropout_prob", 0.1, origin));
  }
  return finish_encoder(j, origin, std::move(m));
}

}  // namespace memplan::io

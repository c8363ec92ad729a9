// Encoder parameter layouts (docs/formulas.md#encoder-parameters), read from transformers'
// modeling_bert.py, modeling_roberta.py, modeling_xlm_roberta.py, modeling_deberta_v2.py and
// modeling_modernbert.py.
#include "memplan/model.hpp"

#include "memplan/text.hpp"

namespace memplan {

namespace {

// nn.LayerNorm(hidden): weight and bias; ModernBERT's LayerNorm(bias=norm_bias) may drop the bias.
std::int64_t layer_norm_params(const ModelSpec& m) { return m.norm_bias ? 2 * m.hidden_size : m.hidden_size; }

}  // namespace

std::vector<LinearModule> encoder_layer_linears(const ModelSpec& m) {
  const std::int64_t h = m.hidden_size;
  const std::int64_t inner = static_cast<std::int64_t>(m.num_heads) * m.head_dim;
  std::vector<LinearModule> out;
  if (m.is_nomic_bert()) {
    // NomicBertAttention.Wqkv / out_proj (bias=qkv_proj_bias); NomciBertGatedMLP fc11 (value),
    // fc12 (gate), fc2, or NomicBertMLP fc1, fc2 (bias=mlp_fc1_bias / mlp_fc2_bias).
    out.push_back({"attn.Wqkv", h, 3 * inner, m.qkv_bias, 1, LinearRole::kAttention});
    out.push_back({"attn.out_proj", inner, h, m.o_bias, 1, LinearRole::kAttention});
    if (m.gated_mlp) {
      out.push_back({"mlp.fc11", h, m.intermediate_size, m.mlp_bias, 1, LinearRole::kMlp});
      out.push_back({"mlp.fc12", h, m.intermediate_size, m.mlp_bias, 1, LinearRole::kMlp});
    } else {
      out.push_back({"mlp.fc1", h, m.intermediate_size, m.mlp_bias, 1, LinearRole::kMlp});
    }
    out.push_back({"mlp.fc2", m.intermediate_size, h, m.mlp_out_bias, 1, LinearRole::kMlp});
    return out;
  }
  if (m.is_modernbert()) {
    // ModernBertAttention.Wqkv / Wo (bias=attention_bias), ModernBertMLP.Wi (hidden -> 2 x
    // intermediate: input and gate of GeGLU) / Wo (bias=mlp_bias).
    out.push_back({"attn.Wqkv", h, 3 * inner, m.qkv_bias, 1, LinearRole::kAttention});
    out.push_back({"attn.Wo", inner, h, m.o_bias, 1, LinearRole::kAttention});
    out.push_back({"mlp.Wi", h, 2 * m.intermediate_size, m.mlp_bias, 1, LinearRole::kMlp});
    out.push_back({"mlp.Wo", m.intermediate_size, h, m.mlp_bias, 1, LinearRole::kMlp});
    return out;
  }
  if (m.is_mpnet()) {
    // MPNetLayer: attention.attn.{q,k,v,o} (MPNetSelfAttention), intermediate.dense, output.dense,
    // all nn.Linear with bias.
    for (const char* n : {"attn.q", "attn.k", "attn.v"}) out.push_back({n, h, inner, true, 1, LinearRole::kAttention});
    out.push_back({"attn.o", inner, h, true, 1, LinearRole::kAttention});
    out.push_back({"intermediate.dense", h, m.intermediate_size, true, 1, LinearRole::kMlp});
    out.push_back({"output.dense", m.intermediate_size, h, true, 1, LinearRole::kMlp});
    return out;
  }
  // BertLayer: attention.self.{query,key,value}, attention.output.dense, intermediate.dense,
  // output.dense, all nn.Linear with bias (RoBERTa and XLM-R reuse the same modules; DeBERTa's
  // DisentangledSelfAttention names them query_proj, key_proj, value_proj).
  const bool deberta = m.is_deberta();
  out.push_back({deberta ? "query_proj" : "query", h, inner, true, 1, LinearRole::kAttention});
  out.push_back({deberta ? "key_proj" : "key", h, inner, true, 1, LinearRole::kAttention});
  out.push_back({deberta ? "value_proj" : "value", h, inner, true, 1, LinearRole::kAttention});
  out.push_back({"attention.output.dense", inner, h, true, 1, LinearRole::kAttention});
  out.push_back({"intermediate.dense", h, m.intermediate_size, true, 1, LinearRole::kMlp});
  out.push_back({"output.dense", m.intermediate_size, h, true, 1, LinearRole::kMlp});
  return out;
}

bool encoder_has_pooler(const ModelSpec& m) {
  // DeBERTa's ContextPooler belongs to its sequence classifier, not to DebertaV2Model; NomicBERT's
  // from_pretrained builds NomicBertModel without its pooler, the classifier's with it.
  if (m.is_deberta() || m.is_nomic_bert()) return m.head == EncoderHead::kSequenceClassification;
  if (!m.pooler) return false;
  if (m.head == EncoderHead::kPooling) return true;
  // BertForSequenceClassification classifies the pooled [CLS]; RobertaForSequenceClassification
  // builds RobertaModel(add_pooling_layer=False) and its own head; *ForMaskedLM has no pooler.
  return m.head == EncoderHead::kSequenceClassification && m.model_type == "bert";
}

bool encoder_has_position_table(const ModelSpec& m) {
  if (m.is_modernbert()) return false;
  return !(m.is_deberta() || m.is_nomic_bert()) || m.learned_positions;
}

ParameterCounts count_encoder_parameters(const ModelSpec& m) {
  ParameterCounts c;
  const std::int64_t h = m.hidden_size, V = m.vocab_size;
  // Embeddings: word (V x h); BERT family: absolute positions and token types; a LayerNorm
  // (ModernBERT: tok_embeddings and a LayerNorm only, positions are rotary).
  c.embedding = V * h;
  if (encoder_has_position_table(m)) c.position_embedding = m.max_position_embeddings * h;
  c.position_embedding += m.type_vocab_size * h;
  // DebertaV2Encoder.rel_embeddings (2 x att_span rows) and its LayerNorm (norm_rel_ebd).
  c.position_embedding += 2 * m.relative_span * h;
  // MPNetEncoder.relative_attention_bias: one value per bucket and head.
  c.position_embedding += m.relative_attention_buckets * m.num_heads;
  if (m.rel_layer_norm) c.norms += layer_norm_params(m);
  c.norms += layer_norm_params(m);
  for (int l = 0; l < m.num_layers; ++l) {
    for (const auto& lin : encoder_layer_linears(m)) {
      const std::int64_t p = lin.weight_params() + lin.bias_params();
      (lin.role == LinearRole::kAttention ? c.attention : c.mlp) += p;
      c.layer_linear_weights += lin.weight_params();
    }
    // BertSelfOutput.LayerNorm and BertOutput.LayerNorm; ModernBERT's attn_norm is nn.Identity
    // in layer 0, then attn_norm and mlp_norm.
    c.norms += (m.is_modernbert() && l == 0 ? 1 : 2) * layer_norm_params(m);
  }
  if (m.is_modernbert()) c.norms += layer_norm_params(m);  // final_norm
  // Heads. BertPooler: dense (h x h + h) and tanh.
  std::int64_t head = encoder_has_pooler(m) ? h * h + h : 0;
  const bool modern = m.is_modernbert();
  // ModernBertPredictionHead: dense (bias=classifier_bias, false by default) + norm.
  const std::int64_t modern_head = h * h + layer_norm_params(m);
  switch (m.head) {
    case EncoderHead::kPooling: break;
    case EncoderHead::kMaskedLm:
      // BertLMPredictionHead / RobertaLMHead: transform dense (h x h + h), LayerNorm, decoder tied to
      // the word embedding plus its own bias (V). ModernBertForMaskedLM: head + decoder bias.
      // NomicBertPreTrainingHeads: dense and decoder biases only with mlp_fc1_bias.
      if (m.is_nomic_bert()) head += h * h + 2 * h + (m.mlp_bias ? h + V : 0);
      else head += (modern ? modern_head : h * h + h + 2 * h) + (m.decoder_bias ? V : 0);
      break;
    case EncoderHead::kSequenceClassification: {
      const std::int64_t classifier = h * m.num_labels + m.num_labels;
      if (modern) head += modern_head + classifier;                                // head + classifier
      else if (m.model_type == "bert" || m.is_deberta() || m.is_nomic_bert()) head += classifier;  // pooler + dropout + classifier
      else head += h * h + h + classifier;                                          // RobertaClassificationHead
      break;
    }
  }
  c.lm_head = head;
  c.total = c.embedding + c.position_embedding + c.attention + c.mlp + c.norms + c.lm_head;
  c.active_per_token = c.total;
  return c;
}

std::string to_string(EncoderHead h) {
  switch (h) {
    case EncoderHead::kPooling: return "pooling";
    case EncoderHead::kMaskedLm: return "mlm";
    case EncoderHead::kSequenceClassification: return "classification";
  }
  return "?";
}

Result<EncoderHead> parse_encoder_head(const std::string& raw) {
  const std::string s = to_lower(trim(raw));
  if (s == "pooling" || s == "mean" || s == "embedding" || s == "none") return EncoderHead::kPooling;
  if (s == "mlm" || s == "masked_lm" || s == "masked-lm") return EncoderHead::kMaskedLm;
  if (s == "classification" || s == "cls" || s == "sequence_classification" || s == "seq-cls")
    return EncoderHead::kSequenceClassification;
  return make_error(ErrorCode::kUnknownName, "unknown encoder head '" + raw + "'",
                    did_you_mean(s, {"pooling", "mlm", "classification"}));
}

std::string to_string(PoolingMode p) {
  switch (p) {
    case PoolingMode::kMean: return "mean";
    case PoolingMode::kCls: return "cls";
    case PoolingMode::kLastToken: return "lasttoken";
  }
  return "?";
}

std::string to_string(EmbeddingLibrary l) {
  switch (l) {
    case EmbeddingLibrary::kSentenceTransformers: return "sentence-transformers";
    case EmbeddingLibrary::kLlm2Vec: return "llm2vec";
  }
  return "?";
}

Result<PoolingMode> parse_pooling_mode(const std::string& raw) {
  // Also the key names of 1_Pooling/config.json (pooling_mode_mean_tokens, ...) without their prefix.
  std::string s = to_lower(trim(raw));
  if (s.rfind("pooling_mode_", 0) == 0) s = s.substr(13);
  if (s == "mean" || s == "mean_tokens" || s == "avg" || s == "average") return PoolingMode::kMean;
  if (s == "cls" || s == "cls_token" || s == "first") return PoolingMode::kCls;
  if (s == "lasttoken" || s == "last_token" || s == "last" || s == "eos") return PoolingMode::kLastToken;
  return make_error(ErrorCode::kUnknownName, "unknown pooling mode '" + raw + "'",
                    did_you_mean(s, {"mean", "cls", "lasttoken"}));
}

}  // namespace memplan

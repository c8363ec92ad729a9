// The encoder training step (docs/formulas.md#encoders): transformers' BertModel /
// RobertaModel / XLMRobertaModel forward (modeling_bert.py: embeddings with word, position and
// token-type tables, post-LayerNorm layers with biased q/k/v/o and a GELU MLP), DebertaV2Model
// (modeling_deberta_v2.py: the same layers with disentangled attention over relative positions;
// docs/formulas.md#deberta), NomicBertModel (nomic-ai's remote code: a packed Wqkv, rotary
// embeddings applied out of place, SwiGLU; docs/formulas.md#nomicbert) or ModernBertModel
// (modeling_modernbert.py: pre-LayerNorm layers with a packed Wqkv, rotary embeddings, global and
// local attention masks, a GeGLU MLP; docs/formulas.md#modernbert), one of three heads
// (sentence-transformers mean pooling with MultipleNegativesRankingLoss or its cached GradCache
// variant, *ForMaskedLM, *ForSequenceClassification), and backward, on the same Graph and Ops as
// the decoder program.
#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <stdexcept>

#include "core/sim/program.hpp"
#include "core/sim/sentence.hpp"

namespace memplan::sim {

namespace {

struct Lin {
  LinearModule mod;
  int w = -1, b = -1, A = -1, B = -1;
};

struct EncLayer {
  std::map<std::string, Lin> lin;
  int ln1_w = -1, ln1_b = -1, ln2_w = -1, ln2_b = -1;
};

bool lora_matches(const std::string& name, const std::vector<std::string>& targets) {
  for (const auto& t : targets)
    if (name == t || (name.size() > t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0 &&
                      name[name.size() - t.size() - 1] == '.'))
      return true;
  return false;
}

class EncoderStep {
 public:
  explicit EncoderStep(const ProgramSpec& sp) : sp_(sp), m_(sp.model), ops_(g_, sp.ops) {
    g_.reserve(4096, 1024);
    const auto& k = sp.contrastive;
    texts_ = k.texts();
    cached_ = k.enabled() && k.cached;
  }
  ProgramResult run();

 private:
  // Token counts of one forward. Uncached: the b sequences of one text column (sentence-transformers
  // runs the model once per column; without contrastive texts, the batch). Cached (GradCache): a
  // mini-batch of mini_batch_size sequences.
  Poly tok(std::int64_t k) const {
    return cached_ ? Poly::mono(kS, k * sp_.contrastive.mini_batch_size) : Poly::mono(kBS, k);
  }
  Poly seqs(std::int64_t k) const {
    return cached_ ? Poly::constant(k * sp_.contrastive.mini_batch_size) : Poly::mono(kB, k);
  }
  Poly scores(std::int64_t k) const {
    return cached_ ? Poly::mono(kSS, k * sp_.contrastive.mini_batch_size) : Poly::mono(kBSS, k);
  }
  static Poly c(std::int64_t v) { return Poly::constant(v); }
  DT act_dt() const { return sp_.weight_dt; }

  int param(std::int64_t numel, bool train, Cat cat = Cat::kWeights, std::int64_t rows = 0, std::int64_t cols = 0) {
    params_.push_back({numel, cat == Cat::kAdapterWeights ? sp_.adapter_dt : sp_.weight_dt, train, cur_layer_, rows,
                       cols, 1});
    return g_.param(c(numel), params_.back().dt, cat, train);
  }
  Lin make_linear(const LinearModule& mod);
  void make_params();

  // ModernBERT (docs/formulas.md#modernbert): the padded path (eager, SDPA) and the unpadded
  // flash_attention_2 path.
  bool modern() const { return m_.is_modernbert(); }
  bool unpadded() const { return modern() && sp_.attn == AttnImpl::kFlashAttention2; }
  void make_modern_params();
  void modern_masks();
  int modern_encode();
  int modern_layer(int h, int l);
  int modern_attention(int x, EncLayer& lp, bool local);
  int modern_classification_loss(int h);
  // DeBERTa-v2/v3 (docs/formulas.md#deberta): eager disentangled attention.
  bool deberta() const { return m_.is_deberta(); }
  int deberta_encode();
  void deberta_relative_positions();
  int deberta_attention(int x, EncLayer& lp);
  int deberta_relative_bias(int q, int k, EncLayer& lp);
  // p(x) through transpose_for_scores: view, permute, .contiguous() (a copy of `out` values; the
  // projection's output then freed).
  int transpose_for_scores(int x, Lin& p, const Poly& out);
  // NomicBERT (docs/formulas.md#nomicbert): nomic-ai's remote code, eager attention.
  bool nomic() const { return m_.is_nomic_bert(); }
  int nomic_layer(int h, int l);
  int nomic_attention(int x, EncLayer& lp);
  // What the model forward passes each layer besides its input and mask_ (the global mask):
  // gradient checkpointing keeps them for the recomputation.
  struct LayerArgs {
    int sliding = -1;                             // ModernBERT: the local layers' mask
    std::array<int, 2> cos{-1, -1}, sin{-1, -1};  // ModernBERT: rotary tables per layer type: 0 global, 1 local
    int rel_pos = -1, rel_emb = -1;               // DeBERTa: relative positions, (normalized) rel_embeddings
    std::vector<int> held() const { return {sliding, cos[0], sin[0], cos[1], sin[1], rel_pos, rel_emb}; }
  };
  // Whether each forward sees a single sequence (bmm then folds (b, heads) as a view).
  bool one_sequence() const { return sp_.batch_one && !cached_; }

  int layer_norm(int x, int w, int b, const Poly& numel, const Poly& rows);
  // A post-norm residual: LayerNorm(dropout(y) + residual), hidden-sized; y and residual are
  // taken (one reference each: a caller that keeps either holds it first).
  int dropout_add_norm(int y, int residual, int w, int b);
  // sum + table[ids] (an embedding lookup of `numel` values added to the running sum, taken).
  int add_embedding(int sum, int ids, int table, const Poly& numel);
  int lin(int x, Lin& p, const Poly& out);
  int attention(int x, EncLayer& lp);
  // BERT's eager_attention_forward on transposed q, k, v views (NomicBERT's is the same chain):
  // matmul, scale, + mask_, softmax, dropout, matmul with v, transpose + contiguous.
  int eager_attention(int qt, int kt, int vt, const Poly& qn);
  int layer(int h, int l);
  int checkpointed(int h, int l);
  int encode();                 // embeddings and every layer: the last hidden state
  // Every simulated layer on the embeddings' output; `keep`: each layer's output stays referenced
  // there (DeBERTa's output_hidden_states=True tuple) until the caller drops it.
  int layers(int cur, std::vector<int>* keep = nullptr);
  // sentence-transformers' Pooling on the last hidden state (sentence.hpp).
  // The Pooling module, then any Dense modules after it.
  int pool_tokens(int h) {
    const int pooled = pool(g_, ops_, h, m_.pooling, {tok(1), seqs(1), m_.hidden_size});
    return dense_modules(g_, ops_, pooled, m_.st_dense, dense_, seqs(1));
  }
  int mlm_loss(int h);
  // The MLM / classification prediction head's dense, GELU and LayerNorm (head_* parameters).
  int prediction_head(int x, const Poly& numel, const Poly& rows);
  // CrossEntropyLoss on the logits (kept by the caller): log_softmax (an fp32 copy first under
  // autocast, or always with `upcast`: ForMaskedLMLoss's .float()), NLL against int64 labels.
  int cross_entropy(int logits, const Poly& labels, bool upcast);
  int classification_loss(int h);
  int pooler(int h);

  const ProgramSpec& sp_;
  const ModelSpec& m_;
  Graph g_;
  Ops ops_;
  std::int64_t texts_ = 1;
  bool cached_ = false;
  int word_ = -1, pos_ = -1, type_ = -1, emb_ln_w_ = -1, emb_ln_b_ = -1;
  int pool_w_ = -1, pool_b_ = -1;
  int head_dense_w_ = -1, head_dense_b_ = -1, head_ln_w_ = -1, head_ln_b_ = -1, head_bias_ = -1;
  int cls_w_ = -1, cls_b_ = -1, cls_dense_w_ = -1, cls_dense_b_ = -1;
  Lin context_pooler_;               // DeBERTa's ContextPooler.dense (a LoRA "dense" target)
  std::vector<std::pair<int, int>> dense_;  // sentence-transformers Dense modules: weight, bias (-1: none)
  int rel_ = -1, rel_ln_w_ = -1, rel_ln_b_ = -1;  // DeBERTa rel_embeddings and its LayerNorm
  // MPNet (docs/models.md#mpnet): relative_attention_bias, and the (b, heads, s, s) position bias
  // the encoder computes from it once per forward and every layer adds to its scores.
  int mpnet_bias_table_ = -1, position_bias_ = -1;
  int mpnet_position_bias();
  std::vector<EncLayer> layers_;
  int ids_ = -1, types_ = -1, amask_ = -1, mask_ = -1;
  int final_w_ = -1, final_b_ = -1;  // ModernBERT final_norm
  LayerArgs args_;                    // ModernBERT's masks and tables, DeBERTa's relative positions
  int indices_ = -1;                  // unpadded path: the non-padding token indices (int64)
  // enable_input_require_grads (LoRA with checkpointing): the word embeddings' output becomes a
  // leaf that requires grad; its AccumulateGrad node holds it, and backward gives it a .grad, both
  // until the graph is freed (as in the decoder program).
  std::vector<int> input_leaves_;
  void enable_input_require_grads(int embeddings) {
    if (!sp_.lora.enabled || !sp_.gradient_checkpointing || g_.at(embeddings).requires_grad) return;
    g_.at(embeddings).requires_grad = true;
    g_.hold(embeddings);
    input_leaves_.push_back(embeddings);
  }
  void release_graph(int first) {
    std::vector<int> leaf_grads;
    for (const int leaf : input_leaves_)
      if (const int g = g_.take_grad(leaf); g >= 0) leaf_grads.push_back(g);
    g_.release_graph(first);
    for (const int g : leaf_grads) g_.drop(g);
    for (const int leaf : input_leaves_) g_.drop(leaf);
    input_leaves_.clear();
  }
  int cur_layer_ = -1;
  std::vector<ParamRec> params_;
};

Lin EncoderStep::make_linear(const LinearModule& mod) {
  Lin p;
  p.mod = mod;
  p.w = param(mod.weight_params(), sp_.full_finetune, Cat::kWeights, mod.out_features, mod.in_features);
  if (mod.bias) p.b = param(mod.bias_params(), sp_.full_finetune);
  if (sp_.lora.enabled && lora_matches(mod.name, sp_.lora.targets)) {
    const std::int64_t r = sp_.lora.r;
    p.A = param(r * mod.in_features, true, Cat::kAdapterWeights, r, mod.in_features);
    p.B = param(r * mod.out_features, true, Cat::kAdapterWeights, mod.out_features, r);
  }
  return p;
}

void EncoderStep::make_params() {
  if (modern()) return make_modern_params();
  const std::int64_t h = m_.hidden_size, V = m_.vocab_size;
  const bool ft = sp_.full_finetune;
  word_ = param(V * h, ft, Cat::kWeights, V, h);
  if (encoder_has_position_table(m_))
    pos_ = param(m_.max_position_embeddings * h, ft, Cat::kWeights, m_.max_position_embeddings, h);
  if (m_.type_vocab_size > 0) type_ = param(m_.type_vocab_size * h, ft, Cat::kWeights, m_.type_vocab_size, h);
  emb_ln_w_ = param(h, ft);
  emb_ln_b_ = param(h, ft);
  for (std::size_t l = 0; l < sp_.model_layers.size(); ++l) {
    cur_layer_ = static_cast<int>(l);
    EncLayer lp;
    for (const auto& mod : encoder_layer_linears(m_)) lp.lin.emplace(mod.name, make_linear(mod));
    lp.ln1_w = param(h, ft);
    lp.ln1_b = param(h, ft);
    lp.ln2_w = param(h, ft);
    lp.ln2_b = param(h, ft);
    layers_.push_back(std::move(lp));
  }
  cur_layer_ = -1;
  if (m_.relative_span > 0) {  // DebertaV2Encoder.rel_embeddings and LayerNorm
    rel_ = param(2 * m_.relative_span * h, ft, Cat::kWeights, 2 * m_.relative_span, h);
    if (m_.rel_layer_norm) {
      rel_ln_w_ = param(h, ft);
      rel_ln_b_ = param(h, ft);
    }
  }
  if (m_.relative_attention_buckets > 0)  // MPNetEncoder.relative_attention_bias
    mpnet_bias_table_ = param(m_.relative_attention_buckets * m_.num_heads, ft, Cat::kWeights,
                              m_.relative_attention_buckets, m_.num_heads);
  if (deberta() && encoder_has_pooler(m_))  // ContextPooler: frozen under LoRA (not in SEQ_CLS's modules_to_save)
    context_pooler_ = make_linear({"pooler.dense", h, h, true, 1, LinearRole::kMlp});
  // The pooler receives no gradient under mean pooling (its output is unused): AdamW keeps no
  // state for it. With the classifier it trains.
  const bool pool_train = ft && m_.head == EncoderHead::kSequenceClassification;
  if (encoder_has_pooler(m_) && !deberta()) {
    pool_w_ = param(h * h, pool_train, Cat::kWeights, h, h);
    pool_b_ = param(h, pool_train);
    // Full fine-tuning leaves it requires_grad: autocast caches its casts once per region.
    g_.at(pool_w_).cast_cached = g_.at(pool_b_).cast_cached = ft;
  }
  // sentence-transformers Dense modules after the pooling: outside the model PEFT wraps, trained
  // under LoRA too (docs/formulas.md#embeddinggemma).
  if (m_.head == EncoderHead::kPooling)
    for (const DenseModule& d : m_.st_dense)
      dense_.emplace_back(param(d.in_features * d.out_features, true, Cat::kWeights, d.out_features, d.in_features),
                          d.bias ? param(d.out_features, true) : -1);
  // Heads are created by AutoModelFor*: new modules PEFT's task types save in full
  // (modules_to_save for SEQ_CLS), so they train under LoRA too.
  const bool head_train = true;
  if (m_.head == EncoderHead::kMaskedLm) {
    // NomicBertPredictionHeadTransform and the decoder carry biases only with mlp_fc1_bias.
    const bool biases = nomic() ? m_.mlp_bias : true;
    head_dense_w_ = param(h * h, ft, Cat::kWeights, h, h);
    if (biases) head_dense_b_ = param(h, ft);
    head_ln_w_ = param(h, ft);
    head_ln_b_ = param(h, ft);
    if (nomic() ? m_.mlp_bias : m_.decoder_bias) head_bias_ = param(V, ft);
  } else if (m_.head == EncoderHead::kSequenceClassification) {
    if (m_.model_type != "bert" && !deberta() && !nomic()) {  // RobertaClassificationHead: dense + tanh, then out_proj
      cls_dense_w_ = param(h * h, head_train, Cat::kWeights, h, h);
      cls_dense_b_ = param(h, head_train);
    }
    cls_w_ = param(h * m_.num_labels, head_train, Cat::kWeights, m_.num_labels, h);
    cls_b_ = param(m_.num_labels, head_train);
  }
}

int EncoderStep::layer_norm(int x, int w, int b, const Poly& numel, const Poly& rows) {
  // native_layer_norm (autocast: an fp32 op): output, fp32 mean and rstd per row; saves input,
  // mean, rstd, weight and bias.
  const DT out_dt = ops_.autocast() ? DT::kF32 : g_.at(x).dt;
  const int y = g_.make(numel, out_dt, ops_.cat);
  const int mean = g_.make(rows, DT::kF32, ops_.cat);
  const int rstd = g_.make(rows, DT::kF32, ops_.cat);
  g_.node({x, w, b}, {y}, {x, mean, rstd, w, b}, [x, w, b](Bwd& ctx) {
    const int gx = ctx.needs(x) ? ctx.like(x) : -1;
    const int gw = ctx.needs(w) ? ctx.like(w) : -1;
    const int gb = b >= 0 && ctx.needs(b) ? ctx.like(b) : -1;
    if (gx >= 0) ctx.give(x, gx);
    if (gw >= 0) ctx.give(w, gw);
    if (gb >= 0) ctx.give(b, gb);
  });
  g_.drop(mean);
  g_.drop(rstd);
  return y;
}

int EncoderStep::dropout_add_norm(int y, int residual, int w, int b) {
  const Poly n = tok(m_.hidden_size);
  const int dropped = ops_.dropout(y, m_.hidden_dropout);
  g_.drop(y);
  const int sum = ops_.add(dropped, residual, n);
  g_.drop(dropped);
  g_.drop(residual);
  const int out = layer_norm(sum, w, b, n, tok(1));
  g_.drop(sum);
  return out;
}

int EncoderStep::add_embedding(int sum, int ids, int table, const Poly& numel) {
  const int t = ops_.embedding(ids, table, numel);
  const int out = ops_.add(sum, t, tok(m_.hidden_size));
  g_.drop(sum);
  g_.drop(t);
  return out;
}

int EncoderStep::lin(int x, Lin& p, const Poly& out) {
  const int base = ops_.linear(x, p.w, p.b, out);
  if (p.A < 0) return base;
  // peft lora.Linear: x.to(lora_A dtype), dropout, B(A(x)) * scaling, added to the base output.
  const DT res_dt = g_.at(base).dt;
  const Cat saved = ops_.cat;
  ops_.cat = Cat::kLoraDropout;
  const int xc = ops_.to(x, sp_.adapter_dt);
  const int d = ops_.dropout(xc, sp_.lora.dropout);
  Poly a_numel = out;
  for (auto& v : a_numel.c) v = v / p.mod.out_features * sp_.lora.r;
  const int a = ops_.linear(d, p.A, -1, a_numel);
  g_.drop(d);
  const int bb = ops_.linear(a, p.B, -1, out);
  g_.drop(a);
  ops_.cat = saved;
  const int sc = ops_.scalar_op(bb);
  g_.drop(bb);
  const int sum = ops_.add(base, sc, out);
  g_.drop(base);
  g_.drop(sc);
  const int res = ops_.to(sum, res_dt);
  g_.drop(sum);
  g_.drop(xc);
  return res;
}

int EncoderStep::eager_attention(int qt, int kt, int vt, const Poly& qn) {
  ops_.cat = Cat::kAttentionScores;
  // torch.matmul folds (b, heads) into bmm's batch with reshape: the transposed q, k and v
  // views are copies then (and saved by bmm), unless a single sequence makes them views.
  const std::int64_t nh = m_.num_heads;
  const bool one = one_sequence();
  const int kT = ops_.view(kt);
  const int sc = ops_.matmul(qt, kT, scores(nh), !one, !one);
  g_.drop(kT);
  const int scaled = ops_.scalar_op(sc);  // * scaling
  g_.drop(sc);
  int biased = scaled;
  if (position_bias_ >= 0) {
    // MPNet: attention_scores += position_bias, in place (no new tensor); backward passes the
    // gradient on to the scores and to the shared bias.
    biased = g_.view(scaled, scores(nh));
    const int pb = position_bias_;
    g_.node({scaled, pb}, {biased}, {}, [scaled, pb](Bwd& ctx) {
      ctx.pass(scaled, ctx.grad());
      if (ctx.needs(pb)) ctx.give(pb, ctx.like(pb));
    });
    g_.drop(scaled);
  }
  const int masked = ops_.add(biased, mask_, scores(nh));
  g_.drop(biased);
  const int probs = ops_.softmax(masked);
  g_.drop(masked);
  const int dropped = ops_.dropout(probs, m_.attention_dropout);
  g_.drop(probs);
  return ops_.attention_output(dropped, vt, qn, !one);
}

int EncoderStep::attention(int x, EncLayer& lp) {
  // BertSelfAttention: query/key/value Linear with bias, view + transpose(1, 2), then eager
  // (matmul, scale, + mask, softmax, dropout, matmul) or SDPA (dropout_p = 0.1 in training).
  const std::int64_t nh = m_.num_heads, hd = m_.head_dim, inner = nh * hd;
  const Poly qn = tok(inner);
  // MPNetSelfAttention names them q, k, v (and o): the same chain with the position bias.
  const bool mpnet = m_.is_mpnet();
  const int q = lin(x, lp.lin.at(mpnet ? "attn.q" : "query"), qn);
  const int k = lin(x, lp.lin.at(mpnet ? "attn.k" : "key"), qn);
  const int v = lin(x, lp.lin.at(mpnet ? "attn.v" : "value"), qn);
  const int qt = ops_.transpose_view(q);
  const int kt = ops_.transpose_view(k);
  const int vt = ops_.transpose_view(v);
  g_.drop(q);
  g_.drop(k);
  g_.drop(v);
  int out = -1;
  if (sp_.attn == AttnImpl::kEager) {
    out = eager_attention(qt, kt, vt, qn);
  } else {
    // SDPA / flash: no (s x s) tensor; saves q, k, v, the output and a per-row fp32 logsumexp
    // (dropout by Philox offsets, no mask). Backward: dq, dk, dv, an fp32 dq accumulator.
    const int q16 = ops_.cast_for_autocast(qt);
    const int k16 = ops_.cast_for_autocast(kt);
    const int v16 = ops_.cast_for_autocast(vt);
    const int o = g_.make(qn, g_.at(q16).dt, ops_.cat);
    const Poly rows = tok(nh);
    const int lse = g_.make(rows, DT::kF32, ops_.cat);
    g_.node({q16, k16, v16}, {o}, {q16, k16, v16, o, lse}, [q16, k16, v16, rows, qn](Bwd& ctx) {
      const int acc = ctx.temp(qn, DT::kF32);
      const int d = ctx.temp(rows, DT::kF32);
      const int gq = ctx.needs(q16) ? ctx.like(q16) : -1;
      const int gk = ctx.needs(k16) ? ctx.like(k16) : -1;
      const int gv = ctx.needs(v16) ? ctx.like(v16) : -1;
      ctx.drop(acc);
      ctx.drop(d);
      if (gq >= 0) ctx.give(q16, gq);
      if (gk >= 0) ctx.give(k16, gk);
      if (gv >= 0) ctx.give(v16, gv);
    });
    g_.drop(lse);
    g_.drop(q16);
    g_.drop(k16);
    g_.drop(v16);
    out = ops_.view(o);
    g_.drop(o);
  }
  g_.drop(qt);
  g_.drop(kt);
  g_.drop(vt);
  const int r = ops_.view(out);  // reshape(b, s, all_head_size)
  g_.drop(out);
  return r;
}

int EncoderStep::layer(int h, int l) {
  if (modern()) return modern_layer(h, l);
  if (nomic()) return nomic_layer(h, l);
  EncLayer& lp = layers_[static_cast<std::size_t>(l)];
  const Poly n = tok(m_.hidden_size);
  const int ctx = deberta() ? deberta_attention(h, lp) : attention(h, lp);
  // BertSelfOutput: dense, dropout, LayerNorm(hidden + input). The self-attention's output is
  // BertAttention's local until it returns: alive through the LayerNorm (with frozen weights
  // nothing else keeps it).
  const int d = lin(ctx, lp.lin.at(m_.is_mpnet() ? "attn.o" : "attention.output.dense"), n);
  g_.hold(h);  // the layer's input stays the caller's
  const int a = dropout_add_norm(d, h, lp.ln1_w, lp.ln1_b);
  g_.drop(ctx);
  // BertIntermediate: dense + GELU; BertOutput: dense, dropout, LayerNorm(hidden + attention
  // output); feed_forward_chunk keeps the intermediate output until BertOutput returns.
  const int i = lin(a, lp.lin.at("intermediate.dense"), tok(m_.intermediate_size));
  const int act = ops_.gelu(i);
  g_.drop(i);
  const int o = lin(act, lp.lin.at("output.dense"), n);
  const int out = dropout_add_norm(o, a, lp.ln2_w, lp.ln2_b);
  g_.drop(act);
  return out;
}

int EncoderStep::checkpointed(int h, int l) {
  // transformers' GradientCheckpointingLayer -> torch.utils.checkpoint, as for decoders
  // (program.cpp): reentrant keeps the input and reruns the layer in backward; non-reentrant
  // keeps nothing of the region and recaptures it on first use.
  const std::optional<DT> ac = ops_.autocast();
  if (g_.at(h).cat == Cat::kActivations) g_.retag(h, Cat::kCheckpoints);
  const int rng = g_.make(Poly::constant(5056), DT::kU8, Cat::kCheckpoints);
  // What the layer is called with besides its input (the masks; ModernBERT's rotary tables).
  std::vector<int> held{h};
  std::vector<int> args = args_.held();
  args.push_back(mask_);
  for (int t : args)
    if (t >= 0 && std::find(held.begin(), held.end(), t) == held.end()) held.push_back(t);
  if (!sp_.checkpoint_reentrant) {
    held.push_back(rng);
    g_.begin_checkpoint_region(
        [this, h, l, ac, mask = mask_, args = args_]() {
          // The recomputation runs in backward, after encode() let go of the mask: the closure's
          // reference (holds) keeps it, as functools.partial does.
          const int outer_mask = mask_;
          const LayerArgs outer_args = args_;
          mask_ = mask;
          args_ = args;
          const int rng2 = g_.make(Poly::constant(5056), DT::kU8, Cat::kCheckpoints);
          const Cat saved = ops_.cat;
          ops_.cat = Cat::kActivations;
          if (ac) ops_.enter_autocast(*ac);
          const int unused = layer(h, l);
          if (ac) ops_.exit_autocast();
          ops_.cat = saved;
          g_.drop(unused);
          g_.drop(rng2);
          mask_ = outer_mask;
          args_ = outer_args;
        },
        held);
    const int out = layer(h, l);
    g_.end_checkpoint_region();
    g_.drop(rng);
    return out;
  }
  const bool outer = g_.grad_enabled();
  g_.set_grad_enabled(false);
  const int out = layer(h, l);
  g_.set_grad_enabled(outer);
  held.push_back(rng);
  g_.node({h}, {out}, Ids(held), [this, h, l, ac, mask = mask_, args = args_](Bwd& ctx) {
    Graph& g = ctx.graph();
    const int outer_mask = mask_;
    const LayerArgs outer_args = args_;
    mask_ = mask;
    args_ = args;
    const int rng2 = g.make(Poly::constant(5056), DT::kU8, Cat::kCheckpoints);
    const int hv = g.view(h, g.at(h).numel);
    g.at(hv).requires_grad = g.at(h).requires_grad;
    const int first = g.node_count();
    const bool prev = g.grad_enabled();
    g.set_grad_enabled(true);
    const Cat saved = ops_.cat;
    ops_.cat = Cat::kActivations;
    if (ac) ops_.enter_autocast(*ac);
    const int rec = layer(hv, l);
    if (ac) ops_.exit_autocast();
    ops_.cat = saved;
    g.set_grad_enabled(false);
    g.hold(ctx.grad());
    g.backward_from(rec, ctx.grad(), first);
    g.release_graph(first);
    g.drop(rec);
    g.drop(rng2);
    g.set_grad_enabled(prev);
    const int gi = g.take_grad(hv);
    g.drop(hv);
    mask_ = outer_mask;
    args_ = outer_args;
    if (gi >= 0) ctx.give(h, gi);
  });
  g_.drop(rng);
  return out;
}

int EncoderStep::layers(int cur, std::vector<int>* keep) {
  // Each simulated layer's events in its segment: the first, the middle ones (as instances), the last.
  const int L = static_cast<int>(sp_.model_layers.size());
  for (int l = 0; l < L; ++l) {
    const bool last = l == L - 1 && L > 1;
    g_.set_segment(kSegFwdFirst + (l == 0 ? 0 : (last ? 2 : 1)));
    g_.set_instance(l == 0 || last ? 0 : l - 1);
    ops_.cat = Cat::kActivations;
    const int next = sp_.gradient_checkpointing && g_.grad_enabled() ? checkpointed(cur, l) : layer(cur, l);
    if (keep) {
      g_.hold(next);
      keep->push_back(next);
    }
    g_.drop(cur);
    cur = next;
  }
  g_.set_instance(0);
  return cur;
}

int EncoderStep::encode() {
  if (modern()) return modern_encode();
  if (deberta()) return deberta_encode();
  const std::int64_t h = m_.hidden_size;
  ops_.cat = Cat::kActivations;
  // BertEmbeddings: word + token_type, + absolute positions, LayerNorm, dropout. PEFT's
  // enable_input_require_grads hooks get_input_embeddings(), the word embeddings: their output.
  int e = ops_.embedding(ids_, word_, tok(h));
  enable_input_require_grads(e);
  if (type_ >= 0) e = add_embedding(e, types_, type_, tok(h));
  int pids = -1;
  if (pos_ >= 0) {  // NomicBERT with rotary embeddings has no position table
    pids = g_.make(Poly::mono(kS, 1), DT::kI64, Cat::kInputs);  // position_ids (1, s)
    e = add_embedding(e, pids, pos_, Poly::mono(kS, h));
  }
  const int n = layer_norm(e, emb_ln_w_, emb_ln_b_, tok(h), tok(1));
  g_.drop(e);
  int cur = ops_.dropout(n, m_.hidden_dropout);
  g_.drop(n);
  if (pids >= 0) g_.drop(pids);
  // The attention mask: eager adds get_extended_attention_mask's (b, 1, 1, s) mask in the
  // activation dtype ((1 - mask) * finfo.min); SDPA without padding gets none
  // (docs/formulas.md#encoders).
  mask_ = sp_.attn == AttnImpl::kEager ? g_.make(tok(1), g_.at(cur).dt, Cat::kInputs)
                                       : g_.make(Poly{}, DT::kBool, Cat::kInputs);
  if (mpnet_bias_table_ >= 0) position_bias_ = mpnet_position_bias();
  cur = layers(cur);
  g_.drop(mask_);
  mask_ = -1;
  if (position_bias_ >= 0) g_.drop(position_bias_);
  position_bias_ = -1;
  return cur;
}

int EncoderStep::mpnet_position_bias() {
  // MPNetEncoder.compute_position_bias (docs/models.md#mpnet): the (s, s) int64 relative
  // positions of two aranges; relative_position_bucket turns them into bucket ids through (s, s)
  // temporaries (a sign mask to int64, abs, n.float() / max_exact, log, back to int64, min,
  // where), of which an int64 and two fp32 ones are alive at once; the bucket ids stay (the
  // lookup saves them). relative_attention_bias(rp_bucket) is (s, s, heads) in the table's
  // dtype; .permute().unsqueeze(0) are views and .expand(b, ...).contiguous() a (b, heads, s, s)
  // copy, which the encoder passes to every layer.
  const Poly ss = Poly::mono(kSS, 1);
  ops_.cat = Cat::kInputs;
  const int rel = g_.make(ss, DT::kI64, Cat::kInputs);
  const int n = g_.make(ss, DT::kI64, Cat::kInputs);
  g_.drop(rel);
  const int nf = g_.make(ss, DT::kF32, Cat::kInputs);
  const int lg = g_.make(ss, DT::kF32, Cat::kInputs);
  g_.drop(nf);
  const int large = g_.make(ss, DT::kI64, Cat::kInputs);
  g_.drop(lg);
  const int bucket = g_.make(ss, DT::kI64, Cat::kInputs);
  g_.drop(large);
  g_.drop(n);
  ops_.cat = Cat::kActivations;
  const int values = ops_.embedding(bucket, mpnet_bias_table_, Poly::mono(kSS, m_.num_heads));
  g_.drop(bucket);
  const int bias = g_.make(scores(m_.num_heads), g_.at(values).dt, Cat::kActivations);
  g_.node({values}, {bias}, {}, [values](Bwd& ctx) { ctx.give(values, ctx.like(values)); });
  g_.drop(values);
  return bias;
}

int EncoderStep::pooler(int h) {
  // BertPooler: hidden_states[:, 0] (a view), dense, tanh.
  const std::int64_t hs = m_.hidden_size;
  const int first = g_.view(h, seqs(hs));
  g_.node({h}, {first}, {}, [h](Bwd& c) { c.give(h, c.like(h)); });  // select_backward: zeros + copy
  const Lin pl{{"pooler", hs, hs, true, 1, LinearRole::kMlp}, pool_w_, pool_b_, -1, -1};
  const int d = ops_.linear(first, pl.w, pl.b, seqs(hs));
  g_.drop(first);
  const int t = ops_.tanh(d);
  g_.drop(d);
  return t;
}

int EncoderStep::prediction_head(int x, const Poly& numel, const Poly& rows) {
  const int d = ops_.linear(x, head_dense_w_, head_dense_b_, numel);
  const int a = ops_.gelu(d);
  g_.drop(d);
  const int n = layer_norm(a, head_ln_w_, head_ln_b_, numel, rows);
  g_.drop(a);
  return n;
}

int EncoderStep::cross_entropy(int logits, const Poly& labels_numel, bool upcast) {
  const int in = upcast || ops_.autocast() ? ops_.to(logits, DT::kF32) : (g_.hold(logits), logits);
  const int labels = g_.make(labels_numel, DT::kI64, Cat::kInputs);
  const int logp = ops_.log_softmax(in);
  g_.drop(in);
  const int loss = ops_.nll_loss(logp, labels);
  g_.drop(logp);
  g_.drop(labels);
  return loss;
}

int EncoderStep::mlm_loss(int h) {
  // BertOnlyMLMHead: transform (dense, GELU, LayerNorm), decoder (tied word embedding) + bias;
  // CrossEntropyLoss on (b*s, V) logits as returned (autocast: log_softmax upcasts to fp32).
  // ModernBertForMaskedLM: the same shape of head (dense, GELU, norm) and tied decoder;
  // ForMaskedLMLoss upcasts the logits (.float()) before cross_entropy, and the unpadded path
  // then repads them under no_grad (zeros(b * s, V) + index_put_) for MaskedLMOutput.
  const std::int64_t hs = m_.hidden_size, V = m_.vocab_size;
  const int n = prediction_head(h, tok(hs), tok(1));
  ops_.cat = Cat::kLogits;
  const int logits = ops_.linear(n, word_, head_bias_, tok(V));
  g_.drop(n);
  const int loss = cross_entropy(logits, tok(1), modern());
  const int padded = unpadded() ? g_.make(tok(V), g_.at(logits).dt, Cat::kLogits) : -1;
  g_.drop(logits);  // MaskedLMOutput is dropped by compute_loss before backward
  if (padded >= 0) g_.drop(padded);
  return loss;
}

int EncoderStep::classification_loss(int h) {
  const std::int64_t hs = m_.hidden_size, L = m_.num_labels;
  int feat = -1;
  if (deberta()) {
    // ContextPooler: hidden_states[:, 0], dropout (pooler_dropout 0: identity), dense, GELU; then
    // the classifier's dropout (hidden_dropout_prob).
    const int first = g_.view(h, seqs(hs));
    g_.node({h}, {first}, {}, [h](Bwd& c) { c.give(h, c.like(h)); });
    const int d = lin(first, context_pooler_, seqs(hs));
    g_.drop(first);
    const int a = ops_.gelu(d);
    g_.drop(d);
    feat = ops_.dropout(a, m_.hidden_dropout);
    g_.drop(a);
  } else if (m_.model_type == "bert" || nomic()) {
    const int pooled = pooler(h);  // dropout, classifier on the pooled [CLS]
    feat = ops_.dropout(pooled, m_.hidden_dropout);
    g_.drop(pooled);
  } else {
    // RobertaClassificationHead: x[:, 0], dropout, dense, tanh, dropout, out_proj.
    const int first = g_.view(h, seqs(hs));
    g_.node({h}, {first}, {}, [h](Bwd& c) { c.give(h, c.like(h)); });
    const int d0 = ops_.dropout(first, m_.hidden_dropout);
    g_.drop(first);
    const int d = ops_.linear(d0, cls_dense_w_, cls_dense_b_, seqs(hs));
    g_.drop(d0);
    const int t = ops_.tanh(d);
    g_.drop(d);
    feat = ops_.dropout(t, m_.hidden_dropout);
    g_.drop(t);
  }
  ops_.cat = Cat::kLogits;
  const int logits = ops_.linear(feat, cls_w_, cls_b_, seqs(L));
  g_.drop(feat);
  // DeBERTa gathers the labelled rows ((labels >= 0).nonzero()) and upcasts them: .float().
  const int loss = cross_entropy(logits, seqs(1), deberta());
  g_.drop(logits);
  return loss;
}

// ---- DeBERTa-v2/v3 (docs/formulas.md#deberta), read from transformers 4.57 / 5.x
// modeling_deberta_v2.py (eager only: DeBERTa has no SDPA or flash path).

int EncoderStep::deberta_encode() {
  const std::int64_t h = m_.hidden_size;
  ops_.cat = Cat::kActivations;
  // DebertaV2Embeddings: word (+ absolute positions when position_biased_input; otherwise
  // torch.zeros_like(inputs_embeds), alive until the module returns) (+ token types), LayerNorm,
  // times the input mask (mask.unsqueeze(2).to(dtype): MulBackward keeps it), dropout.
  int e = ops_.embedding(ids_, word_, tok(h));
  enable_input_require_grads(e);  // PEFT hooks the word embeddings' output
  int zeros = -1;
  if (pos_ >= 0) {
    const int pids = g_.make(Poly::mono(kS, 1), DT::kI64, Cat::kInputs);
    e = add_embedding(e, pids, pos_, Poly::mono(kS, h));
    g_.drop(pids);
  } else {
    zeros = g_.make(tok(h), g_.at(e).dt, Cat::kActivations);
  }
  if (type_ >= 0) e = add_embedding(e, types_, type_, tok(h));
  const int n = layer_norm(e, emb_ln_w_, emb_ln_b_, tok(h), tok(1));
  g_.drop(e);
  const int mf = g_.make(tok(1), g_.at(n).dt, Cat::kActivations);
  const int masked = ops_.mul(n, mf, tok(h));
  g_.drop(n);
  g_.drop(mf);
  int cur = ops_.dropout(masked, m_.hidden_dropout);
  g_.drop(masked);
  if (zeros >= 0) g_.drop(zeros);
  // DebertaV2Encoder: get_attention_mask multiplies the (b, s) int64 mask into a (b, 1, s, s)
  // int64 one; the relative positions and the LayerNorm-ed rel_embeddings are computed once.
  mask_ = g_.make(scores(1), DT::kI64, Cat::kInputs);
  if (m_.relative_span > 0) {
    deberta_relative_positions();
    const std::int64_t rows = 2 * m_.relative_span;
    args_.rel_emb = rel_ln_w_ >= 0 ? layer_norm(rel_, rel_ln_w_, rel_ln_b_, c(rows * h), c(rows)) : (g_.hold(rel_), rel_);
  }
  // output_hidden_states=True: the encoder's tuple holds the embeddings and every layer's output
  // until DebertaV2Model.forward returns.
  std::vector<int> hidden{cur};
  g_.hold(cur);
  cur = layers(cur, &hidden);
  for (const int t : hidden) g_.drop(t);
  for (const int t : {mask_, args_.rel_pos, args_.rel_emb})
    if (t >= 0) g_.drop(t);
  mask_ = -1;
  args_ = LayerArgs{};
  return cur;
}

void EncoderStep::deberta_relative_positions() {
  // build_relative_position: arange(s) twice, their (s, s) int64 difference; with position
  // buckets make_log_bucket_position's sign, masks, abs and fp32 log terms, then .to(long).
  const Poly ss = Poly::mono(kSS, 1);
  const int q_ids = g_.make(Poly::mono(kS, 1), DT::kI64, Cat::kInputs);
  const int k_ids = g_.make(Poly::mono(kS, 1), DT::kI64, Cat::kInputs);
  int rel = g_.make(ss, DT::kI64, Cat::kInputs);
  if (m_.relative_buckets) {
    const auto make = [&](DT dt) { return g_.make(ss, dt, Cat::kInputs); };
    const int sign = make(DT::kI64);
    const int lt = make(DT::kBool), gt = make(DT::kBool), both = make(DT::kBool);
    g_.drop(lt);
    g_.drop(gt);
    const int abs_rel = make(DT::kI64);
    const int abs_pos = make(DT::kI64);  // torch.where
    g_.drop(abs_rel);
    g_.drop(both);
    int log_pos = make(DT::kF32);  // abs_pos / mid, then log, / log(...), * (mid - 1), ceil, + mid
    for (int i = 0; i < 5; ++i) {
      const int next = make(DT::kF32);
      g_.drop(log_pos);
      log_pos = next;
    }
    const int near = make(DT::kBool), rel_f = make(DT::kF32), signed_log = make(DT::kF32);
    const int bucket = make(DT::kF32);  // torch.where
    for (const int t : {near, rel_f, signed_log, log_pos, abs_pos, sign}) g_.drop(t);
    const int as_long = make(DT::kI64);
    g_.drop(bucket);
    g_.drop(rel);
    rel = as_long;
  }
  g_.drop(q_ids);
  g_.drop(k_ids);
  args_.rel_pos = rel;
}

int EncoderStep::transpose_for_scores(int x, Lin& p, const Poly& out) {
  const int y = lin(x, p, out);
  const int t = ops_.transpose_view(y);
  g_.drop(y);
  const int copy = ops_.clone(t);
  g_.drop(t);
  return copy;
}

int EncoderStep::deberta_attention(int x, EncLayer& lp) {
  // DisentangledSelfAttention: query/key/value_proj, transpose_for_scores (view, permute,
  // .contiguous(): a (b x heads, s, d) copy of each); scores = bmm(q, k^T / scale) (a new
  // k-sized tensor, saved with q); + the relative-position bias; masked_fill(~mask.bool(), min)
  // (the inverted bool (b, 1, s, s) mask saved); softmax (fp32 under autocast); dropout; bmm
  // with v; permute + contiguous back to (b, s, heads x d).
  const std::int64_t inner = static_cast<std::int64_t>(m_.num_heads) * m_.head_dim;
  const Poly qn = tok(inner), sn = scores(m_.num_heads);
  const int q = transpose_for_scores(x, lp.lin.at("query_proj"), qn);
  const int k = transpose_for_scores(x, lp.lin.at("key_proj"), qn);
  const int v = transpose_for_scores(x, lp.lin.at("value_proj"), qn);
  ops_.cat = Cat::kAttentionScores;
  const int kT = ops_.view(k);
  const int k_scaled = ops_.scalar_op(kT);
  g_.drop(kT);
  int sc = ops_.matmul(q, k_scaled, sn);
  g_.drop(k_scaled);
  // rel_att, the masked scores and attention_mask.bool() are locals of the forward: alive until
  // it returns, after the output's bmm and copy.
  const int bias = m_.relative_span > 0 && (m_.c2p || m_.p2c) ? deberta_relative_bias(q, k, lp) : -1;
  if (bias >= 0) {
    const int sum = ops_.add(sc, bias, sn);
    g_.drop(sc);
    sc = sum;
  }
  const int as_bool = g_.make(scores(1), DT::kBool, ops_.cat);
  const int inverted = g_.make(scores(1), DT::kBool, ops_.cat);
  const int masked = g_.make(sn, g_.at(sc).dt, ops_.cat);
  g_.node({sc}, {masked}, {inverted}, [sc](Bwd& ctx) { ctx.give(sc, ctx.like(sc)); });
  g_.drop(sc);
  g_.drop(inverted);
  const int probs = ops_.softmax(masked);
  const int dropped = ops_.dropout(probs, m_.attention_dropout);
  g_.drop(probs);
  const int out = ops_.attention_output(dropped, v, qn, false);
  g_.drop(q);
  g_.drop(k);
  g_.drop(v);
  for (const int t : {bias, masked, as_bool})
    if (t >= 0) g_.drop(t);
  const int r = ops_.view(out);  // view(b, s, heads x d)
  g_.drop(out);
  return r;
}

int EncoderStep::deberta_relative_bias(int q, int k, EncLayer& lp) {
  // disentangled_attention_bias with share_att_key: pos_dropout on the relative embeddings,
  // query_proj / key_proj of its 2 x span rows, transpose_for_scores, .repeat(b, 1, 1) (a
  // (b x heads, 2 span, d) copy, saved by the bmm). c2p: bmm(q, pos_key^T) is (b x heads, s,
  // 2 span), gathered at clamp(relative_pos + span) (an (s, s) int64 index; gather saves its
  // input and the index), / scale; p2c: the same from k and pos_query, transposed. The first
  // term is added to the integer 0 (a copy), the second in place.
  const std::int64_t inner = static_cast<std::int64_t>(m_.num_heads) * m_.head_dim, P = 2 * m_.relative_span;
  const Poly sn = scores(m_.num_heads), pn = tok(m_.num_heads * P), ss = Poly::mono(kSS, 1);
  const Cat cat = ops_.cat;
  ops_.cat = Cat::kActivations;
  const int rel = ops_.dropout(args_.rel_emb, m_.hidden_dropout);
  const auto project = [&](const char* name) {
    const int copy = transpose_for_scores(rel, lp.lin.at(name), c(P * inner));
    const int rep = g_.make(seqs(P * inner), g_.at(copy).dt, ops_.cat);
    g_.node({copy}, {rep}, {}, [copy](Bwd& ctx) { ctx.give(copy, ctx.like(copy)); });  // sum over the repeats
    g_.drop(copy);
    return rep;
  };
  // Both projections whichever terms pos_att_type asks for (share_att_key computes them first);
  // an unused one dies with its graph when the function returns (simulated without grad: what
  // its graph would save, the rows' inputs, is alive anyway).
  const auto projection = [&](const char* name, bool used) {
    const bool outer = g_.grad_enabled();
    if (!used) g_.set_grad_enabled(false);
    const int r = project(name);
    g_.set_grad_enabled(outer);
    return r;
  };
  const int pos_q = projection("query_proj", m_.p2c);
  const int pos_k = projection("key_proj", m_.c2p);
  g_.drop(rel);
  ops_.cat = cat;
  int score = -1;
  std::vector<int> gathered_terms;
  const auto term = [&](int content, int position, int index_temps) {
    const int pT = ops_.view(position);
    const int att = ops_.matmul(content, pT, pn);
    g_.drop(pT);
    int tmp = -1;
    for (int i = 0; i < index_temps; ++i) {  // relative_pos + span (p2c: -relative_pos first)
      const int next = g_.make(ss, DT::kI64, Cat::kInputs);
      if (tmp >= 0) g_.drop(tmp);
      tmp = next;
    }
    const int index = g_.make(ss, DT::kI64, Cat::kInputs);  // clamp
    g_.drop(tmp);
    const int gathered = g_.make(sn, g_.at(att).dt, cat);
    g_.node({att}, {gathered}, {att, index}, [att](Bwd& ctx) { ctx.give(att, ctx.like(att)); });  // zeros + scatter_add_
    g_.drop(att);
    g_.drop(index);
    const int scaled = ops_.scalar_op(gathered);
    gathered_terms.push_back(gathered);  // c2p_att / p2c_att: locals until the function returns
    if (score < 0) {
      score = ops_.scalar_op(scaled);  // 0 + tensor
    } else {
      const int v = g_.view(score, sn);  // score += ...: in place
      g_.node({score, scaled}, {v}, {}, [score, scaled](Bwd& ctx) {
        ctx.pass(score, ctx.grad());
        ctx.pass(scaled, ctx.grad());
      });
      g_.drop(score);
      score = v;
    }
    g_.drop(scaled);
  };
  if (m_.c2p) term(q, pos_k, 1);
  if (m_.p2c) term(k, pos_q, 2);
  for (const int t : gathered_terms) g_.drop(t);
  g_.drop(pos_q);
  g_.drop(pos_k);
  return score;
}

// ---- NomicBERT (docs/formulas.md#nomicbert), read from nomic-ai's remote code
// (contrastors models/huggingface/modeling_hf_nomic_bert.py, the file the hub's nomic-bert-2048
// serves): post-norm blocks with a packed Wqkv, rotary embeddings applied out of place and the
// heads re-stacked, eager attention, a SwiGLU MLP.

int EncoderStep::nomic_layer(int h, int l) {
  // NomicBertBlock (prenorm false): norm1(dropout1(attn(h)) + h), then
  // norm2(dropout2(mlp(x)) + x); the .to(norm dtype) casts are no-ops (fp32 sums under autocast).
  EncLayer& lp = layers_[static_cast<std::size_t>(l)];
  const std::int64_t I = m_.intermediate_size;
  const Poly n = tok(m_.hidden_size);
  // attn_outputs and mlp_out are locals of the block: alive until it returns.
  const int a = nomic_attention(h, lp);
  g_.hold(a);
  g_.hold(h);  // the block's input stays the caller's
  const int x = dropout_add_norm(a, h, lp.ln1_w, lp.ln1_b);
  int y = -1;
  if (m_.gated_mlp) {
    // NomciBertGatedMLP: y = fc11(x) * act(fc12(x)) (SwiGLU: silu; GeGLU: gelu), fc2.
    const int value = lin(x, lp.lin.at("mlp.fc11"), tok(I));
    const int gate = lin(x, lp.lin.at("mlp.fc12"), tok(I));
    const int act = m_.activation == Activation::kSilu ? ops_.silu(gate) : ops_.gelu(gate);
    g_.drop(gate);
    const int prod = ops_.mul(value, act, tok(I));
    g_.drop(value);
    g_.drop(act);
    y = lin(prod, lp.lin.at("mlp.fc2"), n);
    g_.drop(prod);
  } else {
    const int f = lin(x, lp.lin.at("mlp.fc1"), tok(I));
    const int act = ops_.gelu(f);
    g_.drop(f);
    y = lin(act, lp.lin.at("mlp.fc2"), n);
    g_.drop(act);
  }
  g_.hold(y);
  const int out = dropout_add_norm(y, x, lp.ln2_w, lp.ln2_b);
  g_.drop(y);
  g_.drop(a);
  return out;
}

int EncoderStep::nomic_attention(int x, EncLayer& lp) {
  // Wqkv -> (b, s, 3, heads, d) (a view). NomicBertRotaryEmbedding, out of place: for q and k,
  // qkv[:, :, i] (a select: its backward is a zero-filled qkv-sized tensor), the cached (s, d/2)
  // cos/sin repeated to (s, 1, d) (einops.repeat copies; the products keep them), x[..., :d] (a
  // full slice), x * cos + rotate_half(x) * sin, torch.cat with the empty rest (a copy); then
  // torch.stack((q, k, v)): a new qkv-sized tensor. query/key/value are selects of it, permuted;
  // torch.matmul copies them into bmm batches unless one sequence, / norm_factor, + the extended
  // mask, softmax, dropout (attn_pdrop), matmul with v, permute + rearrange (a copy), out_proj.
  const std::int64_t nh = m_.num_heads, hd = m_.head_dim, inner = nh * hd;
  const Poly qn = tok(inner), table = Poly::mono(kS, hd);
  const int qkv = lin(x, lp.lin.at("attn.Wqkv"), tok(3 * inner));
  const auto select = [&](int t) { return ops_.slice(t, qn, false); };
  int parts[3];
  if (!m_.learned_positions) {
    for (int i = 0; i < 2; ++i) {
      const int sel = select(qkv);
      const int cos = g_.make(table, g_.at(qkv).dt, Cat::kInputs);
      const int sin = g_.make(table, g_.at(qkv).dt, Cat::kInputs);
      const int full = ops_.slice(sel, qn, true);  // x[..., :rotary_dim]
      g_.drop(sel);
      const int rot = ops_.rotary(full, cos, sin, qn);
      g_.drop(full);
      g_.drop(cos);
      g_.drop(sin);
      parts[i] = ops_.clone(rot);  // torch.cat([rot, x[..., rotary_dim:]]) with an empty rest
      g_.drop(rot);
    }
    parts[2] = select(qkv);
  }
  const int stacked = m_.learned_positions ? (g_.hold(qkv), qkv) : ops_.concat({parts[0], parts[1], parts[2]});
  if (!m_.learned_positions)
    for (const int p : parts) g_.drop(p);
  g_.drop(qkv);
  const int q = select(stacked), k = select(stacked), v = select(stacked);
  g_.drop(stacked);
  const int qt = ops_.transpose_view(q), kt = ops_.transpose_view(k), vt = ops_.transpose_view(v);
  g_.drop(q);
  g_.drop(k);
  g_.drop(v);
  const int out = eager_attention(qt, kt, vt, qn);  // / norm_factor for the scaling
  g_.drop(qt);
  g_.drop(kt);
  g_.drop(vt);
  const int r = ops_.view(out);
  g_.drop(out);
  ops_.cat = Cat::kActivations;
  const int o = lin(r, lp.lin.at("attn.out_proj"), tok(m_.hidden_size));
  g_.drop(r);
  return o;
}

// ---- ModernBERT (docs/formulas.md#modernbert), read from transformers 5.x modeling_modernbert.py
// with reference_compile off (the modules run eagerly; see the docs for torch.compile).

void EncoderStep::make_modern_params() {
  const std::int64_t h = m_.hidden_size, V = m_.vocab_size;
  const bool ft = sp_.full_finetune;
  const auto norm = [&](int& w, int& b) {  // nn.LayerNorm(hidden, bias=norm_bias)
    w = param(h, ft);
    if (m_.norm_bias) b = param(h, ft);
  };
  word_ = param(V * h, ft, Cat::kWeights, V, h);
  norm(emb_ln_w_, emb_ln_b_);
  for (std::size_t l = 0; l < sp_.model_layers.size(); ++l) {
    cur_layer_ = static_cast<int>(l);
    EncLayer lp;
    if (sp_.model_layers[l] != 0) norm(lp.ln1_w, lp.ln1_b);  // attn_norm: nn.Identity in layer 0
    for (const auto& mod : encoder_layer_linears(m_)) lp.lin.emplace(mod.name, make_linear(mod));
    norm(lp.ln2_w, lp.ln2_b);  // mlp_norm
    layers_.push_back(std::move(lp));
  }
  cur_layer_ = -1;
  norm(final_w_, final_b_);
  // ModernBertPredictionHead: dense (classifier_bias, false by default), GELU, norm. Under LoRA
  // PEFT's SEQ_CLS task saves only the modules named `classifier` or `score` in full: the
  // classifier trains, the prediction head (`head`, in the checkpoint) stays frozen (measured).
  if (m_.head == EncoderHead::kMaskedLm) {
    head_dense_w_ = param(h * h, ft, Cat::kWeights, h, h);
    norm(head_ln_w_, head_ln_b_);
    if (m_.decoder_bias) head_bias_ = param(V, ft);
  } else if (m_.head == EncoderHead::kSequenceClassification) {
    head_dense_w_ = param(h * h, ft, Cat::kWeights, h, h);
    head_ln_w_ = param(h, ft);
    if (m_.norm_bias) head_ln_b_ = param(h, ft);
    cls_w_ = param(h * m_.num_labels, true, Cat::kWeights, m_.num_labels, h);
    cls_b_ = param(m_.num_labels, true);
  }
}

void EncoderStep::modern_masks() {
  // _update_attention_mask: _prepare_4d_attention_mask expands the (b, s) mask to (b, 1, s, s) in
  // the model's dtype, inverts it (1.0 - mask) and masked_fills through a bool copy; the local
  // layers' mask is that one masked_fill-ed again outside a |i - j| <= local_attention / 2 band.
  // The band is computed from torch.arange without a device: (s, s) int64 distances on the CPU,
  // whose bool comparison is then copied to the GPU. Both masks live through the forward.
  const DT dt = sp_.weight_dt;
  const Poly full = scores(1), band = Poly::mono(kSS, 1);
  const int expanded = g_.make(full, dt, Cat::kInputs);
  const int inverted = g_.make(full, dt, Cat::kInputs);
  const int as_bool = g_.make(full, DT::kBool, Cat::kInputs);
  mask_ = g_.make(full, dt, Cat::kInputs);
  g_.drop(as_bool);
  g_.drop(inverted);
  g_.drop(expanded);
  int rows = -1, distance = -1;
  if (!sp_.ops.cuda) {
    rows = g_.make(Poly::mono(kS, 1), DT::kI64, Cat::kInputs);
    const int diff = g_.make(band, DT::kI64, Cat::kInputs);
    distance = g_.make(band, DT::kI64, Cat::kInputs);  // torch.abs(rows - rows.T)
    g_.drop(diff);
  }
  const int window = g_.make(band, DT::kBool, Cat::kInputs);
  const int outside = g_.make(band, DT::kBool, Cat::kInputs);  // window_mask.logical_not()
  args_.sliding = g_.make(full, dt, Cat::kInputs);
  g_.drop(outside);
  g_.drop(window);
  if (distance >= 0) g_.drop(distance);
  if (rows >= 0) g_.drop(rows);
}

int EncoderStep::modern_encode() {
  const std::int64_t h = m_.hidden_size, hd = m_.head_dim;
  ops_.cat = Cat::kActivations;
  int ids = ids_, positions = -1;
  if (unpadded()) {
    // _unpad_modernbert_input (no_grad): the non-padding token indices (nonzero, int64) and the
    // gathered input ids; position_ids are the indices (a view).
    indices_ = g_.make(tok(1), DT::kI64, Cat::kInputs);
    ids = g_.make(tok(1), DT::kI64, Cat::kInputs);
  } else {
    modern_masks();
    positions = g_.make(Poly::mono(kS, 1), DT::kI64, Cat::kInputs);  // torch.arange(s).unsqueeze(0)
  }
  // ModernBertEmbeddings: tok_embeddings, norm, drop (embedding_dropout 0: identity).
  const int e = ops_.embedding(ids, word_, tok(h));
  enable_input_require_grads(e);  // tok_embeddings' output (get_input_embeddings)
  int cur = layer_norm(e, emb_ln_w_, emb_ln_b_, tok(h), tok(1));
  g_.drop(e);
  if (ids != ids_) g_.drop(ids);
  // ModernBertRotaryEmbedding, once per layer type (no_grad): cos and sin of (1, positions,
  // head_dim), fp32 cast to the hidden states' dtype (fp32 under autocast: the LayerNorm output).
  // Computed on the unpadded path too, where the attention uses its own caches instead.
  const int types = m_.num_layers > 1 && m_.global_attn_every_n_layers > 1 ? 2 : 1;
  const Poly table = unpadded() ? tok(hd) : Poly::mono(kS, hd);
  for (int t = 0; t < types; ++t) {
    args_.cos[static_cast<std::size_t>(t)] = g_.make(table, g_.at(cur).dt, Cat::kInputs);
    args_.sin[static_cast<std::size_t>(t)] = g_.make(table, g_.at(cur).dt, Cat::kInputs);
  }
  cur = layers(cur);
  const int fin = layer_norm(cur, final_w_, final_b_, tok(h), tok(1));  // final_norm
  g_.drop(cur);
  cur = fin;
  if (unpadded() && m_.head != EncoderHead::kMaskedLm) {
    // ModernBertModel repads its output with grad (_pad_modernbert_output: zeros(b * s, h) and
    // index_put_); backward gathers the gradient at the indices.
    const int padded = g_.make(tok(h), g_.at(fin).dt, Cat::kActivations);
    g_.node({fin}, {padded}, {}, [fin](Bwd& c) { c.give(fin, c.like(fin)); });
    g_.drop(fin);
    cur = padded;
  }
  // The masks, tables and indices die with ModernBertModel.forward (the unpadded indices live
  // on through the MLM head's forward: int64 per token, not modelled).
  for (int t : {mask_, args_.sliding, args_.cos[0], args_.sin[0], args_.cos[1], args_.sin[1], positions, indices_})
    if (t >= 0) g_.drop(t);
  mask_ = indices_ = -1;
  args_ = LayerArgs{};
  return cur;
}

int EncoderStep::modern_layer(int h, int l) {
  // ModernBertEncoderLayer (pre-norm): h + attn(attn_norm(h)), then + mlp(mlp_norm(.)).
  EncLayer& lp = layers_[static_cast<std::size_t>(l)];
  const int model_layer = sp_.model_layers[static_cast<std::size_t>(l)];
  const bool local = m_.global_attn_every_n_layers > 0 && model_layer % m_.global_attn_every_n_layers != 0;
  const std::int64_t hs = m_.hidden_size, I = m_.intermediate_size;
  const Poly n = tok(hs), rows = tok(1);
  int x = h;
  if (lp.ln1_w >= 0) x = layer_norm(h, lp.ln1_w, lp.ln1_b, n, rows);
  else g_.hold(h);  // nn.Identity
  // attn_outputs, the tuple holding the attention's output, is a local of the layer's forward:
  // that output lives until the layer returns, through the MLP.
  const int a = modern_attention(x, lp, local);
  g_.drop(x);
  const int h1 = ops_.add(h, a, n);
  const int y = layer_norm(h1, lp.ln2_w, lp.ln2_b, n, rows);
  // ModernBertMLP: Wi(x).chunk(2) -> act(input) * gate -> drop (mlp_dropout 0) -> Wo. The two
  // halves are views of Wi's output; SplitBackward concatenates their gradients into one. The
  // forward's argument and its locals `input` and `gate` live until it returns, after Wo: with a
  // frozen Wi nothing saves its input, which is still alive while Wo runs (measured: one (b, s, h)
  // at a LoRA forward's peak, docs/formulas.md#modernbert).
  const int wi = lin(y, lp.lin.at("mlp.Wi"), tok(2 * I));
  const int input = g_.view(wi, tok(I));
  const int gate = g_.view(wi, tok(I));
  g_.node({wi}, {input, gate}, {}, [wi](Bwd& c) { c.give(wi, c.like(wi)); });
  g_.drop(wi);
  const int act = ops_.gelu(input);
  const int prod = ops_.mul(act, gate, tok(I));
  g_.drop(act);
  const int o = lin(prod, lp.lin.at("mlp.Wo"), n);
  g_.drop(prod);
  g_.drop(input);
  g_.drop(gate);
  g_.drop(y);
  const int out = ops_.add(h1, o, n);
  g_.drop(h1);
  g_.drop(o);
  g_.drop(a);
  return out;
}

int EncoderStep::modern_attention(int x, EncLayer& lp, bool local) {
  const std::int64_t nh = m_.num_heads, hd = m_.head_dim, inner = nh * hd;
  const Poly qn = tok(inner);
  const int qkv = lin(x, lp.lin.at("attn.Wqkv"), tok(3 * inner));
  int out = -1;
  if (unpadded()) {
    // flash_attention_forward: the layer's ModernBertUnpaddedRotaryEmbedding rotates q and k of
    // the packed (tokens, 3, heads, d) tensor in place, saving its cos/sin cache (a few KiB per
    // layer, kept by the module: not modelled); flash_attn_varlen_qkvpacked_func needs 16-bit
    // input (an fp32 qkv is cast to bf16 and the output back), saves q, k, v (views of the packed
    // tensor), the output and an fp32 logsumexp per token and head; backward allocates the packed
    // dqkv, an fp32 dq accumulator and per-row softmax sums.
    const DT dt = g_.at(qkv).dt;
    const bool convert = dt != DT::kBF16 && dt != DT::kF16;
    const int p = convert ? ops_.to(qkv, DT::kBF16) : (g_.hold(qkv), qkv);
    const Poly rows = tok(nh);
    const int o = g_.make(qn, g_.at(p).dt, ops_.cat);
    const int lse = g_.make(rows, DT::kF32, ops_.cat);
    g_.node({p}, {o}, {p, o, lse}, [p, qn, rows](Bwd& c) {
      const int acc = c.temp(qn, DT::kF32);
      const int d = c.temp(rows, DT::kF32);
      const int g = c.like(p);
      c.drop(acc);
      c.drop(d);
      c.give(p, g);
    });
    g_.drop(lse);
    g_.drop(p);
    out = convert ? ops_.to(o, dt) : (g_.hold(o), o);
    g_.drop(o);
  } else {
    // qkv.view(b, s, 3, heads, d).transpose(3, 1).unbind(dim=2): q, k and v are views of the
    // projection's output. UnbindBackward stacks their gradients into a qkv-sized tensor, and
    // the view's backward reshapes that transposed stack: a second qkv-sized tensor.
    const int q = g_.view(qkv, qn), k = g_.view(qkv, qn), v = g_.view(qkv, qn);
    g_.node({qkv}, {q, k, v}, {}, [qkv](Bwd& c) {
      const int stacked = c.like(qkv);
      const int reshaped = c.like(qkv);
      c.drop(stacked);
      c.give(qkv, reshaped);
    });
    const auto t = static_cast<std::size_t>(local && args_.cos[1] >= 0 ? 1 : 0);
    // apply_rotary_pos_emb; the products follow q's (b, s, heads, d) memory order, and with fp32
    // tables (autocast) they are fp32.
    const int qe = ops_.rotary(q, args_.cos[t], args_.sin[t], qn);
    const int ke = ops_.rotary(k, args_.cos[t], args_.sin[t], qn);
    g_.drop(q);
    g_.drop(k);
    const int mask = local ? args_.sliding : mask_;
    // One sequence per forward folds (b, heads) into bmm's batch as a view; otherwise the
    // (b, s, heads, d)-ordered q, k and v are copied (and the copies saved).
    const bool one = one_sequence();
    if (sp_.attn == AttnImpl::kEager) {
      // The model-dtype mask promotes a 16-bit product to fp32; dropout 0 is the identity.
      const int probs = ops_.eager_probs(qe, ops_.view(ke), mask, scores(nh), !one, !one);
      out = ops_.attention_output(probs, v, qn, !one);
    } else {
      // SDPA with attn_mask: the memory-efficient kernel, which saves the mask. Under autocast
      // SDPA is a lower-precision op: the fp32 mask of an fp32 model is cast for every layer
      // (and that copy saved); a mask already in q's dtype is saved as it is.
      const int q16 = ops_.cast_for_autocast(qe);
      const int k16 = ops_.cast_for_autocast(ke);
      const int v16 = ops_.cast_for_autocast(v);
      ops_.cat = Cat::kInputs;
      const int bias = ops_.cast_for_autocast(mask);
      ops_.cat = Cat::kActivations;
      const int o = ops_.fused_attention(q16, k16, v16, qn, tok(nh), bias);
      g_.drop(bias);
      g_.drop(q16);
      g_.drop(k16);
      g_.drop(v16);
      out = ops_.view(o);  // the kernel's output is already (b, s, heads, d)
      g_.drop(o);
    }
    g_.drop(qe);
    g_.drop(ke);
    g_.drop(v);
  }
  g_.drop(qkv);
  const int r = ops_.view(out);  // .view(bs, -1, dim)
  g_.drop(out);
  const int o = lin(r, lp.lin.at("attn.Wo"), tok(m_.hidden_size));  // out_drop: nn.Identity
  g_.drop(r);
  return o;
}

int EncoderStep::modern_classification_loss(int h) {
  // ModernBertForSequenceClassification: classifier_pooling "cls" (last_hidden_state[:, 0]) or
  // "mean" ((h * mask.unsqueeze(-1)).sum(1) / mask.sum(1)), then head (dense, GELU, norm), drop
  // (classifier_dropout 0), classifier; CrossEntropyLoss.
  const std::int64_t hs = m_.hidden_size, L = m_.num_labels;
  int pooled = -1;
  if (m_.mean_pooled_classifier) {
    const int prod = ops_.mul(h, amask_, tok(hs));  // saves the int64 mask
    pooled = g_.make(seqs(hs), g_.at(prod).dt, Cat::kActivations);  // sum(1): backward expands
    g_.node({prod}, {pooled}, {}, [prod](Bwd& c) { c.give(prod, c.like(prod)); });
    g_.drop(prod);
    const int counts = g_.make(seqs(1), DT::kI64, Cat::kActivations);  // mask.sum(1, keepdim=True)
    const int divided = ops_.mul(pooled, counts, seqs(hs));           // division saves the divisor
    g_.drop(pooled);
    g_.drop(counts);
    pooled = divided;
  } else {
    pooled = g_.view(h, seqs(hs));
    g_.node({h}, {pooled}, {}, [h](Bwd& c) { c.give(h, c.like(h)); });  // select_backward: zeros + copy
  }
  const int n = prediction_head(pooled, seqs(hs), seqs(1));
  g_.drop(pooled);
  ops_.cat = Cat::kLogits;
  const int logits = ops_.linear(n, cls_w_, cls_b_, seqs(L));
  g_.drop(n);
  const int loss = cross_entropy(logits, seqs(1), false);
  g_.drop(logits);
  return loss;
}

ProgramResult EncoderStep::run() {
  ProgramResult res;
  g_.set_backward_segment_map([](int seg) {
    if (seg == kSegFwdPre) return static_cast<int>(kSegBwdPre);
    if (seg >= kSegFwdFirst && seg <= kSegFwdLast) return kSegBwdFirst + (seg - kSegFwdFirst);
    if (seg == kSegHead) return static_cast<int>(kSegHeadBwd);
    return seg;
  });
  g_.set_segment(kSegFwdPre);
  g_.set_inplace_accumulation(sp_.ops.inplace_accumulation);
  g_.set_recording(false);
  make_params();
  g_.set_recording(true);
  // The collated batch: input_ids, token_type_ids, attention_mask for every text (int64).
  const Poly all_tokens = Poly::mono(kBS, texts_);
  ids_ = g_.make(all_tokens, DT::kI64, Cat::kInputs);
  if (!modern()) types_ = g_.make(all_tokens, DT::kI64, Cat::kInputs);  // ModernBERT's tokenizer gives none
  amask_ = g_.make(all_tokens, DT::kI64, Cat::kInputs);
  if (nomic() && !m_.learned_positions) {
    // Every layer's NomicBertRotaryEmbedding keeps its (s, d/2) cos and sin cache, in qkv's dtype,
    // from the first step on.
    const DT dt = sp_.autocast ? *sp_.autocast : sp_.weight_dt;
    g_.make(Poly::mono(kS, static_cast<std::int64_t>(m_.num_layers) * m_.head_dim), dt, Cat::kInputs);
  }
  const std::int64_t hs = m_.hidden_size;

  if (!cached_) {
    if (sp_.autocast) ops_.enter_autocast(*sp_.autocast);
    int loss = -1;
    std::vector<int> block;  // contrastive columns between the simulated ones
    if (m_.head == EncoderHead::kPooling) {
      ColumnsLoss cl = contrastive_columns(g_, ops_, texts_, hs, seqs(1), [this] {
        g_.set_segment(kSegFwdPre);
        const int h = encode();
        g_.set_segment(kSegHead);
        // Computed by BertModel and unused: nothing reaches its graph, which dies with the
        // model's output at the end of the forward (as if run without grad).
        const bool grad = g_.grad_enabled();
        g_.set_grad_enabled(false);
        const int pooled = encoder_has_pooler(m_) ? pooler(h) : -1;
        g_.set_grad_enabled(grad);
        const int rep = pool_tokens(h);
        if (pooled >= 0) g_.drop(pooled);
        return Column{rep, h};
      });
      loss = cl.loss;
      block = std::move(cl.block);
    } else {
      const int h = encode();
      g_.set_segment(kSegHead);
      loss = m_.head == EncoderHead::kMaskedLm ? mlm_loss(h)
             : modern()                        ? modern_classification_loss(h)
                                               : classification_loss(h);
      g_.drop(h);
    }
    if (sp_.autocast) ops_.exit_autocast();
    g_.backward(loss, 0);
    for (const int t : block) g_.drop(t);  // the columns between the simulated ones, after their backwards
    g_.set_segment(kSegBwdPre);
    release_graph(0);
    g_.drop(loss);
  } else {
    // CachedMultipleNegativesRankingLoss (GradCache, sentence.hpp): the mini-batches' forwards
    // are encode() and the pooling, each in its own autocast context.
    const auto embed = [&](bool with_grad) {
      if (with_grad) g_.set_segment(kSegFwdPre);
      if (sp_.autocast) ops_.enter_autocast(*sp_.autocast);
      const int h = encode();
      if (with_grad) g_.set_segment(kSegHead);
      const int e = pool_tokens(h);
      g_.drop(h);
      if (sp_.autocast) ops_.exit_autocast();
      return e;
    };
    gradcache_step(g_, ops_, {hs, texts_, sp_.contrastive.mini_batch_size, sp_.autocast}, embed,
                   [&](int first, bool hook) {
                     if (hook) g_.set_segment(kSegBwdPre);
                     release_graph(first);
                   });
  }
  g_.take_events(res.events, res.cats);
  res.params = params_;
  g_.free_param_grads();
  res.end_of_step = g_.live();
  for (std::size_t i = 0; i < g_.tensors().size(); ++i) {
    const Tensor& t = g_.tensors()[i];
    if (t.alive && !t.is_param && t.base < 0 && t.cat != Cat::kInputs) res.leaked.push_back(static_cast<int>(i));
  }
  return res;
}

}  // namespace

ProgramResult run_encoder_step(const ProgramSpec& spec) {
  EncoderStep s(spec);
  return s.run();
}

}  // namespace memplan::sim

// sentence-transformers' side of an embedding model's training step (docs/formulas.md#contrastive,
// #pooling): the Pooling module, MultipleNegativesRankingLoss, and the text columns it embeds one
// forward each. Shared by the encoder program and the decoder embedding program; like the ops in
// ops.hpp, each function allocates, saves and frees what the named upstream code does.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/sim/graph.hpp"
#include "core/sim/ops.hpp"
#include "memplan/model.hpp"

namespace memplan::sim {

// The shapes one forward's output has: `tokens` positions (b x s) and `seqs` texts (b), each
// `hidden` wide.
struct PoolShape {
  Poly tokens;
  Poly seqs;
  std::int64_t hidden = 0;
};

// Pooling.forward on the token embeddings `h` (kept by the caller): the sentence embedding.
// mean: attention_mask expanded to (b, s, h) in h's dtype, h * mask, sum(1) / clamp(mask.sum(1));
// cls: h[:, 0], a view; lasttoken: h * mask, then gather of the last token (docs/formulas.md#pooling).
int pool(Graph& g, Ops& ops, int h, PoolingMode mode, const PoolShape& shape);
// LLM2Vec.get_pooling: mean: torch.stack of each sequence's h[i, -len:].mean(0); last token:
// h[:, -1], a view that keeps h's storage; bos: h[input_ids == bos], a copy (docs/formulas.md#pooling).
// torch 1.13's MeanBackward keeps each sequence's slice, and so all of h (Ops' mean_saves_input).
int llm2vec_pool(Graph& g, const Ops& ops, int h, PoolingMode mode, const PoolShape& shape);

// MultipleNegativesRankingLoss: cos_sim(anchors, candidates) * 20, cross_entropy against
// arange(b). Either side is a whole tensor or a slice of the cached embeddings (GradCache).
int mnrl_loss(Graph& g, Ops& ops, std::int64_t hidden, int anchor_src, int candidate_src, const Poly& anchors,
              const Poly& candidates);

// The loss of one uncached step over `texts` columns: `embed_column()` runs one column's
// forward and returns its sentence embedding (b x hidden) and its token embeddings, which the
// column's features dict keeps (sentence-transformers updates it in place) until the loss has
// been computed: they are dropped here, before backward. Columns are alike: the first and the
// last are simulated and the ones between stand as `block` (what the first left alive, per
// category), which the caller drops after backward. One text: a loss on the embeddings alone.
// sentence-transformers' Dense modules on the pooled (b, in) embedding `emb` (whose reference
// passes in): Linear, then Tanh or Identity (which returns its input); each module's output
// replaces the embedding (docs/formulas.md#embeddinggemma). `weights` holds each module's
// weight and bias (-1: none); `seqs` is the number of texts, as a polynomial.
int dense_modules(Graph& g, Ops& ops, int emb, const std::vector<DenseModule>& modules,
                  const std::vector<std::pair<int, int>>& weights, const Poly& seqs);

struct Column {
  int embedding = -1;
  int token_embeddings = -1;  // -1: nothing keeps them (LLM2Vec's trainer)
};
struct ColumnsLoss {
  int loss = -1;
  std::vector<int> block;
};
ColumnsLoss contrastive_columns(Graph& g, Ops& ops, std::int64_t texts, std::int64_t hidden, const Poly& per_text,
                                const std::function<Column()>& embed_column);

// CachedMultipleNegativesRankingLoss (GradCache), sentence-transformers 3.x-5.x, for encoders and
// decoder embedding models alike: 1) every text embedded in mini-batches without grad, only the
// `texts x hidden` embeddings per example kept (in the embedding's dtype); 2) the loss on the
// detached embeddings, backward per anchor mini-batch of `mini_batch`, caching d(loss)/d(embedding);
// 3) per mini-batch, a forward with grad and the backward of dot(embedding, cached gradient),
// inside loss.backward()'s hook. One mini-batch of step 1 and two of step 3 are simulated
// (parameter gradients exist from the second on). `embed(with_grad)` runs one mini-batch's forward
// and pooling in its own autocast context and returns the embedding; `release(first, hook)` frees
// the graph from node `first` after the loss's backward (hook false) or a mini-batch's (true).
struct GradCache {
  std::int64_t hidden = 0;
  std::int64_t texts = 0;
  std::int64_t mini_batch = 0;
  std::optional<DT> autocast;  // the loss's autocast context
};
void gradcache_step(Graph& g, Ops& ops, const GradCache& gc, const std::function<int(bool)>& embed,
                    const std::function<void(int, bool)>& release);

}  // namespace memplan::sim

// sentence-transformers' Pooling, MultipleNegativesRankingLoss and text columns
// (docs/formulas.md#contrastive, #pooling), read from sentence-transformers 3.x-5.x
// (models/Pooling.py, losses/MultipleNegativesRankingLoss.py).
#include "core/sim/sentence.hpp"

#include "core/sim/program.hpp"

#include <algorithm>

namespace memplan::sim {

int dense_modules(Graph& g, Ops& ops, int emb, const std::vector<DenseModule>& modules,
                  const std::vector<std::pair<int, int>>& weights, const Poly& seqs) {
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const int y = ops.linear(emb, weights[i].first, weights[i].second, seqs * modules[i].out_features);
    g.drop(emb);
    emb = y;
    if (modules[i].tanh) {
      emb = ops.tanh(y);
      g.drop(y);
    }
  }
  return emb;
}

int pool(Graph& g, Ops& ops, int h, PoolingMode mode, const PoolShape& shape) {
  const std::int64_t hs = shape.hidden;
  const DT dt = g.at(h).dt;
  const Poly tokens = shape.tokens * hs, seqs = shape.seqs * hs;
  int vec = -1;  // the one output vector of the mode
  if (mode == PoolingMode::kCls) {
    // token_embeddings[:, 0]: a view of the hidden states (select_backward: zeros + copy).
    vec = g.view(h, seqs);
    g.node({h}, {vec}, {}, [h](Bwd& c) { c.give(h, c.like(h)); });
  } else {
    // attention_mask.unsqueeze(-1).expand(token_embeddings.size()).to(dtype): .to() of an
    // expanded int64 tensor allocates every (b, s, h) value; the product saves it (the other
    // operand needs a gradient) and allocates its own (b, s, h).
    const int mexp = g.make(tokens, dt, Cat::kActivations);
    const int prod = ops.mul(h, mexp, tokens);
    if (mode == PoolingMode::kLastToken) {
      // The last token's index per text: flip/max/where on the (b, s) mask (freed), then
      // .unsqueeze(-1).repeat(1, h): (b, h) int64 gather indices. gather saves its input (the
      // whole product: GatherBackward0 keeps self) and the indices; its backward scatters into
      // (b, s, h) zeros. (sentence-transformers 3.0-5.3; 5.4 expands the indices as a view.)
      const int idx = g.make(seqs, DT::kI64, Cat::kInputs);
      vec = g.make(seqs, dt, Cat::kActivations);
      g.node({prod}, {vec}, {prod, idx}, [prod](Bwd& c) { c.give(prod, c.like(prod)); });
      g.drop(idx);
      g.drop(prod);
      g.drop(mexp);
    } else {
      // mean: sum(h * mask, 1) / clamp(mask.sum(1), min=1e-9).
      // The product is a temporary: sum saves only its sizes.
      const int sum = g.make(seqs, dt, Cat::kActivations);  // sum(1): backward expands
      g.node({prod}, {sum}, {}, [prod](Bwd& c) { c.give(prod, c.like(prod)); });
      g.drop(prod);
      const int msum = g.make(seqs, dt, Cat::kActivations);
      g.drop(mexp);
      const int clamped = g.make(seqs, dt, Cat::kActivations);
      g.drop(msum);
      vec = ops.mul(sum, clamped, seqs);  // division saves both operands
      g.drop(sum);
      g.drop(clamped);
    }
  }
  // output_vector = torch.cat(output_vectors, 1): a copy even of one vector; the mode's own
  // output goes with Pooling.forward's locals.
  const int out = g.make(seqs, dt, Cat::kActivations);
  g.node({vec}, {out}, {}, [vec](Bwd& c) { c.give(vec, c.graph().view(c.grad(), c.graph().at(vec).numel)); });
  g.drop(vec);
  return out;
}

int llm2vec_pool(Graph& g, const Ops& ops, int h, PoolingMode mode, const PoolShape& shape) {
  const std::int64_t hs = shape.hidden;
  const DT dt = g.at(h).dt;
  const Poly seqs = shape.seqs * hs;
  if (mode == PoolingMode::kLastToken) {
    // last_hidden_states[:, -1]: a view; whoever keeps the embedding keeps all of h.
    const int v = g.view(h, seqs);
    g.node({h}, {v}, {}, [h](Bwd& c) { c.give(h, c.like(h)); });
    return v;
  }
  int mask = -1;
  if (mode == PoolingMode::kCls) {
    // last_hidden_states[input_ids == bos_token_id]: a (b, s) bool mask, saved by the indexing.
    mask = g.make(shape.tokens, DT::kBool, Cat::kInputs);
  }
  // mean: each sequence's mean (MeanBackward saves sizes only), stacked into one (b, h) tensor.
  const int out = g.make(seqs, dt, Cat::kActivations);
  if (mask >= 0) {
    g.node({h}, {out}, {mask}, [h](Bwd& c) { c.give(h, c.like(h)); });  // index_put into (b, s, h) zeros
    g.drop(mask);
    return out;
  }
  // Backward: per sequence, slice_backward's (s, h) zeros, then select_backward's (b, s, h)
  // zeros; the b full-size gradients accumulate into h's. Two of them reach the accumulation's
  // peak (the buffer, the next one and, out of place, their sum).
  const Poly one_seq = Poly::mono(kS, hs);
  const int saved = ops.behaviour().mean_saves_input ? h : -1;
  g.node({h}, {out}, {saved}, [h, one_seq, dt](Bwd& c) {
    const int first = c.like(h);
    const int slice = c.temp(one_seq, dt);
    const int second = c.like(h);
    c.drop(slice);
    c.give(h, first);
    c.give(h, second);
  });
  return out;
}

int mnrl_loss(Graph& g, Ops& ops, std::int64_t hs, int anchor_src, int candidate_src, const Poly& anchors,
              const Poly& candidates) {
  // scores = cos_sim(anchors, candidates) * scale (20); cross_entropy(scores, range(b)). cos_sim
  // normalizes both sides (F.normalize: norm, clamp, divide) and multiplies: a b x (b x (texts -
  // 1)) matrix.
  const DT dt = g.at(anchor_src).dt;
  auto normalize = [&](int emb, const Poly& rows) {
    int part = emb;
    if (g.at(emb).numel == rows * hs) {
      g.hold(emb);
    } else {
      part = g.view(emb, rows * hs);
      g.node({emb}, {part}, {}, [emb](Bwd& c) { c.give(emb, c.like(emb)); });  // slice of the embeddings
    }
    const int nrm = g.make(rows, dt, Cat::kLogits);
    g.node({part}, {nrm}, {part, nrm}, [part](Bwd& c) { c.give(part, c.like(part)); });
    const int cl = g.make(rows, dt, Cat::kLogits);
    g.node({nrm}, {cl}, {nrm}, [nrm](Bwd& c) { c.give(nrm, c.like(nrm)); });
    g.drop(nrm);
    const int out = ops.mul(part, cl, rows * hs);  // x / norm.expand_as(x)
    g.drop(part);
    g.drop(cl);
    return out;
  };
  ops.cat = Cat::kLogits;
  const int a = normalize(anchor_src, anchors);
  const int cnd = normalize(candidate_src, candidates);
  Poly sim;  // anchors x candidates
  sim.c[kBB] = anchors.c[kB] * candidates.c[kB];
  sim.c[kB] = anchors.c[kOne] * candidates.c[kB] + anchors.c[kB] * candidates.c[kOne];
  sim.c[kOne] = anchors.c[kOne] * candidates.c[kOne];
  const int mm = ops.matmul(a, cnd, sim, false, false);
  g.drop(a);
  g.drop(cnd);
  const int sc = ops.scalar_op(mm);  // * scale
  g.drop(mm);
  const int in = ops.autocast() ? ops.to(sc, DT::kF32) : (g.hold(sc), sc);  // log_softmax: fp32 list
  g.drop(sc);
  const int labels = g.make(anchors, DT::kI64, Cat::kInputs);  // torch.arange(b)
  const int logp = ops.log_softmax(in);
  g.drop(in);
  const int loss = ops.nll_loss(logp, labels);
  g.drop(logp);
  g.drop(labels);
  return loss;
}

ColumnsLoss contrastive_columns(Graph& g, Ops& ops, std::int64_t texts, std::int64_t hs, const Poly& per_text,
                                const std::function<Column()>& embed_column) {
  // sentence-transformers: one forward per text column (each keeps its graph until the loss),
  // Pooling on each; the anchors are the first column's embeddings and the candidates
  // torch.cat(the others) (a copy). SentenceTransformerTrainer.compute_loss holds every column's
  // features dict, and with it the token embeddings, until it returns the loss.
  //
  // Columns are alike: two are simulated, the first and the last, and the N - 2 between them
  // stand as one block of what the first left alive (its saved tensors and embeddings; not the
  // casts autocast cached for the whole region), and their token embeddings as another, freed
  // with the features. The block is alive through the last column's forward and the whole
  // backward: the last column's backward then runs with N - 1 others alive, and the first's
  // with N - 2 others and every parameter gradient, as column N - 2's does (earlier columns'
  // backwards have less alive). The blocks hold each category's bytes.
  ColumnsLoss out;
  std::vector<int> reps, features;
  const std::int64_t simulated = std::min<std::int64_t>(texts, 2);
  const CatVec before = g.live();
  const Poly cached_before = ops.cached_cast_bytes();
  for (std::int64_t col = 0; col < simulated; ++col) {
    const Column c = embed_column();
    reps.push_back(c.embedding);
    if (c.token_embeddings >= 0) features.push_back(c.token_embeddings);
    if (col == 0 && texts > simulated) {
      CatVec per_column = g.live();
      const auto k_casts = static_cast<std::size_t>(Cat::kAutocastCopies);
      per_column[k_casts] -= ops.cached_cast_bytes() - cached_before;
      // What goes when compute_loss returns, before backward: what only the features dict holds,
      // and a candidate column's embedding (the loss keeps the torch.cat copy, not the columns';
      // LLM2Vec's last-token view keeps the whole hidden state until then).
      CatVec until_loss{};
      const auto only_held_here = [&](int t) {
        const int storage = g.at(t).base >= 0 ? g.at(t).base : t;
        const Tensor& x = g.at(storage);
        if (x.refs == 1) until_loss[static_cast<std::size_t>(x.cat)] += x.bytes();
      };
      if (c.token_embeddings >= 0) only_held_here(c.token_embeddings);
      only_held_here(c.embedding);
      for (int k = 0; k < kNumCats; ++k) {
        const auto ki = static_cast<std::size_t>(k);
        Poly bytes = per_column[ki] - until_loss[ki] - before[ki];
        bool any = false;
        for (auto& v : bytes.c) {
          v = std::max<std::int64_t>(v, 0) * (texts - simulated);
          any |= v != 0;
        }
        if (any) out.block.push_back(g.make(bytes, DT::kU8, static_cast<Cat>(k)));
        if (!until_loss[ki].is_zero())
          features.push_back(g.make(until_loss[ki] * (texts - simulated), DT::kU8, static_cast<Cat>(k)));
      }
    }
  }
  if (texts >= 2) {
    const Poly anchors = per_text, candidates = per_text * (texts - 1);
    // torch.cat(embeddings[1:]): every candidate column's b x h rows (the block's among them).
    const int cand = g.make(candidates * hs, g.at(reps[0]).dt, Cat::kLogits);
    std::vector<int> parts(reps.begin() + 1, reps.end());
    g.node(Ids(parts), {cand}, {}, [parts](Bwd& c) {
      for (int p : parts)
        if (c.needs(p)) c.give(p, c.graph().view(c.grad(), c.graph().at(p).numel));  // narrow(): views
    });
    out.loss = mnrl_loss(g, ops, hs, reps[0], cand, anchors, candidates);
    g.drop(cand);
    // The columns' embeddings are the loss function's and compute_loss's locals until they return.
    for (std::size_t i = 1; i < reps.size(); ++i) g.drop(reps[i]);
  } else {
    const int emb = reps[0];
    const int y = g.make(Poly::constant(1), DT::kF32, Cat::kLogits);  // a loss on the embeddings
    g.node({emb}, {y}, {}, [emb](Bwd& c) { c.give(emb, c.like(emb)); });
    out.loss = y;
  }
  g.drop(reps[0]);
  for (const int t : features) g.drop(t);  // compute_loss returns
  return out;
}

void gradcache_step(Graph& g, Ops& ops, const GradCache& gc, const std::function<int(bool)>& embed,
                    const std::function<void(int, bool)>& release) {
  g.set_grad_enabled(false);
  const int e0 = embed(false);
  const DT edt = g.at(e0).dt;
  g.drop(e0);
  g.set_grad_enabled(true);
  const int reps = g.make(Poly::mono(kB, gc.texts * gc.hidden), edt, Cat::kActivations, true);
  g.set_segment(kSegHead);
  {
    // Scores of one anchor mini-batch against every candidate, with grad, then backward.
    const int first = g.node_count();
    if (gc.autocast) ops.enter_autocast(*gc.autocast);
    const int loss = mnrl_loss(g, ops, gc.hidden, reps, reps, Poly::constant(gc.mini_batch), Poly::mono(kB, gc.texts - 1));
    if (gc.autocast) ops.exit_autocast();
    g.backward(loss, first);
    release(first, false);
    g.drop(loss);
  }
  const int cached_grad = g.take_grad(reps);
  for (int i = 0; i < 2; ++i) {
    const int first = g.node_count();
    const int e = embed(true);
    const int y = g.make(Poly::constant(1), DT::kF32, Cat::kLogits);  // torch.dot(reps, grads)
    g.node({e}, {y}, {}, [e](Bwd& c) { c.give(e, c.like(e)); });
    g.drop(e);
    g.backward(y, first);
    release(first, true);
    g.drop(y);
  }
  if (cached_grad >= 0) g.drop(cached_grad);
  g.drop(reps);
}

}  // namespace memplan::sim

#include "core/sim/fused_ce.hpp"

#include <algorithm>
#include <initializer_list>

namespace memplan::sim {

namespace {

std::int64_t cdiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

std::int64_t next_pow2(std::int64_t n) {
  std::int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// rows x width / parts, rounded up per coefficient: one of `parts` equal chunks of a
// rows x width tensor (within one element per monomial).
Poly part_of(const Poly& rows, std::int64_t width, std::int64_t parts) {
  Poly p;
  for (int i = 0; i < kNumMono; ++i) p.c[i] = cdiv(checked_mul(rows.c[i], width), parts);
  return p;
}

// Chunk i of `parts` of a rows x width tensor: every coefficient split so that the parts sum
// exactly to the whole (the first v mod parts chunks one element larger).
Poly split_part(const Poly& rows, std::int64_t width, std::int64_t parts, std::int64_t i) {
  Poly p;
  for (int k = 0; k < kNumMono; ++k) {
    const std::int64_t v = checked_mul(rows.c[k], width);
    p.c[k] = v / parts + (i < v % parts ? 1 : 0);
  }
  return p;
}

// The row count of a (rows x width) tensor: width of the first monomial both have.
std::int64_t width_of(const Poly& numel, const Poly& rows) {
  for (int i = 0; i < kNumMono; ++i)
    if (rows.c[i] != 0) return numel.c[i] / rows.c[i];
  return 1;
}

// A scalar that depends on `inputs` through a node whose backward is given by `fn`.
int scalar_node(Graph& g, const std::vector<int>& inputs, const std::vector<int>& saved, BackwardFn fn) {
  const int y = g.make(Poly::constant(1), DT::kF32, Cat::kLogits);
  g.node(inputs, {y}, saved, std::move(fn));
  return y;
}

}  // namespace

std::int64_t liger_chunk_rows(std::int64_t bt, std::int64_t vocab, std::int64_t hidden) {
  const std::int64_t inc = cdiv(vocab, hidden);
  return std::min(next_pow2(cdiv(bt, inc)), bt);
}

Poly liger_chunk_numel_bound(const Poly& rows, std::int64_t vocab, std::int64_t hidden) {
  const std::int64_t inc = cdiv(vocab, hidden);
  if (inc <= 1) return rows * vocab;  // one chunk covers every row
  // next_power_of_2(ceil(BT / inc)) < 2 * ceil(BT / inc) <= 2 * BT / inc + 2
  return part_of(rows, 2 * vocab, inc) + Poly::constant(2 * vocab);
}

// ---- Liger fused linear cross-entropy (liger_kernel/ops/fused_linear_cross_entropy.py)

int liger_fused_linear_cross_entropy(Graph& g, Ops& ops, const LossHead& h) {
  const DT xdt = g.at(h.hidden).dt, wdt = g.at(h.weight).dt;
  const std::int64_t V = h.vocab, H = h.hidden_size;
  const bool x_grad = g.rg(h.hidden), w_grad = g.rg(h.weight);
  const std::optional<DT> ac = ops.autocast();
  // LigerForCausalLMLoss: labels padded by one (alive until it returns) and shifted (a copy).
  const int padded = g.make(h.rows + h.per_seq, DT::kI64, Cat::kInputs);
  const int target = g.make(h.rows, DT::kI64, Cat::kInputs);
  // LigerFusedLinearCrossEntropyFunction.forward runs without grad (autograd.Function), with
  // autocast still on (amp_custom_fwd does not cast inputs).
  const bool prev = g.grad_enabled();
  g.set_grad_enabled(false);
  const int grad_input = g.make(h.rows * H, xdt, Cat::kActivationGrads);  // zeros_like(_input)
  // zeros_like(weight) in the weight's dtype (accum_dtype None), only if the weight trains.
  const int grad_weight = x_grad && w_grad ? g.make(g.at(h.weight).numel, wdt, Cat::kGradients) : -1;
  const int loss_1d = g.make(h.rows, DT::kF32, Cat::kLogits);
  const int target_mask = g.make(h.rows, DT::kBool, Cat::kLogits);
  const DT logit_dt = ac && (xdt == DT::kF32 || wdt == DT::kF32) ? *ac : xdt;
  // _can_use_mm_out: CUDA, same dtypes, and autocast off or at the input's dtype: one logits
  // buffer reused by every chunk, torch.mm(out=) for logits and grad_input.
  const bool mm_out = h.cuda && xdt == wdt && (!ac || *ac == xdt);
  const Poly chunk_v = liger_chunk_numel_bound(h.rows, V, H);
  Poly chunk_h;  // chunk rows x H
  {
    const std::int64_t inc = cdiv(V, H);
    chunk_h = inc <= 1 ? h.rows * H : part_of(h.rows, 2 * H, inc) + Poly::constant(2 * H);
  }
  const int storage = mm_out ? g.make(chunk_v, xdt, Cat::kLogits) : -1;
  // One chunk (all chunks allocate alike): logits (the CE kernel writes its gradient in place),
  // grad_input rows, then the weight gradient accumulated.
  {
    int logits = storage;
    if (!mm_out) {
      const Cat saved = ops.cat;
      ops.cat = Cat::kLogits;
      const int xc = ac && xdt != *ac ? g.make(chunk_h, *ac, Cat::kLogits) : -1;  // autocast of the chunk
      const int wc = ops.cast_for_autocast(h.weight);                             // per chunk, or cached
      logits = g.make(chunk_v, logit_dt, Cat::kLogits);
      if (xc >= 0) g.drop(xc);
      g.drop(wc);
      ops.cat = saved;
    }
    if (x_grad && !mm_out) {
      // grad_input[start:end] = grad_logits_chunk @ weight: a product, copied into the slice.
      const int wc = ops.cast_for_autocast(h.weight);
      const int gi = g.make(chunk_h, logit_dt, Cat::kActivationGrads);
      g.drop(wc);
      g.drop(gi);
    }
    if (grad_weight >= 0) {
      const bool low = logit_dt == DT::kBF16 || logit_dt == DT::kF16;
      if (low && wdt == DT::kF32) {
        // addmm(out_dtype=float32) into grad_weight; the fp32 input chunk is cast to match first.
        if (xdt != logit_dt) g.drop(g.make(chunk_h, logit_dt, Cat::kLogits));
      } else if (!(low && wdt == logit_dt)) {
        // Legacy path (fp32 logits): grad_weight += mm(grad_logits.t(), input_chunk).float().
        g.drop(g.make(g.at(h.weight).numel, DT::kF32, Cat::kActivationGrads));
      }
    }
    if (!mm_out) g.drop(logits);
  }
  if (storage >= 0) g.drop(storage);
  g.set_grad_enabled(prev);
  const int gw = grad_weight;
  const int gi = grad_input;
  const int loss = scalar_node(g, {h.hidden, h.weight}, {grad_input, grad_weight},
                               [x = h.hidden, w = h.weight, gi, gw](Bwd& c) {
                                 // grad_output == 1.0: the saved gradients are returned as they are.
                                 if (c.needs(x)) c.pass(x, gi);
                                 if (gw >= 0 && c.needs(w)) c.pass(w, gw);
                               });
  g.drop(grad_input);
  if (grad_weight >= 0) g.drop(grad_weight);
  g.drop(loss_1d);
  g.drop(target_mask);
  g.drop(target);
  g.drop(padded);
  return loss;
}

// ---- TRL's Liger DPO and GRPO losses (Liger-Kernel chunked_loss/)

namespace {

// What both bases do after the chunk loop: the chunks' input gradients (kept in a list, as views
// of each chunk's gradient) concatenated, the list released, and the autograd node whose
// backward returns the saved gradients scaled by grad_output into new tensors (an over-count of
// the copies at --grad-accum 1, where grad_output is 1: docs/formulas.md#liger-dpo-grpo).
int finish_chunked(Graph& g, const ChunkedLossHead& h, std::initializer_list<int> grads_list, int grad_weight) {
  const DT xdt = g.at(h.hidden).dt;
  const int grad_input = g.make(h.rows * h.hidden_size, xdt, Cat::kActivationGrads);  // torch.cat(grad_inputs)
  for (const int t : grads_list) g.drop(t);
  const int loss = scalar_node(g, {h.hidden, h.weight}, {grad_input, grad_weight},
                               [x = h.hidden, w = h.weight, gi = grad_input, gw = grad_weight](Bwd& c) {
                                 if (c.needs(x)) c.give(x, c.like(gi));
                                 // A frozen head (LoRA) gets no gradient: the computed one is dropped.
                                 if (c.needs(w)) c.give(w, c.like(gw, Cat::kGradients));
                               });
  g.drop(grad_input);
  g.drop(grad_weight);
  return loss;
}

}  // namespace

int liger_fused_linear_preference(Graph& g, Ops& ops, const ChunkedLossHead& h) {
  const DT xdt = g.at(h.hidden).dt, wdt = g.at(h.weight).dt;
  const std::int64_t V = h.vocab, H = h.hidden_size;
  const std::optional<DT> ac = ops.autocast();
  const DT logit_dt = ac ? *ac : xdt;  // input_chunk @ weight.t()
  const bool prev = g.grad_enabled();
  g.set_grad_enabled(false);  // an autograd.Function's forward
  // grad_weight = zeros_like(weight): always, since grad_and_value differentiates the weight
  // (argnums 0 and 1) whether it trains or not.
  const int grad_weight = g.make(g.at(h.weight).numel, wdt, Cat::kGradients);
  // The earlier chunks' input gradients, alive in the list when the last chunk runs.
  const int earlier = g.make((h.rows - h.chunk_rows) * H, xdt, Cat::kActivationGrads);
  // The last chunk: torch.cat of its chosen and rejected rows (a copy, policy and reference) and
  // of their labels.
  const int xc = g.make(h.chunk_rows * H, xdt, Cat::kLogits);
  const int rc = h.ref_hidden >= 0 ? g.make(h.chunk_rows * H, g.at(h.ref_hidden).dt, Cat::kLogits) : -1;
  const int tc = g.make(h.chunk_rows, DT::kI64, Cat::kLogits);
  // torch.compile(grad_and_value(compute_loss)): Inductor decides which (chunk x V) buffers
  // exist. memplan keeps the policy's fp32 log-probs for the gradient, the reference's logits and
  // fp32 log-probs beside them, then the log-probs' fp32 gradient: 8 bytes per logit without a
  // reference, as Liger's published compiled benchmark grows (docs/formulas.md#liger-dpo-grpo).
  const Poly cv = h.chunk_rows * V;
  const int logits = g.make(cv, logit_dt, Cat::kLogits);
  const int logp = g.make(cv, DT::kF32, Cat::kLogits);
  g.drop(logits);
  if (rc >= 0) {
    const int rl = g.make(cv, logit_dt, Cat::kLogits);
    const int rlp = g.make(cv, DT::kF32, Cat::kLogits);
    g.drop(rl);
    g.drop(rlp);
  }
  const int dlogp = g.make(cv, DT::kF32, Cat::kLogits);
  g.drop(logp);
  g.drop(dlogp);
  const int dlogits = g.make(cv, logit_dt, Cat::kLogits);
  // chunk_grad_input (kept in the list) and chunk_grad_weight (a V x H temporary, add_-ed).
  const int chunk_gi = g.make(h.chunk_rows * H, xdt, Cat::kActivationGrads);
  const int chunk_gw = g.make(g.at(h.weight).numel, wdt, Cat::kGradients);
  g.drop(dlogits);
  g.drop(chunk_gw);
  g.drop(xc);
  if (rc >= 0) g.drop(rc);
  g.drop(tc);
  g.set_grad_enabled(prev);
  return finish_chunked(g, h, {earlier, chunk_gi}, grad_weight);
}

int liger_fused_linear_grpo(Graph& g, Ops& ops, const ChunkedLossHead& h) {
  const DT xdt = g.at(h.hidden).dt, wdt = g.at(h.weight).dt;
  const std::int64_t V = h.vocab, H = h.hidden_size;
  const std::optional<DT> ac = ops.autocast();
  const DT logit_dt = ac ? *ac : xdt;
  const bool prev = g.grad_enabled();
  g.set_grad_enabled(false);
  // zeros_like(weight), always: the base detaches the weight and requires its gradient.
  const int grad_weight = g.make(g.at(h.weight).numel, wdt, Cat::kGradients);
  const int earlier = g.make((h.rows - h.chunk_rows) * H, xdt, Cat::kActivationGrads);
  // The last sequence. _selective_logprob_forward: per tile (at most 2048 rows x 4096 vocabulary
  // entries) the logits in the input dtype, their fp32 copy and exp(logits - max); the (C) fp32
  // log-probs and log-normalizer (saved) survive. The tile is bounded by a constant: it is
  // min(C, 2048) rows, not a polynomial.
  const Poly tile = Poly::constant(kLigerTileRows * std::min(V, kLigerTileVocab));
  const int logz = g.make(h.chunk_rows, DT::kF32, Cat::kLogits);
  const int logps = g.make(h.chunk_rows, DT::kF32, Cat::kLogits);
  {
    const int t1 = g.make(tile, logit_dt, Cat::kLogits);
    const int t2 = g.make(tile, DT::kF32, Cat::kLogits);
    const int t3 = g.make(tile, DT::kF32, Cat::kLogits);
    g.drop(t1);
    g.drop(t2);
    g.drop(t3);
  }
  // _selective_logprob_backward, run in the forward by torch.autograd.grad: fp32 zeros for the
  // sequence's input gradient and for the whole weight gradient; per tile the logits again (input
  // dtype, fp32), the probabilities and their gradient (fp32), the weight tile and the input rows
  // in fp32 and their products.
  const int gh32 = g.make(h.chunk_rows * H, DT::kF32, Cat::kActivationGrads);
  const int gw32 = g.make(g.at(h.weight).numel, DT::kF32, Cat::kGradients);
  {
    const std::int64_t vt = std::min(V, kLigerTileVocab);
    const int t[] = {g.make(tile, logit_dt, Cat::kLogits),
                     g.make(tile, DT::kF32, Cat::kLogits),
                     g.make(tile, DT::kF32, Cat::kLogits),
                     g.make(tile, DT::kF32, Cat::kLogits),
                     g.make(Poly::constant(vt * H), DT::kF32, Cat::kLogits),
                     g.make(Poly::constant(kLigerTileRows * H), DT::kF32, Cat::kLogits),
                     g.make(Poly::constant(kLigerTileRows * H), DT::kF32, Cat::kLogits),
                     g.make(Poly::constant(vt * H), DT::kF32, Cat::kLogits)};
    for (const int x : t) g.drop(x);
  }
  // Returned in the input's and the weight's dtypes (.to(): copies beside the fp32 ones, unless
  // that dtype is fp32).
  const int chunk_gi = xdt == DT::kF32 ? gh32 : g.make(h.chunk_rows * H, xdt, Cat::kActivationGrads);
  const int chunk_gw = wdt == DT::kF32 ? gw32 : g.make(g.at(h.weight).numel, wdt, Cat::kGradients);
  if (chunk_gi != gh32) g.drop(gh32);
  if (chunk_gw != gw32) g.drop(gw32);
  g.drop(logz);
  g.drop(logps);
  g.drop(chunk_gw);  // grad_weight.add_(chunk_grad_weight)
  g.set_grad_enabled(prev);
  return finish_chunked(g, h, {earlier, chunk_gi}, grad_weight);
}

// ---- torchtune LinearCrossEntropyLoss (torchtune/modules/loss/cross_entropy_loss.py)

int chunked_linear_cross_entropy(Graph& g, Ops& ops, const LossHead& h, int chunks) {
  const std::int64_t V = h.vocab, H = h.hidden_size;
  // The recipe's shifted labels (hstack of labels[..., 1:] and an ignore column).
  const int target = g.make(h.rows, DT::kI64, Cat::kInputs);
  const int mask = g.make(h.rows, DT::kBool, Cat::kLogits);  // targets != ignore_index
  const Cat saved_cat = ops.cat;
  ops.cat = Cat::kLogits;
  int total = -1;
  for (int i = 0; i < chunks; ++i) {
    const Poly rows_c = split_part(h.rows, 1, chunks, i);
    // hidden_chunks = outputs.tensor_split(chunks, dim=1): slices of the hidden states.
    const int hc = ops.slice(h.hidden, split_part(h.rows, H, chunks, i), false);
    const int mc = g.make(rows_c, DT::kBool, Cat::kLogits);     // target_chunk != ignore_index
    const int tc = g.make(rows_c, DT::kI64, Cat::kLogits);      // target_chunk[mask_chunk]
    // hidden_chunk[mask_chunk]: a copy; IndexBackward keeps the indices and scatters back into
    // zeros shaped like the chunk.
    const int idx = g.make(rows_c, DT::kI64, Cat::kLogits);
    const int hm = g.make(split_part(h.rows, H, chunks, i), g.at(hc).dt, Cat::kLogits);
    g.node({hc}, {hm}, {idx}, [hc](Bwd& c) { c.give(hc, c.like(hc)); });
    g.drop(idx);
    g.drop(hc);
    const int logits = ops.linear(hm, h.weight, -1, split_part(h.rows, V, chunks, i));
    g.drop(hm);
    const int l32 = ops.to(logits, DT::kF32);  // logits.float()
    g.drop(logits);
    const int logp = ops.log_softmax(l32);
    g.drop(l32);
    const int li = ops.nll_loss(logp, tc);
    g.drop(logp);
    g.drop(tc);
    g.drop(mc);
    if (total < 0) {
      total = li;
    } else {
      const int s = ops.add(total, li, Poly::constant(1));
      g.drop(total);
      g.drop(li);
      total = s;
    }
  }
  const int loss = ops.scalar_op(total);  // / total_elements
  g.drop(total);
  ops.cat = saved_cat;
  g.drop(mask);
  g.drop(target);
  return loss;
}

// ---- Apple cut cross-entropy (cut_cross_entropy/cce.py, linear_cross_entropy.py)

int cut_cross_entropy(Graph& g, Ops& ops, const LossHead& h) {
  const std::int64_t V = h.vocab;
  // The Triton kernels take e and c in one 16-bit dtype: under autocast they get the autocast
  // copies (assumption: the transformers patch casts; docs/formulas.md#cut-cross-entropy).
  const int e = ops.cast_for_autocast(h.hidden);
  const int c = ops.cast_for_autocast(h.weight);
  const bool prev = g.grad_enabled();
  g.set_grad_enabled(false);
  const int valids = g.make(h.rows, DT::kI64, Cat::kLogits);      // _build_flat_valids (shift=True)
  const int lse = g.make(h.rows, DT::kF32, Cat::kLogits);         // cce_lse_forward_kernel
  const int logit_avg = g.make(Poly::constant(V), DT::kF32, Cat::kLogits);  // filter_eps="auto"
  const int neg_dot = g.make(h.rows, DT::kF32, Cat::kLogits);     // indexed_neg_dot; nll = add_(lse)
  g.set_grad_enabled(prev);
  const int loss = scalar_node(g, {e, c}, {e, c, lse, valids, logit_avg}, [e, c, V](Bwd& ctx) {
    Graph& gg = ctx.graph();
    // vocab_ordering = argsort(logit_avg).to(int32)
    const int order64 = gg.make(Poly::constant(V), DT::kI64, Cat::kActivationGrads);
    const int order = gg.make(Poly::constant(4 * V), DT::kU8, Cat::kActivationGrads);  // int32: 4 bytes each
    gg.drop(order64);
    // cce_backward_kernel: de, dc zero-initialised in the inputs' dtypes (accum_*_fp32 False).
    const int de = ctx.needs(e) ? ctx.like(e) : -1;
    const int dc = ctx.needs(c) ? ctx.like(c) : -1;
    gg.drop(order);
    if (de >= 0) ctx.give(e, de);
    if (dc >= 0) ctx.give(c, dc);
  });
  g.drop(neg_dot);
  g.drop(lse);
  g.drop(logit_avg);
  g.drop(valids);
  g.drop(e);
  g.drop(c);
  return loss;
}

// ---- Liger kernels replacing eager modules

int liger_rms_norm(Graph& g, Ops& ops, int x, int w, const Poly& numel, const Poly& rows) {
  const std::int64_t width = width_of(numel, rows);
  const int y = g.make(numel, g.at(x).dt, ops.cat);
  const int rstd = g.make(rows, DT::kF32, ops.cat);  // casting_mode llama/gemma: fp32
  g.node({x, w}, {y}, {x, w, rstd}, [x, w, width](Bwd& c) {
    Graph& gg = c.graph();
    // _dW = empty(sm_count, n_cols, fp32); dW = _dW.sum(0).to(W.dtype); dX written into dY.
    const int partial = gg.make(Poly::constant(kLigerSmCount * width), DT::kF32, Cat::kActivationGrads);
    const int gw = c.needs(w) ? c.like(w) : -1;
    gg.drop(partial);
    if (c.needs(x) && c.grad() >= 0) c.pass(x, c.grad());
    if (gw >= 0) c.give(w, gw);
  });
  g.drop(rstd);
  return y;
}

int liger_swiglu(Graph& g, Ops& ops, int gate, int up) {
  const int y = g.make(g.at(gate).numel, g.at(gate).dt, ops.cat);
  g.node({gate, up}, {y}, {gate, up}, [gate, up](Bwd& c) {
    // _swiglu_backward_kernel stores da into a and db into b: the saved inputs become the grads.
    if (c.needs(gate)) c.pass(gate, gate);
    if (c.needs(up)) c.pass(up, up);
  });
  return y;
}

std::pair<int, int> liger_rope(Graph& g, int q, int k) {
  // rope_forward: q.transpose(1, 2) is the projection's contiguous storage; the kernel rotates
  // it in place and returns transposed views. Backward rotates the incoming gradients in place.
  const int qo = g.view(q, g.at(q).numel);
  const int ko = g.view(k, g.at(k).numel);
  g.node({q, k}, {qo, ko}, {}, [q, k](Bwd& c) {
    if (c.needs(q) && c.grad(0) >= 0) c.pass(q, c.grad(0));
    if (c.needs(k) && c.grad(1) >= 0) c.pass(k, c.grad(1));
  });
  return {qo, ko};
}

}  // namespace memplan::sim

#include "core/sim/fused_ce.hpp"

#include <algorithm>

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

#include "core/sim/llama4.hpp"

namespace memplan::sim {

namespace {

Poly times(const Poly& p, std::int64_t k) {
  Poly out = p;
  for (auto& v : out.c) v *= k;
  return out;
}

}  // namespace

std::pair<int, int> llama4_rotary(Graph& g, Ops& ops, int q, int k, int freqs, const Poly& q_numel,
                                  const Poly& k_numel) {
  const DT qdt = g.at(q).dt, kdt = g.at(k).dt;
  // xq_ = view_as_complex(xq.float().reshape(...)): a copy for 16-bit x, x itself for fp32.
  const int qf = ops.to(q, DT::kF32);
  const int kf = ops.to(k, DT::kF32);
  // xq_ * freqs_cis[:, :, None, :]: complex64, as many bytes as fp32 x; MulBackward keeps freqs_cis.
  const int qp = ops.mul(qf, freqs, q_numel);
  const int kp = ops.mul(kf, freqs, k_numel);
  // view_as_real(...).flatten(3): views; .type_as(x): a copy back for 16-bit x.
  const int qo = ops.to(qp, qdt);
  const int ko = ops.to(kp, kdt);
  for (const int t : {qf, kf, qp, kp}) g.drop(t);  // the function's locals
  return {qo, ko};
}

int llama4_l2_norm(Graph& g, Ops& ops, int x, const Poly& numel, const Poly& rows) {
  const DT in_dt = g.at(x).dt;
  const int f = ops.to(x, DT::kF32);  // x.float()
  const int p = ops.pow2(f);          // keeps x.float()
  const int var = ops.mean_last(p, rows);
  g.drop(p);
  const int ve = ops.scalar_op(var);  // + eps
  g.drop(var);
  const int r = ops.rsqrt(ve);  // keeps its result
  g.drop(ve);
  const int n = ops.mul(f, r, numel);  // keeps both
  g.drop(f);
  g.drop(r);
  const int out = ops.to(n, in_dt);  // .type_as(x)
  g.drop(n);
  return out;
}

int llama4_temperature(Graph& g, Ops& ops, int q, const Poly& numel, const Poly& positions) {
  const DT dt = g.at(q).dt;
  // The (s) fp32 scales: cache_position.float(), + 1, / floor_scale, floor, log1p, * attn_scale,
  // + 1, each a new (s) tensor freed by the next; the last one is expanded (a view).
  const int scales = g.make(positions, DT::kF32, Cat::kInputs);
  const int prod = ops.mul(q, scales, numel);  // fp32; keeps only the scales (which need no gradient)
  g.drop(scales);
  const int out = ops.to(prod, dt);
  g.drop(prod);
  return out;
}

int llama4_eager_probs(Graph& g, Ops& ops, int q, int kT, int mask, const Poly& scores, bool copy_q, bool copy_k) {
  ops.cat = Cat::kAttentionScores;
  const int sc = ops.matmul(q, kT, scores, copy_q, copy_k);
  g.drop(kT);
  int cur = ops.scalar_op(sc);  // * scaling
  g.drop(sc);
  if (mask >= 0) {
    const int masked = ops.add(cur, mask, scores);
    g.drop(cur);
    cur = masked;
  }
  const int probs = ops.softmax(cur);  // F.softmax(attn_weights, dim=-1): no dtype
  g.drop(cur);
  return probs;
}

int llama4_moe(Graph& g, Ops& ops, const Llama4Moe& st, int x) {
  const std::int64_t E = st.experts, h = st.hidden, I = st.width;
  const auto tok = [&](std::int64_t w) { return times(st.tokens, w); };
  const DT xdt = g.at(x).dt;
  // Llama4Router: router_logits = nn.Linear(x), a local of the MoE forward and returned with its
  // output (the decoder layer's `_`).
  const int logits = st.router(x, tok(E));
  const DT ldt = g.at(logits).dt;
  const int topv = g.make(tok(st.top_k), ldt, ops.cat);
  const int topi = g.make(tok(st.top_k), DT::kI64, ops.cat);
  g.node({logits}, {topv}, {topi}, [logits](Bwd& c) { c.give(logits, c.like(logits)); });
  // torch.full_like(logits, -inf).scatter_(1, indices, values): ScatterBackward keeps the indices
  // and gathers the values' gradient.
  const int scattered = g.make(tok(E), ldt, ops.cat);
  g.node({topv}, {scattered}, {topi}, [topv](Bwd& c) { c.give(topv, c.like(topv)); });
  g.drop(topv);
  g.drop(topi);
  const int sf = ops.to(scattered, DT::kF32);  // .float()
  g.drop(scattered);
  const int sig = ops.tanh(sf);  // sigmoid: keeps its result, as tanh does
  g.drop(sf);
  const int scores = ops.to(sig, ldt);
  g.drop(sig);
  // routed_in = x.repeat(E, 1): E x tokens rows; RepeatBackward sums the gradient back to x.
  const int rep = g.make(tok(E * h), xdt, ops.cat);
  g.node({x}, {rep}, {}, [x](Bwd& c) { c.give(x, c.like(x)); });
  // router_scores.transpose(0, 1).reshape(-1, 1): a copy (the transpose is not contiguous).
  const int col = ops.clone(scores);
  const int routed = ops.mul(rep, col, tok(E * h));
  g.drop(rep);
  g.drop(col);
  // Llama4TextExperts: torch.bmm(routed.view(E, -1, h), gate_up_proj): (E, tokens, 2I); BmmBackward
  // keeps its input for the weight's gradient and the weight for the input's. The fused Parameter
  // is the gate and up halves here; its gradient is made by the one node either way.
  // routed_in stays a local of Llama4TextMoe.forward until it returns, kept or not by the bmm.
  const int rin = ops.cast_for_autocast(routed);
  const int wg = ops.cast_for_autocast(st.w_gate);
  const int wu = ops.cast_for_autocast(st.w_up);
  const bool weights_train = g.rg(wg) || g.rg(wu);
  const bool input_grad = g.rg(rin);
  const int gu = g.make(tok(E * 2 * I), g.at(rin).dt, ops.cat);
  g.node({rin, wg, wu}, {gu}, {weights_train ? rin : -1, input_grad ? wg : -1, input_grad ? wu : -1},
         [rin, wg, wu](Bwd& c) {
           const int gw = c.needs(wg) ? c.like(wg) : -1;
           const int gv = c.needs(wu) ? c.like(wu) : -1;
           const int gx = c.needs(rin) ? c.like(rin) : -1;
           if (gx >= 0) c.give(rin, gx);
           if (gw >= 0) c.give(wg, gw);
           if (gv >= 0) c.give(wu, gv);
         });
  g.drop(rin);
  g.drop(wg);
  g.drop(wu);
  // gate, up = gate_up.chunk(2, dim=-1): two views; SplitBackward builds one gradient of
  // gate_up's size from both halves.
  const int gate = g.view(gu, tok(E * I));
  const int up = g.view(gu, tok(E * I));
  g.node({gu}, {gate, up}, {}, [gu](Bwd& c) { c.give(gu, c.like(gu)); });
  g.drop(gu);
  const int act = ops.silu(gate);  // keeps the gate half (and so gate_up)
  g.drop(gate);
  const int prod = ops.mul(up, act, tok(E * I));
  g.drop(up);
  g.drop(act);
  const int down = ops.matmul(prod, st.w_down, tok(E * h));
  g.drop(prod);
  // out = shared_expert(x); out.add_(routed_out.reshape(E, -1, h).sum(dim=0)).
  const int out = st.shared(x);
  const int summed = ops.sum(down, tok(h));
  g.drop(down);
  const int added = g.view(out, tok(h));  // add_ writes into the shared expert's output
  g.node({out, summed}, {added}, {}, [out, summed](Bwd& c) {
    c.pass(out, c.grad());
    c.pass(summed, c.grad());
  });
  g.drop(out);
  g.drop(summed);
  g.drop(routed);
  g.drop(scores);  // router_scores and router_logits: locals of the forward (the logits are returned too)
  g.drop(logits);
  return added;
}

}  // namespace memplan::sim

#include "core/sim/gpt_oss.hpp"

namespace memplan::sim {

int sink_eager_probs(Graph& g, Ops& ops, int q, int kT, int mask, int sinks, const Poly& scores, const Poly& rows,
                     bool copy_q, bool copy_k) {
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
  // module.sinks.reshape(1, -1, 1, 1).expand(b, -1, s, -1): a view of the parameter; its
  // backward sums the expanded gradient back to (heads).
  const int sx = g.view(sinks, rows);
  g.node({sinks}, {sx}, {}, [sinks](Bwd& c) { c.give(sinks, c.like(sinks)); });
  // torch.cat([attn_weights, sinks], dim=-1): (b, heads, s, s + 1); under autocast cat promotes to
  // the widest input (fp32 sinks of a full fine-tune make it fp32).
  const int comb = ops.concat({cur, sx});
  g.drop(cur);
  g.drop(sx);
  const Poly wide = g.at(comb).numel;
  const DT dt = g.at(comb).dt;
  // combined.max(dim=-1, keepdim=True): values and int64 indices (b, heads, s, 1); MaxBackward
  // keeps the indices and scatters the gradient into a zero tensor of the input's size.
  const int mx = g.make(rows, dt, ops.cat);
  const int idx = g.make(rows, DT::kI64, ops.cat);
  g.node({comb}, {mx}, {idx}, [comb](Bwd& c) { c.give(comb, c.like(comb)); });
  g.drop(idx);
  // combined - max: a new tensor; the subtraction saves nothing.
  const int shifted = ops.add(comb, mx, wide);
  g.drop(comb);
  g.drop(mx);
  // F.softmax(..., dtype=combined.dtype): an explicit dtype, so autocast leaves it in that dtype;
  // SoftmaxBackward keeps its result.
  const int probs = g.make(wide, dt, ops.cat);
  g.node({shifted}, {probs}, {probs}, [shifted](Bwd& c) { c.give(shifted, c.like(shifted)); });
  g.drop(shifted);
  // probs[..., :-1]: a view; SliceBackward fills a zero tensor of the probabilities' size.
  const int w = ops.slice(probs, scores, false);
  g.drop(probs);
  return w;
}

}  // namespace memplan::sim

// gpt-oss's eager attention with sinks as ops on a sim::Graph (docs/models.md#gpt_oss): what
// transformers' models/gpt_oss eager_attention_forward (4.55-4.57) allocates, saves and frees.
#pragma once

#include "core/sim/graph.hpp"
#include "core/sim/ops.hpp"

namespace memplan::sim {

// scores = matmul(q, kT) * scaling + mask; combined = cat([scores, sinks.expand(b, heads, s, 1)]);
// combined - combined.max(-1, keepdim=True).values; softmax(dtype=combined.dtype); probs[..., :-1].
// q, kT as for Ops::eager_probs (kT is taken); sinks: the layer's (heads) parameter; scores: the
// (b, heads, s, s) elements, rows: (b, heads, s). Returns the view probs[..., :-1] (the attention
// weights, which keep the (b, heads, s, s + 1) probabilities alive), recorded as attention scores.
int sink_eager_probs(Graph& g, Ops& ops, int q, int kT, int mask, int sinks, const Poly& scores, const Poly& rows,
                     bool copy_q, bool copy_k);

}  // namespace memplan::sim

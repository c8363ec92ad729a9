// Llama 4's text blocks as ops on a sim::Graph (docs/models.md#llama-4): what transformers'
// models/llama4/modeling_llama4.py (Llama4TextAttention, apply_rotary_emb, Llama4TextL2Norm, its
// eager_attention_forward, Llama4TextMoe) allocates, saves and frees in a training step.
#pragma once

#include <functional>
#include <utility>

#include "core/sim/graph.hpp"
#include "core/sim/ops.hpp"

namespace memplan::sim {

// apply_rotary_emb on q and k, both (b, s, heads, head_dim): view_as_complex(x.float().reshape(...,
// -1, 2)) * freqs_cis, view_as_real, flatten, type_as(x). The .float() copies (16-bit inputs) and
// the complex64 products are locals until the function returns; each product saves only freqs_cis
// (which needs no gradient). freqs: the (1, s, head_dim / 2) complex64 table, held as fp32 of
// (s, head_dim). Returns the rotated q and k in their own dtype.
std::pair<int, int> llama4_rotary(Graph& g, Ops& ops, int q, int k, int freqs, const Poly& q_numel,
                                  const Poly& k_numel);

// Llama4TextL2Norm: _norm(x.float()).type_as(x), _norm(x) = x * rsqrt(x.pow(2).mean(-1) + eps);
// no weight. rows: x's numel / head_dim.
int llama4_l2_norm(Graph& g, Ops& ops, int x, const Poly& numel, const Poly& rows);

// attn_temperature_tuning on a NoPE layer: attn_scales = log1p(floor((cache_position.float() + 1)
// / floor_scale)) * attn_scale + 1, (s) fp32, expanded to (b, s, 1, 1); (q * attn_scales).to(q's
// dtype): the product is fp32 (type promotion), its cast back a copy for 16-bit q. positions: (s).
int llama4_temperature(Graph& g, Ops& ops, int q, const Poly& numel, const Poly& positions);

// models/llama4's eager_attention_forward up to the probabilities: matmul(q, kT) (kT is taken;
// copy_q / copy_k as for Ops::eager_probs), * scaling, + mask, softmax in the scores' dtype (no
// fp32 upcast, unlike Llama's), recorded as attention scores.
int llama4_eager_probs(Graph& g, Ops& ops, int q, int kT, int mask, const Poly& scores, bool copy_q, bool copy_k);

// Llama4TextMoe on x (tokens, hidden). tokens: a Poly of one value per token; E experts of width
// I, top-k routing, hidden h. router(x, numel) runs Llama4Router's nn.Linear (tokens x E logits);
// shared(x) the shared expert (Llama4TextMLP of width I); w_gate / w_up: the halves of the fused
// gate_up_proj (E, h, 2I) Parameter, w_down: down_proj (E, I, h).
struct Llama4Moe {
  std::int64_t experts = 0, top_k = 1, hidden = 0, width = 0;
  Poly tokens;
  std::function<int(int, Poly)> router;
  std::function<int(int)> shared;
  int w_gate = -1, w_up = -1, w_down = -1;
};

// Llama4Router: topk (keeps the indices), full_like(logits, -inf).scatter_(1, indices, values)
// (keeps the indices), sigmoid(scores.float()) (keeps its result), .to(logits' dtype); then
// routed_in = x.repeat(E, 1) * scores.transpose(0, 1).reshape(-1, 1) (the product keeps the
// repeat when the router trains, the score column when x needs a gradient): every token through
// every expert, E x tokens rows; Llama4TextExperts: bmm with gate_up_proj (keeps the scaled rows
// when the experts train), chunk, silu(gate) * up, bmm with down_proj; the shared expert; its
// output .add_ (in place) of routed_out.reshape(E, -1, h).sum(0). Returns the layer's MoE output.
int llama4_moe(Graph& g, Ops& ops, const Llama4Moe& st, int x);

}  // namespace memplan::sim

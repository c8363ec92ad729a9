// Llama 4's text blocks on a bare Graph (docs/models.md#llama-4): the tensors
// models/llama4/modeling_llama4.py leaves saved for backward, counted by hand on tiny shapes
// with torch 1.13's CPU rules (MeanBackward keeps its input; mixed dtypes promote through a copy).
#include <catch2/catch.hpp>

#include "core/sim/llama4.hpp"

using namespace memplan;
using namespace memplan::sim;

namespace {

OpsBehaviour cpu() { return OpsBehaviour{false, true, true, true}; }

Poly per_token(std::int64_t k) { return Poly::mono(kBS, k); }

// q: 2 heads x 4, k: 1 head x 4, as projections (b, s, heads, head_dim) that need a gradient;
// the rotary table (s, 4) fp32. Returns the bytes per token alive after the rotary embedding and
// the L2 norms, once the projections are dropped (Llama4TextAttention rebinds the names).
std::int64_t rotary_and_l2(DT dt) {
  Graph g;
  Ops ops(g, cpu());
  const int q = g.make(per_token(8), dt, Cat::kActivations, true);
  const int k = g.make(per_token(4), dt, Cat::kActivations, true);
  const int freqs = g.make(Poly::mono(kS, 4), DT::kF32, Cat::kInputs);
  auto [qr, kr] = llama4_rotary(g, ops, q, k, freqs, per_token(8), per_token(4));
  g.drop(q);
  g.drop(k);
  llama4_l2_norm(g, ops, qr, per_token(8), per_token(2));
  g.drop(qr);
  llama4_l2_norm(g, ops, kr, per_token(4), per_token(1));
  g.drop(kr);
  return g.live_total().c[kBS];
}

}  // namespace

TEST_CASE("Llama 4 rotary + L2 norm, fp32: the complex products, the norms' saved inputs and outputs") {
  // Per token, q (8 values): the complex product (8, as fp32 bytes; it is q.float() * freqs_cis,
  // which keeps only freqs_cis, so the projection q dies), kept by pow and the product of the
  // norm; pow's output (8), kept by MeanBackward (torch 1.13); rsqrt (1 per head: 2); the normed
  // q (8). k alike with 4 values and 1 head: 4 + 4 + 1 + 4. (26 + 13) x 4 bytes = 156, and the
  // projections (12 x 4 = 48) are gone: 156 per token in all.
  CHECK(rotary_and_l2(DT::kF32) == 156);
}

TEST_CASE("Llama 4 rotary + L2 norm, bf16: fp32 copies inside, bf16 out") {
  // The rotary's .float() copies and fp32 products are locals (freed at its return); the bf16
  // rotated q is then copied by the norm's .float() (8 x 4, kept by pow and the product), pow's
  // output (8 x 4, kept by MeanBackward), rsqrt (2 x 4), the type_as copy (8 x 2): 88 for q; k:
  // 16 + 16 + 4 + 8 = 44: 132 per token (the bf16 rotated q and k die with the names).
  CHECK(rotary_and_l2(DT::kBF16) == 132);
}

namespace {

struct MoeRun {
  std::int64_t saved = 0;  // bytes per token alive after the forward, the output included
  bool grads = false;
};

// E = 2 experts of width I = 3, hidden h = 4, top-1; fp32. The shared expert is a stand-in
// single Linear (its own tensors are not Llama 4's). full: router, experts and shared expert
// train; else they are frozen (LoRA elsewhere) and only x needs a gradient.
MoeRun moe_run(bool full) {
  Graph g;
  Ops ops(g, cpu());
  const auto w = [&](std::int64_t n) { return g.param(Poly::constant(n), DT::kF32, Cat::kWeights, full); };
  const int router = w(2 * 4), shared = w(4 * 4), wg = w(2 * 4 * 3), wu = w(2 * 4 * 3), wd = w(2 * 3 * 4);
  const int x = g.make(per_token(4), DT::kF32, Cat::kActivations, true);
  const Poly before = g.live_total();
  Llama4Moe st;
  st.experts = 2;
  st.top_k = 1;
  st.hidden = 4;
  st.width = 3;
  st.tokens = per_token(1);
  st.router = [&](int in, Poly n) { return ops.linear(in, router, -1, n); };
  st.shared = [&](int in) { return ops.linear(in, shared, -1, per_token(4)); };
  st.w_gate = wg;
  st.w_up = wu;
  st.w_down = wd;
  const int out = llama4_moe(g, ops, st, x);
  MoeRun r;
  r.saved = (g.live_total() - before).c[kBS];
  g.backward(out, 0);
  r.grads = g.at(wg).grad >= 0 && g.at(wu).grad >= 0 && g.at(wd).grad >= 0 && g.at(router).grad >= 0;
  return r;
}

}  // namespace

TEST_CASE("Llama4TextMoe, full fine-tune: the repeat, the scaled rows and gate_up kept for every expert") {
  // Per token: the top-k indices (1 int64: 8 bytes) kept by topk and scatter_; the sigmoid's result
  // (2 experts) and the transposed score column (2), kept by the scaling product; the repeat
  // x.repeat(E, 1) (2 x 4) kept by that product (the router trains); the scaled rows (8) kept by
  // the gate_up bmm (the experts train); gate_up (2 x 2 x 3 = 12) kept through silu's view of the
  // gate half; silu(gate) (6) and the product (6) kept by the mul and the down bmm; the output
  // (the shared expert's, added into in place: 4). (2 + 2 + 8 + 8 + 12 + 6 + 6 + 4) x 4 + 8 = 200.
  const MoeRun r = moe_run(true);
  CHECK(r.saved == 200);
  CHECK(r.grads);
}

TEST_CASE("Llama4TextMoe under LoRA: the frozen experts keep no scaled rows and no product for their weights") {
  // As above without the scaled rows (8: only the weights need them) and the product before the
  // down bmm (6): the score column still needs a gradient through x, so the repeat stays.
  // (2 + 2 + 8 + 12 + 6 + 4) x 4 + 8 = 144.
  const MoeRun r = moe_run(false);
  CHECK(r.saved == 144);
  CHECK_FALSE(r.grads);
}

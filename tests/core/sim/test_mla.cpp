// Multi-head latent attention on a bare Graph (docs/formulas.md#mla): the tensors
// DeepseekV3Attention.forward leaves saved for backward, counted by hand on a tiny shape.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/sim/mla.hpp"

using namespace memplan;
using namespace memplan::sim;

namespace {

// hidden 16, 2 heads, q_lora_rank 8, kv_lora_rank 8, qk_nope 4, qk_rope 2 (qk_head_dim 6), v 4.
ModelSpec tiny_mla() {
  ModelSpec m;
  m.model_type = "deepseek_v3";
  m.hidden_size = 16;
  m.num_heads = m.num_kv_heads = 2;
  m.q_lora_rank = 8;
  m.kv_lora_rank = 8;
  m.qk_nope_head_dim = 4;
  m.qk_rope_head_dim = 2;
  m.v_head_dim = 4;
  m.head_dim = 6;
  return m;
}

struct Run {
  std::int64_t saved_per_token = 0;  // bytes alive after the forward, beyond what existed before
  std::int64_t saved_per_bss = 0;    // the b x s x s part
  bool grads = false;
};

// Trainable bf16 weights; the layernorm is a stand-in weight * x (saves x and w) and the rotary
// a stand-in x * cos (saves only cos, which needs no grad): the test counts MLA's own tensors.
Run run(AttnImpl impl) {
  const ModelSpec m = tiny_mla();
  Graph g;
  Ops ops(g, OpsBehaviour{true, false, false, true});
  auto w = [&](std::int64_t n) { return g.param(Poly::constant(n), DT::kBF16, Cat::kWeights, true); };
  const int q_a = w(16 * 8), q_b = w(8 * 12), kv_a = w(16 * 10), kv_b = w(8 * 16), o = w(8 * 16);
  const int q_norm = w(8), kv_norm = w(8);
  const int x = g.make(Poly::mono(kBS, 16), DT::kBF16, Cat::kActivations, true);
  const int mask = g.make(Poly::mono(kSS, 1), DT::kBF16, Cat::kInputs);
  const int cos = g.make(Poly::mono(kS, 2), DT::kBF16, Cat::kInputs);
  const Poly before = g.live_total();
  MlaStep st{g,
             ops,
             m,
             Poly::mono(kBS, 1),
             Poly::mono(kBS, 2),
             Poly::mono(kBSS, 2),
             impl,
             false,
             mask,
             cos,
             [&](int in, const std::string& name, Poly n) {
               const int wt = name == "q_a_proj" ? q_a : name == "q_b_proj" ? q_b : name == "kv_a_proj_with_mqa" ? kv_a
                              : name == "kv_b_proj" ? kv_b : o;
               return ops.linear(in, wt, -1, n);
             },
             [&](int in, int wt, std::int64_t, Poly n) { return ops.mul(in, wt, n); },
             [&](int in, Poly n) { return ops.mul(in, cos, n); }};
  auto [out, probs] = mla_attention(st, x, q_norm, kv_norm);
  const Poly after = g.live_total() - before;
  Run r;
  r.saved_per_token = after.c[kBS];
  r.saved_per_bss = after.c[kBSS];
  if (probs >= 0) g.drop(probs);
  g.backward(out, 0);
  r.grads = g.at(q_a).grad >= 0 && g.at(kv_b).grad >= 0 && g.at(q_norm).grad >= 0 && g.at(kv_norm).grad >= 0;
  return r;
}

}  // namespace

TEST_CASE("MLA eager: the latent path's saved tensors, q/k at qk_head_dim, and the scores") {
  // Per token, bf16 (2 bytes): q_a_proj output 8 (saved by the norm), normed q 8 (saved by
  // q_b_proj), compressed_kv 10 (the latent view saved by kv_a_layernorm keeps it), normed latent
  // 8 (saved by kv_b_proj), value_states copied by matmul's reshape into bmm's batch (2 heads x
  // 4 = 8, saved by probs @ v: the kv_b_proj output it is a view of dies with the forward),
  // query_states 12 and key_states 12 (saved by q @ k^T), the contiguous attention output 8
  // (saved by o_proj) and o_proj's output 16: 90 values = 180 bytes. q_b_proj's output (12) and
  // the rotary copies die with the forward. Scores: 2 heads x (fp32 softmax 4 + bf16 probs 2)
  // = 12 bytes per (b, s, s).
  const Run r = run(AttnImpl::kEager);
  CHECK(r.saved_per_token == 180);
  CHECK(r.saved_per_bss == 12);
  CHECK(r.grads);
}

TEST_CASE("MLA with SDPA: no score matrix; v unpadded; one fp32 logsumexp per head") {
  // As eager without the scores; the kernel saves query, key, value (kv_b_proj's output) and its
  // 8-wide output (o_proj saves a view of it): 196 bytes, plus 2 heads x 4 bytes of logsumexp.
  const Run r = run(AttnImpl::kSdpa);
  CHECK(r.saved_per_token == 196 + 8);
  CHECK(r.saved_per_bss == 0);
  CHECK(r.grads);
}

TEST_CASE("MLA with flash_attention_2: value padded to qk_head_dim, output sliced and copied") {
  // value_states F.pad-ed from 4 to 6 per head: a new 12-wide tensor the kernel saves; the
  // kernel's output is 12 wide too (saved), and o_proj saves the 8-wide contiguous copy of its
  // slice. kv_b_proj's output is then saved by nothing: 8 + 8 + 10 + 8 + 12 + 12 (q, k) + 12
  // (padded v) + 12 (output) + 8 (copy) + 16 (o_proj) = 106 values = 212 bytes, + 8 of logsumexp.
  const Run r = run(AttnImpl::kFlashAttention2);
  CHECK(r.saved_per_token == 212 + 8);
  CHECK(r.saved_per_bss == 0);
  CHECK(r.grads);
}

// DeepSeek-V3.2 as transformers 5 runs it (docs/models.md#deepseek-v32): the tiny MLA above with
// an indexer of 4 heads x 8 dims (rope on the first 2) and top-8, eager attention.
TEST_CASE("DeepSeek-V3.2's indexer saves nothing; its fp32 head scores and broadcast key peak the forward") {
  ModelSpec m = tiny_mla();
  m.model_type = "deepseek_v32";
  m.index_heads = 4;
  m.index_head_dim = 8;
  m.index_topk = 8;
  Graph g;
  Ops ops(g, OpsBehaviour{true, false, false, true});
  auto w = [&](std::int64_t n, bool train = true, DT dt = DT::kBF16) {
    return g.param(Poly::constant(n), dt, Cat::kWeights, train);
  };
  const int q_a = w(16 * 8), q_b = w(8 * 12), kv_a = w(16 * 10), kv_b = w(8 * 16), o = w(8 * 16);
  const int wq_b = w(8 * 32, false), wk = w(16 * 8, false), wp = w(16 * 4, false, DT::kF32);
  const int q_norm = w(8), kv_norm = w(8);
  const int x = g.make(Poly::mono(kBS, 16), DT::kBF16, Cat::kActivations, true);
  const int mask = g.make(Poly::mono(kBSS, 1), DT::kBF16, Cat::kInputs);
  const int cos = g.make(Poly::mono(kS, 2), DT::kBF16, Cat::kInputs);
  const Poly before = g.live_total();
  const std::size_t first_event = g.events().size();
  MlaStep st{g,
             ops,
             m,
             Poly::mono(kBS, 1),
             Poly::mono(kBS, 2),
             Poly::mono(kBSS, 2),
             AttnImpl::kEager,
             false,
             mask,
             cos,
             [&](int in, const std::string& name, Poly n) {
               const int wt = name == "q_a_proj"             ? q_a
                              : name == "q_b_proj"           ? q_b
                              : name == "kv_a_proj_with_mqa" ? kv_a
                              : name == "kv_b_proj"          ? kv_b
                              : name == "indexer.wq_b"       ? wq_b
                              : name == "indexer.wk"         ? wk
                              : name == "indexer.weights_proj" ? wp
                                                               : o;
               return ops.linear(in, wt, -1, n);
             },
             [&](int in, int wt, std::int64_t, Poly n) { return ops.mul(in, wt, n); },
             [&](int in, Poly n) { return ops.mul(in, cos, n); },
             Poly::mono(kBSS, 1)};
  auto [out, probs] = mla_attention(st, x, q_norm, kv_norm);
  const Poly after = g.live_total() - before;
  // What stays for backward is V3's (the first test case): the indexer ran under no_grad and its
  // top-k mask and scores died with the forward.
  CHECK(after.c[kBS] == 180);
  CHECK(after.c[kBSS] == 12);
  // The forward's largest b x s x s term, per (b, s, s): matmul(q.float(), k^T.float()) expands
  // the broadcast key to [b, s, 8, s] fp32 and copies it for bmm (32 B) while writing the
  // [b, s, 4, s] fp32 head scores (16 B): 48 B. (Later: scores * scale and relu, 32 B; the [b, s, s]
  // index scores 4 + 4 B beside relu's 16; the bool and bf16 masks 1 + 1 + 2 B; eager attention's
  // 2-head scores at most 4 + 4 + 8 + 4 B.)
  std::int64_t most = 0;
  for (std::size_t i = first_event; i < g.events().size(); ++i)
    most = std::max(most, g.events()[i].total.c[kBSS] - before.c[kBSS]);
  CHECK(most == 48);
  if (probs >= 0) g.drop(probs);
  g.backward(out, 0);
  CHECK(g.at(q_a).grad >= 0);
  CHECK(g.at(kv_b).grad >= 0);
  CHECK(g.at(wq_b).grad < 0);  // frozen by no_grad: no gradient ever arrives
}

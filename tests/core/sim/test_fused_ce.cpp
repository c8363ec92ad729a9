// Loss kernels on a bare Graph, byte counts derived by hand from the upstream sources
// (docs/formulas.md#fused-cross-entropy).
#include <catch2/catch.hpp>

#include "core/sim/fused_ce.hpp"
#include "support/graph_peak.hpp"

using namespace memplan::sim;
using memplan::testing::graph_peak;

TEST_CASE("Liger's chunk rule: next_power_of_2(ceil(BT / ceil(V / H))), at most BT") {
  CHECK(liger_chunk_rows(16384, 32000, 4096) == 2048);  // the source's own example: inc 8
  CHECK(liger_chunk_rows(8192, 128256, 4096) == 256);   // inc ceil(31.3) = 32
  CHECK(liger_chunk_rows(1024, 128256, 4096) == 32);
  CHECK(liger_chunk_rows(1025, 128256, 4096) == 64);    // ceil(1025 / 32) = 33 -> 64
  CHECK(liger_chunk_rows(1, 128256, 4096) == 1);
  CHECK(liger_chunk_rows(100, 1000, 4096) == 100);      // V <= H: one chunk of every row
}

TEST_CASE("the polynomial chunk bound covers the real chunk and stays within 2x + 2 rows") {
  const Poly rows = Poly::mono(kBS, 1);
  for (std::int64_t V : {32000, 128256, 151936}) {
    for (std::int64_t H : {896, 4096}) {
      const Poly bound = liger_chunk_numel_bound(rows, V, H);
      for (std::int64_t bt : {1, 7, 1000, 1025, 8192, 65537}) {
        const std::int64_t real = liger_chunk_rows(bt, V, H) * V;
        const std::int64_t inc = (V + H - 1) / H;
        CHECK(bound.eval(1, bt) >= real);
        CHECK(bound.eval(1, bt) <= (2 * ((bt + inc - 1) / inc) + 2) * V);
      }
    }
  }
}

TEST_CASE("Liger FLCE forward holds grad_input, grad_weight, one logits chunk and loss_1d") {
  // bf16 weights, no autocast, CUDA: torch.mm(out=) into one reused (chunk x V) buffer.
  Graph g;
  Ops ops(g, OpsBehaviour{true, false, false, true});
  const std::int64_t V = 64, H = 16;
  const int hidden = g.make(Poly::mono(kBS, H), DT::kBF16, Cat::kActivations, true);
  const int weight = g.param(Poly::constant(V * H), DT::kBF16, Cat::kWeights, true);
  const LossHead h{hidden, weight, Poly::mono(kBS, 1), Poly::mono(kB, 1), V, H, true};
  const int loss = liger_fused_linear_cross_entropy(g, ops, h);
  // b = 2, s = 8: BT = 16. hidden 16x16x2 = 512, weight 64x16x2 = 2048, padded labels (16 + 2) x 8
  // = 144, shifted labels 128, grad_input 512, grad_weight 2048, loss_1d 16 x 4 = 64, target_mask
  // 16, chunk buffer: bound rows x ceil(2 x 64 / 4) + 2 x 64 = 16 x 32 + 128 elements x 2 = 1280.
  CHECK(graph_peak(g, 2, 8) == 512 + 2048 + 144 + 128 + 512 + 2048 + 64 + 16 + 1280);
  // After the forward only the saved gradients remain besides the inputs: 512 + 2048 + 512 + 2048
  // (+ the 4-byte loss).
  CHECK(g.live_total().eval(2, 8) == 512 + 2048 + 512 + 2048 + 4);
  g.drop(hidden);
  g.backward(loss, 0);
  // Backward allocates nothing but the 4-byte seed: grad_input goes to the hidden states,
  // grad_weight becomes weight.grad.
  CHECK(graph_peak(g, 2, 8) == 512 + 2048 + 144 + 128 + 512 + 2048 + 64 + 16 + 1280);
  REQUIRE(g.at(weight).grad >= 0);
  CHECK(g.at(g.at(weight).grad).cat == Cat::kGradients);
}

TEST_CASE("Liger FLCE with fp32 logits takes the legacy fp32 weight-gradient path") {
  // fp32 weights and logits: grad_weight += mm(grad_logits.t(), x).float() makes a (V x H) fp32
  // temporary per chunk. With cuda = false _can_use_mm_out is false: a fresh logits chunk and a
  // grad_input product per chunk instead of the reused buffer.
  Graph g;
  Ops ops(g, OpsBehaviour{});
  const std::int64_t V = 64, H = 16;
  const int hidden = g.make(Poly::mono(kBS, H), DT::kF32, Cat::kActivations, true);
  const int weight = g.param(Poly::constant(V * H), DT::kF32, Cat::kWeights, true);
  const LossHead h{hidden, weight, Poly::mono(kBS, 1), Poly::mono(kB, 1), V, H, false};
  const int loss = liger_fused_linear_cross_entropy(g, ops, h);
  // b = 1, s = 16: inputs 1024 + 4096, labels 17 x 8 + 128, grad_input 1024, grad_weight 4096,
  // loss_1d 64, mask 16; the logits chunk (16 x 32 + 128) x 4 = 2560 lives through the chunk; the
  // grad_input product ((16 x 8 + 32) x 4 = 640) is freed before the (V x H) fp32 temporary (4096).
  const std::int64_t base = 1024 + 4096 + 136 + 128 + 1024 + 4096 + 64 + 16;
  CHECK(graph_peak(g, 1, 16) == base + 2560 + 4096);
  g.drop(hidden);
  g.drop(loss);
}

TEST_CASE("cut cross-entropy keeps an fp32 logsumexp per token and a vocabulary-sized average") {
  Graph g;
  Ops ops(g, OpsBehaviour{true, false, false, true});
  const std::int64_t V = 1000, H = 8;
  const int hidden = g.make(Poly::mono(kBS, H), DT::kBF16, Cat::kActivations, true);
  const int weight = g.param(Poly::constant(V * H), DT::kBF16, Cat::kWeights, false);
  const LossHead h{hidden, weight, Poly::mono(kBS, 1), Poly::mono(kB, 1), V, H, true};
  const int loss = cut_cross_entropy(g, ops, h);
  // b = 4, s = 32: BT = 128. hidden 128 x 8 x 2 = 2048, weight 16000; valids 128 x 8, lse 512,
  // logit_avg 4000, neg_dot 512, and the 4-byte loss made before neg_dot goes.
  CHECK(graph_peak(g, 4, 32) == 2048 + 16000 + 1024 + 512 + 4000 + 512 + 4);
  g.drop(hidden);
  g.backward(loss, 0);
  // backward: argsort (V int64) then int32 order, de like e; the frozen weight gets no dc.
  // Peak: saved (lse 512, valids 1024, logit_avg 4000) + seed 4 + loss 4 + 8000 + 4000 + 2048
  CHECK(graph_peak(g, 4, 32) == 2048 + 16000 + 512 + 1024 + 4000 + 4 + 4 + 8000 + 4000);
}

TEST_CASE("torchtune's chunked loss keeps fp32 log-probs of every chunk, never the whole bf16 logits") {
  Graph g;
  Ops ops(g, OpsBehaviour{true, false, false, true});
  const std::int64_t V = 800, H = 8;
  const int hidden = g.make(Poly::mono(kBS, H), DT::kBF16, Cat::kActivations, true);
  const int weight = g.param(Poly::constant(V * H), DT::kBF16, Cat::kWeights, false);
  const LossHead h{hidden, weight, Poly::mono(kBS, 1), Poly::mono(kB, 1), V, H, true};
  const int loss = chunked_linear_cross_entropy(g, ops, h, 8);
  // After the forward: 8 chunks of fp32 log-probs = BT x V x 4 saved, nothing vocabulary-sized else.
  const std::int64_t bt = 2 * 64;
  Poly logits_cat = g.live()[static_cast<int>(Cat::kLogits)];
  CHECK(logits_cat.eval(2, 64) >= bt * V * 4);
  CHECK(logits_cat.eval(2, 64) < bt * V * 4 + bt * V / 8);  // plus per-chunk indices and copies
  g.drop(hidden);
  g.drop(loss);
}

// TRL's Liger DPO loss (docs/formulas.md#liger-dpo-grpo). bf16, no autocast, V = 64, H = 16; b = 2
// pairs of s = 9 tokens: rows = 2b(s - 1) = 32, a chunk is one pair, 2(s - 1) = 16 rows of
// 16 x 64 = 1024 logits.
TEST_CASE("Liger DPO: one pair's logits at a time, the input gradient kept chunk by chunk, V x H twice") {
  const std::int64_t V = 64, H = 16;
  for (const bool ref : {true, false}) {
    INFO("reference " << ref);
    Graph g;
    Ops ops(g, OpsBehaviour{true, false, false, true});
    const Poly rows = Poly::mono(kBS, 2) - Poly::mono(kB, 2);
    ChunkedLossHead h;
    h.hidden = g.make(rows * H, DT::kBF16, Cat::kActivations, true);
    h.weight = g.param(Poly::constant(V * H), DT::kBF16, Cat::kWeights, true);
    if (ref) {  // the reference's hidden states and its frozen head (alive, not an input of the loss)
      h.ref_hidden = g.make(rows * H, DT::kBF16, Cat::kActivations);
      g.param(Poly::constant(V * H), DT::kBF16, Cat::kReference, false);
    }
    h.rows = rows;
    h.chunk_rows = Poly::mono(kS, 2) - Poly::constant(2);
    h.vocab = V;
    h.hidden_size = H;
    const int loss = liger_fused_linear_preference(g, ops, h);
    // Inputs: hidden 32 x 16 x 2 = 1024 and weight 64 x 16 x 2 = 2048 (and the reference's the
    // same). Through the chunk: grad_weight 2048, the other chunk's input gradient 16 x 16 x 2 =
    // 512, the cat copies of the pair (512, and 512 for the reference) and its labels 16 x 8.
    const std::int64_t inputs = ref ? 6144 : 3072;
    const std::int64_t resident = inputs + 2048 + 512 + 512 + (ref ? 512 : 0) + 128;
    // Logit buffers (1024 elements): with a reference, the policy's fp32 log-probs (4096) beside
    // the reference's bf16 logits (2048) and fp32 log-probs (4096); without, the log-probs and
    // their fp32 gradient (4096 + 4096).
    CHECK(graph_peak(g, 2, 9) == resident + (ref ? 10240 : 8192));
    // After the forward: the inputs, the saved grad_input (1024) and grad_weight (2048), the loss.
    CHECK(g.live_total().eval(2, 9) == inputs + 1024 + 2048 + 4);
    g.backward(loss, 0);
    // The scaled copies (1024 + 2048) come after the forward's peak; the policy head gets its
    // gradient.
    CHECK(graph_peak(g, 2, 9) == resident + (ref ? 10240 : 8192));
    REQUIRE(g.at(h.weight).grad >= 0);
    CHECK(g.at(g.at(h.weight).grad).numel.eval(2, 9) == V * H);
  }
}

// TRL's Liger GRPO loss on Liger >= 0.8: no (C x V) logits, but every sequence's backward makes an
// fp32 V x H weight gradient and its bf16 copy beside the persistent one. V = 64, H = 16, P = 4;
// b = 2 sequences of s = 12: C = 8, rows 16. A tile is 2048 x 64 elements.
TEST_CASE("Liger GRPO (>= 0.8): vocabulary tiles, an fp32 V x H gradient per sequence") {
  const std::int64_t V = 64, H = 16;
  Graph g;
  Ops ops(g, OpsBehaviour{true, false, false, true});
  ChunkedLossHead h;
  h.rows = Poly::mono(kBS, 1) - Poly::mono(kB, 4);
  h.chunk_rows = Poly::mono(kS, 1) - Poly::constant(4);
  h.hidden = g.make(h.rows * H, DT::kBF16, Cat::kActivations, true);
  h.weight = g.param(Poly::constant(V * H), DT::kBF16, Cat::kWeights, false);  // a frozen head (LoRA)
  h.vocab = V;
  h.hidden_size = H;
  const int loss = liger_fused_linear_grpo(g, ops, h);
  // Inputs 512 + 2048; grad_weight 2048 (allocated for a frozen head too); the other sequence's
  // input gradient 8 x 16 x 2 = 256; log_z and log-probs 8 x 4 each; the backward's fp32 zeros for
  // the sequence (8 x 16 x 4 = 512) and the weight (64 x 16 x 4 = 4096); its tiles: logits bf16
  // and three fp32 (131072 x (2 + 12)), the weight tile and its product in fp32 (64 x 16 x 4 x 2)
  // and two fp32 (2048 x 16) row blocks.
  const std::int64_t resident = 512 + 2048 + 2048 + 256 + 64 + 512 + 4096;
  const std::int64_t tiles = 131072 * 14 + 4096 * 2 + 131072 * 2;
  CHECK(graph_peak(g, 2, 12) == resident + tiles);
  CHECK(g.live_total().eval(2, 12) == 512 + 2048 + 512 + 2048 + 4);
  g.backward(loss, 0);
  CHECK(g.at(h.weight).grad < 0);  // computed, then dropped: the head is frozen
}

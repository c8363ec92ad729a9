// Loss kernels that never hold the full logits, and Liger's kernels that replace eager modules
// (docs/formulas.md#fused-cross-entropy). Each function allocates, saves and frees what the
// named upstream code does, on a sim::Graph, like the ops in ops.hpp.
#pragma once

#include <cstdint>
#include <utility>

#include "core/sim/graph.hpp"
#include "core/sim/ops.hpp"

namespace memplan::sim {

// The language-model loss on `hidden` (rows x H, the final norm's output) and the output
// projection `weight` (V x H): the caller keeps its references; the result is the scalar loss.
struct LossHead {
  int hidden = -1;
  int weight = -1;
  Poly rows;                 // tokens the loss covers (b x s for SFT)
  Poly per_seq;              // one token per sequence (b): label padding and uneven chunks
  std::int64_t vocab = 0;
  std::int64_t hidden_size = 0;
  bool cuda = true;
};

// Liger's chunk rule (fused_linear_cross_entropy.py): inc = ceil(V / H); chunk rows =
// min(next_power_of_2(ceil(BT / inc)), BT). Returned for the docs and tests: the simulator uses
// the bound below because next_power_of_2 is not a polynomial in (b, s).
std::int64_t liger_chunk_rows(std::int64_t bt, std::int64_t vocab, std::int64_t hidden);
// Upper bound of chunk rows x V as a polynomial: rows x ceil(2V / inc) + 2V (exact bound:
// next_power_of_2(n) < 2n, and ceil adds at most one row per factor).
Poly liger_chunk_numel_bound(const Poly& rows, std::int64_t vocab, std::int64_t hidden);

// LigerForCausalLMLoss -> LigerFusedLinearCrossEntropyFunction: gradients are computed in the
// forward, chunk by chunk, and saved (grad_input, grad_weight) for backward.
int liger_fused_linear_cross_entropy(Graph& g, Ops& ops, const LossHead& h);
// torchtune LinearCrossEntropyLoss (num_output_chunks = 8), not compiled.
int chunked_linear_cross_entropy(Graph& g, Ops& ops, const LossHead& h, int chunks = 8);
// Apple's cut cross-entropy (linear_cross_entropy, impl "cce"): LSE forward, blockwise backward.
int cut_cross_entropy(Graph& g, Ops& ops, const LossHead& h);

// TRL's Liger losses for preference and RL training (docs/formulas.md#liger-dpo-grpo). Both
// compute the gradients of every chunk inside their forward, keep the input's gradient chunk by
// chunk, and save (grad_input, grad_weight) for a backward that only scales them: into new
// tensors, since TRL's trainers divide the loss by the accumulation steps (grad_output != 1).
struct ChunkedLossHead {
  int hidden = -1;      // (rows x H): the policy's hidden states (the final norm's output)
  int weight = -1;      // lm_head.weight (V x H)
  int ref_hidden = -1;  // DPO: the reference model's hidden states (no grad), or -1
  Poly rows;            // rows the loss covers
  Poly chunk_rows;      // rows of one chunk (chunk_size 1: a chosen/rejected pair; one sequence)
  std::int64_t vocab = 0;
  std::int64_t hidden_size = 0;
};
// LigerFusedLinearDPOLoss (Liger-Kernel chunked_loss/fused_linear_preference.py, >= 0.5.10), as
// TRL's DPOTrainer._compute_loss_liger calls it (TRL >= 0.29).
int liger_fused_linear_preference(Graph& g, Ops& ops, const ChunkedLossHead& h);
// LigerFusedLinearGRPOLoss on LigerFusedLinearPPOBase (chunked_loss/fused_linear_ppo.py,
// >= 0.8: the vocabulary streamed in tiles), as TRL's GRPOTrainer.compute_liger_loss calls it.
int liger_fused_linear_grpo(Graph& g, Ops& ops, const ChunkedLossHead& h);
// Liger >= 0.8's selective log-prob tiles: up to 2048 rows by 4096 vocabulary entries.
inline constexpr std::int64_t kLigerTileRows = 2048;
inline constexpr std::int64_t kLigerTileVocab = 4096;

// Liger RMSNorm (ops/rms_norm.py, in_place=True): y and an fp32 rstd per row; saves x, w, rstd;
// backward writes dx into dy and reduces an (sm_count x H) fp32 partial dW.
int liger_rms_norm(Graph& g, Ops& ops, int x, int w, const Poly& numel, const Poly& rows);
// Liger SwiGLU (ops/swiglu.py): c = silu(a) * b, saves a and b; backward writes da, db into them.
int liger_swiglu(Graph& g, Ops& ops, int gate, int up);
// Liger RoPE (ops/rope.py): rotates q and k in place, saves cos and sin; backward in place too.
// Returns the rotated (q, k): views of the inputs.
std::pair<int, int> liger_rope(Graph& g, int q, int k);

// Streaming multiprocessors whose fp32 partial dW Liger's RMSNorm backward allocates: an H100
// SXM has 132 (torch.cuda.get_device_properties().multi_processor_count).
inline constexpr std::int64_t kLigerSmCount = 132;

}  // namespace memplan::sim

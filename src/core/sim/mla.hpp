// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2) as ops on a sim::Graph
// (docs/formulas.md#mla): what DeepseekV3Attention.forward allocates, saves and frees.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "core/sim/graph.hpp"
#include "core/sim/ops.hpp"
#include "memplan/model.hpp"
#include "memplan/training.hpp"

namespace memplan::sim {

// What the attention needs from the step that runs it: its Linear (with LoRA / bitsandbytes),
// its RMSNorm, and the rotary tables, mask and batch shape. Callbacks so the step's own rules
// (program.cpp) apply unchanged.
struct MlaStep {
  Graph& g;
  Ops& ops;
  const ModelSpec& m;
  Poly tokens;         // rows of the layer input (b x s, times the DPO/GRPO multiplier)
  Poly heads_rows;     // tokens x num_heads: one fp32 logsumexp per row and head
  Poly scores;         // (b, heads, s, s) elements of the eager score matrix
  AttnImpl attn = AttnImpl::kEager;
  bool one_sequence = false;  // b == 1: matmul folds the value view into bmm without a copy
  int mask = -1;       // additive causal mask (eager)
  int cos = -1;        // rotary tables (no grad)
  std::function<int(int x, const std::string& module, Poly out_numel)> linear;
  std::function<int(int x, int weight, std::int64_t width, Poly numel)> rms_norm;
  std::function<int(int x, Poly numel)> rotate_half_rope;  // x * cos + rotate_half(x) * sin
  Poly pair_scores;    // (b, s, s): DeepSeek-V3.2's index scores and top-k mask
};

// The MLA self-attention on `x` (the input layernorm's output). q_norm / kv_norm are the
// q_a_layernorm and kv_a_layernorm weights (q_norm -1 without q LoRA). Returns the o_proj
// output and the eager attention probabilities (-1 for SDPA / flash-attention), like
// Step::attention.
std::pair<int, int> mla_attention(MlaStep& st, int x, int q_norm, int kv_norm);

}  // namespace memplan::sim

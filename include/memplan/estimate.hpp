// Estimate: the plain result of the engine for one configuration. Renderers (text, JSON,
// markdown) turn it into output; nothing here prints.
//
// Invariants (checked by tests through check_invariants): the components sum exactly to peak;
// reserved >= peak; total == reserved + every overhead entry.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memplan/bytes.hpp"
#include "memplan/model.hpp"
#include "memplan/result.hpp"

namespace memplan {

enum class Phase {
  kForward,           // policy forward (and loss)
  kBackward,
  kOptimizerStep,
  kReferenceForward,  // DPO/GRPO reference model log-probs (no grad)
  kGeneration,        // GRPO completions (generate / vLLM)
};

// Whether each GPU holds the whole of a component or a 1/N shard of it (multi-GPU).
enum class Placement { kReplicated, kSharded, kOffloaded, kPerDevice };

struct Component {
  std::string name;    // stable key: "weights", "gradients", "optimizer_states", "activations"...
  Bytes bytes;
  Placement placement = Placement::kPerDevice;
  std::string detail;  // one line a person reads: "bf16, 8.03B params"
};

struct PhasePeak {
  Phase phase = Phase::kForward;
  Bytes peak;  // the highest live tensor bytes reached during that phase
};

struct ParamSummary {
  std::int64_t total = 0;      // all parameters of the policy
  std::int64_t trainable = 0;  // requires_grad (full FT: all; LoRA: adapters + modules_to_save)
  ParameterCounts counts;
};

struct Estimate {
  Bytes peak;                          // live tensor bytes at the peak: torch.cuda.max_memory_allocated
  Phase peak_phase = Phase::kForward;  // the phase in which the peak happens
  std::vector<Component> components;   // what is live at the peak; sums exactly to peak
  std::vector<PhasePeak> phases;       // the peak of every phase that runs
  Bytes reserved;                      // caching-allocator reserved at the peak: max_memory_reserved
  std::vector<Component> overhead;     // outside tensor bytes: CUDA context, cuBLAS workspace...
  Bytes total;                         // what nvidia-smi would show for the process
  ParamSummary params;
  std::vector<std::string> assumptions;  // stated in output: "model shape assumed: ..."
  std::vector<std::string> warnings;
  // Pipeline parallelism: the stage whose GPU is the worst (the numbers above are its), of how many.
  int pipeline_rank = -1;
  int pipeline_ranks = 0;
};

std::string to_string(Phase p);
std::string to_string(Placement p);

// Components sum to peak, reserved >= peak, total consistent, no negative entry, peak_phase
// names a phase whose peak is the overall peak. Returns the first violation as an Error.
Status check_invariants(const Estimate& e);

}  // namespace memplan

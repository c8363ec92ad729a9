// Optimizer state and optimizer.step() temporaries for each HF `optim` choice
// (docs/formulas.md#optimizer-states and #optimizer-step-temporaries).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memplan/result.hpp"
#include "memplan/training.hpp"

namespace memplan {

// One trainable parameter tensor as the optimizer sees it.
struct OptParam {
  std::int64_t numel = 0;
  int elem_bytes = 4;              // the parameter's (and its gradient's) element size
  std::int64_t rows = 0, cols = 0; // a 2-D matrix shape (Adafactor factors it), 0 for vectors
  int count = 1;                   // identical tensors (routed experts, repeated layers)
  // How many of the `count` are one Parameter: the experts of one layer held as a 3-D tensor
  // (fused expert Parameters), which the single-tensor loop steps as one tensor.
  int fused = 1;
};

struct OptimizerFootprint {
  std::int64_t state_bytes = 0;    // persistent state after the first step
  std::int64_t temp_bytes = 0;     // peak extra bytes inside step()
  bool paged = false;              // states live in CUDA unified memory (bitsandbytes paged_*)
  // Paged optimizers: the state buffers of tensors with >= 1e5 values are cudaMallocManaged
  // pages outside PyTorch's allocator (not in max_memory_allocated, evictable to the CPU under
  // pressure); state_bytes then holds only what the allocator sees (docs/formulas.md#optimizer-states).
  std::int64_t paged_bytes = 0;
  std::string implementation;      // "single-tensor (foreach=False)", "foreach", "fused", "bitsandbytes 8-bit"
};

// Parses --optim-args for the chosen optimizer: unknown keys are errors with a suggestion.
Status validate_optim_args(const OptimizerConfig& o);

OptimizerFootprint optimizer_footprint(const OptimizerConfig& o, Device device, const std::vector<OptParam>& params);

}  // namespace memplan

// Measured training steps (tools/measure/measure.py output) as engine inputs, for the accuracy
// report and its test.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "memplan/model.hpp"
#include "memplan/result.hpp"
#include "memplan/training.hpp"

namespace memplan::io {

struct MeasuredCase {
  std::string id;
  ModelSpec model;
  TrainingConfig config;
  std::int64_t peak_bytes = 0;      // max_memory_allocated
  std::int64_t reserved_bytes = 0;  // max_memory_reserved over the measured step (0: not measured)
  std::string peak_phase;
  std::map<std::string, std::int64_t> phase_peaks;
  // Published cases only: why memplan is known to miss this case (docs/accuracy.md#published);
  // memplan-accuracy reports it but keeps it out of the thresholds.
  std::string known_gap;
  // Published cases: the command line a user types for the run ("flags") and the library versions
  // it ran with (--stack); memplan-accuracy evaluates those, so every published case reaches the
  // engine through the door a user has (docs/accuracy.md#published).
  std::vector<std::string> flags;
  std::string stack;
  // A published row that reports only torch.cuda.max_memory_reserved (its file's "reserved_only"):
  // reserved_bytes holds that figure and memplan-accuracy compares it with the replayed allocator.
  bool reserved_only = false;
};

// Reads a JSON list of cases; errors name the file and the case.
Result<std::vector<MeasuredCase>> load_measurements(const std::string& path);

// A capacity experiment (tests/data/capacity/, tools/measure/cuda_capacity.py): one
// configuration run at growing micro-batches on a real GPU until one ran out of memory.
struct CapacityCase {
  std::string id;
  ModelSpec model;
  TrainingConfig config;          // micro_batch is 1; the experiment varies it
  std::string allocator_conf;     // PYTORCH_CUDA_ALLOC_CONF of the run ("" = PyTorch's default)
  std::int64_t largest_ran = 0;   // 0: none ran
  std::int64_t smallest_oom = 0;  // 0: none ran out of memory
};
Result<std::vector<CapacityCase>> load_capacity(const std::string& path);

}  // namespace memplan::io

// Flags shared by `memplan plan` and `memplan sweep`: the memory budget (GPU memory, safety
// margin, headroom) and the global batch to keep. resolve_budget() is the single place the GPU's
// capacity comes from, so --gpu NAME and --auto plug in there.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "io/inputs.hpp"
#include "memplan/gpu.hpp"
#include "memplan/result.hpp"

namespace CLI {
class App;
}

namespace memplan::cli {

struct BudgetFlags {
  std::string gpu_memory;     // --gpu-memory SIZE
  std::string safety_margin;  // --safety-margin SIZE|PCT (default: 1 GiB + 5% of GPU memory)
  std::string headroom;       // --headroom SIZE (default 0)
  std::int64_t target_global_batch = 0;  // --target-global-batch N

  CLI::App* app = nullptr;
};

void add_budget_flags(CLI::App& app, BudgetFlags& flags);

// Capacity from the flags (see the integration point in plan_flags.cpp), then the margin and
// headroom. Errors name the flag and quote its value.
Result<Budget> resolve_budget(const BudgetFlags& flags);

// --target-global-batch when given; else the config's current global batch (micro-batch x
// grad-accum x data-parallel) when --batch or --grad-accum was set (on the command line or in a
// config file); else none: plan then maximizes the micro-batch. docs/plan.md#global-batch
std::optional<std::int64_t> resolve_target_global_batch(const BudgetFlags& flags, const io::ResolvedInputs& in);

}  // namespace memplan::cli

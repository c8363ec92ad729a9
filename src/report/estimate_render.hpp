// Renders one estimate (the `memplan estimate` output) as text, JSON or markdown.
#pragma once

#include <optional>
#include <string>

#include "io/config/config_loader.hpp"
#include "io/inputs.hpp"
#include "memplan/estimate.hpp"
#include "memplan/gpu.hpp"
#include "report/format.hpp"

namespace memplan::report {

// `memplan estimate --gpu NAME` (or --gpu-memory, --auto): the estimate against that GPU's
// budget, compared as plan and check compare it (the peak of live tensors against capacity minus
// safety margin and headroom).
struct EstimateFit {
  std::string gpu;  // the GPU as plan describes it
  Budget budget;
  bool fits(const Estimate& e) const { return e.peak <= budget.budget(); }
};

std::string render_estimate(const io::ResolvedInputs& in, const Estimate& e, Format f,
                            const std::optional<EstimateFit>& fit = std::nullopt);

// The one-line summary of inputs: "llama-3.1-8b · sft · batch 4 × 2048 · bf16 autocast · adamw_torch".
std::string describe_inputs(const io::ResolvedInputs& in);

// The breakdown table with phase peaks, parameter counts, assumptions and the engine's warnings.
std::string breakdown_text(const Estimate& e);

// `--show-config`: every input with its value and where it came from (file:line and key, flag,
// default, derived), after the dialect and files a config was read from (`loaded` may be null).
std::string render_sources(const io::ResolvedInputs& in, const io::LoadedConfig* loaded, Format f);

// Component names as people read them ("optimizer_states" -> "optimizer states").
std::string component_label(const std::string& name);

}  // namespace memplan::report

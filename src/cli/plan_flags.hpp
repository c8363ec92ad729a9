// Flags shared by `memplan plan` and `memplan sweep`: the memory budget (GPU memory, safety
// margin, headroom) and the global batch to keep. resolve_budget() is the single place the GPU's
// capacity comes from, so --gpu NAME and --auto plug in there.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>

#include "io/edit/apply.hpp"
#include "io/config/config_loader.hpp"
#include "io/inputs.hpp"
#include "memplan/gpu.hpp"
#include "memplan/plan.hpp"
#include "memplan/result.hpp"

namespace CLI {
class App;
}

namespace memplan::cli {

struct BudgetFlags {
  std::string gpu;            // --gpu NAME (a profile: memplan gpus)
  bool auto_detect = false;   // --auto: detect the GPU (NVML, nvidia-smi, rocm-smi, /proc/meminfo)
  std::string gpu_memory;     // --gpu-memory SIZE
  std::string safety_margin;  // --safety-margin SIZE|PCT (default: 1 GiB + 5% of GPU memory)
  std::string headroom;       // --headroom SIZE (default 0)
  std::string target_global_batch;  // --target-global-batch N|keep|free

  CLI::App* app = nullptr;
};

// --gpu, --auto, --gpu-memory, --safety-margin, --headroom (memplan check).
void add_gpu_flags(CLI::App& app, BudgetFlags& flags);
// The GPU flags and --target-global-batch (plan, sweep, auto).
void add_budget_flags(CLI::App& app, BudgetFlags& flags);

// The GPU a budget is for: a profile (--gpu), a bare size (--gpu-memory) or what detection
// finds (--auto). `description` is one line for the output ("NVIDIA H100 80GB HBM3, detected
// by nvidia-smi: 79.10 GiB free of 79.65 GiB").
struct GpuTarget {
  Bytes capacity;
  std::optional<GpuProfile> profile;
  std::optional<Budget> detected;  // detection's budget shape (free memory, unified reserve)
  std::string description;
};

// --gpu-memory: a bare number is the card's label ("24": a 24 GB card, which nvidia-smi shows
// as 24564 MiB); with a unit it is exact, parse_size ("24GB", "24GiB", "24564MiB").
Result<Bytes> parse_gpu_memory(const std::string& text);

// What a card labelled `label_gb` GB holds as nvidia-smi shows it: the smallest memory.total of
// the profiled cards within 1% below label_gb GiB, and which cards those are; label_gb GiB when
// none is.
struct CardLabel {
  Bytes memory;
  std::vector<std::string> cards;
};
CardLabel card_label_memory(double label_gb);

// --headroom: a size with a unit or a percentage of `capacity`; a bare number other than 0 is an
// error that suggests both spellings.
Result<Bytes> parse_headroom(const std::string& text, Bytes capacity);

// The default safety margin for the allocator setting the run will have: PYTORCH_CUDA_ALLOC_CONF
// from a config file (`in`), else from this process's environment (read here, in the CLI layer,
// and passed to the engine's safety_margin_for as data). `note` says which and why, for the output.
struct AllocatorMargin {
  AllocatorConf conf;
  std::string source;  // "train.yaml:4", "the environment", or "" when unset
  Bytes margin;
  std::string note;
};
Result<AllocatorMargin> allocator_margin(Bytes capacity, const io::ResolvedInputs* in);

GpuTarget gpu_target(const GpuProfile& profile);
GpuTarget gpu_target(Bytes capacity, const std::string& source);  // source: "--gpu-memory", "x.yaml:1"

// --gpu NAME, else --gpu-memory SIZE, else detection when --auto (or `detect_by_default`).
// nullopt when nothing names a GPU and detection is off.
Result<std::optional<GpuTarget>> resolve_gpu(const BudgetFlags& flags, bool detect_by_default = false);

// The budget on `gpu` for `config`: capacity minus the safety margin (--safety-margin, default
// 1 GiB + 5%) and headroom (--headroom; default: a unified GPU's system reserve, memory other
// processes hold now when detected, and vLLM's colocated share for GRPO). Appends notes for the
// output (bf16 on a GPU without it, vLLM's reservation).
// `inputs` (when given) receives the notes and warnings.
Result<Budget> budget_for(const GpuTarget& gpu, const BudgetFlags& flags, const TrainingConfig& config,
                          io::ResolvedInputs* inputs = nullptr);

// resolve_gpu + budget_for; an error naming the flags when no GPU is given.
Result<Budget> resolve_budget(const BudgetFlags& flags, io::ResolvedInputs& inputs);

// --target-global-batch when given; else the config's current global batch (micro-batch x
// grad-accum x data-parallel) when --batch or --grad-accum was set (on the command line or in a
// config file); else none: plan then maximizes the micro-batch. docs/plan.md#global-batch
// `--target-global-batch keep` is that default said aloud; `free` drops the target.
struct TargetGlobalBatch {
  std::optional<std::int64_t> value;
  std::string source;  // "--target-global-batch 256", "the config's 4 x 8 x 1 GPU"; "" without a target
};
Result<TargetGlobalBatch> resolve_target_global_batch(const BudgetFlags& flags, const io::ResolvedInputs& in);

// The batch search's own flags (memplan plan and memplan --auto).
struct SearchFlags {
  std::string tolerance = "0%";                                // --global-batch-tolerance
  std::int64_t max_micro_batch = PlanRequest{}.max_micro_batch;  // --max-micro-batch
  bool apply = false;                                          // --apply
  bool dry_run = false;                                        // --dry-run
};

void add_search_flags(CLI::App& app, SearchFlags& flags);

// The request for plan(): the budget, the global batch to keep and the search limits.
Result<PlanRequest> plan_request(const Budget& budget, const BudgetFlags& budget_flags, const SearchFlags& search,
                                 const io::ResolvedInputs& in);

// --apply / --dry-run on a config memplan read only in part (a file that decides memory and was
// not followed): the refusal, given before anything is computed or printed.
Status refuse_partial_config(const SearchFlags& flags, const std::optional<io::LoadedConfig>& loaded);

// --apply / --dry-run: writes `edits` into the --config files the inputs came from (a diff for
// --dry-run) and returns `exit_code`. The file report goes to `report` (stderr when stdout
// carries JSON).
Result<int> write_back(std::ostream& report, const std::optional<io::LoadedConfig>& loaded, const io::Edits& edits,
                       bool dry_run, bool fits, int exit_code);

// --apply: the locks on the config files, taken before they are read and held until the write is
// done, so that two memplan runs on one file take turns (docs/configs.md#apply-guarantees).
// Nothing without --apply.
Result<std::vector<std::shared_ptr<io::FileLock>>> lock_for_apply(const SearchFlags& flags,
                                                                   const std::vector<std::string>& files);

}  // namespace memplan::cli

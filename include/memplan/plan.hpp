// Planning on top of the engine: the largest micro-batch (or the longest sequence) whose predicted
// peak fits a memory budget, the gradient accumulation that keeps a global batch, utilization
// tiers, a batch x sequence-length sweep, and what to change when nothing fits.
//
// Pure functions: no I/O, no globals. The only engine call in every search and sweep loop is
// Estimator::peak_bytes. The rules (margin, tiers, rounding) are derived in docs/plan.md.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memplan/bytes.hpp"
#include "memplan/engine.hpp"
#include "memplan/gpu.hpp"
#include "memplan/model.hpp"
#include "memplan/result.hpp"
#include "memplan/training.hpp"

namespace memplan {

// ---------------------------------------------------------------------------------------------
// Budget

// 1 GiB + 10% of capacity. The engine predicts live tensor bytes (max_memory_allocated); the
// margin covers what that figure leaves out: the CUDA context (768 MiB measured on an H100) and
// caching-allocator fragmentation, which on a real H100 made steps whose peak left up to 9.5% of
// the GPU free fail to place their largest tensor (tests/data/capacity/h100.json).
// docs/plan.md#safety-margin
Bytes default_safety_margin(Bytes capacity);

// AllocatorConf (PYTORCH_CUDA_ALLOC_CONF) is in training.hpp: the estimate replays it.


// Errors quote the bad pair: "PYTORCH_CUDA_ALLOC_CONF: expandable_segments must be True or
// False, got 'yes'".
Result<AllocatorConf> parse_allocator_conf(std::string_view text);

// The margin a plan keeps for this allocator setting (docs/plan.md#safety-margin):
// expandable_segments:True: 1 GiB + 2% (freed pages are unmapped and re-mapped into one growing
// segment, so a large tensor no longer needs one free contiguous block; measured on an H100:
// peaks of 98% of the allocator's memory ran); otherwise default_safety_margin(capacity).
// max_split_size_mb and garbage_collection_threshold keep the default: they limit, not remove,
// fragmentation, and no measurement supports a smaller margin with them.
Bytes safety_margin_for(Bytes capacity, const AllocatorConf& conf);

// "2GiB", "1.5GB" (a size with a unit, see parse_size) or "10%" (of capacity, 0 <= p < 100).
// A bare number is an error: "80" could be 80% or 80 GB, so it suggests both spellings.
Result<Bytes> parse_safety_margin(std::string_view text, Bytes capacity);

// capacity - safety_margin (default_safety_margin when absent) - headroom. Errors when the
// capacity is not positive or nothing is left.
Result<Budget> make_budget(Bytes capacity, std::optional<Bytes> safety_margin, Bytes headroom);

// ---------------------------------------------------------------------------------------------
// The search: the largest x in [1, cap] whose peak fits a budget

// peak(x) for x >= 1. The batch and sequence searches wrap Estimator::peak_bytes; a stand-in
// function lets tests drive the non-monotone fallback.
using PeakFn = std::function<Result<Bytes>(std::int64_t)>;

// Two probes with x1 < x2 but peak(x1) > peak(x2).
struct MonotoneViolation {
  std::int64_t lower_x = 0;
  Bytes lower_peak;
  std::int64_t higher_x = 0;
  Bytes higher_peak;
};

struct FitSearch {
  std::int64_t largest = 0;        // the largest fitting x; 0 when x = 1 does not fit
  Bytes peak;                      // peak(largest), or peak(1) when nothing fits
  std::optional<Bytes> next_peak;  // peak(largest + 1); absent at the cap or when it overflows
  bool hit_cap = false;            // cap itself fits: the cap, not the budget, ended the search
  int evaluations = 0;             // calls to peak()
  // Micro-batch searches: the gradient accumulation the peaks were taken at (later micro-batches
  // hold earlier gradients; a pipeline holds several micro-batches).
  std::int64_t grad_accum = 1;
  // Set when two probes contradicted monotonicity; the answer then comes from a linear scan
  // (the largest x such that every x' <= x fits).
  std::optional<MonotoneViolation> violation;
};

// Exponential search (1, 2, 4, ...) then binary search between the last fit and the first
// miss, checking every probe against every earlier one for monotonicity. Overflow errors from
// peak() count as "does not fit"; any other error is returned. cap >= 1.
Result<FitSearch> find_largest_fitting(const PeakFn& peak, Bytes budget, std::int64_t cap);

// ---------------------------------------------------------------------------------------------
// Global batch = micro_batch x grad_accum x data-parallel size

struct GlobalBatch {
  std::int64_t micro_batch = 1;
  std::int64_t grad_accum = 1;
  int data_parallel = 1;
  std::int64_t global_batch = 1;       // micro_batch * grad_accum * data_parallel
  std::optional<std::int64_t> target;  // absent: no target (grad_accum kept from the config)

  std::int64_t diff() const { return target ? global_batch - *target : 0; }  // achieved - target
};

// micro_batch x grad_accum x config.parallel.data_parallel_size().
std::int64_t current_global_batch(const TrainingConfig& c);

// The accumulation for a fixed micro-batch that brings the global batch nearest the target
// (ties: the smaller one, never exceeding the target without need), at least 1.
std::int64_t best_grad_accum(std::int64_t micro_batch, std::int64_t target, int data_parallel);

// The rule (docs/plan.md#global-batch): among micro-batches m in [1, max_micro_batch], each with
// best_grad_accum(m), the largest m that reaches the target exactly; when none does, with a
// tolerance > 0 the largest m whose global batch is within `tolerance` (a fraction of the
// target), else the m with the smallest error (ties: larger m). max_micro_batch >= 1.
GlobalBatch match_global_batch(std::int64_t max_micro_batch, std::int64_t target, int data_parallel,
                               double tolerance = 0);

// TRL GRPOTrainer's batch arithmetic (trl/trainer/grpo_config.py __post_init__, TRL 1.9): with
// steps_per_generation and generation_batch_size unset, steps_per_generation =
// gradient_accumulation_steps and generation_batch_size = per_device_train_batch_size x
// num_processes x steps_per_generation, which must be divisible by num_generations.
// docs/plan.md#grpo
struct GenerationBatch {
  int num_generations = 8;
  int processes = 1;                        // accelerate's num_processes: every GPU
  std::int64_t steps_per_generation = 1;    // = grad_accum
  std::int64_t generation_batch = 1;        // completions generated at once, all GPUs
  std::int64_t prompts = 0;                 // generation_batch / num_generations (0: not whole)
  bool valid() const { return generation_batch % num_generations == 0; }
};

GenerationBatch generation_batch(const TrainingConfig& c, std::int64_t micro_batch, std::int64_t grad_accum);

// Why the plan chose its micro-batch (docs/plan.md#global-batch).
enum class BatchChoice {
  kLargest,          // the largest micro-batch that fits (no target; the config's grad_accum)
  kExact,            // the largest micro-batch that reaches the target global batch exactly
  kWithinTolerance,  // --global-batch-tolerance let a larger micro-batch miss the target
  kNearest,          // no fitting micro-batch reaches the target: the nearest global batch
  kGrpoDivisible,    // GRPO: the largest whose generation batch divides into num_generations groups
  kNone,             // nothing fits
};

// ---------------------------------------------------------------------------------------------
// Tiers (seed 001's safe / medium / aggressive): docs/plan.md#tiers
//
// Defined on what the plan can actually spend: the room between the memory that does not depend
// on the micro-batch (`fixed`: weights, optimizer states, gradients, workspaces) and the budget.
// A tier's limit is fixed + room_fraction x (budget - fixed).

struct TierSpec {
  std::string name;
  int percent = 0;  // of the room above the fixed memory
};

// safe 50%, balanced 75%, aggressive 100% (= the budget: the recommendation).
std::vector<TierSpec> default_tiers();

struct Tier {
  std::string name;
  double room_fraction = 0;  // percent / 100
  Bytes limit;               // fixed + room_fraction x (budget - fixed)
  bool fits = false;         // micro-batch 1 fits the limit
  GlobalBatch batch;         // micro-batch 1 when nothing fits
  Bytes peak;                // peak at batch.micro_batch
  double utilization = 0;    // peak / capacity
};

// ---------------------------------------------------------------------------------------------
// What to change when nothing fits

enum class ChangeKind {
  kGradientCheckpointing,  // --gradient-checkpointing
  kOptimizer8bit,          // --optim adamw_8bit
  kLora,                   // --use-peft --lora-target-modules all-linear --lora-r 16
  kQlora,                  // LoRA on a 4-bit base (--load-in-4bit)
  kShorterSeqLen,          // the longest sequence that fits (batch plans only)
  kShorterCompletion,      // GRPO: the longest --max-completion-length that fits
  kVllmServer,             // GRPO: generate on another GPU (--use-vllm --vllm-mode server)
  kZero3,                  // ZeRO-3 / FSDP full_shard over the fewest GPUs that fit (at most 64)
  kCpuOffloadOptimizer,    // optimizer states in CPU memory (ZeRO-Offload); never on unified memory
  kMoreGpus,               // the current sharding over more GPUs
};

struct Suggestion {
  ChangeKind kind = ChangeKind::kGradientCheckpointing;
  std::string description;         // "enable gradient checkpointing"
  std::vector<std::string> flags;  // what to add to the command line: {"--gradient-checkpointing"}
  TrainingConfig config;           // the whole config after the change
  Bytes peak;                      // predicted peak after the change, at the evaluated point
  Bytes saved;                     // the original peak at that point minus `peak` (> 0)
  bool fits = false;
  // After the change: the largest micro-batch (plan) or the longest sequence (solve seq-len)
  // that fits; 0 when it still does not fit.
  std::int64_t best = 0;
};

// Several changes applied together, greedily in ranked order, when no single one fits.
struct Combination {
  std::vector<ChangeKind> kinds;
  std::vector<std::string> flags;
  TrainingConfig config;
  Bytes peak;
  bool fits = false;
  std::int64_t best = 0;
};

// ---------------------------------------------------------------------------------------------
// memplan plan: the largest micro-batch

struct PlanRequest {
  Budget budget;
  // The global batch to keep. Absent: no target; the recommendation is the largest micro-batch
  // with the config's grad_accum. The CLI passes the config's current global batch when the user
  // set --batch or --grad-accum, or --target-global-batch.
  std::optional<std::int64_t> target_global_batch;
  // How far (a fraction of the target) the global batch may miss the target to keep a larger
  // micro-batch. 0 (the default): the target exactly whenever a fitting micro-batch divides it,
  // since learning rate and schedule are tuned for a global batch; 0.05 accepts 252 for 256.
  double global_batch_tolerance = 0;
  // The search never goes above this micro-batch (nor above ceil(target / data-parallel)).
  std::int64_t max_micro_batch = 65536;
  // Where the target comes from, one phrase for the output's global-batch line ("--target-global-
  // batch 256", "the config's 4 x 8 x 1 GPU"); empty without a target.
  std::string target_source;
};

enum class PlanLimit {
  kBudget,             // micro-batch + 1 does not fit
  kMaxMicroBatch,      // PlanRequest::max_micro_batch fits
  kTargetGlobalBatch,  // one micro-batch already reaches the target global batch per GPU
};

struct Recommendation {
  bool fits = false;     // false: even micro-batch 1 exceeds the budget (then micro_batch = 1)
  GlobalBatch batch;
  BatchChoice choice = BatchChoice::kNone;
  // What the largest fitting micro-batch would give with its best accumulation, when the
  // recommendation is smaller (the output says why not the largest).
  std::optional<GlobalBatch> largest;
  std::int64_t seq_len = 0;  // tokens per sequence (GRPO: prompt + completion)
  Bytes peak;            // Estimator::peak_bytes(batch.micro_batch, seq_len): what estimate reports
  Bytes budget;
  double utilization = 0;  // peak / capacity
  // max_memory_reserved at the recommendation: the peak plus what the replayed caching allocator
  // holds beyond its blocks (docs/formulas.md#the-caching-allocator); nullopt on the CPU and for
  // the encoder programs. What nvidia-smi shows adds the CUDA context (768 MiB).
  std::optional<Bytes> reserved;
  // Micro-batch 1 does not fit the budget but fits capacity - headroom: only the safety margin
  // rejects it (the output names --safety-margin and PYTORCH_CUDA_ALLOC_CONF).
  bool margin_only = false;
};

struct Plan {
  Budget budget;
  Recommendation recommendation;
  std::int64_t max_micro_batch = 0;  // the largest micro-batch that fits (within the cap); 0: none
  PlanLimit limited_by = PlanLimit::kBudget;
  // The largest micro-batch that fits the budget whatever the target global batch (a fact the
  // output always states; equal to max_micro_batch unless the target caps the search), and the
  // peak the next one would need.
  std::int64_t fits_largest = 0;
  std::optional<Bytes> fits_next_peak;
  std::string target_source;  // PlanRequest::target_source
  FitSearch search;                  // the micro-batch search: next_peak, evaluations, monotonicity
  std::optional<GenerationBatch> generation;  // GRPO: TRL's generation batch at the recommendation
  Bytes fixed;                       // memory that does not grow with the micro-batch (tiers)
  std::vector<Tier> tiers;
  // When the target global batch makes every tier the same micro-batch: the tiers without a
  // target (--target-global-batch free), the choices there are. Empty otherwise.
  std::vector<Tier> free_tiers;
  std::vector<Suggestion> suggestions;  // only when nothing fits; ranked by saved, descending
  std::optional<Combination> combination;
};

Result<Plan> plan(const ModelSpec& model, const TrainingConfig& config, const PlanRequest& request);
Result<Plan> plan(const Estimator& estimator, const PlanRequest& request);

// ---------------------------------------------------------------------------------------------
// memplan plan --solve seq-len: the longest sequence at the config's micro-batch

struct SeqLenRequest {
  Budget budget;
  // Upper end of the search; 0: the model's max_position_embeddings when known, else 16777216.
  std::int64_t max_seq_len = 0;
};

struct SeqLenPlan {
  Budget budget;
  std::int64_t micro_batch = 1;      // the config's; so are grad_accum and the global batch
  std::int64_t grad_accum = 1;
  int data_parallel = 1;
  std::int64_t global_batch = 1;
  std::int64_t cap = 0;              // the search's upper end
  bool fits = false;
  std::int64_t seq_len = 0;          // the longest fitting sequence; 0: none
  Bytes peak;                        // at seq_len (at 1 when nothing fits)
  double utilization = 0;
  FitSearch search;
  std::vector<Suggestion> suggestions;  // only when nothing fits
  std::optional<Combination> combination;
};

Result<SeqLenPlan> solve_seq_len(const ModelSpec& model, const TrainingConfig& config, const SeqLenRequest& request);

// ---------------------------------------------------------------------------------------------
// memplan sweep: peaks over a grid

enum class SweepStatus {
  kFits,        // peak <= budget
  kOverBudget,  // budget < peak <= capacity: inside the safety margin or headroom
  kOom,         // peak > capacity
};

struct SweepPoint {
  std::int64_t micro_batch = 0;
  std::int64_t grad_accum = 1;
  std::int64_t seq_len = 0;
  Bytes peak;  // saturates at the largest Bytes when the engine overflows
  SweepStatus status = SweepStatus::kFits;
};

struct SweepRequest {
  Budget budget;
  std::vector<std::int64_t> micro_batches;  // ascending, distinct (parse_grid's output)
  std::vector<std::int64_t> seq_lens;       // ascending, distinct
  // With a target, each point's grad_accum is best_grad_accum(batch, target, dp); else the config's.
  std::optional<std::int64_t> target_global_batch;
};

struct Sweep {
  Budget budget;
  std::vector<std::int64_t> micro_batches;
  std::vector<std::int64_t> seq_lens;
  std::vector<SweepPoint> points;  // seq-major: points[s * micro_batches.size() + b]
};

// At most this many points in one sweep.
inline constexpr std::int64_t kMaxSweepPoints = 10'000'000;

Result<Sweep> sweep(const ModelSpec& model, const TrainingConfig& config, const SweepRequest& request);
Result<Sweep> sweep(const Estimator& estimator, const SweepRequest& request);

// A grid axis as users write it: "1,2,4,8", "1-64:x2" (x2 each step), "512-4096:+512", "1-8"
// (step 1), or a mix "1,2,8-32:x2". Sorted ascending and deduplicated; values in [1, max_value].
// `what` ("--batches") prefixes error messages.
Result<std::vector<std::int64_t>> parse_grid(std::string_view spec, std::string_view what, std::int64_t max_value);

std::string to_string(ChangeKind k);   // stable keys: "gradient_checkpointing", "optimizer_8bit", ...
std::string to_string(PlanLimit l);    // "budget", "max_micro_batch", "target_global_batch"
std::string to_string(BatchChoice c);  // "largest", "exact", "within_tolerance", "nearest", "grpo_divisible", "none"
std::string to_string(SweepStatus s);  // "fits", "over_budget", "oom"

}  // namespace memplan

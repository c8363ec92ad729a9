#include "memplan/plan.hpp"

#include <algorithm>
#include <stdexcept>
#include <memory>
#include <cmath>
#include <cstdlib>
#include <array>
#include <iterator>
#include <limits>
#include <mutex>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "core/parallel.hpp"
#include "core/sharding.hpp"
#include "core/sim/caching_allocator.hpp"
#include "memplan/text.hpp"

namespace memplan {

namespace {

// What an overflowing engine evaluation counts as: larger than any budget.
constexpr Bytes kUnbounded = Bytes::of(std::numeric_limits<std::int64_t>::max());

constexpr std::int64_t kMaxBatch = 1 << 20;        // validate(TrainingConfig) limits
constexpr std::int64_t kMaxSeqLen = 1 << 24;
constexpr std::int64_t kMaxGradAccum = 1 << 24;
constexpr std::int64_t kMaxTargetGlobalBatch = 1 << 24;
constexpr int kMaxSuggestedGpus = 64;  // ZeRO-3 suggestions stop at 8 nodes of 8 GPUs

Result<Bytes> saturating(Result<Bytes> r) {
  if (!r && r.error().code == ErrorCode::kOverflow) return kUnbounded;
  return r;
}

Status check_budget(const Budget& b) {
  if (b.capacity <= Bytes::zero())
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("GPU memory must be positive, got {}", format_human(b.capacity)),
                      "give the GPU's memory, e.g. --gpu-memory 80GB");
  if (b.safety_margin < Bytes::zero() || b.headroom < Bytes::zero())
    return make_error(ErrorCode::kInvalidArgument, "safety margin and headroom must not be negative");
  if (b.safety_margin >= b.capacity || b.headroom >= b.capacity - b.safety_margin) {
    const double left = b.capacity.as_gib() - b.safety_margin.as_gib() - b.headroom.as_gib();
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("budget {:.2f} GiB is not positive (GPU memory {} - safety margin {} - headroom {})",
                                  left, format_gib(b.capacity), format_gib(b.safety_margin), format_gib(b.headroom)),
                      "lower --safety-margin or --headroom, or check --gpu-memory");
  }
  return Ok{};
}

double utilization(Bytes peak, Bytes capacity) {
  return capacity.count() > 0 ? static_cast<double>(peak.count()) / static_cast<double>(capacity.count()) : 0.0;
}

// Records every probe and checks it against the earlier ones. A search makes at most ~2 log2(cap)
// probes, so the quadratic check costs nothing next to one engine evaluation.
class Prober {
 public:
  Prober(const PeakFn& fn, FitSearch& out) : fn_(fn), out_(out) {}

  Result<Bytes> operator()(std::int64_t x) {
    auto r = saturating(fn_(x));
    ++out_.evaluations;
    if (!r) return r;
    const Bytes p = *r;
    if (!out_.violation) {
      for (const auto& [x2, p2] : probes_) {
        if (x2 < x && p2 > p) out_.violation = MonotoneViolation{x2, p2, x, p};
        if (x2 > x && p2 < p) out_.violation = MonotoneViolation{x, p, x2, p2};
        if (out_.violation) break;
      }
    }
    probes_.emplace_back(x, p);
    return p;
  }

 private:
  const PeakFn& fn_;
  FitSearch& out_;
  std::vector<std::pair<std::int64_t, Bytes>> probes_;
};

std::optional<Bytes> bounded(Bytes p) { return p == kUnbounded ? std::nullopt : std::optional<Bytes>(p); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Budget

Bytes default_safety_margin(Bytes capacity) {
  // docs/plan.md#safety-margin
  const Bytes proportional = capacity.count() > 0 ? capacity / 10 : Bytes::zero();
  return Bytes::gib(1) + proportional;
}

namespace {

bool is_bare_number(const std::string& t) {
  if (t.empty()) return false;
  bool digit = false;
  for (char c : t) {
    if (c >= '0' && c <= '9') digit = true;
    else if (c != '.' && c != '+' && c != '-' && c != 'e' && c != 'E') return false;
  }
  return digit;
}

}  // namespace

Result<Bytes> parse_safety_margin(std::string_view text, Bytes capacity) {
  const std::string t = trim(text);
  const std::string suggestion = "write a size such as 2GiB or a percentage of GPU memory such as 10%";
  if (!t.empty() && t.back() == '%') {
    auto pct = parse_double(std::string_view(t).substr(0, t.size() - 1), "safety margin");
    if (!pct || !(*pct >= 0 && *pct < 100))
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("invalid safety margin: \"{}\" (a percentage must be at least 0 and below 100)", t),
                        suggestion);
    return Bytes::of(static_cast<std::int64_t>(std::llround(static_cast<double>(capacity.count()) * *pct / 100.0)));
  }
  // "0" is unambiguous; any other bare number could be a percentage or gigabytes.
  if (is_bare_number(t)) {
    auto v = parse_double(t, "safety margin");
    if (v && *v == 0) return Bytes::zero();
    return make_error(ErrorCode::kInvalidArgument, fmt::format("safety margin \"{}\" has no unit", t),
                      fmt::format("write {}% for a percentage of GPU memory, or {}GiB / {}GB for a size", t, t, t));
  }
  auto size = parse_size(t);
  if (!size) return make_error(ErrorCode::kInvalidArgument, fmt::format("invalid safety margin: \"{}\"", t), suggestion);
  return *size;
}

Result<AllocatorConf> parse_allocator_conf(std::string_view text) {
  AllocatorConf conf;
  conf.text = trim(text);
  const std::string& all = conf.text;
  std::size_t start = 0;
  while (start <= all.size() && !all.empty()) {
    const std::size_t comma = all.find(',', start);
    const std::string item = trim(std::string_view(all).substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    start = comma == std::string::npos ? all.size() + 1 : comma + 1;
    if (item.empty()) continue;
    const std::size_t colon = item.find(':');
    if (colon == std::string::npos)
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("PYTORCH_CUDA_ALLOC_CONF: \"{}\" is not key:value", item),
                        "write e.g. expandable_segments:True,max_split_size_mb:128");
    const std::string key = trim(std::string_view(item).substr(0, colon));
    const std::string value = trim(std::string_view(item).substr(colon + 1));
    if (key == "expandable_segments") {
      // PyTorch accepts exactly True or False here (CUDAAllocatorConfig::parseExpandableSegments).
      if (value != "True" && value != "False")
        return make_error(ErrorCode::kInvalidArgument,
                          fmt::format("PYTORCH_CUDA_ALLOC_CONF: expandable_segments must be True or False, got '{}'", value),
                          "write expandable_segments:True");
      conf.expandable_segments = value == "True";
    } else if (key == "max_split_size_mb") {
      auto v = parse_int(value, "max_split_size_mb");
      if (!v || *v < 1)
        return make_error(ErrorCode::kInvalidArgument,
                          fmt::format("PYTORCH_CUDA_ALLOC_CONF: max_split_size_mb must be a positive integer, got '{}'", value));
      conf.max_split_size_mb = *v;
    } else if (key == "garbage_collection_threshold") {
      auto v = parse_double(value, "garbage_collection_threshold");
      if (!v || !(*v > 0 && *v < 1))
        return make_error(ErrorCode::kInvalidArgument,
                          fmt::format("PYTORCH_CUDA_ALLOC_CONF: garbage_collection_threshold must be between 0 and 1, got '{}'",
                                      value));
      conf.garbage_collection_threshold = *v;
    } else {
      conf.other.push_back(item);
    }
  }
  return conf;
}

Bytes safety_margin_for(Bytes capacity, const AllocatorConf& conf) {
  // docs/plan.md#safety-margin
  if (!conf.expandable_segments) return default_safety_margin(capacity);
  const Bytes proportional = capacity.count() > 0 ? capacity / 50 : Bytes::zero();
  return Bytes::gib(1) + proportional;
}

Result<Budget> make_budget(Bytes capacity, std::optional<Bytes> safety_margin, Bytes headroom) {
  Budget b;
  b.capacity = capacity;
  b.safety_margin = safety_margin ? *safety_margin : default_safety_margin(capacity);
  b.headroom = headroom;
  if (auto s = check_budget(b); !s) return s.error();
  return b;
}

// ---------------------------------------------------------------------------------------------
// Search

Result<FitSearch> find_largest_fitting(const PeakFn& peak, Bytes budget, std::int64_t cap) {
  if (cap < 1) return make_error(ErrorCode::kInvalidArgument, fmt::format("search cap = {} must be at least 1", cap));
  FitSearch out;
  Prober probe(peak, out);

  MEMPLAN_TRY(const Bytes p1, probe(1));
  if (p1 > budget) {
    out.peak = p1;
    out.next_peak.reset();
    return out;
  }
  std::int64_t lo = 1;
  Bytes lo_peak = p1;
  std::optional<std::int64_t> hi;
  Bytes hi_peak;
  // Exponential phase: 1, 2, 4, ... until a miss or the cap.
  while (lo < cap) {
    const std::int64_t x = lo > cap / 2 ? cap : lo * 2;
    MEMPLAN_TRY(const Bytes p, probe(x));
    if (out.violation) break;
    if (p <= budget) {
      lo = x;
      lo_peak = p;
    } else {
      hi = x;
      hi_peak = p;
      break;
    }
  }
  // Binary phase: lo fits, hi does not.
  while (!out.violation && hi && *hi - lo > 1) {
    const std::int64_t mid = lo + (*hi - lo) / 2;
    MEMPLAN_TRY(const Bytes p, probe(mid));
    if (out.violation) break;
    if (p <= budget) {
      lo = mid;
      lo_peak = p;
    } else {
      hi = mid;
      hi_peak = p;
    }
  }
  if (!out.violation) {
    out.largest = lo;
    out.peak = lo_peak;
    out.hit_cap = !hi;
    if (hi) out.next_peak = bounded(hi_peak);
    return out;
  }
  // Not monotone: the largest x such that every x' <= x fits (a smaller last batch of an epoch
  // must fit too), by a linear scan.
  out.largest = 0;
  out.next_peak.reset();
  out.hit_cap = false;
  for (std::int64_t x = 1; x <= cap; ++x) {
    auto r = saturating(peak(x));
    ++out.evaluations;
    if (!r) return r.error();
    if (*r > budget) {
      if (x == 1) out.peak = *r;
      else out.next_peak = bounded(*r);
      return out;
    }
    out.largest = x;
    out.peak = *r;
  }
  out.hit_cap = true;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Global batch

std::int64_t current_global_batch(const TrainingConfig& c) {
  return checked_mul(checked_mul(c.micro_batch, c.grad_accum), c.parallel.data_parallel_size());
}

std::int64_t best_grad_accum(std::int64_t micro_batch, std::int64_t target, int data_parallel) {
  const std::int64_t per_step = micro_batch * std::max(1, data_parallel);
  const std::int64_t lo = std::max<std::int64_t>(1, target / per_step);
  const std::int64_t hi = lo + 1;
  const std::int64_t a = std::llabs(hi * per_step - target) < std::llabs(lo * per_step - target) ? hi : lo;
  return std::min(a, kMaxGradAccum);
}

GlobalBatch match_global_batch(std::int64_t max_micro_batch, std::int64_t target, int data_parallel,
                               double tolerance) {
  const int dp = std::max(1, data_parallel);
  target = std::max<std::int64_t>(1, target);
  const std::int64_t per_gpu = (target + dp - 1) / dp;
  const std::int64_t upper = std::max<std::int64_t>(1, std::min(max_micro_batch, per_gpu));
  const double allowed = tolerance * static_cast<double>(target);
  auto make = [&](std::int64_t m) {
    GlobalBatch g;
    g.micro_batch = m;
    g.grad_accum = best_grad_accum(m, target, dp);
    g.data_parallel = dp;
    g.global_batch = m * g.grad_accum * dp;
    g.target = target;
    return g;
  };
  std::optional<GlobalBatch> within, closest;
  for (std::int64_t m = upper; m >= 1; --m) {
    GlobalBatch g = make(m);
    const std::int64_t err = std::llabs(g.diff());
    // With a tolerance, the largest m within it; without, the largest exact m.
    if (static_cast<double>(err) <= allowed) return g;
    if (!within && err == 0) within = g;
    if (!closest || err < std::llabs(closest->diff())) closest = g;
  }
  return within ? *within : *closest;
}

GenerationBatch generation_batch(const TrainingConfig& c, std::int64_t micro_batch, std::int64_t grad_accum) {
  GenerationBatch g;
  g.num_generations = std::max(1, c.grpo.num_generations);
  g.processes = std::max(1, c.parallel.world_size());
  g.steps_per_generation = std::max<std::int64_t>(1, grad_accum);
  g.generation_batch = checked_mul(checked_mul(micro_batch, g.processes), g.steps_per_generation);
  g.prompts = g.valid() ? g.generation_batch / g.num_generations : 0;
  return g;
}

// ---------------------------------------------------------------------------------------------
// Tiers

std::vector<TierSpec> default_tiers() {
  // docs/plan.md#tiers
  return {{"safe", 50}, {"balanced", 75}, {"aggressive", 100}};
}

namespace {

// ---------------------------------------------------------------------------------------------
// Suggestions

enum class Mode { kBatch, kSeqLen };

// Where suggestions are evaluated and what "best after the change" searches for.
// The estimators of one plan's suggestions. Trying changes revisits the same configs (the
// search for a GPU count, then the peak and the best micro-batch after the change, then the
// combination), and an estimator answers for every (b, s), so each config is built once.
// Keys ignore the micro-batch and sequence length, which only say where to evaluate. Every
// estimator is derived from the plan's own, so the step programs they have in common are
// simulated once (Estimator::derive).
class EstimatorCache {
 public:
  explicit EstimatorCache(const Estimator& seed) : seed_(seed) { entries_.push_back({key(seed.config()), nullptr, &seed}); }

  // Safe to call from several threads (suggest() tries the changes at once): a config two
  // threads build at the same time is kept once; both estimators are the same.
  Result<const Estimator*> get(const TrainingConfig& c) {
    const TrainingConfig k = key(c);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& e : entries_)
        if (e.config == k) return e.estimator;
    }
    MEMPLAN_TRY(auto est, seed_.derive(c));
    auto owned = std::make_unique<Estimator>(std::move(est));
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : entries_)
      if (e.config == k) return e.estimator;
    const Estimator* p = owned.get();
    entries_.push_back({k, std::move(owned), p});
    return p;
  }

 private:
  static TrainingConfig key(TrainingConfig c) {
    c.micro_batch = 1;
    c.seq_len = 1;
    return c;
  }
  struct Entry {
    TrainingConfig config;
    std::unique_ptr<Estimator> owned;
    const Estimator* estimator = nullptr;
  };
  const Estimator& seed_;
  std::mutex mu_;
  std::vector<Entry> entries_;
};

struct SuggestContext {
  const ModelSpec& model;
  Bytes budget;
  Mode mode = Mode::kBatch;
  std::int64_t micro_batch = 1;  // the evaluated point
  std::int64_t seq_len = 1;
  std::int64_t cap = 1;          // the search cap for `best`
  EstimatorCache* estimators = nullptr;
  bool unified = false;          // no CPU offload: CPU memory is this memory
  Bytes vllm_reserve;            // the colocated vLLM share in the headroom (GRPO)
};

struct Change {
  TrainingConfig config;
  std::string description;
  std::vector<std::string> flags;
  Bytes budget_gain;  // memory the change gives back to the budget (vLLM's colocated share)
};

Result<Bytes> peak_at(const SuggestContext& ctx, const TrainingConfig& c, std::int64_t b, std::int64_t s) {
  MEMPLAN_TRY(const Estimator* est, ctx.estimators->get(c));
  return saturating(est->peak_bytes(b, s));
}

// The largest micro-batch (batch mode) or sequence (seq-len mode) that fits after a change.
Result<std::int64_t> best_after(const SuggestContext& ctx, const TrainingConfig& c, Bytes budget) {
  MEMPLAN_TRY(const Estimator* est, ctx.estimators->get(c));
  PeakFn fn;
  if (ctx.mode == Mode::kBatch)
    fn = [&](std::int64_t b) { return est->peak_bytes(b, c.sequence_length()); };
  else
    fn = [&](std::int64_t s) { return est->peak_bytes(ctx.micro_batch, s); };
  MEMPLAN_TRY(auto r, find_largest_fitting(fn, budget, ctx.cap));
  return r.largest;
}

bool is_8bit_optimizer(OptimizerKind k) {
  return k == OptimizerKind::kAdamW8bit || k == OptimizerKind::kPagedAdamW8bit || k == OptimizerKind::kLion8bit ||
         k == OptimizerKind::kAdamWTorchao8bit || k == OptimizerKind::kAdamWTorchao4bit;
}

void enable_lora(TrainingConfig& c, std::vector<std::string>& flags) {
  c.lora.enabled = true;
  c.lora.all_linear = true;
  c.lora.target_modules.clear();
  c.lora.r = 16;
  flags.insert(flags.end(), {"--use-peft", "--lora-target-modules all-linear", "--lora-r 16"});
}

// GPU layout with `n` GPUs in all: one node up to 8 GPUs, else nodes of 8; a multi-node config
// keeps its GPUs per node. Returns false when `n` does not fit that layout.
bool set_world(TrainingConfig& c, int n, std::vector<std::string>& flags) {
  ParallelConfig& p = c.parallel;
  const int per_node = p.nodes == 1 ? std::min(n, 8) : p.num_gpus;
  if (per_node < 1 || n % per_node != 0) return false;
  const int nodes = n / per_node;
  // The layout must stay valid: tp x pp x cp divides the GPUs, ep the data-parallel x context ranks.
  ParallelConfig next = p;
  next.num_gpus = per_node;
  next.nodes = nodes;
  if (!validate_parallel(next)) return false;
  if (per_node != p.num_gpus) flags.push_back(fmt::format("--num-gpus {}", per_node));
  if (nodes != p.nodes) flags.push_back(fmt::format("--nodes {}", nodes));
  p.num_gpus = per_node;
  p.nodes = nodes;
  return true;
}

// The fewest GPUs among `counts` (ascending) at which the config fits at the evaluated point; the
// last count when none does. nullopt when no count is possible.
//
// A sharded config's peak does not grow with the GPUs it shards over (every shard is a ceiling
// of a division by the count; tests/core/test_plan.cpp checks it over models, methods and
// layouts), so the largest count is tried first: when it does not fit, no count does, and one
// estimator answers instead of one per count (docs/plan.md#speed). Otherwise a binary search
// finds the fewest. A count the engine rejects is not a suggestion: then every count is tried in
// order, as the search cannot tell which side of it the answer lies.
Result<std::optional<Change>> fewest_gpus(const SuggestContext& ctx, const Change& base, const std::vector<int>& counts) {
  std::vector<Change> changes;  // the counts the layout allows, ascending
  for (int n : counts) {
    Change ch = base;
    if (!set_world(ch.config, n, ch.flags)) continue;
    ch.description = fmt::format(fmt::runtime(base.description), n);
    changes.push_back(std::move(ch));
  }
  // Whether count i fits; nullopt when the engine rejects it.
  const auto try_count = [&](std::size_t i) -> std::optional<bool> {
    auto p = peak_at(ctx, changes[i].config, ctx.micro_batch, ctx.seq_len);
    if (!p) return std::nullopt;
    return *p <= ctx.budget;
  };
  const auto in_order = [&]() -> std::optional<Change> {
    std::optional<Change> last;
    for (std::size_t i = 0; i < changes.size(); ++i) {
      const auto f = try_count(i);
      if (!f) continue;  // a layout the engine rejects is not a suggestion
      last = changes[i];
      if (*f) break;
    }
    return last;
  };
  if (changes.empty()) return std::optional<Change>{};
  const auto top = try_count(changes.size() - 1);
  if (!top) return in_order();
  if (!*top) return std::optional<Change>(changes.back());
  std::size_t lo = 0, hi = changes.size() - 1;  // the answer is in [lo, hi]; hi fits
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    const auto f = try_count(mid);
    if (!f) return in_order();
    if (*f) hi = mid;
    else lo = mid + 1;
  }
  return std::optional<Change>(changes[lo]);
}

// The config after applying `kind` to `c`; nullopt when the change is already in the config or
// does not apply.
Result<std::optional<Change>> make_change(ChangeKind kind, const TrainingConfig& c, const SuggestContext& ctx) {
  Change ch{c, {}, {}, {}};
  TrainingConfig& n = ch.config;
  switch (kind) {
    case ChangeKind::kGradientCheckpointing:
      if (c.gradient_checkpointing) return std::optional<Change>{};
      n.gradient_checkpointing = true;
      ch.description = "enable gradient checkpointing (recompute activations in backward)";
      ch.flags = {"--gradient-checkpointing"};
      return std::optional<Change>(ch);
    case ChangeKind::kOptimizer8bit:
      if (is_8bit_optimizer(c.optim.kind)) return std::optional<Change>{};
      n.optim.kind = OptimizerKind::kAdamW8bit;
      n.optim.args.clear();
      ch.description = "8-bit AdamW (bitsandbytes): optimizer states in 8 bits";
      ch.flags = {"--optim adamw_8bit"};
      return std::optional<Change>(ch);
    case ChangeKind::kLora:
      if (c.lora.enabled) return std::optional<Change>{};
      enable_lora(n, ch.flags);
      ch.description = "LoRA r=16 on all linear layers instead of training every weight";
      return std::optional<Change>(ch);
    case ChangeKind::kQlora:
      if (c.quant.load_in_4bit) return std::optional<Change>{};
      if (!c.lora.enabled) enable_lora(n, ch.flags);
      n.quant.load_in_4bit = true;
      n.quant.load_in_8bit = false;
      ch.flags.push_back("--load-in-4bit");
      ch.description = c.quant.load_in_8bit ? "QLoRA: 4-bit base weights instead of 8-bit (drop --load-in-8bit)"
                                            : "QLoRA: LoRA on a 4-bit (nf4) base model";
      return std::optional<Change>(ch);
    case ChangeKind::kShorterSeqLen: {
      if (ctx.mode != Mode::kBatch || c.seq_len <= 1 || c.method == Method::kGrpo) return std::optional<Change>{};
      MEMPLAN_TRY(const Estimator* est, ctx.estimators->get(c));
      PeakFn fn = [&](std::int64_t s) { return est->peak_bytes(ctx.micro_batch, s); };
      MEMPLAN_TRY(auto r, find_largest_fitting(fn, ctx.budget, c.seq_len - 1));
      if (r.largest == 0) return std::optional<Change>{};
      n.seq_len = r.largest;
      ch.description = fmt::format("shorter sequences: {} tokens, the longest that fits", r.largest);
      ch.flags = {fmt::format("--seq-len {}", r.largest)};
      return std::optional<Change>(ch);
    }
    case ChangeKind::kShorterCompletion: {
      // The generation phase's cache is sized by max_completion_length, so each length is its own
      // estimator (docs/plan.md#grpo).
      if (ctx.mode != Mode::kBatch || c.method != Method::kGrpo || c.grpo.max_completion_length <= 1)
        return std::optional<Change>{};
      PeakFn fn = [&](std::int64_t len) -> Result<Bytes> {
        TrainingConfig t = c;
        t.grpo.max_completion_length = len;
        MEMPLAN_TRY(const Estimator* est, ctx.estimators->get(t));
        return est->peak_bytes(ctx.micro_batch, t.sequence_length());
      };
      MEMPLAN_TRY(auto r, find_largest_fitting(fn, ctx.budget, c.grpo.max_completion_length - 1));
      if (r.largest == 0) return std::optional<Change>{};
      n.grpo.max_completion_length = r.largest;
      ch.description = fmt::format("shorter completions: {} tokens, the longest that fits", r.largest);
      ch.flags = {fmt::format("--max-completion-length {}", r.largest)};
      return std::optional<Change>(ch);
    }
    case ChangeKind::kVllmServer: {
      if (c.method != Method::kGrpo || c.grpo.vllm == VllmMode::kServer) return std::optional<Change>{};
      n.grpo.vllm = VllmMode::kServer;
      ch.flags = {"--use-vllm", "--vllm-mode server"};
      if (c.grpo.vllm == VllmMode::kColocate) {
        ch.budget_gain = ctx.vllm_reserve;
        ch.description = "vLLM on another GPU (trl vllm-serve) instead of its colocated share of this one";
      } else {
        ch.description = "generate with vLLM on another GPU (trl vllm-serve): no generation KV cache here";
      }
      return std::optional<Change>(ch);
    }
    case ChangeKind::kZero3: {
      if (c.parallel.sharding == ShardingStrategy::kZero3 || c.parallel.sharding == ShardingStrategy::kFsdpFullShard)
        return std::optional<Change>{};
      const bool fsdp = fsdp_family(c.parallel.sharding);
      n.parallel.sharding = fsdp ? ShardingStrategy::kFsdpFullShard : ShardingStrategy::kZero3;
      ch.flags = {fsdp ? "--fsdp full_shard" : "--zero-stage 3"};
      ch.description = fsdp ? "FSDP full_shard over {} GPUs" : "DeepSpeed ZeRO-3 over {} GPUs";
      const int world = c.parallel.world_size();
      std::vector<int> counts;
      for (int k = std::max(2, world); k <= std::max(kMaxSuggestedGpus, world); k *= 2) counts.push_back(k);
      return fewest_gpus(ctx, ch, counts);
    }
    case ChangeKind::kCpuOffloadOptimizer:
      if (c.parallel.offload_optimizer || ctx.unified) return std::optional<Change>{};
      n.parallel.offload_optimizer = true;
      if (c.parallel.sharding == ShardingStrategy::kNone) {
        n.parallel.sharding = ShardingStrategy::kZero2;
        ch.flags = {"--zero-stage 2", "--offload-optimizer"};
        ch.description = "DeepSpeed ZeRO-Offload: optimizer states in CPU memory (ZeRO-2)";
      } else {
        ch.flags = {"--offload-optimizer"};
        ch.description = "offload optimizer states to CPU memory";
      }
      return std::optional<Change>(ch);
    case ChangeKind::kMoreGpus: {
      // Plain data parallelism replicates everything: more GPUs do not lower the per-GPU peak.
      if (c.parallel.sharding == ShardingStrategy::kNone) return std::optional<Change>{};
      const int world = c.parallel.world_size();
      std::vector<int> counts;
      for (int k = world * 2; k <= std::min(world * 8, 1024); k *= 2) counts.push_back(k);
      ch.description = fmt::format("{} over {{}} GPUs instead of {}", to_string(c.parallel.sharding), world);
      return fewest_gpus(ctx, ch, counts);
    }
  }
  return std::optional<Change>{};
}

constexpr ChangeKind kAllChanges[] = {
    ChangeKind::kGradientCheckpointing, ChangeKind::kOptimizer8bit,     ChangeKind::kLora,
    ChangeKind::kQlora,                 ChangeKind::kShorterSeqLen,     ChangeKind::kShorterCompletion,
    ChangeKind::kVllmServer,            ChangeKind::kZero3,             ChangeKind::kCpuOffloadOptimizer,
    ChangeKind::kMoreGpus,
};

// "--num-gpus 16" replaces an earlier "--num-gpus 8"; other flags are appended once.
void merge_flags(std::vector<std::string>& into, const std::vector<std::string>& add) {
  for (const auto& f : add) {
    const std::string name = f.substr(0, f.find(' '));
    auto it = std::find_if(into.begin(), into.end(), [&](const std::string& g) { return g.substr(0, g.find(' ')) == name; });
    if (it != into.end()) *it = f;
    else into.push_back(f);
  }
}

struct Suggestions {
  std::vector<Suggestion> ranked;
  std::optional<Combination> combination;
};

// One change tried on its own at the evaluated point: nullopt when it does not apply, the engine
// cannot model it, or it saves nothing (memory given back to the budget counts).
Result<std::optional<Suggestion>> try_change(ChangeKind kind, const TrainingConfig& config, const SuggestContext& ctx,
                                             Bytes base, Phase base_phase) {
  // Checkpointing recomputes activations: the optimizer step (parameters, gradients, states and
  // the step's temporaries) is the same with it, so where that step is the peak it saves nothing,
  // and its program need not be simulated to find out (docs/plan.md#speed).
  if (kind == ChangeKind::kGradientCheckpointing && base_phase == Phase::kOptimizerStep)
    return std::optional<Suggestion>{};
  MEMPLAN_TRY(auto ch, make_change(kind, config, ctx));
  if (!ch) return std::optional<Suggestion>{};
  // Shorter sequences are evaluated at their own length; everything else at the same point.
  const std::int64_t s = kind == ChangeKind::kShorterSeqLen || kind == ChangeKind::kShorterCompletion
                             ? ch->config.sequence_length()
                             : ctx.seq_len;
  auto p = peak_at(ctx, ch->config, ctx.micro_batch, s);
  if (!p || *p >= base + ch->budget_gain) return std::optional<Suggestion>{};
  Suggestion sg;
  sg.kind = kind;
  sg.description = std::move(ch->description);
  sg.flags = std::move(ch->flags);
  sg.config = std::move(ch->config);
  sg.peak = *p;
  sg.saved = base + ch->budget_gain - *p;
  sg.fits = *p <= ctx.budget + ch->budget_gain;
  if (sg.fits) {
    MEMPLAN_TRY(sg.best, best_after(ctx, sg.config, ctx.budget + ch->budget_gain));
  }
  return std::optional<Suggestion>(std::move(sg));
}

Result<Suggestions> suggest(const TrainingConfig& config, const SuggestContext& ctx) {
  Suggestions out;
  MEMPLAN_TRY(const Bytes base, peak_at(ctx, config, ctx.micro_batch, ctx.seq_len));
  // The phase of that peak (forward when it cannot be told: nothing is then skipped).
  MEMPLAN_TRY(const Estimator* base_est, ctx.estimators->get(config));
  Phase base_phase = Phase::kForward;
  if (auto e = base_est->at(ctx.micro_batch, ctx.seq_len)) base_phase = e->peak_phase;
  // Each change builds its own estimators (one per GPU count tried): they run at once, and are
  // taken in kAllChanges' order, so the first error is the one a sequential loop would stop at.
  constexpr std::size_t kChanges = std::size(kAllChanges);
  std::array<std::optional<Result<std::optional<Suggestion>>>, kChanges> tried;
  // Workers take the changes in this order: first those that build several estimators (a GPU
  // count each) or simulate a new program (checkpointing, adapters), so that none of them
  // starts last while the other threads have finished (docs/plan.md#speed).
  static constexpr auto kStart = [] {
    constexpr ChangeKind kOrder[] = {ChangeKind::kZero3,         ChangeKind::kMoreGpus,           ChangeKind::kGradientCheckpointing,
                                     ChangeKind::kLora,          ChangeKind::kQlora,              ChangeKind::kOptimizer8bit,
                                     ChangeKind::kShorterSeqLen, ChangeKind::kShorterCompletion,  ChangeKind::kVllmServer,
                                     ChangeKind::kCpuOffloadOptimizer};
    static_assert(std::size(kOrder) == kChanges);
    std::array<std::size_t, kChanges> at{};
    for (std::size_t k = 0; k < kChanges; ++k)
      for (std::size_t i = 0; i < kChanges; ++i)
        if (kAllChanges[i] == kOrder[k]) at[k] = i;
    std::array<bool, kChanges> seen{};
    for (const std::size_t i : at) {
      if (seen[i]) throw std::logic_error("the start order must list every change once");  // fails to compile
      seen[i] = true;
    }
    return at;
  }();
  parallel_for(kChanges, [&](std::size_t k) {
    const std::size_t i = kStart[k];
    tried[i] = try_change(kAllChanges[i], config, ctx, base, base_phase);
  });
  for (auto& t : tried) {
    if (!*t) return t->error();
    if (**t) out.ranked.push_back(std::move(***t));
  }
  std::stable_sort(out.ranked.begin(), out.ranked.end(),
                   [](const Suggestion& a, const Suggestion& b) { return a.saved > b.saved; });

  // When no single change fits: apply them together, in ranked order, while each still helps.
  const bool any_fits = std::any_of(out.ranked.begin(), out.ranked.end(), [](const Suggestion& s) { return s.fits; });
  if (any_fits) return out;
  // Shorter sequences or completions change the data, not the setup; after ZeRO-3 has chosen its
  // GPU count, more GPUs are not tried again.
  const auto combines = [](ChangeKind kind, const std::vector<ChangeKind>& applied) {
    if (kind == ChangeKind::kShorterSeqLen || kind == ChangeKind::kShorterCompletion) return false;
    return kind != ChangeKind::kMoreGpus ||
           std::find(applied.begin(), applied.end(), ChangeKind::kZero3) == applied.end();
  };
  // Each step of the walk below derives an estimator from the one before, so the walk would build
  // them one at a time. The configs it reaches when every change helps (as they mostly do) are
  // built at once first; the walk then finds them made (docs/plan.md#speed).
  {
    std::vector<TrainingConfig> ahead;
    std::vector<ChangeKind> applied;
    TrainingConfig at = config;
    for (const Suggestion& s : out.ranked) {
      if (!combines(s.kind, applied)) continue;
      auto ch = make_change(s.kind, at, ctx);
      if (!ch) break;  // the walk meets the same error and returns it
      if (!*ch) continue;
      at = (*ch)->config;
      applied.push_back(s.kind);
      ahead.push_back(at);
    }
    parallel_for(ahead.size(), [&](std::size_t i) { (void)ctx.estimators->get(ahead[i]); });
  }
  Combination comb;
  comb.config = config;
  comb.peak = base;
  Bytes gain;
  for (const Suggestion& s : out.ranked) {
    if (!combines(s.kind, comb.kinds)) continue;
    MEMPLAN_TRY(auto ch, make_change(s.kind, comb.config, ctx));
    if (!ch) continue;
    auto p = peak_at(ctx, ch->config, ctx.micro_batch, ctx.seq_len);
    if (!p || *p >= comb.peak + ch->budget_gain) continue;
    comb.config = std::move(ch->config);
    comb.peak = *p;
    gain += ch->budget_gain;
    comb.kinds.push_back(s.kind);
    merge_flags(comb.flags, ch->flags);
    if (comb.peak <= ctx.budget + gain) break;
  }
  if (comb.kinds.size() >= 2) {
    comb.fits = comb.peak <= ctx.budget + gain;
    if (comb.fits) {
      MEMPLAN_TRY(comb.best, best_after(ctx, comb.config, ctx.budget + gain));
    }
    out.combination = std::move(comb);
  }
  return out;
}

// The peak at (micro-batch, accumulation) for the plan's sequence. The accumulation matters only
// for GRPO generating with model.generate: TRL generates steps_per_generation = grad_accum
// micro-batches at once, and the KV cache holds all of them (docs/formulas.md#grpo-generation).
// Then each accumulation has its own estimator, built once (EstimatorCache).
class BatchPeaks {
 public:
  BatchPeaks(const Estimator& est, EstimatorCache& cache)
      : est_(est), cache_(cache), seq_(est.config().sequence_length()),
        by_accum_(est.config().method == Method::kGrpo && est.config().grpo.vllm == VllmMode::kNone) {}

  bool depends_on_accum() const { return by_accum_; }
  std::int64_t seq() const { return seq_; }

  Result<Bytes> operator()(std::int64_t m, std::int64_t accum) const {
    // Otherwise the accumulation decides whether earlier micro-batches' gradients are held and
    // how many micro-batches a pipeline holds; one estimator answers for every accumulation.
    if (!by_accum_ || accum == est_.config().grad_accum) return saturating(est_.peak_bytes(m, seq_, accum));
    TrainingConfig c = est_.config();
    c.grad_accum = accum;
    MEMPLAN_TRY(const Estimator* e, cache_.get(c));
    return saturating(e->peak_bytes(m, seq_));
  }

 private:
  const Estimator& est_;
  EstimatorCache& cache_;
  std::int64_t seq_;
  bool by_accum_;
};

struct Choice {
  bool fits = false;
  GlobalBatch batch;
  Bytes peak;
  BatchChoice why = BatchChoice::kNone;
  std::optional<GlobalBatch> largest;  // the largest fitting micro-batch's own best, when not chosen
  std::int64_t largest_micro_batch = 0;
};

std::int64_t gcd(std::int64_t a, std::int64_t b) {
  while (b != 0) {
    const std::int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// GRPO: the accumulations that keep the generation batch (m x processes x accum) a whole number of
// num_generations groups, nearest the target first; without a target, the config's accumulation
// rounded up to the next such value.
std::vector<std::int64_t> grpo_accums(const TrainingConfig& c, std::int64_t m, const std::optional<std::int64_t>& target,
                                      int dp) {
  const std::int64_t ng = std::max(1, c.grpo.num_generations);
  const std::int64_t per_step = checked_mul(m, std::max(1, c.parallel.world_size()));
  const std::int64_t k = ng / gcd(ng, per_step);  // accum must be a multiple of k
  if (!target) return {std::min(kMaxGradAccum, (std::max<std::int64_t>(1, c.grad_accum) + k - 1) / k * k)};
  const std::int64_t step_total = checked_mul(m, dp);
  const std::int64_t lo = std::max(k, *target / step_total / k * k);
  const std::int64_t hi = lo + k;
  const std::int64_t elo = std::llabs(lo * step_total - *target), ehi = std::llabs(hi * step_total - *target);
  std::vector<std::int64_t> out = ehi < elo ? std::vector<std::int64_t>{hi, lo} : std::vector<std::int64_t>{lo, hi};
  out.erase(std::remove_if(out.begin(), out.end(), [](std::int64_t a) { return a > kMaxGradAccum; }), out.end());
  return out;
}

GlobalBatch make_batch(std::int64_t m, std::int64_t accum, int dp, const std::optional<std::int64_t>& target) {
  GlobalBatch g;
  g.micro_batch = m;
  g.grad_accum = accum;
  g.data_parallel = dp;
  g.global_batch = checked_mul(checked_mul(m, accum), dp);
  g.target = target;
  return g;
}

// An accumulation at least as demanding as any a target global batch can lead to: two
// micro-batches (the later ones hold the earlier gradients), and enough to fill a 1F1B or
// interleaved pipeline. GPipe's in-flight count keeps growing; choose_batch() checks its pick.
std::int64_t conservative_accum(const TrainingConfig& c) {
  const auto& p = c.parallel;
  std::int64_t a = std::max<std::int64_t>(2, c.grad_accum);
  if (p.pipeline_parallel > 1 && p.pp_schedule != PipelineSchedule::kGPipe)
    a = std::max<std::int64_t>(a, static_cast<std::int64_t>(p.pipeline_parallel) * std::max(1, p.virtual_stages));
  return std::min(a, kMaxGradAccum);
}

// The batch the plan recommends under `limit`, given the largest micro-batch `max_fit` that fits
// it at the lowest accumulation (every accumulation, outside GRPO). docs/plan.md#global-batch
Result<Choice> choose_batch(const TrainingConfig& c, const PlanRequest& req, const BatchPeaks& peaks, Bytes limit,
                            std::int64_t max_fit) {
  Choice out;
  if (max_fit < 1) return out;
  const int dp = c.parallel.data_parallel_size();
  const auto& target = req.target_global_batch;
  if (c.method != Method::kGrpo) {
    out.largest_micro_batch = max_fit;
    if (!target) {
      out.batch = make_batch(max_fit, c.grad_accum, dp, target);
      out.why = BatchChoice::kLargest;
    } else {
      out.batch = match_global_batch(max_fit, *target, dp, req.global_batch_tolerance);
      out.why = out.batch.diff() == 0 ? BatchChoice::kExact
                : static_cast<double>(std::llabs(out.batch.diff())) <=
                        req.global_batch_tolerance * static_cast<double>(*target)
                    ? BatchChoice::kWithinTolerance
                    : BatchChoice::kNearest;
      if (out.batch.micro_batch < max_fit) {
        GlobalBatch l = make_batch(max_fit, best_grad_accum(max_fit, *target, dp), dp, target);
        out.largest = l;
      }
    }
    MEMPLAN_TRY(out.peak, peaks(out.batch.micro_batch, out.batch.grad_accum));
    // The pick's own accumulation can need more than the search assumed (a GPipe pipeline
    // holds every micro-batch): step down until it fits.
    for (int tries = 0; out.peak > limit && out.batch.micro_batch > 1 && tries < 256; ++tries) {
      const std::int64_t m = out.batch.micro_batch - 1;
      out.batch = target ? match_global_batch(m, *target, dp, req.global_batch_tolerance)
                         : make_batch(m, c.grad_accum, dp, target);
      MEMPLAN_TRY(out.peak, peaks(out.batch.micro_batch, out.batch.grad_accum));
      out.largest_micro_batch = out.batch.micro_batch;
      out.largest.reset();
    }
    out.fits = out.peak <= limit;
    return out;
  }
  // GRPO: every (m, accum) is checked, since the accumulation is part of the peak.
  std::optional<std::pair<GlobalBatch, Bytes>> exact, within, nearest, first;
  for (std::int64_t m = max_fit; m >= 1; --m) {
    for (const std::int64_t a : grpo_accums(c, m, target, dp)) {
      MEMPLAN_TRY(const Bytes p, peaks(m, a));
      if (p > limit) continue;
      const GlobalBatch g = make_batch(m, a, dp, target);
      if (!first) first = {g, p};
      if (!target) break;
      const std::int64_t err = std::llabs(g.diff());
      if (err == 0 && !exact) exact = {g, p};
      if (!within && static_cast<double>(err) <= req.global_batch_tolerance * static_cast<double>(*target))
        within = {g, p};
      if (!nearest || err < std::llabs(nearest->first.diff())) nearest = {g, p};
      break;  // the accumulations come nearest first
    }
    if (first && (!target || within)) break;
  }
  if (!first) return out;
  out.fits = true;
  out.largest_micro_batch = first->first.micro_batch;
  const auto& pick = !target ? first : within ? within : exact ? exact : nearest;
  out.batch = pick->first;
  out.peak = pick->second;
  if (!target)
    out.why = out.batch.micro_batch == max_fit && out.batch.grad_accum == c.grad_accum ? BatchChoice::kLargest
                                                                                       : BatchChoice::kGrpoDivisible;
  else
    out.why = pick->first.diff() == 0 ? BatchChoice::kExact
              : &pick == &within      ? BatchChoice::kWithinTolerance
                                      : BatchChoice::kNearest;
  if (out.batch.micro_batch < max_fit) {
    // What the largest micro-batch would give: with a target, its nearest accumulation (TRL may
    // reject it, which the output says separately); without, the config's rounded for TRL.
    const std::int64_t a = target ? best_grad_accum(max_fit, *target, dp) : grpo_accums(c, max_fit, target, dp).front();
    out.largest = make_batch(max_fit, a, dp, target);
  }
  return out;
}

Status check_request(const PlanRequest& r) {
  if (auto s = check_budget(r.budget); !s) return s;
  if (r.target_global_batch && (*r.target_global_batch < 1 || *r.target_global_batch > kMaxTargetGlobalBatch))
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("target-global-batch = {} is out of range (1 to {})", *r.target_global_batch,
                                  kMaxTargetGlobalBatch));
  if (!(r.global_batch_tolerance >= 0 && r.global_batch_tolerance < 1))
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("global-batch-tolerance = {}% is out of range (0 to below 100%)",
                                  r.global_batch_tolerance * 100));
  if (r.max_micro_batch < 1 || r.max_micro_batch > kMaxBatch)
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("max-micro-batch = {} is out of range (1 to {})", r.max_micro_batch, kMaxBatch));
  return Ok{};
}

// The memory that does not grow with the micro-batch: peak(1) minus the growth from 1 to 2,
// within [0, peak(1)]. Tiers divide the room above it (docs/plan.md#tiers).
Result<Bytes> fixed_memory(const BatchPeaks& peaks, std::int64_t accum) {
  MEMPLAN_TRY(const Bytes p1, peaks(1, accum));
  MEMPLAN_TRY(const Bytes p2, peaks(2, accum));
  if (p1 == kUnbounded || p2 == kUnbounded || p2 <= p1) return p1;
  const Bytes growth = p2 - p1;
  return growth >= p1 ? Bytes::zero() : p1 - growth;
}

Result<Plan> plan_impl(const Estimator& est, const PlanRequest& req) {
  if (auto s = check_request(req); !s) return s.error();
  const TrainingConfig& c = est.config();
  const int dp = c.parallel.data_parallel_size();
  const Bytes budget = req.budget.budget();
  EstimatorCache estimators(est);
  const BatchPeaks peaks(est, estimators);
  const std::int64_t seq = peaks.seq();
  // GRPO: the smallest generation batch a micro-batch can have is one micro-batch (accum 1),
  // a lower bound on every accumulation's peak.
  // Otherwise, with a target global batch the accumulation follows the micro-batch: search at
  // one that holds earlier micro-batches' gradients and fills a pipeline (the peak never falls
  // as the accumulation grows, GPipe aside), then choose_batch() checks the pick.
  const std::int64_t search_accum = peaks.depends_on_accum() ? 1
                                    : req.target_global_batch ? conservative_accum(c)
                                                              : c.grad_accum;

  Plan out;
  out.budget = req.budget;
  std::int64_t cap = req.max_micro_batch;
  bool target_caps = false;
  if (req.target_global_batch) {
    const std::int64_t per_gpu = std::max<std::int64_t>(1, (*req.target_global_batch + dp - 1) / dp);
    if (per_gpu < cap) {
      cap = per_gpu;
      target_caps = true;
    }
  }
  const PeakFn at_batch = [&](std::int64_t b) { return peaks(b, search_accum); };
  MEMPLAN_TRY(out.search, find_largest_fitting(at_batch, budget, cap));
  out.search.grad_accum = search_accum;
  MEMPLAN_TRY(Choice choice, choose_batch(c, req, peaks, budget, out.search.largest));
  out.max_micro_batch = choice.largest_micro_batch;
  out.limited_by = !out.search.hit_cap ? PlanLimit::kBudget
                    : target_caps        ? PlanLimit::kTargetGlobalBatch
                                         : PlanLimit::kMaxMicroBatch;
  out.target_source = req.target_source;
  out.fits_largest = out.search.largest;
  out.fits_next_peak = out.search.next_peak;
  if (target_caps && out.search.hit_cap) {
    // The target stopped the search: how far the budget alone reaches, stated whatever the policy.
    MEMPLAN_TRY(auto free_search, find_largest_fitting(at_batch, budget, req.max_micro_batch));
    out.fits_largest = free_search.largest;
    out.fits_next_peak = free_search.next_peak;
  }
  if (out.max_micro_batch < out.search.largest) {
    // GRPO: the larger micro-batches fit only at an accumulation TRL rejects or that misses
    // the target; the next one's peak is what it needs at its accumulation.
    out.limited_by = PlanLimit::kBudget;
    const auto accums = grpo_accums(c, out.max_micro_batch + 1, req.target_global_batch, dp);
    if (!accums.empty()) {
      MEMPLAN_TRY(const Bytes np, peaks(out.max_micro_batch + 1, accums.front()));
      out.search.next_peak = bounded(np);
    }
  }

  Recommendation& rec = out.recommendation;
  rec.fits = choice.fits;
  rec.seq_len = seq;
  rec.budget = budget;
  rec.choice = choice.why;
  rec.largest = choice.largest;
  const std::int64_t config_accum = c.grad_accum;  // nothing fits: micro-batch 1 as the config has it
  if (rec.fits) {
    rec.batch = choice.batch;
    rec.peak = choice.peak;
  } else {
    // Micro-batch 1 with the accumulation the target (or TRL's divisibility) asks for.
    const std::int64_t accum =
        c.method == Method::kGrpo ? grpo_accums(c, 1, req.target_global_batch, dp).front()
        : req.target_global_batch ? best_grad_accum(1, *req.target_global_batch, dp)
                                  : config_accum;
    rec.batch = make_batch(1, accum, dp, req.target_global_batch);
    MEMPLAN_TRY(rec.peak, peaks(1, accum));
    // Only the margin rejects it: it fits what the GPU leaves after the headroom.
    rec.margin_only = rec.peak <= req.budget.capacity - req.budget.headroom;
  }
  rec.utilization = utilization(rec.peak, req.budget.capacity);
  if (rec.fits && rec.peak < kUnbounded) {
    if (const auto r = est.replay_allocator(rec.batch.micro_batch, seq)) {
      rec.reserved = Bytes::of(
          sim::reserved_for_peak(rec.peak.count(), r->peak_reserved.count() - r->peak_allocated.count()));
    }
  }
  if (c.method == Method::kGrpo) out.generation = generation_batch(c, rec.batch.micro_batch, rec.batch.grad_accum);

  // Tiers: the same choice under lower limits, on the room above the fixed memory.
  MEMPLAN_TRY(out.fixed, fixed_memory(peaks, rec.batch.grad_accum));
  const Bytes room = budget > out.fixed ? budget - out.fixed : Bytes::zero();
  const auto make_tiers = [&](const PlanRequest& tr, std::int64_t largest) -> Result<std::vector<Tier>> {
    std::vector<Tier> tiers;
    for (const TierSpec& spec : default_tiers()) {
      Tier t;
      t.name = spec.name;
      t.room_fraction = spec.percent / 100.0;
      // floor(room x percent / 100) without overflow
      const std::int64_t r = room.count();
      t.limit = std::min(budget, out.fixed + Bytes::of(r / 100 * spec.percent + r % 100 * spec.percent / 100));
      Choice tc;
      if (largest > 0) {
        MEMPLAN_TRY(auto fr, find_largest_fitting(at_batch, t.limit, largest));
        MEMPLAN_TRY(tc, choose_batch(c, tr, peaks, t.limit, fr.largest));
      }
      t.fits = tc.fits;
      if (t.fits) {
        t.batch = tc.batch;
        t.peak = tc.peak;
      } else {
        t.batch = rec.batch;
        t.batch.micro_batch = 1;
        MEMPLAN_TRY(t.peak, peaks(1, t.batch.grad_accum));
      }
      t.utilization = utilization(t.peak, req.budget.capacity);
      tiers.push_back(std::move(t));
    }
    return tiers;
  };
  MEMPLAN_TRY(out.tiers, make_tiers(req, out.search.largest));
  // Two tiers (or all three) on one micro-batch say one choice twice: the tiers without the target show the
  // choices in between (seed 001: balanced = aggressive = 32 of a global batch of 256).
  const auto any_same = [](const std::vector<Tier>& ts) {
    for (std::size_t i = 1; i < ts.size(); ++i)
      if (ts[i].fits == ts[i - 1].fits && ts[i].batch.micro_batch == ts[i - 1].batch.micro_batch) return true;
    return false;
  };
  if (rec.fits && req.target_global_batch && any_same(out.tiers) &&
      out.fits_largest > out.tiers.back().batch.micro_batch) {
    PlanRequest free_req = req;
    free_req.target_global_batch.reset();
    MEMPLAN_TRY(auto free_tiers, make_tiers(free_req, out.fits_largest));
    if (!any_same(free_tiers)) out.free_tiers = std::move(free_tiers);
  }

  if (!rec.fits) {
    SuggestContext ctx{est.model(), budget, Mode::kBatch, 1, seq, req.max_micro_batch, &estimators,
                       req.budget.unified, req.budget.vllm_reserve};
    TrainingConfig at = c;
    at.grad_accum = config_accum;
    MEMPLAN_TRY(auto s, suggest(at, ctx));
    out.suggestions = std::move(s.ranked);
    out.combination = std::move(s.combination);
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Plan

Result<Plan> plan(const Estimator& estimator, const PlanRequest& request) {
  try {
    return plan_impl(estimator, request);
  } catch (const SizeOverflow& e) {
    return make_error(ErrorCode::kOverflow, e.what(), "the batch sizes or GPU counts are far too large");
  }
}

Result<Plan> plan(const ModelSpec& model, const TrainingConfig& config, const PlanRequest& request) {
  MEMPLAN_TRY(auto est, Estimator::create(model, config));
  return plan(est, request);
}

Result<SeqLenPlan> solve_seq_len(const ModelSpec& model, const TrainingConfig& config, const SeqLenRequest& request) {
  if (auto s = check_budget(request.budget); !s) return s.error();
  if (config.method == Method::kGrpo)
    return make_error(ErrorCode::kUnsupported, "--solve seq-len does not apply to grpo",
                      "GRPO sequences are --max-prompt-length + --max-completion-length; plan the batch instead");
  if (request.max_seq_len < 0 || request.max_seq_len > kMaxSeqLen)
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("max-seq-len = {} is out of range (1 to {})", request.max_seq_len, kMaxSeqLen));
  try {
    // A vision-language model's sequences hold their image tokens: the search starts there, and
    // the estimator is built at a length that holds them.
    const std::int64_t image_tokens = image_tokens_per_sequence(model, config);
    TrainingConfig at = config;
    at.seq_len = std::max(config.seq_len, image_tokens);
    MEMPLAN_TRY(auto est, Estimator::create(model, at));
    SeqLenPlan out;
    out.budget = request.budget;
    out.micro_batch = config.micro_batch;
    out.grad_accum = config.grad_accum;
    out.data_parallel = config.parallel.data_parallel_size();
    out.global_batch = current_global_batch(config);
    out.cap = request.max_seq_len > 0                  ? request.max_seq_len
              : model.max_position_embeddings > 0 ? std::min(model.max_position_embeddings, kMaxSeqLen)
                                                  : kMaxSeqLen;
    const Bytes budget = request.budget.budget();
    const PeakFn at_seq = [&](std::int64_t s) { return est.peak_bytes(config.micro_batch, s); };
    MEMPLAN_TRY(out.search, find_largest_fitting(at_seq, budget, out.cap));
    out.seq_len = out.search.largest;
    out.fits = out.seq_len > 0 && out.seq_len >= image_tokens;
    out.peak = out.search.peak;
    out.utilization = utilization(out.peak, request.budget.capacity);
    if (!out.fits) {
      EstimatorCache estimators(est);
      SuggestContext ctx{model, budget, Mode::kSeqLen, config.micro_batch, 1, out.cap, &estimators,
                         request.budget.unified, Bytes::zero()};
      MEMPLAN_TRY(auto s, suggest(at, ctx));
      out.suggestions = std::move(s.ranked);
      out.combination = std::move(s.combination);
    }
    return out;
  } catch (const SizeOverflow& e) {
    return make_error(ErrorCode::kOverflow, e.what(), "the sequence lengths or GPU counts are far too large");
  }
}

// ---------------------------------------------------------------------------------------------
// Sweep

Result<Sweep> sweep(const Estimator& est, const SweepRequest& req) {
  if (auto s = check_budget(req.budget); !s) return s.error();
  if (req.micro_batches.empty() || req.seq_lens.empty())
    return make_error(ErrorCode::kInvalidArgument, "a sweep needs at least one batch size and one sequence length");
  const auto nb = static_cast<std::int64_t>(req.micro_batches.size());
  const auto ns = static_cast<std::int64_t>(req.seq_lens.size());
  if (nb > kMaxSweepPoints / ns)
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{} batch sizes x {} sequence lengths is more than {} points", nb, ns, kMaxSweepPoints),
                      "sweep a coarser grid, e.g. --batches 1-1024:x2");
  if (req.target_global_batch && (*req.target_global_batch < 1 || *req.target_global_batch > kMaxTargetGlobalBatch))
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("target-global-batch = {} is out of range (1 to {})", *req.target_global_batch,
                                  kMaxTargetGlobalBatch));
  const TrainingConfig& c = est.config();
  const int dp = c.parallel.data_parallel_size();
  const Bytes budget = req.budget.budget();
  const Bytes capacity = req.budget.capacity;

  Sweep out;
  out.budget = req.budget;
  out.micro_batches = req.micro_batches;
  out.seq_lens = req.seq_lens;
  out.points.resize(static_cast<std::size_t>(nb * ns));
  std::vector<std::int64_t> accum(req.micro_batches.size(), c.grad_accum);
  if (req.target_global_batch)
    for (std::size_t i = 0; i < accum.size(); ++i)
      accum[i] = best_grad_accum(req.micro_batches[i], *req.target_global_batch, dp);
  SweepPoint* p = out.points.data();
  for (const std::int64_t s : req.seq_lens) {
    for (std::size_t i = 0; i < req.micro_batches.size(); ++i, ++p) {
      // At each point's own accumulation (later micro-batches hold the earlier gradients).
      auto r = est.peak_bytes(req.micro_batches[i], s, accum[i]);
      Bytes peak;
      if (r) peak = *r;
      else if (r.error().code == ErrorCode::kOverflow) peak = kUnbounded;
      else return r.error();
      p->micro_batch = req.micro_batches[i];
      p->grad_accum = accum[i];
      p->seq_len = s;
      p->peak = peak;
      p->status = peak <= budget ? SweepStatus::kFits : peak <= capacity ? SweepStatus::kOverBudget : SweepStatus::kOom;
    }
  }
  return out;
}

Result<Sweep> sweep(const ModelSpec& model, const TrainingConfig& config, const SweepRequest& request) {
  MEMPLAN_TRY(auto est, Estimator::create(model, config));
  return sweep(est, request);
}

// ---------------------------------------------------------------------------------------------
// Grid specs

namespace {

constexpr std::int64_t kMaxGridValues = 1'000'000;

std::string grid_hint() { return "write numbers such as 1,2,4,8 or ranges such as 1-64:x2 or 512-4096:+512"; }

}  // namespace

Result<std::vector<std::int64_t>> parse_grid(std::string_view spec, std::string_view what, std::int64_t max_value) {
  const std::string all = trim(spec);
  if (all.empty()) return make_error(ErrorCode::kInvalidArgument, fmt::format("{}: empty list", what), grid_hint());
  std::vector<std::int64_t> out;
  auto in_range = [&](std::int64_t v) -> Status {
    if (v < 1 || v > max_value)
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}: {} is out of range (1 to {})", what, v, max_value));
    return Ok{};
  };
  auto invalid_item = [&](const std::string& item) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("{}: invalid item \"{}\" in \"{}\"", what, item, all),
                      grid_hint());
  };
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = all.find(',', start);
    const std::string item = trim(std::string_view(all).substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (item.empty()) return invalid_item(item);
    const std::size_t dash = item.find('-', 1);
    if (dash == std::string::npos) {
      auto v = parse_int(item, what);
      if (!v) return invalid_item(item);
      if (auto s = in_range(*v); !s) return s.error();
      out.push_back(*v);
    } else {
      const std::size_t colon = item.find(':', dash);
      auto a = parse_int(std::string_view(item).substr(0, dash), what);
      auto b = parse_int(std::string_view(item).substr(dash + 1, colon == std::string::npos ? std::string::npos : colon - dash - 1), what);
      if (!a || !b) return invalid_item(item);
      bool multiply = false;
      std::int64_t step = 1;
      if (colon != std::string::npos) {
        std::string st = trim(std::string_view(item).substr(colon + 1));
        if (!st.empty() && (st[0] == 'x' || st[0] == 'X' || st[0] == '*')) {
          multiply = true;
          st.erase(0, 1);
        } else if (!st.empty() && st[0] == '+') {
          st.erase(0, 1);
        }
        auto k = parse_int(st, what);
        if (!k || *k < (multiply ? 2 : 1) || *k > max_value)
          return make_error(ErrorCode::kInvalidArgument,
                            fmt::format("{}: invalid step \"{}\" in \"{}\"", what, item.substr(colon), item),
                            "use :xK (K >= 2) to multiply or :+K (K >= 1) to add");
        step = *k;
      }
      if (*b < *a)
        return make_error(ErrorCode::kInvalidArgument, fmt::format("{}: range \"{}\" ends before it starts", what, item));
      if (auto s = in_range(*a); !s) return s.error();
      if (auto s = in_range(*b); !s) return s.error();
      for (std::int64_t v = *a; v <= *b; v = multiply ? v * step : v + step) {
        if (static_cast<std::int64_t>(out.size()) >= kMaxGridValues)
          return make_error(ErrorCode::kInvalidArgument,
                            fmt::format("{}: \"{}\" has more than {} values", what, all, kMaxGridValues));
        out.push_back(v);
      }
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// ---------------------------------------------------------------------------------------------

std::string to_string(ChangeKind k) {
  switch (k) {
    case ChangeKind::kGradientCheckpointing: return "gradient_checkpointing";
    case ChangeKind::kOptimizer8bit: return "optimizer_8bit";
    case ChangeKind::kLora: return "lora";
    case ChangeKind::kQlora: return "qlora";
    case ChangeKind::kShorterSeqLen: return "shorter_seq_len";
    case ChangeKind::kShorterCompletion: return "shorter_completion";
    case ChangeKind::kVllmServer: return "vllm_server";
    case ChangeKind::kZero3: return "zero3";
    case ChangeKind::kCpuOffloadOptimizer: return "cpu_offload_optimizer";
    case ChangeKind::kMoreGpus: return "more_gpus";
  }
  return "?";
}

std::string to_string(PlanLimit l) {
  switch (l) {
    case PlanLimit::kBudget: return "budget";
    case PlanLimit::kMaxMicroBatch: return "max_micro_batch";
    case PlanLimit::kTargetGlobalBatch: return "target_global_batch";
  }
  return "?";
}

std::string to_string(BatchChoice c) {
  switch (c) {
    case BatchChoice::kLargest: return "largest";
    case BatchChoice::kExact: return "exact";
    case BatchChoice::kWithinTolerance: return "within_tolerance";
    case BatchChoice::kNearest: return "nearest";
    case BatchChoice::kGrpoDivisible: return "grpo_divisible";
    case BatchChoice::kNone: return "none";
  }
  return "?";
}

std::string to_string(SweepStatus s) {
  switch (s) {
    case SweepStatus::kFits: return "fits";
    case SweepStatus::kOverBudget: return "over_budget";
    case SweepStatus::kOom: return "oom";
  }
  return "?";
}

}  // namespace memplan

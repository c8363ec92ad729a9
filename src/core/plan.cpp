#include "memplan/plan.hpp"

#include <algorithm>
#include <memory>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

#include <fmt/format.h>

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
  auto size = parse_size(t);
  if (!size) return make_error(ErrorCode::kInvalidArgument, fmt::format("invalid safety margin: \"{}\"", t), suggestion);
  return *size;
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
  std::optional<GlobalBatch> closest;
  for (std::int64_t m = upper; m >= 1; --m) {
    GlobalBatch g = make(m);
    const std::int64_t err = std::llabs(g.diff());
    if (static_cast<double>(err) <= allowed) return g;
    if (!closest || err < std::llabs(closest->diff())) closest = g;
  }
  return *closest;
}

// ---------------------------------------------------------------------------------------------
// Tiers

std::vector<TierSpec> default_tiers() {
  // docs/plan.md#tiers
  return {{"safe", 70}, {"balanced", 85}, {"aggressive", 95}};
}

namespace {

// ---------------------------------------------------------------------------------------------
// Suggestions

enum class Mode { kBatch, kSeqLen };

// Where suggestions are evaluated and what "best after the change" searches for.
// The estimators of one plan's suggestions. Trying changes revisits the same configs (the
// search for a GPU count, then the peak and the best micro-batch after the change, then the
// combination), and an estimator answers for every (b, s), so each config is built once.
// Keys ignore the micro-batch and sequence length, which only say where to evaluate.
class EstimatorCache {
 public:
  EstimatorCache(const ModelSpec& model, const Estimator* seed) : model_(model) {
    if (seed != nullptr) entries_.push_back({key(seed->config()), nullptr, seed});
  }

  Result<const Estimator*> get(const TrainingConfig& c) {
    const TrainingConfig k = key(c);
    for (const auto& e : entries_)
      if (e.config == k) return e.estimator;
    MEMPLAN_TRY(auto est, Estimator::create(model_, c));
    auto owned = std::make_unique<Estimator>(std::move(est));
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
  const ModelSpec& model_;
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
};

struct Change {
  TrainingConfig config;
  std::string description;
  std::vector<std::string> flags;
};

Result<Bytes> peak_at(const SuggestContext& ctx, const TrainingConfig& c, std::int64_t b, std::int64_t s) {
  MEMPLAN_TRY(const Estimator* est, ctx.estimators->get(c));
  return saturating(est->peak_bytes(b, s));
}

// The largest micro-batch (batch mode) or sequence (seq-len mode) that fits after a change.
Result<std::int64_t> best_after(const SuggestContext& ctx, const TrainingConfig& c) {
  MEMPLAN_TRY(const Estimator* est, ctx.estimators->get(c));
  PeakFn fn;
  if (ctx.mode == Mode::kBatch)
    fn = [&](std::int64_t b) { return est->peak_bytes(b, c.seq_len); };
  else
    fn = [&](std::int64_t s) { return est->peak_bytes(ctx.micro_batch, s); };
  MEMPLAN_TRY(auto r, find_largest_fitting(fn, ctx.budget, ctx.cap));
  return r.largest;
}

bool is_8bit_optimizer(OptimizerKind k) {
  return k == OptimizerKind::kAdamW8bit || k == OptimizerKind::kPagedAdamW8bit || k == OptimizerKind::kLion8bit;
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
  if (per_node < 1 || n % per_node != 0 || n % p.tensor_parallel != 0) return false;
  const int nodes = n / per_node;
  if (per_node != p.num_gpus) flags.push_back(fmt::format("--num-gpus {}", per_node));
  if (nodes != p.nodes) flags.push_back(fmt::format("--nodes {}", nodes));
  p.num_gpus = per_node;
  p.nodes = nodes;
  return true;
}

// The fewest GPUs among `counts` at which the config fits at the evaluated point; the last count
// when none does. nullopt when no count is possible.
Result<std::optional<Change>> fewest_gpus(const SuggestContext& ctx, const Change& base, const std::vector<int>& counts) {
  std::optional<Change> last;
  for (int n : counts) {
    Change ch = base;
    if (!set_world(ch.config, n, ch.flags)) continue;
    auto p = peak_at(ctx, ch.config, ctx.micro_batch, ctx.seq_len);
    if (!p) continue;  // a layout the engine rejects is not a suggestion
    ch.description = fmt::format(fmt::runtime(base.description), n);
    last = std::move(ch);
    if (*p <= ctx.budget) break;
  }
  return last;
}

bool fsdp_family(ShardingStrategy s) {
  return s == ShardingStrategy::kFsdpFullShard || s == ShardingStrategy::kFsdpShardGradOp ||
         s == ShardingStrategy::kFsdpHybridShard;
}

// The config after applying `kind` to `c`; nullopt when the change is already in the config or
// does not apply.
Result<std::optional<Change>> make_change(ChangeKind kind, const TrainingConfig& c, const SuggestContext& ctx) {
  Change ch{c, {}, {}};
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
      if (ctx.mode != Mode::kBatch || c.seq_len <= 1) return std::optional<Change>{};
      MEMPLAN_TRY(const Estimator* est, ctx.estimators->get(c));
      PeakFn fn = [&](std::int64_t s) { return est->peak_bytes(ctx.micro_batch, s); };
      MEMPLAN_TRY(auto r, find_largest_fitting(fn, ctx.budget, c.seq_len - 1));
      if (r.largest == 0) return std::optional<Change>{};
      n.seq_len = r.largest;
      ch.description = fmt::format("shorter sequences: {} tokens, the longest that fits", r.largest);
      ch.flags = {fmt::format("--seq-len {}", r.largest)};
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
      if (c.parallel.offload_optimizer) return std::optional<Change>{};
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
    ChangeKind::kGradientCheckpointing, ChangeKind::kOptimizer8bit, ChangeKind::kLora,
    ChangeKind::kQlora,                 ChangeKind::kShorterSeqLen, ChangeKind::kZero3,
    ChangeKind::kCpuOffloadOptimizer,   ChangeKind::kMoreGpus,
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

Result<Suggestions> suggest(const TrainingConfig& config, const SuggestContext& ctx) {
  Suggestions out;
  MEMPLAN_TRY(const Bytes base, peak_at(ctx, config, ctx.micro_batch, ctx.seq_len));
  for (ChangeKind kind : kAllChanges) {
    MEMPLAN_TRY(auto ch, make_change(kind, config, ctx));
    if (!ch) continue;
    // Shorter sequences are evaluated at their own length; everything else at the same point.
    const std::int64_t s = kind == ChangeKind::kShorterSeqLen ? ch->config.seq_len : ctx.seq_len;
    auto p = peak_at(ctx, ch->config, ctx.micro_batch, s);
    if (!p || *p >= base) continue;  // the engine cannot model it, or it saves nothing
    Suggestion sg;
    sg.kind = kind;
    sg.description = std::move(ch->description);
    sg.flags = std::move(ch->flags);
    sg.config = std::move(ch->config);
    sg.peak = *p;
    sg.saved = base - *p;
    sg.fits = *p <= ctx.budget;
    if (sg.fits) {
      MEMPLAN_TRY(sg.best, best_after(ctx, sg.config));
    }
    out.ranked.push_back(std::move(sg));
  }
  std::stable_sort(out.ranked.begin(), out.ranked.end(),
                   [](const Suggestion& a, const Suggestion& b) { return a.saved > b.saved; });

  // When no single change fits: apply them together, in ranked order, while each still helps.
  const bool any_fits = std::any_of(out.ranked.begin(), out.ranked.end(), [](const Suggestion& s) { return s.fits; });
  if (any_fits) return out;
  Combination comb;
  comb.config = config;
  comb.peak = base;
  for (const Suggestion& s : out.ranked) {
    if (s.kind == ChangeKind::kShorterSeqLen) continue;  // changes the data, not the setup
    if (s.kind == ChangeKind::kMoreGpus &&
        std::find(comb.kinds.begin(), comb.kinds.end(), ChangeKind::kZero3) != comb.kinds.end())
      continue;  // ZeRO-3 already chose its GPU count
    MEMPLAN_TRY(auto ch, make_change(s.kind, comb.config, ctx));
    if (!ch) continue;
    auto p = peak_at(ctx, ch->config, ctx.micro_batch, ctx.seq_len);
    if (!p || *p >= comb.peak) continue;
    comb.config = std::move(ch->config);
    comb.peak = *p;
    comb.kinds.push_back(s.kind);
    merge_flags(comb.flags, ch->flags);
    if (comb.peak <= ctx.budget) break;
  }
  if (comb.kinds.size() >= 2) {
    comb.fits = comb.peak <= ctx.budget;
    if (comb.fits) {
      MEMPLAN_TRY(comb.best, best_after(ctx, comb.config));
    }
    out.combination = std::move(comb);
  }
  return out;
}

GlobalBatch batch_for(std::int64_t micro, const TrainingConfig& c, const PlanRequest& req) {
  const int dp = c.parallel.data_parallel_size();
  if (req.target_global_batch)
    return match_global_batch(micro, *req.target_global_batch, dp, req.global_batch_tolerance);
  GlobalBatch g;
  g.micro_batch = micro;
  g.grad_accum = c.grad_accum;
  g.data_parallel = dp;
  g.global_batch = checked_mul(checked_mul(micro, c.grad_accum), dp);
  return g;
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

Result<Plan> plan_impl(const Estimator& est, const PlanRequest& req) {
  if (auto s = check_request(req); !s) return s.error();
  const TrainingConfig& c = est.config();
  const std::int64_t seq = c.seq_len;
  const int dp = c.parallel.data_parallel_size();
  const Bytes budget = req.budget.budget();

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
  const PeakFn at_batch = [&](std::int64_t b) { return est.peak_bytes(b, seq); };
  MEMPLAN_TRY(out.search, find_largest_fitting(at_batch, budget, cap));
  out.max_micro_batch = out.search.largest;
  out.limited_by = !out.search.hit_cap ? PlanLimit::kBudget
                    : target_caps        ? PlanLimit::kTargetGlobalBatch
                                         : PlanLimit::kMaxMicroBatch;

  Recommendation& rec = out.recommendation;
  rec.fits = out.max_micro_batch > 0;
  rec.batch = batch_for(std::max<std::int64_t>(1, out.max_micro_batch), c, req);
  rec.seq_len = seq;
  rec.budget = budget;
  if (rec.batch.micro_batch == out.search.largest || !rec.fits) {
    rec.peak = out.search.peak;
  } else {
    MEMPLAN_TRY(rec.peak, saturating(est.peak_bytes(rec.batch.micro_batch, seq)));
  }
  rec.utilization = utilization(rec.peak, req.budget.capacity);

  for (const TierSpec& spec : default_tiers()) {
    Tier t;
    t.name = spec.name;
    t.max_utilization = spec.percent / 100.0;
    // floor(capacity x percent / 100) without overflow or rounding
    const std::int64_t cap_bytes = req.budget.capacity.count();
    const auto frac = Bytes::of(cap_bytes / 100 * spec.percent + cap_bytes % 100 * spec.percent / 100);
    t.limit = std::min(frac, budget);
    std::int64_t largest = 0;
    if (out.max_micro_batch > 0) {
      MEMPLAN_TRY(auto r, find_largest_fitting(at_batch, t.limit, out.max_micro_batch));
      largest = r.largest;
    }
    t.fits = largest > 0;
    t.batch = batch_for(std::max<std::int64_t>(1, largest), c, req);
    MEMPLAN_TRY(t.peak, saturating(est.peak_bytes(t.batch.micro_batch, seq)));
    t.utilization = utilization(t.peak, req.budget.capacity);
    out.tiers.push_back(std::move(t));
  }

  if (!rec.fits) {
    EstimatorCache estimators(est.model(), &est);
    SuggestContext ctx{est.model(), budget, Mode::kBatch, 1, seq, req.max_micro_batch, &estimators};
    MEMPLAN_TRY(auto s, suggest(c, ctx));
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
    MEMPLAN_TRY(auto est, Estimator::create(model, config));
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
    out.fits = out.seq_len > 0;
    out.peak = out.search.peak;
    out.utilization = utilization(out.peak, request.budget.capacity);
    if (!out.fits) {
      EstimatorCache estimators(model, &est);
      SuggestContext ctx{model, budget, Mode::kSeqLen, config.micro_batch, 1, out.cap, &estimators};
      MEMPLAN_TRY(auto s, suggest(config, ctx));
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
      auto r = est.peak_bytes(req.micro_batches[i], s);
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

std::string to_string(SweepStatus s) {
  switch (s) {
    case SweepStatus::kFits: return "fits";
    case SweepStatus::kOverBudget: return "over_budget";
    case SweepStatus::kOom: return "oom";
  }
  return "?";
}

}  // namespace memplan

#include "io/inputs.hpp"

#include <cmath>
#include <cstdint>

#include <fmt/format.h>

namespace memplan::io {

std::string Origin::to_string() const {
  switch (kind) {
    case OriginKind::kDefault: return note.empty() ? "default" : fmt::format("default ({})", note);
    case OriginKind::kFlag: return fmt::format("flag {}", note);
    case OriginKind::kFile:
      // A value found by reading an unknown framework's config by meaning (config/frameworks/inferred.cpp).
      if (note.rfind("inferred", 0) == 0) return fmt::format("{} ({})", loc.to_string(), note);
      return loc.to_string();
    case OriginKind::kDetected: return fmt::format("detected ({})", note);
    case OriginKind::kDerived: return fmt::format("derived ({})", note);
  }
  return "?";
}

namespace {

struct RangeCheck {
  const char* input;  // the origins key
  double value;       // compared in double: every bound is exact in it
  bool integer;       // then `exact` holds the value (an int64 near 2^63 is not exact as a double)
  double lo, hi;
  bool lo_open, hi_open;  // the bound itself is outside the range
  const char* range;      // as the message says it
  std::int64_t exact = 0;
};

}  // namespace

Status check_inputs(const ResolvedInputs& in) {
  const TrainingConfig& c = in.config;
  const double inf = HUGE_VAL;
  auto d = [](auto v) { return static_cast<double>(v); };
  auto i = [](auto v) { return static_cast<std::int64_t>(v); };
  // The integer bounds are validate()'s (core/training.cpp): far inside int64 for every product.
  const RangeCheck checks[] = {
      {"batch", d(c.micro_batch), true, 1, 1 << 20, false, false, "1 to 1048576", i(c.micro_batch)},
      {"seq_len", d(c.seq_len), true, 1, 1 << 24, false, false, "1 to 16777216", i(c.seq_len)},
      {"grad_accum", d(c.grad_accum), true, 1, 1 << 24, false, false, "1 to 16777216", i(c.grad_accum)},
      {"lora_r", d(c.lora.r), true, 1, 65536, false, false, "1 to 65536", i(c.lora.r)},
      {"lora_alpha", c.lora.alpha, false, 0, inf, true, true, "> 0"},
      {"lora_dropout", c.lora.dropout, false, 0, 1, false, true, "0 <= p < 1"},
      {"num_gpus", d(c.parallel.num_gpus), true, 1, 1024, false, false, "1 to 1024", i(c.parallel.num_gpus)},
      {"nodes", d(c.parallel.nodes), true, 1, 65536, false, false, "1 to 65536", i(c.parallel.nodes)},
      {"num_generations", d(c.grpo.num_generations), true, 1, 1 << 20, false, false, "1 to 1048576",
       i(c.grpo.num_generations)},
      {"max_prompt_length", d(c.grpo.max_prompt_length), true, 1, 1 << 24, false, false, "1 to 16777216",
       i(c.grpo.max_prompt_length)},
      {"max_completion_length", d(c.grpo.max_completion_length), true, 1, 1 << 24, false, false, "1 to 16777216",
       i(c.grpo.max_completion_length)},
      {"beta", c.grpo.beta, false, 0, inf, false, true, ">= 0"},
      {"temperature", c.grpo.temperature, false, 0, inf, true, true, "> 0"},
      {"vllm_gpu_memory_utilization", c.grpo.vllm_gpu_memory_utilization, false, 0, 1, true, true, "0 < x < 1"},
  };
  for (const auto& k : checks) {
    // Written so that NaN fails: every comparison with it is false.
    const bool above_lo = k.lo_open ? k.value > k.lo : k.value >= k.lo;
    const bool below_hi = k.hi_open ? k.value < k.hi : k.value <= k.hi;
    if (above_lo && below_hi && std::isfinite(k.value)) continue;
    const auto it = in.origins.find(k.input);
    const Origin o = it != in.origins.end() ? it->second : Origin{};
    std::string name = k.input;
    std::string from;
    if ((o.kind == OriginKind::kFlag || o.kind == OriginKind::kFile) && !o.note.empty()) name = o.note;
    if (o.kind == OriginKind::kDefault || o.kind == OriginKind::kDerived || o.kind == OriginKind::kDetected)
      from = " (" + o.to_string() + ")";
    const std::string value = !std::isfinite(k.value) ? fmt::format("{}", k.value)
                              : k.integer             ? fmt::format("{}", k.exact)
                                                      : fmt::format("{:g}", k.value);
    Error e = make_error(ErrorCode::kInvalidArgument,
                         std::isfinite(k.value)
                             ? fmt::format("{} = {} is out of range ({}){}", name, value, k.range, from)
                             : fmt::format("{} = {} is not a finite number ({}){}", name, value, k.range, from));
    if (o.kind == OriginKind::kFile) {
      e.code = ErrorCode::kInvalidConfig;
      e.where = o.loc;
    }
    return e;
  }
  return Ok{};
}

void apply_global_batch(ResolvedInputs& in) {
  if (!in.global_batch) return;
  ResolvedInputs::GlobalBatch& g = *in.global_batch;
  if (!g.warning.empty()) std::erase(in.warnings, g.warning);
  g.warning.clear();
  const auto accum = in.origins.find("grad_accum");
  if (accum != in.origins.end() && accum->second.kind == OriginKind::kFlag) return;
  TrainingConfig& c = in.config;
  const ParallelConfig& p = c.parallel;
  // Not world_size(): GPUs and nodes are range-checked later, and their product may overflow int.
  const std::int64_t world = static_cast<std::int64_t>(std::max(1, p.num_gpus)) * std::max(1, p.nodes);
  const std::int64_t mp = static_cast<std::int64_t>(std::max(1, p.tensor_parallel)) * std::max(1, p.pipeline_parallel) *
                          std::max(1, p.context_parallel);
  // A GPU count the model-parallel sizes do not divide is the layout's error, reported by its check.
  if (world % mp != 0) return;
  const std::int64_t dp = world / mp;
  const std::int64_t per_step = c.micro_batch > 0 && c.micro_batch <= (std::int64_t{1} << 32) ? c.micro_batch * dp : 0;
  const std::string where = g.loc.to_string();
  if (per_step > 0 && g.value % per_step == 0 && g.value / per_step <= (1 << 24)) {
    c.grad_accum = g.value / per_step;
    in.set_origin("grad_accum", Origin{OriginKind::kDerived, {},
                                       fmt::format("{} {} at {} / (micro-batch {} x data-parallel {})", g.key, g.value,
                                                   where, c.micro_batch, dp)});
    return;
  }
  g.warning = fmt::format("{}: {} = {} is not a multiple of micro-batch {} x data-parallel {} ({} GPU(s) / tensor x "
                          "pipeline x context {}); memplan estimates {} micro-batch(es) per step",
                          where, g.key, g.value, c.micro_batch, dp, world, mp, c.grad_accum);
  in.warnings.push_back(g.warning);
}

}  // namespace memplan::io

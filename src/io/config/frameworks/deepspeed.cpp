// DeepSpeed JSON, on its own or next to a trainer config that points at it (`deepspeed:` in
// HF/TRL, axolotl and LLaMA-Factory YAML). Values may be "auto" (filled in from the trainer's
// arguments); numbers must agree with the trainer's, which refuses mismatches at start-up.
#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

#include <tuple>

namespace memplan::io {

namespace {

bool is_auto(const YamlNode* n) { return n != nullptr && n->is_scalar() && to_lower(n->value) == "auto"; }

// A DeepSpeed integer that must match the trainer's value of `input` (or, primary, sets it).
Result<std::optional<std::int64_t>> read_matching(Mapper& m, bool primary, std::string_view key,
                                                  const std::string& input, std::int64_t& field) {
  const YamlNode* n = m.node(key);
  if (n == nullptr || n->is_null() || is_auto(n)) return std::optional<std::int64_t>{};
  MEMPLAN_TRY(auto v, m.integer(key));
  if (!v) return v;
  if (primary) {
    field = *v;
    m.from_file(input, *n, key);
  } else if (*v != field) {
    const auto& o = m.out().inputs.origins;
    auto it = o.find(input);
    const std::string from = it != o.end() ? it->second.to_string() : "default";
    m.warn_at(*n, fmt::format("{} = {} contradicts the trainer's {} = {} ({}); the trainer refuses to start with "
                              "both; memplan uses {}",
                              key, *v, input, field, from, field));
    // A start-up refusal, not a style note: check fails the file on it (issue 34).
    m.out().diagnostics.back().code = ErrorCode::kConflict;
  }
  return v;
}

// One zero_optimization buffer size (elements; docs/formulas.md#deepspeed-buffers): a number
// (DeepSpeed's pp_int, so 5e8 is 500000000) or, where transformers fills it in, "auto". Either
// spelling of a ZeRO-3 key (`stage3_prefetch_bucket_size` or its alias `prefetch_bucket_size`).
Status read_zero_size(Mapper& m, std::initializer_list<std::string_view> keys, const std::string& input,
                      std::int64_t& field, bool* auto_flag) {
  std::string which;
  const YamlNode* n = m.first_of(keys, &which);
  if (n == nullptr || n->is_null()) return Ok{};
  if (is_auto(n)) {
    if (auto_flag == nullptr) {
      m.warn_at(*n, fmt::format("{} = \"auto\": transformers fills in only reduce_bucket_size, "
                                "stage3_prefetch_bucket_size and stage3_param_persistence_threshold; memplan "
                                "uses DeepSpeed's default {}",
                                split_key_path(which).back(), field));
      return Ok{};
    }
    *auto_flag = true;
    m.from_file(input, *n, which);
    return Ok{};
  }
  MEMPLAN_TRY(auto v, m.number(which));
  if (!v) return Ok{};
  // DeepSpeed's Field(ge=0); past 2^50 elements no GPU holds the buffer.
  if (!(*v >= 0 && *v <= 1e15))
    return m.error_at(*n, ErrorCode::kInvalidConfig,
                      fmt::format("{} = {} must be between 0 and 1e15 elements", split_key_path(which).back(),
                                  n->value));
  field = static_cast<std::int64_t>(*v);
  if (auto_flag != nullptr) *auto_flag = false;
  m.from_file(input, *n, which);
  return Ok{};
}

// The zero_optimization keys that size DeepSpeed's buffers; what is absent keeps DeepSpeed's
// default (ZeroConfig).
Status read_zero_buffers(Mapper& m, ZeroConfig& z) {
  MEMPLAN_IO_CHECK(read_zero_size(m, {"zero_optimization.reduce_bucket_size"}, "zero.reduce_bucket_size",
                                   z.reduce_bucket_size, &z.reduce_bucket_auto));
  MEMPLAN_IO_CHECK(read_zero_size(m, {"zero_optimization.allgather_bucket_size"}, "zero.allgather_bucket_size",
                                   z.allgather_bucket_size, nullptr));
  MEMPLAN_IO_CHECK(read_zero_size(
      m, {"zero_optimization.stage3_prefetch_bucket_size", "zero_optimization.prefetch_bucket_size"},
      "zero.stage3_prefetch_bucket_size", z.prefetch_bucket_size, &z.prefetch_bucket_auto));
  MEMPLAN_IO_CHECK(read_zero_size(
      m, {"zero_optimization.stage3_max_live_parameters", "zero_optimization.max_live_parameters"},
      "zero.stage3_max_live_parameters", z.max_live_parameters, nullptr));
  MEMPLAN_IO_CHECK(read_zero_size(
      m, {"zero_optimization.stage3_max_reuse_distance", "zero_optimization.max_reuse_distance"},
      "zero.stage3_max_reuse_distance", z.max_reuse_distance, nullptr));
  MEMPLAN_IO_CHECK(read_zero_size(
      m, {"zero_optimization.stage3_param_persistence_threshold", "zero_optimization.param_persistence_threshold"},
      "zero.stage3_param_persistence_threshold", z.param_persistence_threshold, &z.persistence_threshold_auto));
  MEMPLAN_IO_CHECK(read_zero_size(m, {"zero_optimization.sub_group_size"}, "zero.sub_group_size", z.sub_group_size,
                                   nullptr));
  for (const auto& [key, input, field] :
       {std::tuple<const char*, const char*, bool*>{"zero_optimization.contiguous_gradients",
                                                    "zero.contiguous_gradients", &z.contiguous_gradients},
        {"zero_optimization.round_robin_gradients", "zero.round_robin_gradients", &z.round_robin_gradients}}) {
    MEMPLAN_TRY(auto on, m.boolean(key));
    if (!on) continue;
    *field = *on;
    m.from_file(input, *m.node(key), key);
  }
  MEMPLAN_TRY(auto overlap, m.boolean("zero_optimization.overlap_comm"));
  if (overlap) {
    z.overlap_comm = *overlap;
    m.from_file("zero.overlap_comm", *m.node("zero_optimization.overlap_comm"), "zero_optimization.overlap_comm");
  }
  return Ok{};
}

}  // namespace

Status map_deepspeed(Mapper& m, bool primary) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto micro, read_matching(m, primary, "train_micro_batch_size_per_gpu", "batch", c.micro_batch));
  MEMPLAN_TRY(auto accum, read_matching(m, primary, "gradient_accumulation_steps", "grad_accum", c.grad_accum));
  if (primary) {
    if (!micro) {
      c.micro_batch = 1;
      m.from_default("batch", "no train_micro_batch_size_per_gpu: 1");
    }
    if (!accum) {
      c.grad_accum = 1;
      m.from_default("grad_accum", "no gradient_accumulation_steps: 1");
    }
    m.site(Knob::kBatch, "train_micro_batch_size_per_gpu");
    m.site(Knob::kGradAccum, "gradient_accumulation_steps", "train_micro_batch_size_per_gpu");
    m.site(Knob::kSeqLen, "seq_len", {}, "a DeepSpeed config has no sequence length");
  } else {
    m.mirror_site(Knob::kBatch, "train_micro_batch_size_per_gpu");
    m.mirror_site(Knob::kGradAccum, "gradient_accumulation_steps");
  }

  // train_batch_size = micro-batch x accumulation x GPUs: it tells how many GPUs the run uses.
  const YamlNode* gnode = m.node("train_batch_size");
  std::optional<std::int64_t> global;
  if (!is_auto(gnode)) {
    MEMPLAN_TRY(global, m.integer("train_batch_size"));
  }
  // Only when the micro-batch and the accumulation are both written somewhere: with either left
  // at a default, the quotient is not a GPU count (a DeepSpeedExamples config with
  // train_batch_size 16 and no micro-batch is not a 16-GPU run).
  auto written = [&](const char* input) {
    const auto& o = m.out().inputs.origins;
    auto it = o.find(input);
    return it != o.end() && it->second.kind == OriginKind::kFile;
  };
  if (global && !(written("batch") && written("grad_accum"))) {
    m.warn_at(*gnode, fmt::format("train_batch_size = {} is micro-batch x accumulation x GPUs, but {} is not written; "
                                  "memplan does not derive the GPU count from it (give --num-gpus)",
                                  *global, written("batch") ? "the accumulation" : "the micro-batch"));
    global.reset();
  }
  if (global) {
    // Checked: both factors come from files unbounded (2^32 x 2^32 wraps to 0).
    std::int64_t per_gpu = 0;
    if (c.micro_batch < 1 || c.grad_accum < 1 || __builtin_mul_overflow(c.micro_batch, c.grad_accum, &per_gpu))
      return m.error_at(*gnode, ErrorCode::kInvalidConfig,
                        fmt::format("micro-batch x accumulation = {} x {} is out of range", c.micro_batch,
                                    c.grad_accum));
    if (*global % per_gpu != 0) {
      m.warn_at(*gnode, fmt::format("train_batch_size = {} is not a multiple of micro-batch x accumulation = {} x {}; "
                                    "DeepSpeed refuses this",
                                    *global, c.micro_batch, c.grad_accum));
    } else {
      const std::int64_t world = *global / per_gpu;
      if (world > 1024 * 65536)  // validate()'s GPUs x nodes
        return m.error_at(*gnode, ErrorCode::kInvalidConfig,
                          fmt::format("train_batch_size = {} means {} GPUs (micro-batch x accumulation x GPUs = {} x "
                                      "{} x {}); memplan models at most 1024 GPUs per node x 65536 nodes",
                                      *global, world, c.micro_batch, c.grad_accum, world));
      if (!m.has_origin("num_gpus") || m.out().inputs.origins["num_gpus"].kind == OriginKind::kDefault) {
        c.parallel.num_gpus = static_cast<int>(std::min<std::int64_t>(world, 1024));
        m.derived("num_gpus", fmt::format("train_batch_size {} / ({} x {}) at {}", *global, c.micro_batch,
                                          c.grad_accum, m.where_text(*gnode)));
      }
      m.mirror_site(Knob::kGlobalBatch, "train_batch_size", world);
    }
  }

  MEMPLAN_TRY(auto stage, m.integer("zero_optimization.stage", 0));
  if (stage) {
    const YamlNode& n = *m.node("zero_optimization.stage");
    if (c.parallel.sharding == ShardingStrategy::kFsdpFullShard ||
        c.parallel.sharding == ShardingStrategy::kFsdpShardGradOp ||
        c.parallel.sharding == ShardingStrategy::kFsdpHybridShard) {
      m.warn_at(n, "a DeepSpeed ZeRO config next to FSDP settings: the two are alternatives; memplan uses ZeRO");
    }
    switch (*stage) {
      case 0: c.parallel.sharding = ShardingStrategy::kNone; break;
      case 1: c.parallel.sharding = ShardingStrategy::kZero1; break;
      case 2: c.parallel.sharding = ShardingStrategy::kZero2; break;
      case 3: c.parallel.sharding = ShardingStrategy::kZero3; break;
      default:
        return m.error_at(n, ErrorCode::kInvalidConfig,
                          fmt::format("zero_optimization.stage = {} must be 0, 1, 2 or 3", *stage));
    }
    m.from_file("sharding", n, "zero_optimization.stage");
  }
  MEMPLAN_IO_CHECK(read_zero_buffers(m, c.parallel.zero));
  for (const auto& [key, input] : {std::pair<const char*, const char*>{"zero_optimization.offload_optimizer.device",
                                                                        "offload_optimizer"},
                                   {"zero_optimization.offload_param.device", "offload_params"}}) {
    MEMPLAN_TRY(auto device, m.text(key));
    if (!device) continue;
    const std::string d = to_lower(*device);
    const bool on = d == "cpu" || d == "nvme";
    if (!on && d != "none")
      return m.error_at(*m.node(key), ErrorCode::kUnknownName, fmt::format("unknown offload device '{}'", *device),
                        did_you_mean(d, {"cpu", "nvme", "none"}));
    (std::string_view(input) == "offload_optimizer" ? c.parallel.offload_optimizer : c.parallel.offload_params) = on;
    m.from_file(input, *m.node(key), key);
  }
  // Legacy spelling of optimizer offload.
  MEMPLAN_TRY(auto legacy, m.boolean("zero_optimization.cpu_offload"));
  if (legacy.value_or(false)) {
    c.parallel.offload_optimizer = true;
    m.from_file("offload_optimizer", *m.node("zero_optimization.cpu_offload"), "zero_optimization.cpu_offload");
  }

  // Precision: "auto" follows the trainer; true must agree with it.
  for (const char* key : {"bf16.enabled", "bfloat16.enabled", "fp16.enabled"}) {
    const YamlNode* n = m.node(key);
    if (n == nullptr || n->is_null() || is_auto(n)) continue;
    MEMPLAN_TRY(auto on, m.boolean(key));
    if (!on.value_or(false)) continue;
    const DType want = std::string_view(key) == "fp16.enabled" ? DType::kFloat16 : DType::kBFloat16;
    if (primary) {
      c.autocast = want;
      m.from_file("autocast", *n, key);
    } else if (c.autocast != want) {
      m.warn_at(*n, fmt::format("{}: true contradicts the trainer's precision ({}); memplan uses the trainer's", key,
                                c.autocast ? (*c.autocast == DType::kBFloat16 ? "bf16" : "fp16") : "fp32"));
    }
  }
  if (primary) {
    MEMPLAN_TRY(auto type, m.text("optimizer.type"));
    if (type) {
      const std::string t = to_lower(*type);
      if (t == "adam" || t == "adamw") {
        c.optim.kind = OptimizerKind::kAdamWTorch;
        m.from_file("optim", *m.node("optimizer.type"), "optimizer.type");
      } else {
        m.warn_at(*m.node("optimizer.type"),
                  fmt::format("DeepSpeed optimizer '{}' is modelled as AdamW (two fp32 states)", *type));
      }
    }
  }

  if (primary && m.out().inputs.model_hint.empty() && !m.out().files.empty())
    m.out().inputs.model_hint =
        fmt::format("{} is a DeepSpeed config, which names no model; give the training config with another "
                    "--config, or --model ID|PATH",
                    m.out().files[0].path);
  m.check_unknown("", deepspeed_known_keys(), /*strict=*/true);
  m.check_unknown("zero_optimization", deepspeed_zero_keys(), /*strict=*/true);
  return Ok{};
}

}  // namespace memplan::io

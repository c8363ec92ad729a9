// accelerate launcher configs (`accelerate launch --config_file X.yaml train.py ...`): how many
// processes on how many machines, and the DeepSpeed or FSDP plugin settings. They sit next to a
// trainer config (several --config files) or alone. Keys from accelerate/commands/config/
// config_args.py (ClusterConfig) and utils/dataclasses.py (FullyShardedDataParallelPlugin).
#include <algorithm>

#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

// ClusterConfig / BaseConfig fields (accelerate 0.2x-1.x).
const std::vector<std::string>& accelerate_known_keys() {
  static const std::vector<std::string> keys = {
      "command_file", "commands", "compute_environment", "debug", "deepspeed_config", "distributed_type",
      "downcast_bf16", "dynamo_backend", "dynamo_config", "enable_cpu_affinity", "fp8_config", "fsdp_config",
      "gpu_ids", "ipex_config", "machine_rank", "main_process_ip", "main_process_port", "main_training_function",
      "megatron_lm_config", "mixed_precision", "mpirun_config", "num_machines", "num_processes",
      "parallelism_config", "rdzv_backend", "same_network", "tpu_env", "tpu_name", "tpu_use_cluster", "tpu_use_sudo",
      "tpu_zone", "use_cpu"};
  return keys;
}

// An origin is "weak" when no file or flag set it: the launcher may then fill it in.
bool weak(Mapper& m, const std::string& input) {
  const auto& o = m.out().inputs.origins;
  auto it = o.find(input);
  return it == o.end() || it->second.kind == OriginKind::kDefault;
}

}  // namespace

bool looks_like_accelerate(const YamlNode& root) {
  if (!root.is_map()) return false;
  if (root.get("distributed_type") != nullptr) return true;
  return root.get("compute_environment") != nullptr && root.get("num_processes") != nullptr;
}

Status map_accelerate(Mapper& m, bool primary) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto procs, m.integer("num_processes"));
  MEMPLAN_TRY(auto machines, m.integer("num_machines"));
  const std::int64_t nodes = machines.value_or(1);
  if (procs) {
    const YamlNode& n = *m.node("num_processes");
    if (*procs % nodes != 0)
      m.warn_at(n, fmt::format("num_processes = {} is not a multiple of num_machines = {}; memplan assumes {} GPUs "
                               "per machine",
                               *procs, nodes, *procs / nodes));
    c.parallel.num_gpus = static_cast<int>(std::max<std::int64_t>(1, *procs / nodes));
    m.from_file("num_gpus", n, "num_processes");
  }
  if (machines) {
    c.parallel.nodes = static_cast<int>(nodes);
    m.from_file("nodes", *m.node("num_machines"), "num_machines");
  }

  MEMPLAN_TRY(auto type, m.text("distributed_type"));
  const std::string t = to_lower(type.value_or(""));
  if (t == "deepspeed") {
    MEMPLAN_TRY(auto stage, m.integer("deepspeed_config.zero_stage", 0));
    if (stage) {
      const YamlNode& n = *m.node("deepspeed_config.zero_stage");
      if (*stage > 3)
        return m.error_at(n, ErrorCode::kInvalidConfig, fmt::format("zero_stage = {} must be 0, 1, 2 or 3", *stage));
      constexpr ShardingStrategy kStages[] = {ShardingStrategy::kNone, ShardingStrategy::kZero1,
                                              ShardingStrategy::kZero2, ShardingStrategy::kZero3};
      c.parallel.sharding = kStages[*stage];
      m.from_file("sharding", n, "deepspeed_config.zero_stage");
    }
    for (const auto& [key, input] :
         {std::pair<const char*, const char*>{"deepspeed_config.offload_optimizer_device", "offload_optimizer"},
          {"deepspeed_config.offload_param_device", "offload_params"}}) {
      MEMPLAN_TRY(auto device, m.text(key));
      if (!device) continue;
      const std::string d = to_lower(*device);
      if (d != "none" && d != "cpu" && d != "nvme")
        return m.error_at(*m.node(key), ErrorCode::kUnknownName, fmt::format("unknown offload device '{}'", *device),
                          did_you_mean(d, {"none", "cpu", "nvme"}));
      (std::string_view(input) == "offload_optimizer" ? c.parallel.offload_optimizer : c.parallel.offload_params) =
          d != "none";
      m.from_file(input, *m.node(key), key);
    }
    // A DeepSpeed JSON named here is read like a trainer's `deepspeed:` key (config_loader).
    m.set_deepspeed_ref(m.node("deepspeed_config.deepspeed_config_file"));
  } else if (t == "fsdp") {
    // fsdp_sharding_strategy: a name, or the enum's number (1 FULL_SHARD, 2 SHARD_GRAD_OP, 3 NO_SHARD,
    // 4 HYBRID_SHARD); FSDP2 (fsdp_version: 2) has fsdp_reshard_after_forward instead.
    const YamlNode* s = m.first_of({"fsdp_config.fsdp_sharding_strategy", "fsdp_config.fsdp_reshard_after_forward"});
    std::string v = s != nullptr && s->is_scalar() ? to_lower(s->value) : "full_shard";
    if (v == "1" || v == "true") v = "full_shard";
    else if (v == "2" || v == "false") v = "shard_grad_op";
    else if (v == "3") v = "no_shard";
    else if (v == "4") v = "hybrid_shard";
    {
      auto parsed = parse_fsdp(v);  // no_shard: FSDP1's NO_SHARD (docs/formulas.md#fsdp-no-shard)
      if (!parsed) return m.error_at(*s, parsed.error().code, parsed.error().message, parsed.error().suggestion);
      c.parallel.sharding = *parsed;
    }
    if (s != nullptr) m.from_file("sharding", *s, "fsdp_config.fsdp_sharding_strategy");
    else m.derived("sharding", fmt::format("distributed_type FSDP at {}: FULL_SHARD (accelerate's default)",
                                           m.where_text(*m.node("distributed_type"))));
    MEMPLAN_IO_CHECK(m.read_fsdp_version("fsdp_config.fsdp_version"));
    MEMPLAN_TRY(auto offload, m.boolean("fsdp_config.fsdp_offload_params"));
    if (offload) {
      c.parallel.offload_params = c.parallel.offload_optimizer = *offload;
      m.from_file("offload_params", *m.node("fsdp_config.fsdp_offload_params"), "fsdp_config.fsdp_offload_params");
      m.from_file("offload_optimizer", *m.node("fsdp_config.fsdp_offload_params"), "fsdp_config.fsdp_offload_params");
    }
    MEMPLAN_TRY(auto ac, m.boolean("fsdp_config.fsdp_activation_checkpointing"));
    if (ac.value_or(false)) {
      c.gradient_checkpointing = true;
      m.from_file("gradient_checkpointing", *m.node("fsdp_config.fsdp_activation_checkpointing"),
                  "fsdp_config.fsdp_activation_checkpointing");
    }
  } else if (!t.empty() && t != "no" && t != "multi_gpu" && t != "multi_cpu" && t != "multi_npu" &&
             t != "multi_xpu" && t != "multi_mlu" && t != "multi_musa" && t != "multi_hpu") {
    m.warn_at(*m.node("distributed_type"),
              fmt::format("distributed_type {} is not modelled; memplan estimates plain data parallelism", *type));
  }

  // mixed_precision is what accelerate uses when the trainer says nothing.
  MEMPLAN_TRY(auto mp, m.text("mixed_precision"));
  if (mp && (primary || weak(m, "autocast"))) {
    const std::string v = to_lower(*mp);
    const YamlNode& n = *m.node("mixed_precision");
    if (v == "bf16") c.autocast = DType::kBFloat16;
    else if (v == "fp16") c.autocast = DType::kFloat16;
    else if (v == "no") c.autocast.reset();
    else if (v == "fp8")
      m.warn_at(n, "mixed_precision fp8 is not modelled; memplan estimates bf16 autocast"), c.autocast = DType::kBFloat16;
    else
      return m.error_at(n, ErrorCode::kUnknownName, fmt::format("unknown mixed_precision '{}'", *mp),
                        did_you_mean(v, {"no", "fp16", "bf16", "fp8"}));
    m.from_file("autocast", n, "mixed_precision");
  }
  MEMPLAN_TRY(auto cpu, m.boolean("use_cpu"));
  if (cpu.value_or(false)) {
    c.device = Device::kCpu;
    m.from_file("device", *m.node("use_cpu"), "use_cpu");
  }
  MEMPLAN_TRY(auto cp, m.integer("parallelism_config.parallelism_config_cp_size"));
  if (cp.value_or(1) > 1)
    m.warn_at(*m.node("parallelism_config.parallelism_config_cp_size"),
              fmt::format("context parallelism ({} GPUs share each sequence) is not modelled; memplan estimates "
                          "whole sequences per GPU, which overstates activations",
                          *cp));
  // The other degrees of accelerate's ParallelismConfig: tensor parallelism (transformers' tp
  // plan), Ulysses sequence parallelism, and the FSDP shard / replicate sizes.
  constexpr std::string_view kPc = "parallelism_config.parallelism_config_";
  // transformers' tp_plan: the engine models it (ParallelConfig::megatron_core false).
  MEMPLAN_IO_CHECK(m.read_degree(std::string(kPc) + "tp_size", "tensor_parallel", c.parallel.tensor_parallel));
  MEMPLAN_TRY(auto sp, m.integer(std::string(kPc) + "sp_size"));
  if (sp.value_or(1) > 1)
    m.warn_at(*m.node(std::string(kPc) + "sp_size"),
              fmt::format("sequence parallelism (Ulysses, {} GPUs share each sequence) is not modelled; memplan "
                          "estimates whole sequences per GPU, which overstates activations",
                          *sp));
  (void)m.node(std::string(kPc) + "dp_shard_size");
  MEMPLAN_TRY(auto replicas, m.integer(std::string(kPc) + "dp_replicate_size"));
  if (replicas.value_or(1) > 1 && c.parallel.sharding == ShardingStrategy::kFsdpFullShard) {
    c.parallel.sharding = ShardingStrategy::kFsdpHybridShard;
    c.parallel.dp_replicate = static_cast<int>(std::min<std::int64_t>(*replicas, 65536));
    m.from_file("sharding", *m.node(std::string(kPc) + "dp_replicate_size"),
                "parallelism_config_dp_replicate_size (HSDP: replicas of dp_shard_size shards)");
  }
  if (const YamlNode* pc = m.node("parallelism_config"); pc != nullptr && pc->is_map()) {
    std::vector<std::string> known;
    for (const char* k : {"dp_shard_size", "dp_replicate_size", "tp_size", "cp_size", "sp_size", "cp_backend",
                          "sp_backend", "cp_comm_strategy", "sp_seq_length_is_variable", "sp_attn_implementation"})
      known.push_back(std::string("parallelism_config_") + k);
    m.check_unknown("parallelism_config", known, /*strict=*/true);
  }
  if (primary && m.out().inputs.model_hint.empty())
    m.out().inputs.model_hint =
        fmt::format("{} is an accelerate launcher config, which names no model; give the training config with "
                    "another --config (memplan estimate --config train.yaml --config {}), or --model ID|PATH",
                    m.out().files.empty() ? std::string("the file") : m.out().files[0].path,
                    m.out().files.empty() ? std::string("accelerate.yaml") : m.out().files[0].path);
  m.check_unknown("", accelerate_known_keys(), /*strict=*/true);
  return Ok{};
}

}  // namespace memplan::io

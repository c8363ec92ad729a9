// NeMo Automodel recipes (examples/llm_finetune/*.yaml): Hydra-style sections whose `_target_`
// names the class built. step_scheduler.local_batch_size is the per-GPU micro-batch and
// global_batch_size the optimizer step's batch over all data-parallel ranks; model.* is
// from_pretrained's arguments; peft.dim/alpha is LoRA; distributed.strategy fsdp2 shards fully.
#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

Status map_automodel(Mapper& m) {
  TrainingConfig& c = m.config();
  const YamlNode* name =
      m.first_of({"model.pretrained_model_name_or_path", "model.config.pretrained_model_name_or_path"});
  if (name != nullptr) {
    MEMPLAN_IO_CHECK(m.read_model(m.node("model.pretrained_model_name_or_path") != nullptr
                                      ? "model.pretrained_model_name_or_path"
                                      : "model.config.pretrained_model_name_or_path"));
  } else if (const YamlNode* model = m.node("model"); model != nullptr) {
    m.out().inputs.model_hint = fmt::format("{}: the model section names no pretrained_model_name_or_path; give "
                                            "--model ID|PATH",
                                            m.where_text(*model));
  }
  MEMPLAN_IO_CHECK(m.read_or("step_scheduler.local_batch_size", "batch", c.micro_batch, 1,
                             "step_scheduler.local_batch_size not set: 1"));
  m.site(Knob::kBatch, "step_scheduler.local_batch_size");
  // Accumulation = global / (local x data-parallel size): the data-parallel size is the launch's.
  if (const YamlNode* g = m.node("step_scheduler.global_batch_size"); g != nullptr)
    m.from_default("grad_accum", fmt::format("global_batch_size at {} / (local_batch_size x data-parallel GPUs): "
                                             "pass --grad-accum for the step's accumulation",
                                             m.where_text(*g)));
  MEMPLAN_IO_CHECK(m.read_dtype("model.torch_dtype", "torch_dtype", c.torch_dtype));
  // autocast: {enabled, dtype}: torch.autocast around the forward and loss.
  MEMPLAN_TRY(auto autocast, m.boolean("autocast.enabled"));
  if (autocast.value_or(false)) {
    DType dt = DType::kBFloat16;
    MEMPLAN_TRY(bool given, m.read_dtype("autocast.dtype", "autocast", dt));
    c.autocast = dt;
    if (!given) m.from_file("autocast", *m.node("autocast.enabled"), "autocast.enabled");
  }
  // The sequence: the dataset's seq_len (mock/pretraining datasets) or seq_length (chat
  // datasets), or the packed sequence size when packing is on.
  {
    MEMPLAN_TRY(auto packed, m.integer("packed_sequence.packed_sequence_size", 0));
    std::string key;
    if (packed && *packed > 0) key = "packed_sequence.packed_sequence_size";
    else m.first_of({"dataset.seq_len", "dataset.seq_length"}, &key);
    if (!key.empty()) {
      MEMPLAN_TRY(bool seq, m.read(key, "seq_len", c.seq_len));
      if (seq) m.site(Knob::kSeqLen, key);
    }
  }

  // LoRA: peft.dim / alpha / dropout / target_modules (glob patterns such as '*_proj').
  if (const YamlNode* peft = m.node("peft"); peft != nullptr && peft->is_map()) {
    c.lora.enabled = true;
    m.from_file("use_peft", *peft, "peft");
    MEMPLAN_IO_CHECK(m.read("peft.dim", "lora_r", c.lora.r));
    MEMPLAN_IO_CHECK(m.read("peft.alpha", "lora_alpha", c.lora.alpha));
    MEMPLAN_IO_CHECK(m.read("peft.dropout", "lora_dropout", c.lora.dropout));
    MEMPLAN_TRY(auto targets, m.list("peft.target_modules"));
    if (targets) {
      std::vector<std::string> names;
      bool all = false;
      for (const auto& t : *targets) {
        if (t == "*_proj" || t == "*") all = true;
        else names.push_back(t);
      }
      if (all) set_lora_targets(c, {"all-linear"});
      else set_lora_targets(c, names);
      m.from_file("lora_target_modules", *m.node("peft.target_modules"), "peft.target_modules");
    }
  }
  MEMPLAN_IO_CHECK(m.read("quantization.load_in_4bit", "load_in_4bit", c.quant.load_in_4bit));
  MEMPLAN_IO_CHECK(m.read("quantization.load_in_8bit", "load_in_8bit", c.quant.load_in_8bit));
  MEMPLAN_IO_CHECK(m.read("quantization.bnb_4bit_use_double_quant", "bnb_4bit_use_double_quant",
                          c.quant.double_quant));

  MEMPLAN_TRY(auto strategy, m.text("distributed.strategy"));
  // Older recipes name the manager class instead: FSDP2Manager, DDPManager.
  MEMPLAN_TRY(auto manager, m.text("distributed._target_"));
  if (!strategy && manager) {
    const std::string t = to_lower(*manager);
    const YamlNode& n = *m.node("distributed._target_");
    if (t.find("fsdp2manager") != std::string::npos) {
      c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
      c.parallel.fsdp_version = 2;
      m.from_file("sharding", n, "distributed._target_");
      m.from_file("fsdp_version", n, "distributed._target_");
    } else if (t.find("ddpmanager") != std::string::npos) {
      c.parallel.sharding = ShardingStrategy::kNone;
      m.from_file("sharding", n, "distributed._target_");
    }
  }
  if (strategy) {
    const std::string s = to_lower(*strategy);
    const YamlNode& n = *m.node("distributed.strategy");
    if (s == "fsdp2" || s == "fsdp") {
      c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
      if (s == "fsdp2") {
        c.parallel.fsdp_version = 2;
        m.from_file("fsdp_version", n, "distributed.strategy");
      }
    } else if (s == "ddp") {
      c.parallel.sharding = ShardingStrategy::kNone;
    } else {
      m.warn_at(n, fmt::format("distributed.strategy '{}' is not modelled; memplan estimates FSDP", *strategy));
      c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
    }
    m.from_file("sharding", n, "distributed.strategy");
  }
  // Model-parallel sizes (docs/formulas.md#parallelism-layout): tp/pp/cp/ep_size under
  // distributed (older recipes: the same keys beside a FSDP2Manager _target_).
  const auto size = [&](const char* key, const char* input, int& out) { return m.read_degree(key, input, out); };
  MEMPLAN_IO_CHECK(size("distributed.tp_size", "tensor_parallel", c.parallel.tensor_parallel));
  MEMPLAN_IO_CHECK(size("distributed.pp_size", "pipeline_parallel", c.parallel.pipeline_parallel));
  MEMPLAN_IO_CHECK(size("distributed.cp_size", "context_parallel", c.parallel.context_parallel));
  MEMPLAN_IO_CHECK(size("distributed.ep_size", "expert_parallel", c.parallel.expert_parallel));
  // HSDP: dp_replicate_size replicas, each FSDP-sharding over the rest of the data-parallel ranks.
  {
    int replicas = 1;
    MEMPLAN_IO_CHECK(size("distributed.dp_replicate_size", "dp_replicate", replicas));
    if (replicas > 1) {
      c.parallel.dp_replicate = replicas;
      c.parallel.sharding = ShardingStrategy::kFsdpHybridShard;
      m.from_file("sharding", *m.node("distributed.dp_replicate_size"), "distributed.dp_replicate_size (HSDP)");
    }
  }
  MEMPLAN_IO_CHECK(m.read("distributed.sequence_parallel", "sequence_parallel", c.parallel.sequence_parallel));
  if (c.parallel.pipeline_parallel > 1) {
    // The pipeline section: distributed.pipeline (current) or autopipeline (older recipes).
    const std::string sec = m.node("distributed.pipeline") != nullptr ? "distributed.pipeline" : "autopipeline";
    MEMPLAN_TRY(auto sched, m.text(sec + ".pp_schedule"));
    if (sched) {
      const YamlNode& n = *m.node(sec + ".pp_schedule");
      if (auto k = parse_pp_schedule(*sched); k) {
        c.parallel.pp_schedule = *k;
        m.from_file("pp_schedule", n, sec + ".pp_schedule");
      } else {
        m.warn_at(n, fmt::format("pp_schedule '{}' is not modelled; estimated as 1f1b", *sched));
      }
    }
    // layers_per_stage sets the number of stages (the embedding and the head weigh a layer
    // each); without it torchtitan's multi-stage schedules place two stages on each rank.
    MEMPLAN_IO_CHECK(m.read(sec + ".layers_per_stage", "pp_layers_per_stage", c.parallel.pp_layers_per_stage));
    if (c.parallel.pp_layers_per_stage == 0 && c.parallel.pp_schedule == PipelineSchedule::kInterleaved1F1B)
      c.parallel.virtual_stages = 2;
    // Each pipeline micro-batch is pp_microbatch_size sequences; local_batch_size of them per step.
    MEMPLAN_TRY(auto pmb, m.integer(sec + ".pp_microbatch_size"));
    if (pmb && *pmb >= 1 && c.micro_batch % *pmb == 0) {
      c.grad_accum = c.micro_batch / *pmb;
      c.micro_batch = *pmb;
      m.from_file("batch", *m.node(sec + ".pp_microbatch_size"), sec + ".pp_microbatch_size");
      m.from_file("grad_accum", *m.node(sec + ".pp_microbatch_size"),
                  "local_batch_size / " + sec + ".pp_microbatch_size (pipeline micro-batches per step)");
    }
  }
  MEMPLAN_TRY(auto opt, m.text("optimizer._target_"));
  if (opt) {
    const std::string o = to_lower(*opt);
    const YamlNode& n = *m.node("optimizer._target_");
    if (o == "torch.optim.adamw" || o == "torch.optim.adam") c.optim.kind = OptimizerKind::kAdamWTorch;
    else if (o == "torch.optim.sgd") c.optim.kind = OptimizerKind::kSgd;
    else {
      c.optim.kind = OptimizerKind::kAdamWTorch;
      m.warn_at(n, fmt::format("optimizer '{}' is not modelled; estimated as adamw_torch (two fp32 states)", *opt));
    }
    m.from_file("optim", n, "optimizer._target_");
  }
  MEMPLAN_TRY(bool gc, m.read("distributed.activation_checkpointing", "gradient_checkpointing",
                              c.gradient_checkpointing));
  if (!gc) MEMPLAN_IO_CHECK(m.read("parallelizer.activation_checkpointing", "gradient_checkpointing",
                                   c.gradient_checkpointing));
  // The sections are the recipe's own (_target_ classes with their arguments): near-misses only.
  m.check_unknown("", {}, /*strict=*/false);
  return Ok{};
}

}  // namespace memplan::io

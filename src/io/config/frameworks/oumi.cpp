// oumi training configs (`oumi train -c configs/recipes/.../train.yaml`): the sections of
// oumi.core.configs.TrainingConfig: model (ModelParams), training (TrainingParams, with grpo:),
// peft (PeftParams), fsdp (FSDPParams), data. Defaults from src/oumi/core/configs/params:
// per_device_train_batch_size 8, gradient_accumulation_steps 1, checkpointing off, optimizer
// adamw_torch, mixed_precision_dtype none, torch_dtype_str auto, lora_r 8, lora_alpha 8.
// docs/configs.md#oumi.
#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

Status read_oumi_method(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto type, m.text("training.trainer_type"));
  const std::string t = to_lower(type.value_or("hf"));
  if (t == "trl_sft" || t == "hf" || t == "oumi") {
    c.method = Method::kSft;
  } else if (t == "trl_dpo" || t == "trl_kto") {
    c.method = Method::kDpo;
  } else if (t == "trl_grpo") {
    c.method = Method::kGrpo;
  } else if (t == "trl_gkd" || t == "trl_gold") {
    return m.error_at(*m.node("training.trainer_type"), ErrorCode::kUnsupported,
                      fmt::format("trainer_type: {} distills from a teacher model kept beside the student, which "
                                  "memplan does not model",
                                  *type),
                      "an SFT estimate of the student alone (trainer_type: TRL_SFT) is a lower bound");
  } else if (t == "verl_grpo") {
    return m.error_at(*m.node("training.trainer_type"), ErrorCode::kUnsupported,
                      "trainer_type: VERL_GRPO runs verl's actor, rollout and reference workers, which memplan does "
                      "not model from an oumi config",
                      "estimate the GRPO step with trainer_type: TRL_GRPO's settings (an approximation)");
  } else {
    return m.error_at(*m.node("training.trainer_type"), ErrorCode::kUnknownName,
                      fmt::format("unknown trainer_type '{}'", *type),
                      did_you_mean(t, {"trl_sft", "trl_dpo", "trl_kto", "trl_grpo", "hf", "oumi"}));
  }
  if (type) m.from_file("method", *m.node("training.trainer_type"), "training.trainer_type");
  else m.from_default("method", "SFT: oumi's trainer_type = HF");
  if (t == "oumi") {
    // oumi's own Trainer (oumi/core/trainers/oumi_trainer.py) wraps the model with torch FSDP
    // itself; Accelerator.prepare, and accelerate's FSDP upcast, never run. LoRA is still PEFT's.
    RunContext r = run_context(Dialect::kOumi);
    r.framework = "oumi (trainer_type: OUMI, its own training loop)";
    r.accelerate = false;
    m.out().run = r;
  }
  return Ok{};
}

Status read_oumi_peft(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_IO_CHECK(m.read("training.use_peft", "use_peft", c.lora.enabled));
  if (!c.lora.enabled) {
    if (const YamlNode* p = m.node("peft"); p != nullptr && p->is_map() && !p->entries.empty()) {
      m.warn_at(*p, "peft settings have no effect without training.use_peft: true (all weights are trained)");
      m.out().inputs.lora_ignored_warning = m.out().inputs.warnings.back();
    }
    return Ok{};
  }
  c.lora.r = 8;
  c.lora.alpha = 8;
  c.lora.dropout = 0.0;
  MEMPLAN_TRY(bool r, m.read("peft.lora_r", "lora_r", c.lora.r));
  if (!r) m.from_default("lora_r", "8: oumi's PeftParams");
  MEMPLAN_TRY(bool a, m.read("peft.lora_alpha", "lora_alpha", c.lora.alpha));
  if (!a) m.from_default("lora_alpha", "8: oumi's PeftParams");
  MEMPLAN_IO_CHECK(m.read("peft.lora_dropout", "lora_dropout", c.lora.dropout));
  MEMPLAN_TRY(auto targets, m.list("peft.lora_target_modules"));
  if (targets) {
    set_lora_targets(c, *targets);
    m.from_file("lora_target_modules", *m.node("peft.lora_target_modules"), "peft.lora_target_modules");
  } else {
    m.from_default("lora_target_modules", "PEFT's default for the architecture (oumi passes none)");
  }
  MEMPLAN_TRY(auto save, m.list("peft.lora_modules_to_save"));
  if (save) {
    c.lora.modules_to_save = *save;
    m.from_file("modules_to_save", *m.node("peft.lora_modules_to_save"), "peft.lora_modules_to_save");
  }
  MEMPLAN_TRY(auto q, m.boolean("peft.q_lora"));
  if (q.value_or(false)) {
    MEMPLAN_TRY(auto bits, m.integer("peft.q_lora_bits"));
    if (bits.value_or(4) == 8) c.quant.load_in_8bit = true;
    else c.quant.load_in_4bit = true;
    m.from_file(c.quant.load_in_8bit ? "load_in_8bit" : "load_in_4bit", *m.node("peft.q_lora"), "peft.q_lora");
    MEMPLAN_TRY(auto qt, m.text("peft.bnb_4bit_quant_type"));
    c.quant.quant_type = to_lower(qt.value_or("fp4"));
    MEMPLAN_TRY(auto nested, m.boolean("peft.use_bnb_nested_quant"));
    c.quant.double_quant = nested.value_or(false);
  }
  return Ok{};
}

Status read_oumi_fsdp(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto on, m.boolean("fsdp.enable_fsdp"));
  if (!on.value_or(false)) return Ok{};
  MEMPLAN_TRY(auto strategy, m.text("fsdp.sharding_strategy"));
  const std::string s = to_lower(strategy.value_or("full_shard"));
  const YamlNode& at = strategy ? *m.node("fsdp.sharding_strategy") : *m.node("fsdp.enable_fsdp");
  if (s == "full_shard") c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  else if (s == "shard_grad_op" || s == "hybrid_shard_zero2") c.parallel.sharding = ShardingStrategy::kFsdpShardGradOp;
  else if (s == "hybrid_shard") c.parallel.sharding = ShardingStrategy::kFsdpHybridShard;
  else if (s == "no_shard") c.parallel.sharding = ShardingStrategy::kFsdpNoShard;  // docs/formulas.md#fsdp-no-shard
  else
    return m.error_at(at, ErrorCode::kUnknownName, fmt::format("unknown sharding_strategy '{}'", *strategy),
                      did_you_mean(s, {"full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2",
                                       "no_shard"}));
  if (s == "hybrid_shard_zero2")
    m.warn_at(at, "HYBRID_SHARD_ZERO2 is estimated as SHARD_GRAD_OP over all GPUs (it shards within a node only: "
                  "an underestimate on several nodes)");
  m.from_file("sharding", at, strategy ? "fsdp.sharding_strategy" : "fsdp.enable_fsdp");
  MEMPLAN_TRY(auto offload, m.boolean("fsdp.cpu_offload"));
  if (offload.value_or(false)) {
    c.parallel.offload_params = c.parallel.offload_optimizer = true;
    m.from_file("offload_params", *m.node("fsdp.cpu_offload"), "fsdp.cpu_offload");
    m.from_file("offload_optimizer", *m.node("fsdp.cpu_offload"), "fsdp.cpu_offload");
  }
  return Ok{};
}

}  // namespace

Status map_oumi(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_IO_CHECK(m.read_model("model.model_name"));
  MEMPLAN_IO_CHECK(read_oumi_method(m));
  MEMPLAN_IO_CHECK(m.read_or("training.per_device_train_batch_size", "batch", c.micro_batch, 8,
                             "oumi per_device_train_batch_size = 8"));
  m.site(Knob::kBatch, "training.per_device_train_batch_size");
  MEMPLAN_IO_CHECK(m.read_or("training.gradient_accumulation_steps", "grad_accum", c.grad_accum, 1,
                             "oumi gradient_accumulation_steps = 1"));
  m.site(Knob::kGradAccum, "training.gradient_accumulation_steps", "per_device_train_batch_size");
  MEMPLAN_TRY(bool seq, m.read("model.model_max_length", "seq_len", c.seq_len));
  if (!seq) {
    c.seq_len = 2048;
    m.from_default("seq_len", "2048: oumi's model_max_length is unset");
    m.warn_file(0, "model.model_max_length is not set: oumi then does not truncate; memplan plans 2048 tokens (pass "
                   "--seq-len)");
  }
  m.site(Knob::kSeqLen, "model.model_max_length");

  MEMPLAN_TRY(bool dt, m.read_dtype("model.torch_dtype_str", "torch_dtype", c.torch_dtype));
  if (!dt) {
    m.out().inputs.torch_dtype_from_model = true;
    m.from_default("torch_dtype", "the checkpoint's: oumi's torch_dtype_str = auto");
  }
  MEMPLAN_TRY(auto mp, m.text("training.mixed_precision_dtype"));
  const std::string p = to_lower(mp.value_or("none"));
  if (p == "bf16") c.autocast = DType::kBFloat16;
  else if (p == "fp16") c.autocast = DType::kFloat16;
  else if (p == "none") c.autocast.reset();
  else
    return m.error_at(*m.node("training.mixed_precision_dtype"), ErrorCode::kUnknownName,
                      fmt::format("unknown mixed_precision_dtype '{}'", *mp), did_you_mean(p, {"none", "fp16", "bf16"}));
  if (mp) m.from_file("autocast", *m.node("training.mixed_precision_dtype"), "training.mixed_precision_dtype");
  else m.from_default("autocast", "none: oumi's mixed_precision_dtype = NONE");

  MEMPLAN_TRY(bool gc, m.read("training.enable_gradient_checkpointing", "gradient_checkpointing",
                              c.gradient_checkpointing));
  if (!gc) m.from_default("gradient_checkpointing", "false: oumi's enable_gradient_checkpointing");
  MEMPLAN_TRY(auto reentrant, m.boolean("training.gradient_checkpointing_kwargs.use_reentrant"));
  if (reentrant) {
    c.checkpoint_reentrant = *reentrant;
    m.from_file("use_reentrant", *m.node("training.gradient_checkpointing_kwargs.use_reentrant"),
                "training.gradient_checkpointing_kwargs.use_reentrant");
  }
  MEMPLAN_TRY(bool opt, m.read_optimizer("training.optimizer", "optim", c.optim.kind));
  if (!opt) {
    c.optim.kind = OptimizerKind::kAdamWTorch;
    m.from_default("optim", "adamw_torch: oumi's optimizer");
  }
  MEMPLAN_IO_CHECK(m.read_attn_impl("model.attn_implementation"));
  MEMPLAN_IO_CHECK(read_oumi_peft(m));
  MEMPLAN_IO_CHECK(read_oumi_fsdp(m));

  if (c.method == Method::kGrpo) {
    MEMPLAN_IO_CHECK(m.read("training.grpo.num_generations", "num_generations", c.grpo.num_generations));
    MEMPLAN_IO_CHECK(m.read("training.grpo.max_prompt_length", "max_prompt_length", c.grpo.max_prompt_length));
    MEMPLAN_IO_CHECK(
        m.read("training.grpo.max_completion_length", "max_completion_length", c.grpo.max_completion_length));
    MEMPLAN_IO_CHECK(read_vllm(m, "training.grpo.use_vllm", "training.grpo.vllm_mode"));
    MEMPLAN_IO_CHECK(m.read("training.grpo.vllm_gpu_memory_utilization", "vllm_gpu_memory_utilization",
                            c.grpo.vllm_gpu_memory_utilization));
  }
  MEMPLAN_TRY(auto liger, m.boolean("model.enable_liger_kernel"));
  if (liger.value_or(false))
    m.set_loss_kernel(*m.node("model.enable_liger_kernel"), "model.enable_liger_kernel", LossKernel::kLiger, true);
  for (const char* k : {"training.compile", "model.compile"}) {
    MEMPLAN_TRY(auto on, m.boolean(k));
    if (on.value_or(false))
      m.warn_at(*m.node(k), fmt::format("{}: torch.compile fuses kernels and frees some intermediates earlier; the "
                                        "estimate is for eager execution (an overestimate)",
                                        k));
  }
  // Typos of the keys read, in each section (oumi's dataclasses have many more keys, which pass).
  static const std::vector<std::string> kOther = {
      "bnb_4bit_quant_storage", "bnb_4bit_compute_dtype", "lora_bias", "lora_task_type", "peft_method",
      "init_lora_weights", "lora_init_weights", "use_rslora", "use_dora", "lora_target_parameters",
      "llm_int8_skip_modules", "per_device_eval_batch_size", "eval_steps", "save_steps", "logging_steps",
      "model_kwargs", "tokenizer_kwargs", "processor_kwargs", "trainer_kwargs", "compile", "enable_wandb"};
  for (const char* ns : {"model", "training", "peft", "fsdp"}) m.check_unknown(ns, kOther, /*strict=*/false);
  return Ok{};
}

}  // namespace memplan::io

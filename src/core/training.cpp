#include "memplan/training.hpp"

#include <utility>

#include <fmt/format.h>

#include "core/sharding.hpp"
#include "memplan/text.hpp"

namespace memplan {

namespace {

template <class E>
struct NameTable {
  std::vector<std::pair<std::string, E>> entries;  // first spelling of each value is canonical

  Result<E> parse(const std::string& raw, const char* what) const {
    const std::string s = to_lower(trim(raw));
    for (const auto& [name, v] : entries)
      if (name == s) return v;
    std::vector<std::string> names;
    for (const auto& e : entries) names.push_back(e.first);
    return make_error(ErrorCode::kUnknownName, fmt::format("unknown {} '{}'", what, raw), did_you_mean(s, names));
  }
  std::string name(E v) const {
    for (const auto& [name, e] : entries)
      if (e == v) return name;
    return "?";
  }
};

const NameTable<Method>& methods() {
  static const NameTable<Method> t{{{"sft", Method::kSft}, {"dpo", Method::kDpo}, {"grpo", Method::kGrpo}}};
  return t;
}

const NameTable<DType>& dtypes() {
  static const NameTable<DType> t{{{"float32", DType::kFloat32},
                                   {"bfloat16", DType::kBFloat16},
                                   {"float16", DType::kFloat16},
                                   {"fp32", DType::kFloat32},
                                   {"torch.float32", DType::kFloat32},
                                   {"float", DType::kFloat32},
                                   {"bf16", DType::kBFloat16},
                                   {"torch.bfloat16", DType::kBFloat16},
                                   {"fp16", DType::kFloat16},
                                   {"half", DType::kFloat16},
                                   {"torch.float16", DType::kFloat16}}};
  return t;
}

const NameTable<AttnImpl>& attn_impls() {
  static const NameTable<AttnImpl> t{{{"eager", AttnImpl::kEager},
                                      {"sdpa", AttnImpl::kSdpa},
                                      {"flash_attention_2", AttnImpl::kFlashAttention2},
                                      {"flash-attention-2", AttnImpl::kFlashAttention2},
                                      {"flash_attention", AttnImpl::kFlashAttention2},
                                      {"fa2", AttnImpl::kFlashAttention2}}};
  return t;
}

const NameTable<OptimizerKind>& optimizers() {
  static const NameTable<OptimizerKind> t{{{"adamw_torch", OptimizerKind::kAdamWTorch},
                                           {"adamw_torch_fused", OptimizerKind::kAdamWTorchFused},
                                           {"adamw_bnb_8bit", OptimizerKind::kAdamW8bit},
                                           {"paged_adamw_8bit", OptimizerKind::kPagedAdamW8bit},
                                           {"paged_adamw_32bit", OptimizerKind::kPagedAdamW32bit},
                                           {"adafactor", OptimizerKind::kAdafactor},
                                           {"sgd", OptimizerKind::kSgd},
                                           {"adagrad", OptimizerKind::kAdagrad},
                                           {"rmsprop", OptimizerKind::kRmsprop},
                                           {"lion_8bit", OptimizerKind::kLion8bit},
                                           {"lion_32bit", OptimizerKind::kLion32bit},
                                           {"adamw_8bit", OptimizerKind::kAdamW8bit},
                                           {"adamw_torch_8bit", OptimizerKind::kAdamWTorchao8bit},
                                           {"adamw_torch_4bit", OptimizerKind::kAdamWTorchao4bit},
                                           {"ao_adamw_8bit", OptimizerKind::kAdamWTorchao8bit},
                                           {"ao_adamw_4bit", OptimizerKind::kAdamWTorchao4bit},
                                           {"adamw", OptimizerKind::kAdamWTorch},
                                           {"adamw_hf", OptimizerKind::kAdamWTorch}}};
  return t;
}

const NameTable<Device>& devices() {
  static const NameTable<Device> t{{{"cuda", Device::kCuda}, {"cpu", Device::kCpu}, {"gpu", Device::kCuda}}};
  return t;
}

const NameTable<ShardingStrategy>& fsdp_strategies() {
  static const NameTable<ShardingStrategy> t{{{"full_shard", ShardingStrategy::kFsdpFullShard},
                                              {"shard_grad_op", ShardingStrategy::kFsdpShardGradOp},
                                              {"hybrid_shard", ShardingStrategy::kFsdpHybridShard},
                                              {"no_shard", ShardingStrategy::kFsdpNoShard}}};
  return t;
}

const NameTable<ModelCode>& model_codes() {
  static const NameTable<ModelCode> t{{{"transformers", ModelCode::kTransformers}, {"torchtune", ModelCode::kTorchtune}}};
  return t;
}

const NameTable<LossKernel>& loss_kernels() {
  static const NameTable<LossKernel> t{{{"eager", LossKernel::kEager},
                                        {"liger", LossKernel::kLiger},
                                        {"chunked", LossKernel::kChunked},
                                        {"cce", LossKernel::kCce},
                                        {"fused_linear_cross_entropy", LossKernel::kLiger},
                                        {"cut_cross_entropy", LossKernel::kCce},
                                        {"linear_cross_entropy", LossKernel::kChunked}}};
  return t;
}

const NameTable<PipelineSchedule>& pp_schedules() {
  // Megatron-Core's schedules and torch.distributed.pipelining's class names (torchtitan's
  // pipeline_parallel_schedule), lower-cased.
  static const NameTable<PipelineSchedule> t{{{"1f1b", PipelineSchedule::k1F1B},
                                              {"interleaved_1f1b", PipelineSchedule::kInterleaved1F1B},
                                              {"gpipe", PipelineSchedule::kGPipe},
                                              {"zero_bubble", PipelineSchedule::kZeroBubble},
                                              {"schedule1f1b", PipelineSchedule::k1F1B},
                                              {"interleaved1f1b", PipelineSchedule::kInterleaved1F1B},
                                              {"scheduleinterleaved1f1b", PipelineSchedule::kInterleaved1F1B},
                                              {"interleaved", PipelineSchedule::kInterleaved1F1B},
                                              {"schedulegpipe", PipelineSchedule::kGPipe},
                                              {"fill_drain", PipelineSchedule::kGPipe},
                                              {"zbh1", PipelineSchedule::kZeroBubble},
                                              {"zb-h1", PipelineSchedule::kZeroBubble}}};
  return t;
}

Error range_error(const char* what, std::int64_t v, const char* range) {
  return make_error(ErrorCode::kInvalidArgument, fmt::format("{} = {} is out of range ({})", what, v, range));
}

}  // namespace

Result<Method> parse_method(const std::string& s) { return methods().parse(s, "method"); }
Result<DType> parse_dtype(const std::string& s) { return dtypes().parse(s, "dtype"); }
Result<AttnImpl> parse_attn_impl(const std::string& s) { return attn_impls().parse(s, "attention implementation"); }
Result<OptimizerKind> parse_optimizer(const std::string& s) { return optimizers().parse(s, "optimizer"); }
Result<Device> parse_device(const std::string& s) { return devices().parse(s, "device"); }
Result<ShardingStrategy> parse_fsdp(const std::string& s) { return fsdp_strategies().parse(s, "fsdp strategy"); }

const NameTable<QuantConfig::KbitPrepare>& kbit_prepares() {
  using KP = QuantConfig::KbitPrepare;
  static const NameTable<KP> t{{{"freeze_only", KP::kFreezeOnly},
                                {"peft_upcast", KP::kPeftUpcast},
                                {"trl_legacy", KP::kTrlLegacy},
                                {"freeze", KP::kFreezeOnly},
                                {"prepare_model_for_kbit_training", KP::kPeftUpcast}}};
  return t;
}

Result<QuantConfig::KbitPrepare> parse_kbit_prepare(const std::string& s) {
  return kbit_prepares().parse(s, "k-bit preparation");
}
std::string to_string(QuantConfig::KbitPrepare k) { return kbit_prepares().name(k); }

std::string to_string(TrainingConfig::LossShift l) {
  switch (l) {
    case TrainingConfig::LossShift::kPadLabels: return "pad_labels";
    case TrainingConfig::LossShift::kShiftLogitsCopy: return "shift_contiguous";
    case TrainingConfig::LossShift::kUpcastInModel: return "upcast_in_model";
  }
  return "?";
}

DType effective_adapter_dtype(const TrainingConfig& c) {
  if (c.lora.adapter_dtype) return *c.lora.adapter_dtype;
  const bool quantized = c.quant.load_in_4bit || c.quant.load_in_8bit;
  return quantized && c.quant.kbit_prepare == QuantConfig::KbitPrepare::kFreezeOnly ? DType::kBFloat16 : DType::kFloat32;
}

Result<LossKernel> parse_loss_kernel(const std::string& s) { return loss_kernels().parse(s, "loss kernel"); }
Result<ModelCode> parse_model_code(const std::string& s) { return model_codes().parse(s, "model code"); }
std::string to_string(ModelCode m) { return model_codes().name(m); }
std::string to_string(LossKernel k) { return loss_kernels().name(k); }

Result<PipelineSchedule> parse_pp_schedule(const std::string& s) { return pp_schedules().parse(s, "pipeline schedule"); }
std::string to_string(PipelineSchedule s) { return pp_schedules().name(s); }
std::string to_string(Method m) { return methods().name(m); }
std::string to_string(DType d) { return dtypes().name(d); }
std::string to_string(AttnImpl a) { return attn_impls().name(a); }
std::string to_string(OptimizerKind o) { return optimizers().name(o); }
std::string to_string(Device d) { return devices().name(d); }
std::string to_string(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::kNone: return "none";
    case ShardingStrategy::kZero1: return "zero1";
    case ShardingStrategy::kZero2: return "zero2";
    case ShardingStrategy::kZero3: return "zero3";
    case ShardingStrategy::kFsdpFullShard: return "fsdp_full_shard";
    case ShardingStrategy::kFsdpShardGradOp: return "fsdp_shard_grad_op";
    case ShardingStrategy::kFsdpHybridShard: return "fsdp_hybrid_shard";
    case ShardingStrategy::kFsdpNoShard: return "fsdp_no_shard";
  }
  return "?";
}

std::int64_t dtype_size(DType d) { return d == DType::kFloat32 ? 4 : 2; }

// The model-parallel degrees and their product (docs/formulas.md#parallelism-layout): world =
// tp x pp x cp x dp, and the expert-parallel group is carved out of dp x cp (Megatron-Core's
// expert_model_parallel_size must divide data_parallel_size x context_parallel_size).
Status validate_parallel(const ParallelConfig& p) {
  const auto degree = [](const char* what, int v) -> Status {
    if (v < 1 || v > 65536) return range_error(what, v, "1 to 65536");
    return Ok{};
  };
  if (auto s = degree("tensor-parallel", p.tensor_parallel); !s) return s;
  if (auto s = degree("pipeline-parallel", p.pipeline_parallel); !s) return s;
  if (auto s = degree("context-parallel", p.context_parallel); !s) return s;
  if (auto s = degree("expert-parallel", p.expert_parallel); !s) return s;
  if (auto s = degree("virtual-stages", p.virtual_stages); !s) return s;
  const std::int64_t mp = static_cast<std::int64_t>(p.tensor_parallel) * p.pipeline_parallel * p.context_parallel;
  if (mp > p.world_size() || p.world_size() % mp != 0)
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("tensor-parallel x pipeline-parallel x context-parallel = {} x {} x {} = {} must "
                                  "divide the number of GPUs ({} = {} node(s) x {})",
                                  p.tensor_parallel, p.pipeline_parallel, p.context_parallel, mp, p.world_size(),
                                  p.nodes, p.num_gpus),
                      "the GPUs left over form the data-parallel groups; use a multiple of the product");
  const std::int64_t dp_cp = static_cast<std::int64_t>(p.data_parallel_size()) * p.context_parallel;
  if (p.expert_tensor_parallel != 0) {
    if (auto s = degree("expert-tensor-parallel", p.expert_tensor_parallel); !s) return s;
    // Megatron-Core (parallel_state.initialize_model_parallel): the expert groups tile the
    // tp x cp x dp ranks of a pipeline stage.
    const std::int64_t group = static_cast<std::int64_t>(p.expert_parallel) * p.expert_tensor_parallel;
    if ((dp_cp * p.tensor_parallel) % group != 0)
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("expert-parallel x expert-tensor-parallel = {} x {} must divide tensor x "
                                    "data-parallel x context-parallel = {}",
                                    p.expert_parallel, p.expert_tensor_parallel, dp_cp * p.tensor_parallel),
                        "the expert groups tile the GPUs of a pipeline stage (Megatron-Core's rule)");
  } else if (p.expert_parallel > 1 && dp_cp % p.expert_parallel != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("expert-parallel = {} must divide data-parallel x context-parallel = {}",
                                  p.expert_parallel, dp_cp),
                      "experts are split over the GPUs that hold the same layers (Megatron-Core's rule)");
  }
  if (p.virtual_stages > 1 && p.pp_schedule != PipelineSchedule::kInterleaved1F1B)
    return make_error(ErrorCode::kConflict,
                      fmt::format("virtual-stages = {} needs the interleaved_1f1b schedule (got {})", p.virtual_stages,
                                  to_string(p.pp_schedule)),
                      "add --pp-schedule interleaved_1f1b, or drop --virtual-stages");
  if (p.sharding == ShardingStrategy::kFsdpNoShard && p.fsdp_version == 2)
    return make_error(ErrorCode::kConflict, "FSDP2 (fully_shard) has no NO_SHARD strategy",
                      "use --fsdp-version 1 for FullyShardedDataParallel's NO_SHARD, or drop --fsdp for "
                      "DistributedDataParallel (torch's replicate)");
  if (p.dp_replicate < 0 || p.dp_replicate > 65536) return range_error("dp-replicate", p.dp_replicate, "1 to 65536");
  if (p.dp_replicate > 0) {
    const std::int64_t group = static_cast<std::int64_t>(p.data_parallel_size()) * std::max(1, p.context_parallel);
    if (p.sharding != ShardingStrategy::kFsdpHybridShard)
      return make_error(ErrorCode::kConflict, "dp-replicate sets HSDP's replica groups: it needs --fsdp hybrid_shard");
    if (group % p.dp_replicate != 0)
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("dp-replicate = {} must divide the data-parallel x context ranks ({})",
                                    p.dp_replicate, group));
  }
  if (p.pp_layers_per_stage < 0 || p.pp_layers_per_stage > 65536)
    return range_error("pp-layers-per-stage", p.pp_layers_per_stage, "1 to 65536");
  if (p.pp_schedule == PipelineSchedule::kInterleaved1F1B && p.pipeline_parallel > 1 && p.virtual_stages < 2 &&
      p.pp_layers_per_stage == 0)
    return make_error(ErrorCode::kInvalidArgument,
                      "the interleaved_1f1b schedule needs --virtual-stages >= 2 (model chunks per GPU)");
  if (p.pp_first_stage_layers < 0 || p.pp_last_stage_layers < 0)
    return make_error(ErrorCode::kInvalidArgument, "first/last pipeline stage layer counts must be >= 0");
  if ((p.pp_first_stage_layers > 0 || p.pp_last_stage_layers > 0) && p.pipeline_parallel < 2)
    return make_error(ErrorCode::kConflict, "first/last pipeline stage layers need --pipeline-parallel >= 2");
  if (!(p.moe_capacity_factor == 0.0 || (p.moe_capacity_factor >= 0.01 && p.moe_capacity_factor <= 1024.0)))
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("moe-capacity-factor = {} is out of range (0.01 to 1024, or 0 for dropless)",
                                  p.moe_capacity_factor));
  return Ok{};
}

Status validate(const TrainingConfig& c) {
  // Upper bounds keep every size product far inside int64 and reject typos early.
  if (c.micro_batch < 1 || c.micro_batch > (1 << 20)) return range_error("batch", c.micro_batch, "1 to 1048576");
  if (c.seq_len < 1 || c.seq_len > (1 << 24)) return range_error("seq-len", c.seq_len, "1 to 16777216");
  if (c.grad_accum < 1 || c.grad_accum > (1 << 24))
    return range_error("gradient-accumulation-steps", c.grad_accum, "1 to 16777216");
  if (c.lora.enabled && (c.lora.r < 1 || c.lora.r > 65536)) return range_error("lora-r", c.lora.r, "1 to 65536");
  if (c.checkpoint_every < 1 || c.checkpoint_every > 65536)
    return range_error("checkpoint-every", c.checkpoint_every, "1 to 65536");
  if (c.checkpoint_every > 1 && !c.gradient_checkpointing)
    return make_error(ErrorCode::kConflict, "checkpoint-every checkpoints every N-th layer: it needs gradient checkpointing",
                      "add --gradient-checkpointing, or drop --checkpoint-every");
  if (c.checkpoint_policy == TrainingConfig::CheckpointPolicy::kOp) {
    // docs/formulas.md#per-op-selective-checkpointing: torchtitan's policy runs inside
    // torch.utils.checkpoint's non-reentrant frame, on every layer.
    if (!c.gradient_checkpointing)
      return make_error(ErrorCode::kConflict, "checkpoint-policy op selects what a checkpointed layer keeps: it needs "
                                              "gradient checkpointing",
                        "add --gradient-checkpointing, or drop --checkpoint-policy");
    if (c.reentrant_checkpointing())
      return make_error(ErrorCode::kConflict,
                        "checkpoint-policy op needs non-reentrant checkpointing (selective checkpointing contexts "
                        "work only with use_reentrant=False)",
                        "add --use-reentrant false");
    if (c.checkpoint_every > 1)
      return make_error(ErrorCode::kConflict,
                        "checkpoint-policy op checkpoints every layer: it cannot be combined with checkpoint-every",
                        "drop --checkpoint-every or --checkpoint-policy");
  }
  if (c.lora.dropout < 0 || c.lora.dropout >= 1)
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("lora-dropout = {} is out of range (0 <= p < 1)", c.lora.dropout));
  if ((c.quant.load_in_4bit || c.quant.load_in_8bit) && !c.lora.enabled)
    return make_error(ErrorCode::kUnsupported, "quantized weights cannot be trained in full",
                      "add --use-peft (QLoRA trains LoRA adapters on top of the quantized model)");
  if (c.quant.load_in_4bit && c.quant.load_in_8bit)
    return make_error(ErrorCode::kConflict, "load-in-4bit and load-in-8bit are mutually exclusive");
  if (c.autocast && *c.autocast == DType::kFloat32)
    return make_error(ErrorCode::kInvalidArgument, "autocast dtype must be bf16 or fp16");
  if (c.parallel.num_gpus < 1 || c.parallel.num_gpus > 1024)
    return range_error("num-gpus", c.parallel.num_gpus, "1 to 1024");
  if (c.parallel.nodes < 1 || c.parallel.nodes > 65536) return range_error("nodes", c.parallel.nodes, "1 to 65536");
  if (auto s = validate_parallel(c.parallel); !s) return s;
  if (c.parallel.fsdp_mixed_precision) {
    if (!fsdp_family(c.parallel.sharding))
      return make_error(ErrorCode::kConflict, "fsdp-mixed-precision is FSDP's MixedPrecisionPolicy: it needs --fsdp",
                        "add --fsdp full_shard (torchtitan shards fully), or drop --fsdp-mixed-precision");
    // A 16-bit model: torchtitan computes in it without autocast; accelerate (>= 0.30) upcasts the
    // trainable shards of a 16-bit model under the Trainer's --bf16/--fp16 autocast
    // (docs/formulas.md#accelerate-fsdp-upcast). An fp32 model needs neither.
    if (c.torch_dtype == DType::kFloat32)
      return make_error(ErrorCode::kConflict,
                        "fsdp-mixed-precision keeps fp32 shards of a 16-bit model: --torch-dtype must be bfloat16 or "
                        "float16",
                        "use --torch-dtype bfloat16");
  }
  if (c.contrastive.enabled()) {
    const auto& k = c.contrastive;
    if (k.texts_per_example < 2 || k.texts_per_example > 4096)
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("texts-per-example = {} is out of range (2 to 4096: an anchor and at least one "
                                    "positive)",
                                    k.texts_per_example));
    if (k.cached && (k.mini_batch_size < 1 || k.mini_batch_size > (1 << 20)))
      return range_error("mini-batch-size", k.mini_batch_size, "1 to 1048576");
    if (c.method != Method::kSft)
      return make_error(ErrorCode::kConflict, "contrastive training (texts-per-example) is a sentence-transformers "
                                              "loss; it does not combine with DPO or GRPO");
  }
  if (c.vision.images < -1 || c.vision.images > 1024) return range_error("images", c.vision.images, "0 to 1024");
  if (c.vision.image_height < 0 || c.vision.image_height > (1 << 16) || c.vision.image_width < 0 ||
      c.vision.image_width > (1 << 16))
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("image-size {}x{} is out of range (1 to 65536 pixels a side)", c.vision.image_width,
                                  c.vision.image_height));
  if ((c.liger_kernels || c.loss_kernel == LossKernel::kLiger || c.loss_kernel == LossKernel::kCce) &&
      c.device == Device::kCpu)
    return make_error(ErrorCode::kUnsupported,
                      fmt::format("loss kernel '{}' is a Triton GPU kernel; it does not run with --device cpu",
                                  c.liger_kernels ? "liger" : to_string(c.loss_kernel)),
                      "use --loss-kernel eager or chunked, or estimate for --device cuda");
  if (c.method == Method::kGrpo) {
    const auto& g = c.grpo;
    if (g.num_generations < 1) return range_error("num-generations", g.num_generations, ">= 1");
    if (g.max_prompt_length < 1 || g.max_prompt_length > (1 << 24))
      return range_error("max-prompt-length", g.max_prompt_length, "1 to 16777216");
    if (g.max_completion_length < 1 || g.max_completion_length > (1 << 24))
      return range_error("max-completion-length", g.max_completion_length, "1 to 16777216");
    if (g.vllm_gpu_memory_utilization <= 0 || g.vllm_gpu_memory_utilization >= 1)
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("vllm-gpu-memory-utilization = {} must be between 0 and 1",
                                    g.vllm_gpu_memory_utilization));
  }
  return Ok{};
}

}  // namespace memplan

// ms-swift arguments as YAML (`swift sft --config x.yaml`, `swift rlhf`, `megatron sft`): one
// flat mapping of SftArguments / RLHFArguments (TrainingArguments plus swift's model, template,
// tuner and quantization arguments). Defaults that differ from TRL (swift/arguments,
// swift/trainers/arguments.py): LoRA unless tuner_type (train_type before 3.x) says otherwise,
// rank 8, alpha 32, all linear layers; per_device_train_batch_size 1; gradient checkpointing on;
// gradient_accumulation_steps ceil(16 / batch / GPUs) when unset; `deepspeed:` may name a preset
// (zero0..zero3, zero2_offload, zero3_offload). docs/configs.md#ms-swift.
#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

// The key under the Ray group `train:` when the file has it there, else the top-level key.
std::string swift_key(Mapper& m, std::string_view key) {
  const std::string nested = "train." + std::string(key);
  const YamlNode* t = m.root().get("train");
  if (t != nullptr && t->is_map() && t->get(std::string(key)) != nullptr) return nested;
  return std::string(key);
}

Status read_swift_method(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto rlhf, m.text("rlhf_type"));
  if (!rlhf) {
    c.method = Method::kSft;
    m.from_default("method", "SFT: no rlhf_type (swift sft)");
    return Ok{};
  }
  const YamlNode& n = *m.node("rlhf_type");
  const std::string t = to_lower(trim(*rlhf));
  if (t == "grpo") {
    c.method = Method::kGrpo;
  } else if (t == "dpo" || t == "kto") {
    c.method = Method::kDpo;
  } else if (t == "orpo" || t == "simpo" || t == "cpo") {
    c.method = Method::kDpo;
    c.dpo.ref_model = RefModel::kNone;
    m.derived("ref_model", fmt::format("none: {} has no reference model", t));
  } else if (t == "ppo") {
    return m.error_at(n, ErrorCode::kUnsupported,
                      "rlhf_type: ppo trains a value model beside the policy and keeps a reward and a reference "
                      "model, which memplan does not model",
                      "memplan models rlhf_type dpo, kto, orpo, simpo, cpo and grpo; an SFT estimate of the policy "
                      "alone (drop rlhf_type) is a lower bound");
  } else if (t == "gkd") {
    return m.error_at(n, ErrorCode::kUnsupported,
                      "rlhf_type: gkd keeps a teacher model beside the student, which memplan does not model",
                      "an SFT estimate of the student alone (drop rlhf_type; the teacher as a second --model) is a "
                      "lower bound");
  } else if (t == "rm") {
    return m.error_at(n, ErrorCode::kUnsupported,
                      "rlhf_type: rm trains a reward model (a scalar head on chosen and rejected), which memplan "
                      "does not model",
                      "a DPO estimate without a reference model (rlhf_type: simpo) is close: two sequences, one model");
  } else {
    return m.error_at(n, ErrorCode::kUnknownName, fmt::format("unknown rlhf_type '{}'", *rlhf),
                      did_you_mean(t, {"dpo", "orpo", "simpo", "kto", "cpo", "rm", "ppo", "grpo", "gkd"}));
  }
  m.from_file("method", n, "rlhf_type");
  return Ok{};
}

// tuner_type / train_type: full, lora, longlora, adalora, dora... and QLoRA as lora + quant_bits.
Status read_swift_tuner(Mapper& m) {
  TrainingConfig& c = m.config();
  const std::string key = m.node(swift_key(m, "tuner_type")) != nullptr ? swift_key(m, "tuner_type")
                                                                        : swift_key(m, "train_type");
  MEMPLAN_TRY(auto tuner, m.text(key));
  const std::string t = to_lower(tuner.value_or("lora"));
  if (t == "full") {
    c.lora.enabled = false;
  } else {
    c.lora.enabled = true;
    if (t != "lora" && t != "longlora" && t != "dora" && t != "rslora")
      m.warn_at(*m.node(key), fmt::format("tuner_type '{}' is estimated as LoRA (rank lora_rank on the target "
                                          "modules): its own adapter state differs",
                                          *tuner));
  }
  if (tuner) m.from_file("use_peft", *m.node(key), key);
  else m.from_default("use_peft", "LoRA: ms-swift's tuner_type = lora");
  if (!c.lora.enabled) return Ok{};
  c.lora.r = 8;
  c.lora.alpha = 32;
  c.lora.dropout = 0.05;
  MEMPLAN_TRY(bool r, m.read(swift_key(m, "lora_rank"), "lora_r", c.lora.r));
  if (!r) m.from_default("lora_r", "8: ms-swift");
  MEMPLAN_TRY(bool a, m.read(swift_key(m, "lora_alpha"), "lora_alpha", c.lora.alpha));
  if (!a) m.from_default("lora_alpha", "32: ms-swift");
  MEMPLAN_IO_CHECK(m.read(swift_key(m, "lora_dropout"), "lora_dropout", c.lora.dropout));
  MEMPLAN_TRY(auto targets, m.list(swift_key(m, "target_modules")));
  if (targets) {
    set_lora_targets(c, *targets);
    m.from_file("lora_target_modules", *m.node(swift_key(m, "target_modules")), "target_modules");
  } else {
    c.lora.all_linear = true;
    m.from_default("lora_target_modules", "all-linear: ms-swift's target_modules");
  }
  if (const YamlNode* rx = m.node(swift_key(m, "target_regex")); rx != nullptr && rx->is_scalar())
    m.warn_at(*rx, "target_regex is not resolved against the model's modules: the estimate puts adapters on every "
                   "linear layer (an overestimate)");
  MEMPLAN_TRY(auto save, m.list(swift_key(m, "modules_to_save")));
  if (save && !save->empty()) {
    c.lora.modules_to_save = *save;
    m.from_file("modules_to_save", *m.node(swift_key(m, "modules_to_save")), "modules_to_save");
  }
  return Ok{};
}

Status read_swift_quant(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto bits, m.text("quant_bits"));
  if (!bits) return Ok{};
  const YamlNode& n = *m.node("quant_bits");
  MEMPLAN_TRY(auto method, m.text("quant_method"));
  const std::string qm = to_lower(method.value_or("bnb"));
  if (*bits == "4") c.quant.load_in_4bit = true;
  else if (*bits == "8") c.quant.load_in_8bit = true;
  else
    return m.error_at(n, ErrorCode::kUnsupported, fmt::format("quant_bits: {} is not modelled", *bits),
                      "memplan models 4- and 8-bit weights");
  m.from_file(*bits == "4" ? "load_in_4bit" : "load_in_8bit", n, "quant_bits");
  if (qm != "bnb")
    m.warn_at(*m.node("quant_method"), fmt::format("quant_method {} is estimated as bitsandbytes' {}-bit storage",
                                                   qm, *bits));
  MEMPLAN_TRY(auto qt, m.text("bnb_4bit_quant_type"));
  c.quant.quant_type = to_lower(qt.value_or("nf4"));
  MEMPLAN_TRY(auto dq, m.boolean("bnb_4bit_use_double_quant"));
  c.quant.double_quant = dq.value_or(true);
  return Ok{};
}

// `deepspeed:` a preset name (swift/config/<name>.json) or a path or a JSON string.
Status read_swift_deepspeed(Mapper& m) {
  TrainingConfig& c = m.config();
  const YamlNode* n = m.node("deepspeed");
  if (n == nullptr || n->is_null()) return Ok{};
  if (!n->is_scalar()) {
    m.set_deepspeed_ref(n);
    return Ok{};
  }
  const std::string v = to_lower(trim(n->value));
  struct Preset {
    const char* name;
    ShardingStrategy sharding;
    bool offload_optimizer, offload_params;
  };
  static constexpr Preset kPresets[] = {{"zero0", ShardingStrategy::kNone, false, false},
                                        {"zero1", ShardingStrategy::kZero1, false, false},
                                        {"zero2", ShardingStrategy::kZero2, false, false},
                                        {"zero3", ShardingStrategy::kZero3, false, false},
                                        {"zero2_offload", ShardingStrategy::kZero2, true, false},
                                        {"zero3_offload", ShardingStrategy::kZero3, true, true}};
  for (const Preset& p : kPresets) {
    if (v != p.name) continue;
    c.parallel.sharding = p.sharding;
    m.from_file("sharding", *n, fmt::format("deepspeed: {} (ms-swift's preset swift/config/{}.json)", p.name, p.name));
    if (p.offload_optimizer) {
      c.parallel.offload_optimizer = true;
      m.from_file("offload_optimizer", *n, "deepspeed");
    }
    if (p.offload_params) {
      c.parallel.offload_params = true;
      m.from_file("offload_params", *n, "deepspeed");
    }
    return Ok{};
  }
  m.set_deepspeed_ref(n);  // a JSON file next to the config
  return Ok{};
}

// Megatron-SWIFT (`megatron sft|rlhf`): Megatron's own names for batch and parallelism.
Status read_swift_megatron(Mapper& m) {
  TrainingConfig& c = m.config();
  // The Ray group `train:` names the GPUs it trains on (`train.gpus: 4`).
  if (m.node("train.gpus") != nullptr) MEMPLAN_IO_CHECK(m.read("train.gpus", "num_gpus", c.parallel.num_gpus));
  auto degree = [&](std::string_view key, const char* input, int& field) -> Status {
    MEMPLAN_IO_CHECK(m.read_degree(swift_key(m, key), input, field));
    return Ok{};
  };
  MEMPLAN_IO_CHECK(degree("tensor_model_parallel_size", "tensor_parallel", c.parallel.tensor_parallel));
  MEMPLAN_IO_CHECK(degree("pipeline_model_parallel_size", "pipeline_parallel", c.parallel.pipeline_parallel));
  MEMPLAN_IO_CHECK(degree("expert_model_parallel_size", "expert_parallel", c.parallel.expert_parallel));
  MEMPLAN_IO_CHECK(degree("context_parallel_size", "context_parallel", c.parallel.context_parallel));
  MEMPLAN_IO_CHECK(m.read(swift_key(m, "sequence_parallel"), "sequence_parallel", c.parallel.sequence_parallel));
  MEMPLAN_IO_CHECK(read_recompute_granularity(m));
  return Ok{};
}

}  // namespace

Status map_ms_swift(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_IO_CHECK(m.read_model("model"));
  MEMPLAN_IO_CHECK(read_swift_method(m));

  // Batch: TrainingArguments' names, or Megatron-SWIFT's micro_batch_size / global_batch_size.
  const bool megatron = m.node("micro_batch_size") != nullptr || m.node("global_batch_size") != nullptr;
  if (megatron) {
    MEMPLAN_IO_CHECK(m.read_or("micro_batch_size", "batch", c.micro_batch, 1, "Megatron-SWIFT micro_batch_size = 1"));
    m.site(Knob::kBatch, "micro_batch_size");
    c.grad_accum = 1;
    m.from_default("grad_accum",
                   "1: Megatron-SWIFT accumulates global_batch_size / (micro_batch_size x data-parallel GPUs); the "
                   "step's peak does not depend on it");
    (void)m.node("global_batch_size");
    m.warn_file(0, "a Megatron-SWIFT config (micro_batch_size, global_batch_size): memplan estimates the Hugging Face "
                   "model with the parallel degrees written here, not Megatron's fused kernels");
  } else {
    MEMPLAN_IO_CHECK(m.read_or("per_device_train_batch_size", "batch", c.micro_batch, 1,
                               "ms-swift per_device_train_batch_size = 1"));
    m.site(Knob::kBatch, "per_device_train_batch_size");
    MEMPLAN_TRY(bool ga, m.read("gradient_accumulation_steps", "grad_accum", c.grad_accum));
    if (!ga) {
      c.grad_accum = std::max<std::int64_t>(1, (16 + c.micro_batch - 1) / c.micro_batch);
      m.from_default("grad_accum", "ceil(16 / per_device_train_batch_size / GPUs): ms-swift's default, on one GPU");
    }
    m.site(Knob::kGradAccum, "gradient_accumulation_steps", "per_device_train_batch_size");
  }
  MEMPLAN_TRY(bool seq, m.read("max_length", "seq_len", c.seq_len));
  if (!seq) {
    c.seq_len = 2048;
    m.from_default("seq_len", "2048: ms-swift's max_length is unset (the model's own limit)");
    m.warn_file(0, "max_length is not set: ms-swift then truncates at the model's maximum length, which may be far "
                   "more; memplan plans 2048 tokens (pass --seq-len)");
  }
  m.site(Knob::kSeqLen, "max_length", "per_device_train_batch_size");

  if (c.method == Method::kGrpo) {
    c.grpo.num_generations = 8;
    MEMPLAN_TRY(bool g, m.read("num_generations", "num_generations", c.grpo.num_generations));
    if (!g) m.from_default("num_generations", "8: ms-swift");
    c.grpo.max_completion_length = 512;
    MEMPLAN_TRY(bool mc, m.read("max_completion_length", "max_completion_length", c.grpo.max_completion_length));
    if (!mc) m.from_default("max_completion_length", "512: ms-swift");
    c.grpo.max_prompt_length = std::max<std::int64_t>(1, c.seq_len);
    m.derived("max_prompt_length", "max_length: ms-swift truncates the prompt at max_length");
    MEMPLAN_IO_CHECK(m.read("beta", "beta", c.grpo.beta));
    MEMPLAN_IO_CHECK(m.read("temperature", "temperature", c.grpo.temperature));
    MEMPLAN_IO_CHECK(read_vllm(m, "use_vllm", "vllm_mode"));
    const std::string util = m.node("rollout.vllm_gpu_memory_utilization") != nullptr
                                 ? "rollout.vllm_gpu_memory_utilization"
                                 : "vllm_gpu_memory_utilization";
    MEMPLAN_IO_CHECK(m.read(util, "vllm_gpu_memory_utilization", c.grpo.vllm_gpu_memory_utilization));
    // Ray groups: `rollout:` with its own GPUs and no colocate_groups runs vLLM on other GPUs.
    if (c.grpo.vllm != VllmMode::kNone && m.node("rollout.gpus") != nullptr && m.node("colocate_groups") == nullptr) {
      c.grpo.vllm = VllmMode::kServer;
      m.derived("use_vllm", "the Ray group rollout: has its own GPUs (rollout.gpus) and no colocate_groups: vLLM "
                            "runs beside the training GPUs, not on them");
    }
  } else if (c.method == Method::kDpo) {
    MEMPLAN_IO_CHECK(m.read("max_completion_length", "max_completion_length", c.dpo.max_prompt_length));
  }

  // Precision: torch_dtype (default: the checkpoint's), bf16/fp16 follow it.
  MEMPLAN_TRY(bool dt, m.read_dtype("torch_dtype", "torch_dtype", c.torch_dtype));
  if (!dt) {
    m.out().inputs.torch_dtype_from_model = true;
    m.from_default("torch_dtype", "the checkpoint's dtype: ms-swift's torch_dtype default");
  }
  MEMPLAN_TRY(auto bf, m.boolean("bf16"));
  MEMPLAN_TRY(auto fp, m.boolean("fp16"));
  if (fp.value_or(false)) {
    c.autocast = DType::kFloat16;
    m.from_file("autocast", *m.node("fp16"), "fp16");
  } else if (bf.has_value() && !*bf) {
    c.autocast.reset();
    m.from_file("autocast", *m.node("bf16"), "bf16");
  } else {
    c.autocast = DType::kBFloat16;
    if (bf) m.from_file("autocast", *m.node("bf16"), "bf16");
    else m.from_default("autocast", "bf16: ms-swift sets bf16 from a bfloat16 torch_dtype");
  }

  MEMPLAN_TRY(bool gc, m.read("gradient_checkpointing", "gradient_checkpointing", c.gradient_checkpointing));
  if (!gc) {
    c.gradient_checkpointing = true;
    m.from_default("gradient_checkpointing", "true: ms-swift's default");
  }
  MEMPLAN_IO_CHECK(read_checkpoint_kwargs(m));
  MEMPLAN_IO_CHECK(read_swift_tuner(m));
  MEMPLAN_IO_CHECK(read_swift_quant(m));
  MEMPLAN_IO_CHECK(m.read_optimizer("optim", "optim", c.optim.kind));

  // attn_impl: flash_attn / flash_attention_2 / sdpa / eager (and attention_backend: flash for Megatron).
  MEMPLAN_TRY(auto attn, m.text("attn_impl"));
  if (attn) {
    const std::string a = to_lower(*attn);
    const YamlNode& n = *m.node("attn_impl");
    if (a == "flash_attn" || a == "flash_attention_2") c.attn = AttnImpl::kFlashAttention2;
    else MEMPLAN_IO_CHECK(m.read_attn_impl("attn_impl"));
    m.from_file("attn_implementation", n, "attn_impl");
  } else if (const YamlNode* ab = m.node("attention_backend"); ab != nullptr && ab->is_scalar()) {
    const std::string a = to_lower(ab->value);
    if (a == "flash" || a == "fused") c.attn = AttnImpl::kFlashAttention2;
    else if (a == "unfused" || a == "local") c.attn = AttnImpl::kEager;
    else c.attn = AttnImpl::kFlashAttention2;
    m.from_file("attn_implementation", *ab, "attention_backend");
  }

  MEMPLAN_IO_CHECK(read_swift_deepspeed(m));
  if (megatron || m.node("tensor_model_parallel_size") != nullptr || m.node("train.tensor_model_parallel_size"))
    MEMPLAN_IO_CHECK(read_swift_megatron(m));

  // Keys that change memory and are not modelled: each said at its line.
  MEMPLAN_IO_CHECK(warn_unmodelled_hf(m));
  note_packing(m, "packing");
  note_packing(m, "padding_free");
  MEMPLAN_TRY(auto sp, m.integer("sequence_parallel_size"));
  if (sp.value_or(1) > 1)
    m.warn_at(*m.node("sequence_parallel_size"),
              fmt::format("sequence_parallel_size = {} (Ulysses) is not modelled: the estimate keeps the whole "
                          "sequence's activations on each GPU (an overestimate)",
                          *sp));
  for (const char* k : {"offload_model", "offload_optimizer", "sleep_level"}) {
    const YamlNode* n = m.node(k);
    if (n == nullptr || !n->is_scalar() || n->value == "false" || n->value == "0") continue;
    m.warn_at(*n, fmt::format("{}: moving the model or optimizer off the GPU while vLLM generates is not modelled; "
                              "the estimate keeps them resident (an overestimate)",
                              k));
  }
  if (const YamlNode* mp = m.node("max_pixels"); mp != nullptr && mp->is_scalar())
    m.warn_at(*mp, "max_pixels bounds image tokens; memplan plans text of max_length tokens only (images inside "
                   "max_length)");
  for (const char* k : {"freeze_llm", "freeze_vit", "freeze_aligner", "ENV", "train", "rollout", "colocate_groups",
                        "device_groups", "use_ray"})
    (void)m.node(k);
  m.check_unknown("", ms_swift_known_keys(), /*strict=*/true);
  return Ok{};
}

}  // namespace memplan::io

// axolotl YAML: base_model, micro_batch_size, sequence_len, adapter: lora|qlora, rl: dpo|grpo
// with a `trl:` section. Defaults follow axolotl's config schema; the weight dtype follows its
// resolve_dtype (bf16/bfloat16 -> bf16 weights; fp16, float16 or 8-bit -> fp16; else fp32).
#include <algorithm>

#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

Status read_precision(Mapper& m) {
  TrainingConfig& c = m.config();
  const YamlNode* bf = m.node("bf16");
  // bf16 may be true, false, "auto" (the default) or "full".
  bool bf16 = true;
  bool bf16_auto = true;
  if (bf != nullptr && !bf->is_null()) {
    const std::string v = to_lower(bf->is_scalar() ? bf->value : "");
    if (v == "auto") {
      bf16_auto = true;
    } else if (v == "full") {
      bf16_auto = false;
    } else {
      MEMPLAN_TRY(auto b, m.boolean("bf16"));
      bf16 = b.value_or(false);
      bf16_auto = false;
    }
  }
  MEMPLAN_TRY(auto fp16, m.boolean("fp16"));
  MEMPLAN_TRY(auto bfloat16, m.boolean("bfloat16"));
  MEMPLAN_TRY(auto float16, m.boolean("float16"));
  if (fp16.value_or(false) && bf16_auto) bf16 = false;  // axolotl: fp16 turns bf16: auto off
  if (bf16 && fp16.value_or(false) && !bf16_auto)
    return m.error_at(*m.node("fp16"), ErrorCode::kConflict, "bf16 and fp16 are both true", "set only one of them");

  std::string note;
  if (bf16 || bfloat16.value_or(false)) {
    c.torch_dtype = DType::kBFloat16;
    note = bf16 ? "bf16" : "bfloat16";
  } else if (c.quant.load_in_8bit || fp16.value_or(false) || float16.value_or(false)) {
    c.torch_dtype = DType::kFloat16;
    note = fp16.value_or(false) ? "fp16" : float16.value_or(false) ? "float16" : "load_in_8bit";
  } else {
    c.torch_dtype = DType::kFloat32;
  }
  // bf16 / fp16 also turn on the Trainer's autocast; bfloat16 / float16 are "no AMP".
  if (bf16) c.autocast = DType::kBFloat16;
  else if (fp16.value_or(false)) c.autocast = DType::kFloat16;
  else c.autocast.reset();

  if (bf16 && bf16_auto && (bf == nullptr || bf->is_null())) {
    m.from_default("torch_dtype", "axolotl bf16: auto, assuming a GPU with bf16 (Ampere or newer)");
    m.from_default("autocast", "axolotl bf16: auto, assuming a GPU with bf16 (Ampere or newer)");
  } else if (bf16 && bf16_auto) {
    m.derived("torch_dtype", fmt::format("bf16: auto at {}, assuming a GPU with bf16", m.where_text(*bf)));
    m.derived("autocast", fmt::format("bf16: auto at {}, assuming a GPU with bf16", m.where_text(*bf)));
  } else if (!note.empty()) {
    const YamlNode* n = m.node(note == "load_in_8bit" ? "load_in_8bit" : note);
    m.from_file("torch_dtype", *n, note);
    if (c.autocast) m.from_file("autocast", *n, note);
    else m.from_default("autocast", "none (bfloat16/float16 load the weights in half precision without AMP)");
  } else {
    m.from_default("torch_dtype", "float32: neither bf16 nor fp16 is on");
    m.from_default("autocast", "none: neither bf16 nor fp16 is on");
  }
  return Ok{};
}

Status read_attention(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(bool impl, m.read_attn_impl("attn_implementation"));
  if (impl) return Ok{};
  struct Legacy {
    const char* key;
    AttnImpl impl;
  };
  for (const Legacy& l : {Legacy{"flash_attention", AttnImpl::kFlashAttention2}, Legacy{"sdp_attention", AttnImpl::kSdpa},
                          Legacy{"xformers_attention", AttnImpl::kFlashAttention2}}) {
    MEMPLAN_TRY(auto on, m.boolean(l.key));
    if (!on.value_or(false)) continue;
    c.attn = l.impl;
    m.from_file("attn_implementation", *m.node(l.key), l.key);
    if (std::string_view(l.key) == "xformers_attention")
      m.warn_at(*m.node(l.key), "xformers attention is modelled as flash_attention_2 (both keep no score matrix)");
    break;
  }
  return Ok{};
}

Status read_rl(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto rl, m.text("rl"));
  if (!rl) {
    m.from_default("method", "no rl: key: SFT");
    return Ok{};
  }
  const YamlNode& n = *m.node("rl");
  const std::string v = to_lower(*rl);
  if (v == "dpo" || v == "ipo" || v == "kto") {
    // KTO (TRL KTOTrainer) keeps a reference model like DPO; its step runs each completion and a
    // mismatched "KL" completion, two sequences per example like DPO's chosen/rejected pair.
    c.method = Method::kDpo;
  } else if (v == "orpo" || v == "simpo" || v == "cpo") {
    c.method = Method::kDpo;
    c.dpo.ref_model = RefModel::kNone;
    m.from_file("ref_model", n, "rl");
  } else if (v == "grpo") {
    c.method = Method::kGrpo;
  } else {
    return m.error_at(n, ErrorCode::kUnsupported, fmt::format("rl: {} is not modelled", *rl),
                      "memplan models SFT, DPO (dpo, ipo, kto, orpo, simpo, cpo) and GRPO");
  }
  m.from_file("method", n, "rl");
  if (c.method == Method::kGrpo) {
    for (const char* key : {"trl.beta", "rl_beta", "beta"}) {
      MEMPLAN_TRY(auto b, m.number(key));
      if (!b) continue;
      c.grpo.beta = *b;
      m.from_file("beta", *m.node(key), key);
      break;
    }
    MEMPLAN_IO_CHECK(m.read("trl.num_generations", "num_generations", c.grpo.num_generations));
    MEMPLAN_IO_CHECK(m.read("trl.max_completion_length", "max_completion_length", c.grpo.max_completion_length));
    MEMPLAN_IO_CHECK(m.read("max_prompt_len", "max_prompt_length", c.grpo.max_prompt_length));
    MEMPLAN_IO_CHECK(m.read("trl.temperature", "temperature", c.grpo.temperature));
    MEMPLAN_IO_CHECK(read_vllm(m, "trl.use_vllm", "trl.vllm_mode"));
    MEMPLAN_IO_CHECK(m.read("vllm.gpu_memory_utilization", "vllm_gpu_memory_utilization",
                            c.grpo.vllm_gpu_memory_utilization));
  } else {
    MEMPLAN_IO_CHECK(m.read("max_prompt_len", "max_prompt_length", c.dpo.max_prompt_length));
  }
  return Ok{};
}

Status read_axolotl_fsdp(Mapper& m) {
  TrainingConfig& c = m.config();
  const YamlNode* fsdp = m.node("fsdp");
  const YamlNode* fsdp_config = m.node("fsdp_config");
  if ((fsdp == nullptr || fsdp->is_null()) && (fsdp_config == nullptr || fsdp_config->is_null())) return Ok{};
  c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  const YamlNode& where = fsdp_config != nullptr && !fsdp_config->is_null() ? *fsdp_config : *fsdp;
  m.from_file("sharding", where, fsdp_config != nullptr ? "fsdp_config" : "fsdp");
  MEMPLAN_TRY(auto strategy, m.text("fsdp_config.fsdp_sharding_strategy"));
  if (strategy) {
    auto s = parse_fsdp(to_lower(*strategy));
    if (!s) return m.error_at(*m.node("fsdp_config.fsdp_sharding_strategy"), s.error().code, s.error().message,
                              s.error().suggestion);
    c.parallel.sharding = *s;
  }
  MEMPLAN_TRY(bool top, m.read_fsdp_version("fsdp_version"));
  if (!top) MEMPLAN_IO_CHECK(m.read_fsdp_version("fsdp_config.fsdp_version"));
  // FSDP's own activation checkpointing (accelerate applies it to the wrapped layers) checkpoints
  // as gradient_checkpointing does.
  for (const char* key : {"fsdp_config.activation_checkpointing", "fsdp_config.fsdp_activation_checkpointing"}) {
    MEMPLAN_TRY(auto ac, m.boolean(key));
    if (ac.value_or(false) && !c.gradient_checkpointing) {
      c.gradient_checkpointing = true;
      m.from_file("gradient_checkpointing", *m.node(key), key);
    }
  }
  for (const char* key : {"fsdp_config.offload_params", "fsdp_config.fsdp_offload_params"}) {
    MEMPLAN_TRY(auto off, m.boolean(key));
    if (off.value_or(false)) {
      c.parallel.offload_params = c.parallel.offload_optimizer = true;
      m.from_file("offload_params", *m.node(key), key);
      m.from_file("offload_optimizer", *m.node(key), key);
    }
  }
  return Ok{};
}

// Keys that change memory in ways memplan does not model: a located warning each, never silence.
Status warn_unmodelled_axolotl(Mapper& m) {
  // The loss kernels the engine models for SFT (docs/formulas.md#fused-cross-entropy): Liger's fused
  // linear cross-entropy (with its RMSNorm/SwiGLU kernels when both are on) and Cut Cross-Entropy,
  // as a key or as axolotl's plugin. For preference/RL methods they stay warnings.
  const bool sft = m.config().method == Method::kSft;
  auto on = [&](const char* key) -> const YamlNode* {
    const YamlNode* n = m.node(key);
    if (n == nullptr || n->is_null() || !n->is_scalar()) return nullptr;
    const std::string v = to_lower(n->value);
    return (v == "false" || v == "0" || v == "none") ? nullptr : n;
  };
  const YamlNode* flce = on("liger_fused_linear_cross_entropy");
  const YamlNode* cce = on("cut_cross_entropy");
  MEMPLAN_TRY(auto plugins, m.list("plugins"));
  std::string cce_plugin;
  if (plugins)
    for (const auto& p : *plugins)
      if (p.find("cut_cross_entropy") != std::string::npos) cce_plugin = p;
  const bool liger_modules = on("liger_rms_norm") != nullptr && on("liger_glu_activation") != nullptr;
  if (sft && flce != nullptr) {
    m.set_loss_kernel(*flce, "liger_fused_linear_cross_entropy", LossKernel::kLiger, liger_modules);
  } else if (sft && (cce != nullptr || !cce_plugin.empty())) {
    m.set_loss_kernel(cce != nullptr ? *cce : *m.node("plugins"), cce != nullptr ? "cut_cross_entropy" : "plugins",
                      LossKernel::kCce, false);
  } else {
    if (flce != nullptr)
      m.warn_at(*flce, "liger_fused_linear_cross_entropy is not modelled for this method; Liger's fused loss never "
                       "holds the full logits: the estimate is too high by about the logits");
    if (cce != nullptr)
      m.warn_at(*cce, "cut_cross_entropy is not modelled for this method; Cut Cross-Entropy never holds the full "
                      "logits: the estimate is too high by about the logits");
    if (!cce_plugin.empty())
      m.warn_at(*m.node("plugins"), fmt::format("plugin {} (Cut Cross-Entropy) is not modelled for this method: it "
                                                "never holds the full logits, so the estimate is too high by about "
                                                "the logits",
                                                cce_plugin));
  }
  struct Feature {
    const char* key;
    const char* why;
  };
  static constexpr Feature kFeatures[] = {
      {"tiled_mlp", "the tiled MLP computes the MLP in chunks: its activations are overestimated"},
      {"activation_offloading", "offloaded activations are counted on the GPU: an overestimate"},
      {"relora", "ReLoRA is estimated as LoRA"},
      {"lisa_n_layers", "LISA trains a few layers at a time: estimated as full fine-tuning"},
  };
  for (const auto& f : kFeatures)
    if (const YamlNode* n = on(f.key)) m.warn_at(*n, fmt::format("{} is not modelled; {}", f.key, f.why));
  // Liger's RMSNorm/SwiGLU without its fused loss, or only one of the two: not modelled.
  if (!(sft && flce != nullptr && liger_modules))
    for (const char* k : {"liger_rms_norm", "liger_glu_activation"})
      if (const YamlNode* n = on(k))
        m.warn_at(*n, fmt::format("{} is not modelled on its own; Liger's fused kernels keep less for backward: a "
                                  "small overestimate",
                                  k));
  for (const char* k : {"context_parallel_size", "sequence_parallel_degree"}) {
    MEMPLAN_TRY(auto cp, m.integer(k));
    if (cp.value_or(1) > 1)
      m.warn_at(*m.node(k), fmt::format("{} = {} is not modelled: each GPU holds 1/{} of every sequence, but memplan "
                                        "estimates whole sequences per GPU (activations too high about {}x)",
                                        k, *cp, *cp, *cp));
  }
  // axolotl's N-D parallelism (dp_shard_size, dp_replicate_size, tensor_parallel_size,
  // context_parallel_size): the GPUs are their product; the FSDP shards span dp_shard_size.
  TrainingConfig& c = m.config();
  // transformers' tp_plan: the engine models it (ParallelConfig::megatron_core false).
  MEMPLAN_IO_CHECK(m.read_degree("tensor_parallel_size", "tensor_parallel", c.parallel.tensor_parallel));
  std::int64_t gpus = 1;
  std::vector<std::string> parts;
  for (const char* k : {"dp_shard_size", "dp_replicate_size", "tensor_parallel_size", "context_parallel_size"}) {
    MEMPLAN_TRY(auto v, m.integer(k));
    if (v && *v > 1) {
      gpus *= *v;
      parts.push_back(fmt::format("{} {}", k, *v));
    }
  }
  if (gpus > 1 && !m.has_origin("num_gpus")) {
    c.parallel.num_gpus = static_cast<int>(std::min<std::int64_t>(gpus, 65536));
    m.derived("num_gpus", fmt::format("{} GPUs: {}", gpus, fmt::join(parts, " x ")));
  }
  MEMPLAN_TRY(auto shard, m.integer("dp_shard_size"));
  if (shard.value_or(1) > 1 && c.parallel.sharding == ShardingStrategy::kNone) {
    c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
    c.parallel.fsdp_version = 2;
    m.from_file("sharding", *m.node("dp_shard_size"), "dp_shard_size (axolotl shards with FSDP2)");
  }
  MEMPLAN_TRY(auto replicas, m.integer("dp_replicate_size"));
  if (replicas.value_or(1) > 1 && c.parallel.sharding == ShardingStrategy::kFsdpFullShard) {
    c.parallel.sharding = ShardingStrategy::kFsdpHybridShard;
    c.parallel.dp_replicate = static_cast<int>(std::min<std::int64_t>(*replicas, 65536));
    m.from_file("sharding", *m.node("dp_replicate_size"), "dp_replicate_size (HSDP: replicas of dp_shard_size shards)");
  }
  note_packing(m, "sample_packing");
  if (const YamlNode* n = m.node("unfrozen_parameters"); n != nullptr && !n->is_null())
    m.warn_at(*n, "unfrozen_parameters trains only the parameters it matches; memplan estimates training all of them "
                  "(gradients and optimizer states too high)");
  return Ok{};
}

}  // namespace

Status map_axolotl(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_IO_CHECK(m.read_model("base_model"));
  MEMPLAN_IO_CHECK(read_rl(m));

  MEMPLAN_IO_CHECK(m.read_or("micro_batch_size", "batch", c.micro_batch, 1, "axolotl micro_batch_size = 1"));
  m.site(Knob::kBatch, "micro_batch_size");
  MEMPLAN_TRY(bool accum, m.read("gradient_accumulation_steps", "grad_accum", c.grad_accum));
  if (!accum) {
    // axolotl derives the accumulation from a total batch_size when only that is given.
    MEMPLAN_TRY(auto total, m.integer("batch_size"));
    if (total) {
      c.grad_accum = std::max<std::int64_t>(1, *total / c.micro_batch);
      m.derived("grad_accum", fmt::format("batch_size {} / micro_batch_size {} ({})", *total, c.micro_batch,
                                          m.where_text(*m.node("batch_size"))));
    } else {
      c.grad_accum = 1;
      m.from_default("grad_accum", "axolotl gradient_accumulation_steps = 1");
    }
  }
  m.site(Knob::kGradAccum, "gradient_accumulation_steps", "micro_batch_size");
  MEMPLAN_IO_CHECK(m.read_or("sequence_len", "seq_len", c.seq_len, 512, "axolotl sequence_len = 512"));
  m.site(Knob::kSeqLen, "sequence_len", "micro_batch_size");

  // Quantization before precision: load_in_8bit loads the rest of the model in fp16.
  MEMPLAN_IO_CHECK(m.read("load_in_4bit", "load_in_4bit", c.quant.load_in_4bit));
  MEMPLAN_IO_CHECK(m.read("load_in_8bit", "load_in_8bit", c.quant.load_in_8bit));
  MEMPLAN_IO_CHECK(read_precision(m));

  MEMPLAN_TRY(auto adapter, m.text("adapter"));
  if (adapter && !trim(*adapter).empty()) {
    const YamlNode& n = *m.node("adapter");
    const std::string a = to_lower(*adapter);
    if (a != "lora" && a != "qlora")
      return m.error_at(n, ErrorCode::kUnsupported, fmt::format("adapter: {} is not modelled", *adapter),
                        "memplan models lora and qlora adapters, or full fine-tuning (no adapter)");
    if (a == "qlora" && !c.quant.load_in_4bit)
      return m.error_at(n, ErrorCode::kInvalidConfig, "adapter: qlora needs load_in_4bit: true",
                        "add load_in_4bit: true (axolotl refuses qlora without it)");
    c.lora.enabled = true;
    m.from_file("use_peft", n, "adapter");
    if (a == "qlora") {
      c.quant.double_quant = true;  // axolotl's QLoRA BitsAndBytesConfig: nf4 with double quantization
      m.from_default("bnb_4bit_use_double_quant", "axolotl qlora: nf4 with double quantization");
    }
    c.lora.r = 8;  // PEFT LoraConfig default; axolotl passes lora_r through
    m.from_default("lora_r", "PEFT LoraConfig r = 8");
  }
  MEMPLAN_IO_CHECK(m.read("lora_r", "lora_r", c.lora.r));
  MEMPLAN_IO_CHECK(m.read("lora_alpha", "lora_alpha", c.lora.alpha));
  MEMPLAN_IO_CHECK(m.read("lora_dropout", "lora_dropout", c.lora.dropout));
  MEMPLAN_TRY(auto linear, m.boolean("lora_target_linear"));
  MEMPLAN_TRY(auto targets, m.list("lora_target_modules"));
  if (linear.value_or(false)) {
    set_lora_targets(c, {"all-linear"});
    m.from_file("lora_target_modules", *m.node("lora_target_linear"), "lora_target_linear");
  } else if (targets) {
    set_lora_targets(c, *targets);
    m.from_file("lora_target_modules", *m.node("lora_target_modules"), "lora_target_modules");
  } else if (c.lora.enabled && m.node("lora_target_parameters") == nullptr) {
    // axolotl's load_lora passes `cfg.lora_target_modules or []`: an empty list, not None, so PEFT
    // never looks its default up and raises "Target modules [] not found in the base model".
    return m.error_at(*m.node("adapter"), ErrorCode::kInvalidConfig,
                      fmt::format("adapter: {} names no modules: axolotl passes target_modules=[] to PEFT when "
                                  "lora_target_modules is absent, and PEFT finds nothing to adapt",
                                  *adapter),
                      "add lora_target_linear: true, or lora_target_modules: [q_proj, v_proj, ...]");
  }
  MEMPLAN_TRY(auto save, m.list("lora_modules_to_save"));
  if (save) {
    c.lora.modules_to_save = *save;
    m.from_file("modules_to_save", *m.node("lora_modules_to_save"), "lora_modules_to_save");
  }
  if (!c.lora.enabled) {
    if (const YamlNode* n = m.first_of({"lora_r", "lora_target_linear", "lora_target_modules"})) {
      m.warn_at(*n, "LoRA settings have no effect without adapter: lora or qlora (all weights are trained)");
      m.out().inputs.lora_ignored_warning = m.out().inputs.warnings.back();
    }
  }

  MEMPLAN_TRY(auto opt, m.read_optimizer("optimizer", "optim", c.optim.kind));
  if (!opt) {
    c.optim.kind = OptimizerKind::kAdamWTorchFused;
    m.from_default("optim", "axolotl optimizer = adamw_torch_fused");
  }
  const YamlNode* gc = m.node("gradient_checkpointing");
  if (gc != nullptr && gc->is_scalar() && (to_lower(gc->value) == "offload" || to_lower(gc->value) == "offload_disk")) {
    c.gradient_checkpointing = true;
    m.from_file("gradient_checkpointing", *gc, "gradient_checkpointing");
    m.warn_at(*gc, fmt::format("gradient_checkpointing: {} is modelled as plain checkpointing (the offloaded "
                               "layer inputs are counted on the GPU)",
                               gc->value));
  } else {
    MEMPLAN_TRY(bool g, m.read("gradient_checkpointing", "gradient_checkpointing", c.gradient_checkpointing));
    if (!g) m.from_default("gradient_checkpointing", "axolotl gradient_checkpointing = false");
  }
  MEMPLAN_IO_CHECK(read_checkpoint_kwargs(m));
  MEMPLAN_IO_CHECK(read_attention(m));
  MEMPLAN_IO_CHECK(read_axolotl_fsdp(m));
  // The ExpertParallelPlugin's expert_parallel_size: the experts are split over that many GPUs, so
  // the run has at least that many.
  if (m.node("expert_parallel_size") != nullptr) {
    MEMPLAN_IO_CHECK(m.read_degree("expert_parallel_size", "expert_parallel", c.parallel.expert_parallel));
    if (c.parallel.expert_parallel > c.parallel.world_size()) {
      c.parallel.num_gpus = c.parallel.expert_parallel;
      m.from_file("num_gpus", *m.node("expert_parallel_size"), "expert_parallel_size (the experts' GPUs)");
    }
  }
  m.set_deepspeed_ref(m.node("deepspeed"));
  MEMPLAN_IO_CHECK(warn_unmodelled_axolotl(m));

  m.check_unknown("", axolotl_known_keys(), /*strict=*/true);
  m.check_unknown("trl", axolotl_known_keys(), /*strict=*/true);
  return Ok{};
}

}  // namespace memplan::io

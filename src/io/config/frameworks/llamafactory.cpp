// LLaMA-Factory YAML (`llamafactory-cli train x.yaml`). Its defaults differ from TRL's in ways
// that matter for memory: LoRA unless finetuning_type says otherwise (rank 8, all linear layers),
// gradient checkpointing on unless disable_gradient_checkpointing, cutoff_len 2048, and
// trainable parameters upcast to fp32 unless pure_bf16 (src/llamafactory/model/adapter.py).
#include <algorithm>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

// Vision-language models (docs/configs.md#llama-factory): freeze_vision_tower and
// freeze_multi_modal_projector default to true; image_max_pixels bounds an image's area before
// the processor resizes it (memplan plans for a square of that area). Frozen parameters keep the
// load dtype: only trainable ones are upcast to fp32 for full fine-tuning.
namespace {

Status read_llamafactory_vision(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto tower, m.boolean("freeze_vision_tower"));
  if (tower && !*tower) {
    c.vision.train_vision_tower = true;
    m.from_file("train_vision_tower", *m.node("freeze_vision_tower"), "freeze_vision_tower");
  }
  MEMPLAN_TRY(auto projector, m.boolean("freeze_multi_modal_projector"));
  if (projector && !*projector) {
    c.vision.train_projector = true;
    m.from_file("train_projector", *m.node("freeze_multi_modal_projector"), "freeze_multi_modal_projector");
  }
  MEMPLAN_TRY(auto proj_only, m.boolean("train_mm_proj_only"));
  if (proj_only.value_or(false)) {
    c.vision.train_projector = true;
    m.from_file("train_projector", *m.node("train_mm_proj_only"), "train_mm_proj_only");
    m.warn_at(*m.node("train_mm_proj_only"),
              "train_mm_proj_only freezes the language model, which memplan does not model: the estimate trains "
              "it too (an upper bound)");
  }
  MEMPLAN_TRY(auto frozen_lm, m.boolean("freeze_language_model"));
  if (frozen_lm.value_or(false))
    m.warn_at(*m.node("freeze_language_model"),
              "a frozen language model is not modelled: the estimate trains it (an upper bound)");
  MEMPLAN_TRY(auto pixels, m.integer("image_max_pixels"));
  if (pixels) {
    // The processor caps an image at 12,845,056 pixels anyway: a larger bound plans the same.
    const auto side = static_cast<std::int64_t>(std::sqrt(static_cast<double>(*pixels)));
    c.vision.image_height = c.vision.image_width = std::clamp<std::int64_t>(side, 1, 65536);
    m.from_file("image_size", *m.node("image_max_pixels"), "image_max_pixels");
  }
  if (!c.lora.enabled && c.torch_dtype == DType::kFloat32 && c.autocast) c.vision.frozen_dtype = *c.autocast;
  return Ok{};
}

// LLaMA-Factory's Megatron back ends (mcore_adapter: examples/megatron; Megatron Bridge:
// examples/megatron_bridge): Megatron-Core's parallel degrees and its distributed optimizer.
Status read_llamafactory_megatron(Mapper& m) {
  TrainingConfig& c = m.config();
  ParallelConfig& par = c.parallel;
  bool any = false;
  for (const auto& [key, input, field] :
       {std::tuple<const char*, const char*, int*>{"tensor_model_parallel_size", "tensor_parallel", &par.tensor_parallel},
        {"pipeline_model_parallel_size", "pipeline_parallel", &par.pipeline_parallel},
        {"expert_model_parallel_size", "expert_parallel", &par.expert_parallel},
        {"context_parallel_size", "context_parallel", &par.context_parallel},
        {"virtual_pipeline_model_parallel_size", "virtual_stages", &par.virtual_stages}}) {
    MEMPLAN_TRY(bool got, m.read_degree(key, input, *field));
    any = any || got;
  }
  if (!any) return Ok{};
  par.megatron_core = true;
  m.derived("megatron_core", "tensor/pipeline/expert_model_parallel_size: LLaMA-Factory's Megatron-Core back end");
  MEMPLAN_IO_CHECK(m.read("sequence_parallel", "sequence_parallel", par.sequence_parallel));
  MEMPLAN_TRY(auto dist, m.boolean("use_distributed_optimizer"));
  if (dist.value_or(false) && par.sharding == ShardingStrategy::kNone) {
    par.sharding = ShardingStrategy::kZero1;
    m.from_file("sharding", *m.node("use_distributed_optimizer"),
                "use_distributed_optimizer (Megatron's distributed optimizer: ZeRO-1)");
  }
  MEMPLAN_IO_CHECK(read_recompute_granularity(m));
  return Ok{};
}

}  // namespace

Status map_llamafactory(Mapper& m) {
  TrainingConfig& c = m.config();
  // LLaMA-Factory v1 (examples/v1): model:, micro_batch_size, peft_config:, dist_config:.
  const YamlNode* v1_model = m.node("model");
  const bool v1 = (v1_model != nullptr && v1_model->is_scalar()) || m.node("peft_config") != nullptr ||
                  m.node("dist_config") != nullptr || m.node("model_class") != nullptr;
  if (v1) return map_llamafactory_v1(m);
  MEMPLAN_IO_CHECK(m.read_model("model_name_or_path"));

  MEMPLAN_TRY(auto stage, m.text("stage"));
  if (stage) {
    const YamlNode& n = *m.node("stage");
    const std::string s = to_lower(*stage);
    if (s == "sft" || s == "pt") c.method = Method::kSft;
    // KTO keeps a reference model and runs each completion with a mismatched KL completion: DPO's shape.
    else if (s == "dpo" || s == "kto") c.method = Method::kDpo;
    else
      return m.error_at(n, ErrorCode::kUnsupported, fmt::format("stage: {} is not modelled", *stage),
                        "memplan models stage: pt, sft, dpo and kto; stage: sft with the same --model sizes the "
                        "backbone alone (a lower bound)");
    m.from_file("method", n, "stage");
  } else {
    m.from_default("method", "LLaMA-Factory stage = sft");
  }

  MEMPLAN_TRY(auto ft, m.text("finetuning_type"));
  const std::string finetuning = ft ? to_lower(*ft) : "lora";
  if (finetuning != "lora" && finetuning != "full")
    return m.error_at(*m.node("finetuning_type"), ErrorCode::kUnsupported,
                      fmt::format("finetuning_type: {} is not modelled", *ft), "memplan models lora and full");
  c.lora.enabled = finetuning == "lora";
  if (ft) m.from_file("use_peft", *m.node("finetuning_type"), "finetuning_type");
  else m.from_default("use_peft", "LLaMA-Factory finetuning_type = lora");
  if (c.lora.enabled) {
    MEMPLAN_TRY(bool r, m.read("lora_rank", "lora_r", c.lora.r));
    if (!r) {
      c.lora.r = 8;
      m.from_default("lora_r", "LLaMA-Factory lora_rank = 8");
    }
    MEMPLAN_TRY(bool a, m.read("lora_alpha", "lora_alpha", c.lora.alpha));
    if (!a) {
      c.lora.alpha = 2.0 * c.lora.r;
      m.from_default("lora_alpha", "LLaMA-Factory lora_alpha = 2 x lora_rank");
    }
    MEMPLAN_TRY(bool d, m.read("lora_dropout", "lora_dropout", c.lora.dropout));
    if (!d) {
      c.lora.dropout = 0.0;
      m.from_default("lora_dropout", "LLaMA-Factory lora_dropout = 0");
    }
    MEMPLAN_TRY(auto targets, m.list("lora_target"));
    set_lora_targets(c, targets ? *targets : std::vector<std::string>{"all"});
    if (targets) m.from_file("lora_target_modules", *m.node("lora_target"), "lora_target");
    else m.from_default("lora_target_modules", "LLaMA-Factory lora_target = all");
    MEMPLAN_TRY(auto extra, m.list("additional_target"));
    if (extra) {
      c.lora.modules_to_save = *extra;
      m.from_file("modules_to_save", *m.node("additional_target"), "additional_target");
    }
  } else if (const YamlNode* n = m.first_of({"lora_rank", "lora_target", "lora_alpha"})) {
    m.warn_at(*n, "LoRA settings have no effect with finetuning_type: full");
    m.out().inputs.lora_ignored_warning = m.out().inputs.warnings.back();
  }

  MEMPLAN_TRY(auto bits, m.integer("quantization_bit"));
  if (bits) {
    const YamlNode& n = *m.node("quantization_bit");
    if (*bits == 4) c.quant.load_in_4bit = true;
    else if (*bits == 8) c.quant.load_in_8bit = true;
    else
      return m.error_at(n, ErrorCode::kUnsupported, fmt::format("quantization_bit: {} is not modelled", *bits),
                        "memplan models 4- and 8-bit bitsandbytes quantization");
    m.from_file(*bits == 4 ? "load_in_4bit" : "load_in_8bit", n, "quantization_bit");
    MEMPLAN_TRY(auto method, m.text("quantization_method"));
    if (method && to_lower(*method) != "bnb")
      m.warn_at(*m.node("quantization_method"),
                fmt::format("quantization_method: {} is modelled as bitsandbytes (bnb)", *method));
    MEMPLAN_TRY(auto qt, m.text("quantization_type"));
    if (qt) {
      c.quant.quant_type = to_lower(*qt);
      m.from_file("bnb_4bit_quant_type", *m.node("quantization_type"), "quantization_type");
    }
    MEMPLAN_TRY(bool dq, m.read("double_quantization", "bnb_4bit_use_double_quant", c.quant.double_quant));
    if (!dq && *bits == 4) {
      c.quant.double_quant = true;
      m.from_default("bnb_4bit_use_double_quant", "LLaMA-Factory double_quantization = true");
    }
  }

  MEMPLAN_IO_CHECK(read_training_arguments_batch(m));
  MEMPLAN_IO_CHECK(m.read_or("cutoff_len", "seq_len", c.seq_len, 2048, "LLaMA-Factory cutoff_len = 2048"));
  m.site(Knob::kSeqLen, "cutoff_len", "per_device_train_batch_size");

  // Precision: the model loads in the compute dtype (bf16/fp16); trainable parameters are then
  // upcast to fp32 unless pure_bf16. Full fine-tuning therefore keeps fp32 weights under autocast.
  MEMPLAN_TRY(auto bf16, m.boolean("bf16"));
  MEMPLAN_TRY(auto fp16, m.boolean("fp16"));
  MEMPLAN_TRY(auto pure, m.boolean("pure_bf16"));
  if (bf16.value_or(false) && fp16.value_or(false))
    return m.error_at(*m.node("fp16"), ErrorCode::kConflict, "bf16 and fp16 are both true", "set only one of them");
  const char* prec_key = pure.value_or(false) ? "pure_bf16" : bf16.value_or(false) ? "bf16"
                                                              : fp16.value_or(false) ? "fp16" : nullptr;
  if (pure.value_or(false)) {
    c.torch_dtype = DType::kBFloat16;
    c.autocast.reset();
  } else if (bf16.value_or(false) || fp16.value_or(false)) {
    const DType half = bf16.value_or(false) ? DType::kBFloat16 : DType::kFloat16;
    c.torch_dtype = c.lora.enabled ? half : DType::kFloat32;
    c.autocast = half;
  } else {
    c.autocast.reset();
    if (c.lora.enabled) m.out().inputs.torch_dtype_from_model = true;
    else c.torch_dtype = DType::kFloat32;
  }
  if (prec_key != nullptr) {
    const YamlNode& n = *m.node(prec_key);
    m.from_file("autocast", n, prec_key);
    if (c.torch_dtype == DType::kFloat32)
      m.derived("torch_dtype", fmt::format("float32: full fine-tuning upcasts trainable weights ({} at {})", prec_key,
                                           m.where_text(n)));
    else
      m.from_file("torch_dtype", n, prec_key);
  } else {
    m.from_default("autocast", "none: neither bf16 nor fp16 is set");
    m.from_default("torch_dtype", c.lora.enabled ? "the checkpoint's dtype (LLaMA-Factory infers it)"
                                                 : "float32: full fine-tuning upcasts trainable weights");
  }

  MEMPLAN_IO_CHECK(read_llamafactory_vision(m));

  MEMPLAN_TRY(auto no_gc, m.boolean("disable_gradient_checkpointing"));
  c.gradient_checkpointing = !no_gc.value_or(false);
  if (no_gc) m.from_file("gradient_checkpointing", *m.node("disable_gradient_checkpointing"),
                         "disable_gradient_checkpointing");
  else m.from_default("gradient_checkpointing", "LLaMA-Factory checkpoints unless disable_gradient_checkpointing");
  // use_reentrant_gc (ModelArguments, default true): LLaMA-Factory passes it as
  // gradient_checkpointing_kwargs' use_reentrant (model_utils/checkpointing.py).
  MEMPLAN_TRY(auto reentrant, m.boolean("use_reentrant_gc"));
  if (c.gradient_checkpointing) {
    c.checkpoint_reentrant = reentrant.value_or(true);
    if (reentrant) m.from_file("use_reentrant", *m.node("use_reentrant_gc"), "use_reentrant_gc");
    else m.from_default("use_reentrant", "LLaMA-Factory use_reentrant_gc = true");
  }

  MEMPLAN_TRY(auto flash, m.text("flash_attn"));
  if (flash) {
    const YamlNode& n = *m.node("flash_attn");
    const std::string f = to_lower(*flash);
    if (f == "fa2") c.attn = AttnImpl::kFlashAttention2;
    else if (f == "sdpa") c.attn = AttnImpl::kSdpa;
    else if (f == "disabled") c.attn = AttnImpl::kEager;
    else if (f != "auto")
      return m.error_at(n, ErrorCode::kUnknownName, fmt::format("unknown flash_attn '{}'", *flash),
                        did_you_mean(f, {"auto", "disabled", "sdpa", "fa2"}));
    if (f != "auto") m.from_file("attn_implementation", n, "flash_attn");
  }
  MEMPLAN_IO_CHECK(m.read_optimizer("optim", "optim", c.optim.kind));

  if (c.method == Method::kDpo) {
    MEMPLAN_TRY(auto loss, m.text("pref_loss"));
    if (loss && (to_lower(*loss) == "orpo" || to_lower(*loss) == "simpo")) {
      c.dpo.ref_model = RefModel::kNone;
      m.from_file("ref_model", *m.node("pref_loss"), "pref_loss");
    } else if (const YamlNode* ref = m.node("ref_model"); ref != nullptr && !ref->is_null()) {
      c.dpo.ref_model = RefModel::kCopy;
      m.from_file("ref_model", *ref, "ref_model");
    }
  }
  MEMPLAN_TRY(auto liger, m.boolean("enable_liger_kernel"));
  if (liger.value_or(false)) {
    if (c.method == Method::kSft)
      m.set_loss_kernel(*m.node("enable_liger_kernel"), "enable_liger_kernel", LossKernel::kLiger, true);
    else
      m.warn_at(*m.node("enable_liger_kernel"),
                "enable_liger_kernel: Liger's fused cross-entropy is not used for preference stages (they need the "
                "logits); its RMSNorm/SwiGLU/RoPE kernels are not modelled there: a small overestimate");
  }
  for (const auto& [key, what] : {std::pair<const char*, const char*>{"use_galore", "GaLore"},
                                   {"use_apollo", "APOLLO"}, {"use_badam", "BAdam"}, {"use_adam_mini", "Adam-mini"},
                                   {"use_muon", "Muon"}, {"use_llama_pro", "LLaMA Pro"}}) {
    MEMPLAN_TRY(auto on, m.boolean(key));
    if (on.value_or(false))
      m.warn_at(*m.node(key), fmt::format("{}: {} changes the optimizer states (or which layers train) and is not "
                                          "modelled; memplan estimates {} over every trained parameter",
                                          key, what, to_string(c.optim.kind)));
  }
  MEMPLAN_IO_CHECK(warn_unmodelled_hf(m));
  MEMPLAN_IO_CHECK(read_llamafactory_megatron(m));
  MEMPLAN_TRY(auto kt, m.boolean("use_kt"));
  if (kt.value_or(false))
    m.warn_at(*m.node("use_kt"),
              "use_kt: KTransformers runs the MoE experts on the CPU, which memplan does not model; the estimate "
              "keeps every expert on the GPU (an overestimate, large for MoE models)");
  note_packing(m, "packing");
  note_packing(m, "neat_packing");
  m.set_deepspeed_ref(m.node("deepspeed"));

  m.check_unknown("", llamafactory_known_keys(), /*strict=*/true);
  return Ok{};
}

Status map_llamafactory_v1(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_IO_CHECK(m.read_model(m.node("model") != nullptr ? "model" : "model_name_or_path"));
  // v1 picks the trainer from the dataset (a preference dataset means DPO); the file says it
  // through pref_loss or, in the shipped examples, its name (train_lora_dpo.yaml).
  MEMPLAN_TRY(auto pref, m.text("pref_loss"));
  const std::string from_path = m.out().files.empty() ? std::string() : method_from_path(m.out().files[0].path);
  if (pref) {
    c.method = Method::kDpo;
    const std::string l = to_lower(*pref);
    if (l == "orpo" || l == "simpo") c.dpo.ref_model = RefModel::kNone;
    m.from_file("method", *m.node("pref_loss"), "pref_loss");
  } else if (from_path == "dpo" || from_path == "orpo" || from_path == "simpo") {
    c.method = Method::kDpo;
    if (from_path != "dpo") c.dpo.ref_model = RefModel::kNone;
    m.derived("method", fmt::format("{}: the file's name {} (v1 takes the trainer from the dataset)", from_path,
                                    m.out().files[0].path));
  } else {
    m.from_default("method", "LLaMA-Factory v1 SFT trainer (the dataset decides; say --method dpo for preferences)");
  }
  // v1 TrainingArguments: bf16 = True and enable_activation_checkpointing = True by default.
  MEMPLAN_TRY(auto bf16, m.boolean("bf16"));
  if (bf16.value_or(true)) {
    c.torch_dtype = DType::kBFloat16;
    c.autocast = DType::kBFloat16;
  }
  if (bf16) {
    m.from_file("torch_dtype", *m.node("bf16"), "bf16");
    m.from_file("autocast", *m.node("bf16"), "bf16");
  } else {
    m.from_default("torch_dtype", "LLaMA-Factory v1 bf16 = true");
    m.from_default("autocast", "LLaMA-Factory v1 bf16 = true");
  }
  MEMPLAN_TRY(bool gc, m.read("enable_activation_checkpointing", "gradient_checkpointing", c.gradient_checkpointing));
  if (!gc) {
    c.gradient_checkpointing = true;
    m.from_default("gradient_checkpointing", "LLaMA-Factory v1 enable_activation_checkpointing = true");
  }
  MEMPLAN_TRY(auto cp, m.integer("cp_size"));
  if (cp.value_or(1) > 1)
    m.warn_at(*m.node("cp_size"), fmt::format("cp_size = {} (context parallelism) is not modelled: memplan estimates "
                                              "whole sequences per GPU",
                                              *cp));
  MEMPLAN_IO_CHECK(m.read_or("micro_batch_size", "batch", c.micro_batch, 1, "LLaMA-Factory v1 micro_batch_size = 1"));
  m.site(Knob::kBatch, "micro_batch_size");
  MEMPLAN_IO_CHECK(m.read_or("cutoff_len", "seq_len", c.seq_len, 2048, "LLaMA-Factory cutoff_len = 2048"));
  m.site(Knob::kSeqLen, "cutoff_len", "micro_batch_size");
  MEMPLAN_TRY(auto peft, m.text("peft_config.name"));
  if (peft) {
    const std::string p = to_lower(*peft);
    const YamlNode& n = *m.node("peft_config.name");
    if (p != "lora") return m.error_at(n, ErrorCode::kUnsupported, fmt::format("peft_config.name: {} is not modelled", *peft),
                                       "memplan models lora and full fine-tuning");
    c.lora.enabled = true;
    m.from_file("use_peft", n, "peft_config.name");
    MEMPLAN_IO_CHECK(m.read("peft_config.r", "lora_r", c.lora.r));
    MEMPLAN_IO_CHECK(m.read("peft_config.lora_alpha", "lora_alpha", c.lora.alpha));
    MEMPLAN_IO_CHECK(m.read("peft_config.lora_dropout", "lora_dropout", c.lora.dropout));
    MEMPLAN_TRY(auto targets, m.list("peft_config.target_modules"));
    if (targets) {
      set_lora_targets(c, *targets);
      m.from_file("lora_target_modules", *m.node("peft_config.target_modules"), "peft_config.target_modules");
    }
  } else {
    m.from_default("use_peft", "no peft_config: full fine-tuning");
  }
  MEMPLAN_TRY(auto dist, m.text("dist_config.name"));
  if (dist) {
    const std::string d = to_lower(*dist);
    const YamlNode& n = *m.node("dist_config.name");
    if (d == "fsdp2" || d == "fsdp") {
      c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
      m.from_file("sharding", n, "dist_config.name");
      if (d == "fsdp2") {
        c.parallel.fsdp_version = 2;
        m.from_file("fsdp_version", n, "dist_config.name");
      }
    } else if (d == "deepspeed") {
      m.set_deepspeed_ref(m.node("dist_config.config_file"));
    } else if (d != "ddp") {
      m.warn_at(n, fmt::format("dist_config.name {} is not modelled; memplan estimates plain data parallelism", *dist));
    }
  }
  MEMPLAN_IO_CHECK(warn_unmodelled_hf(m));
  // src/llamafactory/v1/config/{model,data,training,sample}_args.py
  static const std::vector<std::string> v1_keys = {
      "batching_strategy", "batching_workers", "bf16", "cp_mode", "cp_size", "custom_chat_template", "cutoff_len",
      "dist_config", "dist_timeout", "dp_size", "dpo_label_smoothing", "enable_activation_checkpointing",
      "eval_dataset", "flash_attn", "full_determinism", "global_batch_size", "init_config", "kernel_config",
      "ld_alpha", "learning_rate", "logging_steps", "lr_scheduler_config", "max_grad_norm", "max_new_tokens",
      "max_steps", "micro_batch_size", "model", "model_class", "mp_replicate_size", "mp_shard_size",
      "num_train_epochs", "optim_config", "output_dir", "peft_config", "pref_beta", "pref_ftx", "pref_loss",
      "quant_config", "resume_from_checkpoint", "sample_backend", "save_ckpt_as_hf", "save_epochs", "save_steps",
      "save_total_limit", "seed", "simpo_gamma", "train_dataset", "trust_remote_code"};
  m.check_unknown("", v1_keys, /*strict=*/true);
  return Ok{};
}

}  // namespace memplan::io

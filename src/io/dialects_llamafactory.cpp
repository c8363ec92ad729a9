// LLaMA-Factory YAML (`llamafactory-cli train x.yaml`). Its defaults differ from TRL's in ways
// that matter for memory: LoRA unless finetuning_type says otherwise (rank 8, all linear layers),
// gradient checkpointing on unless disable_gradient_checkpointing, cutoff_len 2048, and
// trainable parameters upcast to fp32 unless pure_bf16 (src/llamafactory/model/adapter.py).
#include <fmt/format.h>

#include "io/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

Status map_llamafactory(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_IO_CHECK(m.read_model("model_name_or_path"));

  MEMPLAN_TRY(auto stage, m.text("stage"));
  if (stage) {
    const YamlNode& n = *m.node("stage");
    const std::string s = to_lower(*stage);
    if (s == "sft" || s == "pt") c.method = Method::kSft;
    else if (s == "dpo") c.method = Method::kDpo;
    else
      return m.error_at(n, ErrorCode::kUnsupported, fmt::format("stage: {} is not modelled", *stage),
                        "memplan models stage: pt, sft and dpo");
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

  MEMPLAN_TRY(auto no_gc, m.boolean("disable_gradient_checkpointing"));
  c.gradient_checkpointing = !no_gc.value_or(false);
  if (no_gc) m.from_file("gradient_checkpointing", *m.node("disable_gradient_checkpointing"),
                         "disable_gradient_checkpointing");
  else m.from_default("gradient_checkpointing", "LLaMA-Factory checkpoints unless disable_gradient_checkpointing");

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
  if (liger.value_or(false))
    m.warn_at(*m.node("enable_liger_kernel"),
              "Liger kernels (fused loss without materialized logits) are not modelled; the estimate is high");
  m.set_deepspeed_ref(m.node("deepspeed"));

  m.check_unknown("", llamafactory_known_keys(), /*strict=*/true);
  return Ok{};
}

}  // namespace memplan::io

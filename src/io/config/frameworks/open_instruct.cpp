// allenai/open-instruct YAML (`accelerate launch open_instruct/finetune.py x.yaml`,
// dpo_tune_cache.py, and the older dpo_tune.py): one flat mapping of the script's dataclasses,
// not TrainingArguments. What differs from TRL for memory (open_instruct/finetune.py,
// dpo_utils.py): the model is loaded in bfloat16; LoRA is `use_lora` with `lora_rank` (default 64)
// on q/k/v/o/gate/up/down; QLoRA is `use_qlora` (4-bit NF4, double quantization, bf16 compute) with
// bitsandbytes' paged AdamW; gradient checkpointing is off unless set; the optimizer is fused
// AdamW; attention is flash attention when installed. dpo_tune_cache.py computes the reference
// log-probabilities once before training (no reference model in the training step); dpo_tune.py
// (dpo_beta, dpo_loss_type) kept a reference model. docs/configs.md#open-instruct.
#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

// The keys of dpo_tune.py (2024) and dpo_tune_cache.py / DPOConfig (2025-): either says DPO.
constexpr std::string_view kOldDpoKeys[] = {"dpo_beta", "dpo_loss_type", "dpo_gamma_beta_ratio", "dpo_label_smoothing",
                                            "dpo_use_paged_optimizer"};
constexpr std::string_view kNewDpoKeys[] = {"loss_type", "beta", "gamma_beta_ratio", "concatenated_forward",
                                            "cache_logprobs_only", "reference_free"};

Status read_open_instruct_method(Mapper& m) {
  TrainingConfig& c = m.config();
  const std::string path = m.out().files.empty() ? std::string() : m.out().files[0].path;
  const std::string from_path = method_from_path(path);
  const YamlNode* old_key = nullptr;
  std::string old_name;
  for (auto k : kOldDpoKeys)
    if (const YamlNode* n = m.node(k); n != nullptr && old_key == nullptr) old_key = n, old_name = std::string(k);
  const YamlNode* new_key = nullptr;
  std::string new_name;
  for (auto k : kNewDpoKeys)
    if (const YamlNode* n = m.node(k); n != nullptr && new_key == nullptr) new_key = n, new_name = std::string(k);
  if (old_key == nullptr && new_key == nullptr && from_path != "dpo" && from_path != "simpo") {
    c.method = Method::kSft;
    m.from_default("method", "SFT: no DPO key (loss_type, beta, dpo_beta) and no dpo in the path: finetune.py");
    return Ok{};
  }
  c.method = Method::kDpo;
  MEMPLAN_TRY(auto loss, m.text(old_key != nullptr ? "dpo_loss_type" : "loss_type"));
  const std::string loss_type = to_lower(loss.value_or(from_path == "simpo" ? "simpo" : "dpo"));
  const YamlNode* why = old_key != nullptr ? old_key : new_key;
  const std::string why_text = why != nullptr ? fmt::format("{} at {}", old_key != nullptr ? old_name : new_name,
                                                            m.where_text(*why))
                                              : fmt::format("the path {}", path);
  if (loss_type == "simpo") {
    c.dpo.ref_model = RefModel::kNone;
    m.derived("method", fmt::format("SimPO (no reference model): {}", why_text));
    m.derived("ref_model", "none: SimPO has no reference model");
    return Ok{};
  }
  MEMPLAN_TRY(auto ref_free, m.boolean("reference_free"));
  if (ref_free.value_or(false)) {
    c.dpo.ref_model = RefModel::kNone;
    m.from_file("ref_model", *m.node("reference_free"), "reference_free");
  }
  if (old_key != nullptr) {
    m.derived("method", fmt::format("DPO with a reference model (dpo_tune.py's keys): {}", why_text));
    return Ok{};
  }
  // dpo_tune_cache.py: the reference's log-probabilities are cached before training.
  c.dpo.precompute_ref_log_probs = true;
  m.derived("method", fmt::format("DPO: {}", why_text));
  m.derived("precompute_ref_log_probs",
            "true: open-instruct's dpo_tune_cache.py caches the reference log-probabilities before training");
  return Ok{};
}

}  // namespace

Status map_open_instruct(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_IO_CHECK(m.read_model("model_name_or_path"));
  MEMPLAN_IO_CHECK(read_open_instruct_method(m));

  MEMPLAN_IO_CHECK(m.read_or("per_device_train_batch_size", "batch", c.micro_batch, 8,
                             "open-instruct per_device_train_batch_size = 8"));
  m.site(Knob::kBatch, "per_device_train_batch_size");
  MEMPLAN_IO_CHECK(m.read_or("gradient_accumulation_steps", "grad_accum", c.grad_accum, 1,
                             "open-instruct gradient_accumulation_steps = 1"));
  m.site(Knob::kGradAccum, "gradient_accumulation_steps", "per_device_train_batch_size");
  MEMPLAN_TRY(bool seq, m.read("max_seq_length", "seq_len", c.seq_len));
  if (!seq) {
    c.seq_len = 2048;
    m.from_default("seq_len", "2048: open-instruct's max_seq_length is unset (no truncation)");
    m.warn_file(0, "max_seq_length is not set: open-instruct does not truncate, so the longest example sets the "
                   "memory; memplan plans 2048 tokens (pass --seq-len)");
  }
  m.site(Knob::kSeqLen, "max_seq_length", "per_device_train_batch_size");

  // The scripts load the model in bfloat16 (from_pretrained(dtype=torch.bfloat16)); accelerate's
  // launch line sets the mixed precision (bf16 in every launch script of the repository).
  c.torch_dtype = DType::kBFloat16;
  c.autocast = DType::kBFloat16;
  m.derived("torch_dtype", "bfloat16: open-instruct loads the model with dtype=torch.bfloat16");
  m.derived("autocast", "bf16: open-instruct's launch scripts pass accelerate --mixed_precision bf16");

  MEMPLAN_TRY(bool gc, m.read("gradient_checkpointing", "gradient_checkpointing", c.gradient_checkpointing));
  if (!gc) {
    c.gradient_checkpointing = false;
    m.from_default("gradient_checkpointing", "false: open-instruct's default");
  }

  // LoRA / QLoRA.
  MEMPLAN_TRY(auto lora, m.boolean("use_lora"));
  MEMPLAN_TRY(auto qlora, m.boolean("use_qlora"));
  if (qlora.value_or(false) && !lora.value_or(false))
    m.warn_at(*m.node("use_qlora"),
              "use_qlora without use_lora: open-instruct loads the model in 4 bits and then trains it without "
              "adapters, which fails; memplan plans QLoRA (use_lora: true)");
  if (lora.value_or(false) || qlora.value_or(false)) {
    c.lora.enabled = true;
    m.from_file("use_peft", *m.node(lora.value_or(false) ? "use_lora" : "use_qlora"),
                lora.value_or(false) ? "use_lora" : "use_qlora");
    c.lora.r = 64;
    c.lora.alpha = 16;
    c.lora.dropout = 0.1;
    MEMPLAN_TRY(bool rank, m.read("lora_rank", "lora_r", c.lora.r));
    if (!rank) m.from_default("lora_r", "64: open-instruct");
    MEMPLAN_TRY(bool alpha, m.read("lora_alpha", "lora_alpha", c.lora.alpha));
    if (!alpha) m.from_default("lora_alpha", "16: open-instruct");
    MEMPLAN_IO_CHECK(m.read("lora_dropout", "lora_dropout", c.lora.dropout));
    set_lora_targets(c, {"q_proj", "o_proj", "v_proj", "k_proj", "gate_proj", "up_proj", "down_proj"});
    m.derived("lora_target_modules", "q/k/v/o and gate/up/down projections: open-instruct's LoraConfig");
  } else {
    for (const char* k : {"lora_rank", "lora_alpha", "lora_dropout"})
      if (const YamlNode* n = m.node(k); n != nullptr) {
        m.warn_at(*n, "LoRA settings have no effect without use_lora: true (all weights are trained)");
        m.out().inputs.lora_ignored_warning = m.out().inputs.warnings.back();
        break;
      }
  }
  MEMPLAN_TRY(auto bit8, m.boolean("use_8bit_optimizer"));
  if (qlora.value_or(false)) {
    const YamlNode& n = *m.node("use_qlora");
    c.quant.load_in_4bit = true;
    c.quant.quant_type = "nf4";
    c.quant.double_quant = true;
    m.from_file("load_in_4bit", n, "use_qlora");
    m.from_file("bnb_4bit_quant_type", n, "use_qlora (nf4)");
    m.from_file("bnb_4bit_use_double_quant", n, "use_qlora (double quantization)");
    c.optim.kind = bit8.value_or(false) ? OptimizerKind::kPagedAdamW8bit : OptimizerKind::kPagedAdamW32bit;
    m.from_file("optim", n, bit8.value_or(false) ? "use_qlora + use_8bit_optimizer (bitsandbytes paged AdamW)"
                                                 : "use_qlora (bitsandbytes paged AdamW, 32-bit states)");
  } else {
    MEMPLAN_TRY(auto fused, m.boolean("fused_optimizer"));
    c.optim.kind = fused.value_or(true) ? OptimizerKind::kAdamWTorchFused : OptimizerKind::kAdamWTorch;
    if (const YamlNode* n = m.node("fused_optimizer")) m.from_file("optim", *n, "fused_optimizer");
    else m.from_default("optim", "fused torch AdamW: open-instruct's fused_optimizer = true");
    if (bit8.value_or(false))
      m.warn_at(*m.node("use_8bit_optimizer"),
                "use_8bit_optimizer: open-instruct's DPO script uses bitsandbytes' 8-bit AdamW, which memplan does "
                "not read here; the estimate keeps two fp32 states (an overestimate)");
  }

  // Attention: flash attention when installed (model_utils.detect_attn_implementation); the old
  // scripts' use_flash_attn (default true) chose it.
  MEMPLAN_TRY(bool attn, m.read_attn_impl("attn_implementation"));
  if (!attn) {
    MEMPLAN_TRY(auto flash, m.boolean("use_flash_attn"));
    c.attn = flash.value_or(true) ? AttnImpl::kFlashAttention2 : AttnImpl::kSdpa;
    if (flash) m.from_file("attn_implementation", *m.node("use_flash_attn"), "use_flash_attn");
    else m.from_default("attn_implementation", "flash_attention_2: open-instruct uses flash attention when installed");
  }

  // DeepSpeed from the script's own keys (newer TrainingConfig); otherwise accelerate's launch line.
  MEMPLAN_TRY(auto zero, m.integer("zero_stage", 0));
  if (zero) {
    const YamlNode& n = *m.node("zero_stage");
    if (*zero > 3) return m.error_at(n, ErrorCode::kInvalidConfig, fmt::format("zero_stage must be 0 to 3, got {}", *zero));
    c.parallel.sharding = *zero == 1   ? ShardingStrategy::kZero1
                          : *zero == 2 ? ShardingStrategy::kZero2
                          : *zero == 3 ? ShardingStrategy::kZero3
                                       : ShardingStrategy::kNone;
    m.from_file("sharding", n, "zero_stage");
  }
  MEMPLAN_IO_CHECK(m.read("offload_optimizer", "offload_optimizer", c.parallel.offload_optimizer));
  MEMPLAN_IO_CHECK(m.read("offload_param", "offload_params", c.parallel.offload_params));

  // Memory-relevant keys the estimate leaves out, each said at its line.
  MEMPLAN_IO_CHECK(warn_unmodelled_hf(m));  // use_liger_kernel
  note_packing(m, "packing");
  for (const char* k : {"sequence_parallel_size", "tensor_parallel_degree", "context_parallel_degree"}) {
    MEMPLAN_TRY(auto v, m.integer(k));
    if (v.value_or(1) > 1)
      m.warn_at(*m.node(k), fmt::format("{} = {} is not modelled for open-instruct: the estimate keeps the whole "
                                        "sequence and every weight on each GPU (an overestimate)",
                                        k, *v));
  }
  MEMPLAN_TRY(auto lb, m.boolean("load_balancing_loss"));
  (void)lb;  // OLMoE's router loss: a few scalars per layer
  m.check_unknown("", open_instruct_known_keys(), /*strict=*/true);
  return Ok{};
}

}  // namespace memplan::io

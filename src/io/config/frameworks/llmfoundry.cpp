// LLM Foundry (Composer) train YAML (scripts/train/yamls/{pretrain,finetune}/*.yaml):
// device_train_microbatch_size is the per-GPU micro-batch, global_train_batch_size the step's
// batch over all GPUs, max_seq_len the sequence, precision amp_bf16|amp_fp16|fp32, fsdp_config
// Composer's FSDP. The model is a Hugging Face checkpoint (model.pretrained_model_name_or_path)
// or described in place (MPT: d_model, n_heads, n_layers, expansion_ratio, vocab_size). The same
// layout serves Composer's BERT recipes (model.name hf_bert with pretrained_model_name).
#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

// Composer's BERT recipes (mosaicml/examples benchmarks/bert, AnswerDotAI/ModernBERT): model.name
// picks the builder. hf_bert wraps a Hugging Face checkpoint (pretrained_model_name, any
// AutoModel: bert-base-uncased, microsoft/deberta-v3-base...) as BertForMaskedLM when
// pretraining (main.py) or *ForSequenceClassification with model.num_labels when fine-tuning
// (sequence_classification.py, glue.py); mosaic_bert and flex_bert are those repositories' own
// architectures, which memplan does not model.
Status read_composer_bert(Mapper& m, const std::string& name, const YamlNode& at) {
  ResolvedInputs& in = m.out().inputs;
  if (name == "mosaic_bert" || name == "flex_bert") {
    in.model_hint = fmt::format(
        "{}: model.name {} is {}, which memplan does not model (it models Hugging Face checkpoints); give --model "
        "with the Hugging Face model of the same shape to estimate that instead",
        m.where_text(at), name,
        name == "mosaic_bert" ? "MosaicBERT (ALiBi, gated MLP, FlashAttention, unpadded batches)"
                              : "FlexBERT, ModernBERT's research architecture (model_config picks its layers)");
    m.node("model.pretrained_model_name");  // read: the hint says why it is not used
    m.node("model.model_config");
    return Ok{};
  }
  MEMPLAN_TRY(bool named, m.read_model("model.pretrained_model_name"));
  if (!named)
    in.model_hint = fmt::format("{}: model.name {} has no pretrained_model_name (the Hugging Face checkpoint it "
                                "wraps); give --model ID|PATH",
                                m.where_text(at), name);
  MEMPLAN_TRY(auto labels, m.integer("model.num_labels"));
  const YamlNode* tasks = m.node("tasks");
  if (labels) {
    if (*labels > (1 << 20))
      return m.error_at(*m.node("model.num_labels"), ErrorCode::kInvalidConfig,
                        fmt::format("model.num_labels = {} is out of range (1 to 1048576)", *labels));
    in.encoder_head = EncoderHead::kSequenceClassification;
    in.num_labels = *labels;
    m.from_file("head", *m.node("model.num_labels"), "model.num_labels");
    m.from_file("num_labels", *m.node("model.num_labels"), "model.num_labels");
  } else if (tasks != nullptr && tasks->is_map()) {
    // glue.py: one fine-tuning job per task, each a sequence classifier (2 or 3 labels, set by
    // the script per task: the classifier is a few KB either way).
    in.encoder_head = EncoderHead::kSequenceClassification;
    m.from_file("head", *tasks, "tasks (glue.py fine-tunes a classifier per task)");
  } else {
    in.encoder_head = EncoderHead::kMaskedLm;
    m.from_file("head", at, "model.name " + name + " without num_labels: masked-LM pretraining (main.py)");
  }
  m.node("model.use_pretrained");  // from the hub or from its config: the same shape
  m.node("model.tokenizer_name");
  return Ok{};
}

}  // namespace

Status map_llm_foundry(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto model_name, m.text("model.name"));
  const std::string builder = to_lower(model_name.value_or(""));
  if (builder == "hf_bert" || builder == "mosaic_bert" || builder == "flex_bert") {
    MEMPLAN_IO_CHECK(read_composer_bert(m, builder, *m.node("model.name")));
  } else if (m.node("model.pretrained_model_name_or_path") != nullptr) {
    MEMPLAN_IO_CHECK(m.read_model("model.pretrained_model_name_or_path"));
  } else {
    MEMPLAN_IO_CHECK(read_custom_model(m, "model"));
    if (!m.out().inputs.custom_model)
      if (const YamlNode* model = m.node("model"))
        m.out().inputs.model_hint = fmt::format("{}: the model section has no pretrained_model_name_or_path and no "
                                                "shape (d_model, n_layers, n_heads); give --model ID|PATH",
                                                m.where_text(*model));
  }
  MEMPLAN_TRY(auto micro, m.text("device_train_microbatch_size"));
  if (micro && to_lower(*micro) == "auto") {
    m.warn_at(*m.node("device_train_microbatch_size"),
              "device_train_microbatch_size: auto lets Composer search for the largest micro-batch that fits; memplan "
              "estimates 1 (memplan plan finds the largest itself)");
    c.micro_batch = 1;
    m.from_default("batch", "device_train_microbatch_size auto: 1");
  } else {
    MEMPLAN_IO_CHECK(m.read_or("device_train_microbatch_size", "batch", c.micro_batch, 1,
                               "device_train_microbatch_size not set: 1"));
  }
  m.site(Knob::kBatch, "device_train_microbatch_size");
  if (const YamlNode* g = m.node("global_train_batch_size"); g != nullptr)
    m.from_default("grad_accum", fmt::format("global_train_batch_size at {} / (micro-batch x GPUs): no effect on "
                                             "peak memory",
                                             m.where_text(*g)));
  MEMPLAN_TRY(bool seq, m.read("max_seq_len", "seq_len", c.seq_len));
  if (!seq) m.from_default("seq_len", fmt::format("max_seq_len not set: memplan's default {}", c.seq_len));
  m.site(Knob::kSeqLen, "max_seq_len");

  MEMPLAN_TRY(auto precision, m.text("precision"));
  if (precision) {
    const std::string p = to_lower(*precision);
    const YamlNode& n = *m.node("precision");
    c.torch_dtype = DType::kFloat32;
    if (p == "amp_bf16") c.autocast = DType::kBFloat16;
    else if (p == "amp_fp16") c.autocast = DType::kFloat16;
    else if (p == "fp32") c.autocast.reset();
    else if (p == "amp_fp8") c.autocast = DType::kBFloat16, m.warn_at(n, "precision amp_fp8 is estimated as amp_bf16");
    else
      return m.error_at(n, ErrorCode::kUnknownName, fmt::format("unknown precision '{}'", *precision),
                        did_you_mean(p, {"amp_bf16", "amp_fp16", "fp32", "amp_fp8"}));
    m.from_file("torch_dtype", n, "precision");
    m.from_file("autocast", n, "precision");
  }
  if (const YamlNode* f = m.node("fsdp_config"); f != nullptr && f->is_map()) {
    MEMPLAN_TRY(auto s, m.text("fsdp_config.sharding_strategy"));
    const std::string v = to_lower(s.value_or("FULL_SHARD"));
    {
      auto parsed = parse_fsdp(v);  // no_shard: FSDP1's NO_SHARD (docs/formulas.md#fsdp-no-shard)
      if (!parsed) return m.error_at(*m.node("fsdp_config.sharding_strategy"), parsed.error().code,
                                     parsed.error().message, parsed.error().suggestion);
      c.parallel.sharding = *parsed;
    }
    m.from_file("sharding", s ? *m.node("fsdp_config.sharding_strategy") : *f, "fsdp_config.sharding_strategy");
    MEMPLAN_IO_CHECK(m.read("fsdp_config.activation_checkpointing", "gradient_checkpointing", c.gradient_checkpointing));
    MEMPLAN_TRY(auto offload, m.boolean("fsdp_config.cpu_offload"));
    if (offload.value_or(false)) {
      c.parallel.offload_params = c.parallel.offload_optimizer = true;
      m.from_file("offload_params", *m.node("fsdp_config.cpu_offload"), "fsdp_config.cpu_offload");
    }
    MEMPLAN_TRY(auto act_offload, m.boolean("fsdp_config.activation_cpu_offload"));
    if (act_offload.value_or(false))
      m.warn_at(*m.node("fsdp_config.activation_cpu_offload"),
                "activation_cpu_offload is not modelled: memplan keeps activations on the GPU (an overestimate)");
  }
  MEMPLAN_TRY(auto opt, m.text("optimizer.name"));
  if (opt) {
    const std::string o = to_lower(*opt);
    const YamlNode& n = *m.node("optimizer.name");
    // StableAdamW (ModernBERT's decoupled_stableadamw) keeps AdamW's two moments.
    if (o == "decoupled_adamw" || o == "adamw" || o == "decoupled_lionw" || o == "adam" ||
        o == "decoupled_stableadamw" || o == "stableadamw") {
      c.optim.kind = o == "decoupled_lionw" ? OptimizerKind::kLion32bit : OptimizerKind::kAdamWTorch;
    } else {
      c.optim.kind = OptimizerKind::kAdamWTorch;
      m.warn_at(n, fmt::format("optimizer '{}' is not modelled; estimated as adamw_torch (two fp32 states)", *opt));
    }
    m.from_file("optim", n, "optimizer.name");
  }
  if (const YamlNode* peft = m.node("model.peft_config"); peft != nullptr && peft->is_map()) {
    c.lora.enabled = true;
    m.from_file("use_peft", *peft, "model.peft_config");
    MEMPLAN_IO_CHECK(m.read("model.peft_config.r", "lora_r", c.lora.r));
    MEMPLAN_IO_CHECK(m.read("model.peft_config.lora_alpha", "lora_alpha", c.lora.alpha));
  }
  // Evaluation batches (Composer's device_eval_batch_size, the BERT recipes' global one) do not
  // add to the training step's peak.
  m.check_unknown("", {"device_eval_batch_size", "global_eval_batch_size", "device_eval_microbatch_size"},
                  /*strict=*/false);
  return Ok{};
}

}  // namespace memplan::io

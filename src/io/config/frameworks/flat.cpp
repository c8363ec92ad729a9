// Flat in-house configs like seed 001's: micro_batch_size, gradient_accumulation_steps,
// max_seq_len, gradient_checkpointing, precision at the top level, often with the project's own
// model description (model: {n_layers: ...}) that no catalog knows.
#include <set>
#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

// Reads the first present spelling; later spellings that disagree are contradictions.
Result<std::string> read_spellings(Mapper& m, std::initializer_list<std::string_view> keys, const std::string& input,
                                   std::int64_t& field) {
  std::string used;
  const YamlNode* first = nullptr;
  for (auto k : keys) {
    const YamlNode* n = m.node(k);
    if (n == nullptr || n->is_null()) continue;
    if (first == nullptr) {
      first = n;
      used = std::string(k);
      MEMPLAN_IO_CHECK(m.read(k, input, field));
    } else if (n->value != first->value) {
      m.contradiction(*first, used, *n, k);
    }
  }
  return used;
}

// LoRA in a flat config: a section (`LoRA:`, `lora:`, `peft:`) with r/rank/lora_r and alpha, or
// top-level lora_r / lora_rank; `enabled: false` or `use_lora: false` turns it off.
Status read_lora_section(Mapper& m) {
  TrainingConfig& c = m.config();
  std::string section;
  for (const auto& e : m.root().entries) {
    const std::string k = to_lower(e.key.value);
    if ((k == "lora" || k == "peft" || k == "lora_config" || k == "peft_config") && e.value.is_map())
      section = e.key.value;
  }
  const std::string p = section.empty() ? "" : section + ".";
  std::string which;
  const YamlNode* r = m.first_of({p + "r", p + "rank", p + "lora_r", p + "lora_rank", "lora_r", "lora_rank"}, &which);
  if (section.empty() && r == nullptr) return Ok{};
  for (const std::string& k : std::vector<std::string>{p + "enabled", p + "enable", "use_lora", "use_peft"}) {
    MEMPLAN_TRY(auto on, m.boolean(k));
    if (on && !*on) return Ok{};
  }
  if (section.empty() && r == nullptr) return Ok{};
  c.lora.enabled = true;
  const YamlNode* at = r != nullptr ? r : m.node(section);
  m.from_file("use_peft", *at, section.empty() ? which : section);
  if (r != nullptr) MEMPLAN_IO_CHECK(m.read(which, "lora_r", c.lora.r));
  const YamlNode* a = m.first_of({p + "alpha", p + "lora_alpha", "lora_alpha"}, &which);
  if (a != nullptr) MEMPLAN_IO_CHECK(m.read(which, "lora_alpha", c.lora.alpha));
  const YamlNode* d = m.first_of({p + "dropout", p + "lora_dropout", "lora_dropout"}, &which);
  if (d != nullptr) MEMPLAN_IO_CHECK(m.read(which, "lora_dropout", c.lora.dropout));
  const YamlNode* t = m.first_of({p + "target_modules", p + "targets", "lora_target_modules"}, &which);
  if (t != nullptr) {
    MEMPLAN_TRY(auto targets, m.list(which));
    if (targets) set_lora_targets(c, *targets);
    m.from_file("lora_target_modules", *t, which);
  }
  return Ok{};
}

}  // namespace

Status read_custom_model(Mapper& m, std::string_view section) {
  const YamlNode* sec = m.node(section);
  if (sec == nullptr || !sec->is_map()) return Ok{};
  CustomModel cm;
  const std::string p = std::string(section) + ".";
  auto get = [&](std::initializer_list<const char*> keys, std::optional<std::int64_t>& field) -> Status {
    for (const char* k : keys) {
      if (m.node(p + k) == nullptr) continue;
      MEMPLAN_TRY(auto v, m.integer(p + k));
      field = v;
      return Ok{};
    }
    return Ok{};
  };
  MEMPLAN_IO_CHECK(get({"n_layers", "num_layers", "num_hidden_layers", "n_layer", "depth"}, cm.num_layers));
  MEMPLAN_IO_CHECK(get({"d_model", "hidden_size", "n_embd", "dim", "hidden_dim", "embed_dim"}, cm.hidden_size));
  if (!cm.num_layers || !cm.hidden_size) return Ok{};
  MEMPLAN_IO_CHECK(get({"n_heads", "num_attention_heads", "n_head", "num_heads"}, cm.num_heads));
  MEMPLAN_IO_CHECK(get({"n_kv_heads", "num_key_value_heads", "n_kv_head", "num_kv_heads", "kv_n_heads", "num_query_groups"},
                       cm.num_kv_heads));
  MEMPLAN_IO_CHECK(get({"d_ffn", "intermediate_size", "ffn_dim", "d_ff", "ffn_hidden_size", "n_inner", "mlp_dim"},
                       cm.intermediate_size));
  MEMPLAN_IO_CHECK(get({"vocab_size", "n_vocab", "padded_vocab_size"}, cm.vocab_size));
  MEMPLAN_IO_CHECK(get({"head_dim", "kv_channels"}, cm.head_dim));
  MEMPLAN_IO_CHECK(get({"max_seq_len", "max_position_embeddings", "n_positions", "block_size", "context_length"},
                       cm.max_position_embeddings));
  for (const char* k : {"expansion_ratio", "mlp_ratio"}) {
    MEMPLAN_TRY(auto r, m.number(p + k));
    if (r) {
      cm.expansion_ratio = *r;
      break;
    }
  }
  for (const char* k : {"tie_word_embeddings", "tie_embeddings", "weight_tying"}) {
    MEMPLAN_TRY(auto t, m.boolean(p + k));
    if (t) {
      cm.tie_word_embeddings = *t;
      break;
    }
  }
  MEMPLAN_TRY(auto name, m.text(p + "name"));
  if (name && to_lower(*name).find("mpt") != std::string::npos) cm.family = "mpt";
  // What the section says that the shape above does not capture: named, so that a custom block
  // (seed 001's gsa attention with its k_base / k_max) is never dropped without a word.
  static const std::set<std::string> kShape = {
      "n_layers", "num_layers", "num_hidden_layers", "n_layer", "depth", "d_model", "hidden_size", "n_embd", "dim",
      "hidden_dim", "embed_dim", "n_heads", "num_attention_heads", "n_head", "num_heads", "n_kv_heads",
      "num_key_value_heads", "n_kv_head", "num_kv_heads", "kv_n_heads", "num_query_groups", "d_ffn",
      "intermediate_size", "ffn_dim", "d_ff", "ffn_hidden_size", "n_inner", "mlp_dim", "vocab_size", "n_vocab",
      "padded_vocab_size", "head_dim", "kv_channels", "max_seq_len", "max_position_embeddings", "n_positions",
      "block_size", "context_length", "expansion_ratio", "mlp_ratio", "tie_word_embeddings", "tie_embeddings",
      "weight_tying", "name",
      // Regularization and initialization: no memory of their own beyond what dropout is modelled as.
      "dropout", "attn_dropout", "resid_dropout", "embd_pdrop", "resid_pdrop", "attn_pdrop", "init_std",
      "initializer_range", "layer_norm_eps", "rms_norm_eps", "norm_eps", "bias", "rope_theta"};
  std::vector<std::string> unmodelled;
  for (const auto& e : sec->entries)
    if (!kShape.count(e.key.value)) unmodelled.push_back(e.key.value);
  if (!unmodelled.empty())
    m.warn_at(*sec->get(unmodelled.front()),
              fmt::format("{} in {}: not modelled; the custom model is estimated as a standard decoder (attention, "
                          "MLP) of the shape it gives, so memory these settings add or remove is not in the estimate",
                          fmt::join(unmodelled, ", "), section),
              "check the breakdown against one measured step (memplan profile)");
  cm.name = fmt::format("custom model ({})", m.where_text(*sec));
  // Not built here: --hidden-size and friends may still override parts of it.
  m.out().inputs.custom_model = cm;
  m.from_file("model", *sec, std::string(section));
  return Ok{};
}

Status map_flat(Mapper& m) {
  TrainingConfig& c = m.config();

  const YamlNode* model = m.node("model");
  std::string model_key;
  if (model != nullptr && model->is_scalar()) model_key = "model";
  m.first_of({"model_name_or_path", "model_name", "base_model", "pretrained_model_name_or_path"}, &model_key);
  if (model != nullptr && model->is_scalar()) model_key = "model";
  if (!model_key.empty()) MEMPLAN_IO_CHECK(m.read_model(model_key));
  if (m.out().inputs.model_name.empty() && model != nullptr && model->is_map()) {
    MEMPLAN_IO_CHECK(read_custom_model(m, "model"));
    if (!m.out().inputs.custom_model)
      m.out().inputs.model_hint = fmt::format(
          "{}: the model is described by the project's own keys (model: {{...}}), not a Hugging Face id, and memplan "
          "did not find its shape there (n_layers, d_model, n_heads); give --model ID|PATH for an equivalent "
          "architecture, --model-params N, or --hidden-size --num-hidden-layers --num-attention-heads",
          m.where_text(*model));
  }

  MEMPLAN_TRY(std::string batch_key,
              read_spellings(m, {"micro_batch_size", "batch_size", "per_device_train_batch_size", "train_batch_size"},
                             "batch", c.micro_batch));
  if (batch_key.empty()) {
    c.micro_batch = 1;
    m.from_default("batch", "no micro_batch_size: 1");
    batch_key = "micro_batch_size";
  }
  m.site(Knob::kBatch, batch_key);
  MEMPLAN_TRY(std::string accum_key,
              read_spellings(m, {"gradient_accumulation_steps", "grad_accum", "grad_accum_steps",
                                 "accumulate_grad_batches"},
                             "grad_accum", c.grad_accum));
  if (accum_key.empty()) {
    c.grad_accum = 1;
    m.from_default("grad_accum", "no gradient_accumulation_steps: 1");
    accum_key = "gradient_accumulation_steps";
  }
  m.site(Knob::kGradAccum, accum_key, batch_key);
  MEMPLAN_TRY(std::string seq_key,
              read_spellings(m, {"max_seq_len", "seq_len", "max_seq_length", "max_length", "block_size",
                                 "context_length", "sequence_length"},
                             "seq_len", c.seq_len));
  if (seq_key.empty()) {
    m.from_default("seq_len", fmt::format("no max_seq_len: memplan's default {}", c.seq_len));
    seq_key = "max_seq_len";
  }
  m.site(Knob::kSeqLen, seq_key, batch_key);

  MEMPLAN_TRY(bool gc, m.read("gradient_checkpointing", "gradient_checkpointing", c.gradient_checkpointing));
  if (!gc) MEMPLAN_IO_CHECK(m.read("activation_checkpointing", "gradient_checkpointing", c.gradient_checkpointing));
  MEMPLAN_IO_CHECK(read_contrastive(m, "data"));
  MEMPLAN_TRY(auto mixed, m.text("mixed_precision"));  // accelerate's spelling: no, fp16, bf16
  if (m.node("precision") != nullptr) {
    MEMPLAN_IO_CHECK(apply_lightning_precision(m, "precision"));
  } else if (mixed && to_lower(trim(*mixed)) == "no") {
    c.autocast.reset();
    m.from_file("autocast", *m.node("mixed_precision"), "mixed_precision");
  } else if (mixed) {
    MEMPLAN_IO_CHECK(apply_lightning_precision(m, "mixed_precision"));
  } else {
    MEMPLAN_TRY(auto bf, m.boolean("bf16"));
    MEMPLAN_TRY(auto fp, m.boolean("fp16"));
    if (bf.value_or(false) || fp.value_or(false)) {
      c.autocast = bf.value_or(false) ? DType::kBFloat16 : DType::kFloat16;
      m.from_file("autocast", *m.node(bf.value_or(false) ? "bf16" : "fp16"), bf.value_or(false) ? "bf16" : "fp16");
    }
  }
  MEMPLAN_IO_CHECK(m.read_dtype("torch_dtype", "torch_dtype", c.torch_dtype));
  const YamlNode* opt = m.node("optimizer");
  if (opt != nullptr && opt->is_map()) {
    for (const char* k : {"optimizer.name", "optimizer.type"})
      if (m.node(k) != nullptr) {
        MEMPLAN_IO_CHECK(m.read_optimizer(k, "optim", c.optim.kind));
        break;
      }
  } else if (opt != nullptr) {
    MEMPLAN_IO_CHECK(m.read_optimizer("optimizer", "optim", c.optim.kind));
  } else {
    MEMPLAN_IO_CHECK(m.read_optimizer("optim", "optim", c.optim.kind));
  }
  for (const char* k : {"num_gpus", "n_gpus", "world_size"})
    if (m.node(k) != nullptr) {
      MEMPLAN_IO_CHECK(m.read(k, "num_gpus", c.parallel.num_gpus));
      break;
    }

  MEMPLAN_IO_CHECK(read_lora_section(m));

  // The keys are the project's own: only near-misses of the keys above are reported.
  m.check_unknown("", {}, /*strict=*/false);
  return Ok{};
}

}  // namespace memplan::io

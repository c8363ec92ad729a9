// Flat in-house configs like seed 001's: micro_batch_size, gradient_accumulation_steps,
// max_seq_len, gradient_checkpointing, precision at the top level, often with the project's own
// model description (model: {n_layers: ...}) that no catalog knows.
#include <fmt/format.h>

#include "io/dialects_map.hpp"
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

}  // namespace

Status map_flat(Mapper& m) {
  TrainingConfig& c = m.config();

  const YamlNode* model = m.node("model");
  std::string model_key;
  if (model != nullptr && model->is_scalar()) model_key = "model";
  m.first_of({"model_name_or_path", "model_name", "base_model", "pretrained_model_name_or_path"}, &model_key);
  if (model != nullptr && model->is_scalar()) model_key = "model";
  if (!model_key.empty()) MEMPLAN_IO_CHECK(m.read_model(model_key));
  if (m.out().inputs.model_name.empty() && model != nullptr && model->is_map())
    m.out().inputs.model_hint = fmt::format(
        "{}: the model is described by the project's own keys (model: {{...}}), not a Hugging Face id; give --model "
        "ID|PATH for an equivalent architecture or --model-params N",
        m.where_text(*model));

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
  if (m.node("precision") != nullptr) {
    MEMPLAN_IO_CHECK(apply_lightning_precision(m, "precision"));
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

  // The keys are the project's own: only near-misses of the keys above are reported.
  m.check_unknown("", {}, /*strict=*/false);
  return Ok{};
}

}  // namespace memplan::io

// PyTorch Lightning configs, plain (LightningCLI: trainer:, data:) or Hydra-composed like seed
// 002's (training.trainer.accumulate_grad_batches, data_loader.batch_size), usually a main file
// plus stage files that override it. The model is often the project's own: then --model or
// --model-params must say what it is.
#include <algorithm>

#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

// Where the DataLoader's batch_size lives, in the layouts seen in practice.
constexpr std::string_view kBatchParents[] = {"data_loader", "dataloader", "data.init_args", "data", "datamodule",
                                              "data_module"};
constexpr std::string_view kSeqKeys[] = {"max_length", "max_seq_len", "max_seq_length", "seq_len"};

Status read_devices(Mapper& m, const std::string& key) {
  const YamlNode* n = m.node(key);
  if (n == nullptr || n->is_null()) {
    m.from_default("num_gpus", "1 (no trainer devices)");
    return Ok{};
  }
  TrainingConfig& c = m.config();
  int count = 0;
  if (n->kind == YamlKind::kSeq) {
    count = static_cast<int>(n->items.size());
  } else if (n->is_scalar()) {
    const std::string v = trim(n->value);
    if (v.find(',') != std::string::npos) {
      count = 1;
      for (char ch : v) count += ch == ',';
    } else if (v == "auto" || v == "-1") {
      m.warn_at(*n, fmt::format("devices: {} uses every visible GPU; memplan assumes 1 (pass --num-gpus N)", v));
      return Ok{};
    } else {
      auto i = parse_int(v, "devices");
      if (!i || *i < 1) return m.error_at(*n, ErrorCode::kInvalidConfig,
                                          fmt::format("devices must be a count, a list or \"auto\", got \"{}\"", v));
      count = static_cast<int>(std::min<std::int64_t>(*i, 1024));
    }
  }
  if (count < 1) return m.error_at(*n, ErrorCode::kInvalidConfig, "devices: an empty list");
  c.parallel.num_gpus = count;
  m.from_file("num_gpus", *n, key);
  return Ok{};
}

// LightningCLI writes a strategy object as {class_path: ..., init_args: {...}} (jsonargparse).
Status read_strategy_object(Mapper& m, const std::string& key) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto cls, m.text(key + ".class_path"));
  const YamlNode& n = *m.node(key);
  if (!cls) {
    m.warn_at(n, fmt::format("{} is a mapping without class_path; memplan estimates plain data parallelism", key));
    return Ok{};
  }
  const std::string v = to_lower(*cls);
  const YamlNode& at = *m.node(key + ".class_path");
  const std::string args = key + ".init_args.";
  if (v.find("fsdpstrategy") != std::string::npos) {
    MEMPLAN_TRY(auto ss, m.text(args + "sharding_strategy"));
    const std::string st = to_lower(ss.value_or("FULL_SHARD"));
    {
      auto parsed = parse_fsdp(st);  // no_shard: FSDP1's NO_SHARD (docs/formulas.md#fsdp-no-shard)
      if (!parsed) return m.error_at(*m.node(args + "sharding_strategy"), parsed.error().code, parsed.error().message,
                                     parsed.error().suggestion);
      c.parallel.sharding = *parsed;
    }
    MEMPLAN_TRY(auto offload, m.boolean(args + "cpu_offload"));
    if (offload.value_or(false)) {
      c.parallel.offload_params = c.parallel.offload_optimizer = true;
      m.from_file("offload_params", *m.node(args + "cpu_offload"), args + "cpu_offload");
    }
    if (const YamlNode* ac = m.node(args + "activation_checkpointing_policy"); ac != nullptr && !ac->is_null()) {
      c.gradient_checkpointing = true;
      m.from_file("gradient_checkpointing", *ac, args + "activation_checkpointing_policy");
    }
  } else if (v.find("deepspeedstrategy") != std::string::npos) {
    MEMPLAN_TRY(auto stage, m.integer(args + "stage", 0));
    const std::int64_t st = stage.value_or(2);  // DeepSpeedStrategy(stage=2)
    constexpr ShardingStrategy kStages[] = {ShardingStrategy::kNone, ShardingStrategy::kZero1,
                                            ShardingStrategy::kZero2, ShardingStrategy::kZero3};
    if (st > 3) return m.error_at(*m.node(args + "stage"), ErrorCode::kInvalidConfig,
                                  fmt::format("stage = {} must be 0, 1, 2 or 3", st));
    c.parallel.sharding = kStages[st];
    MEMPLAN_TRY(auto oo, m.boolean(args + "offload_optimizer"));
    MEMPLAN_TRY(auto op, m.boolean(args + "offload_parameters"));
    if (oo.value_or(false)) c.parallel.offload_optimizer = true, m.from_file("offload_optimizer", at, key);
    if (op.value_or(false)) c.parallel.offload_params = true, m.from_file("offload_params", at, key);
  } else if (v.find("ddpstrategy") != std::string::npos || v.find("singledevicestrategy") != std::string::npos) {
    return Ok{};
  } else {
    m.warn_at(at, fmt::format("strategy {} is not modelled; memplan estimates plain data parallelism", *cls));
    return Ok{};
  }
  m.from_file("sharding", at, key + ".class_path");
  return Ok{};
}

Status read_strategy(Mapper& m, const std::string& key) {
  if (const YamlNode* obj = m.node(key); obj != nullptr && obj->is_map()) return read_strategy_object(m, key);
  MEMPLAN_TRY(auto s, m.text(key));
  if (!s) return Ok{};
  const YamlNode& n = *m.node(key);
  TrainingConfig& c = m.config();
  const std::string v = to_lower(*s);
  if (v == "fsdp") {
    c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  } else if (v.rfind("deepspeed_stage_", 0) == 0) {
    const char stage = v.size() > 16 ? v[16] : '?';
    if (stage == '1') c.parallel.sharding = ShardingStrategy::kZero1;
    else if (stage == '2') c.parallel.sharding = ShardingStrategy::kZero2;
    else if (stage == '3') c.parallel.sharding = ShardingStrategy::kZero3;
    else return m.error_at(n, ErrorCode::kUnknownName, fmt::format("unknown strategy '{}'", *s));
    if (v.find("offload") != std::string::npos) {
      c.parallel.offload_optimizer = true;
      c.parallel.offload_params = stage == '3';
      m.from_file("offload_optimizer", n, key);
    }
  } else if (v == "ddp" || v == "ddp_spawn" || v == "ddp_find_unused_parameters_true" || v == "auto" ||
             v == "single_device" || v == "dp") {
    return Ok{};
  } else {
    return m.error_at(n, ErrorCode::kUnknownName, fmt::format("unknown strategy '{}'", *s),
                      did_you_mean(v, {"ddp", "fsdp", "deepspeed_stage_2", "deepspeed_stage_3"}));
  }
  m.from_file("sharding", n, key);
  return Ok{};
}

}  // namespace

Status map_lightning(Mapper& m) {
  TrainingConfig& c = m.config();
  const std::string trainer = m.node("training.trainer") != nullptr ? "training.trainer" : "trainer";

  // The model: a Hugging Face id when the project names one.
  std::string model_key;
  // NeMo 1.x NLP models (text classification, GLUE) wrap a Hugging Face encoder named in
  // model.language_model.pretrained_model_name.
  m.first_of({"model.model_name_or_path", "model.pretrained_model_name_or_path", "model.init_args.model_name_or_path",
              "model.base_model", "model_name_or_path", "model.language_model.pretrained_model_name"},
             &model_key);
  bool model = false;
  if (!model_key.empty()) {
    MEMPLAN_TRY(model, m.read_model(model_key));
  }
  if (!model) {
    if (const YamlNode* own = m.node("model"); own != nullptr && own->is_map())
      m.out().inputs.model_hint = fmt::format(
          "{}: the model is the project's own (model: ...), not a Hugging Face id; give --model ID|PATH for an "
          "equivalent architecture or --model-params N",
          m.where_text(*own));
  }

  std::string batch_key;
  m.first_of({"data_loader.batch_size", "dataloader.batch_size", "data.init_args.batch_size", "data.batch_size",
              "datamodule.batch_size", "data_module.batch_size", "model.train_ds.batch_size"},
             &batch_key);
  std::string parent;
  if (!batch_key.empty()) {
    parent = batch_key.substr(0, batch_key.rfind('.'));
  } else {
    for (auto p : kBatchParents)
      if (m.node(p) != nullptr && m.node(p)->is_map()) {
        parent = std::string(p);
        break;
      }
    batch_key = (parent.empty() ? std::string("data_loader") : parent) + ".batch_size";
  }
  MEMPLAN_IO_CHECK(m.read_or(batch_key, "batch", c.micro_batch, 1, "torch DataLoader batch_size = 1"));
  m.site(Knob::kBatch, batch_key);

  const std::string accum_key = trainer + ".accumulate_grad_batches";
  MEMPLAN_IO_CHECK(m.read_or(accum_key, "grad_accum", c.grad_accum, 1, "Lightning accumulate_grad_batches = 1"));
  m.site(Knob::kGradAccum, accum_key);

  // A sequence length, when the data section has one of the usual keys (or its tokenization).
  std::string seq_key;
  if (!parent.empty()) {
    // NeMo keeps what its datasets share (max_seq_length) in model.dataset, beside model.train_ds.
    const std::string shared = parent == "model.train_ds" ? "model.dataset" : parent + ".tokenization";
    for (const std::string& base : {parent, shared})
      for (auto k : kSeqKeys)
        if (seq_key.empty() && m.node(base + "." + std::string(k)) != nullptr) seq_key = base + "." + std::string(k);
  }
  if (!seq_key.empty()) {
    MEMPLAN_IO_CHECK(m.read(seq_key, "seq_len", c.seq_len));
    m.site(Knob::kSeqLen, seq_key);
  } else {
    m.site(Knob::kSeqLen, (parent.empty() ? std::string("data_loader") : parent) + ".max_length", {},
           "this layout has no standard sequence-length key; name yours with --keys seq_len=KEY");
  }

  MEMPLAN_IO_CHECK(read_contrastive(m, parent));
  // NeMo's GLUE / text-classification models: a sequence classifier on the encoder.
  if (const YamlNode* task = m.node("model.task_name");
      task != nullptr && task->is_scalar() && model_key == "model.language_model.pretrained_model_name") {
    m.out().inputs.encoder_head = EncoderHead::kSequenceClassification;
    m.from_file("head", *task, "model.task_name (NeMo's GLUE model: a sequence classifier)");
  }
  MEMPLAN_IO_CHECK(read_devices(m, trainer + ".devices"));
  MEMPLAN_IO_CHECK(m.read(trainer + ".num_nodes", "nodes", c.parallel.nodes));
  if (m.node(trainer + ".precision") != nullptr) {
    MEMPLAN_IO_CHECK(apply_lightning_precision(m, trainer + ".precision"));
  } else {
    m.from_default("torch_dtype", "Lightning precision = 32-true");
    m.from_default("autocast", "Lightning precision = 32-true");
  }
  MEMPLAN_IO_CHECK(read_strategy(m, trainer + ".strategy"));
  MEMPLAN_IO_CHECK(m.read(std::string("model.gradient_checkpointing"), "gradient_checkpointing",
                          c.gradient_checkpointing));

  m.check_unknown(trainer, lightning_trainer_keys(), /*strict=*/true);
  if (!parent.empty()) m.check_unknown(parent, {}, /*strict=*/false);
  m.check_unknown("", {}, /*strict=*/false);
  return Ok{};
}

}  // namespace memplan::io

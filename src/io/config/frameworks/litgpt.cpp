// litgpt finetune configs (config_hub/finetune/*/{lora,qlora,full}.yaml, `litgpt finetune_lora
// --config X`): checkpoint_dir names the model, train.* the batch, LoRA flags at the top level.
// Keys from litgpt/finetune/{lora,full}.py (setup arguments) and litgpt/args.py (TrainArgs).
#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

const std::vector<std::string>& litgpt_known_keys() {
  static const std::vector<std::string> keys = {
      "access_token", "adapter_path", "checkpoint_dir", "data", "devices", "eval", "logger_name", "lora_alpha",
      "lora_dropout", "lora_head", "lora_key", "lora_mlp", "lora_projection", "lora_query", "lora_r", "lora_value",
      "num_nodes", "optimizer", "out_dir", "precision", "quantize", "resume", "seed", "train"};
  return keys;
}

}  // namespace

Status map_litgpt(Mapper& m) {
  TrainingConfig& c = m.config();
  // checkpoint_dir: checkpoints/<org>/<name>, what `litgpt download <org>/<name>` writes.
  MEMPLAN_TRY(auto dir, m.text("checkpoint_dir"));
  if (dir) {
    std::string id = trim(*dir);
    while (!id.empty() && id.back() == '/') id.pop_back();
    const auto pos = id.find("checkpoints/");
    if (pos != std::string::npos) id = id.substr(pos + 12);
    const auto slash = id.rfind('/');
    const auto prev = slash == std::string::npos ? std::string::npos : id.rfind('/', slash - 1);
    if (prev != std::string::npos) id = id.substr(prev + 1);
    m.out().inputs.model_name = id;
    m.from_file("model", *m.node("checkpoint_dir"), "checkpoint_dir");
  }
  MEMPLAN_IO_CHECK(m.read_or("train.micro_batch_size", "batch", c.micro_batch, 4, "litgpt TrainArgs micro_batch_size = 4"));
  m.site(Knob::kBatch, "train.micro_batch_size");
  MEMPLAN_TRY(auto devices, m.integer("devices"));
  MEMPLAN_TRY(auto nodes, m.integer("num_nodes"));
  if (devices) {
    c.parallel.num_gpus = static_cast<int>(*devices);
    m.from_file("num_gpus", *m.node("devices"), "devices");
  }
  if (nodes) {
    c.parallel.nodes = static_cast<int>(*nodes);
    m.from_file("nodes", *m.node("num_nodes"), "num_nodes");
  }
  // TrainArgs.gradient_accumulation_iters: global_batch_size / (devices x nodes) / micro_batch_size.
  MEMPLAN_TRY(auto global, m.integer("train.global_batch_size"));
  if (global) {
    const std::int64_t per_step = c.micro_batch * c.parallel.world_size();
    const YamlNode& n = *m.node("train.global_batch_size");
    if (*global % per_step != 0)
      m.warn_at(n, fmt::format("global_batch_size = {} is not a multiple of micro_batch_size x devices = {}; litgpt "
                               "rounds the accumulation down",
                               *global, per_step));
    c.grad_accum = std::max<std::int64_t>(1, *global / per_step);
    m.derived("grad_accum", fmt::format("global_batch_size {} / ({} devices x {} micro-batch) at {}", *global,
                                        c.parallel.world_size(), c.micro_batch, m.where_text(n)));
  }
  MEMPLAN_TRY(bool seq, m.read("train.max_seq_length", "seq_len", c.seq_len));
  if (!seq) m.from_default("seq_len", fmt::format("train.max_seq_length not set: memplan's default {}", c.seq_len));
  m.site(Knob::kSeqLen, "train.max_seq_length");
  if (m.node("precision") != nullptr) MEMPLAN_IO_CHECK(apply_lightning_precision(m, "precision"));

  // LoRA: a config with lora_r is run by `litgpt finetune_lora`.
  MEMPLAN_TRY(bool lora, m.read("lora_r", "lora_r", c.lora.r));
  if (lora) {
    c.lora.enabled = true;
    m.from_file("use_peft", *m.node("lora_r"), "lora_r");
    MEMPLAN_IO_CHECK(m.read("lora_alpha", "lora_alpha", c.lora.alpha));
    MEMPLAN_IO_CHECK(m.read("lora_dropout", "lora_dropout", c.lora.dropout));
    // litgpt's fused qkv: any of query/key/value adapts the one attn projection.
    std::vector<std::string> targets;
    for (const auto& [key, modules] :
         {std::pair<const char*, std::vector<std::string>>{"lora_query", {"q_proj"}},
          {"lora_key", {"k_proj"}}, {"lora_value", {"v_proj"}}, {"lora_projection", {"o_proj"}},
          {"lora_mlp", {"gate_proj", "up_proj", "down_proj"}}}) {
      MEMPLAN_TRY(auto on, m.boolean(key));
      if (on.value_or(false)) targets.insert(targets.end(), modules.begin(), modules.end());
    }
    MEMPLAN_TRY(auto head, m.boolean("lora_head"));
    // PEFT can adapt lm_head, but the engine models LoRA on the decoder layers' Linear modules only:
    // estimated without the head adapter, said where the file asks for it.
    if (head.value_or(false))
      m.warn_at(*m.node("lora_head"),
                "lora_head (LoRA on lm_head) is not modelled; estimated without it: too low by the adapter's "
                "r x (hidden + vocab) weights, their gradients and optimizer states, and its activations");
    if (!targets.empty()) {
      set_lora_targets(c, targets);
      m.from_file("lora_target_modules", *m.node("lora_r"), "lora_query/key/value/projection/mlp/head");
    }
  }
  MEMPLAN_TRY(auto quant, m.text("quantize"));
  if (quant) {
    const std::string q = to_lower(*quant);
    const YamlNode& n = *m.node("quantize");
    if (q == "bnb.nf4" || q == "bnb.nf4-dq" || q == "bnb.fp4" || q == "bnb.fp4-dq") {
      c.quant.load_in_4bit = true;
      c.quant.quant_type = q.find("nf4") != std::string::npos ? "nf4" : "fp4";
      c.quant.double_quant = q.size() > 3 && q.compare(q.size() - 3, 3, "-dq") == 0;
      m.from_file("load_in_4bit", n, "quantize");
    } else if (q == "bnb.int8") {
      c.quant.load_in_8bit = true;
      m.from_file("load_in_8bit", n, "quantize");
    } else {
      m.warn_at(n, fmt::format("quantize '{}' is not modelled; memplan estimates unquantized weights", *quant));
    }
  }
  const YamlNode* opt = m.node("optimizer");
  if (opt != nullptr && opt->is_scalar()) {
    MEMPLAN_IO_CHECK(m.read_optimizer("optimizer", "optim", c.optim.kind));
  } else if (opt != nullptr) {
    MEMPLAN_TRY(auto cls, m.text("optimizer.class_path"));
    if (cls) {
      const std::string k = to_lower(*cls);
      const YamlNode& n = *m.node("optimizer.class_path");
      if (k == "torch.optim.adamw" || k == "torch.optim.adam") {
        c.optim.kind = OptimizerKind::kAdamWTorch;
      } else if (k == "torch.optim.sgd") {
        c.optim.kind = OptimizerKind::kSgd;
      } else if (k.find("bitsandbytes") != std::string::npos && k.find("8bit") != std::string::npos) {
        c.optim.kind = k.find("paged") != std::string::npos ? OptimizerKind::kPagedAdamW8bit : OptimizerKind::kAdamW8bit;
      } else {
        c.optim.kind = OptimizerKind::kAdamWTorch;
        m.warn_at(n, fmt::format("optimizer '{}' is not modelled; estimated as adamw_torch (two fp32 states)", *cls));
      }
      m.from_file("optim", n, "optimizer.class_path");
    }
  }
  m.from_default("gradient_checkpointing", "litgpt finetune scripts do not checkpoint activations on one device");
  m.check_unknown("", litgpt_known_keys(), /*strict=*/true);
  return Ok{};
}

}  // namespace memplan::io

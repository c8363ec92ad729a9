// NeMo Automodel recipes (examples/llm_finetune/*.yaml): Hydra-style sections whose `_target_`
// names the class built. step_scheduler.local_batch_size is the per-GPU micro-batch and
// global_batch_size the optimizer step's batch over all data-parallel ranks; model.* is
// from_pretrained's arguments; peft.dim/alpha is LoRA; distributed.strategy fsdp2 shards fully.
#include <fmt/format.h>

#include "io/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

Status map_automodel(Mapper& m) {
  TrainingConfig& c = m.config();
  const YamlNode* name =
      m.first_of({"model.pretrained_model_name_or_path", "model.config.pretrained_model_name_or_path"});
  if (name != nullptr) {
    MEMPLAN_IO_CHECK(m.read_model(m.node("model.pretrained_model_name_or_path") != nullptr
                                      ? "model.pretrained_model_name_or_path"
                                      : "model.config.pretrained_model_name_or_path"));
  } else if (const YamlNode* model = m.node("model"); model != nullptr) {
    m.out().inputs.model_hint = fmt::format("{}: the model section names no pretrained_model_name_or_path; give "
                                            "--model ID|PATH",
                                            m.where_text(*model));
  }
  MEMPLAN_IO_CHECK(m.read_or("step_scheduler.local_batch_size", "batch", c.micro_batch, 1,
                             "step_scheduler.local_batch_size not set: 1"));
  m.site(Knob::kBatch, "step_scheduler.local_batch_size");
  // Accumulation = global / (local x data-parallel size): the data-parallel size is the launch's.
  if (const YamlNode* g = m.node("step_scheduler.global_batch_size"); g != nullptr)
    m.from_default("grad_accum", fmt::format("global_batch_size at {} / (local_batch_size x data-parallel GPUs): "
                                             "no effect on peak memory",
                                             m.where_text(*g)));
  MEMPLAN_IO_CHECK(m.read_dtype("model.torch_dtype", "torch_dtype", c.torch_dtype));

  // LoRA: peft.dim / alpha / dropout / target_modules (glob patterns such as '*_proj').
  if (const YamlNode* peft = m.node("peft"); peft != nullptr && peft->is_map()) {
    c.lora.enabled = true;
    m.from_file("use_peft", *peft, "peft");
    MEMPLAN_IO_CHECK(m.read("peft.dim", "lora_r", c.lora.r));
    MEMPLAN_IO_CHECK(m.read("peft.alpha", "lora_alpha", c.lora.alpha));
    MEMPLAN_IO_CHECK(m.read("peft.dropout", "lora_dropout", c.lora.dropout));
    MEMPLAN_TRY(auto targets, m.list("peft.target_modules"));
    if (targets) {
      std::vector<std::string> names;
      bool all = false;
      for (const auto& t : *targets) {
        if (t == "*_proj" || t == "*") all = true;
        else names.push_back(t);
      }
      if (all) set_lora_targets(c, {"all-linear"});
      else set_lora_targets(c, names);
      m.from_file("lora_target_modules", *m.node("peft.target_modules"), "peft.target_modules");
    }
  }
  MEMPLAN_IO_CHECK(m.read("quantization.load_in_4bit", "load_in_4bit", c.quant.load_in_4bit));
  MEMPLAN_IO_CHECK(m.read("quantization.load_in_8bit", "load_in_8bit", c.quant.load_in_8bit));
  MEMPLAN_IO_CHECK(m.read("quantization.bnb_4bit_use_double_quant", "bnb_4bit_use_double_quant",
                          c.quant.double_quant));

  MEMPLAN_TRY(auto strategy, m.text("distributed.strategy"));
  if (strategy) {
    const std::string s = to_lower(*strategy);
    const YamlNode& n = *m.node("distributed.strategy");
    if (s == "fsdp2" || s == "fsdp") {
      c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
      if (s == "fsdp2") {
        c.parallel.fsdp_version = 2;
        m.from_file("fsdp_version", n, "distributed.strategy");
      }
    } else if (s == "ddp") {
      c.parallel.sharding = ShardingStrategy::kNone;
    } else {
      m.warn_at(n, fmt::format("distributed.strategy '{}' is not modelled; memplan estimates FSDP", *strategy));
      c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
    }
    m.from_file("sharding", n, "distributed.strategy");
  }
  for (const char* k : {"distributed.tp_size", "distributed.cp_size", "distributed.pp_size"}) {
    MEMPLAN_TRY(auto v, m.integer(k));
    if (v.value_or(1) > 1) {
      if (std::string_view(k) == "distributed.tp_size") {
        c.parallel.tensor_parallel = static_cast<int>(*v);
        m.from_file("tensor_parallel", *m.node(k), k);
      } else {
        m.warn_at(*m.node(k), fmt::format("{} = {} is not modelled: memplan estimates whole sequences and all layers "
                                          "per GPU",
                                          k, *v));
      }
    }
  }
  MEMPLAN_TRY(auto opt, m.text("optimizer._target_"));
  if (opt) {
    const std::string o = to_lower(*opt);
    const YamlNode& n = *m.node("optimizer._target_");
    if (o == "torch.optim.adamw" || o == "torch.optim.adam") c.optim.kind = OptimizerKind::kAdamWTorch;
    else if (o == "torch.optim.sgd") c.optim.kind = OptimizerKind::kSgd;
    else {
      c.optim.kind = OptimizerKind::kAdamWTorch;
      m.warn_at(n, fmt::format("optimizer '{}' is not modelled; estimated as adamw_torch (two fp32 states)", *opt));
    }
    m.from_file("optim", n, "optimizer._target_");
  }
  MEMPLAN_TRY(bool gc, m.read("distributed.activation_checkpointing", "gradient_checkpointing",
                              c.gradient_checkpointing));
  (void)gc;
  // The sections are the recipe's own (_target_ classes with their arguments): near-misses only.
  m.check_unknown("", {}, /*strict=*/false);
  return Ok{};
}

}  // namespace memplan::io

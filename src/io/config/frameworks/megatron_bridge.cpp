// Megatron-Bridge YAML overrides (NVIDIA-NeMo/Megatron-Bridge: `python run_recipe.py
// --config-file conf/x.yaml`): the ConfigContainer's sections (model, train, dataset, peft,
// optimizer, scheduler, checkpoint, dist, ddp, logger, rng) layered on a Python recipe that
// builds the model. The model is not in the file: it is named with --model. docs/configs.md#megatron-bridge.
#include <tuple>

#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

Status map_megatron_bridge(Mapper& m) {
  TrainingConfig& c = m.config();
  ParallelConfig& par = c.parallel;
  par.megatron_core = true;
  m.derived("megatron_core", "a Megatron-Bridge config: Megatron-Core models");
  c.method = Method::kSft;
  m.from_default("method", "SFT or pre-training: Megatron-Bridge's recipes");

  MEMPLAN_IO_CHECK(m.read_or("train.micro_batch_size", "batch", c.micro_batch, 1,
                             "Megatron-Bridge train.micro_batch_size: the recipe's (1 assumed)"));
  m.site(Knob::kBatch, "train.micro_batch_size");
  (void)m.node("train.global_batch_size");
  c.grad_accum = 1;
  m.from_default("grad_accum",
                 "1: Megatron accumulates global_batch_size / (micro_batch_size x data-parallel GPUs); the step's "
                 "peak does not depend on it");
  std::string seq_key = m.node("dataset.seq_length") != nullptr ? "dataset.seq_length" : "model.seq_length";
  MEMPLAN_TRY(bool seq, m.read(seq_key, "seq_len", c.seq_len));
  if (!seq) {
    c.seq_len = 2048;
    m.from_default("seq_len", "2048: the recipe's seq_length is not in the file");
    m.warn_file(0, "dataset.seq_length is not in this override file (the recipe sets it); memplan plans 2048 "
                   "tokens (pass --seq-len)");
  }
  m.site(Knob::kSeqLen, seq_key);
  if (const YamlNode* d = m.node("dataset.seq_length"); d != nullptr && m.node("model.seq_length") != nullptr &&
                                                        d->is_scalar() && m.node("model.seq_length")->value != d->value)
    m.contradiction(*d, "dataset.seq_length", *m.node("model.seq_length"), "model.seq_length");

  for (const auto& [key, input, field] :
       {std::tuple<const char*, const char*, int*>{"model.tensor_model_parallel_size", "tensor_parallel",
                                                   &par.tensor_parallel},
        {"model.pipeline_model_parallel_size", "pipeline_parallel", &par.pipeline_parallel},
        {"model.context_parallel_size", "context_parallel", &par.context_parallel},
        {"model.expert_model_parallel_size", "expert_parallel", &par.expert_parallel},
        {"model.virtual_pipeline_model_parallel_size", "virtual_stages", &par.virtual_stages}})
    MEMPLAN_IO_CHECK(m.read_degree(key, input, *field));
  MEMPLAN_IO_CHECK(m.read("model.sequence_parallel", "sequence_parallel", par.sequence_parallel));
  MEMPLAN_TRY(auto rc, m.text("model.recompute_granularity"));
  if (rc) {
    const std::string g = to_lower(*rc);
    c.gradient_checkpointing = g == "full" || g == "selective";
    m.from_file("gradient_checkpointing", *m.node("model.recompute_granularity"), "model.recompute_granularity");
  }
  MEMPLAN_TRY(auto dist_opt, m.boolean("ddp.use_distributed_optimizer"));
  if (dist_opt.value_or(false)) {
    par.sharding = ShardingStrategy::kZero1;
    m.from_file("sharding", *m.node("ddp.use_distributed_optimizer"),
                "ddp.use_distributed_optimizer (Megatron's distributed optimizer: ZeRO-1)");
  }
  for (const char* k : {"dist.use_megatron_fsdp", "dist.use_torch_fsdp2"}) {
    MEMPLAN_TRY(auto on, m.boolean(k));
    if (on.value_or(false)) {
      par.sharding = ShardingStrategy::kFsdpFullShard;
      par.fsdp_version = 2;
      m.from_file("sharding", *m.node(k), k);
    }
  }
  // peft: LoRA (dim, alpha) when the section sets it; the recipe chooses the scheme.
  if (const YamlNode* p = m.node("peft"); p != nullptr && p->is_map()) {
    c.lora.enabled = true;
    m.from_file("use_peft", *p, "peft");
    MEMPLAN_IO_CHECK(m.read("peft.dim", "lora_r", c.lora.r));
    MEMPLAN_IO_CHECK(m.read("peft.alpha", "lora_alpha", c.lora.alpha));
    c.lora.all_linear = true;
    m.derived("lora_target_modules", "every linear layer: Megatron-Bridge LoRA's default target_modules");
  }
  c.torch_dtype = DType::kBFloat16;
  m.derived("torch_dtype", "bfloat16: Megatron-Bridge recipes train in bf16 mixed precision");
  if (m.out().inputs.model_hint.empty())
    m.out().inputs.model_hint =
        "a Megatron-Bridge override file names no model: the recipe script builds it (e.g. llama32_1b); pass the "
        "Hugging Face model it converts with --model, or another --config that names it (memplan estimate --config "
        "x.yaml --model meta-llama/Llama-3.2-1B)";
  for (const char* ns : {"model", "train", "dataset", "peft", "ddp", "dist"}) m.check_unknown(ns, {}, /*strict=*/false);
  return Ok{};
}

}  // namespace memplan::io

// Training-config dialects: the YAML/JSON layouts of the frameworks people train with. Each one
// maps its keys to the engine's TrainingConfig (docs/configs.md has every table) and says where
// the micro-batch, gradient accumulation and sequence length live, for --apply.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/edit/yaml_edit.hpp"
#include "memplan/result.hpp"
#include "memplan/stack.hpp"
#include "memplan/training.hpp"

namespace memplan::io {

enum class Dialect {
  kHfTrl,         // transformers TrainingArguments / TRL SFTConfig, DPOConfig, GRPOConfig + ModelConfig
  kAxolotl,       // axolotl YAML
  kLlamaFactory,  // LLaMA-Factory YAML
  kTorchtune,     // torchtune recipe configs (_component_ builders)
  kLightning,     // PyTorch Lightning / Hydra nested configs (trainer.accumulate_grad_batches, data_loader.batch_size)
  kFlat,          // flat in-house configs (micro_batch_size, gradient_accumulation_steps, max_seq_len)
  kDeepSpeed,     // a DeepSpeed JSON config on its own
  kAccelerate,    // an accelerate launcher config on its own (num_processes, distributed_type)
  kLitgpt,        // litgpt config_hub finetune YAML (checkpoint_dir, train.micro_batch_size)
  kAutomodel,     // NeMo Automodel Hydra recipes (_target_, step_scheduler.local_batch_size)
  kLlmFoundry,    // LLM Foundry / Composer YAML (device_train_microbatch_size)
  kMegatron,      // NeMo 1.x / launcher Megatron configs (model.tensor_model_parallel_size, model.micro_batch_size)
  kTorchtitan,    // torchtitan TOML job configs (model.flavor, training.local_batch_size, parallelism.*_degree)
  kMegatronLm,    // Megatron-LM arguments as YAML (ARGS:, MODEL_ARGS: --flags, or --yaml-cfg names)
  kVerl,          // verl Hydra trainer configs (actor_rollout_ref, data.micro_batch_size_per_gpu, trainer.n_gpus_per_node)
  kOpenInstruct,  // allenai/open-instruct finetune.py / dpo_tune_cache.py YAML (use_lora, use_qlora, lora_rank)
  kMsSwift,       // ms-swift `swift sft|rlhf --config` YAML (train_type/tuner_type, rlhf_type, deepspeed presets)
  kOumi,          // oumi TrainingConfig YAML (model:, training:, peft:, fsdp: sections)
  kMegatronBridge,  // Megatron-Bridge ConfigContainer overrides (train:, dataset:, peft:, model: on a recipe)
  kNemoRl,        // NVIDIA NeMo-RL (policy.dtensor_cfg / megatron_cfg, cluster.gpus_per_node, grpo/sft/dpo)
  kRoll,          // alibaba/ROLL (actor_train / sft_train with model_args, training_args, strategy_args)
  kPrimeRl,       // PrimeIntellect-ai/prime-rl TOML ([orchestrator], [deployment], [model.ac], [data])
  kKeyMap,        // only what --keys maps
  kInferred,      // no framework claims the file: its concepts found by key name, path and value
};

// "hf", "axolotl", "llama-factory", "torchtune", "lightning", "flat", "deepspeed", "keys".
std::string to_string(Dialect d);
// Canonical names and aliases (trl, transformers, llamafactory, hydra, ds...), case-insensitive.
Result<Dialect> parse_dialect(const std::string& name);
std::vector<std::string> dialect_names();

struct Detection {
  Dialect dialect = Dialect::kFlat;
  std::vector<std::string> evidence;  // the keys that decided: "base_model", "micro_batch_size"
};

// Which dialect a merged config is written in, from its keys. Configs whose keys tie between two
// dialects are errors that name the candidates and --dialect; configs no dialect claims (too
// little evidence) are kInferred, with the weak evidence there was.
Result<Detection> detect_dialect(const YamlNode& root, const std::string& label);

// How a dialect's framework runs a model (docs/formulas.md#accelerate-fsdp-upcast): through
// accelerate's Accelerator.prepare (HF Trainer and the trainers built on it) or not, unknown for
// configs no framework claims; through PEFT's get_peft_model or its own LoRA.
RunContext run_context(Dialect d);

// Whether a parsed file is a DeepSpeed config (train_micro_batch_size_per_gpu, zero_optimization...).
bool looks_like_deepspeed(const YamlNode& root);
// An optimizer name the trainers accept (transformers OptimizerNames, axolotl) that the engine
// has no exact model for: the modelled optimizer it is estimated as, and a sentence saying so.
struct OptimizerEstimate {
  OptimizerKind kind;
  std::string note;  // "optimizer 'ademamix' is not modelled; estimated as adamw_torch (...)"
};
std::optional<OptimizerEstimate> estimate_optimizer(const std::string& name);

// Whether a parsed file is an accelerate launcher config (distributed_type, num_processes...).
bool looks_like_accelerate(const YamlNode& root);

}  // namespace memplan::io

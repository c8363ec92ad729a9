#include "io/config/dialects.hpp"

#include <algorithm>
#include <regex>
#include <utility>
#include <string_view>

#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

struct DialectName {
  Dialect dialect;
  const char* name;
};

// The first spelling of each dialect is canonical.
constexpr DialectName kNames[] = {
    {Dialect::kHfTrl, "hf"},
    {Dialect::kAxolotl, "axolotl"},
    {Dialect::kLlamaFactory, "llama-factory"},
    {Dialect::kTorchtune, "torchtune"},
    {Dialect::kLightning, "lightning"},
    {Dialect::kFlat, "flat"},
    {Dialect::kDeepSpeed, "deepspeed"},
    {Dialect::kAccelerate, "accelerate"},
    {Dialect::kLitgpt, "litgpt"},
    {Dialect::kAutomodel, "nemo-automodel"},
    {Dialect::kLlmFoundry, "llm-foundry"},
    {Dialect::kMegatron, "nemo-megatron"},
    {Dialect::kTorchtitan, "torchtitan"},
    {Dialect::kMegatronLm, "megatron-lm"},
    {Dialect::kVerl, "verl"},
    {Dialect::kOpenInstruct, "open-instruct"},
    {Dialect::kMsSwift, "ms-swift"},
    {Dialect::kOumi, "oumi"},
    {Dialect::kMegatronBridge, "megatron-bridge"},
    {Dialect::kNemoRl, "nemo-rl"},
    {Dialect::kRoll, "roll"},
    {Dialect::kPrimeRl, "prime-rl"},
    {Dialect::kKeyMap, "keys"},
    {Dialect::kInferred, "inferred"},
    {Dialect::kHfTrl, "trl"},
    {Dialect::kHfTrl, "transformers"},
    {Dialect::kHfTrl, "huggingface"},
    {Dialect::kLlamaFactory, "llamafactory"},
    {Dialect::kLlamaFactory, "llama_factory"},
    {Dialect::kLightning, "hydra"},
    {Dialect::kLightning, "pytorch-lightning"},
    {Dialect::kDeepSpeed, "ds"},
    {Dialect::kKeyMap, "keymap"},
    {Dialect::kAutomodel, "automodel"},
    {Dialect::kAutomodel, "nemo"},
    {Dialect::kLlmFoundry, "llmfoundry"},
    {Dialect::kLlmFoundry, "composer"},
    {Dialect::kMegatron, "megatron"},
    {Dialect::kMegatron, "nemo1"},
    {Dialect::kMegatronLm, "megatron_lm"},
    {Dialect::kMegatronLm, "mlm"},
    {Dialect::kMegatronLm, "mcore"},
    {Dialect::kOpenInstruct, "open_instruct"},
    {Dialect::kOpenInstruct, "tulu"},
    {Dialect::kMsSwift, "swift"},
    {Dialect::kMsSwift, "ms_swift"},
    {Dialect::kMegatronBridge, "mbridge"},
    {Dialect::kMegatronBridge, "megatron_bridge"},
    {Dialect::kNemoRl, "nemo_rl"},
    {Dialect::kNemoRl, "nemorl"},
    {Dialect::kPrimeRl, "prime_rl"},
    {Dialect::kPrimeRl, "primerl"},
    {Dialect::kInferred, "generic"},
    {Dialect::kInferred, "auto"},
};

struct Signal {
  Dialect dialect;
  const char* path;
  int weight;
};

// Keys that point at a dialect, weighted by how specific they are to it.
constexpr Signal kSignals[] = {
    {Dialect::kTorchtune, "model._component_", 6},
    {Dialect::kTorchtune, "tokenizer._component_", 4},
    {Dialect::kTorchtune, "checkpointer._component_", 3},
    {Dialect::kTorchtune, "enable_activation_checkpointing", 3},
    {Dialect::kTorchtune, "optimizer._component_", 2},
    {Dialect::kAxolotl, "base_model", 6},
    {Dialect::kAxolotl, "sequence_len", 4},
    {Dialect::kAxolotl, "lora_target_linear", 3},
    {Dialect::kAxolotl, "adapter", 2},
    {Dialect::kAxolotl, "num_epochs", 1},
    {Dialect::kAxolotl, "micro_batch_size", 1},
    {Dialect::kLlamaFactory, "finetuning_type", 6},
    {Dialect::kLlamaFactory, "cutoff_len", 4},
    {Dialect::kLlamaFactory, "lora_target", 3},
    {Dialect::kLlamaFactory, "quantization_bit", 3},
    {Dialect::kLlamaFactory, "stage", 2},
    {Dialect::kLlamaFactory, "lora_rank", 2},
    {Dialect::kLlamaFactory, "template", 2},
    {Dialect::kHfTrl, "per_device_train_batch_size", 3},
    {Dialect::kHfTrl, "use_peft", 3},
    {Dialect::kHfTrl, "model_name_or_path", 2},
    {Dialect::kHfTrl, "num_generations", 2},
    {Dialect::kHfTrl, "use_vllm", 2},
    {Dialect::kHfTrl, "lora_r", 1},
    {Dialect::kHfTrl, "max_length", 1},
    {Dialect::kHfTrl, "max_seq_length", 1},
    {Dialect::kHfTrl, "optim", 1},
    {Dialect::kHfTrl, "torch_dtype", 1},
    {Dialect::kHfTrl, "dataset_name", 1},
    {Dialect::kLightning, "trainer.accumulate_grad_batches", 6},
    {Dialect::kLightning, "training.trainer", 5},
    {Dialect::kLightning, "data_loader.batch_size", 4},
    {Dialect::kLightning, "data.init_args.batch_size", 4},
    {Dialect::kLightning, "data.batch_size", 1},  // alone it decides nothing: many trainers have data.batch_size
    {Dialect::kFlat, "max_seq_len", 3},
    {Dialect::kFlat, "micro_batch_size", 2},
    {Dialect::kFlat, "gradient_accumulation_steps", 1},
    {Dialect::kFlat, "precision", 1},
    {Dialect::kFlat, "batch_size", 1},
    {Dialect::kFlat, "lr", 1},      // TrainingArguments says learning_rate
    {Dialect::kFlat, "epochs", 1},  // and num_train_epochs
    {Dialect::kLitgpt, "checkpoint_dir", 5},
    {Dialect::kLitgpt, "train.micro_batch_size", 5},
    {Dialect::kLitgpt, "train.global_batch_size", 3},
    {Dialect::kLitgpt, "out_dir", 1},
    {Dialect::kAutomodel, "step_scheduler.local_batch_size", 7},
    {Dialect::kAutomodel, "step_scheduler.global_batch_size", 3},
    {Dialect::kAutomodel, "model._target_", 3},
    {Dialect::kAutomodel, "recipe", 1},
    {Dialect::kLlmFoundry, "device_train_microbatch_size", 7},
    {Dialect::kLlmFoundry, "global_train_batch_size", 4},
    {Dialect::kLlmFoundry, "train_loader", 3},
    {Dialect::kLlmFoundry, "max_duration", 1},
    {Dialect::kMegatron, "model.tensor_model_parallel_size", 7},
    {Dialect::kMegatron, "model.pipeline_model_parallel_size", 5},
    {Dialect::kMegatron, "model.encoder_seq_length", 5},
    {Dialect::kMegatron, "model.mcore_gpt", 5},
    {Dialect::kMegatron, "model.micro_batch_size", 4},
    {Dialect::kMegatronLm, "ARGS.tensor_model_parallel_size", 7},
    {Dialect::kMegatronLm, "ARGS.micro_batch_size", 5},
    {Dialect::kMegatronLm, "ARGS.num_layers", 4},
    {Dialect::kMegatronLm, "MODEL_ARGS.--tensor-model-parallel-size", 7},
    {Dialect::kMegatronLm, "MODEL_ARGS.--micro-batch-size", 5},
    {Dialect::kMegatronLm, "MODEL_ARGS.--num-layers", 4},
    {Dialect::kMegatronLm, "model_parallel.tensor_model_parallel_size", 7},
    {Dialect::kMegatronLm, "language_model.num_layers", 4},
    {Dialect::kMegatronLm, "tensor_model_parallel_size", 5},
    {Dialect::kMegatronLm, "pipeline_model_parallel_size", 4},
    {Dialect::kMegatronLm, "num_query_groups", 2},
    {Dialect::kMegatronLm, "ffn_hidden_size", 2},
    {Dialect::kMegatronLm, "lr_decay_style", 2},
    {Dialect::kMegatronLm, "seq_length", 1},
    {Dialect::kMegatronLm, "train_iters", 1},
    {Dialect::kMegatronLm, "global_batch_size", 1},
    {Dialect::kTorchtitan, "model.flavor", 7},
    {Dialect::kTorchtitan, "parallelism.data_parallel_shard_degree", 7},
    {Dialect::kTorchtitan, "training.local_batch_size", 4},
    {Dialect::kTorchtitan, "activation_checkpoint.mode", 4},
    {Dialect::kTorchtitan, "job.dump_folder", 3},
    // verl: a `trainer:` section too, but with verl's own keys (weighed above Lightning's `trainer`).
    {Dialect::kVerl, "actor_rollout_ref", 9},
    {Dialect::kVerl, "model.partial_pretrain", 7},
    {Dialect::kVerl, "data.micro_batch_size_per_gpu", 6},
    {Dialect::kVerl, "trainer.n_gpus_per_node", 5},
    {Dialect::kVerl, "algorithm.adv_estimator", 4},
    {Dialect::kVerl, "data.train_batch_size", 2},
    {Dialect::kVerl, "trainer.nnodes", 2},
    {Dialect::kVerl, "ulysses_sequence_parallel_size", 2},
    // allenai/open-instruct's own argument names (finetune.py FlatArguments, dpo_utils.py).
    {Dialect::kOpenInstruct, "use_qlora", 6},
    {Dialect::kOpenInstruct, "use_slow_tokenizer", 5},
    {Dialect::kOpenInstruct, "dataset_mix_dir", 5},
    {Dialect::kOpenInstruct, "use_lora", 4},
    {Dialect::kOpenInstruct, "use_flash_attn", 4},
    {Dialect::kOpenInstruct, "dpo_loss_type", 5},
    {Dialect::kOpenInstruct, "dpo_beta", 4},
    {Dialect::kOpenInstruct, "hf_metadata_dataset", 4},
    {Dialect::kOpenInstruct, "keep_last_n_checkpoints", 3},
    {Dialect::kOpenInstruct, "try_launch_beaker_eval_jobs", 5},
    {Dialect::kOpenInstruct, "with_tracking", 3},
    {Dialect::kOpenInstruct, "checkpointing_steps", 2},
    {Dialect::kOpenInstruct, "gamma_beta_ratio", 3},
    {Dialect::kOpenInstruct, "load_balancing_loss", 2},
    // ms-swift's arguments (swift/arguments): its own names for the tuner, the RLHF trainer and data.
    {Dialect::kMsSwift, "rlhf_type", 7},
    {Dialect::kMsSwift, "tuner_type", 6},
    {Dialect::kMsSwift, "train_type", 1},  // other trainers use the name too (RAG-Retrieval)
    {Dialect::kMsSwift, "model_author", 5},
    {Dialect::kMsSwift, "split_dataset_ratio", 5},
    {Dialect::kMsSwift, "freeze_vit", 4},
    {Dialect::kMsSwift, "freeze_aligner", 4},
    {Dialect::kMsSwift, "external_plugins", 4},
    {Dialect::kMsSwift, "attn_impl", 3},
    {Dialect::kMsSwift, "quant_bits", 3},
    {Dialect::kMsSwift, "vllm_max_model_len", 2},
    {Dialect::kMsSwift, "use_ray", 2},
    // oumi's TrainingConfig sections (src/oumi/core/configs/params).
    {Dialect::kOumi, "training.trainer_type", 6},
    {Dialect::kOumi, "model.torch_dtype_str", 5},
    {Dialect::kOumi, "training.enable_gradient_checkpointing", 5},
    {Dialect::kOumi, "fsdp.enable_fsdp", 5},
    {Dialect::kOumi, "peft.q_lora", 4},
    {Dialect::kOumi, "model.model_name", 4},
    {Dialect::kOumi, "training.use_peft", 3},
    {Dialect::kOumi, "training.per_device_train_batch_size", 3},
    // Megatron-Bridge's ConfigContainer (train, dataset, scheduler, checkpoint, ddp, dist, rng):
    // model.tensor_model_parallel_size alone made these NeMo 1.x files.
    {Dialect::kMegatronBridge, "train.train_iters", 5},
    {Dialect::kMegatronBridge, "dist.use_megatron_fsdp", 5},
    {Dialect::kMegatronBridge, "dataset.seq_length", 4},
    {Dialect::kMegatronBridge, "peft.dim", 4},
    {Dialect::kMegatronBridge, "checkpoint.pretrained_checkpoint", 4},
    {Dialect::kMegatronBridge, "scheduler.lr_warmup_iters", 4},
    {Dialect::kMegatronBridge, "ddp.grad_reduce_in_fp32", 4},
    {Dialect::kMegatronBridge, "ddp.use_distributed_optimizer", 4},
    {Dialect::kMegatronBridge, "optimizer.finetune_lr", 3},
    {Dialect::kMegatronBridge, "logger.log_interval", 2},
    {Dialect::kMegatronBridge, "rng.seed", 2},
    // NVIDIA NeMo-RL: the policy's worker sections and the cluster.
    {Dialect::kNemoRl, "policy.dtensor_cfg", 7},
    {Dialect::kNemoRl, "policy.megatron_cfg", 7},
    {Dialect::kNemoRl, "policy.train_micro_batch_size", 5},
    {Dialect::kNemoRl, "policy.max_total_sequence_length", 5},
    {Dialect::kNemoRl, "cluster.gpus_per_node", 4},
    // alibaba/ROLL: one worker section per role, each with model_args / training_args / strategy_args.
    {Dialect::kRoll, "actor_train.strategy_args", 9},
    {Dialect::kRoll, "sft_train.strategy_args", 9},
    {Dialect::kRoll, "actor_infer.strategy_args", 5},
    {Dialect::kRoll, "num_return_sequences_in_group", 3},
    {Dialect::kRoll, "num_gpus_per_node", 1},
    // PrimeIntellect-ai/prime-rl's TOML tables.
    {Dialect::kPrimeRl, "orchestrator", 6},
    {Dialect::kPrimeRl, "deployment.num_train_gpus", 5},
    {Dialect::kPrimeRl, "deployment.num_train_nodes", 5},
    {Dialect::kPrimeRl, "model.ac", 3},
    {Dialect::kPrimeRl, "trainer.model.ac", 3},
    {Dialect::kPrimeRl, "model.impl", 3},
    {Dialect::kPrimeRl, "trainer.model.impl", 3},
    {Dialect::kPrimeRl, "renderer.name", 3},
    {Dialect::kPrimeRl, "trainer.optim", 2},
    {Dialect::kDeepSpeed, "train_micro_batch_size_per_gpu", 6},
    {Dialect::kDeepSpeed, "zero_optimization", 6},
    {Dialect::kDeepSpeed, "train_batch_size", 2},
};

// The minimum score that names a dialect: one weak key (`batch_size`) is not enough.
constexpr int kMinScore = 2;

}  // namespace

std::string to_string(Dialect d) {
  for (const auto& n : kNames)
    if (n.dialect == d) return n.name;
  return "?";
}

std::vector<std::string> dialect_names() {
  std::vector<std::string> out;
  for (const auto& n : kNames)
    if (std::find(out.begin(), out.end(), to_string(n.dialect)) == out.end()) out.push_back(to_string(n.dialect));
  return out;
}

Result<Dialect> parse_dialect(const std::string& name) {
  const std::string s = to_lower(trim(name));
  for (const auto& n : kNames)
    if (s == n.name) return n.dialect;
  std::vector<std::string> all;
  for (const auto& n : kNames) all.emplace_back(n.name);
  std::string suggestion = did_you_mean(s, all);
  if (suggestion.empty()) suggestion = "known dialects: " + fmt::format("{}", fmt::join(dialect_names(), ", "));
  return make_error(ErrorCode::kUnknownName, fmt::format("unknown dialect '{}'", name), suggestion);
}

RunContext run_context(Dialect d) {
  RunContext r;
  switch (d) {
    case Dialect::kHfTrl: r.framework = "HF Trainer / TRL"; break;
    case Dialect::kAxolotl: r.framework = "axolotl (HF Trainer)"; break;
    case Dialect::kLlamaFactory: r.framework = "LLaMA-Factory (HF Trainer)"; break;
    case Dialect::kAccelerate: r.framework = "accelerate launch"; break;
    case Dialect::kOpenInstruct: r.framework = "open-instruct (accelerate)"; break;
    case Dialect::kMsSwift: r.framework = "ms-swift (HF Trainer)"; break;
    case Dialect::kOumi: r.framework = "oumi (HF Trainer)"; break;
    case Dialect::kVerl: r.framework = "verl"; r.accelerate = false; break;          // PEFT, its own FSDP
    case Dialect::kLlmFoundry: r.framework = "LLM Foundry (Composer)"; r.accelerate = false; break;  // PEFT
    case Dialect::kLightning: r.framework = "PyTorch Lightning"; r.accelerate = false; break;
    case Dialect::kTorchtune: r.framework = "torchtune"; r.accelerate = false; r.peft = false; break;
    case Dialect::kLitgpt: r.framework = "LitGPT"; r.accelerate = false; r.peft = false; break;
    case Dialect::kAutomodel: r.framework = "NeMo Automodel"; r.accelerate = false; r.peft = false; break;
    case Dialect::kMegatron: r.framework = "NeMo (Megatron)"; r.accelerate = false; r.peft = false; break;
    case Dialect::kMegatronLm: r.framework = "Megatron-LM"; r.accelerate = false; r.peft = false; break;
    case Dialect::kMegatronBridge: r.framework = "Megatron-Bridge"; r.accelerate = false; r.peft = false; break;
    case Dialect::kTorchtitan: r.framework = "torchtitan"; r.accelerate = false; r.peft = false; break;
    case Dialect::kNemoRl: r.framework = "NeMo-RL"; r.accelerate = false; r.peft = false; break;
    case Dialect::kRoll: r.framework = "ROLL"; r.accelerate = false; break;  // its own strategies; PEFT's LoRA
    case Dialect::kPrimeRl: r.framework = "prime-rl"; r.accelerate = false; r.peft = false; break;  // FSDP2, own LoRA
    case Dialect::kDeepSpeed: r.framework = "a DeepSpeed config alone"; r.accelerate.reset(); break;
    case Dialect::kFlat: r.framework = "a flat config"; r.accelerate.reset(); break;
    case Dialect::kKeyMap: r.framework = "a config read with --keys"; r.accelerate.reset(); break;
    case Dialect::kInferred: r.framework = "a config no framework claims"; r.accelerate.reset(); break;
  }
  return r;
}

bool looks_like_deepspeed(const YamlNode& root) {
  return root.is_map() && (root.get("train_micro_batch_size_per_gpu") != nullptr ||
                           root.get("zero_optimization") != nullptr ||
                           (root.get("train_batch_size") != nullptr && root.get("gradient_accumulation_steps") != nullptr));
}

Result<Detection> detect_dialect(const YamlNode& root, const std::string& label) {
  struct Score {
    Dialect dialect;
    int score = 0;
    std::vector<std::string> evidence;
  };
  std::vector<Score> scores;
  const auto add = [&scores](Dialect d, int weight, std::string evidence) {
    auto it = std::find_if(scores.begin(), scores.end(), [&](const Score& x) { return x.dialect == d; });
    if (it == scores.end()) it = scores.insert(scores.end(), Score{d, 0, {}});
    it->score += weight;
    it->evidence.push_back(std::move(evidence));
  };
  for (const auto& s : kSignals)
    if (root.at(split_key_path(s.path)) != nullptr) add(s.dialect, s.weight, std::string(s.path));
  // A `trainer:` section is Lightning's only when it holds Lightning Trainer arguments: verl,
  // NeMo-RL and in-house trainers name a section `trainer` too.
  if (const YamlNode* t = root.get("trainer"); t != nullptr && t->is_map()) {
    static constexpr std::string_view kLightningOwn[] = {
        "accelerator", "accumulate_grad_batches", "strategy", "check_val_every_n_epoch", "val_check_interval",
        "gradient_clip_val", "num_sanity_val_steps", "limit_train_batches", "limit_val_batches", "max_epochs",
        "devices", "enable_checkpointing", "log_every_n_steps", "precision", "default_root_dir", "callbacks"};
    int own = 0;
    for (const auto& e : t->entries)
      if (std::find(std::begin(kLightningOwn), std::end(kLightningOwn), e.key.value) != std::end(kLightningOwn)) ++own;
    if (own >= 2) add(Dialect::kLightning, 3, "trainer (" + std::to_string(own) + " Lightning Trainer arguments)");
  }
  // nomic-ai/contrastors (train_args / model_args / data_args, checked by its pydantic Config):
  // its own NomicBERT, BERT and decoders with FlashAttention on unpadded batches and fused
  // kernels, none of which is a Hugging Face checkpoint memplan models. Estimating transformers'
  // eager NomicBERT instead would count (b, heads, s, s) scores contrastors never allocates.
  if (const YamlNode* ma = root.at(split_key_path("model_args.model_type")); ma != nullptr &&
                                                                             root.get("train_args") != nullptr) {
    Error e = make_error(
        ErrorCode::kUnsupported,
        fmt::format("a nomic-ai/contrastors config (train_args, model_args.model_type: {}): contrastors trains its own "
                    "models with FlashAttention on unpadded batches and fused kernels, which memplan does not model",
                    ma->is_scalar() ? ma->value : std::string("?")),
        "memplan models Hugging Face checkpoints: --model nomic-ai/nomic-embed-text-v1.5 --texts-per-example N "
        "estimates transformers' NomicBERT (eager attention: more memory than contrastors uses)");
    e.where = SourceLocation{label, ma->line, ma->column};
    return e;
  }
  // Composer's model builders name themselves: `model.name: hf_bert` is a Composer recipe even
  // where the batch keys are left to the script (ModernBERT's glue.py configs).
  if (const YamlNode* n = root.at(split_key_path("model.name")); n != nullptr && n->is_scalar()) {
    static constexpr std::string_view kBuilders[] = {"hf_bert", "mosaic_bert", "flex_bert", "hf_causal_lm",
                                                     "mpt_causal_lm", "hf_t5"};
    const std::string v = to_lower(n->value);
    if (std::find(std::begin(kBuilders), std::end(kBuilders), v) != std::end(kBuilders))
      add(Dialect::kLlmFoundry, 5, "model.name: " + v);
  }
  std::stable_sort(scores.begin(), scores.end(), [](const Score& a, const Score& b) { return a.score > b.score; });
  if (scores.empty() || scores[0].score < kMinScore) {
    // No dialect claims the file: it is read by meaning (frameworks/inferred.cpp).
    Detection d{Dialect::kInferred, {}};
    for (const auto& s : scores)
      for (const auto& e : s.evidence) d.evidence.push_back(fmt::format("{} ({})", e, to_string(s.dialect)));
    return d;
  }
  if (scores.size() > 1 && scores[1].score == scores[0].score) {
    Error e = make_error(ErrorCode::kInvalidConfig,
                         fmt::format("the keys fit both {} ({}) and {} ({})", to_string(scores[0].dialect),
                                     fmt::join(scores[0].evidence, ", "), to_string(scores[1].dialect),
                                     fmt::join(scores[1].evidence, ", ")),
                         "name the dialect with --dialect");
    e.where = SourceLocation{label, 0, 0};
    return e;
  }
  return Detection{scores[0].dialect, scores[0].evidence};
}

void note_other_framework(Mapper& m, Dialect chosen) {
  struct Other {
    int score = 0;
    std::vector<std::string> keys;
  };
  std::vector<std::pair<Dialect, Other>> others;
  for (const auto& s : kSignals) {
    if (s.dialect == chosen || s.weight < 2) continue;
    const std::string path(s.path);
    if (m.asked(path) || m.root().at(split_key_path(path)) == nullptr) continue;
    auto it = std::find_if(others.begin(), others.end(), [&](const auto& o) { return o.first == s.dialect; });
    if (it == others.end()) it = others.insert(others.end(), {s.dialect, Other{}});
    it->second.score += s.weight;
    it->second.keys.push_back(path);
  }
  const auto best = std::max_element(others.begin(), others.end(),
                                     [](const auto& a, const auto& b) { return a.second.score < b.second.score; });
  if (best == others.end() || best->second.score < 5) return;
  m.warn_file(0, fmt::format("read as {}, but {} are {}'s keys, which the {} reading leaves out: the file looks like a "
                             "{} config (name it with --dialect {} if it is one)",
                             to_string(chosen), fmt::join(best->second.keys, ", "), to_string(best->first),
                             to_string(chosen), to_string(best->first), to_string(best->first)));
}

// ---- Mapper ----

std::string Mapper::file_of(const YamlNode& n) const {
  const std::size_t i = static_cast<std::size_t>(n.source);
  return i < out_.files.size() ? out_.files[i].path : std::string();
}

SourceLocation Mapper::where(const YamlNode& n) const { return SourceLocation{file_of(n), n.line, n.column}; }

std::string Mapper::where_text(const YamlNode& n) const { return where(n).to_string(); }

Error Mapper::error_at(const YamlNode& n, ErrorCode code, std::string message, std::string suggestion) const {
  Error e = make_error(code, std::move(message), std::move(suggestion));
  e.where = where(n);
  return e;
}

void Mapper::warn_at(const YamlNode& n, std::string message, std::string suggestion) {
  Error w = make_error(ErrorCode::kInvalidConfig, std::move(message), std::move(suggestion));
  w.where = where(n);
  out_.inputs.warnings.push_back(w.to_string());
  out_.diagnostics.push_back(std::move(w));
}

void Mapper::set_loss_kernel(const YamlNode& n, std::string_view key, LossKernel kernel, bool liger_kernels) {
  TrainingConfig& c = config();
  c.loss_kernel = kernel;
  from_file("loss_kernel", n, key);
  if (liger_kernels) {
    c.liger_kernels = true;
    from_file("liger_kernels", n, key);
  }
}

void Mapper::warn_file(std::size_t file, std::string message) {
  Error w = make_error(ErrorCode::kInvalidConfig, std::move(message));
  if (file < out_.files.size()) w.where = SourceLocation{out_.files[file].path, 0, 0};
  out_.inputs.warnings.push_back(w.to_string());
  out_.diagnostics.push_back(std::move(w));
}

void Mapper::contradiction(const YamlNode& used, std::string_view used_key, const YamlNode& ignored,
                           std::string_view ignored_key) {
  warn_at(ignored,
          fmt::format("{} = {} contradicts {} = {} ({}); memplan uses {}", ignored_key,
                      ignored.is_scalar() ? ignored.value : "...", used_key, used.is_scalar() ? used.value : "...",
                      where_text(used), used_key));
}

const YamlNode* Mapper::node(std::string_view path) {
  asked_.insert(std::string(path));
  return root_.at(split_key_path(path));
}

const YamlNode* Mapper::first_of(std::initializer_list<std::string_view> paths, std::string* which) {
  const YamlNode* found = nullptr;
  for (auto p : paths) {
    const YamlNode* n = node(p);
    if (n != nullptr && found == nullptr) {
      found = n;
      if (which != nullptr) *which = std::string(p);
    }
  }
  return found;
}

Error Mapper::bad_value(const YamlNode& n, std::string_view path, std::string_view expected) const {
  const std::string key(split_key_path(path).back());
  if (n.is_scalar()) {
    // PyYAML (YAML 1.1), which the trainers parse with, reads 500_000 as 500000.
    std::string digits;
    for (char ch : n.value)
      if (ch != '_') digits += ch;
    std::string suggestion;
    if (digits != n.value && parse_int(digits, "").has_value())
      suggestion = fmt::format("the trainer reads it as {} (YAML 1.1 digit separators); write {} for memplan", digits,
                               digits);
    return error_at(n, ErrorCode::kInvalidConfig, fmt::format("{} must be {}, got \"{}\"", key, expected, n.value),
                    suggestion);
  }
  return error_at(n, ErrorCode::kInvalidConfig,
                  fmt::format("{} must be {}, got a {}", key, expected, n.is_map() ? "mapping" : "list"));
}

namespace {

bool is_json_path(std::string_view path) {
  return path.size() >= 5 && to_lower(path.substr(path.size() - 5)) == ".json";
}

// Why a scalar is not the number it may look like, for messages: "; PyYAML reads 08 as the string '08'...".
std::string not_a_number_note(const ScalarNumber& r, const YamlNode& n) {
  if (r.kind != ScalarNumber::Kind::kOther || n.style != ScalarStyle::kPlain || r.yaml12_differs.empty()) return {};
  return fmt::format(" (YAML 1.1, which PyYAML and so the trainer use, reads it as the string '{}'; {})", n.value,
                     r.yaml12_differs);
}

}  // namespace

ScalarNumber Mapper::scalar_number(const YamlNode& n) {
  if (!n.is_scalar()) return ScalarNumber{};
  if (n.style != ScalarStyle::kPlain) return convert_quoted(n.value);
  const NumberGrammar grammar = is_json_path(file_of(n)) ? NumberGrammar::kJson : NumberGrammar::kYaml11;
  ScalarNumber r = resolve_number(n.value, grammar);
  if (r.kind != ScalarNumber::Kind::kOther && !r.yaml12_differs.empty()) {
    std::string in11 = r.kind == ScalarNumber::Kind::kInt ? std::to_string(r.integer) : fmt::format("{:g}", r.real);
    warn_at(n,
            fmt::format("'{}' is read as {} (YAML 1.1, as PyYAML and so the trainer read it); {}", n.value, in11,
                        r.yaml12_differs),
            fmt::format("write {} to say the same thing in every YAML version", in11));
  }
  return r;
}

Result<std::optional<std::int64_t>> Mapper::integer(std::string_view path, std::int64_t min) {
  const YamlNode* n = node(path);
  if (n == nullptr || n->is_null()) return std::optional<std::int64_t>{};
  if (!n->is_scalar()) return bad_value(*n, path, "an integer");
  const ScalarNumber r = scalar_number(*n);
  const std::string key(split_key_path(path).back());
  if (r.kind != ScalarNumber::Kind::kInt)
    return error_at(*n, ErrorCode::kInvalidConfig,
                    fmt::format("{} must be an integer, got \"{}\"{}", key, n->value, not_a_number_note(r, *n)));
  if (r.out_of_range)
    return error_at(*n, ErrorCode::kInvalidConfig,
                    fmt::format("{} = {} is out of range (-2^63 to 2^63-1)", key, n->value));
  if (r.integer < min)
    return error_at(*n, ErrorCode::kInvalidConfig, fmt::format("{} = {} is out of range (>= {})", key, r.integer, min));
  return std::optional<std::int64_t>(r.integer);
}

Result<std::optional<bool>> Mapper::boolean(std::string_view path) {
  const YamlNode* n = node(path);
  if (n == nullptr || n->is_null()) return std::optional<bool>{};
  if (!n->is_scalar()) return bad_value(*n, path, "true or false");
  auto v = parse_bool(n->value, "");
  if (!v) return bad_value(*n, path, "true or false");
  return std::optional<bool>(*v);
}

Result<std::optional<double>> Mapper::number(std::string_view path) {
  const YamlNode* n = node(path);
  if (n == nullptr || n->is_null()) return std::optional<double>{};
  if (!n->is_scalar()) return bad_value(*n, path, "a number");
  ScalarNumber r = scalar_number(*n);
  const std::string key(split_key_path(path).back());
  if (r.kind == ScalarNumber::Kind::kOther && n->style == ScalarStyle::kPlain) {
    // `1e-5`: a string to PyYAML (YAML 1.1 floats need a dot), a float to trainers that pass
    // strings through float() (TRL's argument parser); accepted, with a warning.
    ScalarNumber as_text = convert_quoted(n->value);
    if (as_text.kind != ScalarNumber::Kind::kOther) {
      warn_at(*n,
              fmt::format("{}: PyYAML reads '{}' as a string (YAML 1.1 floats need a dot and a signed exponent); "
                          "trainers that convert strings read {:g}, others fail",
                          key, n->value, as_text.real),
              fmt::format("write {} as {:e}", key, as_text.real));
      r = as_text;
    }
  }
  if (r.kind == ScalarNumber::Kind::kOther)
    return error_at(*n, ErrorCode::kInvalidConfig,
                    fmt::format("{} must be a number, got \"{}\"{}", key, n->value, not_a_number_note(r, *n)));
  // NaN and infinities pass through: io::check_inputs refuses them with the same message and
  // range whether they come from here or from a flag.
  return std::optional<double>(r.real);
}

Result<std::optional<std::string>> Mapper::text(std::string_view path) {
  const YamlNode* n = node(path);
  if (n == nullptr || n->is_null()) return std::optional<std::string>{};
  if (!n->is_scalar()) return bad_value(*n, path, "a single value");
  return std::optional<std::string>(n->value);
}

Result<std::optional<std::vector<std::string>>> Mapper::list(std::string_view path) {
  const YamlNode* n = node(path);
  if (n == nullptr || n->is_null()) return std::optional<std::vector<std::string>>{};
  std::vector<std::string> out;
  if (n->is_scalar()) {
    std::size_t start = 0;
    const std::string& v = n->value;
    while (start <= v.size()) {
      const std::size_t comma = v.find(',', start);
      const std::string item = trim(v.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (!item.empty()) out.push_back(item);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return std::optional<std::vector<std::string>>(out);
  }
  if (n->kind != YamlKind::kSeq) return bad_value(*n, path, "a list");
  for (const auto& i : n->items) {
    if (!i.is_scalar()) return bad_value(i, path, "a list of names");
    out.push_back(i.value);
  }
  return std::optional<std::vector<std::string>>(out);
}

Result<bool> Mapper::read(std::string_view path, const std::string& input, std::int64_t& field, std::int64_t min) {
  MEMPLAN_TRY(auto v, integer(path, min));
  if (!v) return false;
  field = *v;
  from_file(input, *root_.at(split_key_path(path)), path);
  return true;
}

Status Mapper::read_or(std::string_view path, const std::string& input, std::int64_t& field, std::int64_t fallback,
                       std::string note) {
  MEMPLAN_TRY(bool present, read(path, input, field));
  if (!present) {
    field = fallback;
    from_default(input, std::move(note));
  }
  return Ok{};
}

Result<bool> Mapper::read(std::string_view path, const std::string& input, int& field, int min) {
  MEMPLAN_TRY(auto v, integer(path, min));
  if (!v) return false;
  if (*v > 1'000'000) return error_at(*root_.at(split_key_path(path)), ErrorCode::kInvalidConfig,
                                      fmt::format("{} = {} is out of range", split_key_path(path).back(), *v));
  field = static_cast<int>(*v);
  from_file(input, *root_.at(split_key_path(path)), path);
  return true;
}

Result<bool> Mapper::read_degree(std::string_view path, const std::string& input, int& field, std::int64_t min) {
  MEMPLAN_TRY(auto v, integer(path, min));
  if (!v || (min == -1 && *v == -1)) return false;
  const YamlNode& n = *root_.at(split_key_path(path));
  if (*v < 1 || *v > 65536)
    return error_at(n, ErrorCode::kInvalidArgument, fmt::format("{} = {} is out of range (1 to 65536)", path, *v));
  field = static_cast<int>(*v);
  from_file(input, n, path);
  return true;
}

Result<bool> Mapper::read(std::string_view path, const std::string& input, bool& field) {
  MEMPLAN_TRY(auto v, boolean(path));
  if (!v) return false;
  field = *v;
  from_file(input, *root_.at(split_key_path(path)), path);
  return true;
}

Result<bool> Mapper::read(std::string_view path, const std::string& input, double& field) {
  MEMPLAN_TRY(auto v, number(path));
  if (!v) return false;
  field = *v;
  from_file(input, *root_.at(split_key_path(path)), path);
  return true;
}

Result<bool> Mapper::read_dtype(std::string_view path, const std::string& input, DType& field) {
  MEMPLAN_TRY(auto v, text(path));
  if (!v) return false;
  const YamlNode& n = *root_.at(split_key_path(path));
  if (to_lower(*v) == "auto") {
    out_.inputs.torch_dtype_from_model = true;
    from_file(input, n, path);
    return true;
  }
  auto d = parse_dtype(*v);
  if (!d) return error_at(n, d.error().code, d.error().message, d.error().suggestion);
  field = *d;
  from_file(input, n, path);
  return true;
}

namespace {

struct OptimEstimate {
  const char* name;
  OptimizerKind as;
  const char* why;
};

// transformers OptimizerNames (training_args.py, 4.45-4.57) and axolotl's extra names that the
// engine has no exact model for: the nearest modelled optimizer and how the estimate differs.
constexpr OptimEstimate kOptimEstimates[] = {
    {"adamw_torch_xla", OptimizerKind::kAdamWTorchFused, "two fp32 states, like the fused kernel"},
    {"adamw_torch_npu_fused", OptimizerKind::kAdamWTorchFused, "two fp32 states, like the fused kernel"},
    {"adamw_apex_fused", OptimizerKind::kAdamWTorchFused, "two fp32 states, like the fused kernel"},
    {"adamw_anyprecision", OptimizerKind::kAdamWTorch, "states in fp32; bf16 states would need half"},
    {"ao_adamw_fp8", OptimizerKind::kAdamWTorchao8bit, "torchao fp8 states: one byte per value and a scale per 256, as its 8-bit ones"},
    {"ademamix", OptimizerKind::kAdamWTorch, "AdEMAMix keeps a third state (a slow EMA): an underestimate"},
    {"ademamix_8bit", OptimizerKind::kAdamW8bit, "AdEMAMix keeps a third 8-bit state: an underestimate"},
    {"paged_ademamix_8bit", OptimizerKind::kPagedAdamW8bit, "AdEMAMix keeps a third 8-bit state"},
    {"paged_ademamix_32bit", OptimizerKind::kPagedAdamW32bit, "AdEMAMix keeps a third fp32 state"},
    {"paged_lion_8bit", OptimizerKind::kLion8bit, "the same one 8-bit state, paged"},
    {"paged_lion_32bit", OptimizerKind::kLion32bit, "the same one fp32 state, paged"},
    {"rmsprop_bnb", OptimizerKind::kRmsprop, "bitsandbytes RMSprop, one fp32 state"},
    {"rmsprop_bnb_32bit", OptimizerKind::kRmsprop, "bitsandbytes RMSprop, one fp32 state"},
    {"rmsprop_bnb_8bit", OptimizerKind::kRmsprop, "an 8-bit state counted as fp32: an overestimate"},
    {"galore_adamw", OptimizerKind::kAdamWTorch, "GaLore keeps low-rank states for its target modules: an overestimate"},
    {"galore_adamw_8bit", OptimizerKind::kAdamW8bit, "GaLore keeps low-rank states: an overestimate"},
    {"galore_adafactor", OptimizerKind::kAdafactor, "GaLore keeps low-rank states: an overestimate"},
    {"galore_adamw_layerwise", OptimizerKind::kAdamWTorch,
     "layer-wise GaLore steps each layer in backward and keeps low-rank states: an overestimate"},
    {"galore_adamw_8bit_layerwise", OptimizerKind::kAdamW8bit, "layer-wise GaLore: an overestimate"},
    {"galore_adafactor_layerwise", OptimizerKind::kAdafactor, "layer-wise GaLore: an overestimate"},
    {"apollo_adamw", OptimizerKind::kAdamWTorch, "APOLLO keeps low-rank states: an overestimate"},
    {"apollo_adamw_layerwise", OptimizerKind::kAdamWTorch, "APOLLO keeps low-rank states: an overestimate"},
    {"lomo", OptimizerKind::kSgd, "LOMO fuses the update into backward: no state, and no full gradient kept"},
    {"adalomo", OptimizerKind::kSgd, "AdaLomo fuses the update into backward and keeps factored states"},
    {"grokadamw", OptimizerKind::kAdamWTorch, "GrokAdamW keeps a gradient EMA as well: an underestimate"},
    {"schedule_free_adamw", OptimizerKind::kAdamWTorch, "schedule-free AdamW keeps z and the second moment"},
    {"schedule_free_radam", OptimizerKind::kAdamWTorch, "schedule-free RAdam keeps z and the second moment"},
    {"schedule_free_sgd", OptimizerKind::kSgd, "schedule-free SGD keeps one state (z): an underestimate"},
    {"stable_adamw", OptimizerKind::kAdamWTorch, "two fp32 states"},
    {"adopt_adamw", OptimizerKind::kAdamWTorch, "two fp32 states"},
    {"optimi_adamw", OptimizerKind::kAdamWTorch, "two states"},
    {"came_pytorch", OptimizerKind::kAdafactor, "CAME keeps factored states like Adafactor, plus a confidence term"},
    {"muon", OptimizerKind::kAdamWTorch, "Muon keeps one momentum for matrices (AdamW for the rest): an overestimate"},
    {"dion", OptimizerKind::kAdamWTorch, "Dion keeps low-rank momentum: an overestimate"},
    {"adamw_sapiens_8bit", OptimizerKind::kAdamW8bit, "8-bit states"},
};

}  // namespace

std::optional<OptimizerEstimate> estimate_optimizer(const std::string& name) {
  const std::string n = to_lower(trim(name));
  for (const auto& x : kOptimEstimates)
    if (n == x.name)
      return OptimizerEstimate{x.as, fmt::format("optimizer '{}' is not modelled; estimated as {} ({})", name,
                                                 to_string(x.as), x.why)};
  return std::nullopt;
}

Result<bool> Mapper::read_fsdp_version(std::string_view path) {
  MEMPLAN_TRY(auto v, integer(path, 1));
  if (!v) return false;
  const YamlNode& n = *root_.at(split_key_path(path));
  if (*v != 1 && *v != 2)
    return error_at(n, ErrorCode::kInvalidArgument, fmt::format("{} must be 1 or 2, got {}", path, *v));
  config().parallel.fsdp_version = static_cast<int>(*v);
  from_file("fsdp_version", n, path);
  return true;
}

Result<bool> Mapper::read_optimizer(std::string_view path, const std::string& input, OptimizerKind& field) {
  MEMPLAN_TRY(auto v, text(path));
  if (!v) return false;
  const YamlNode& n = *root_.at(split_key_path(path));
  auto o = parse_optimizer(*v);
  if (!o) {
    // Every optimizer the trainers accept is accepted; one the engine has no model for is
    // estimated as the nearest one, and the output says so.
    const std::string name = to_lower(trim(*v));
    if (auto e = estimate_optimizer(name)) {
      field = e->kind;
      warn_at(n, e->note);
    } else {
      field = OptimizerKind::kAdamWTorch;
      std::vector<std::string> known;
      for (const auto& x : kOptimEstimates) known.emplace_back(x.name);
      for (const char* k : {"adamw_torch", "adamw_torch_fused", "adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit",
                            "paged_adamw_32bit", "adafactor", "sgd", "adagrad", "rmsprop", "lion_8bit", "lion_32bit"})
        known.emplace_back(k);
      const std::string close = did_you_mean(name, known);
      warn_at(n, fmt::format("unknown optimizer '{}'; estimated as adamw_torch (two fp32 states)", *v),
              close.empty() ? o.error().suggestion : close);
    }
    from_file(input, n, path);
    return true;
  }
  field = *o;
  from_file(input, n, path);
  return true;
}

Result<bool> Mapper::read_model(std::string_view path) {
  MEMPLAN_TRY(auto v, text(path));
  if (!v || trim(*v).empty()) return false;
  out_.inputs.model_name = trim(*v);
  from_file("model", *root_.at(split_key_path(path)), path);
  return true;
}

Status read_contrastive(Mapper& m, std::string_view section) {
  struct Count {
    const YamlNode* node = nullptr;
    std::string key;
    std::int64_t value = 0;
  };
  // The top level, the batch's section, and the packages of files a Hydra defaults list composed
  // (a curriculum stage chosen as `text_curriculum: 01_stage` sits at text_curriculum.*).
  std::vector<std::string> prefixes{std::string()};
  if (!section.empty()) prefixes.push_back(std::string(section) + ".");
  for (auto it = m.out().files.rbegin(); it != m.out().files.rend(); ++it)
    if (!it->package.empty()) {
      const std::string p = join_key_path(it->package) + ".";
      if (std::find(prefixes.begin(), prefixes.end(), p) == prefixes.end()) prefixes.push_back(p);
    }
  auto find = [&](std::initializer_list<const char*> names) -> Result<Count> {
    for (const std::string& prefix : prefixes)
      for (const char* name : names) {
        const std::string key = prefix + name;
        if (m.node(key) == nullptr || m.node(key)->is_null()) continue;
        MEMPLAN_TRY(auto v, m.integer(key, 0));
        return Count{m.node(key), key, v.value_or(0)};
      }
    return Count{};
  };
  MEMPLAN_TRY(const Count pos, find({"n_positives", "num_positives"}));
  MEMPLAN_TRY(const Count neg, find({"n_negatives", "num_negatives", "num_hard_negatives", "neg_nums"}));
  if (pos.node == nullptr && neg.node == nullptr) return Ok{};
  // An anchor with one positive when only the negatives are written (MNRL's (anchor, positive,
  // negatives...) columns).
  const std::int64_t positives = pos.node != nullptr ? pos.value : 1;
  const std::int64_t texts = 1 + positives + neg.value;
  const YamlNode& at = neg.node != nullptr ? *neg.node : *pos.node;
  if (texts < 2 || texts > (1 << 20))
    return m.error_at(at, ErrorCode::kInvalidConfig,
                      fmt::format("1 + {} positives + {} negatives = {} texts per anchor: contrastive training needs "
                                  "2 to 1048576",
                                  positives, neg.value, texts));
  m.config().contrastive.texts_per_example = static_cast<int>(texts);
  m.from_file("texts_per_example", at,
              fmt::format("1 + {} + {}", pos.node != nullptr ? pos.key : std::string("1 positive"),
                          neg.node != nullptr ? neg.key : std::string("0 negatives")));
  return Ok{};
}

void Mapper::from_file(const std::string& input, const YamlNode& n, std::string_view key) {
  out_.inputs.set_origin(input, Origin{OriginKind::kFile, where(n), std::string(key)});
}

void Mapper::from_default(const std::string& input, std::string note) {
  out_.inputs.set_origin(input, Origin{OriginKind::kDefault, {}, std::move(note)});
}

void Mapper::derived(const std::string& input, std::string note) {
  out_.inputs.set_origin(input, Origin{OriginKind::kDerived, {}, std::move(note)});
}

namespace {

// The entry (key and value) at a path of a merged tree, or nullptr.
const YamlEntry* entry_at(const YamlNode& root, const std::vector<std::string>& path) {
  const YamlNode* n = &root;
  const YamlEntry* found = nullptr;
  for (const auto& k : path) {
    if (!n->is_map()) return nullptr;
    found = nullptr;
    for (const auto& e : n->entries)
      if (e.key.is_scalar() && e.key.value == k) found = &e;
    if (found == nullptr) return nullptr;
    n = &found->value;
  }
  return found;
}

}  // namespace

void Mapper::site(Knob knob, std::string_view path, std::string insert_after, std::string no_insert_reason) {
  asked_.insert(std::string(path));
  ValueSite s;
  s.knob = knob;
  s.path = split_key_path(path);
  if (const YamlEntry* e = entry_at(root_, s.path)) {
    s.present = true;
    s.file = static_cast<std::size_t>(e->value.source);
    s.line = e->key.line;
    if (e->value.is_scalar()) {
      const ScalarNumber v = e->value.style == ScalarStyle::kPlain
                                 ? resolve_number(e->value.value, is_json_path(file_of(e->value))
                                                                      ? NumberGrammar::kJson
                                                                      : NumberGrammar::kYaml11)
                                 : convert_quoted(e->value.value);
      if (v.kind == ScalarNumber::Kind::kInt && !v.out_of_range) s.value = v.integer;
    }
  } else {
    std::vector<std::string> parent(s.path.begin(), s.path.end() - 1);
    const YamlNode* p = root_.at(parent);
    s.insert_after = std::move(insert_after);
    s.no_insert_reason = std::move(no_insert_reason);
    if (p == nullptr || !p->is_map()) {
      if (s.no_insert_reason.empty())
        s.no_insert_reason = fmt::format("there is no mapping '{}' to add it to", join_key_path(parent));
    } else {
      s.file = static_cast<std::size_t>(p->source);
    }
  }
  // A file composed at a Hydra package holds the path without the package.
  if (s.file < out_.files.size()) {
    const auto& pkg = out_.files[s.file].package;
    if (!pkg.empty() && s.path.size() > pkg.size() && std::equal(pkg.begin(), pkg.end(), s.path.begin()))
      s.path.erase(s.path.begin(), s.path.begin() + static_cast<std::ptrdiff_t>(pkg.size()));
  }
  out_.sites.push_back(std::move(s));
}

void Mapper::mirror_site(Knob knob, std::string_view path, std::int64_t world_size) {
  ValueSite s;
  s.knob = knob;
  s.path = split_key_path(path);
  s.mirror = true;
  s.world_size = world_size;
  const YamlEntry* e = entry_at(root_, s.path);
  if (e == nullptr || !e->value.is_scalar()) return;
  const ScalarNumber v = e->value.style == ScalarStyle::kPlain
                             ? resolve_number(e->value.value,
                                              is_json_path(file_of(e->value)) ? NumberGrammar::kJson : NumberGrammar::kYaml11)
                             : convert_quoted(e->value.value);
  if (v.kind != ScalarNumber::Kind::kInt || v.out_of_range) return;  // "auto": follows the other config
  s.present = true;
  s.value = v.integer;
  s.file = static_cast<std::size_t>(e->value.source);
  s.line = e->key.line;
  out_.sites.push_back(std::move(s));
}

namespace {

// The key a typo was meant to be. Closer than names in general (closest_match): an edit distance
// of at most a quarter of the length, or a third when both share their first four characters
// (`lora_rnak` -> `lora_r`), so that a different key with a common suffix (`model_config`,
// `fsdp_config`) is not offered.
std::optional<std::string> near_key(const std::string& k, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  std::size_t best_d = static_cast<std::size_t>(-1);
  for (const auto& c : candidates) {
    const bool same_start = k.size() >= 4 && c.size() >= 4 && k.compare(0, 4, c, 0, 4) == 0;
    const std::size_t limit = std::max<std::size_t>(2, k.size() / (same_start ? 3 : 4));
    const std::size_t d = edit_distance(k, c);
    if (d <= limit && d < best_d && plausible_typo(k, c, d)) best_d = d, best = c;
  }
  return best;
}

}  // namespace

void Mapper::check_unknown(std::string_view ns, const std::vector<std::string>& known, bool strict) {
  const YamlNode* map = ns.empty() ? &root_ : root_.at(split_key_path(ns));
  if (map == nullptr || !map->is_map()) return;
  const std::string prefix = ns.empty() ? "" : std::string(ns) + ".";
  std::vector<std::string> candidates;
  for (const auto& a : asked_) {
    if (a.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = a.substr(prefix.size());
    candidates.push_back(rest.substr(0, rest.find('.')));
  }
  const std::vector<std::string> read_here = candidates;
  if (strict) candidates.insert(candidates.end(), known.begin(), known.end());
  const std::set<std::string> read_set(read_here.begin(), read_here.end());
  const std::set<std::string> known_set(known.begin(), known.end());
  // Near-match suggestions cost an edit distance per candidate; a mapping with thousands of
  // unknown keys is not a config with a typo, and must not take seconds (issue 11 item 9).
  constexpr int kMaxChecked = 1000;
  int checked = 0, unchecked = 0;
  for (const auto& e : map->entries) {
    if (!e.key.is_scalar() || e.key.alias_line > 0) continue;
    const std::string& k = e.key.value;
    if (read_set.count(k) != 0 || known_set.count(k) != 0) continue;
    if (++checked > kMaxChecked) {
      ++unchecked;
      continue;
    }
    const std::string shown = prefix + k;
    // A near-miss of a key memplan reads is the typo that would silently leave a default.
    const std::optional<std::string> best = near_key(k, strict ? candidates : read_here);
    if (best) {
      warn_at(e.key, fmt::format("unknown key '{}'", shown), fmt::format("did you mean '{}{}'?", prefix, *best));
    } else if (strict) {
      warn_at(e.key, fmt::format("unknown key '{}' (ignored)", shown));
    }
  }
  if (unchecked > 0)
    warn_at(*map, fmt::format("{} more keys {}that memplan does not read were not checked for typos", unchecked,
                              ns.empty() ? "" : "under '" + std::string(ns) + "' "));
}

// ---- shared helpers ----

// flash_attention_3, flex_attention and kernels-hub flash kernels keep no (b, h, s, s) score
// matrix and save one log-sum-exp per row, as flash_attention_2 does
// (docs/configs.md#attention-implementations).
Result<bool> Mapper::read_attn_impl(std::string_view path) {
  MEMPLAN_TRY(auto v, text(path));
  if (!v) return false;
  const YamlNode& n = *root_.at(split_key_path(path));
  const std::string s = to_lower(trim(*v));
  auto a = parse_attn_impl(s);
  if (a) {
    config().attn = *a;
    from_file("attn_implementation", n, path);
    return true;
  }
  const bool hub = s.find('/') != std::string::npos;
  const bool flash_like = s == "flash_attention_3" || s == "flex_attention" || s == "sdpa_paged" ||
                          s == "paged_attention" || s == "flash_paged" ||
                          (hub && (s.find("flash") != std::string::npos || s.find("attn") != std::string::npos ||
                                   s.find("attention") != std::string::npos));
  if (!flash_like) return error_at(n, a.error().code, a.error().message, a.error().suggestion);
  config().attn = AttnImpl::kFlashAttention2;
  from_file("attn_implementation", n, path);
  warn_at(n, fmt::format("attn_implementation '{}' is estimated as flash_attention_2: {} keeps no score matrix and "
                         "saves one log-sum-exp per row, as flash_attention_2 does",
                         *v, hub ? "a kernels-hub attention kernel" : s));
  return true;
}

void note_packing(Mapper& m, std::string_view key) {
  const YamlNode* n = m.node(key);
  if (n == nullptr || !n->is_scalar()) return;
  auto on = parse_bool(n->value, "");
  if (!on || !*on) return;
  m.warn_at(*n, fmt::format("{}: memplan plans every sequence at the full sequence length, which a packed or "
                            "padding-free batch fills; the estimate holds (a padded batch of shorter texts uses less)",
                            key));
}

namespace {

// PEFT takes a string target_modules as a regular expression matched (re.fullmatch) against each
// module's full name. The module names of the architectures memplan models, as transformers
// names them, matched here so that a regex becomes the list of modules it selects.
std::vector<std::string> regex_targets(const std::string& pattern) {
  static const char* const kModules[] = {
      "model.layers.0.self_attn.q_proj",      "model.layers.0.self_attn.k_proj",
      "model.layers.0.self_attn.v_proj",      "model.layers.0.self_attn.o_proj",
      "model.layers.0.self_attn.qkv_proj",    "model.layers.0.mlp.gate_proj",
      "model.layers.0.mlp.up_proj",           "model.layers.0.mlp.down_proj",
      "model.layers.0.mlp.gate_up_proj",      "model.language_model.layers.0.self_attn.q_proj",
      "model.language_model.layers.0.self_attn.k_proj", "model.language_model.layers.0.self_attn.v_proj",
      "model.language_model.layers.0.self_attn.o_proj", "model.language_model.layers.0.mlp.gate_proj",
      "model.language_model.layers.0.mlp.up_proj",      "model.language_model.layers.0.mlp.down_proj",
      "transformer.h.0.attn.c_attn",          "transformer.h.0.attn.c_proj",
      "transformer.h.0.mlp.c_fc",             "transformer.h.0.mlp.c_proj",
      "model.layers.0.block_sparse_moe.experts.0.w1", "model.layers.0.block_sparse_moe.experts.0.w2",
      "model.layers.0.block_sparse_moe.experts.0.w3", "lm_head", "model.embed_tokens"};
  std::vector<std::string> out;
  try {
    const std::regex re(pattern, std::regex::ECMAScript);
    for (const char* name : kModules) {
      if (!std::regex_match(name, re)) continue;
      std::string leaf(name);
      leaf = leaf.substr(leaf.rfind('.') + 1);
      if (std::find(out.begin(), out.end(), leaf) == out.end()) out.push_back(leaf);
    }
  } catch (const std::regex_error&) {
    return {};
  }
  return out;
}

bool looks_like_regex(const std::string& s) {
  return s.find_first_of("*()|[]\\^$?+") != std::string::npos;
}

}  // namespace

void set_lora_targets(TrainingConfig& c, const std::vector<std::string>& targets) {
  const bool all = targets.size() == 1 && (to_lower(targets[0]) == "all-linear" || to_lower(targets[0]) == "all");
  c.lora.all_linear = all;
  c.lora.target_modules = all ? std::vector<std::string>{} : targets;
  // One string that is a regular expression (PEFT: re.fullmatch on the full module name).
  if (!all && targets.size() == 1 && looks_like_regex(targets[0])) {
    std::vector<std::string> matched = regex_targets(targets[0]);
    if (!matched.empty()) c.lora.target_modules = matched;
  }
}

Status read_recompute_granularity(Mapper& m) {
  MEMPLAN_TRY(auto rc, m.text("recompute_granularity"));
  if (!rc) return Ok{};
  const std::string g = to_lower(*rc);
  m.config().gradient_checkpointing = g == "full" || g == "selective";
  m.from_file("gradient_checkpointing", *m.node("recompute_granularity"), "recompute_granularity");
  if (g == "selective")
    m.warn_at(*m.node("recompute_granularity"),
              "recompute_granularity: selective recomputes attention only; memplan estimates full recomputation "
              "(an underestimate)");
  return Ok{};
}

Status apply_lightning_precision(Mapper& m, std::string_view path) {
  MEMPLAN_TRY(auto p, m.text(path));
  if (!p) return Ok{};
  const YamlNode& n = *m.node(path);
  const std::string v = to_lower(trim(*p));
  TrainingConfig& c = m.config();
  const std::string key(path);
  if (v == "32" || v == "32-true" || v == "fp32" || v == "float32") {
    c.torch_dtype = DType::kFloat32;
    c.autocast.reset();
  } else if (v == "16" || v == "16-mixed" || v == "fp16" || v == "16-mixed-precision") {
    c.torch_dtype = DType::kFloat32;
    c.autocast = DType::kFloat16;
  } else if (v == "bf16" || v == "bf16-mixed") {
    c.torch_dtype = DType::kFloat32;
    c.autocast = DType::kBFloat16;
  } else if (v == "bf16-true") {
    c.torch_dtype = DType::kBFloat16;
    c.autocast.reset();
  } else if (v == "16-true") {
    c.torch_dtype = DType::kFloat16;
    c.autocast.reset();
  } else {
    return m.error_at(n, ErrorCode::kUnknownName, fmt::format("unknown precision '{}'", *p),
                      did_you_mean(v, {"32-true", "16-mixed", "bf16-mixed", "bf16-true", "16-true"}));
  }
  m.from_file("torch_dtype", n, key);
  m.from_file("autocast", n, key);
  return Ok{};
}

}  // namespace memplan::io

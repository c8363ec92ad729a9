// ResolvedInputs: the model and training config a command will evaluate, with where every
// value came from (a default, a flag, a file:line, detection). `--show-config` prints it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <optional>

#include "io/model/custom_model.hpp"
#include "memplan/model.hpp"
#include "memplan/result.hpp"
#include "memplan/stack.hpp"
#include "memplan/training.hpp"

namespace memplan::io {

enum class OriginKind { kDefault, kFlag, kFile, kDetected, kDerived };

struct Origin {
  OriginKind kind = OriginKind::kDefault;
  SourceLocation loc;  // for kFile: file and line of the key
  std::string note;    // for kDerived/kDetected: how ("from nvidia-smi", "from config.json")
  std::string to_string() const;  // "default", "flag --batch", "train.yaml:12", "detected (nvidia-smi)"
};

// The CUDA caching allocator's settings as a run's files set them (io/allocator_env.hpp).
struct AllocatorSetting {
  std::string value;   // "expandable_segments:True,max_split_size_mb:128"
  std::string source;  // "train.yaml:12", "start.sh:4" or "the environment"
};

// What a run's files set, each variable on its own (the last file that sets it wins).
struct AllocatorSettings {
  std::optional<AllocatorSetting> alloc_conf;       // PYTORCH_ALLOC_CONF
  std::optional<AllocatorSetting> cuda_alloc_conf;  // PYTORCH_CUDA_ALLOC_CONF
};

struct ResolvedInputs {
  std::string model_name;  // as the user wrote it
  bool model_from_param_count = false;
  // What memplan assumed rather than read, one sentence each, shown at the top of every output
  // and in JSON (`inputs.assumptions`): an architecture built from a parameter count, a custom
  // model shape (`model: {n_layers, d_model, ...}`) whose attention and MLP are taken to be a
  // decoder LLM's. Anything that infers part of the model pushes a line here.
  std::vector<std::string> assumptions;
  ModelSpec model;
  TrainingConfig config;
  std::map<std::string, Origin> origins;  // keyed by the canonical input name: "batch", "seq_len", ...
  std::vector<std::string> warnings;      // "train.yaml:7: unknown key 'lora_rank'; did you mean 'lora_r'?"
  // What the budget was computed for, one line each: "GPU: NVIDIA H100 80GB HBM3, detected by
  // nvidia-smi: 79.10 GiB free of 79.65 GiB", "vLLM colocate reserves 24.00 GiB ...".
  std::vector<std::string> notes;
  // A config said `torch_dtype: auto`: load in the dtype the checkpoint is stored in (once the
  // model is resolved).
  bool torch_dtype_from_model = false;
  // Why no model name was found, when a config describes a model memplan cannot look up
  // (e.g. a custom architecture given as `model: {n_layers: ...}`): shown instead of the
  // generic "no model given" advice.
  std::string model_hint;
  // The config describes the model's architecture itself (`model: {n_layers, d_model, ...}`):
  // what it says (the CLI's --hidden-size ... flags may override it), built into `model` once the
  // flags are applied.
  std::optional<CustomModel> custom_model;

  // An encoder's head and label count as a config states them (Composer's model.num_labels, a
  // masked-LM pretraining script, contrastors' model_type): applied to the model once it is
  // resolved, unless --head / --num-labels say otherwise; origins "head" and "num_labels".
  std::optional<EncoderHead> encoder_head;
  // An embedding model's pooling and the library that wraps it (LLM2Vec's configs say both);
  // applied to the model when it embeds (docs/configs.md#llm2vec).
  std::optional<PoolingMode> pooling;
  std::optional<EmbeddingLibrary> embedding_library;
  std::optional<std::int64_t> num_labels;
  // Inputs a dialect defaulted the way TRL does ("autocast", "gradient_checkpointing"), and the
  // warning that says so: TRL trains decoder LLMs, so for an encoder (sentence-transformers and
  // Composer run transformers' Trainer) TrainingArguments' own defaults replace them.
  std::vector<std::string> trl_defaults;
  std::string trl_defaults_warning;
  // The warning a file's LoRA keys got for having no effect (no use_peft / adapter): dropped when
  // --use-peft (or --method lora) turns LoRA on after all.
  std::string lora_ignored_warning;

  // The config files read, in order (the stack's lock files are looked for beside them).
  std::vector<std::string> config_files;
  // The library versions the run uses (docs/formulas.md#versions) and where each came from
  // (--stack, the active environment, a lock file); a library absent here is taken as the newest
  // release memplan models. `stack_environment` names the environment read ("" when none).
  Stack stack;
  std::map<Library, Origin> stack_origins;
  std::string stack_environment;
  // Whether the run goes through accelerate (HF Trainer, TRL, axolotl, ...): decides the rules
  // that hold only inside accelerate's code (docs/formulas.md#accelerate-fsdp-upcast).
  RunContext run;

  // PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF as the run's config files, launch script or .env
  // file set them (unset when none does), and where.
  AllocatorSettings allocator;

  // A config that fixes the step's global batch and leaves the accumulation to the trainer
  // (Megatron's global_batch_size, torchtitan's training.global_batch_size): grad_accum =
  // global / (micro-batch x data-parallel size). Derived by apply_global_batch once the GPU count
  // and the micro-batch are final (after --num-gpus / --nodes / --batch), unless --grad-accum
  // says otherwise.
  struct GlobalBatch {
    std::int64_t value = 0;
    std::string key;      // "ARGS.global_batch_size"
    SourceLocation loc;   // where it is written
    std::string warning;  // the warning the last derivation gave ("" if none)
  };
  std::optional<GlobalBatch> global_batch;
  // The warnings that say the GPU count was assumed (the config has none): withdrawn when
  // --num-gpus or --nodes gives it.
  std::vector<std::string> gpu_count_warnings;

  void set_origin(const std::string& key, Origin o) { origins[key] = std::move(o); }
  // Whether input `key` still has its default (no flag, file or derivation set it).
  bool is_default(const std::string& key) const {
    const auto it = origins.find(key);
    return it == origins.end() || it->second.kind == OriginKind::kDefault;
  }
};

// The one range check of the numeric inputs, wherever a value came from (a flag, a file, a
// default, a derivation): the same ranges and the same message, and NaN or infinity never
// passes. The error names the value's origin: the flag ("--lora-dropout = nan is out of range
// (0 <= p < 1)") or the key with its file:line ("train.yaml:7: lora_dropout = nan is out of
// range (0 <= p < 1)").
Status check_inputs(const ResolvedInputs& in);

// Derives grad_accum from in.global_batch (when there is one and no flag set the accumulation):
// global / (micro-batch x data-parallel size), where that divides; otherwise a warning at the
// key, and the accumulation stays as it is. Called when a config is loaded and again after the
// flags are applied; each call replaces the previous call's warning.
void apply_global_batch(ResolvedInputs& in);

}  // namespace memplan::io

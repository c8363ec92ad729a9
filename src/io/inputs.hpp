// ResolvedInputs: the model and training config a command will evaluate, with where every
// value came from (a default, a flag, a file:line, detection). `--show-config` prints it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "memplan/model.hpp"
#include "memplan/result.hpp"
#include "memplan/training.hpp"

namespace memplan::io {

enum class OriginKind { kDefault, kFlag, kFile, kDetected, kDerived };

struct Origin {
  OriginKind kind = OriginKind::kDefault;
  SourceLocation loc;  // for kFile: file and line of the key
  std::string note;    // for kDerived/kDetected: how ("from nvidia-smi", "from config.json")
  std::string to_string() const;  // "default", "flag --batch", "train.yaml:12", "detected (nvidia-smi)"
};

struct ResolvedInputs {
  std::string model_name;  // as the user wrote it
  bool model_from_param_count = false;
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

  void set_origin(const std::string& key, Origin o) { origins[key] = std::move(o); }
};

}  // namespace memplan::io

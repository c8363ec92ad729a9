// The software stack a run uses: the versions of the libraries whose code decides what a training
// step allocates. A version is an input like the batch size: transformers 4.48 keeps a second
// fp32 copy of the logits that 4.49 does not, TRL 0.13 casts a QLoRA model's norms to fp32 that
// current TRL leaves alone. `apply_stack` turns versions into the settings they decide, each rule
// naming the range it holds for (docs/formulas.md#versions).
#pragma once

#include <compare>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "memplan/model.hpp"
#include "memplan/result.hpp"
#include "memplan/training.hpp"

namespace memplan {

// A release number as pip writes it: "4.48.1", "2.4.1+cu121", "0.13.0.dev0", "1.0.0rc1", "2!1.0".
// Compared by its release segment (missing parts are 0); a pre-release (a, b, rc, dev) sorts
// before its release; the local part (+cu121) is ignored.
struct Version {
  std::vector<int> release;  // {4, 48, 1}
  bool pre = false;          // a, b, rc or dev of `release`
  std::string text;          // as written

  std::strong_ordering operator<=>(const Version& o) const;
  bool operator==(const Version& o) const { return (*this <=> o) == 0; }
  int major() const { return release.empty() ? 0 : release[0]; }
  int minor() const { return release.size() < 2 ? 0 : release[1]; }
};

Result<Version> parse_version(std::string_view text);
// A version known to be valid ("4.48.1"): for tables of rules. Aborts on a malformed literal.
Version version(std::string_view text);

// The libraries whose versions change memory (docs/formulas.md#versions).
enum class Library {
  kTorch,
  kTransformers,
  kPeft,
  kTrl,
  kAccelerate,
  kBitsandbytes,
  kDeepspeed,
  kLiger,
  kVllm,
  kFlashAttn,
  kTorchao,
};

// Every library, in the order outputs list them.
const std::vector<Library>& all_libraries();
// The distribution name pip uses: "torch", "liger-kernel", "flash-attn", ...
std::string_view library_name(Library l);
// A distribution name as written anywhere (PEP 503: case, '-', '_' and '.' alike): "Liger_Kernel",
// "flash_attn", "pytorch" (conda's name for torch).
std::optional<Library> library_from_name(std::string_view name);
// The newest release memplan has rules for: what a library is taken as when nothing says.
const Version& newest_modelled(Library l);
// The oldest release memplan has rules for; older ones are treated as this one, with a warning.
const Version& oldest_modelled(Library l);

struct Stack {
  std::map<Library, Version> versions;  // what was found or given; absent: newest_modelled

  bool has(Library l) const { return versions.count(l) > 0; }
  // The version rules use: the one given, else the newest memplan models.
  const Version& of(Library l) const;
};

// What a rule set, for `--show-config` and the JSON: the input's key ("transformers_loss") and the
// sentence that says which version decided it ("transformers 4.48.1: ForCausalLMLoss shifts a
// contiguous fp32 copy of the logits (4.46-4.48)").
struct StackEffect {
  std::string key;
  std::string why;
};

struct StackApplied {
  std::vector<StackEffect> effects;
  std::vector<std::string> warnings;  // versions without rules, behaviours memplan does not model
  // What the versions refuse (PEFT without default LoRA targets for the model type): the run
  // would stop there too.
  std::optional<Error> error;
};

// How the run is driven, for rules that hold only inside one library's code path.
struct RunContext {
  // Whether the model goes through accelerate's Accelerator.prepare (HF Trainer and the trainers
  // built on it, an accelerate launcher config): true, false (torchtitan, torchtune, NeMo,
  // Megatron, verl, Lightning...), or nullopt when the config does not say.
  std::optional<bool> accelerate = true;
  // Whether LoRA goes through PEFT's get_peft_model (HF Trainer, TRL, axolotl, LLaMA-Factory,
  // verl...), whose default targets depend on the PEFT release; false: the framework's own LoRA.
  bool peft = true;
  // The framework, for messages: "HF Trainer (memplan's flags)", "torchtitan", ...
  std::string framework = "HF Trainer";
};

// Sets every version-dependent input of `c` that is not in `fixed` (the keys a flag or a config
// file gave) from the versions in `s` (docs/formulas.md#versions). `model`: the model the run
// trains, for the rules that depend on it (PEFT's default LoRA targets); nullptr skips them.
// Pure: no I/O.
StackApplied apply_stack(const Stack& s, TrainingConfig& c, const std::set<std::string>& fixed,
                         const RunContext& run = {}, const ModelSpec* model = nullptr);

// PEFT's default LoRA target modules (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING in
// peft/utils/constants.py, earlier peft/utils/other.py) for `model_type` in release `peft`
// (docs/formulas.md#peft-default-targets): the modules and the first release that had them, or
// nullopt where that release has no entry (PEFT raises "Please specify `target_modules`").
struct PeftTargets {
  std::vector<std::string> modules;
  Version since;
};
std::optional<PeftTargets> peft_default_lora_targets(std::string_view model_type, const Version& peft);
// The first PEFT release memplan has read whose mapping holds `model_type` (nullopt: none).
std::optional<Version> peft_first_release_with(std::string_view model_type);

// Which of PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF configures PyTorch's CUDA caching
// allocator for a torch version, and what of it takes effect (docs/formulas.md#versions).
// `alloc_conf` / `cuda_alloc_conf`: the values of PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF
// (nullopt: unset). Returns the value the allocator uses (nullopt: none) and why.
struct AllocatorChoice {
  std::optional<std::string> value;
  std::string variable;  // which one it came from
  std::string note;      // one sentence when the version decided something ("" otherwise)
};
AllocatorChoice choose_allocator_conf(const Version& torch, const std::optional<std::string>& alloc_conf,
                                      const std::optional<std::string>& cuda_alloc_conf);

}  // namespace memplan

// Internal to memplan_io: the reading helpers every dialect mapping uses, and one mapping
// function per dialect (src/io/dialects_<name>.cpp). docs/configs.md documents each mapping.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "io/config/config_loader.hpp"
#include "io/config/numbers.hpp"
#include "io/edit/yaml_edit.hpp"
#include "memplan/training.hpp"

// Returns the Error of a failed Result (a Status or a read whose value is not needed).
#define MEMPLAN_IO_CHECK(expr)                     \
  do {                                             \
    auto memplan_io_check_ = (expr);               \
    if (!memplan_io_check_) return memplan_io_check_.error(); \
  } while (0)

namespace memplan::io {

// Reads a merged config tree into a LoadedConfig: typed, located values, origins, warnings,
// value sites, and the bookkeeping for unknown-key warnings.
class Mapper {
 public:
  Mapper(const YamlNode& root, LoadedConfig& out) : root_(root), out_(out) {}

  TrainingConfig& config() { return out_.inputs.config; }
  LoadedConfig& out() { return out_; }
  const YamlNode& root() const { return root_; }

  // The node at a dotted path ("training.trainer.devices"), or nullptr. Records that the dialect
  // reads this key, so it is never reported as unknown and is offered as a near match.
  const YamlNode* node(std::string_view path);
  // Whether the mapping asked for `path` (read it, or looked for it).
  bool asked(const std::string& path) const { return asked_.count(path) > 0; }
  // The first of several spellings that is present (and which one), or nullptr.
  const YamlNode* first_of(std::initializer_list<std::string_view> paths, std::string* which = nullptr);

  // Typed reads: nullopt when the key is absent or null; a malformed value is an error at its line.
  Result<std::optional<std::int64_t>> integer(std::string_view path, std::int64_t min = 1);
  Result<std::optional<bool>> boolean(std::string_view path);
  Result<std::optional<double>> number(std::string_view path);
  Result<std::optional<std::string>> text(std::string_view path);
  // A list of scalars, or one comma-separated string.
  Result<std::optional<std::vector<std::string>>> list(std::string_view path);

  // Read-and-record: when `path` is present, stores it in `field`, records `input`'s origin and
  // returns true.
  Result<bool> read(std::string_view path, const std::string& input, std::int64_t& field, std::int64_t min = 1);
  Result<bool> read(std::string_view path, const std::string& input, int& field, int min = 1);
  Result<bool> read(std::string_view path, const std::string& input, bool& field);
  Result<bool> read(std::string_view path, const std::string& input, double& field);
  // read(), or, when `path` is absent, `fallback` recorded as a default with `note`.
  Status read_or(std::string_view path, const std::string& input, std::int64_t& field, std::int64_t fallback,
                 std::string note);
  Result<bool> read_dtype(std::string_view path, const std::string& input, DType& field);
  // A parallelism degree (1 to 65536). With `min` -1, -1 means "the GPUs the other degrees leave"
  // (torchtitan's data_parallel_shard_degree) and reads as absent.
  Result<bool> read_degree(std::string_view path, const std::string& input, int& field, std::int64_t min = 1);
  Result<bool> read_optimizer(std::string_view path, const std::string& input, OptimizerKind& field);
  // The FSDP implementation (1 or 2) at `path` into parallel.fsdp_version ("fsdp_version").
  Result<bool> read_fsdp_version(std::string_view path);
  Result<bool> read_model(std::string_view path);
  // attn_implementation as transformers takes it: eager, sdpa, flash_attention_2, and the names
  // that cost what flash attention costs (flash_attention_3, flex_attention, Hugging Face kernels
  // hub repositories such as kernels-community/vllm-flash-attn3), each of those with a warning.
  Result<bool> read_attn_impl(std::string_view path);

  // Origins of engine inputs.
  void from_file(const std::string& input, const YamlNode& n, std::string_view key);
  void from_default(const std::string& input, std::string note);
  void derived(const std::string& input, std::string note);
  bool has_origin(const std::string& input) const { return out_.inputs.origins.count(input) > 0; }

  SourceLocation where(const YamlNode& n) const;
  std::string where_text(const YamlNode& n) const;  // "train.yaml:12"
  Error error_at(const YamlNode& n, ErrorCode code, std::string message, std::string suggestion = {}) const;
  void warn_at(const YamlNode& n, std::string message, std::string suggestion = {});
  void warn_file(std::size_t file, std::string message);
  // A key turns on a loss kernel the engine models (docs/formulas.md#fused-cross-entropy): sets
  // the kernel (and Liger's RMSNorm/SwiGLU/RoPE when `liger_kernels`) with the key as origin.
  void set_loss_kernel(const YamlNode& n, std::string_view key, LossKernel kernel, bool liger_kernels);
  // Two keys that say different things; the first one wins.
  void contradiction(const YamlNode& used, std::string_view used_key, const YamlNode& ignored,
                     std::string_view ignored_key);

  // Records where `knob` lives: at `path` when present; otherwise it would be added to the
  // mapping that holds `path`, after `insert_after` (empty: after its last key), unless
  // `no_insert_reason` says the dialect has no obvious place for it.
  void site(Knob knob, std::string_view path, std::string insert_after = {}, std::string no_insert_reason = {});
  void mirror_site(Knob knob, std::string_view path, std::int64_t world_size = 0);

  // The `deepspeed:` key of a dialect that can point at a DeepSpeed JSON.
  void set_deepspeed_ref(const YamlNode* n) { deepspeed_ref_ = n; }
  const YamlNode* deepspeed_ref() const { return deepspeed_ref_; }

  // Unknown keys in the mapping at `ns` ("" is the top level). Strict: every key outside
  // `known` and the keys read is reported; otherwise only near-misses of keys read.
  void check_unknown(std::string_view ns, const std::vector<std::string>& known, bool strict);

  // The number a scalar holds as the trainer reads it (io/numbers.hpp: PyYAML's YAML 1.1 for YAML
  // files, JSON's grammar for .json files; quoted values as Python's int()/float()). Warns, at
  // the value's line, when YAML 1.2 would read the text differently.
  ScalarNumber scalar_number(const YamlNode& n);

 private:
  std::string file_of(const YamlNode& n) const;
  Error bad_value(const YamlNode& n, std::string_view path, std::string_view expected) const;

  const YamlNode& root_;
  LoadedConfig& out_;
  std::set<std::string> asked_;
  const YamlNode* deepspeed_ref_ = nullptr;
};

// One mapping per dialect. Each reads what it knows, records defaults it applies, value sites
// and unknown keys.
// TrainingArguments' per_device_train_batch_size (default 8) and gradient_accumulation_steps
// (default 1) with their sites: HF/TRL and LLaMA-Factory configs share these keys.
Status read_training_arguments_batch(Mapper& m);
// TRL's use_vllm and vllm_mode (colocate or server) at these keys (axolotl nests them under trl.).
Status read_vllm(Mapper& m, std::string_view use_vllm_key, std::string_view mode_key);
// gradient_checkpointing_kwargs: {use_reentrant: BOOL} (a mapping, or the JSON string a command
// line gives) into checkpoint_reentrant, input "use_reentrant" (HF/TRL and axolotl).
Status read_checkpoint_kwargs(Mapper& m);
Status map_hf_trl(Mapper& m);
// Warnings for the TrainingArguments/TRL keys that change memory but are not modelled
// (use_liger_kernel, activation_offloading, optim_target_modules). LLaMA-Factory shares them.
Status warn_unmodelled_hf(Mapper& m);
// The training method a config's path names ("recipes/x/orpo/config.yaml" -> "orpo"), or "".
std::string method_from_path(const std::string& path);
Status map_axolotl(Mapper& m);
Status map_llamafactory(Mapper& m);
Status map_llamafactory_v1(Mapper& m);  // the newer layout (model:, peft_config:, dist_config:)
Status map_torchtune(Mapper& m);
Status map_lightning(Mapper& m);
Status map_flat(Mapper& m);
// `primary`: the DeepSpeed JSON is the whole config; otherwise it sits next to another dialect
// whose values it must agree with.
Status map_deepspeed(Mapper& m, bool primary);
Status map_key_map(Mapper& m, const std::vector<KeyMapEntry>& entries);
// accelerate launcher configs (dialects_accelerate.cpp): alone (`primary`) or next to a trainer config.
Status map_accelerate(Mapper& m, bool primary);
Status map_litgpt(Mapper& m);
Status map_automodel(Mapper& m);
Status map_llm_foundry(Mapper& m);
Status map_megatron(Mapper& m);  // NeMo 1.x / NeMo-Framework-Launcher Megatron configs
Status map_torchtitan(Mapper& m);  // torchtitan TOML job configs (dialects_torchtitan.cpp)
Status map_megatron_lm(Mapper& m);  // Megatron-LM arguments as YAML (dialects_megatron.cpp)
Status map_verl(Mapper& m);  // verl SFT and PPO/GRPO trainer configs (dialects_verl.cpp)
Status map_open_instruct(Mapper& m);  // allenai/open-instruct finetune.py / dpo_tune_cache.py YAML
Status map_ms_swift(Mapper& m);       // ms-swift `swift sft|rlhf --config x.yaml` arguments
Status map_oumi(Mapper& m);           // oumi `oumi train -c x.yaml` TrainingConfig
Status map_megatron_bridge(Mapper& m);  // Megatron-Bridge ConfigContainer overrides
// A file no dialect claims, read by meaning (frameworks/inferred.cpp); `weak_evidence`: the keys
// that pointed at a dialect without deciding it.
Status map_inferred(Mapper& m, const std::vector<std::string>& weak_evidence);
// The same reading for a framework whose layout is known by its signals but whose keys are read
// by their names (`framework` names it in the reading); frameworks/nemo_rl.cpp corrects it after.
// What a framework's reader already knows about its layout before the keys are read by meaning.
struct ReadingHints {
  bool rl = false;               // an RL run even where no key names the method (prime-rl's [orchestrator])
  bool generic_batch_is_global = false;  // a plain `batch_size` is the step's batch (prime-rl SFT's data.batch_size)
};
Status read_by_meaning(Mapper& m, const std::string& framework, const std::vector<std::string>& weak_evidence,
                       const ReadingHints& hints = {});
Status map_nemo_rl(Mapper& m);
Status map_roll(Mapper& m);
Status map_prime_rl(Mapper& m);  // PrimeIntellect-ai/prime-rl TOML (frameworks/prime_rl.cpp)  // alibaba/ROLL worker sections, read by meaning (frameworks/roll.cpp)
// After a detected dialect's mapping: when keys another framework's signals name were left unread
// (two strong ones at least), a warning says which framework the file looks like.
void note_other_framework(Mapper& m, Dialect chosen);  // NVIDIA NeMo-RL (policy.*, cluster.*, grpo/sft/dpo sections)
// OmegaConf `${a.b}` interpolation in a merged tree (dialects_interpolation.cpp), resolved as
// OmegaConf resolves it; `${oc.env:X,default}` takes the default and is a warning.
// A warning about one key's interpolation, given only if the dialect reads that key.
struct InterpolationWarning {
  std::string key;  // dotted path of the value ("model.micro_batch_size")
  Error warning;
  // The value could not be resolved at all (a cycle, too deep, too many references): when the
  // dialect reads the key, the config is refused, never read with the key's default (issue 34).
  bool refuses = false;
};
Status resolve_interpolations(YamlNode& root, LoadedConfig& out, std::vector<InterpolationWarning>& warnings);
// A custom architecture written in a config (`model: {n_layers, d_model, n_heads, ...}`) with its
// key map: fills out.inputs.model and the assumptions made for what is not written.
Status read_custom_model(Mapper& m, std::string_view section);
// Contrastive training (docs/formulas.md#contrastive): `n_positives` / `n_negatives` per anchor
// (seed 002's curriculum stage files; also num_positives / num_negatives), at the top level or
// under `section`: texts per example = 1 + positives + negatives.
Status read_contrastive(Mapper& m, std::string_view section);

// Known keys per dialect (dialects_keys.cpp).
const std::vector<std::string>& hf_known_keys();
const std::vector<std::string>& axolotl_known_keys();
const std::vector<std::string>& llamafactory_known_keys();
const std::vector<std::string>& torchtune_known_keys();
const std::vector<std::string>& lightning_trainer_keys();
const std::vector<std::string>& deepspeed_known_keys();
const std::vector<std::string>& deepspeed_zero_keys();
const std::vector<std::string>& open_instruct_known_keys();
const std::vector<std::string>& ms_swift_known_keys();

// Megatron's recompute_granularity (LLaMA-Factory's mcore_adapter, ms-swift's Megatron
// arguments): full or selective turn checkpointing on; selective is warned as estimated full.
Status read_recompute_granularity(Mapper& m);

// Shared precision helpers.
// Lightning-style precision values: 32, 16, "16-mixed", "bf16-mixed", "bf16-true", "bf16", ...
Status apply_lightning_precision(Mapper& m, std::string_view path);
// Says, at the key, what the estimate does with packing or padding-free batches (every sequence is
// planned at the full sequence length, which is what a packed batch fills).
void note_packing(Mapper& m, std::string_view key);
// Sets LoRA targets from a list that may say "all-linear" / "all".
void set_lora_targets(TrainingConfig& c, const std::vector<std::string>& targets);

}  // namespace memplan::io

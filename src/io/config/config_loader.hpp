// Reading the training configs people already have: one main file plus override files (Hydra
// stage files), in any dialect, with a DeepSpeed JSON alongside. Produces the engine inputs with
// the file:line every value came from, the warnings (unknown, contradictory keys), and where the
// micro-batch, accumulation and sequence length live so --apply can write them back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/config/dialects.hpp"
#include "io/fs.hpp"
#include "io/inputs.hpp"
#include "memplan/bytes.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

// The values --apply writes.
enum class Knob {
  kBatch,        // per-device micro-batch
  kGradAccum,    // gradient accumulation steps
  kSeqLen,       // tokens per sequence
  kGlobalBatch,  // DeepSpeed train_batch_size (= micro-batch x accumulation x GPUs), kept consistent
};
std::string to_string(Knob k);  // "batch", "grad_accum", "seq_len", "global_batch"

// One place a knob's value lives, or would be added.
struct ValueSite {
  Knob knob = Knob::kBatch;
  std::size_t file = 0;                 // index into LoadedConfig::files
  std::vector<std::string> path;        // key path in that file: {"training", "trainer", "accumulate_grad_batches"}
  int line = 0;                         // 1-based line of the key; 0 when absent
  bool present = false;
  std::optional<std::int64_t> value;    // the number written there (absent, "auto", null: none)
  bool mirror = false;                  // a copy that must agree (DeepSpeed JSON next to the YAML)
  std::int64_t world_size = 0;          // kGlobalBatch: GPUs implied by train_batch_size
  // When absent: the sibling key the new line goes after (empty: after the mapping's last key),
  // or, when the dialect has no obvious place, why not.
  std::string insert_after;
  std::string no_insert_reason;

  std::string key() const;  // "training.trainer.accumulate_grad_batches"
};

struct ConfigFile {
  std::string path;      // as given (or as resolved from a `deepspeed:` key)
  std::string text;      // the bytes read: --apply refuses to write if the file no longer matches
  FileInfo info;
  bool deepspeed = false;
  // Where a file composed by a Hydra defaults list puts its keys ({"text_curriculum"}); key paths
  // of the merged tree start with it, the file's own do not.
  std::vector<std::string> package{};
  bool command_line = false;  // the trainer command line's overrides (line N: the N-th); never written
};

// Everything read from one stack of config files.
struct LoadedConfig {
  Dialect dialect = Dialect::kFlat;
  std::vector<std::string> evidence;  // why this dialect ("named with --dialect" or the deciding keys)
  std::vector<ConfigFile> files;      // layers in order (later override earlier), then DeepSpeed JSON
  ResolvedInputs inputs;              // model name (not resolved yet), TrainingConfig, origins, warnings
  std::vector<Error> diagnostics;     // the same warnings, structured (file:line, suggestion)
  std::vector<ValueSite> sites;
  // What decides memory and was not read (a file that could not be followed): --apply refuses to
  // write a plan made from part of a config while this is not empty.
  std::vector<std::string> not_followed;
  // `# memplan: gpu=NAME gpu-memory=SIZE` comment directives (no trainer reads comments).
  std::optional<std::string> gpu;
  std::optional<Bytes> gpu_memory;
  SourceLocation gpu_where;
  // How the run is driven when the file says more than its dialect's default (oumi's trainer_type:
  // OUMI is oumi's own loop, without accelerate); unset: run_context(dialect).
  std::optional<RunContext> run;

  // Where the micro-batch is written (the first file when it is not written anywhere).
  SourceLocation batch_location() const;
  const ValueSite* primary_site(Knob k) const;
};

// One `--keys` entry: an engine input and the key path holding it.
struct KeyMapEntry {
  std::string input;  // batch, grad_accum, seq_len, model, num_gpus, gradient_checkpointing, bf16, fp16, ...
  std::vector<std::string> path;
};

struct ConfigRequest {
  std::vector<std::string> files;      // --config, in order; later files override earlier ones
  std::string dialect;                 // --dialect; empty: detect
  std::vector<KeyMapEntry> key_map;    // --keys
  // Hydra overrides after the file (`a.b=1`, `+a.b=1`, `group=option`), docs/configs.md#hydra.
  std::vector<std::string> overrides;
};

// "batch=data_loader.batch_size,grad_accum=trainer.accumulate_grad_batches", or the path of a
// YAML file mapping inputs to key paths (`batch: data_loader.batch_size`).
Result<std::vector<KeyMapEntry>> parse_key_map(const std::string& spec, FileSystem& fs);
// The inputs a key map may name.
const std::vector<std::string>& key_map_inputs();

Result<LoadedConfig> load_config(const ConfigRequest& request, FileSystem& fs);

}  // namespace memplan::io

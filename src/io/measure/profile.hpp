// memplan profile: seed 000's incremental profiling as one command (docs/profile.md). A ladder
// of rungs (micro-batch, grad-accum, seq-len), each run once through run_watched with the
// watchdog, in order, stopping at the first rung that does not end well. The results are plain
// data; src/report/profile_render renders them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/config/config_loader.hpp"
#include "io/measure/process.hpp"
#include "memplan/bytes.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

struct Rung {
  std::int64_t micro_batch = 1;
  std::int64_t grad_accum = 1;
  std::int64_t seq_len = 0;  // 0: not given (the command's own)
};

// ok: exited 0. stopped: the watchdog ended it at --stop-at. oom: it died by itself with an
// out-of-memory message or exit 137 / SIGKILL it did not get from memplan. failed: any other
// non-zero exit or signal. timeout: --rung-timeout ended it. interrupted: memplan got
// SIGINT/SIGTERM/SIGHUP, or ended it when the memory could no longer be read. refused: preflight
// found memory not back to its pre-ladder level. no-measurement: exited 0 without the training
// having run under the watch (a launcher that backgrounds the job: its processes ran on after it
// exited, or the GPU's memory never rose); never saved for calibration.
enum class RungStatus { kOk, kStopped, kOom, kFailed, kTimeout, kInterrupted, kRefused, kNoMeasurement };
const char* to_string(RungStatus s);

struct RungResult {
  Rung rung;
  RungStatus status = RungStatus::kOk;
  Bytes peak;            // the largest watchdog sample
  Bytes kernel_max_rss;  // the leader's own high-water RSS (wait4), a cross-check
  double seconds = 0;
  double max_sample_gap_ms = 0;  // the longest time between two watchdog samples
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::optional<Bytes> predicted;  // memplan's prediction for the rung, when a model is known
  std::vector<std::string> argv;   // the exact command run
  std::string log_dir;             // command.txt, output.log (and the config copy)
  std::string notes;
};

struct ProfileResult {
  std::vector<std::string> command;  // as given, with its placeholders
  std::string watch;                 // "system" | "gpu"
  std::string watch_description;
  Bytes stop_at;
  std::string stop_at_source;  // "--stop-at 300MB", "plan budget (...)"
  Bytes total;                 // the device's (or machine's) memory
  Bytes baseline;              // used before the first rung
  std::string log_dir;
  std::vector<RungResult> runs;             // in order; the last one may have ended the ladder
  std::vector<Rung> not_run;                // rungs after the one that ended the ladder
  std::optional<std::size_t> safe_maximum;  // index in runs of the last ok rung before the end
  std::vector<std::string> notes;
  std::string error;  // an error that ended the ladder after it started ("file:line: message"), or empty
};

// "1,2,4,8" -> {1, 2, 4, 8}: positive, strictly increasing. `flag` names it in errors.
Result<std::vector<std::int64_t>> parse_ladder(const std::string& text, const std::string& flag);
// 1, 2, 4, ... up to `max` (inclusive when a power of two).
std::vector<std::int64_t> doubling_ladder(std::int64_t max);
// Around a recommended value m: m/2, 3m/4, m, 5m/4, 3m/2 (rounded, at least 1, no repeats).
std::vector<std::int64_t> around_ladder(std::int64_t m);

// Replaces {batch}, {micro_batch}, {grad_accum}, {seq_len} and {config} in every argument.
// An error for a placeholder the rung has no value for ({seq_len} without --seq-len(s),
// {config} without --config).
Result<std::vector<std::string>> substitute(const std::vector<std::string>& argv, const Rung& rung,
                                            const std::optional<std::string>& config_path);
// Whether any argument holds one of the placeholders above.
bool has_placeholder(const std::vector<std::string>& argv, const std::string& name);

// True when the output holds an out-of-memory message (PyTorch CUDA/MPS/XPU, cuBLAS/cuDNN
// allocation failures, Python's MemoryError, the kernel's "Killed").
bool mentions_oom(const std::string& output);

// The rung's values written into a copy of the single config file of `config` (through --apply's
// in-place editor: comments and layout kept), returned as text. The user's file is only read.
Result<std::string> config_for_rung(const LoadedConfig& config, const Rung& rung);

struct LadderOptions {
  std::vector<std::string> command;  // with placeholders
  std::vector<Rung> rungs;
  Bytes stop_at;
  std::chrono::milliseconds rung_timeout{0};
  std::chrono::milliseconds grace{3000};
  std::optional<std::chrono::milliseconds> interval;
  // Preflight: before each rung wait up to `settle` for used memory to come back within
  // `settle_slack` of the level before the first rung; refuse the rung otherwise.
  std::chrono::milliseconds settle{30000};
  Bytes settle_slack = Bytes::mib(256);
  std::string log_dir;                                       // created; one folder per rung inside
  const LoadedConfig* config = nullptr;                      // --config: a copy per rung, {config}
  std::function<std::optional<Bytes>(const Rung&)> predict;  // memplan's prediction, when known
  std::function<void(const std::string&)> progress;          // one line per event (stderr)
  // While a rung runs, about every 250 ms: the rung ("[4/5] micro-batch 8, grad-accum 1"), the
  // seconds so far, the memory now and the rung's peak (a live line on a terminal).
  std::function<void(const std::string&, double, Bytes, Bytes)> live;
};

// Runs the ladder. Errors only when nothing was measured yet (a command that does not start,
// a log folder that cannot be made); a rung that ends badly is a result.
Result<ProfileResult> run_ladder(const LadderOptions& options, MemoryGauge& gauge);

}  // namespace memplan::io

// The local store of measured runs and the per-machine fits made from them
// (docs/profile.md#calibration). Two files in one per-user folder:
//   measurements.jsonl  one JSON object per measured rung (memplan profile --save appends)
//   calibration.json    the fits `memplan calibrate` wrote, one per machine
// The folder is $MEMPLAN_DATA_DIR when set (tests, a shared team store), else
// $XDG_DATA_HOME/memplan, else $HOME/.local/share/memplan (the XDG base-directory default).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memplan/bytes.hpp"
#include "memplan/calibration.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

// A machine as calibration knows it: the host name and the GPU's profile name ("h100-sxm"), or
// the driver's name when no profile matched, or "none" for a run watched without a GPU.
struct MachineId {
  std::string host;
  std::string gpu;
  bool operator==(const MachineId&) const = default;
};

// gethostname(2).
std::string host_name();

// The folder, from the environment as above. An error when neither variable nor HOME is set.
Result<std::string> data_dir();

struct MeasuredRun {
  MachineId machine;
  std::string driver;   // GPU driver version, when known
  std::string watch;    // system | gpu
  std::string model;    // as given (--model or the config's), may be empty
  std::string method;   // sft, lora, qlora, dpo, grpo...
  std::string config;   // the --config file, when one was used
  std::string command;  // the exact command of the rung
  std::int64_t micro_batch = 1;
  std::int64_t grad_accum = 1;
  std::int64_t seq_len = 0;
  Bytes measured;
  std::optional<Bytes> predicted;
  std::string time;  // UTC, ISO 8601
};

struct MachineFit {
  MachineId machine;
  Calibration calibration;
  std::string fitted;  // UTC time of the fit
};

// Appends to dir/measurements.jsonl (creating the folder).
Status append_measurements(const std::string& dir, const std::vector<MeasuredRun>& runs);
// Every run in dir/measurements.jsonl; none when the file does not exist. Errors name file:line.
Result<std::vector<MeasuredRun>> read_measurements(const std::string& dir);
// Replaces dir/calibration.json (through a temporary file renamed over it).
Status write_fits(const std::string& dir, const std::vector<MachineFit>& fits);
// dir/calibration.json; none when it does not exist.
Result<std::vector<MachineFit>> read_fits(const std::string& dir);

// One fit per machine from the runs that have a prediction.
std::vector<MachineFit> fit_machines(const std::vector<MeasuredRun>& runs, const std::string& now);

// "2026-11-23T12:00:00Z"
std::string utc_now();

}  // namespace memplan::io

// Running one training command under a memory watchdog (memplan profile, docs/profile.md).
//
// The command runs in its own process group with stdout and stderr sent to a log file. A loop
// samples the memory of the whole process tree every few milliseconds (a MemoryGauge: the
// resident memory of every process in the tree from /proc, or the GPU's used memory through NVML
// or nvidia-smi); when a sample passes the limit, or the time is up, or memplan itself receives
// SIGINT/SIGTERM/SIGHUP, the group gets SIGTERM, then SIGKILL after a grace period. memplan is a
// child subreaper during the run, so descendants that leave the group or lose their parent are
// still found and ended: when run_watched returns, no process of the tree is left.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memplan/bytes.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

class SystemProbe;

// One process as /proc/PID/stat shows it.
struct ProcEntry {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;
  Bytes rss;  // resident set size (field 24, in pages)
};

// Every process on the machine now (those that vanish while being read are skipped).
std::vector<ProcEntry> scan_processes(const std::string& proc_root = "/proc");
// The tree of a run: the processes in group `pgid`, their descendants wherever they moved, and
// (memplan being the subreaper) orphans re-parented to `self`.
std::vector<ProcEntry> tree_of(const std::vector<ProcEntry>& all, pid_t pgid, pid_t self);

// Used and total memory of what a gauge watches, before a run (preflight, headroom).
struct DeviceMemory {
  Bytes used;
  Bytes total;
};

// What the watchdog measures. Abstract so tests can drive the GPU path without a GPU.
class MemoryGauge {
 public:
  virtual ~MemoryGauge() = default;
  // "system" or "gpu"
  virtual std::string kind() const = 0;
  // One line for the output: "resident memory of the process tree (/proc)", "GPU 0 NVIDIA H100 (NVML)".
  virtual std::string description() const = 0;
  // The memory a run holds now; `tree` is its processes (system: the sum of their RSS; GPU: the
  // device's used memory above what it was when the gauge was created).
  virtual Result<Bytes> sample(const std::vector<ProcEntry>& tree) = 0;
  // The device (GPU) or machine (system) as a whole now.
  virtual Result<DeviceMemory> device() = 0;
  // How often sample() can usefully be called.
  virtual std::chrono::milliseconds interval() const = 0;
  // What --stop-at is compared with after the latest sample(): system, the tree's memory (the
  // sample itself); GPU, the whole device's used memory, whoever holds it (issue 34: a limit
  // measured above the memory already in use let the GPU reach 99%).
  virtual Bytes level(Bytes sample) const { return sample; }
};

// RSS of the process tree; device() reads MemTotal and MemAvailable from `meminfo_path`.
std::unique_ptr<MemoryGauge> system_gauge(std::string meminfo_path = "/proc/meminfo",
                                          std::chrono::milliseconds interval = std::chrono::milliseconds(2));
// The used memory of visible GPU `index`: NVML when it loads, else nvidia-smi (slower: sampled
// every 100 ms). Errors when neither answers.
Result<std::unique_ptr<MemoryGauge>> gpu_gauge(const SystemProbe& probe, int index);

// SIGINT, SIGTERM and SIGHUP set a flag while one of these lives (the previous handlers come
// back after); the watchdog reads it and ends the run it watches. Not reentrant: one at a time.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
  // The signal received since the guard was made, or 0.
  static int received();
};

struct RunSpec {
  std::vector<std::string> argv;                      // argv[0] is searched on PATH; no shell
  std::string log_path;                               // stdout and stderr, truncated first
  std::optional<Bytes> stop_at;                       // end the run when a sample exceeds this
  std::chrono::milliseconds timeout{0};               // 0: no limit
  std::chrono::milliseconds grace{3000};              // between SIGTERM and SIGKILL
  std::optional<std::chrono::milliseconds> interval;  // default: the gauge's
  // Called about every 250 ms with the elapsed seconds and the latest sample (progress line).
  std::function<void(double seconds, Bytes current, Bytes peak)> on_tick;
};

// kGaugeFailed: the memory could no longer be read (a failed nvidia-smi query); memplan ended the
// run, since a watchdog that cannot see is no watchdog.
enum class EndReason { kExited, kWatchdog, kTimeout, kInterrupted, kGaugeFailed };

struct RunOutcome {
  pid_t pid = 0;                 // the leader, which is also the group id
  std::optional<int> exit_code;  // when it exited
  std::optional<int> signal;     // when a signal ended it
  EndReason reason = EndReason::kExited;
  int interrupt_signal = 0;     // kInterrupted: which signal memplan received
  bool needed_sigkill = false;  // SIGTERM was not enough within the grace period
  Bytes peak;                   // the largest sample
  Bytes limit_sample;           // kWatchdog: the sample that passed the limit
  Bytes kernel_max_rss;         // the leader's own high-water RSS from wait4 (ru_maxrss)
  double seconds = 0;           // from start until the whole tree was gone
  int samples = 0;
  double max_gap_ms = 0;  // the longest time between two samples
  int stragglers = 0;     // processes still alive after the leader exited, then ended
  int unkillable = 0;     // still there 30 s after SIGKILL (uninterruptible sleep): the run gave up on them
  std::optional<Error> gauge_error;  // kGaugeFailed: why the memory could not be read
};

// Starts the command, watches it, and returns once every process of its tree is gone. An error
// only when the command cannot be started at all ("cannot run 'x': No such file or directory");
// a gauge that fails mid-run ends the run (kGaugeFailed) and is an outcome, so what the ladder
// measured before is kept.
Result<RunOutcome> run_watched(const RunSpec& spec, MemoryGauge& gauge);

// `argv` quoted for a POSIX shell, as the logs show the exact command.
std::string shell_quote(const std::vector<std::string>& argv);

}  // namespace memplan::io

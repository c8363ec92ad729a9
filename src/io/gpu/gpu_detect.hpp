// GPU detection: what GPUs this machine can use for training now, and how much of their memory
// is free. Backends, in order (docs/gpus.md#detection):
//   1. NVML, loaded at run time with dlopen("libnvidia-ml.so.1"): no link-time dependency, so the
//      binary runs where no NVIDIA driver is installed;
//   2. nvidia-smi --query-gpu=... when NVML cannot be loaded or fails;
//   3. rocm-smi --showproductname --showmeminfo vram --json for AMD GPUs;
//   4. /proc/meminfo for unified-memory parts whose driver reports no memory (DGX Spark GB10,
//      Jetson), and /proc/device-tree/model for a Jetson without nvidia-smi.
// Only GPUs made visible by CUDA_VISIBLE_DEVICES (AMD: ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES)
// are reported.
//
// Environment overrides, for stand-ins in end-to-end tests and for unusual installs:
//   MEMPLAN_NVIDIA_SMI=/path   run this program instead of nvidia-smi (and skip NVML: its answer is wanted)
//   MEMPLAN_ROCM_SMI=/path     run this program instead of rocm-smi
//   MEMPLAN_PROC_MEMINFO=/path read this file instead of /proc/meminfo
//   MEMPLAN_DISABLE_NVML=1     never load libnvidia-ml
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memplan/bytes.hpp"
#include "memplan/gpu.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

// A process holding GPU memory, as preflight lists it.
struct GpuProcess {
  std::int64_t pid = 0;
  std::string name;  // executable as the driver reports it ("/usr/bin/python3"), or empty
  Bytes used;
};

// The few NVML calls detection makes. Abstract so it can be mocked out for tests; the real one
// (SystemProbe::from_process) wraps the functions dlsym'd from libnvidia-ml.so.1.
class Nvml {
 public:
  struct Device {
    std::string name;             // nvmlDeviceGetName: "NVIDIA H100 80GB HBM3"
    std::string uuid;             // nvmlDeviceGetUUID: "GPU-8e1b..."
    std::optional<Bytes> total;   // nvmlDeviceGetMemoryInfo; empty when NOT_SUPPORTED (GB10)
    std::optional<Bytes> free;
  };
  virtual ~Nvml() = default;
  // Every device in NVML's (PCI bus) order; an Error names the failing call and NVML's message.
  virtual Result<std::vector<Device>> devices() = 0;
  // Processes with a compute context on device `index` (nvmlDeviceGetComputeRunningProcesses).
  virtual Result<std::vector<GpuProcess>> compute_processes(unsigned index) = 0;
};

// Everything detection reads from the outside world. Abstract so it can be mocked out for
// tests (ninja's DiskInterface): tests replay recorded driver outputs without a GPU.
class SystemProbe {
 public:
  struct CommandResult {
    bool started = false;  // false: the program could not be run at all (not installed)
    int exit_code = -1;
    std::string out;
    std::string err;
  };
  virtual ~SystemProbe() = default;
  // Runs argv[0] (searched on PATH) with the arguments, no shell, and collects its output.
  virtual CommandResult run(const std::vector<std::string>& argv) const = 0;
  virtual std::optional<std::string> read_file(const std::string& path) const = 0;
  virtual std::optional<std::string> env(const std::string& name) const = 0;
  // NVML, or an explanation of why it cannot be loaded ("libnvidia-ml.so.1: cannot open ...").
  virtual Result<std::unique_ptr<Nvml>> load_nvml() const = 0;

  // The real machine: fork/exec, files, getenv, dlopen.
  static std::unique_ptr<SystemProbe> from_process();
};

struct DetectedGpu {
  int index = 0;                 // as the driver numbers it (nvidia-smi index, rocm-smi card N)
  std::string uuid;              // "GPU-..." (NVIDIA), "0x..." unique id (AMD), or empty
  std::string name;              // as the driver reports it: "NVIDIA H100 80GB HBM3"
  std::string vendor;            // nvidia | amd
  Bytes total;
  Bytes free;                    // free now: driver's memory.free; unified: MemAvailable
  bool unified = false;          // total and free are the system's (/proc/meminfo)
  std::string source;            // "nvml", "nvidia-smi", "rocm-smi", "nvidia-smi + /proc/meminfo", ...
  std::optional<GpuProfile> profile;  // the matching built-in profile, if the name is known
  std::vector<GpuProcess> processes;  // only when DetectOptions::processes
};

struct DetectedSystem {
  std::vector<DetectedGpu> gpus;  // the visible GPUs, in driver order; never empty
  std::size_t chosen = 0;         // the one a run is limited by: least free memory (then least total)
  std::string visibility;         // "CUDA_VISIBLE_DEVICES=1,3" when a mask applied, else empty
  std::vector<std::string> notes; // how detection went: "NVML not loaded (...); used nvidia-smi"

  const DetectedGpu& chosen_gpu() const { return gpus[chosen]; }
  // The chosen GPU as a profile a plan can use: the matched profile (bf16, unified, reserve) with
  // memory set to the detected total, or a synthetic one named after the driver's name.
  GpuProfile chosen_profile() const;
};

struct DetectOptions {
  bool processes = false;  // also list the processes holding memory (preflight); costs a call
};

// Detects the visible GPUs. No GPU: kNoGpu, "no GPU found (...); give --gpu NAME or
// --gpu-memory SIZE". Matches each GPU's name against `profiles`.
Result<DetectedSystem> detect_gpus(const SystemProbe& probe, const std::vector<GpuProfile>& profiles,
                                   const DetectOptions& options = {});
// The same with the built-in profiles.
Result<DetectedSystem> detect_gpus(const SystemProbe& probe, const DetectOptions& options = {});

// The budget for a detected GPU. Discrete: capacity = free now, no headroom. Unified: the OS
// keeps its reserve and what other processes hold now stays theirs, so budget() is
// min(free, total - reserve): capacity = min(total, free + reserve), headroom = reserve.
Budget detected_budget(const DetectedGpu& gpu, Bytes safety_margin);

// Parsers of the recorded formats, exposed for tests. `text` is the program's stdout.
// nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.free,memory.used
//            --format=csv,noheader,nounits (memory in MiB; "[N/A]" when not reported)
struct SmiGpuRow {
  int index = 0;
  std::string uuid, name;
  std::optional<Bytes> total, free;
};
Result<std::vector<SmiGpuRow>> parse_nvidia_smi_gpus(const std::string& text);
// nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits
struct SmiProcessRow {
  std::string gpu_uuid;
  GpuProcess process;
};
Result<std::vector<SmiProcessRow>> parse_nvidia_smi_processes(const std::string& text);
// rocm-smi --showproductname --showmeminfo vram --json
struct RocmGpuRow {
  int index = 0;
  std::string name, unique_id;
  Bytes total, used;
};
Result<std::vector<RocmGpuRow>> parse_rocm_smi(const std::string& text);
// /proc/meminfo: MemTotal and MemAvailable.
struct MemInfo {
  Bytes total, available;
};
Result<MemInfo> parse_meminfo(const std::string& text, const std::string& origin);

}  // namespace memplan::io

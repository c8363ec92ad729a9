// GPU profiles: the built-in table of GPUs (configs/gpus.yaml, embedded at build time), lookup
// by the names users and drivers use, and the synthetic profile behind --gpu-memory.
// docs/gpus.md describes the file format and where every memory figure comes from.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memplan/bytes.hpp"
#include "memplan/gpu.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

// Parses and validates profile YAML. `origin` names the file in errors, which carry its line:
// "configs/gpus.yaml:12: unknown key 'bf61' in GPU profile 'v100-16gb'; did you mean 'bf16'?".
Result<std::vector<GpuProfile>> parse_gpu_profiles(std::string_view yaml_text, const std::string& origin);

// The built-in profiles, parsed and validated on first use and kept for the process.
Result<std::vector<GpuProfile>> load_gpu_profiles();

// Looks `name` up among the canonical names, display names and aliases of `profiles`, ignoring
// case, spaces, '-' and '_' ("A100 80GB", "NVIDIA A100-SXM4-80GB" and "a100-80gb" are one GPU).
// Unknown: kUnknownName, "unknown GPU 'a100-90gb'; did you mean 'a100-80gb'?". A name shared by
// several profiles (the 32 and 64 GB Jetson AGX Orin): kInvalidArgument listing them.
Result<GpuProfile> find_gpu(const std::vector<GpuProfile>& profiles, const std::string& name);
// The same over the built-in profiles: what --gpu NAME uses.
Result<GpuProfile> find_gpu(const std::string& name);

// The profile a driver's report names, if any: `driver_name` as find_gpu matches it; when several
// profiles share the name, the one whose memory is closest to `total`. Never an error: a GPU
// memplan does not know is still planned for, from what the driver measured.
// The same over the built-in profiles, parsing only those that mention the name.
std::optional<GpuProfile> match_detected_gpu(std::string_view driver_name, Bytes total);
std::optional<GpuProfile> match_detected_gpu(const std::vector<GpuProfile>& profiles, std::string_view driver_name,
                                             Bytes total);

// A profile for --gpu-memory SIZE: name "custom-24GB", vendor "unknown", bf16 assumed (no
// warning can be given), not unified. Sizes under 1 GiB are refused, since "--gpu-memory 24"
// parses as 24 bytes: "GPU memory of 24 B is too small; write a unit, e.g. --gpu-memory 24GB".
Result<GpuProfile> gpu_from_memory(Bytes memory);

// What the OS and other processes keep on a unified-memory device when its profile does not
// say: 7/32 of memory (28 GiB of 128 GiB, seed 000's DGX Spark rule), at least 4 GiB.
Bytes default_system_reserve(Bytes memory);

// A one-line warning when a run asks for bf16 on a GPU without it (V100, T4, Turing), else
// nothing: "Tesla T4 (t4) has no bf16 support: PyTorch emulates bf16 there, slowly, ..."
std::optional<std::string> bf16_warning(const GpuProfile& gpu, bool uses_bf16);

// The budget a plan compares its peak against on a GPU known by profile: capacity = memory,
// headroom = system_reserve (zero unless unified).
Budget profile_budget(const GpuProfile& gpu, Bytes safety_margin);

}  // namespace memplan::io

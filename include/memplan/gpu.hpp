// GPU profiles and the memory budget a training run may use on one GPU.
#pragma once

#include <string>
#include <vector>

#include "memplan/bytes.hpp"

namespace memplan {

struct GpuProfile {
  std::string name;                  // canonical short key: "a100-80gb"
  std::string display_name;          // as the driver names it: "NVIDIA A100-SXM4-80GB"
  std::vector<std::string> aliases;  // other names users and drivers use: "A100-SXM4-80GB", "a100"
  std::string vendor;                // nvidia | amd | apple
  Bytes memory;                      // total memory as the driver reports it (nvidia-smi memory.total)
  bool bf16 = true;                  // hardware bf16 support (false: V100, T4, Quadro RTX 6000)
  bool unified = false;              // memory shared with the CPU (DGX Spark GB10, Jetson, Apple)
  Bytes system_reserve;              // unified: what the OS and other processes should keep
  // What CUDA reports as the device's total (cudaMemGetInfo; torch.cuda.get_device_properties
  // .total_memory; "GPU 0 has a total capacity of X GiB" in an OOM message): memory.total minus
  // what the driver keeps. Zero when not recorded. docs/gpus.md#usable
  Bytes usable;

  // What a plan may count on: the usable memory when recorded, else memory.
  Bytes capacity() const { return usable > Bytes::zero() ? usable : memory; }
};

// What a run may use on one GPU: capacity minus a safety margin (and, on unified memory,
// the system reserve). plan/check compare a predicted peak against budget().
struct Budget {
  Bytes capacity;        // total memory of the GPU (or --gpu-memory), or currently free when detected
  Bytes safety_margin;   // kept free for fragmentation and allocator behaviour not modelled
  Bytes headroom;        // kept free for other processes (unified memory: the OS)
  // CPU and GPU share this memory (DGX Spark, GH200/GB200 coherent memory, Jetson, Apple):
  // offloading to "CPU memory" frees nothing, so plan suggests no offload.
  bool unified = false;
  // The part of headroom that a colocated vLLM reserves (GRPO --use-vllm colocate); a
  // suggestion that moves generation to another GPU gives it back.
  Bytes vllm_reserve;
  Bytes budget() const { return capacity - safety_margin - headroom; }
};

}  // namespace memplan

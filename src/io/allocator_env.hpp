// Where PYTORCH_CUDA_ALLOC_CONF is set for a training run. The allocator setting changes how much
// of the GPU a step can use (docs/plan.md#safety-margin), so plan reads it from the configs the
// run is launched with and from the environment memplan runs in.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/config_loader.hpp"

namespace memplan::io {

struct AllocatorSetting {
  std::string value;   // "expandable_segments:True,max_split_size_mb:128"
  std::string source;  // "train.yaml:12" or "the environment"
};

// The last config file (later files override earlier) that sets PYTORCH_CUDA_ALLOC_CONF: a key
// of that name anywhere in a mapping (`env:`, `environment:`, `launcher: {env: ...}`), or
// "PYTORCH_CUDA_ALLOC_CONF=..." inside a string (a launcher command line). Files that are not
// YAML or JSON are skipped: the loader has already reported them.
std::optional<AllocatorSetting> find_allocator_conf(const std::vector<ConfigFile>& files);

}  // namespace memplan::io

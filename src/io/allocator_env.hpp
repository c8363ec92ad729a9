// Where the CUDA caching allocator's settings are set for a training run: PYTORCH_ALLOC_CONF
// (torch >= 2.8) and the older PYTORCH_CUDA_ALLOC_CONF. The settings change how much of the GPU a
// step can use (docs/plan.md#safety-margin), so plan reads them from the configs the run is
// launched with, the launch script or .env file beside them, and the environment memplan runs in;
// the stack's torch decides which variable takes effect (docs/formulas.md#versions).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/config/config_loader.hpp"

namespace memplan::io {

// In config files: a key of either name anywhere in a mapping (`env:`, `environment:`,
// `launcher: {env: ...}`), or "NAME=..." inside a string (a launcher command line). Files that are
// not YAML or JSON are skipped: the loader has already reported them.
AllocatorSettings find_allocator_settings(const std::vector<ConfigFile>& files);

// In a launch script or a .env file: `export NAME=value`, `NAME=value command ...`, `NAME="value"`;
// comments are skipped. Later assignments override earlier ones.
AllocatorSettings parse_launch_file(const std::string& text, const std::string& path);

// `later` overrides what `earlier` sets, variable by variable.
AllocatorSettings layer(AllocatorSettings earlier, const AllocatorSettings& later);

}  // namespace memplan::io

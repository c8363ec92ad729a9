// Test helpers for the framework readers: one config text loaded as the file `name` through
// load_config (detection and the dialect's reader), and a warning searched by substring.
#pragma once

#include <algorithm>
#include <string>

#include "io/config/config_loader.hpp"

namespace memplan::io::testing {

inline Result<LoadedConfig> load(const std::string& text, const std::string& name = "run.yaml") {
  MemoryFileSystem fs;
  fs.files[name] = text;
  ConfigRequest req;
  req.files = {name};
  return load_config(req, fs);
}

inline bool has_warning(const LoadedConfig& c, const std::string& text) {
  return std::any_of(c.inputs.warnings.begin(), c.inputs.warnings.end(),
                     [&](const std::string& w) { return w.find(text) != std::string::npos; });
}

}  // namespace memplan::io::testing

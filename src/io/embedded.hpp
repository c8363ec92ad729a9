// Data files compiled into the binary (configs/models/*.json, configs/gpus.yaml), so an
// installed memplan works without its source tree. Paths are relative to configs/.
#pragma once

#include <string_view>
#include <vector>

namespace memplan::io {

struct EmbeddedFile {
  std::string_view path;     // "models/llama-3.1-8b.json"
  std::string_view content;
};

const std::vector<EmbeddedFile>& embedded_files();

}  // namespace memplan::io

// Fuzzes OmegaConf interpolation (issue 34): any YAML whose values are interpolations, resolvers
// and nested defaults, loaded as a config. Resolution must stay bounded (16 MiB built, 32 deep).
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/config/config_loader.hpp"
#include "io/fs.hpp"

using namespace memplan::io;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  MemoryFileSystem fs;
  fs.files["f.yaml"] = std::string(reinterpret_cast<const char*>(data), size);
  ConfigRequest req;
  req.files = {"f.yaml"};
  (void)load_config(req, fs);
  return 0;
}

// Fuzzes --keys: the inline form (INPUT=KEY.PATH,...) and the mapping file, then a load of a
// fixed config with the resulting map. Input: the spec, optionally "\n%%\n" and a config text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/config/config_loader.hpp"

using namespace memplan::io;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::size_t split = input.find("\n%%\n");
  const std::string spec = input.substr(0, split);
  const std::string config =
      split == std::string::npos ? "data_loader:\n  batch_size: 8\ntrainer:\n  accumulate_grad_batches: 2\n"
                                 : input.substr(split + 4);
  MemoryFileSystem fs;
  fs.files["keys.yaml"] = spec;
  fs.files["train.yaml"] = config;
  for (const std::string& s : {spec, std::string("keys.yaml")}) {
    auto map = parse_key_map(s, fs);
    if (!map) continue;
    ConfigRequest req;
    req.files = {"train.yaml"};
    req.key_map = *map;
    (void)load_config(req, fs);
  }
  return 0;
}

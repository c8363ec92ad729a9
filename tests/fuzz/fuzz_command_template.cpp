// Fuzzes profile's command template (issue 34): the input, split at NUL bytes, is a command line
// whose {batch}, {grad_accum}, {seq_len}, {config} placeholders are substituted for a rung.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "io/measure/profile.hpp"

using namespace memplan::io;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> argv(1);
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0) argv.emplace_back();
    else argv.back() += static_cast<char>(data[i]);
  }
  (void)has_placeholder(argv, "config");
  (void)has_placeholder(argv, "batch");
  (void)substitute(argv, Rung{4, 2, 2048}, std::string("/tmp/x.yaml"));
  (void)substitute(argv, Rung{1, 1, 0}, std::nullopt);
  if (!argv.empty()) (void)parse_ladder(argv[0], "--batches");
  return 0;
}

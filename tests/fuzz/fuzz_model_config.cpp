// Fuzzes config.json parsing (parse_hf_config): any bytes give a ModelSpec that passed validate()
// or an Error; never an exception, a crash or a long loop.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/model/model_source.hpp"
#include "memplan/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = memplan::io::parse_hf_config(text, "config.json");
  if (m) (void)memplan::count_parameters(*m);
  return 0;
}

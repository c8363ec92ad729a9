// Fuzzes the calibration store's readers (issue 34): the input is written as calibration.json and
// as measurements.jsonl in a scratch folder and read back; every value read must pass the checks.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "io/measure/calibration_store.hpp"

using namespace memplan;
using namespace memplan::io;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string dir = [] {
    std::string t = "/tmp/memplan-fuzz-store-XXXXXX";
    if (::mkdtemp(t.data()) == nullptr) std::abort();
    return t;
  }();
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::ofstream(dir + "/calibration.json", std::ios::binary | std::ios::trunc) << text;
  std::ofstream(dir + "/measurements.jsonl", std::ios::binary | std::ios::trunc) << text;
  if (auto fits = read_fits(dir)) {
    for (const auto& f : *fits)
      if (!check_calibration(f.calibration)) __builtin_trap();
  }
  (void)read_measurements(dir);
  return 0;
}

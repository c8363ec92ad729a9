// Published measurement files (tests/data/published/): rows under "cases" give the allocated peak,
// rows under "reserved_only" give only max_memory_reserved (docs/accuracy.md#published-reserved).
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "io/measure/measurement.hpp"

using namespace memplan;

namespace {

std::string write_tmp(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / ("memplan_test_measurement_" + name);
  std::ofstream(p) << text;
  return p.string();
}

std::string row(const std::string& id, std::int64_t bytes) {
  return R"({"id": ")" + id + R"(", "model": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "vocab_size": 256},
             "training": {"batch": 1, "seq_len": 16, "device": "cuda"},
             "measured": {"peak_bytes": )" + std::to_string(bytes) + "}}";
}

}  // namespace

TEST_CASE("a published file's reserved_only rows load as max_memory_reserved figures") {
  const auto path = write_tmp("both.json", R"({"cases": [)" + row("alloc", 1000) + R"(], "reserved_only": [)" +
                                               row("res", 5347234284) + "]}");
  auto cases = io::load_measurements(path);
  REQUIRE(cases);
  REQUIRE(cases->size() == 2);
  CHECK_FALSE((*cases)[0].reserved_only);
  CHECK((*cases)[0].peak_bytes == 1000);
  CHECK((*cases)[0].reserved_bytes == 0);
  // The figure the source prints (fsdp_qlora's 4.98 GiB QLoRA row) is the reserved peak.
  CHECK((*cases)[1].reserved_only);
  CHECK((*cases)[1].reserved_bytes == 5347234284);
}

TEST_CASE("a published file with only reserved_only rows loads, one with neither list is refused") {
  auto only = io::load_measurements(write_tmp("only.json", R"({"reserved_only": [)" + row("r", 7) + "]}"));
  REQUIRE(only);
  REQUIRE(only->size() == 1);
  CHECK((*only)[0].reserved_only);
  const auto bad = write_tmp("neither.json", R"({"source": "x"})");
  auto none = io::load_measurements(bad);
  REQUIRE_FALSE(none);
  CHECK(none.error().message == "case '-': the file must hold a JSON list of cases");
}

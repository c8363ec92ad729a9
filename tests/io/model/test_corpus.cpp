// The held-out corpus (tests/data/corpus): real config.json files of 2025-2026 checkpoints, and of
// model types memplan has no reader for (unknown/), that no
// reader was written against, each read the way `memplan --model FILE` reads it and checked
// against a figure from outside memplan: the checkpoint's published total (rounded: false), a
// total derived by hand from the transformers modules (hand_count), or the key or block a
// refusal must name (expect_refused). MANIFEST.yaml's `memplan` field is a record, never used here.
#include <catch2/catch.hpp>

#include <string>

#include <yaml-cpp/yaml.h>

#include "io/model/model_source.hpp"
#include "memplan/model.hpp"

using namespace memplan;

TEST_CASE("every corpus config.json counts to its published or hand-derived total, or is refused by name") {
  const std::string dir = std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/corpus/";
  const YAML::Node manifest = YAML::LoadFile(dir + "MANIFEST.yaml");
  int counted = 0, refused = 0;
  for (const auto& f : manifest["files"]) {
    const std::string file = f["file"].as<std::string>();
    INFO(file);
    auto r = io::resolve_model_source(dir + file, io::ModelSearchEnv{});
    if (f["expect_refused"]) {
      REQUIRE_FALSE(r.has_value());
      CHECK_THAT(r.error().to_string(), Catch::Contains(f["expect_refused"].as<std::string>()));
      ++refused;
      continue;
    }
    REQUIRE(r.has_value());
    const std::int64_t total = count_parameters(r->spec).total;
    if (f["hand_count"]) {
      CHECK(total == f["hand_count"].as<std::int64_t>());
    } else {
      REQUIRE_FALSE(f["rounded"].as<bool>());
      CHECK(total == f["published_params"].as<std::int64_t>());
    }
    ++counted;
  }
  CHECK(counted == 26);
  CHECK(refused == 57);
}

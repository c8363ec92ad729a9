#include <catch2/catch.hpp>

#include "io/model_source.hpp"

using namespace memplan;

TEST_CASE("every catalog entry counts exactly its published total") {
  auto catalog = io::load_catalog();
  REQUIRE(catalog.has_value());
  for (const auto& c : *catalog) {
    INFO(c.file << " (" << c.params_source << ")");
    CHECK(count_parameters(c.spec).total == c.published_params);
  }
}

// The built-in catalog (configs/models) as the model-family tests read it: one entry's ModelSpec
// by name, id or alias, loaded once per test binary.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "io/model/model_source.hpp"

namespace memplan::testing {

inline const ModelSpec& catalog_spec(const std::string& name) {
  static auto catalog = io::load_catalog();
  REQUIRE(catalog.has_value());
  const io::CatalogEntry* c = io::find_catalog_entry(*catalog, name);
  REQUIRE(c != nullptr);
  return c->spec;
}

}  // namespace memplan::testing

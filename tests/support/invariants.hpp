// One helper every test that gets an Estimate calls (bloaty's CheckConsistencyForRow): the
// components sum to the peak, reserved >= peak, totals consistent, phases consistent.
#pragma once

#include <catch2/catch.hpp>

#include "memplan/estimate.hpp"

namespace memplan::testing {

inline void require_consistent(const Estimate& e) {
  const Status s = check_invariants(e);
  INFO((s ? std::string("ok") : s.error().message));
  REQUIRE(s.has_value());
}

inline std::int64_t component(const Estimate& e, const std::string& name) {
  for (const auto& c : e.components)
    if (c.name == name) return c.bytes.count();
  return 0;
}

}  // namespace memplan::testing

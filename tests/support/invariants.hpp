// One helper every test that gets an Estimate calls (bloaty's CheckConsistencyForRow): the
// components sum to the peak, reserved >= peak, totals consistent, phases consistent.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "memplan/engine.hpp"
#include "memplan/estimate.hpp"

namespace memplan::testing {

inline void require_consistent(const Estimate& e) {
  const Status s = check_invariants(e);
  INFO((s ? std::string("ok") : s.error().message));
  REQUIRE(s.has_value());
}

// Whether one of `lines` (an estimate's assumptions or warnings) contains `text`.
inline bool mentions(const std::vector<std::string>& lines, const std::string& text) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
}

inline std::int64_t component(const Estimate& e, const std::string& name) {
  for (const auto& c : e.components)
    if (c.name == name) return c.bytes.count();
  return 0;
}

// The reduced models' estimator against one that simulates every layer
// (TrainingConfig::simulate_every_layer, docs/formulas.md#extrapolation): the same peak at every
// (b, s), with the config's accumulation and for a single micro-batch. Returns both.
inline std::pair<Estimator, Estimator> same_as_every_layer(const ModelSpec& m, const TrainingConfig& c,
                                                           const std::vector<std::pair<std::int64_t, std::int64_t>>& points) {
  TrainingConfig every = c;
  every.simulate_every_layer = true;
  auto reduced = Estimator::create(m, c);
  auto full = Estimator::create(m, every);
  REQUIRE(reduced.has_value());
  REQUIRE(full.has_value());
  for (const auto& [b, s] : points) {
    INFO("b " << b << " s " << s);
    CHECK(reduced->peak_bytes(b, s)->count() == full->peak_bytes(b, s)->count());
    CHECK(reduced->peak_bytes(b, s, 1)->count() == full->peak_bytes(b, s, 1)->count());
  }
  return {std::move(reduced).value(), std::move(full).value()};
}

}  // namespace memplan::testing

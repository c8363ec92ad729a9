// Tests src/core/calibration.cpp: the least-squares fit and the budget it implies, on points
// whose answer is known by construction.
#include <cmath>

#include <catch2/catch.hpp>

#include "memplan/calibration.hpp"

using memplan::Budget;
using memplan::Bytes;
using memplan::CalibrationPoint;

namespace {
constexpr std::int64_t kGiB = 1LL << 30;
}

TEST_CASE("calibration: measured = 1 GiB + 1.1 x predicted is recovered exactly") {
  const auto c = memplan::fit_calibration({{Bytes::of(10 * kGiB), Bytes::of(12 * kGiB)},
                                           {Bytes::of(20 * kGiB), Bytes::of(23 * kGiB)},
                                           {Bytes::of(30 * kGiB), Bytes::of(34 * kGiB)}});
  REQUIRE(c);
  CHECK(c->points == 3);
  CHECK(c->scale == Approx(1.1).epsilon(1e-12));
  CHECK(c->offset_bytes == Approx(kGiB).margin(4));
  CHECK(c->max_residual.count() <= 4);
  CHECK(c->corrected(Bytes::of(40 * kGiB)).count() == Approx(45 * kGiB).margin(8));
}

TEST_CASE("calibration: residuals of a noisy fit") {
  // y = x + {+1, -1, +1, -1} GiB at x = 10, 20, 30, 40 GiB. Means 25 and 25; dx = {-15, -5, 5, 15},
  // dy = {-14, -6, 6, 14}: sxx = 500, sxy = 210 + 30 + 30 + 210 = 480, scale = 480 / 500 = 0.96,
  // offset = 25 - 0.96 x 25 = 1 GiB.
  // Fitted: 10.6, 20.2, 29.8, 39.4; residuals +0.4, -1.2, +1.2, -0.4: max 1.2, rms sqrt(0.8).
  const auto c = memplan::fit_calibration({{Bytes::of(10 * kGiB), Bytes::of(11 * kGiB)},
                                           {Bytes::of(20 * kGiB), Bytes::of(19 * kGiB)},
                                           {Bytes::of(30 * kGiB), Bytes::of(31 * kGiB)},
                                           {Bytes::of(40 * kGiB), Bytes::of(39 * kGiB)}});
  REQUIRE(c);
  CHECK(c->scale == Approx(0.96).epsilon(1e-12));
  CHECK(static_cast<double>(c->offset_bytes) == Approx(1.0 * kGiB).epsilon(1e-9));
  CHECK(static_cast<double>(c->max_residual.count()) == Approx(1.2 * kGiB).epsilon(1e-9));
  CHECK(static_cast<double>(c->rms_residual.count()) == Approx(std::sqrt(0.8) * kGiB).epsilon(1e-9));
}

TEST_CASE("calibration: one point, or one prediction, fits an offset only; none is an error") {
  const auto one = memplan::fit_calibration({{Bytes::of(4 * kGiB), Bytes::of(5 * kGiB)}});
  REQUIRE(one);
  CHECK(one->scale == 1.0);
  CHECK(one->offset_bytes == kGiB);
  CHECK(one->max_residual.count() == 0);
  // Same prediction twice, measured 5 and 7 GiB: offset is the mean difference, residuals 1 GiB.
  const auto same = memplan::fit_calibration(
      {{Bytes::of(4 * kGiB), Bytes::of(5 * kGiB)}, {Bytes::of(4 * kGiB), Bytes::of(7 * kGiB)}});
  REQUIRE(same);
  CHECK(same->scale == 1.0);
  CHECK(same->offset_bytes == 2 * kGiB);
  CHECK(same->max_residual.count() == kGiB);
  CHECK(same->rms_residual.count() == kGiB);
  const auto none = memplan::fit_calibration({});
  REQUIRE(!none);
  CHECK(none.error().message == "no measured runs with a prediction to calibrate from");
}

TEST_CASE("calibration: the corrected prediction is never below the modelled one, the budget never rises") {
  memplan::Calibration lower;  // memplan over-predicts: measured = 0.8 x predicted - 1 GiB
  lower.scale = 0.8;
  lower.offset_bytes = -kGiB;
  CHECK(lower.corrected(Bytes::of(10 * kGiB)) == Bytes::of(10 * kGiB));
  CHECK(lower.corrected(Bytes::zero()) == Bytes::zero());
  const Budget b{Bytes::of(80 * kGiB), Bytes::of(9 * kGiB), Bytes::zero(), false, Bytes::zero()};
  Bytes reduced = Bytes::of(-1);
  const Budget same = memplan::calibrated_budget(b, lower, &reduced);
  CHECK(same.budget() == b.budget());
  CHECK(reduced == Bytes::zero());

  memplan::Calibration higher;  // measured = 1 GiB + 1.1 x predicted
  higher.scale = 1.1;
  higher.offset_bytes = kGiB;
  // B = 71 GiB: the modelled peak may be (71 - 1) / 1.1 = 63.6363... GiB, floored to a byte.
  const Budget lowered = memplan::calibrated_budget(b, higher, &reduced);
  const std::int64_t allowed = (71 * kGiB - kGiB) * 10 / 11;  // exact: 70 GiB x 10 / 11, floored
  CHECK(lowered.budget().count() == allowed);
  CHECK(reduced.count() == 71 * kGiB - allowed);
  CHECK(lowered.capacity == b.capacity);
  CHECK(lowered.headroom == b.headroom);
  // At the boundary the corrected peak fits; a few bytes more (1.1 x 16 > 1 after rounding) do not.
  CHECK(higher.corrected(Bytes::of(allowed)) <= b.budget());
  CHECK(higher.corrected(Bytes::of(allowed + 16)) > b.budget());
  // A budget with nothing left stays as it is.
  const Budget empty{Bytes::of(kGiB), Bytes::of(kGiB), Bytes::zero(), false, Bytes::zero()};
  CHECK(memplan::calibrated_budget(empty, higher).budget() == Bytes::zero());
}

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
  CHECK(c->corrected(Bytes::of(20 * kGiB)).count() == Approx(23 * kGiB).margin(8));
  // 40 GiB is past the data (10 to 30 GiB): the scale is not extrapolated; the correction at
  // 30 GiB (34 - 30 = +4 GiB) is kept: 44 GiB, not the line's 45 (issue 34).
  CHECK(c->corrected(Bytes::of(40 * kGiB)).count() == Approx(44 * kGiB).margin(8));
  CHECK(c->corrected(Bytes::of(5 * kGiB)).count() == Approx(7 * kGiB).margin(8));  // +2 GiB at 10 GiB
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

// ---- issue 34: fits that cannot be trusted ----

TEST_CASE("calibration (issue 34): predictions close together for their size fit an offset only") {
  // Two runs 3 MiB apart at about 20 GiB, measured 20.0 and 20.5 GiB: a line through them has a
  // slope of 166.7 and no residual. The spread (1.5 MiB) is far under 5% of the mean prediction.
  const std::int64_t mib = 1 << 20;
  const auto c = memplan::fit_calibration({{Bytes::of(20 * kGiB), Bytes::of(20 * kGiB)},
                                           {Bytes::of(20 * kGiB + 3 * mib), Bytes::of(20 * kGiB + kGiB / 2)}});
  REQUIRE(c);
  CHECK(c->scale == 1.0);
  // The mean difference: (0 + 512 MiB - 3 MiB) / 2.
  CHECK(c->offset_bytes == (512 - 3) * mib / 2);
  CHECK(c->max_residual.count() > 0);  // the disagreement is shown, not fitted away
  // A slope outside [0.5, 2] is not taken either: measured = 3 x predicted over 10..30 GiB.
  const auto steep = memplan::fit_calibration({{Bytes::of(10 * kGiB), Bytes::of(30 * kGiB)},
                                               {Bytes::of(20 * kGiB), Bytes::of(60 * kGiB)}});
  REQUIRE_FALSE(steep);  // offset only: +30 GiB, more than half of the mean measured 45 GiB
}

TEST_CASE("calibration (issue 32 item 8, issue 34): an offset of -70 GiB is refused") {
  // Predicted 100 and 110 GiB, measured 30 and 40 GiB (a different config, or another GPU's run):
  // scale 1, offset -70 GiB, more than half of the mean measured 35 GiB.
  const auto c = memplan::fit_calibration({{Bytes::of(100 * kGiB), Bytes::of(30 * kGiB)},
                                           {Bytes::of(110 * kGiB), Bytes::of(40 * kGiB)}});
  REQUIRE_FALSE(c);
  CHECK(c.error().message ==
        "the fit's offset -70.00 GiB is more than half of the mean measured peak (35.00 GiB): the predictions and "
        "the measurements disagree too much to calibrate");
}

TEST_CASE("calibration (issue 34): stored values are checked before use") {
  memplan::Calibration c;
  c.points = 2;
  c.scale = 1e300;
  CHECK(memplan::check_calibration(c).error().message == "scale 1e+300 is outside [0.5, 2]");
  c.scale = std::nan("");
  CHECK_FALSE(memplan::check_calibration(c));
  c.scale = 1.0;
  c.offset_bytes = -9000000000000000000;
  CHECK(memplan::check_calibration(c).error().message == "offset -9000000000000000000 bytes is larger than 64.00 GiB");
  c.offset_bytes = -kGiB;
  c.max_predicted = Bytes::of(kGiB);  // half of the largest prediction: 0.5 GiB
  CHECK(memplan::check_calibration(c).error().message == "offset -1073741824 bytes is larger than 0.50 GiB");
  c.max_predicted = Bytes::of(20 * kGiB);
  CHECK(memplan::check_calibration(c));
}

#include "memplan/calibration.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace memplan {

namespace {

double residual(const Calibration& c, const CalibrationPoint& p) {
  return static_cast<double>(p.measured.count()) -
         (static_cast<double>(c.offset_bytes) + c.scale * static_cast<double>(p.predicted.count()));
}

}  // namespace

Bytes Calibration::corrected(Bytes predicted) const {
  double x = static_cast<double>(predicted.count());
  double shift = 0;  // beyond the data: the correction at the nearer end, as a constant
  if (min_predicted > Bytes::zero() && predicted < min_predicted) {
    shift = x - static_cast<double>(min_predicted.count());
    x = static_cast<double>(min_predicted.count());
  } else if (max_predicted > Bytes::zero() && predicted > max_predicted) {
    shift = x - static_cast<double>(max_predicted.count());
    x = static_cast<double>(max_predicted.count());
  }
  const double v = static_cast<double>(offset_bytes) + scale * x + shift;
  if (!(v < 9.0e18)) return predicted;  // absurd inputs: keep the model's figure
  return std::max(predicted, Bytes::of(static_cast<std::int64_t>(std::llround(v))));
}

Result<Calibration> fit_calibration(const std::vector<CalibrationPoint>& points) {
  if (points.empty())
    return make_error(ErrorCode::kInvalidArgument, "no measured runs with a prediction to calibrate from",
                      "run memplan profile --save with --model or --config so each rung has a prediction");
  const double n = static_cast<double>(points.size());
  double mx = 0, my = 0;
  for (const auto& p : points) {
    mx += static_cast<double>(p.predicted.count());
    my += static_cast<double>(p.measured.count());
  }
  mx /= n;
  my /= n;
  double sxx = 0, sxy = 0;
  for (const auto& p : points) {
    const double dx = static_cast<double>(p.predicted.count()) - mx;
    sxx += dx * dx;
    sxy += dx * (static_cast<double>(p.measured.count()) - my);
  }
  Calibration c;
  c.points = static_cast<int>(points.size());
  c.min_predicted = c.max_predicted = points.front().predicted;
  for (const auto& p : points) {
    c.min_predicted = std::min(c.min_predicted, p.predicted);
    c.max_predicted = std::max(c.max_predicted, p.predicted);
  }
  // Predictions closer together than 1 MiB, or than 5% of their mean, cannot tell a scale from an
  // offset: two runs 3 MiB apart at 20 GiB fit a scale of 166.7 with no residual.
  const double spread = std::sqrt(sxx / n);
  const double slope = sxx > 0 ? sxy / sxx : 0;
  if (points.size() >= 2 && spread >= 1024.0 * 1024.0 && spread >= 0.05 * std::abs(mx) &&
      slope >= kMinCalibrationScale && slope <= kMaxCalibrationScale) {
    c.scale = sxy / sxx;
    c.offset_bytes = std::llround(my - c.scale * mx);
  } else {
    c.scale = 1.0;
    c.offset_bytes = std::llround(my - mx);
  }
  double ss = 0, mx_abs = 0;
  for (const auto& p : points) {
    const double r = residual(c, p);
    ss += r * r;
    mx_abs = std::max(mx_abs, std::abs(r));
  }
  c.rms_residual = Bytes::of(std::llround(std::sqrt(ss / n)));
  c.max_residual = Bytes::of(std::llround(mx_abs));
  if (std::abs(static_cast<double>(c.offset_bytes)) > 0.5 * std::abs(my))
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("the fit's offset {:.2f} GiB is more than half of the mean measured peak "
                                  "({:.2f} GiB): the predictions and the measurements disagree too much to calibrate",
                                  static_cast<double>(c.offset_bytes) / 1073741824.0, my / 1073741824.0),
                      "check that the measured runs are the configs memplan predicted (the same model, batch and "
                      "GPU), then run memplan profile --save again");
  return c;
}

Status check_calibration(const Calibration& c) {
  if (!std::isfinite(c.scale) || c.scale < kMinCalibrationScale || c.scale > kMaxCalibrationScale)
    return make_error(ErrorCode::kInvalidConfig,
                      fmt::format("scale {} is outside [{:g}, {:g}]", c.scale, kMinCalibrationScale,
                                  kMaxCalibrationScale));
  const double limit = c.max_predicted > Bytes::zero() ? 0.5 * static_cast<double>(c.max_predicted.count())
                                                       : 64.0 * 1073741824.0;
  if (std::abs(static_cast<double>(c.offset_bytes)) > limit)
    return make_error(ErrorCode::kInvalidConfig,
                      fmt::format("offset {} bytes is larger than {:.2f} GiB", c.offset_bytes, limit / 1073741824.0));
  if (c.points < 1) return make_error(ErrorCode::kInvalidConfig, fmt::format("points {} is not positive", c.points));
  return Ok{};
}

Budget calibrated_budget(const Budget& budget, const Calibration& c, Bytes* reduced_by) {
  const Bytes b = budget.budget();
  Bytes allowed = b;
  if (c.scale > 0 && b > Bytes::zero()) {
    const double p = std::floor((static_cast<double>(b.count()) - static_cast<double>(c.offset_bytes)) / c.scale);
    if (p < static_cast<double>(b.count()))
      allowed = Bytes::of(std::max<std::int64_t>(0, static_cast<std::int64_t>(p)));
  }
  Budget out = budget;
  out.safety_margin += b - allowed;
  if (reduced_by) *reduced_by = b - allowed;
  return out;
}

}  // namespace memplan

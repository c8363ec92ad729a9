#include "memplan/calibration.hpp"

#include <algorithm>
#include <cmath>

namespace memplan {

namespace {

double residual(const Calibration& c, const CalibrationPoint& p) {
  return static_cast<double>(p.measured.count()) -
         (static_cast<double>(c.offset_bytes) + c.scale * static_cast<double>(p.predicted.count()));
}

}  // namespace

Bytes Calibration::corrected(Bytes predicted) const {
  const double v = static_cast<double>(offset_bytes) + scale * static_cast<double>(predicted.count());
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
  // Predictions closer together than 1 MiB cannot tell a scale from an offset.
  const double spread = std::sqrt(sxx / n);
  if (points.size() >= 2 && spread >= 1024.0 * 1024.0 && sxy / sxx > 0) {
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
  return c;
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

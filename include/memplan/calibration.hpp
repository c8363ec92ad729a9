// Calibration from measured runs (memplan profile --save, memplan calibrate; docs/profile.md#calibration).
// memplan predicts the tensors the training step allocates; what it cannot see (the user's own
// model code, a custom collator, an allocator setting, the process's CPU side on unified memory)
// shows up as the difference between a measured peak and the prediction. Per machine, that
// difference is fitted as measured = offset + scale x predicted by least squares. A corrected
// prediction is never below the modelled one.
#pragma once

#include <cstdint>
#include <vector>

#include "memplan/bytes.hpp"
#include "memplan/gpu.hpp"
#include "memplan/result.hpp"

namespace memplan {

struct CalibrationPoint {
  Bytes predicted;
  Bytes measured;
};

struct Calibration {
  std::int64_t offset_bytes = 0;  // may be negative: memplan over-predicts by a constant
  double scale = 1.0;             // 1 when the points cannot determine it (one point, one prediction)
  int points = 0;
  Bytes rms_residual;  // sqrt(mean(residual^2)), residual = measured - (offset + scale x predicted)
  Bytes max_residual;  // max |residual|

  // max(predicted, offset + scale x predicted), rounded to a byte.
  Bytes corrected(Bytes predicted) const;
};

// Least squares over the points; additive only (scale 1) when fewer than two distinct predictions
// or when the fitted scale is not positive. An error without points.
Result<Calibration> fit_calibration(const std::vector<CalibrationPoint>& points);

// The budget for the *modelled* peak once predictions are corrected: the largest p with
// corrected(p) <= budget.budget(), i.e. min(B, floor((B - offset) / scale)), with the difference
// added to the safety margin. Never larger than the input budget. `reduced_by` receives it.
Budget calibrated_budget(const Budget& budget, const Calibration& c, Bytes* reduced_by = nullptr);

}  // namespace memplan

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
  // The predictions the fit saw (0: unknown, a store written before they were kept). The scale is
  // not extrapolated past them: beyond, the correction at the nearer end is kept as a constant.
  Bytes min_predicted;
  Bytes max_predicted;

  // max(predicted, offset + scale x p) for p = predicted within [min_predicted, max_predicted];
  // beyond, predicted plus the correction at the nearer end. Rounded to a byte.
  Bytes corrected(Bytes predicted) const;
};

// Bounds of a usable calibration (issue 34): a scale outside [kMinScale, kMaxScale] or an offset
// larger than half of the memory measured says the predictions and the measurements disagree too
// much to be corrected by a line.
inline constexpr double kMinCalibrationScale = 0.5;
inline constexpr double kMaxCalibrationScale = 2.0;

// Least squares over the points; additive only (scale 1) when fewer than two distinct predictions,
// when the predictions are too close together for their size (their spread under 5% of their mean:
// two runs 3 MiB apart would fit any slope), or when the fitted scale is outside the bounds above.
// An error without points, or when the offset is larger than half of the mean measured peak.
Result<Calibration> fit_calibration(const std::vector<CalibrationPoint>& points);

// Whether stored values can be used (scale finite and within the bounds, |offset| within half of
// the largest prediction seen, or 64 GiB when unknown); the reason when not.
Status check_calibration(const Calibration& c);

// The budget for the *modelled* peak once predictions are corrected: the largest p with
// corrected(p) <= budget.budget(), i.e. min(B, floor((B - offset) / scale)), with the difference
// added to the safety margin. Never larger than the input budget. `reduced_by` receives it.
Budget calibrated_budget(const Budget& budget, const Calibration& c, Bytes* reduced_by = nullptr);

}  // namespace memplan

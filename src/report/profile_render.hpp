// memplan profile's results table (seed 000's template: micro-batch, grad-accum, seq-len, peak,
// headroom, status, notes; with memplan's prediction beside each rung when a model is known) and
// memplan calibrate's fits, as text, markdown or JSON (docs/profile.md#output).
#pragma once

#include <string>
#include <vector>

#include "io/measure/calibration_store.hpp"
#include "io/measure/profile.hpp"
#include "report/format.hpp"

namespace memplan::report {

std::string render_profile(const io::ProfileResult& result, Format format);

// `saved`: where --save stored the runs ("" when not saved).
std::string render_calibration(const std::vector<io::MachineFit>& fits, std::size_t runs, std::size_t skipped,
                               const std::string& written_to, Format format);

}  // namespace memplan::report

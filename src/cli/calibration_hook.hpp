// The one place plan, check and --auto use calibration (memplan calibrate, docs/profile.md#calibration):
// when this machine (host name and GPU profile) has a fit, the budget for the modelled peak is
// lowered so that the corrected prediction max(p, offset + scale x p) fits, and a note says so.
// MEMPLAN_CALIBRATION=off turns it off. Never raises a budget.
#pragma once

#include "cli/plan_flags.hpp"
#include "io/inputs.hpp"
#include "memplan/gpu.hpp"

namespace memplan::cli {

Budget apply_calibration(const GpuTarget& gpu, const Budget& budget, io::ResolvedInputs& in);

}  // namespace memplan::cli

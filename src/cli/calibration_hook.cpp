#include "cli/calibration_hook.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include "io/measure/calibration_store.hpp"

namespace memplan::cli {

Budget apply_calibration(const GpuTarget& gpu, const Budget& budget, io::ResolvedInputs& in) {
  if (const char* off = std::getenv("MEMPLAN_CALIBRATION"); off && std::string(off) == "off") return budget;
  if (!gpu.profile) return budget;
  auto dir = io::data_dir();
  if (!dir) return budget;
  auto fits = io::read_fits(*dir);
  if (!fits) {
    in.warnings.push_back("calibration not used: " + fits.error().to_string());
    return budget;
  }
  const io::MachineId here{io::host_name(), gpu.profile->name};
  for (const auto& f : *fits) {
    if (!(f.machine == here)) continue;
    const Calibration& c = f.calibration;
    Bytes reduced;
    const Budget out = calibrated_budget(budget, c, &reduced);
    const std::string sign = c.offset_bytes < 0 ? "-" : "+";
    in.notes.push_back(
        fmt::format("calibration for {} / {} ({} measured run{}, rms residual {}): peak = max(predicted, {:.4f} x "
                    "predicted {} {}); "
                    "budget for the predicted peak {} by {}",
                    here.host, here.gpu, c.points, c.points == 1 ? "" : "s", format_human(c.rms_residual), c.scale,
                    sign, format_human(Bytes::of(c.offset_bytes < 0 ? -c.offset_bytes : c.offset_bytes)),
                    reduced > Bytes::zero() ? "lowered" : "unchanged", format_human(reduced)));
    return out;
  }
  return budget;
}

}  // namespace memplan::cli

// memplan calibrate: fits, per machine, measured = offset + scale x predicted over the runs
// `memplan profile --save` stored, writes the fits where plan, check and --auto find them, and
// prints them with their residuals (docs/profile.md#calibration). --dry-run prints, writes nothing.
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "io/measure/calibration_store.hpp"
#include "report/profile_render.hpp"

namespace memplan::cli {

namespace {

struct CalibrateOptions {
  bool dry_run = false;
  std::string format = "text";
};

}  // namespace

Command register_calibrate(CLI::App& root) {
  auto opts = std::make_shared<CalibrateOptions>();
  CLI::App* sub = root.add_subcommand(
      "calibrate",
      "Fit this machine's correction from the runs memplan profile --save measured; plan and check use it");
  sub->add_flag("--dry-run", opts->dry_run, "Print the fits, write nothing");
  sub->add_option("--format", opts->format, "text (default), json, markdown");
  return {sub, [opts](Context& ctx) -> Result<int> {
            MEMPLAN_TRY(auto format, report::parse_format(opts->format));
            MEMPLAN_TRY(auto dir, io::data_dir());
            MEMPLAN_TRY(auto runs, io::read_measurements(dir));
            std::size_t without = 0;
            for (const auto& r : runs) without += r.predicted ? 0 : 1;
            if (runs.size() == without)
              return make_error(ErrorCode::kInvalidArgument,
                                fmt::format("no measured runs with a prediction in {}/measurements.jsonl ({} run{})",
                                            dir, runs.size(), runs.size() == 1 ? "" : "s"),
                                "run memplan profile --save with --model or --config first");
            const auto fits = io::fit_machines(runs, io::utc_now());
            std::string written;
            if (!opts->dry_run) {
              MEMPLAN_TRY(auto ok, io::write_fits(dir, fits));
              (void)ok;
              written = dir + "/calibration.json";
            }
            ctx.out << report::render_calibration(fits, runs.size(), without, written, format);
            return kExitOk;
          }};
}

}  // namespace memplan::cli

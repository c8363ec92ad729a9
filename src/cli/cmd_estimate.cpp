// memplan estimate: the memory breakdown of one configuration.
#include <memory>
#include <optional>
#include <ostream>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "cli/plan_flags.hpp"
#include "cli/training_flags.hpp"
#include "memplan/engine.hpp"
#include "report/estimate_render.hpp"

namespace memplan::cli {

namespace {
struct EstimateOptions {
  TrainingFlags flags;
  BudgetFlags budget;  // --gpu, --gpu-memory, --auto: also say whether it fits
  std::string format = "text";
};
}  // namespace

Command register_estimate(CLI::App& root) {
  auto opts = std::make_shared<EstimateOptions>();
  CLI::App* sub = root.add_subcommand("estimate", "Memory breakdown of one training configuration");
  add_training_flags(*sub, opts->flags);
  add_gpu_flags(*sub, opts->budget);
  sub->add_option("--format", opts->format, "text (default), json, markdown, html (one self-contained page with charts)");
  return {sub, [opts](Context& ctx) -> Result<int> {
            MEMPLAN_TRY(auto format, report::parse_format(opts->format, /*html=*/true));
            if (opts->flags.show_config) return show_config(ctx.out, opts->flags, format);
            MEMPLAN_TRY(auto inputs, load_inputs(opts->flags));
            MEMPLAN_TRY(auto gpu, resolve_gpu(opts->budget));
            std::optional<report::EstimateFit> fit;
            if (gpu) {
              MEMPLAN_TRY(auto budget, budget_for(*gpu, opts->budget, inputs.resolved.config, &inputs.resolved));
              fit = report::EstimateFit{gpu->description, budget};
            }
            MEMPLAN_TRY(auto est, estimate(inputs.resolved.model, inputs.resolved.config));
            ctx.out << report::render_estimate(inputs.resolved, est, format, fit);
            return fit && !fit->fits(est) ? kExitDoesNotFit : kExitOk;
          }};
}

}  // namespace memplan::cli

// memplan estimate: the memory breakdown of one configuration.
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "cli/training_flags.hpp"
#include "memplan/engine.hpp"
#include "report/estimate_render.hpp"

namespace memplan::cli {

namespace {
struct EstimateOptions {
  TrainingFlags flags;
  std::string format = "text";
};
}  // namespace

Command register_estimate(CLI::App& root) {
  auto opts = std::make_shared<EstimateOptions>();
  CLI::App* sub = root.add_subcommand("estimate", "Memory breakdown of one training configuration");
  add_training_flags(*sub, opts->flags);
  sub->add_option("--format", opts->format, "text (default), json, markdown");
  return {sub, [opts](Context& ctx) -> Result<int> {
            MEMPLAN_TRY(auto format, report::parse_format(opts->format));
            if (opts->flags.show_config) return show_config(ctx.out, opts->flags, format);
            MEMPLAN_TRY(auto inputs, load_inputs(opts->flags));
            MEMPLAN_TRY(auto est, estimate(inputs.resolved.model, inputs.resolved.config));
            ctx.out << report::render_estimate(inputs.resolved, est, format);
            return kExitOk;
          }};
}

}  // namespace memplan::cli

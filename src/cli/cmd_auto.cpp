// memplan --auto (also `memplan auto`): detect the GPU, read the training config, print the
// memory breakdown at the recommended micro-batch and the plan; --apply writes it back.
#include <filesystem>
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "cli/plan_flags.hpp"
#include "cli/training_flags.hpp"
#include "memplan/engine.hpp"
#include "memplan/plan.hpp"
#include "report/plan_render.hpp"

namespace memplan::cli {

namespace {

struct AutoOptions {
  TrainingFlags flags;
  BudgetFlags budget;
  SearchFlags search;
  std::string format = "text";
};

// The config `memplan --auto` reads when neither --config nor --model says what to evaluate:
// the first of these that exists in the current directory (seed 002 keeps conf/config.yaml).
constexpr const char* kConfigCandidates[] = {"train.yaml",  "train.yml",        "training.yaml",
                                             "config.yaml", "conf/config.yaml", "configs/train.yaml"};

std::optional<std::string> discover_config() {
  std::error_code ec;
  for (const char* name : kConfigCandidates)
    if (std::filesystem::is_regular_file(name, ec)) return std::string(name);
  return std::nullopt;
}

}  // namespace

bool is_top_level_auto(const std::vector<std::string>& args) {
  if (args.empty() || args[0].empty() || args[0][0] != '-') return false;  // a subcommand comes first
  for (const auto& a : args)
    if (a == "--auto") return true;
  return false;
}

Command register_auto(CLI::App& root) {
  auto opts = std::make_shared<AutoOptions>();
  CLI::App* sub = root.add_subcommand(
      "auto", "What `memplan --auto` runs: detect the GPU, read the config, print the breakdown and the plan");
  add_training_flags(*sub, opts->flags);
  add_budget_flags(*sub, opts->budget);
  add_search_flags(*sub, opts->search);
  sub->add_option("--format", opts->format, "text (default), json, markdown");
  return {sub, [opts](Context& ctx) -> Result<int> {
            MEMPLAN_TRY(auto format, report::parse_format(opts->format));
            TrainingFlags flags = opts->flags;
            std::optional<std::string> found;
            // The training settings come from the project's config even when --model or
            // --model-params names the model (a flag then beats the config's model).
            if (flags.configs.empty()) {
              found = discover_config();
              if (found) flags.configs.push_back(*found);
            }
            if (flags.show_config) return show_config(ctx.out, flags, format);
            // The GPU before the config: on a machine without one, that is the news (unless
            // --gpu or --gpu-memory names one).
            MEMPLAN_TRY(auto gpu, resolve_gpu(opts->budget, /*detect_by_default=*/true));
            if (flags.configs.empty() && flags.model.empty() && flags.model_params.empty())
              return make_error(ErrorCode::kInvalidArgument,
                                "no training config given, and none found in the current directory",
                                fmt::format("give --config FILE (or --model ID); memplan looks for {}",
                                            fmt::join(kConfigCandidates, ", ")));
            MEMPLAN_TRY(auto locks, lock_for_apply(opts->search, flags.configs));
            MEMPLAN_TRY(auto loaded, load_inputs(flags));
            if (auto s = refuse_partial_config(opts->search, loaded.loaded); !s) return s.error();
            io::ResolvedInputs& inputs = loaded.resolved;
            if (found)
              inputs.notes.push_back(fmt::format("config: {} (found in the current directory; --config chooses)", *found));

            inputs.notes.push_back("GPU: " + gpu->description);
            MEMPLAN_TRY(auto budget, budget_for(*gpu, opts->budget, inputs.config, &inputs));
            MEMPLAN_TRY(auto req, plan_request(budget, opts->budget, opts->search, inputs));
            MEMPLAN_TRY(auto p, plan(inputs.model, inputs.config, req));

            const Recommendation& r = p.recommendation;
            TrainingConfig at = inputs.config;
            at.micro_batch = r.fits ? r.batch.micro_batch : 1;
            if (r.fits) at.grad_accum = r.batch.grad_accum;
            MEMPLAN_TRY(auto breakdown, estimate(inputs.model, at));
            // A plan made from part of the config says so before anything else.
            if (format == report::Format::kText && loaded.loaded)
              for (const auto& w : loaded.loaded->not_followed)
                ctx.out << "warning: this plan leaves out part of the config: " << w << "\n";
            ctx.out << report::render_auto(inputs, p, breakdown, format);

            const int code = r.fits ? kExitOk : kExitDoesNotFit;
            if (!opts->search.apply && !opts->search.dry_run) return code;
            io::Edits edits;
            edits.micro_batch = r.batch.micro_batch;
            edits.grad_accum = r.batch.grad_accum;
            std::ostream& report_to = format == report::Format::kJson ? ctx.err : ctx.out;
            return write_back(report_to, loaded.loaded, edits, opts->search.dry_run, r.fits, code);
          }};
}

}  // namespace memplan::cli

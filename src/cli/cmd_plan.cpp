// memplan plan: the largest micro-batch that fits the budget, the grad-accum that keeps the global
// batch, utilization tiers, and what to change when nothing fits; --solve seq-len for the longest
// sequence at a given batch.
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "cli/plan_flags.hpp"
#include "cli/training_flags.hpp"
#include "memplan/plan.hpp"
#include "memplan/text.hpp"
#include "report/plan_render.hpp"

namespace memplan::cli {

namespace {

struct PlanOptions {
  TrainingFlags flags;
  BudgetFlags budget;
  std::string format = "text";
  std::string solve = "batch";
  std::string tolerance = "5%";
  std::int64_t max_micro_batch = PlanRequest{}.max_micro_batch;
  std::int64_t max_seq_len = 0;
};

Result<double> parse_tolerance(std::string text) {
  text = trim(text);
  if (!text.empty() && text.back() == '%') text.pop_back();
  auto v = parse_double(text, "--global-batch-tolerance");
  if (!v) return v.error();
  return *v / 100.0;
}

}  // namespace

Command register_plan(CLI::App& root) {
  auto opts = std::make_shared<PlanOptions>();
  CLI::App* sub = root.add_subcommand(
      "plan", "The largest micro-batch that fits the GPU, with grad-accum for the global batch, tiers, and fixes");
  add_training_flags(*sub, opts->flags);
  add_budget_flags(*sub, opts->budget);
  sub->add_option("--global-batch-tolerance", opts->tolerance,
                  "How far the global batch may miss the target to keep a larger micro-batch (default 5%)")
      ->group("Budget");
  sub->add_option("--max-micro-batch", opts->max_micro_batch, "Largest micro-batch the search tries (default 65536)")
      ->group("Budget");
  sub->add_option("--solve", opts->solve, "What to solve for: batch (default) or seq-len (the longest sequence at --batch)");
  sub->add_option("--max-seq-len", opts->max_seq_len,
                  "--solve seq-len: longest sequence tried (default: the model's max_position_embeddings)");
  sub->add_option("--format", opts->format, "text (default), json, markdown");
  return {sub, [opts](Context& ctx) -> Result<int> {
            MEMPLAN_TRY(auto format, report::parse_format(opts->format));
            const std::string solve = to_lower(trim(opts->solve));
            if (solve != "batch" && solve != "seq-len" && solve != "seq_len")
              return make_error(ErrorCode::kUnknownName, fmt::format("--solve: unknown '{}'", opts->solve),
                                did_you_mean(solve, {"batch", "seq-len"}));
            MEMPLAN_TRY(auto inputs, apply_training_flags(opts->flags, io::ResolvedInputs{}));
            MEMPLAN_TRY(auto budget, resolve_budget(opts->budget));
            if (solve != "batch") {
              SeqLenRequest req{budget, opts->max_seq_len};
              MEMPLAN_TRY(auto p, solve_seq_len(inputs.model, inputs.config, req));
              ctx.out << report::render_seq_len_plan(inputs, p, format);
              return p.fits ? kExitOk : kExitDoesNotFit;
            }
            PlanRequest req;
            req.budget = budget;
            req.target_global_batch = resolve_target_global_batch(opts->budget, inputs);
            MEMPLAN_TRY(req.global_batch_tolerance, parse_tolerance(opts->tolerance));
            req.max_micro_batch = opts->max_micro_batch;
            MEMPLAN_TRY(auto p, plan(inputs.model, inputs.config, req));
            ctx.out << report::render_plan(inputs, p, format);
            return p.recommendation.fits ? kExitOk : kExitDoesNotFit;
          }};
}

}  // namespace memplan::cli

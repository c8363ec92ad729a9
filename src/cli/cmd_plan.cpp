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
#include "io/apply.hpp"
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
  bool apply = false;
  bool dry_run = false;
};

// --apply / --dry-run: write the recommendation back into the --config files it came from.
Result<int> write_back(Context& ctx, const Inputs& inputs, const io::Edits& edits, bool dry_run, bool fits,
                       report::Format format, int exit_code) {
  if (!inputs.loaded)
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{} needs the config files to write to", dry_run ? "--dry-run" : "--apply"),
                      "give them with --config FILE");
  if (!fits)
    return make_error(ErrorCode::kInvalidArgument, "nothing fits the budget, so there is nothing to write",
                      "apply one of the suggested changes first");
  MEMPLAN_TRY(auto plan, io::plan_apply(*inputs.loaded, edits));
  // JSON stays parseable on stdout; the file report goes to stderr.
  std::ostream& out = format == report::Format::kJson ? ctx.err : ctx.out;
  if (dry_run) {
    out << io::render_dry_run(plan);
    return exit_code;
  }
  MEMPLAN_TRY(auto result, io::commit_apply(plan, io::real_file_system()));
  out << io::render_apply_result(plan, result);
  return exit_code;
}

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
  auto* apply = sub->add_flag("--apply", opts->apply,
                              "Write the recommended values into the --config files (a FILE.backup is kept)");
  sub->add_flag("--dry-run", opts->dry_run, "Print the unified diff --apply would make, change nothing")
      ->excludes(apply);
  return {sub, [opts](Context& ctx) -> Result<int> {
            MEMPLAN_TRY(auto format, report::parse_format(opts->format));
            const std::string solve = to_lower(trim(opts->solve));
            if (solve != "batch" && solve != "seq-len" && solve != "seq_len")
              return make_error(ErrorCode::kUnknownName, fmt::format("--solve: unknown '{}'", opts->solve),
                                did_you_mean(solve, {"batch", "seq-len"}));
            MEMPLAN_TRY(auto loaded, load_inputs(opts->flags));
            const io::ResolvedInputs& inputs = loaded.resolved;
            MEMPLAN_TRY(auto budget, resolve_budget(opts->budget));
            const bool write = opts->apply || opts->dry_run;
            if (solve != "batch") {
              SeqLenRequest req{budget, opts->max_seq_len};
              MEMPLAN_TRY(auto p, solve_seq_len(inputs.model, inputs.config, req));
              ctx.out << report::render_seq_len_plan(inputs, p, format);
              const int code = p.fits ? kExitOk : kExitDoesNotFit;
              if (!write) return code;
              io::Edits edits;
              edits.seq_len = p.seq_len;
              return write_back(ctx, loaded, edits, opts->dry_run, p.fits, format, code);
            }
            PlanRequest req;
            req.budget = budget;
            req.target_global_batch = resolve_target_global_batch(opts->budget, inputs);
            MEMPLAN_TRY(req.global_batch_tolerance, parse_tolerance(opts->tolerance));
            req.max_micro_batch = opts->max_micro_batch;
            MEMPLAN_TRY(auto p, plan(inputs.model, inputs.config, req));
            ctx.out << report::render_plan(inputs, p, format);
            const int code = p.recommendation.fits ? kExitOk : kExitDoesNotFit;
            if (!write) return code;
            io::Edits edits;
            edits.micro_batch = p.recommendation.batch.micro_batch;
            edits.grad_accum = p.recommendation.batch.grad_accum;
            return write_back(ctx, loaded, edits, opts->dry_run, p.recommendation.fits, format, code);
          }};
}

}  // namespace memplan::cli

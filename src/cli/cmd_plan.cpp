// memplan plan: the largest micro-batch that fits the budget, the grad-accum that keeps the global
// batch, utilization tiers, and what to change when nothing fits; --solve seq-len for the longest
// sequence at a given batch.
#include <algorithm>
#include <memory>
#include <optional>
#include <ostream>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "cli/plan_flags.hpp"
#include "cli/training_flags.hpp"
#include "memplan/engine.hpp"
#include "memplan/plan.hpp"
#include "memplan/text.hpp"
#include "io/edit/apply.hpp"
#include "report/plan_render.hpp"

namespace memplan::cli {

namespace {

// --format html: the plan with the breakdown at the recommendation and the peak against
// micro-batch (1, 2, 4, ... past twice the recommendation, and the recommendation and one more).
std::string plan_page(const io::ResolvedInputs& in, const Plan& p) {
  auto est = Estimator::create(in.model, in.config);
  std::optional<Estimate> breakdown;
  std::optional<Sweep> curve;
  if (est) {
    const std::int64_t rec = p.recommendation.batch.micro_batch;
    if (auto e = est->at(rec, p.recommendation.seq_len)) breakdown = std::move(*e);
    std::vector<std::int64_t> mbs = {rec, rec + 1};
    for (std::int64_t b = 1; b <= 4096 && b <= 4 * std::max<std::int64_t>(rec, 2); b *= 2) mbs.push_back(b);
    std::sort(mbs.begin(), mbs.end());
    mbs.erase(std::unique(mbs.begin(), mbs.end()), mbs.end());
    SweepRequest req;
    req.budget = p.budget;
    req.micro_batches = mbs;
    req.seq_lens = {p.recommendation.seq_len};
    if (auto s = sweep(*est, req)) curve = std::move(*s);
  }
  return report::render_plan_page(in, p, breakdown ? &*breakdown : nullptr, curve ? &*curve : nullptr);
}

}  // namespace

namespace {

struct PlanOptions {
  TrainingFlags flags;
  BudgetFlags budget;
  SearchFlags search;
  std::string format = "text";
  std::string solve = "batch";
  std::int64_t max_seq_len = 0;
};

}  // namespace

Command register_plan(CLI::App& root) {
  auto opts = std::make_shared<PlanOptions>();
  CLI::App* sub = root.add_subcommand(
      "plan", "The largest micro-batch that fits the GPU, with grad-accum for the global batch, tiers, and fixes");
  add_training_flags(*sub, opts->flags);
  add_budget_flags(*sub, opts->budget);
  add_search_flags(*sub, opts->search);
  sub->add_option("--solve", opts->solve, "What to solve for: batch (default) or seq-len (the longest sequence at --batch)");
  sub->add_option("--max-seq-len", opts->max_seq_len,
                  "--solve seq-len: longest sequence tried (default: the model's max_position_embeddings)");
  sub->add_option("--format", opts->format, "text (default), json, markdown, html (one self-contained page with charts)");
  return {sub, [opts](Context& ctx) -> Result<int> {
            MEMPLAN_TRY(auto format, report::parse_format(opts->format, /*html=*/true));
            const std::string solve = to_lower(trim(opts->solve));
            if (solve != "batch" && solve != "seq-len" && solve != "seq_len")
              return make_error(ErrorCode::kUnknownName, fmt::format("--solve: unknown '{}'", opts->solve),
                                did_you_mean(solve, {"batch", "seq-len"}));
            // --show-config: the inputs and where each came from, not the plan.
            if (opts->flags.show_config) return show_config(ctx.out, opts->flags, format);
            MEMPLAN_TRY(auto locks, lock_for_apply(opts->search, opts->flags.configs));
            MEMPLAN_TRY(auto loaded, load_inputs(opts->flags));
            if (auto s = refuse_partial_config(opts->search, loaded.loaded); !s) return s.error();
            MEMPLAN_TRY(auto budget, resolve_budget(opts->budget, loaded.resolved));
            const io::ResolvedInputs& inputs = loaded.resolved;
            const bool write = opts->search.apply || opts->search.dry_run;
            // JSON stays parseable on stdout; the file report goes to stderr.
            std::ostream& report_to = format == report::Format::kJson ? ctx.err : ctx.out;
            if (solve != "batch") {
              if (format == report::Format::kHtml)
                return make_error(ErrorCode::kInvalidArgument, "--format html draws the batch plan only",
                                  "use --format json or text with --solve seq-len");
              SeqLenRequest req{budget, opts->max_seq_len};
              MEMPLAN_TRY(auto p, solve_seq_len(inputs.model, inputs.config, req));
              ctx.out << report::render_seq_len_plan(inputs, p, format);
              const int code = p.fits ? kExitOk : kExitDoesNotFit;
              if (!write) return code;
              io::Edits edits;
              edits.seq_len = p.seq_len;
              return write_back(report_to, loaded.loaded, edits, opts->search.dry_run, p.fits, code);
            }
            MEMPLAN_TRY(auto req, plan_request(budget, opts->budget, opts->search, inputs));
            MEMPLAN_TRY(auto p, plan(inputs.model, inputs.config, req));
            ctx.out << (format == report::Format::kHtml ? plan_page(inputs, p) : report::render_plan(inputs, p, format));
            const int code = p.recommendation.fits ? kExitOk : kExitDoesNotFit;
            if (!write) return code;
            io::Edits edits;
            edits.micro_batch = p.recommendation.batch.micro_batch;
            edits.grad_accum = p.recommendation.batch.grad_accum;
            return write_back(report_to, loaded.loaded, edits, opts->search.dry_run, p.recommendation.fits, code);
          }};
}

}  // namespace memplan::cli

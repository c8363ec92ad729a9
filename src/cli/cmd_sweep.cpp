// memplan sweep: predicted peak over a grid of micro-batches and sequence lengths, as seed 000's
// results table and a terminal chart.
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "cli/plan_flags.hpp"
#include "cli/training_flags.hpp"
#include "memplan/plan.hpp"
#include "report/plan_render.hpp"

namespace memplan::cli {

namespace {

constexpr std::int64_t kMaxBatch = 1 << 20;   // validate(TrainingConfig) limits
constexpr std::int64_t kMaxSeqLen = 1 << 24;

struct SweepOptions {
  TrainingFlags flags;
  BudgetFlags budget;
  std::string batches = "1,2,4,8,16,32";
  std::string seq_lens;
  std::string format = "text";
};

}  // namespace

Command register_sweep(CLI::App& root) {
  auto opts = std::make_shared<SweepOptions>();
  CLI::App* sub = root.add_subcommand("sweep", "Predicted peak memory over a grid of micro-batches and sequence lengths");
  add_training_flags(*sub, opts->flags);
  add_budget_flags(*sub, opts->budget);
  sub->add_option("--batches", opts->batches, "Micro-batches: 1,2,4,8 or ranges 1-64:x2, 8-64:+8 (default 1,2,4,8,16,32)")
      ->group("Grid");
  CLI::Option* seq_lens = sub->add_option("--seq-lens", opts->seq_lens, "Sequence lengths, same syntax: 512,1024,2048 (default: --seq-len)")
      ->group("Grid");
  sub->add_option("--format", opts->format, "text (default), json, markdown, html (one self-contained page with charts)");
  return {sub, [opts, seq_lens](Context& ctx) -> Result<int> {
            MEMPLAN_TRY(auto format, report::parse_format(opts->format, /*html=*/true));
            // --show-config: the inputs and where each came from, not the plan.
            if (opts->flags.show_config) return show_config(ctx.out, opts->flags, format);
            MEMPLAN_TRY(auto loaded, load_inputs(opts->flags));
            MEMPLAN_TRY(auto budget, resolve_budget(opts->budget, loaded.resolved));
            const io::ResolvedInputs& inputs = loaded.resolved;
            SweepRequest req;
            req.budget = budget;
            MEMPLAN_TRY(req.micro_batches, parse_grid(opts->batches, "--batches", kMaxBatch));
            if (seq_lens->count() > 0) {
              MEMPLAN_TRY(req.seq_lens, parse_grid(opts->seq_lens, "--seq-lens", kMaxSeqLen));
            } else {
              req.seq_lens = {inputs.config.seq_len};
            }
            MEMPLAN_TRY(TargetGlobalBatch target, resolve_target_global_batch(opts->budget, inputs));
            req.target_global_batch = target.value;
            MEMPLAN_TRY(auto s, sweep(inputs.model, inputs.config, req));
            ctx.out << report::render_sweep(inputs, s, format);
            return kExitOk;
          }};
}

}  // namespace memplan::cli

// Renders plans (`memplan plan`, `--solve seq-len`) and sweeps (`memplan sweep`) as text, JSON or
// markdown. The JSON shapes are documented in docs/plan.md#json.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "io/inputs.hpp"
#include "memplan/estimate.hpp"
#include "memplan/plan.hpp"
#include "report/format.hpp"

namespace memplan::report {

std::string render_plan(const io::ResolvedInputs& in, const Plan& p, Format f);
// memplan --auto: the plan with the breakdown of the recommended micro-batch (micro-batch 1 when
// nothing fits) between the budget and the recommendation; JSON adds "estimate".
std::string render_auto(const io::ResolvedInputs& in, const Plan& p, const Estimate& breakdown, Format f);
// --format html for plan: the page with the breakdown at the recommendation and the peak against
// micro-batch (each drawn when given).
std::string render_plan_page(const io::ResolvedInputs& in, const Plan& p, const Estimate* breakdown,
                             const Sweep* curve);
std::string render_seq_len_plan(const io::ResolvedInputs& in, const SeqLenPlan& p, Format f);
std::string render_sweep(const io::ResolvedInputs& in, const Sweep& s, Format f);

// Peak memory against micro-batch, one series per sequence length (at most 8 are drawn), with the
// budget as a horizontal line. The x axis is linear in the micro-batch, so memory that grows
// linearly draws a straight line and faster growth bends upwards.
std::string sweep_chart(const Sweep& s, int width = 60, int height = 16);

nlohmann::ordered_json budget_json(const Budget& b);
nlohmann::ordered_json plan_json(const Plan& p);            // {"recommendation", "search", "tiers", ...}
nlohmann::ordered_json seq_len_plan_json(const SeqLenPlan& p);
nlohmann::ordered_json sweep_json(const Sweep& s);          // {"micro_batches", "seq_lens", "points"}

}  // namespace memplan::report

// Tests for src/report/plan_render.cpp on hand-built plans and sweeps (no engine), so every
// expected line is known in advance.
#include <catch2/catch.hpp>

#include <algorithm>

#include "report/plan_render.hpp"

using namespace memplan;

namespace {

io::ResolvedInputs inputs() {
  io::ResolvedInputs in;
  in.model.name = "test-model";
  in.model_name = "test-model";
  return in;
}

Budget budget_80() { return Budget{Bytes::gib(80), Bytes::gib(5), Bytes::zero(), false, Bytes::zero()}; }

Plan fitting_plan() {
  Plan p;
  p.budget = budget_80();
  p.max_micro_batch = 12;
  p.limited_by = PlanLimit::kBudget;
  p.search.largest = 12;
  p.search.peak = Bytes::gib(70);
  p.search.next_peak = Bytes::gib(76);
  p.search.evaluations = 9;
  Recommendation& r = p.recommendation;
  r.fits = true;
  r.batch = GlobalBatch{12, 3, 1, 36, 32};
  r.seq_len = 2048;
  r.peak = Bytes::gib(70);
  r.budget = Bytes::gib(75);
  r.utilization = 70.0 / 80.0;
  Tier safe{"safe", 0.50, Bytes::gib(56), true, GlobalBatch{8, 4, 1, 32, 32}, Bytes::gib(52), 52.0 / 80.0};
  Tier none{"balanced", 0.75, Bytes::gib(68), false, GlobalBatch{1, 32, 1, 32, 32}, Bytes::gib(90), 90.0 / 80.0};
  p.tiers = {safe, none};
  return p;
}

Sweep linear_sweep() {
  Sweep s;
  s.budget = Budget{Bytes::gib(40), Bytes::gib(5), Bytes::zero(), false, Bytes::zero()};  // budget 35 GiB
  s.micro_batches = {1, 2, 3, 4};
  s.seq_lens = {1024};
  for (std::int64_t b = 1; b <= 4; ++b) {
    const Bytes peak = Bytes::gib(10.0 * static_cast<double>(b));
    const SweepStatus st = b <= 3 ? SweepStatus::kFits : SweepStatus::kOverBudget;
    s.points.push_back(SweepPoint{b, 1, 1024, peak, st});
  }
  return s;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace

TEST_CASE("render_plan text: recommendation, budget and tiers") {
  const std::string out = report::render_plan(inputs(), fitting_plan(), report::Format::kText);
  CHECK_THAT(out, Catch::Contains("budget: 80.00 GiB GPU memory - 5.00 GiB safety margin - 0.00 GiB headroom = 75.00 GiB\n"));
  CHECK_THAT(out, Catch::Contains("recommended: micro-batch 12 x grad-accum 3 x 1 GPU = global batch 36 (target 32, +4)\n"));
  CHECK_THAT(out, Catch::Contains("predicted peak 70.00 GiB of the 75.00 GiB budget (87.5% of GPU memory)\n"));
  CHECK_THAT(out, Catch::Contains("largest micro-batch that fits: 12; micro-batch 13 would need 76.00 GiB\n"));
  CHECK_THAT(out, Catch::Contains("flags: --batch 12 --grad-accum 3\n"));
  // Columns padded to the widest cell: "balanced", "does not fit".
  CHECK_THAT(out, Catch::Contains("safe      50% of room (56.00 GiB)            8           4            32     52.00 GiB   65.0%\n"));
  CHECK_THAT(out, Catch::Contains("balanced  75% of room (68.00 GiB)            -           -             -  does not fit\n"));
}

TEST_CASE("render_plan text: why not the largest micro-batch, and tiers that coincide") {
  Plan p = fitting_plan();
  p.recommendation.batch = GlobalBatch{8, 4, 1, 32, 32};
  p.recommendation.choice = BatchChoice::kExact;
  p.recommendation.largest = GlobalBatch{12, 3, 1, 36, 32};
  p.fixed = Bytes::gib(40);
  std::string out = report::render_plan(inputs(), p, report::Format::kText);
  CHECK_THAT(out, Catch::Contains("why micro-batch 8 and not 12 (the largest that fits): 8 x 4 = 32 is the target exactly, "
                                  "12 x 3 = 36 is not (--global-batch-tolerance lets a near miss keep a larger "
                                  "micro-batch)\n"));
  CHECK_THAT(out, Catch::Contains("tiers divide the 35.00 GiB of room above the 40.00 GiB that does not grow with the "
                                  "micro-batch:\n"));
  for (Tier& t : p.tiers) {
    t.fits = true;
    t.batch = GlobalBatch{8, 4, 1, 32, 32};
  }
  out = report::render_plan(inputs(), p, report::Format::kText);
  CHECK_THAT(out, Catch::Contains("tiers: safe, balanced and aggressive are all micro-batch 8"));
  CHECK(out.find("tier  ") == std::string::npos);  // no table
  const auto j = nlohmann::json::parse(report::render_plan(inputs(), p, report::Format::kJson));
  CHECK(j["recommendation"]["choice"] == "exact");
  CHECK(j["recommendation"]["largest"]["micro_batch"] == 12);
  CHECK(j["fixed_bytes"] == Bytes::gib(40).count());
  CHECK(j["tiers"][0]["room_fraction"] == 0.5);
}

TEST_CASE("render_plan json: the recommendation object") {
  const auto j = nlohmann::json::parse(report::render_plan(inputs(), fitting_plan(), report::Format::kJson));
  const auto& r = j["recommendation"];
  CHECK(r["fits"] == true);
  CHECK(r["micro_batch"] == 12);
  CHECK(r["grad_accum"] == 3);
  CHECK(r["global_batch"] == 36);
  CHECK(r["target_global_batch"] == 32);
  CHECK(r["global_batch_diff"] == 4);
  CHECK(r["peak_bytes"] == Bytes::gib(70).count());
  CHECK(r["budget_bytes"] == Bytes::gib(75).count());
  CHECK(r["next_peak_bytes"] == Bytes::gib(76).count());
  CHECK(r["limited_by"] == "budget");
  CHECK(j["budget"]["safety_margin_bytes"] == Bytes::gib(5).count());
  CHECK(j["search"]["evaluations"] == 9);
  CHECK(j["tiers"][1]["fits"] == false);
}

TEST_CASE("render_plan: nothing fits lists the changes") {
  Plan p = fitting_plan();
  p.recommendation.fits = false;
  p.recommendation.batch = GlobalBatch{1, 1, 1, 1, std::nullopt};
  p.recommendation.peak = Bytes::gib(100);
  p.max_micro_batch = 0;
  Suggestion s;
  s.kind = ChangeKind::kQlora;
  s.description = "QLoRA: LoRA on a 4-bit (nf4) base model";
  s.flags = {"--use-peft", "--load-in-4bit"};
  s.peak = Bytes::gib(20);
  s.saved = Bytes::gib(80);
  s.fits = true;
  s.best = 6;
  p.suggestions = {s};
  const std::string out = report::render_plan(inputs(), p, report::Format::kText);
  CHECK_THAT(out, Catch::Contains("does not fit: micro-batch 1 x 2048 tokens needs 100.00 GiB, 25.00 GiB over the 75.00 GiB budget\n"));
  CHECK_THAT(out, Catch::Contains("what to change, ranked by memory saved (predicted peak at micro-batch 1 after each change):\n"));
  // "yes" padded to "fits", then "6" right-aligned under "max micro-batch".
  CHECK_THAT(out, Catch::Contains("1  QLoRA: LoRA on a 4-bit (nf4) base model  20.00 GiB  80.00 GiB  yes" + std::string(17, ' ') +
                                  "6  --use-peft --load-in-4bit\n"));
  const auto j = nlohmann::json::parse(report::render_plan(inputs(), p, report::Format::kJson));
  CHECK(j["suggestions"][0]["change"] == "qlora");
  CHECK(j["suggestions"][0]["max_micro_batch"] == 6);
  CHECK(j["recommendation"]["limited_by"].is_null());
}

TEST_CASE("sweep table: seed 000's columns, headroom against capacity") {
  const Sweep s = linear_sweep();
  const std::string md = report::render_sweep(inputs(), s, report::Format::kMarkdown);
  CHECK_THAT(md, Catch::Contains("| batch | grad_accum | seq_len | peak_mem | headroom | status |\n"
                                 "|---:|---:|---:|---:|---:|---|\n"
                                 "| 1 | 1 | 1024 | 10.00 GiB | 30.00 GiB | fits |\n"
                                 "| 2 | 1 | 1024 | 20.00 GiB | 20.00 GiB | fits |\n"
                                 "| 3 | 1 | 1024 | 30.00 GiB | 10.00 GiB | fits |\n"
                                 "| 4 | 1 | 1024 | 40.00 GiB | 0.00 GiB | over budget |\n"));
  const std::string text = report::render_sweep(inputs(), s, report::Format::kText);
  CHECK(count(text, "10.000 GiB") == 3);  // linear growth: each extra sample costs the same
  const auto j = nlohmann::json::parse(report::render_sweep(inputs(), s, report::Format::kJson));
  CHECK(j["points"][3]["status"] == "over_budget");
  CHECK(j["points"][3]["headroom_bytes"] == 0);
}

TEST_CASE("sweep chart: points, budget line and axis") {
  const Sweep s = linear_sweep();
  const std::string chart = report::sweep_chart(s, 31, 10);
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < chart.size();) {
    const std::size_t nl = chart.find('\n', at);
    lines.push_back(chart.substr(at, nl - at));
    at = nl + 1;
  }
  REQUIRE(lines.size() == 1 + 10 + 3);  // legend, plot rows, axis, x labels, axis name
  CHECK(lines[0] == "peak memory (GiB) vs micro-batch: a = seq 1024; ─ budget 35.00 GiB; ^ off the chart");
  std::size_t points = 0;
  for (std::size_t i = 1; i <= 10; ++i) points += count(lines[i].substr(lines[i].find("┤")), "a");
  CHECK(points == 4);
  // y runs from 0.9 x 10 = 9 GiB to 1.05 x 40 = 42 GiB; the top row is labelled 42.0.
  CHECK(lines[1].rfind("42.0 ┤", 0) == 0);
  CHECK(lines[10].rfind(" 9.0 ┤a", 0) == 0);  // the bottom row holds micro-batch 1 at 10 GiB
  const auto budget_row = std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("35.0 ┤", 0) == 0; });
  REQUIRE(budget_row != lines.end());
  CHECK(count(*budget_row, "─") >= 25);
  CHECK(lines[12] == std::string(6, ' ') + "1" + std::string(29, ' ') + "4");
  // Rows at round((y - 9) / 33 x 9): 40 GiB on row 8 (the second line), 30 GiB on row 6.
  CHECK(lines[2].back() == 'a');
  CHECK(lines[4].find('a') != std::string::npos);
}

TEST_CASE("sweep chart: points above twice the capacity are marked ^") {
  Sweep s = linear_sweep();
  s.points[3].peak = Bytes::gib(1000);
  s.points[3].status = SweepStatus::kOom;
  const std::string chart = report::sweep_chart(s, 31, 10);
  CHECK(count(chart, "^") == 2);  // the point, and the legend's "^ off the chart"
}

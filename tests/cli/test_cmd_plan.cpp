// Tests for src/cli/cmd_plan.cpp, running the whole CLI in process. Expected numbers come from
// `memplan estimate` run the same way (the recommended peak must be the figure estimate reports)
// or from hand arithmetic, never from plan's own output.
#include <catch2/catch.hpp>

#include <limits>
#include <sstream>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/exit_codes.hpp"
#include "memplan/plan.hpp"
#include "cli_harness.hpp"

using namespace memplan;
using json = nlohmann::json;

using memplan::testing::CliRun;
using memplan::testing::run_cli;
using memplan::testing::with;

namespace {

json run_json(std::vector<std::string> args, int expected_code = cli::kExitOk) {
  args.push_back("--format");
  args.push_back("json");
  const CliRun r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.code == expected_code);
  return json::parse(r.out);
}

// `memplan estimate` for the same model and flags at one micro-batch (and sequence length).
std::int64_t estimate_peak(const std::vector<std::string>& model_flags, std::int64_t batch,
                           std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"estimate", "--batch", std::to_string(batch)};
  args = with(with(args, model_flags), extra);
  const json j = run_json(args);
  return j["estimate"]["peak_bytes"].get<std::int64_t>();
}

const std::vector<std::string> kModel = {"--model-params", "1B", "--torch-dtype", "bfloat16", "--bf16"};

}  // namespace

TEST_CASE("plan --format json: the recommendation fits and the next micro-batch does not") {
  const json j = run_json(with({"plan", "--gpu-memory", "24GB"}, kModel));
  CHECK(j["schema"] == "memplan/1");
  CHECK(j["command"] == "plan");
  CHECK(j["solve"] == "batch");
  // 24 GB - (1 GiB + 10% of 24 GB)
  const std::int64_t budget = 24'000'000'000 - 1'073'741'824 - 2'400'000'000;
  CHECK(j["budget"]["capacity_bytes"] == 24'000'000'000);
  CHECK(j["budget"]["safety_margin_bytes"] == 1'073'741'824LL + 2'400'000'000);
  CHECK(j["budget"]["headroom_bytes"] == 0);
  CHECK(j["budget"]["budget_bytes"] == budget);
  const json& r = j["recommendation"];
  REQUIRE(r["fits"] == true);
  const auto m = r["micro_batch"].get<std::int64_t>();
  CHECK(m >= 1);
  CHECK(r["grad_accum"] == 1);
  CHECK(r["data_parallel"] == 1);
  CHECK(r["global_batch"] == m);
  CHECK(r["target_global_batch"].is_null());
  CHECK(r["global_batch_diff"].is_null());
  CHECK(r["budget_bytes"] == budget);
  CHECK(r["max_micro_batch"] == m);
  CHECK(r["limited_by"] == "budget");
  const auto peak = r["peak_bytes"].get<std::int64_t>();
  CHECK(peak <= budget);
  CHECK(peak == estimate_peak(kModel, m));
  const std::int64_t next = estimate_peak(kModel, m + 1);
  CHECK(next > budget);
  CHECK(r["next_peak_bytes"] == next);
  CHECK(r["utilization"].get<double>() == Approx(static_cast<double>(peak) / 24e9).epsilon(1e-12));
  REQUIRE(j["tiers"].size() == 3);
  CHECK(j["tiers"][0]["name"] == "safe");
  CHECK(j["tiers"][0]["limit_bytes"] == 16'800'000'000);
  CHECK(j["tiers"][1]["name"] == "balanced");
  CHECK(j["tiers"][2]["name"] == "aggressive");
  CHECK(j["tiers"][2]["limit_bytes"] == budget);
  for (const auto& t : j["tiers"])
    if (t["fits"] == true) CHECK(t["peak_bytes"].get<std::int64_t>() <= t["limit_bytes"].get<std::int64_t>());
  CHECK(j["suggestions"].empty());
  CHECK(j["combination"].is_null());
  CHECK(j["search"]["monotone"] == true);
}

TEST_CASE("plan keeps the config's global batch when --batch or --grad-accum is given") {
  const json j = run_json(with({"plan", "--gpu-memory", "24GB", "--batch", "4", "--grad-accum", "8"}, kModel));
  const json& r = j["recommendation"];
  CHECK(r["target_global_batch"] == 32);
  const GlobalBatch expected = match_global_batch(r["max_micro_batch"].get<std::int64_t>(), 32, 1, 0.05);
  CHECK(r["micro_batch"] == expected.micro_batch);
  CHECK(r["grad_accum"] == expected.grad_accum);
  CHECK(r["global_batch"] == expected.global_batch);
  CHECK(r["global_batch_diff"] == expected.global_batch - 32);
}

TEST_CASE("plan --target-global-batch with data parallelism") {
  const json j = run_json(with({"plan", "--gpu-memory", "80GB", "--target-global-batch", "256", "--num-gpus", "4"}, kModel));
  const json& r = j["recommendation"];
  CHECK(r["data_parallel"] == 4);
  CHECK(r["target_global_batch"] == 256);
  const GlobalBatch expected = match_global_batch(r["max_micro_batch"].get<std::int64_t>(), 256, 4, 0.05);
  CHECK(r["micro_batch"] == expected.micro_batch);
  CHECK(r["grad_accum"] == expected.grad_accum);
  CHECK(r["global_batch"] == r["micro_batch"].get<std::int64_t>() * r["grad_accum"].get<std::int64_t>() * 4);

  // Tolerance 0: 256 = m x a x 4 exactly, m the largest divisor of 64 that fits.
  const json exact = run_json(with({"plan", "--gpu-memory", "80GB", "--target-global-batch", "256", "--num-gpus", "4",
                                    "--global-batch-tolerance", "0%"},
                                   kModel));
  const json& e = exact["recommendation"];
  CHECK(e["global_batch"] == 256);
  CHECK(e["global_batch_diff"] == 0);
  const auto m = e["micro_batch"].get<std::int64_t>();
  CHECK(64 % m == 0);
  CHECK(m * 2 > e["max_micro_batch"].get<std::int64_t>());
}

TEST_CASE("plan: text and markdown") {
  const json j = run_json(with({"plan", "--gpu-memory", "24GB"}, kModel));
  const auto m = j["recommendation"]["micro_batch"].get<std::int64_t>();
  const CliRun text = run_cli(with({"plan", "--gpu-memory", "24GB"}, kModel));
  CHECK(text.code == cli::kExitOk);
  CHECK(text.err.empty());
  CHECK_THAT(text.out, Catch::Contains(fmt::format("recommended: micro-batch {} x grad-accum 1 x 1 GPU = global batch {}\n", m, m)));
  CHECK_THAT(text.out, Catch::Contains("budget: 22.35 GiB GPU memory - 3.24 GiB safety margin - 0.00 GiB headroom = 19.12 GiB\n"));
  CHECK_THAT(text.out, Catch::Contains(fmt::format("flags: --batch {} --grad-accum 1\n", m)));
  const CliRun md = run_cli(with({"plan", "--gpu-memory", "24GB", "--format", "markdown"}, kModel));
  CHECK(md.code == cli::kExitOk);
  CHECK_THAT(md.out, Catch::Contains("| tier | limit | micro-batch | grad-accum | global batch | peak | of GPU |\n"));
  CHECK_THAT(md.out, Catch::Contains(fmt::format("- flags: `--batch {} --grad-accum 1`\n", m)));
}

TEST_CASE("plan exits 1 when nothing fits, with ranked changes") {
  const std::vector<std::string> model = {"--model-params", "7B"};  // fp32 full fine-tuning
  const json j = run_json(with({"plan", "--gpu-memory", "16GB", "--seq-len", "4096"}, model), cli::kExitDoesNotFit);
  const json& r = j["recommendation"];
  CHECK(r["fits"] == false);
  CHECK(r["micro_batch"] == 1);
  CHECK(r["max_micro_batch"] == 0);
  CHECK(r["limited_by"].is_null());
  const auto peak = r["peak_bytes"].get<std::int64_t>();
  CHECK(peak == estimate_peak(model, 1, {"--seq-len", "4096"}));
  CHECK(peak > r["budget_bytes"].get<std::int64_t>());
  std::int64_t previous_saved = std::numeric_limits<std::int64_t>::max();
  int rank = 1;
  for (const auto& s : j["suggestions"]) {
    CHECK(s["rank"] == rank++);
    CHECK(s["peak_bytes"].get<std::int64_t>() < peak);
    CHECK(s["saved_bytes"].get<std::int64_t>() == peak - s["peak_bytes"].get<std::int64_t>());
    CHECK(s["saved_bytes"].get<std::int64_t>() <= previous_saved);
    previous_saved = s["saved_bytes"].get<std::int64_t>();
    CHECK_FALSE(s["flags"].empty());
  }
  const CliRun text = run_cli(with({"plan", "--gpu-memory", "16GB", "--seq-len", "4096"}, model));
  CHECK(text.code == cli::kExitDoesNotFit);
  CHECK_THAT(text.out, Catch::Contains("does not fit: micro-batch 1 at 4096 tokens needs "));
}

TEST_CASE("plan --solve seq-len: the longest sequence at --batch") {
  const json j = run_json(with({"plan", "--gpu-memory", "24GB", "--solve", "seq-len", "--batch", "2"}, kModel));
  CHECK(j["solve"] == "seq_len");
  const json& r = j["recommendation"];
  REQUIRE(r["fits"] == true);
  CHECK(r["micro_batch"] == 2);
  CHECK(r["grad_accum"] == 1);
  CHECK(r["global_batch"] == 2);
  const auto s = r["seq_len"].get<std::int64_t>();
  const auto budget = r["budget_bytes"].get<std::int64_t>();
  CHECK(r["peak_bytes"] == estimate_peak(kModel, 2, {"--seq-len", std::to_string(s)}));
  CHECK(r["peak_bytes"].get<std::int64_t>() <= budget);
  CHECK(estimate_peak(kModel, 2, {"--seq-len", std::to_string(s + 1)}) > budget);

  const json capped =
      run_json(with({"plan", "--gpu-memory", "80GB", "--solve", "seq-len", "--max-seq-len", "300"}, kModel));
  CHECK(capped["recommendation"]["seq_len"] == 300);
  CHECK(capped["recommendation"]["limited_by"] == "max_seq_len");
}

TEST_CASE("plan errors are exact and exit 2") {
  struct Row {
    std::vector<std::string> args;
    std::string err;
  };
  const std::vector<Row> rows = {
      {{"plan"},
       "memplan: error: no GPU given; use --gpu NAME (memplan gpus), --gpu-memory SIZE, or --auto to detect it\n"},
      {{"plan", "--gpu", "h100-sxm", "--gpu-memory", "80GB"},
       "memplan: error: --gpu, --gpu-memory and --auto are alternatives; give one of them\n"},
      {{"plan", "--gpu", "h100-sxn"}, "memplan: error: --gpu: unknown GPU 'h100-sxn'; did you mean 'h100-sxm'?\n"},
      {{"plan", "--gpu-memory", "0"},
       "memplan: error: GPU memory must be positive, got 0 B; give the GPU's memory, e.g. --gpu-memory 80GB\n"},
      {{"plan", "--gpu-memory", "8GiB", "--headroom", "10GiB"},
       "memplan: error: budget -3.80 GiB is not positive (GPU memory 8.00 GiB - safety margin 1.80 GiB - headroom "
       "10.00 GiB); lower --safety-margin or --headroom, or check --gpu-memory\n"},
      {{"plan", "--gpu-memory", "8GiB", "--safety-margin", "8GiB"},
       "memplan: error: budget 0.00 GiB is not positive (GPU memory 8.00 GiB - safety margin 8.00 GiB - headroom "
       "0.00 GiB); lower --safety-margin or --headroom, or check --gpu-memory\n"},
      {{"plan", "--gpu-memory", "80XB"},
       "memplan: error: --gpu-memory: invalid size unit in \"80XB\"; use B, KB, MB, GB, TB (decimal) or KiB, MiB, "
       "GiB, TiB (binary)\n"},
      {{"plan", "--gpu-memory", "80GB", "--safety-margin", "120%"},
       "memplan: error: --safety-margin: invalid safety margin: \"120%\" (a percentage must be at least 0 and below "
       "100); write a size such as 2GiB or a percentage of GPU memory such as 10%\n"},
      {{"plan", "--gpu-memory", "80GB", "--headroom", "junk"},
       "memplan: error: --headroom: invalid size: \"junk\"; write a number with a unit, e.g. 24GB or 80GiB\n"},
      {{"plan", "--gpu-memory", "80GB", "--solve", "seqlen"},
       "memplan: error: --solve: unknown 'seqlen'; did you mean 'seq-len'?\n"},
      {{"plan", "--gpu-memory", "80GB", "--target-global-batch", "0"},
       "memplan: error: target-global-batch = 0 is out of range (1 to 16777216)\n"},
      {{"plan", "--gpu-memory", "80GB", "--global-batch-tolerance", "abc"},
       "memplan: error: --global-batch-tolerance must be a number, got \"abc\"\n"},
      {{"plan", "--gpu-memory", "80GB", "--max-micro-batch", "0"},
       "memplan: error: max-micro-batch = 0 is out of range (1 to 1048576)\n"},
      {{"plan", "--gpu-memory", "80GB", "--format", "yaml"}, "memplan: error: unknown format 'yaml'\n"},
  };
  for (const Row& row : rows) {
    const std::vector<std::string> args = with(row.args, kModel);
    INFO(row.err);
    const CliRun r = run_cli(args);
    CHECK(r.code == cli::kExitInvalidInput);
    CHECK(r.err == row.err);
    CHECK(r.out.empty());
  }
}

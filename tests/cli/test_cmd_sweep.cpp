// Tests for src/cli/cmd_sweep.cpp, running the whole CLI in process. Every peak is checked
// against `memplan estimate` at the same point.
#include <catch2/catch.hpp>

#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/exit_codes.hpp"
#include "cli_harness.hpp"

using namespace memplan;
using json = nlohmann::json;

using memplan::testing::CliRun;
using memplan::testing::run_cli;
using memplan::testing::with;

namespace {

json run_json(const std::vector<std::string>& args) {
  const CliRun r = run_cli(with(args, {"--format", "json"}));
  INFO(r.err);
  REQUIRE(r.code == cli::kExitOk);
  return json::parse(r.out);
}

const std::vector<std::string> kModel = {"--model-params", "1B", "--torch-dtype", "bfloat16", "--bf16"};

std::int64_t estimate_peak(std::int64_t batch, std::int64_t seq_len) {
  const json j = run_json(with({"estimate", "--batch", std::to_string(batch), "--seq-len", std::to_string(seq_len)}, kModel));
  return j["estimate"]["peak_bytes"].get<std::int64_t>();
}

}  // namespace

TEST_CASE("sweep --format json: every point is what estimate reports") {
  const json j = run_json(with({"sweep", "--gpu-memory", "24GB", "--batches", "4,1-2", "--seq-lens", "512,1024"}, kModel));
  CHECK(j["schema"] == "memplan/1");
  CHECK(j["command"] == "sweep");
  CHECK(j["micro_batches"] == json::array({1, 2, 4}));
  CHECK(j["seq_lens"] == json::array({512, 1024}));
  const std::int64_t capacity = 24'000'000'000;
  const auto budget = j["budget"]["budget_bytes"].get<std::int64_t>();
  CHECK(budget == capacity - 1'073'741'824 - 2'400'000'000);
  REQUIRE(j["points"].size() == 6);
  std::size_t k = 0;
  for (const std::int64_t s : {512, 1024}) {
    for (const std::int64_t b : {1, 2, 4}) {
      const json& p = j["points"][k++];
      CHECK(p["micro_batch"] == b);
      CHECK(p["seq_len"] == s);
      CHECK(p["grad_accum"] == 1);
      const auto peak = p["peak_bytes"].get<std::int64_t>();
      CHECK(peak == estimate_peak(b, s));
      CHECK(p["headroom_bytes"] == capacity - peak);
      CHECK(p["status"] == (peak <= budget ? "fits" : peak <= capacity ? "over_budget" : "oom"));
    }
  }
}

TEST_CASE("sweep defaults: seed 000's batches at the config's sequence length") {
  const json j = run_json(with({"sweep", "--gpu-memory", "80GB", "--seq-len", "777"}, kModel));
  CHECK(j["micro_batches"] == json::array({1, 2, 4, 8, 16, 32}));
  CHECK(j["seq_lens"] == json::array({777}));
  CHECK(j["points"].size() == 6);
}

TEST_CASE("sweep keeps the config's global batch in the grad_accum column") {
  const json j = run_json(with({"sweep", "--gpu-memory", "80GB", "--batch", "4", "--grad-accum", "8", "--batches", "1,2,3,4"}, kModel));
  // 32 / b, rounded to the nearest global batch: 3 x 11 = 33 beats 3 x 10 = 30.
  const std::int64_t expected[] = {32, 16, 11, 8};
  for (std::size_t i = 0; i < 4; ++i) CHECK(j["points"][i]["grad_accum"] == expected[i]);
}

TEST_CASE("sweep: markdown table of seed 000 and the terminal chart") {
  const CliRun md = run_cli(with({"sweep", "--gpu-memory", "24GB", "--batches", "1,2,4", "--format", "markdown"}, kModel));
  CHECK(md.code == cli::kExitOk);
  CHECK_THAT(md.out, Catch::Contains("| batch | grad_accum | seq_len | peak_mem | headroom | status |\n"
                                     "|---:|---:|---:|---:|---:|---|\n| 1 | 1 | 1024 | "));
  CHECK_THAT(md.out, Catch::Contains("```text\npeak memory (GiB) vs micro-batch: a = seq 1024; "));

  const CliRun text = run_cli(with({"sweep", "--gpu-memory", "24GB", "--batches", "1-8", "--seq-lens", "512,1024"}, kModel));
  CHECK(text.code == cli::kExitOk);
  CHECK_THAT(text.out, Catch::Contains("per extra sample"));
  CHECK_THAT(text.out, Catch::Contains("peak memory (GiB) vs micro-batch: a = seq 512, b = seq 1024; ─ budget 19.12 GiB"));
}

TEST_CASE("sweep errors are exact and exit 2") {
  const std::string hint = "write numbers such as 1,2,4,8 or ranges such as 1-64:x2 or 512-4096:+512";
  struct Row {
    std::vector<std::string> args;
    std::string err;
  };
  const std::vector<Row> rows = {
      {{"--batches", "1,abc"}, "memplan: error: --batches: invalid item \"abc\" in \"1,abc\"; " + hint + "\n"},
      {{"--batches", "1-64:x1"},
       "memplan: error: --batches: invalid step \":x1\" in \"1-64:x1\"; use :xK (K >= 2) to multiply or :+K (K >= 1) "
       "to add\n"},
      {{"--batches", "2000000"}, "memplan: error: --batches: 2000000 is out of range (1 to 1048576)\n"},
      {{"--seq-lens", "0"}, "memplan: error: --seq-lens: 0 is out of range (1 to 16777216)\n"},
      {{"--seq-lens", ""}, "memplan: error: --seq-lens: empty list; " + hint + "\n"},
      {{"--headroom", "30GB"},
       "memplan: error: budget -8.82 GiB is not positive (GPU memory 22.35 GiB - safety margin 3.24 GiB - headroom "
       "27.94 GiB); lower --safety-margin or --headroom, or check --gpu-memory\n"},
  };
  for (const Row& row : rows) {
    INFO(row.err);
    const CliRun r = run_cli(with(with({"sweep", "--gpu-memory", "24GB"}, row.args), kModel));
    CHECK(r.code == cli::kExitInvalidInput);
    CHECK(r.err == row.err);
    CHECK(r.out.empty());
  }
}

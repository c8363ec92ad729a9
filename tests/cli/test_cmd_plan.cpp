// Tests for src/cli/cmd_plan.cpp, running the whole CLI in process. Expected numbers come from
// `memplan estimate` run the same way (the recommended peak must be the figure estimate reports)
// or from hand arithmetic, never from plan's own output.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <catch2/catch.hpp>

#include <limits>
#include <sstream>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/exit_codes.hpp"
#include "io/fs.hpp"
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
  // 50% of the room above the fixed memory (docs/plan.md#tiers)
  const auto fixed = j["fixed_bytes"].get<std::int64_t>();
  CHECK(j["tiers"][0]["limit_bytes"] == fixed + (budget - fixed) / 100 * 50 + (budget - fixed) % 100 * 50 / 100);
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
  const GlobalBatch expected = match_global_batch(r["max_micro_batch"].get<std::int64_t>(), 32, 1, 0.0);
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
  const GlobalBatch expected = match_global_batch(r["max_micro_batch"].get<std::int64_t>(), 256, 4, 0.0);
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
  CHECK_THAT(text.out, Catch::Contains("does not fit: micro-batch 1 x 4096 tokens needs "));
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
       "memplan: error: --target-global-batch = '0' must be a positive integer, keep or free; e.g. "
       "--target-global-batch 256; keep holds the config's global batch, free drops the target\n"},
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

TEST_CASE("plan --apply (issue 11 item 1): the config is locked before it is read; a second run waits for the first") {
  memplan::testing::TempDir dir;
  const std::string file = dir.write("train.yaml", "model_name_or_path: m\nper_device_train_batch_size: 1\n"
                                                   "gradient_accumulation_steps: 8\n");
  // Another memplan in the middle of its --apply holds the lock.
  io::RealFileSystem fs;
  auto held = fs.lock(file);
  REQUIRE(held.has_value());
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const auto r = run_cli({"plan", "--model-params", "125M", "--gpu-memory", "24GiB", "--config", file, "--apply"});
    ::_exit(r.code == 0 && r.err.empty() ? 0 : 1);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int status = 0;
  CHECK(::waitpid(child, &status, WNOHANG) == 0);  // still waiting for the lock
  // The first run finishes: its file (one more line) renamed over the name, then the lock released.
  const std::string first = "# written by the first run\nmodel_name_or_path: m\nper_device_train_batch_size: 1\n"
                            "gradient_accumulation_steps: 8\n";
  dir.write("train.yaml.first", first);
  REQUIRE(::rename((file + ".first").c_str(), file.c_str()) == 0);
  held->reset();
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  // The second run read the first one's file (a run that had read before the lock would have
  // refused: the file changed) and wrote its plan on top of it.
  const std::string now = memplan::testing::read_file(file);
  CHECK(now.rfind("# written by the first run\n", 0) == 0);
  CHECK(now.find("per_device_train_batch_size: 1\n") == std::string::npos);
  CHECK(memplan::testing::read_file(file + ".backup") == first);
}

// ---------------------------------------------------------------------------------------------
// Issue 10: recommendations a user can take at face value

namespace {

using memplan::testing::ScopedCwd;
using memplan::testing::ScopedEnv;
using memplan::testing::TempDir;

json run_json_any(std::vector<std::string> args, int* code = nullptr) {
  args.push_back("--format");
  args.push_back("json");
  const CliRun r = run_cli(args);
  INFO(r.err);
  if (code) *code = r.code;
  REQUIRE((r.code == cli::kExitOk || r.code == cli::kExitDoesNotFit));
  return json::parse(r.out);
}

}  // namespace

// plan = check = estimate = --auto at the recommendation, for every method, 1 and 8 GPUs and three
// GPUs. The config at the recommendation is written where `check` reads it.
TEST_CASE("plan, check, estimate and auto agree at the recommendation over a grid", "[plan-grid]") {
  ScopedEnv alloc("PYTORCH_CUDA_ALLOC_CONF", std::nullopt);
  TempDir dir;
  const std::vector<std::pair<std::string, std::vector<std::string>>> methods = {
      {"sft", {}},
      {"lora", {"--use-peft", "--lora-target-modules", "all-linear"}},
      {"qlora", {"--use-peft", "--lora-target-modules", "all-linear", "--load-in-4bit"}},
      {"dpo", {"--method", "dpo"}},
      {"grpo", {"--method", "grpo", "--max-completion-length", "512"}},
  };
  for (const auto& [name, method_flags] : methods)
    for (const std::string gpus : {"1", "8"})
      for (const std::string gpu : {"rtx-4090", "a100-80gb", "h100-sxm"}) {
        INFO(name << ", " << gpus << " GPUs, " << gpu);
        const std::vector<std::string> model =
            with(with({"--model-params", "1B", "--torch-dtype", "bfloat16", "--bf16", "--num-gpus", gpus}, method_flags),
                 {"--seq-len", "2048", "--gradient-checkpointing"});
        const std::vector<std::string> common = with(model, {"--gpu", gpu});
        const json p = run_json_any(with(with({"plan"}, common), {"--target-global-batch", "64"}));
        const json& r = p["recommendation"];
        if (r["fits"] != true) {
          CHECK_FALSE(p["suggestions"].empty());
          continue;
        }
        const auto m = r["micro_batch"].get<std::int64_t>();
        const auto a = r["grad_accum"].get<std::int64_t>();
        const auto peak = r["peak_bytes"].get<std::int64_t>();
        CHECK(peak <= r["budget_bytes"].get<std::int64_t>());
        CHECK(r["global_batch"].get<std::int64_t>() == m * a * std::stoi(gpus));
        if (name == "grpo") {
          CHECK(r["seq_len"] == 512 + 512);  // TRL's max_prompt_length default + completion
          CHECK(p["generation"]["valid"] == true);
          CHECK((m * std::stoi(gpus) * a) % 8 == 0);
        }
        const std::vector<std::string> at = {"--batch", std::to_string(m), "--grad-accum", std::to_string(a)};
        // estimate at the recommendation
        const json e = run_json(with(with({"estimate"}, model), at));
        CHECK(e["estimate"]["peak_bytes"].get<std::int64_t>() == peak);
        // check with the recommendation written into a config file
        const std::string file = dir.write(
            "c.yaml", fmt::format("per_device_train_batch_size: {}\ngradient_accumulation_steps: {}\n", m, a));
        const json c = run_json(with({"check", file}, common));
        CHECK(c["results"][0]["status"] == "fits");
        CHECK(c["results"][0]["peak_bytes"].get<std::int64_t>() == peak);
        CHECK(c["results"][0]["budget_bytes"] == r["budget_bytes"]);
        // auto with the same GPU: the same recommendation and its breakdown at it
        ScopedCwd cwd(dir.path());  // c.yaml is not one of the names auto discovers
        const json au = run_json(with(with({"auto"}, common), {"--target-global-batch", "64"}));
        CHECK(au["recommendation"]["micro_batch"] == m);
        CHECK(au["recommendation"]["grad_accum"] == a);
        CHECK(au["estimate"]["peak_bytes"].get<std::int64_t>() == peak);
      }
}

TEST_CASE("plan: the global batch is exact by default and the output says why not the largest") {
  // 1B, bf16 on 24 GB: find a budget where the largest fitting micro-batch does not divide 32.
  const std::vector<std::string> model = {"--model-params", "1B", "--torch-dtype", "bfloat16", "--bf16",
                                          "--gradient-checkpointing", "--seq-len", "512"};
  const json j = run_json(with({"plan", "--gpu-memory", "24GB", "--target-global-batch", "32"}, model));
  const json& r = j["recommendation"];
  const auto largest = r["max_micro_batch"].get<std::int64_t>();
  // The largest micro-batch m <= min(largest, 32) that divides 32 exactly, by hand.
  std::int64_t expected = std::min<std::int64_t>(largest, 32);
  while (32 % expected != 0) --expected;
  CHECK(r["micro_batch"] == expected);
  CHECK(r["global_batch"] == 32);
  CHECK(r["choice"] == "exact");
  const CliRun t = run_cli(with({"plan", "--gpu-memory", "24GB", "--target-global-batch", "32"}, model));
  if (expected < std::min<std::int64_t>(largest, 32))
    CHECK_THAT(t.out, Catch::Contains(fmt::format("why micro-batch {} and not {} (the largest that fits)", expected,
                                                  std::min<std::int64_t>(largest, 32))));
}

TEST_CASE("--gpu-memory: a bare number is the card's label; margins and headroom need a unit") {
  ScopedEnv alloc("PYTORCH_CUDA_ALLOC_CONF", std::nullopt);
  // 24: a 24 GB card as nvidia-smi shows it, the smallest memory.total within 1% below 24 GiB
  // among configs/gpus.yaml's cards: 24564 MiB (RTX A5000, RTX 4090); the 24576 MiB cards are
  // larger and the 23028 MiB A10 is more than 1% below (issue 32, seed 003).
  const json j = run_json(with({"plan", "--gpu-memory", "24"}, kModel));
  CHECK(j["budget"]["capacity_bytes"] == 24564LL * 1024 * 1024);
  const CliRun t = run_cli(with({"plan", "--gpu-memory", "24"}, kModel));
  CHECK_THAT(t.out, Catch::Contains("GPU: 23.99 GiB of GPU memory (--gpu-memory 24 read as a 24 GB card: 24564 MiB, as "
                                    "nvidia-smi shows rtx-a5000, rtx-4090; write 24GB for decimal gigabytes, or --gpu "
                                    "NAME for another card)\n"));
  // With a unit the size is exact.
  CHECK(run_json(with({"plan", "--gpu-memory", "24GB"}, kModel))["budget"]["capacity_bytes"] == 24'000'000'000);
  // 80: the H100's 81559 MiB (0.44% below 80 GiB), not the A100's 81920 MiB.
  CHECK(run_json(with({"plan", "--gpu-memory", "80"}, kModel))["budget"]["capacity_bytes"] == 81559LL * 1024 * 1024);
  // A label no profiled card is near: its GiB.
  CHECK(run_json(with({"plan", "--gpu-memory", "20"}, kModel))["budget"]["capacity_bytes"] == 20LL << 30);
  const CliRun m = run_cli(with({"plan", "--gpu-memory", "24", "--safety-margin", "80"}, kModel));
  CHECK(m.code == cli::kExitInvalidInput);
  CHECK_THAT(m.err, Catch::Contains("--safety-margin: safety margin \"80\" has no unit; write 80% for a percentage of GPU "
                                    "memory, or 80GiB / 80GB for a size"));
  const CliRun h = run_cli(with({"plan", "--gpu-memory", "24", "--headroom", "4"}, kModel));
  CHECK(h.code == cli::kExitInvalidInput);
  CHECK_THAT(h.err, Catch::Contains("--headroom: headroom \"4\" has no unit; write 4GB or 4GiB for a size, or 4% for a "
                                    "share of GPU memory"));
  const json pct = run_json(with({"plan", "--gpu-memory", "24GB", "--safety-margin", "10%", "--headroom", "1GB"}, kModel));
  CHECK(pct["budget"]["safety_margin_bytes"] == 2'400'000'000);
  CHECK(pct["budget"]["headroom_bytes"] == 1'000'000'000);
}

TEST_CASE("PYTORCH_CUDA_ALLOC_CONF sets the margin, from the environment or the config, and says so") {
  TempDir dir;
  {
    ScopedEnv alloc("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True");
    const json j = run_json(with({"plan", "--gpu-memory", "80GB"}, kModel));
    // 1 GiB + 2% of 80 GB
    CHECK(j["budget"]["safety_margin_bytes"] == 1'073'741'824LL + 1'600'000'000);
    const CliRun t = run_cli(with({"plan", "--gpu-memory", "80GB"}, kModel));
    CHECK_THAT(t.out, Catch::Contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the environment)"));
  }
  {
    ScopedEnv alloc("PYTORCH_CUDA_ALLOC_CONF", std::nullopt);
    const std::string file = dir.write("train.yaml", "per_device_train_batch_size: 2\nenv:\n  "
                                                     "PYTORCH_CUDA_ALLOC_CONF: max_split_size_mb:128,expandable_segments:True\n");
    const json j = run_json(with({"plan", "--gpu-memory", "80GB", "--config", file}, kModel));
    CHECK(j["budget"]["safety_margin_bytes"] == 1'073'741'824LL + 1'600'000'000);
    const CliRun t = run_cli(with({"plan", "--gpu-memory", "80GB", "--config", file}, kModel));
    CHECK_THAT(t.out, Catch::Contains(file + ":3)"));
    // max_split_size_mb alone keeps the default, and says so
    const std::string other = dir.write("other.yaml", "per_device_train_batch_size: 2\nenv:\n  PYTORCH_CUDA_ALLOC_CONF: max_split_size_mb:128\n");
    const json k = run_json(with({"plan", "--gpu-memory", "80GB", "--config", other}, kModel));
    CHECK(k["budget"]["safety_margin_bytes"] == 1'073'741'824LL + 8'000'000'000);
    // a bad value is an error at its line
    const std::string bad = dir.write("bad.yaml", "per_device_train_batch_size: 2\nenv:\n  PYTORCH_CUDA_ALLOC_CONF: expandable_segments:yes\n");
    const CliRun b = run_cli(with({"plan", "--gpu-memory", "80GB", "--config", bad}, kModel));
    CHECK(b.code != cli::kExitOk);
    CHECK_THAT(b.err, Catch::Contains(bad + ":3: PYTORCH_CUDA_ALLOC_CONF: expandable_segments must be True or False"));
  }
}

TEST_CASE("--model-params: the output states the assumed architecture, text and JSON") {
  const json j = run_json(with({"plan", "--gpu-memory", "24GB"}, kModel));
  REQUIRE(j["inputs"]["assumptions"].size() == 1);
  CHECK_THAT(j["inputs"]["assumptions"][0].get<std::string>(),
             Catch::StartsWith("architecture assumed from the parameter count 1B (a Llama-style decoder"));
  const CliRun t = run_cli(with({"plan", "--gpu-memory", "24GB"}, kModel));
  // the second line, right under the description of the inputs
  const auto second = t.out.substr(t.out.find('\n') + 1);
  CHECK_THAT(second, Catch::StartsWith("assumed: architecture assumed from the parameter count 1B"));
}

TEST_CASE("auto --model-params still reads the config it finds") {
  ScopedEnv alloc("PYTORCH_CUDA_ALLOC_CONF", std::nullopt);
  TempDir dir;
  dir.write("conf/config.yaml", "per_device_train_batch_size: 3\ngradient_accumulation_steps: 5\n");
  ScopedCwd cwd(dir.path());
  const CliRun t = run_cli({"auto", "--model-params", "110M", "--gpu-memory", "24GB"});
  INFO(t.err);
  CHECK(t.code == cli::kExitOk);
  CHECK_THAT(t.out, Catch::Contains("config: conf/config.yaml (found in the current directory; --config chooses)"));
  const json j = run_json({"auto", "--model-params", "110M", "--gpu-memory", "24GB"});
  CHECK(j["recommendation"]["target_global_batch"] == 15);  // 3 x 5 from the config
}

TEST_CASE("GRPO: the header counts completions of prompt + completion, and nothing fitting is exit 1") {
  const std::vector<std::string> grpo = {"--model-params", "8B", "--torch-dtype", "bfloat16", "--bf16",
                                         "--method",       "grpo", "--max-completion-length", "1024"};
  const CliRun t = run_cli(with({"plan", "--gpu", "rtx-4090"}, grpo));
  CHECK(t.code == cli::kExitDoesNotFit);
  CHECK(t.out.find("x 1024 tokens") == std::string::npos);
  CHECK_THAT(t.out, Catch::Contains("(512 prompt + 1024 completion) tokens"));
  CHECK_THAT(t.out, Catch::Contains("what to change, ranked by memory saved"));
}

TEST_CASE("seed 003 on an RTX 4090: fits with its allocator setting, and says the margin is why otherwise") {
  // Qwen2.5-7B, fp16, LoRA r=128 on all linear layers, checkpointing, 1 x 1536, accumulation 16:
  // the configuration seed 003 ran on a 24 GB card with expandable_segments:True.
  const std::vector<std::string> seed003 = {"plan", "--model", "Qwen/Qwen2.5-7B", "--torch-dtype", "float16", "--fp16",
                                            "--use-peft", "--lora-r", "128", "--lora-target-modules", "all-linear",
                                            "--gradient-checkpointing", "--seq-len", "1536", "--batch", "1",
                                            "--grad-accum", "16", "--gpu", "rtx-4090"};
  {
    ScopedEnv alloc("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128,expandable_segments:True");
    const CliRun r = run_cli(seed003);
    INFO(r.out << r.err);
    CHECK(r.code == cli::kExitOk);
    CHECK_THAT(r.out, Catch::Contains("recommended: micro-batch 1 x grad-accum 16 x 1 GPU = global batch 16 (= target)"));
  }
  {
    ScopedEnv alloc("PYTORCH_CUDA_ALLOC_CONF", std::nullopt);
    const CliRun r = run_cli(seed003);
    if (r.code == cli::kExitDoesNotFit) {
      CHECK_THAT(r.out, Catch::Contains("only the safety margin rejects it"));
      CHECK_THAT(r.out, Catch::Contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
      CHECK_THAT(r.out, Catch::Contains("--safety-margin"));
    }
    // One token always fits a 24 GB card for this model (the weights are 14.2 GiB).
    const CliRun s = run_cli(with(seed003, {"--solve", "seq-len"}));
    CHECK(s.code == cli::kExitOk);
  }
}

TEST_CASE("plan on a unified-memory device suggests no CPU offload") {
  ScopedEnv alloc("PYTORCH_CUDA_ALLOC_CONF", std::nullopt);
  const json j = run_json_any({"plan", "--model-params", "70B", "--gpu", "dgx-spark-gb10"});
  CHECK(j["recommendation"]["fits"] == false);
  REQUIRE_FALSE(j["suggestions"].empty());
  for (const auto& s : j["suggestions"]) CHECK(s["change"] != "cpu_offload_optimizer");
  CHECK(j["budget"]["headroom_bytes"] == 28LL * 1073741824);  // the Spark's OS reserve (seed 000)
}

TEST_CASE("a detected DGX Spark is named for what it is, with no invented GPU memory") {
  ScopedEnv alloc("PYTORCH_CUDA_ALLOC_CONF", std::nullopt);
  memplan::testing::StandInMachine spark("nvidia-smi-gb10.csv", "", "proc-meminfo-gb10.txt");
  const CliRun r = run_cli({"plan", "--auto", "--model-params", "70B"});
  INFO(r.err);
  CHECK(r.code == cli::kExitDoesNotFit);
  CHECK_THAT(r.out, Catch::Contains("GPU: NVIDIA GB10 (dgx-spark-gb10, CPU and GPU share its memory), detected by"));
  // MemAvailable 118566368 kB = 113.07 GiB of MemTotal 127600748 kB = 121.69 GiB
  CHECK_THAT(r.out, Catch::Contains(": 113.07 GiB system memory free of 121.69 GiB (unified memory)"));
  CHECK_THAT(r.out, Catch::Contains("budget: 121.69 GiB system memory (shared by CPU and GPU) - "));
  CHECK(r.out.find("GPU memory -") == std::string::npos);
  CHECK(r.out.find("--offload-optimizer") == std::string::npos);
}

TEST_CASE("plan --apply (issue 34): a DeepSpeed JSON another config names is written with a warning; check then fails "
          "the other") {
  memplan::testing::TempDir dir;
  const std::string trainer =
      "model_name_or_path: gpt2\nper_device_train_batch_size: 2\ngradient_accumulation_steps: 16\nmax_length: 512\n"
      "deepspeed: ds.json\n";
  const std::string a = dir.write("a.yaml", trainer);
  const std::string b = dir.write("b.yaml", trainer);
  dir.write("c.yaml", "# names another ds.json: conf/ds.json is not this one\ndeepspeed: conf/ds.json\n");
  dir.write("ds.json",
            "{\n  \"train_micro_batch_size_per_gpu\": 2,\n  \"gradient_accumulation_steps\": 16,\n"
            "  \"zero_optimization\": {\"stage\": 2}\n}\n");
  REQUIRE(run_cli({"check", b, "--gpu", "h100-sxm"}).code == 0);
  const auto r = run_cli({"plan", "--config", a, "--gpu", "h100-sxm", "--apply"});
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("warning: " + dir.path() + "/ds.json is also named by " + b +
                   ":5; this changes the batch for that config too, and its trainer refuses to start when its own "
                   "batch differs (memplan check it; or give this config a copy of the JSON)\n") != std::string::npos);
  CHECK(r.out.find("c.yaml") == std::string::npos);
  // The other config's trainer now refuses to start; check says so and fails.
  const auto c = run_cli({"check", b, "--gpu", "h100-sxm"});
  CHECK(c.code == memplan::cli::kExitInvalidInput);
  CHECK(c.out.find("contradicts the trainer's batch = 2") != std::string::npos);
}

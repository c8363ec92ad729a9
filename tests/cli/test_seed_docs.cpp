// The original documents' questions (../shared/seeds/, issue 32), each with the setup the
// document describes, run through the whole CLI. Expected micro-batches come from `memplan
// estimate` at the neighbouring sizes compared with the plan's budget, never from plan's output.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/exit_codes.hpp"
#include "cli_harness.hpp"

using namespace memplan;
using json = nlohmann::json;
using memplan::testing::CliRun;
using memplan::testing::run_cli;
using memplan::testing::ScopedEnv;
using memplan::testing::TempDir;

namespace {

json run_json(std::vector<std::string> args, int code = cli::kExitOk) {
  args.insert(args.end(), {"--format", "json"});
  const CliRun r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.code == code);
  return json::parse(r.out);
}

std::int64_t estimate_peak(const std::string& config, std::int64_t batch) {
  return run_json({"estimate", "--config", config, "--batch", std::to_string(batch)})["estimate"]["peak_bytes"];
}

const std::string kSpark = std::string(MEMPLAN_SOURCE_DIR) + "/configs/examples/dgx-spark-sft.yaml";

}  // namespace

TEST_CASE("seed 000: the largest micro-batch is stated even when the config starts at 1 x 1") {
  ScopedEnv a("PYTORCH_CUDA_ALLOC_CONF", std::nullopt);
  const json j = run_json({"plan", "--config", kSpark, "--gpu", "dgx-spark"});
  const auto& r = j["recommendation"];
  const std::int64_t budget = r["budget_bytes"];
  const std::int64_t largest = r["fits_largest"];
  // The fact: `estimate` at that size fits the budget and one more does not.
  REQUIRE(largest > 1);
  CHECK(estimate_peak(kSpark, largest) <= budget);
  CHECK(estimate_peak(kSpark, largest + 1) > budget);
  // The config's 1 x 1 is kept as the target; the recommendation says so, and the tiers without it
  // are the choices there are.
  CHECK(r["micro_batch"] == 1);
  CHECK(r["target_global_batch"] == 1);
  CHECK(r["target_source"] == "the config's 1 x 1 x 1 GPU");
  REQUIRE(j["free_tiers"].size() == 3);
  CHECK(j["free_tiers"][2]["micro_batch"] == largest);
  CHECK(j["free_tiers"][0]["micro_batch"] < j["free_tiers"][2]["micro_batch"]);
  const CliRun t = run_cli({"plan", "--config", kSpark, "--gpu", "dgx-spark"});
  CHECK_THAT(t.out, Catch::Contains(fmt::format("largest micro-batch that fits: {}; micro-batch {} would need ", largest,
                                                largest + 1)));
  CHECK_THAT(t.out, Catch::Contains("(the target global batch keeps the recommendation at 1)"));
  CHECK_THAT(t.out, Catch::Contains("global batch: keep 1 (the config's 1 x 1 x 1 GPU); --target-global-batch N sets "
                                    "another, --target-global-batch free drops it"));
  CHECK_THAT(t.out, Catch::Contains("tiers: safe, balanced and aggressive all keep micro-batch 1"));
  // --target-global-batch free: the largest is the recommendation.
  const json f = run_json({"plan", "--config", kSpark, "--gpu", "dgx-spark", "--target-global-batch", "free"});
  CHECK(f["recommendation"]["micro_batch"] == largest);
  CHECK(f["recommendation"]["target_global_batch"].is_null());
  const CliRun bad = run_cli({"plan", "--config", kSpark, "--gpu", "dgx-spark", "--target-global-batch", "lots"});
  CHECK(bad.code == cli::kExitInvalidInput);
  CHECK(bad.err == "memplan: error: --target-global-batch = 'lots' must be a positive integer, keep or free; e.g. "
                   "--target-global-batch 256; keep holds the config's global batch, free drops the target\n");
}

TEST_CASE("seed 000: a colocated vLLM share that cannot hold the policy's weights is refused") {
  // Qwen2.5-7B: 7,615,616,512 parameters x 2 bytes = 14.19 GiB of bf16 weights; 0.1 of the
  // Spark's 121.69 GiB is 12.17 GiB.
  const std::vector<std::string> grpo = {"plan", "--model", "Qwen/Qwen2.5-7B", "--method", "grpo", "--torch-dtype",
                                         "bfloat16", "--bf16", "--use-peft", "--use-vllm", "--vllm-mode", "colocate",
                                         "--gpu", "dgx-spark"};
  std::vector<std::string> low = grpo;
  low.insert(low.end(), {"--vllm-gpu-memory-utilization", "0.1"});
  const CliRun r = run_cli(low);
  CHECK(r.code == cli::kExitInvalidInput);
  CHECK_THAT(r.err, Catch::Contains("cannot hold the policy's 14.19 GiB of weights: vLLM fails at startup"));
  CHECK_THAT(r.err, Catch::Contains("raise --vllm-gpu-memory-utilization (vllm_gpu_memory_utilization) to at least 0.13"));
  // sweep's headroom is what the device has left beside vLLM's share.
  std::vector<std::string> sweep = {"sweep", "--model", "Qwen/Qwen2.5-7B", "--method", "grpo", "--torch-dtype",
                                    "bfloat16", "--bf16", "--use-peft", "--use-vllm", "--vllm-gpu-memory-utilization",
                                    "0.3", "--gpu", "dgx-spark", "--batches", "8"};
  const json s = run_json(sweep);
  const std::int64_t capacity = s["budget"]["capacity_bytes"];
  const std::int64_t peak = s["points"][0]["peak_bytes"];
  const auto vllm = static_cast<std::int64_t>(static_cast<double>(capacity) * 0.3);
  CHECK(s["points"][0]["headroom_bytes"] == capacity - vllm - peak);
}

TEST_CASE("seed 001: a custom model's own settings are named, and a flag that replaces the model says so") {
  TempDir dir;
  const std::string cfg = dir.write("pretrain_512m_low_memory.yaml",
                                    "model:\n  n_layers: 8\n  d_model: 1536\n  d_ffn: 1536\n  n_heads: 12\n"
                                    "  vocab_size: 50257\n  attention: gsa\n  k_base: 512\n  k_max: 1024\n"
                                    "micro_batch_size: 2\ngradient_accumulation_steps: 32\nmax_seq_len: 1024\n"
                                    "num_gpus: 4\ngradient_checkpointing: true\nprecision: bf16\n");
  const json j = run_json({"estimate", "--config", cfg});
  bool named = false;
  for (const auto& w : j["warnings"])
    if (w.get<std::string>() ==
        cfg + ":7: attention, k_base, k_max in model: not modelled; the custom model is estimated as a standard "
              "decoder (attention, MLP) of the shape it gives, so memory these settings add or remove is not in the "
              "estimate; check the breakdown against one measured step (memplan profile)")
      named = true;
  CHECK(named);
  const json flag = run_json({"estimate", "--config", cfg, "--model-params", "512M"});
  bool replaced = false;
  for (const auto& w : flag["warnings"])
    if (w.get<std::string>().rfind("--model-params 512M replaces the model the config gives at " + cfg + ":2", 0) == 0)
      replaced = true;
  CHECK(replaced);
}

TEST_CASE("seed 001: tiers that name one micro-batch twice come with the tiers without the target") {
  ScopedEnv a("PYTORCH_CUDA_ALLOC_CONF", std::nullopt);
  const std::string cfg = std::string(MEMPLAN_SOURCE_DIR) + "/configs/examples/flat-pretrain.yaml";
  const json j = run_json({"plan", "--config", cfg, "--gpu-memory", "44GiB"});
  const auto& t = j["tiers"];
  REQUIRE(t.size() == 3);
  // The global batch 256 over 4 GPUs keeps micro-batches that divide 64: two tiers land on one.
  const bool repeated = t[0]["micro_batch"] == t[1]["micro_batch"] || t[1]["micro_batch"] == t[2]["micro_batch"];
  REQUIRE(repeated);
  const auto& f = j["free_tiers"];
  REQUIRE(f.size() == 3);
  CHECK(f[0]["micro_batch"] < f[1]["micro_batch"]);
  CHECK(f[1]["micro_batch"] < f[2]["micro_batch"]);
  CHECK(f[2]["micro_batch"] == j["recommendation"]["fits_largest"]);
  const CliRun r = run_cli({"plan", "--config", cfg, "--gpu-memory", "44GiB"});
  CHECK_THAT(r.out, Catch::Contains("tiers on one micro-batch keep the global batch 256: no micro-batch in between "
                                    "keeps it; without that target (--target-global-batch free) the tiers are:"));
}

TEST_CASE("seed 003: the 24 GB run that ran fits a bare --gpu-memory 24 with its start script") {
  ScopedEnv a("PYTORCH_CUDA_ALLOC_CONF", std::nullopt);
  ScopedEnv b("PYTORCH_ALLOC_CONF", std::nullopt);
  const std::string dir = std::string(MEMPLAN_SOURCE_DIR) + "/configs/examples/qwen7b-lora-24gb/";
  const std::vector<std::string> args = {"estimate", "--config", dir + "train.yaml", "--gpu-memory", "24", "--launch",
                                         dir + "START_BASELINE_7B_TRAINING.sh"};
  const json j = run_json(args);
  // The document's configuration ran on its 24 GB card: memplan must not reject it.
  CHECK(j["fit"]["fits"] == true);
  CHECK(j["fit"]["capacity_bytes"] == 24564LL * 1024 * 1024);
  // expandable_segments from the start script: the 1 GiB + 2% margin, whatever memplan's shell says.
  CHECK(j["fit"]["safety_margin_bytes"] == (1LL << 30) + 24564LL * 1024 * 1024 / 50);
}

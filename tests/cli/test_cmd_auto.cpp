// Tests src/cli/cmd_auto.cpp (`memplan --auto`) through the whole CLI against a stand-in
// nvidia-smi. Budgets are hand arithmetic on the recorded driver figures
// (tests/data/detect/README.md); predicted peaks come from `memplan estimate`, never from the
// command under test.
#include <filesystem>

#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/exit_codes.hpp"
#include "cli_harness.hpp"
#include "memplan/plan.hpp"

using namespace memplan::testing;
using json = nlohmann::json;
namespace cli = memplan::cli;

namespace {

const std::string kSft = std::string(MEMPLAN_SOURCE_DIR) + "/configs/examples/hf-trl-sft-lora.yaml";
const std::string kGrpo = std::string(MEMPLAN_SOURCE_DIR) + "/configs/examples/hf-trl-grpo.yaml";

// nvidia-smi-h100.csv: total 81559 MiB, free 81080 MiB. The budget is the free memory less the
// default margin, 1 GiB + 10% of the total (integer bytes).
constexpr std::int64_t kMiB = 1048576;
constexpr std::int64_t kH100Free = 81080 * kMiB;                          // 85,019,328,512
constexpr std::int64_t kH100Margin = 1073741824 + (81559 * kMiB) / 10;  // 9,625,822,822
constexpr std::int64_t kH100Budget = kH100Free - kH100Margin;            // 75,393,505,690

json parse(const CliRun& r) {
  INFO(r.err);
  return json::parse(r.out);
}

std::int64_t estimate_peak(const std::string& config, std::int64_t batch) {
  const auto r = run_cli({"estimate", "--config", config, "--batch", std::to_string(batch), "--format", "json"});
  INFO(r.err);
  REQUIRE(r.code == cli::kExitOk);
  return json::parse(r.out)["estimate"]["peak_bytes"].get<std::int64_t>();
}

}  // namespace

TEST_CASE("memplan --auto on a stand-in 80 GB H100: the recommendation fits and the next micro-batch does not") {
  StandInMachine machine("nvidia-smi-h100.csv");
  const auto r = run_cli({"--auto", "--config", kSft, "--format", "json"});
  REQUIRE(r.code == cli::kExitOk);
  const json j = parse(r);
  CHECK(j["schema"] == "memplan/1");
  CHECK(j["command"] == "auto");
  CHECK(j["budget"]["capacity_bytes"] == kH100Free);
  CHECK(j["budget"]["safety_margin_bytes"] == kH100Margin);
  CHECK(j["budget"]["headroom_bytes"] == 0);
  CHECK(j["budget"]["budget_bytes"] == kH100Budget);
  CHECK(j["inputs"]["notes"] ==
        json::array({"GPU: NVIDIA H100 80GB HBM3, detected by nvidia-smi: 79.18 GiB free of 79.65 GiB"}));

  const json& rec = j["recommendation"];
  REQUIRE(rec["fits"] == true);
  const auto m = rec["micro_batch"].get<std::int64_t>();
  const auto peak = rec["peak_bytes"].get<std::int64_t>();
  CHECK(peak <= kH100Budget);
  CHECK(peak == estimate_peak(kSft, m));
  CHECK(estimate_peak(kSft, rec["max_micro_batch"].get<std::int64_t>() + 1) > kH100Budget);
  // The file's 4 x 8 global batch is the target.
  CHECK(rec["target_global_batch"] == 32);
  const auto expected = memplan::match_global_batch(rec["max_micro_batch"].get<std::int64_t>(), 32, 1, 0.0);
  CHECK(m == expected.micro_batch);
  CHECK(rec["grad_accum"] == expected.grad_accum);

  // The breakdown is estimate's, at the recommended micro-batch, and sums to its peak.
  const json& est = j["estimate"];
  CHECK(est["peak_bytes"] == peak);
  std::int64_t sum = 0;
  for (const auto& c : est["components"]) sum += c["bytes"].get<std::int64_t>();
  CHECK(sum == peak);

  // `memplan --auto` is `memplan auto`, wherever --auto stands among the flags.
  const auto same = run_cli({"--format", "json", "--config", kSft, "--auto"});
  CHECK(same.code == cli::kExitOk);
  CHECK(same.out == r.out);
  const auto sub = run_cli({"auto", "--config", kSft, "--format", "json"});
  CHECK(sub.out == r.out);

  const auto text = run_cli({"--auto", "--config", kSft});
  REQUIRE(text.code == cli::kExitOk);
  CHECK(text.err.empty());
  CHECK_THAT(text.out, Catch::Contains("GPU: NVIDIA H100 80GB HBM3, detected by nvidia-smi: 79.18 GiB free of 79.65 GiB\n"
                                       "budget: 79.18 GiB GPU memory - 8.96 GiB safety margin - 0.00 GiB headroom = "
                                       "70.21 GiB\n\n" +
                                       fmt::format("memory at micro-batch {} x 2048 tokens:\n", m)));
  CHECK_THAT(text.out, Catch::Contains("total (as nvidia-smi shows)"));
  CHECK_THAT(text.out, Catch::Contains(fmt::format("recommended: micro-batch {} x grad-accum {} x 1 GPU", m,
                                                   rec["grad_accum"].get<std::int64_t>())));
}

TEST_CASE("memplan --auto with no GPU says so and names --gpu, before anything else") {
  StandInMachine machine(std::nullopt);
  const std::string no_gpu =
      "memplan: error: no GPU found (NVML skipped: MEMPLAN_NVIDIA_SMI=/nonexistent/nvidia-smi; "
      "/nonexistent/nvidia-smi: not found; /nonexistent/rocm-smi: not found); give --gpu NAME (memplan gpus lists "
      "them) or --gpu-memory SIZE\n";
  const auto r = run_cli({"--auto", "--config", kSft});
  CHECK(r.code == cli::kExitNoGpu);
  CHECK(r.out.empty());
  CHECK(r.err == no_gpu);

  TempDir empty;
  ScopedCwd cwd(empty.path());
  const auto bare = run_cli({"--auto"});
  CHECK(bare.code == cli::kExitNoGpu);
  CHECK(bare.err == no_gpu);

  // Naming the GPU needs no detection.
  const auto named = run_cli({"--auto", "--gpu", "h100-sxm", "--config", kSft, "--format", "json"});
  REQUIRE(named.code == cli::kExitOk);
  const json j = parse(named);
  // The profile's usable memory: what CUDA reports on an H100 (tests/data/capacity/h100.json).
  CHECK(j["budget"]["capacity_bytes"] == 85'017'493'504);
  CHECK(j["inputs"]["notes"] ==
        json::array({"GPU: NVIDIA H100 80GB HBM3 (79.18 GiB usable as CUDA reports it; nvidia-smi: 79.65 GiB)"}));
}

TEST_CASE("memplan --auto finds the training config in the current directory") {
  StandInMachine machine("nvidia-smi-h100.csv");
  TempDir dir;
  ScopedCwd cwd(dir.path());
  const auto none = run_cli({"--auto"});
  CHECK(none.code == cli::kExitInvalidInput);
  CHECK(none.err ==
        "memplan: error: no training config given, and none found in the current directory; give --config FILE (or "
        "--model ID); memplan looks for train.yaml, train.yml, training.yaml, config.yaml, conf/config.yaml, "
        "configs/train.yaml\n");

  dir.write("conf/config.yaml", read_file(kSft));
  const auto found = run_cli({"--auto", "--format", "json"});
  REQUIRE(found.code == cli::kExitOk);
  const json j = parse(found);
  CHECK(j["inputs"]["notes"][0] == "config: conf/config.yaml (found in the current directory; --config chooses)");
  CHECK(j["inputs"]["sources"]["batch"] == "conf/config.yaml:28");
  const auto explicit_run = run_cli({"--auto", "--config", kSft, "--format", "json"});
  CHECK(json::parse(explicit_run.out)["recommendation"] == j["recommendation"]);

  // train.yaml comes before conf/config.yaml.
  dir.write("train.yaml", "model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 2\n");
  const auto first = run_cli({"--auto", "--format", "json"});
  REQUIRE(first.code == cli::kExitOk);
  CHECK(parse(first)["inputs"]["notes"][0] == "config: train.yaml (found in the current directory; --config chooses)");
}

TEST_CASE("memplan --auto --apply writes the recommendation into the file it read; --dry-run shows it") {
  StandInMachine machine("nvidia-smi-h100.csv");
  TempDir dir;
  const std::string original = read_file(kSft);
  const std::string file = dir.write("train.yaml", original);
  const json j = parse(run_cli({"--auto", "--config", file, "--format", "json"}));
  const auto m = j["recommendation"]["micro_batch"].get<std::int64_t>();
  const auto a = j["recommendation"]["grad_accum"].get<std::int64_t>();
  REQUIRE((m != 4 || a != 8));

  std::string expected = original;
  auto replace = [&](const std::string& from, const std::string& to) {
    const auto at = expected.find(from);
    REQUIRE(at != std::string::npos);
    expected.replace(at, from.size(), to);
  };
  replace("per_device_train_batch_size: 4\n", fmt::format("per_device_train_batch_size: {}\n", m));
  replace("gradient_accumulation_steps: 8 #", fmt::format("gradient_accumulation_steps: {} #", a));

  const auto dry = run_cli({"--auto", "--config", file, "--dry-run"});
  REQUIRE(dry.code == cli::kExitOk);
  CHECK_THAT(dry.out, Catch::Contains(fmt::format("+per_device_train_batch_size: {}\n", m)));
  CHECK(read_file(file) == original);

  const auto apply = run_cli({"--auto", "--config", file, "--apply"});
  REQUIRE(apply.code == cli::kExitOk);
  CHECK(read_file(file) == expected);
  CHECK(read_file(file + ".backup") == original);

  // Nothing left to change: the file stays as it is.
  const auto again = run_cli({"--auto", "--config", file, "--apply"});
  CHECK(again.code == cli::kExitOk);
  CHECK(read_file(file) == expected);
}

TEST_CASE("memplan --auto when nothing fits: micro-batch 1's breakdown, ranked changes, exit 1") {
  StandInMachine machine("nvidia-smi-h100.csv");
  const std::vector<std::string> args = {"--auto", "--model", "llama-3.1-70b", "--seq-len", "4096"};
  auto with_json = args;
  with_json.insert(with_json.end(), {"--format", "json"});
  const auto r = run_cli(with_json);
  REQUIRE(r.code == cli::kExitDoesNotFit);
  const json j = parse(r);
  CHECK(j["recommendation"]["fits"] == false);
  CHECK(j["estimate"]["peak_bytes"] == j["recommendation"]["peak_bytes"]);
  CHECK(j["recommendation"]["peak_bytes"].get<std::int64_t>() > kH100Budget);
  CHECK_FALSE(j["suggestions"].empty());

  const auto text = run_cli(args);
  CHECK(text.code == cli::kExitDoesNotFit);
  CHECK_THAT(text.out, Catch::Contains("memory at micro-batch 1 x 4096 tokens:\n"));
  CHECK_THAT(text.out, Catch::Contains("does not fit: micro-batch 1 x 4096 tokens needs "));

  auto apply = args;
  apply.push_back("--apply");
  const auto refused = run_cli(apply);
  CHECK(refused.code == cli::kExitInvalidInput);
  CHECK(refused.err == "memplan: error: --apply needs the config files to write to; give them with --config FILE\n");
}

TEST_CASE("memplan --auto on a DGX Spark keeps the OS's share of unified memory") {
  StandInMachine machine("nvidia-smi-gb10.csv", "", "proc-meminfo-gb10.txt");
  const json j = parse(run_cli({"--auto", "--config", kSft, "--format", "json"}));
  // MemTotal 127600748 kB; MemAvailable 118566368 kB; the GB10 profile keeps 28 GiB for the OS.
  const std::int64_t total = 127600748LL * 1024;
  const std::int64_t reserve = 28LL * 1073741824;
  // Capacity: what is free plus the OS's share, at most the total (here the total).
  REQUIRE(118566368LL * 1024 + reserve > total);
  CHECK(j["budget"]["capacity_bytes"] == total);
  CHECK(j["budget"]["headroom_bytes"] == reserve);
  CHECK(j["budget"]["safety_margin_bytes"] == 1073741824 + total / 10);
  CHECK(j["recommendation"]["fits"] == true);
}

TEST_CASE("plan --gpu: GRPO with vLLM colocated leaves vLLM its share of the GPU") {
  const auto r = run_cli({"plan", "--config", kGrpo, "--gpu", "h100-sxm", "--format", "json"});
  INFO(r.err);
  REQUIRE((r.code == cli::kExitOk || r.code == cli::kExitDoesNotFit));
  const json j = json::parse(r.out);
  const std::int64_t capacity = 85'017'493'504;  // h100-sxm's usable memory
  // vllm_gpu_memory_utilization: 0.35 of the whole device.
  const auto vllm = static_cast<std::int64_t>(static_cast<double>(capacity) * 0.35);
  CHECK(j["budget"]["headroom_bytes"] == vllm);
  CHECK(j["budget"]["budget_bytes"] == capacity - (1073741824 + capacity / 10) - vllm);
  CHECK(j["inputs"]["notes"][1] == "vLLM colocate reserves 27.71 GiB (0.35 of the GPU) for generation");
}

TEST_CASE("plan --gpu warns about bf16 on a GPU without it") {
  const auto r = run_cli({"plan", "--model-params", "1B", "--torch-dtype", "bfloat16", "--bf16", "--gpu", "t4"});
  INFO(r.err);
  CHECK(r.code == cli::kExitOk);
  CHECK_THAT(r.out, Catch::Contains("GPU: Tesla T4 (15.00 GiB)\n"));
  CHECK_THAT(r.out, Catch::Contains("warning: Tesla T4 (t4) has no hardware bf16"));
  // fp16 autocast on the same GPU: no warning.
  const auto fp16 = run_cli({"plan", "--model-params", "1B", "--torch-dtype", "float16", "--fp16", "--gpu", "t4"});
  CHECK(fp16.code == cli::kExitOk);
  CHECK_THAT(fp16.out, !Catch::Contains("warning"));
}

namespace {

// Seed 002's project (tests/data/configs/hydra/contrastive), copied where --apply may write.
void copy_project(const TempDir& dir) {
  const std::string from = std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/configs/hydra/contrastive";
  std::filesystem::copy(from, dir.path(), std::filesystem::copy_options::recursive);
}

const std::string kMiniLm = "sentence-transformers/all-MiniLM-L6-v2";

}  // namespace

TEST_CASE("seed 002: --auto plans the curriculum stage its defaults list names, and --apply writes that plan") {
  TempDir dir;
  copy_project(dir);
  ScopedCwd cwd(dir.path());  // `memplan --auto` finds conf/config.yaml
  const std::string config = read_file("conf/config.yaml");
  const std::vector<std::string> args = {"--auto", "--model", kMiniLm, "--gpu-memory", "24GiB", "--format", "json"};
  const json j = parse(run_cli(args));
  const json& rec = j["recommendation"];
  REQUIRE(rec["fits"] == true);
  const auto budget = j["budget"]["budget_bytes"].get<std::int64_t>();
  const auto max = rec["max_micro_batch"].get<std::int64_t>();

  // The same step given by flags, without the composition: the stage's 1 + 32 + 24 texts per anchor.
  const std::string flat = dir.write("flat.yaml", "data_loader:\n  batch_size: 1\n  tokenization:\n    max_length: 512\n    padding: max_length\n"
                                                  "training:\n  trainer:\n    precision: \"16-mixed\"\n");
  auto peak = [&](std::int64_t batch, int texts, std::int64_t accum = 1) {
    const auto r = run_cli({"estimate", "--config", flat, "--model", kMiniLm, "--texts-per-example",
                            std::to_string(texts), "--batch", std::to_string(batch), "--grad-accum",
                            std::to_string(accum), "--format", "json"});
    INFO(r.err);
    REQUIRE(r.code == cli::kExitOk);
    return json::parse(r.out)["estimate"]["peak_bytes"].get<std::int64_t>();
  };
  CHECK(peak(max, 57) <= budget);
  CHECK(peak(max + 1, 57) > budget);
  // Accumulated gradients are held across micro-batches: the same accumulation as the plan.
  CHECK(rec["peak_bytes"].get<std::int64_t>() ==
        peak(rec["micro_batch"].get<std::int64_t>(), 57, rec["grad_accum"].get<std::int64_t>()));

  // The base file alone (the stage dropped with text_curriculum=null) would plan far more: the
  // trap the document's users fell into.
  auto base_args = args;
  base_args.push_back("text_curriculum=null");
  const json base = parse(run_cli(base_args));
  CHECK(base["recommendation"]["max_micro_batch"].get<std::int64_t>() > max);
  // The later stages (16 + 8) fit more than stage 01.
  auto stage2 = args;
  stage2.push_back("text_curriculum=02_stage");
  const json two = parse(run_cli(stage2));
  CHECK(two["recommendation"]["max_micro_batch"].get<std::int64_t>() > max);
  CHECK(peak(two["recommendation"]["max_micro_batch"].get<std::int64_t>(), 25) <= budget);

  // --apply writes the plan into the file that holds the values (both in conf/config.yaml); the
  // stage files are left as they are.
  const auto m = rec["micro_batch"].get<std::int64_t>();
  const auto a = rec["grad_accum"].get<std::int64_t>();
  const auto applied = run_cli({"--auto", "--model", kMiniLm, "--gpu-memory", "24GiB", "--apply"});
  INFO(applied.out + applied.err);
  REQUIRE(applied.code == cli::kExitOk);
  std::string expected = config;
  expected.replace(expected.find("batch_size: 45"), 14, fmt::format("batch_size: {}", m));
  expected.replace(expected.find("accumulate_grad_batches: 5 "), 27, fmt::format("accumulate_grad_batches: {} ", a));
  CHECK(read_file("conf/config.yaml") == expected);
  CHECK(read_file("conf/text_curriculum/01_stage.yaml") == "# conf/text_curriculum/01_stage.yaml\nn_positives: 32\nn_negatives: 24\n");
}

TEST_CASE("seed 002: --apply refuses a plan made from part of the config, and says so first") {
  TempDir dir;
  copy_project(dir);
  ScopedCwd cwd(dir.path());
  // The stage chosen at run time (an interpolation): memplan cannot know which file it is.
  std::string config = read_file("conf/config.yaml");
  config.replace(config.find("text_curriculum: 01_stage"), 25, "text_curriculum: ${oc.env:STAGE}");
  dir.write("conf/config.yaml", config);
  const std::string why =
      "conf/config.yaml:8: defaults: 'text_curriculum: ${oc.env:STAGE}' is not followed (an interpolation chooses "
      "the file at run time); choose the option on the command line: text_curriculum=OPTION";
  const auto refused = run_cli({"--auto", "--model", kMiniLm, "--gpu-memory", "24GiB", "--apply"});
  CHECK(refused.code != cli::kExitOk);
  CHECK(refused.out.empty());
  CHECK(refused.err == "memplan: error: --apply: refusing to write a plan made from part of the config: " + why +
                           "; give the missing files with --config, then run again\n");
  CHECK(read_file("conf/config.yaml") == config);
  // Without --apply the plan is printed, and its first line says what it leaves out.
  const auto shown = run_cli({"--auto", "--model", kMiniLm, "--gpu-memory", "24GiB"});
  CHECK(shown.out.rfind("warning: this plan leaves out part of the config: " + why + "\n", 0) == 0);
  // Choosing the stage on the command line makes the config whole again.
  const auto chosen = run_cli({"--auto", "--model", kMiniLm, "--gpu-memory", "24GiB", "text_curriculum=01_stage",
                               "--dry-run"});
  CHECK(chosen.code == cli::kExitOk);
}

TEST_CASE("seed 002: check labels each line with the file it checks") {
  TempDir dir;
  copy_project(dir);
  ScopedCwd cwd(dir.path());
  const auto r = run_cli({"check", "--model", kMiniLm, "--gpu-memory", "24GiB", "--config", "conf/config.yaml",
                          "conf/text_curriculum/02_stage.yaml", "conf/text_curriculum/03_stage.yaml"});
  INFO(r.out + r.err);
  CHECK(r.out.find("conf/text_curriculum/02_stage.yaml: ") == 0);
  CHECK(r.out.find("\nconf/text_curriculum/03_stage.yaml: ") != std::string::npos);
  CHECK(r.out.find("; micro-batch 45 from conf/config.yaml:11\n") != std::string::npos);
}

// memplan check on a mix of fitting, non-fitting and malformed configs: one line per file, the
// summary, exit codes, JSON and GitHub annotations. Budgets are chosen far from any plausible
// prediction (1 GiB and 1000 TB for an 8B model), and predicted figures come from the engine.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/exit_codes.hpp"
#include "cli_harness.hpp"
#include "cli/training_flags.hpp"
#include "io/config/config_loader.hpp"
#include "memplan/engine.hpp"

using namespace memplan;
namespace stdfs = std::filesystem;

using memplan::testing::CliRun;
using memplan::testing::run_cli;

namespace {

struct Dir {
  std::string path;
  Dir() {
    std::string tmpl = (stdfs::temp_directory_path() / "memplan-check-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~Dir() { stdfs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path + "/" + name, std::ios::binary) << text;
    return path + "/" + name;
  }
};

const char* kFits =
    "# memplan: gpu-memory=1000TB\n"
    "model_name_or_path: meta-llama/Llama-3.1-8B\n"
    "per_device_train_batch_size: 2\n"
    "bf16: true\n"
    "gradient_checkpointing: true\n";
const char* kTooBig =
    "model_name_or_path: meta-llama/Llama-3.1-8B\n"
    "per_device_train_batch_size: 8  # line 2: annotations point here\n"
    "bf16: true\n"
    "gradient_checkpointing: true\n"
    "lora_rnak: 8\n"
    "# memplan: gpu-memory=4GiB\n";
const char* kBroken = "model_name_or_path: meta-llama/Llama-3.1-8B\nper_device_train_batch_size: [1, 2\n";
const char* kBadValue = "model_name_or_path: meta-llama/Llama-3.1-8B\nper_device_train_batch_size: four\n";
const char* kNoBudget = "model_name_or_path: meta-llama/Llama-3.1-8B\nper_device_train_batch_size: 1\nbf16: true\n"
                        "gradient_checkpointing: true\n";

// The figure check compares: the engine's total for the config, through the same loader.
Bytes predicted(const std::string& file) {
  io::ConfigRequest req;
  req.files = {file};
  auto loaded = io::load_config(req, io::real_file_system());
  REQUIRE(loaded.has_value());
  auto in = cli::apply_training_flags(cli::TrainingFlags{}, loaded->inputs);
  REQUIRE(in.has_value());
  auto e = estimate(in->model, in->config);
  REQUIRE(e.has_value());
  return e->peak;
}

// plan's default: GPU memory less 1 GiB and 10% of it.
Bytes budget_of(Bytes capacity) { return capacity - Bytes::gib(1) - Bytes::of(capacity.count() / 10); }

std::string pct(Bytes figure, Bytes capacity) {
  return fmt::format("{:.1f}%", 100.0 * static_cast<double>(figure.count()) / static_cast<double>(capacity.count()));
}

}  // namespace

TEST_CASE("check: one line per file, warnings under it, a summary; invalid files do not stop the others") {
  Dir d;
  const std::string fits = d.write("fits.yaml", kFits);
  const std::string big = d.write("big.yaml", kTooBig);
  const std::string broken = d.write("broken.yaml", kBroken);
  const std::string bad = d.write("bad.yaml", kBadValue);
  const Bytes tb = Bytes::of(1'000'000'000'000'000), gib4 = Bytes::gib(4);
  const Bytes pf = predicted(fits), pb = predicted(big);

  CliRun r = run_cli({"check", fits, big, broken, bad});
  CHECK(r.err.empty());
  CHECK(r.code == 2);  // an invalid config outranks one that does not fit
  const std::string expected =
      fmt::format("{}:3: fits: predicted {:.2f} GiB <= budget {:.2f} GiB ({} of {:.2f} GiB)\n", fits, pf.as_gib(),
                  budget_of(tb).as_gib(), pct(pf, tb), tb.as_gib()) +
      fmt::format("{}:2: does not fit: predicted {:.2f} GiB > budget {:.2f} GiB ({} of 4.00 GiB)\n", big, pb.as_gib(),
                  budget_of(gib4).as_gib(), pct(pb, gib4)) +
      fmt::format("  warning: {}:5: unknown key 'lora_rnak'; did you mean 'lora_r'?\n", big) +
      fmt::format("{}:3: invalid: invalid YAML: end of sequence flow not found\n", broken) +
      fmt::format("{}:2: invalid: per_device_train_batch_size must be an integer, got \"four\"\n", bad) +
      "checked 4 configs: 1 fits, 1 does not fit, 2 invalid (predicted peak vs. GPU memory less the safety margin and headroom)\n";
  CHECK(r.out == expected);

  CHECK(run_cli({"check", fits, big}).code == 1);
  CHECK(run_cli({"check", fits}).code == 0);
  CHECK(run_cli({"check", fits, fits}).out.find("checked 2 configs: 2 fit, 0 do not fit, 0 invalid") !=
        std::string::npos);
}

TEST_CASE("check: --gpu-memory overrides the config's, an unknown model is invalid at its line") {
  Dir d;
  const std::string fits = d.write("fits.yaml", kFits);
  CliRun r = run_cli({"check", fits, "--gpu-memory", "4GiB"});
  CHECK(r.code == 1);
  CHECK(r.out.find(fits + ":3: does not fit: ") == 0);
  const std::string unknown =
      d.write("unknown.yaml", "model_name_or_path: meta-llama/Llama-3.1-9B\nper_device_train_batch_size: 1\n");
  CliRun u = run_cli({"check", unknown, "--gpu-memory", "80GiB"});
  CHECK(u.code == 2);
  CHECK(u.out.rfind(unknown + ":1: invalid: unknown model 'meta-llama/Llama-3.1-9B'", 0) == 0);
}

TEST_CASE("check: --max-utilization turns a config that fits but is too full into a failure") {
  Dir d;
  const std::string fits = d.write("fits.yaml", kFits);
  const Bytes tb = Bytes::of(1'000'000'000'000'000);
  const Bytes pf = predicted(fits);
  // Any prediction above 10 MB is above 0.000001% of 1000 TB.
  CliRun r = run_cli({"check", fits, "--max-utilization", "0.000001"});
  CHECK(r.code == 1);
  CHECK(r.out == fmt::format("{}:3: fits, but above --max-utilization 1e-06%: predicted {:.2f} GiB <= budget {:.2f} "
                             "GiB ({} of {:.2f} GiB)\n"
                             "checked 1 config: 0 fit, 0 do not fit, 1 above 1e-06%, 0 invalid (predicted peak vs. "
                             "GPU memory less the safety margin and headroom)\n",
                             fits, pf.as_gib(), budget_of(tb).as_gib(), pct(pf, tb), tb.as_gib()));
  CHECK(run_cli({"check", fits, "--max-utilization", "95"}).code == 0);
}

TEST_CASE("check: usage errors have their own exit codes") {
  Dir d;
  const std::string nobudget = d.write("n.yaml", kNoBudget);
  memplan::testing::StandInMachine no_gpu(std::nullopt);
  CliRun r = run_cli({"check", nobudget});
  CHECK(r.code == 64);
  CHECK(r.out == nobudget + ":2: error: no GPU to check against: no GPU found (NVML skipped: "
                            "MEMPLAN_NVIDIA_SMI=/nonexistent/nvidia-smi; /nonexistent/nvidia-smi: not found; "
                            "/nonexistent/rocm-smi: not found); give --gpu NAME or --gpu-memory SIZE, or name it in "
                            "the config with # memplan: gpu=NAME\n"
                            "checked 1 config: 0 fit, 0 do not fit, 0 invalid, 1 without a GPU to check against "
                            "(predicted peak vs. GPU memory less the safety margin and headroom)\n");
  CliRun pct = run_cli({"check", nobudget, "--max-utilization", "150"});
  CHECK(pct.code == 64);
  CHECK(pct.err == "memplan: error: --max-utilization = 150 must be a percentage between 0 and 100\n");
  CliRun size = run_cli({"check", nobudget, "--gpu-memory", "10x"});
  CHECK(size.code == 64);
  CHECK(size.err == "memplan: error: --gpu-memory: invalid size unit in \"10x\"; use B, KB, MB, GB, TB (decimal) or "
                    "KiB, MiB, GiB, TiB (binary)\n");
  CliRun fmt_ = run_cli({"check", nobudget, "--format", "xml"});
  CHECK(fmt_.code == 64);
  CliRun none = run_cli({"check"});
  CHECK(none.code == memplan::cli::kExitInvalidInput);  // a usage error: bad input like any other (issue 32)
}

TEST_CASE("check --format json") {
  Dir d;
  const std::string fits = d.write("fits.yaml", kFits);
  const std::string big = d.write("big.yaml", kTooBig);
  const std::string broken = d.write("broken.yaml", kBroken);
  CliRun r = run_cli({"check", fits, big, broken, "--format", "json"});
  CHECK(r.code == 2);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["command"] == "check");
  CHECK(j["exit_code"] == 2);
  CHECK(j["max_utilization"].is_null());
  REQUIRE(j["results"].size() == 3);
  CHECK(j["results"][0]["status"] == "fits");
  CHECK(j["results"][0]["line"] == 3);
  CHECK(j["results"][0]["peak_bytes"] == predicted(fits).count());
  CHECK(j["results"][0]["capacity_bytes"] == 1'000'000'000'000'000);
  CHECK(j["results"][0]["budget_source"] == fits + ":1");
  CHECK(j["results"][1]["status"] == "does_not_fit");
  CHECK(j["results"][1]["budget_bytes"] == budget_of(Bytes::gib(4)).count());
  CHECK(j["results"][1]["warnings"][0]["line"] == 5);
  CHECK(j["results"][1]["warnings"][0]["message"] == "unknown key 'lora_rnak'");
  CHECK(j["results"][1]["warnings"][0]["suggestion"] == "did you mean 'lora_r'?");
  CHECK(j["results"][2]["status"] == "invalid");
  CHECK(j["results"][2]["line"] == 3);
  CHECK(j["results"][2]["message"] == "invalid YAML: end of sequence flow not found");
  CHECK(j["summary"]["fits"] == 1);
  CHECK(j["summary"]["does_not_fit"] == 1);
  CHECK(j["summary"]["invalid"] == 1);
}

TEST_CASE("check --format github: annotations at the batch-size line, escaped") {
  Dir d;
  const std::string fits = d.write("fits.yaml", kFits);
  const std::string big = d.write("big.yaml", kTooBig);
  const std::string broken = d.write("broken.yaml", kBroken);
  const Bytes tb = Bytes::of(1'000'000'000'000'000), gib4 = Bytes::gib(4);
  const Bytes pf = predicted(fits), pb = predicted(big);
  CliRun r = run_cli({"check", fits, big, broken, "--format", "github"});
  CHECK(r.code == 2);
  CHECK(r.out ==
        fmt::format("{}:3: fits: predicted {:.2f} GiB <= budget {:.2f} GiB ({} of {:.2f} GiB)\n", fits, pf.as_gib(),
                    budget_of(tb).as_gib(), pct(pf, tb), tb.as_gib()) +
            fmt::format("::warning file={},line=5,title=memplan::unknown key 'lora_rnak'; did you mean 'lora_r'?\n",
                        big) +
            fmt::format("::error file={},line=2,title=memplan%3A does not fit::does not fit: predicted {:.2f} GiB > "
                        "budget {:.2f} GiB ({}%25 of 4.00 GiB)\n",
                        big, pb.as_gib(), budget_of(gib4).as_gib(), pct(pb, gib4).substr(0, pct(pb, gib4).size() - 1)) +
            fmt::format("::error file={},line=3,title=memplan%3A invalid config::invalid YAML: end of sequence flow "
                        "not found\n",
                        broken) +
            "checked 3 configs: 1 fits, 1 does not fit, 1 invalid (predicted peak vs. GPU memory less the safety margin and headroom)\n");
}

TEST_CASE("check: --config files are layered under each FILE (a main config and its stages)") {
  Dir d;
  const std::string main = d.write("config.yaml",
                                   "# memplan: gpu-memory=1000TB\n"
                                   "model:\n  model_name_or_path: meta-llama/Llama-3.1-8B\n"
                                   "data_loader:\n  batch_size: 4\n"
                                   "training:\n  trainer:\n    accumulate_grad_batches: 2\n    precision: bf16-mixed\n");
  const std::string s1 = d.write("01.yaml", "data_loader:\n  batch_size: 2\n");
  const std::string s2 = d.write("02.yaml", "data_loader:\n  batch_sise: 2\n");
  CliRun r = run_cli({"check", "--config", main, s1, s2});
  CHECK(r.code == 0);
  CHECK(r.out.find(s1 + ":2: fits: ") == 0);  // the batch of stage 01 is its own
  // Stage 02 keeps the main file's batch; its line still names stage 02 and says where the batch is.
  const auto line2 = r.out.find("\n" + s2 + ": fits: ");
  REQUIRE(line2 != std::string::npos);
  CHECK(r.out.find("; micro-batch 4 from " + main + ":5\n", line2) < r.out.find('\n', line2 + 1));
  CHECK(r.out.find("  warning: " + s2 + ":2: unknown key 'data_loader.batch_sise'; did you mean "
                   "'data_loader.batch_size'?\n") != std::string::npos);
}

TEST_CASE("check: the GPU comes from --gpu, the config's # memplan: gpu=NAME, or detection") {
  Dir d;
  const std::string small = "model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 1\nbf16: true\n";
  const std::string named = d.write("named.yaml", "# memplan: gpu=h100-sxm\n" + small);
  const std::string typo = d.write("typo.yaml", small + "# memplan: gpu=h100-sxn\n");
  const std::string plain = d.write("plain.yaml", small);
  const std::int64_t h100 = 85'017'493'504;  // the h100-sxm profile's usable memory, as CUDA reports it

  CliRun r = run_cli({"check", named, typo, "--format", "json"});
  CHECK(r.code == 2);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["results"][0]["status"] == "fits");
  CHECK(j["results"][0]["capacity_bytes"] == h100);
  CHECK(j["results"][0]["safety_margin_bytes"] == 1073741824 + h100 / 10);
  CHECK(j["results"][0]["budget_source"] == named + ":1");
  CHECK(j["results"][0]["gpu"] == "NVIDIA H100 80GB HBM3 (79.18 GiB usable as CUDA reports it; nvidia-smi: 79.65 GiB)");
  CHECK(j["results"][0]["peak_bytes"] == predicted(named).count());
  CHECK(j["results"][1]["status"] == "invalid");
  CHECK(j["results"][1]["location"] == typo + ":4");
  CHECK(j["results"][1]["message"] == "unknown GPU 'h100-sxn'; did you mean 'h100-sxm'?");

  // --gpu wins over the file's comment and is checked once, as a usage error.
  CliRun t4 = run_cli({"check", named, "--gpu", "t4", "--format", "json"});
  auto jt = nlohmann::json::parse(t4.out);
  CHECK(jt["results"][0]["budget_source"] == "--gpu t4");
  CHECK(jt["results"][0]["capacity_bytes"] == 15360LL * 1048576);
  CHECK(jt["results"][0]["notes"][0].get<std::string>().rfind("Tesla T4 (t4) has no hardware bf16", 0) == 0);
  CliRun bad = run_cli({"check", named, "--gpu", "t5"});
  CHECK(bad.code == 64);
  CHECK(bad.err == "memplan: error: --gpu: unknown GPU 't5'; run 'memplan gpus' for the known GPUs, or give --gpu-memory SIZE\n");

  // A file that names no GPU is checked on the one detected (here the stand-in's idle H100).
  memplan::testing::StandInMachine machine("nvidia-smi-h100.csv");
  CliRun det = run_cli({"check", plain, "--format", "json"});
  CHECK(det.code == 0);
  auto jd = nlohmann::json::parse(det.out);
  CHECK(jd["results"][0]["budget_source"] == "detected");
  CHECK(jd["results"][0]["capacity_bytes"] == 81080LL * 1048576);  // free memory
  CHECK(jd["results"][0]["budget_bytes"] == 81080LL * 1048576 - 1073741824 - 81559LL * 1048576 / 10);
}

TEST_CASE("check (issue 11 item 8): a FIFO as the checked file, --config, --keys or --model fails at once") {
  memplan::testing::TempDir dir;
  const std::string fifo = dir.path() + "/pipe.yaml";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const std::string cfg = dir.write("train.yaml", "model_name_or_path: m\nper_device_train_batch_size: 1\n");
  const std::string refused = fifo + ": cannot read: a FIFO (named pipe), not a regular file";
  auto r = memplan::testing::run_cli({"check", fifo, "--model-params", "125M", "--gpu-memory", "80GiB"});
  CHECK(r.code == 2);
  CHECK(r.out.find(fifo + ": invalid: cannot read: a FIFO (named pipe), not a regular file\n") != std::string::npos);
  auto c = memplan::testing::run_cli({"estimate", "--model-params", "125M", "--config", fifo});
  CHECK(c.err == "memplan: error: " + refused + "\n");
  auto k = memplan::testing::run_cli({"estimate", "--model-params", "125M", "--config", cfg, "--keys", fifo});
  CHECK(k.err == "memplan: error: " + refused + "\n");
  auto m = memplan::testing::run_cli({"estimate", "--model", fifo});
  CHECK(m.err == "memplan: error: " + refused + "\n");
  auto z = memplan::testing::run_cli({"estimate", "--model", "/dev/zero"});
  CHECK(z.err == "memplan: error: /dev/zero: cannot read: a character device, not a regular file\n");
  // No bound on time (issue 34): a FIFO opened for reading would block this test for ever.
}

TEST_CASE("check (issue 34): a DeepSpeed JSON the trainer refuses to start with fails the file") {
  memplan::testing::TempDir dir;
  const std::string train = dir.write("train.yaml",
                                      "model_name_or_path: gpt2\n"
                                      "per_device_train_batch_size: 4\n"
                                      "deepspeed: ds.json\n");
  dir.write("ds.json", "{\n  \"train_micro_batch_size_per_gpu\": 8,\n  \"zero_optimization\": {\"stage\": 2}\n}\n");
  const auto r = run_cli({"check", train, "--gpu", "h100-sxm"});
  INFO(r.out);
  CHECK(r.code == memplan::cli::kExitInvalidInput);
  CHECK(r.out.find(dir.path() + "/ds.json:2: invalid: train_micro_batch_size_per_gpu = 8 contradicts the trainer's "
                                "batch = 4") != std::string::npos);
  // Agreeing values: fits.
  dir.write("ds.json", "{\n  \"train_micro_batch_size_per_gpu\": 4,\n  \"zero_optimization\": {\"stage\": 2}\n}\n");
  CHECK(run_cli({"check", train, "--gpu", "h100-sxm"}).code == 0);
}

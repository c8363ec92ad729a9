// Tests src/cli/cmd_profile.cpp (and src/io/measure/process.cpp, src/io/measure/profile.cpp under it) with real
// processes: tests/data/profile/standin.py allocates memory at a given rate (touching every page,
// so its resident set grows), then exits, crashes, prints PyTorch's OOM message, hangs or leaves
// children behind. Sizes stay small (limits of 200-300 MiB): the test machine is shared.
//
// The watchdog's slack (docs/profile.md#guarantees): a rung is stopped within one sampling
// interval plus the time of one /proc scan and the signal's delivery after it passes --stop-at.
// At 1 GiB/s and 2 ms sampling that is a few MiB on an idle machine; kSlack allows for a loaded
// CI machine whose scheduler may not run the watchdog for tens of milliseconds.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>
#include <limits>
#include "io/measure/profile.hpp"
#include <nlohmann/json.hpp>

#include "cli/exit_codes.hpp"
#include "cli_harness.hpp"
#include "io/measure/calibration_store.hpp"

using namespace memplan::testing;
using json = nlohmann::json;

namespace {

constexpr std::int64_t kMiB = 1024 * 1024;
constexpr std::int64_t kSlack = 64 * kMiB;

std::string standin() { return std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/profile/standin.py"; }

// Processes whose command line mentions `token` (the test's temporary folder): none may be left.
std::vector<std::string> processes_mentioning(const std::string& token) {
  std::vector<std::string> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string cmd = read_file(std::string("/proc/") + e->d_name + "/cmdline");
    for (char& c : cmd)
      if (c == '\0') c = ' ';
    std::string stat = read_file(std::string("/proc/") + e->d_name + "/stat");
    const auto close = stat.rfind(')');
    const bool zombie = close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
    if (!zombie && cmd.find(token) != std::string::npos) out.push_back(std::string(e->d_name) + ": " + cmd);
  }
  ::closedir(d);
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

std::vector<std::string> statuses(const json& j) {
  std::vector<std::string> out;
  for (const auto& r : j["profile"]["runs"]) out.push_back(r["status"].get<std::string>());
  return out;
}

// The common command line: system watch, JSON, logs and stand-in arguments in `dir`, quick
// settling that tolerates other processes on a shared machine.
std::vector<std::string> profile_args(const TempDir& dir, const std::vector<std::string>& options,
                                      const std::vector<std::string>& standin_args) {
  std::vector<std::string> args = {
      "profile",  "--watch", "system",         "--format", "json",    "--log-dir", dir.path() + "/logs",
      "--settle", "5",       "--settle-slack", "50%",      "--grace", "2"};
  args.insert(args.end(), options.begin(), options.end());
  args.insert(args.end(), {"--", "python3", standin(), "--token", dir.path(), "--log-args", dir.path() + "/args.txt"});
  args.insert(args.end(), standin_args.begin(), standin_args.end());
  return args;
}

}  // namespace

namespace {

// This process's high-water resident memory (VmHWM in /proc/self/status), in bytes.
std::int64_t self_peak_rss() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "VmHWM:   12345 kB"
  return 0;
}

}  // namespace

TEST_CASE("profile: rungs that fit run, the first past --stop-at is stopped near the limit, nothing runs after") {
  TempDir dir;
  // 40 MiB per batch unit at 1000 MiB/s: 1, 2, 4 hold 40, 80, 160 MiB (plus Python's ~10 MiB);
  // 8 would hold 320 MiB > 300 MiB. Each rung holds its peak for 0.3 s before exiting: the watchdog
  // samples, and a stand-in that exits the moment it reaches its peak can be missed on a loaded
  // machine (a CI run sampled 77 MiB of 80).
  const auto r = run_cli(profile_args(dir, {"--stop-at", "300MiB", "--batches", "1,2,4,8,16"},
                                      {"--batch", "{batch}", "--per-batch-mb", "40", "--rate-mbps", "1000",
                                       "--then", "sleep", "--sleep", "0.3"}));
  INFO(r.err);
  REQUIRE(r.code == memplan::cli::kExitOk);
  const json j = json::parse(r.out);
  CHECK(statuses(j) == std::vector<std::string>{"ok", "ok", "ok", "stopped"});
  const auto& runs = j["profile"]["runs"];
  for (int i = 0; i < 3; ++i) {
    const std::int64_t want = (std::int64_t{40} << i) * kMiB;
    CHECK(runs[i]["peak_bytes"].get<std::int64_t>() >= want);
    CHECK(runs[i]["peak_bytes"].get<std::int64_t>() <= want + 40 * kMiB);  // the interpreter itself
    CHECK(runs[i]["exit_code"] == 0);
  }
  const std::int64_t limit = 300 * kMiB;
  CHECK(runs[3]["peak_bytes"].get<std::int64_t>() > limit);
  CHECK(runs[3]["peak_bytes"].get<std::int64_t>() <= limit + kSlack);
  // The kernel's own high-water mark of the stand-in, independent of the watchdog's sampling. Linux
  // carries it across exec, so it includes the forked test process's resident memory before exec
  // (hundreds of MiB under AddressSanitizer): bounded by that plus the limit.
  CHECK(runs[3]["leader_max_rss_bytes"].get<std::int64_t>() <= limit + kSlack + self_peak_rss());
  CHECK(runs[3]["signal"] == SIGTERM);
  CHECK(j["profile"]["not_run"] == json::parse(R"([{"micro_batch":16,"grad_accum":1,"seq_len":null}])"));
  CHECK(j["profile"]["safe_maximum"]["micro_batch"] == 4);
  CHECK(j["profile"]["stop_at_bytes"] == limit);
  // Nothing ran after the stopped rung: the stand-in saw batches 1, 2, 4, 8 only.
  const auto seen = lines_of(dir.read("args.txt"));
  REQUIRE(seen.size() == 4);
  CHECK(seen[3].find("--batch 8 ") != std::string::npos);
  CHECK(processes_mentioning(dir.path()).empty());
  // Each rung's folder has the exact command and its output.
  const std::string rung4 = dir.path() + "/logs/rung-04-b8-ga1";
  CHECK(read_file(rung4 + "/command.txt").find("python3 " + standin() + " --token " + dir.path()) == 0);
  CHECK(read_file(rung4 + "/output.log").find("standin: pid") == 0);
  // A progress line per rung on stderr.
  CHECK(r.err.find("memplan profile: [4/5] micro-batch 8, grad-accum 1: stopped, peak") != std::string::npos);
}

TEST_CASE("profile: the text table is seed 000's results template") {
  TempDir dir;
  auto args =
      profile_args(dir, {"--stop-at", "200MiB", "--batches", "1,2"}, {"--batch", "{batch}", "--per-batch-mb", "10"});
  args[4] = "text";
  const auto r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.code == memplan::cli::kExitOk);
  const auto head = cells(lines_of(r.out)[0]);
  CHECK(head == std::vector<std::string>{"micro-batch", "grad-accum", "seq-len", "peak", "headroom", "time", "status",
                                         "notes"});
  CHECK(row(r.out, "1").at(6) == "ok");
  CHECK(row(r.out, "1").at(7) == "baseline");
  CHECK(row(r.out, "2").at(6) == "ok");
  CHECK(r.out.find("Safe maximum: micro-batch 2, grad-accum 1 (peak ") != std::string::npos);
  CHECK(r.out.find("Watchdog: resident memory of the process tree (/proc), stop at 200.0 MiB (--stop-at 200MiB).") !=
        std::string::npos);
}

TEST_CASE("profile: a CUDA out-of-memory message, exit 137, a crash and a hang end the ladder with their status") {
  TempDir dir;
  SECTION("OOM text") {
    const auto r =
        run_cli(profile_args(dir, {"--stop-at", "300MiB", "--batches", "1,2,4"},
                             {"--batch", "{batch}", "--per-batch-mb", "5", "--then", "oom", "--from-batch", "2"}));
    INFO(r.err);
    CHECK(r.code == memplan::cli::kExitOk);  // micro-batch 1 is the safe maximum
    const json j = json::parse(r.out);
    CHECK(statuses(j) == std::vector<std::string>{"ok", "oom"});
    CHECK(j["profile"]["runs"][1]["notes"] == "out-of-memory message in its output");
    CHECK(j["profile"]["not_run"].size() == 1);
  }
  SECTION("exit 137") {
    const auto r = run_cli(profile_args(dir, {"--stop-at", "300MiB", "--batches", "1,2"},
                                        {"--batch", "{batch}", "--exit-code", "137", "--from-batch", "2"}));
    const json j = json::parse(r.out);
    CHECK(statuses(j) == std::vector<std::string>{"ok", "oom"});
    CHECK(j["profile"]["runs"][1]["exit_code"] == 137);
  }
  SECTION("a crash") {
    const auto r = run_cli(profile_args(dir, {"--stop-at", "300MiB", "--batches", "1,2,4"},
                                        {"--batch", "{batch}", "--exit-code", "3", "--from-batch", "2"}));
    CHECK(r.code == memplan::cli::kExitDoesNotFit);
    const json j = json::parse(r.out);
    CHECK(statuses(j) == std::vector<std::string>{"ok", "failed"});
    CHECK(j["profile"]["runs"][1]["notes"] == "exit 3");
  }
  SECTION("a hang that ignores SIGTERM: timeout, then SIGKILL after the grace period") {
    auto args = profile_args(dir, {"--stop-at", "300MiB", "--batches", "1,2", "--rung-timeout", "1"},
                             {"--batch", "{batch}", "--then", "hang", "--ignore-term"});
    args[std::find(args.begin(), args.end(), "--grace") - args.begin() + 1] = "0.5";
    const auto r = run_cli(args);
    CHECK(r.code == memplan::cli::kExitDoesNotFit);
    const json j = json::parse(r.out);
    CHECK(statuses(j) == std::vector<std::string>{"timeout"});
    CHECK(j["profile"]["runs"][0]["signal"] == SIGKILL);
    CHECK(j["profile"]["runs"][0]["notes"] == "still running after 1 s; SIGKILL needed after the grace period");
    CHECK(j["profile"]["safe_maximum"].is_null());
    // The rung ran its full timeout (a lower bound no slow machine breaks), then was killed.
    CHECK(j["profile"]["runs"][0]["seconds"].get<double>() >= 1.0);
  }
  CHECK(processes_mentioning(dir.path()).empty());
}

TEST_CASE("profile: children left behind, even in their own session, are ended; a child's memory counts") {
  TempDir dir;
  SECTION("left behind") {
    const auto r = run_cli(
        profile_args(dir, {"--stop-at", "300MiB", "--batches", "1"}, {"--batch", "{batch}", "--children", "2"}));
    INFO(r.err);
    const json j = json::parse(r.out);
    // Exit 0 while its children run on is a launcher's shape: not a measurement (issue 34).
    CHECK(statuses(j) == std::vector<std::string>{"no-measurement"});
    CHECK(j["profile"]["runs"][0]["notes"] ==
          "exited 0 while 2 processes it started ran on (ended by memplan): a launcher that backgrounds the "
          "training? run the training itself in the foreground");
  }
  SECTION("the memory is a child's") {
    // Batch 4 grows a grandchild to 4 x 60 = 240 MiB > 200 MiB: the tree's RSS, not the leader's.
    const auto r = run_cli(profile_args(dir, {"--stop-at", "200MiB", "--batches", "1,4"},
                                        {"--batch", "{batch}", "--per-batch-mb", "60", "--child-alloc"}));
    const json j = json::parse(r.out);
    CHECK(statuses(j) == std::vector<std::string>{"ok", "stopped"});
    // The leader itself holds ~10 MiB: only the tree's sum passes the limit.
    CHECK(j["profile"]["runs"][1]["peak_bytes"].get<std::int64_t>() > 200 * kMiB);
    CHECK(j["profile"]["runs"][1]["peak_bytes"].get<std::int64_t>() <= 200 * kMiB + kSlack);
  }
  CHECK(processes_mentioning(dir.path()).empty());
}

TEST_CASE("profile: SIGINT to memplan ends the running rung and the ladder, leaving nothing behind") {
  TempDir dir;
  const std::string started = dir.path() + "/started";
  std::atomic<bool> sent{false};
  std::thread ctrl_c([&] {
    for (int i = 0; i < 1200 && !std::filesystem::exists(started); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::kill(::getpid(), SIGINT);
    sent = true;
  });
  const auto r =
      run_cli(profile_args(dir, {"--stop-at", "300MiB", "--batches", "1,2,4"},
                           {"--batch", "{batch}", "--then", "hang", "--started", started, "--children", "1"}));
  ctrl_c.join();
  REQUIRE(sent);
  CHECK(r.code == 130);
  const json j = json::parse(r.out);
  CHECK(statuses(j) == std::vector<std::string>{"interrupted"});
  CHECK(j["profile"]["runs"][0]["notes"] == "memplan received SIGINT");
  CHECK(j["profile"]["not_run"].size() == 2);
  CHECK(lines_of(dir.read("args.txt")).size() == 1);
  CHECK(processes_mentioning(dir.path()).empty());
}

TEST_CASE("profile --config: each rung gets a copy with its values; the user's file is byte-identical") {
  TempDir dir;
  const std::string original = read_file(std::string(MEMPLAN_SOURCE_DIR) + "/configs/examples/hf-trl-sft-lora.yaml");
  const std::string config = dir.write("train.yaml", original);
  struct stat before {};
  REQUIRE(::stat(config.c_str(), &before) == 0);
  const auto r = run_cli(profile_args(dir, {"--config", config, "--stop-at", "300MiB", "--batches", "1,2"},
                                      {"--config", "{config}", "--per-batch-mb", "10", "--then", "sleep", "--sleep", "0.3"}));
  INFO(r.err);
  REQUIRE(r.code == memplan::cli::kExitOk);
  CHECK(read_file(config) == original);
  struct stat after {};
  REQUIRE(::stat(config.c_str(), &after) == 0);
  CHECK(after.st_mtim.tv_sec == before.st_mtim.tv_sec);
  CHECK(after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
  // The copies differ from the original in the batch line only; the comments stay.
  const std::string copy1 = read_file(dir.path() + "/logs/rung-01-b1-ga8-s2048/train.yaml");
  std::string want1 = original;
  want1.replace(want1.find("per_device_train_batch_size: 4"), 30, "per_device_train_batch_size: 1");
  CHECK(copy1 == want1);
  const json j = json::parse(r.out);
  CHECK(statuses(j) == std::vector<std::string>{"ok", "ok"});
  // The stand-in read its batch from the copy: 1 x 10 and 2 x 10 MiB.
  CHECK(j["profile"]["runs"][1]["peak_bytes"].get<std::int64_t>() >= 20 * kMiB);
  CHECK(j["profile"]["runs"][0]["command"][7] == dir.path() + "/logs/rung-01-b1-ga8-s2048/train.yaml");
  // Beside each rung, memplan's prediction for Llama 3.1 8B with LoRA at seq-len 2048: at least
  // the frozen bf16 weights, 8.03e9 x 2 bytes.
  CHECK(j["profile"]["runs"][0]["predicted_bytes"].get<std::int64_t>() > 16'000'000'000LL);
  CHECK(j["profile"]["runs"][0]["difference_bytes"].get<std::int64_t>() ==
        j["profile"]["runs"][0]["peak_bytes"].get<std::int64_t>() -
            j["profile"]["runs"][0]["predicted_bytes"].get<std::int64_t>());
  CHECK(j["profile"]["runs"][0]["grad_accum"] == 8);
  // No unified-memory GPU here: host memory against a GPU prediction, and the output says so.
  CHECK(j["profile"]["notes"].back().get<std::string>().rfind("the predictions are GPU memory; the peaks are", 0) == 0);
  CHECK(j["profile"]["runs"][0]["seq_len"] == 2048);
}

TEST_CASE("profile warns before a rung predicted above the machine's memory (issue 32)") {
  TempDir dir;
  const std::string config =
      dir.write("train.yaml", read_file(std::string(MEMPLAN_SOURCE_DIR) + "/configs/examples/hf-trl-sft-lora.yaml"));
  // Llama 3.1 8B at micro-batch 256 x 2048 tokens: its fp32 logits alone are 256 x 2048 x 128256 x 4
  // bytes = 269 GB, more than any machine this suite runs on.
  const auto r = run_cli(profile_args(dir, {"--config", config, "--stop-at", "300MiB", "--batches", "1,256"},
                                      {"--config", "{config}", "--per-batch-mb", "1", "--then", "sleep", "--sleep", "0.2"}));
  INFO(r.err);
  CHECK_THAT(r.err, Catch::Contains("memplan profile: warning: micro-batch 256 is predicted at "));
  CHECK_THAT(r.err, Catch::Contains("(--max-batch 255 ends the ladder before it)"));
  CHECK_THAT(r.err, !Catch::Contains("micro-batch 1 is predicted"));
}

TEST_CASE("profile: usage errors say what is wrong") {
  TempDir dir;
  auto err = [&](std::vector<std::string> args) {
    const auto r = run_cli(args);
    CHECK(r.code == memplan::cli::kExitInvalidInput);
    return r.err;
  };
  CHECK(err({"profile", "--watch", "system", "--stop-at", "300MiB"}) ==
        "memplan: error: no command to profile; give it after --: memplan profile -- python train.py --batch_size "
        "{batch} --max_steps 3\n");
  CHECK(err({"profile", "--watch", "system", "--stop-at", "300", "--", "true", "{batch}"}) ==
        "memplan: error: --stop-at needs a unit: \"300\"; write --stop-at 300GB, --stop-at 300GiB or a percentage "
        "like 80%\n");
  CHECK(err({"profile", "--watch", "sytem", "--", "true", "{batch}"}) ==
        "memplan: error: --watch: unknown 'sytem'; did you mean 'system'?\n");
  CHECK(err({"profile", "--watch", "system", "--stop-at", "300MiB", "--", "true"}) ==
        "memplan: error: the command has no {batch}, {seq_len} or {config}: every rung would run the same thing; "
        "write {batch} where the command takes its micro-batch, e.g. --per_device_train_batch_size {batch}\n");
  CHECK(err({"profile", "--watch", "system", "--stop-at", "300MiB", "--batches", "1,4,2", "--", "true", "{batch}"}) ==
        "memplan: error: --batches: 2 after 4: the ladder must increase; list the values smallest first; the ladder "
        "stops at the first rung that fails\n");
  CHECK(err({"profile", "--watch", "system", "--stop-at", "300MiB", "--log-dir", dir.path(), "--", "/nonexistent/train",
             "{batch}"}) ==
        "memplan profile: [1/7] micro-batch 1, grad-accum 1: running\n"
        "memplan: error: cannot run '/nonexistent/train': No such file or directory; give the training command after "
        "--, e.g. memplan profile -- python train.py --batch {batch}\n");
}

TEST_CASE("profile --save, calibrate, and plan using the fit on this machine") {
  TempDir dir;
  ScopedEnv data("MEMPLAN_DATA_DIR", dir.path() + "/data");
  ScopedEnv on("MEMPLAN_CALIBRATION", std::nullopt);
  const auto r = run_cli(profile_args(
      dir,
      {"--model", "gpt2", "--seq-len", "128", "--gpu", "dgx-spark", "--stop-at", "300MiB", "--batches", "1,2", "--save"},
      {"--batch", "{batch}", "--per-batch-mb", "10"}));
  INFO(r.err);
  REQUIRE(r.code == memplan::cli::kExitOk);
  CHECK(r.err.find("Saved 2 measured rungs to " + dir.path() + "/data/measurements.jsonl") != std::string::npos);
  const auto saved = lines_of(read_file(dir.path() + "/data/measurements.jsonl"));
  REQUIRE(saved.size() == 2);
  const json first = json::parse(saved[0]);
  // The process tree's memory on a unified-memory GPU is what memplan predicts: kept for calibration.
  CHECK(first["gpu"] == "dgx-spark-gb10");
  CHECK(first["watch"] == "system");
  CHECK(first["model"] == "gpt2");
  CHECK(first["micro_batch"] == 1);
  CHECK(first["seq_len"] == 128);
  CHECK(first["predicted_bytes"].get<std::int64_t>() > 0);

  // Hand-made store: measured = 1.1 x predicted + 1 GiB exactly, at 10 and 20 GiB.
  const std::string host = first["host"];
  std::ofstream(dir.path() + "/data/measurements.jsonl", std::ios::trunc)
      << json{{"host", host}, {"gpu", "h100-sxm"}, {"measured_bytes", 12LL << 30}, {"predicted_bytes", 10LL << 30}}
             .dump()
      << "\n"
      << json{{"host", host}, {"gpu", "h100-sxm"}, {"measured_bytes", 23LL << 30}, {"predicted_bytes", 20LL << 30}}
             .dump()
      << "\n"
      << json{{"host", "elsewhere"}, {"gpu", "h100-sxm"}, {"measured_bytes", 5LL << 30}, {"predicted_bytes", 4LL << 30}}
             .dump()
      << "\n";
  const auto c = run_cli({"calibrate", "--format", "json"});
  INFO(c.err);
  REQUIRE(c.code == 0);
  const json cj = json::parse(c.out);
  REQUIRE(cj["calibration"]["machines"].size() == 2);
  const auto& m = cj["calibration"]["machines"][0];
  CHECK(m["host"] == host);
  CHECK(m["points"] == 2);
  CHECK(m["scale"].get<double>() == Approx(1.1).epsilon(1e-9));
  CHECK(m["offset_bytes"].get<std::int64_t>() == Approx(1LL << 30).margin(2));
  CHECK(m["max_residual_bytes"].get<std::int64_t>() <= 2);
  // The other host's single point: additive only.
  CHECK(cj["calibration"]["machines"][1]["scale"] == 1.0);
  CHECK(cj["calibration"]["machines"][1]["offset_bytes"] == 1LL << 30);

  // plan on this host and GPU: H100 SXM, usable as CUDA reports it 85,017,493,504 bytes; default
  // margin 1 GiB + 10% = 9,575,491,174: B = 75,442,002,330. The modelled peak may be
  // floor((B - 1 GiB) / 1.1) = 67,607,509,550: the budget is 7,834,492,780 bytes = 7.30 GiB lower.
  const auto p = run_cli({"plan", "--model", "gpt2", "--gpu", "h100-sxm"});
  INFO(p.out);
  CHECK(p.out.find("calibration for " + host + " / h100-sxm (2 measured runs, rms residual ") != std::string::npos);
  CHECK(p.out.find("peak = max(predicted, 1.1000 x predicted + 1.00 GiB); budget for the predicted peak lowered by "
                   "7.30 GiB") != std::string::npos);
  {
    ScopedEnv off("MEMPLAN_CALIBRATION", "off");
    CHECK(run_cli({"plan", "--model", "gpt2", "--gpu", "h100-sxm"}).out.find("calibration for") == std::string::npos);
  }
  // Another GPU on this host has no fit.
  CHECK(run_cli({"plan", "--model", "gpt2", "--gpu", "a100-80gb"}).out.find("calibration for") == std::string::npos);
}

TEST_CASE("profile --watch gpu through a stand-in nvidia-smi: the GPU is detected, watched, and a busy one refused") {
  TempDir dir;
  SECTION("an idle H100: auto chooses the GPU; its used memory does not move: no rung trained on it") {
    StandInMachine machine("nvidia-smi-h100.csv");
    // --stop-at is the whole GPU's used memory: above the 479 MiB in use (300 MiB would stop at once).
    auto args = profile_args(dir, {"--stop-at", "70GiB", "--batches", "1,2"}, {"--batch", "{batch}"});
    args[2] = "auto";
    const auto r = run_cli(args);
    INFO(r.err);
    REQUIRE(r.code == memplan::cli::kExitDoesNotFit);
    const json j = json::parse(r.out);
    CHECK(j["profile"]["watch"] == "gpu");
    CHECK(j["profile"]["watch_description"] == "GPU 0 NVIDIA H100 80GB HBM3 used memory (nvidia-smi, every 100 ms)");
    // 81559 MiB total, 81080 MiB free: 479 MiB in use before the first rung.
    CHECK(j["profile"]["total_bytes"] == 81559 * kMiB);
    CHECK(j["profile"]["baseline_bytes"] == 479 * kMiB);
    // A run that exits 0 without raising the GPU's memory measured nothing (issue 34).
    CHECK(statuses(j) == std::vector<std::string>{"no-measurement"});
    CHECK(j["profile"]["runs"][0]["peak_bytes"] == 0);
  }
  SECTION("the default limit is the plan's budget on the detected GPU") {
    StandInMachine machine("nvidia-smi-h100.csv");
    auto args = profile_args(dir, {"--batches", "1"}, {"--batch", "{batch}"});
    args[2] = "gpu";
    const auto r = run_cli(args);
    INFO(r.err);
    const json j = json::parse(r.out);
    // Detected: capacity = free = 81080 MiB; margin 1 GiB + 10% of the total 81559 MiB
    // (floor(85,520,809,984 / 10) = 8,552,080,998): 85,018,542,080 - 1,073,741,824 - 8,552,080,998,
    // on top of the 479 MiB in use before the ladder, since the watchdog compares the whole GPU.
    CHECK(j["profile"]["stop_at_bytes"] ==
          85'018'542'080LL - 1'073'741'824LL - 8'552'080'998LL + 479 * kMiB);
  }
  SECTION("a GPU other processes hold memory on is refused") {
    StandInMachine machine("nvidia-smi-mixed.csv", "nvidia-smi-mixed-apps.csv");
    ScopedEnv only_l40s("CUDA_VISIBLE_DEVICES", "0");
    auto args = profile_args(dir, {"--stop-at", "300MiB", "--batches", "1"}, {"--batch", "{batch}"});
    args[2] = "gpu";
    const auto r = run_cli(args);
    CHECK(r.code == memplan::cli::kExitInvalidInput);
    CHECK(r.err ==
          "memplan: error: GPU 0 is in use: 3 processes hold memory (pid 44378, tritonserver); see memplan "
          "preflight; end them or pass --allow-busy\n");
    CHECK(!std::filesystem::exists(dir.path() + "/args.txt"));
  }
  SECTION("--watch gpu without a GPU") {
    StandInMachine machine(std::nullopt);
    auto args = profile_args(dir, {"--stop-at", "300MiB"}, {"--batch", "{batch}"});
    args[2] = "gpu";
    const auto r = run_cli(args);
    CHECK(r.code == memplan::cli::kExitNoGpu);
    CHECK(r.err.rfind("memplan: error: --watch gpu: no GPU found", 0) == 0);
  }
}

TEST_CASE("profile --seq-lens varies the sequence length at one micro-batch; --around follows the plan") {
  TempDir dir;
  SECTION("--seq-lens") {
    const auto r = run_cli(profile_args(dir, {"--stop-at", "300MiB", "--seq-lens", "128,256", "--batch", "2"},
                                        {"--batch", "{batch}", "--mb", "{seq_len}", "--then", "sleep", "--sleep", "0.3"}));
    INFO(r.err);
    REQUIRE(r.code == memplan::cli::kExitOk);
    const json j = json::parse(r.out);
    REQUIRE(statuses(j) == std::vector<std::string>{"ok", "ok"});
    CHECK(j["profile"]["runs"][0]["micro_batch"] == 2);
    CHECK(j["profile"]["runs"][0]["seq_len"] == 128);
    CHECK(j["profile"]["runs"][1]["seq_len"] == 256);
    CHECK(j["profile"]["runs"][1]["peak_bytes"].get<std::int64_t>() >= 256 * kMiB);
    CHECK(lines_of(dir.read("args.txt"))[1].find("--batch 2 --mb 256") != std::string::npos);
  }
  SECTION("--around: half to one and a half times the plan's micro-batch") {
    const std::vector<std::string> model = {"--model", "gpt2", "--seq-len", "1024", "--gpu", "rtx-4090"};
    const auto p = run_cli(with({"plan", "--format", "json"}, model));
    REQUIRE(p.code == 0);
    const std::int64_t m = json::parse(p.out)["recommendation"]["micro_batch"];
    REQUIRE(m >= 2);
    const auto r = run_cli(profile_args(dir, with(model, {"--stop-at", "300MiB", "--around"}),
                                        {"--batch", "{batch}", "--exit-code", "1", "--from-batch", "2"}));
    const json j = json::parse(r.out);
    CHECK(j["profile"]["runs"][0]["micro_batch"] == std::max<std::int64_t>(1, (2 * m + 2) / 4));
    CHECK(j["profile"]["runs"][0]["predicted_bytes"].is_number());
  }
  SECTION("--seq-lens and --batches cannot both vary") {
    const auto r = run_cli(profile_args(dir, {"--stop-at", "300MiB", "--seq-lens", "128,256", "--batches", "1,2"},
                                        {"--batch", "{batch}"}));
    CHECK(r.err ==
          "memplan: error: --seq-lens and --batches both list several values; vary one at a time (seed "
          "000): fix the micro-batch with --batch N\n");
  }
}

TEST_CASE("profile refuses to start when less memory is available than the limit") {
  TempDir dir;
  const auto r = run_cli(profile_args(dir, {"--stop-at", "100%"}, {"--batch", "{batch}"}));
  CHECK(r.code == memplan::cli::kExitInvalidInput);
  CHECK(r.err.rfind("memplan: error: only ", 0) == 0);
  CHECK(r.err.find(" of memory is available, less than the watchdog limit ") != std::string::npos);
  CHECK(r.err.find("; end other processes, lower --stop-at, or pass --allow-busy\n") != std::string::npos);
  CHECK(!std::filesystem::exists(dir.path() + "/args.txt"));
}

TEST_CASE("calibrate: an empty store and a damaged one are errors that say where") {
  TempDir dir;
  ScopedEnv data("MEMPLAN_DATA_DIR", dir.path());
  auto r = run_cli({"calibrate"});
  CHECK(r.code == memplan::cli::kExitInvalidInput);
  CHECK(r.err == "memplan: error: no measured runs with a prediction in " + dir.path() +
                     "/measurements.jsonl (0 runs); run memplan profile --save with --model or --config first\n");
  dir.write("measurements.jsonl", "{\"host\":\"a\",\"gpu\":\"b\",\"measured_bytes\":1}\nnot json\n");
  r = run_cli({"calibrate"});
  CHECK(r.code == memplan::cli::kExitInvalidInput);
  CHECK(r.err.rfind("memplan: error: " + dir.path() + "/measurements.jsonl:2: not a measured run: ", 0) == 0);
  // A run without a prediction is kept but cannot be fitted.
  dir.write("measurements.jsonl", "{\"host\":\"a\",\"gpu\":\"b\",\"measured_bytes\":1}\n");
  r = run_cli({"calibrate"});
  CHECK(r.err == "memplan: error: no measured runs with a prediction in " + dir.path() +
                     "/measurements.jsonl (1 run); run memplan profile --save with --model or --config first\n");
  CHECK(!std::filesystem::exists(dir.path() + "/calibration.json"));
}

TEST_CASE("the calibration store's folder: MEMPLAN_DATA_DIR, else XDG_DATA_HOME/memplan, else ~/.local/share/memplan") {
  ScopedEnv a("MEMPLAN_DATA_DIR", std::nullopt);
  ScopedEnv b("XDG_DATA_HOME", "/x/data");
  ScopedEnv c("HOME", "/home/u");
  CHECK(*memplan::io::data_dir() == "/x/data/memplan");
  {
    ScopedEnv d("MEMPLAN_DATA_DIR", "/team/store");
    CHECK(*memplan::io::data_dir() == "/team/store");
  }
  ScopedEnv e("XDG_DATA_HOME", std::nullopt);
  CHECK(*memplan::io::data_dir() == "/home/u/.local/share/memplan");
  ScopedEnv f("HOME", std::nullopt);
  CHECK(memplan::io::data_dir().error().message == "no folder for memplan's data: HOME is not set");
}

TEST_CASE("profile --config with a model memplan cannot look up still profiles, without predictions") {
  TempDir dir;
  const std::string text =
      "model_name_or_path: my-org/in-house-model  # not in any catalog or cache\n"
      "per_device_train_batch_size: 2\n"
      "gradient_accumulation_steps: 1\n";
  const std::string config = dir.write("train.yaml", text);
  const auto r = run_cli(profile_args(dir, {"--config", config, "--stop-at", "300MiB", "--batches", "1,2"},
                                      {"--config", "{config}", "--per-batch-mb", "10"}));
  INFO(r.err);
  REQUIRE(r.code == memplan::cli::kExitOk);
  const json j = json::parse(r.out);
  CHECK(statuses(j) == std::vector<std::string>{"ok", "ok"});
  CHECK(j["profile"]["runs"][0]["predicted_bytes"].is_null());
  const std::string note = j["profile"]["notes"].back();
  CHECK(note.rfind("no predictions: ", 0) == 0);
  CHECK(note.find("my-org/in-house-model") != std::string::npos);
  CHECK(read_file(config) == text);
  CHECK(read_file(dir.path() + "/logs/rung-01-b1-ga1-s1024/train.yaml") ==
        "model_name_or_path: my-org/in-house-model  # not in any catalog or cache\n"
        "per_device_train_batch_size: 1\n"
        "gradient_accumulation_steps: 1\n");
}

TEST_CASE("profile (issue 34): every numeric flag is bounded, with the range in the message") {
  const auto err = [](std::vector<std::string> flags) {
    std::vector<std::string> args = {"profile", "--watch", "system", "--stop-at", "300MiB"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "true", "{batch}"});
    return run_cli(args).err;
  };
  CHECK(err({"--grace", "inf"}) == "memplan: error: --grace = inf must be a number of seconds from 0 to 3600\n");
  CHECK(err({"--grace", "nan"}) == "memplan: error: --grace = nan must be a number of seconds from 0 to 3600\n");
  CHECK(err({"--grace", "1e300"}) == "memplan: error: --grace = 1e+300 must be a number of seconds from 0 to 3600\n");
  CHECK(err({"--rung-timeout", "nan"}) ==
        "memplan: error: --rung-timeout = nan must be a number of seconds from 0.001 to 604800\n");
  CHECK(err({"--sample-ms", "2147483647"}) ==
        "memplan: error: --sample-ms = 2147483647 must be from 1 to 10000 milliseconds (0: the watch's default)\n");
  CHECK(err({"--max-batch", "4611686018427387905"}) ==
        "memplan: error: --max-batch = 4611686018427387905 must be from 1 to 1048576\n");
  // The ladder itself never overflows: doubling stops at the largest power of two <= max.
  CHECK(memplan::io::doubling_ladder(std::numeric_limits<std::int64_t>::max()).size() == 63);
}

// ---- issue 34: a profile keeps what it measured whatever ends it; the GPU watch sees the whole GPU ----

namespace {

// tests/data/profile/fake-nvidia-smi-live: an H100 whose used memory is what the rung's command
// writes into `run` (MiB), plus `held` MiB of processes it does not list.
struct LiveGpu {
  explicit LiveGpu(const TempDir& dir, int held_mib = 0)
      : run(dir.path() + "/gpu-run"),
        smi_("MEMPLAN_NVIDIA_SMI", std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/profile/fake-nvidia-smi-live"),
        run_("FAKE_GPU_RUN", run),
        held_("FAKE_GPU_HELD", std::to_string(held_mib)),
        rocm_("MEMPLAN_ROCM_SMI", "/nonexistent/rocm-smi"),
        nvml_("MEMPLAN_DISABLE_NVML", "1"),
        cuda_("CUDA_VISIBLE_DEVICES", std::nullopt) {}
  std::string run;

 private:
  ScopedEnv smi_, run_, held_, rocm_, nvml_, cuda_;
};

// profile --watch gpu with a shell command as the training: `script` sees the micro-batch as $1.
std::vector<std::string> gpu_profile_args(const TempDir& dir, const std::vector<std::string>& options,
                                          const std::string& script) {
  std::vector<std::string> args = {"profile", "--watch",        "gpu", "--format", "json",  "--log-dir",
                                   dir.path() + "/logs", "--settle", "3", "--grace",  "2"};
  args.insert(args.end(), options.begin(), options.end());
  args.insert(args.end(), {"--", "sh", "-c", script, "sh", "{batch}"});
  return args;
}

}  // namespace

TEST_CASE("profile (issue 34): a failed nvidia-smi query keeps, prints and saves the rungs that finished") {
  TempDir dir;
  LiveGpu gpu(dir);
  ScopedEnv data("MEMPLAN_DATA_DIR", dir.path() + "/data");
  // Rung 1 holds 1000 MiB for 0.4 s; at rung 2 the driver stops answering.
  const std::string script = "echo $((1000 * $1)) > " + gpu.run + "; [ $1 = 2 ] && touch " + gpu.run +
                             ".fail; sleep 0.4; echo 0 > " + gpu.run;
  const auto r = run_cli(gpu_profile_args(dir, {"--stop-at", "70GiB", "--batches", "1,2,4", "--save"}, script));
  INFO(r.err);
  CHECK(r.code == memplan::cli::kExitDoesNotFit);
  const json j = json::parse(r.out);
  CHECK(statuses(j) == std::vector<std::string>{"ok", "interrupted"});
  // The rung's own memory: 1000 MiB above the 479 MiB in use before (nvidia-smi-h100.csv).
  CHECK(j["profile"]["runs"][0]["peak_bytes"] == 1000 * kMiB);
  CHECK(j["profile"]["runs"][1]["notes"].get<std::string>().rfind(
            "ended by memplan: the memory could no longer be read: ", 0) == 0);
  CHECK(j["profile"]["not_run"].size() == 1);
  CHECK(j["profile"]["error"].get<std::string>().find("Unknown Error") != std::string::npos);
  CHECK(r.err.find("Saved 1 measured rung to ") != std::string::npos);
  const auto saved = lines_of(read_file(dir.path() + "/data/measurements.jsonl"));
  REQUIRE(saved.size() == 1);
  CHECK(json::parse(saved[0])["measured_bytes"] == 1000 * kMiB);
  CHECK(json::parse(saved[0])["driver"] == "");  // the driver stopped answering before --save asked
}

TEST_CASE("profile (issue 34): a launcher that backgrounds the job and exits 0 is no-measurement, never saved") {
  TempDir dir;
  ScopedEnv data("MEMPLAN_DATA_DIR", dir.path() + "/data");
  SECTION("system watch: its processes run on after it exits") {
    const auto r = run_cli(profile_args(dir, {"--stop-at", "300MiB", "--batches", "1,2", "--save"},
                                        {"--batch", "{batch}", "--children", "1"}));
    INFO(r.err);
    CHECK(r.code == memplan::cli::kExitDoesNotFit);
    const json j = json::parse(r.out);
    CHECK(statuses(j) == std::vector<std::string>{"no-measurement"});
    CHECK(j["profile"]["runs"][0]["notes"] ==
          "exited 0 while 1 process it started ran on (ended by memplan): a launcher that backgrounds the training? "
          "run the training itself in the foreground");
    CHECK(r.err.find("Nothing saved: no rung ended ok") != std::string::npos);
    CHECK(!std::filesystem::exists(dir.path() + "/data/measurements.jsonl"));
    CHECK(processes_mentioning(dir.path()).empty());
  }
  SECTION("GPU watch: the GPU's used memory never rose") {
    LiveGpu gpu(dir);
    const auto r = run_cli(gpu_profile_args(dir, {"--stop-at", "70GiB", "--batches", "1,2", "--save"}, "sleep 0.3"));
    INFO(r.err);
    CHECK(r.code == memplan::cli::kExitDoesNotFit);
    const json j = json::parse(r.out);
    CHECK(statuses(j) == std::vector<std::string>{"no-measurement"});
    CHECK(j["profile"]["runs"][0]["notes"].get<std::string>().rfind(
              "exited 0, but the GPU's used memory never rose 64 MiB above its level before the rung", 0) == 0);
    CHECK(!std::filesystem::exists(dir.path() + "/data/measurements.jsonl"));
  }
}

TEST_CASE("profile --watch gpu (issue 34): --stop-at is the whole GPU's used memory; unlisted holders are refused") {
  TempDir dir;
  // 19.5 GiB = 19968 MiB held by processes nvidia-smi does not list.
  LiveGpu gpu(dir, 19968);
  const std::string script = "echo 60000 > " + gpu.run + "; sleep 30";
  SECTION("the preflight counts them") {
    const auto r = run_cli(gpu_profile_args(dir, {"--stop-at", "90%", "--batches", "1"}, script));
    CHECK(r.code == memplan::cli::kExitInvalidInput);
    // used = 81559 - (81080 - 19968) = 20447 MiB = 19.97 GiB; idle is below the 2% slack of 81559 MiB.
    CHECK(r.err.rfind("memplan: error: GPU 0 is in use: 19.97 GiB of its memory is held, and no process is listed", 0) ==
          0);
  }
  SECTION("--allow-busy: the watchdog stops the rung when the whole GPU passes 90%") {
    const auto r =
        run_cli(gpu_profile_args(dir, {"--stop-at", "90%", "--batches", "1", "--allow-busy"}, script));
    INFO(r.err);
    const json j = json::parse(r.out);
    // 90% of 81559 MiB = 73403.1 MiB; the rung's 60000 MiB above 20447 MiB makes 80447 MiB (98.6%):
    // stopped. Measured above the memory in use before, 60000 MiB would have passed as ok.
    CHECK(j["profile"]["stop_at_bytes"] == 81559LL * kMiB * 9 / 10);
    CHECK(statuses(j) == std::vector<std::string>{"stopped"});
    CHECK(j["profile"]["runs"][0]["peak_bytes"] == 60000 * kMiB);
    CHECK(j["profile"]["runs"][0]["notes"] == "a sample of 78.56 GiB passed --stop-at 71.68 GiB");
  }
}

TEST_CASE("profile (issue 34): SIGTERM mid-ladder prints and saves the finished rungs") {
  TempDir dir;
  LiveGpu gpu(dir);
  ScopedEnv data("MEMPLAN_DATA_DIR", dir.path() + "/data");
  const std::string started = dir.path() + "/started";
  const std::string script = "echo $((500 * $1)) > " + gpu.run + "; if [ $1 = 2 ]; then touch " + started +
                             "; sleep 30; fi; sleep 0.4; echo 0 > " + gpu.run;
  std::thread term([&] {
    for (int i = 0; i < 1200 && !std::filesystem::exists(started); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::kill(::getpid(), SIGTERM);
  });
  const auto r = run_cli(gpu_profile_args(dir, {"--stop-at", "70GiB", "--batches", "1,2,4", "--save"}, script));
  term.join();
  INFO(r.err);
  CHECK(r.code == 130);
  const json j = json::parse(r.out);
  CHECK(statuses(j) == std::vector<std::string>{"ok", "interrupted"});
  CHECK(j["profile"]["runs"][1]["notes"] == "memplan received SIGTERM");
  const auto saved = lines_of(read_file(dir.path() + "/data/measurements.jsonl"));
  REQUIRE(saved.size() == 1);
  CHECK(json::parse(saved[0])["measured_bytes"] == 500 * kMiB);
}

namespace {

// An ostream writing to a file descriptor, unbuffered: stderr as a pipe whose reader is gone.
class FdBuf : public std::streambuf {
 public:
  explicit FdBuf(int fd) : fd_(fd) {}

 protected:
  int_type overflow(int_type c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    const char ch = static_cast<char>(c);
    return ::write(fd_, &ch, 1) == 1 ? c : traits_type::eof();
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const ssize_t w = ::write(fd_, s, static_cast<std::size_t>(n));
    return w < 0 ? 0 : w;
  }

 private:
  int fd_;
};

}  // namespace

TEST_CASE("profile (issue 34): a closed stderr pipe does not kill it between rungs; the table and --save happen") {
  TempDir dir;
  ScopedEnv data("MEMPLAN_DATA_DIR", dir.path() + "/data");
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  ::close(fds[0]);  // nobody reads stderr any more: every write is EPIPE (and SIGPIPE unless ignored)
  FdBuf buf(fds[1]);
  std::ostream err(&buf);
  std::ostringstream out;
  const int code = memplan::cli::run(
      profile_args(dir, {"--stop-at", "300MiB", "--batches", "1,2", "--save"}, {"--batch", "{batch}"}), out, err);
  ::close(fds[1]);
  CHECK(code == memplan::cli::kExitOk);
  const json j = json::parse(out.str());
  CHECK(statuses(j) == std::vector<std::string>{"ok", "ok"});
  CHECK(lines_of(read_file(dir.path() + "/data/measurements.jsonl")).size() == 2);
  struct sigaction now {};
  ::sigaction(SIGPIPE, nullptr, &now);
  CHECK(now.sa_handler == SIG_DFL);  // given back as it was
}

// Tests src/io/measure/profile.cpp and src/io/measure/process.cpp below the CLI: ladders, substitution, OOM
// detection, the process tree, and the watchdog driven by a fake GPU gauge (the NVML path has no
// GPU here; the gauge interface is what a GPU run uses).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "cli/cli_harness.hpp"
#include "io/measure/process.hpp"
#include "io/measure/profile.hpp"

using namespace memplan;
using namespace memplan::io;

TEST_CASE("profile ladders: --batches, the default doubling, --around") {
  CHECK(*parse_ladder("1,2,4,8,16", "--batches") == std::vector<std::int64_t>{1, 2, 4, 8, 16});
  CHECK(*parse_ladder(" 3, 5 ", "--batches") == std::vector<std::int64_t>{3, 5});
  CHECK(parse_ladder("1,x", "--batches").error().to_string() ==
        "--batches: \"x\" is not a positive integer; write --batches 1,2,4,8");
  CHECK(parse_ladder("0", "--seq-lens").error().message == "--seq-lens: \"0\" is not a positive integer");
  CHECK(parse_ladder("2,2", "--batches").error().message == "--batches: 2 after 2: the ladder must increase");
  CHECK(parse_ladder("1,", "--batches").error().message == "--batches: \"\" is not a positive integer");
  CHECK(doubling_ladder(64) == std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64});
  CHECK(doubling_ladder(63) == std::vector<std::int64_t>{1, 2, 4, 8, 16, 32});
  CHECK(doubling_ladder(1) == std::vector<std::int64_t>{1});
  CHECK(around_ladder(8) == std::vector<std::int64_t>{4, 6, 8, 10, 12});
  CHECK(around_ladder(6) == std::vector<std::int64_t>{3, 5, 6, 8, 9});  // (6q + 2) / 4 for q = 2..6
  CHECK(around_ladder(1) == std::vector<std::int64_t>{1, 2});
}

TEST_CASE("profile substitution: placeholders in any argument, errors when a value is missing") {
  Rung r;
  r.micro_batch = 8;
  r.grad_accum = 4;
  r.seq_len = 2048;
  const std::vector<std::string> argv = {"python", "train.py",  "--bs={batch}", "--ga",     "{grad_accum}",
                                         "--len",  "{seq_len}", "--cfg",        "{config}", "{micro_batch}x{batch}",
                                         "{other}"};
  CHECK(*substitute(argv, r, std::string("/tmp/c.yaml")) ==
        std::vector<std::string>{"python", "train.py", "--bs=8", "--ga", "4", "--len", "2048", "--cfg", "/tmp/c.yaml",
                                 "8x8", "{other}"});
  CHECK(substitute(argv, r, std::nullopt).error().message == "the command uses {config} but no --config FILE is given");
  r.seq_len = 0;
  CHECK(substitute({"x", "{seq_len}"}, r, std::nullopt).error().message ==
        "the command uses {seq_len} but no sequence length is given");
  CHECK(has_placeholder(argv, "batch"));
  CHECK(!has_placeholder({"python", "{batchsize}"}, "batch"));
}

TEST_CASE("profile: out-of-memory messages of PyTorch, CUDA libraries and Python") {
  CHECK(mentions_oom("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB"));
  CHECK(mentions_oom("RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be"));
  CHECK(mentions_oom("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"));
  CHECK(mentions_oom("RuntimeError: MPS backend out of memory (MPS allocated: 17.00 GB"));
  CHECK(mentions_oom("Traceback ...\nMemoryError\n"));
  CHECK(!mentions_oom("RuntimeError: Expected all tensors to be on the same device"));
  CHECK(!mentions_oom(""));
}

TEST_CASE("shell_quote: the exact command, pasteable into a shell") {
  CHECK(shell_quote({"python", "train.py", "--bs", "8"}) == "python train.py --bs 8");
  CHECK(shell_quote({"sh", "-c", "echo 'hi' $HOME", ""}) == "sh -c 'echo '\\''hi'\\'' $HOME' ''");
}

TEST_CASE("tree_of: the group, descendants that left it, and orphans adopted by memplan") {
  const auto mib = [](int n) { return Bytes::mib(n); };
  const std::vector<ProcEntry> all = {
      {100, 1, 100, mib(1)},     // memplan (self)
      {200, 100, 200, mib(10)},  // the rung's leader
      {201, 200, 200, mib(20)},  // its child, same group
      {202, 201, 202, mib(30)},  // a grandchild in its own group (setsid)
      {203, 100, 203, mib(40)},  // an orphan re-parented to memplan
      {300, 1, 300, mib(50)},    // unrelated
      {301, 300, 200, mib(60)},  // unrelated parent but in the rung's group: counts
  };
  const auto tree = tree_of(all, 200, 100);
  std::vector<pid_t> pids;
  Bytes sum;
  for (const auto& p : tree) {
    pids.push_back(p.pid);
    sum += p.rss;
  }
  std::sort(pids.begin(), pids.end());
  CHECK(pids == std::vector<pid_t>{200, 201, 202, 203, 301});
  CHECK(sum == mib(10 + 20 + 30 + 40 + 60));
}

TEST_CASE("scan_processes sees this process with its group and resident memory") {
  const auto all = scan_processes();
  const auto me = std::find_if(all.begin(), all.end(), [](const ProcEntry& p) { return p.pid == ::getpid(); });
  REQUIRE(me != all.end());
  CHECK(me->ppid == ::getppid());
  CHECK(me->pgid == ::getpgrp());
  CHECK(me->rss > Bytes::mib(1));
}

namespace {

// A GPU as the watchdog sees it: used memory grows by `rate` per second from the moment a
// sample first sees a process. Stands in for NVML's nvmlDeviceGetMemoryInfo.
class FakeGpu : public MemoryGauge {
 public:
  explicit FakeGpu(Bytes per_second) : rate_(per_second) {}
  std::string kind() const override { return "gpu"; }
  std::string description() const override { return "GPU 0 fake"; }
  Result<Bytes> sample(const std::vector<ProcEntry>& tree) override {
    ++samples;
    if (tree.empty()) return Bytes::zero();
    if (!start_) start_ = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - *start_).count();
    return Bytes::of(static_cast<std::int64_t>(s * static_cast<double>(rate_.count())));
  }
  Result<DeviceMemory> device() override { return DeviceMemory{Bytes::gib(1), Bytes::gib(80)}; }
  std::chrono::milliseconds interval() const override { return std::chrono::milliseconds(5); }
  int samples = 0;

 private:
  Bytes rate_;
  std::optional<std::chrono::steady_clock::time_point> start_;
};

}  // namespace

TEST_CASE("the watchdog on a (fake) GPU gauge stops a rung that grows past the limit") {
  memplan::testing::TempDir dir;
  FakeGpu gpu(Bytes::gib(1));
  LadderOptions o;
  o.command = {"sleep", "{batch}0"};
  o.rungs = {Rung{1, 1, 0}, Rung{2, 1, 0}};
  o.stop_at = Bytes::mib(300);
  o.grace = std::chrono::milliseconds(500);
  o.log_dir = dir.path();
  const auto res = run_ladder(o, gpu);
  REQUIRE(res);
  REQUIRE(res->runs.size() == 1);
  CHECK(res->runs[0].status == RungStatus::kStopped);
  CHECK(res->runs[0].argv == std::vector<std::string>{"sleep", "10"});
  CHECK(res->runs[0].signal == SIGTERM);
  CHECK(res->runs[0].peak > Bytes::mib(300));
  // Stopped by SIGTERM (above), not ended by sleep 10's own exit: no bound on time (issue 34).
  CHECK(res->watch == "gpu");
  CHECK(res->baseline == Bytes::gib(1));
  CHECK(res->not_run.size() == 1);
  CHECK(!res->safe_maximum);
  CHECK(res->runs[0].notes.rfind("a sample of ", 0) == 0);
  CHECK(res->runs[0].notes.find(" passed --stop-at 300.0 MiB") != std::string::npos);
}

namespace {

// Memory that is not given back after the first rung: the second is refused by preflight.
class LeakyGauge : public MemoryGauge {
 public:
  std::string kind() const override { return "gpu"; }
  std::string description() const override { return "GPU 0 leaky"; }
  // A rise the size of a CUDA context: the rung ran on the GPU (less is no-measurement, issue 34).
  Result<Bytes> sample(const std::vector<ProcEntry>&) override { return Bytes::mib(500); }
  Result<DeviceMemory> device() override {
    return DeviceMemory{calls++ == 0 ? Bytes::gib(1) : Bytes::gib(2), Bytes::gib(80)};
  }
  std::chrono::milliseconds interval() const override { return std::chrono::milliseconds(5); }
  int calls = 0;
};

}  // namespace

TEST_CASE("preflight: a rung whose memory is not back to the pre-ladder level is refused, nothing runs after") {
  memplan::testing::TempDir dir;
  LeakyGauge gpu;
  LadderOptions o;
  o.command = {"true", "{batch}"};
  o.rungs = {Rung{1, 1, 0}, Rung{2, 1, 0}, Rung{4, 1, 0}};
  o.stop_at = Bytes::gib(10);
  o.settle = std::chrono::milliseconds(300);
  o.settle_slack = Bytes::mib(256);
  o.log_dir = dir.path();
  const auto res = run_ladder(o, gpu);
  REQUIRE(res);
  REQUIRE(res->runs.size() == 2);
  CHECK(res->runs[0].status == RungStatus::kOk);
  CHECK(res->runs[1].status == RungStatus::kRefused);
  CHECK(res->runs[1].notes == "2048 MiB in use, 1024 MiB before the ladder: not started");
  CHECK(res->not_run.size() == 1);
  CHECK(res->safe_maximum == 0u);
  CHECK(!std::filesystem::exists(dir.path() + "/rung-02-b2-ga1"));
}

TEST_CASE("run_ladder (issue 34): files are never written through links planted in the log folder") {
  memplan::testing::TempDir dir;
  const std::string victim = dir.path() + "/victim.txt";
  { std::ofstream(victim) << "precious\n"; }
  const std::string logs = dir.path() + "/logs";
  std::filesystem::create_directories(logs + "/rung-01-b1-ga1");
  // An earlier run's folder, with links where memplan writes its files.
  std::filesystem::create_symlink(victim, logs + "/rung-01-b1-ga1/output.log");
  std::filesystem::create_symlink(victim, logs + "/rung-01-b1-ga1/command.txt");
  // A link in place of a rung's folder.
  std::filesystem::create_directories(dir.path() + "/elsewhere");
  std::filesystem::create_directory_symlink(dir.path() + "/elsewhere", logs + "/rung-02-b2-ga1");
  LadderOptions o;
  o.command = {"true", "{batch}"};
  o.rungs = {Rung{1, 1, 0}, Rung{2, 1, 0}};
  o.stop_at = Bytes::gib(1000);
  o.log_dir = logs;
  auto gauge = system_gauge();
  const auto res = run_ladder(o, *gauge);
  // Rung 1 ran and is kept; the error ends the ladder at rung 2 (issue 34: what was measured stays).
  REQUIRE(res);
  REQUIRE(res->runs.size() == 1);
  CHECK(res->runs[0].status == RungStatus::kOk);
  CHECK(res->not_run.size() == 1);
  CHECK(res->error ==
        "cannot create " + logs + "/rung-02-b2-ga1: it exists and is not a folder of this user; choose another --log-dir");
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text == "precious\n");
  CHECK(std::filesystem::is_empty(dir.path() + "/elsewhere"));
  // The first rung's files are memplan's own now, private.
  CHECK_FALSE(std::filesystem::is_symlink(logs + "/rung-01-b1-ga1/output.log"));
  struct stat st {};
  REQUIRE(::stat((logs + "/rung-01-b1-ga1/output.log").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

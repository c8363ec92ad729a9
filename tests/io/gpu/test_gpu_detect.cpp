// Tests src/io/gpu/gpu_detect.cpp by replaying recorded driver outputs (tests/data/detect/README.md
// says where each was recorded) through a fake SystemProbe. Expected figures are the recorded
// ones converted by hand: nvidia-smi prints MiB, /proc/meminfo kB (KiB), rocm-smi bytes.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "io/gpu/gpu_detect.hpp"
#include "io/gpu/gpu_profiles.hpp"
#include "../../cli/cli_harness.hpp"  // ScopedEnv

using memplan::Bytes;
using memplan::ErrorCode;
using namespace memplan::io;
using memplan::testing::ScopedEnv;

namespace {

std::string fixture(const std::string& name) {
  const std::string path = std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/detect/" + name;
  std::ifstream in(path);
  REQUIRE(in.good());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* const kSmiQuery = "nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.free,memory.used "
                              "--format=csv,noheader,nounits";
const char* const kSmiApps = "nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory "
                             "--format=csv,noheader,nounits";
const char* const kRocm = "rocm-smi --showproductname --showmeminfo vram --json";
const char* const kNoNvml = "libnvidia-ml.so.1: cannot open shared object file: No such file or directory";

class FakeNvml : public Nvml {
 public:
  FakeNvml(std::vector<Device> devices, std::vector<std::vector<memplan::io::GpuProcess>> processes,
           std::optional<std::string> failure)
      : devices_(std::move(devices)), processes_(std::move(processes)), failure_(std::move(failure)) {}
  memplan::Result<std::vector<Device>> devices() override {
    if (failure_) return memplan::make_error(ErrorCode::kIoError, *failure_);
    return devices_;
  }
  memplan::Result<std::vector<memplan::io::GpuProcess>> compute_processes(unsigned index) override {
    return index < processes_.size() ? processes_[index] : std::vector<memplan::io::GpuProcess>{};
  }

 private:
  std::vector<Device> devices_;
  std::vector<std::vector<memplan::io::GpuProcess>> processes_;
  std::optional<std::string> failure_;
};

// Commands are keyed by their argv joined with spaces; anything not listed is "not installed".
class FakeProbe : public SystemProbe {
 public:
  std::map<std::string, CommandResult> commands;
  std::map<std::string, std::string> files;
  std::map<std::string, std::string> vars;
  std::optional<std::vector<Nvml::Device>> nvml_devices;  // empty: libnvidia-ml cannot be loaded
  std::vector<std::vector<memplan::io::GpuProcess>> nvml_processes;
  std::optional<std::string> nvml_failure;
  mutable std::vector<std::string> ran;
  mutable int nvml_loads = 0;

  void answer(const std::string& command, const std::string& out, int exit_code = 0, const std::string& err = "") {
    CommandResult r;
    r.started = true;
    r.exit_code = exit_code;
    r.out = out;
    r.err = err;
    commands[command] = r;
  }

  CommandResult run(const std::vector<std::string>& argv) const override {
    std::string key;
    for (const auto& a : argv) key += (key.empty() ? "" : " ") + a;
    ran.push_back(key);
    auto it = commands.find(key);
    return it == commands.end() ? CommandResult{} : it->second;
  }
  std::optional<std::string> read_file(const std::string& path) const override {
    auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::string> env(const std::string& name) const override {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  }
  memplan::Result<std::unique_ptr<Nvml>> load_nvml() const override {
    ++nvml_loads;
    if (!nvml_devices) return memplan::make_error(ErrorCode::kIoError, kNoNvml);
    return std::unique_ptr<Nvml>(std::make_unique<FakeNvml>(*nvml_devices, nvml_processes, nvml_failure));
  }
};

const std::vector<memplan::GpuProfile>& profiles() {
  static const auto p = load_gpu_profiles();
  REQUIRE(p.has_value());
  return *p;
}

DetectedSystem detect_ok(const FakeProbe& probe, DetectOptions options = {}) {
  auto r = detect_gpus(probe, profiles(), options);
  if (!r) FAIL(r.error().to_string());
  return *r;
}

std::string detect_error(const FakeProbe& probe) {
  auto r = detect_gpus(probe, profiles());
  REQUIRE_FALSE(r.has_value());
  return r.error().to_string();
}

FakeProbe mixed() {
  FakeProbe p;
  p.answer(kSmiQuery, fixture("nvidia-smi-mixed.csv"));
  p.answer(kSmiApps, fixture("nvidia-smi-mixed-apps.csv"));
  return p;
}

}  // namespace

// ---------------------------------------------------------------------------------- parsers

TEST_CASE("nvidia-smi --query-gpu rows") {
  auto rows = parse_nvidia_smi_gpus(fixture("nvidia-smi-h100x2.csv"));
  REQUIRE(rows.has_value());
  REQUIRE(rows->size() == 2);
  CHECK((*rows)[0].index == 0);
  CHECK((*rows)[0].uuid == "GPU-5d2c6b52-8b3e-5c0f-1f0a-0d6b2f7c9e11");
  CHECK((*rows)[0].name == "NVIDIA H100 80GB HBM3");
  CHECK((*rows)[0].total->count() == 81559LL * 1048576);
  CHECK((*rows)[0].free->count() == 81080LL * 1048576);
  CHECK((*rows)[1].free->count() == 43925LL * 1048576);

  auto gb10 = parse_nvidia_smi_gpus(fixture("nvidia-smi-gb10.csv"));
  REQUIRE(gb10.has_value());
  CHECK((*gb10)[0].name == "NVIDIA GB10");
  CHECK_FALSE((*gb10)[0].total.has_value());
  CHECK_FALSE((*gb10)[0].free.has_value());

  // Older drivers say "[Not Supported]"; a stand-in may forget nounits.
  auto variants = parse_nvidia_smi_gpus("0, GPU-1, Orin (nvgpu), [Not Supported], [Not Supported], [Not Supported]\n"
                                        "1, GPU-2, Tesla T4, 15360 MiB, 15095 MiB, 0 MiB\n\n");
  REQUIRE(variants.has_value());
  CHECK_FALSE((*variants)[0].total.has_value());
  CHECK((*variants)[1].total == Bytes::mib(15360));
  CHECK(parse_nvidia_smi_gpus("")->empty());

  CHECK(parse_nvidia_smi_gpus("No devices were found").error().to_string() ==
        "nvidia-smi: unexpected line \"No devices were found\"; expected index, uuid, name, memory.total, "
        "memory.free, memory.used");
  CHECK(parse_nvidia_smi_gpus("x, GPU-1, Tesla T4, 15360, 15095, 0").error().code == ErrorCode::kParseError);
  CHECK(parse_nvidia_smi_gpus("-1, GPU-1, Tesla T4, 15360, 15095, 0").error().code == ErrorCode::kParseError);
  CHECK(parse_nvidia_smi_gpus("0, GPU-1, , 15360, 15095, 0").error().code == ErrorCode::kParseError);
}

TEST_CASE("nvidia-smi --query-compute-apps rows") {
  auto rows = parse_nvidia_smi_processes(fixture("nvidia-smi-mixed-apps.csv"));
  REQUIRE(rows.has_value());
  REQUIRE(rows->size() == 3);
  CHECK((*rows)[1].gpu_uuid == "GPU-0b7c2f4e-91d3-4a57-8e2b-6c1d9f3a5e80");
  CHECK((*rows)[1].process.pid == 44966);
  CHECK((*rows)[1].process.name == "/opt/tritonserver/backends/python/triton_python_backend_stub");
  CHECK((*rows)[1].process.used == Bytes::mib(974));
  auto odd = parse_nvidia_smi_processes("GPU-1, 7, python train.py --a=1,2, 100\nGPU-1, 8, Xorg, [N/A]\n");
  REQUIRE(odd.has_value());
  CHECK((*odd)[0].process.name == "python train.py --a=1,2");
  CHECK((*odd)[0].process.used == Bytes::mib(100));
  CHECK((*odd)[1].process.used == Bytes::zero());  // WDDM and MIG say [N/A]
  CHECK(parse_nvidia_smi_processes("")->empty());
  CHECK(parse_nvidia_smi_processes("GPU-1, seven, python, 100").error().to_string() ==
        "nvidia-smi: unexpected line \"GPU-1, seven, python, 100\"; expected gpu_uuid, pid, process_name, used_memory");
}

TEST_CASE("rocm-smi --json") {
  auto rows = parse_rocm_smi(fixture("rocm-smi-mi300x.json"));
  REQUIRE(rows.has_value());
  REQUIRE(rows->size() == 8);
  CHECK((*rows)[0].index == 0);
  CHECK((*rows)[0].name == "AMD Instinct MI300X");
  CHECK((*rows)[0].total.count() == 206'141'652'992);
  CHECK((*rows)[0].used.count() == 297'611'264);
  CHECK((*rows)[7].index == 7);
  CHECK((*rows)[7].used.count() == 297'623'552);

  // ROCm 5 spelling, a warning line before the JSON, the "system" entry, card10 after card9.
  auto rocm5 = parse_rocm_smi(
      "WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status\n"
      "{\"card10\": {\"Card series\": \"Radeon RX 7900 XTX\", \"VRAM Total Memory (B)\": \"25753026560\", "
      "\"VRAM Total Used Memory (B)\": \"1048576\"}, "
      "\"card9\": {\"Card series\": \"N/A\", \"Card model\": \"0x744c\", \"VRAM Total Memory (B)\": \"25753026560\", "
      "\"VRAM Total Used Memory (B)\": \"0\"}, \"system\": {\"Driver version\": \"6.7.0\"}}");
  REQUIRE(rocm5.has_value());
  REQUIRE(rocm5->size() == 2);
  CHECK((*rocm5)[0].index == 9);
  CHECK((*rocm5)[0].name == "0x744c");
  CHECK((*rocm5)[1].index == 10);
  CHECK((*rocm5)[1].name == "Radeon RX 7900 XTX");

  CHECK(parse_rocm_smi("{\"card0\": {\"Card Series\": \"AMD Instinct MI300X\"}}").error().to_string() ==
        "rocm-smi: card0 has no usable \"VRAM Total Memory (B)\" / \"VRAM Total Used Memory (B)\" (got \"\" / \"\")");
  CHECK(parse_rocm_smi("ERROR: no GPUs found").error().to_string() == "rocm-smi: no JSON in \"ERROR: no GPUs found\"");
  CHECK(parse_rocm_smi("{\"card0\": ").error().message.rfind("rocm-smi: invalid JSON: ", 0) == 0);
  CHECK(parse_rocm_smi("{}")->empty());
}

TEST_CASE("/proc/meminfo") {
  auto idle = parse_meminfo(fixture("proc-meminfo-gb10.txt"), "/proc/meminfo");
  REQUIRE(idle.has_value());
  CHECK(idle->total.count() == 127'600'748LL * 1024);
  CHECK(idle->available.count() == 118'566'368LL * 1024);
  auto busy = parse_meminfo(fixture("proc-meminfo-gb10-busy.txt"), "/proc/meminfo");
  REQUIRE(busy.has_value());
  CHECK(busy->total.count() == 127'600'816LL * 1024);
  CHECK(busy->available.count() == 40'174'336LL * 1024);
  CHECK(parse_meminfo("MemTotal: 1 kB\nMemFree: 1 kB\n", "/proc/meminfo").error().to_string() ==
        "/proc/meminfo has no MemAvailable");
  CHECK(parse_meminfo("", "m").error().to_string() == "m has no MemTotal");
  CHECK(parse_meminfo("MemTotal: lots kB\n", "m").error().to_string() ==
        "m: unexpected line \"MemTotal: lots kB\"; expected \"Key:   <number> kB\"");
  CHECK(parse_meminfo("MemTotal: 0 kB\nMemAvailable: 0 kB\n", "m")->total == Bytes::zero());
}

// ---------------------------------------------------------------------------------- detection

TEST_CASE("no GPU: the error says what was tried and names --gpu and --gpu-memory") {
  FakeProbe p;
  auto r = detect_gpus(p, profiles());
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == ErrorCode::kNoGpu);
  CHECK(r.error().to_string() ==
        std::string("no GPU found (NVML not loaded: ") + kNoNvml +
            "; nvidia-smi: not found; rocm-smi: not found); give --gpu NAME (memplan gpus lists them) or "
            "--gpu-memory SIZE");
  CHECK(p.ran == std::vector<std::string>{kSmiQuery, kRocm});
}

TEST_CASE("nvidia-smi that cannot reach the driver is a note, not a failure") {
  FakeProbe p;
  p.answer(kSmiQuery, "",  9,
           "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
           "NVIDIA driver is installed and running.\n");
  p.answer(kRocm, fixture("rocm-smi-mi300x.json"));
  auto sys = detect_ok(p);
  CHECK(sys.gpus.size() == 8);
  CHECK(sys.notes[1] ==
        "nvidia-smi: exit 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
        "that the latest NVIDIA driver is installed and running.");
  FakeProbe none;
  none.answer(kSmiQuery, "No devices were found\n", 6);
  CHECK(detect_error(none) == std::string("no GPU found (NVML not loaded: ") + kNoNvml +
                                  "; nvidia-smi: exit 6: No devices were found; rocm-smi: not found); give --gpu NAME "
                                  "(memplan gpus lists them) or --gpu-memory SIZE");
  FakeProbe garbage;
  garbage.answer(kSmiQuery, "hello\n");
  CHECK(detect_error(garbage) ==
        "nvidia-smi: unexpected line \"hello\"; expected index, uuid, name, memory.total, memory.free, memory.used");
}

TEST_CASE("two H100s: totals, free memory, profiles, and the one a run is limited by") {
  FakeProbe p;
  p.answer(kSmiQuery, fixture("nvidia-smi-h100x2.csv"));
  auto sys = detect_ok(p);
  REQUIRE(sys.gpus.size() == 2);
  for (const auto& g : sys.gpus) {
    CHECK(g.total.count() == 85'520'809'984);  // 81559 MiB
    CHECK(g.vendor == "nvidia");
    CHECK(g.source == "nvidia-smi");
    CHECK_FALSE(g.unified);
    REQUIRE(g.profile.has_value());
    CHECK(g.profile->name == "h100-sxm");
  }
  CHECK(sys.gpus[0].free == Bytes::mib(81080));
  CHECK(sys.chosen == 1);  // 43925 MiB free: another job holds 37155 MiB
  CHECK(sys.chosen_gpu().free == Bytes::mib(43925));
  CHECK(sys.visibility.empty());
  const auto profile = sys.chosen_profile();
  CHECK(profile.name == "h100-sxm");
  CHECK(profile.memory == Bytes::mib(81559));
  const auto budget = detected_budget(sys.chosen_gpu(), Bytes::gib(1));
  CHECK(budget.capacity == Bytes::mib(43925));
  CHECK(budget.headroom == Bytes::zero());
  CHECK(budget.budget() == Bytes::mib(43925 - 1024));
}

TEST_CASE("a mixed machine: every GPU matched, the smallest chosen") {
  auto p = mixed();
  auto sys = detect_ok(p);
  REQUIRE(sys.gpus.size() == 4);
  CHECK(sys.gpus[0].profile->name == "l40s");
  CHECK(sys.gpus[1].profile->name == "h100-sxm");
  CHECK(sys.gpus[2].profile->name == "v100-16gb");
  CHECK(sys.gpus[2].total == Bytes::mib(16160));  // what that driver reported, not the profile's 16384
  CHECK(sys.gpus[3].profile->name == "t4");
  CHECK(sys.chosen == 3);  // the busy T4: 1952 MiB free
  CHECK(sys.chosen_profile().memory == Bytes::mib(15360));
  CHECK(bf16_warning(sys.chosen_profile(), true).has_value());
  CHECK(sys.gpus[0].processes.empty());  // not asked for
  CHECK(p.ran == std::vector<std::string>{kSmiQuery});
}

TEST_CASE("preflight's processes come from --query-compute-apps") {
  auto p = mixed();
  auto sys = detect_ok(p, DetectOptions{true});
  REQUIRE(sys.gpus[0].processes.size() == 3);
  CHECK(sys.gpus[0].processes[0].pid == 44378);
  CHECK(sys.gpus[0].processes[0].name == "tritonserver");
  CHECK(sys.gpus[0].processes[2].used == Bytes::mib(6294));
  CHECK(sys.gpus[3].processes.empty());
  CHECK(p.ran == std::vector<std::string>{kSmiQuery, kSmiApps});

  auto failing = mixed();
  failing.commands.erase(kSmiApps);
  auto partial = detect_ok(failing, DetectOptions{true});
  CHECK(partial.gpus[0].processes.empty());
  CHECK(partial.notes.back() == "nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory: not found");
}

TEST_CASE("CUDA_VISIBLE_DEVICES: indices, UUIDs, order, and CUDA's stop at a bad entry") {
  auto p = mixed();
  p.vars["CUDA_VISIBLE_DEVICES"] = "0,1";
  auto sys = detect_ok(p);
  REQUIRE(sys.gpus.size() == 2);
  CHECK(sys.chosen_gpu().name == "NVIDIA L40S");  // 36346 MiB free beats the H100's 43925
  CHECK(sys.visibility == "CUDA_VISIBLE_DEVICES=0,1");

  p.vars["CUDA_VISIBLE_DEVICES"] = "3,1";
  sys = detect_ok(p);
  REQUIRE(sys.gpus.size() == 2);
  CHECK(sys.gpus[0].index == 3);  // CUDA's order: the T4 is cuda:0
  CHECK(sys.gpus[1].index == 1);

  p.vars["CUDA_VISIBLE_DEVICES"] = "GPU-a3f4e0c1, GPU-6e1a9d3b-5c72-48f0-b2d4-1f8e7a6c3b95";
  sys = detect_ok(p);
  REQUIRE(sys.gpus.size() == 2);
  CHECK(sys.gpus[0].index == 1);
  CHECK(sys.gpus[1].index == 2);

  p.vars["CUDA_VISIBLE_DEVICES"] = "1,7,0";
  sys = detect_ok(p);
  REQUIRE(sys.gpus.size() == 1);
  CHECK(sys.gpus[0].index == 1);
  CHECK(sys.notes.back() ==
        "CUDA_VISIBLE_DEVICES entry '7' names no GPU (or repeats one): it and what follows are ignored, as CUDA does");

  p.vars["CUDA_VISIBLE_DEVICES"] = "2,2";
  CHECK(detect_ok(p).gpus.size() == 1);
  p.vars["CUDA_VISIBLE_DEVICES"] = "GPU-";  // a prefix of every UUID: ambiguous
  CHECK(detect_error(p) == "no GPU visible: CUDA_VISIBLE_DEVICES=\"GPU-\" hides all 4 GPUs; unset it, or give --gpu "
                           "NAME or --gpu-memory SIZE");

  for (const char* hidden : {"", "-1", "NoDevFiles"}) {
    p.vars["CUDA_VISIBLE_DEVICES"] = hidden;
    auto r = detect_gpus(p, profiles());
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == ErrorCode::kNoGpu);
    CHECK(r.error().message == std::string("no GPU visible: CUDA_VISIBLE_DEVICES=\"") + hidden + "\" hides all 4 GPUs");
  }
  p.vars["CUDA_VISIBLE_DEVICES"] = "MIG-4c5a6f4e-2e8d-5c9b-8a7f-1e2d3c4b5a69";
  auto mig = detect_gpus(p, profiles());
  REQUIRE_FALSE(mig.has_value());
  CHECK(mig.error().code == ErrorCode::kUnsupported);
  CHECK(mig.error().to_string() ==
        "CUDA_VISIBLE_DEVICES names a MIG instance 'MIG-4c5a6f4e-2e8d-5c9b-8a7f-1e2d3c4b5a69'; memplan cannot see MIG "
        "slices; give the slice's memory with --gpu-memory SIZE");
}

TEST_CASE("NVML first: nvidia-smi is not run when NVML answers") {
  FakeProbe p;
  p.nvml_devices = std::vector<Nvml::Device>{
      {"NVIDIA H100 80GB HBM3", "GPU-5d2c6b52-8b3e-5c0f-1f0a-0d6b2f7c9e11", Bytes::mib(81559), Bytes::mib(81080)},
      {"NVIDIA H100 80GB HBM3", "GPU-a3f4e0c1-2b9d-7e68-44c2-9b1e3d0f6a27", Bytes::mib(81559), Bytes::mib(43925)}};
  p.nvml_processes = {{}, {{4242, "python3", Bytes::mib(37155)}}};
  auto sys = detect_ok(p, DetectOptions{true});
  CHECK(p.ran.empty());
  REQUIRE(sys.gpus.size() == 2);
  CHECK(sys.gpus[1].source == "nvml");
  CHECK(sys.gpus[1].index == 1);
  CHECK(sys.chosen == 1);
  REQUIRE(sys.gpus[1].processes.size() == 1);
  CHECK(sys.gpus[1].processes[0].used == Bytes::mib(37155));

  p.vars["CUDA_VISIBLE_DEVICES"] = "GPU-5d2c";
  CHECK(detect_ok(p).chosen_gpu().index == 0);

  // NVML loaded but failing: nvidia-smi answers instead.
  p.vars.clear();
  p.nvml_failure = "nvmlDeviceGetCount_v2: Driver/library version mismatch";
  p.answer(kSmiQuery, fixture("nvidia-smi-h100x2.csv"));
  sys = detect_ok(p);
  CHECK(sys.gpus[0].source == "nvidia-smi");
  CHECK(sys.notes == std::vector<std::string>{"NVML failed: nvmlDeviceGetCount_v2: Driver/library version mismatch"});

  // NVML loaded, no NVIDIA GPU: nvidia-smi would say the same, so only rocm-smi is asked.
  FakeProbe amd;
  amd.nvml_devices = std::vector<Nvml::Device>{};
  amd.answer(kRocm, fixture("rocm-smi-mi300x.json"));
  CHECK(detect_ok(amd).gpus.size() == 8);
  CHECK(amd.ran == std::vector<std::string>{kRocm});
}

TEST_CASE("environment overrides: MEMPLAN_DISABLE_NVML, MEMPLAN_NVIDIA_SMI, MEMPLAN_ROCM_SMI") {
  FakeProbe p;
  p.nvml_devices = std::vector<Nvml::Device>{{"NVIDIA A10G", "GPU-1", Bytes::mib(23028), Bytes::mib(22000)}};
  p.vars["MEMPLAN_DISABLE_NVML"] = "1";
  p.answer(kSmiQuery, fixture("nvidia-smi-h100x2.csv"));
  auto sys = detect_ok(p);
  CHECK(p.nvml_loads == 0);
  CHECK(sys.gpus[0].name == "NVIDIA H100 80GB HBM3");
  CHECK(sys.notes.front() == "NVML skipped: MEMPLAN_DISABLE_NVML=1");

  FakeProbe stand_in;
  stand_in.nvml_devices = p.nvml_devices;
  stand_in.vars["MEMPLAN_NVIDIA_SMI"] = "/opt/fake/nvidia-smi";
  stand_in.answer("/opt/fake/nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.free,memory.used "
                  "--format=csv,noheader,nounits",
                  fixture("nvidia-smi-gb10.csv"));
  stand_in.files["/proc/meminfo"] = fixture("proc-meminfo-gb10.txt");
  sys = detect_ok(stand_in);
  CHECK(stand_in.nvml_loads == 0);  // the stand-in's answer is the one wanted
  CHECK(sys.gpus[0].name == "NVIDIA GB10");
  CHECK(sys.notes.front() == "NVML skipped: MEMPLAN_NVIDIA_SMI=/opt/fake/nvidia-smi");

  FakeProbe rocm;
  rocm.vars["MEMPLAN_ROCM_SMI"] = "/opt/rocm-6.2/bin/rocm-smi";
  rocm.answer("/opt/rocm-6.2/bin/rocm-smi --showproductname --showmeminfo vram --json", fixture("rocm-smi-mi300x.json"));
  CHECK(detect_ok(rocm).gpus.size() == 8);
}

TEST_CASE("DGX Spark: nvidia-smi says [N/A], /proc/meminfo says how much") {
  FakeProbe p;
  p.vars["MEMPLAN_DISABLE_NVML"] = "1";
  p.answer(kSmiQuery, fixture("nvidia-smi-gb10.csv"));
  p.files["/proc/meminfo"] = fixture("proc-meminfo-gb10.txt");
  auto sys = detect_ok(p);
  REQUIRE(sys.gpus.size() == 1);
  const auto& g = sys.chosen_gpu();
  CHECK(g.unified);
  CHECK(g.total.count() == 130'663'165'952);  // 127600748 kB
  CHECK(g.free.count() == 121'411'960'832);   // 118566368 kB
  CHECK(g.source == "nvidia-smi + /proc/meminfo");
  REQUIRE(g.profile.has_value());
  CHECK(g.profile->name == "dgx-spark-gb10");
  // Idle: the OS reserve binds, not what is free. 121.69 GiB - 28 GiB = 100.6 GB for the run (seed 000).
  auto idle = detected_budget(g, Bytes::zero());
  CHECK(idle.capacity == g.total);
  CHECK(idle.headroom == Bytes::gib(28));
  CHECK(idle.budget().count() == 130'663'165'952 - 30'064'771'072);

  // 80 GiB still held by the driver's pool: only what is available now can be planned for.
  p.files["/proc/meminfo"] = fixture("proc-meminfo-gb10-busy.txt");
  sys = detect_ok(p);
  const auto busy = detected_budget(sys.chosen_gpu(), Bytes::zero());
  CHECK(busy.capacity.count() == 40'174'336LL * 1024 + 30'064'771'072);
  CHECK(busy.budget().count() == 40'174'336LL * 1024);

  // MEMPLAN_PROC_MEMINFO points elsewhere.
  p.vars["MEMPLAN_PROC_MEMINFO"] = "/tmp/meminfo";
  p.files["/tmp/meminfo"] = fixture("proc-meminfo-gb10.txt");
  sys = detect_ok(p);
  CHECK(sys.chosen_gpu().source == "nvidia-smi + /tmp/meminfo");
  CHECK(sys.chosen_gpu().free.count() == 121'411'960'832);

  p.vars.erase("MEMPLAN_PROC_MEMINFO");
  p.files.clear();
  auto r = detect_gpus(p, profiles());
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == ErrorCode::kIoError);
  CHECK(r.error().to_string() ==
        "NVIDIA GB10 reports no memory size and /proc/meminfo cannot be read; give --gpu NAME or --gpu-memory SIZE");
}

TEST_CASE("DGX Spark through NVML: NOT_SUPPORTED memory is unified memory") {
  FakeProbe p;
  p.nvml_devices = std::vector<Nvml::Device>{{"NVIDIA GB10", "GPU-2dee1e25-b3b5-007e-2b55-79f2d0f2ebe5", {}, {}}};
  p.files["/proc/meminfo"] = fixture("proc-meminfo-gb10.txt");
  auto sys = detect_ok(p);
  CHECK(sys.chosen_gpu().unified);
  CHECK(sys.chosen_gpu().source == "nvml + /proc/meminfo");
  CHECK(sys.chosen_profile().name == "dgx-spark-gb10");
  CHECK(sys.chosen_profile().memory.count() == 130'663'165'952);
}

TEST_CASE("Jetson without nvidia-smi: the device tree names it, MemTotal sizes it") {
  FakeProbe p;
  p.files["/proc/device-tree/model"] = std::string("NVIDIA Jetson AGX Orin Developer Kit") + '\0';
  p.files["/proc/meminfo"] = "MemTotal:       64286720 kB\nMemFree:        60000000 kB\nMemAvailable:   61000000 kB\n";
  auto sys = detect_ok(p);
  REQUIRE(sys.gpus.size() == 1);
  CHECK(sys.chosen_gpu().name == "NVIDIA Jetson AGX Orin Developer Kit");
  CHECK(sys.chosen_gpu().unified);
  CHECK(sys.chosen_gpu().total == Bytes::mib(62780));  // tegrastats' "RAM x/62780MB"
  CHECK(sys.chosen_profile().name == "jetson-agx-orin-64gb");
  CHECK(sys.chosen_gpu().source == "/proc/device-tree/model + /proc/meminfo");

  p.files["/proc/device-tree/model"] = "Raspberry Pi 5 Model B Rev 1.0";
  CHECK(detect_gpus(p, profiles()).error().code == ErrorCode::kNoGpu);
}

TEST_CASE("AMD: rocm-smi, ROCR_VISIBLE_DEVICES then HIP_VISIBLE_DEVICES") {
  FakeProbe p;
  p.answer(kRocm, fixture("rocm-smi-mi300x.json"));
  auto sys = detect_ok(p, DetectOptions{true});
  REQUIRE(sys.gpus.size() == 8);
  CHECK(sys.gpus[0].vendor == "amd");
  CHECK(sys.gpus[0].profile->name == "mi300x");
  CHECK(sys.gpus[0].free.count() == 206'141'652'992 - 297'611'264);
  CHECK(sys.chosen == 1);  // 12288 B more in use than card0
  CHECK(sys.notes.back() == "processes are not listed for AMD GPUs");

  p.vars["HIP_VISIBLE_DEVICES"] = "2,3";
  sys = detect_ok(p);
  REQUIRE(sys.gpus.size() == 2);
  CHECK(sys.gpus[0].index == 2);
  CHECK(sys.visibility == "HIP_VISIBLE_DEVICES=2,3");

  p.vars["ROCR_VISIBLE_DEVICES"] = "4,5,6";
  p.vars["HIP_VISIBLE_DEVICES"] = "1";  // counts within what ROCR left: card5
  sys = detect_ok(p);
  REQUIRE(sys.gpus.size() == 1);
  CHECK(sys.gpus[0].index == 5);
  CHECK(sys.visibility == "ROCR_VISIBLE_DEVICES=4,5,6 HIP_VISIBLE_DEVICES=1");

  p.vars.erase("HIP_VISIBLE_DEVICES");
  p.vars["CUDA_VISIBLE_DEVICES"] = "0";  // HIP reads it when HIP_VISIBLE_DEVICES is unset
  sys = detect_ok(p);
  REQUIRE(sys.gpus.size() == 1);
  CHECK(sys.gpus[0].index == 4);
}

TEST_CASE("a GPU memplan has no profile for is still planned for") {
  FakeProbe p;
  p.answer(kSmiQuery, "0, GPU-9f8e7d6c-5b4a-3928-1716-051423324150, Tesla P40, 24576, 24000, 0\n");
  auto sys = detect_ok(p);
  CHECK_FALSE(sys.chosen_gpu().profile.has_value());
  const auto profile = sys.chosen_profile();
  CHECK(profile.name == "tesla-p40");
  CHECK(profile.display_name == "Tesla P40");
  CHECK(profile.memory == Bytes::mib(24576));
  CHECK(profile.bf16);  // unknown: assumed
  CHECK_FALSE(profile.unified);
}

// ---------------------------------------------------------------------------------- the real machine

TEST_CASE("the process probe runs programs, reads files and the environment") {
  const auto probe = SystemProbe::from_process();
  auto r = probe->run({"sh", "-c", "echo out; echo err >&2; exit 3"});
  CHECK(r.started);
  CHECK(r.exit_code == 3);
  CHECK(r.out == "out\n");
  CHECK(r.err == "err\n");
  CHECK_FALSE(probe->run({"/nonexistent/memplan-test-program"}).started);
  CHECK_FALSE(probe->read_file("/nonexistent/file").has_value());
  CHECK(probe->read_file(std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/detect/proc-meminfo-gb10.txt") ==
        fixture("proc-meminfo-gb10.txt"));
  CHECK_FALSE(probe->env("MEMPLAN_TEST_UNSET_VARIABLE").has_value());
  // A large output on both streams must not deadlock the pipes.
  auto big = probe->run({"sh", "-c", "i=0; while [ $i -lt 20000 ]; do echo line-$i; echo e-$i >&2; i=$((i+1)); done"});
  CHECK(big.exit_code == 0);
  CHECK(big.out.size() > 100000);
  CHECK(big.err.size() > 80000);
}

TEST_CASE("NVML loads where a driver is installed, and says why not elsewhere") {
  const auto probe = SystemProbe::from_process();
  auto nvml = probe->load_nvml();
  if (nvml) {
    auto devices = (*nvml)->devices();
    CHECK(devices.has_value());
  } else {
    CHECK(nvml.error().message.find("libnvidia-ml.so.1") != std::string::npos);
  }
}

TEST_CASE("the stand-in nvidia-smi answers memplan's queries through the process probe") {
  const std::string dir = std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/detect/";
  ScopedEnv smi("MEMPLAN_NVIDIA_SMI", dir + "fake-nvidia-smi");
  ScopedEnv gpus("FAKE_NVIDIA_SMI_GPUS", dir + "nvidia-smi-mixed.csv");
  ScopedEnv apps("FAKE_NVIDIA_SMI_APPS", dir + "nvidia-smi-mixed-apps.csv");
  ScopedEnv mask("CUDA_VISIBLE_DEVICES", std::nullopt);  // whatever the machine running the tests sets
  const auto probe = SystemProbe::from_process();
  auto sys = detect_gpus(*probe, profiles(), DetectOptions{true});
  REQUIRE(sys.has_value());
  CHECK(sys->gpus.size() == 4);
  CHECK(sys->gpus[0].processes.size() == 3);
  auto wrong = probe->run({dir + "fake-nvidia-smi", "--query-gpu=name", "--format=csv"});
  CHECK(wrong.exit_code == 2);
  CHECK(wrong.err == "fake nvidia-smi: unexpected arguments: --query-gpu=name --format=csv\n");
}

// Tests src/io/gpu/gpu_profiles.cpp. Expected figures are derived independently of the program:
// nvidia-smi memory.total in MiB as drivers print it (modal-labs/modal-client#2797 lists H100
// 81559MiB = 85520809984 B, A100 80GB 81920MiB, T4 15360MiB), rocm-smi bytes for the MI300X,
// /proc/meminfo kB for the DGX Spark (XuehaiPan/nvitop#208).
#include <catch2/catch.hpp>

#include <cctype>
#include <set>

#include "io/gpu/gpu_profiles.hpp"

using memplan::Bytes;
using memplan::ErrorCode;
using memplan::GpuProfile;
using namespace memplan::io;

namespace {

const std::vector<GpuProfile>& builtin() {
  static const auto p = load_gpu_profiles();
  REQUIRE(p.has_value());
  return *p;
}

GpuProfile gpu(const std::string& name) {
  auto g = find_gpu(name);
  INFO(name);
  REQUIRE(g.has_value());
  return *g;
}

std::string error_of(const std::string& yaml) {
  auto r = parse_gpu_profiles(yaml, "test.yaml");
  REQUIRE_FALSE(r.has_value());
  return r.error().to_string();
}

// A valid one-profile file with `line` replacing the line that starts like it (by key).
std::string one_profile(const std::string& replace_key = "", const std::string& line = "") {
  std::vector<std::string> lines = {
      "gpus:",                            // 1
      "  - name: foo",                    // 2
      "    display_name: Foo GPU",        // 3
      "    vendor: nvidia",               // 4
      "    memory: 16GiB",                // 5
      "    bf16: true",                   // 6
  };
  std::string out;
  bool replaced = false;
  for (auto l : lines) {
    const std::string bare = l.substr(l.find_first_not_of(" -"));
    if (!replace_key.empty() && bare.rfind(replace_key + ":", 0) == 0) {
      l = line;
      replaced = true;
    }
    if (!l.empty()) out += l + "\n";
  }
  if (!replace_key.empty() && !replaced) out += line + "\n";
  return out;
}

}  // namespace

TEST_CASE("the built-in profiles load and cover the GPUs people train on") {
  const auto& all = builtin();
  CHECK(all.size() >= 30);
  for (const char* name : {"v100-16gb", "v100-32gb", "t4", "a10", "a10g", "l4", "l40s", "a100-40gb", "a100-40gb-pcie",
                           "a100-80gb", "a100-80gb-pcie", "h100-pcie", "h100-sxm", "h100-nvl", "h200", "b200", "gb200",
                           "rtx-3090", "rtx-4090", "rtx-5090", "rtx-6000-ada", "rtx-a6000", "quadro-rtx-6000", "a40",
                           "mi250x", "mi300x", "mi325x", "dgx-spark-gb10", "jetson-agx-orin-32gb",
                           "jetson-agx-orin-64gb", "apple-m3-max-128gb"}) {
    INFO(name);
    CHECK(find_gpu(name).has_value());
  }
  for (const auto& g : all) {
    INFO(g.name);
    CHECK(g.memory >= Bytes::gib(8));
    CHECK(g.memory <= Bytes::gib(600));
    CHECK((g.vendor == "nvidia" || g.vendor == "amd" || g.vendor == "apple"));
    CHECK(g.system_reserve < g.memory);
    if (!g.unified) CHECK(g.system_reserve == Bytes::zero());
  }
}

TEST_CASE("memory is what the driver reports, in its unit") {
  // nvidia-smi memory.total, MiB.
  CHECK(gpu("h100-sxm").memory.count() == 85'520'809'984);  // 81559 MiB, the bytes modal-client#2797 quotes
  CHECK(gpu("a100-80gb").memory.count() == 81920LL * 1048576);
  CHECK(gpu("a100-80gb").memory.count() == 85'899'345'920);
  CHECK(gpu("a100-40gb").memory.count() == 40960LL * 1048576);
  CHECK(gpu("t4").memory.count() == 15360LL * 1048576);
  CHECK(gpu("l4").memory.count() == 23034LL * 1048576);
  CHECK(gpu("a10").memory.count() == 23028LL * 1048576);
  CHECK(gpu("quadro-rtx-6000").memory.count() == 24576LL * 1048576);  // seed 002's "24576MiB"
  CHECK(gpu("h200").memory.count() == 143771LL * 1048576);
  // rocm-smi "VRAM Total Memory (B)".
  CHECK(gpu("mi300x").memory.count() == 206'141'652'992);
  CHECK(gpu("mi250x").memory.count() == 65520LL * 1048576);  // one GCD: 68702699520 B, 16 MiB short of 64 GiB
  // /proc/meminfo MemTotal, kB (= KiB).
  CHECK(gpu("dgx-spark-gb10").memory.count() == 127'600'748LL * 1024);
  CHECK(gpu("jetson-agx-orin-64gb").memory.count() == 62780LL * 1048576);
}

TEST_CASE("bf16 and unified flags") {
  for (const char* name : {"v100-16gb", "v100-32gb", "t4", "quadro-rtx-6000", "rtx-2080-ti", "apple-m2-ultra-192gb"}) {
    INFO(name);
    CHECK_FALSE(gpu(name).bf16);
  }
  for (const char* name : {"a100-80gb", "h100-sxm", "l4", "rtx-3090", "mi300x", "dgx-spark-gb10"}) {
    INFO(name);
    CHECK(gpu(name).bf16);
  }
  for (const char* name : {"dgx-spark-gb10", "jetson-agx-orin-32gb", "apple-m4-max-128gb"}) {
    INFO(name);
    CHECK(gpu(name).unified);
  }
  CHECK_FALSE(gpu("h100-sxm").unified);
  CHECK_FALSE(gpu("mi300x").unified);
}

TEST_CASE("system reserve on unified memory") {
  // Seed 000: 28 GB kept for the OS on a 128 GB DGX Spark.
  CHECK(gpu("dgx-spark-gb10").system_reserve == Bytes::gib(28));
  // What is left for the run: 121.69 GiB - 28 GiB = 93.69 GiB, just over seed 000's 100 GB line.
  const Bytes left = gpu("dgx-spark-gb10").memory - gpu("dgx-spark-gb10").system_reserve;
  CHECK(left.count() == 130'663'165'952 - 30'064'771'072);
  CHECK(left.as_gb() == Approx(100.598).epsilon(1e-5));
  // Metal's working-set cap on 128 GB Macs: 107.52 GiB (antirez/ds4#893).
  CHECK(gpu("apple-m3-max-128gb").memory - gpu("apple-m3-max-128gb").system_reserve == Bytes::gib(107.52));
  // Omitted: the default, 7/32 of 62780 MiB.
  CHECK(gpu("jetson-agx-orin-64gb").system_reserve.count() == 62780LL * 1048576 * 7 / 32);
}

TEST_CASE("default_system_reserve: 7/32 of memory, at least 4 GiB") {
  CHECK(default_system_reserve(Bytes::gib(128)) == Bytes::gib(28));
  CHECK(default_system_reserve(Bytes::zero()) == Bytes::gib(4));
  CHECK(default_system_reserve(Bytes::gib(16)) == Bytes::gib(4));          // 3.5 GiB -> the floor
  CHECK(default_system_reserve(Bytes::gib(18)) == Bytes::gib(4));          // 3.9375 GiB -> the floor
  // 18.2875 GiB: 7/32 of it is 4295399360 B, just over the 4 GiB floor (4294967296 B).
  CHECK(default_system_reserve(Bytes::of(19'636'111'360)).count() == 4'295'399'360);
  CHECK(default_system_reserve(Bytes::of(19'634'136'064)) == Bytes::gib(4));  // 7/32 is 4294967264 B, under the floor
  CHECK(default_system_reserve(Bytes::gib(512)) == Bytes::gib(112));
}

TEST_CASE("find_gpu matches names, aliases and driver names, ignoring case and separators") {
  CHECK(gpu("a100-80gb").name == "a100-80gb");
  CHECK(gpu("A100-SXM4-80GB").name == "a100-80gb");
  CHECK(gpu("NVIDIA A100-SXM4-80GB").name == "a100-80gb");
  CHECK(gpu("nvidia a100-sxm4-80gb").name == "a100-80gb");
  CHECK(gpu("A100 80GB").name == "a100-80gb");
  CHECK(gpu("a100_80gb").name == "a100-80gb");
  CHECK(gpu("a100").name == "a100-80gb");
  CHECK(gpu("NVIDIA A100 80GB PCIe").name == "a100-80gb-pcie");
  CHECK(gpu("NVIDIA H100 80GB HBM3").name == "h100-sxm");
  CHECK(gpu("h100").name == "h100-sxm");
  CHECK(gpu("NVIDIA H100 PCIe").name == "h100-pcie");
  CHECK(gpu("Tesla T4").name == "t4");
  CHECK(gpu("Tesla V100-PCIE-16GB").name == "v100-16gb");
  CHECK(gpu("Quadro RTX 6000").name == "quadro-rtx-6000");
  CHECK(gpu("RTX 3090").name == "rtx-3090");  // "NVIDIA GeForce RTX 3090" without the vendor words
  CHECK(gpu("NVIDIA RTX 6000 Ada Generation").name == "rtx-6000-ada");
  CHECK(gpu("AMD Instinct MI300X").name == "mi300x");
  CHECK(gpu("Instinct MI300X").name == "mi300x");
  CHECK(gpu("NVIDIA GB10").name == "dgx-spark-gb10");
  CHECK(gpu("DGX-Spark").name == "dgx-spark-gb10");
}

TEST_CASE("find_gpu errors quote the name and suggest the nearest profile") {
  auto r = find_gpu("a100-90gb");
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == ErrorCode::kUnknownName);
  // Never a GPU of another memory size: 90 GB is not a misspelt 80 GB, nor an RTX 3060 (12 GB)
  // a misspelt RTX 3090 (24 GB).
  CHECK(r.error().to_string() ==
        "unknown GPU 'a100-90gb'; run 'memplan gpus' for the known GPUs, or give --gpu-memory SIZE");
  CHECK(find_gpu("rtx-3060").error().to_string() ==
        "unknown GPU 'rtx-3060'; run 'memplan gpus' for the known GPUs, or give --gpu-memory SIZE");
  CHECK(find_gpu("rtx-4090x").error().to_string() == "unknown GPU 'rtx-4090x'; did you mean 'rtx-4090'?");
  // A misspelt driver name suggests the canonical name of its profile.
  CHECK(find_gpu("NVIDIA H100 80GB HMB3").error().to_string() == "unknown GPU 'NVIDIA H100 80GB HMB3'; did you mean 'h100-sxm'?");
  CHECK(find_gpu("h2000").error().to_string() == "unknown GPU 'h2000'; did you mean 'h200'?");
  CHECK(find_gpu("tpu-v5e").error().to_string() ==
        "unknown GPU 'tpu-v5e'; run 'memplan gpus' for the known GPUs, or give --gpu-memory SIZE");
  CHECK(find_gpu("").error().to_string() ==
        "unknown GPU ''; run 'memplan gpus' for the known GPUs, or give --gpu-memory SIZE");

  // A shorthand several GPUs answer to lists them with their memory, suggesting none: "RTX 6000"
  // is seed 002's 24 GiB Quadro, or a 48 GiB RTX A6000 or RTX 6000 Ada.
  CHECK(find_gpu("RTX 6000").error().to_string() ==
        "unknown GPU 'RTX 6000': it could be 'quadro-rtx-6000' (24 GiB), 'rtx-a6000' (48 GiB), 'rtx-6000-ada' (48 GiB); "
        "give one of those names, or --gpu-memory SIZE");

  auto shared = find_gpu("Jetson AGX Orin Developer Kit");
  REQUIRE_FALSE(shared.has_value());
  CHECK(shared.error().code == ErrorCode::kInvalidArgument);
  CHECK(shared.error().to_string() ==
        "GPU name 'Jetson AGX Orin Developer Kit' is shared by 'jetson-agx-orin-32gb' and 'jetson-agx-orin-64gb'; "
        "give one of those names, or --gpu-memory SIZE");
}

TEST_CASE("every name and alias picks one profile, or one family the driver names alike") {
  for (const auto& g : builtin()) {
    std::vector<std::string> names = g.aliases;
    names.push_back(g.name);
    names.push_back(g.display_name);
    for (const auto& n : names) {
      INFO(g.name << " answers to '" << n << "'");
      auto r = find_gpu(n);
      if (r) {
        CHECK(r->name == g.name);
      } else {
        CHECK(r.error().code == ErrorCode::kInvalidArgument);  // shared within a family
        std::size_t same_display = 0;
        for (const auto& other : builtin()) same_display += other.display_name == g.display_name ? 1 : 0;
        CHECK(same_display > 1);
      }
    }
  }
}

TEST_CASE("find_gpu and match_detected_gpu on the built-in list answer as the whole list does") {
  // The built-in lookups parse only the profiles whose text mentions the name; every spelling
  // a profile answers to, in other cases and spacing, and a few misses must get the answer
  // (or the error) the whole parsed list gives.
  const auto& all = builtin();
  std::vector<std::string> names = {"a100-90gb", "h100-sxn", "rtx", "Tesla P40", "", "nvidia", "Jetson AGX Orin"};
  for (const auto& g : all) {
    names.push_back(g.name);
    names.push_back(g.display_name);
    for (const auto& a : g.aliases) names.push_back(a);
    std::string upper = g.display_name;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    names.push_back(upper);
  }
  for (const auto& n : names) {
    INFO("'" << n << "'");
    const auto fast = find_gpu(n);
    const auto full = find_gpu(all, n);
    REQUIRE(fast.has_value() == full.has_value());
    if (fast) CHECK(fast->name == full->name);
    else CHECK(fast.error().to_string() == full.error().to_string());
  }
  for (const auto& g : all) {
    INFO(g.display_name);
    const auto fast = match_detected_gpu(g.display_name, g.memory);
    const auto full = match_detected_gpu(all, g.display_name, g.memory);
    REQUIRE(fast.has_value() == full.has_value());
    if (fast) CHECK(fast->name == full->name);
  }
  CHECK_FALSE(match_detected_gpu("Tesla P40", Bytes::mib(24576)).has_value());
}

TEST_CASE("match_detected_gpu picks the profile a driver names, by memory within a family") {
  const auto& all = builtin();
  CHECK(match_detected_gpu(all, "NVIDIA H100 80GB HBM3", Bytes::mib(81559))->name == "h100-sxm");
  CHECK(match_detected_gpu(all, "Tesla V100-SXM2-32GB", Bytes::mib(32510))->name == "v100-32gb");
  // The Jetson AGX Orin 32 and 64 GB name themselves alike; MemTotal tells them apart.
  CHECK(match_detected_gpu(all, "NVIDIA Jetson AGX Orin", Bytes::mib(62780))->name == "jetson-agx-orin-64gb");
  CHECK(match_detected_gpu(all, "Orin (nvgpu)", Bytes::mib(30536))->name == "jetson-agx-orin-32gb");
  CHECK(match_detected_gpu(all, "Orin (nvgpu)", Bytes::mib(46658))->name == "jetson-agx-orin-32gb");  // nearer 30536
  CHECK(match_detected_gpu(all, "Orin (nvgpu)", Bytes::mib(46659))->name == "jetson-agx-orin-64gb");
  CHECK(match_detected_gpu(all, "NVIDIA GB10", Bytes::zero())->name == "dgx-spark-gb10");
  CHECK_FALSE(match_detected_gpu(all, "Tesla P40", Bytes::mib(24576)).has_value());
  CHECK_FALSE(match_detected_gpu(all, "", Bytes::mib(24576)).has_value());
}

TEST_CASE("gpu_from_memory makes a profile for --gpu-memory") {
  auto g = gpu_from_memory(Bytes::gb(24));
  REQUIRE(g.has_value());
  CHECK(g->name == "custom-24GB");
  CHECK(g->memory.count() == 24'000'000'000);
  CHECK(g->display_name == "GPU with 22.35 GiB (24.00 GB)");
  CHECK(g->bf16);
  CHECK_FALSE(g->unified);
  CHECK(g->system_reserve == Bytes::zero());
  CHECK(gpu_from_memory(Bytes::gib(80))->name == "custom-80GiB");
  CHECK(gpu_from_memory(Bytes::mib(81559))->name == "custom-81559MiB");
  CHECK(gpu_from_memory(Bytes::of(85'520'809'985))->name == "custom-85520809985B");
  // Boundaries: 1 GiB is the smallest accepted.
  CHECK(gpu_from_memory(Bytes::gib(1)).has_value());
  CHECK(gpu_from_memory(Bytes::gib(1) - Bytes::of(1)).error().to_string() ==
        "GPU memory of 1024.0 MiB is too small; write a unit, e.g. --gpu-memory 24GB");
  CHECK(gpu_from_memory(Bytes::of(24)).error().to_string() ==
        "GPU memory of 24 B is too small; write a unit, e.g. --gpu-memory 24GB");
  CHECK(gpu_from_memory(Bytes::zero()).error().code == ErrorCode::kInvalidArgument);
}

TEST_CASE("bf16 on a GPU without it is warned about") {
  CHECK(bf16_warning(gpu("t4"), true) ==
        std::optional<std::string>("Tesla T4 (t4) has no hardware bf16: PyTorch emulates it slowly or fails with "
                                   "\"not implemented for 'BFloat16'\"; train in fp16 (--fp16) instead"));
  CHECK(bf16_warning(gpu("v100-32gb"), true)->rfind("Tesla V100-SXM2-32GB (v100-32gb) has no hardware bf16", 0) == 0);
  CHECK_FALSE(bf16_warning(gpu("t4"), false).has_value());
  CHECK_FALSE(bf16_warning(gpu("a100-80gb"), true).has_value());
}

TEST_CASE("profile_budget keeps the system reserve on unified memory only") {
  const auto spark = profile_budget(gpu("dgx-spark-gb10"), Bytes::gib(2));
  CHECK(spark.capacity.count() == 127'600'748LL * 1024);
  CHECK(spark.headroom == Bytes::gib(28));
  CHECK(spark.safety_margin == Bytes::gib(2));
  CHECK(spark.budget().count() == 127'600'748LL * 1024 - 30LL * 1073741824);
  const auto h100 = profile_budget(gpu("h100-sxm"), Bytes::zero());
  CHECK(h100.headroom == Bytes::zero());
  // The usable memory CUDA reports (docs/gpus.md#usable), not nvidia-smi's 81559 MiB.
  CHECK(h100.budget() == Bytes::of(85'017'493'504));
  CHECK(gpu("h100-sxm").memory == Bytes::mib(81559));
  CHECK(gpu("rtx-4090").capacity() == Bytes::gib(23.65));
  CHECK(gpu("a100-80gb").capacity() == Bytes::mib(81920));  // none recorded: memory
}

TEST_CASE("profile files: usable memory is at most the memory") {
  CHECK(error_of(one_profile("usable", "    usable: 17GiB")) ==
        "test.yaml:7: usable memory of GPU profile 'foo' (17.00 GiB) must be at most its memory (16.00 GiB)");
}

TEST_CASE("profile files: errors carry file:line and the bad value") {
  REQUIRE(parse_gpu_profiles(one_profile(), "test.yaml").has_value());
  CHECK(error_of(one_profile("bf16", "    bf61: true")) ==
        "test.yaml:6: unknown key 'bf61' in GPU profile 'foo'; did you mean 'bf16'?");
  CHECK(error_of(one_profile("memory", "")) == "test.yaml:2: GPU profile 'foo' has no 'memory'");
  CHECK(error_of(one_profile("bf16", "")) == "test.yaml:2: GPU profile 'foo' has no 'bf16'");
  CHECK(error_of(one_profile("memory", "    memory: 80XB")) ==
        "test.yaml:5: 'memory' of GPU profile 'foo': invalid size unit in \"80XB\"; use B, KB, MB, GB, TB (decimal) "
        "or KiB, MiB, GiB, TiB (binary)");
  CHECK(error_of(one_profile("memory", "    memory: 81920")) ==
        "test.yaml:5: memory of GPU profile 'foo' is 80.0 KiB, too small for a GPU; write the unit, e.g. 81920MiB");
  CHECK(error_of(one_profile("memory", "    memory: 1023MiB")) ==
        "test.yaml:5: memory of GPU profile 'foo' is 1023.0 MiB, too small for a GPU; write the unit, e.g. 81920MiB");
  CHECK(parse_gpu_profiles(one_profile("memory", "    memory: 1GiB"), "test.yaml").has_value());
  CHECK(error_of(one_profile("vendor", "    vendor: nvdia")) ==
        "test.yaml:4: unknown vendor 'nvdia' in GPU profile 'foo'; did you mean 'nvidia'?");
  CHECK(error_of(one_profile("bf16", "    bf16: maybe")) ==
        "test.yaml:6: 'bf16' of GPU profile 'foo' must be true or false, got 'maybe'");
  CHECK(error_of(one_profile("name", "  - name: Foo")) ==
        "test.yaml:2: GPU name 'Foo' must be lower-case letters, digits, '-' and '.'");
  CHECK(error_of(one_profile("aliases", "    aliases: foo-gpu")) == "test.yaml:7: 'aliases' of GPU profile 'foo' must be a list");
  CHECK(error_of(one_profile("system_reserve", "    system_reserve: 4GiB")) ==
        "test.yaml:7: GPU profile 'foo' has a system_reserve but is not unified; system_reserve applies only to GPUs "
        "that share memory with the OS (unified: true)");
  CHECK(error_of(one_profile("system_reserve", "    unified: true\n    system_reserve: 16GiB")) ==
        "test.yaml:8: system_reserve of GPU profile 'foo' (16.00 GiB) leaves nothing of its memory (16.00 GiB)");
  auto unified = parse_gpu_profiles(one_profile("unified", "    unified: true"), "test.yaml");
  REQUIRE(unified.has_value());
  CHECK(unified->front().system_reserve == Bytes::gib(4));  // the default's floor
}

TEST_CASE("profile files: structure and name clashes") {
  CHECK(error_of("gpus: [\n  {name: foo\n") ==
        "test.yaml:3: invalid YAML: end of map flow not found");
  CHECK(parse_gpu_profiles("gpus: [\n  {name: foo\n", "test.yaml").error().code == ErrorCode::kParseError);
  CHECK(error_of("gpu:\n  - name: foo\n") == "test.yaml:1: expected a top-level 'gpus:' list");
  CHECK(error_of("gpus: []\n") == "test.yaml:1: 'gpus' must be a non-empty list of profiles");
  CHECK(error_of(one_profile() + "extra: 1\n") == "test.yaml:7: unknown top-level key 'extra'; the file holds one key, 'gpus'");
  CHECK(error_of("gpus:\n  - just-a-name\n") == "test.yaml:2: GPU profile #1 must be a mapping of name, memory, ...");

  const std::string second =
      "  - name: bar\n"                // 7
      "    display_name: Bar GPU\n"
      "    aliases: [Foo]\n"
      "    vendor: amd\n"
      "    memory: 32GiB\n"
      "    bf16: true\n";
  CHECK(error_of(one_profile() + second) ==
        "test.yaml:7: GPU profile 'bar' answers to 'foo', as does 'foo' (line 2); a name may be shared only by "
        "profiles with the same display_name");
  const std::string twin =
      "  - name: foo-32\n"             // 7
      "    display_name: Foo GPU\n"
      "    aliases: [foo-family]\n"
      "    vendor: nvidia\n"
      "    memory: 32GiB\n"
      "    bf16: true\n";
  auto family = parse_gpu_profiles(one_profile("aliases", "    aliases: [foo-family]") + twin, "test.yaml");
  REQUIRE(family.has_value());  // same display_name: the driver cannot tell them apart either
  CHECK(match_detected_gpu(*family, "Foo GPU", Bytes::gib(30))->name == "foo-32");
  const std::string duplicate =
      "  - name: foo\n"                // 7
      "    display_name: Foo GPU\n"
      "    vendor: nvidia\n"
      "    memory: 32GiB\n"
      "    bf16: true\n";
  CHECK(error_of(one_profile() + duplicate) ==
        "test.yaml:7: GPU profile 'foo' answers to 'foo', as does 'foo' (line 2); a name may be shared only by "
        "profiles with the same display_name");
}

// Tests src/cli/cmd_gpus.cpp through the whole CLI. Figures are the recorded driver outputs of
// tests/data/detect converted by hand: 81920 MiB = 80.00 GiB = 85.90 GB, 81559 MiB = 79.65 GiB.
#include <algorithm>
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cli/exit_codes.hpp"
#include "cli_harness.hpp"
#include "io/gpu/gpu_profiles.hpp"

using namespace memplan::testing;
using Cells = std::vector<std::string>;

TEST_CASE("memplan gpus lists every profile with GiB, GB, bf16, unified and names") {
  const auto r = run_cli({"gpus"});
  REQUIRE(r.code == memplan::cli::kExitOk);
  CHECK(r.err.empty());
  CHECK(r.out.rfind("name ", 0) == 0);
  CHECK(cells(r.out.substr(0, r.out.find('\n'))) == Cells{"name", "GiB", "GB", "bf16", "unified", "driver name"});
  // Fits 100 columns (issue 10).
  std::size_t widest = 0;
  for (std::size_t at = 0, nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1)
    widest = std::max(widest, nl - at);
  CHECK(widest <= 100);
  CHECK(row(r.out, "a100-80gb") ==
        Cells{"a100-80gb", "80.00", "85.90", "yes", "no", "NVIDIA A100-SXM4-80GB"});
  CHECK(row(r.out, "h100-sxm") ==
        Cells{"h100-sxm", "79.65", "85.52", "yes", "no", "NVIDIA H100 80GB HBM3"});
  CHECK(row(r.out, "t4") == Cells{"t4", "15.00", "16.11", "no", "no", "Tesla T4"});
  CHECK(row(r.out, "dgx-spark-gb10") == Cells{"dgx-spark-gb10", "121.69", "130.66", "yes", "yes, OS 28.00 GiB",
                                              "NVIDIA GB10"});
  CHECK(row(r.out, "mi300x") ==
        Cells{"mi300x", "191.98", "206.14", "yes", "no", "AMD Instinct MI300X"});
  const auto n = memplan::io::load_gpu_profiles()->size();
  CHECK(r.out.find(std::to_string(n) + " GPU profiles. Memory as the driver reports it; GiB = 2^30 bytes, GB = 10^9 "
                                       "bytes.\n--gpu accepts any name above, the driver's name or an alias (--format markdown lists "
                                       "them),\nignoring case, spaces and '-'; --gpu-memory SIZE any other GPU.\n") != std::string::npos);
}

TEST_CASE("memplan gpus --format json and markdown") {
  const auto r = run_cli({"gpus", "--format", "json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["schema"] == "memplan/1");
  CHECK(j["gpus"].size() == memplan::io::load_gpu_profiles()->size());
  bool seen_a100 = false, seen_spark = false;
  for (const auto& g : j["gpus"]) {
    if (g["name"] == "a100-80gb") {
      seen_a100 = true;
      CHECK(g["memory_bytes"] == 85'899'345'920LL);
      CHECK(g["bf16"] == true);
      CHECK(g["unified"] == false);
      CHECK(g["system_reserve_bytes"] == 0);
      CHECK(g["display_name"] == "NVIDIA A100-SXM4-80GB");
      CHECK(g["vendor"] == "nvidia");
    }
    if (g["name"] == "dgx-spark-gb10") {
      seen_spark = true;
      CHECK(g["memory_bytes"] == 127'600'748LL * 1024);
      CHECK(g["system_reserve_bytes"] == 28LL * 1073741824);
    }
  }
  CHECK(seen_a100);
  CHECK(seen_spark);

  const auto md = run_cli({"gpus", "--format", "markdown"});
  REQUIRE(md.code == 0);
  CHECK(md.out.rfind("| name | GiB | GB | bf16 | unified | driver name, aliases |\n|---|---:|---:|---|---|---|\n"
                     "| v100-16gb | 16.00 | 17.18 | no | no | Tesla V100-SXM2-16GB, v100, v100-sxm2-16gb, "
                     "Tesla V100-PCIE-16GB, v100-pcie-16gb |\n",
                     0) == 0);

  const auto bad = run_cli({"gpus", "--format", "yaml"});
  CHECK(bad.code == memplan::cli::kExitInvalidInput);
  CHECK(bad.err == "memplan: error: unknown format 'yaml'\n");
}

TEST_CASE("memplan gpus --detect shows each visible GPU and the one a run is limited by") {
  StandInMachine machine("nvidia-smi-mixed.csv");
  const auto r = run_cli({"gpus", "--detect"});
  REQUIRE(r.code == 0);
  CHECK(r.out ==
        "GPU  name                   profile    total GiB  free GiB  bf16  memory     source\n"
        "---------------------------------------------------------------------------------------\n"
        "  0  NVIDIA L40S            l40s           44.99     35.49  yes   dedicated  nvidia-smi\n"
        "  1  NVIDIA H100 80GB HBM3  h100-sxm       79.65     42.90  yes   dedicated  nvidia-smi\n"
        "  2  Tesla V100-SXM2-16GB   v100-16gb      15.78     15.30  no    dedicated  nvidia-smi\n"
        "  3  Tesla T4               t4             15.00      1.91  no    dedicated  nvidia-smi\n"
        "A run here is limited by GPU 3 (Tesla T4): 1.91 GiB (2.05 GB) free of 15.00 GiB.\n"
        "note: NVML skipped: MEMPLAN_NVIDIA_SMI=" +
            detect_data("fake-nvidia-smi") + "\n");

  ScopedEnv mask("CUDA_VISIBLE_DEVICES", "1");
  const auto one = run_cli({"gpus", "--detect", "--format", "json"});
  REQUIRE(one.code == 0);
  const auto j = nlohmann::json::parse(one.out);
  REQUIRE(j["gpus"].size() == 1);
  CHECK(j["chosen"] == 1);
  CHECK(j["visibility"] == "CUDA_VISIBLE_DEVICES=1");
  CHECK(j["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3");
  CHECK(j["gpus"][0]["profile"] == "h100-sxm");
  CHECK(j["gpus"][0]["total_bytes"] == 81559LL * 1048576);
  CHECK(j["gpus"][0]["free_bytes"] == 43925LL * 1048576);
  CHECK(j["gpus"][0]["uuid"] == "GPU-a3f4e0c1-2b9d-7e68-44c2-9b1e3d0f6a27");
}

TEST_CASE("memplan gpus --detect on a DGX Spark reads /proc/meminfo") {
  StandInMachine machine("nvidia-smi-gb10.csv", "", "proc-meminfo-gb10.txt");
  const auto r = run_cli({"gpus", "--detect"});
  REQUIRE(r.code == 0);
  // 127600748 kB = 121.69 GiB; MemAvailable 118566368 kB = 113.07 GiB = 121.41 GB.
  CHECK(row(r.out, "0") == Cells{"0", "NVIDIA GB10", "dgx-spark-gb10", "121.69", "113.07", "yes", "unified",
                                 "nvidia-smi + " + detect_data("proc-meminfo-gb10.txt")});
  CHECK(r.out.find("A run here is limited by GPU 0 (NVIDIA GB10): 113.07 GiB (121.41 GB) free of 121.69 GiB.\n") !=
        std::string::npos);
}

TEST_CASE("memplan gpus --detect with no GPU exits 4 and names --gpu and --gpu-memory") {
  StandInMachine machine(std::nullopt);
  const auto r = run_cli({"gpus", "--detect"});
  CHECK(r.code == memplan::cli::kExitNoGpu);
  CHECK(r.out.empty());
  CHECK(r.err ==
        "memplan: error: no GPU found (NVML skipped: MEMPLAN_NVIDIA_SMI=/nonexistent/nvidia-smi; "
        "/nonexistent/nvidia-smi: not found; /nonexistent/rocm-smi: not found); give --gpu NAME (memplan gpus lists "
        "them) or --gpu-memory SIZE\n");
}

// Tests src/cli/cmd_preflight.cpp through the whole CLI, against recorded driver outputs
// (tests/data/detect). The busy T4 has 1952 MiB free = 1.91 GiB = 2.05 GB; the DGX Spark whose
// driver pool still holds ~80 GiB has MemAvailable 40174336 kB = 38.31 GiB = 41.14 GB.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cli/exit_codes.hpp"
#include "cli_harness.hpp"

using namespace memplan::testing;
using Cells = std::vector<std::string>;

TEST_CASE("preflight fails when a visible GPU has less free than asked, and lists who holds memory") {
  StandInMachine machine("nvidia-smi-mixed.csv", "nvidia-smi-mixed-apps.csv");
  const auto r = run_cli({"preflight", "--min-free", "10GB"});
  CHECK(r.code == memplan::cli::kExitDoesNotFit);
  CHECK(r.err.empty());
  CHECK(r.out ==
        "GPU  name                       total       free  free (GB)  status\n"
        "-----------------------------------------------------------------------\n"
        "  0  NVIDIA L40S            44.99 GiB  35.49 GiB   38.11 GB  ok\n"
        "  1  NVIDIA H100 80GB HBM3  79.65 GiB  42.90 GiB   46.06 GB  ok\n"
        "  2  Tesla V100-SXM2-16GB   15.78 GiB  15.30 GiB   16.43 GB  ok\n"
        "  3  Tesla T4               15.00 GiB   1.91 GiB    2.05 GB  NOT ENOUGH\n"
        "\n"
        "Processes holding GPU memory:\n"
        "GPU    pid  process                                                         memory\n"
        "----------------------------------------------------------------------------------\n"
        "  0  44378  tritonserver                                                  1836 MiB\n"
        "  0  44966  /opt/tritonserver/backends/python/triton_python_backend_stub   974 MiB\n"
        "  0  52114  /usr/bin/python3                                              6294 MiB\n"
        "note: NVML skipped: MEMPLAN_NVIDIA_SMI=" +
            detect_data("fake-nvidia-smi") +
            "\n"
            "\n"
            "preflight failed: GPU 3 (Tesla T4) has 2.05 GB (1.91 GiB) free; 10.00 GB (9.31 GiB) asked.\n");
}

TEST_CASE("preflight passes when every visible GPU has enough free") {
  StandInMachine machine("nvidia-smi-mixed.csv", "nvidia-smi-mixed-apps.csv");
  ScopedEnv mask("CUDA_VISIBLE_DEVICES", "0,1");
  const auto r = run_cli({"preflight", "--min-free", "30GiB"});
  CHECK(r.code == memplan::cli::kExitOk);
  CHECK(r.out.find("Visible: CUDA_VISIBLE_DEVICES=0,1\n") != std::string::npos);
  CHECK(r.out.find("Tesla T4") == std::string::npos);
  // 30 GiB = 32.21 GB.
  CHECK(r.out.find("\npreflight ok: every visible GPU has at least 32.21 GB (30.00 GiB) free.\n") != std::string::npos);
}

TEST_CASE("preflight boundaries: exactly the free memory passes, one MiB more fails") {
  StandInMachine machine("nvidia-smi-mixed.csv");
  ScopedEnv mask("CUDA_VISIBLE_DEVICES", "3");
  CHECK(run_cli({"preflight", "--min-free", "1952MiB"}).code == memplan::cli::kExitOk);
  const auto over = run_cli({"preflight", "--min-free", "1953MiB"});
  CHECK(over.code == memplan::cli::kExitDoesNotFit);
  CHECK(over.out.find("preflight failed: GPU 3 (Tesla T4) has 2.05 GB (1.91 GiB) free; 2.05 GB (1.91 GiB) asked.\n") !=
        std::string::npos);
  CHECK(run_cli({"preflight", "--min-free", "0GB"}).code == memplan::cli::kExitOk);
  CHECK(over.out.find("No processes hold GPU memory.\n") != std::string::npos);
}

TEST_CASE("preflight without --min-free only reports") {
  StandInMachine machine("nvidia-smi-h100x2.csv");
  const auto r = run_cli({"preflight"});
  CHECK(r.code == memplan::cli::kExitOk);
  CHECK(row(r.out, "1") == Cells{"1", "NVIDIA H100 80GB HBM3", "79.65 GiB", "42.90 GiB", "46.06 GB", "-"});
  CHECK(r.out.find("preflight") == std::string::npos);
}

TEST_CASE("preflight on a DGX Spark: seed 000's `preflight 80`") {
  SECTION("the driver pool still holds 80 GiB: not enough") {
    StandInMachine machine("nvidia-smi-gb10.csv", "nvidia-smi-gb10-apps.csv", "proc-meminfo-gb10-busy.txt");
    const auto r = run_cli({"preflight", "--min-free", "80GB"});
    CHECK(r.code == memplan::cli::kExitDoesNotFit);
    CHECK(row(r.out, "0") == Cells{"0", "NVIDIA GB10", "121.69 GiB", "38.31 GiB", "41.14 GB", "NOT ENOUGH"});
    CHECK(r.out.find("GPU 0 shares its memory with the OS: total and free are the system's (nvidia-smi + " +
                     detect_data("proc-meminfo-gb10-busy.txt") + ").\n") != std::string::npos);
    CHECK(r.out.find("  0  114687  /usr/local/bin/python  19135 MiB\n") != std::string::npos);
    CHECK(r.out.find("preflight failed: GPU 0 (NVIDIA GB10) has 41.14 GB (38.31 GiB) free; 80.00 GB (74.51 GiB) "
                     "asked.\n") != std::string::npos);
  }
  SECTION("idle: 121.41 GB available") {
    StandInMachine machine("nvidia-smi-gb10.csv", "", "proc-meminfo-gb10.txt");
    CHECK(run_cli({"preflight", "--min-free", "80GB"}).code == memplan::cli::kExitOk);
  }
}

TEST_CASE("preflight --format json") {
  StandInMachine machine("nvidia-smi-mixed.csv", "nvidia-smi-mixed-apps.csv");
  const auto r = run_cli({"preflight", "--min-free", "10GB", "--format", "json"});
  CHECK(r.code == memplan::cli::kExitDoesNotFit);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["schema"] == "memplan/1");
  CHECK(j["ok"] == false);
  CHECK(j["min_free_bytes"] == 10'000'000'000LL);
  REQUIRE(j["gpus"].size() == 4);
  CHECK(j["gpus"][0]["enough"] == true);
  CHECK(j["gpus"][3]["enough"] == false);
  CHECK(j["gpus"][3]["profile"] == "t4");
  CHECK(j["gpus"][3]["free_bytes"] == 1952LL * 1048576);
  REQUIRE(j["gpus"][0]["processes"].size() == 3);
  CHECK(j["gpus"][0]["processes"][0] == nlohmann::json{{"pid", 44378}, {"name", "tritonserver"}, {"used_bytes", 1836LL * 1048576}});
  CHECK(j["gpus"][3]["processes"].empty());
}

TEST_CASE("preflight errors: a size without a unit, a bad size, no GPU") {
  StandInMachine machine("nvidia-smi-mixed.csv");
  const auto bare = run_cli({"preflight", "--min-free", "80"});
  CHECK(bare.code == memplan::cli::kExitInvalidInput);
  CHECK(bare.out.empty());
  CHECK(bare.err == "memplan: error: --min-free needs a unit: \"80\"; write --min-free 80GB or --min-free 80GiB\n");
  const auto unit = run_cli({"preflight", "--min-free", "80XB"});
  CHECK(unit.code == memplan::cli::kExitInvalidInput);
  CHECK(unit.err == "memplan: error: invalid size unit in \"80XB\"; use B, KB, MB, GB, TB (decimal) or KiB, MiB, GiB, "
                    "TiB (binary)\n");

  StandInMachine none(std::nullopt);
  const auto r = run_cli({"preflight", "--min-free", "80GB", "--format", "json"});
  CHECK(r.code == memplan::cli::kExitNoGpu);
  // --format json: the error as a JSON object on stdout too (issue 34).
  CHECK(nlohmann::json::parse(r.out)["exit_code"] == memplan::cli::kExitNoGpu);
  CHECK(nlohmann::json::parse(r.out)["error"]["message"].get<std::string>().rfind("no GPU found (", 0) == 0);
  CHECK(r.err.rfind("memplan: error: no GPU found (", 0) == 0);
  // preflight takes no --gpu: its advice points to plan, which does (issue 10)
  CHECK(r.err.find("; preflight checks the GPUs of this machine; to plan for another GPU run memplan plan --gpu NAME "
                   "(memplan gpus lists them) or --gpu-memory SIZE\n") != std::string::npos);
}

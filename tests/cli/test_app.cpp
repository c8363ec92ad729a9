// Tests src/cli/app.cpp: dispatch, help, version, and what a mistyped command gets.
#include <catch2/catch.hpp>

#include "cli/exit_codes.hpp"
#include "cli_harness.hpp"

using namespace memplan::testing;

TEST_CASE("memplan --help lists every command; a command's --help is its own") {
  const auto r = run_cli({"--help"});
  CHECK(r.code == memplan::cli::kExitOk);
  for (const char* c : {"estimate", "plan", "sweep", "check", "models", "gpus", "preflight", "auto"})
    CHECK_THAT(r.out, Catch::Contains(std::string("\n  ") + c + " "));
  CHECK_THAT(r.out, Catch::Contains("Run `memplan --auto`"));
  const auto plan = run_cli({"plan", "--help"});
  CHECK(plan.code == memplan::cli::kExitOk);
  CHECK(plan.out.rfind("The largest micro-batch that fits the GPU", 0) == 0);
  CHECK_THAT(plan.out, Catch::Contains("Usage: memplan plan [OPTIONS]"));
  CHECK_THAT(plan.out, Catch::Contains("--gpu TEXT"));
}

TEST_CASE("memplan --version") {
  const auto r = run_cli({"--version"});
  CHECK(r.code == memplan::cli::kExitOk);
  CHECK(r.out == "memplan 0.1.0\n");
}

TEST_CASE("a mistyped command gets the nearest one; an unknown flag is named") {
  const auto r = run_cli({"plam", "--model-params", "1B"});
  CHECK(r.code >= 100);
  CHECK(r.out.empty());
  CHECK(r.err == "memplan: error: unknown command 'plam'; did you mean 'plan'?\nRun with --help for more information.\n");
  const auto far = run_cli({"frobnicate"});
  CHECK(far.err ==
        "memplan: error: unknown command 'frobnicate'; the commands are estimate, plan, sweep, check, models, gpus, "
        "preflight, auto, profile, calibrate\nRun with --help for more information.\n");
  const auto flag = run_cli({"plan", "--gpu-memroy", "80GB"});
  CHECK(flag.code >= 100);
  CHECK_THAT(flag.err, Catch::Contains("--gpu-memroy"));
}

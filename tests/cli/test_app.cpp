// Tests src/cli/app.cpp: dispatch, help, version, and what a mistyped command gets.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/exit_codes.hpp"
#include "cli_harness.hpp"

using namespace memplan::testing;
using json = nlohmann::json;

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

TEST_CASE("memplan --version names the commit, the data compiled in and the libraries modeled") {
  const auto r = run_cli({"--version"});
  CHECK(r.code == memplan::cli::kExitOk);
  CHECK(r.out.rfind("memplan 0.1.0 (commit ", 0) == 0);
  // 153 catalog files under configs/models and 39 "- name:" entries in configs/gpus.yaml, the
  // counts README.md states; memplan models / gpus list the same.
  CHECK_THAT(r.out, Catch::Contains("\nmodel catalog: 153 models (configs/models, fnv1a "));
  CHECK_THAT(r.out, Catch::Contains("\nGPU profiles: 39 GPUs (configs/gpus.yaml, fnv1a "));
  // The releases of src/core/stack.cpp's table, oldest to newest.
  CHECK_THAT(r.out, Catch::Contains("\nmodels: torch 1.13.0-2.13.0, transformers 4.36.0-5.17.0, peft 0.6.0-0.21.0, trl "
                                    "0.8.0-1.9.0, "));
}

TEST_CASE("a mistyped command gets the nearest one; an unknown flag is named") {
  const auto r = run_cli({"plam", "--model-params", "1B"});
  CHECK(r.code == memplan::cli::kExitInvalidInput);
  CHECK(r.out.empty());
  CHECK(r.err == "memplan: error: unknown command 'plam'; did you mean 'plan'?\nRun with --help for more information.\n");
  const auto far = run_cli({"frobnicate"});
  CHECK(far.err ==
        "memplan: error: unknown command 'frobnicate'; the commands are estimate, plan, sweep, check, models, gpus, "
        "preflight, auto, profile, calibrate, completion, man, mcp\nRun with --help for more information.\n");
  const auto flag = run_cli({"plan", "--gpu-memroy", "80GB"});
  CHECK(flag.code == memplan::cli::kExitInvalidInput);
  CHECK(flag.err == "memplan: error: unknown flag '--gpu-memroy' for memplan plan; did you mean '--gpu-memory'?\n"
                    "Run with --help for more information.\n");
}

TEST_CASE("the original memory calculator's flags and HF-style underscores (issue 32, seed 004)") {
  // seed 004: python utils/memory_calculator.py --model_size_gb 14 --gpu_memory_gb 80 --num_gpus 4 --optimizer adamw
  const auto calc = run_cli({"--model_size_gb", "14", "--gpu_memory_gb", "80", "--num_gpus", "4", "--optimizer", "adamw"});
  CHECK(calc.code == memplan::cli::kExitInvalidInput);
  CHECK(calc.err ==
        "memplan: error: unknown flag '--model-size-gb'; use --model ID|PATH, or --model-params N (a parameter count "
        "such as 7B)\nmemplan takes a command first: memplan estimate|plan|check|... FLAGS (memplan --help)\n");
  const auto opt = run_cli({"plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--optimizer", "adamw"});
  CHECK(opt.code == memplan::cli::kExitInvalidInput);
  CHECK(opt.err == "memplan: error: unknown flag '--optimizer' for memplan plan; use --optim adamw_torch (Hugging "
                   "Face's optim names)\nRun with --help for more information.\n");
  // memplan's own flags with underscores, as HF's argument parser spells them, are the same flags.
  const auto under = run_cli({"estimate", "--model", "llama-3.2-1b", "--per_device_train_batch_size", "4", "--num_gpus=2",
                              "--format", "json"});
  CHECK(under.code == memplan::cli::kExitOk);
  const json j = json::parse(under.out);
  CHECK(j["inputs"]["training"]["micro_batch"] == 4);
  CHECK(j["inputs"]["sources"]["batch"] == "flag --batch");
  CHECK(j["inputs"]["sources"]["num_gpus"] == "flag --num-gpus");
}

TEST_CASE("estimate --gpu also says whether the estimate fits, as plan and check compare it") {
  // Llama-3.1-8B full fine-tuning: 8.03B x 16 bytes of weights, gradients and AdamW states alone
  // are 120 GiB, over any single GPU's budget.
  const CliRun no = run_cli({"estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--format", "json"});
  CHECK(no.code == memplan::cli::kExitDoesNotFit);
  const json j = json::parse(no.out);
  CHECK(j["fit"]["fits"] == false);
  CHECK(j["fit"]["peak_bytes"] == j["estimate"]["peak_bytes"]);
  const std::int64_t budget = j["fit"]["budget_bytes"];
  CHECK(budget == j["fit"]["capacity_bytes"].get<std::int64_t>() - j["fit"]["safety_margin_bytes"].get<std::int64_t>() -
                      j["fit"]["headroom_bytes"].get<std::int64_t>());
  // plan compares the same figure with the same budget.
  const CliRun plan = run_cli({"plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--batch", "1", "--format", "json"});
  CHECK(plan.out.find(fmt::format("\"budget_bytes\": {}", budget)) != std::string::npos);

  // LoRA on a 1B model at --gpu-memory 24: fits, and the line says by how much.
  const CliRun yes = run_cli({"estimate", "--model", "llama-3.2-1b", "--use-peft", "--bf16", "--gpu-memory", "24"});
  CHECK(yes.code == memplan::cli::kExitOk);
  // A bare 24 is a 24 GB card as nvidia-smi shows it: 24564 MiB (the RTX 4090's memory.total in
  // configs/gpus.yaml) = 23.99 GiB.
  CHECK(yes.out.find("on 23.99 GiB of GPU memory (--gpu-memory 24 read as a 24 GB card: 24564 MiB, as nvidia-smi "
                     "shows ") != std::string::npos);
  // Without a GPU, estimate is the breakdown alone.
  const CliRun plain = run_cli({"estimate", "--model", "llama-3.2-1b", "--format", "json"});
  CHECK(json::parse(plain.out).count("fit") == 0);
}

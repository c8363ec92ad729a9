// Tests src/cli/tools.cpp: named arguments to the command line, the schemas walked from CLI11, and
// that a tool answers with exactly what `--format json` prints.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cli/exit_codes.hpp"
#include "cli/tools.hpp"
#include "cli_harness.hpp"

using namespace memplan::testing;
using memplan::cli::call_tool;
using memplan::cli::tool_argv;
using memplan::cli::tool_input_schema;
using json = nlohmann::json;

namespace {
const std::string kSftLora = std::string(MEMPLAN_SOURCE_DIR) + "/configs/examples/hf-trl-sft-lora.yaml";
}

TEST_CASE("tool_argv spells each argument as the flag it names") {
  const auto argv = tool_argv("plan", json{{"config", "a.yaml"},
                                          {"gpu", "h100-sxm"},
                                          {"seq_len", 4096},
                                          {"bf16", true},
                                          {"gradient_checkpointing", false},
                                          {"safety-margin", "2GiB"},
                                          {"lora_r", 16.0},
                                          {"headroom", nullptr}});
  REQUIRE(argv);
  // nlohmann::json keeps object keys sorted; false flags and nulls are left out.
  CHECK(*argv == std::vector<std::string>{"plan", "--bf16", "--config", "a.yaml", "--gpu", "h100-sxm", "--lora-r",
                                          "16", "--safety-margin", "2GiB", "--seq-len", "4096", "--format", "json"});
  const auto layered = tool_argv("check", json{{"config", json::array({"base.yaml", "stage.yaml"})},
                                               {"files", json::array({"a.yaml", "b.yaml"})}});
  REQUIRE(layered);
  CHECK(*layered == std::vector<std::string>{"check", "--config", "base.yaml", "--config", "stage.yaml", "--format",
                                             "json", "--", "a.yaml", "b.yaml"});
  CHECK(*tool_argv("gpus", json::object()) == std::vector<std::string>{"gpus", "--format", "json"});
}

TEST_CASE("tool_argv names what it cannot use") {
  CHECK(tool_argv("plan", json{{"gpuu", "a"}}).error().to_string() == "plan: unknown argument 'gpuu'; did you mean 'gpu'?");
  CHECK(tool_argv("plan", json{{"bf16", "yes"}}).error().to_string() ==
        "plan: 'bf16' is a flag: expected true or false, got \"yes\"");
  CHECK(tool_argv("plan", json{{"gpu", json::array({"a", "b"})}}).error().to_string() ==
        "plan: 'gpu' takes one value, got a list");
  CHECK(tool_argv("plan", json{{"gpu", json::object()}}).error().to_string() ==
        "plan: 'gpu' expects a string or a number, got {}");
  CHECK(tool_argv("plan", json::array()).error().to_string() == "the arguments must be a JSON object");
  // Tools never write files: --apply and --format are not arguments.
  CHECK(tool_argv("plan", json{{"apply", true}}).error().message == "plan: unknown argument 'apply'");
  CHECK(tool_argv("sweep", json::object()).error().to_string() == "unknown tool 'sweep'");
}

TEST_CASE("tool_input_schema types each property from its CLI11 option") {
  const json s = tool_input_schema("check");
  CHECK(s["type"] == "object");
  CHECK(s["additionalProperties"] == false);
  CHECK(s["required"] == json::array({"files"}));
  const json& p = s["properties"];
  CHECK(p["batch"]["type"] == "integer");
  CHECK(p["batch"]["description"] == "Per-device micro-batch (sequences)");
  CHECK(p["bf16"]["type"] == "boolean");
  CHECK(p["max_utilization"]["type"] == "number");
  CHECK(p["gpu"]["type"] == json::array({"string", "number"}));
  CHECK(p["files"]["type"] == "array");
  CHECK(p["config"]["anyOf"].size() == 2);
  CHECK_FALSE(p.contains("format"));
  CHECK_FALSE(p.contains("help"));
  CHECK_FALSE(tool_input_schema("plan")["properties"].contains("apply"));
  CHECK_FALSE(tool_input_schema("plan")["properties"].contains("dry_run"));
  CHECK(tool_input_schema("models")["properties"].contains("filter"));
}

TEST_CASE("call_tool answers with the JSON the CLI prints, and the Error it ended with") {
  const auto cli = run_cli({"plan", "--config", kSftLora, "--gpu", "h100-sxm", "--format", "json"});
  const auto tool = call_tool("plan", json{{"config", kSftLora}, {"gpu", "h100-sxm"}});
  REQUIRE(tool);
  CHECK(tool->exit_code == cli.code);
  CHECK(tool->out == cli.out);
  CHECK_FALSE(tool->error);
  const auto missing = call_tool("estimate", json{{"config", "/nonexistent/train.yaml"}});
  REQUIRE(missing);
  CHECK(missing->exit_code == memplan::cli::kExitIoError);
  REQUIRE(missing->error);
  CHECK(missing->error->where->file == "/nonexistent/train.yaml");
  CHECK(missing->err == "memplan: error: " + missing->error->to_string() + "\n");
}

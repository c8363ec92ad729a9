// memplan's commands as tools: named arguments (a JSON object: {"config": "train.yaml",
// "gpu": "h100-sxm", "seq_len": 4096}) turned into the command line the CLI parses, run in
// process, answered with the JSON `--format json` prints. The MCP server (mcp.cpp) and the Python
// package (python/) both call this, so a flag added to a command reaches both.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "memplan/result.hpp"

namespace memplan::cli {

// The commands offered as tools: estimate, plan, check, models, gpus.
const std::vector<std::string>& tool_commands();
std::string tool_description(const std::string& command);

// A JSON Schema (draft 2020-12 subset) for a command's arguments, walked from its CLI11 options:
// each long flag is a property named with underscores (seq_len for --seq-len), flags are
// booleans, INT options integers, repeatable ones arrays; positionals (check's files) too.
// --format (always json), --apply and --dry-run (tools never write files) and --help are left out.
nlohmann::json tool_input_schema(const std::string& command);

// The command line for `command` with `arguments`; an unknown name or a value of the wrong
// JSON type is an error naming it.
// `format` is "json" unless a caller wants the text the CLI prints (the Python package's str()).
Result<std::vector<std::string>> tool_argv(const std::string& command, const nlohmann::json& arguments,
                                           const std::string& format = "json");

struct ToolRun {
  int exit_code = 0;
  std::string out, err;        // what the CLI printed (out: the JSON document)
  std::optional<Error> error;  // the Error the CLI reported, when it ended with one
};

// Runs `memplan COMMAND ... --format json` (or `format`) in process.
Result<ToolRun> call_tool(const std::string& command, const nlohmann::json& arguments,
                          const std::string& format = "json");

}  // namespace memplan::cli

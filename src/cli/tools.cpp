#include "cli/tools.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/app.hpp"
#include "cli/cli_docs.hpp"
#include "cli/commands.hpp"
#include "memplan/text.hpp"

namespace memplan::cli {

namespace {

using json = nlohmann::json;

bool left_out(const OptionDoc& o) {
  for (const auto& l : o.long_names)
    if (l == "format" || l == "apply" || l == "dry-run" || l == "help") return true;
  return false;
}

std::string property_name(const OptionDoc& o) {
  std::string n = o.positional.empty() ? o.long_names.front() : o.positional;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

// The command's options, from a throwaway App holding only that command.
std::vector<OptionDoc> command_options(const std::string& command) {
  using Register = Command (*)(CLI::App&);
  static const std::map<std::string, Register> kRegister = {{"estimate", register_estimate},
                                                            {"plan", register_plan},
                                                            {"check", register_check},
                                                            {"models", register_models},
                                                            {"gpus", register_gpus}};
  const auto it = kRegister.find(command);
  if (it == kRegister.end()) return {};
  CLI::App scratch;
  Command c = it->second(scratch);
  std::vector<OptionDoc> out;
  for (auto& o : describe_options(*c.app))
    if (!left_out(o) && (!o.long_names.empty() || !o.positional.empty())) out.push_back(std::move(o));
  return out;
}

json value_schema(const OptionDoc& o) {
  if (!o.takes_value) return {{"type", "boolean"}};
  if (o.type_name == "INT" || o.type_name == "UINT") return {{"type", "integer"}};
  if (o.type_name == "FLOAT") return {{"type", "number"}};
  // Sizes ("80GB") and counts ("7B") are text; a plain number is accepted as well.
  return {{"type", json::array({"string", "number"})}};
}

// A scalar as the command line spells it; integers without a decimal point.
std::optional<std::string> scalar_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d == static_cast<double>(static_cast<long long>(d))) return std::to_string(static_cast<long long>(d));
    return v.dump();
  }
  return std::nullopt;
}

}  // namespace

const std::vector<std::string>& tool_commands() {
  static const std::vector<std::string> kCommands = {"estimate", "plan", "check", "models", "gpus"};
  return kCommands;
}

std::string tool_description(const std::string& command) {
  if (command == "estimate")
    return "Predict the peak GPU memory of one training step (memplan estimate): the breakdown by component and "
           "phase; with gpu or gpu_memory, whether it fits. Give a training config path (config) or model and flags.";
  if (command == "plan")
    return "The largest micro-batch that fits the GPU (memplan plan), the grad-accum that keeps the global batch, "
           "safe/balanced/aggressive tiers, and what to change (flags and config keys) when nothing fits.";
  if (command == "check")
    return "Does each training config fit (memplan check)? One result per file, with file:line of the batch size "
           "when it does not.";
  if (command == "models") return "The built-in model catalog (memplan models): names --model accepts, parameters.";
  if (command == "gpus") return "The GPU profiles --gpu accepts (memplan gpus), with their memory.";
  return {};
}

json tool_input_schema(const std::string& command) {
  json props = json::object();
  json required = json::array();
  for (const auto& o : command_options(command)) {
    json p = value_schema(o);
    if (o.repeatable) p = {{"type", "array"}, {"items", p}};
    if (o.repeatable && o.long_names.size() == 1 && o.positional.empty())
      p = {{"anyOf", json::array({p["items"], p})}};  // one --config, or several
    p["description"] = o.description;
    props[property_name(o)] = p;
    if (!o.positional.empty() && command == "check") required.push_back(property_name(o));
  }
  json schema = {{"type", "object"}, {"properties", props}, {"additionalProperties", false}};
  if (!required.empty()) schema["required"] = required;
  return schema;
}

Result<std::vector<std::string>> tool_argv(const std::string& command, const json& arguments,
                                           const std::string& format) {
  const auto options = command_options(command);
  if (options.empty()) return make_error(ErrorCode::kUnknownName, fmt::format("unknown tool '{}'", command),
                                         did_you_mean(command, tool_commands()));
  if (!arguments.is_null() && !arguments.is_object())
    return make_error(ErrorCode::kInvalidArgument, "the arguments must be a JSON object");
  std::vector<std::string> argv = {command};
  std::vector<std::string> positionals;
  std::vector<std::string> names;
  for (const auto& o : options) names.push_back(property_name(o));
  if (arguments.is_object()) {
    for (const auto& [key, value] : arguments.items()) {
      std::string name = key;
      std::replace(name.begin(), name.end(), '-', '_');
      const auto it = std::find_if(options.begin(), options.end(),
                                   [&](const OptionDoc& o) { return property_name(o) == name; });
      if (it == options.end())
        return make_error(ErrorCode::kUnknownName, fmt::format("{}: unknown argument '{}'", command, key),
                          did_you_mean(name, names));
      const OptionDoc& o = *it;
      const std::string flag = o.positional.empty() ? "--" + o.long_names.front() : "";
      if (value.is_null()) continue;
      if (!o.takes_value) {
        if (!value.is_boolean())
          return make_error(ErrorCode::kInvalidArgument,
                            fmt::format("{}: '{}' is a flag: expected true or false, got {}", command, key, value.dump()));
        if (value.get<bool>()) argv.push_back(flag);
        continue;
      }
      const json items = value.is_array() ? value : json::array({value});
      if (value.is_array() && !o.repeatable)
        return make_error(ErrorCode::kInvalidArgument,
                          fmt::format("{}: '{}' takes one value, got a list", command, key));
      for (const auto& item : items) {
        const auto text = scalar_text(item);
        if (!text)
          return make_error(ErrorCode::kInvalidArgument,
                            fmt::format("{}: '{}' expects a string or a number, got {}", command, key, item.dump()));
        if (flag.empty()) {
          positionals.push_back(*text);
        } else {
          argv.push_back(flag);
          argv.push_back(*text);
        }
      }
    }
  }
  argv.push_back("--format");
  argv.push_back(format);
  if (!positionals.empty()) {
    argv.push_back("--");
    argv.insert(argv.end(), positionals.begin(), positionals.end());
  }
  return argv;
}

Result<ToolRun> call_tool(const std::string& command, const json& arguments, const std::string& format) {
  MEMPLAN_TRY(auto argv, tool_argv(command, arguments, format));
  std::ostringstream out, err;
  ToolRun r;
  r.exit_code = run(argv, out, err, &r.error);
  r.out = out.str();
  r.err = err.str();
  return r;
}

}  // namespace memplan::cli

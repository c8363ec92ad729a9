// The command-line front end: parses arguments, calls the engine, renders. Output goes to the
// given streams so tests can run the whole CLI in process.
#pragma once

#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "memplan/result.hpp"

namespace CLI {
class App;
}

namespace memplan::cli {

struct Context {
  std::ostream& out;
  std::ostream& err;
  bool err_is_terminal = false;  // err is the process's stderr, and that is a terminal
};

// A subcommand registers its options and returns the action to run when it is chosen.
// The action returns an exit code, or an Error that run() prints and maps to an exit code.
using CommandAction = std::function<Result<int>(Context&)>;

struct Command {
  CLI::App* app = nullptr;
  CommandAction action;
};

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// The same, also handing back the Error a command ended with (the MCP server and the Python
// package report its location and suggestion as fields, not as text).
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, std::optional<Error>* error);

}  // namespace memplan::cli

// Shell completion scripts, the man page and the MCP tools' input schemas, all generated from the
// one source of truth: the CLI11 App tree the commands register. A flag added to a command appears
// in all of them without another edit.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace memplan::cli {

struct OptionDoc {
  std::vector<std::string> long_names;   // without dashes: "seq-len"
  std::vector<std::string> short_names;  // without the dash: "h"
  std::string positional;                // "files" for a positional argument, else empty
  std::string description;
  std::string type_name;  // CLI11's: "TEXT", "INT", "FLOAT"; empty for a flag
  std::string group;
  bool takes_value = false;
  bool repeatable = false;  // a vector option or positional: several values
};

struct CommandDoc {
  std::string name;
  std::string description;
  std::vector<OptionDoc> options;  // help and hidden options (empty group) left out
};

// The options of `app` as documented in its --help.
std::vector<OptionDoc> describe_options(const CLI::App& app);
// Every subcommand registered on `root`, in registration order.
std::vector<CommandDoc> describe_commands(const CLI::App& root);

// Completion scripts: `source <(memplan completion bash)`, zsh's fpath `_memplan`, fish's
// completions/memplan.fish. An unknown shell returns an empty string.
std::string completion_script(const CLI::App& root, const std::string& shell);
// The man page in roff (man(7) macros): `memplan man > memplan.1; man -l memplan.1`.
std::string man_page(const CLI::App& root, const std::string& version);

}  // namespace memplan::cli

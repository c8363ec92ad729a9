// memplan completion bash|zsh|fish and memplan man: generated from the registered commands'
// options (cli_docs), so they never drift from --help.
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>

#include "cli/cli_docs.hpp"
#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "cli/version.hpp"

namespace memplan::cli {

Command register_completion(CLI::App& root) {
  auto shell = std::make_shared<std::string>();
  CLI::App* sub = root.add_subcommand("completion", "Print a shell completion script: bash, zsh or fish");
  sub->add_option("shell", *shell, "bash, zsh or fish")->required()->check(CLI::IsMember({"bash", "zsh", "fish"}));
  sub->footer("bash: source <(memplan completion bash)\n"
              "zsh:  memplan completion zsh > \"${fpath[1]}/_memplan\"\n"
              "fish: memplan completion fish > ~/.config/fish/completions/memplan.fish");
  return {sub, [shell, &root](Context& ctx) -> Result<int> {
            ctx.out << completion_script(root, *shell);
            return kExitOk;
          }};
}

Command register_man(CLI::App& root) {
  CLI::App* sub = root.add_subcommand("man", "Print the man page (roff): memplan man > memplan.1; man -l memplan.1");
  return {sub, [&root](Context& ctx) -> Result<int> {
            ctx.out << man_page(root, version_line());
            return kExitOk;
          }};
}

}  // namespace memplan::cli

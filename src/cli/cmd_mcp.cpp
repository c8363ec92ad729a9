// memplan mcp: serve the Model Context Protocol on stdin/stdout until stdin closes (cli/mcp.hpp).
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "cli/mcp.hpp"

namespace memplan::cli {

Command register_mcp(CLI::App& root) {
  CLI::App* sub = root.add_subcommand(
      "mcp", "Serve estimate, plan, check, models and gpus as Model Context Protocol tools on stdio");
  sub->footer("Register it with an MCP client as the command `memplan mcp` (stdio transport).");
  return {sub, [](Context& ctx) -> Result<int> {
            serve_mcp(std::cin, ctx.out);
            return kExitOk;
          }};
}

}  // namespace memplan::cli

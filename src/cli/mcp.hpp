// memplan mcp: a Model Context Protocol server on stdio (JSON-RPC 2.0, one message per line, as
// MCP's stdio transport specifies), so an assistant that writes a training config can ask whether
// it fits before launching it. Tools: estimate, plan, check, models, gpus (cli/tools.hpp), run in
// process; each answers with the JSON `--format json` prints. docs/integrations.md#mcp
#pragma once

#include <iosfwd>
#include <string>

namespace memplan::cli {

class McpServer {
 public:
  // One message (a line without its newline) in; the response line out, or "" for a notification
  // or a response from the client.
  // Stateless: MCP's lifecycle asks the client to initialize first, and nothing here depends on it.
  std::string handle(const std::string& line);
};

// Reads messages from `in` until it ends, writing one response line each (flushed) to `out`.
void serve_mcp(std::istream& in, std::ostream& out);

}  // namespace memplan::cli

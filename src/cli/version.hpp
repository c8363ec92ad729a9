// What `memplan --version` prints: the release, the build's git commit, the versions of the data
// compiled in (model catalog, GPU profiles: count and content hash), and the library versions the
// engine models.
#pragma once

#include <string>

namespace memplan::cli {

// "memplan 0.1.0 (commit 7457953abcde)": the first line, and what the MCP server reports.
std::string version_line();
// Every line, ending in "\n".
std::string version_text();

}  // namespace memplan::cli

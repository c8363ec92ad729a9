// Output formats shared by every command.
#pragma once

#include <string>

#include "memplan/result.hpp"

namespace memplan::report {

enum class Format { kText, kJson, kMarkdown, kGithub };

// "text" | "json" | "markdown" | "md" | "github"
Result<Format> parse_format(const std::string& s);

}  // namespace memplan::report

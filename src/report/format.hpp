// Output formats shared by every command.
#pragma once

#include <string>

#include "memplan/result.hpp"

namespace memplan::report {

enum class Format { kText, kJson, kMarkdown, kGithub, kHtml };

// "text" | "json" | "markdown" | "md" | "github", and "html" where `html` is true (the commands
// that draw a page: estimate, plan, sweep); elsewhere "html" is refused with the commands that have it.
Result<Format> parse_format(const std::string& s, bool html = false);

}  // namespace memplan::report

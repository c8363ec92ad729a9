#include "memplan/result.hpp"

#include <fmt/format.h>

#include "memplan/text.hpp"

namespace memplan {

std::string SourceLocation::to_string() const {
  if (line > 0) return fmt::format("{}:{}", file, line);
  return file;
}

std::string Error::to_string() const {
  std::string s;
  if (where && !where->file.empty()) s = where->to_string() + ": ";
  s += message;
  if (!suggestion.empty()) s += "; " + suggestion;
  return escape_control(s);  // messages quote values from files and flags
}

Error make_error(ErrorCode code, std::string message, std::string suggestion) {
  Error e;
  e.code = code;
  e.message = std::move(message);
  e.suggestion = std::move(suggestion);
  return e;
}

}  // namespace memplan

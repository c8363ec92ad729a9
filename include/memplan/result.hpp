// Result<T>: expected errors travel as values inside memplan (ccache's util/expected.hpp idea).
// An Error carries what is wrong (quoting the bad value), where (file:line for YAML), and a
// suggestion. Only main() turns an Error into text on stderr and an exit code.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace memplan {

enum class ErrorCode {
  kInvalidArgument,  // a value given on the command line or in a file is out of range or malformed
  kUnknownName,      // unknown model, GPU, optimizer, dialect...
  kInvalidConfig,    // a config file that parses but cannot be used
  kParseError,       // a file that does not parse (YAML/JSON syntax)
  kIoError,          // a file that cannot be read or written
  kUnsupported,      // a combination memplan does not model
  kNoGpu,            // detection found no GPU
  kConflict,         // a file changed under us, contradictory settings
  kOverflow,         // size arithmetic overflowed: the inputs are absurdly large
};

struct SourceLocation {
  std::string file;
  int line = 0;  // 1-based; 0 means unknown
  int column = 0;
  std::string to_string() const;  // "file:line" or "file"
};

struct Error {
  ErrorCode code = ErrorCode::kInvalidArgument;
  std::string message;
  std::optional<SourceLocation> where;
  std::string suggestion;  // "did you mean 'llama-3.1-8b'?" (without leading separator)

  // "file:3: message; suggestion" : the one-line form printed after "memplan: error: ".
  std::string to_string() const;
};

Error make_error(ErrorCode code, std::string message, std::string suggestion = {});

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}      // NOLINT(google-explicit-constructor)

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const Error& error() const { return std::get<1>(v_); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Error> v_;
};

// Result<void> equivalent.
struct Ok {};
using Status = Result<Ok>;

}  // namespace memplan

// MEMPLAN_TRY(auto x, expr): assign the value of a Result or return its Error.
#define MEMPLAN_CONCAT_INNER(a, b) a##b
#define MEMPLAN_CONCAT(a, b) MEMPLAN_CONCAT_INNER(a, b)
#define MEMPLAN_TRY(decl, expr) MEMPLAN_TRY_IMPL(MEMPLAN_CONCAT(memplan_try_, __LINE__), decl, expr)
#define MEMPLAN_TRY_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                      \
  if (!tmp) return tmp.error();           \
  decl = std::move(tmp).value()

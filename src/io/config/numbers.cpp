#include "io/config/numbers.hpp"

#include <cmath>
#include <cstdlib>
#include <regex>
#include <vector>

#include <fmt/format.h>

namespace memplan::io {

namespace {

// Longer scalars are never numbers a config means; it also bounds the regex work.
constexpr std::size_t kMaxNumberText = 128;

// PyYAML 6.0 lib/yaml/resolver.py, Resolver.add_implicit_resolver for int and float (YAML 1.1).
// Floats are tried first for a leading digit, sign or dot, then ints.
const std::regex& yaml11_float() {
  static const std::regex re(
      R"(^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?)"
      R"(|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?)"
      R"(|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*)"
      R"(|[-+]?\.(?:inf|Inf|INF))"
      R"(|\.(?:nan|NaN|NAN))$)");
  return re;
}
const std::regex& yaml11_int() {
  static const std::regex re(
      R"(^(?:[-+]?0b[0-1_]+)"
      R"(|[-+]?0[0-7_]+)"
      R"(|[-+]?(?:0|[1-9][0-9_]*))"
      R"(|[-+]?0x[0-9a-fA-F_]+)"
      R"(|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$)");
  return re;
}
// The YAML 1.2 core schema (yaml.org/spec/1.2.2 10.3.2).
const std::regex& yaml12_int() {
  static const std::regex re(R"(^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$)");
  return re;
}
const std::regex& yaml12_float() {
  static const std::regex re(
      R"(^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$)");
  return re;
}
// JSON (RFC 8259), and the three words Python's json module also accepts.
const std::regex& json_int() {
  static const std::regex re(R"(^-?(?:0|[1-9][0-9]*)$)");
  return re;
}
const std::regex& json_float() {
  static const std::regex re(R"(^(?:-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|NaN|-?Infinity)$)");
  return re;
}

std::string strip_underscores(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '_') out += c;
  return out;
}

enum class Digits { kOk, kBad, kOverflow };

// Digits in `base` into a checked magnitude.
Digits accumulate(std::string_view digits, int base, std::uint64_t& value) {
  value = 0;
  if (digits.empty()) return Digits::kBad;
  bool overflow = false;
  for (char c : digits) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d < 0 || d >= base) return Digits::kBad;
    if (value > (UINT64_MAX - static_cast<std::uint64_t>(d)) / static_cast<std::uint64_t>(base)) overflow = true;
    value = value * static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(d);
  }
  return overflow ? Digits::kOverflow : Digits::kOk;
}

ScalarNumber make_int(bool negative, std::uint64_t magnitude, bool overflow) {
  ScalarNumber r;
  r.kind = ScalarNumber::Kind::kInt;
  const std::uint64_t limit = negative ? std::uint64_t{1} << 63 : (std::uint64_t{1} << 63) - 1;
  if (overflow || magnitude > limit) {
    r.out_of_range = true;
    return r;
  }
  r.integer = negative ? static_cast<std::int64_t>(0 - magnitude) : static_cast<std::int64_t>(magnitude);
  r.real = static_cast<double>(r.integer);
  return r;
}

ScalarNumber make_float(double v) {
  ScalarNumber r;
  r.kind = ScalarNumber::Kind::kFloat;
  r.real = v;
  r.out_of_range = !std::isfinite(v);
  return r;
}

// PyYAML constructor.py construct_yaml_int.
ScalarNumber construct_yaml11_int(std::string_view text) {
  std::string v = strip_underscores(text);
  bool negative = false;
  if (!v.empty() && (v[0] == '-' || v[0] == '+')) {
    negative = v[0] == '-';
    v.erase(0, 1);
  }
  std::uint64_t m = 0;
  Digits d = Digits::kOk;
  if (v == "0") {
    m = 0;
  } else if (v.rfind("0b", 0) == 0) {
    d = accumulate(std::string_view(v).substr(2), 2, m);
  } else if (v.rfind("0x", 0) == 0) {
    d = accumulate(std::string_view(v).substr(2), 16, m);
  } else if (!v.empty() && v[0] == '0') {
    d = accumulate(v, 8, m);
  } else if (v.find(':') != std::string::npos) {
    // Sexagesimal: 1:30 is 90.
    std::size_t start = 0;
    while (d == Digits::kOk) {
      const std::size_t colon = v.find(':', start);
      std::uint64_t part = 0;
      d = accumulate(std::string_view(v).substr(start, colon == std::string::npos ? std::string::npos : colon - start),
                     10, part);
      if (d != Digits::kOk) break;
      if (m > (UINT64_MAX - part) / 60) d = Digits::kOverflow;
      else m = m * 60 + part;
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  } else {
    d = accumulate(v, 10, m);
  }
  if (d == Digits::kBad) return ScalarNumber{};  // "0b_" and the like: PyYAML itself fails on these
  return make_int(negative, m, d == Digits::kOverflow);
}

// PyYAML constructor.py construct_yaml_float.
ScalarNumber construct_yaml11_float(std::string_view text) {
  std::string v = strip_underscores(text);
  for (char& c : v) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  double sign = 1;
  if (!v.empty() && (v[0] == '-' || v[0] == '+')) {
    if (v[0] == '-') sign = -1;
    v.erase(0, 1);
  }
  if (v == ".inf") return make_float(sign * HUGE_VAL);
  if (v == ".nan") return make_float(std::nan(""));
  if (v.find(':') != std::string::npos) {
    double value = 0;
    std::size_t start = 0;
    while (true) {
      const std::size_t colon = v.find(':', start);
      const std::string part = v.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      value = value * 60 + std::strtod(part.c_str(), nullptr);
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
    return make_float(sign * value);
  }
  return make_float(sign * std::strtod(v.c_str(), nullptr));
}

// How YAML 1.2's core schema reads the same text, for the warning.
std::string yaml12_reading(std::string_view text) {
  const std::string t(text);
  if (std::regex_match(t, yaml12_int())) {
    std::uint64_t m = 0;
    std::string_view d = text;
    bool negative = false;
    int base = 10;
    if (d.substr(0, 2) == "0o") base = 8, d.remove_prefix(2);
    else if (d.substr(0, 2) == "0x") base = 16, d.remove_prefix(2);
    else if (!d.empty() && (d[0] == '-' || d[0] == '+')) negative = d[0] == '-', d.remove_prefix(1);
    const Digits ok = accumulate(d, base, m);
    const ScalarNumber n = make_int(negative, m, ok != Digits::kOk);
    return n.out_of_range ? "an integer too large for memplan" : std::to_string(n.integer);
  }
  if (std::regex_match(t, yaml12_float())) {
    std::string v = t;
    for (char& c : v) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    if (v.find("inf") != std::string::npos) return v[0] == '-' ? "-infinity" : "infinity";
    if (v.find("nan") != std::string::npos) return "NaN";
    return fmt::format("{:g}", std::strtod(v.c_str(), nullptr));
  }
  return fmt::format("the string '{}'", t);
}

std::string yaml11_reading(const ScalarNumber& n, std::string_view text) {
  switch (n.kind) {
    case ScalarNumber::Kind::kInt: return n.out_of_range ? "an integer too large for memplan" : std::to_string(n.integer);
    case ScalarNumber::Kind::kFloat:
      if (std::isnan(n.real)) return "NaN";
      if (std::isinf(n.real)) return n.real < 0 ? "-infinity" : "infinity";
      return fmt::format("{:g}", n.real);
    case ScalarNumber::Kind::kOther: return fmt::format("the string '{}'", text);
  }
  return {};
}

}  // namespace

ScalarNumber resolve_number(std::string_view text, NumberGrammar grammar) {
  if (text.empty() || text.size() > kMaxNumberText) return ScalarNumber{};
  const std::string t(text);
  ScalarNumber r;
  if (grammar == NumberGrammar::kJson) {
    if (std::regex_match(t, json_int())) {
      std::uint64_t m = 0;
      const bool negative = t[0] == '-';
      const Digits ok = accumulate(std::string_view(t).substr(negative ? 1 : 0), 10, m);
      return make_int(negative, m, ok != Digits::kOk);
    }
    if (std::regex_match(t, json_float())) {
      if (t == "NaN") return make_float(std::nan(""));
      if (t == "Infinity") return make_float(HUGE_VAL);
      if (t == "-Infinity") return make_float(-HUGE_VAL);
      return make_float(std::strtod(t.c_str(), nullptr));
    }
    return r;
  }
  if (std::regex_match(t, yaml11_float())) r = construct_yaml11_float(t);
  else if (std::regex_match(t, yaml11_int())) r = construct_yaml11_int(t);
  // Only forms that could be numbers in either version get the comparison.
  const char c = t[0];
  if ((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.') {
    const std::string in11 = yaml11_reading(r, t);
    const std::string in12 = yaml12_reading(t);
    if (in11 != in12) r.yaml12_differs = fmt::format("YAML 1.2 reads it as {}", in12);
  }
  return r;
}

ScalarNumber convert_quoted(std::string_view text) {
  // Python's int() and float() strip whitespace and take `_` only between digits.
  std::size_t b = 0, e = text.size();
  while (b < e && (text[b] == ' ' || text[b] == '\t' || text[b] == '\n' || text[b] == '\r')) ++b;
  while (e > b && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\n' || text[e - 1] == '\r')) --e;
  const std::string t(text.substr(b, e - b));
  if (t.empty() || t.size() > kMaxNumberText) return ScalarNumber{};
  static const std::regex py_int(R"(^[-+]?[0-9](?:_?[0-9])*$)");
  // D = [0-9](?:_?[0-9])*: D.D, D., .D, D, each with an optional exponent; inf, infinity, nan.
  static const std::regex py_float(
      R"(^[-+]?(?:(?:[0-9](?:_?[0-9])*\.(?:[0-9](?:_?[0-9])*)?|\.[0-9](?:_?[0-9])*|[0-9](?:_?[0-9])*))"
      R"((?:[eE][-+]?[0-9](?:_?[0-9])*)?|inf|infinity|nan)$)",
      std::regex::icase);
  if (std::regex_match(t, py_int)) {
    const std::string v = strip_underscores(t);
    const bool negative = v[0] == '-';
    std::uint64_t m = 0;
    const Digits ok = accumulate(std::string_view(v).substr(v[0] == '-' || v[0] == '+' ? 1 : 0), 10, m);
    return make_int(negative, m, ok != Digits::kOk);
  }
  if (std::regex_match(t, py_float)) {
    const std::string v = strip_underscores(t);
    return make_float(std::strtod(v.c_str(), nullptr));
  }
  return ScalarNumber{};
}

}  // namespace memplan::io

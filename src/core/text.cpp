#include "memplan/text.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace memplan {

std::string to_lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

std::string escape_control(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) out += fmt::format("\\x{:02x}", c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence passes unless it encodes a C1 control (U+0080 to U+009F).
    const std::size_t len = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    bool ok = len > 0 && c < 0xf5 && i + len <= s.size();
    for (std::size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (!ok) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
      continue;
    }
    if (len == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(s[i + 1]));
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out;
}

std::string trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::size_t edit_distance(std::string_view a_in, std::string_view b_in) {
  // Insertions, deletions, substitutions and swaps of two neighbours ("bf61" -> "bf16") count one
  // each (optimal string alignment).
  const std::string a = to_lower(a_in), b = to_lower(b_in);
  std::vector<std::size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

bool plausible_typo(std::string_view name, std::string_view candidate, std::size_t distance) {
  // A typo changes a few characters: one in a short name, and less than half of it ("lr" is not a
  // misspelt "lam" or "r"), about a third of a longer one. A name that is another with a whole
  // word added or dropped ("peft_model_name_or_path", "model_name_or_path") is a different key.
  const std::size_t limit = name.size() <= 4 ? 1 : std::max<std::size_t>(2, name.size() / 3);
  if (distance > limit || 2 * distance >= std::max(name.size(), candidate.size())) return false;
  const std::string a = to_lower(name), b = to_lower(candidate);
  const std::string& longer = a.size() > b.size() ? a : b;
  const std::string& shorter = a.size() > b.size() ? b : a;
  const std::size_t at = shorter.empty() ? std::string::npos : longer.find(shorter);
  if (at == std::string::npos || longer.size() < shorter.size() + 3) return true;
  // The rest is a word of its own when a separator joins it ("peft_" + "model_name_or_path");
  // "lora_rnak" is "lora_r" mistyped, not "lora_r" with a word added.
  const auto separator = [](char ch) { return ch == '_' || ch == '-' || ch == '.'; };
  const std::size_t end = at + shorter.size();
  const bool word_before = at > 0 && separator(longer[at - 1]);
  const bool word_after = end < longer.size() && separator(longer[end]);
  return !(word_before || word_after);
}

std::optional<std::string> closest_match(std::string_view name, const std::vector<std::string>& candidates) {
  if (name.empty() || candidates.empty()) return std::nullopt;
  std::optional<std::string> best;
  std::size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(name, c);
    if (d < best_d && plausible_typo(name, c, d)) {
      best_d = d;
      best = c;
    }
  }
  if (best) return best;
  // No near spelling: a candidate that contains what was typed ("llama-3" -> "llama-3.1-8b").
  const std::string lname = to_lower(name);
  if (lname.size() >= 3) {
    for (const auto& c : candidates)
      if (to_lower(c).find(lname) != std::string::npos) return c;
  }
  return std::nullopt;
}

std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates) {
  auto m = closest_match(name, candidates);
  return m ? fmt::format("did you mean '{}'?", *m) : std::string();
}

namespace {

// Splits "24.5GiB" into (24.5, "gib"). Returns false if no leading number.
bool split_number(std::string_view text, double& value, std::string& unit) {
  const std::string t = trim(text);
  if (t.empty()) return false;
  const char* begin = t.c_str();
  char* end = nullptr;
  value = std::strtod(begin, &end);
  if (end == begin) return false;
  unit = to_lower(trim(std::string_view(end)));
  return std::isfinite(value);
}

}  // namespace

Result<Bytes> parse_size(std::string_view text) {
  double v = 0;
  std::string unit;
  if (!split_number(text, v, unit) || v < 0)
    return make_error(ErrorCode::kInvalidArgument, fmt::format("invalid size: \"{}\"", text),
                      "write a number with a unit, e.g. 24GB or 80GiB");
  struct Unit { const char* name; double factor; };
  static constexpr Unit kUnits[] = {
      {"", 1.0},       {"b", 1.0},
      {"kb", 1e3},     {"mb", 1e6},     {"gb", 1e9},     {"tb", 1e12},
      {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
      {"k", 1024.0},   {"m", 1048576.0},   {"g", 1073741824.0},   {"t", 1099511627776.0},
  };
  for (const auto& u : kUnits) {
    if (unit == u.name) {
      const double bytes = v * u.factor;
      if (bytes > 9.0e18)
        return make_error(ErrorCode::kInvalidArgument, fmt::format("size too large: \"{}\"", text));
      return Bytes::of(static_cast<std::int64_t>(std::llround(bytes)));
    }
  }
  return make_error(ErrorCode::kInvalidArgument, fmt::format("invalid size unit in \"{}\"", text),
                    "use B, KB, MB, GB, TB (decimal) or KiB, MiB, GiB, TiB (binary)");
}

Result<std::int64_t> parse_count(std::string_view text) {
  double v = 0;
  std::string unit;
  if (!split_number(text, v, unit) || v <= 0)
    return make_error(ErrorCode::kInvalidArgument, fmt::format("invalid count: \"{}\"", text),
                      "write a positive number, optionally with K, M, B or T, e.g. 7B");
  double factor = 1;
  if (unit.empty()) factor = 1;
  else if (unit == "k") factor = 1e3;
  else if (unit == "m") factor = 1e6;
  else if (unit == "b" || unit == "g") factor = 1e9;
  else if (unit == "t") factor = 1e12;
  else
    return make_error(ErrorCode::kInvalidArgument, fmt::format("invalid count suffix in \"{}\"", text),
                      "use K, M, B or T, e.g. 7B or 350M");
  const double n = v * factor;
  if (n > 9.0e18 || n < 1)
    return make_error(ErrorCode::kInvalidArgument, fmt::format("count out of range: \"{}\"", text));
  return static_cast<std::int64_t>(std::llround(n));
}

Result<std::int64_t> parse_int(std::string_view text, std::string_view what) {
  const std::string t = trim(text);
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || p != t.data() + t.size())
    return make_error(ErrorCode::kInvalidArgument, fmt::format("{} must be an integer, got \"{}\"", what, text));
  return v;
}

Result<double> parse_double(std::string_view text, std::string_view what) {
  const std::string t = trim(text);
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(v))
    return make_error(ErrorCode::kInvalidArgument, fmt::format("{} must be a number, got \"{}\"", what, text));
  return v;
}

Result<bool> parse_bool(std::string_view text, std::string_view what) {
  const std::string t = to_lower(trim(text));
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  return make_error(ErrorCode::kInvalidArgument, fmt::format("{} must be true or false, got \"{}\"", what, text));
}

}  // namespace memplan

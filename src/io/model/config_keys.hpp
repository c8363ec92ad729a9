// Small config.json key readers shared by the family readers of src/io/model (Granite 4.0's,
// the 2025 MoE families', the encoders'): an error located at the file, a boolean key with its class
// default, and a probability.
#pragma once

#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "memplan/result.hpp"

namespace memplan::io::keys {

inline Error key_error(const std::string& origin, std::string msg) {
  Error e = make_error(ErrorCode::kInvalidConfig, std::move(msg), "check the config");
  e.where = SourceLocation{origin, 0, 0};
  return e;
}

// A boolean key: its value, `fallback` when absent or null (the config class's default).
inline Result<bool> flag(const nlohmann::json& j, const char* key, bool fallback, const std::string& origin) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return key_error(origin, fmt::format("\"{}\" must be true or false", key));
  return it->get<bool>();
}

// A probability key (a dropout): its value in [0, 1), `fallback` when absent or null.
inline Result<double> probability(const nlohmann::json& j, const char* key, double fallback, const std::string& origin) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number() || !(it->get<double>() >= 0.0 && it->get<double>() < 1.0))
    return key_error(origin, fmt::format("\"{}\" must be a probability (0 <= p < 1), got {}", key, it->dump()));
  return it->get<double>();
}

}  // namespace memplan::io::keys

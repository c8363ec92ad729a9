// How config files spell numbers: one grammar, the one the trainers read them with. YAML files go
// through PyYAML (transformers, TRL, axolotl, LLaMA-Factory: yaml.safe_load), which implements
// YAML 1.1, so `010` is 8, `500_000` is 500000, `1e3` (no dot) and `08` are strings. JSON files
// (DeepSpeed: json.load) use JSON's decimal grammar. docs/configs.md#numbers has the table, with
// the forms YAML 1.2 reads differently (those get a warning).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace memplan::io {

enum class NumberGrammar { kYaml11, kJson };

struct ScalarNumber {
  enum class Kind { kInt, kFloat, kOther };  // kOther: the trainer reads a string (or bool, null...)
  Kind kind = Kind::kOther;
  std::int64_t integer = 0;   // kInt (when !out_of_range)
  double real = 0;            // kFloat, and kInt as a double
  bool out_of_range = false;  // kInt beyond int64, or kFloat beyond double (1e400)
  // Set when YAML 1.2 (the core schema: yaml-cpp, ruamel, Go) reads the same plain text
  // differently: "YAML 1.2 reads it as 10".
  std::string yaml12_differs;
};

// How a *plain* (unquoted) scalar resolves, exactly as PyYAML's Resolver and constructors do
// (lib/yaml/resolver.py and constructor.py, PyYAML 6.0), or as Python's json module for kJson.
ScalarNumber resolve_number(std::string_view text, NumberGrammar grammar);

// A *quoted* scalar is a string to the YAML loader; trainers that accept it convert it with
// Python's int()/float(): optional blanks and sign, decimal digits, `_` between digits.
ScalarNumber convert_quoted(std::string_view text);

}  // namespace memplan::io

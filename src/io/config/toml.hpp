// TOML training configs (torchtitan's train_configs/*.toml) as the located tree every dialect
// reads. CLI11's config reader parses the file ([table] and [table.sub] headers, `key = value`,
// strings, numbers, booleans, one-line arrays, comments); this layer gives each value its line and
// the byte span of its text, so that messages say `file:line` and --apply rewrites a number in place.
#pragma once

#include <string>

#include "io/edit/yaml_edit.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

// A TOML document as a YamlDoc: tables are maps, arrays sequences, every other value a scalar
// (TOML's digit separators removed from numbers: `2_000` is 2000). What the reader cannot take
// (multi-line arrays, inline tables, lines that are not `key = value`) is a located warning and
// is left out of the tree.
Result<YamlDoc> parse_toml(std::string text, std::string file);

// parse_toml for a .toml file, parse_yaml (YAML or JSON) otherwise.
Result<YamlDoc> parse_config_text(std::string text, std::string file);

}  // namespace memplan::io

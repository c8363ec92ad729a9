// YAML that remembers where everything is. yaml-cpp parses (its event API gives every node's
// position); this layer keeps, for each node, the line and the exact byte span of a scalar in the
// original text. Readers use it to report `file:line`; --apply uses it to rewrite one scalar
// in place, because yaml-cpp's emitter would drop comments, quoting and layout.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "memplan/result.hpp"

namespace memplan::io {

enum class YamlKind { kNull, kScalar, kMap, kSeq };
enum class ScalarStyle { kPlain, kSingleQuoted, kDoubleQuoted, kBlock };

struct YamlEntry;

struct YamlNode {
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  YamlKind kind = YamlKind::kNull;
  std::string value;                 // scalar text as YAML reads it (quotes and escapes resolved)
  ScalarStyle style = ScalarStyle::kPlain;
  bool explicit_tag = false;         // `!!str 5`, `!!int "5"`: written with a tag
  int line = 0;                      // 1-based line of the node (for an empty value: of its key)
  int column = 0;                    // 1-based byte column
  std::size_t begin = npos;          // scalars: byte span [begin, end) of the scalar as written,
  std::size_t end = npos;            //   quotes included, anchor and tag excluded; npos: not editable
  bool flow = false;                 // a flow collection ({...} [...]) or a node inside one
  std::string anchor;                // `&name` defined on this node
  int alias_line = 0;                // > 0: reached through `*alias` (or a `<<` merge) written at this line
  int source = 0;                    // which file of a layered stack the node comes from
  std::vector<YamlEntry> entries;    // kMap, in file order (merge keys resolved, `<<` itself removed)
  std::vector<YamlNode> items;       // kSeq

  bool is_map() const { return kind == YamlKind::kMap; }
  bool is_scalar() const { return kind == YamlKind::kScalar; }
  bool is_null() const { return kind == YamlKind::kNull; }
  bool editable() const { return kind != YamlKind::kMap && kind != YamlKind::kSeq && begin != npos && alias_line == 0; }
  // The value of `key` in a map (the last one when a key is repeated), or nullptr.
  const YamlNode* get(std::string_view key) const;
  YamlNode* get(std::string_view key);
  // The node at a key path ({"training", "trainer", "devices"}), or nullptr.
  const YamlNode* at(const std::vector<std::string>& path) const;
};

struct YamlEntry {
  YamlNode key;
  YamlNode value;
};

struct YamlDoc {
  std::string file;                    // path as given, used in every message
  std::string text;                    // the original bytes
  YamlNode root;                       // an empty document gives an empty map
  std::vector<Error> warnings;         // duplicate keys, extra documents (located)
  std::map<std::string, std::vector<int>> alias_lines;  // anchor name -> lines of its aliases
};

// Parses UTF-8 YAML (or JSON). Errors are located ("train.yaml:7: invalid YAML: ...").
Result<YamlDoc> parse_yaml(std::string text, std::string file);

// Why bytes cannot be a config's text (a UTF-16 byte-order mark, NUL bytes), or "" when they can.
std::string not_config_text(std::string_view text);

// "a.b.c" -> {"a", "b", "c"}.
std::vector<std::string> split_key_path(std::string_view dotted);
std::string join_key_path(const std::vector<std::string>& path);

// One replacement of the bytes [begin, end) of a text.
struct TextEdit {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::string text;
};

// Replaces the scalar `node` of `doc` with `new_value`, keeping its quoting style (plain stays
// plain, "x" stays double-quoted, 'x' single-quoted). Refuses aliases, anchors that are used
// elsewhere, block scalars and nodes whose span is unknown, saying why.
Result<TextEdit> replace_scalar(const YamlDoc& doc, const YamlNode& node, std::string_view new_value);

// Adds the line `key: value` to the block mapping `map` of `doc`, with the indentation of the
// mapping's keys and the file's line ending, right after the entry `after` (a key of `map`),
// or after the mapping's last entry when `after` is empty or absent. Refuses flow mappings.
Result<TextEdit> insert_entry(const YamlDoc& doc, const YamlNode& map, std::string_view key, std::string_view value,
                              std::string_view after = {});

// Applies non-overlapping edits (in any order) to `text`.
Result<std::string> apply_text_edits(std::string_view text, std::vector<TextEdit> edits);

}  // namespace memplan::io

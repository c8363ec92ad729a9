#include "io/toml.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <string_view>
#include <vector>

#include "memplan/text.hpp"

namespace memplan::io {

namespace {

constexpr std::size_t kMaxDepth = 64;  // nested tables: a job config has three or four

// Where a value is written: its line and the bytes of its text (quotes included).
struct Located {
  int line = 0;
  int column = 0;
  std::size_t begin = 0, end = 0;
  ScalarStyle style = ScalarStyle::kPlain;
  bool array = false;  // written as `[...]`
  int times = 1;       // how often the key is written in its table (TOML forbids more than once)
};

// A key or table name as CLI11 reports it: trimmed, its quotes removed.
std::string bare(std::string_view k) {
  std::string s = trim(std::string(k));
  if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front()) s = s.substr(1, s.size() - 2);
  return s;
}

// The positions of the file's tables and `key = value` lines, for the values CLI11 has read:
// "table.sub" + '\x1f' + key -> where its value is; "table.sub" -> its header's line. Positions
// only: every value comes from CLI11.
struct Positions {
  std::map<std::string, Located> values;  // the last time each key is written
  std::vector<int> open_headers;          // lines of table headers without their closing ']'
  std::map<std::string, int> tables;
  std::vector<std::size_t> line_start;  // byte offset of each line (0-based index = line - 1)
};

Positions locate(std::string_view text) {
  Positions out;
  std::string table;
  std::size_t pos = 0;
  int line = 0;
  while (pos <= text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    ++line;
    out.line_start.push_back(pos);
    const std::string_view l = text.substr(pos, eol - pos);
    const std::size_t a = l.find_first_not_of(" \t");
    if (a != std::string_view::npos && l[a] != '#') {
      if (l[a] == '[') {
        const bool array_table = l.substr(a, 2) == "[[";
        const std::size_t from = a + (array_table ? 2 : 1);
        const std::size_t close = l.find(']', from);
        if (close == std::string_view::npos) out.open_headers.push_back(line);
        std::string name;
        for (const auto& part : split_key_path(
                 l.substr(from, close == std::string_view::npos ? l.size() - from : close - from))) {
          if (!name.empty()) name += '.';
          name += bare(part);
        }
        table = name;
        out.tables.emplace(table, line);
      } else if (const std::size_t eq = l.find('=', a); eq != std::string_view::npos) {
        const std::string key = bare(l.substr(a, eq - a));
        std::size_t v = l.find_first_not_of(" \t", eq + 1);
        if (v != std::string_view::npos) {
          Located at;
          at.line = line;
          at.column = static_cast<int>(v) + 1;
          std::size_t e;
          const char q = l[v];
          if (q == '"' || q == '\'') {
            e = l.find(q, v + 1);
            e = e == std::string_view::npos ? l.size() : e + 1;
            at.style = q == '"' ? ScalarStyle::kDoubleQuoted : ScalarStyle::kSingleQuoted;
          } else {
            e = l.find('#', v);
            if (e == std::string_view::npos) e = l.size();
            while (e > v && (l[e - 1] == ' ' || l[e - 1] == '\t' || l[e - 1] == '\r')) --e;
            at.array = q == '[';
          }
          at.begin = pos + v;
          at.end = pos + e;
          // A repeated key (TOML forbids it; CLI11 joins the values): the last one is read, as a
          // repeated YAML key is.
          auto [it, fresh] = out.values.emplace(table + '\x1f' + key, at);
          if (!fresh) {
            at.times = it->second.times + 1;
            it->second = at;
          }
        }
      }
    }
    if (eol == text.size()) break;
    pos = eol + 1;
  }
  return out;
}

// TOML's digit separators (`10_000`) in an unquoted integer or float.
std::string number_text(const std::string& v) {
  if (v.find('_') == std::string::npos) return v;
  for (const char ch : v)
    if (!(std::isdigit(static_cast<unsigned char>(ch)) || ch == '_' || ch == '+' || ch == '-' || ch == '.' ||
          ch == 'e' || ch == 'E'))
      return v;
  std::string out;
  for (const char ch : v)
    if (ch != '_') out += ch;
  return out;
}

// The first line whose text contains `what` (for a warning about something no position was
// recorded for), or 0.
int line_of(const Positions& p, std::string_view text, std::string_view what) {
  if (what.empty()) return 0;
  const std::size_t at = text.find(what);
  if (at == std::string_view::npos) return 0;
  const auto it = std::upper_bound(p.line_start.begin(), p.line_start.end(), at);
  return static_cast<int>(it - p.line_start.begin());
}

bool plain_key(const std::string& k) {
  if (k.empty()) return false;
  for (const char ch : k)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-')) return false;
  return true;
}

}  // namespace

Result<YamlDoc> parse_toml(std::string text, std::string file) {
  YamlDoc doc;
  doc.file = std::move(file);
  doc.text = std::move(text);
  const std::string_view t = doc.text;
  const auto fail = [&](int line, std::string msg) -> Error {
    Error e = make_error(ErrorCode::kParseError, std::move(msg));
    e.where = SourceLocation{doc.file, line, 0};
    return e;
  };
  // A value left out of the tree (`suggestion`: what memplan reads instead).
  const auto warn = [&](int line, std::string msg,
                        std::string suggestion = "memplan reads one-line `key = value` TOML") {
    Error w = make_error(ErrorCode::kParseError, std::move(msg), std::move(suggestion));
    w.where = SourceLocation{doc.file, line, 0};
    doc.warnings.push_back(std::move(w));
  };
  if (std::string why = not_config_text(t); !why.empty()) return fail(0, std::move(why));
  std::vector<CLI::ConfigItem> items;
  try {
    std::istringstream in(doc.text);
    items = CLI::ConfigTOML().from_config(in);
  } catch (const std::exception& e) {
    return fail(0, fmt::format("invalid TOML: {}", e.what()));
  }
  const Positions where = locate(t);
  for (const int line : where.open_headers) warn(line, "a table header without its closing ']'; the keys after it are not read");
  doc.root.kind = YamlKind::kMap;
  doc.root.line = 1;
  bool in_array = false;  // inside a multi-line array, whose lines CLI11 reads as keys
  for (const CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--") continue;
    std::string table;
    for (const auto& p : item.parents) table += (table.empty() ? "" : ".") + p;
    const auto it = where.values.find(table + '\x1f' + item.name);
    const bool junk = it == where.values.end() || !plain_key(item.name);
    if (in_array) {
      if (junk) continue;
      in_array = false;
    }
    if (junk) {
      warn(line_of(where, t, item.name), fmt::format("'{}' is not a `key = value` line; not read", item.name));
      continue;
    }
    const Located& at = it->second;
    if (item.parents.size() > kMaxDepth) {  // the tree is walked and destroyed recursively
      warn(at.line, fmt::format("'{}' is nested {} tables deep; not read", item.name, item.parents.size()));
      continue;
    }
    if (at.array && (item.inputs.empty() || item.inputs.front() == "[")) {
      warn(at.line, fmt::format("'{}': an array written over several lines is not read", item.name));
      in_array = true;
      continue;
    }
    if (t.substr(at.begin, 1) == "{") {
      warn(at.line, fmt::format("'{}': inline tables are not read", item.name));
      continue;
    }
    // The tables above the value, made on first use.
    YamlNode* map = &doc.root;
    bool clash = false;
    std::string path;
    for (const auto& p : item.parents) {
      path += (path.empty() ? "" : ".") + p;
      YamlNode* child = map->get(p);
      if (child == nullptr) {
        const auto h = where.tables.find(path);
        const int line = h != where.tables.end() ? h->second : at.line;
        YamlEntry e;
        e.key.kind = YamlKind::kScalar;
        e.key.value = p;
        e.key.line = line;
        e.value.kind = YamlKind::kMap;
        e.value.line = line;
        map->entries.push_back(std::move(e));
        child = &map->entries.back().value;
      } else if (!child->is_map()) {
        clash = true;
        break;
      }
      map = child;
    }
    if (clash) {
      warn(at.line, fmt::format("'{}.{}': '{}' is a value, not a table; not read", table, item.name, table));
      continue;
    }
    if (map->get(item.name) != nullptr || at.times > 1) {
      warn(at.line, fmt::format("'{}' is set more than once in [{}]; the last one is read", item.name, table),
           "TOML allows a key once per table: remove the others");
    }
    YamlEntry e;
    e.key.kind = YamlKind::kScalar;
    e.key.value = item.name;
    e.key.line = at.line;
    YamlNode& v = e.value;
    v.line = at.line;
    v.column = at.column;
    if (item.inputs.empty()) {
      v.kind = YamlKind::kNull;
    } else if (!at.array && (item.inputs.size() == 1 || at.times > 1)) {
      v.kind = YamlKind::kScalar;
      v.style = at.style;
      v.value = at.style == ScalarStyle::kPlain ? number_text(item.inputs.back()) : item.inputs.back();
      v.begin = at.begin;
      v.end = at.end;
    } else {
      v.kind = YamlKind::kSeq;
      v.flow = true;
      for (const auto& x : item.inputs) {
        YamlNode s;
        s.kind = YamlKind::kScalar;
        s.value = x;
        s.line = at.line;
        s.flow = true;
        v.items.push_back(std::move(s));
      }
    }
    map->entries.push_back(std::move(e));
  }
  return doc;
}

Result<YamlDoc> parse_config_text(std::string text, std::string file) {
  if (to_lower(file).ends_with(".toml")) return parse_toml(std::move(text), std::move(file));
  return parse_yaml(std::move(text), std::move(file));
}

}  // namespace memplan::io

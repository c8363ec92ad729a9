#include "io/config/toml.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
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
  int repeated_table = 0;               // the line of a [table] header declared a second time
  int repeated_first = 0;               // and of its first declaration
  std::string repeated_name;
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
        const auto [seen, fresh] = out.tables.emplace(table, line);
        // TOML declares a table once ([[array]] tables repeat by design).
        if (!fresh && !array_table && out.repeated_table == 0 && close != std::string_view::npos) {
          out.repeated_table = line;
          out.repeated_first = seen->second;
          out.repeated_name = table;
        }
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

// A multi-line string (`"""..."""` or `'''...'''`), or a one-line string in triple quotes: what it
// holds, and where.
struct LongString {
  int line = 0;     // the line of its key
  std::string value;
};

// TOML basic-string escapes (\n \t \" \\ \uXXXX, and a backslash at a line's end that trims
// the line break and the whitespace after it).
std::string unescape_basic(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case 'u':
      case 'U': {
        const std::size_t n = c == 'u' ? 4 : 8;
        const std::string hex(s.substr(i + 1, n));
        const unsigned long cp = std::min(std::strtoul(hex.c_str(), nullptr, 16), 0x10ffffUL);
        i += hex.size();
        if (cp < 0x80) out += static_cast<char>(cp);
        else if (cp < 0x800) out += static_cast<char>(0xc0 | (cp >> 6)), out += static_cast<char>(0x80 | (cp & 0x3f));
        else if (cp < 0x10000)
          out += static_cast<char>(0xe0 | (cp >> 12)), out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f)),
              out += static_cast<char>(0x80 | (cp & 0x3f));
        else
          out += static_cast<char>(0xf0 | (cp >> 18)), out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f)),
              out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f)), out += static_cast<char>(0x80 | (cp & 0x3f));
        break;
      }
      default:
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
          // A line-ending backslash: the break and the whitespace after it go.
          std::size_t j = i;
          while (j < s.size() && (s[j] == ' ' || s[j] == '\t' || s[j] == '\r' || s[j] == '\n')) ++j;
          i = j - 1;
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

// Blanks out every string in triple quotes so that the line reader and CLI11 see `key = ""` and
// blank lines where it was (every byte keeps its offset, every line its number): the lines of a
// multi-line string are never read as keys, and --apply never edits inside one. Returns the
// strings by their key ("table" + '\x1f' + key), or the line of one left open.
// A comment after a table header (`[ckpt] # at the end`) is legal TOML that CLI11's reader takes
// for a key: blanked (spaces, so every offset stays where it was).
void blank_header_comments(std::string& text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const std::size_t a = text.find_first_not_of(" \t", pos);
    if (a != std::string::npos && a < eol && text[a] == '[') {
      const std::size_t close = text.find(']', a);
      if (close != std::string::npos && close < eol) {
        std::size_t after = close + 1;
        if (after < eol && text[after] == ']') ++after;
        const std::size_t hash = text.find_first_not_of(" \t\r", after);
        if (hash != std::string::npos && hash < eol && text[hash] == '#')
          for (std::size_t i = hash; i < eol && text[i] != '\r'; ++i) text[i] = ' ';
      }
    }
    pos = eol + 1;
  }
}

std::map<std::string, LongString> blank_long_strings(std::string& text, int* unclosed) {
  std::map<std::string, LongString> out;
  std::string table;
  std::size_t pos = 0;
  int line = 1;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const std::string_view l(text.data() + pos, eol - pos);
    const std::size_t a = l.find_first_not_of(" \t");
    std::size_t next = eol + 1;
    int next_line = line + 1;
    if (a != std::string_view::npos && l[a] == '[') {
      const std::size_t close = l.find(']', a);
      const bool arr = l.substr(a, 2) == "[[";
      std::string name;
      for (const auto& part : split_key_path(l.substr(a + (arr ? 2 : 1), close == std::string_view::npos
                                                                               ? std::string_view::npos
                                                                               : close - a - (arr ? 2 : 1)))) {
        if (!name.empty()) name += '.';
        name += bare(part);
      }
      table = name;
    } else if (a != std::string_view::npos && l[a] != '#') {
      const std::size_t eq = l.find('=', a);
      const std::size_t v = eq == std::string_view::npos ? eq : l.find_first_not_of(" \t", eq + 1);
      if (v != std::string_view::npos && (l.substr(v, 3) == "\"\"\"" || l.substr(v, 3) == "'''")) {
        const char q = l[v];
        const bool basic = q == '"';
        const std::size_t open = pos + v;  // in text
        const std::string delim(3, q);
        // The closing delimiter: the first unescaped run of three quotes (up to five: TOML lets a
        // string end in one or two quotes).
        std::size_t i = open + 3, close = std::string::npos;
        while (i < text.size()) {
          if (basic && text[i] == '\\') {
            i += 2;
            continue;
          }
          if (text.compare(i, 3, delim) == 0) {
            std::size_t e = i + 3;
            while (e < text.size() && e < i + 5 && text[e] == q) ++e;
            close = e - 3;
            break;
          }
          ++i;
        }
        if (close == std::string::npos) {
          *unclosed = line;
          return out;
        }
        std::string body = text.substr(open + 3, close - open - 3);
        // A line break right after the opening delimiter is trimmed.
        if (body.rfind("\r\n", 0) == 0) body.erase(0, 2);
        else if (body.rfind("\n", 0) == 0) body.erase(0, 1);
        LongString ls;
        ls.line = line;
        ls.value = basic ? unescape_basic(body) : body;
        out[table + '\x1f' + bare(l.substr(a, eq - a))] = std::move(ls);
        // Blank it: `""` then spaces, line breaks kept.
        for (std::size_t k = open; k < close + 3; ++k) {
          if (text[k] != '\n' && text[k] != '\r') text[k] = ' ';
        }
        text[open] = '"';
        text[open + 1] = '"';
        // The line holding the closing delimiter is this value's too: reading goes on after it.
        const std::size_t after = text.find('\n', close + 3);
        next = after == std::string::npos ? text.size() : after + 1;
        next_line = line;
        for (std::size_t k = pos; k < next && k < text.size(); ++k)
          if (text[k] == '\n') ++next_line;
      }
    }
    pos = next;
    line = next_line;
  }
  return out;
}

// A TOML integer in another base (0x1F, 0o17, 0b101, underscores allowed) as decimal text, or
// the text unchanged; `bad` is set for a decimal integer with leading zeros, which TOML forbids.
std::string toml_integer(const std::string& v, bool* bad) {
  *bad = false;
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'o' || v[1] == 'b')) {
    const int base = v[1] == 'x' ? 16 : v[1] == 'o' ? 8 : 2;
    std::string digits;
    for (std::size_t i = 2; i < v.size(); ++i)
      if (v[i] != '_') digits += v[i];
    if (digits.empty() || digits.size() > 64) return v;
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(digits.c_str(), &end, base);
    if (errno != 0 || end == nullptr || *end != '\0' || n > 9223372036854775807ULL) return v;
    return std::to_string(n);
  }
  std::size_t d = v[0] == '+' || v[0] == '-' ? 1 : 0;
  if (v.size() > d + 1 && v[d] == '0' &&
      std::all_of(v.begin() + static_cast<std::ptrdiff_t>(d), v.end(),
                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '_'; }))
    *bad = true;
  return v;
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

// An empty table `key` appended to `map` (declared at `line`), as tomllib makes it on first use.
YamlNode* add_table(YamlNode& map, const std::string& key, int line) {
  YamlEntry e;
  e.key.kind = YamlKind::kScalar;
  e.key.value = key;
  e.key.line = line;
  e.value.kind = YamlKind::kMap;
  e.value.line = line;
  map.entries.push_back(std::move(e));
  return &map.entries.back().value;
}

}  // namespace

Result<YamlDoc> parse_toml(std::string text, std::string file) {
  YamlDoc doc;
  doc.file = std::move(file);
  doc.text = std::move(text);
  const std::string_view t = doc.text;
  const auto fail = [&](int line, std::string msg, std::string suggestion = {}) -> Error {
    Error e = make_error(ErrorCode::kParseError, std::move(msg), std::move(suggestion));
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
  // A carriage return not followed by a line feed: TOML line breaks are LF or CRLF, and Python's
  // tomllib (what torchtitan reads its config with) refuses the file.
  for (std::size_t i = 0, line = 1; i < t.size(); ++i) {
    if (t[i] == '\n') ++line;
    if (t[i] == '\r' && (i + 1 == t.size() || t[i + 1] != '\n'))
      return fail(static_cast<int>(line),
                  "a carriage return (CR) without a line feed; TOML line breaks are LF or CRLF, and Python's tomllib "
                  "refuses the file ('Expected newline or end of document after a statement')");
  }
  std::string blanked = doc.text;
  int unclosed = 0;
  const auto long_strings = blank_long_strings(blanked, &unclosed);
  if (unclosed > 0) return fail(unclosed, "invalid TOML: a string in triple quotes that is never closed");
  blank_header_comments(blanked);
  std::vector<CLI::ConfigItem> items;
  try {
    std::istringstream in(blanked);
    items = CLI::ConfigTOML().from_config(in);
  } catch (const std::exception& e) {
    return fail(0, fmt::format("invalid TOML: {}", e.what()));
  }
  const Positions where = locate(blanked);
  if (where.repeated_table > 0)
    return fail(where.repeated_table, fmt::format("invalid TOML: table [{}] is declared twice (first at line {}); "
                                                  "TOML declares a table once, and Python's tomllib refuses the file",
                                                  where.repeated_name, where.repeated_first));
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
    if (std::string_view(blanked).substr(at.begin, 1) == "{") {
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
        child = add_table(*map, p, h != where.tables.end() ? h->second : at.line);
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
    } else if (const auto ls = long_strings.find(table + '\x1f' + item.name); ls != long_strings.end()) {
      // A string in triple quotes: its text, never editable in place.
      v.kind = YamlKind::kScalar;
      v.style = ScalarStyle::kDoubleQuoted;
      v.value = ls->second.value;
    } else if (!at.array && (item.inputs.size() == 1 || at.times > 1)) {
      v.kind = YamlKind::kScalar;
      v.style = at.style;
      v.value = at.style == ScalarStyle::kPlain ? number_text(item.inputs.back()) : item.inputs.back();
      if (at.style == ScalarStyle::kPlain && !v.value.empty()) {
        bool bad = false;
        v.value = toml_integer(v.value, &bad);
        if (bad)
          return fail(at.line, fmt::format("invalid TOML: '{}' = {}: TOML integers have no leading zeros (Python's "
                                           "tomllib refuses it)",
                                           item.name, item.inputs.back()),
                      "write it without the leading zeros, or with 0o for octal (0o10 is 8)");
      }
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
  // A table declared with no keys (`[trainer.model.compile]`) is an empty table, as tomllib reads
  // it: frameworks switch features on by declaring one.
  for (const auto& [name, line] : where.tables) {
    const auto parts = split_key_path(name);
    if (parts.size() > kMaxDepth) continue;  // warned above when it held a value; never built
    YamlNode* map = &doc.root;
    for (const auto& part : parts) {
      if (map == nullptr || !map->is_map()) break;
      YamlNode* child = map->get(part);
      if (child == nullptr) child = add_table(*map, part, line);
      map = child;
    }
  }
  return doc;
}

Result<YamlDoc> parse_config_text(std::string text, std::string file) {
  if (to_lower(file).ends_with(".toml")) return parse_toml(std::move(text), std::move(file));
  return parse_yaml(std::move(text), std::move(file));
}

}  // namespace memplan::io

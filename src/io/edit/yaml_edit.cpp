#include "io/edit/yaml_edit.hpp"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include "memplan/text.hpp"

namespace memplan::io {

namespace {

constexpr std::size_t npos = YamlNode::npos;

bool is_blank(char c) { return c == ' ' || c == '\t'; }
bool is_eol(char c) { return c == '\n' || c == '\r'; }

// Offsets at which each line starts; line n (1-based) starts at starts[n - 1].
std::vector<std::size_t> line_starts(std::string_view text) {
  std::vector<std::size_t> starts{0};
  for (std::size_t i = 0; i < text.size(); ++i)
    if (text[i] == '\n' || (text[i] == '\r' && (i + 1 == text.size() || text[i + 1] != '\n')))
      starts.push_back(i + 1);  // a lone CR ends a line too (PyYAML)
  return starts;
}

int line_of(const std::vector<std::size_t>& starts, std::size_t offset) {
  auto it = std::upper_bound(starts.begin(), starts.end(), offset);
  return static_cast<int>(it - starts.begin());
}

// End of a plain scalar starting at `b`: it stops at a comment, the end of the line, a
// `key: ` indicator, and inside flow collections at `,` `]` `}`. Trailing blanks excluded.
std::size_t plain_end(std::string_view t, std::size_t b, bool in_flow) {
  std::size_t i = b;
  while (i < t.size() && !is_eol(t[i])) {
    const char c = t[i];
    if (c == '#' && i > b && is_blank(t[i - 1])) break;
    if (c == ':' && (i + 1 == t.size() || is_blank(t[i + 1]) || is_eol(t[i + 1]) ||
                     (in_flow && (t[i + 1] == ',' || t[i + 1] == ']' || t[i + 1] == '}'))))
      break;
    if (in_flow && (c == ',' || c == ']' || c == '}')) break;
    ++i;
  }
  while (i > b && is_blank(t[i - 1])) --i;
  return i;
}

// End (one past the closing quote) of a quoted scalar on one line, or npos.
std::size_t quoted_end(std::string_view t, std::size_t b) {
  const char q = t[b];
  for (std::size_t i = b + 1; i < t.size(); ++i) {
    const char c = t[i];
    if (is_eol(c)) return npos;  // multi-line quoted scalars are folded: not editable in place
    if (q == '"' && c == '\\') {
      ++i;
      continue;
    }
    if (c == q) {
      if (q == '\'' && i + 1 < t.size() && t[i + 1] == '\'') {
        ++i;
        continue;
      }
      return i + 1;
    }
  }
  return npos;
}

// The offset of the bracket closing the flow collection opened at `b`, or npos.
std::size_t flow_close(std::string_view t, std::size_t b) {
  int depth = 0;
  for (std::size_t i = b; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '"' || c == '\'') {
      // Quoted strings inside flow collections may span lines; skip to the closing quote.
      for (++i; i < t.size(); ++i) {
        if (c == '"' && t[i] == '\\') {
          ++i;
          continue;
        }
        if (t[i] == c) {
          if (c == '\'' && i + 1 < t.size() && t[i + 1] == '\'') {
            ++i;
            continue;
          }
          break;
        }
      }
      continue;
    }
    if (c == '#' && i > b && (is_blank(t[i - 1]) || is_eol(t[i - 1]))) {
      while (i < t.size() && t[i] != '\n') ++i;
      continue;
    }
    if (c == '[' || c == '{') ++depth;
    if (c == ']' || c == '}') {
      if (--depth == 0) return i;
    }
  }
  return npos;
}

void mark_alias(YamlNode& n, int line) {
  n.alias_line = line;
  for (auto& e : n.entries) {
    mark_alias(e.key, line);
    mark_alias(e.value, line);
  }
  for (auto& i : n.items) mark_alias(i, line);
}

// Bounds on what one document may build: a config has hundreds of nodes; these stop a few
// hundred bytes of nested aliases ("billion laughs") or merge keys from taking minutes and
// gigabytes. Thrown from the event handler, caught in parse_yaml.
constexpr std::size_t kMaxNodes = 1'000'000;       // every node built, copies included
constexpr std::size_t kMaxExpandedNodes = 100'000;  // nodes copied by aliases and merge keys
constexpr std::size_t kMaxDepth = 256;              // nested collections
struct LimitExceeded {
  int line;
  std::string message;
};

std::size_t subtree_size(const YamlNode& n) {
  std::size_t size = 1;
  for (const auto& e : n.entries) size += subtree_size(e.key) + subtree_size(e.value);
  for (const auto& i : n.items) size += subtree_size(i);
  return size;
}

// Builds YamlNodes from yaml-cpp's events, locating every node in the original text.
class TreeBuilder : public YAML::EventHandler {
 public:
  TreeBuilder(YamlDoc& doc, std::size_t bom) : doc_(doc), bom_(bom), starts_(line_starts(doc.text)) {}

  bool done() const { return have_root_; }
  YamlNode take_root() { return std::move(root_); }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    YamlNode n = located(mark);
    n.kind = YamlKind::kNull;
    // An explicit null (`~`, `null`) has a span; an empty value's mark points at the next token.
    const std::string_view t = doc_.text;
    const std::size_t b = n.begin;
    n.begin = n.end = npos;
    if (b < t.size()) {
      for (std::string_view word : {"~", "null", "Null", "NULL"}) {
        if (t.substr(b, word.size()) == word && plain_end(t, b, flow_depth_ > 0) == b + word.size()) {
          n.begin = b;
          n.end = b + word.size();
          break;
        }
      }
    }
    if (n.begin == npos) n.line = 0;  // filled in from its key
    finish(std::move(n), anchor);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const int line = line_of(starts_, offset(mark));
    auto size = anchor_sizes_.find(anchor);
    expand(size != anchor_sizes_.end() ? size->second : 1, line);
    auto it = anchors_.find(anchor);
    YamlNode n = it != anchors_.end() ? it->second : YamlNode{};
    mark_alias(n, line);
    auto name = anchor_names_.find(anchor);
    if (name != anchor_names_.end()) doc_.alias_lines[name->second].push_back(line);
    add(std::move(n));
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    YamlNode n = located(mark);
    n.kind = YamlKind::kScalar;
    n.value = value;
    n.explicit_tag = tag != "?" && tag != "!";
    locate_scalar(n);
    finish(std::move(n), anchor);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value style) override {
    start(mark, anchor, style, YamlKind::kSeq);
  }
  void OnSequenceEnd() override { end(); }

  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value style) override {
    start(mark, anchor, style, YamlKind::kMap);
  }
  void OnMapEnd() override { end(); }

  void OnAnchor(const YAML::Mark&, const std::string& name) override { pending_anchor_ = name; }

 private:
  struct Frame {
    YamlNode node;
    YAML::anchor_t anchor = 0;
    bool opens_flow = false;
    bool have_key = false;
    YamlNode key;
  };

  std::size_t offset(const YAML::Mark& m) const {
    return std::min(doc_.text.size(), static_cast<std::size_t>(std::max(m.pos, 0)) + bom_);
  }

  // Counts `n` new nodes copied by an alias or merge key at `line`; throws past the limits.
  void expand(std::size_t n, int line) {
    expanded_ += n;
    nodes_ += n;
    if (expanded_ > kMaxExpandedNodes)
      throw LimitExceeded{line, fmt::format("aliases and merge keys expand to more than {} nodes (nested aliases "
                                            "that multiply, like a 'billion laughs' document); memplan refuses it",
                                            kMaxExpandedNodes)};
    if (nodes_ > kMaxNodes)
      throw LimitExceeded{line, fmt::format("more than {} nodes; a training config is far smaller", kMaxNodes)};
  }

  // A node at the mark, past any `&anchor` and `!tag` properties.
  YamlNode located(const YAML::Mark& mark) {
    const std::string_view t = doc_.text;
    std::size_t b = offset(mark);
    if (++nodes_ > kMaxNodes)
      throw LimitExceeded{line_of(starts_, std::min(b, t.size())),
                          fmt::format("more than {} nodes; a training config is far smaller", kMaxNodes)};
    while (b < t.size() && (t[b] == '&' || t[b] == '!')) {
      while (b < t.size() && !is_blank(t[b]) && !is_eol(t[b])) ++b;
      while (b < t.size() && (is_blank(t[b]) || is_eol(t[b]))) ++b;
    }
    YamlNode n;
    n.begin = b;
    n.line = line_of(starts_, b);
    n.column = static_cast<int>(b - starts_[static_cast<std::size_t>(n.line - 1)]) + 1;
    n.flow = flow_depth_ > 0;
    n.source = 0;
    if (!pending_anchor_.empty()) {
      n.anchor = pending_anchor_;
      pending_anchor_.clear();
    }
    return n;
  }

  // Sets [begin, end) when the text there reads back exactly as the parsed value.
  void locate_scalar(YamlNode& n) {
    const std::string_view t = doc_.text;
    const std::size_t b = n.begin;
    n.begin = n.end = npos;
    if (b >= t.size()) return;
    const char c = t[b];
    if (c == '|' || c == '>') {
      n.style = ScalarStyle::kBlock;
      return;
    }
    if (c == '"' || c == '\'') {
      n.style = c == '"' ? ScalarStyle::kDoubleQuoted : ScalarStyle::kSingleQuoted;
      const std::size_t e = quoted_end(t, b);
      if (e == npos) return;
      std::string inner(t.substr(b + 1, e - b - 2));
      if (c == '"') {
        if (inner.find('\\') != std::string::npos) return;  // escapes: not reproduced, not edited
      } else {
        std::string unq;
        for (std::size_t i = 0; i < inner.size(); ++i) {
          unq += inner[i];
          if (inner[i] == '\'') ++i;
        }
        inner = unq;
      }
      if (inner != n.value) return;
      n.begin = b;
      n.end = e;
      return;
    }
    n.style = ScalarStyle::kPlain;
    const std::size_t e = plain_end(t, b, flow_depth_ > 0);
    if (t.substr(b, e - b) != n.value) return;  // a multi-line plain scalar
    n.begin = b;
    n.end = e;
  }

  void start(const YAML::Mark& mark, YAML::anchor_t anchor, YAML::EmitterStyle::value style, YamlKind kind) {
    YamlNode n = located(mark);
    n.kind = kind;
    n.begin = npos;  // collections are not edited as a whole
    const bool opens_flow = style == YAML::EmitterStyle::Flow;
    n.flow = flow_depth_ > 0 || opens_flow;
    if (opens_flow) ++flow_depth_;
    if (stack_.size() >= kMaxDepth)
      throw LimitExceeded{n.line, fmt::format("collections nested more than {} deep; memplan refuses it", kMaxDepth)};
    stack_.push_back(Frame{std::move(n), anchor, opens_flow, false, {}});
  }

  void end() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    if (f.opens_flow) --flow_depth_;
    if (f.node.is_map()) resolve_map(f.node);
    finish(std::move(f.node), f.anchor);
  }

  // `<<` merge keys, then duplicate keys (PyYAML keeps the last one; so do we, with a warning).
  void resolve_map(YamlNode& map) {
    std::vector<YamlEntry> own, merged;
    for (auto& e : map.entries) {
      if (e.key.is_scalar() && e.key.value == "<<" && e.key.style == ScalarStyle::kPlain) {
        auto take = [&](const YamlNode& src) {
          if (!src.is_map()) return;
          for (const auto& m : src.entries) {
            expand(subtree_size(m.key) + subtree_size(m.value), e.key.line);
            merged.push_back(m);
          }
        };
        if (e.value.kind == YamlKind::kSeq) {
          for (const auto& i : e.value.items) take(i);
        } else {
          take(e.value);
        }
        continue;
      }
      own.push_back(std::move(e));
    }
    std::map<std::string, int> first_line;
    for (const auto& e : own) {
      if (!e.key.is_scalar()) continue;
      auto [it, inserted] = first_line.emplace(e.key.value, e.key.line);
      if (!inserted && e.key.alias_line == 0) {
        Error w = make_error(ErrorCode::kConflict,
                             fmt::format("duplicate key '{}' (also at line {}); the last one is used", e.key.value,
                                         it->second));
        w.where = SourceLocation{doc_.file, e.key.line, e.key.column};
        doc_.warnings.push_back(std::move(w));
      }
    }
    for (auto& m : merged) {
      if (!m.key.is_scalar() || first_line.count(m.key.value)) continue;
      first_line.emplace(m.key.value, m.key.line);
      if (m.key.alias_line == 0) {
        // An inline merge source (`<<: {a: 1}`) is still not this mapping's own text.
        m.key.alias_line = m.key.line;
        mark_alias(m.value, m.value.line);
      }
      own.push_back(std::move(m));
    }
    map.entries = std::move(own);
  }

  void finish(YamlNode n, YAML::anchor_t anchor) {
    if (anchor != 0) {
      const std::size_t size = subtree_size(n);
      expand(size, n.line);  // the copy kept for aliases
      anchor_sizes_[anchor] = size;
      anchors_[anchor] = n;
      if (!n.anchor.empty()) anchor_names_[anchor] = n.anchor;
    }
    add(std::move(n));
  }

  void add(YamlNode n) {
    if (stack_.empty()) {
      root_ = std::move(n);
      have_root_ = true;
      return;
    }
    Frame& f = stack_.back();
    if (f.node.kind == YamlKind::kSeq) {
      if (n.line == 0) n.line = f.node.line, n.column = f.node.column;
      f.node.items.push_back(std::move(n));
    } else if (!f.have_key) {
      f.key = std::move(n);
      f.have_key = true;
    } else {
      if (n.line == 0) n.line = f.key.line, n.column = f.key.column;
      f.node.entries.push_back(YamlEntry{std::move(f.key), std::move(n)});
      f.have_key = false;
    }
  }

  YamlDoc& doc_;
  std::size_t bom_;
  std::vector<std::size_t> starts_;
  std::vector<Frame> stack_;
  std::map<YAML::anchor_t, YamlNode> anchors_;
  std::map<YAML::anchor_t, std::size_t> anchor_sizes_;
  std::map<YAML::anchor_t, std::string> anchor_names_;
  std::size_t nodes_ = 0;
  std::size_t expanded_ = 0;
  std::string pending_anchor_;
  int flow_depth_ = 0;
  YamlNode root_;
  bool have_root_ = false;
};

Error located_error(ErrorCode code, const YamlDoc& doc, const YamlNode& n, std::string message) {
  Error e = make_error(code, std::move(message));
  e.where = SourceLocation{doc.file, n.line, n.column};
  return e;
}

std::string quote_as(ScalarStyle style, std::string_view v) {
  std::string out;
  if (style == ScalarStyle::kDoubleQuoted) {
    out = "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  }
  if (style == ScalarStyle::kSingleQuoted) {
    out = "'";
    for (char c : v) {
      out += c;
      if (c == '\'') out += '\'';
    }
    return out + "'";
  }
  return std::string(v);
}

// The line ending the file uses: CRLF when its first line ending is CRLF.
std::string dominant_eol(std::string_view t) {
  const std::size_t nl = t.find('\n');
  return nl != std::string_view::npos && nl > 0 && t[nl - 1] == '\r' ? "\r\n" : "\n";
}

std::size_t indent_of_line(std::string_view t, std::size_t line_begin) {
  std::size_t i = line_begin;
  while (i < t.size() && t[i] == ' ') ++i;
  return i - line_begin;
}

// The last line of the text that belongs to `entry` (its key line, more-indented content
// lines after it, and the closing bracket of any flow collection in it).
int entry_last_line(const YamlDoc& doc, const std::vector<std::size_t>& starts, const YamlEntry& entry) {
  const std::string_view t = doc.text;
  int last = entry.key.line;
  // Flow collections: their closing bracket may sit at any indentation.
  auto visit = [&](auto&& self, const YamlNode& n) -> void {
    last = std::max(last, n.line);
    if ((n.is_map() || n.kind == YamlKind::kSeq) && n.flow) {
      const std::size_t open = starts[static_cast<std::size_t>(n.line - 1)] + static_cast<std::size_t>(n.column - 1);
      if (open < t.size() && (t[open] == '[' || t[open] == '{')) {
        const std::size_t close = flow_close(t, open);
        if (close != npos) last = std::max(last, line_of(starts, close));
      }
    }
    for (const auto& e : n.entries) {
      self(self, e.key);
      self(self, e.value);
    }
    for (const auto& i : n.items) self(self, i);
  };
  visit(visit, entry.value);
  const std::size_t key_indent = static_cast<std::size_t>(entry.key.column - 1);
  for (std::size_t l = static_cast<std::size_t>(last); l < starts.size(); ++l) {
    const std::size_t b = starts[l];
    if (b >= t.size()) break;
    const std::size_t ind = indent_of_line(t, b);
    const char c = b + ind < t.size() ? t[b + ind] : '\n';
    if (is_eol(c) || c == '#') continue;  // blank or comment: belongs to whatever follows
    if (ind <= key_indent) break;
    last = static_cast<int>(l) + 1;
  }
  return last;
}

}  // namespace

const YamlNode* YamlNode::get(std::string_view key) const {
  const YamlNode* found = nullptr;
  for (const auto& e : entries)
    if (e.key.is_scalar() && e.key.value == key) found = &e.value;
  return found;
}

YamlNode* YamlNode::get(std::string_view key) {
  return const_cast<YamlNode*>(static_cast<const YamlNode*>(this)->get(key));
}

const YamlNode* YamlNode::at(const std::vector<std::string>& path) const {
  const YamlNode* n = this;
  for (const auto& k : path) {
    if (!n->is_map()) return nullptr;
    n = n->get(k);
    if (n == nullptr) return nullptr;
  }
  return n;
}

std::vector<std::string> split_key_path(std::string_view dotted) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = dotted.find('.', start);
    out.emplace_back(dotted.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return out;
}

std::string join_key_path(const std::vector<std::string>& path) {
  std::string s;
  for (const auto& p : path) s += (s.empty() ? "" : ".") + p;
  return s;
}

std::string not_config_text(std::string_view t) {
  if (t.size() >= 2 && ((t[0] == '\xff' && t[1] == '\xfe') || (t[0] == '\xfe' && t[1] == '\xff')))
    return "not a UTF-8 file (it starts with a UTF-16 byte-order mark)";
  if (t.find('\0') != std::string_view::npos) return "not a text file (it contains NUL bytes)";
  return {};
}

Result<YamlDoc> parse_yaml(std::string text, std::string file) {
  YamlDoc doc;
  doc.file = std::move(file);
  doc.text = std::move(text);
  const std::string_view t = doc.text;
  auto fail = [&](int line, int column, std::string msg) -> Error {
    Error e = make_error(ErrorCode::kParseError, std::move(msg));
    e.where = SourceLocation{doc.file, line, column};
    return e;
  };
  if (std::string why = not_config_text(t); !why.empty()) return fail(0, 0, std::move(why));
  const std::size_t bom = t.substr(0, 3) == "\xef\xbb\xbf" ? 3 : 0;

  // A carriage return alone is a line break to PyYAML (what the trainers read YAML with), as CRLF
  // and LF are; yaml-cpp takes only the latter two. The parser reads a copy in which each lone CR
  // is an LF: every byte keeps its offset, every line its number.
  std::string lf;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '\r' || (i + 1 < t.size() && t[i + 1] == '\n')) continue;
    if (lf.empty()) lf = doc.text;
    lf[i] = '\n';
  }
  std::istringstream in(lf.empty() ? doc.text : lf);
  TreeBuilder builder(doc, bom);
  try {
    YAML::Parser parser(in);
    parser.HandleNextDocument(builder);
    if (builder.done()) {
      TreeBuilder second(doc, bom);
      if (parser.HandleNextDocument(second))
        return fail(0, 0, "the file holds more than one YAML document (---); memplan reads a single document");
    }
  } catch (const LimitExceeded& e) {
    return fail(e.line, 0, e.message);
  } catch (const YAML::Exception& e) {
    const int line = e.mark.is_null() ? 0 : e.mark.line + 1;
    const int col = e.mark.is_null() ? 0 : e.mark.column + 1;
    return fail(line, col, fmt::format("invalid YAML: {}", e.msg));
  }
  if (builder.done()) {
    doc.root = builder.take_root();
  } else {
    doc.root.kind = YamlKind::kMap;  // an empty file (or only comments) is an empty mapping
    doc.root.line = 1;
    doc.root.column = 1;
  }
  return doc;
}

Result<TextEdit> replace_scalar(const YamlDoc& doc, const YamlNode& node, std::string_view new_value) {
  if (node.alias_line > 0)
    return located_error(ErrorCode::kUnsupported, doc, node,
                         fmt::format("the value comes through the alias or merge key at line {}; changing it here "
                                     "would change every other use of it",
                                     node.alias_line));
  if (!node.anchor.empty()) {
    auto it = doc.alias_lines.find(node.anchor);
    if (it != doc.alias_lines.end() && !it->second.empty()) {
      std::string lines;
      for (int l : it->second) lines += (lines.empty() ? "" : ", ") + std::to_string(l);
      return located_error(ErrorCode::kUnsupported, doc, node,
                           fmt::format("the value is anchored as &{} and reused at line {}; changing it would change "
                                       "those too",
                                       node.anchor, lines));
    }
  }
  if (node.kind == YamlKind::kMap || node.kind == YamlKind::kSeq)
    return located_error(ErrorCode::kUnsupported, doc, node, "the value is a mapping or list, not a single value");
  if (node.style == ScalarStyle::kBlock)
    return located_error(ErrorCode::kUnsupported, doc, node, "the value is a block scalar (| or >)");
  if (node.begin == npos || node.end == npos || node.end > doc.text.size())
    return located_error(ErrorCode::kUnsupported, doc, node,
                         "the value's text could not be located exactly (it is empty, spans lines or uses escapes)");
  // A quoted placeholder ("auto" in a DeepSpeed JSON) replaced by a number becomes a number: the
  // quotes kept the placeholder a string, not the number a string. A quoted number ("4") stays
  // quoted: that was the user's choice of type.
  ScalarStyle style = node.kind == YamlKind::kNull ? ScalarStyle::kPlain : node.style;
  const bool new_is_number = parse_double(new_value, "").has_value();
  if (new_is_number && style != ScalarStyle::kPlain && !parse_double(node.value, "").has_value())
    style = ScalarStyle::kPlain;
  return TextEdit{node.begin, node.end, quote_as(style, new_value)};
}

Result<TextEdit> insert_entry(const YamlDoc& doc, const YamlNode& map, std::string_view key, std::string_view value,
                              std::string_view after) {
  const std::string_view t = doc.text;
  const std::vector<std::size_t> starts = line_starts(t);
  if (map.is_map() && map.entries.empty() && &map == &doc.root) {
    // An empty document: the new line is its first content (after any comments).
    std::string text;
    if (!t.empty() && t.back() != '\n') text += dominant_eol(t);
    text += fmt::format("{}: {}{}", key, value, dominant_eol(t));
    return TextEdit{t.size(), t.size(), text};
  }
  if (!map.is_map()) return located_error(ErrorCode::kUnsupported, doc, map, "the parent is not a mapping");
  if (map.flow)
    return located_error(ErrorCode::kUnsupported, doc, map,
                         "the parent is a flow mapping ({...}); memplan only adds lines to block mappings");
  if (map.alias_line > 0)
    return located_error(ErrorCode::kUnsupported, doc, map,
                         fmt::format("the parent mapping comes through the alias at line {}", map.alias_line));
  const YamlEntry* anchor_entry = nullptr;
  for (const auto& e : map.entries) {
    if (e.key.alias_line > 0) continue;
    if (after.empty() || (e.key.is_scalar() && e.key.value == after)) anchor_entry = &e;
  }
  if (anchor_entry == nullptr) {
    for (const auto& e : map.entries)
      if (e.key.alias_line == 0) anchor_entry = &e;
  }
  if (anchor_entry == nullptr)
    return located_error(ErrorCode::kUnsupported, doc, map, "the mapping has no entry of its own to add a line next to");

  const YamlNode& first = map.entries.front().key;
  // An empty key (`: value`) has no position of its own (found by fuzz_yaml_edit).
  if (first.line < 1 || first.column < 1 || anchor_entry->key.line < 1 || anchor_entry->key.column < 1 ||
      static_cast<std::size_t>(first.line) > starts.size())
    return located_error(ErrorCode::kUnsupported, doc, map, "the mapping's keys could not be located in the text");
  const std::size_t first_line_begin = starts[static_cast<std::size_t>(first.line - 1)];
  const std::size_t key_col = static_cast<std::size_t>(first.column - 1);
  std::string indent(t.substr(first_line_begin, key_col));
  if (indent.find_first_not_of(' ') != std::string::npos) indent.assign(key_col, ' ');  // "- " of a list item

  const int last = entry_last_line(doc, starts, *anchor_entry);
  std::size_t at = static_cast<std::size_t>(last) < starts.size() ? starts[static_cast<std::size_t>(last)] : t.size();
  std::string text;
  std::string eol = dominant_eol(t);
  if (at > 0 && at <= t.size() && t[at - 1] == '\n') {
    eol = at >= 2 && t[at - 2] == '\r' ? "\r\n" : "\n";
  } else if (at == t.size()) {
    text += eol;  // the file does not end with a line ending
  }
  text += fmt::format("{}{}: {}{}", indent, key, value, eol);
  return TextEdit{at, at, text};
}

Result<std::string> apply_text_edits(std::string_view text, std::vector<TextEdit> edits) {
  std::stable_sort(edits.begin(), edits.end(), [](const TextEdit& a, const TextEdit& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::string out;
  std::size_t pos = 0;
  for (const auto& e : edits) {
    if (e.begin < pos || e.end < e.begin || e.end > text.size())
      return make_error(ErrorCode::kConflict, "overlapping edits to the same text");
    out.append(text.substr(pos, e.begin - pos));
    out += e.text;
    pos = e.end;
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace memplan::io

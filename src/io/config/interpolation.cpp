// OmegaConf interpolation (`${a.b}`), which Hydra, LLM Foundry, torchtune and NeMo configs use:
// resolved on the merged tree the way OmegaConf resolves it when the trainer reads the value.
//   ${a.b}          the node at that absolute path (its type kept: an int stays an int)
//   ${.x} ${..x}    relative to the mapping that holds the interpolation (one dot per level up),
//                   also inside a node that another interpolation copied (relative to where that
//                   node is written, as OmegaConf resolves it)
//   "p${a}q"        string interpolation: the pieces concatenated
//   ${oc.env:X,d}   an environment variable: memplan does not read the environment of the run,
//                   so it takes the default `d` (itself possibly an interpolation: ${oc.env:X,${b}})
//                   and says the value is environment-dependent
//   ${oc.select:k,d}  the node at key k, or the default d when there is no such key
//   ${oc.decode:s}  the string s read as a YAML value ("'4'" -> 4)
//   ${oc.create:{...}}  a mapping or list written in YAML flow style
// Other resolvers (${eval:...}, custom ones) are left unresolved with a warning; the value is
// then treated as absent (the dialect's default applies and is shown as such).
// Bounded by what it builds (issue 34): at most kMaxBuiltBytes of copied or concatenated values
// and kMaxDepth nested references; past either the config is refused at the line that asks.
#include <algorithm>
#include <cctype>
#include <functional>
#include <optional>

#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "io/edit/yaml_edit.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

constexpr int kMaxDepth = 32;
// Interpolations resolved in one config, at most: references that fan out (a: [${b}, ${b}],
// b: [${a}, ${a}]) would otherwise grow exponentially with the depth.
constexpr int kMaxResolutions = 10000;
// Bytes that interpolation may build in one config (copied nodes and concatenated strings, each
// node counted as 32 bytes plus its text): 3.8 KB of ${big} references built 4.5 GB before.
constexpr std::size_t kMaxBuiltBytes = std::size_t{16} << 20;

// The size a node stands for, stopping once it passes `limit`.
std::size_t node_bytes(const YamlNode& n, std::size_t limit) {
  std::size_t total = 32 + n.value.size();
  for (const auto& e : n.entries) {
    if (total > limit) return total;
    total += e.key.value.size() + node_bytes(e.value, limit - std::min(limit, total));
  }
  for (const auto& i : n.items) {
    if (total > limit) return total;
    total += node_bytes(i, limit - std::min(limit, total));
  }
  return total;
}

// The end of the `${...}` that opens at `open` (the index of its '}'), nested ones counted; npos
// when it is not closed. Quoted text inside ('...', "...") is skipped.
std::size_t matching_close(const std::string& v, std::size_t open, int* nesting) {
  int depth = 0;
  char quote = 0;
  for (std::size_t i = open; i < v.size(); ++i) {
    const char c = v[i];
    if (quote) {
      if (c == '\\' && i + 1 < v.size()) ++i;
      else if (c == quote) quote = 0;
      continue;
    }
    if (c == '$' && i + 1 < v.size() && v[i + 1] == '{') {
      *nesting = std::max(*nesting, ++depth);
      ++i;
    } else if (c == '{') {
      ++depth;  // a flow mapping inside ${oc.create:{...}}
    } else if (c == '}') {
      if (--depth == 0) return i;
    } else if ((c == '\'' || c == '"') && depth > 0 && i > open + 2) {
      quote = c;
    }
  }
  return std::string::npos;
}

// Splits resolver arguments at the commas outside nested ${...}, [...], {...} and quotes.
std::vector<std::string> split_args(const std::string& args) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  char quote = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const char c = args[i];
    if (quote) {
      if (c == quote) quote = 0;
      cur += c;
      continue;
    }
    if (c == '\'' || c == '"') quote = c;
    else if (c == '{' || c == '[') ++depth;
    else if ((c == '}' || c == ']') && depth > 0) --depth;
    if (c == ',' && depth == 0) {
      out.push_back(trim(cur));
      cur.clear();
      continue;
    }
    cur += c;
  }
  out.push_back(trim(cur));
  return out;
}

std::string unquote(std::string s) {
  if (s.size() >= 2 && (s.front() == '\'' || s.front() == '"') && s.back() == s.front()) return s.substr(1, s.size() - 2);
  return s;
}

struct Resolver {
  YamlNode& root;
  LoadedConfig& out;
  std::vector<InterpolationWarning>& deferred;
  int resolutions = 0;
  std::string path;  // the key whose value is being resolved ("model.micro_batch_size")
  std::size_t built = 0;
  std::optional<Error> fatal;  // the budget or the depth exceeded: the config is refused

  SourceLocation where(const YamlNode& at) const {
    const auto i = static_cast<std::size_t>(at.source);
    return SourceLocation{i < out.files.size() ? out.files[i].path : std::string(), at.line, at.column};
  }

  // Kept with the key it concerns: said only if the dialect reads that key (a resolver in a
  // logging section memplan never reads cannot change the estimate).
  void warn(const YamlNode& at, std::string message, std::string suggestion = {}) {
    Error w = make_error(ErrorCode::kInvalidConfig, std::move(message), std::move(suggestion));
    w.where = where(at);
    deferred.push_back({path, std::move(w)});
  }

  // A value that cannot be resolved: the config is refused if the dialect reads its key (once
  // per key); a key memplan never reads keeps OmegaConf's laziness.
  void unresolvable(const YamlNode& at, std::string message) {
    if (!deferred.empty() && deferred.back().refuses && deferred.back().key == path) return;
    Error w = make_error(ErrorCode::kInvalidConfig, std::move(message), "write the value itself");
    w.where = where(at);
    deferred.push_back({path, std::move(w), true});
  }

  // The value of the config being resolved (not a copy some reference made): refusals point at
  // the line that asks for the copies.
  const YamlNode* top = nullptr;

  void refuse(const YamlNode& at, std::string message) {
    if (fatal) return;
    fatal = make_error(ErrorCode::kInvalidConfig, std::move(message),
                       "write the values themselves, or refer to smaller ones");
    fatal->where = where(top ? *top : at);
  }

  // Charges `bytes` built to the budget; false (and the config refused) once it is spent.
  bool charge(const YamlNode& at, std::size_t bytes) {
    built += bytes;
    if (built <= kMaxBuiltBytes) return true;
    refuse(at, fmt::format("OmegaConf interpolation here builds more than {} MiB of values (references that copy "
                           "large values many times); memplan refuses it",
                           kMaxBuiltBytes >> 20));
    return false;
  }

  // The node an interpolation names, and the chain of mappings from the root down to the one
  // that holds it (what its own relative references count from); `parents` is that chain for
  // the value being resolved.
  const YamlNode* target(const std::string& ref, const std::vector<const YamlNode*>& parents,
                         std::vector<const YamlNode*>* chain) {
    std::size_t dots = 0;
    while (dots < ref.size() && ref[dots] == '.') ++dots;
    const YamlNode* base = &root;
    chain->clear();
    if (dots > 0) {
      if (dots > parents.size()) return nullptr;
      chain->assign(parents.begin(), parents.end() - static_cast<std::ptrdiff_t>(dots - 1));
      base = chain->back();
      chain->pop_back();
    }
    const std::string rest = ref.substr(dots);
    if (rest.empty()) return base;
    const YamlNode* n = base;
    for (const auto& k : split_key_path(rest)) {
      if (n == nullptr || !n->is_map()) return nullptr;
      chain->push_back(n);
      n = n->get(k);
    }
    return n;
  }

  static YamlNode scalar_like(const YamlNode& at, const std::string& text) {
    YamlNode n = at;
    n.entries.clear();
    n.items.clear();
    n.kind = text == "null" ? YamlKind::kNull : YamlKind::kScalar;
    n.value = text == "null" ? std::string() : text;
    return n;
  }

  // A resolver's argument as a node: an interpolation in it resolved, quotes removed.
  std::optional<YamlNode> argument(const std::string& arg, const YamlNode& at,
                                   const std::vector<const YamlNode*>& parents, int depth) {
    YamlNode n = scalar_like(at, unquote(arg));
    if (arg.find("${") == std::string::npos) return n;
    if (!resolve_scalar(n, parents, depth + 1)) return std::nullopt;
    return n;
  }

  std::optional<YamlNode> resolver(const std::string& b, const std::string& name, const std::string& args,
                                   const YamlNode& at, const std::vector<const YamlNode*>& parents, int depth) {
    const std::vector<std::string> a = split_args(args);
    if (name == "oc.env" || name == "env") {
      const std::string var = a[0];
      if (a.size() < 2) {
        warn(at, fmt::format("${{{}}} depends on the environment variable {} of the run, which memplan does not "
                             "read; the value is treated as absent",
                             b, var),
             "write the value, or give it a default: ${oc.env:" + var + ",VALUE}");
        return std::nullopt;
      }
      auto def = argument(a[1], at, parents, depth);
      if (!def) return std::nullopt;
      warn(at, fmt::format("${{{}}} depends on the environment variable {}; memplan uses its default '{}'", b, var,
                           def->value));
      return def;
    }
    if (name == "oc.select") {
      std::vector<const YamlNode*> chain;
      if (const YamlNode* t = target(a[0], parents, &chain)) return copy_of(*t, chain, at, depth);
      if (a.size() < 2) return scalar_like(at, "null");  // OmegaConf's oc.select default is None
      return argument(a[1], at, parents, depth);
    }
    if (name == "oc.decode") {
      auto v = argument(args, at, parents, depth);
      if (!v) return std::nullopt;
      return decode(v->value, at);
    }
    if (name == "oc.create") {
      if (args.find("${") != std::string::npos) {
        warn(at, fmt::format("${{{}}}: memplan evaluates oc.create only on a literal mapping or list", b),
             "write the value itself");
        return std::nullopt;
      }
      return decode(args, at);
    }
    warn(at, fmt::format("the OmegaConf resolver in ${{{}}} is not evaluated by memplan; the value is treated as "
                         "absent",
                         b),
         "write the value itself");
    return std::nullopt;
  }

  // A string read as YAML (oc.decode, oc.create): a scalar, or a flow mapping or list.
  std::optional<YamlNode> decode(const std::string& text, const YamlNode& at) {
    auto doc = parse_yaml("v: " + text + "\n", "oc.decode");
    const YamlNode* v = doc ? doc->root.get("v") : nullptr;
    if (v == nullptr) {
      warn(at, fmt::format("'{}' is not a YAML value; the value is treated as absent", text));
      return std::nullopt;
    }
    YamlNode n = *v;
    const std::function<void(YamlNode&)> place = [&](YamlNode& x) {
      x.line = at.line;
      x.column = at.column;
      x.source = at.source;
      x.begin = x.end = YamlNode::npos;
      for (auto& e : x.entries) place(e.value);
      for (auto& i : x.items) place(i);
    };
    place(n);
    return n;
  }

  // A copy of the node `t` (held by the mappings `chain`), its own interpolations resolved.
  std::optional<YamlNode> copy_of(const YamlNode& t, const std::vector<const YamlNode*>& chain, const YamlNode& at,
                                  int depth) {
    if (!charge(at, node_bytes(t, kMaxBuiltBytes))) return std::nullopt;
    YamlNode copy = t;
    // The target may interpolate in turn, relative to where it is written.
    // Past the depth bound the value is refused, never treated as absent: a key memplan reads
    // would silently take its default (issue 34: ${a39} of doubling ${a38}${a38} read as batch 8).
    if (depth >= kMaxDepth) {
      unresolvable(at, fmt::format("interpolation ${{{}}} nests more than {} interpolations deep; memplan refuses it",
                                   current, kMaxDepth));
      return std::nullopt;
    }
    resolve(copy, chain, depth + 1, path);
    if (fatal) return std::nullopt;
    return copy;
  }

  std::string current;  // the body being resolved, for messages
  std::vector<const YamlNode*> active;  // the targets being resolved, outermost first (cycles)

  // Resolves one `${...}` body. Returns the replacement node, or nullptr when it cannot be
  // resolved (a warning has been given).
  std::optional<YamlNode> body(const std::string& inner, const YamlNode& at, const std::vector<const YamlNode*>& parents,
                               int depth) {
    const std::string b = trim(inner);
    if (fatal) return std::nullopt;
    if (++resolutions > kMaxResolutions) {
      unresolvable(at, fmt::format("more than {} interpolations to resolve (references that repeat references); "
                                   "memplan refuses it",
                                   kMaxResolutions));
      return std::nullopt;
    }
    if (b.empty() || b.find_first_not_of('.') == std::string::npos) {
      warn(at, fmt::format("interpolation ${{{}}} names a whole mapping that holds it", b));
      return std::nullopt;
    }
    const auto colon = b.find(':');
    // A key path has no ':'; `name:` before one is a resolver: oc.env, oc.select, oc.decode, and
    // custom ones registered by the training code (NeMo's multiply, sum, ...).
    const bool is_resolver = colon != std::string::npos && colon > 0 &&
                             std::all_of(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(colon), [](char ch) {
                               return std::isalnum(static_cast<unsigned char>(ch)) != 0 || ch == '_' || ch == '.';
                             });
    if (is_resolver) return resolver(b, b.substr(0, colon), b.substr(colon + 1), at, parents, depth);
    std::vector<const YamlNode*> chain;
    const YamlNode* t = target(b, parents, &chain);
    if (t == nullptr) {
      warn(at, fmt::format("interpolation ${{{}}}: no key '{}' in the config", b, b));
      return std::nullopt;
    }
    // A reference to a value being resolved is a cycle (OmegaConf raises on it when resolving).
    if (std::find(active.begin(), active.end(), t) != active.end()) {
      unresolvable(at, fmt::format("interpolation ${{{}}} refers to itself", b));
      return std::nullopt;
    }
    const std::string outer = current;
    current = b;
    active.push_back(t);
    auto r = copy_of(*t, chain, at, depth);
    active.pop_back();
    current = outer;
    return r;
  }

  // Replaces interpolations in `n` (recursively). Returns false when a value could not be
  // resolved and was made null.
  bool resolve(YamlNode& n, std::vector<const YamlNode*> parents, int depth, const std::string& key) {
    if (fatal) return false;
    if (n.is_map()) {
      parents.push_back(&n);
      for (auto& e : n.entries) resolve(e.value, parents, depth, key.empty() ? e.key.value : key + "." + e.key.value);
      return true;
    }
    if (n.kind == YamlKind::kSeq) {
      for (auto& i : n.items) resolve(i, parents, depth, key);  // a list's items are read with the list
      return true;
    }
    if (!n.is_scalar() || n.value.find("${") == std::string::npos) return true;
    const std::string outer = path;
    path = key;
    if (depth == 0) top = &n;
    const bool ok = resolve_scalar(n, parents, depth);
    if (depth == 0) top = nullptr;
    path = outer;
    return ok;
  }

  static void make_absent(YamlNode& n) {
    n.kind = YamlKind::kNull;
    n.value.clear();
    n.begin = n.end = YamlNode::npos;
  }

  bool resolve_scalar(YamlNode& n, const std::vector<const YamlNode*>& parents, int depth) {
    const std::string v = n.value;
    int nesting = 0;
    const std::size_t first_close = v.rfind("${", 0) == 0 ? matching_close(v, 0, &nesting) : std::string::npos;
    if (nesting > kMaxDepth || depth > kMaxDepth) {
      refuse(n, fmt::format("OmegaConf interpolations nested more than {} deep; memplan refuses them", kMaxDepth));
      make_absent(n);
      return false;
    }
    // The whole value is one interpolation: the target node replaces it, type and all.
    if (first_close == v.size() - 1) {
      auto r = body(v.substr(2, v.size() - 3), n, parents, depth);
      if (!r) {
        make_absent(n);
        return false;
      }
      const int line = n.line, column = n.column, source = n.source;
      n = std::move(*r);
      n.line = line;
      n.column = column;
      n.source = source;
      n.begin = n.end = YamlNode::npos;  // not the characters of the file: --apply must not edit it
      return true;
    }
    // String interpolation: concatenate the pieces.
    std::string result;
    std::size_t pos = 0;
    while (pos < v.size()) {
      const std::size_t open = v.find("${", pos);
      if (open == std::string::npos) {
        result += v.substr(pos);
        break;
      }
      nesting = 0;
      const std::size_t close = matching_close(v, open, &nesting);
      if (close == std::string::npos) {
        result += v.substr(pos);
        break;
      }
      if (nesting > kMaxDepth) {
        refuse(n, fmt::format("OmegaConf interpolations nested more than {} deep; memplan refuses them", kMaxDepth));
        make_absent(n);
        return false;
      }
      result += v.substr(pos, open - pos);
      auto r = body(v.substr(open + 2, close - open - 2), n, parents, depth);
      if (!r) {
        make_absent(n);
        return false;
      }
      if (!r->is_scalar() && !r->is_null()) {
        warn(n, fmt::format("interpolation in '{}' names a mapping or list inside a string", v));
        return false;
      }
      if (!charge(n, r->value.size())) {
        make_absent(n);
        return false;
      }
      result += r->value;
      pos = close + 1;
    }
    n.value = result;
    n.begin = n.end = YamlNode::npos;
    return true;
  }
};

}  // namespace

Status resolve_interpolations(YamlNode& root, LoadedConfig& out, std::vector<InterpolationWarning>& warnings) {
  // Resolve against a snapshot, so that every reference sees the values as written (OmegaConf
  // resolves lazily from the unresolved tree too).
  YamlNode snapshot = root;
  Resolver r{snapshot, out, warnings};
  r.resolve(root, {}, 0, "");
  if (r.fatal) return *r.fatal;
  return Ok{};
}

}  // namespace memplan::io

// OmegaConf interpolation (`${a.b}`), which Hydra, LLM Foundry, torchtune and NeMo configs use:
// resolved on the merged tree the way OmegaConf resolves it when the trainer reads the value.
//   ${a.b}          the node at that absolute path (its type kept: an int stays an int)
//   ${.x} ${..x}    relative to the mapping that holds the value (one dot per level up)
//   "p${a}q"        string interpolation: the pieces concatenated
//   ${oc.env:X,d}   an environment variable: memplan does not read the environment of the run,
//                   so it takes the default `d` and says the value is environment-dependent
// Other resolvers (${eval:...}, custom ones) are left unresolved with a warning; the value is
// then treated as absent (the dialect's default applies and is shown as such).
#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "io/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

constexpr int kMaxDepth = 32;
// Interpolations resolved in one config, at most: references that fan out (a: [${b}, ${b}],
// b: [${a}, ${a}]) would otherwise grow exponentially with the depth.
constexpr int kMaxResolutions = 10000;

struct Resolver {
  YamlNode& root;
  LoadedConfig& out;
  std::vector<InterpolationWarning>& deferred;
  int resolutions = 0;
  std::string path;  // the key whose value is being resolved ("model.micro_batch_size")

  // Kept with the key it concerns: said only if the dialect reads that key (a resolver in a
  // logging section memplan never reads cannot change the estimate).
  void warn(const YamlNode& at, std::string message, std::string suggestion = {}) {
    Error w = make_error(ErrorCode::kInvalidConfig, std::move(message), std::move(suggestion));
    const auto i = static_cast<std::size_t>(at.source);
    w.where = SourceLocation{i < out.files.size() ? out.files[i].path : std::string(), at.line, at.column};
    deferred.push_back({path, std::move(w)});
  }

  // The node an interpolation names; `parents` is the chain of mappings from the root down to
  // the one holding the value.
  const YamlNode* target(const std::string& ref, const std::vector<const YamlNode*>& parents) {
    std::size_t dots = 0;
    while (dots < ref.size() && ref[dots] == '.') ++dots;
    const YamlNode* base = &root;
    if (dots > 0) {
      if (dots > parents.size()) return nullptr;
      base = parents[parents.size() - dots];
    }
    const std::string rest = ref.substr(dots);
    if (rest.empty()) return base;
    return base->at(split_key_path(rest));
  }

  // Resolves one `${...}` body. Returns the replacement node, or nullptr when it cannot be
  // resolved (a warning has been given).
  std::optional<YamlNode> body(const std::string& inner, const YamlNode& at, const std::vector<const YamlNode*>& parents,
                               int depth) {
    const std::string b = trim(inner);
    if (++resolutions > kMaxResolutions) {
      if (resolutions == kMaxResolutions + 1)
        warn(at, fmt::format("more than {} interpolations to resolve (they refer to each other); the rest are "
                             "treated as absent",
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
    const bool resolver = colon != std::string::npos && colon > 0 &&
                          std::all_of(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(colon), [](char ch) {
                            return std::isalnum(static_cast<unsigned char>(ch)) != 0 || ch == '_' || ch == '.';
                          });
    if (resolver) {
      // A resolver: oc.env, oc.select, oc.decode, ...
      const std::string name = b.substr(0, colon);
      const std::string args = b.substr(colon + 1);
      if (name == "oc.env" || name == "env") {
        const auto comma = args.find(',');
        const std::string var = trim(args.substr(0, comma));
        if (comma == std::string::npos) {
          warn(at, fmt::format("${{{}}} depends on the environment variable {} of the run, which memplan does not "
                               "read; the value is treated as absent",
                               b, var),
               "write the value, or give it a default: ${oc.env:" + var + ",VALUE}");
          return std::nullopt;
        }
        std::string def = trim(args.substr(comma + 1));
        if (def.size() >= 2 && (def.front() == '\'' || def.front() == '"') && def.back() == def.front())
          def = def.substr(1, def.size() - 2);
        warn(at, fmt::format("${{{}}} depends on the environment variable {}; memplan uses its default '{}'", b, var,
                             def));
        YamlNode n = at;
        n.entries.clear();
        n.items.clear();
        n.kind = def == "null" ? YamlKind::kNull : YamlKind::kScalar;
        n.value = def == "null" ? std::string() : def;
        return n;
      }
      warn(at, fmt::format("the OmegaConf resolver in ${{{}}} is not evaluated by memplan; the value is treated as "
                           "absent",
                           b),
           "write the value itself");
      return std::nullopt;
    }
    const YamlNode* t = target(b, parents);
    if (t == nullptr) {
      warn(at, fmt::format("interpolation ${{{}}}: no key '{}' in the config", b, b));
      return std::nullopt;
    }
    YamlNode copy = *t;
    // The target may interpolate in turn.
    if (depth >= kMaxDepth) {
      warn(at, fmt::format("interpolation ${{{}}} refers to itself", b));
      return std::nullopt;
    }
    if (!resolve(copy, {&root}, depth + 1, path)) return std::nullopt;
    return copy;
  }

  // Replaces interpolations in `n` (recursively). Returns false when a value could not be
  // resolved and was made null.
  bool resolve(YamlNode& n, std::vector<const YamlNode*> parents, int depth, const std::string& key) {
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
    const bool ok = resolve_scalar(n, parents, depth);
    path = outer;
    return ok;
  }

  bool resolve_scalar(YamlNode& n, const std::vector<const YamlNode*>& parents, int depth) {
    const std::string v = n.value;
    // The whole value is one interpolation: the target node replaces it, type and all.
    if (v.rfind("${", 0) == 0 && v.back() == '}' && v.find("${", 2) == std::string::npos &&
        v.find('}') == v.size() - 1) {
      auto r = body(v.substr(2, v.size() - 3), n, parents, depth);
      if (!r) {
        n.kind = YamlKind::kNull;
        n.value.clear();
        n.begin = n.end = YamlNode::npos;
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
      const std::size_t close = v.find('}', open);
      if (close == std::string::npos) {
        result += v.substr(pos);
        break;
      }
      result += v.substr(pos, open - pos);
      auto r = body(v.substr(open + 2, close - open - 2), n, parents, depth);
      if (!r) {
        n.kind = YamlKind::kNull;
        n.value.clear();
        n.begin = n.end = YamlNode::npos;
        return false;
      }
      if (!r->is_scalar() && !r->is_null()) {
        warn(n, fmt::format("interpolation in '{}' names a mapping or list inside a string", v));
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
  Resolver r{snapshot, out, warnings, 0, {}};
  r.resolve(root, {}, 0, "");
  return Ok{};
}

}  // namespace memplan::io

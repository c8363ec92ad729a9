#include "io/config/hydra.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "io/config/toml.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

namespace stdfs = std::filesystem;

Error located(const std::string& file, int line, std::string message, std::string suggestion = {}) {
  Error e = make_error(ErrorCode::kInvalidConfig, std::move(message), std::move(suggestion));
  e.where = SourceLocation{file, line, 0};
  return e;
}

std::vector<std::string> split_on(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t p = s.find(sep, start);
    const std::string part(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (!part.empty()) out.push_back(part);
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  return out;
}

std::string join_group(const std::vector<std::string>& parts) { return fmt::format("{}", fmt::join(parts, "/")); }

// `# @package X` among the comment lines before the first key (Hydra's package header).
std::optional<std::string> package_header(const std::string& text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = trim(std::string_view(text).substr(pos, nl - pos));
    pos = nl + 1;
    if (line.empty()) continue;
    if (line[0] != '#') break;
    const std::string body = trim(std::string_view(line).substr(1));
    if (body.rfind("@package", 0) == 0) return trim(std::string_view(body).substr(8));
  }
  return std::nullopt;
}

bool is_file_path(std::string_view s) {
  return s.ends_with(".yaml") || s.ends_with(".yml") || s.rfind("./", 0) == 0 || s.rfind("../", 0) == 0;
}

// One entry of a defaults list.
struct Entry {
  enum class Kind { kSelf, kGroup, kFile } kind = Kind::kGroup;
  std::vector<std::string> group;    // absolute group path ({"text_curriculum"})
  std::vector<std::string> written;  // the group as written, relative to the containing file's
  bool absolute = false;             // written with a leading `/`
  std::vector<std::string> options;  // empty: `group: null`
  bool mandatory_missing = false;    // `group: ???`
  std::string interpolated;          // `group: ${x}`: chosen at run time, unless the command line does
  bool optional = false;
  bool override_entry = false;
  bool fixed = false;                // `- db/mysql`: a config path, not a choice the command line changes
  std::optional<std::string> package;  // `group@pkg`
  std::string file;                  // kFile: as written
  int line = 0;
};

struct Override {
  std::string text;
  std::vector<std::string> group;
  std::vector<std::string> options;
  bool append = false;    // `+group=option`
  bool remove = false;    // `~group`
  bool used = false;
};

class Composer {
 public:
  Composer(FileSystem& fs, std::string root_dir) : fs_(fs), root_dir_(std::move(root_dir)) { dirs_.push_back(root_dir_); }

  // `hydra.searchpath: [file://DIR]`: DIR as the trainer resolves it (from its working
  // directory), tried from here and from the config's directory and its parents.
  Status add_search_path(const YamlNode& root) {
    const YamlNode* hydra = root.get("hydra");
    const YamlNode* sp = hydra != nullptr && hydra->is_map() ? hydra->get("searchpath") : nullptr;
    if (sp == nullptr || sp->kind != YamlKind::kSeq) return Ok{};
    for (const auto& item : sp->items) {
      if (!item.is_scalar()) continue;
      std::string dir = trim(item.value);
      if (dir.rfind("file://", 0) != 0) {
        searchpaths_.push_back(dir);  // pkg://: a Python package memplan cannot look into
        continue;
      }
      dir = dir.substr(7);
      std::vector<stdfs::path> candidates{stdfs::path(dir)};
      if (!stdfs::path(dir).is_absolute()) {
        stdfs::path up(root_dir_);
        for (int i = 0; i < 8; ++i) {
          candidates.push_back(up / dir);
          if (!up.has_relative_path() || up == up.parent_path()) break;
          up = up.parent_path();
        }
      }
      // No directory listing here (the file system may be a test's): every candidate is tried.
      for (const auto& c : candidates) dirs_.push_back(c.lexically_normal().string());
      searchpaths_.push_back(item.value);
    }
    return Ok{};
  }

  std::vector<Override> command_line;
  std::vector<HydraLayer> layers;
  std::vector<Error> not_followed;

  Status expand(const std::string& path, std::string text, FileInfo info, YamlDoc doc,
                const std::vector<std::string>& group, const std::vector<std::string>& package, int depth,
                bool primary) {
    const std::string key = stdfs::path(path).lexically_normal().string();
    if (std::find(stack_.begin(), stack_.end(), key) != stack_.end()) {
      std::vector<std::string> chain = stack_;
      chain.push_back(key);
      return make_error(ErrorCode::kInvalidConfig,
                        fmt::format("Hydra defaults lists form a cycle: {}", fmt::join(chain, " -> ")),
                        "remove the entry that points back");
    }
    if (depth > kHydraMaxDepth)
      return make_error(ErrorCode::kInvalidConfig,
                        fmt::format("Hydra defaults lists nest deeper than {} files at {}", kHydraMaxDepth, path));
    if (static_cast<int>(layers.size()) >= kHydraMaxLayers)
      return make_error(ErrorCode::kInvalidConfig,
                        fmt::format("the Hydra composition reads more than {} files (at {})", kHydraMaxLayers, path));

    std::vector<Entry> entries;
    if (doc.root.is_map()) {
      auto it = std::find_if(doc.root.entries.begin(), doc.root.entries.end(),
                             [](const YamlEntry& e) { return e.key.is_scalar() && e.key.value == "defaults"; });
      if (it != doc.root.entries.end()) {
        MEMPLAN_TRY(entries, parse_defaults(path, it->value, group));
        doc.root.entries.erase(it);
      }
    }
    if (entries.empty()) {
      layers.push_back(HydraLayer{path, std::move(text), info, std::move(doc), package});
      return Ok{};
    }
    // The config's own content goes last unless `_self_` says where (Hydra >= 1.1).
    if (std::none_of(entries.begin(), entries.end(), [](const Entry& e) { return e.kind == Entry::Kind::kSelf; }))
      entries.emplace_back().kind = Entry::Kind::kSelf;
    // The primary's `+group=option` overrides append to its list.
    if (primary)
      for (auto& o : command_line)
        if (o.append && !o.remove) {
          Entry e;
          e.group = o.group;
          e.written = o.group;
          e.options = o.options;
          e.fixed = true;
          o.used = true;
          entries.push_back(std::move(e));
        }
    // `override` entries choose for groups that this file's (or its children's) entries select; an
    // outer file's choice wins over an inner one's, the command line over all.
    for (const Entry& e : entries)
      if (e.override_entry && !selected_.contains(join_group(e.group)))
        selected_[join_group(e.group)] = Selection{e.options, path, e.line, false};

    stack_.push_back(key);
    HydraLayer self{path, std::move(text), info, std::move(doc), package};
    bool self_done = false;
    for (const Entry& e : entries) {
      if (e.kind == Entry::Kind::kSelf) {
        if (!self_done) layers.push_back(std::move(self));
        self_done = true;
        continue;
      }
      if (e.override_entry) continue;
      if (e.kind == Entry::Kind::kFile) {
        const std::string file = (stdfs::path(path).parent_path() / e.file).lexically_normal().string();
        MEMPLAN_TRY(FileInfo fi, fs_.stat(file));
        if (!fi.exists) {
          if (e.optional) continue;
          return located(path, e.line, fmt::format("defaults: '{}' not found (looked for {})", e.file, file),
                         "paths in a defaults list are relative to the file that names them");
        }
        if (auto st = load_and_expand(file, group, package, depth, path, e.line); !st) return st.error();
        continue;
      }
      std::vector<std::string> options = e.options;
      bool mandatory_missing = e.mandatory_missing;
      const std::string gname = join_group(e.group);
      if (!e.fixed) {
        if (auto it = selected_.find(gname); it != selected_.end()) {
          options = it->second.options;
          mandatory_missing = false;
          it->second.used = true;
        }
        for (auto& o : command_line)
          if (!o.append && join_group(o.group) == gname) {
            o.used = true;
            options = o.remove ? std::vector<std::string>{} : o.options;
            mandatory_missing = false;
          }
      }
      if (!e.interpolated.empty() && options.empty() && !mandatory_missing) {
        bool chosen = false;
        for (const auto& o : command_line) chosen = chosen || (!o.append && join_group(o.group) == gname);
        if (!chosen && !selected_.contains(gname)) {
          not_followed.push_back(located(
              path, e.line,
              fmt::format("defaults: '{}: {}' is not followed (an interpolation chooses the file at run time)", gname,
                          e.interpolated),
              fmt::format("choose the option on the command line: {}=OPTION", gname)));
          continue;
        }
      }
      if (mandatory_missing)
        return located(path, e.line, fmt::format("defaults: group '{}' has no option (?\?\?)", gname),
                       fmt::format("choose one on the command line: {}=OPTION", gname));
      for (const std::string& option : options) {
        std::vector<std::string> where = e.group;
        for (const auto& p : split_on(option, '/')) where.push_back(p);
        std::string file;
        for (const auto& dir : dirs_)
          for (const char* ext : {".yaml", ".yml"}) {
            if (!file.empty()) break;
            const std::string c = (stdfs::path(dir) / (join_group(where) + ext)).lexically_normal().string();
            MEMPLAN_TRY(FileInfo fi, fs_.stat(c));
            if (fi.exists) file = c;
          }
        if (file.empty()) {
          if (e.optional) continue;
          // Hydra would stop; the trainer may find it on a config path given on its command line.
          // Either way the composition misses a file: a warning, and --apply refuses.
          std::string looked = (stdfs::path(root_dir_) / (join_group(where) + ".yaml")).lexically_normal().string();
          if (!searchpaths_.empty())
            looked += fmt::format(" and under hydra.searchpath {}", fmt::join(searchpaths_, ", "));
          not_followed.push_back(located(
              path, e.line,
              fmt::format("defaults: no config '{}' in group '{}' (looked for {}); it is not followed", option,
                          gname.empty() ? std::string("(top)") : gname, looked),
              "check the option's spelling, run memplan where the trainer runs, or pass that file with --config"));
          continue;
        }
        // Package: the header's (absolute), else `group@pkg` (relative to this file's), else the
        // group path under this file's package.
        std::vector<std::string> pkg = package;
        if (e.package) {
          if (*e.package == "_global_") pkg.clear();
          else if (e.package->rfind("_global_.", 0) == 0) pkg = split_key_path(e.package->substr(9));
          else if (*e.package != "_here_")
            for (const auto& p : split_key_path(*e.package)) pkg.push_back(p);
        } else if (e.absolute) {
          pkg = e.group;
        } else {
          for (const auto& p : e.written) pkg.push_back(p);
        }
        if (auto st = load_and_expand(file, e.group, pkg, depth, path, e.line, /*group_config=*/true); !st) return st.error();
      }
    }
    stack_.pop_back();
    return Ok{};
  }

  // Overrides from a defaults list that selected nothing (Hydra refuses them too).
  Status check_unused() const {
    for (const auto& [g, s] : selected_)
      if (!s.used && !s.file.empty())
        return located(s.file, s.line, fmt::format("defaults: override '{}' matches no group in the defaults list", g),
                       "remove it, or add the group without `override`");
    return Ok{};
  }

 private:
  struct Selection {
    std::vector<std::string> options;
    std::string file;
    int line = 0;
    bool used = false;
  };

  Status load_and_expand(const std::string& file, const std::vector<std::string>& group,
                         std::vector<std::string> package, int depth, const std::string& from, int from_line,
                         bool group_config = false) {
    MEMPLAN_TRY(std::string text, fs_.read_file(file));
    MEMPLAN_TRY(FileInfo info, fs_.stat(file));
    MEMPLAN_TRY(YamlDoc doc, parse_config_text(text, file));
    if (!doc.root.is_map() && !doc.root.is_null())
      return located(file, doc.root.line, "a config composed by a defaults list must be a mapping of keys",
                     fmt::format("named at {}:{}", from, from_line));
    if (doc.root.is_null()) doc.root.kind = YamlKind::kMap;
    if (group_config)
      if (auto header = package_header(text)) {
        if (*header == "_global_") package.clear();
        else if (header->rfind("_global_.", 0) == 0) package = split_key_path(header->substr(9));
        else if (*header == "_group_") package = group;
        else if (!header->empty()) package = split_key_path(*header);
      }
    return expand(file, std::move(text), info, std::move(doc), group, package, depth + 1, false);
  }

  Result<std::vector<Entry>> parse_defaults(const std::string& path, const YamlNode& n,
                                            const std::vector<std::string>& group) {
    std::vector<Entry> out;
    auto group_path = [&](std::string_view written) {
      std::vector<std::string> g;
      if (!written.starts_with('/')) g = group;
      for (const auto& p : split_on(written, '/')) g.push_back(p);
      return g;
    };
    auto set_group = [&](Entry& e, std::string_view written) {
      e.absolute = written.starts_with('/');
      e.written = split_on(written, '/');
      e.group = group_path(written);
    };
    auto scalar_entry = [&](const YamlNode& item) -> Result<Entry> {
      Entry e;
      e.line = item.line;
      const std::string v = trim(item.value);
      if (v == "_self_") {
        e.kind = Entry::Kind::kSelf;
      } else if (is_file_path(v)) {
        e.kind = Entry::Kind::kFile;
        e.file = v;
      } else {
        // `- db/mysql`: a config path; the option is its last part.
        std::string body = v;
        if (auto at = body.find('@'); at != std::string::npos) {
          e.package = body.substr(at + 1);
          body = body.substr(0, at);
        }
        auto parts = split_on(body, '/');
        if (parts.empty()) return located(path, item.line, fmt::format("defaults: empty entry '{}'", v));
        e.options = {parts.back()};
        const std::string_view dir(body.data(), body.rfind('/') == std::string::npos ? 0 : body.rfind('/'));
        set_group(e, dir);
        if (body.starts_with('/')) e.absolute = true;
        e.fixed = true;
      }
      return e;
    };
    if (n.is_null()) return out;
    if (n.is_scalar()) {  // NeMo-RL: `defaults: ../../base.yaml`
      MEMPLAN_TRY(Entry e, scalar_entry(n));
      out.push_back(std::move(e));
      return out;
    }
    if (n.kind != YamlKind::kSeq)
      return located(path, n.line, "defaults must be a list (`- group: option`, `- _self_`) or a file path");
    for (const YamlNode& item : n.items) {
      if (item.is_scalar()) {
        MEMPLAN_TRY(Entry e, scalar_entry(item));
        out.push_back(std::move(e));
        continue;
      }
      if (!item.is_map() || item.entries.size() != 1 || !item.entries[0].key.is_scalar())
        return located(path, item.line, "a defaults entry is `- group: option`, `- _self_` or `- path/to/config`");
      const YamlEntry& kv = item.entries[0];
      Entry e;
      e.line = kv.key.line;
      std::string k = trim(kv.key.value);
      for (;;) {
        if (k.rfind("optional ", 0) == 0) {
          e.optional = true;
          k = trim(std::string_view(k).substr(9));
        } else if (k.rfind("override ", 0) == 0) {
          e.override_entry = true;
          k = trim(std::string_view(k).substr(9));
        } else {
          break;
        }
      }
      if (auto at = k.find('@'); at != std::string::npos) {
        e.package = k.substr(at + 1);
        k = k.substr(0, at);
      }
      set_group(e, k);
      if (e.written.empty()) return located(path, e.line, "defaults: an entry without a group name");
      const YamlNode& v = kv.value;
      if (v.is_null()) {
      } else if (v.is_scalar()) {
        if (trim(v.value) == "???") e.mandatory_missing = true;
        else if (v.value.find("${") != std::string::npos)
          e.interpolated = v.value;
        else e.options = {trim(v.value)};
      } else if (v.kind == YamlKind::kSeq) {
        for (const auto& o : v.items) {
          if (!o.is_scalar()) return located(path, o.line, "defaults: a list of options holds option names");
          e.options.push_back(trim(o.value));
        }
      } else {
        return located(path, v.line, fmt::format("defaults: the option of '{}' must be a name", k));
      }
      out.push_back(std::move(e));
    }
    return out;
  }

  FileSystem& fs_;
  std::string root_dir_;
  std::vector<std::string> stack_;
  std::vector<std::string> dirs_;        // the config directory, then hydra.searchpath's
  std::vector<std::string> searchpaths_;  // hydra.searchpath as written
  std::map<std::string, Selection> selected_;
};

struct ParsedOverride {
  std::string prefix;  // "", "+", "++", "~"
  std::string key;
  std::optional<std::string> value;
};

std::optional<ParsedOverride> parse_override(std::string_view w) {
  ParsedOverride p;
  if (w.starts_with("++")) p.prefix = "++";
  else if (w.starts_with('+')) p.prefix = "+";
  else if (w.starts_with('~')) p.prefix = "~";
  w.remove_prefix(p.prefix.size());
  const auto eq = w.find('=');
  p.key = std::string(w.substr(0, eq));
  if (eq != std::string_view::npos) p.value = std::string(w.substr(eq + 1));
  if (p.key.empty()) return std::nullopt;
  for (char c : p.key)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' || c == '-' || c == '@'))
      return std::nullopt;
  if (!std::isalpha(static_cast<unsigned char>(p.key[0])) && p.key[0] != '_') return std::nullopt;
  if (!p.value && p.prefix != "~") return std::nullopt;
  return p;
}

}  // namespace

bool is_override(std::string_view word) { return parse_override(word).has_value(); }

Result<HydraComposition> compose_hydra(const std::string& path, std::string text, FileInfo info, YamlDoc doc,
                                       const std::vector<std::string>& overrides, FileSystem& fs) {
  const std::string root_dir = stdfs::path(path).parent_path().string();
  Composer c(fs, root_dir);
  for (const auto& w : overrides) {
    auto p = parse_override(w);
    if (!p)
      return make_error(ErrorCode::kInvalidArgument, fmt::format("override '{}' is not KEY=VALUE", w),
                        "write a.b=VALUE, +a.b=VALUE to add a key, ~a.b to remove one, or group=option");
    if (p->prefix == "++" || p->key.find('.') != std::string::npos) continue;  // always a value
    Override o;
    o.text = w;
    o.group = split_on(p->key, '/');
    o.remove = p->prefix == "~";
    if (p->value && *p->value != "null") o.options = {*p->value};
    if (p->prefix == "+") {
      // `+group=option` adds a group when the group's file exists; else it adds a value.
      MEMPLAN_TRY(FileInfo fi, fs.stat((stdfs::path(root_dir) / (p->key + "/" + *p->value + ".yaml")).string()));
      if (!fi.exists) continue;
      o.append = true;
    }
    c.command_line.push_back(std::move(o));
  }
  if (auto st = c.add_search_path(doc.root); !st) return st.error();
  if (auto st = c.expand(path, std::move(text), info, std::move(doc), {}, {}, 0, true); !st) return st.error();
  if (auto st = c.check_unused(); !st) return st.error();
  HydraComposition out;
  out.layers = std::move(c.layers);
  out.not_followed = std::move(c.not_followed);
  for (const auto& w : overrides) {
    const bool group = std::any_of(c.command_line.begin(), c.command_line.end(),
                                   [&](const Override& o) { return o.used && o.text == w; });
    if (!group) out.value_overrides.push_back(w);
  }
  return out;
}

namespace {

void set_all(YamlNode& n, int source, int line) {
  n.source = source;
  n.line = line;
  n.column = 0;
  n.begin = n.end = YamlNode::npos;
  for (auto& e : n.entries) {
    set_all(e.key, source, line);
    set_all(e.value, source, line);
  }
  for (auto& i : n.items) set_all(i, source, line);
}

std::vector<std::string> keys_of(const YamlNode& n) {
  std::vector<std::string> out;
  if (n.is_map())
    for (const auto& e : n.entries)
      if (e.key.is_scalar()) out.push_back(e.key.value);
  return out;
}

}  // namespace

Status apply_value_overrides(YamlNode& tree, const std::vector<std::string>& overrides, int source,
                             const std::string& label) {
  int line = 0;
  for (const auto& w : overrides) {
    ++line;
    auto p = parse_override(w);
    auto fail = [&](std::string msg, std::string suggestion = {}) {
      Error e = make_error(ErrorCode::kInvalidArgument, std::move(msg), std::move(suggestion));
      e.where = SourceLocation{label, line, 0};
      return e;
    };
    if (!p)
      return fail(fmt::format("override '{}' is not KEY=VALUE", w),
                  "write a.b=VALUE, +a.b=VALUE to add a key, ~a.b to remove one, or group=option");
    const std::vector<std::string> path = split_key_path(p->key);
    YamlNode* n = &tree;
    for (std::size_t i = 0; i + 1 < path.size(); ++i) {
      YamlNode* next = n->get(path[i]);
      if (next == nullptr || !next->is_map()) {
        if (p->prefix != "+" && p->prefix != "++")
          return fail(fmt::format("cannot override '{}': '{}' is not in the composed config", p->key,
                                  join_key_path(std::vector<std::string>(path.begin(), path.begin() + static_cast<std::ptrdiff_t>(i) + 1))),
                      fmt::format("to add it, write +{}={}; {}", p->key, p->value.value_or(""),
                                  did_you_mean(path[i], keys_of(*n))));
        if (next == nullptr) {
          YamlEntry e;
          e.key.kind = YamlKind::kScalar;
          e.key.value = path[i];
          e.value.kind = YamlKind::kMap;
          set_all(e.key, source, line);
          set_all(e.value, source, line);
          n->entries.push_back(std::move(e));
          next = &n->entries.back().value;
        } else {
          next->kind = YamlKind::kMap;
          next->value.clear();
          next->items.clear();
        }
      }
      n = next;
    }
    const std::string& last = path.back();
    auto it = std::find_if(n->entries.rbegin(), n->entries.rend(),
                           [&](const YamlEntry& e) { return e.key.is_scalar() && e.key.value == last; });
    const bool exists = it != n->entries.rend();
    if (p->prefix == "~") {
      if (!exists) return fail(fmt::format("cannot remove '{}': it is not in the composed config", p->key));
      n->entries.erase(std::next(it).base());
      continue;
    }
    if (p->prefix.empty() && !exists)
      return fail(fmt::format("cannot override '{}': it is not in the composed config", p->key),
                  fmt::format("to add it, write +{}={}{}", p->key, *p->value,
                              did_you_mean(last, keys_of(*n)).empty() ? "" : "; " + did_you_mean(last, keys_of(*n))));
    if (p->prefix == "+" && exists)
      return fail(fmt::format("cannot add '{}': it is already in the composed config", p->key),
                  fmt::format("write {}={} to change it", p->key, *p->value));
    MEMPLAN_TRY(YamlDoc v, parse_yaml("v: " + *p->value + "\n", label));
    YamlEntry e;
    e.key.kind = YamlKind::kScalar;
    e.key.value = last;
    if (const YamlNode* value = v.root.get("v")) e.value = *value;
    set_all(e.key, source, line);
    set_all(e.value, source, line);
    if (exists) *it = std::move(e);
    else n->entries.push_back(std::move(e));
  }
  return Ok{};
}

}  // namespace memplan::io

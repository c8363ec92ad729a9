#include "io/stack_source.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "io/fs.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace fs = std::filesystem;

namespace {

Origin file_origin(const std::string& path, int line) {
  Origin o;
  o.kind = OriginKind::kFile;
  o.loc = SourceLocation{path, line, 0};
  return o;
}

// Records `name version` from a source when `name` is a library memplan has rules for and the
// version parses; a pin that does not parse is said, not guessed.
void add(StackSources& out, std::string_view name, std::string_view version_text, Origin origin) {
  const auto lib = library_from_name(name);
  if (!lib || out.stack.has(*lib)) return;
  auto v = parse_version(version_text);
  if (!v) {
    out.warnings.push_back(fmt::format("{}: {} '{}' is not a version memplan can read; {} is taken as {}",
                                       origin.to_string(), library_name(*lib), escape_control(version_text),
                                       library_name(*lib), newest_modelled(*lib).text));
    return;
  }
  out.stack.versions[*lib] = *v;
  out.origins[*lib] = std::move(origin);
}

std::string strip_quotes(std::string s) {
  s = trim(s);
  if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front()) s = s.substr(1, s.size() - 2);
  return s;
}

// "transformers[torch]==4.48.1 ; python_version >= '3.9'  # pinned" -> name, version when the
// requirement pins one release (== or ===); nothing for ranges, URLs and options.
std::optional<std::pair<std::string, std::string>> exact_pin(std::string_view line) {
  std::string s(line);
  if (const auto hash = s.find(" #"); hash != std::string::npos) s = s.substr(0, hash);
  if (const auto semi = s.find(';'); semi != std::string::npos) s = s.substr(0, semi);
  s = trim(s);
  if (s.empty() || s[0] == '#' || s[0] == '-') return std::nullopt;
  const auto eq = s.find("==");
  if (eq == std::string::npos) return std::nullopt;
  std::string name = trim(s.substr(0, eq));
  if (const auto br = name.find('['); br != std::string::npos) name = trim(name.substr(0, br));
  std::string ver = trim(s.substr(eq + 2));
  if (!ver.empty() && ver[0] == '=') ver = trim(ver.substr(1));  // ===
  if (const auto comma = ver.find(','); comma != std::string::npos) return std::nullopt;  // a range
  if (ver.find('*') != std::string::npos) return std::nullopt;
  if (name.empty() || ver.empty()) return std::nullopt;
  return std::pair{name, ver};
}

// The Name and Version headers of a distribution's METADATA (RFC 822 headers, then a blank line).
std::optional<std::pair<std::string, std::string>> metadata_name_version(const std::string& text) {
  std::string name, ver;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) break;
    if (line.rfind("Name:", 0) == 0) name = trim(line.substr(5));
    else if (line.rfind("Version:", 0) == 0) ver = trim(line.substr(8));
  }
  if (name.empty() || ver.empty()) return std::nullopt;
  return std::pair{name, ver};
}

// The site-packages folders of an environment prefix (POSIX venv and conda layouts, Windows'
// Lib/site-packages), or the folder itself when it already holds distributions.
std::vector<std::string> site_packages(const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const char* lib : {"lib", "lib64"}) {
    const fs::path base = fs::path(prefix) / lib;
    if (!fs::is_directory(base, ec)) continue;
    std::vector<fs::path> pythons;
    for (fs::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().filename().string().rfind("python", 0) == 0) pythons.push_back(it->path());
    std::sort(pythons.begin(), pythons.end());
    for (const auto& py : pythons)
      for (const char* sp : {"site-packages", "dist-packages"})
        if (fs::is_directory(py / sp, ec)) out.push_back((py / sp).string());
  }
  if (fs::is_directory(fs::path(prefix) / "Lib" / "site-packages", ec))
    out.push_back((fs::path(prefix) / "Lib" / "site-packages").string());
  return out;
}

bool holds_distributions(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.size() > 10 && (n.ends_with(".dist-info") || n.ends_with(".egg-info"))) return true;
  }
  return false;
}

// Reads every *.dist-info (and *.egg-info) of `dir` naming a library memplan has rules for.
void read_site_packages(const std::string& dir, const std::string& env_label, StackSources& out) {
  std::error_code ec;
  std::vector<fs::path> entries;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(it->path());
  std::sort(entries.begin(), entries.end());
  for (const auto& p : entries) {
    const std::string n = p.filename().string();
    const bool dist = n.ends_with(".dist-info");
    const bool egg = n.ends_with(".egg-info");
    if (!dist && !egg) continue;
    const std::string stem = n.substr(0, n.size() - (dist ? 10 : 9));
    const auto dash = stem.find('-');
    const std::string dir_name = stem.substr(0, dash);
    if (!library_from_name(dir_name)) continue;
    std::string version_text = dash == std::string::npos ? "" : stem.substr(dash + 1);
    if (egg) {
      if (const auto py = version_text.find("-py"); py != std::string::npos) version_text = version_text.substr(0, py);
    }
    // METADATA (PKG-INFO for an egg) is authoritative when it can be read.
    const fs::path meta = fs::is_directory(p, ec) ? p / (dist ? "METADATA" : "PKG-INFO") : p;
    Origin origin;
    origin.kind = OriginKind::kDetected;
    origin.note = fmt::format("{}: {}", env_label, n);
    if (auto text = real_file_system().read_file(meta.string())) {
      if (auto nv = metadata_name_version(*text)) {
        add(out, nv->first, nv->second, origin);
        continue;
      }
    }
    if (!version_text.empty()) add(out, dir_name, version_text, origin);
  }
}

std::string which_python(const std::string& path_var) {
  std::istringstream in(path_var);
  std::string dir;
  while (std::getline(in, dir, ':')) {
    if (dir.empty()) continue;
    const fs::path cand = fs::path(dir) / "python3";
    if (::access(cand.c_str(), X_OK) == 0) return cand.string();
  }
  return {};
}

}  // namespace

StackSearchEnv StackSearchEnv::from_process() {
  StackSearchEnv e;
  auto get = [](const char* n) {
    const char* v = std::getenv(n);
    return v ? std::string(v) : std::string();
  };
  e.virtual_env = get("VIRTUAL_ENV");
  e.conda_prefix = get("CONDA_PREFIX");
  e.path = get("PATH");
  e.home = get("HOME");
  return e;
}

void StackSources::fill_from(const StackSources& other) {
  for (const auto& [lib, v] : other.stack.versions) {
    if (stack.has(lib)) continue;
    stack.versions[lib] = v;
    origins[lib] = other.origins.at(lib);
  }
  warnings.insert(warnings.end(), other.warnings.begin(), other.warnings.end());
}

Result<StackSources> parse_stack_flag(const std::string& text) {
  StackSources out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    item = trim(item);
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--stack: expected NAME==VERSION, got \"{}\"", escape_control(item)),
                        "e.g. --stack transformers==4.48.1,trl==0.13.0");
    const std::string name = trim(item.substr(0, eq));
    std::string ver = item.substr(eq + 1);
    if (!ver.empty() && ver[0] == '=') ver = ver.substr(1);
    const auto lib = library_from_name(name);
    if (!lib) {
      std::vector<std::string> names;
      for (Library l : all_libraries()) names.emplace_back(library_name(l));
      return make_error(ErrorCode::kUnknownName,
                        fmt::format("--stack: memplan has no rules for '{}'", escape_control(name)),
                        fmt::format("{}the libraries whose versions change memory: {}",
                                    [&] {
                                      const std::string d = did_you_mean(to_lower(name), names);
                                      return d.empty() ? std::string() : d + "; ";
                                    }(),
                                    fmt::join(names, ", ")));
    }
    auto v = parse_version(ver);
    if (!v) {
      Error e = v.error();
      e.message = fmt::format("--stack: {}: {}", library_name(*lib), e.message);
      return e;
    }
    out.stack.versions[*lib] = *v;
    Origin flag;
    flag.kind = OriginKind::kFlag;
    flag.note = "--stack";
    out.origins[*lib] = flag;
  }
  return out;
}

Result<StackSources> find_environment_stack(const StackSearchEnv& env) {
  StackSources out;
  std::error_code ec;
  std::string prefix, label;
  std::vector<std::string> dirs;
  if (!env.python.empty()) {
    const fs::path p(env.python);
    if (!fs::exists(p, ec))
      return make_error(ErrorCode::kIoError, fmt::format("--python '{}' does not exist", escape_control(env.python)),
                        "give the environment's python (e.g. .venv/bin/python) or its folder");
    if (fs::is_directory(p, ec)) {
      if (holds_distributions(p.string())) dirs.push_back(p.string());
      else prefix = p.string();
    } else {
      // .venv/bin/python: the environment is the folder above bin/ (its symlink target is the
      // base interpreter, whose packages are not the environment's).
      prefix = p.parent_path().parent_path().string();
    }
    label = fmt::format("--python {}", env.python);
  } else if (!env.virtual_env.empty()) {
    prefix = env.virtual_env;
    label = fmt::format("$VIRTUAL_ENV {}", env.virtual_env);
  } else if (!env.conda_prefix.empty()) {
    prefix = env.conda_prefix;
    label = fmt::format("$CONDA_PREFIX {}", env.conda_prefix);
  } else if (const std::string py = which_python(env.path); !py.empty()) {
    prefix = fs::path(py).parent_path().parent_path().string();
    label = fmt::format("python3 on $PATH ({})", py);
    // pip install --user: ~/.local/lib/python3.X/site-packages, read after the interpreter's own.
    if (!env.home.empty())
      for (const auto& d : site_packages((fs::path(env.home) / ".local").string())) dirs.push_back(d);
  } else {
    return out;
  }
  if (!prefix.empty()) {
    auto sp = site_packages(prefix);
    dirs.insert(dirs.begin(), sp.begin(), sp.end());
  }
  out.environment = label;
  for (const auto& d : dirs) read_site_packages(d, label, out);
  return out;
}

StackSources parse_requirements(const std::string& text, const std::string& path) {
  StackSources out;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (auto pin = exact_pin(line)) add(out, pin->first, pin->second, file_origin(path, n));
  }
  return out;
}

// uv.lock and poetry.lock: `[[package]]` tables, each with `name = "..."` and `version = "..."`.
// Written by the tools, one key a line; the first entry of a name wins (uv can list a package
// once per platform fork, the same version on the platforms that train).
StackSources parse_lock_toml(const std::string& text, const std::string& path) {
  StackSources out;
  std::istringstream in(text);
  std::string line, name;
  int n = 0;
  bool in_package = false;
  while (std::getline(in, line)) {
    ++n;
    const std::string t = trim(line);
    if (t.rfind("[", 0) == 0) {
      in_package = t == "[[package]]";
      name.clear();
      continue;
    }
    if (!in_package) continue;
    const auto eq = t.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = trim(t.substr(0, eq));
    const std::string value = strip_quotes(t.substr(eq + 1));
    if (key == "name") name = value;
    else if (key == "version" && !name.empty()) add(out, name, value, file_origin(path, n));
  }
  return out;
}

// pyproject.toml: PEP 621 `dependencies = ["torch==2.4.1", ...]` (and optional-dependencies,
// dependency-groups) pinned with ==, and Poetry's `torch = "2.4.1"` / `= "==2.4.1"` under
// [tool.poetry.dependencies]. Ranges pin nothing.
StackSources parse_pyproject(const std::string& text, const std::string& path) {
  StackSources out;
  std::istringstream in(text);
  std::string line, table;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const std::string t = trim(line);
    if (t.rfind("[", 0) == 0) {
      table = t;
      continue;
    }
    if (table.find("tool.poetry") != std::string::npos && table.find("dependencies") != std::string::npos) {
      const auto eq = t.find('=');
      if (eq != std::string::npos && t.find('"') != std::string::npos) {
        std::string v = strip_quotes(t.substr(eq + 1));
        if (v.rfind("==", 0) == 0) v = v.substr(2);
        if (!v.empty() && std::isdigit(static_cast<unsigned char>(v[0])) &&
            v.find_first_of("<>^~*, ") == std::string::npos)
          add(out, trim(t.substr(0, eq)), v, file_origin(path, n));
      }
      continue;
    }
    // Quoted requirement strings anywhere in a dependency array.
    for (std::size_t q = t.find('"'); q != std::string::npos;) {
      const std::size_t end = t.find('"', q + 1);
      if (end == std::string::npos) break;
      if (auto pin = exact_pin(t.substr(q + 1, end - q - 1))) add(out, pin->first, pin->second, file_origin(path, n));
      q = t.find('"', end + 1);
    }
  }
  return out;
}

namespace {

// A conda spec "pytorch=2.4.1=py3.11_cuda12.1", "pytorch==2.4.1", "conda-forge::pytorch=2.4.1".
void add_conda_spec(StackSources& out, std::string spec, const std::string& path, int line) {
  spec = trim(spec);
  if (const auto colons = spec.rfind("::"); colons != std::string::npos) spec = spec.substr(colons + 2);
  if (auto pin = exact_pin(spec)) {
    add(out, pin->first, pin->second, file_origin(path, line));
    return;
  }
  const auto eq = spec.find('=');
  if (eq == std::string::npos) return;
  std::string ver = spec.substr(eq + 1);
  if (const auto build = ver.find('='); build != std::string::npos) ver = ver.substr(0, build);
  if (ver.empty() || ver.find_first_of("*<>,|") != std::string::npos) return;
  add(out, trim(spec.substr(0, eq)), ver, file_origin(path, line));
}

void walk_conda(const YAML::Node& n, const std::string& path, StackSources& out, int depth) {
  if (depth > 16) return;
  if (n.IsMap()) {
    // pixi.lock packages: {name: torch, version: 2.4.1, ...}
    if (n["name"] && n["version"] && n["name"].IsScalar() && n["version"].IsScalar()) {
      add(out, n["name"].Scalar(), n["version"].Scalar(), file_origin(path, n["version"].Mark().line + 1));
      return;
    }
    for (const auto& kv : n) walk_conda(kv.second, path, out, depth + 1);
  } else if (n.IsSequence()) {
    for (const auto& e : n) {
      if (e.IsScalar()) add_conda_spec(out, e.Scalar(), path, e.Mark().line + 1);
      else walk_conda(e, path, out, depth + 1);
    }
  }
}

}  // namespace

StackSources parse_conda_yaml(const std::string& text, const std::string& path) {
  StackSources out;
  try {
    walk_conda(YAML::Load(text), path, out, 0);
  } catch (const YAML::Exception& e) {
    out.warnings.push_back(fmt::format("{}: not read for library versions: {}", path, e.what()));
  }
  return out;
}

StackSources find_locked_stack(const std::vector<std::string>& config_paths) {
  StackSources out;
  std::vector<std::string> dirs;
  std::error_code ec;
  for (const auto& c : config_paths) {
    fs::path dir = fs::absolute(fs::path(c), ec).parent_path();
    if (ec) continue;
    if (std::find(dirs.begin(), dirs.end(), dir.string()) == dirs.end()) dirs.push_back(dir.string());
    // The repository root: the nearest folder above holding .git (at most 64 levels).
    fs::path up = dir;
    for (int i = 0; i < 64 && !up.empty(); ++i) {
      if (fs::exists(up / ".git", ec)) {
        if (std::find(dirs.begin(), dirs.end(), up.string()) == dirs.end()) dirs.push_back(up.string());
        break;
      }
      if (up == up.parent_path()) break;
      up = up.parent_path();
    }
  }
  // The resolved locks first, then pins people write by hand.
  for (const auto& dir : dirs) {
    std::vector<fs::path> reqs;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string n = it->path().filename().string();
      if (n.rfind("requirements", 0) == 0 && n.ends_with(".txt")) reqs.push_back(it->path());
    }
    std::sort(reqs.begin(), reqs.end());
    struct Candidate {
      std::string file;
      StackSources (*parse)(const std::string&, const std::string&);
    };
    std::vector<Candidate> files = {{"uv.lock", parse_lock_toml},
                                    {"poetry.lock", parse_lock_toml},
                                    {"pixi.lock", parse_conda_yaml}};
    for (const auto& r : reqs) files.push_back({r.filename().string(), parse_requirements});
    files.push_back({"environment.yml", parse_conda_yaml});
    files.push_back({"environment.yaml", parse_conda_yaml});
    files.push_back({"pyproject.toml", parse_pyproject});
    for (const auto& f : files) {
      const std::string p = (fs::path(dir) / f.file).string();
      if (!fs::is_regular_file(p, ec)) continue;
      auto text = real_file_system().read_file(p);
      if (!text) {
        out.warnings.push_back(fmt::format("{}: not read for library versions: {}", p, text.error().message));
        continue;
      }
      out.fill_from(f.parse(*text, p));
    }
  }
  return out;
}

}  // namespace memplan::io

#include "io/gpu/gpu_profiles.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>
#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "io/embedded.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

constexpr std::string_view kProfilesPath = "gpus.yaml";  // relative to configs/, as embedded

const std::vector<std::string>& known_keys() {
  static const std::vector<std::string> k = {"name",   "display_name", "aliases", "vendor",
                                             "memory", "bf16",         "unified", "system_reserve",
                                             "usable"};
  return k;
}

const std::vector<std::string>& known_vendors() {
  static const std::vector<std::string> v = {"nvidia", "amd", "apple"};
  return v;
}

// The form names are compared in: lower case, without spaces, '-' and '_'.
std::string normalize(std::string_view s) {
  std::string r;
  for (char c : s) {
    if (c == ' ' || c == '-' || c == '_') continue;
    r += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return r;
}

// "NVIDIA GeForce RTX 3090" -> "RTX 3090", "Tesla T4" -> "T4": what people type for a driver name.
std::string without_vendor_words(std::string_view display) {
  static const std::set<std::string> kWords = {"nvidia", "tesla", "geforce", "amd"};
  std::string s = trim(display);
  for (;;) {
    const auto sp = s.find(' ');
    if (sp == std::string::npos || !kWords.count(to_lower(s.substr(0, sp)))) return s;
    s = trim(std::string_view(s).substr(sp + 1));
  }
}

// Every normalized key a profile answers to.
std::vector<std::string> match_keys(const GpuProfile& g) {
  std::vector<std::string> keys = {normalize(g.name), normalize(g.display_name),
                                   normalize(without_vendor_words(g.display_name))};
  for (const auto& a : g.aliases) keys.push_back(normalize(a));
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

Error at(const YAML::Node& node, const std::string& origin, ErrorCode code, std::string message,
         std::string suggestion = {}) {
  Error e = make_error(code, std::move(message), std::move(suggestion));
  const YAML::Mark m = node.Mark();
  e.where = SourceLocation{origin, m.is_null() ? 0 : m.line + 1, m.is_null() ? 0 : m.column + 1};
  return e;
}

Result<std::string> scalar(const YAML::Node& node, const std::string& key, const std::string& who,
                           const std::string& origin) {
  if (!node.IsScalar() || node.Scalar().empty())
    return at(node, origin, ErrorCode::kInvalidConfig, fmt::format("'{}' of {} must be a single value", key, who));
  return node.Scalar();
}

Result<bool> boolean(const YAML::Node& node, const std::string& key, const std::string& who,
                     const std::string& origin) {
  bool b = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, b))
    return at(node, origin, ErrorCode::kInvalidConfig,
              fmt::format("'{}' of {} must be true or false, got '{}'", key, who, node.IsScalar() ? node.Scalar() : "?"));
  return b;
}

Result<Bytes> size(const YAML::Node& node, const std::string& key, const std::string& who,
                   const std::string& origin) {
  MEMPLAN_TRY(std::string text, scalar(node, key, who, origin));
  auto parsed = parse_size(text);
  if (!parsed) {
    Error e = parsed.error();
    e.code = ErrorCode::kInvalidConfig;
    e.message = fmt::format("'{}' of {}: {}", key, who, e.message);
    const YAML::Mark m = node.Mark();
    e.where = SourceLocation{origin, m.line + 1, m.column + 1};
    return e;
  }
  return *parsed;
}

Result<GpuProfile> parse_entry(const YAML::Node& entry, std::size_t index, const std::string& origin) {
  if (!entry.IsMap())
    return at(entry, origin, ErrorCode::kInvalidConfig,
              fmt::format("GPU profile #{} must be a mapping of name, memory, ...", index + 1));
  const YAML::Node name_node = entry["name"];
  if (!name_node) return at(entry, origin, ErrorCode::kInvalidConfig, fmt::format("GPU profile #{} has no 'name'", index + 1));
  GpuProfile g;
  MEMPLAN_TRY(g.name, scalar(name_node, "name", fmt::format("GPU profile #{}", index + 1), origin));
  const std::string who = fmt::format("GPU profile '{}'", g.name);
  for (char c : g.name) {
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' ||
          c == '.'))
      return at(name_node, origin, ErrorCode::kInvalidConfig,
                fmt::format("GPU name '{}' must be lower-case letters, digits, '-' and '.'", g.name));
  }

  for (auto it = entry.begin(); it != entry.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (std::find(known_keys().begin(), known_keys().end(), key) == known_keys().end())
      return at(it->first, origin, ErrorCode::kInvalidConfig, fmt::format("unknown key '{}' in {}", key, who),
                did_you_mean(key, known_keys()));
  }
  for (const char* required : {"display_name", "vendor", "memory", "bf16"}) {
    if (!entry[required])
      return at(name_node, origin, ErrorCode::kInvalidConfig, fmt::format("{} has no '{}'", who, required));
  }

  MEMPLAN_TRY(g.display_name, scalar(entry["display_name"], "display_name", who, origin));
  MEMPLAN_TRY(g.vendor, scalar(entry["vendor"], "vendor", who, origin));
  if (std::find(known_vendors().begin(), known_vendors().end(), g.vendor) == known_vendors().end())
    return at(entry["vendor"], origin, ErrorCode::kInvalidConfig, fmt::format("unknown vendor '{}' in {}", g.vendor, who),
              did_you_mean(g.vendor, known_vendors()));

  if (const YAML::Node aliases = entry["aliases"]) {
    if (!aliases.IsSequence())
      return at(aliases, origin, ErrorCode::kInvalidConfig, fmt::format("'aliases' of {} must be a list", who));
    for (const auto& a : aliases) {
      MEMPLAN_TRY(std::string alias, scalar(a, "aliases", who, origin));
      g.aliases.push_back(std::move(alias));
    }
  }

  MEMPLAN_TRY(g.memory, size(entry["memory"], "memory", who, origin));
  if (g.memory < Bytes::gib(1))
    return at(entry["memory"], origin, ErrorCode::kInvalidConfig,
              fmt::format("memory of {} is {}, too small for a GPU", who, format_human(g.memory)),
              "write the unit, e.g. 81920MiB");
  MEMPLAN_TRY(g.bf16, boolean(entry["bf16"], "bf16", who, origin));
  if (const YAML::Node unified = entry["unified"]) {
    MEMPLAN_TRY(g.unified, boolean(unified, "unified", who, origin));
  }
  if (const YAML::Node reserve = entry["system_reserve"]) {
    if (!g.unified)
      return at(reserve, origin, ErrorCode::kInvalidConfig,
                fmt::format("{} has a system_reserve but is not unified", who),
                "system_reserve applies only to GPUs that share memory with the OS (unified: true)");
    MEMPLAN_TRY(g.system_reserve, size(reserve, "system_reserve", who, origin));
    if (g.system_reserve >= g.memory)
      return at(reserve, origin, ErrorCode::kInvalidConfig,
                fmt::format("system_reserve of {} ({}) leaves nothing of its memory ({})", who,
                            format_human(g.system_reserve), format_human(g.memory)));
  } else if (g.unified) {
    g.system_reserve = default_system_reserve(g.memory);
  }
  if (const YAML::Node usable = entry["usable"]) {
    MEMPLAN_TRY(g.usable, size(usable, "usable", who, origin));
    if (g.usable > g.memory || g.usable < Bytes::gib(1))
      return at(usable, origin, ErrorCode::kInvalidConfig,
                fmt::format("usable memory of {} ({}) must be at most its memory ({})", who, format_human(g.usable),
                            format_human(g.memory)));
  }
  return g;
}

// Names must pick one profile; a key may be shared only by profiles the driver names alike
// (same display_name), which detection tells apart by memory.
Status check_keys(const std::vector<GpuProfile>& profiles, const std::vector<int>& lines, const std::string& origin) {
  std::map<std::string, std::size_t> owner;  // normalized key -> first profile answering to it
  for (std::size_t i = 0; i < profiles.size(); ++i) {
    for (const auto& k : match_keys(profiles[i])) {
      auto [it, inserted] = owner.emplace(k, i);
      if (inserted) continue;
      const GpuProfile& first = profiles[it->second];
      const bool name_clash = normalize(first.name) == k || normalize(profiles[i].name) == k;
      if (name_clash || first.display_name != profiles[i].display_name) {
        Error e = make_error(ErrorCode::kInvalidConfig,
                             fmt::format("GPU profile '{}' answers to '{}', as does '{}' (line {})", profiles[i].name,
                                         k, first.name, lines[it->second]),
                             "a name may be shared only by profiles with the same display_name");
        e.where = SourceLocation{origin, lines[i], 0};
        return e;
      }
    }
  }
  return Ok{};
}

std::string size_label(Bytes b) {
  const std::int64_t n = b.count();
  constexpr std::int64_t kGiB = 1LL << 30, kMiB = 1LL << 20, kGB = 1000000000;
  if (n % kGiB == 0) return fmt::format("{}GiB", n / kGiB);
  if (n % kGB == 0) return fmt::format("{}GB", n / kGB);
  if (n % kMiB == 0) return fmt::format("{}MiB", n / kMiB);
  return fmt::format("{}B", n);
}

}  // namespace

Bytes default_system_reserve(Bytes memory) {
  // docs/gpus.md#unified-memory: seed 000 keeps 28 GiB of a 128 GiB DGX Spark, 7/32.
  const Bytes share = (memory * 7) / 32;
  return std::max(share, Bytes::gib(4));
}

Result<std::vector<GpuProfile>> parse_gpu_profiles(std::string_view yaml_text, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::ParserException& e) {
    Error err = make_error(ErrorCode::kParseError, fmt::format("invalid YAML: {}", e.msg));
    err.where = SourceLocation{origin, e.mark.line + 1, e.mark.column + 1};
    return err;
  }
  if (!root.IsMap() || !root["gpus"])
    return at(root, origin, ErrorCode::kInvalidConfig, "expected a top-level 'gpus:' list");
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it->first.Scalar() != "gpus")
      return at(it->first, origin, ErrorCode::kInvalidConfig, fmt::format("unknown top-level key '{}'", it->first.Scalar()),
                "the file holds one key, 'gpus'");
  }
  const YAML::Node list = root["gpus"];
  if (!list.IsSequence() || list.size() == 0)
    return at(list, origin, ErrorCode::kInvalidConfig, "'gpus' must be a non-empty list of profiles");

  std::vector<GpuProfile> profiles;
  std::vector<int> lines;
  try {
    for (std::size_t i = 0; i < list.size(); ++i) {
      MEMPLAN_TRY(GpuProfile g, parse_entry(list[i], i, origin));
      profiles.push_back(std::move(g));
      lines.push_back(list[i].Mark().line + 1);
    }
  } catch (const SizeOverflow&) {
    return make_error(ErrorCode::kInvalidConfig, fmt::format("{}: a memory size is out of range", origin));
  }
  MEMPLAN_TRY(auto ok, check_keys(profiles, lines, origin));
  (void)ok;
  return profiles;
}

namespace {

std::optional<std::string_view> embedded_profiles() {
  for (const auto& f : embedded_files())
    if (f.path == kProfilesPath) return f.content;
  return std::nullopt;
}

// The profiles whose YAML text could answer to `key` (a normalized name), parsed on their own.
// yaml-cpp needs about a millisecond for the whole list, most of a `memplan plan --gpu NAME`
// run; a name can only match a profile whose item text contains it once normalized (names,
// aliases and display names are all written in the item, and dropping vendor words only
// shortens a display name). Every item starts with a "- name:" line; the comments between
// items travel with the item above, which YAML ignores. nullopt when the text is not laid out
// that way or the subset does not parse: then only the whole list can answer.
std::optional<std::vector<GpuProfile>> profiles_mentioning(std::string_view text, const std::string& key) {
  std::vector<std::size_t> starts;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t eol = std::min(text.find('\n', pos), text.size());
    const std::string line = trim(text.substr(pos, eol - pos));
    if (line.rfind("- name:", 0) == 0) starts.push_back(pos);
    pos = eol + 1;
  }
  if (starts.empty()) return std::nullopt;
  std::string subset = "gpus:\n";
  bool any = false;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const std::size_t end = i + 1 < starts.size() ? starts[i + 1] : text.size();
    const std::string_view item = text.substr(starts[i], end - starts[i]);
    if (normalize(item).find(key) == std::string::npos) continue;
    subset += item;
    if (subset.back() != '\n') subset += '\n';
    any = true;
  }
  if (!any) return std::vector<GpuProfile>{};
  auto parsed = parse_gpu_profiles(subset, "configs/" + std::string(kProfilesPath));
  if (!parsed) return std::nullopt;
  return std::move(*parsed);
}

}  // namespace

Result<std::vector<GpuProfile>> load_gpu_profiles() {
  static const Result<std::vector<GpuProfile>> cached = []() -> Result<std::vector<GpuProfile>> {
    if (auto text = embedded_profiles()) return parse_gpu_profiles(*text, "configs/" + std::string(kProfilesPath));
    return make_error(ErrorCode::kIoError, "configs/gpus.yaml is not embedded in this build");
  }();
  return cached;
}

Result<GpuProfile> find_gpu(const std::vector<GpuProfile>& profiles, const std::string& name) {
  const std::string key = normalize(name);
  std::vector<const GpuProfile*> hits;
  for (const auto& g : profiles) {
    const auto keys = match_keys(g);
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) hits.push_back(&g);
  }
  if (hits.size() == 1) return *hits.front();
  if (hits.size() > 1) {
    std::vector<std::string> names;
    for (const auto* g : hits) names.push_back("'" + g->name + "'");
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("GPU name '{}' is shared by {}", name, fmt::join(names, " and ")),
                      "give one of those names, or --gpu-memory SIZE");
  }
  // The runs of characters `keep` accepts, lower-cased: a spelling's words or its numbers.
  const auto runs = [](const std::string& s, bool (*keep)(char)) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : s + " ") {
      const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (keep(l)) cur += l;
      else if (!cur.empty()) out.push_back(std::exchange(cur, std::string()));
    }
    return out;
  };
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  const auto is_word = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  const auto spellings_of = [](const GpuProfile& g) {
    std::vector<std::string> all{g.name, g.display_name};
    all.insert(all.end(), g.aliases.begin(), g.aliases.end());
    return all;
  };
  // A shorthand several GPUs answer to ("RTX 6000": the Quadro RTX 6000, the RTX A6000 and the
  // RTX 6000 Ada, 24 and 48 GB) names none of them: list them with their memory rather than
  // suggesting one. A profile answers when every word of the name is a word of one of its
  // spellings, or ends one ("6000" in "a6000").
  const std::vector<std::string> asked_words = runs(name, is_word);
  std::vector<const GpuProfile*> answering;
  for (const auto& g : profiles) {
    const std::vector<std::string> all = spellings_of(g);
    const bool answers = std::any_of(all.begin(), all.end(), [&](const std::string& spelling) {
      const std::vector<std::string> have = runs(spelling, is_word);
      return !asked_words.empty() && std::all_of(asked_words.begin(), asked_words.end(), [&](const std::string& w) {
        return std::any_of(have.begin(), have.end(), [&](const std::string& h) {
          return h.size() >= w.size() && h.compare(h.size() - w.size(), w.size(), w) == 0;
        });
      });
    });
    if (answers) answering.push_back(&g);
  }
  if (answering.size() > 1 && answering.size() <= 4) {
    std::vector<std::string> names;
    for (const auto* g : answering) names.push_back(fmt::format("'{}' ({:.0f} GiB)", g->name, g->memory.as_gib()));
    return make_error(ErrorCode::kUnknownName,
                      fmt::format("unknown GPU '{}': it could be {}", name, fmt::join(names, ", ")),
                      "give one of those names, or --gpu-memory SIZE");
  }
  // Suggest the canonical name of the profile whose name, display name or alias is nearest,
  // among spellings whose numbers do not contradict the name's: "rtx-3060" is not a misspelt
  // "rtx-3090" (12 GB vs 24 GB), nor "a100-90gb" an "a100-80gb". A suggestion must never hand
  // the user a GPU with a different memory size.
  const std::vector<std::string> asked = runs(name, is_digit);
  const auto compatible = [&](const std::string& spelling) {
    const std::vector<std::string> have = runs(spelling, is_digit);
    if (have.size() != asked.size()) return true;
    for (std::size_t i = 0; i < have.size(); ++i)
      if (have[i].size() == asked[i].size() && have[i] != asked[i]) return false;
    return true;
  };
  std::vector<std::string> spellings;
  std::map<std::string, std::string> canonical;
  for (const auto& g : profiles) {
    for (const std::string& s : spellings_of(g)) {
      if (!compatible(s)) continue;
      spellings.push_back(s);
      canonical.emplace(s, g.name);
    }
  }
  const auto near = name.empty() ? std::nullopt : closest_match(name, spellings);
  return make_error(ErrorCode::kUnknownName, fmt::format("unknown GPU '{}'", name),
                    near ? fmt::format("did you mean '{}'?", canonical[*near])
                         : std::string("run 'memplan gpus' for the known GPUs, or give --gpu-memory SIZE"));
}

Result<GpuProfile> find_gpu(const std::string& name) {
  // The profiles that mention the name answer for a unique match; anything else (no match, a
  // shared name) goes to the whole list, for the same answer and its suggestions.
  const std::string key = normalize(name);
  if (auto text = embedded_profiles(); text && !key.empty()) {
    if (auto some = profiles_mentioning(*text, key); some && !some->empty()) {
      if (auto hit = find_gpu(*some, name)) return hit;
    }
  }
  MEMPLAN_TRY(auto profiles, load_gpu_profiles());
  return find_gpu(profiles, name);
}

std::optional<GpuProfile> match_detected_gpu(const std::vector<GpuProfile>& profiles, std::string_view driver_name,
                                             Bytes total) {
  const std::string key = normalize(driver_name);
  if (key.empty()) return std::nullopt;
  const GpuProfile* best = nullptr;
  auto distance = [&](const GpuProfile& g) {
    const std::int64_t d = g.memory.count() - total.count();
    return d < 0 ? -d : d;
  };
  for (const auto& g : profiles) {
    const auto keys = match_keys(g);
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) continue;
    if (!best || distance(g) < distance(*best)) best = &g;
  }
  if (!best) return std::nullopt;
  return *best;
}

std::optional<GpuProfile> match_detected_gpu(std::string_view driver_name, Bytes total) {
  const std::string key = normalize(driver_name);
  if (key.empty()) return std::nullopt;
  // A profile can only match a name its text mentions; if the subset cannot be read that way,
  // the whole list answers.
  if (auto text = embedded_profiles()) {
    if (auto some = profiles_mentioning(*text, key)) return match_detected_gpu(*some, driver_name, total);
  }
  auto all = load_gpu_profiles();
  if (!all) return std::nullopt;
  return match_detected_gpu(*all, driver_name, total);
}

Result<GpuProfile> gpu_from_memory(Bytes memory) {
  if (memory < Bytes::gib(1))
    return make_error(ErrorCode::kInvalidArgument, fmt::format("GPU memory of {} is too small", format_human(memory)),
                      "write a unit, e.g. --gpu-memory 24GB");
  GpuProfile g;
  g.name = "custom-" + size_label(memory);
  g.display_name = fmt::format("GPU with {:.2f} GiB ({:.2f} GB)", memory.as_gib(), memory.as_gb());
  g.vendor = "unknown";
  g.memory = memory;
  g.bf16 = true;
  return g;
}

std::optional<std::string> bf16_warning(const GpuProfile& gpu, bool uses_bf16) {
  if (!uses_bf16 || gpu.bf16) return std::nullopt;
  return fmt::format(
      "{} ({}) has no hardware bf16: PyTorch emulates it slowly or fails with \"not implemented for 'BFloat16'\"; "
      "train in fp16 (--fp16) instead",
      gpu.display_name, gpu.name);
}

Budget profile_budget(const GpuProfile& gpu, Bytes safety_margin) {
  Budget b;
  b.capacity = gpu.capacity();
  b.safety_margin = safety_margin;
  b.headroom = gpu.unified ? gpu.system_reserve : Bytes::zero();
  return b;
}

}  // namespace memplan::io

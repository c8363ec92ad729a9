#include "io/allocator_env.hpp"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include "memplan/text.hpp"

namespace memplan::io {

namespace {

constexpr const char* kVar = "PYTORCH_CUDA_ALLOC_CONF";

// "PYTORCH_CUDA_ALLOC_CONF=a:b,c:d rest" or 'PYTORCH_CUDA_ALLOC_CONF="a:b" ...' -> "a:b,c:d".
std::optional<std::string> from_command_line(const std::string& s) {
  const std::string key = std::string(kVar) + "=";
  const std::size_t at = s.find(key);
  if (at == std::string::npos) return std::nullopt;
  std::size_t i = at + key.size();
  std::string v;
  const char quote = i < s.size() && (s[i] == '"' || s[i] == '\'') ? s[i] : '\0';
  if (quote) ++i;
  for (; i < s.size(); ++i) {
    if (quote ? s[i] == quote : (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == ';')) break;
    v += s[i];
  }
  return v;
}

void walk(const YAML::Node& n, const std::string& file, std::optional<AllocatorSetting>& found) {
  if (n.IsMap()) {
    for (const auto& kv : n) {
      if (kv.first.IsScalar() && kv.first.Scalar() == kVar && kv.second.IsScalar()) {
        found = AllocatorSetting{kv.second.Scalar(), fmt::format("{}:{}", file, kv.first.Mark().line + 1)};
        continue;
      }
      walk(kv.second, file, found);
    }
  } else if (n.IsSequence()) {
    for (const auto& e : n) walk(e, file, found);
  } else if (n.IsScalar()) {
    if (auto v = from_command_line(n.Scalar())) found = AllocatorSetting{*v, fmt::format("{}:{}", file, n.Mark().line + 1)};
  }
}

}  // namespace

std::optional<AllocatorSetting> find_allocator_conf(const std::vector<ConfigFile>& files) {
  std::optional<AllocatorSetting> found;
  for (const ConfigFile& f : files) {
    if (f.text.find(kVar) == std::string::npos) continue;
    try {
      walk(YAML::Load(f.text), f.path, found);
    } catch (const YAML::Exception&) {
      // Not YAML/JSON: the loader reported it already.
    }
  }
  return found;
}

}  // namespace memplan::io

#include "io/allocator_env.hpp"

#include <sstream>

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include "memplan/text.hpp"

namespace memplan::io {

namespace {

constexpr const char* kAlloc = "PYTORCH_ALLOC_CONF";
constexpr const char* kCudaAlloc = "PYTORCH_CUDA_ALLOC_CONF";

// "NAME=a:b,c:d rest" or 'NAME="a:b" ...' -> "a:b,c:d", for the assignment of exactly NAME (not
// of a longer name ending in it: PYTORCH_CUDA_ALLOC_CONF= holds PYTORCH_ALLOC_CONF's letters only
// after "CUDA_").
std::optional<std::string> assigned(const std::string& s, const char* name) {
  const std::string key = std::string(name) + "=";
  for (std::size_t at = s.find(key); at != std::string::npos; at = s.find(key, at + 1)) {
    if (at > 0) {
      const char before = s[at - 1];
      if (std::isalnum(static_cast<unsigned char>(before)) || before == '_') continue;
    }
    std::size_t i = at + key.size();
    std::string v;
    const char quote = i < s.size() && (s[i] == '"' || s[i] == '\'') ? s[i] : '\0';
    if (quote) ++i;
    for (; i < s.size(); ++i) {
      if (quote ? s[i] == quote : (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == ';' || s[i] == '\r')) break;
      v += s[i];
    }
    return v;
  }
  return std::nullopt;
}

void note(AllocatorSettings& out, const char* name, std::string value, std::string source) {
  auto& slot = std::string(name) == kAlloc ? out.alloc_conf : out.cuda_alloc_conf;
  slot = AllocatorSetting{std::move(value), std::move(source)};
}

void walk(const YAML::Node& n, const std::string& file, AllocatorSettings& found, int depth) {
  if (depth > 64) return;
  if (n.IsMap()) {
    for (const auto& kv : n) {
      if (kv.first.IsScalar() && kv.second.IsScalar() &&
          (kv.first.Scalar() == kAlloc || kv.first.Scalar() == kCudaAlloc)) {
        note(found, kv.first.Scalar() == kAlloc ? kAlloc : kCudaAlloc, kv.second.Scalar(),
             fmt::format("{}:{}", file, kv.first.Mark().line + 1));
        continue;
      }
      walk(kv.second, file, found, depth + 1);
    }
  } else if (n.IsSequence()) {
    for (const auto& e : n) walk(e, file, found, depth + 1);
  } else if (n.IsScalar()) {
    for (const char* name : {kAlloc, kCudaAlloc})
      if (auto v = assigned(n.Scalar(), name)) note(found, name, *v, fmt::format("{}:{}", file, n.Mark().line + 1));
  }
}

}  // namespace

AllocatorSettings find_allocator_settings(const std::vector<ConfigFile>& files) {
  AllocatorSettings found;
  for (const ConfigFile& f : files) {
    if (f.text.find("ALLOC_CONF") == std::string::npos) continue;
    try {
      walk(YAML::Load(f.text), f.path, found, 0);
    } catch (const YAML::Exception&) {
      // Not YAML/JSON: the loader reported it already.
    }
  }
  return found;
}

AllocatorSettings parse_launch_file(const std::string& text, const std::string& path) {
  AllocatorSettings found;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    for (const char* name : {kAlloc, kCudaAlloc})
      if (auto v = assigned(t, name)) note(found, name, *v, fmt::format("{}:{}", path, n));
  }
  return found;
}

AllocatorSettings layer(AllocatorSettings earlier, const AllocatorSettings& later) {
  if (later.alloc_conf) earlier.alloc_conf = later.alloc_conf;
  if (later.cuda_alloc_conf) earlier.cuda_alloc_conf = later.cuda_alloc_conf;
  return earlier;
}

}  // namespace memplan::io

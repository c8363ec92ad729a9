#include "io/edit/shared_files.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

namespace memplan::io {

namespace {

namespace fs = std::filesystem;

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  const bool eq = fs::equivalent(a, b, ec);
  return !ec && eq;
}

// The path-like token of `line` that ends with `name` at `at`: back to a space, quote, ':', '=',
// ',' or '['.
std::string token_at(const std::string& line, std::size_t at, std::size_t len) {
  std::size_t start = at;
  while (start > 0 && std::string_view(" \t\"':=,[{").find(line[start - 1]) == std::string_view::npos) --start;
  return line.substr(start, at + len - start);
}

}  // namespace

std::vector<std::string> other_configs_naming(const std::string& shared, const std::vector<std::string>& own) {
  std::vector<std::string> out;
  const fs::path target(shared);
  const std::string name = target.filename().string();
  if (name.empty()) return out;
  std::set<fs::path> dirs;
  std::error_code ec;
  for (const auto& f : own) dirs.insert(fs::absolute(fs::path(f), ec).parent_path());
  dirs.insert(fs::absolute(target, ec).parent_path());
  std::set<std::string> seen;
  for (const auto& dir : dirs) {
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path p = it->path();
      std::string ext = p.extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
      if (ext != ".yaml" && ext != ".yml" && ext != ".json" && ext != ".toml" && ext != ".cfg") continue;
      std::error_code e2;
      if (!it->is_regular_file(e2) || it->file_size(e2) > (1u << 20)) continue;
      if (same_file(p, target) ||
          std::any_of(own.begin(), own.end(), [&](const std::string& f) { return same_file(p, f); }))
        continue;
      std::ifstream in(p, std::ios::binary);
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        // A comment names nothing the trainer reads.
        const std::size_t first = line.find_first_not_of(" \t");
        if (first != std::string::npos && (line[first] == '#' || line.compare(first, 2, "//") == 0)) continue;
        for (std::size_t at = line.find(name); at != std::string::npos; at = line.find(name, at + 1)) {
          const fs::path named(token_at(line, at, name.size()));
          const bool names_it = named.is_absolute() ? same_file(named, target)
                                                    : same_file(p.parent_path() / named, target) || same_file(named, target);
          if (!names_it) continue;
          const std::string where = fmt::format("{}:{}", p.string(), n);
          if (seen.insert(where).second) out.push_back(where);
          break;
        }
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace memplan::io

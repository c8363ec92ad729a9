#include "cli/version.hpp"

#include <cstdint>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "io/embedded.hpp"
#include "io/gpu/gpu_profiles.hpp"
#include "io/model/model_source.hpp"
#include "memplan/stack.hpp"
#include "memplan_build_info.hpp"

namespace memplan::cli {

namespace {

// FNV-1a 64 over the paths and contents: changes whenever a file is added, removed or edited.
struct DataVersion {
  std::uint64_t hash = 1469598103934665603ULL;
  void add(std::string_view s) {
    for (unsigned char c : s) {
      hash ^= c;
      hash *= 1099511628211ULL;
    }
  }
};

DataVersion data_version(std::string_view prefix) {
  DataVersion v;
  for (const auto& f : io::embedded_files()) {
    if (f.path.substr(0, prefix.size()) != prefix) continue;
    v.add(f.path);
    v.add(f.content);
  }
  return v;
}


}  // namespace

std::string version_line() { return fmt::format("memplan {} (commit {})", MEMPLAN_VERSION, MEMPLAN_GIT_COMMIT); }

std::string version_text() {
  const DataVersion models = data_version("models/");
  const DataVersion gpus = data_version("gpus.yaml");
  // The counts are what the loaders accept, not file counts: what `memplan models` / `gpus` list.
  const auto catalog = io::load_catalog();
  const auto profiles = io::load_gpu_profiles();
  std::string out = version_line() + "\n";
  out += fmt::format("model catalog: {} models (configs/models, fnv1a {:016x})\n",
                     catalog ? catalog->size() : std::size_t{0}, models.hash);
  out += fmt::format("GPU profiles: {} GPUs (configs/gpus.yaml, fnv1a {:016x})\n",
                     profiles ? profiles->size() : std::size_t{0}, gpus.hash);
  // The releases the version rules were read from (memplan/stack.hpp, docs/formulas.md#versions).
  std::vector<std::string> libs;
  for (Library l : all_libraries())
    libs.push_back(fmt::format("{} {}-{}", library_name(l), oldest_modelled(l).text, newest_modelled(l).text));
  out += fmt::format("models: {}\n", fmt::join(libs, ", "));
  return out;
}

}  // namespace memplan::cli

// Hydra composition as the trainers run it (docs/configs.md#hydra): a config's `defaults:` list
// expanded into the files it composes, in merge order, each placed at its package, and the
// `key=value` / `+key=value` / `group=option` overrides of the trainer's command line. NeMo-RL's
// `defaults: ../../base.yaml` (a path relative to the file) is read the same way. Every node keeps
// the line of the file it was written in; load_config numbers the files.
#pragma once

#include <string>
#include <vector>

#include "io/fs.hpp"
#include "io/edit/yaml_edit.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

// One file of a composition, in merge order (later layers win).
struct HydraLayer {
  std::string path;                  // as found (the primary as given)
  std::string text;
  FileInfo info;
  YamlDoc doc;                       // its `defaults:` key removed; content placed at `package`
  std::vector<std::string> package;  // where its keys sit in the composed tree ({}: the root)
};

// The limits that stop a runaway composition.
inline constexpr int kHydraMaxDepth = 16;     // nested defaults lists
inline constexpr int kHydraMaxLayers = 256;   // files in one composition

struct HydraComposition {
  std::vector<HydraLayer> layers;
  std::vector<std::string> value_overrides;  // the overrides that set values, for apply_value_overrides
  // Entries that could not be followed (an option chosen by an interpolation): located warnings.
  std::vector<Error> not_followed;
};

// Expands `doc` (read from `path`) into its layers. `overrides` are the command line's, in order:
// those that choose a group's option (`group=option` for a group of the defaults list, `+group=option`
// for a group directory beside the config) change the composition, the others are handed back.
// A file without a defaults list is returned alone.
Result<HydraComposition> compose_hydra(const std::string& path, std::string text, FileInfo info, YamlDoc doc,
                                       const std::vector<std::string>& overrides, FileSystem& fs);

// Whether a command-line word is a Hydra override (`a.b=1`, `+a=1`, `++a=1`, `~a`, `group=opt`).
bool is_override(std::string_view word);

// The value overrides as one layer over the composed tree, the way Hydra applies them after
// composition: `a.b=v` must name an existing key (`+a.b=v` adds one, `++a.b=v` either), `~a.b`
// removes it. The layer's nodes carry line N for the N-th override of `label` ("command line").
Status apply_value_overrides(YamlNode& tree, const std::vector<std::string>& overrides, int source,
                             const std::string& label);

}  // namespace memplan::io

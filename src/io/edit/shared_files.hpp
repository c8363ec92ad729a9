// --apply and shared files: a DeepSpeed JSON that several trainer configs name. Writing one
// config's micro-batch into it changes it for the others, whose trainers then refuse to start
// (their batch no longer matches the JSON's): --apply warns with the configs it found (issue 34).
#pragma once

#include <string>
#include <vector>

namespace memplan::io {

// Configs (.yaml, .yml, .json, .toml, .cfg; not recursive) in the folder of `shared` and in the
// folders of `own`, other than `shared` and the files of `own`, with a line that names `shared`
// (its path resolved from that config's folder or from the current directory): "dir/b.yaml:3".
std::vector<std::string> other_configs_naming(const std::string& shared, const std::vector<std::string>& own);

}  // namespace memplan::io

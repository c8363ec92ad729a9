// config.json fields of TII's Falcon-H1 (model_type falcon_h1: Falcon-H1 0.5B, 1.5B, 1.5B-Deep, 3B,
// 7B, 34B, Falcon-H1R), read beside the generic decoder keys: Mamba-2 and attention side by side in
// every layer (docs/models.md#falcon-h1).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "memplan/model.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

// Sets Falcon-H1's layout on m, already filled from the generic keys (sizes, heads, head_dim,
// tying, rope). Errors quote the key.
Status apply_falcon_h1_fields(const nlohmann::json& j, ModelSpec& m, const std::string& origin);

}  // namespace memplan::io

// config.json fields of IBM Granite 4.0 (model_type granitemoehybrid: granite-4.0-h-small, h-tiny,
// h-micro, h-1b, h-350m and the all-attention granite-4.0-micro), read beside the generic decoder
// keys: the Mamba-2 / attention layer layout, the MoE with its shared MLP, NoPE
// (docs/models.md#granite-4-0).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "memplan/model.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

// Sets Granite 4.0's layout on m, already filled from the generic keys (sizes, heads, biases,
// activation, tying). Errors quote the key.
Status apply_granite_hybrid_fields(const nlohmann::json& j, ModelSpec& m, const std::string& origin);

}  // namespace memplan::io

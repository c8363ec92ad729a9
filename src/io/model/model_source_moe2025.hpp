// config.json fields of the 2025 families read beside the generic decoder keys (gpt_oss,
// minimax_m2, starcoder2): what their modelling code builds that the shared reader does not
// know (docs/models.md#gpt_oss, #minimax_m2, #starcoder2).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "memplan/model.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

// Whether model_type is one of these families.
bool is_moe2025_type(const std::string& model_type);
// Sets the family's layout on m, already filled from the generic keys (sizes, heads, experts,
// sliding window): biases, norms, the MLP kind, attention sinks, dropouts. Errors quote the key.
Status apply_moe2025_fields(const nlohmann::json& j, ModelSpec& m, const std::string& origin);

}  // namespace memplan::io

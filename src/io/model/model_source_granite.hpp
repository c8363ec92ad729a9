// config.json fields of IBM Granite 4.0 (model_type granitemoehybrid: granite-4.0-h-small, h-tiny,
// h-micro, h-1b, h-350m and the all-attention granite-4.0-micro), read beside the generic decoder
// keys: the Mamba-2 / attention layer layout, the MoE with its shared MLP, NoPE
// (docs/models.md#granite-4-0).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "memplan/model.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

// Sets Granite 4.0's layout on m, already filled from the generic keys (sizes, heads, biases,
// activation, tying). Errors quote the key.
Status apply_granite_hybrid_fields(const nlohmann::json& j, ModelSpec& m, const std::string& origin);

// The Mamba-2 mixer's mamba_* keys as Granite 4.0 and Falcon-H1 name and default them; `inner` is
// the mixer's width and `inner_name` the key(s) it came from, for the error.
Status read_mamba2_keys(const nlohmann::json& j, ModelSpec& m, std::int64_t inner, const std::string& inner_name,
                        const std::string& origin);
// An integer key between 0 and 2^20: its value, `fallback` when absent or null.
Result<std::int64_t> read_count_key(const nlohmann::json& j, const char* key, std::int64_t fallback,
                                    const std::string& origin);

}  // namespace memplan::io

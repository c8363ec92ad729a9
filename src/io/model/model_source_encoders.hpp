// config.json parsing for encoder model types (BERT, RoBERTa, XLM-R, ModernBERT):
// docs/formulas.md#encoder-parameters says which keys decide what.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "memplan/model.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

// A count read from config.json as int64, capped at 2^30 for an int field (the range checks
// that follow report anything that large).
inline int narrow_count(std::int64_t v) { return static_cast<int>(std::min<std::int64_t>(v, 1 << 30)); }

bool is_encoder_model_type(const std::string& model_type);
// The encoder model_type values parse_encoder_config() accepts.
const std::vector<std::string>& encoder_model_types();
// The ModelSpec of an encoder config.json; `origin` prefixes error messages. The head is
// sequence classification when "architectures" names a *ForSequenceClassification class
// (num_labels from id2label), else pooling (AutoModel, as sentence-transformers loads it).
Result<ModelSpec> parse_encoder_config(const nlohmann::json& j, const std::string& origin);

}  // namespace memplan::io

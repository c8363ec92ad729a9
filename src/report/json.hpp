// JSON forms of engine inputs and results (schema "memplan/1", docs/json-schema.md).
#pragma once

#include <nlohmann/json.hpp>

#include "io/inputs.hpp"
#include "memplan/estimate.hpp"
#include "memplan/model.hpp"
#include "memplan/training.hpp"

namespace memplan::report {

inline constexpr const char* kSchema = "memplan/1";

nlohmann::ordered_json to_json(const ModelSpec& m);
nlohmann::ordered_json to_json(const TrainingConfig& c);
nlohmann::ordered_json to_json(const Estimate& e);
// {"model": ..., "training": ..., "sources": {key: origin}}
nlohmann::ordered_json inputs_json(const io::ResolvedInputs& in);

// The library versions an estimate used (docs/formulas.md#versions): each library, the version
// it was taken as and where that came from.
struct StackRow {
  std::string library;
  std::string version;
  std::string source;
};
std::vector<StackRow> stack_rows(const io::ResolvedInputs& in);
nlohmann::ordered_json stack_json(const io::ResolvedInputs& in);

}  // namespace memplan::report

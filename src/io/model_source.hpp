// Where a model's architecture comes from: a Hugging Face config.json, the local Hugging Face
// cache (never the network), the built-in catalog (configs/models/), or a bare parameter count.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memplan/model.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

// Parses the text of a config.json. `origin` (a path or catalog name) prefixes error messages.
Result<ModelSpec> parse_hf_config(std::string_view json_text, const std::string& origin);

struct CatalogEntry {
  std::string id;                    // Hugging Face id: "meta-llama/Llama-3.1-8B"
  std::string short_name;            // "llama-3.1-8b"
  std::vector<std::string> aliases;  // other ids the same architecture is published under
  std::int64_t published_params = 0; // total parameter count as published
  std::string params_source;         // where that number comes from
  ModelSpec spec;
};

// The built-in catalog (embedded configs/models/*.json), parsed once.
Result<std::vector<CatalogEntry>> load_catalog();

// Environment for locating the Hugging Face cache; injectable so tests never touch $HOME.
struct ModelSearchEnv {
  std::string hf_home;     // $HF_HOME, or empty
  std::string hub_cache;   // $HF_HUB_CACHE / $HUGGINGFACE_HUB_CACHE, or empty
  std::string home;        // $HOME
  static ModelSearchEnv from_process();
};

// `name` is a path to a config.json (or a directory holding one), a model id found in the
// local HF cache, or a catalog id / short name. Unknown names suggest the nearest catalog entry.
Result<ModelSpec> resolve_model(const std::string& name, const ModelSearchEnv& env);

// A Llama-shaped model with about `params` parameters (--model-params 7B). The shape it
// assumes is described by describe_shape() and printed with every estimate.
Result<ModelSpec> model_from_param_count(std::int64_t params);
std::string describe_shape(const ModelSpec& m);

}  // namespace memplan::io

// Where a model's architecture comes from: a Hugging Face config.json, the local Hugging Face
// cache (never the network), the built-in catalog (configs/models/), or a bare parameter count.
// docs/models.md describes the resolution order, the catalog format and the counting rules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memplan/model.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

// Parses the text of a config.json. `origin` (a path or catalog name) prefixes error messages.
Result<ModelSpec> parse_hf_config(std::string_view json_text, const std::string& origin);
// The same, reading a config of an unknown model_type that has exactly a Llama-compatible
// layout's keys as a Llama, with `assumption` saying so (empty otherwise); an unknown type with
// a key of another block is refused with that key named (docs/models.md#unknown-types).
Result<ModelSpec> parse_hf_config(std::string_view json_text, const std::string& origin, std::string& assumption);

// The model_type values parse_hf_config() accepts, in the order docs/models.md lists them.
const std::vector<std::string>& supported_model_types();

struct CatalogEntry {
  std::string id;                    // Hugging Face id: "meta-llama/Llama-3.1-8B"
  std::string short_name;            // "llama-3.1-8b"
  std::vector<std::string> aliases;  // other ids the same architecture is published under
  std::int64_t published_params = 0; // total parameter count as published
  std::string params_source;         // where that number comes from
  ModelSpec spec;
  std::string file;                  // "configs/models/llama-3.1-8b.json", for messages

  // True when `name` is the id, the short name or an alias, ignoring case.
  bool matches(std::string_view name) const;
};

// The built-in catalog (embedded configs/models/*.json), parsed once, in natural order of short
// name (llama-3.1-8b, llama-3.1-70b, llama-3.1-405b).
Result<std::vector<CatalogEntry>> load_catalog();

// The "dense" list of a "sentence_transformers" object ({"dense": [N_Dense/config.json, ...]}):
// the Dense modules after the pooling, checked to chain (docs/formulas.md#embeddinggemma).
Result<std::vector<DenseModule>> parse_dense_modules(std::string_view json_text, const std::string& origin);
// The first Dense module must take the pooled embedding: the model's hidden size.
Status check_dense_width(const ModelSpec& m, const std::string& origin);

// Parses one catalog file's text; load_catalog() applies it to every embedded file.
Result<CatalogEntry> parse_catalog_entry(std::string_view json_text, const std::string& origin);

// The entry `name` names (id, short name or alias, any case), or nullptr.
const CatalogEntry* find_catalog_entry(const std::vector<CatalogEntry>& catalog, std::string_view name);
// The built-in entry answering to `name`, parsing only the entries whose text mentions it:
// what resolve_model tries before loading the whole catalog. nullopt when none does.
std::optional<CatalogEntry> find_catalog_entry_fast(std::string_view name);

// Environment for locating the Hugging Face cache; injectable so tests never touch $HOME.
struct ModelSearchEnv {
  std::string hf_home;         // $HF_HOME, or empty
  std::string hub_cache;       // $HF_HUB_CACHE / $HUGGINGFACE_HUB_CACHE, or empty
  std::string home;            // $HOME
  std::string xdg_cache_home;  // $XDG_CACHE_HOME: huggingface_hub's HF_HOME default lives under it
  static ModelSearchEnv from_process();

  // The hub cache directories searched, in order, without duplicates.
  std::vector<std::string> hub_dirs() const;
};

// A resolved --model: the architecture and how it was found.
struct ResolvedModel {
  ModelSpec spec;
  // How the name was resolved when it was not a catalog name or a config.json read directly, one
  // sentence for the user: "unsloth/llama-3-8b-bnb-4bit: a re-upload of meta-llama/Meta-Llama-3-8B
  // (catalog llama-3-8b)". Empty otherwise.
  std::string via;
  // The checkpoint stores 4-bit weights: a bitsandbytes/GPTQ/AWQ re-upload (-bnb-4bit, -GPTQ,
  // -AWQ), or a config.json with a 4-bit quantization_config. Loading it gives 4-bit base
  // weights whatever the training config asks for, so only QLoRA-style training applies.
  bool prequantized_4bit = false;
  // "bitsandbytes", "GPTQ", "AWQ" (prequantized_4bit); any other quant_method of the checkpoint's
  // quantization_config (fp8, auto-round, ...) as written, which memplan does not model; empty
  // when the config has none.
  std::string quantization;
};

// Resolves `name` in this order (docs/models.md#resolution):
//   1. a path: a config.json, a PEFT adapter_config.json (its base_model_name_or_path is
//      resolved in turn), or a directory holding either, or a training output directory whose
//      latest checkpoint-N holds either;
//   2. the catalog, by id, short name or alias, any case;
//   3. the name rules (model_names.hpp): mirrors, re-uploads, variant suffixes, fine-tunes;
//   4. the local Hugging Face cache.
// Unknown names get a did-you-mean of the same size, or say exactly what to pass instead; a
// popular model of a type memplan does not count (model_names.json not_modelled) says so.
Result<ResolvedModel> resolve_model_source(const std::string& name, const ModelSearchEnv& env);

// Step 3 of resolve_model_source alone: the catalog entry a name reaches through the name rules
// (never a path or the cache), nullopt when none; an error for a known different architecture.
Result<std::optional<ResolvedModel>> resolve_by_name_rules(const std::string& name);

// resolve_model_source(name, env).spec.
Result<ModelSpec> resolve_model(const std::string& name, const ModelSearchEnv& env);

// The config.json of model `id` ("org/name") in the local Hugging Face cache: the snapshot that
// refs/main points to, else the newest snapshot. Empty when not cached.
std::string find_in_hf_cache(const std::string& id, const ModelSearchEnv& env);

// A Llama-shaped model with about `params` parameters (--model-params 7B): the nearest real
// Llama-family shape (docs/models.md#model-params), its layer count and then its MLP width
// adjusted to come as close to `params` as the shape allows. describe_shape() states it and is
// printed with every estimate.
Result<ModelSpec> model_from_param_count(std::int64_t params);
std::string describe_shape(const ModelSpec& m);

// One row of the --model-params table.
struct ShapeRow {
  const char* source;  // the real model whose shape this is
  std::int64_t hidden_size;
  int num_layers;
  int num_heads;
  int num_kv_heads;
  std::int64_t head_dim;
  std::int64_t intermediate_size;
  std::int64_t vocab_size;
  bool tie_word_embeddings;
};
const std::vector<ShapeRow>& param_count_shapes();

// "8,030,261,248"
std::string group_digits(std::int64_t n);

}  // namespace memplan::io

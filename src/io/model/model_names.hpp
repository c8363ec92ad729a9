// How a model id that is not literally in the catalog is still recognised: mirrors and re-uploads
// (NousResearch/*, unsloth/*-bnb-4bit, TheBloke/*-GPTQ), variant suffixes (-Instruct, -it, -chat,
// -Base) and well-known fine-tunes. The rules are code; the ids they cannot derive are data
// (configs/model_names.json). docs/models.md#name-rules explains both.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memplan/result.hpp"

namespace memplan::io {

// An id reduced to what decides its architecture: lower-case organisation and the name's tokens
// (split at '-') without variant and quantization tokens, and without "meta" before "llama".
// "unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit" -> {"unsloth", "llama-3.1-8b"}.
struct NameKey {
  std::string org;  // empty for a bare name ("llama-3.1-8b")
  std::string key;
  bool operator==(const NameKey& o) const { return org == o.org && key == o.key; }
};
NameKey name_key(std::string_view id);

// What the name says about the checkpoint's storage: a bitsandbytes, GPTQ or AWQ 4-bit re-upload.
struct NameQuantization {
  bool prequantized_4bit = false;
  std::string method;  // "bitsandbytes", "GPTQ", "AWQ"; empty when not quantized
};
NameQuantization name_quantization(std::string_view id);

// The parameter-size token of a name ("7b", "1.5b", "135m", "8x7b"), lower case; empty if none.
// Did-you-mean suggestions keep to names with the same token.
std::string size_token(std::string_view name);

// One row of configs/model_names.json.
struct NameRule {
  // kNotModelled: a popular model whose model_type memplan does not count (phi-2, starcoder2...):
  // named so that the error says so instead of suggesting a different model.
  enum class Kind { kSameArchitecture, kFineTune, kDifferentArchitecture, kNotModelled };
  Kind kind = Kind::kSameArchitecture;
  std::string id;          // the id as published
  std::string target;      // the catalog id it maps to (or, for kDifferentArchitecture, resembles);
                           // for kNotModelled, its model_type
  std::string why;         // one sentence, shown to the user
  std::int64_t params = 0; // kNotModelled: the published total, 0 when none was found
};

struct NameRules {
  std::vector<std::string> mirror_orgs;  // lower case
  std::vector<NameRule> rules;
};

// The embedded configs/model_names.json, parsed once.
Result<NameRules> load_name_rules();
// Parses the text of a model_names.json; load_name_rules() applies it to the embedded file.
Result<NameRules> parse_name_rules(std::string_view json_text, const std::string& origin);

}  // namespace memplan::io

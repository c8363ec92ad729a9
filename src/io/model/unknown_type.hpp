// What the config.json of a model_type memplan does not know says about its layout: a key of a
// block a Llama lacks (refused by name), and the keys memplan reads past (stated in the note that
// comes with a Llama read). docs/models.md#unknown-types.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace memplan::io {

struct UnknownLayout {
  std::string block;                // a key of a block a Llama lacks; empty when none
  std::string meaning;              // what that key adds or changes; empty for the plain block keys
  std::vector<std::string> unread;  // keys neither a Llama's, inert, nor a block's, in file order
};

// Classifies every top-level key of an unknown model_type's config.json: the keys a Llama reader
// reads, the keys that never change what a training step allocates (PretrainedConfig's common and
// generation attributes, token ids, a zero dropout), the keys of blocks a Llama lacks, and the rest.
UnknownLayout inspect_unknown_layout(const nlohmann::json& j);

// The phrase a refusal and the note quote for `layout.block`: "\"key\"" or "\"key\" (meaning)".
std::string describe_block(const UnknownLayout& layout);

}  // namespace memplan::io

// The built-in catalog (configs/models) as the model-family tests read it: one entry's ModelSpec
// by name, id or alias, loaded once per test binary; and the step those tests estimate it under.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "io/model/model_source.hpp"
#include "memplan/training.hpp"

namespace memplan::testing {

inline const ModelSpec& catalog_spec(const std::string& name) {
  static auto catalog = io::load_catalog();
  REQUIRE(catalog.has_value());
  const io::CatalogEntry* c = io::find_catalog_entry(*catalog, name);
  REQUIRE(c != nullptr);
  return c->spec;
}

// A config.json under tests/data/models/<dir>/, read as `--model PATH` reads it.
inline ModelSpec fixture_spec(const std::string& dir) {
  auto r = io::resolve_model_source(std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/models/" + dir + "/config.json",
                                    io::ModelSearchEnv{});
  REQUIRE(r.has_value());
  return r->spec;
}

// One bf16 sequence of seq_len tokens on CUDA, LoRA (PEFT's default targets) with checkpointing.
inline TrainingConfig lora_checkpointed(std::int64_t seq_len = 512) {
  TrainingConfig c;
  c.micro_batch = 1;
  c.seq_len = seq_len;
  c.torch_dtype = DType::kBFloat16;
  c.device = Device::kCuda;
  c.gradient_checkpointing = true;
  c.lora.enabled = true;
  return c;
}

// The same with LoRA on q_proj and v_proj named: PEFT has no default targets for most of the
// types the model tests estimate and asks for them (docs/formulas.md#peft-default-targets).
inline TrainingConfig lora_qv_checkpointed(std::int64_t seq_len = 512) {
  TrainingConfig c = lora_checkpointed(seq_len);
  c.lora.target_modules = {"q_proj", "v_proj"};
  return c;
}

}  // namespace memplan::testing

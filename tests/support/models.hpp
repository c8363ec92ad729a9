// Model specs built by hand for tests (independent of the catalog files).
#pragma once

#include "memplan/model.hpp"

namespace memplan::testing {

// meta-llama/Llama-3.1-8B config.json
inline ModelSpec llama31_8b() {
  ModelSpec m;
  m.name = "llama-3.1-8b";
  m.model_type = "llama";
  m.vocab_size = 128256;
  m.hidden_size = 4096;
  m.intermediate_size = 14336;
  m.num_layers = 32;
  m.num_heads = 32;
  m.num_kv_heads = 8;
  m.head_dim = 128;
  m.max_position_embeddings = 131072;
  m.torch_dtype = "bfloat16";
  return m;
}

// A toy Llama (the "gqa" shape of tools/measure/cases.py).
inline ModelSpec toy_llama(int layers = 4) {
  ModelSpec m;
  m.name = "toy";
  m.model_type = "llama";
  m.vocab_size = 8000;
  m.hidden_size = 256;
  m.intermediate_size = 688;
  m.num_layers = layers;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 64;
  return m;
}

}  // namespace memplan::testing

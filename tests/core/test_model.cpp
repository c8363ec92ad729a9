#include <catch2/catch.hpp>

#include "memplan/model.hpp"

using namespace memplan;

namespace {
ModelSpec llama31_8b() {
  ModelSpec m;
  m.model_type = "llama";
  m.vocab_size = 128256;
  m.hidden_size = 4096;
  m.intermediate_size = 14336;
  m.num_layers = 32;
  m.num_heads = 32;
  m.num_kv_heads = 8;
  m.head_dim = 128;
  return m;
}
}  // namespace

TEST_CASE("Llama-3.1-8B parameter count matches the published total") {
  const auto c = count_parameters(llama31_8b());
  CHECK(c.total == 8'030'261'248);
  CHECK(c.embedding == 128256LL * 4096);
  CHECK(c.lm_head == 128256LL * 4096);
  CHECK(c.norms == 65LL * 4096);
}

TEST_CASE("tied embeddings drop the lm_head") {
  auto m = llama31_8b();
  m.tie_word_embeddings = true;
  CHECK(count_parameters(m).total == 8'030'261'248 - 128256LL * 4096);
}

TEST_CASE("validate names the bad field") {
  auto m = llama31_8b();
  m.num_kv_heads = 5;
  CHECK(validate(m).error().message == "model num_key_value_heads = 5 must divide num_attention_heads (32)");
  m = llama31_8b();
  m.num_layers = 0;
  CHECK(validate(m).error().message == "model num_hidden_layers = 0 must be positive");
}

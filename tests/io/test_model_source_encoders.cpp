// ModernBERT config.json fields the step reads (src/io/model_source_encoders.cpp).
#include <catch2/catch.hpp>

#include <string>

#include "io/model_source.hpp"

using namespace memplan;

namespace {

std::string modernbert_config(const std::string& extra) {
  return R"({"model_type": "modernbert", "vocab_size": 50368, "hidden_size": 768, "num_hidden_layers": 22,
             "num_attention_heads": 12, "intermediate_size": 1152)" +
         extra + "}";
}

}  // namespace

TEST_CASE("ModernBERT's classifier_pooling: cls by default, mean when config.json says so") {
  auto plain = io::parse_hf_config(modernbert_config(""), "config.json");
  REQUIRE(plain.has_value());
  CHECK_FALSE(plain->mean_pooled_classifier);
  CHECK(plain->global_attn_every_n_layers == 3);  // ModernBertConfig's defaults
  CHECK(plain->local_attention == 128);
  auto mean = io::parse_hf_config(modernbert_config(R"(, "classifier_pooling": "mean")"), "config.json");
  REQUIRE(mean.has_value());
  CHECK(mean->mean_pooled_classifier);
  auto cls = io::parse_hf_config(modernbert_config(R"(, "classifier_pooling": "cls")"), "config.json");
  REQUIRE(cls.has_value());
  CHECK_FALSE(cls->mean_pooled_classifier);
  auto bad = io::parse_hf_config(modernbert_config(R"(, "classifier_pooling": "max")"), "config.json");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message == "\"classifier_pooling\" is \"max\": ModernBertConfig accepts \"cls\" or \"mean\"");
  CHECK(bad.error().where->file == "config.json");
}

TEST_CASE("ModernBERT's global_attn_every_n_layers must be at least 1") {
  auto zero = io::parse_hf_config(modernbert_config(R"(, "global_attn_every_n_layers": 0)"), "config.json");
  REQUIRE_FALSE(zero.has_value());
  CHECK(zero.error().message == "\"global_attn_every_n_layers\" is 0: ModernBERT needs at least 1 (every layer global)");
  auto one = io::parse_hf_config(modernbert_config(R"(, "global_attn_every_n_layers": 1)"), "config.json");
  REQUIRE(one.has_value());
  CHECK(one->global_attn_every_n_layers == 1);
}

TEST_CASE("ModernBERT's reference_compile: unset unless config.json says true or false") {
  auto unset = io::parse_hf_config(modernbert_config(""), "config.json");
  REQUIRE(unset.has_value());
  CHECK_FALSE(unset->reference_compile.has_value());
  auto off = io::parse_hf_config(modernbert_config(R"(, "reference_compile": false)"), "config.json");
  REQUIRE(off.has_value());
  CHECK(off->reference_compile == false);
  auto on = io::parse_hf_config(modernbert_config(R"(, "reference_compile": true)"), "config.json");
  REQUIRE(on.has_value());
  CHECK(on->reference_compile == true);
  auto null = io::parse_hf_config(modernbert_config(R"(, "reference_compile": null)"), "config.json");
  REQUIRE(null.has_value());
  CHECK_FALSE(null->reference_compile.has_value());
}

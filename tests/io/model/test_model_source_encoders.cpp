// ModernBERT and DeBERTa-v2/v3 config.json fields the steps read (src/io/model/model_source_encoders.cpp).
#include <catch2/catch.hpp>

#include <string>

#include "io/model/model_source.hpp"

using namespace memplan;

namespace {

std::string modernbert_config(const std::string& extra) {
  return R"({"model_type": "modernbert", "vocab_size": 50368, "hidden_size": 768, "num_hidden_layers": 22,
             "num_attention_heads": 12, "intermediate_size": 1152)" +
         extra + "}";
}

// microsoft/deberta-v3-base's config.json, as published on the hub.
std::string deberta_config(const std::string& extra) {
  return R"({"model_type": "deberta-v2", "vocab_size": 128100, "hidden_size": 768, "num_hidden_layers": 12,
             "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu", "max_position_embeddings": 512,
             "relative_attention": true, "position_buckets": 256, "norm_rel_ebd": "layer_norm", "share_att_key": true,
             "pos_att_type": "p2c|c2p", "layer_norm_eps": 1e-7, "max_relative_positions": -1,
             "position_biased_input": false, "type_vocab_size": 0)" +
         extra + "}";
}

std::string deberta_error(const std::string& extra) {
  auto r = io::parse_hf_config(deberta_config(extra), "config.json");
  if (r.has_value()) return "(parsed)";
  REQUIRE(r.error().where.has_value());
  CHECK(r.error().where->file == "config.json");
  return r.error().message;
}

}  // namespace

TEST_CASE("DeBERTa-v3's config.json: relative attention over 256 buckets, both position terms") {
  auto m = io::parse_hf_config(deberta_config(""), "config.json");
  REQUIRE(m.has_value());
  CHECK(m->is_encoder());
  CHECK(m->is_deberta());
  CHECK(m->relative_span == 256);  // att_span = position_buckets
  CHECK(m->relative_buckets);
  CHECK(m->c2p);
  CHECK(m->p2c);
  CHECK(m->rel_layer_norm);
  CHECK_FALSE(m->learned_positions);  // position_biased_input false: no absolute position table
  CHECK(m->type_vocab_size == 0);
  CHECK(m->head == EncoderHead::kPooling);
  CHECK(count_parameters(*m).total == 183'831'552);  // DebertaV2Model, the model card's 86M + 98M
}

TEST_CASE("DeBERTa's DebertaV2Config defaults and spellings") {
  SECTION("pos_att_type as a list, one term") {
    auto m = io::parse_hf_config(deberta_config(R"(, "pos_att_type": ["c2p"])"), "config.json");
    REQUIRE(m.has_value());
    CHECK(m->c2p);
    CHECK_FALSE(m->p2c);
  }
  SECTION("no buckets: the span is max_relative_positions, else max_position_embeddings") {
    auto unset = io::parse_hf_config(deberta_config(R"(, "position_buckets": -1)"), "config.json");
    REQUIRE(unset.has_value());
    CHECK(unset->relative_span == 512);
    CHECK_FALSE(unset->relative_buckets);
    auto given = io::parse_hf_config(deberta_config(R"(, "position_buckets": -1, "max_relative_positions": 128)"),
                                     "config.json");
    REQUIRE(given.has_value());
    CHECK(given->relative_span == 128);
    // rel_embeddings has 2 x span rows: 2 x 128 x 768 instead of 2 x 256 x 768.
    CHECK(count_parameters(*given).total == 183'831'552 - 256 * 768);
  }
  SECTION("without relative_attention there are no position terms and no rel_embeddings") {
    auto m = io::parse_hf_config(deberta_config(R"(, "relative_attention": false)"), "config.json");
    REQUIRE(m.has_value());
    CHECK(m->relative_span == 0);
    CHECK_FALSE(m->c2p);
    CHECK_FALSE(m->p2c);
    CHECK(count_parameters(*m).total == 183'831'552 - 512 * 768 - 2 * 768);
  }
  SECTION("position_biased_input (DebertaV2Config's default) adds the absolute table; token types add theirs") {
    auto m = io::parse_hf_config(deberta_config(R"(, "position_biased_input": true, "type_vocab_size": 2)"),
                                 "config.json");
    REQUIRE(m.has_value());
    CHECK(count_parameters(*m).total == 183'831'552 + 512 * 768 + 2 * 768);
  }
}

TEST_CASE("DeBERTa variants memplan does not model are refused at the file, saying why") {
  CHECK(deberta_error(R"(, "conv_kernel_size": 3)") == "DeBERTa's ConvLayer (\"conv_kernel_size\": 3) is not modelled");
  CHECK(deberta_error(R"(, "share_att_key": false)") ==
        "separate position projections (\"share_att_key\": false) are not modelled");
  CHECK(deberta_error(R"(, "embedding_size": 128)") ==
        "\"embedding_size\" 128 differs from \"hidden_size\" 768 (embed_proj is not modelled)");
  CHECK(deberta_error(R"(, "pos_att_type": "p2c|c2x")") == "\"pos_att_type\" has 'c2x': DeBERTa-v2 knows c2p and p2c");
  CHECK(deberta_error(R"(, "pos_att_type": 3)") == "\"pos_att_type\" must be a string or a list, got 3");
  CHECK(deberta_error(R"(, "pooler_hidden_size": 1024)") ==
        "\"pooler_hidden_size\" 1024 differs from \"hidden_size\" 768: DebertaV2ForSequenceClassification's "
        "classifier reads hidden_size features");
  CHECK(deberta_error(R"(, "position_buckets": 68719476736)") ==
        "the relative attention span 68719476736 is larger than 2^24 positions");
  // The sparse fields keep their defaults: a checkpoint with the v3 values parses.
  CHECK(deberta_error("") == "(parsed)");
}

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

// Exact parameter totals of encoders, counted by hand from transformers' modeling_bert.py,
// modeling_roberta.py and modeling_modernbert.py (docs/formulas.md#encoder-parameters).
#include <catch2/catch.hpp>

#include "memplan/model.hpp"

using namespace memplan;

namespace {

ModelSpec bert(std::int64_t V, std::int64_t h, int L, int heads, std::int64_t I, std::int64_t pos, std::int64_t types,
               const std::string& type = "bert") {
  ModelSpec m;
  m.model_type = type;
  m.encoder = true;
  m.vocab_size = V;
  m.hidden_size = h;
  m.num_layers = L;
  m.num_heads = m.num_kv_heads = heads;
  m.head_dim = h / heads;
  m.intermediate_size = I;
  m.max_position_embeddings = pos;
  m.type_vocab_size = types;
  m.norm = NormKind::kLayerNorm;
  m.norm_bias = true;
  m.pooler = true;
  return m;
}

}  // namespace

TEST_CASE("bert-base-uncased has 109,482,240 parameters with its pooler") {
  const ModelSpec m = bert(30522, 768, 12, 12, 3072, 512, 2);
  const ParameterCounts c = count_encoder_parameters(m);
  // word 30522 x 768, positions 512 x 768 + token types 2 x 768, embedding LayerNorm 2 x 768
  CHECK(c.embedding == 23440896);
  CHECK(c.position_embedding == 393216 + 1536);
  // per layer: q, k, v, o (768 x 768 + 768 each), 768 -> 3072 and 3072 -> 768 with biases,
  // two LayerNorms (weight + bias)
  CHECK(c.attention == 12 * 4 * (768 * 768 + 768));
  CHECK(c.mlp == 12 * (768 * 3072 + 3072 + 3072 * 768 + 768));
  CHECK(c.norms == 1536 + 12 * 2 * 1536);
  CHECK(c.lm_head == 768 * 768 + 768);  // BertPooler
  CHECK(c.total == 109482240);
  CHECK(count_parameters(m).total == 109482240);  // the public entry point dispatches to encoders
}

TEST_CASE("encoder heads: masked LM drops the pooler, adds transform and a tied decoder's bias") {
  ModelSpec m = bert(30522, 768, 12, 12, 3072, 512, 2);
  m.head = EncoderHead::kMaskedLm;
  // 109,482,240 - pooler 590,592 + transform 590,592 + LayerNorm 1,536 + decoder bias 30,522
  CHECK(count_parameters(m).total == 109514298);
  m.head = EncoderHead::kSequenceClassification;  // BERT: pooler + classifier 768 x 2 + 2
  CHECK(count_parameters(m).total == 109483778);
  m.num_labels = 3;
  CHECK(count_parameters(m).total == 109482240 + 768 * 3 + 3);
  m.pooler = false;  // a checkpoint without BertPooler
  m.head = EncoderHead::kPooling;
  CHECK(count_parameters(m).total == 109482240 - 590592);
}

TEST_CASE("roberta-base: 514 positions, one token type; its classifier has no pooler but a dense layer") {
  ModelSpec m = bert(50265, 768, 12, 12, 3072, 514, 1, "roberta");
  CHECK(count_parameters(m).total == 124645632);
  m.head = EncoderHead::kMaskedLm;
  CHECK(count_parameters(m).total == 124697433);
  m.head = EncoderHead::kSequenceClassification;
  // 124,645,632 - pooler 590,592 + dense 590,592 + out_proj 768 x 2 + 2
  CHECK(count_parameters(m).total == 124647170);
}

TEST_CASE("all-MiniLM-L6-v2 and bge-small: 384-wide BERTs") {
  CHECK(count_parameters(bert(30522, 384, 6, 12, 1536, 512, 2)).total == 22713216);
  CHECK(count_parameters(bert(30522, 384, 12, 12, 1536, 512, 2)).total == 33360000);
}

TEST_CASE("ModernBERT-base: no biases, no positions, layer 0 without attn_norm, a final norm") {
  ModelSpec m = bert(50368, 768, 22, 12, 1152, 8192, 0, "modernbert");
  m.norm_bias = false;
  m.pooler = false;
  const ParameterCounts c = count_parameters(m);
  CHECK(c.position_embedding == 0);
  CHECK(c.attention == 22 * (768 * 2304 + 768 * 768));
  CHECK(c.mlp == 22 * (768 * 2304 + 1152 * 768));
  CHECK(c.norms == 768 + (22 * 2 - 1) * 768 + 768);
  CHECK(c.total == 149014272);
  m.head = EncoderHead::kMaskedLm;  // head.dense (no bias), head.norm, decoder bias
  CHECK(count_parameters(m).total == 149014272 + 768 * 768 + 768 + 50368);
}

TEST_CASE("encoder Linear modules carry PEFT's names") {
  const auto mods = encoder_layer_linears(bert(30522, 768, 12, 12, 3072, 512, 2));
  REQUIRE(mods.size() == 6);
  CHECK(mods[0].name == "query");
  CHECK(mods[3].name == "attention.output.dense");
  CHECK(mods[4].name == "intermediate.dense");
  CHECK(mods[5].name == "output.dense");
  for (const auto& l : mods) CHECK(l.bias);
}

TEST_CASE("encoder head names parse, unknown ones suggest") {
  CHECK(parse_encoder_head("MLM").value() == EncoderHead::kMaskedLm);
  CHECK(parse_encoder_head("cls").value() == EncoderHead::kSequenceClassification);
  CHECK(parse_encoder_head("pooling").value() == EncoderHead::kPooling);
  const auto e = parse_encoder_head("poolng");
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().message == "unknown encoder head 'poolng'");
  CHECK(e.error().suggestion.find("pooling") != std::string::npos);
}

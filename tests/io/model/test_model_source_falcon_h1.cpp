// Falcon-H1 (model_type falcon_h1) from its real config.json fields (issue 31,
// docs/models.md#falcon-h1): Mamba-2 and attention side by side in every layer, the mixer's widths
// from mamba_d_ssm, the optional gated norm and biases, and parameter totals derived by hand from
// the module shapes of transformers' modeling_falcon_h1.py.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "io/model/model_source.hpp"
#include "memplan/engine.hpp"
#include "support/catalog.hpp"
#include "support/invariants.hpp"

using namespace memplan;
using memplan::testing::lora_checkpointed;

namespace {

ModelSpec load(const std::string& dir) { return memplan::testing::fixture_spec(dir); }

// hidden 64, 2 layers, 4 heads of 16 (2 KV), MLP 128, vocabulary 100; Mamba-2: 4 heads of 16
// (mamba_d_ssm 64), state 8, one group.
const std::string kSmall = R"("model_type": "falcon_h1", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
    "mamba_d_ssm": 64, "mamba_n_heads": 4, "mamba_d_state": 8)";

// kSmall by hand. Per layer: in_proj 64 x (2 x 64 + 2 x 8 + 4) = 64 x 148 = 9,472; conv1d (64 + 16)
// x 4 + 80 = 400; dt_bias, A_log, D 12; out_proj 64 x 64 = 4,096; attention q, o 2 x 64 x 64 =
// 8,192, k, v 2 x 64 x 32 = 4,096; MLP 3 x 64 x 128 = 24,576; two norms 128: 50,972. Two layers,
// embedding and lm_head 2 x 6,400, final norm 64: 114,808.
constexpr std::int64_t kSmallTotal = 114'808;

std::int64_t total_of(const std::string& extra) {
  auto r = io::parse_hf_config("{" + kSmall + extra + "}", "c.json");
  REQUIRE(r.has_value());
  return count_parameters(*r).total;
}

}  // namespace

TEST_CASE("falcon-h1-7b: every layer runs a Mamba-2 mixer beside its attention; 7.59B by hand") {
  const ModelSpec m = load("falcon-h1-7b");
  CHECK(m.model_type == "falcon_h1");
  for (int l = 0; l < m.num_layers; ++l) CHECK(m.hybrid.mixer(l) == MixerKind::kMamba2);
  CHECK(m.hybrid.parallel_attention);
  CHECK(m.hybrid.mamba_heads == 24);
  CHECK(m.hybrid.mamba_head_dim == 128);
  CHECK(m.hybrid.mamba_inner() == 3072);  // mamba_d_ssm
  CHECK(m.hybrid.ssm_state == 256);
  CHECK(m.hybrid.mamba_chunk == 128);
  CHECK_FALSE(m.hybrid.mamba_norm);  // mamba_rms_norm: FalconH1Config's default false
  CHECK(m.head_dim == 128);
  std::vector<std::string> names;
  for (const auto& l : layer_linears(m, 0)) names.push_back(l.name);
  CHECK(names == std::vector<std::string>{"in_proj", "out_proj", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                          "up_proj", "down_proj"});
  // By hand (H 3,072; vocabulary 130,048, untied):
  //   Mamba-2 mixer: in_proj 3,072 x (2 x 3,072 + 2 x 256 + 24) = 20,520,960; conv1d 3,584 x 4 +
  //     3,584 = 17,920; dt_bias, A_log, D 3 x 24; out_proj 3,072 x 3,072 = 9,437,184: 29,976,136
  //   attention: q, o 2 x 3,072 x 1,536; k, v 2 x 3,072 x 256: 11,010,048
  //   MLP: 3 x 3,072 x 12,288 = 113,246,208; two norms 6,144: a layer 154,238,536
  //   44 x 154,238,536 + 2 x 130,048 x 3,072 + 3,072 = 7,585,513,568 (the card's 7B; the Hub: 7.59B)
  const ParameterCounts c = count_parameters(m);
  CHECK(c.total == 7'585'513'568LL);
  CHECK(c.active_per_token == c.total);
}

TEST_CASE("falcon-h1-3b and falcon-h1-1.5b by hand") {
  // 3B (H 2,560, vocabulary 65,536, untied): in_proj 2,560 x (8,192 + 512 + 32) = 22,364,160, conv1d
  // 4,608 x 5 = 23,040, 3 x 32, out_proj 4,096 x 2,560 = 10,485,760: 32,873,056; attention 2 x 2,560
  // x 1,280 + 2 x 2,560 x 256 = 7,864,320; MLP 3 x 2,560 x 6,144 = 47,185,920; norms 5,120: a layer
  // 87,928,416. 32 layers + 2 x 167,772,160 + 2,560 = 3,149,256,192 (the card's 3B; the Hub: 3.15B).
  CHECK(count_parameters(load("falcon-h1-3b")).total == 3'149'256'192LL);
  // 1.5B (H 2,048, vocabulary 65,537, untied): in_proj 2,048 x (6,144 + 512 + 48) = 13,729,792,
  // conv1d 3,584 x 5 = 17,920, 3 x 48, out_proj 6,291,456: 20,039,312; attention 2 x 2,048 x 1,024 +
  // 2 x 2,048 x 256 = 5,242,880; MLP 3 x 2,048 x 4,608 = 28,311,552; norms 4,096: a layer 53,597,840.
  // 24 layers + 2 x 134,219,776 + 2,048 = 1,554,789,760 (the card's 1.5B; the Hub: 1.55B).
  CHECK(count_parameters(load("falcon-h1-1.5b")).total == 1'554'789'760LL);
}

TEST_CASE("falcon_h1: the gated norm, the bias flags, tying and mamba_d_ssm null change the count by their modules") {
  CHECK(total_of("") == kSmallTotal);
  // mamba_rms_norm: FalconH1RMSNormGated's weight over mamba_d_ssm, per layer.
  CHECK(total_of(R"(, "mamba_rms_norm": true)") == kSmallTotal + 2 * 64);
  // projectors_bias: out_proj's (hidden); mamba_proj_bias: in_proj's (148); mamba_conv_bias false: -80.
  CHECK(total_of(R"(, "projectors_bias": true)") == kSmallTotal + 2 * 64);
  CHECK(total_of(R"(, "mamba_proj_bias": true)") == kSmallTotal + 2 * 148);
  CHECK(total_of(R"(, "mamba_conv_bias": false)") == kSmallTotal - 2 * 80);
  // attention_bias: q 64, k 32, v 32, o 64; mlp_bias: 128 + 128 + 64.
  CHECK(total_of(R"(, "attention_bias": true)") == kSmallTotal + 2 * 192);
  CHECK(total_of(R"(, "mlp_bias": true)") == kSmallTotal + 2 * 320);
  CHECK(total_of(R"(, "tie_word_embeddings": true)") == kSmallTotal - 6'400);
  // mamba_d_ssm null: mamba_expand x hidden = 128, heads of 32 ("auto"): in_proj 64 x 276 = 17,664
  // (+8,192), conv1d 144 x 5 = 720 (+320), out_proj 128 x 64 (+4,096): 12,608 more a layer.
  auto null_ssm = io::parse_hf_config("{" + kSmall + R"(, "mamba_d_ssm": null})", "c.json");
  REQUIRE(null_ssm.has_value());
  CHECK(null_ssm->hybrid.mamba_head_dim == 32);
  CHECK(count_parameters(*null_ssm).total == kSmallTotal + 2 * 12'608);
  // The class default mamba_d_ssm is 1024, which 4 heads of "auto" 256 fill.
  auto dflt = io::parse_hf_config(R"({"model_type": "falcon_h1", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "mamba_n_heads": 4})", "c.json");
  REQUIRE(dflt.has_value());
  CHECK(dflt->hybrid.mamba_inner() == 1024);
  CHECK(dflt->hybrid.mamba_head_dim == 256);
  CHECK(dflt->hybrid.ssm_state == 256);
  CHECK(dflt->hybrid.mamba_chunk == 256);
}

TEST_CASE("falcon_h1: what is not modelled or not consistent is refused with the key") {
  const auto err = [](const std::string& extra) {
    auto r = io::parse_hf_config("{" + kSmall + extra + "}", "c.json");
    REQUIRE_FALSE(r.has_value());
    return r.error().message;
  };
  CHECK(err(R"(, "mamba_d_head": 8)") == "\"mamba_n_heads\" 4 x \"mamba_d_head\" 8 must equal \"mamba_d_ssm\" (64)");
  CHECK(err(R"(, "hidden_act": "gelu")") ==
        "\"hidden_act\" must be \"silu\" for falcon_h1 (every released checkpoint uses it; the Mamba-2 mixer's "
        "convolution runs it too)");
  CHECK(err(R"(, "mlp_multipliers": [1.0, 1.0, 1.0])") == "\"mlp_multipliers\" must list 2 numbers");
  CHECK(err(R"(, "ssm_multipliers": [1.0])") == "\"ssm_multipliers\" must list 5 numbers");
  CHECK(err(R"(, "attention_dropout": 0.1)") ==
        "\"attention_dropout\" 0.1 is not modelled for falcon_h1 (the released checkpoints use 0.0)");
  CHECK(err(R"(, "mamba_rms_norm": "yes")") == "\"mamba_rms_norm\" must be true or false");
  // The right count of values that are not numbers, and a dropout written as a string, were read
  // past (review finding): FalconH1MLP multiplies by them, and "0.1" is not a probability.
  CHECK(err(R"(, "mlp_multipliers": ["a", "b"])") == "\"mlp_multipliers\" must list 2 numbers");
  CHECK(err(R"(, "attention_dropout": "0.1")") ==
        "\"attention_dropout\" must be a probability (0 <= p < 1), got \"0.1\"");
}

TEST_CASE("Falcon-H1 estimates end to end; PEFT has no default targets for it") {
  const ModelSpec m = load("falcon-h1-1.5b");
  TrainingConfig lora = lora_checkpointed();
  auto none = estimate(m, lora);
  REQUIRE_FALSE(none.has_value());
  CHECK(none.error().message == "PEFT has no default LoRA target modules for model_type 'falcon_h1'");
  lora.lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "in_proj", "out_proj"};
  auto e = estimate(m, lora);
  REQUIRE(e.has_value());
  memplan::testing::require_consistent(*e);
  // r 16 on every layer: q (2,048 + 1,024) x 16 = 49,152; k, v (2,048 + 256) x 16 = 36,864 each;
  // o (1,024 + 2,048) x 16 = 49,152; in_proj (2,048 + 6,704) x 16 = 140,032; out_proj (3,072 +
  // 2,048) x 16 = 81,920: 393,984 a layer, 24 layers.
  CHECK(e->params.trainable == 24 * 393'984LL);
  TrainingConfig full = lora_checkpointed();
  full.lora.enabled = false;
  full.gradient_checkpointing = false;
  auto f = estimate(m, full);
  REQUIRE(f.has_value());
  memplan::testing::require_consistent(*f);
  CHECK(f->params.trainable == count_parameters(m).total);
}

// Granite 4.0 (model_type granitemoehybrid) from its real config.json files (issue 31,
// docs/models.md#granite-4-0): the layer layout, the Mamba-2 mixer's widths, the MoE with its
// shared MLP or the shared MLP alone, NoPE, and parameter totals derived by hand from the module
// shapes of transformers' modeling_granitemoehybrid.py.
#include <catch2/catch.hpp>

#include <string>

#include "io/model/model_source.hpp"
#include "memplan/engine.hpp"
#include "support/catalog.hpp"
#include "support/invariants.hpp"

using namespace memplan;
using memplan::testing::lora_checkpointed;

namespace {

ModelSpec load(const std::string& dir) { return memplan::testing::fixture_spec(dir); }

int count_mixers(const ModelSpec& m, MixerKind k) {
  int n = 0;
  for (int l = 0; l < m.num_layers; ++l) n += m.hybrid.mixer(l) == k ? 1 : 0;
  return n;
}

const std::string kSmall = R"("model_type": "granitemoehybrid", "hidden_size": 64, "intermediate_size": 32,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
    "mamba_n_heads": 4, "mamba_d_state": 8, "shared_intermediate_size": 48)";

}  // namespace

TEST_CASE("granite-4.0-h-tiny: 36 Mamba-2 and 4 NoPE attention layers, 64 experts and a shared MLP") {
  const ModelSpec m = load("granite-4.0-h-tiny");
  CHECK(m.model_type == "granitemoehybrid");
  CHECK(count_mixers(m, MixerKind::kMamba2) == 36);
  CHECK(count_mixers(m, MixerKind::kAttention) == 4);
  CHECK(m.hybrid.mixer(5) == MixerKind::kAttention);
  CHECK(m.hybrid.mamba_heads == 48);
  CHECK(m.hybrid.mamba_head_dim == 64);
  CHECK(m.hybrid.mamba_chunk == 256);
  CHECK(m.nope_layers.size() == 40);  // no position_embedding_type: no rotary embedding
  CHECK(m.moe.num_experts == 64);
  CHECK(m.moe.experts_per_token == 6);
  CHECK(m.moe.expert_intermediate_size == 512);
  CHECK(m.moe.num_shared_experts == 1);
  CHECK(m.moe.shared_intermediate_size == 1024);
  // By hand (H 1,536; vocabulary 100,352, tied):
  //   embedding 100,352 x 1,536 = 154,140,672
  //   Mamba-2 mixer: in_proj 1,536 x (3,072 + 3,328 + 48) = 9,904,128; conv1d 3,328 x 4 + 3,328 =
  //     16,640; dt_bias, A_log, D 3 x 48; norm 3,072; out_proj 3,072 x 1,536 = 4,718,592: 14,642,576
  //   attention: q, o 2 x 1,536^2; k, v 2 x 1,536 x 512: 6,291,456
  //   MoE: router 1,536 x 64 = 98,304; input_linear 64 x 1,024 x 1,536 = 100,663,296; output_linear
  //     64 x 1,536 x 512 = 50,331,648; shared_mlp 1,536 x 2,048 + 1,024 x 1,536 = 4,718,592: 155,811,840
  //   two norms per layer 3,072; final norm 1,536
  //   36 x 170,457,488 + 4 x 162,106,368 + 154,140,672 + 1,536 = 6,939,037,248 (the card's "7B")
  // Active: 6 of 64 experts, 40 x (150,994,944 - 14,155,776) fewer: 1,465,470,528 (the card's "1B
  // active" counts the layers without the 154M embedding).
  const ParameterCounts c = count_parameters(m);
  CHECK(c.total == 6'939'037'248LL);
  CHECK(c.active_per_token == 1'465'470'528LL);
  const auto mamba = layer_linears(m, 0);
  REQUIRE(mamba.size() == 7);  // in_proj, out_proj, router, the experts' two, the shared MLP's two
  CHECK(mamba[0].name == "in_proj");
  CHECK(mamba[0].out_features == 2 * 3'072 + 2 * 128 + 48);  // gate, x, B, C, dt
  CHECK(mamba[2].role == LinearRole::kRouter);
  CHECK(mamba[2].nn_linear);  // router.layer is an nn.Linear
  CHECK(mamba[3].name == "gate_up_proj");
  CHECK_FALSE(mamba[3].nn_linear);  // GraniteMoeHybridParallelExperts: a 3-D Parameter
  CHECK(mamba[5].role == LinearRole::kSharedExpert);
  CHECK(mamba[5].nn_linear);
}

TEST_CASE("granite-4.0-h-small: 32B total and 9B active by hand") {
  const ModelSpec m = load("granite-4.0-h-small");
  CHECK(m.hybrid.mamba_heads == 128);  // the config class's default; mamba_d_head "auto": 8,192 / 128
  CHECK(m.hybrid.mamba_head_dim == 64);
  // embedding 100,352 x 4,096 = 411,041,792; Mamba-2 mixer: in_proj 4,096 x 16,768 = 68,681,728,
  // conv1d 8,448 x 5 = 42,240, 3 x 128, norm 8,192, out_proj 33,554,432: 102,286,976; attention:
  // 2 x 4,096^2 + 2 x 4,096 x 1,024 = 41,943,040; MoE: router 294,912, input_linear 72 x 1,536 x
  // 4,096 = 452,984,832, output_linear 72 x 4,096 x 768 = 226,492,416, shared 18,874,368:
  // 698,646,528; norms 8,192 a layer.
  //   36 x 800,941,696 + 4 x 740,597,760 + 411,041,792 + 4,096 = 32,207,337,984 (the card: 32B)
  // Active: 10 of 72 experts: 40 x (679,477,248 - 94,371,840) fewer: 8,803,121,664 (the card: 9B).
  const ParameterCounts c = count_parameters(m);
  CHECK(c.total == 32'207'337'984LL);
  CHECK(c.active_per_token == 8'803'121'664LL);
}

TEST_CASE("granite-4.0-h-1b: num_local_experts 0 is a dense model of the shared MLP alone") {
  const ModelSpec m = load("granite-4.0-h-1b");
  CHECK_FALSE(m.moe.enabled());
  CHECK(m.intermediate_size == 4096);  // shared_intermediate_size
  // The h-tiny mixers and attention (14,642,576 and 6,291,456) with a 1,536 x 8,192 + 4,096 x
  // 1,536 = 18,874,368 shared MLP: 36 x 33,520,016 + 4 x 25,168,896 + 154,140,672 + 1,536 =
  // 1,461,538,368 (the card: 1.5B).
  const ParameterCounts c = count_parameters(m);
  CHECK(c.total == 1'461'538'368LL);
  CHECK(c.active_per_token == c.total);
  std::vector<std::string> names;
  for (const auto& l : layer_linears(m, 5)) names.push_back(l.name);
  CHECK(names == std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj"});
}

TEST_CASE("granitemoehybrid: defaults, rope, an all-attention layout and the errors name the key") {
  SECTION("no layer_types: every layer Mamba-2; mamba_d_head auto from mamba_expand x hidden_size") {
    auto r = io::parse_hf_config("{" + kSmall + R"(, "num_local_experts": 0})", "c.json");
    REQUIRE(r.has_value());
    CHECK(count_mixers(*r, MixerKind::kMamba2) == 2);
    CHECK(r->hybrid.mamba_head_dim == 32);  // 2 x 64 / 4
    CHECK(r->hybrid.ssm_state == 8);
    CHECK(r->hybrid.mamba_groups == 1);
    CHECK(r->intermediate_size == 48);
  }
  SECTION("position_embedding_type rope: no NoPE layers; an all-attention model reads no mamba keys") {
    auto r = io::parse_hf_config("{" + kSmall + R"(, "position_embedding_type": "rope", "num_local_experts": 0,
        "layer_types": ["attention", "attention"], "mamba_d_head": 7})", "c.json");
    REQUIRE(r.has_value());
    CHECK(r->nope_layers.empty());
    CHECK(count_mixers(*r, MixerKind::kAttention) == 2);
  }
  SECTION("the class default of 8 experts, top-2, when the keys are absent") {
    auto r = io::parse_hf_config("{" + kSmall + "}", "c.json");
    REQUIRE(r.has_value());
    CHECK(r->moe.num_experts == 8);
    CHECK(r->moe.experts_per_token == 2);
    CHECK(r->moe.expert_intermediate_size == 32);
  }
  SECTION("errors") {
    auto bad_type = io::parse_hf_config("{" + kSmall + R"(, "layer_types": ["mamba", "mlp"]})", "c.json");
    REQUIRE_FALSE(bad_type.has_value());
    CHECK(bad_type.error().to_string() ==
          "c.json: \"layer_types\"[1] is \"mlp\"; granitemoehybrid has \"mamba\" and \"attention\" layers; check the "
          "config");
    auto short_types = io::parse_hf_config("{" + kSmall + R"(, "layer_types": ["mamba"]})", "c.json");
    REQUIRE_FALSE(short_types.has_value());
    CHECK(short_types.error().message == "\"layer_types\" must list one entry per layer (2)");
    auto heads = io::parse_hf_config("{" + kSmall + R"(, "mamba_d_head": 16})", "c.json");
    REQUIRE_FALSE(heads.has_value());
    CHECK(heads.error().message ==
          "\"mamba_n_heads\" 4 x \"mamba_d_head\" 16 must equal \"mamba_expand\" x \"hidden_size\" (128)");
    auto topk = io::parse_hf_config("{" + kSmall + R"(, "num_local_experts": 4, "num_experts_per_tok": 5})", "c.json");
    REQUIRE_FALSE(topk.has_value());
    CHECK(topk.error().message == "\"num_experts_per_tok\" must be between 1 and \"num_local_experts\" (4), got 5");
  }
}

TEST_CASE("Granite 4.0-H estimates end to end under LoRA with checkpointing and in full fine-tuning") {
  for (const char* dir : {"granite-4.0-h-tiny", "granite-4.0-h-1b"}) {
    INFO(dir);
    const ModelSpec m = load(dir);
    TrainingConfig lora = lora_checkpointed();
    lora.lora.all_linear = true;
    auto e = estimate(m, lora);
    REQUIRE(e.has_value());
    memplan::testing::require_consistent(*e);
    TrainingConfig full = lora_checkpointed();
    full.lora.enabled = false;
    full.gradient_checkpointing = false;
    auto f = estimate(m, full);
    REQUIRE(f.has_value());
    memplan::testing::require_consistent(*f);
    CHECK(f->params.trainable == count_parameters(m).total);
  }
  SECTION("LoRA on transformers' names of the shared MLP: input_linear and output_linear") {
    const ModelSpec m = load("granite-4.0-h-1b");
    TrainingConfig a = lora_checkpointed();
    a.lora.target_modules = {"input_linear", "output_linear"};
    auto by_hf_name = estimate(m, a);
    REQUIRE(by_hf_name.has_value());
    a.lora.target_modules = {"gate_up_proj", "down_proj"};
    auto by_memplan_name = estimate(m, a);
    REQUIRE(by_memplan_name.has_value());
    // 40 shared MLPs, r 16 (lora_checkpointed): (1,536 + 8,192) x 16 + (4,096 + 1,536) x 16 = 245,760 each.
    CHECK(by_hf_name->params.trainable == 40 * 245'760LL);
    CHECK(by_hf_name->params.trainable == by_memplan_name->params.trainable);
  }
}

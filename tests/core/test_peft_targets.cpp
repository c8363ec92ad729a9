// PEFT's default LoRA targets by release (src/core/peft_targets.cpp,
// docs/formulas.md#peft-default-targets). The expected rows were read from
// TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING at the huggingface/peft release tags
// (`git show vX.Y.Z:src/peft/utils/constants.py`, peft/utils/other.py before v0.7.0).
#include <catch2/catch.hpp>

#include "memplan/stack.hpp"
#include "support/models.hpp"

using namespace memplan;

namespace {

std::vector<std::string> targets(const char* type, const char* peft) {
  const auto d = peft_default_lora_targets(type, version(peft));
  return d ? d->modules : std::vector<std::string>{"(none)"};
}

const StackEffect* effect(const StackApplied& a, const std::string& key) {
  for (const auto& e : a.effects)
    if (e.key == key) return &e;
  return nullptr;
}

TrainingConfig lora() {
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.autocast = DType::kBFloat16;
  c.lora.enabled = true;
  return c;
}

Stack peft(const char* v) {
  Stack s;
  s.versions[Library::kPeft] = version(v);
  return s;
}

}  // namespace

TEST_CASE("PEFT's mapping by release: the first release that holds a type, and none before it") {
  using V = std::vector<std::string>;
  CHECK(targets("llama", "0.6.0") == V{"q_proj", "v_proj"});      // since v0.3.0
  CHECK(targets("qwen2", "0.11.1") == V{"(none)"});               // added in v0.12.0 (PR #1906)
  CHECK(targets("qwen2", "0.12.0") == V{"q_proj", "v_proj"});
  CHECK(targets("gemma2", "0.12.0") == V{"(none)"});              // v0.13.0 (PR #2078)
  CHECK(targets("qwen3", "0.15.2") == V{"(none)"});               // v0.16.0 (PR #2522)
  CHECK(targets("qwen3", "0.16.0") == V{"q_proj", "v_proj"});
  CHECK(targets("gemma3_text", "0.16.0") == V{"q_proj", "v_proj"});
  CHECK(targets("phi", "0.7.1") == V{"Wqkv", "out_proj", "fc1", "fc2"});  // changed in v0.8.0
  CHECK(targets("phi", "0.8.0") == V{"q_proj", "v_proj", "fc1", "fc2"});
  CHECK(targets("nemotron_h", "0.19.1") == V{"(none)"});          // v0.20.0 (PR #3289)
  CHECK(targets("nemotron_h", "0.20.0") == V{"q_proj", "k_proj", "v_proj", "o_proj"});
  CHECK(targets("deberta-v2", "0.20.0") == V{"query_proj", "value_proj"});
  CHECK(targets("gpt2", "0.6.0") == V{"c_attn"});
  // Types memplan reads that no release's mapping holds (main at 5d602fdbf neither).
  for (const char* t : {"qwen2_moe", "qwen3_moe", "olmo2", "olmo3", "smollm3", "exaone4", "phi3", "granite",
                        "deepseek_v3", "glm4_moe", "gpt_oss", "qwen3_next", "lfm2", "gemma3", "qwen2_5_vl", "mllama",
                        "mistral3", "ministral3", "llama4_text", "modernbert", "mpnet", "nomic_bert", "falcon_h1",
                        "granitemoehybrid", "cohere2", "starcoder2", "arcee", "internlm3", "minimax_m2"}) {
    INFO(t);
    CHECK(targets(t, "0.20.0") == V{"(none)"});
    CHECK_FALSE(peft_first_release_with(t).has_value());
  }
  REQUIRE(peft_first_release_with("qwen3").has_value());
  CHECK(peft_first_release_with("qwen3")->text == "0.16.0");
}

TEST_CASE("apply_stack sets PEFT's default targets for the stack's release, or refuses as PEFT does") {
  const ModelSpec m = memplan::testing::llama31_8b();
  TrainingConfig c = lora();
  auto a = apply_stack(peft("0.13.2"), c, {}, RunContext{}, &m);
  CHECK_FALSE(a.error.has_value());
  CHECK(c.lora.target_modules == std::vector<std::string>{"q_proj", "v_proj"});
  REQUIRE(effect(a, "lora_target_modules") != nullptr);
  CHECK(effect(a, "lora_target_modules")->why == "q_proj, v_proj: peft 0.13.2's default for model_type 'llama' (since 0.3.0)");

  ModelSpec q = m;  // a Qwen3 checkpoint under PEFT 0.15: no entry yet
  q.model_type = "qwen3";
  TrainingConfig c2 = lora();
  a = apply_stack(peft("0.15.2"), c2, {}, RunContext{}, &q);
  REQUIRE(a.error.has_value());
  CHECK(a.error->message == "peft 0.15.2 has no default LoRA target modules for model_type 'qwen3' (its mapping gained "
                            "them in 0.16.0): get_peft_model raises \"Please specify `target_modules` in `peft_config`\"");
  CHECK(a.error->suggestion == "name the targets: --lora-target-modules q_proj,k_proj,v_proj,o_proj (or all-linear), or "
                               "target_modules: all-linear in the config");

  // A wrapper: PEFT reads model.config.model_type, the top-level type, not the text model's.
  ModelSpec vl = m;
  vl.model_type = "qwen2";
  vl.config_model_type = "qwen2_5_vl";
  TrainingConfig c3 = lora();
  a = apply_stack(Stack{}, c3, {}, RunContext{}, &vl);
  REQUIRE(a.error.has_value());
  CHECK(a.error->message == "peft 0.21.0 has no default LoRA target modules for model_type 'qwen2_5_vl': get_peft_model "
                            "raises \"Please specify `target_modules` in `peft_config`\"");

  // What does not reach the rule: named targets, all-linear, a framework with its own LoRA.
  TrainingConfig named = lora();
  named.lora.target_modules = {"q_proj", "k_proj"};
  CHECK_FALSE(apply_stack(peft("0.15.2"), named, {}, RunContext{}, &q).error.has_value());
  TrainingConfig all = lora();
  all.lora.all_linear = true;  // LLaMA-Factory lora_target: all, axolotl lora_target_linear
  CHECK_FALSE(apply_stack(peft("0.15.2"), all, {}, RunContext{}, &q).error.has_value());
  CHECK(all.lora.target_modules.empty());
  RunContext torchtune;
  torchtune.peft = false;
  TrainingConfig own = lora();
  CHECK_FALSE(apply_stack(peft("0.15.2"), own, {}, torchtune, &q).error.has_value());
  CHECK(own.lora.target_modules.empty());
  TrainingConfig given = lora();  // a key or flag gave the targets (even as the default)
  CHECK_FALSE(apply_stack(peft("0.15.2"), given, {"lora_target_modules"}, RunContext{}, &q).error.has_value());
}

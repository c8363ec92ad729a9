// PEFT's default LoRA target modules by release (docs/formulas.md#peft-default-targets).
// LoraModel._prepare_adapter_config (peft/tuners/tuners_utils.py) looks `model.config.model_type`
// up in TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING when `target_modules` is None and
// raises "Please specify `target_modules` in `peft_config`" for a type it lacks. The table is the
// mapping's history, read at every release tag of huggingface/peft from v0.0.1 to v0.20.0 and main
// at 5d602fdbf (0.20.1.dev0; peft/utils/other.py before v0.7.0, peft/utils/constants.py since):
// each entry gives the release whose mapping first held the type with these modules.
#include <algorithm>

#include "memplan/stack.hpp"

namespace memplan {

namespace {

struct PeftEntry {
  const char* model_type;
  const char* since;  // the first release whose mapping held these modules
  std::vector<std::string> modules;
};

const std::vector<PeftEntry>& peft_entries() {
  // Later rows of one type replace earlier ones from their release on (phi: 0.7.0 -> 0.8.0).
  static const std::vector<PeftEntry> kEntries = {
      {"t5", "0.0.1", {"q", "v"}},
      {"mt5", "0.0.1", {"q", "v"}},
      {"bart", "0.0.1", {"q_proj", "v_proj"}},
      {"gpt2", "0.0.1", {"c_attn"}},
      {"bloom", "0.0.1", {"query_key_value"}},
      {"opt", "0.0.1", {"q_proj", "v_proj"}},
      {"gptj", "0.0.1", {"q_proj", "v_proj"}},
      {"gpt_neox", "0.0.1", {"query_key_value"}},
      {"gpt_neo", "0.0.1", {"q_proj", "v_proj"}},
      {"bert", "0.0.1", {"query", "value"}},
      {"roberta", "0.0.1", {"query", "value"}},
      {"xlm-roberta", "0.0.1", {"query", "value"}},
      {"electra", "0.0.1", {"query", "value"}},
      {"deberta-v2", "0.0.1", {"query_proj", "value_proj"}},
      {"deberta", "0.0.1", {"in_proj"}},
      {"layoutlm", "0.0.1", {"query", "value"}},
      {"blip-2", "0.3.0", {"q", "v", "q_proj", "v_proj"}},
      {"llama", "0.3.0", {"q_proj", "v_proj"}},
      {"chatglm", "0.3.0", {"query_key_value"}},
      {"gpt_bigcode", "0.4.0", {"c_attn"}},
      {"mpt", "0.4.0", {"Wqkv"}},
      {"RefinedWebModel", "0.5.0", {"query_key_value"}},
      {"RefinedWeb", "0.5.0", {"query_key_value"}},
      {"falcon", "0.5.0", {"query_key_value"}},
      {"btlm", "0.5.0", {"c_proj", "c_attn"}},
      {"codegen", "0.5.0", {"qkv_proj"}},
      {"mistral", "0.6.0", {"q_proj", "v_proj"}},
      {"stablelm", "0.6.0", {"q_proj", "v_proj"}},
      {"phi", "0.7.0", {"Wqkv", "out_proj", "fc1", "fc2"}},
      {"phi", "0.8.0", {"q_proj", "v_proj", "fc1", "fc2"}},
      {"mixtral", "0.8.0", {"q_proj", "v_proj"}},      // PR #1380
      {"gemma", "0.9.0", {"q_proj", "v_proj"}},        // PR #1499
      {"qwen2", "0.12.0", {"q_proj", "v_proj"}},       // PR #1906
      {"gemma2", "0.13.0", {"q_proj", "v_proj"}},      // PR #2078
      {"llama4", "0.16.0", {"q_proj", "v_proj"}},
      {"gemma3_text", "0.16.0", {"q_proj", "v_proj"}},
      {"qwen3", "0.16.0", {"q_proj", "v_proj"}},       // PR #2522
      {"rwkv", "0.18.0", {"key", "value", "receptance", "output"}},
      {"rwkv7", "0.18.0", {"r_proj", "k_proj", "v_proj", "o_proj", "key", "value"}},
      // A regex, `.*language_model\..*\.(q_proj|v_proj)`: the language model's q/v only (PR #3136).
      {"gemma4", "0.19.0", {"q_proj", "v_proj"}},
      {"nemotron_h", "0.20.0", {"q_proj", "k_proj", "v_proj", "o_proj"}},  // PR #3289
  };
  return kEntries;
}

}  // namespace

std::optional<PeftTargets> peft_default_lora_targets(std::string_view model_type, const Version& peft) {
  std::optional<PeftTargets> out;
  for (const auto& e : peft_entries()) {
    if (model_type != e.model_type) continue;
    const Version since = version(e.since);
    if (since <= peft) out = PeftTargets{e.modules, since};
  }
  return out;
}

std::optional<Version> peft_first_release_with(std::string_view model_type) {
  for (const auto& e : peft_entries())
    if (model_type == e.model_type) return version(e.since);
  return std::nullopt;
}

}  // namespace memplan

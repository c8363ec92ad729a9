// Tests for the model part of src/cli/training_flags.cpp: a --model that the name rules, a PEFT
// adapter or a pre-quantized checkpoint resolves (io::resolve_model_source), run through the whole
// CLI in process.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/exit_codes.hpp"
#include "cli_harness.hpp"

using json = nlohmann::json;
using memplan::testing::CliRun;
using memplan::testing::run_cli;

namespace {

std::int64_t peak(const std::vector<std::string>& args) {
  std::vector<std::string> a = {"estimate", "--batch", "1", "--seq-len", "512", "--format", "json"};
  a.insert(a.end(), args.begin(), args.end());
  const CliRun r = run_cli(a);
  INFO(r.err);
  REQUIRE(r.code == memplan::cli::kExitOk);
  return json::parse(r.out)["estimate"]["peak_bytes"].get<std::int64_t>();
}

}  // namespace

TEST_CASE("--model: an unsloth -bnb-4bit re-upload is the catalog model, loaded in 4 bits") {
  // from_pretrained applies the checkpoint's quantization_config: the same as asking for QLoRA
  // on the original.
  CHECK(peak({"--model", "unsloth/llama-3-8b-bnb-4bit", "--use-peft"}) ==
        peak({"--model", "meta-llama/Meta-Llama-3-8B", "--use-peft", "--load-in-4bit"}));
  CHECK(peak({"--model", "unsloth/llama-3-8b-bnb-4bit", "--use-peft"}) <
        peak({"--model", "meta-llama/Meta-Llama-3-8B", "--use-peft"}));
  // plan prints how the model was found with the other inputs' notes.
  const CliRun r = run_cli({"plan", "--model", "unsloth/llama-3-8b-bnb-4bit", "--use-peft", "--seq-len", "512",
                            "--gpu-memory", "80GB"});
  REQUIRE(r.code == memplan::cli::kExitOk);
  CHECK(r.out.find("QLoRA r=16") != std::string::npos);
  CHECK(r.out.find("model: unsloth/llama-3-8b-bnb-4bit: the same architecture as meta-llama/Meta-Llama-3-8B "
                   "(catalog llama-3-8b)\n") != std::string::npos);
}

TEST_CASE("--model: full fine-tuning of a pre-quantized checkpoint is refused with the fix") {
  const CliRun r = run_cli({"estimate", "--model", "unsloth/llama-3-8b-bnb-4bit", "--batch", "1"});
  CHECK(r.code == memplan::cli::kExitInvalidInput);
  CHECK(r.err ==
        "memplan: error: model 'unsloth/llama-3-8b-bnb-4bit' is a pre-quantized bitsandbytes 4-bit checkpoint, whose "
        "weights cannot be trained in full; train LoRA adapters on it (--use-peft or --method lora, which makes it "
        "QLoRA), or pass the unquantized model (meta-llama/Meta-Llama-3-8B)\n");
}

TEST_CASE("--model: a GPTQ re-upload is counted as its original, with a warning") {
  const CliRun r = run_cli({"estimate", "--model", "TheBloke/Llama-2-7B-GPTQ", "--use-peft", "--batch", "1"});
  REQUIRE(r.code == memplan::cli::kExitOk);
  CHECK((r.out + r.err).find("model 'TheBloke/Llama-2-7B-GPTQ' is a GPTQ 4-bit checkpoint; memplan models "
                             "bitsandbytes 4-bit weights only, so its weights are counted at the training dtype") !=
        std::string::npos);
  CHECK(peak({"--model", "TheBloke/Llama-2-7B-GPTQ", "--use-peft"}) ==
        peak({"--model", "meta-llama/Llama-2-7b-hf", "--use-peft"}));
}

TEST_CASE("--model: a checkpoint stored in a quantization memplan does not model says its weights are counted unquantized") {
  // DeepSeek-V3 and Kimi K2 publish fp8 block-quantized weights (quantization_config quant_method fp8).
  const auto dir = std::filesystem::temp_directory_path() / "memplan_test_fp8_checkpoint";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json")
      << R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
      "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})";
  const CliRun r = run_cli({"estimate", "--model", (dir / "config.json").string(), "--use-peft", "--lora-target-modules",
                            "q_proj,v_proj"});
  std::filesystem::remove_all(dir);
  REQUIRE(r.code == memplan::cli::kExitOk);
  CHECK((r.out + r.err).find("has a quantization_config (quant_method 'fp8') that memplan does not model; its "
                             "weights are counted unquantized at the training dtype") != std::string::npos);
}

TEST_CASE("--model: a second stage's adapter directory estimates its base model") {
  const std::string dir = std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/models/zephyr-qlora-output";
  CHECK(peak({"--model", dir, "--use-peft", "--load-in-4bit"}) ==
        peak({"--model", "mistralai/Mistral-7B-v0.1", "--use-peft", "--load-in-4bit"}));
}

TEST_CASE("--config: a second stage whose model is the first stage's missing output is located") {
  const auto dir = std::filesystem::temp_directory_path() / ("memplan-stage2-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto yaml = dir / "stage2.yaml";
  std::ofstream(yaml) << "model_name_or_path: ./output/sft\nper_device_train_batch_size: 2\n";
  const CliRun r = run_cli({"plan", "--config", yaml.string(), "--gpu-memory", "80GB"});
  std::filesystem::remove_all(dir);
  CHECK(r.code == memplan::cli::kExitIoError);
  CHECK(r.err == "memplan: error: " + yaml.string() +
                     ":1: cannot read './output/sft': no such file or directory; if it is the output of an earlier "
                     "training stage, pass the model that stage trains (--model BASE_ID) or the path to its "
                     "config.json once it exists\n");
}

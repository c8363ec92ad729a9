// The software stack as an input, end to end (issue 35): --stack, a fake environment's dist-info
// folders, a lock file beside the config, a launch script's allocator settings, and the published
// runs evaluated through the flags their sources state.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/exit_codes.hpp"
#include "cli/training_flags.hpp"
#include "cli_harness.hpp"
#include "io/measure/measurement.hpp"
#include "memplan/engine.hpp"

using namespace memplan;
using json = nlohmann::json;
using memplan::testing::CliRun;
using memplan::testing::run_cli;
using memplan::testing::ScopedEnv;
using memplan::testing::TempDir;

namespace {

json run_json(std::vector<std::string> args) {
  args.insert(args.end(), {"--format", "json"});
  const CliRun r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.code == cli::kExitOk);
  return json::parse(r.out);
}

std::int64_t peak(const std::vector<std::string>& args) {
  std::vector<std::string> a = {"estimate"};
  a.insert(a.end(), args.begin(), args.end());
  return run_json(a)["estimate"]["peak_bytes"].get<std::int64_t>();
}

std::string source_of(const json& stack, const std::string& library) {
  for (const auto& row : stack)
    if (row["library"] == library) return row["source"].get<std::string>() + " = " + row["version"].get<std::string>();
  return "(missing)";
}

// Mistral-7B LoRA at 4 x 4096 tokens, eager loss: the loss variant decides the logits' copies.
const std::vector<std::string> kLora = {"--model",      "mistralai/Mistral-7B-v0.1", "--torch-dtype", "bfloat16",
                                        "--bf16",       "--use-peft",                "--batch",       "4",
                                        "--seq-len",    "4096",                      "--gradient-checkpointing",
                                        "--attn-implementation", "flash_attention_2"};

void write(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

}  // namespace

TEST_CASE("--stack moves the figures the versions decide, and says which version did") {
  std::vector<std::string> old = kLora, now = kLora;
  old.insert(old.end(), {"--stack", "transformers==4.48.1"});
  now.insert(now.end(), {"--stack", "transformers==4.49.0"});
  // transformers 4.46-4.48 keep a contiguous fp32 copy of the shifted logits next to the fp32 logits
  // at the end of the forward (docs/formulas.md#logits-and-loss): 4 bytes x b x (s - 1) x V more in
  // the forward phase; 4.49 pads the labels instead (an int64 label row and one logit row per
  // sequence apart).
  const std::int64_t copy = 4LL * 4 * (4096 - 1) * 32000;
  const auto forward_peak = [](std::vector<std::string> args) {
    args.insert(args.begin(), "estimate");
    const json j = run_json(args);
    for (const auto& p : j["estimate"]["phases"])
      if (p["phase"] == "forward") return p["peak_bytes"].get<std::int64_t>();
    return std::int64_t{0};
  };
  const std::int64_t diff = forward_peak(old) - forward_peak(now);
  CHECK(std::llabs(diff - copy) <= 4LL * 4 * (32000 + 8));
  // This run peaks at the end of the forward with 4.48 and in the loss's backward with 4.49.
  CHECK(peak(old) > peak(now));
  const json shown = run_json({"estimate", "--show-config", "--stack", "transformers==4.48.1", "--model",
                               "mistralai/Mistral-7B-v0.1"});
  CHECK(source_of(shown["stack"], "transformers") == "flag --stack = 4.48.1");
  CHECK(source_of(shown["stack"], "trl") == "default (the newest release memplan models) = 1.9.0");
  bool found = false;
  for (const auto& row : shown["inputs"])
    if (row["input"] == "transformers_loss") {
      found = true;
      CHECK(row["value"] == "shift_contiguous");
      CHECK(row["source"] == "derived (shift_contiguous: transformers 4.48.1 shifts a contiguous fp32 copy of the "
                             "logits in ForCausalLMLoss (4.46-4.48))");
    }
  CHECK(found);
}

TEST_CASE("a fake environment's dist-info folders and a uv.lock beside the config give the versions") {
  TempDir dir;
  const std::filesystem::path root(dir.path());
  const auto site = root / "venv" / "lib" / "python3.11" / "site-packages";
  write(site / "transformers-4.48.1.dist-info" / "METADATA", "Name: transformers\nVersion: 4.48.1\n\n");
  write(site / "trl-0.13.0.dist-info" / "METADATA", "Name: trl\nVersion: 0.13.0\n\n");
  write(root / "project" / "sft.yaml",
        "model_name_or_path: mistralai/Mistral-7B-v0.1\nper_device_train_batch_size: 4\nmax_length: 4096\n"
        "use_peft: true\nload_in_4bit: true\nbf16: true\ntorch_dtype: bfloat16\ngradient_checkpointing: true\n"
        "attn_implementation: flash_attention_2\n");
  const std::string cfg = (root / "project" / "sft.yaml").string();

  SECTION("the environment: TRL 0.13's QLoRA preparation and transformers 4.48's loss") {
    ScopedEnv venv("VIRTUAL_ENV", (root / "venv").string());
    const json j = run_json({"estimate", "--config", cfg, "--show-config"});
    CHECK(source_of(j["stack"], "trl") == "detected ($VIRTUAL_ENV " + (root / "venv").string() +
                                              ": trl-0.13.0.dist-info) = 0.13.0");
    std::map<std::string, std::string> v;
    for (const auto& row : j["inputs"]) v[row["input"]] = row["value"];
    CHECK(v["kbit_prepare"] == "trl_legacy");
    CHECK(v["adapter_dtype"] == "float32");
    CHECK(v["transformers_loss"] == "shift_contiguous");
    CHECK(v["use_reentrant"] == "true");
    // The figure is the one those inputs give as flags, with today's loss and these preparations.
    CHECK(peak({"--config", cfg}) == peak({"--config", cfg, "--stack", "transformers==4.48.1,trl==1.9.0",
                                           "--kbit-prepare", "trl_legacy", "--adapter-dtype", "float32",
                                           "--use-reentrant", "true"}));
  }
  SECTION("no environment: the uv.lock beside the config") {
    write(root / "project" / "uv.lock",
          "version = 1\n\n[[package]]\nname = \"trl\"\nversion = \"0.13.0\"\n\n[[package]]\nname = \"transformers\"\n"
          "version = \"4.48.1\"\n");
    const json j = run_json({"estimate", "--config", cfg, "--show-config"});
    CHECK(source_of(j["stack"], "trl") == (root / "project" / "uv.lock").string() + ":5 = 0.13.0");
    const std::int64_t locked = peak({"--config", cfg});
    const std::int64_t current = peak({"--config", cfg, "--stack", "trl==1.9.0,transformers==5.17.0"});
    // TRL 0.13 keeps fp32 norms (recomputed layer outputs in fp32) and fp32 adapters, transformers
    // 4.48 the fp32 logits copy: more memory than today's stack, never less.
    CHECK(locked > current);
    // --stack beats the lock file.
    CHECK(peak({"--config", cfg, "--stack", "trl==1.9.0,transformers==5.17.0"}) == current);
  }
}

TEST_CASE("a launch script's allocator settings, with torch deciding which variable counts") {
  TempDir dir;
  ScopedEnv a("PYTORCH_ALLOC_CONF", std::nullopt);
  ScopedEnv c("PYTORCH_CUDA_ALLOC_CONF", std::nullopt);
  const std::string script = dir.write("start.sh",
                                       "#!/bin/bash\n# start training\nexport PYTORCH_ALLOC_CONF=expandable_segments:True\n"
                                       "torchrun train.py\n");
  const std::vector<std::string> base = {"plan", "--model-params", "1B", "--torch-dtype", "bfloat16", "--bf16",
                                         "--gpu-memory", "24GB", "--launch", script};
  std::vector<std::string> t211 = base, t291 = base;
  t211.insert(t211.end(), {"--stack", "torch==2.11.0"});
  t291.insert(t291.end(), {"--stack", "torch==2.9.1"});
  const CliRun r211 = run_cli(t211);
  CHECK(r211.code == cli::kExitOk);
  CHECK_THAT(r211.out, Catch::Contains("PYTORCH_ALLOC_CONF=expandable_segments:True (" + script + ":3) lets freed pages"));
  const CliRun r291 = run_cli(t291);
  CHECK(r291.code == cli::kExitOk);
  CHECK_THAT(r291.out, Catch::Contains("torch 2.9.1 ignores expandable_segments in PYTORCH_ALLOC_CONF on CUDA"));
  // The margin the ignored setting would have lowered stays the default: the budget is smaller.
  const json j211 = run_json(t211), j291 = run_json(t291);
  CHECK(j211["budget"]["safety_margin_bytes"].get<std::int64_t>() <
        j291["budget"]["safety_margin_bytes"].get<std::int64_t>());
  // The shell's own setting does not flip the answer when the launch script sets it.
  ScopedEnv shell("PYTORCH_ALLOC_CONF", "max_split_size_mb:64");
  CHECK(run_json(t211)["budget"]["safety_margin_bytes"] == j211["budget"]["safety_margin_bytes"]);
}

TEST_CASE("the published runs through their stated flags and --stack give the recorded inputs' estimates") {
  for (const char* file : {"fms_acceleration_a100.json", "fms_acceleration_a100_2024-11.json"}) {
    auto cases = io::load_measurements(std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/published/" + file);
    REQUIRE(cases);
    for (const auto& c : *cases) {
      INFO(c.id);
      REQUIRE_FALSE(c.flags.empty());
      std::vector<std::string> args = c.flags;
      args.insert(args.end(), {"--stack", c.stack});
      auto in = cli::resolve_training_args(args);
      REQUIRE(in);
      auto by_flags = estimate(in->model, in->config);
      auto recorded = estimate(c.model, c.config);
      REQUIRE(by_flags);
      REQUIRE(recorded);
      CHECK(by_flags->peak.count() == recorded->peak.count());
    }
  }
}

TEST_CASE("--stack torch==1.13.1 keeps the zeroed gradients into the next step, and --show-config says why") {
  // torch < 2.0: zero_grad(set_to_none=False) (docs/formulas.md#zero-grad-set-to-none). A full
  // fine-tune of GPT-2 in fp32: no gradient is live in the first step's forward, and all of them are
  // in every later one: 4 bytes x 124,439,808 parameters (the model card's count; the tied
  // embedding has one .grad).
  const std::vector<std::string> run = {"--model", "gpt2", "--batch", "4", "--seq-len", "512"};
  const auto forward_peak = [&](const char* stack) {
    std::vector<std::string> a = {"estimate", "--stack", stack};
    a.insert(a.end(), run.begin(), run.end());
    const json j = run_json(a);
    for (const auto& p : j["estimate"]["phases"])
      if (p["phase"] == "forward") return p["peak_bytes"].get<std::int64_t>();
    return std::int64_t{-1};
  };
  CHECK(forward_peak("torch==1.13.1") - forward_peak("torch==2.0.0") == 4LL * 124'439'808);
  std::vector<std::string> a = {"estimate", "--show-config", "--stack", "torch==1.13.1"};
  a.insert(a.end(), run.begin(), run.end());
  const json shown = run_json(a);
  bool found = false;
  for (const auto& row : shown["inputs"])
    if (row["input"] == "zero_grad") {
      found = true;
      CHECK(row["value"] == "set_to_none=false");
      CHECK(row["source"] == "derived (set_to_none=false: torch 1.13.1 zeroes every .grad instead of freeing it, so "
                             "the gradients stay allocated into the next step (< 2.0))");
    }
  CHECK(found);
}

TEST_CASE("--stack peft decides PEFT's default LoRA targets: trainable parameters counted by hand") {
  // PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING at the release tags
  // (docs/formulas.md#peft-default-targets); LoRA r = 16 (TRL's default) adds r x (in + out)
  // parameters per targeted Linear, no bias.
  const auto trainable = [](std::vector<std::string> args) {
    args.insert(args.begin(), "estimate");
    args.insert(args.end(), {"--use-peft", "--torch-dtype", "bfloat16", "--bf16", "--seq-len", "256"});
    return run_json(args)["estimate"]["parameters"]["trainable"].get<std::int64_t>();
  };
  // Mistral-7B (mistral since 0.6.0): q_proj 4096 -> 4096 and v_proj 4096 -> 1024 in 32 layers:
  // 32 x 16 x (8192 + 5120) = 6,815,744, the count PEFT's print_trainable_parameters gives for it.
  CHECK(trainable({"--model", "mistralai/Mistral-7B-v0.1", "--stack", "peft==0.6.0"}) == 6'815'744);
  // Qwen2.5-7B (qwen2 since 0.12.0, PR #1906): q_proj 3584 -> 3584, v_proj 3584 -> 512 (4 KV
  // heads of 128) in 28 layers: 28 x 16 x (7168 + 4096) = 5,046,272.
  CHECK(trainable({"--model", "Qwen/Qwen2.5-7B", "--stack", "peft==0.12.0"}) == 5'046'272);
  // GPT-2 (gpt2: c_attn 768 -> 2304 since the first release) in 12 layers: 12 x 16 x 3072 = 589,824
  // (r = 8 gives PEFT's well-known 294,912).
  CHECK(trainable({"--model", "openai-community/gpt2", "--stack", "peft==0.13.2"}) == 589'824);
  // Nemotron-H 8B (nemotron_h since 0.20.0, PR #3289): q/k/v/o on its 4 attention layers
  // (pattern M-M-M-M*-...: four '*'), hidden 4096, 32 heads and 8 KV heads of 128:
  // 4 x 16 x ((4096 + 4096) + 2 x (4096 + 1024) + (4096 + 4096)) = 1,703,936.
  CHECK(trainable({"--model", "nvidia/Nemotron-H-8B-Base-8K", "--stack", "peft==0.20.0"}) == 1'703'936);

  // Before a type's entry, and for types no release maps, get_peft_model raises: so does memplan.
  const auto refused = [](std::vector<std::string> args) {
    args.insert(args.begin(), "estimate");
    args.insert(args.end(), {"--use-peft", "--torch-dtype", "bfloat16", "--bf16", "--seq-len", "256"});
    const CliRun r = run_cli(args);
    CHECK(r.code == cli::kExitInvalidInput);
    return r.err;
  };
  std::string err = refused({"--model", "Qwen/Qwen2.5-7B", "--stack", "peft==0.11.1"});
  CHECK(err.find("peft 0.11.1 has no default LoRA target modules for model_type 'qwen2' (its mapping gained them in "
                 "0.12.0): get_peft_model raises \"Please specify `target_modules` in `peft_config`\"") !=
        std::string::npos);
  CHECK(err.find("--lora-target-modules q_proj,k_proj,v_proj,o_proj (or all-linear)") != std::string::npos);
  err = refused({"--model", "allenai/OLMo-2-1124-7B"});
  CHECK(err.find("peft 0.21.0 has no default LoRA target modules for model_type 'olmo2':") != std::string::npos);
  err = refused({"--model", "Qwen/Qwen2.5-VL-7B-Instruct"});  // model.config.model_type is the wrapper's
  CHECK(err.find("model_type 'qwen2_5_vl':") != std::string::npos);
  // Named targets and all-linear (LLaMA-Factory's lora_target: all, axolotl's lora_target_linear,
  // TRL's --lora_target_modules) do not ask PEFT's mapping.
  CHECK(trainable({"--model", "allenai/OLMo-2-1124-7B", "--lora-target-modules", "all-linear"}) > 0);

  const json shown = run_json({"estimate", "--show-config", "--use-peft", "--stack", "peft==0.12.0", "--model",
                               "Qwen/Qwen2.5-7B"});
  bool found = false;
  for (const auto& row : shown["inputs"])
    if (row["input"] == "lora_target_modules") {
      found = true;
      CHECK(row["value"] == "q_proj,v_proj");
      CHECK(row["source"] == "derived (q_proj, v_proj: peft 0.12.0's default for model_type 'qwen2' (since 0.12.0))");
    }
  CHECK(found);
}

TEST_CASE("accelerate's FSDP upcast: shown with the version that decided it, and only for accelerate's runs") {
  const std::vector<std::string> run = {"estimate", "--show-config", "--model", "meta-llama/Llama-3.1-8B",
                                        "--torch-dtype", "bfloat16", "--bf16", "--fsdp", "full_shard",
                                        "--num-gpus", "8"};
  const auto row_of = [](const json& shown, const std::string& input) {
    for (const auto& row : shown["inputs"])
      if (row["input"] == input) return row["value"].get<std::string>() + " | " + row["source"].get<std::string>();
    return std::string("(missing)");
  };
  std::vector<std::string> a = run;
  a.insert(a.end(), {"--stack", "accelerate==0.29.3"});
  CliRun r = run_cli([&] { auto v = a; v.insert(v.end(), {"--format", "json"}); return v; }());
  REQUIRE(r.code == cli::kExitOk);
  json shown = json::parse(r.out);
  CHECK(row_of(shown, "fsdp_mixed_precision") ==
        "false | derived (false: accelerate 0.29.3 keeps FSDP's FlatParameters in bfloat16 (the fp32 upcast arrived in "
        "0.30))");
  for (const auto& w : shown["warnings"]) CHECK(w.get<std::string>().find("taken as") == std::string::npos);
  shown = run_json(run);
  CHECK(row_of(shown, "fsdp_mixed_precision") ==
        "true | derived (true: accelerate 1.14.0 upcasts FSDP's trainable bfloat16 FlatParameters to fp32 under mixed "
        "precision and gathers them in bfloat16 (>= 0.30))");
}

// The training flags read numbers one way (issue 11 items 10 to 13): integers in decimal only
// (`--batch 010` is 10, `--batch 08` is 8, 0x10 is refused), every numeric flag through the same
// range check as a file value (NaN never passes), and values echoed escaped.
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli_harness.hpp"

using memplan::testing::run_cli;
using memplan::testing::TempDir;

namespace {

std::string show_batch(const std::string& value) {
  auto r = run_cli({"estimate", "--model-params", "1B", "--batch", value, "--show-config"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto at = r.out.find("batch");
  REQUIRE(at != std::string::npos);
  return r.out.substr(at, r.out.find('\n', at) - at);
}

}  // namespace

TEST_CASE("flags (issue 11 item 10): integers are decimal; a leading zero is not octal") {
  CHECK(show_batch("010") == show_batch("10"));
  CHECK(show_batch("08") == show_batch("8"));
  CHECK(show_batch("010").find("10") != std::string::npos);
  for (const std::string bad : {"0x10", "1e3", "10.0", "ten", "--"}) {
    INFO(bad);
    auto r = run_cli({"estimate", "--model-params", "1B", "--batch=" + bad});
    CHECK(r.code != 0);
    CHECK(r.err.find("expected a decimal integer, got \"" + bad + "\"") != std::string::npos);
  }
}

TEST_CASE("flags (issue 11 item 12): flags accept exactly what the same value in a file accepts") {
  struct Case {
    std::vector<std::string> flag;
    std::string message;
  };
  const Case cases[] = {
      {{"--use-peft", "--lora-dropout", "nan"}, "memplan: error: --lora-dropout = nan is not a finite number (0 <= p < 1)\n"},
      {{"--use-peft", "--lora-alpha", "-1"}, "memplan: error: --lora-alpha = -1 is out of range (> 0)\n"},
      {{"--method", "grpo", "--beta", "nan"}, "memplan: error: --beta = nan is not a finite number (>= 0)\n"},
      {{"--method", "grpo", "--temperature", "-1"}, "memplan: error: --temperature = -1 is out of range (> 0)\n"},
      {{"--method", "grpo", "--use-vllm", "--vllm-gpu-memory-utilization", "nan"},
       "memplan: error: --vllm-gpu-memory-utilization = nan is not a finite number (0 < x < 1)\n"},
  };
  for (const auto& k : cases) {
    std::vector<std::string> args = {"estimate", "--model-params", "1B"};
    args.insert(args.end(), k.flag.begin(), k.flag.end());
    auto r = run_cli(args);
    INFO(k.flag[k.flag.size() - 2]);
    CHECK(r.code == 2);
    CHECK(r.err == k.message);
  }
  // The same value in a file: the same words, with the file:line instead of the flag.
  TempDir dir;
  const std::string cfg = dir.write("train.yaml", "model_name_or_path: m\nuse_peft: true\nlora_dropout: .nan\n");
  auto r = run_cli({"estimate", "--model-params", "1B", "--config", cfg});
  CHECK(r.err == "memplan: error: " + cfg + ":3: lora_dropout = nan is not a finite number (0 <= p < 1)\n");
}

TEST_CASE("flags: --images -1 is refused, not taken as the model's default") {
  // -1 is the engine's sentinel for "not given"; typed by a user it is a bad count.
  auto r = run_cli({"estimate", "--model", "qwen2-vl-2b", "--images", "-1"});
  CHECK(r.code == 2);
  CHECK(r.err.find("memplan: error: --images = -1 is out of range (0 to 1024)") == 0);
  auto ok = run_cli({"estimate", "--model", "qwen2-vl-2b", "--images", "0"});
  CHECK(ok.code == 0);
}

TEST_CASE("flags (issue 11 item 11): check --max-utilization nan is a usage error, not a gate switched off") {
  TempDir dir;
  const std::string cfg = dir.write("train.yaml", "model_name_or_path: m\nper_device_train_batch_size: 1\n");
  auto r = run_cli({"check", cfg, "--model-params", "125M", "--gpu-memory", "80GiB", "--max-utilization", "nan"});
  CHECK(r.code == 64);
  CHECK(r.err == "memplan: error: --max-utilization = nan must be a percentage between 0 and 100\n");
}

TEST_CASE("flags (issue 11 item 13): terminal escape sequences in echoed values are escaped") {
  auto r = run_cli({"estimate", "--model", "\x1b]0;pwned\x07\x1b[31mred"});
  CHECK(r.code != 0);
  CHECK(r.err.find('\x1b') == std::string::npos);
  CHECK(r.err.find("\\x1b]0;pwned\\x07\\x1b[31mred") != std::string::npos);
  TempDir dir;
  const std::string cfg = dir.write("train.yaml", "model_name_or_path: m\nper_device_train_batch_size: \"\\e[2J\"\n");
  auto f = run_cli({"estimate", "--model-params", "1B", "--config", cfg});
  CHECK(f.err == "memplan: error: " + cfg + ":2: per_device_train_batch_size must be an integer, got \"\\x1b[2J\"\n");
}

TEST_CASE("--fsdp-version 2 selects fully_shard's rules; anything but 1 or 2 is refused") {
  const std::vector<std::string> base{"estimate", "--model-params", "1B", "--torch-dtype", "bfloat16", "--bf16",
                                      "--num-gpus", "2", "--fsdp", "full_shard", "--batch", "2", "--seq-len", "512"};
  auto v1 = run_cli(base);
  auto with2 = base;
  with2.insert(with2.end(), {"--fsdp-version", "2", "--show-config"});
  auto v2 = run_cli(with2);
  INFO(v1.err << v2.err);
  REQUIRE(v1.code == 0);
  REQUIRE(v2.code == 0);
  CHECK(v2.out.find("fsdp_version") != std::string::npos);
  CHECK(v2.out.find("--fsdp-version") != std::string::npos);
  auto bad = base;
  bad.insert(bad.end(), {"--fsdp-version", "3"});
  auto r = run_cli(bad);
  CHECK(r.code != 0);
  CHECK(r.err.find("--fsdp-version = 3 must be 1 or 2") != std::string::npos);
}

TEST_CASE("--fsdp-reshard-after-forward and --loss-parallel: accepted where they apply, refused with the fix elsewhere") {
  const std::vector<std::string> base{"estimate", "--model-params", "1B", "--torch-dtype", "bfloat16",
                                      "--num-gpus", "4", "--batch", "2", "--seq-len", "512"};
  const auto with = [&](std::vector<std::string> extra) {
    auto v = base;
    v.insert(v.end(), extra.begin(), extra.end());
    return run_cli(v);
  };
  auto ok = with({"--fsdp", "full_shard", "--fsdp-version", "2", "--fsdp-reshard-after-forward", "never",
                  "--tensor-parallel", "2", "--loss-parallel", "--show-config"});
  INFO(ok.err);
  REQUIRE(ok.code == 0);
  CHECK(ok.out.find("--fsdp-reshard-after-forward") != std::string::npos);
  CHECK(ok.out.find("--loss-parallel") != std::string::npos);

  auto word = with({"--fsdp", "full_shard", "--fsdp-version", "2", "--fsdp-reshard-after-forward", "maybe"});
  CHECK(word.code == 2);
  CHECK(word.err == "memplan: error: --fsdp-reshard-after-forward = 'maybe' must be true or false\n");
  auto fsdp1 = with({"--fsdp", "full_shard", "--fsdp-reshard-after-forward", "false"});
  CHECK(fsdp1.code == 2);
  CHECK(fsdp1.err == "memplan: error: --fsdp-reshard-after-forward is FSDP2's fully_shard option; FSDP1 spells it "
                     "--fsdp shard_grad_op; add --fsdp-version 2, or use --fsdp shard_grad_op\n");
  auto none = with({"--fsdp-reshard-after-forward", "false"});
  CHECK(none.code == 2);
  CHECK(none.err == "memplan: error: --fsdp-reshard-after-forward false is an option of FSDP2 sharding parameters: "
                    "it needs --fsdp full_shard or hybrid_shard; add --fsdp full_shard --fsdp-version 2\n");
  // true is FSDP's default: nothing to refuse.
  CHECK(with({"--fsdp-reshard-after-forward", "true"}).code == 0);
  auto no_tp = with({"--loss-parallel"});
  CHECK(no_tp.code == 2);
  CHECK(no_tp.err == "memplan: error: --loss-parallel splits the vocabulary over tensor-parallel ranks: it needs "
                     "--tensor-parallel > 1; add --tensor-parallel N, or drop --loss-parallel\n");
}

TEST_CASE("a loss kernel shows in the summary line and in the JSON inputs") {
  const std::vector<std::string> base{"estimate", "--model-params", "1B", "--method", "dpo", "--use-peft",
                                      "--torch-dtype", "bfloat16", "--batch", "2", "--seq-len", "512"};
  auto with = base;
  with.insert(with.end(), {"--loss-kernel", "liger"});
  auto text = run_cli(with);
  INFO(text.err);
  REQUIRE(text.code == 0);
  CHECK(text.out.find(" · LoRA r=16 · liger loss · sdpa attention · ") != std::string::npos);
  with.insert(with.end(), {"--format", "json", "--liger"});
  auto js = run_cli(with);
  REQUIRE(js.code == 0);
  CHECK(js.out.find("\"loss_kernel\": \"liger\"") != std::string::npos);
  CHECK(js.out.find("\"liger_kernels\": true") != std::string::npos);
  auto plain = run_cli(base);
  REQUIRE(plain.code == 0);
  CHECK(plain.out.find(" loss · ") == std::string::npos);
}

TEST_CASE("per-op and every-N checkpointing run for a vision-language model on text, and are refused with images") {
  // Mistral Small 3.1 (mistral3) on text-only batches runs Mistral Small 3's language model (the
  // same 40 layers) with the Pixtral tower loaded and unused: the checkpointing policies act on the
  // layers alone, so its activations must equal those of the text-only Mistral Small 24B.
  // Review finding: both policies were refused for every model that carries a tower.
  const auto activations = [](const std::string& model, const std::vector<std::string>& policy) {
    std::vector<std::string> args{"estimate", "--model", model, "--bf16", "--torch-dtype", "bfloat16",
                                  "--use-peft", "--lora-target-modules", "q_proj,v_proj", "--gradient-checkpointing",
                                  "--batch", "1", "--seq-len", "512", "--format", "json"};
    args.insert(args.end(), policy.begin(), policy.end());
    auto r = run_cli(args);
    INFO(r.err);
    REQUIRE(r.code == 0);
    const nlohmann::json j = nlohmann::json::parse(r.out);
    for (const auto& c : j["estimate"]["components"])
      if (c["name"] == "activations") return c["bytes"].get<std::int64_t>();
    FAIL("no activations component");
    return std::int64_t{0};
  };
  for (const std::vector<std::string> policy :
       {std::vector<std::string>{"--checkpoint-policy", "op"}, std::vector<std::string>{"--checkpoint-every", "2"}}) {
    INFO(policy[0]);
    const auto vlm = activations("mistral-small-3.1-24b", policy);
    CHECK(vlm == activations("mistral-small-24b", policy));
    CHECK(vlm > activations("mistral-small-24b", {}));  // keeps more than full checkpointing
  }
  auto r = run_cli({"estimate", "--model", "mistral-small-3.1-24b", "--torch-dtype", "bfloat16", "--use-peft",
                    "--lora-target-modules", "q_proj,v_proj", "--gradient-checkpointing", "--checkpoint-policy", "op",
                    "--images", "1"});
  CHECK(r.code != 0);
  CHECK(r.err.find("checkpoint-policy op is modelled for decoder language models only (torchtitan's per-op "
                   "selective checkpointing), and for vision-language models on text-only batches") !=
        std::string::npos);
  CHECK(r.err.find("or train on text (--images 0)") != std::string::npos);
}

TEST_CASE("--checkpoint-every, --loss-dtype and --fsdp no_shard: shown where they come from, refused with the fix") {
  const std::vector<std::string> base{"estimate", "--model-params", "1B", "--torch-dtype", "bfloat16",
                                      "--batch", "2", "--seq-len", "512"};
  auto every = base;
  every.insert(every.end(), {"--gradient-checkpointing", "--checkpoint-every", "2", "--loss-dtype", "logits",
                             "--num-gpus", "2", "--fsdp", "no_shard", "--show-config"});
  auto r = run_cli(every);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("checkpoint_every") != std::string::npos);
  CHECK(r.out.find("--checkpoint-every") != std::string::npos);
  CHECK(r.out.find("loss_dtype") != std::string::npos);
  CHECK(r.out.find("--loss-dtype") != std::string::npos);
  CHECK(r.out.find("fsdp_no_shard") != std::string::npos);
  auto alone = base;
  alone.insert(alone.end(), {"--checkpoint-every", "2"});
  r = run_cli(alone);
  CHECK(r.code != 0);
  CHECK(r.err.find("checkpoint-every checkpoints every N-th layer: it needs gradient checkpointing") != std::string::npos);
  auto bad = base;
  bad.insert(bad.end(), {"--loss-dtype", "bf16"});
  r = run_cli(bad);
  CHECK(r.code != 0);
  CHECK(r.err.find("--loss-dtype = 'bf16' must be float32 or logits") != std::string::npos);
}

TEST_CASE("--checkpoint-policy op: shown where it comes from; refused without checkpointing, with reentrancy, or misspelt") {
  // docs/formulas.md#per-op-selective-checkpointing.
  const std::vector<std::string> base{"estimate", "--model-params", "1B", "--torch-dtype", "bfloat16",
                                      "--batch", "2", "--seq-len", "512"};
  auto op = base;
  op.insert(op.end(), {"--gradient-checkpointing", "--checkpoint-policy", "op", "--show-config"});
  auto r = run_cli(op);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("checkpoint_policy") != std::string::npos);
  CHECK(r.out.find("--checkpoint-policy") != std::string::npos);
  auto alone = base;
  alone.insert(alone.end(), {"--checkpoint-policy", "op"});
  r = run_cli(alone);
  CHECK(r.code != 0);
  CHECK(r.err.find("checkpoint-policy op selects what a checkpointed layer keeps: it needs gradient checkpointing") !=
        std::string::npos);
  auto reentrant = base;
  reentrant.insert(reentrant.end(), {"--gradient-checkpointing", "--checkpoint-policy", "op", "--use-reentrant", "true"});
  r = run_cli(reentrant);
  CHECK(r.code != 0);
  CHECK(r.err.find("checkpoint-policy op needs non-reentrant checkpointing (selective checkpointing contexts work "
                   "only with use_reentrant=False)") != std::string::npos);
  CHECK(r.err.find("--use-reentrant false") != std::string::npos);
  auto bad = base;
  bad.insert(bad.end(), {"--gradient-checkpointing", "--checkpoint-policy", "selective"});
  r = run_cli(bad);
  CHECK(r.code != 0);
  CHECK(r.err.find("--checkpoint-policy = 'selective' must be full or op") != std::string::npos);
}

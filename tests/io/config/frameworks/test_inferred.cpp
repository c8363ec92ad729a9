// Tests for src/io/config/frameworks/inferred.cpp (reading a config no dialect claims by what its
// keys mean), src/io/config/frameworks/nemo_rl.cpp, the weak-evidence rule of detection, the
// "looks like another framework" warning and regular-expression LoRA targets.
#include <algorithm>

#include <catch2/catch.hpp>

#include "io/config/config_loader.hpp"
#include "io/config/dialects_map.hpp"
#include "load_text.hpp"

using namespace memplan;
using namespace memplan::io;

using memplan::io::testing::has_warning;
using memplan::io::testing::load;

// A layout no framework here uses: every concept sits under names of the project's own.
TEST_CASE("inferred: concepts found by key name at any depth, each with file:line and 'inferred'") {
  auto r = load("experiment:\n  name: run1\n"          // 1-2
                "policy:\n  hf_checkpoint: Qwen/Qwen2.5-0.5B\n"  // 3-4
                "train:\n  micro_bsz: 4\n  grad_acc: 8\n  max_seq_len: 2048\n"  // 5-8
                "  bf16: true\n  activation_checkpointing: true\n"              // 9-10
                "hardware:\n  gpus_per_node: 8\n  num_nodes: 2\n"               // 11-13
                "eval:\n  batch_size: 64\n  max_seq_len: 8192\n");              // 14-16
  REQUIRE(r);
  const TrainingConfig& t = r->inputs.config;
  CHECK(r->dialect == Dialect::kInferred);
  CHECK(r->inputs.model_name == "Qwen/Qwen2.5-0.5B");
  CHECK(r->inputs.origins.at("model").to_string() == "run.yaml:4 (inferred from policy.hf_checkpoint)");
  CHECK(t.micro_batch == 4);
  CHECK(r->inputs.origins.at("batch").to_string() == "run.yaml:6 (inferred from train.micro_bsz)");
  CHECK(t.grad_accum == 8);
  CHECK(t.seq_len == 2048);  // eval.max_seq_len (8192) is evaluation's, not training's
  CHECK(t.autocast == DType::kBFloat16);
  CHECK(t.gradient_checkpointing);
  CHECK(t.parallel.num_gpus == 8);
  CHECK(t.parallel.nodes == 2);
  CHECK(has_warning(*r, "run.yaml: no framework memplan knows claims this config; read by meaning (origin "
                        "'inferred'): model Qwen/Qwen2.5-0.5B (policy.hf_checkpoint run.yaml:4); micro-batch 4 "
                        "(train.micro_bsz run.yaml:6); gradient accumulation 8 (train.grad_acc run.yaml:7)"));
  // --apply writes the micro-batch where the file has it.
  REQUIRE(r->primary_site(Knob::kBatch) != nullptr);
  CHECK(r->primary_site(Knob::kBatch)->key() == "train.micro_bsz");
}

TEST_CASE("inferred: two keys of one concept that disagree are named, not guessed") {
  auto r = load("model_id: x/y\ncfg:\n  micro_batch_size: 4\nrun:\n  per_device_train_batch_size: 8\n");
  REQUIRE_FALSE(r);
  CHECK(r.error().to_string() ==
        "run.yaml:5: no framework memplan knows claims this config, and reading it by meaning finds two per-device "
        "micro-batches: cfg.micro_batch_size = 4 (run.yaml:3) and run.per_device_train_batch_size = 8 (run.yaml:5); "
        "memplan does not guess which the trainer uses; name the framework with --dialect, or say which key it is "
        "with --keys batch=KEY");
}

TEST_CASE("inferred: a global batch without an accumulation key derives it") {
  // 256 / (micro-batch 2 x 16 GPUs) = 8 micro-batches per step.
  auto r = load("model:\n  name: meta-llama/Llama-3.2-1B\nbatching:\n  global_batch_size: 256\n"
                "  micro_batch_size: 2\n  seq_length: 4096\ncluster:\n  world_size: 16\n");
  REQUIRE(r);
  CHECK(r->inputs.model_name == "meta-llama/Llama-3.2-1B");
  CHECK(r->inputs.config.parallel.world_size() == 16);
  CHECK(r->inputs.config.grad_accum == 8);
}

TEST_CASE("inferred: a file with neither a model nor a batch is refused with what was looked for") {
  auto r = load("seed: 1\nlogging:\n  project: x\n");
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("reading it by meaning finds neither the model") != std::string::npos);
}

TEST_CASE("detection: a lone trainer: section does not make a Lightning file") {
  // verl-like trainer keys, none of them a Lightning Trainer argument.
  auto r = load("trainer:\n  project_name: p\n  n_gpus: 4\nmodel:\n  path: Qwen/Qwen2.5-7B\ntrain:\n  batch_size: 16\n");
  REQUIRE(r);
  CHECK(r->dialect == Dialect::kInferred);
  CHECK(r->inputs.config.micro_batch == 16);
  CHECK(r->inputs.config.parallel.num_gpus == 4);
  // With Lightning's own arguments it is Lightning.
  auto l = load("trainer:\n  accelerator: gpu\n  devices: 2\n  max_epochs: 3\ndata:\n  batch_size: 8\n");
  REQUIRE(l);
  CHECK(l->dialect == Dialect::kLightning);
}

TEST_CASE("inferred: a critic is refused, never planned as SFT") {
  auto r = load("pretrain: meta-llama/Llama-3.1-8B\ncritic_pretrain: meta-llama/Llama-3.1-8B\n"
                "micro_train_batch_size: 2\n");
  REQUIRE_FALSE(r);
  CHECK(r.error().to_string().rfind("run.yaml:2: critic_pretrain configures a critic: PPO trains a value model", 0) == 0);
  // GRPO (no critic: the advantage from the group) is planned as GRPO.
  auto g = load("pretrain: Qwen/Qwen2.5-1.5B\nadvantage_estimator: group_norm_grpo\nmicro_train_batch_size: 2\n"
                "n_samples_per_prompt: 8\nprompt_max_len: 1024\ngenerate_max_len: 2048\nvllm_num_engines: 4\n"
                "vllm_gpu_memory_utilization: 0.5\n");
  REQUIRE(g);
  CHECK(g->inputs.config.method == Method::kGrpo);
  CHECK(g->inputs.config.grpo.num_generations == 8);
  CHECK(g->inputs.config.grpo.max_prompt_length == 1024);
  CHECK(g->inputs.config.grpo.max_completion_length == 2048);
  CHECK(g->inputs.config.grpo.vllm == VllmMode::kServer);  // separate engines
}

TEST_CASE("inferred: LoRA, QLoRA, sharding and offload by meaning; disabled sections skipped") {
  auto r = load("model_id: mistralai/Mistral-7B-v0.1\nper_device_batch_size: 1\n"
                "peft:\n  r: 32\n  alpha: 64\n  target_modules: [q_proj, v_proj]\nquantization: nf4\n"
                "zero_stage: 3\noffload_optimizer: cpu\n"
                "megatron:\n  enabled: false\n  tensor_model_parallel_size: 8\n");
  REQUIRE(r);
  const TrainingConfig& t = r->inputs.config;
  CHECK(t.lora.enabled);
  CHECK(t.lora.r == 32);
  CHECK(t.lora.alpha == 64);
  CHECK(t.lora.target_modules == std::vector<std::string>{"q_proj", "v_proj"});
  CHECK(t.quant.load_in_4bit);
  CHECK(t.parallel.sharding == ShardingStrategy::kZero3);
  CHECK(t.parallel.offload_optimizer);
  CHECK(t.parallel.tensor_parallel == 1);  // megatron: enabled: false
}

TEST_CASE("NeMo-RL: fp32 master weights, the global batch, the generation GPUs") {
  // examples/configs/grpo_math_1B.yaml's memory keys, colocated off with one node for vLLM.
  auto r = load("grpo:\n  num_generations_per_prompt: 16\npolicy:\n  model_name: Qwen/Qwen2.5-1.5B\n"
                "  train_global_batch_size: 512\n  train_micro_batch_size: 4\n  max_total_sequence_length: 512\n"
                "  precision: bfloat16\n  dtensor_cfg:\n    enabled: true\n    tensor_parallel_size: 1\n"
                "  megatron_cfg:\n    enabled: false\n    tensor_model_parallel_size: 2\n"
                "  generation:\n    backend: vllm\n    vllm_cfg:\n      gpu_memory_utilization: 0.6\n"
                "    colocated:\n      enabled: false\n      resources:\n        gpus_per_node: null\n"
                "        num_nodes: 1\ncluster:\n  gpus_per_node: 8\n  num_nodes: 2\n");
  REQUIRE(r);
  const TrainingConfig& t = r->inputs.config;
  CHECK(r->dialect == Dialect::kNemoRl);
  CHECK(t.method == Method::kGrpo);
  CHECK(t.torch_dtype == DType::kFloat32);
  CHECK(t.autocast == DType::kBFloat16);
  CHECK(t.parallel.sharding == ShardingStrategy::kFsdpFullShard);
  CHECK(t.parallel.tensor_parallel == 1);
  CHECK(t.parallel.world_size() == 8);  // 2 nodes x 8, one node generates
  CHECK(t.grpo.vllm == VllmMode::kServer);
  CHECK(t.grad_accum == 16);  // 512 / (4 x 8)
}

TEST_CASE("a detected dialect that leaves another framework's keys says which the file looks like") {
  auto r = load("base_model: x/y\nsequence_len: 1024\nmicro_batch_size: 2\nrlhf_type: dpo\n");
  REQUIRE(r);
  CHECK(r->dialect == Dialect::kAxolotl);
  CHECK(has_warning(*r, "read as axolotl, but rlhf_type are ms-swift's keys, which the axolotl reading leaves out: "
                        "the file looks like a ms-swift config (name it with --dialect ms-swift if it is one)"));
}

TEST_CASE("regular-expression target_modules select the modules they match") {
  TrainingConfig c;
  // PEFT matches a string target with re.fullmatch against each module's full name.
  set_lora_targets(c, {".*\\.(q_proj|v_proj)"});
  CHECK(c.lora.target_modules == std::vector<std::string>{"q_proj", "v_proj"});
  set_lora_targets(c, {"model\\.layers\\.\\d+\\.mlp\\..*"});
  CHECK(c.lora.target_modules == std::vector<std::string>{"gate_proj", "up_proj", "down_proj", "gate_up_proj"});
  set_lora_targets(c, {"q_proj", "k_proj"});
  CHECK(c.lora.target_modules == std::vector<std::string>{"q_proj", "k_proj"});
}

// Tests for the layouts read in the fourth corpus round (RL/SFT frameworks and h2o-llmstudio): token-bounded
// micro-batches, RL batch sizes that count prompts, dataset length bounds of RL configs, the GPUs
// of the trained role (ROLL's device_mapping, AReaL's allocation), reference models, ROLL
// (src/io/config/frameworks/roll.cpp), EasyR1 under verl's keys, torchforge, prime-rl, ms-swift's
// Ray groups and axolotl's expert-parallel plugin. Every number below is derived by hand from the
// text of the test config.
#include <algorithm>

#include <catch2/catch.hpp>

#include "io/config/config_loader.hpp"
#include "io/config/dialects_map.hpp"
#include "load_text.hpp"
#include "io/config/toml.hpp"

using namespace memplan;
using namespace memplan::io;

using memplan::io::testing::has_warning;
using memplan::io::testing::load;

// AReaL's layout: micro-batches packed up to a token budget, the allocation in `backend`.
TEST_CASE("inferred: a token budget per micro-batch sets the micro-batch, the dataset batch does not") {
  auto r = load("actor:\n"                                    // 1
                "  backend: \"fsdp:d4p1t1\"\n"                 // 2
                "  path: Qwen/Qwen2.5-1.5B-Instruct\n"         // 3
                "  mb_spec:\n    max_tokens_per_mb: 10240\n"   // 4-5
                "  kl_ctl: 0.0\n"                              // 6
                "gconfig:\n  n_samples: 4\n  max_new_tokens: 1024\n"  // 7-9
                "cluster:\n  n_gpus_per_node: 8\n"             // 10-11
                "rollout:\n  backend: \"sglang:d4p1t1\"\n"     // 12-13
                "train_dataset:\n  batch_size: 256\n  max_length: 1024\n");  // 14-16
  REQUIRE(r);
  const TrainingConfig& t = r->inputs.config;
  CHECK(t.method == Method::kGrpo);
  // An RL dataset's max_length bounds the prompts; the completions are gconfig's 1024.
  CHECK(t.grpo.max_prompt_length == 1024);
  CHECK(t.grpo.max_completion_length == 1024);
  // 10240 tokens / (1024 + 1024) = 5 whole sequences.
  CHECK(t.micro_batch == 5);
  CHECK(has_warning(*r, "run.yaml:5: actor.mb_spec.max_tokens_per_mb = 10240: micro-batches are packed up to 10240 "
                        "tokens, not counted in sequences; memplan plans 5 sequence(s) of 2048 tokens per "
                        "micro-batch"));
  CHECK(has_warning(*r, "run.yaml:15: train_dataset.batch_size = 256 is not read as the micro-batch"));
  // d4 x p1 x t1: the actor trains on 4 of the 8 GPUs (SGLang has the other 4), with FSDP.
  CHECK(t.parallel.world_size() == 4);
  CHECK(t.parallel.sharding == ShardingStrategy::kFsdpFullShard);
  // kl_ctl 0.0: no KL term, no reference model.
  CHECK(t.grpo.beta == 0.0);
  // SGLang has GPUs of its own (rollout.backend "sglang:d4p1t1"): not on the training GPUs.
  CHECK(t.grpo.vllm == VllmMode::kServer);
}

TEST_CASE("inferred: a DPO token budget counts pairs") {
  // 4096 tokens / (2 x 2048) = 1 pair.
  auto r = load("actor:\n  path: Qwen/Qwen2.5-7B\n  mb_spec:\n    max_tokens_per_mb: 4096\n"
                "train_dataset:\n  batch_size: 64\n  type: dpo\n  max_length: 2048\n");
  REQUIRE(r);
  CHECK(r->inputs.config.method == Method::kDpo);
  CHECK(r->inputs.config.seq_len == 2048);
  CHECK(r->inputs.config.micro_batch == 1);
}

TEST_CASE("inferred: in an RL config a plain batch_size counts prompts, never the micro-batch") {
  auto r = load("model:\n  name: Qwen/Qwen3-0.6B\norchestrator:\n  batch_size: 128\n  group_size: 16\n");
  REQUIRE(r);
  CHECK(r->inputs.config.method == Method::kGrpo);
  CHECK(r->inputs.config.grpo.num_generations == 16);
  CHECK(r->inputs.config.micro_batch == 1);
  CHECK(has_warning(*r, "run.yaml:4: orchestrator.batch_size = 128: in an RL config a plain batch size counts the "
                        "prompts or rollouts of a step, not the per-GPU micro-batch; memplan plans micro-batch 1"));
}

TEST_CASE("roll: detected by its worker sections; actor_infer is the rollout engine; device_mapping the GPUs") {
  auto r = load("num_gpus_per_node: 8\n"                          // 1
                "prompt_length: 2048\nresponse_length: 4096\n"     // 2-3
                "num_return_sequences_in_group: 8\n"               // 4
                "adv_estimator: reinforce\n"                       // 5
                "pretrain: Qwen/Qwen3-8B\n"                        // 6
                "actor_train:\n  model_args:\n    dtype: bf16\n"  // 7-9
                "  training_args:\n    per_device_train_batch_size: 1\n    gradient_accumulation_steps: 32\n"
                "  strategy_args:\n    strategy_name: fsdp2_train\n"  // 13-14
                "  device_mapping: list(range(0,16))\n"            // 15
                "actor_infer:\n  strategy_args:\n    strategy_name: vllm\n    strategy_config:\n"
                "      gpu_memory_utilization: 0.8\n      block_size: 16\n"
                "reference:\n  model_args:\n    dtype: bf16\n");
  REQUIRE(r);
  const TrainingConfig& t = r->inputs.config;
  CHECK(r->dialect == Dialect::kRoll);
  CHECK(r->inputs.model_name == "Qwen/Qwen3-8B");
  CHECK(t.method == Method::kGrpo);
  CHECK(t.grpo.num_generations == 8);
  CHECK(t.grpo.max_prompt_length == 2048);
  CHECK(t.grpo.max_completion_length == 4096);  // not vLLM's block_size 16
  CHECK(t.micro_batch == 1);
  CHECK(t.grad_accum == 32);
  // list(range(0,16)) with 8 GPUs per node: 2 nodes x 8.
  CHECK(t.parallel.num_gpus == 8);
  CHECK(t.parallel.nodes == 2);
  CHECK(t.parallel.sharding == ShardingStrategy::kFsdpFullShard);
  CHECK(t.parallel.fsdp_version == 2);
  // ROLL checkpoints unless disable_gradient_checkpointing says otherwise.
  CHECK(t.gradient_checkpointing);
  CHECK(r->inputs.origins.at("gradient_checkpointing").to_string() ==
        "default (ROLL model_args.disable_gradient_checkpointing = false)");
  // The reference section with no KL key: counted, and said.
  CHECK(t.grpo.beta > 0.0);
  CHECK(has_warning(*r, "reference configures a reference model and no key says whether a KL term uses it"));
  // The synchronous pipeline offloads actor_infer before training: vLLM holds nothing then.
  CHECK(t.grpo.vllm == VllmMode::kNone);
  CHECK(r->inputs.origins.at("use_vllm").to_string() ==
        "derived (ROLL's synchronous pipeline offloads actor_infer (offload_states) before the training step)");
}

TEST_CASE("roll: disable_gradient_checkpointing: true switches checkpointing off") {
  auto r = load("pretrain: Qwen/Qwen2.5-7B\nsft_train:\n  model_args:\n    disable_gradient_checkpointing: true\n"
                "  training_args:\n    per_device_train_batch_size: 2\n  strategy_args:\n"
                "    strategy_name: megatron_train\n");
  REQUIRE(r);
  CHECK(r->dialect == Dialect::kRoll);
  CHECK_FALSE(r->inputs.config.gradient_checkpointing);
  CHECK(r->inputs.config.micro_batch == 2);
}

TEST_CASE("verl: EasyR1's renamed sections are read by meaning, never as verl's SFT defaults") {
  auto r = load("data:\n  max_prompt_length: 2048\n  max_response_length: 1024\n  rollout_batch_size: 512\n"
                "algorithm:\n  adv_estimator: grpo\n  use_kl_loss: true\n  kl_coef: 1.0e-2\n"
                "worker:\n  actor:\n    global_batch_size: 128\n    micro_batch_size_per_device_for_update: 2\n"
                "    model:\n      model_path: Qwen/Qwen2.5-7B-Instruct\n      enable_gradient_checkpointing: true\n"
                "    fsdp:\n      enable_full_shard: true\n"
                "  rollout:\n    n: 5\n    gpu_memory_utilization: 0.6\n"
                "  ref:\n    fsdp:\n      enable_cpu_offload: true\n"
                "trainer:\n  nnodes: 1\n  n_gpus_per_node: 8\n");
  REQUIRE(r);
  const TrainingConfig& t = r->inputs.config;
  CHECK(r->dialect == Dialect::kVerl);
  CHECK(r->inputs.model_name == "Qwen/Qwen2.5-7B-Instruct");
  CHECK(t.method == Method::kGrpo);
  CHECK(t.micro_batch == 2);
  CHECK(t.grpo.num_generations == 5);
  CHECK(t.grpo.max_prompt_length == 2048);
  CHECK(t.grpo.max_completion_length == 1024);
  CHECK(t.grpo.beta == 0.01);  // use_kl_loss with kl_coef 0.01: a reference model
  CHECK(t.gradient_checkpointing);
  CHECK(t.parallel.sharding == ShardingStrategy::kFsdpFullShard);
  CHECK(t.parallel.world_size() == 8);
  CHECK(has_warning(*r, "a EasyR1 (verl's trainer, its own section names) config, read by meaning"));
}

TEST_CASE("inferred: torchforge's torchtitan model section names a family; the checkpoint is hf://") {
  auto r = load("group_size: 8\nbatch_size: 16\nmax_req_tokens: 512\nmax_res_tokens: 512\nmodel: Qwen/Qwen3-8B\n"
                "trainer:\n  model:\n    name: qwen3\n    flavor: 8B\n    hf_assets_path: hf://Qwen/Qwen3-8B\n"
                "  training:\n    local_batch_size: 16\n    seq_len: 2048\n    dtype: bfloat16\n"
                "ref_model:\n  model:\n    name: qwen3\n    flavor: 8B\n"
                "actors:\n  trainer:\n    procs: 2\n    with_gpus: true\n"
                "services:\n  ref_model:\n    procs: 1\n    with_gpus: true\n");
  REQUIRE(r);
  const TrainingConfig& t = r->inputs.config;
  CHECK(r->inputs.model_name == "Qwen/Qwen3-8B");
  // The reference model is a service on its own GPU: not on the trainer's.
  CHECK(t.grpo.beta == 0.0);
  CHECK(t.micro_batch == 16);
  CHECK(t.grpo.max_prompt_length == 512);
  CHECK(t.grpo.max_completion_length == 512);
  CHECK(t.parallel.world_size() == 2);
  CHECK(t.torch_dtype == DType::kBFloat16);
}

TEST_CASE("torchtitan: torchforge's processes.procs with GPUs is the GPU count") {
  auto r = load("model:\n  name: llama3\n  flavor: 8B\nprocesses:\n  procs: 8\n  with_gpus: true\n"
                "training:\n  local_batch_size: 1\n  seq_len: 2048\nparallelism:\n  data_parallel_shard_degree: -1\n");
  REQUIRE(r);
  CHECK(r->dialect == Dialect::kTorchtitan);
  CHECK(r->inputs.config.parallel.world_size() == 8);
  CHECK(r->inputs.config.parallel.sharding == ShardingStrategy::kFsdpFullShard);
}

TEST_CASE("toml: a comment after a table header is valid TOML (prime-rl's `[ckpt] # ...`)") {
  auto doc = parse_toml("max_steps = 100\n\n[ckpt] # Checkpoint at the end of training\n\n[model]\nname = \"x/y\"\n"
                        "[data]  # the data\nseq_len = 4096\n",
                        "sft.toml");
  REQUIRE(doc);
  CHECK(doc->warnings.empty());
  REQUIRE(doc->root.at({"data", "seq_len"}) != nullptr);
  CHECK(doc->root.at({"data", "seq_len"})->value == "4096");
  CHECK(doc->root.at({"data", "seq_len"})->line == 8);
}

TEST_CASE("inferred: prime-rl's [model.ac] freq and optimization_dtype") {
  auto r = load("[model]\nname = \"Qwen/Qwen3.5-0.8B\"\noptimization_dtype = \"bfloat16\"\n[model.lora]\nrank = 16\n"
                "[model.ac]\nfreq = 1\n[data]\nbatch_size = 1\nmicro_batch_size = 1\nseq_len = 16384\n",
                "sft.toml");
  REQUIRE(r);
  const TrainingConfig& t = r->inputs.config;
  CHECK(t.gradient_checkpointing);
  CHECK(t.torch_dtype == DType::kBFloat16);
  CHECK(t.lora.enabled);
  CHECK(t.lora.r == 16);
  CHECK(t.micro_batch == 1);
  CHECK(t.seq_len == 16384);
}

TEST_CASE("ms-swift: a Ray train group's GPUs, and vLLM on the rollout group's own GPUs") {
  auto r = load("rlhf_type: grpo\nmodel: Qwen/Qwen2.5-VL-3B-Instruct\nmicro_batch_size: 2\nglobal_batch_size: 16\n"
                "num_generations: 8\nuse_vllm: true\nsplit_dataset_ratio: 0\n"
                "train:\n  gpus: 4\n  tuner_type: lora\n  lora_rank: 8\n"
                "rollout:\n  gpus: 4\n  vllm_gpu_memory_utilization: 0.8\n");
  REQUIRE(r);
  CHECK(r->dialect == Dialect::kMsSwift);
  CHECK(r->inputs.config.parallel.world_size() == 4);
  CHECK(r->inputs.config.grpo.vllm == VllmMode::kServer);
}

TEST_CASE("axolotl: expert_parallel_size and FSDP's own activation checkpointing are read") {
  auto r = load("base_model: Qwen/Qwen3-30B-A3B-Instruct-2507\nexpert_parallel_size: 4\nsequence_len: 2048\n"
                "adapter: lora\nlora_r: 32\nmicro_batch_size: 1\nfsdp_config:\n  fsdp_version: 2\n"
                "  fsdp_activation_checkpointing: true\nlora_target_linear: true\n");
  REQUIRE(r);
  CHECK(r->dialect == Dialect::kAxolotl);
  CHECK(r->inputs.config.parallel.expert_parallel == 4);
  CHECK(r->inputs.config.parallel.world_size() == 4);
  CHECK(r->inputs.config.gradient_checkpointing);
  CHECK(r->inputs.origins.at("gradient_checkpointing").to_string() == "run.yaml:9");
}

TEST_CASE("inferred: h2o-llmstudio's backbone, its 4-bit dtype, the tokenizer's length and a GPU list") {
  auto r = load("architecture:\n  backbone_dtype: int4\n  gradient_checkpointing: true\n"
                "environment:\n  gpus:\n  - '0'\n  - '1'\n  mixed_precision: true\n  mixed_precision_dtype: bfloat16\n"
                "llm_backbone: h2oai/h2o-danube2-1.8b-base\n"
                "prediction:\n  max_length_inference: 256\n"
                "tokenizer:\n  max_length: 512\n"
                "training:\n  batch_size: 2\n  grad_accumulation: 1\n  lora: true\n  lora_r: 4\n");
  REQUIRE(r);
  const TrainingConfig& t = r->inputs.config;
  CHECK(r->inputs.model_name == "h2oai/h2o-danube2-1.8b-base");
  CHECK(t.quant.load_in_4bit);
  CHECK(t.autocast == DType::kBFloat16);
  CHECK(t.seq_len == 512);
  CHECK(t.parallel.world_size() == 2);
  CHECK(t.micro_batch == 2);
  CHECK(t.lora.enabled);
  CHECK(t.lora.r == 4);
}

TEST_CASE("inferred: a mixed-precision dtype whose switch is off is not autocast") {
  auto r = load("llm_backbone: Qwen/Qwen2.5-0.5B\nenvironment:\n  mixed_precision: false\n"
                "  mixed_precision_dtype: bfloat16\ntraining:\n  batch_size: 2\n");
  REQUIRE(r);
  CHECK_FALSE(r->inputs.config.autocast.has_value());
}

TEST_CASE("inferred: Megatron's virtual pipeline size is the interleaved schedule's virtual stages") {
  auto r = load("pretrain: Qwen/Qwen2.5-7B\nsft_train:\n  training_args:\n    per_device_train_batch_size: 1\n"
                "  strategy_args:\n    strategy_name: megatron_train\n    strategy_config:\n"
                "      pipeline_model_parallel_size: 2\n      virtual_pipeline_model_parallel_size: 4\n"
                "  device_mapping: list(range(0,8))\n");
  REQUIRE(r);
  CHECK(r->dialect == Dialect::kRoll);
  CHECK(r->inputs.config.parallel.pipeline_parallel == 2);
  CHECK(r->inputs.config.parallel.virtual_stages == 4);
  CHECK(r->inputs.config.parallel.pp_schedule == PipelineSchedule::kInterleaved1F1B);
  CHECK(r->inputs.config.parallel.world_size() == 8);
}

// Review findings on this round's rules (each a config a person reads otherwise).
TEST_CASE("inferred: group_size or n_samples outside a rollout section does not make a config RL") {
  // A MoE's group size and an evaluation's samples are not completions per prompt: the file is SFT,
  // and its batch_size stays the micro-batch (8 sequences), not 1 prompt.
  for (const std::string side : {"moe:\n  group_size: 4\n", "evaluation:\n  n_samples: 4\n"}) {
    INFO(side);
    auto r = load("model:\n  name_or_path: Qwen/Qwen2.5-1.5B\ntrain:\n  batch_size: 8\nmax_seq_length: 2048\n" + side);
    REQUIRE(r);
    CHECK(r->inputs.config.method == Method::kSft);
    CHECK(r->inputs.config.micro_batch == 8);
  }
  // In a rollout section, or at the top level (torchforge), it still is.
  auto rl = load("model:\n  name_or_path: Qwen/Qwen2.5-1.5B\nrollout:\n  n_samples: 4\n");
  REQUIRE(rl);
  CHECK(rl->inputs.config.method == Method::kGrpo);
  CHECK(rl->inputs.config.grpo.num_generations == 4);
}

TEST_CASE("inferred: an allocation with a zero, a repeated or unknown dimension, or too many GPUs is refused at its line") {
  for (const std::string alloc : {"fsdp:d4p0t1", "fsdp:d2d2", "fsdp:d4x2", "fsdp:d999999p999999t999999"}) {
    INFO(alloc);
    auto r = load("actor:\n  path: Qwen/Qwen2.5-1.5B-Instruct\n  backend: \"" + alloc + "\"\n");
    REQUIRE_FALSE(r);
    REQUIRE(r.error().where);
    CHECK(r.error().where->line == 3);
    CHECK(r.error().message == "actor.backend = " + alloc +
                                   " is not an allocation memplan can read: each of d, p, t, c, e once, each at "
                                   "least 1, at most 1048576 GPUs in all");
  }
}

TEST_CASE("axolotl: an adapter with no target modules is refused, as PEFT raises on axolotl's empty list") {
  auto r = load("base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nlora_r: 16\nmicro_batch_size: 2\n", "ax.yaml");
  REQUIRE_FALSE(r);
  REQUIRE(r.error().where);
  CHECK(r.error().where->line == 2);
  CHECK(r.error().message.find("adapter: lora names no modules: axolotl passes target_modules=[] to PEFT") == 0);
  CHECK(r.error().suggestion == "add lora_target_linear: true, or lora_target_modules: [q_proj, v_proj, ...]");
  auto linear = load("base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nlora_target_linear: true\n", "ax.yaml");
  REQUIRE(linear);
  CHECK(linear->inputs.config.lora.all_linear);
}

TEST_CASE("oumi: trainer_type OUMI is oumi's own loop, not accelerate's; HF and TRL trainers are") {
  const std::string base = "model:\n  model_name: meta-llama/Llama-3.1-8B\ntraining:\n  trainer_type: ";
  auto own = load(base + "OUMI\n", "oumi.yaml");
  REQUIRE(own);
  REQUIRE(own->dialect == Dialect::kOumi);
  CHECK(own->inputs.run.accelerate == std::optional<bool>(false));
  CHECK(own->inputs.run.peft);
  auto trl = load(base + "TRL_SFT\n", "oumi.yaml");
  REQUIRE(trl);
  CHECK(trl->inputs.run.accelerate == std::optional<bool>(true));
}

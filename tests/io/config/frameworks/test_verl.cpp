// Tests src/io/config/frameworks/verl.cpp: verl's SFT and PPO/GRPO trainer configs, detected over
// Lightning's `trainer:`, and PPO with a critic refused. Expected values are verl's own rules
// (fsdp_sft_trainer.py divides data.train_batch_size by the data-parallel size; ppo_mini_batch_size
// is in prompts and is multiplied by rollout.n), worked by hand in each comment.
#include <catch2/catch.hpp>

#include "io/config/config_loader.hpp"

using namespace memplan;
using namespace memplan::io;

namespace {

Result<LoadedConfig> load(MemoryFileSystem& fs, const std::string& file) {
  ConfigRequest req;
  req.files = {file};
  return load_config(req, fs);
}

std::string origin(const LoadedConfig& c, const std::string& key) {
  auto it = c.inputs.origins.find(key);
  return it == c.inputs.origins.end() ? "(none)" : it->second.to_string();
}

}  // namespace

TEST_CASE("verl: the SFT trainer is verl's, not Lightning's, and its global batch sets the accumulation") {
  MemoryFileSystem fs;
  fs.files["sft.yaml"] = "data:\n"
                         "  train_batch_size: 256\n"
                         "  micro_batch_size_per_gpu: 2\n"
                         "  max_length: 2048\n"
                         "model:\n"
                         "  partial_pretrain: Qwen/Qwen2.5-7B-Instruct\n"
                         "  fsdp_config:\n"
                         "    model_dtype: fp32\n"
                         "    cpu_offload: true\n"
                         "  enable_gradient_checkpointing: true\n"
                         "  lora_rank: 32\n"
                         "  strategy: fsdp2\n"
                         "ulysses_sequence_parallel_size: 2\n"
                         "trainer:\n"
                         "  nnodes: 2\n"
                         "  n_gpus_per_node: 8\n";
  auto r = load(fs, "sft.yaml");
  REQUIRE(r);
  const LoadedConfig& c = *r;
  CHECK(c.dialect == Dialect::kVerl);
  const TrainingConfig& t = c.inputs.config;
  CHECK(c.inputs.model_name == "Qwen/Qwen2.5-7B-Instruct");
  CHECK(t.micro_batch == 2);
  // 16 GPUs over Ulysses groups of 2: 8 data-parallel ranks; 256 / (2 x 8) = 16.
  CHECK(t.grad_accum == 16);
  CHECK(t.seq_len == 2048);
  CHECK(t.parallel.world_size() == 16);
  CHECK(t.parallel.sharding == ShardingStrategy::kFsdpFullShard);
  CHECK(t.parallel.fsdp_version == 2);
  CHECK(t.parallel.fsdp_mixed_precision);
  CHECK(t.torch_dtype == DType::kBFloat16);
  CHECK(t.parallel.offload_params);
  CHECK(t.parallel.offload_optimizer);
  CHECK(t.lora.enabled);
  CHECK(t.lora.r == 32);
  CHECK(origin(c, "batch") == "sft.yaml:3");
  CHECK(origin(c, "num_gpus") == "sft.yaml:16");
  const ValueSite* g = nullptr;
  for (const auto& s : c.sites)
    if (s.knob == Knob::kGlobalBatch) g = &s;
  REQUIRE(g != nullptr);
  CHECK(g->world_size == 8);
  bool ulysses = false;
  for (const auto& w : c.inputs.warnings)
    ulysses = ulysses || w == "sft.yaml:13: ulysses_sequence_parallel_size = 2: DeepSpeed-Ulysses sequence parallelism "
                              "is not modelled; memplan estimates the whole sequence on each GPU, an upper bound";
  CHECK(ulysses);
}

TEST_CASE("verl: GRPO from actor_rollout_ref; PPO with a critic is refused, never planned as SFT") {
  MemoryFileSystem fs;
  const std::string grpo = "algorithm:\n"
                           "  adv_estimator: grpo\n"
                           "actor_rollout_ref:\n"
                           "  model:\n"
                           "    path: Qwen/Qwen2.5-3B-Instruct\n"
                           "    enable_gradient_checkpointing: true\n"
                           "  actor:\n"
                           "    strategy: fsdp\n"
                           "    ppo_mini_batch_size: 64\n"
                           "    ppo_micro_batch_size_per_gpu: 8\n"
                           "    use_kl_loss: true\n"
                           "    kl_loss_coef: 0.001\n"
                           "    fsdp_config:\n"
                           "      param_offload: false\n"
                           "      optimizer_offload: true\n"
                           "  rollout:\n"
                           "    name: vllm\n"
                           "    gpu_memory_utilization: 0.6\n"
                           "    n: 5\n"
                           "data:\n"
                           "  train_batch_size: 512\n"
                           "  max_prompt_length: 1024\n"
                           "  max_response_length: 2048\n"
                           "trainer:\n"
                           "  n_gpus_per_node: 8\n"
                           "  nnodes: 1\n";
  fs.files["grpo.yaml"] = grpo;
  auto r = load(fs, "grpo.yaml");
  REQUIRE(r);
  const TrainingConfig& t = r->inputs.config;
  CHECK(r->dialect == Dialect::kVerl);
  CHECK(t.method == Method::kGrpo);
  CHECK(t.micro_batch == 8);
  // 64 prompts x 5 samples = 320 sequences over 8 GPUs = 40 each, in micro-batches of 8: 5.
  CHECK(t.grad_accum == 5);
  CHECK(t.grpo.num_generations == 5);
  CHECK(t.grpo.max_prompt_length == 1024);
  CHECK(t.grpo.max_completion_length == 2048);
  CHECK(t.grpo.beta == 0.001);
  CHECK(t.parallel.offload_optimizer);
  CHECK_FALSE(t.parallel.offload_params);
  // free_cache_engine defaults to true: vLLM sleeps during the update.
  CHECK(t.grpo.vllm == VllmMode::kNone);
  CHECK(t.grpo.vllm_gpu_memory_utilization == 0.6);
  CHECK(origin(*r, "batch") == "grpo.yaml:10");
  CHECK(origin(*r, "method") == "grpo.yaml:2");
  // free_cache_engine: false keeps vLLM's share during the update.
  std::string held = grpo;
  held.replace(held.find("    n: 5\n"), 9, "    n: 5\n    free_cache_engine: false\n");
  fs.files["held.yaml"] = held;
  auto h = load(fs, "held.yaml");
  REQUIRE(h);
  CHECK(h->inputs.config.grpo.vllm == VllmMode::kColocate);

  std::string ppo = grpo;
  ppo.replace(ppo.find("adv_estimator: grpo"), 19, "adv_estimator: gae");
  fs.files["ppo.yaml"] = ppo;
  auto p = load(fs, "ppo.yaml");
  REQUIRE_FALSE(p);
  CHECK(p.error().to_string() ==
        "ppo.yaml:2: verl PPO with adv_estimator gae trains a critic (a second model with its own optimizer and value "
        "head) beside the actor, which memplan does not model; it will not plan this run as if it had no critic; to "
        "size the actor alone, run with algorithm.adv_estimator=grpo after the file (or --model ID --method "
        "grpo), and the critic as a second estimate");
  // No adv_estimator: verl's default is gae.
  std::string none = grpo;
  none.erase(0, std::string("algorithm:\n  adv_estimator: grpo\n").size());
  fs.files["none.yaml"] = none;
  auto n = load(fs, "none.yaml");
  REQUIRE_FALSE(n);
  CHECK(n.error().message.find("(verl's default adv_estimator is gae)") != std::string::npos);
}

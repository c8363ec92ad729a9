// verl's Hydra trainer configs (volcengine/verl verl/trainer/config/): the FSDP SFT trainer
// (fsdp_sft_trainer: data.micro_batch_size_per_gpu, model.partial_pretrain) and the PPO/GRPO
// trainer (main_ppo: actor_rollout_ref.actor/rollout/ref, algorithm.adv_estimator). The training
// step memplan models is the actor's update; docs/configs.md#verl says what is read and inferred.
#include <algorithm>

#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

// Advantage estimators that need no critic: the policy (and a reference model when a KL term
// asks for one) is all that trains, as in GRPO (verl/trainer/ppo/core_algos.py AdvantageEstimator).
constexpr std::string_view kCriticFree[] = {"grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline",
                                            "remax", "opo", "grpo_passk", "gpg", "optimal_token_baseline"};

// World size: trainer.n_gpus_per_node x trainer.nnodes (verl's defaults 8 and 1).
Status read_world(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(bool gpus, m.read("trainer.n_gpus_per_node", "num_gpus", c.parallel.num_gpus));
  if (!gpus) {
    c.parallel.num_gpus = 8;
    m.from_default("num_gpus", "verl trainer.n_gpus_per_node = 8");
  }
  MEMPLAN_TRY(bool nodes, m.read("trainer.nnodes", "nodes", c.parallel.nodes));
  if (!nodes) m.from_default("nodes", "verl trainer.nnodes = 1");
  return Ok{};
}

// verl's FSDP workers: the model loaded in fsdp_config.model_dtype (fp32 for the trained model
// unless set), computed in bf16 by FSDP's MixedPrecision (param_dtype bf16, reduce fp32).
Status read_fsdp(Mapper& m, const std::string& fsdp, const std::string& strategy_key) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto strategy, m.text(strategy_key));
  const std::string s = to_lower(strategy.value_or("fsdp"));
  if (s == "megatron") {
    const YamlNode* n = m.node(strategy_key);
    return m.error_at(*n, ErrorCode::kUnsupported,
                      "verl's Megatron back end (strategy: megatron) is not modelled: its TP/PP/EP layout lives in "
                      "the actor's megatron section",
                      "estimate it with --dialect megatron-lm-style flags (--tensor-parallel, --pipeline-parallel), or "
                      "use strategy: fsdp");
  }
  if (s != "fsdp" && s != "fsdp2") {
    const YamlNode* n = m.node(strategy_key);
    return m.error_at(*n, ErrorCode::kUnknownName, fmt::format("unknown verl strategy '{}'", *strategy),
                      did_you_mean(s, {"fsdp", "fsdp2", "megatron"}));
  }
  c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  c.parallel.fsdp_version = s == "fsdp2" ? 2 : 1;
  if (const YamlNode* n = m.node(strategy_key)) m.from_file("sharding", *n, strategy_key);
  else m.from_default("sharding", "verl strategy = fsdp (FULL_SHARD over all GPUs)");

  MEMPLAN_TRY(auto dtype, m.text(fsdp + ".model_dtype"));
  const std::string d = to_lower(dtype.value_or("fp32"));
  if (d == "fp32" || d == "float32") {
    c.torch_dtype = DType::kBFloat16;
    c.autocast.reset();
    c.parallel.fsdp_mixed_precision = true;
    if (dtype) m.from_file("fsdp_mixed_precision", *m.node(fsdp + ".model_dtype"), fsdp + ".model_dtype");
    else m.derived("fsdp_mixed_precision", "verl loads the trained model in fp32 (fsdp_config.model_dtype) and "
                                           "computes in bf16 (FSDP MixedPrecision param_dtype)");
    m.derived("torch_dtype", "verl's FSDP MixedPrecision computes in bf16");
  } else {
    MEMPLAN_IO_CHECK(m.read_dtype(fsdp + ".model_dtype", "torch_dtype", c.torch_dtype));
  }
  // fsdp_size: the FSDP group; -1 (default) shards over every GPU, a smaller group is HSDP.
  MEMPLAN_TRY(auto fsdp_size, m.integer(fsdp + ".fsdp_size", -1));
  if (fsdp_size && *fsdp_size > 0) {
    const std::int64_t world = static_cast<std::int64_t>(c.parallel.num_gpus) * c.parallel.nodes;
    if (*fsdp_size < world && world % *fsdp_size == 0) {
      c.parallel.sharding = ShardingStrategy::kFsdpHybridShard;
      c.parallel.dp_replicate = static_cast<int>(world / *fsdp_size);
      m.from_file("sharding", *m.node(fsdp + ".fsdp_size"), fsdp + ".fsdp_size (HSDP)");
    }
  }
  for (const char* key : {"param_offload", "offload_params", "cpu_offload"}) {
    MEMPLAN_TRY(auto on, m.boolean(fsdp + "." + key));
    if (on.value_or(false)) {
      c.parallel.offload_params = true;
      if (std::string_view(key) == "cpu_offload") c.parallel.offload_optimizer = true;
      m.from_file("offload_params", *m.node(fsdp + "." + key), fsdp + "." + key);
    }
  }
  MEMPLAN_TRY(auto oo, m.boolean(fsdp + ".optimizer_offload"));
  if (oo.value_or(false)) {
    c.parallel.offload_optimizer = true;
    m.from_file("offload_optimizer", *m.node(fsdp + ".optimizer_offload"), fsdp + ".optimizer_offload");
  }
  return Ok{};
}

// The model section both trainers share: LoRA, checkpointing, Liger, padding removal.
Status read_model_section(Mapper& m, const std::string& model, bool checkpointing_default) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(bool gc, m.read(model + ".enable_gradient_checkpointing", "gradient_checkpointing",
                              c.gradient_checkpointing));
  if (!gc) {
    c.gradient_checkpointing = checkpointing_default;
    m.from_default("gradient_checkpointing", fmt::format("verl {}.enable_gradient_checkpointing = {}", model,
                                                         checkpointing_default));
  }
  MEMPLAN_TRY(auto rank, m.integer(model + ".lora_rank", 0));
  if (rank && *rank > 0) {
    c.lora.enabled = true;
    c.lora.r = static_cast<int>(std::min<std::int64_t>(*rank, 1 << 16));
    m.from_file("lora_r", *m.node(model + ".lora_rank"), model + ".lora_rank");
    m.from_file("use_peft", *m.node(model + ".lora_rank"), model + ".lora_rank > 0");
    MEMPLAN_IO_CHECK(m.read(model + ".lora_alpha", "lora_alpha", c.lora.alpha));
    MEMPLAN_TRY(auto targets, m.list(model + ".target_modules"));
    set_lora_targets(c, targets.value_or(std::vector<std::string>{"all-linear"}));
    // verl's LoRA config sets no dropout (peft LoraConfig default 0.0 is not overridden).
    c.lora.dropout = 0.0;
  }
  MEMPLAN_TRY(auto liger, m.boolean(model + ".use_liger"));
  if (liger.value_or(false)) m.set_loss_kernel(*m.node(model + ".use_liger"), model + ".use_liger", LossKernel::kLiger, true);
  return Ok{};
}

void warn_remove_padding(Mapper& m, const std::string& key) {
  auto on = m.boolean(key);
  if (on && on->value_or(false))
    m.warn_at(*m.node(key),
              fmt::format("{}: verl packs the batch without padding; memplan estimates padded sequences of the full "
                          "length, an upper bound",
                          key));
}

void warn_ulysses(Mapper& m, const std::string& key) {
  auto sp = m.integer(key, 1);
  if (sp && sp->value_or(1) > 1)
    m.warn_at(*m.node(key),
              fmt::format("{} = {}: DeepSpeed-Ulysses sequence parallelism is not modelled; memplan estimates the "
                          "whole sequence on each GPU, an upper bound",
                          key, **sp));
}

Status map_verl_sft(Mapper& m) {
  TrainingConfig& c = m.config();
  c.method = Method::kSft;
  m.from_default("method", "verl's fsdp_sft_trainer");
  MEMPLAN_IO_CHECK(m.read_model("model.partial_pretrain"));
  MEMPLAN_IO_CHECK(read_world(m));
  MEMPLAN_IO_CHECK(m.read_or("data.micro_batch_size_per_gpu", "batch", c.micro_batch, 4,
                             "verl data.micro_batch_size_per_gpu = 4"));
  m.site(Knob::kBatch, "data.micro_batch_size_per_gpu");
  MEMPLAN_IO_CHECK(m.read_or("data.max_length", "seq_len", c.seq_len, 1024, "verl data.max_length = 1024"));
  m.site(Knob::kSeqLen, "data.max_length");
  MEMPLAN_IO_CHECK(read_fsdp(m, "model.fsdp_config", "model.strategy"));
  MEMPLAN_IO_CHECK(read_model_section(m, "model", false));
  // data.train_batch_size is global: verl divides it by the data-parallel size (the GPUs over
  // the Ulysses group) and accumulates micro-batches up to it.
  MEMPLAN_TRY(auto global, m.integer("data.train_batch_size"));
  MEMPLAN_TRY(auto sp, m.integer("ulysses_sequence_parallel_size"));
  const std::int64_t world = static_cast<std::int64_t>(c.parallel.num_gpus) * c.parallel.nodes;
  const std::int64_t dp = std::max<std::int64_t>(1, world / std::max<std::int64_t>(1, sp.value_or(1)));
  if (global) {
    const YamlNode& n = *m.node("data.train_batch_size");
    const std::int64_t per_step = c.micro_batch * dp;
    if (*global % per_step != 0)
      m.warn_at(n, fmt::format("data.train_batch_size = {} is not a multiple of micro_batch_size_per_gpu {} x {} "
                               "data-parallel GPUs; verl requires it",
                               *global, c.micro_batch, dp));
    c.grad_accum = std::max<std::int64_t>(1, *global / per_step);
    m.derived("grad_accum", fmt::format("data.train_batch_size {} / (micro-batch {} x {} data-parallel GPUs) at {}",
                                        *global, c.micro_batch, dp, m.where_text(n)));
    m.mirror_site(Knob::kGlobalBatch, "data.train_batch_size", dp);
  } else {
    m.from_default("grad_accum", "1 (no data.train_batch_size)");
  }
  warn_remove_padding(m, "use_remove_padding");
  warn_ulysses(m, "ulysses_sequence_parallel_size");
  return Ok{};
}

Status map_verl_ppo(Mapper& m) {
  TrainingConfig& c = m.config();
  const std::string arr = "actor_rollout_ref";
  const std::string actor = arr + ".actor";
  const std::string rollout = arr + ".rollout";

  MEMPLAN_TRY(auto adv, m.text("algorithm.adv_estimator"));
  const std::string estimator = to_lower(adv.value_or("gae"));
  const YamlNode* adv_node = m.node("algorithm.adv_estimator");
  // GRPO variants (grpo_passk, an integration's grpo_atropos) keep GRPO's models.
  const bool critic_free = estimator.rfind("grpo", 0) == 0 ||
                           std::find(std::begin(kCriticFree), std::end(kCriticFree), estimator) != std::end(kCriticFree);
  if (!critic_free) {
    Error e = make_error(
        ErrorCode::kUnsupported,
        estimator == "gae"
            ? std::string("verl PPO with adv_estimator gae trains a critic (a second model with its own optimizer "
                          "and value head) beside the actor, which memplan does not model; it will not plan this run "
                          "as if it had no critic")
            : fmt::format("verl adv_estimator '{}' is not one memplan knows to be critic-free", estimator),
        "to size the actor alone, run with algorithm.adv_estimator=grpo after the file (or --model ID --method "
        "grpo), and the critic as a second estimate");
    e.where = adv_node != nullptr ? m.where(*adv_node) : SourceLocation{m.out().files.front().path, 0, 0};
    if (adv_node == nullptr) e.message += " (verl's default adv_estimator is gae)";
    return e;
  }
  c.method = Method::kGrpo;
  m.from_file("method", *adv_node, "algorithm.adv_estimator");
  if (estimator != "grpo")
    m.warn_at(*adv_node, fmt::format("adv_estimator {}: critic-free like GRPO, estimated as GRPO (the same models in "
                                     "memory: the policy, and a reference model when a KL term needs one)",
                                     estimator));

  MEMPLAN_IO_CHECK(m.read_model(arr + ".model.path"));
  MEMPLAN_IO_CHECK(read_world(m));
  MEMPLAN_IO_CHECK(read_fsdp(m, actor + ".fsdp_config", actor + ".strategy"));
  MEMPLAN_IO_CHECK(read_model_section(m, arr + ".model", false));

  // Rollout: n samples per prompt; prompt and response lengths.
  MEMPLAN_IO_CHECK(m.read(rollout + ".n", "num_generations", c.grpo.num_generations));
  if (!m.has_origin("num_generations")) {
    c.grpo.num_generations = 1;
    m.from_default("num_generations", "verl rollout.n = 1");
  }
  MEMPLAN_IO_CHECK(m.read_or("data.max_prompt_length", "max_prompt_length", c.grpo.max_prompt_length, 512,
                             "verl data.max_prompt_length = 512"));
  MEMPLAN_IO_CHECK(m.read_or("data.max_response_length", "max_completion_length", c.grpo.max_completion_length, 512,
                             "verl data.max_response_length = 512"));
  m.site(Knob::kSeqLen, "data.max_response_length", {},
         "verl's sequences are max_prompt_length + max_response_length; memplan does not split a new length between "
         "them");

  // The actor's micro-batch (sequences per GPU per forward/backward).
  MEMPLAN_TRY(auto dyn, m.boolean(actor + ".use_dynamic_bsz"));
  MEMPLAN_TRY(bool micro, m.read(actor + ".ppo_micro_batch_size_per_gpu", "batch", c.micro_batch));
  const std::int64_t seq = c.grpo.max_prompt_length + c.grpo.max_completion_length;
  if (dyn.value_or(false)) {
    MEMPLAN_TRY(auto tokens, m.integer(actor + ".ppo_max_token_len_per_gpu"));
    const std::int64_t budget = tokens.value_or(16384);
    c.micro_batch = std::max<std::int64_t>(1, budget / std::max<std::int64_t>(1, seq));
    m.derived("batch", fmt::format("use_dynamic_bsz: ppo_max_token_len_per_gpu {} / {} tokens per sequence", budget,
                                   seq));
    m.warn_at(*m.node(actor + ".use_dynamic_bsz"),
              fmt::format("use_dynamic_bsz packs up to {} tokens per micro-batch; memplan estimates {} full-length "
                          "sequences",
                          budget, c.micro_batch));
  } else if (!micro) {
    const YamlNode* global_micro = m.node(actor + ".ppo_micro_batch_size");
    const std::int64_t world = static_cast<std::int64_t>(c.parallel.num_gpus) * c.parallel.nodes;
    MEMPLAN_TRY(auto g, m.integer(actor + ".ppo_micro_batch_size"));
    if (g) {
      c.micro_batch = std::max<std::int64_t>(1, *g / std::max<std::int64_t>(1, world));
      m.derived("batch", fmt::format("ppo_micro_batch_size {} / {} GPUs at {} (deprecated key)", *g, world,
                                     m.where_text(*global_micro)));
    } else {
      return make_error(ErrorCode::kInvalidConfig,
                        fmt::format("{}.ppo_micro_batch_size_per_gpu is not set (verl requires it or "
                                    "use_dynamic_bsz)",
                                    actor),
                        fmt::format("set {}.ppo_micro_batch_size_per_gpu=N", actor));
    }
  }
  m.site(Knob::kBatch, actor + ".ppo_micro_batch_size_per_gpu");
  // Accumulation: ppo_mini_batch_size prompts x n samples, split over the data-parallel GPUs.
  MEMPLAN_TRY(auto mini, m.integer(actor + ".ppo_mini_batch_size"));
  if (mini && !dyn.value_or(false)) {
    const std::int64_t world = static_cast<std::int64_t>(c.parallel.num_gpus) * c.parallel.nodes;
    MEMPLAN_TRY(auto sp, m.integer(actor + ".ulysses_sequence_parallel_size"));
    const std::int64_t dp = std::max<std::int64_t>(1, world / std::max<std::int64_t>(1, sp.value_or(1)));
    const std::int64_t per_gpu = *mini * c.grpo.num_generations / dp;
    c.grad_accum = std::max<std::int64_t>(1, per_gpu / std::max<std::int64_t>(1, c.micro_batch));
    m.derived("grad_accum", fmt::format("ppo_mini_batch_size {} x rollout.n {} / {} data-parallel GPUs / micro-batch "
                                        "{} at {}",
                                        *mini, c.grpo.num_generations, dp, c.micro_batch,
                                        m.where_text(*m.node(actor + ".ppo_mini_batch_size"))));
  }

  // A reference model exists when a KL term needs it: the actor's KL loss, or KL in the reward.
  MEMPLAN_TRY(auto kl_loss, m.boolean(actor + ".use_kl_loss"));
  MEMPLAN_TRY(auto kl_reward, m.boolean("algorithm.use_kl_in_reward"));
  if (kl_loss.value_or(false)) {
    MEMPLAN_TRY(auto coef, m.number(actor + ".kl_loss_coef"));
    c.grpo.beta = coef.value_or(0.001);
    m.from_file("beta", *m.node(actor + ".use_kl_loss"), actor + ".use_kl_loss (kl_loss_coef)");
  } else if (kl_reward.value_or(false)) {
    MEMPLAN_TRY(auto coef, m.number("algorithm.kl_ctrl.kl_coef"));
    c.grpo.beta = coef.value_or(0.001);
    m.from_file("beta", *m.node("algorithm.use_kl_in_reward"), "algorithm.use_kl_in_reward (kl_ctrl.kl_coef)");
  } else {
    c.grpo.beta = 0;
    m.from_default("beta", "no use_kl_loss or use_kl_in_reward: no reference model");
  }
  if (c.grpo.beta > 0) {
    MEMPLAN_TRY(auto ref_offload, m.boolean(arr + ".ref.fsdp_config.param_offload"));
    if (ref_offload.value_or(false))
      m.warn_at(*m.node(arr + ".ref.fsdp_config.param_offload"),
                "ref.fsdp_config.param_offload: verl keeps the reference model's shards on the CPU; memplan counts "
                "them on the GPU, an upper bound");
  }

  // The rollout engine, colocated with the actor (verl's hybrid engine). free_cache_engine (the
  // default) puts it to sleep during the actor's update: its weights and KV cache leave the GPU.
  MEMPLAN_TRY(auto name, m.text(rollout + ".name"));
  const std::string engine = to_lower(name.value_or("vllm"));
  MEMPLAN_TRY(auto free_cache, m.boolean(rollout + ".free_cache_engine"));
  MEMPLAN_IO_CHECK(m.read(rollout + ".gpu_memory_utilization", "vllm_gpu_memory_utilization",
                          c.grpo.vllm_gpu_memory_utilization));
  if (!m.has_origin("vllm_gpu_memory_utilization")) {
    c.grpo.vllm_gpu_memory_utilization = 0.5;
    m.from_default("vllm_gpu_memory_utilization", "verl rollout.gpu_memory_utilization = 0.5");
  }
  if (engine == "hf") {
    c.grpo.vllm = VllmMode::kNone;
    m.derived("use_vllm", "rollout.name hf: generation by the actor itself");
  } else if (free_cache.value_or(true)) {
    c.grpo.vllm = VllmMode::kNone;
    m.derived("use_vllm", fmt::format("{} sleeps during the actor's update (rollout.free_cache_engine{}): its "
                                      "memory is free then",
                                      engine, free_cache ? "" : " defaults to true"));
  } else {
    c.grpo.vllm = VllmMode::kColocate;
    m.from_file("use_vllm", *m.node(rollout + ".free_cache_engine"),
                rollout + ".free_cache_engine false: " + engine + " keeps its share during the update");
    if (engine == "sglang")
      m.warn_at(*m.node(rollout + ".name"), "SGLang's mem_fraction_static is read from rollout.gpu_memory_utilization "
                                            "and modelled as vLLM's colocated share");
  }
  MEMPLAN_TRY(auto act_offload, m.boolean(arr + ".model.enable_activation_offload"));
  if (act_offload.value_or(false))
    m.warn_at(*m.node(arr + ".model.enable_activation_offload"),
              "enable_activation_offload moves checkpointed activations to the CPU; memplan counts them on the GPU, "
              "an upper bound");
  warn_remove_padding(m, arr + ".model.use_remove_padding");
  warn_ulysses(m, actor + ".ulysses_sequence_parallel_size");
  return Ok{};
}

}  // namespace

Status map_verl(Mapper& m) {
  if (m.node("actor_rollout_ref") != nullptr) return map_verl_ppo(m);
  // EasyR1 (hiyouga/EasyR1): verl's trainer with its sections renamed (worker.actor, worker.rollout,
  // worker.ref, data.rollout_batch_size): neither verl's SFT nor its PPO layout, so read by meaning,
  // never as verl's SFT defaults.
  if (m.node("worker.actor") != nullptr || m.node("worker.rollout") != nullptr)
    return read_by_meaning(m, "EasyR1 (verl's trainer, its own section names)", {});
  return map_verl_sft(m);
}

}  // namespace memplan::io

// Tests for src/io/config/frameworks/oumi.cpp (oumi TrainingConfig) and src/io/config/frameworks/megatron_bridge.cpp
// (Megatron-Bridge overrides): sections, defaults and what detection tells apart.
#include <catch2/catch.hpp>

#include "io/config/config_loader.hpp"

using namespace memplan;
using namespace memplan::io;

namespace {

Result<LoadedConfig> load(const std::string& text) {
  MemoryFileSystem fs;
  fs.files["train.yaml"] = text;
  ConfigRequest req;
  req.files = {"train.yaml"};
  return load_config(req, fs);
}

}  // namespace

// configs/recipes/llama3_1/sft/8b_qlora/train.yaml, reduced to its memory keys.
TEST_CASE("oumi: QLoRA from peft.q_lora, FSDP from fsdp:, pure bf16 without mixed_precision_dtype") {
  auto r = load("model:\n  model_name: meta-llama/Llama-3.1-8B-Instruct\n  model_max_length: 8192\n"
                "  torch_dtype_str: bfloat16\n  attn_implementation: sdpa\n"
                "training:\n  trainer_type: TRL_SFT\n  use_peft: True\n  per_device_train_batch_size: 2\n"
                "  gradient_accumulation_steps: 32\n  enable_gradient_checkpointing: True\n"
                "  gradient_checkpointing_kwargs:\n    use_reentrant: False\n  optimizer: adamw_torch_fused\n"
                "peft:\n  q_lora: True\n  bnb_4bit_quant_type: nf4\n  lora_r: 8\n  lora_alpha: 16\n"
                "fsdp:\n  enable_fsdp: True\n  sharding_strategy: HYBRID_SHARD\n");
  REQUIRE(r);
  const TrainingConfig& t = r->inputs.config;
  CHECK(r->dialect == Dialect::kOumi);
  CHECK(r->inputs.model_name == "meta-llama/Llama-3.1-8B-Instruct");
  CHECK(t.method == Method::kSft);
  CHECK(t.micro_batch == 2);
  CHECK(t.grad_accum == 32);
  CHECK(t.seq_len == 8192);
  CHECK(t.torch_dtype == DType::kBFloat16);
  CHECK_FALSE(t.autocast.has_value());
  CHECK(t.gradient_checkpointing);
  CHECK_FALSE(t.checkpoint_reentrant.value_or(true));
  CHECK(t.lora.enabled);
  CHECK(t.lora.r == 8);
  CHECK(t.lora.alpha == 16);
  CHECK(t.quant.load_in_4bit);
  CHECK(t.quant.quant_type == "nf4");
  CHECK(t.parallel.sharding == ShardingStrategy::kFsdpHybridShard);
  CHECK(t.attn_impl() == AttnImpl::kSdpa);
}

TEST_CASE("oumi: defaults (batch 8, LoRA alpha 8) and the trainers it does not model") {
  auto r = load("model:\n  model_name: m\n  model_max_length: 1024\ntraining:\n  trainer_type: TRL_DPO\n"
                "  use_peft: true\npeft:\n  q_lora: False\n");
  REQUIRE(r);
  CHECK(r->inputs.config.method == Method::kDpo);
  CHECK(r->inputs.config.micro_batch == 8);
  CHECK(r->inputs.config.lora.alpha == 8);
  auto gkd = load("model:\n  model_name: m\ntraining:\n  trainer_type: TRL_GKD\n  use_peft: true\n");
  REQUIRE_FALSE(gkd);
  CHECK(gkd.error().to_string() ==
        "train.yaml:4: trainer_type: TRL_GKD distills from a teacher model kept beside the student, which memplan "
        "does not model; an SFT estimate of the student alone (trainer_type: TRL_SFT) is a lower bound");
}

// tutorials/recipes/llama/conf/llama32_1b_finetune.yaml, reduced: `model.tensor_model_parallel_size`
// made it a NeMo 1.x file before.
TEST_CASE("megatron-bridge: an override file is told from NeMo 1.x; its missing model is named") {
  auto r = load("dataset:\n  seq_length: 4096\ntrain:\n  train_iters: 100\n  global_batch_size: 128\n"
                "  micro_batch_size: 2\ncheckpoint:\n  pretrained_checkpoint: ./checkpoints/llama32_1b\n"
                "peft:\n  dim: 8\n  alpha: 16\nmodel:\n  seq_length: 4096\n  tensor_model_parallel_size: 2\n");
  REQUIRE(r);
  const TrainingConfig& t = r->inputs.config;
  CHECK(r->dialect == Dialect::kMegatronBridge);
  CHECK(t.micro_batch == 2);
  CHECK(t.seq_len == 4096);
  CHECK(t.lora.enabled);
  CHECK(t.lora.r == 8);
  CHECK(t.lora.alpha == 16);
  CHECK(t.parallel.tensor_parallel == 2);
  CHECK(t.parallel.megatron_core);
  CHECK(r->inputs.model_name.empty());
  CHECK(r->inputs.model_hint.find("names no model: the recipe script builds it") != std::string::npos);
}

// Tests for src/io/config/frameworks/megatron.cpp's Megatron-LM layouts: a recipe's ARGS, the model zoo's
// MODEL_ARGS with command-line spellings, and --yaml-cfg names at the top level; and the
// accumulation Megatron derives from global_batch_size once the GPU count is known.
#include <algorithm>

#include <catch2/catch.hpp>

#include "io/config/config_loader.hpp"

using namespace memplan;
using namespace memplan::io;

namespace {

LoadedConfig load_yaml(const std::string& text) {
  MemoryFileSystem fs;
  fs.files["recipe.yaml"] = text;
  ConfigRequest req;
  req.files = {"recipe.yaml"};
  auto r = load_config(req, fs);
  if (!r) FAIL(r.error().to_string());
  return *r;
}

bool has_warning(const LoadedConfig& c, const std::string& text) {
  return std::any_of(c.inputs.warnings.begin(), c.inputs.warnings.end(),
                     [&](const std::string& w) { return w == text; });
}

}  // namespace

TEST_CASE("megatron-lm: a recipe's ARGS, with the tokenizer's Hugging Face model") {
  // NVIDIA/Megatron-LM examples/moe_recipes/qwen3_30b/h100/bf16_32GPU_TP1PP1EP8.yaml, abridged.
  const LoadedConfig c = load_yaml(
      "ENV_VARS:\n"                                   // 1
      "  NCCL_NVLS_ENABLE: '0'\n"                     // 2
      "ARGS:\n"                                       // 3
      "  tokenizer_model: Qwen/Qwen3-30B-A3B\n"       // 4
      "  num_layers: 48\n"                            // 5
      "  hidden_size: 2048\n"                         // 6
      "  num_experts: 128\n"                          // 7
      "  seq_length: 4096\n"                          // 8
      "  tensor_model_parallel_size: 1\n"             // 9
      "  expert_model_parallel_size: 8\n"             // 10
      "  use_distributed_optimizer: true\n"           // 11
      "  micro_batch_size: 1\n"                       // 12
      "  global_batch_size: 256\n"                    // 13
      "  bf16: true\n"                                // 14
      "  use_flash_attn: true\n"                      // 15
      "  lr_decay_style: cosine\n");                  // 16
  const TrainingConfig& t = c.inputs.config;
  CHECK(c.dialect == Dialect::kMegatronLm);
  CHECK(c.inputs.model_name == "Qwen/Qwen3-30B-A3B");
  CHECK(t.seq_len == 4096);
  CHECK(t.micro_batch == 1);
  CHECK(t.parallel.expert_parallel == 8);
  CHECK(t.parallel.sharding == ShardingStrategy::kZero1);
  CHECK(t.parallel.megatron_core);
  CHECK(t.torch_dtype == DType::kBFloat16);
  CHECK(t.autocast == DType::kBFloat16);
  CHECK(t.attn == AttnImpl::kFlashAttention2);
  // No GPU count: the smallest layout expert parallelism 8 allows, 8 GPUs (data-parallel 8), and
  // so 256 / (1 x 8) = 32 micro-batches per step.
  CHECK(t.parallel.world_size() == 8);
  CHECK(t.grad_accum == 32);
  REQUIRE(c.inputs.global_batch.has_value());
  CHECK(c.inputs.global_batch->value == 256);
  CHECK(c.inputs.global_batch->loc.line == 13);
  CHECK(c.inputs.origins.at("grad_accum").note ==
        "ARGS.global_batch_size 256 at recipe.yaml:13 / (micro-batch 1 x data-parallel 8)");
  CHECK(c.inputs.gpu_count_warnings.size() == 1);
}

TEST_CASE("megatron-lm: the accumulation follows the GPU count and the micro-batch the flags give") {
  LoadedConfig c = load_yaml(
      "ARGS:\n  num_layers: 4\n  hidden_size: 256\n  num_attention_heads: 4\n  tensor_model_parallel_size: 2\n"
      "  pipeline_model_parallel_size: 2\n  micro_batch_size: 2\n  global_batch_size: 96\n");
  ResolvedInputs in = c.inputs;
  // Loaded: 4 GPUs (tp 2 x pp 2), data-parallel 1: 96 / 2 = 48.
  CHECK(in.config.grad_accum == 48);
  // 32 GPUs: data-parallel 8, 96 / (2 x 8) = 6.
  in.config.parallel.num_gpus = 8;
  in.config.parallel.nodes = 4;
  apply_global_batch(in);
  CHECK(in.config.grad_accum == 6);
  // Micro-batch 4 on 32 GPUs: 96 / 32 = 3.
  in.config.micro_batch = 4;
  apply_global_batch(in);
  CHECK(in.config.grad_accum == 3);
  // Micro-batch 5 does not divide: a warning at the key, the accumulation left as it was; the
  // next derivation that divides withdraws it.
  in.config.micro_batch = 5;
  apply_global_batch(in);
  CHECK(in.config.grad_accum == 3);
  const std::string w =
      "recipe.yaml:8: ARGS.global_batch_size = 96 is not a multiple of micro-batch 5 x data-parallel 8 (32 GPU(s) / "
      "tensor x pipeline x context 4); memplan estimates 3 micro-batch(es) per step";
  CHECK(std::count(in.warnings.begin(), in.warnings.end(), w) == 1);
  in.config.micro_batch = 6;
  apply_global_batch(in);
  CHECK(in.config.grad_accum == 2);
  CHECK(std::count(in.warnings.begin(), in.warnings.end(), w) == 0);
  // --grad-accum wins: the rule leaves a flag's accumulation alone.
  Origin flag;  // built field by field: GCC 12 warns (maybe-uninitialized) on the braced temporary
  flag.kind = OriginKind::kFlag;
  flag.note = "--grad-accum";
  in.set_origin("grad_accum", flag);
  in.config.grad_accum = 7;
  apply_global_batch(in);
  CHECK(in.config.grad_accum == 7);
}

TEST_CASE("megatron-lm: MODEL_ARGS with command-line spellings and placeholders") {
  // examples/moe-modelzoo/model_configs/benchmarking/*.yaml: ${TP} is filled by the launch script.
  const LoadedConfig c = load_yaml(
      "MODEL_ARGS:\n"                                       // 1
      "  --tensor-model-parallel-size: ${TP}\n"             // 2
      "  --pipeline-model-parallel-size: 4\n"               // 3
      "  --num-layers-per-virtual-pipeline-stage: 2\n"      // 4
      "  --sequence-parallel: true\n"                       // 5
      "  --micro-batch-size: 2\n"                           // 6
      "  --num-layers: 16\n"                                // 7
      "  --hidden-size: 1024\n"                             // 8
      "  --num-attention-heads: 16\n"                       // 9
      "  --group-query-attention: true\n"                   // 10
      "  --num-query-groups: 4\n"                           // 11
      "  --swiglu: true\n"                                  // 12
      "  --seq-length: 2048\n"                              // 13
      "  --recompute-granularity: full\n"                   // 14
      "  --recompute-method: uniform\n"                     // 15
      "  --recompute-num-layers: 1\n"                       // 16
      "  --fp16: true\n");                                  // 17
  const TrainingConfig& t = c.inputs.config;
  CHECK(c.dialect == Dialect::kMegatronLm);
  CHECK(t.parallel.tensor_parallel == 1);  // the placeholder is absent: a warning names it
  CHECK(has_warning(c, "recipe.yaml:2: interpolation ${TP}: no key 'TP' in the config"));
  CHECK(t.parallel.pipeline_parallel == 4);
  // 16 layers / 4 stages = 4 per stage, 2 per virtual stage: 2 model chunks per GPU.
  CHECK(t.parallel.virtual_stages == 2);
  CHECK(t.parallel.pp_schedule == PipelineSchedule::kInterleaved1F1B);
  CHECK(t.parallel.sequence_parallel);
  CHECK(t.micro_batch == 2);
  CHECK(t.seq_len == 2048);
  CHECK(t.gradient_checkpointing);
  CHECK(t.reentrant_checkpointing());
  CHECK(t.torch_dtype == DType::kFloat16);
  CHECK(t.attn == AttnImpl::kSdpa);  // Transformer Engine's fused attention
  // The shape, with Megatron's defaults: ffn = (4 x 1024 x 2/3) // 64 x 64 = 2688 with swiglu,
  // tied embeddings (no untie flag), the vocabulary assumed.
  REQUIRE(c.inputs.custom_model.has_value());
  const CustomModel& m = *c.inputs.custom_model;
  CHECK(m.num_layers == 16);
  CHECK(m.hidden_size == 1024);
  CHECK(m.num_heads == 16);
  CHECK(m.num_kv_heads == 4);
  CHECK(m.intermediate_size == 2688);
  CHECK(m.tie_word_embeddings == true);
  CHECK(m.family == "llama");
  CHECK(m.name == "custom model (recipe.yaml:7)");
}

TEST_CASE("megatron-lm: --yaml-cfg names at the top level and in language_model / model_parallel") {
  // examples/gpt3/gpt_config.yaml, abridged: ffn_hidden_size null is Megatron's default 4h
  // without swiglu; no group_query_attention: num_query_groups is not read.
  const LoadedConfig c = load_yaml(
      "language_model:\n"                   // 1
      "  num_layers: 24\n"                  // 2
      "  hidden_size: 1024\n"               // 3
      "  num_attention_heads: 16\n"         // 4
      "  num_query_groups: 2\n"             // 5
      "  ffn_hidden_size: null\n"           // 6
      "  recompute_granularity: selective\n"  // 7
      "model_parallel:\n"                   // 8
      "  tensor_model_parallel_size: 2\n"   // 9
      "  sequence_parallel: True\n"         // 10
      "  bf16: True\n"                      // 11
      "micro_batch_size: 2\n"               // 12
      "global_batch_size: 128\n"            // 13
      "untie_embeddings_and_output_weights: True\n"  // 14
      "seq_length: 4096\n"                  // 15
      "vocab_size: 50304\n");               // 16
  const TrainingConfig& t = c.inputs.config;
  CHECK(c.dialect == Dialect::kMegatronLm);
  CHECK(t.parallel.tensor_parallel == 2);
  CHECK(t.parallel.sequence_parallel);
  CHECK(t.micro_batch == 2);
  CHECK(t.seq_len == 4096);
  CHECK(t.torch_dtype == DType::kBFloat16);
  CHECK(!t.gradient_checkpointing);
  CHECK(has_warning(c, "recipe.yaml:7: recompute_granularity = selective is estimated as no recomputation (an upper "
                       "bound): it recomputes the attention core, which fused attention never stores, or the "
                       "recompute_modules"));
  // 2 GPUs assumed (tensor 2): data-parallel 1, 128 / 2 = 64.
  CHECK(t.grad_accum == 64);
  REQUIRE(c.inputs.custom_model.has_value());
  const CustomModel& m = *c.inputs.custom_model;
  CHECK(m.num_kv_heads == std::nullopt);
  CHECK(m.intermediate_size == 4096);
  CHECK(m.vocab_size == 50304);
  CHECK(m.tie_word_embeddings == false);
  CHECK(m.family == "mpt");
}

TEST_CASE("megatron-lm: embedding and loss counted in the pipeline split, and what is not modelled") {
  // examples/moe_recipes/qwen3_235b: 94 layers + embedding + loss = 96 over 8 stages of 12, 3 per
  // virtual stage: 4 model chunks per GPU; memplan's layers_per_stage rule is the same split.
  const LoadedConfig c = load_yaml(
      "ARGS:\n"                                              // 1
      "  num_layers: 94\n"                                   // 2
      "  hidden_size: 4096\n"                                // 3
      "  num_attention_heads: 64\n"                          // 4
      "  tensor_model_parallel_size: 2\n"                    // 5
      "  pipeline_model_parallel_size: 8\n"                  // 6
      "  expert_tensor_parallel_size: 1\n"                   // 7
      "  num_layers_per_virtual_pipeline_stage: 3\n"         // 8
      "  account_for_embedding_in_pipeline_split: true\n"    // 9
      "  account_for_loss_in_pipeline_split: true\n"         // 10
      "  mtp_num_layers: 1\n"                                // 11
      "  fp8_format: hybrid\n"                               // 12
      "  recompute_granularity: full\n"                      // 13
      "  recompute_method: block\n"                          // 14
      "  recompute_num_layers: 2\n");                        // 15
  const ParallelConfig& p = c.inputs.config.parallel;
  CHECK(p.pp_layers_per_stage == 3);
  CHECK(p.virtual_stages == 4);
  CHECK(p.pp_schedule == PipelineSchedule::kInterleaved1F1B);
  CHECK(p.expert_tensor_parallel == 1);
  CHECK(has_warning(c, "recipe.yaml:11: mtp_num_layers = 1: multi-token prediction is not modelled: the last pipeline stage also runs 1 "
                       "MTP layer(s) (a transformer layer, a 2h x h projection and another pass through the output "
                       "layer and the loss), not in the estimate"));
  CHECK(has_warning(c, "recipe.yaml:12: fp8_format = hybrid: FP8 training is not modelled: memplan estimates bf16 activations and no FP8 "
                       "weight copies"));
  CHECK(has_warning(c, "recipe.yaml:15: recompute_method block with recompute_num_layers 2 is estimated as every "
                       "layer checkpointed on its own (a lower bound: the layers past recompute_num_layers keep their "
                       "activations)"));
  // Layers that do not split: Megatron's own assertion, at the key.
  MemoryFileSystem fs;
  fs.files["bad.yaml"] = "ARGS:\n  num_layers: 94\n  pipeline_model_parallel_size: 8\n"
                         "  num_layers_per_virtual_pipeline_stage: 3\n";
  ConfigRequest req;
  req.files = {"bad.yaml"};
  auto r = load_config(req, fs);
  REQUIRE(!r);
  CHECK(r.error().to_string() ==
        "bad.yaml:4: num_layers_per_virtual_pipeline_stage = 3 does not divide the 11 layers of each of the 8 pipeline "
        "stages; Megatron-LM asserts the same (arguments.py)");
}

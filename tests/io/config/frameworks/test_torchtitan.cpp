// Tests for src/io/config/frameworks/torchtitan.cpp: torchtitan's TOML job configs, current and older
// layouts, as a person reads them.
#include <algorithm>

#include <catch2/catch.hpp>

#include "io/config/config_loader.hpp"

using namespace memplan;
using namespace memplan::io;

namespace {

LoadedConfig load_toml(const std::string& text) {
  MemoryFileSystem fs;
  fs.files["job.toml"] = text;
  ConfigRequest req;
  req.files = {"job.toml"};
  auto r = load_config(req, fs);
  if (!r) FAIL(r.error().to_string());
  return *r;
}

}  // namespace

TEST_CASE("torchtitan: the current layout, with FSDP2 mixed precision over the shard degree") {
  const LoadedConfig c = load_toml(
      "[model]\nname = \"llama3\"\nflavor = \"8B\"\n"
      "[training]\nlocal_batch_size = 4\nseq_len = 8192\n"
      "[parallelism]\ndata_parallel_shard_degree = 8\ntensor_parallel_degree = 2\n"
      "[activation_checkpoint]\nmode = \"full\"\n");
  const TrainingConfig& t = c.inputs.config;
  CHECK(c.dialect == Dialect::kTorchtitan);
  CHECK(c.inputs.model_name == "meta-llama/Llama-3.1-8B");
  CHECK(t.micro_batch == 4);
  CHECK(t.seq_len == 8192);
  CHECK(t.parallel.tensor_parallel == 2);
  CHECK(t.parallel.world_size() == 16);  // shard 8 x tensor 2: two nodes of 8
  CHECK(t.parallel.nodes == 2);
  CHECK(t.parallel.sharding == ShardingStrategy::kFsdpFullShard);
  CHECK(t.parallel.fsdp_version == 2);
  CHECK(t.parallel.fsdp_mixed_precision);
  CHECK(t.torch_dtype == DType::kBFloat16);
  CHECK_FALSE(t.autocast.has_value());
  CHECK(t.gradient_checkpointing);
  CHECK(t.checkpoint_reentrant == false);
}

TEST_CASE("torchtitan: the older layout (degrees under [training] and [experimental]) and pipeline micro-batches") {
  const LoadedConfig c = load_toml(
      "[model]\nname = \"llama3\"\nflavor = \"70B\"\ntokenizer_path = \"./assets/tokenizer/original/tokenizer.model\"\n"
      "[training]\nbatch_size = 8\nseq_len = 4_096\ndata_parallel_degree = 1\ntensor_parallel_degree = 4\n"
      "[experimental]\npipeline_parallel_degree = 4\npipeline_parallel_microbatches = 4\n");
  const TrainingConfig& t = c.inputs.config;
  CHECK(c.inputs.model_name == "meta-llama/Llama-3.1-70B");
  CHECK(t.seq_len == 4096);
  CHECK(t.parallel.tensor_parallel == 4);
  CHECK(t.parallel.pipeline_parallel == 4);
  // 8 sequences per step in 4 pipeline micro-batches of 2.
  CHECK(t.micro_batch == 2);
  CHECK(t.grad_accum == 4);
  // Shard degree 1: no FSDP, so one GPU's mixed precision is autocast over fp32 weights.
  CHECK(t.parallel.sharding == ShardingStrategy::kNone);
  CHECK(t.parallel.world_size() == 16);
  CHECK(t.torch_dtype == DType::kFloat32);
  CHECK(t.autocast == DType::kBFloat16);
}

TEST_CASE("torchtitan: models from flavors, derived flavors and asset paths") {
  // A fork's flavor derived from a known one: the same architecture, with a warning.
  LoadedConfig c = load_toml("[model]\nname = \"deepseek_v3\"\nflavor = \"kimi_k2_llep\"\n[training]\nseq_len = 1024\n");
  CHECK(c.inputs.model_name == "moonshotai/Kimi-K2-Instruct");
  bool warned = false;
  for (const auto& w : c.inputs.warnings) warned = warned || w.find("read as 'kimi_k2'") != std::string::npos;
  CHECK(warned);
  // An unknown flavor: the checkpoint folder after assets/hf.
  c = load_toml("[model]\nname = \"qwen3\"\nflavor = \"custom\"\nhf_assets_path = \"./assets/hf/Qwen3-8B/\"\n");
  CHECK(c.inputs.model_name == "Qwen3-8B");
  // A checkpoint directory given as the flavor (the llama3_hf experiment): its last folder.
  c = load_toml("[model]\nname = \"llama3_hf\"\nflavor = \"/data/models/Meta-Llama-3.1-8B/\"\n");
  CHECK(c.inputs.model_name == "Meta-Llama-3.1-8B");
  // A tokenizer file names no model: the flavor is reported instead.
  c = load_toml("[model]\nname = \"llama3\"\nflavor = \"debugmodel\"\ntokenizer_path = \"./tests/assets/tokenizer\"\n");
  CHECK(c.inputs.model_name.empty());
  CHECK(c.inputs.model_hint.find("debugmodel") != std::string::npos);
}

TEST_CASE("torchtitan: --apply may rewrite the batch and the sequence, never global_batch_size") {
  const LoadedConfig c = load_toml(
      "[model]\nname = \"llama3\"\nflavor = \"8B\"\n"
      "[training]\nlocal_batch_size = 4\nseq_len = 8192\nglobal_batch_size = 64\n");
  int checked = 0;
  for (const ValueSite& s : c.sites) {
    if (s.knob == Knob::kBatch || s.knob == Knob::kSeqLen) {
      CHECK(s.present);  // training.local_batch_size, training.seq_len: in place
      ++checked;
    }
    if (s.knob == Knob::kGradAccum) {
      // Not global_batch_size (which holds a global batch, not an accumulation), and no new key.
      CHECK_FALSE(s.present);
      CHECK(s.no_insert_reason.find("global_batch_size") != std::string::npos);
      ++checked;
    }
  }
  CHECK(checked == 3);
}

TEST_CASE("torchtitan: the accumulation from global_batch_size, where the data-parallel degree is known") {
  // train.py: global_batch_size / (local_batch_size x dp degree) = 128 / (4 x 2 x 8) = 2.
  const std::string head = "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nlocal_batch_size = 4\n";
  LoadedConfig c = load_toml(head + "global_batch_size = 128\n[parallelism]\ndata_parallel_replicate_degree = 2\n"
                                    "data_parallel_shard_degree = 8\n");
  CHECK(c.inputs.config.grad_accum == 2);
  // Not a multiple: torchtitan refuses it; memplan warns at the line and plans without accumulation.
  c = load_toml(head + "global_batch_size = 100\n[parallelism]\ndata_parallel_shard_degree = 8\n");
  CHECK(c.inputs.config.grad_accum == 1);
  CHECK(std::count(c.inputs.warnings.begin(), c.inputs.warnings.end(),
                   "job.toml:6: training.global_batch_size = 100 is not a multiple of micro-batch 4 x data-parallel 8 "
                   "(8 GPU(s) / tensor x pipeline x context 1); memplan estimates 1 micro-batch(es) per step") == 1);
  // The shard degree left at -1 (every GPU the other degrees leave): the GPU count is the launch's.
  // On the one GPU memplan assumes, 128 / 4 = 32; on the 8 that --num-gpus gives, 128 / (4 x 8) = 4.
  c = load_toml(head + "global_batch_size = 128\n");
  CHECK(c.inputs.config.grad_accum == 32);
  c.inputs.config.parallel.num_gpus = 8;
  apply_global_batch(c.inputs);
  CHECK(c.inputs.config.grad_accum == 4);
}

TEST_CASE("torchtitan and Automodel: a parallelism degree out of range is an error at its line") {
  MemoryFileSystem fs;
  fs.files["job.toml"] = "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[parallelism]\ntensor_parallel_degree = 0\n";
  fs.files["recipe.yaml"] =
      "model:\n  pretrained_model_name_or_path: meta-llama/Llama-3.1-8B\nstep_scheduler:\n  local_batch_size: 1\n"
      "distributed:\n  tp_size: 70000\n";
  ConfigRequest req;
  req.files = {"job.toml"};
  auto r = load_config(req, fs);
  REQUIRE_FALSE(r);
  CHECK(r.error().to_string() == "job.toml:5: parallelism.tensor_parallel_degree = 0 is out of range (1 to 65536)");
  req.files = {"recipe.yaml"};
  r = load_config(req, fs);
  REQUIRE_FALSE(r);
  CHECK(r.error().to_string() == "recipe.yaml:6: distributed.tp_size = 70000 is out of range (1 to 65536)");
}

TEST_CASE("torchtitan: tensor parallelism brings sequence and loss parallelism; the reshard policy follows the pipeline") {
  // TP 2 x PP 2 over FSDP2: torchtitan's tensor-parallel plan runs the norms SequenceParallel and
  // keeps the logits sharded; the "default" reshard policy keeps layers gathered under a pipeline.
  LoadedConfig c = load_toml(
      "[model]\nname = \"qwen3\"\nflavor = \"30B-A3B\"\n"
      "[parallelism]\ndata_parallel_shard_degree = 2\ntensor_parallel_degree = 2\npipeline_parallel_degree = 2\n"
      "expert_parallel_degree = 2\n");
  const ParallelConfig* p = &c.inputs.config.parallel;
  CHECK(p->sequence_parallel);
  CHECK(p->loss_parallel);
  CHECK_FALSE(p->fsdp_reshard_after_forward);
  CHECK(p->expert_tensor_parallel == 1);  // torchtitan's default with expert parallelism
  CHECK(c.inputs.origins.at("fsdp_reshard_after_forward").kind == OriginKind::kDerived);

  // disable_loss_parallel, an explicit policy, and expert_tensor_parallel_degree = tp.
  c = load_toml(
      "[model]\nname = \"qwen3\"\nflavor = \"30B-A3B\"\n"
      "[parallelism]\ndata_parallel_shard_degree = 2\ntensor_parallel_degree = 2\npipeline_parallel_degree = 2\n"
      "expert_parallel_degree = 2\nexpert_tensor_parallel_degree = 2\ndisable_loss_parallel = true\n"
      "fsdp_reshard_after_forward = \"always\"\n");
  p = &c.inputs.config.parallel;
  CHECK(p->sequence_parallel);
  CHECK_FALSE(p->loss_parallel);
  CHECK(p->fsdp_reshard_after_forward);
  CHECK(p->expert_tensor_parallel == 2);
  CHECK(c.inputs.origins.at("loss_parallel").to_string() == "job.toml:10");

  // No pipeline: "default" reshards; "never" does not; an unknown word is warned and read as default.
  c = load_toml("[model]\nname = \"llama3\"\nflavor = \"8B\"\n[parallelism]\ndata_parallel_shard_degree = 8\n");
  CHECK(c.inputs.config.parallel.fsdp_reshard_after_forward);
  CHECK_FALSE(c.inputs.config.parallel.sequence_parallel);
  CHECK_FALSE(c.inputs.config.parallel.loss_parallel);
  c = load_toml("[model]\nname = \"llama3\"\nflavor = \"8B\"\n[parallelism]\nfsdp_reshard_after_forward = \"never\"\n");
  CHECK_FALSE(c.inputs.config.parallel.fsdp_reshard_after_forward);
  c = load_toml("[model]\nname = \"llama3\"\nflavor = \"8B\"\n[parallelism]\nfsdp_reshard_after_forward = \"sometimes\"\n");
  CHECK(c.inputs.config.parallel.fsdp_reshard_after_forward);
  CHECK(std::count(c.inputs.warnings.begin(), c.inputs.warnings.end(),
                   "job.toml:5: fsdp_reshard_after_forward 'sometimes' is not a torchtitan policy (default, always, "
                   "never); read as default") == 1);
}

TEST_CASE("torchtitan: selective checkpointing every N layers and per-op selective are read") {
  // docs/formulas.md#every-n-checkpointing: selective_ac_option N (a string in torchtitan's TOML,
  // int() of it in _apply_ac_to_transformer_block) checkpoints every N-th block, non-reentrant.
  LoadedConfig c = load_toml(
      "[model]\nname = \"llama3\"\nflavor = \"8B\"\n"
      "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"2\"\n");
  CHECK(c.inputs.config.gradient_checkpointing);
  CHECK(c.inputs.config.checkpoint_every == 2);
  CHECK(c.inputs.config.checkpoint_reentrant == false);
  c = load_toml(
      "[model]\nname = \"llama3\"\nflavor = \"8B\"\n"
      "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"op\"\n");
  // docs/formulas.md#per-op-selective-checkpointing: every block wrapped with the per-op policy,
  // non-reentrant; no warning any more; the option's line is the policy's origin.
  CHECK(c.inputs.config.gradient_checkpointing);
  CHECK(c.inputs.config.checkpoint_reentrant == false);
  CHECK(c.inputs.config.checkpoint_every == 1);
  CHECK(c.inputs.config.checkpoint_policy == TrainingConfig::CheckpointPolicy::kOp);
  CHECK(c.inputs.origins.at("checkpoint_policy").to_string() == "job.toml:6");
  CHECK(std::none_of(c.inputs.warnings.begin(), c.inputs.warnings.end(),
                     [](const std::string& w) { return w.find("selective") != std::string::npos; }));
  // selective_ac_option absent: torchtitan's default is op; the origin is the mode's line.
  c = load_toml("[model]\nname = \"llama3\"\nflavor = \"8B\"\n[activation_checkpoint]\nmode = \"selective\"\n");
  CHECK(c.inputs.config.checkpoint_policy == TrainingConfig::CheckpointPolicy::kOp);
  CHECK(c.inputs.origins.at("checkpoint_policy").to_string() == "job.toml:5");
  // mode = "full" keeps the full policy.
  c = load_toml("[model]\nname = \"llama3\"\nflavor = \"8B\"\n[activation_checkpoint]\nmode = \"full\"\n");
  CHECK(c.inputs.config.checkpoint_policy == TrainingConfig::CheckpointPolicy::kFull);
  MemoryFileSystem fs;
  fs.files["job.toml"] =
      "[model]\nname = \"llama3\"\nflavor = \"8B\"\n"
      "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"zero\"\n";
  ConfigRequest req;
  req.files = {"job.toml"};
  auto r = load_config(req, fs);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message == "selective_ac_option 'zero' is neither 'op' nor a positive layer count");
}

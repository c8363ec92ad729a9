// torchtitan job configs (torchtitan/models/*/train_configs/*.toml, read by io/toml.cpp): the
// model by name and flavor, training.local_batch_size per data-parallel rank, parallelism.*_degree,
// activation_checkpoint.mode. torchtitan shards with FSDP2 and a MixedPrecisionPolicy (fp32
// parameters gathered and computed in mixed_precision_param). docs/configs.md#torchtitan.
#include <fmt/format.h>

#include <string>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

// torchtitan's model flavors whose architecture is a catalog model's (torchtitan/models/*/__init__.py).
struct Flavor {
  const char* name;
  const char* flavor;
  const char* model;
};
constexpr Flavor kFlavors[] = {
    {"llama3", "1b", "meta-llama/Llama-3.2-1B"},        {"llama3", "3b", "meta-llama/Llama-3.2-3B"},
    {"llama3", "8b", "meta-llama/Llama-3.1-8B"},        {"llama3", "70b", "meta-llama/Llama-3.1-70B"},
    {"llama3", "405b", "meta-llama/Llama-3.1-405B"},    {"deepseek_v3", "16b", "deepseek-ai/DeepSeek-V2-Lite"},
    {"deepseek_v3", "236b", "deepseek-ai/DeepSeek-V2"}, {"deepseek_v3", "671b", "deepseek-ai/DeepSeek-V3"},
    {"qwen3", "0.6b", "Qwen/Qwen3-0.6B"},               {"qwen3", "1.7b", "Qwen/Qwen3-1.7B"},
    {"qwen3", "4b", "Qwen/Qwen3-4B"},                   {"qwen3", "8b", "Qwen/Qwen3-8B"},
    {"qwen3", "14b", "Qwen/Qwen3-14B"},                 {"qwen3", "32b", "Qwen/Qwen3-32B"},
    {"qwen3", "30b-a3b", "Qwen/Qwen3-30B-A3B"},         {"qwen3", "235b-a22b", "Qwen/Qwen3-235B-A22B"},
    {"deepseek_v3", "kimi_k2", "moonshotai/Kimi-K2-Instruct"},
    {"llama2", "7b", "meta-llama/Llama-2-7b-hf"},       {"llama2", "13b", "meta-llama/Llama-2-13b-hf"},
    {"llama2", "70b", "meta-llama/Llama-2-70b-hf"},
};

// The last folder of a path with at least one '/' (/data/models/Meta-Llama-3.1-8B/ ->
// Meta-Llama-3.1-8B), or "" for a name without one.
std::string last_folder(std::string path) {
  if (path.find('/') == std::string::npos) return {};
  while (!path.empty() && path.back() == '/') path.pop_back();
  return path.substr(path.find_last_of('/') + 1);
}

// The model a checkpoint or tokenizer path names: the folder after torchtitan's `hf` or
// `tokenizer` asset folder (./assets/hf/Llama-3.1-8B, ./assets/tokenizer/Llama-3.1-8B/); none
// for a tokenizer file (./assets/tokenizer/original/tokenizer.model) or any other path.
std::string model_in_path(const std::string& path) {
  std::vector<std::string> parts;
  std::string cur;
  for (const char ch : path + "/") {
    if (ch == '/' || ch == '\\') {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string folder = to_lower(parts[i]);
    if (folder != "hf" && folder != "tokenizer") continue;
    const std::string next = to_lower(parts[i + 1]);
    if (next == "original" || next.ends_with(".model") || next.ends_with(".json") || next.ends_with(".tiktoken"))
      return {};
    return parts[i + 1];
  }
  return {};
}

}  // namespace

Status map_torchtitan(Mapper& m) {
  TrainingConfig& c = m.config();
  // The model: name + flavor when torchtitan's flavor is a catalog architecture, else the
  // checkpoint directory's name (hf_assets_path: ./assets/hf/Llama-3.1-8B).
  {
    MEMPLAN_TRY(auto name, m.text("model.name"));
    MEMPLAN_TRY(auto flavor, m.text("model.flavor"));
    std::string assets_key = "model.hf_assets_path";
    if (m.node(assets_key) == nullptr) assets_key = "model.tokenizer_path";  // before hf_assets_path
    MEMPLAN_TRY(auto assets, m.text(assets_key));
    const std::string in_path = assets ? model_in_path(trim(*assets)) : std::string();
    // A flavor a fork derives from a known one (30B-A3B-deepep, kimi_k2_llep: the same
    // architecture with other kernels or routing) is read as that one, with a warning.
    std::string id, base;
    if (name && flavor) {
      const std::string n = to_lower(*name), fl = to_lower(*flavor);
      for (const auto& f : kFlavors) {
        if (n != f.name) continue;
        const std::string known = f.flavor;
        if (fl == known) {
          id = f.model;
          base.clear();
          break;
        }
        if (fl.size() > known.size() && fl.starts_with(known) && (fl[known.size()] == '-' || fl[known.size()] == '_') &&
            known.size() > base.size()) {
          id = f.model;
          base = known;
        }
      }
    }
    if (!id.empty()) {
      m.out().inputs.model_name = id;
      m.from_file("model", *m.node("model.flavor"), fmt::format("model.name {} + model.flavor {}", *name, *flavor));
      if (!base.empty())
        m.warn_at(*m.node("model.flavor"), fmt::format("torchtitan flavor '{}' is read as '{}' ({}): its architecture "
                                                       "is assumed unchanged",
                                                       *flavor, base, id));
    } else if (name && name->find('/') != std::string::npos &&
               to_lower(flavor.value_or("")).find("debug") == std::string::npos) {
      // The transformers backend names a Hugging Face model (`flavor` picks its size: `full`).
      m.out().inputs.model_name = trim(*name);
      m.from_file("model", *m.node("model.name"), "model.name");
    } else if (const std::string dir = flavor ? last_folder(trim(*flavor)) : std::string(); !dir.empty()) {
      // A checkpoint directory given as the flavor (llama3_hf: /data/models/Meta-Llama-3.1-8B).
      m.out().inputs.model_name = dir;
      m.from_file("model", *m.node("model.flavor"), "model.flavor (a checkpoint directory)");
    } else if (!in_path.empty()) {
      m.out().inputs.model_name = in_path;
      m.from_file("model", *m.node(assets_key), assets_key);
    } else if (const YamlNode* n = m.node("model.flavor"); n != nullptr) {
      m.out().inputs.model_hint =
          fmt::format("{}: torchtitan flavor '{}' of '{}' is not a catalog model; give --model ID|PATH (or "
                      "--hidden-size, --num-hidden-layers, ...)",
                      m.where_text(*n), flavor.value_or(""), name.value_or(""));
    }
    MEMPLAN_TRY(auto converters, m.list("model.converters"));
    if (converters && !converters->empty())
      m.warn_at(*m.node("model.converters"),
                fmt::format("model.converters {} (float8 / MX training) are not modelled; estimated in "
                            "mixed_precision_param",
                            fmt::join(*converters, ", ")));
  }

  // The batch: local_batch_size (batch_size before 2025) sequences per data-parallel rank.
  std::string batch_key = "training.local_batch_size";
  if (m.node(batch_key) == nullptr && m.node("training.batch_size") != nullptr) batch_key = "training.batch_size";
  MEMPLAN_IO_CHECK(m.read_or(batch_key, "batch", c.micro_batch, 8, batch_key + " not set: torchtitan's default 8"));
  // --apply: the batch and the sequence are rewritten in place. The accumulation is never written:
  // torchtitan derives it from training.global_batch_size (a number memplan must not overwrite
  // with an accumulation), so its site is a key torchtitan does not have, refused with a reason.
  m.site(Knob::kBatch, batch_key, "", "torchtitan's TOML has no place memplan writes a new key to");
  MEMPLAN_IO_CHECK(m.read_or("training.seq_len", "seq_len", c.seq_len, 2048, "training.seq_len not set: 2048"));
  m.site(Knob::kSeqLen, "training.seq_len", "", "torchtitan's TOML has no place memplan writes a new key to");
  m.site(Knob::kGradAccum, "training.gradient_accumulation_steps", "",
         "torchtitan derives the accumulation from training.global_batch_size; set it there");
  const YamlNode* global_node = m.node("training.global_batch_size");
  std::int64_t global = -1;
  if (global_node != nullptr) {
    MEMPLAN_TRY(auto g, m.integer("training.global_batch_size", -1));
    global = g.value_or(-1);
  }

  // Parallelism: FSDP2 over the data-parallel shard ranks (-1: every GPU the other degrees leave),
  // HSDP with replicate degree > 1, tensor / pipeline / context / expert degrees.
  // Before the [parallelism] table (2025) the degrees were under [training] and, for pipeline and
  // context parallelism, [experimental]; data_parallel_degree was the shard degree.
  const auto where = [&](const std::string& name) {
    std::string key;
    m.first_of({"parallelism." + name, "training." + name, "experimental." + name}, &key);
    return key.empty() ? "parallelism." + name : key;
  };
  const auto degree = [&](const std::string& key, const char* input, int& out) {
    return m.read_degree(key, input, out, /*min=*/-1);
  };
  auto& par = c.parallel;
  MEMPLAN_IO_CHECK(degree(where("tensor_parallel_degree"), "tensor_parallel", par.tensor_parallel));
  MEMPLAN_IO_CHECK(degree(where("pipeline_parallel_degree"), "pipeline_parallel", par.pipeline_parallel));
  MEMPLAN_IO_CHECK(degree(where("context_parallel_degree"), "context_parallel", par.context_parallel));
  MEMPLAN_IO_CHECK(degree(where("expert_parallel_degree"), "expert_parallel", par.expert_parallel));
  int shard = -1, replicate = 1;
  std::string shard_key = where("data_parallel_shard_degree");
  if (m.node(shard_key) == nullptr && m.node(where("data_parallel_degree")) != nullptr) shard_key = where("data_parallel_degree");
  MEMPLAN_TRY(bool shard_given, degree(shard_key, "data_parallel_shard", shard));
  const std::string replicate_key = where("data_parallel_replicate_degree");
  MEMPLAN_IO_CHECK(degree(replicate_key, "dp_replicate", replicate));
  if (shard_given) {
    // An explicit shard degree fixes the GPU count: replicate x shard x tp x pp x cp.
    const std::int64_t world = static_cast<std::int64_t>(replicate) * shard * par.model_parallel_size();
    if (world > 1 && world <= 65536) {
      const bool one_node = world <= 8 || world % 8 != 0;
      par.num_gpus = static_cast<int>(one_node ? std::min<std::int64_t>(world, 1024) : 8);
      par.nodes = static_cast<int>(one_node ? 1 : world / 8);
      m.derived("num_gpus", "data_parallel_replicate x shard x tensor x pipeline x context degrees");
    }
  }
  // torchforge's SFT app (apps/sft_v2) launches the torchtitan trainer as `processes: {procs: 8,
  // with_gpus: true}`: one rank per GPU. A shard degree of -1 then shards over all of them.
  if (const YamlNode* procs = m.node("processes.procs"); procs != nullptr && (!shard_given || shard < 1)) {
    MEMPLAN_TRY(auto gpus, m.boolean("processes.with_gpus"));
    if (gpus.value_or(false)) {
      int n = 1;
      MEMPLAN_IO_CHECK(m.read("processes.procs", "num_gpus", n));
      par.num_gpus = n;
    }
  }
  // FSDP2 whenever more than one rank shards (torchtitan's parallelize_*: fully_shard), with its
  // MixedPrecisionPolicy: fp32 parameters gathered in mixed_precision_param.
  if (!shard_given || shard > 1) {
    par.sharding = replicate > 1 ? ShardingStrategy::kFsdpHybridShard : ShardingStrategy::kFsdpFullShard;
    if (replicate > 1) par.dp_replicate = replicate;
    par.fsdp_version = 2;
    m.derived("fsdp_version", "torchtitan shards with FSDP2 (fully_shard)");
    const YamlNode* at = m.node(shard_key);
    if (at != nullptr) {
      m.from_file("sharding", *at, shard_key + " (FSDP2)");
    } else {
      m.from_default("sharding", "parallelism.data_parallel_shard_degree not set: -1, FSDP2 over every data-parallel GPU");
    }
  }
  // The accumulation torchtitan derives (train.py): global_batch_size / (local_batch_size x
  // data-parallel degree), which it requires to divide: derived once the GPU count is known
  // (ResolvedInputs::global_batch; the shard degree -1 leaves it to the launch: --num-gpus).
  // Under pipeline parallelism memplan's accumulation counts the pipeline micro-batches instead
  // (below).
  if (global > 0 && par.pipeline_parallel <= 1)
    m.out().inputs.global_batch = ResolvedInputs::GlobalBatch{global, "training.global_batch_size", m.where(*global_node), {}};
  if (replicate > 1 && par.sharding == ShardingStrategy::kNone) {
    m.warn_at(*m.node(replicate_key),
              "data_parallel_replicate_degree without sharding is DDP: the replicas hold whole copies");
    par.dp_replicate = 0;
  }
  // torchtitan's tensor-parallel plans (parallelize_llama, _qwen3, _deepseekv3) run the norms
  // SequenceParallel, shard the embedding over the vocabulary, and keep the output layer's logits
  // sharded for loss_parallel() unless disable_loss_parallel (docs/formulas.md#loss-parallel).
  if (par.tensor_parallel > 1) {
    par.sequence_parallel = true;
    m.derived("sequence_parallel", "torchtitan's tensor parallelism runs the norms SequenceParallel");
    const std::string key = where("disable_loss_parallel");
    MEMPLAN_TRY(auto off, m.boolean(key));
    par.loss_parallel = !off.value_or(false);
    if (off) {
      m.from_file("loss_parallel", *m.node(key), key);
    } else {
      m.from_default("loss_parallel", key + " not set: false, loss parallelism with tensor parallelism");
    }
  }
  // Routed experts split expert_tensor_parallel_degree ways (1, its default, or the tensor degree)
  // when there is expert parallelism; without it they follow the tensor degree.
  if (par.expert_parallel > 1 && par.tensor_parallel > 1) {
    const std::string key = where("expert_tensor_parallel_degree");
    par.expert_tensor_parallel = 1;
    MEMPLAN_TRY(bool etp_given, m.read_degree(key, "expert_tensor_parallel", par.expert_tensor_parallel, /*min=*/1));
    if (!etp_given) m.from_default("expert_tensor_parallel", key + " not set: 1, experts not split by tensor parallelism");
  }
  // FSDP2's reshard_after_forward policy: "default" keeps the layers gathered under pipeline
  // parallelism (torchtitan's get_fsdp_reshard_after_forward_policy), "always" / "never".
  if (par.sharding != ShardingStrategy::kNone) {
    const std::string key = where("fsdp_reshard_after_forward");
    MEMPLAN_TRY(auto policy, m.text(key));
    const std::string pol = to_lower(trim(policy.value_or("default")));
    if (pol == "always" || pol == "never") {
      par.fsdp_reshard_after_forward = pol == "always";
      m.from_file("fsdp_reshard_after_forward", *m.node(key), key);
    } else {
      if (pol != "default")
        m.warn_at(*m.node(key), fmt::format("fsdp_reshard_after_forward '{}' is not a torchtitan policy (default, "
                                            "always, never); read as default",
                                            *policy));
      par.fsdp_reshard_after_forward = par.pipeline_parallel <= 1;
      if (par.pipeline_parallel > 1)
        m.derived("fsdp_reshard_after_forward", "torchtitan's default policy under pipeline parallelism: the layers "
                                                "stay gathered until their last backward");
    }
  }
  {
    DType param = DType::kBFloat16;
    MEMPLAN_TRY(bool given, m.read_dtype("training.mixed_precision_param", "torch_dtype", param));
    if (param == DType::kFloat32) {
      c.torch_dtype = DType::kFloat32;
    } else if (par.sharding != ShardingStrategy::kNone) {
      c.torch_dtype = param;
      par.fsdp_mixed_precision = true;
      if (!given) m.from_default("torch_dtype", "training.mixed_precision_param not set: bfloat16");
      m.derived("fsdp_mixed_precision", "torchtitan's FSDP2 MixedPrecisionPolicy: fp32 parameters, "
                                        "gathered and computed in mixed_precision_param");
    } else {
      // One GPU: fp32 parameters under torch.autocast (torchtitan's maybe_enable_amp).
      c.torch_dtype = DType::kFloat32;
      c.autocast = param;
      m.derived("autocast", "a single GPU: torch.autocast in mixed_precision_param");
    }
  }
  if (par.pipeline_parallel > 1) {
    const std::string sched_key = where("pipeline_parallel_schedule");
    MEMPLAN_TRY(auto sched, m.text(sched_key));
    const std::string s = to_lower(sched.value_or("1F1B"));
    if (auto k = parse_pp_schedule(s); k) {
      par.pp_schedule = *k;
    } else {
      // torchtitan's other multi-stage schedules (LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble,
      // DualPipeV) place several stages per rank too.
      par.pp_schedule = PipelineSchedule::kInterleaved1F1B;
      m.warn_at(*m.node(sched_key),
                fmt::format("pipeline schedule '{}' is not modelled; estimated as interleaved 1F1B", *sched));
    }
    if (sched) m.from_file("pp_schedule", *m.node(sched_key), sched_key);
    MEMPLAN_IO_CHECK(m.read(where("pipeline_parallel_layers_per_stage"), "pp_layers_per_stage", par.pp_layers_per_stage));
    if (par.pp_layers_per_stage == 0 && par.pp_schedule == PipelineSchedule::kInterleaved1F1B) par.virtual_stages = 2;
    // local_batch_size sequences per step in pipeline micro-batches of microbatch_size (default 1).
    std::int64_t pmb = 1;
    MEMPLAN_TRY(bool pmb_given, m.read(where("pipeline_parallel_microbatch_size"), "batch", pmb));
    // Older configs gave the number of pipeline micro-batches instead.
    std::int64_t count = 0;
    MEMPLAN_TRY(bool count_given, m.read(where("pipeline_parallel_microbatches"), "grad_accum", count));
    if (!pmb_given && count_given && count >= 1 && c.micro_batch % count == 0) {
      pmb = c.micro_batch / count;
      pmb_given = true;
    }
    if (pmb >= 1 && c.micro_batch % pmb == 0) {
      c.grad_accum = c.micro_batch / pmb;
      c.micro_batch = pmb;
      // memplan's batch is now the pipeline micro-batch: local_batch_size is not it.
      std::erase_if(m.out().sites, [](const ValueSite& v) { return v.knob == Knob::kBatch; });
      m.site(Knob::kBatch, "parallelism.pipeline_micro_batch", "",
             "with pipeline parallelism the batch memplan plans is the pipeline micro-batch (local_batch_size / "
             "pipeline_parallel_microbatch_size); set those two by hand");
      m.derived("grad_accum", "local_batch_size / pipeline_parallel_microbatch_size (pipeline micro-batches)");
      if (!pmb_given) m.derived("batch", "pipeline_parallel_microbatch_size not set: 1");
    }
  }
  // Activation checkpointing: full is every layer; selective with selective_ac_option N every
  // N-th layer (docs/formulas.md#every-n-checkpointing); selective per-op checkpoints every layer
  // keeping the outputs of its policy's ops (docs/formulas.md#per-op-selective-checkpointing).
  MEMPLAN_TRY(auto ac, m.text("activation_checkpoint.mode"));
  if (ac) {
    const std::string mode = to_lower(*ac);
    const YamlNode& n = *m.node("activation_checkpoint.mode");
    if (mode == "full") {
      c.gradient_checkpointing = true;
      c.checkpoint_reentrant = false;  // torchtitan's checkpoint_wrapper: non-reentrant
      m.from_file("gradient_checkpointing", n, "activation_checkpoint.mode");
    } else if (mode == "selective") {
      // torchtitan's _apply_ac_to_transformer_block: selective_ac_option "op" (its default) or an
      // integer N, the wrapper counting blocks from 1 and wrapping every N-th.
      MEMPLAN_TRY(auto opt, m.text("activation_checkpoint.selective_ac_option"));
      const std::string o = to_lower(opt.value_or("op"));
      const YamlNode& at = opt ? *m.node("activation_checkpoint.selective_ac_option") : n;
      if (o == "op") {
        c.gradient_checkpointing = true;
        c.checkpoint_reentrant = false;  // ptd_checkpoint_wrapper with context_fn: non-reentrant
        c.checkpoint_policy = TrainingConfig::CheckpointPolicy::kOp;
        m.from_file("gradient_checkpointing", n, "activation_checkpoint.mode");
        m.from_file("checkpoint_policy", at, opt ? "activation_checkpoint.selective_ac_option" : "activation_checkpoint.mode");
      } else {
        auto every = parse_int(o, "activation_checkpoint.selective_ac_option");
        if (!every || *every < 1)
          return m.error_at(at, ErrorCode::kInvalidConfig,
                            fmt::format("selective_ac_option '{}' is neither 'op' nor a positive layer count", o),
                            "write selective_ac_option: op, or an integer N to checkpoint every N-th layer");
        c.gradient_checkpointing = true;
        c.checkpoint_reentrant = false;  // ptd_checkpoint_wrapper: non-reentrant
        c.checkpoint_every = static_cast<int>(*every);
        m.from_file("gradient_checkpointing", n, "activation_checkpoint.mode");
        m.from_file("checkpoint_every", at, "activation_checkpoint.selective_ac_option");
      }
    }
  }
  // FSDP2's CPUOffloadPolicy: parameters, gradients and optimizer states in CPU memory.
  MEMPLAN_TRY(auto offload, m.boolean("training.enable_cpu_offload"));
  if (offload.value_or(false) && par.sharding != ShardingStrategy::kNone) {
    par.offload_params = par.offload_optimizer = true;
    m.from_file("offload_params", *m.node("training.enable_cpu_offload"), "training.enable_cpu_offload");
    m.from_file("offload_optimizer", *m.node("training.enable_cpu_offload"), "training.enable_cpu_offload");
  }
  MEMPLAN_TRY(auto opt, m.text("optimizer.name"));
  if (opt) {
    const std::string o = to_lower(*opt);
    const YamlNode& n = *m.node("optimizer.name");
    MEMPLAN_TRY(auto impl, m.text("optimizer.implementation"));
    const bool fused = impl.value_or("fused") == "fused";
    if (o == "adamw" || o == "adam") {
      c.optim.kind = fused ? OptimizerKind::kAdamWTorchFused : OptimizerKind::kAdamWTorch;
    } else {
      c.optim.kind = OptimizerKind::kAdamWTorchFused;
      m.warn_at(n, fmt::format("optimizer '{}' is not modelled; estimated as AdamW (two fp32 states)", *opt));
    }
    m.from_file("optim", n, "optimizer.name");
  }
  MEMPLAN_TRY(auto compile, m.boolean("compile.enable"));
  if (compile.value_or(false))
    m.warn_at(*m.node("compile.enable"), "torch.compile is not modelled; its fused kernels may keep fewer activations");
  m.check_unknown("", {}, /*strict=*/false);
  return Ok{};
}

}  // namespace memplan::io

#include "core/sharding.hpp"

#include <algorithm>

namespace memplan {

using sim::Cat;
using sim::CatVec;
using sim::Poly;

namespace {

Poly& at(ShardedCats& v, Cat c) { return v[sharded_index(c)]; }

// Ceil-divides every coefficient: a shard is rounded up, never down. (Most coefficients are
// zero: they skip the division, the costliest instruction of a plan's sharding loop.)
Poly shard(const Poly& p, int n) {
  Poly r;
  for (int i = 0; i < sim::kNumMono; ++i) {
    const std::int64_t v = p.c[static_cast<std::size_t>(i)];
    if (v != 0) r.c[static_cast<std::size_t>(i)] = v > 0 ? (v + n - 1) / n : v / n;
  }
  return r;
}

// A shard of parameter-proportional state: the routed experts' share over the expert
// data-parallel group, the rest over the data-parallel group.
Poly shard(const ShardPlan& p, const Poly& x, int n, bool trainable = true) {
  const std::int64_t share = trainable ? p.expert_trainable_share_per_mille : p.expert_share_per_mille;
  if (share <= 0 || p.expert_shard_over == n) return shard(x, n);
  Poly experts;
  for (int i = 0; i < sim::kNumMono; ++i) {
    const std::int64_t v = x.c[static_cast<std::size_t>(i)];
    if (v != 0) experts.c[static_cast<std::size_t>(i)] = v / 1000 * share + v % 1000 * share / 1000;
  }
  const int ne = n == p.shard_over ? p.expert_shard_over : n;
  return shard(x - experts, n) + shard(experts, ne);
}

// docs/formulas.md#deepspeed-buffers. The buffers are in DeepSpeed's 16-bit dtype (the model is
// cast to bf16/fp16 when either is enabled), fp32 otherwise; "auto" sizes as transformers fills
// them in (integrations/deepspeed.py: h^2, 0.9 h^2 for ZeRO-3's prefetch).
void set_zero_buffers(ShardPlan& p, const ModelSpec& m, const TrainingConfig& c) {
  const ZeroConfig& z = c.parallel.zero;
  const std::int64_t esize =
      c.autocast || c.torch_dtype == DType::kBFloat16 || c.torch_dtype == DType::kFloat16 ? 2 : 4;
  const std::int64_t h = m.hidden_size;
  const std::int64_t reduce = z.reduce_bucket_auto ? h * h : z.reduce_bucket_size;
  const bool overlap = z.overlap_comm.value_or(p.zero_stage == 3);
  // ZeRO-1/2: backward() allocates ipg_buffer[0] (and [1] with overlap_comm) when
  // contiguous_gradients (forced on by CPU offload); ZeRO-3 allocates one at initialization.
  const bool contiguous = z.contiguous_gradients || (p.zero_stage <= 2 && c.parallel.offload_optimizer);
  if (contiguous) p.ipg_bucket_bytes = reduce * esize * (p.zero_stage <= 2 && overlap ? 2 : 1);
  if (p.zero_stage == 3) {
    p.zero3_grad_partition = true;
    const std::int64_t prefetch = z.prefetch_bucket_auto ? h * h * 9 / 10 : z.prefetch_bucket_size;
    p.prefetch_bytes = prefetch * esize;
    p.max_live_bytes = z.max_live_parameters * esize;
  }
}

}  // namespace

ShardPlan make_shard_plan(const ModelSpec& m, const TrainingConfig& c, std::int64_t trainable_params,
                          std::int64_t trainable_bytes, std::int64_t layer_param_bytes) {
  ShardPlan p;
  const auto& par = c.parallel;
  p.dp = std::max(1, par.data_parallel_size());
  // Context-parallel ranks hold the same parameters: ZeRO/FSDP shard over dp x cp (Megatron's
  // data-parallel-with-context group, torchtitan's dp_shard_cp mesh).
  p.shard_over = p.dp * std::max(1, par.context_parallel);
  p.trainable_params = trainable_params;
  p.trainable_bytes = trainable_bytes;
  p.layer_param_bytes = layer_param_bytes;
  p.offload_optimizer = par.offload_optimizer;
  p.offload_params = par.offload_params;
  switch (par.sharding) {
    // Gradients all-reduced over dp x cp: by DistributedDataParallel from buckets of its own, or by
    // Megatron's DDP from the contiguous main_grad buffer itself (no second copy).
    case ShardingStrategy::kNone: p.ddp = p.shard_over > 1 && !par.megatron_core; break;
    case ShardingStrategy::kZero1:
    case ShardingStrategy::kZero2:
    case ShardingStrategy::kZero3:
      p.deepspeed = true;
      p.zero_stage = par.sharding == ShardingStrategy::kZero1 ? 1 : par.sharding == ShardingStrategy::kZero2 ? 2 : 3;
      p.shard_optim = true;
      p.shard_grads = p.zero_stage >= 2;
      p.shard_params = p.zero_stage == 3;
      set_zero_buffers(p, m, c);
      break;
    case ShardingStrategy::kFsdpFullShard:
    case ShardingStrategy::kFsdpHybridShard:
      p.fsdp = p.shard_params = p.shard_grads = p.shard_optim = true;
      // HSDP: shards within a node (the node's GPUs outside tensor/pipeline groups), replicas across.
      if (par.sharding == ShardingStrategy::kFsdpHybridShard)
        p.shard_over = par.dp_replicate > 0
                           ? std::max(1, p.shard_over / par.dp_replicate)
                           : std::max(1, par.num_gpus / std::max(1, par.tensor_parallel * par.pipeline_parallel));
      break;
    case ShardingStrategy::kFsdpShardGradOp:
      // Parameters are sharded at rest too: SHARD_GRAD_OP frees the unsharded ones in the
      // post-backward that syncs gradients (torch _should_free_in_backward), so the optimizer
      // steps on shards; until then every layer stays gathered (keep_gathered below).
      p.fsdp = p.shard_params = p.shard_grads = p.shard_optim = true;
      break;
    case ShardingStrategy::kFsdpNoShard:
      // docs/formulas.md#fsdp-no-shard: nothing sharded (FlatParamHandle.uses_sharded_strategy is
      // false: no all-gather, no reshard); _reduce_grad_no_shard all-reduces the FlatParameter's
      // .grad in place, so unlike DistributedDataParallel there is no bucket copy of the gradients.
      p.fsdp = true;
      break;
  }
  p.keep_gathered = par.sharding == ShardingStrategy::kFsdpShardGradOp ||
                    (p.fsdp && p.shard_params && par.fsdp_version == 2 && !par.fsdp_reshard_after_forward);
  // The expert data-parallel group: tp x cp x dp / (ep x etp) (dp x cp / ep when etp = tp).
  p.expert_shard_over = std::max<int>(1, static_cast<int>(static_cast<std::int64_t>(p.shard_over) * std::max(1, par.tensor_parallel) /
                                                          (static_cast<std::int64_t>(std::max(1, par.expert_parallel)) *
                                                           par.expert_tensor_parallel_size())));
  p.megatron = par.megatron_core;
  // Megatron's Float16OptimizerWithFloat16Params (16-bit parameters without the distributed
  // optimizer) keeps fp32 main parameters too, whole on every rank.
  p.fp32_master = p.deepspeed || (p.fsdp && par.fsdp_mixed_precision) ||
                  (p.megatron && c.torch_dtype != DType::kFloat32);
  return p;
}

ModelSpec tensor_parallel_rank(const ModelSpec& m, int t, bool vocab_parallel, int expert_t) {
  if (expert_t <= 0) expert_t = t;
  if (t <= 1 && expert_t <= 1) return m;
  ModelSpec r = m;
  // Megatron / HF tp_plan: q/k/v and gate/up column-parallel, o/down row-parallel: each rank
  // holds heads/t and intermediate/t; norms, embeddings and the gathered logits stay whole.
  r.num_heads = std::max(1, m.num_heads / t);
  r.num_kv_heads = std::max(1, m.num_kv_heads / t);
  r.intermediate_size = std::max<std::int64_t>(1, m.intermediate_size / t);
  // Routed experts split expert_t ways (Megatron-Core's expert_tensor_parallel_size).
  if (m.moe.enabled()) r.moe.expert_intermediate_size = std::max<std::int64_t>(1, m.moe.expert_intermediate_size / expert_t);
  // Megatron-Core: VocabParallelEmbedding, a column-parallel output layer and the vocab-parallel
  // cross-entropy hold V / t rows and logits per rank (the vocabulary padded to a multiple of t).
  if (vocab_parallel) r.vocab_size = (m.vocab_size + t - 1) / t;
  return r;
}

Poly sharded_gradients(const ShardPlan& p, const Poly& grads, bool unsharded) {
  // FSDP's CPUOffload(offload_params=True) / FSDP2's CPUOffloadPolicy moves each reduced gradient
  // shard to the CPU in the post-backward hook, where the optimizer steps on it: no gradient, the
  // LoRA adapters' included, stays on the GPU (docs/formulas.md#fsdp-cpu-offload).
  if (p.fsdp && p.offload_params && !unsharded) return Poly{};
  return p.shard_grads && !unsharded ? shard(p, grads, p.shard_over) : grads;
}

CatVec apply_sharding(const ShardPlan& p, CatVec v, bool optimizer_step, int gathered_layers, bool backward) {
  ShardedCats s;
  for (std::size_t j = 0; j < s.size(); ++j) s[j] = v[static_cast<std::size_t>(kShardedCats[j])];
  s = apply_sharding(p, s, optimizer_step, gathered_layers, backward);
  for (std::size_t j = 0; j < s.size(); ++j) v[static_cast<std::size_t>(kShardedCats[j])] = s[j];
  return v;
}

ShardedCats apply_sharding(const ShardPlan& p, ShardedCats v, bool optimizer_step, int gathered_layers,
                           bool backward) {
  const int n = p.shard_over;
  if (p.shard_params) {
    // Parameters live as 1/n shards; the layers being computed are gathered whole (in backward
    // the current one and one prefetched: FSDP's BACKWARD_PRE, ZeRO-3's prefetch bucket). After
    // backward every unit is resharded: the optimizer step sees shards only.
    for (Cat c : {Cat::kWeights, Cat::kAdapterWeights, Cat::kReference}) {
      Poly& x = at(v, c);
      if (c == Cat::kWeights && p.fsdp && !p.offload_params) {
        const Poly q = Poly::constant(p.quant_state_bytes);
        x = shard(p, x - q, n, false) + q;
      } else {
        x = p.offload_params ? Poly{} : shard(p, x, n, false);
      }
    }
    if (!optimizer_step && p.zero_stage == 3) {
      // docs/formulas.md#deepspeed-buffers: the layer being computed and the parameters the
      // PartitionedParameterCoordinator fetched ahead of it (prefetch bucket, at most a layer's
      // worth, which the next module needs), all capped by max_live_parameters.
      const std::int64_t live = p.layer_param_bytes + std::min(p.prefetch_bytes, p.layer_param_bytes);
      if (gathered_layers > 0)
        at(v, Cat::kGathered) += Poly::constant(std::min(live, std::max(p.max_live_bytes, p.layer_param_bytes)));
    } else if (!optimizer_step) {
      at(v, Cat::kGathered) +=
          Poly::constant(p.keep_gathered ? p.kept_gathered_bytes : gathered_layers * p.layer_param_bytes);
      // FSDP's _post_forward_reshard keeps the root unit (embeddings, final norm, lm_head)
      // unsharded from its forward until the end of backward.
      if (p.fsdp && !p.offload_params)
        at(v, Cat::kGathered) += Poly::constant(p.root_param_bytes - (p.root_param_bytes + n - 1) / n);
    }
  } else if (p.deepspeed) {
    // ZeRO-0/1/2 keep a full 16-bit replica of the model (and of a DPO/GRPO reference).
  }
  // ZeRO-3's grad_partitions_flat_buffer: every trainable parameter's 16-bit gradient partition,
  // zeroed at initialization and kept (on the CPU with optimizer offload, as pinned memory).
  if (p.zero3_grad_partition)
    at(v, Cat::kGradients) = p.offload_optimizer ? sharded_gradients(p, at(v, Cat::kGradients), false)
                                                 : shard(p, Poly::constant(p.trainable_bytes), n);
  else if (p.shard_grads)
    at(v, Cat::kGradients) = sharded_gradients(p, at(v, Cat::kGradients), false);
  if (p.ddp) {
    // DistributedDataParallel's gradient buckets (gradient_as_bucket_view=False): a second copy
    // of every trainable gradient, allocated when DDP wraps the model.
    at(v, Cat::kBuckets) += Poly::constant(p.trainable_bytes);
  }
  // The optimizer's own states and temporaries first: the fp32 partition below is already a
  // shard (sharding it again counted 4 Psi / N^2).
  if (p.shard_optim) {
    at(v, Cat::kOptimizerStates) = p.offload_optimizer ? Poly{} : shard(p, at(v, Cat::kOptimizerStates), n);
    at(v, Cat::kOptimizerTemps) = p.offload_optimizer ? Poly{} : shard(p, at(v, Cat::kOptimizerTemps), n);
  }
  // The fp32 master copy of the trainable parameters, sharded (on the CPU with offload). Under
  // FSDP's MixedPrecisionPolicy the fp32 parameters are themselves the shards and the gradients
  // are reduced in fp32: memplan counts 16-bit shards plus this copy and 16-bit gradients, the
  // same bytes once backward has reduced every gradient and never fewer before
  // (docs/formulas.md#fsdp-mixed-precision).
  if (p.fp32_master && !p.offload_optimizer)
    at(v, Cat::kMasterWeights) +=
        p.shard_optim ? shard(p, Poly::constant(p.trainable_params * 4), n) : Poly::constant(p.trainable_params * 4);
  if (p.deepspeed) {
    if (p.zero_stage == 3 || backward) at(v, Cat::kBuckets) += Poly::constant(p.ipg_bucket_bytes);
    // ZeRO-1/2 upcast the gradient partition to fp32 for the step.
    if (optimizer_step && !p.offload_optimizer && p.zero_stage <= 2 && !p.megatron)
      at(v, Cat::kOptimizerTemps) += shard(p, Poly::constant(p.trainable_params * 4), n);
  }
  return v;
}

Placement placement_of(const ShardPlan& p, const std::string& c) {
  const bool multi = p.dp > 1;
  if (!multi) return Placement::kPerDevice;
  if (c == "weights" || c == "adapter_weights" || c == "reference_model")
    return p.shard_params ? (p.offload_params ? Placement::kOffloaded : Placement::kSharded) : Placement::kReplicated;
  if (c == "gradients") return p.shard_grads ? Placement::kSharded : Placement::kReplicated;
  if (c == "optimizer_states" || c == "optimizer_temporaries" || c == "master_weights")
    return p.offload_optimizer ? Placement::kOffloaded : (p.shard_optim ? Placement::kSharded : Placement::kReplicated);
  if (c == "communication_buckets" || c == "gathered_parameters") return Placement::kReplicated;
  return Placement::kPerDevice;
}

}  // namespace memplan

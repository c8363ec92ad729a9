// Multi-GPU memory per GPU (docs/formulas.md#multi-gpu): what DDP, DeepSpeed ZeRO-1/2/3, FSDP,
// CPU offload and tensor parallelism change in each category of a single-GPU timeline.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/sim/graph.hpp"
#include "memplan/estimate.hpp"
#include "memplan/model.hpp"
#include "memplan/training.hpp"

namespace memplan {

struct ShardPlan {
  int dp = 1;                  // data-parallel degree (world / tensor-parallel)
  int shard_over = 1;          // GPUs a sharded state is split over (hybrid_shard: one node)
  bool deepspeed = false;
  int zero_stage = 0;          // 0 when not DeepSpeed
  bool fsdp = false;
  bool shard_params = false;   // ZeRO-3, FSDP full/hybrid shard
  bool shard_grads = false;    // ZeRO-2/3, FSDP
  bool shard_optim = false;    // ZeRO-1/2/3, FSDP
  bool ddp = false;            // plain data parallel with a full replica
  bool offload_optimizer = false;
  bool offload_params = false;
  std::int64_t trainable_bytes = 0;  // bytes of trainable parameters in their dtype (full model)
  std::int64_t trainable_params = 0;
  std::int64_t layer_param_bytes = 0;  // one decoder layer's parameters, for the gathered working set
  // Parameters outside the decoder layers (embeddings, final norm, lm_head): FSDP's root unit,
  // which FULL_SHARD does not reshard after the forward (docs/formulas.md#fsdp-and-lora).
  std::int64_t root_param_bytes = 0;
  // FSDP1 SHARD_GRAD_OP and FSDP2 reshard_after_forward=False (docs/formulas.md#reshard-after-forward):
  // a layer stays unsharded from its forward until the backward that syncs gradients, so every
  // decoder layer of the stage is gathered outside the optimizer step. keep_gathered says so;
  // kept_gathered_bytes is what those layers hold unsharded (set with the stage's parameters).
  bool keep_gathered = false;
  std::int64_t kept_gathered_bytes = 0;
  // bitsandbytes quant state (absmax, nested absmax, code tables) of every 4-bit weight: not a
  // parameter, so FSDP neither flattens nor shards it; each GPU keeps all of it.
  std::int64_t quant_state_bytes = 0;
  // DeepSpeed's buffers (docs/formulas.md#deepspeed-buffers), bytes. ZeRO-1/2: the ipg buffers
  // (reduce_bucket_size elements, two with overlap_comm) live from engine.backward() to the ipg
  // epilogue, in backward only. ZeRO-3: one ipg buffer from initialization on, the 16-bit gradient
  // partition (zero3_grad_partition) over the whole step, and in forward and backward the current
  // layer plus what the prefetch bucket fetches ahead, at most max_live_bytes in all.
  std::int64_t ipg_bucket_bytes = 0;
  bool zero3_grad_partition = false;
  std::int64_t prefetch_bytes = 0;
  std::int64_t max_live_bytes = 0;
  // Expert parallelism (docs/formulas.md#expert-parallelism): the routed experts' share of the
  // parameters (per mille) is sharded over the expert data-parallel group, shard_over / ep.
  std::int64_t expert_share_per_mille = 0;            // of all parameter bytes (weights)
  std::int64_t expert_trainable_share_per_mille = 0;  // of trainable bytes (gradients, optimizer)
  int expert_shard_over = 1;
  // Megatron-Core's distributed optimizer steps on its fp32 gradient buffer: no upcast copy.
  bool megatron = false;
  // An fp32 copy of the trainable parameters, sharded, that the optimizer steps on: DeepSpeed's
  // master partition, and FSDP's MixedPrecisionPolicy (fp32 sharded parameters gathered in 16 bits).
  bool fp32_master = false;
};

// FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD or NO_SHARD: one of PyTorch FSDP's sharding strategies.
inline bool fsdp_family(ShardingStrategy s) {
  return s == ShardingStrategy::kFsdpFullShard || s == ShardingStrategy::kFsdpShardGradOp ||
         s == ShardingStrategy::kFsdpHybridShard || s == ShardingStrategy::kFsdpNoShard;
}

// DeepSpeed ZeRO-1, -2 or -3.
inline bool zero_family(ShardingStrategy s) {
  return s == ShardingStrategy::kZero1 || s == ShardingStrategy::kZero2 || s == ShardingStrategy::kZero3;
}

ShardPlan make_shard_plan(const ModelSpec& m, const TrainingConfig& c, std::int64_t trainable_params,
                          std::int64_t trainable_bytes, std::int64_t layer_param_bytes);

// The model as one tensor-parallel rank sees it (heads and MLP width divided by t; with
// `vocab_parallel`, Megatron's, the vocabulary too).
ModelSpec tensor_parallel_rank(const ModelSpec& m, int t, bool vocab_parallel = false, int expert_t = 0);

// The categories apply_sharding() changes, each on its own; it leaves the others as they are.
inline constexpr sim::Cat kShardedCats[] = {
    sim::Cat::kWeights,   sim::Cat::kAdapterWeights,  sim::Cat::kReference,      sim::Cat::kGradients, sim::Cat::kOptimizerStates,
    sim::Cat::kOptimizerTemps, sim::Cat::kMasterWeights, sim::Cat::kBuckets, sim::Cat::kGathered};
// Those categories of an event, in kShardedCats' order.
using ShardedCats = std::array<sim::Poly, std::size(kShardedCats)>;
// Where category c (one of kShardedCats) is in a ShardedCats.
constexpr std::size_t sharded_index(sim::Cat c) {
  for (std::size_t i = 0; i < std::size(kShardedCats); ++i)
    if (kShardedCats[i] == c) return i;
  throw std::logic_error("not a sharded category");
}

// Applies the plan to one timeline event (categories in, categories out). `optimizer_step`
// marks the optimizer-step event, which holds DeepSpeed's fp32 gradient partition and no
// gathered parameters; `gathered_layers` is how many decoder layers' full parameters are live at
// that event under ZeRO-3/FSDP (one in forward, the current one and the prefetched one in
// backward, none at the loss).
// `backward`: the event is in the backward pass (from the loss's backward to the embedding's),
// where DeepSpeed ZeRO-1/2 hold their ipg buffers.
sim::CatVec apply_sharding(const ShardPlan& p, sim::CatVec v, bool optimizer_step, int gathered_layers = 2,
                           bool backward = false);
// The same on the sharded categories alone.
ShardedCats apply_sharding(const ShardPlan& p, ShardedCats v, bool optimizer_step, int gathered_layers = 2,
                           bool backward = false);

// Every trainable parameter's gradient (`grads`, whole) as one GPU holds it: sharded under
// ZeRO-2/3 and FSDP, whole under DDP/ZeRO-1 or when `unsharded` (FSDP's no_sync).
sim::Poly sharded_gradients(const ShardPlan& p, const sim::Poly& grads, bool unsharded);

// Whether a component is replicated on every GPU, sharded, or offloaded.
Placement placement_of(const ShardPlan& p, const std::string& component);

}  // namespace memplan

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/sharding.hpp"
#include "memplan/engine.hpp"
#include "support/invariants.hpp"
#include "support/models.hpp"

using namespace memplan;
using memplan::testing::component;
using memplan::testing::require_consistent;

namespace {

// A Llama-shaped model of about `params` parameters (hidden 4096): per layer 202,383,360.
ModelSpec model_of(double params) {
  ModelSpec m = memplan::testing::llama31_8b();
  m.vocab_size = 32000;
  m.num_kv_heads = 32;
  m.intermediate_size = 11008;
  m.num_layers = static_cast<int>((params - 2.0 * 32000 * 4096) / 202'383'360.0 + 0.5);
  return m;
}

// Model states per parameter at the optimizer step: what the ZeRO paper's Table I counts.
double model_state_bytes_per_param(const ModelSpec& m, ShardingStrategy s, int gpus) {
  TrainingConfig c;
  c.torch_dtype = DType::kFloat32;
  c.autocast = DType::kFloat16;
  c.micro_batch = 1;
  c.seq_len = 16;
  c.parallel.num_gpus = gpus;
  c.parallel.sharding = s;
  c.optim.kind = OptimizerKind::kAdamWTorchFused;  // DeepSpeed's fused Adam: no step temporaries
  auto est = Estimator::create(m, c);
  REQUIRE(est.has_value());
  auto e = est->at_phase(1, 16, Phase::kOptimizerStep);
  REQUIRE(e.has_value());
  require_consistent(*e);
  const std::int64_t states = component(*e, "weights") + component(*e, "gradients") +
                              component(*e, "master_weights") + component(*e, "optimizer_states");
  return static_cast<double>(states) / static_cast<double>(e->params.total);
}

}  // namespace

TEST_CASE("ZeRO paper per-GPU model states, read from tests/data/published") {
  // The paper's mixed-precision Adam (K = 12): 16 B/param replicated; 4 + 12/N, 2 + 14/N, 16/N.
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(MEMPLAN_SOURCE_DIR "/tests/data/published")) {
    if (entry.path().filename().string().rfind("zero-paper-", 0) != 0) continue;
    std::ifstream in(entry.path());
    const auto j = nlohmann::json::parse(in);
    const std::string sh = j["sharding"];
    if (sh != "zero1" && sh != "zero2" && sh != "zero3" && sh != "none" && sh != "ddp") continue;
    const int gpus = j["num_gpus"];
    if (gpus > 1024 || j["params"].get<double>() > 1e11) continue;  // a hidden-4096 stand-in cannot reach 1T
    const double published = j["per_gpu_gb"].get<double>() * 1e9 / j["params"].get<double>();
    // "none": the paper's data-parallel baseline (here fp32 weights under autocast: 4 + 4 + 8).
    const ShardingStrategy s = sh == "zero1"   ? ShardingStrategy::kZero1
                               : sh == "zero2" ? ShardingStrategy::kZero2
                               : sh == "zero3" ? ShardingStrategy::kZero3
                                               : ShardingStrategy::kNone;
    INFO(entry.path().filename().string());
    // The paper rounds to three digits; the model's 2-layer gathered working set is not a
    // model state and is excluded above.
    CHECK(model_state_bytes_per_param(model_of(j["params"].get<double>()), s, gpus) == Approx(published).epsilon(0.02));
    ++checked;
  }
  CHECK(checked >= 5);
}

TEST_CASE("shard plan placements and offload") {
  TrainingConfig c;
  c.parallel.num_gpus = 8;
  c.parallel.sharding = ShardingStrategy::kZero3;
  c.parallel.offload_optimizer = true;
  const ShardPlan p = make_shard_plan(memplan::testing::llama31_8b(), c, 100, 200, 10);
  CHECK(placement_of(p, "weights") == Placement::kSharded);
  CHECK(placement_of(p, "optimizer_states") == Placement::kOffloaded);
  CHECK(placement_of(p, "activations") == Placement::kPerDevice);
  c.parallel.sharding = ShardingStrategy::kNone;
  const ShardPlan ddp = make_shard_plan(memplan::testing::llama31_8b(), c, 100, 200, 10);
  CHECK(ddp.ddp);
  CHECK(placement_of(ddp, "weights") == Placement::kReplicated);
}

TEST_CASE("DDP adds a gradient bucket copy; ZeRO-3 shards the weights over the GPUs") {
  const ModelSpec m = memplan::testing::llama31_8b();
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.micro_batch = 1;
  c.seq_len = 256;
  c.parallel.num_gpus = 4;
  auto ddp = Estimator::create(m, c)->at_phase(1, 256, Phase::kOptimizerStep);
  REQUIRE(ddp.has_value());
  require_consistent(*ddp);
  CHECK(component(*ddp, "communication_buckets") == 8'030'261'248LL * 2);
  c.parallel.sharding = ShardingStrategy::kZero3;
  c.autocast = DType::kBFloat16;
  auto z3 = Estimator::create(m, c)->at_phase(1, 256, Phase::kOptimizerStep);
  REQUIRE(z3.has_value());
  CHECK(component(*z3, "weights") == (8'030'261'248LL * 2 + 3) / 4);
  CHECK(component(*z3, "master_weights") == 8'030'261'248LL);  // 4 bytes / 4 GPUs
}

TEST_CASE("FSDP NO_SHARD keeps everything whole like DDP but without its gradient buckets") {
  // docs/formulas.md#fsdp-no-shard: torch's _reduce_grad_no_shard all-reduces flat_param.grad in
  // place, so per GPU NO_SHARD = DDP - the bucket copy. Llama-3.1-8B in bf16 on 4 GPUs, full
  // fine-tuning: every parameter trainable, 8,030,261,248 x 2 bytes of gradients in each.
  const ModelSpec m = memplan::testing::llama31_8b();
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.micro_batch = 1;
  c.seq_len = 256;
  c.parallel.num_gpus = 4;
  auto ddp = Estimator::create(m, c)->at_phase(1, 256, Phase::kOptimizerStep);
  c.parallel.sharding = ShardingStrategy::kFsdpNoShard;
  const ShardPlan p = make_shard_plan(m, c, 100, 200, 10);
  CHECK(p.fsdp);
  CHECK_FALSE(p.ddp);
  CHECK_FALSE(p.shard_params);
  CHECK_FALSE(p.shard_grads);
  CHECK_FALSE(p.shard_optim);
  CHECK(placement_of(p, "weights") == Placement::kReplicated);
  CHECK(placement_of(p, "gradients") == Placement::kReplicated);
  auto ns = Estimator::create(m, c)->at_phase(1, 256, Phase::kOptimizerStep);
  REQUIRE(ddp.has_value());
  REQUIRE(ns.has_value());
  require_consistent(*ns);
  CHECK(component(*ns, "communication_buckets") == 0);
  CHECK(component(*ns, "weights") == component(*ddp, "weights"));
  CHECK(component(*ns, "gradients") == component(*ddp, "gradients"));
  CHECK(component(*ns, "optimizer_states") == component(*ddp, "optimizer_states"));
  CHECK(ddp->peak.count() - ns->peak.count() == 8'030'261'248LL * 2);
  // FSDP2 has no NO_SHARD.
  c.parallel.fsdp_version = 2;
  auto v2 = Estimator::create(m, c);
  REQUIRE_FALSE(v2.has_value());
  CHECK(v2.error().message == "FSDP2 (fully_shard) has no NO_SHARD strategy");
  CHECK(parse_fsdp("no_shard").value() == ShardingStrategy::kFsdpNoShard);
  CHECK(to_string(ShardingStrategy::kFsdpNoShard) == "fsdp_no_shard");
}

TEST_CASE("tensor parallelism divides heads and MLP width per rank") {
  const ModelSpec r = tensor_parallel_rank(memplan::testing::llama31_8b(), 4);
  CHECK(r.num_heads == 8);
  CHECK(r.num_kv_heads == 2);
  CHECK(r.intermediate_size == 3584);
  CHECK(r.hidden_size == 4096);
}

TEST_CASE("ZeRO-1/2 hold the fp32 gradient partition, 4 bytes per parameter / N, at the step") {
  // DeepSpeed's stage 1/2 optimizer upcasts its gradient partition to fp32 before stepping.
  // With fused Adam (no temporaries of its own) the step's temporaries are exactly that
  // partition: 4 Psi / N, each GPU's shard once (not divided again with the optimizer's own).
  const ModelSpec m = memplan::testing::toy_llama(4);
  TrainingConfig c;
  c.torch_dtype = DType::kFloat32;
  c.autocast = DType::kBFloat16;
  c.micro_batch = 1;
  c.seq_len = 16;
  c.parallel.num_gpus = 8;
  c.parallel.sharding = ShardingStrategy::kZero2;
  c.optim.kind = OptimizerKind::kAdamWTorchFused;
  auto est = Estimator::create(m, c);
  REQUIRE(est);
  auto e = est->at_phase(1, 16, Phase::kOptimizerStep);
  REQUIRE(e);
  require_consistent(*e);
  const std::int64_t psi = e->params.trainable;
  CHECK(component(*e, "optimizer_temporaries") == (psi * 4 + 7) / 8);
}

TEST_CASE("HSDP shards over one node by default, or over the ranks of a replica group") {
  // 2 nodes x 8 GPUs. hybrid_shard: each node a replica, states / 8; --dp-replicate 4: four
  // replicas of 4 GPUs, states / 4; 16 replicas: a full copy on every GPU.
  const ModelSpec m = memplan::testing::toy_llama(4);
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.micro_batch = 1;
  c.seq_len = 16;
  auto one = estimate(m, c);
  REQUIRE(one);
  const std::int64_t states = component(*one, "optimizer_states");
  c.parallel.num_gpus = 8;
  c.parallel.nodes = 2;
  c.parallel.sharding = ShardingStrategy::kFsdpHybridShard;
  for (const auto& [replicas, shard] : std::vector<std::pair<int, int>>{{0, 8}, {2, 8}, {4, 4}, {16, 1}}) {
    INFO("dp_replicate " << replicas);
    c.parallel.dp_replicate = replicas;
    auto e = estimate(m, c);
    REQUIRE(e);
    require_consistent(*e);
    CHECK(component(*e, "optimizer_states") == (states + shard - 1) / shard);
  }
  c.parallel.dp_replicate = 3;  // does not divide 16 data-parallel ranks
  CHECK_FALSE(estimate(m, c));
  c.parallel.dp_replicate = 2;
  c.parallel.sharding = ShardingStrategy::kFsdpFullShard;  // replicas need HSDP
  CHECK_FALSE(estimate(m, c));
}

// FSDP's MixedPrecisionPolicy as torchtitan uses it (fp32 sharded parameters, gradients and
// states; layers gathered and computed in bf16): against plain bf16 FSDP, an fp32 master copy of
// every trainable parameter, sharded (4 bytes / 8 GPUs), and AdamW's two states in fp32 instead
// of bf16 (8 bytes / 8 GPUs instead of 4 / 8). Nothing else changes.
TEST_CASE("FSDP mixed precision adds the fp32 shards: 4 bytes of master copy and 4 more of states per parameter") {
  const ModelSpec m = memplan::testing::toy_llama(4);
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.seq_len = 64;
  c.parallel.num_gpus = 8;
  c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  c.parallel.fsdp_version = 2;
  c.optim.kind = OptimizerKind::kAdamWTorchFused;
  auto plain = estimate(m, c);
  c.parallel.fsdp_mixed_precision = true;
  auto mixed = estimate(m, c);
  REQUIRE(plain);
  REQUIRE(mixed);
  require_consistent(*mixed);
  const std::int64_t n = mixed->params.trainable;
  // Fused AdamW also keeps an fp32 step count per parameter tensor: the embedding, 4 layers of
  // 7 Linears and 2 norms, the final norm and lm_head.
  const std::int64_t steps = (1 + 4 * 9 + 1 + 1) * 4;
  CHECK(component(*plain, "master_weights") == 0);
  CHECK(component(*mixed, "master_weights") == (n * 4 + 7) / 8);
  CHECK(component(*plain, "optimizer_states") == (n * 4 + steps + 7) / 8);
  CHECK(component(*mixed, "optimizer_states") == (n * 8 + steps + 7) / 8);
  CHECK(mixed->peak - plain->peak ==
        Bytes::of((n * 4 + 7) / 8 + (n * 8 + steps + 7) / 8 - (n * 4 + steps + 7) / 8));
  // Only with FSDP, and only on a 16-bit model (with or without autocast: accelerate's upcast
  // runs under the Trainer's autocast, docs/formulas.md#accelerate-fsdp-upcast).
  const std::string no_fsdp =
      "fsdp-mixed-precision is FSDP's MixedPrecisionPolicy: it needs --fsdp; add --fsdp full_shard (torchtitan shards "
      "fully), or drop --fsdp-mixed-precision";
  const std::string no_16bit =
      "fsdp-mixed-precision keeps fp32 shards of a 16-bit model: --torch-dtype must be bfloat16 or float16; use "
      "--torch-dtype bfloat16";
  c.parallel.sharding = ShardingStrategy::kZero3;
  auto e = estimate(m, c);
  REQUIRE_FALSE(e);
  CHECK(e.error().to_string() == no_fsdp);
  c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  c.torch_dtype = DType::kFloat32;
  e = estimate(m, c);
  REQUIRE_FALSE(e);
  CHECK(e.error().to_string() == no_16bit);
  c.torch_dtype = DType::kBFloat16;
  c.autocast = DType::kBFloat16;
  auto with_autocast = estimate(m, c);
  REQUIRE(with_autocast);
  CHECK(component(*with_autocast, "master_weights") == (n * 4 + 7) / 8);
  CHECK(component(*with_autocast, "optimizer_states") == (n * 8 + steps + 7) / 8);
}

// toy_llama's decoder layer: q, o (256 x 256), k, v (256 x 128), gate, up, down (256 x 688) and
// two norms, 725,504 parameters; 1,451,008 bytes in bf16.
constexpr std::int64_t kToyLayerParams = 725'504;
constexpr std::int64_t kToyLayerBytes = kToyLayerParams * 2;

// docs/formulas.md#reshard-after-forward. toy_llama(4) in bf16 on 8 GPUs. SHARD_GRAD_OP (FSDP1) and FSDP2 without reshard_after_forward keep
// all four layers and the root unit unsharded outside the optimizer step, and only shards at it.
TEST_CASE("SHARD_GRAD_OP and reshard_after_forward=False: every layer gathered until the step, shards at it") {
  const ModelSpec m = memplan::testing::toy_llama(4);
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.micro_batch = 2;
  c.seq_len = 64;
  c.parallel.num_gpus = 8;
  c.optim.kind = OptimizerKind::kAdamWTorchFused;
  const auto check = [&](const TrainingConfig& cfg) {
    auto est = Estimator::create(m, cfg);
    REQUIRE(est);
    auto step = est->at_phase(2, 64, Phase::kOptimizerStep);
    REQUIRE(step);
    require_consistent(*step);
    const std::int64_t total = step->params.total;
    const std::int64_t root = (total - 4 * kToyLayerParams) * 2;  // embedding, final norm, lm_head
    CHECK(component(*step, "weights") == (total * 2 + 7) / 8);
    CHECK(component(*step, "gathered_parameters") == 0);
    for (const Phase ph : {Phase::kForward, Phase::kBackward}) {
      auto e = est->at_phase(2, 64, ph);
      REQUIRE(e);
      require_consistent(*e);
      CHECK(component(*e, "weights") == (total * 2 + 7) / 8);
      CHECK(component(*e, "gathered_parameters") == 4 * kToyLayerBytes + root - (root + 7) / 8);
    }
  };
  SECTION("FSDP1 shard_grad_op") {
    c.parallel.sharding = ShardingStrategy::kFsdpShardGradOp;
    check(c);
  }
  SECTION("FSDP2 full_shard, reshard_after_forward false") {
    c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
    c.parallel.fsdp_version = 2;
    c.parallel.fsdp_reshard_after_forward = false;
    check(c);
  }
  SECTION("FSDP1 ignores the FSDP2 option: the same as FULL_SHARD") {
    c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
    auto full = estimate(m, c);
    c.parallel.fsdp_reshard_after_forward = false;
    auto ignored = estimate(m, c);
    REQUIRE(full);
    REQUIRE(ignored);
    CHECK(ignored->peak == full->peak);
    CHECK(component(*ignored, "gathered_parameters") == component(*full, "gathered_parameters"));
  }
}

// Under a pipeline, torchtitan's default policy: each GPU keeps its own stage's layers gathered.
// 8 layers on 2 stages over 4 GPUs (2 data-parallel ranks): 4 layers, and the stage's part of the
// root unit (stage 0 the embedding, stage 1 the final norm and lm_head) less its half shard.
TEST_CASE("reshard_after_forward=False under a pipeline keeps the stage's layers gathered") {
  const ModelSpec m = memplan::testing::toy_llama(8);
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.micro_batch = 1;
  c.seq_len = 64;
  c.grad_accum = 4;
  c.parallel.num_gpus = 4;
  c.parallel.pipeline_parallel = 2;
  c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  c.parallel.fsdp_version = 2;
  c.parallel.fsdp_reshard_after_forward = false;
  auto est = Estimator::create(m, c);
  REQUIRE(est);
  auto bwd = est->at_phase(1, 64, Phase::kBackward);
  REQUIRE(bwd);
  require_consistent(*bwd);
  const std::int64_t root = bwd->pipeline_rank == 0 ? 8000LL * 256 * 2 : (8000LL * 256 + 256) * 2;
  CHECK(component(*bwd, "gathered_parameters") == 4 * kToyLayerBytes + root - (root + 1) / 2);
}

TEST_CASE("ZeRO-1/2/3 keep the fp32 master partition on one GPU too: 4 bytes x trainable / dp") {
  // DeepSpeed's ZeRO optimizer (bf16 parameters) steps on an fp32 copy of its partition of the
  // trainable parameters; with dp = 1 the partition is the whole model (issue #30: one GPU
  // showed none of it, two GPUs half). Full fine-tuning: every parameter is trainable, so the
  // count is the model's own (count_parameters, checked against published totals in test_model).
  const ModelSpec m = memplan::testing::toy_llama(4);
  const std::int64_t psi = count_parameters(m).total;
  for (const ShardingStrategy s : {ShardingStrategy::kZero1, ShardingStrategy::kZero2, ShardingStrategy::kZero3}) {
    for (const int gpus : {1, 2}) {
      TrainingConfig c;
      c.torch_dtype = DType::kBFloat16;
      c.autocast = DType::kBFloat16;
      c.micro_batch = 1;
      c.seq_len = 16;
      c.parallel.num_gpus = gpus;
      c.parallel.sharding = s;
      auto est = Estimator::create(m, c);
      REQUIRE(est);
      auto e = est->at_phase(1, 16, Phase::kOptimizerStep);
      REQUIRE(e);
      require_consistent(*e);
      INFO("stage " << static_cast<int>(s) << ", " << gpus << " GPU(s)");
      CHECK(e->params.trainable == psi);
      CHECK(component(*e, "master_weights") == (4 * psi + gpus - 1) / gpus);
    }
  }
}

namespace {

// One estimate of toy_llama(4) in bf16 under DeepSpeed ZeRO `s` on one GPU, at `phase`.
Estimate zero_at(ShardingStrategy s, Phase phase, const ZeroConfig& z, int gpus = 1) {
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.autocast = DType::kBFloat16;
  c.micro_batch = 1;
  c.seq_len = 16;
  c.parallel.num_gpus = gpus;
  c.parallel.sharding = s;
  c.parallel.zero = z;
  auto est = Estimator::create(memplan::testing::toy_llama(4), c);
  REQUIRE(est);
  auto e = est->at_phase(1, 16, phase);
  REQUIRE(e);
  require_consistent(*e);
  return *e;
}

}  // namespace

TEST_CASE("ZeRO-1/2's ipg buffers: reduce_bucket_size 16-bit elements in backward, two with overlap_comm") {
  // stage_1_and_2.py backward(): ipg_buffer[0] = torch.empty(reduce_bucket_size) in the 16-bit
  // dtype when contiguous_gradients, ipg_buffer[1] too with overlap_comm; freed at the epilogue.
  ZeroConfig z;  // DeepSpeed's defaults: 5e8 elements, contiguous, no overlap below stage 3
  for (const ShardingStrategy s : {ShardingStrategy::kZero1, ShardingStrategy::kZero2}) {
    CHECK(component(zero_at(s, Phase::kBackward, z), "communication_buckets") == 500'000'000LL * 2);
    CHECK(component(zero_at(s, Phase::kForward, z), "communication_buckets") == 0);
    CHECK(component(zero_at(s, Phase::kOptimizerStep, z), "communication_buckets") == 0);
  }
  z.overlap_comm = true;
  CHECK(component(zero_at(ShardingStrategy::kZero2, Phase::kBackward, z), "communication_buckets") ==
        2 * 500'000'000LL * 2);
  z.contiguous_gradients = false;
  CHECK(component(zero_at(ShardingStrategy::kZero2, Phase::kBackward, z), "communication_buckets") == 0);
  // transformers' "auto": hidden_size^2 elements (toy_llama: hidden 256 -> 65,536 x 2 B x 2 buffers).
  z.contiguous_gradients = true;
  z.reduce_bucket_auto = true;
  CHECK(memplan::testing::toy_llama(4).hidden_size == 256);
  CHECK(component(zero_at(ShardingStrategy::kZero2, Phase::kBackward, z), "communication_buckets") ==
        256 * 256 * 2 * 2);
}

TEST_CASE("ZeRO-3: one ipg buffer and the whole 16-bit gradient partition from the start of the step") {
  // stage3.py __init__: __ipg_bucket_flat_buffer (reduce_bucket_size elements, one) and
  // grad_partitions_flat_buffer (every trainable parameter's partition, zeroed) before any forward.
  const ZeroConfig z;
  const std::int64_t psi = count_parameters(memplan::testing::toy_llama(4)).total;
  for (const int gpus : {1, 2}) {
    const Estimate f = zero_at(ShardingStrategy::kZero3, Phase::kForward, z, gpus);
    CHECK(component(f, "communication_buckets") == 500'000'000LL * 2);
    CHECK(component(f, "gradients") == (2 * psi + gpus - 1) / gpus);
  }
}

TEST_CASE("FSDP with CPU parameter offload keeps no gradient on the GPU, the LoRA adapters' neither") {
  // torch/distributed/fsdp/_runtime_utils.py _offload_grad: with offload_params each reduced
  // gradient shard is copied to flat_param._cpu_grad, where the optimizer steps (issue #30: the
  // adapters' gradients stayed on the GPU, +9 %).
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.micro_batch = 1;
  c.seq_len = 16;
  c.parallel.num_gpus = 2;
  c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  c.parallel.offload_params = c.parallel.offload_optimizer = true;
  c.lora.enabled = true;
  c.lora.r = 8;
  auto est = Estimator::create(memplan::testing::toy_llama(4), c);
  REQUIRE(est);
  for (const Phase ph : {Phase::kBackward, Phase::kOptimizerStep}) {
    auto e = est->at_phase(1, 16, ph);
    REQUIRE(e);
    require_consistent(*e);
    CHECK(component(*e, "gradients") == 0);
    CHECK(component(*e, "optimizer_states") == 0);
  }
}

// docs/formulas.md#allocator-streams. FSDP1 all-gathers on its unshard stream and reduce-scatters
// on its post-backward stream, whose pools serve no activation. toy_llama(4), bf16, full fine-tune
// on 8 GPUs: the root unit (embedding and lm_head 8000 x 256 each, the final norm: 8,192,512 B)
// and a layer unit (1,451,008 B) are 1-10 MiB requests, so the unshard stream's blocks come from
// one 20 MiB segment (get_allocation_size), which holds at most the root and two layers in use
// (11,094,528 B) at any moment; the sharded gradients (a layer's 1,451,008 / 8 = 181,376 B, four
// layers 725,504 B) share one 2 MiB small-pool segment. Reserved never shrinks, so the replay's
// reserved peak is at least the default stream's at the allocated peak plus both segments: the
// reserve above the peak is at least 20 MiB - 11,094,528 + 2 MiB - 725,504 = 11,248,640 B (what
// FSDP's construction leaves cached on the default stream only adds to it).
TEST_CASE("FSDP1's all-gathers and reduce-scatters are replayed in their own streams' pools") {
  const ModelSpec m = memplan::testing::toy_llama(4);
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.micro_batch = 2;
  c.seq_len = 64;
  c.device = Device::kCuda;
  c.parallel.num_gpus = 8;
  c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  const auto says_streams = [](const Estimate& e) {
    return std::any_of(e.assumptions.begin(), e.assumptions.end(), [](const std::string& a) {
      return a.find("with its all-gathers and reduce-scatters in their own streams' pools") != std::string::npos;
    });
  };
  const auto fsdp1 = estimate(m, c);
  REQUIRE(fsdp1);
  require_consistent(*fsdp1);
  CHECK(says_streams(*fsdp1));
  CHECK(fsdp1->reserved.count() - fsdp1->peak.count() >= 11'248'640);
  // FSDP2 (no record_stream; unsharded parameters on the default stream) and NO_SHARD (nothing
  // gathered) keep the one-stream replay.
  c.parallel.fsdp_version = 2;
  const auto fsdp2 = estimate(m, c);
  REQUIRE(fsdp2);
  CHECK_FALSE(says_streams(*fsdp2));
  c.parallel.fsdp_version = 1;
  c.parallel.sharding = ShardingStrategy::kFsdpNoShard;
  const auto no_shard = estimate(m, c);
  REQUIRE(no_shard);
  CHECK_FALSE(says_streams(*no_shard));
}

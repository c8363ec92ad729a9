// Pipeline, context and expert parallelism, and gradient accumulation
// (docs/formulas.md#pipeline-parallelism and the sections after it). Expected byte counts are
// derived by hand from the tensors named in each comment.
#include <catch2/catch.hpp>

#include "core/pipeline.hpp"
#include "memplan/engine.hpp"
#include "support/invariants.hpp"
#include "support/models.hpp"

using namespace memplan;
using memplan::testing::component;
using memplan::testing::require_consistent;
using memplan::testing::toy_llama;

namespace {

std::vector<int> layers_of(const ModelSpec& m, const ParallelConfig& p) {
  auto r = pipeline_ranks(m, p);
  REQUIRE(r);
  std::vector<int> out;
  for (const auto& rk : *r) out.push_back(rk.layers);
  return out;
}

ParallelConfig pp(int stages, int gpus) {
  ParallelConfig p;
  p.num_gpus = gpus;
  p.pipeline_parallel = stages;
  return p;
}

TrainingConfig bf16_cfg(std::int64_t b, std::int64_t s) {
  TrainingConfig c;
  c.micro_batch = b;
  c.seq_len = s;
  c.torch_dtype = DType::kBFloat16;
  return c;
}

// 8 layers on 4 pipeline stages of 2, bf16 weights without autocast, reentrant checkpointing,
// sdpa, b = 2 x s = 16. A 64-token vocabulary keeps the last stage's logits small, so stage 0
// is the worst GPU.
struct PipelineCase {
  ModelSpec model;
  TrainingConfig config;
};
PipelineCase four_stages() {
  PipelineCase k{toy_llama(8), bf16_cfg(2, 16)};
  k.model.vocab_size = 64;
  k.config.gradient_checkpointing = true;
  k.config.checkpoint_reentrant = true;
  k.config.attn = AttnImpl::kSdpa;
  k.config.parallel = pp(4, 4);
  return k;
}

std::int64_t phase_peak(const Estimate& e, Phase ph) {
  for (const auto& p : e.phases)
    if (p.phase == ph) return p.peak.count();
  return -1;
}

}  // namespace

TEST_CASE("pipeline stages split the decoder layers evenly, the remainder to the last stages") {
  CHECK(layers_of(toy_llama(32), pp(4, 4)) == std::vector<int>{8, 8, 8, 8});
  CHECK(layers_of(toy_llama(32), pp(3, 3)) == std::vector<int>{10, 11, 11});
  ParallelConfig p = pp(4, 4);
  p.pp_first_stage_layers = 6;
  p.pp_last_stage_layers = 6;
  CHECK(layers_of(toy_llama(32), p) == std::vector<int>{6, 10, 10, 6});
  // Interleaved: 4 ranks x 2 chunks of 4 layers; rank r holds chunks r and r + 4.
  p = pp(4, 4);
  p.pp_schedule = PipelineSchedule::kInterleaved1F1B;
  p.virtual_stages = 2;
  auto r = pipeline_ranks(toy_llama(32), p);
  REQUIRE(r);
  CHECK((*r)[1].layers == 8);
  CHECK((*r)[1].first_layer == 4);
  CHECK((*r)[1].chunks == 2);
  CHECK((*r)[0].embedding);
  CHECK((*r)[3].head);
  CHECK_FALSE((*r)[1].embedding);
  CHECK_FALSE((*r)[1].head);
  // torchtitan's layers_per_stage: 32 layers + embedding + head = 34 over ceil(34 / 5) = 7 stages,
  // rounded down to 4 ranks x 1 chunk for a multi-stage schedule: 34 / 4 = 8, 8, 9, 9, less one
  // layer's weight for the embedding (rank 0) and the head (rank 3).
  p = pp(4, 4);
  p.pp_schedule = PipelineSchedule::kInterleaved1F1B;
  p.pp_layers_per_stage = 5;
  CHECK(layers_of(toy_llama(32), p) == std::vector<int>{7, 8, 9, 8});
  // 2 layers per stage: 17 stages, 4 chunks per rank of 34 / 16 = 2 or 3 weighted layers.
  p.pp_layers_per_stage = 2;
  r = pipeline_ranks(toy_llama(32), p);
  REQUIRE(r);
  CHECK((*r)[0].chunks == 4);
  int total = 0;
  for (const auto& rk : *r) total += rk.layers;
  CHECK(total == 32);
  // More chunks than layers, and first/last counts that leave nothing for the middle, are errors.
  CHECK_FALSE(pipeline_ranks(toy_llama(3), pp(4, 4)));
  p = pp(3, 3);
  p.pp_first_stage_layers = 16;
  p.pp_last_stage_layers = 16;
  CHECK_FALSE(pipeline_ranks(toy_llama(32), p));
}

TEST_CASE("micro-batches in flight per schedule") {
  ParallelConfig p = pp(4, 4);
  // 1F1B: rank r runs p - r - 1 warmup forwards, then holds one more (Megatron, torch pipelining).
  for (int r = 0; r < 4; ++r) CHECK(in_flight_chunks(p, r, 1, 8) == 4 - r);
  CHECK(in_flight_chunks(p, 0, 1, 2) == 2);
  p.pp_schedule = PipelineSchedule::kGPipe;
  CHECK(in_flight_chunks(p, 3, 1, 8) == 8);
  // Interleaved, v = 2: warmup 2 (p - r - 1) + (v - 1) p, plus one; capped at m x v.
  p.pp_schedule = PipelineSchedule::kInterleaved1F1B;
  p.virtual_stages = 2;
  CHECK(in_flight_chunks(p, 0, 2, 8) == 11);
  CHECK(in_flight_chunks(p, 3, 2, 8) == 5);
  CHECK(in_flight_chunks(p, 0, 2, 1) == 2);
}

TEST_CASE("a pipeline stage holds the checkpointed inputs of every micro-batch in flight") {
  // 8 layers on 4 stages of 2; bf16 weights, no autocast, reentrant checkpointing, sdpa.
  // One micro-batch (b = 2, s = 16, h = 256) held by stage 0 between its forward and backward:
  //   2 checkpointed layer inputs            2 x 2*16*256*2 = 32768
  //   the stage output, kept                 2*16*256*2     = 16384
  //   input_ids, attention_mask, labels      3 x 2*16*8     =   768
  //   rotary cos and sin (bf16), which every checkpoint keeps as an input: 2 x 16*64*2 = 4096
  //   the RNG state each checkpoint saves (preserve_rng_state): 2 x 5056 = 10112
  //   = 64128 bytes. Stage 0 holds min(4, m) micro-batches: m - 1 besides the one it computes.
  auto [m, c] = four_stages();
  const std::int64_t per_micro_batch = 32768 + 16384 + 768 + 4096 + 10112;
  for (const auto& [accum, held] : std::vector<std::pair<int, int>>{{2, 1}, {3, 2}, {4, 3}, {9, 3}}) {
    INFO("grad_accum " << accum);
    c.grad_accum = accum;
    auto est = Estimator::create(m, c);
    REQUIRE(est);
    auto e = est->at_phase(2, 16, Phase::kBackward);
    REQUIRE(e);
    CHECK(e->pipeline_rank == 0);
    CHECK(e->pipeline_ranks == 4);
    CHECK(component(*e, "in_flight_activations") == held * per_micro_batch);
    auto full = est->at(2, 16);
    REQUIRE(full);
    require_consistent(*full);
  }
}

TEST_CASE("later micro-batches of an accumulation step hold every gradient from the start") {
  // Full fine-tuning in bf16: in a later micro-batch's forward every parameter's .grad exists,
  // 2 bytes per parameter; the first micro-batch's forward holds none.
  const ModelSpec m = toy_llama(4);
  TrainingConfig c = bf16_cfg(2, 64);
  auto one = estimate(m, c);
  c.grad_accum = 4;
  auto four = estimate(m, c);
  REQUIRE(one);
  REQUIRE(four);
  require_consistent(*four);
  CHECK(phase_peak(*four, Phase::kForward) - phase_peak(*one, Phase::kForward) == one->params.total * 2);
  CHECK(phase_peak(*four, Phase::kOptimizerStep) == phase_peak(*one, Phase::kOptimizerStep));
}

TEST_CASE("FSDP's no_sync micro-batches accumulate unsharded gradients") {
  const ModelSpec m = toy_llama(4);
  TrainingConfig c = bf16_cfg(2, 64);
  c.parallel.num_gpus = 4;
  c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  auto one = estimate(m, c);
  c.grad_accum = 2;
  auto two = estimate(m, c);
  REQUIRE(one);
  REQUIRE(two);
  // In forward: none vs all gradients, whole (2 bytes per parameter), not a quarter.
  CHECK(phase_peak(*two, Phase::kForward) - phase_peak(*one, Phase::kForward) == one->params.total * 2);
}

TEST_CASE("expert parallelism keeps num_experts / ep routed experts per GPU") {
  const ModelSpec m = memplan::testing::toy_mixtral(4);
  TrainingConfig c = bf16_cfg(1, 32);
  c.parallel.num_gpus = 4;
  auto all = estimate(m, c);
  c.parallel.expert_parallel = 4;
  auto ep = estimate(m, c);
  REQUIRE(all);
  REQUIRE(ep);
  require_consistent(*ep);
  // 6 of the 8 experts leave each GPU: 4 layers x 6 x (w1, w3: 256x128, w2: 128x256) x 2 bytes.
  CHECK(component(*all, "weights") - component(*ep, "weights") == 4LL * 6 * 3 * 256 * 128 * 2);
  // The model is still the whole model.
  CHECK(ep->params.total == all->params.total);
  c.parallel.expert_parallel = 3;
  CHECK_FALSE(estimate(m, c));  // 3 does not divide 8 experts (nor 4 GPUs)
}

TEST_CASE("parallel layouts memplan does not model say so") {
  TrainingConfig c = bf16_cfg(1, 64);
  c.parallel.num_gpus = 2;
  c.parallel.context_parallel = 2;
  c.attn = AttnImpl::kEager;
  auto e = estimate(toy_llama(4), c);
  REQUIRE_FALSE(e);
  CHECK(e.error().message.find("fused attention") != std::string::npos);
  c.attn = AttnImpl::kSdpa;
  CHECK(estimate(toy_llama(4), c));
  c.parallel.context_parallel = 3;  // does not divide 2 GPUs
  CHECK_FALSE(estimate(toy_llama(4), c));
  c = bf16_cfg(1, 64);
  c.parallel = pp(2, 2);
  c.parallel.sharding = ShardingStrategy::kZero3;
  CHECK_FALSE(estimate(toy_llama(4), c));
  c.parallel.sharding = ShardingStrategy::kNone;
  c.method = Method::kDpo;
  CHECK_FALSE(estimate(toy_llama(4), c));
  c.method = Method::kSft;
  c.parallel.virtual_stages = 2;  // without the interleaved schedule
  CHECK_FALSE(estimate(toy_llama(4), c));
}

TEST_CASE("context parallelism evaluates each GPU's share of the sequence") {
  // cp = 2 over 2 GPUs at s = 256 is the single-GPU step at s = 128 plus the ring buffers in the
  // layers: outside the layers (the loss) the two are equal.
  const ModelSpec m = toy_llama(4);
  TrainingConfig c = bf16_cfg(1, 256);
  c.attn = AttnImpl::kSdpa;
  c.parallel.num_gpus = 2;
  c.parallel.context_parallel = 2;
  auto cp = Estimator::create(m, c);
  TrainingConfig one = bf16_cfg(1, 128);
  one.attn = AttnImpl::kSdpa;
  one.parallel.num_gpus = 2;  // DDP over 2: the same gradient buckets as cp's data-parallel group
  one.parallel.context_parallel = 1;
  auto half = Estimator::create(m, one);
  REQUIRE(cp);
  REQUIRE(half);
  auto a = cp->at(1, 256), b = half->at(1, 128);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->peak >= b->peak);
  // Forward ring buffers: cp x (K + V + per-step output) = 2 x (2*2*64 + 4*64) x 2 bytes per token.
  CHECK(a->peak.count() - b->peak.count() <= 128LL * 2 * (2 * 2 * 64 + 4 * 64) * 2 + 128LL * (4 * 64 + 4 * 2 * 2 * 64) * 2);
}

TEST_CASE("sequence parallelism keeps s / t tokens of the residual stream per rank") {
  // Reentrant checkpointing keeps each layer's input: the residual stream, b x s x h x 2 bytes
  // whole, or / t under sequence parallelism (plus each checkpoint's 5056-byte RNG state).
  // 4 layers, b = 2, s = 64, h = 256, t = 2: 4 x 2*64*256*2 = 262144 whole, 131072 sharded.
  const ModelSpec m = toy_llama(4);
  TrainingConfig c = bf16_cfg(2, 64);
  c.gradient_checkpointing = true;
  c.checkpoint_reentrant = true;
  c.attn = AttnImpl::kSdpa;
  c.parallel.num_gpus = 2;
  c.parallel.tensor_parallel = 2;
  auto whole = Estimator::create(m, c);
  c.parallel.sequence_parallel = true;
  auto shard = Estimator::create(m, c);
  REQUIRE(whole);
  REQUIRE(shard);
  auto a = whole->at_phase(2, 64, Phase::kForward), b = shard->at_phase(2, 64, Phase::kForward);
  REQUIRE(a);
  REQUIRE(b);
  require_consistent(*b);
  CHECK(component(*a, "checkpointed_inputs") == 262144 + 4 * 5056);
  CHECK(component(*b, "checkpointed_inputs") == 131072 + 4 * 5056);
  // Without tensor parallelism there is nothing to split.
  c.parallel.tensor_parallel = 1;
  auto one = estimate(m, c);
  c.parallel.sequence_parallel = false;
  auto off = estimate(m, c);
  REQUIRE(one);
  REQUIRE(off);
  CHECK(one->peak == off->peak);
}

TEST_CASE("Megatron-Core: vocabulary-parallel embedding and output layer; stage outputs freed after the send") {
  // Tensor parallel 2: Hugging Face's tp_plan keeps both V x h matrices whole on every rank,
  // Megatron's VocabParallelEmbedding and output layer hold V / 2 rows each: 2 x 8000*256 bytes
  // fewer in bf16 (V = 8000, h = 256).
  const ModelSpec m = toy_llama(4);
  TrainingConfig c = bf16_cfg(1, 32);
  c.parallel.num_gpus = 2;
  c.parallel.tensor_parallel = 2;
  auto hf = estimate(m, c);
  c.parallel.megatron_core = true;
  auto mc = estimate(m, c);
  REQUIRE(hf);
  REQUIRE(mc);
  require_consistent(*mc);
  CHECK(component(*hf, "weights") - component(*mc, "weights") == 2LL * 8000 * 256);

  // The pipeline test's stage 0 (above) without its kept output: 64128 - 16384 per micro-batch.
  auto [small, p] = four_stages();
  p.parallel.megatron_core = true;
  p.grad_accum = 3;
  auto e = estimate(small, p);
  REQUIRE(e);
  require_consistent(*e);
  auto est = Estimator::create(small, p);
  REQUIRE(est);
  auto bwd = est->at_phase(2, 16, Phase::kBackward);
  REQUIRE(bwd);
  CHECK(bwd->pipeline_rank == 0);
  CHECK(component(*bwd, "in_flight_activations") == 2 * (64128 - 16384));
}

// torchtitan's loss parallelism (docs/formulas.md#loss-parallel): the embedding and the output
// layer hold V / t rows per rank, as Megatron-Core's, and the logits and the loss's temporaries
// V / t columns; nothing of Megatron's own (main_grad buffer, no DDP buckets) comes with it.
TEST_CASE("loss parallelism splits the vocabulary of the embedding, the output layer and the logits") {
  ModelSpec m = toy_llama(4);
  m.vocab_size = 64000;  // the loss sets the backward peak
  TrainingConfig c = bf16_cfg(2, 256);
  c.parallel.num_gpus = 4;  // 2 data-parallel ranks of 2
  c.parallel.tensor_parallel = 2;
  const auto backward = [&m](const TrainingConfig& cfg) {
    auto est = Estimator::create(m, cfg);
    REQUIRE(est);
    auto e = est->at_phase(2, 256, Phase::kBackward);
    REQUIRE(e);
    require_consistent(*e);
    return *e;
  };
  const Estimate whole = backward(c);
  c.parallel.loss_parallel = true;
  const Estimate lp = backward(c);
  c.parallel.loss_parallel = false;
  c.parallel.megatron_core = true;
  const Estimate mc = backward(c);
  // 32000 of the 64000 rows of the embedding and of lm_head, bf16.
  CHECK(component(whole, "weights") - component(lp, "weights") == 2LL * 32000 * 256 * 2);
  CHECK(component(lp, "weights") == component(mc, "weights"));
  CHECK(component(lp, "logits_and_loss") == component(mc, "logits_and_loss"));
  // Everything but the fp32 loss scalar (4 bytes) scales with the vocabulary: 2 x 256 tokens x
  // 32000 columns x 12 bytes per rank at the head's backward.
  CHECK(component(lp, "logits_and_loss") == 2LL * 256 * 32000 * 12 + 4);
  CHECK(component(whole, "logits_and_loss") == 2LL * 256 * 64000 * 12 + 4);
  // DDP's buckets: a copy of every gradient, the split ones included; Megatron's DDP has none.
  CHECK(component(whole, "communication_buckets") - component(lp, "communication_buckets") == 2LL * 32000 * 256 * 2);
  CHECK(component(mc, "communication_buckets") == 0);
}

TEST_CASE("Megatron-Core keeps every gradient in a persistent fp32 buffer") {
  // bf16 parameters, one micro-batch per step: in the forward Hugging Face's Trainer holds no
  // gradient yet; Megatron's main_grad buffer holds 4 bytes per parameter from the start.
  const ModelSpec m = toy_llama(4);
  TrainingConfig c = bf16_cfg(1, 32);
  c.parallel.megatron_core = true;
  auto est = Estimator::create(m, c);
  REQUIRE(est);
  auto fwd = est->at_phase(1, 32, Phase::kForward);
  REQUIRE(fwd);
  require_consistent(*fwd);
  CHECK(component(*fwd, "gradients") == fwd->params.total * 4);
  auto step = est->at_phase(1, 32, Phase::kOptimizerStep);
  REQUIRE(step);
  CHECK(component(*step, "gradients") == step->params.total * 4);
}

TEST_CASE("Megatron's DDP without the distributed optimizer: fp32 main parameters, no second gradient copy") {
  // Float16OptimizerWithFloat16Params keeps fp32 main parameters (4 bytes each, whole on every
  // rank) beside the bf16 ones; Megatron's DDP reduces the main_grad buffer itself, so there are
  // no DistributedDataParallel buckets.
  const ModelSpec m = toy_llama(4);
  TrainingConfig c = bf16_cfg(1, 32);
  c.parallel.num_gpus = 2;
  c.parallel.megatron_core = true;
  auto step = estimate(m, c);
  REQUIRE(step);
  require_consistent(*step);
  CHECK(component(*step, "master_weights") == step->params.total * 4);
  CHECK(component(*step, "communication_buckets") == 0);
  // Hugging Face's Trainer under DDP: buckets of every gradient, no fp32 copy.
  c.parallel.megatron_core = false;
  auto hf = estimate(m, c);
  REQUIRE(hf);
  CHECK(component(*hf, "master_weights") == 0);
  CHECK(component(*hf, "communication_buckets") == hf->params.total * 2);
}

TEST_CASE("expert tensor parallelism: the routed experts split etp ways, the expert groups tile the stage") {
  // toy_mixtral: 4 MoE layers of 8 experts, each w1, w3 (256 x 128) and w2 (128 x 256), bf16.
  // Tensor parallelism 2 splits them in two (Megatron's default, etp = tp); etp 1 keeps them
  // whole: 4 x 8 x 3 x 256 x 64 x 2 bytes more on each GPU.
  const ModelSpec m = memplan::testing::toy_mixtral(4);
  TrainingConfig c = bf16_cfg(1, 32);
  c.parallel.num_gpus = 2;
  c.parallel.tensor_parallel = 2;
  auto split = estimate(m, c);
  c.parallel.expert_tensor_parallel = 1;
  auto whole = estimate(m, c);
  REQUIRE(split);
  REQUIRE(whole);
  require_consistent(*whole);
  CHECK(component(*whole, "weights") - component(*split, "weights") == 4LL * 8 * 3 * 256 * 64 * 2);
  // Under sequence parallelism each rank then routes its own s / t tokens (no gather over the
  // tensor-parallel group): less MoE activation than with the experts split and the sequence
  // gathered.
  c.parallel.sequence_parallel = true;
  auto own = Estimator::create(m, c);
  c.parallel.expert_tensor_parallel = 2;
  auto gathered = Estimator::create(m, c);
  REQUIRE(own);
  REQUIRE(gathered);
  auto a = own->at_phase(1, 32, Phase::kForward), b = gathered->at_phase(1, 32, Phase::kForward);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(component(*a, "activations") < component(*b, "activations"));
  // Expert parallelism 2 x expert tensor parallelism 2 = 4 GPUs per expert group: not 2.
  c.parallel.expert_parallel = 2;
  auto e = estimate(m, c);
  REQUIRE_FALSE(e);
  CHECK(e.error().to_string() ==
        "expert-parallel x expert-tensor-parallel = 2 x 2 must divide tensor x data-parallel x context-parallel = 2; "
        "the expert groups tile the GPUs of a pipeline stage (Megatron-Core's rule)");
  c.parallel.expert_parallel = 1;
  c.parallel.expert_tensor_parallel = 3;  // 128 / 3
  e = estimate(m, c);
  REQUIRE_FALSE(e);
}

TEST_CASE("parallel layout errors say what is wrong and what to do") {
  const auto message = [](const ModelSpec& m, const TrainingConfig& c) {
    auto e = estimate(m, c);
    REQUIRE_FALSE(e);
    return e.error().to_string();
  };
  const ModelSpec m = toy_llama(4);
  TrainingConfig c = bf16_cfg(1, 64);
  c.parallel.num_gpus = 6;
  c.parallel.pipeline_parallel = 4;
  CHECK(message(m, c) ==
        "tensor-parallel x pipeline-parallel x context-parallel = 1 x 4 x 1 = 4 must divide the number of GPUs "
        "(6 = 1 node(s) x 6); the GPUs left over form the data-parallel groups; use a multiple of the product");
  c.parallel.num_gpus = 4;
  c.parallel.virtual_stages = 2;
  CHECK(message(m, c) ==
        "virtual-stages = 2 needs the interleaved_1f1b schedule (got 1f1b); add --pp-schedule interleaved_1f1b, "
        "or drop --virtual-stages");
  c.parallel.pp_schedule = PipelineSchedule::kInterleaved1F1B;
  CHECK(message(m, c) ==
        "pipeline-parallel x virtual-stages = 8 model chunks for 4 decoder layers; every model chunk needs at least "
        "one decoder layer");
  c.parallel.virtual_stages = 1;
  c.parallel.pp_schedule = PipelineSchedule::k1F1B;
  c.parallel.sharding = ShardingStrategy::kZero3;
  CHECK(message(m, c) ==
        "DeepSpeed's pipeline engine supports ZeRO stage 0 or 1 only; use --zero-stage 1 (Megatron's distributed "
        "optimizer shards the same way), or FSDP2");
  c = bf16_cfg(1, 64);
  c.parallel.num_gpus = 2;
  c.parallel.context_parallel = 2;
  c.attn = AttnImpl::kEager;
  CHECK(message(m, c) ==
        "context parallelism needs a fused attention kernel (ring attention over SDPA/flash/TE); use "
        "--attn-implementation sdpa or flash_attention_2");
  c = bf16_cfg(1, 64);
  c.parallel.num_gpus = 4;
  c.parallel.expert_parallel = 4;
  CHECK(message(m, c) ==
        "expert-parallel needs a mixture-of-experts model; toy has no routed experts; drop --expert-parallel / "
        "--expert-tensor-parallel / --moe-capacity-factor");
  c = bf16_cfg(1, 64);
  c.parallel.num_gpus = 8;
  c.parallel.nodes = 2;
  c.parallel.sharding = ShardingStrategy::kFsdpHybridShard;
  c.parallel.dp_replicate = 3;
  CHECK(message(m, c) == "dp-replicate = 3 must divide the data-parallel x context ranks (16)");
}

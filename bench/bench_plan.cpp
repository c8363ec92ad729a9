// Speed of planning in process: one engine query, one whole plan (search, tiers, global batch),
// the nothing-fits path with its suggestions, and a 100,000-point sweep. Every loop inside goes
// through Estimator::peak_bytes, so these numbers move with the engine. The plans are timed by
// the wall clock (UseRealTime): a large one simulates its independent pieces on several threads,
// whose CPU time the calling thread's would not show.
//
//   cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DMEMPLAN_BUILD_BENCH=ON
//   cmake --build build-bench --target memplan_bench_plan && build-bench/bench/memplan_bench_plan
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <numeric>
#include <optional>

#include "cli/allocator.hpp"
#include "memplan/engine.hpp"
#include "memplan/plan.hpp"
#include "support/models.hpp"  // tests/support: the hand-built Llama-3.1-8B the tests use

namespace {

using namespace memplan;
using memplan::testing::llama31_8b;
using memplan::testing::gemma3_27b_text;
using memplan::testing::llama32_11b_vision;

TrainingConfig bf16_sft() {
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.autocast = DType::kBFloat16;
  c.seq_len = 2048;
  c.micro_batch = 4;
  c.grad_accum = 8;
  return c;
}

Budget budget(double gib) { return *make_budget(Bytes::gib(gib), std::nullopt, Bytes::zero()); }

Estimator prepared(const TrainingConfig& c) {
  auto e = Estimator::create(llama31_8b(), c);
  if (!e) std::abort();
  return std::move(e).value();
}

// Times whole plans of a config that must fit: a plan that does not fit (or carries suggestions)
// aborts, so a benchmark cannot silently time the nothing-fits path instead.
void time_fitting_plan(benchmark::State& state, const ModelSpec& m, const TrainingConfig& c, const PlanRequest& req) {
  for (auto _ : state) {
    auto p = plan(m, c, req);
    if (!p || !p->recommendation.fits || !p->suggestions.empty()) std::abort();
    benchmark::DoNotOptimize(p);
  }
}

void BM_PeakBytes(benchmark::State& state) {
  const Estimator est = prepared(bf16_sft());
  std::int64_t b = 1;
  for (auto _ : state) {
    auto r = est.peak_bytes(b, 2048);
    benchmark::DoNotOptimize(r);
    b = b % 64 + 1;
  }
}
BENCHMARK(BM_PeakBytes);

// What `memplan plan` does after parsing: Estimator::create, the micro-batch search, the global
// batch for a target, and three tiers. On 141 GiB (an H200): the config must fit, or the plan
// would also rank suggestions and this would time BM_PlanNothingFits (it did, silently, at 80 GiB
// once the margin and the foreach temporaries were modelled).
void BM_Plan(benchmark::State& state) {
  const ModelSpec m = llama31_8b();
  const TrainingConfig c = bf16_sft();
  PlanRequest req;
  req.budget = budget(141);
  req.target_global_batch = 256;
  time_fitting_plan(state, m, c, req);
}
BENCHMARK(BM_Plan)->Unit(benchmark::kMicrosecond)->UseRealTime();

// DeepSeek-V3 (671,026,419,200 parameters; configs/models/deepseek-v3.json): MLA with 61 layers,
// 58 of them MoE with 256 routed experts. The same plan as above, full fine-tuning under ZeRO-3
// on 32 nodes x 8 GPUs: the engine's cost must not grow with the number of experts or layers.
ModelSpec deepseek_v3() {
  ModelSpec m;
  m.name = "deepseek-ai/DeepSeek-V3";
  m.model_type = "deepseek_v3";
  m.vocab_size = 129280;
  m.hidden_size = 7168;
  m.intermediate_size = 18432;
  m.num_layers = 61;
  m.num_heads = m.num_kv_heads = 128;
  m.q_lora_rank = 1536;
  m.kv_lora_rank = 512;
  m.qk_nope_head_dim = 128;
  m.qk_rope_head_dim = 64;
  m.v_head_dim = 128;
  m.head_dim = 192;
  m.torch_dtype = "bfloat16";
  m.moe.num_experts = 256;
  m.moe.experts_per_token = 8;
  m.moe.expert_intermediate_size = 2048;
  m.moe.num_shared_experts = 1;
  m.moe.shared_intermediate_size = 2048;
  m.moe.first_dense_layers = 3;
  m.moe.router_bias = true;
  return m;
}

void BM_PlanDeepseekV3(benchmark::State& state) {
  const ModelSpec m = deepseek_v3();
  TrainingConfig c = bf16_sft();
  c.seq_len = 4096;
  c.micro_batch = 1;
  // 32 nodes x 8 GPUs of 141 GiB with gradient checkpointing: 671B x 16 bytes of model state /
  // 256 = 42 GB per GPU plus two gathered MoE layers (43 GiB), so the plan fits (on 64 GPUs of
  // 80 GiB it does not, and the suggestions would dominate the time).
  c.gradient_checkpointing = true;
  c.parallel.num_gpus = 8;
  c.parallel.nodes = 32;
  c.parallel.sharding = ShardingStrategy::kZero3;
  PlanRequest req;
  req.budget = budget(141);
  req.target_global_batch = 256;
  time_fitting_plan(state, m, c, req);
}
BENCHMARK(BM_PlanDeepseekV3)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The same model over 4D parallelism (docs/formulas.md#pipeline-parallelism): 8 pipeline stages
// x 2 tensor x 2 context on 32 nodes (dp 8), 8-way expert parallel over dp x cp, Megatron's
// distributed optimizer (ZeRO-1), 32k tokens per sequence. The plan evaluates every stage with
// its in-flight micro-batches for each candidate micro-batch.
void BM_PlanDeepseekV3FourD(benchmark::State& state) {
  const ModelSpec m = deepseek_v3();
  TrainingConfig c = bf16_sft();
  c.seq_len = 32768;
  c.micro_batch = 1;
  c.grad_accum = 16;
  c.gradient_checkpointing = true;
  c.attn = AttnImpl::kFlashAttention2;
  c.parallel.num_gpus = 8;
  c.parallel.nodes = 32;
  c.parallel.pipeline_parallel = 8;
  c.parallel.tensor_parallel = 2;
  c.parallel.context_parallel = 2;
  c.parallel.expert_parallel = 8;
  c.parallel.sharding = ShardingStrategy::kZero1;
  PlanRequest req;
  req.budget = budget(141);
  req.target_global_batch = 128;
  time_fitting_plan(state, m, c, req);
}
BENCHMARK(BM_PlanDeepseekV3FourD)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The nothing-fits path: every suggestion re-runs the engine on a changed config (ZeRO-3 tries
// GPU counts), then the best micro-batch after each change that fits.
void BM_PlanNothingFits(benchmark::State& state) {
  const ModelSpec m = llama31_8b();
  TrainingConfig c;  // fp32 full fine-tuning of 8B on a 24 GB card
  c.seq_len = 4096;
  PlanRequest req;
  req.budget = budget(22.35);
  for (auto _ : state) {
    auto p = plan(m, c, req);
    if (!p || p->recommendation.fits) std::abort();
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_PlanNothingFits)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The example config users start from (configs/examples/hf-trl-sft-lora.yaml): LoRA on every
// linear layer, gradient checkpointing, bf16. Adapters and recomputation make the simulated
// program several times longer than plain SFT's.
TrainingConfig lora_checkpointed() {
  TrainingConfig c = bf16_sft();
  c.lora.enabled = true;
  c.lora.all_linear = true;
  c.gradient_checkpointing = true;
  c.optim.kind = OptimizerKind::kAdamWTorchFused;
  return c;
}

void BM_EstimatorCreateLora(benchmark::State& state) {
  const ModelSpec m = llama31_8b();
  const TrainingConfig c = lora_checkpointed();
  for (auto _ : state) {
    auto e = Estimator::create(m, c);
    if (!e) std::abort();
    benchmark::DoNotOptimize(e);
  }
}
BENCHMARK(BM_EstimatorCreateLora)->Unit(benchmark::kMicrosecond);

// What one more estimator costs once its step has been simulated: the nothing-fits plan's
// suggestions and their combination derive many (QLoRA under ZeRO-3 over 64 GPUs with the
// optimizer offloaded, from the single-GPU QLoRA estimator whose programs and extrapolation it
// shares). Everything left is per estimator: its parameters, sharding and candidate lists.
void BM_DeriveShardedEstimator(benchmark::State& state) {
  TrainingConfig c;
  c.seq_len = 4096;
  c.lora.enabled = c.lora.all_linear = true;
  c.quant.load_in_4bit = true;
  const Estimator seed = prepared(c);
  c.parallel.sharding = ShardingStrategy::kZero3;
  c.parallel.num_gpus = 8;
  c.parallel.nodes = 8;
  c.parallel.offload_optimizer = true;
  for (auto _ : state) {
    auto e = seed.derive(c);
    if (!e) std::abort();
    benchmark::DoNotOptimize(e);
  }
}
BENCHMARK(BM_DeriveShardedEstimator)->Unit(benchmark::kMicrosecond);

// A whole plan of lora_checkpointed() at `seq_len` tokens (micro-batch `micro_batch` as the
// config's own) on `gib` GiB, for a global batch of `target`.
void time_lora_plan(benchmark::State& state, const ModelSpec& m, std::int64_t seq_len, double gib,
                    std::int64_t target, std::int64_t micro_batch = 4) {
  TrainingConfig c = lora_checkpointed();
  c.seq_len = seq_len;
  c.micro_batch = micro_batch;
  PlanRequest req;
  req.budget = budget(gib);
  req.target_global_batch = target;
  time_fitting_plan(state, m, c, req);
}

void BM_PlanLora(benchmark::State& state) { time_lora_plan(state, llama31_8b(), 2048, 80, 32); }
BENCHMARK(BM_PlanLora)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Qwen2.5-VL-7B: the Qwen2 language model with multimodal RoPE and a 32-block vision tower
// (docs/formulas.md#vision-language-models), each block simulated.
ModelSpec qwen25_vl_7b() {
  ModelSpec m;
  m.name = "Qwen/Qwen2.5-VL-7B-Instruct";
  m.model_type = "qwen2";
  m.vocab_size = 152064;
  m.hidden_size = 3584;
  m.intermediate_size = 18944;
  m.num_layers = 28;
  m.num_heads = 28;
  m.num_kv_heads = 4;
  m.head_dim = 128;
  m.qkv_bias = true;
  m.mrope = true;
  m.torch_dtype = "bfloat16";
  VisionSpec& v = m.vision;
  v.kind = VisionKind::kQwen25Vl;
  v.model_type = "qwen2_5_vl";
  v.depth = 32;
  v.hidden_size = 1280;
  v.intermediate_size = 3420;
  v.num_heads = 16;
  v.temporal_patch_size = 2;
  v.spatial_merge_size = 2;
  v.window_size = 112;
  v.fullatt_blocks = {7, 15, 23, 31};
  return m;
}

// LoRA on the language model, one 768 x 768 image per sequence: the tower runs without a graph.
void BM_PlanQwen25VlLora(benchmark::State& state) { time_lora_plan(state, qwen25_vl_7b(), 2048, 80, 32); }
BENCHMARK(BM_PlanQwen25VlLora)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Full fine-tuning with the tower trained: every block's saved tensors in the timeline.
void BM_PlanQwen25VlTrainedTower(benchmark::State& state) {
  const ModelSpec m = qwen25_vl_7b();
  TrainingConfig c = bf16_sft();
  c.seq_len = 2048;
  c.gradient_checkpointing = true;
  c.vision.train_vision_tower = true;
  c.vision.train_projector = true;
  c.parallel.num_gpus = 8;
  c.parallel.sharding = ShardingStrategy::kZero3;
  PlanRequest req;
  req.budget = budget(80);
  req.target_global_batch = 64;
  time_fitting_plan(state, m, c, req);
}
BENCHMARK(BM_PlanQwen25VlTrainedTower)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Llama 3.2 Vision 11B (tests/support: configs/models/llama-3.2-11b-vision.json by hand): 8
// cross-attention layers among 40, one 5-layer period extrapolated (docs/formulas.md#llama-32-vision).
// LoRA, one image.
void BM_PlanLlama32VisionLora(benchmark::State& state) { time_lora_plan(state, llama32_11b_vision(), 2048, 80, 32); }
BENCHMARK(BM_PlanLlama32VisionLora)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Gemma 3 27B's language model, LoRA with checkpointing at 4,096 tokens under SDPA: past the
// 1,024-token window transformers materializes the sliding layers' mask, so the plan simulates a
// second program in which one 6-layer period repeats (docs/formulas.md#sliding-window-attention).
void BM_PlanGemma3SlidingWindow(benchmark::State& state) { time_lora_plan(state, gemma3_27b_text(), 4096, 141, 16, 1); }
BENCHMARK(BM_PlanGemma3SlidingWindow)->Unit(benchmark::kMicrosecond)->UseRealTime();

// A decoder embedding model (e5-mistral's kind of training: an 8B decoder loaded as AutoModel,
// last-token pooling, LoRA with checkpointing, 1 anchor + 1 positive + 1 hard negative of 512
// tokens) on an 80 GB card: each text column is a forward of its own (docs/formulas.md#decoder-embeddings).
void time_decoder_embedding_plan(benchmark::State& state, bool cached) {
  ModelSpec m = llama31_8b();
  m.decoder_embedding = true;
  m.pooling = PoolingMode::kLastToken;
  TrainingConfig c = lora_checkpointed();
  c.seq_len = 512;
  c.micro_batch = 8;
  c.contrastive.texts_per_example = 3;
  c.contrastive.cached = cached;
  c.contrastive.mini_batch_size = 32;
  PlanRequest req;
  req.budget = budget(80);
  req.target_global_batch = cached ? 4096 : 256;
  time_fitting_plan(state, m, c, req);
}
void BM_PlanDecoderEmbedding(benchmark::State& state) { time_decoder_embedding_plan(state, false); }
BENCHMARK(BM_PlanDecoderEmbedding)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The same with cached MNRL (GradCache) in mini-batches of 32: one no-grad forward and two with
// grad of a fixed mini-batch, whatever the micro-batch; the search runs to its cap.
void BM_PlanDecoderEmbeddingCached(benchmark::State& state) { time_decoder_embedding_plan(state, true); }
BENCHMARK(BM_PlanDecoderEmbeddingCached)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Seed 002's contrastive embedding training: an encoder with LoRA and checkpointing under fp16
// autocast, 57 texts per anchor (1 + 32 positives + 24 negatives), on a 24 GB card. Each text
// column is a forward of its own (sentence-transformers); two are simulated and the 55 between
// them stand as one block (docs/formulas.md#contrastive). DeBERTa-v3-base: its attention copies
// at every batch size, so b = 1 shares the program; BERT-base's eager attention folds (b, heads)
// into a view at b = 1, a second program (its default SDPA has one).
void time_contrastive_plan(benchmark::State& state, const ModelSpec& m, std::optional<AttnImpl> attn = std::nullopt) {
  TrainingConfig c;
  c.attn = attn;
  c.contrastive.texts_per_example = static_cast<int>(state.range(0));
  c.autocast = DType::kFloat16;
  c.seq_len = 64;
  c.micro_batch = 4;
  c.gradient_checkpointing = true;
  c.lora.enabled = true;
  if (c.contrastive.texts_per_example == 1) c.contrastive.texts_per_example = 0;
  PlanRequest req;
  req.budget = budget(22);
  req.target_global_batch = 64;
  time_fitting_plan(state, m, c, req);
}
void BM_PlanContrastiveEncoder(benchmark::State& state) { time_contrastive_plan(state, memplan::testing::deberta_v3_base()); }
BENCHMARK(BM_PlanContrastiveEncoder)->Arg(1)->Arg(2)->Arg(3)->Arg(57)->Unit(benchmark::kMicrosecond)->UseRealTime();
void BM_PlanContrastiveBert(benchmark::State& state) { time_contrastive_plan(state, memplan::testing::bert_base_uncased()); }
BENCHMARK(BM_PlanContrastiveBert)->Arg(1)->Arg(57)->Unit(benchmark::kMicrosecond)->UseRealTime();
void BM_PlanContrastiveBertEager(benchmark::State& state) {
  time_contrastive_plan(state, memplan::testing::bert_base_uncased(), AttnImpl::kEager);
}
BENCHMARK(BM_PlanContrastiveBertEager)->Arg(1)->Arg(57)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_SolveSeqLen(benchmark::State& state) {
  const ModelSpec m = llama31_8b();
  const TrainingConfig c = bf16_sft();
  const SeqLenRequest req{budget(141)};
  for (auto _ : state) {
    auto p = solve_seq_len(m, c, req);
    if (!p || !p->fits || !p->suggestions.empty()) std::abort();
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_SolveSeqLen)->Unit(benchmark::kMicrosecond);

// 1,000 micro-batches x 100 sequence lengths = 100,000 points.
void BM_Sweep100k(benchmark::State& state) {
  const Estimator est = prepared(bf16_sft());
  SweepRequest req;
  req.budget = budget(80);
  req.micro_batches.resize(1000);
  std::iota(req.micro_batches.begin(), req.micro_batches.end(), 1);
  for (std::int64_t s = 128; s <= 128 * 100; s += 128) req.seq_lens.push_back(s);
  req.target_global_batch = 1024;
  for (auto _ : state) {
    auto s = sweep(est, req);
    if (!s || s->points.size() != 100'000) std::abort();
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(state.iterations() * 100'000);
}
BENCHMARK(BM_Sweep100k)->Unit(benchmark::kMillisecond);

}  // namespace

// The allocator settings of the memplan process (src/main.cpp), so these numbers are the ones a
// run of the command sees.
int main(int argc, char** argv) {
  memplan::cli::tune_allocator();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

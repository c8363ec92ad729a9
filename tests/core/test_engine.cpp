#include <catch2/catch.hpp>

#include <algorithm>

#include "memplan/engine.hpp"
#include "support/invariants.hpp"
#include "support/models.hpp"

using namespace memplan;
using memplan::testing::component;
using memplan::testing::llama31_8b;
using memplan::testing::require_consistent;
using memplan::testing::toy_llama;

namespace {

TrainingConfig cfg(std::int64_t b, std::int64_t s, DType dt = DType::kBFloat16, Device dev = Device::kCuda) {
  TrainingConfig c;
  c.micro_batch = b;
  c.seq_len = s;
  c.torch_dtype = dt;
  c.device = dev;
  return c;
}

}  // namespace

TEST_CASE("weights are the published parameter count times the dtype size") {
  // 8,030,261,248 parameters (HF safetensors total) in bf16.
  auto e = estimate(llama31_8b(), cfg(1, 512));
  REQUIRE(e.has_value());
  require_consistent(*e);
  CHECK(component(*e, "weights") == 8'030'261'248LL * 2);
  CHECK(e->params.total == 8'030'261'248LL);
  CHECK(e->params.trainable == 8'030'261'248LL);
}

TEST_CASE("LoRA on q_proj and v_proj trains PEFT's 6,815,744 parameters of Llama-3.1-8B at r=16") {
  // PEFT print_trainable_parameters() for Llama-3-8B, r=16, q_proj+v_proj:
  // 32 layers x 16 x ((4096 + 4096) + (4096 + 1024)) = 6,815,744.
  TrainingConfig c = cfg(1, 512);
  c.lora.enabled = true;
  c.lora.r = 16;
  auto e = estimate(llama31_8b(), c);
  REQUIRE(e.has_value());
  require_consistent(*e);
  CHECK(e->params.trainable == 6'815'744);
  CHECK(component(*e, "adapter_weights") == 6'815'744LL * 4);  // PEFT upcasts adapters to fp32
  CHECK(component(*e, "weights") == 8'030'261'248LL * 2);       // base frozen in bf16
  CHECK(component(*e, "optimizer_states") == 6'815'744LL * 4 * 2);
}

TEST_CASE("QLoRA stores 4 bits per layer weight plus an fp32 absmax per 64 values") {
  // Layer Linear weights of Llama-3.1-8B: 8,030,261,248 - 2 x 525,336,576 (embed, lm_head)
  // - 266,240 (65 norms x 4096) = 6,979,321,856, all in 64-divisible tensors.
  const std::int64_t lin = 6'979'321'856LL;
  TrainingConfig c = cfg(1, 256);
  c.lora.enabled = true;
  c.quant.load_in_4bit = true;
  auto e = estimate(llama31_8b(), c);
  REQUIRE(e.has_value());
  require_consistent(*e);
  const std::int64_t quant = lin / 2 + lin / 64 * 4;
  const std::int64_t rest = (8'030'261'248LL - lin) * 2;  // embeddings, norms, lm_head in bf16
  CHECK(component(*e, "weights") == quant + rest);
  // TRL casts QLoRA adapters to bf16.
  CHECK(component(*e, "adapter_weights") == 6'815'744LL * 2);
}

TEST_CASE("double quantization stores absmax as one byte per block plus fp32 per 256 blocks") {
  TrainingConfig c = cfg(1, 256);
  c.lora.enabled = true;
  c.quant.load_in_4bit = true;
  c.quant.double_quant = true;
  auto single = estimate(llama31_8b(), cfg(1, 256));
  auto e = estimate(llama31_8b(), c);
  REQUIRE(e.has_value());
  require_consistent(*e);
  c.quant.double_quant = false;
  auto plain = estimate(llama31_8b(), c);
  REQUIRE(plain.has_value());
  // Per block: 4 bytes -> 1 byte (+4/256, + a 1 KiB code table per tensor): about 3 bytes of
  // every 64 values saved, i.e. ~0.046 bytes/param.
  const double saved = static_cast<double>(component(*plain, "weights") - component(*e, "weights"));
  CHECK(saved / 6'979'321'856.0 == Approx(3.0 / 64 - 4.0 / 64 / 256).epsilon(0.01));
  (void)single;
}

TEST_CASE("cross-entropy backward holds log-probs and two vocabulary-sized gradients") {
  // Tiny layers, huge vocabulary: the peak is log_softmax backward, where the fp32 log-probs
  // (saved), NLLLoss's gradient and log_softmax's gradient (each b*s*V*4) are live.
  ModelSpec m = toy_llama(1);
  m.vocab_size = 128256;
  const std::int64_t b = 4, s = 256;
  TrainingConfig c = cfg(b, s, DType::kFloat32, Device::kCpu);
  c.optim.kind = OptimizerKind::kSgd;  // no state: the loss dominates
  auto e = estimate(m, c);
  REQUIRE(e.has_value());
  require_consistent(*e);
  CHECK(e->peak_phase == Phase::kBackward);
  // + the 4-byte loss; NLL's total_weight went when its node released its saved tensors.
  CHECK(component(*e, "logits_and_loss") == 3 * b * s * 128256 * 4 + 4);
}

TEST_CASE("peak never decreases as batch or sequence grows") {
  for (auto dev : {Device::kCpu, Device::kCuda}) {
    for (bool gc : {false, true}) {
      TrainingConfig c = cfg(1, 64, DType::kBFloat16, dev);
      c.gradient_checkpointing = gc;
      c.attn = AttnImpl::kEager;
      auto est = Estimator::create(toy_llama(5), c);
      REQUIRE(est.has_value());
      std::int64_t prev_b = 0;
      for (std::int64_t b = 1; b <= 64; b *= 2) {
        const auto p = est->peak_bytes(b, 128);
        REQUIRE(p.has_value());
        CHECK(p->count() >= prev_b);
        prev_b = p->count();
      }
      std::int64_t prev_s = 0;
      for (std::int64_t s = 1; s <= 4096; s = s * 2 + 1) {
        const auto p = est->peak_bytes(2, s);
        REQUIRE(p.has_value());
        CHECK(p->count() >= prev_s);
        prev_s = p->count();
      }
    }
  }
}

TEST_CASE("Estimator::at and estimate agree and satisfy the invariants across a grid") {
  for (auto dt : {DType::kFloat32, DType::kBFloat16}) {
    for (bool lora : {false, true}) {
      TrainingConfig c = cfg(3, 200, dt, Device::kCpu);
      c.lora.enabled = lora;
      c.lora.all_linear = true;
      auto est = Estimator::create(toy_llama(4), c);
      REQUIRE(est.has_value());
      for (std::int64_t b : {1, 3, 17}) {
        for (std::int64_t s : {1, 63, 512}) {
          auto e = est->at(b, s);
          REQUIRE(e.has_value());
          require_consistent(*e);
          CHECK(e->peak == *est->peak_bytes(b, s));
        }
      }
      auto direct = estimate(toy_llama(4), c);
      REQUIRE(direct.has_value());
      CHECK(direct->peak == *est->peak_bytes(3, 200));
    }
  }
}

TEST_CASE("gradient checkpointing and SDPA lower long-sequence peaks") {
  TrainingConfig c = cfg(1, 8192);
  c.attn = AttnImpl::kEager;
  const auto eager = estimate(llama31_8b(), c)->peak;
  c.attn = AttnImpl::kSdpa;
  const auto sdpa = estimate(llama31_8b(), c)->peak;
  c.gradient_checkpointing = true;
  const auto sdpa_gc = estimate(llama31_8b(), c)->peak;
  CHECK(sdpa < eager);
  CHECK(sdpa_gc < sdpa);
}

TEST_CASE("engine errors name the problem and suggest a fix") {
  TrainingConfig c = cfg(1, 128);
  c.lora.enabled = true;
  c.lora.target_modules = {"q_prj"};
  auto e = estimate(llama31_8b(), c);
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().to_string() ==
        "LoRA target module 'q_prj' matches no Linear module of this llama model; did you mean 'q_proj'?");

  c = cfg(1, 128, DType::kBFloat16, Device::kCpu);
  c.attn = AttnImpl::kFlashAttention2;
  CHECK(estimate(llama31_8b(), c).error().to_string() ==
        "flash_attention_2 needs a CUDA device; use --attn-implementation eager or sdpa with --device cpu");

  c = cfg(1, 128, DType::kFloat32);
  c.attn = AttnImpl::kFlashAttention2;
  CHECK(estimate(llama31_8b(), c).error().to_string() ==
        "flash_attention_2 runs in fp16/bf16 only; load the model with --torch-dtype bfloat16 or train with --bf16");

  c = cfg(1, 128);
  c.quant.load_in_4bit = true;
  CHECK(estimate(llama31_8b(), c).error().to_string() ==
        "quantized weights cannot be trained in full; add --use-peft (QLoRA trains LoRA adapters on top of the "
        "quantized model)");

  c = cfg(1, 128);
  c.optim.args["momentun"] = "0.9";
  c.optim.kind = OptimizerKind::kSgd;
  CHECK(estimate(llama31_8b(), c).error().to_string() ==
        "--optim-args: 'momentun' is not an argument of sgd; did you mean 'momentum'?");

  c = cfg(0, 128);
  CHECK(estimate(llama31_8b(), c).error().to_string() == "batch = 0 is out of range (1 to 1048576)");
  c = cfg(1, 1 << 25);
  CHECK(estimate(llama31_8b(), c).error().to_string() == "seq-len = 33554432 is out of range (1 to 16777216)");
}

TEST_CASE("absurd sizes report overflow instead of wrapping") {
  ModelSpec m = llama31_8b();
  m.num_layers = 4000;
  TrainingConfig c = cfg(1 << 20, 1 << 24);
  c.attn = AttnImpl::kEager;
  auto e = estimate(m, c);
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().code == ErrorCode::kOverflow);
}

TEST_CASE("CUDA: the cuBLAS workspaces are inside the peak, the context outside; the CPU has neither") {
  // Measured on an H100 (tests/data/measurements/cuda_h100.json): the first matmul allocates a
  // 32 MiB workspace through the caching allocator, one per thread (forward and autograd).
  const auto cuda = estimate(toy_llama(), cfg(2, 128));
  REQUIRE(cuda.has_value());
  require_consistent(*cuda);
  CHECK(component(*cuda, "cublas_workspace") == 64LL << 20);
  REQUIRE(cuda->overhead.size() == 1);
  CHECK(cuda->overhead[0].name == "cuda_context");
  CHECK(cuda->overhead[0].bytes == Bytes::mib(768));
  // reserved: the caching allocator replayed over the step (docs/formulas.md#the-caching-allocator),
  // whole 2 MiB segments above the peak; the 50 H100 measurements check its size (ctest
  // accuracy_reserved).
  const std::int64_t seg = 2LL << 20;
  CHECK(cuda->reserved.count() % seg == 0);
  CHECK(cuda->reserved >= cuda->peak);
  CHECK(std::count_if(cuda->assumptions.begin(), cuda->assumptions.end(), [](const std::string& a) {
          return a.rfind("reserved: the caching allocator replayed over the step's", 0) == 0;
        }) == 1);
  CHECK(cuda->total == cuda->reserved + Bytes::mib(768));

  const auto cpu = estimate(toy_llama(), cfg(2, 128, DType::kBFloat16, Device::kCpu));
  REQUIRE(cpu.has_value());
  CHECK(component(*cpu, "cublas_workspace") == 0);
  CHECK(cpu->overhead.empty());
  CHECK(cpu->total == cpu->peak);
}

TEST_CASE("SDPA keeps grouped K/V unexpanded (enable_gqa) and its output needs no copy") {
  // transformers' sdpa_attention_forward passes enable_gqa=True when there is no mask, so the
  // kernel saves k and v with the KV heads only. Going from 2 to 4 KV heads (toy: 4 layers,
  // head_dim 64, hidden 256) adds, at the end of the forward: the k/v projection weights,
  // 4 x 2 x 256 x 128 x 2 B = 524,288, and the saved k and v, 4 x 2 x (2 x 128 tokens) x 128 x 2 B
  // = 524,288. With repeat_kv the saved k/v would already have 4 heads and only the weights would
  // differ.
  TrainingConfig c = cfg(2, 128);
  c.optim.kind = OptimizerKind::kSgd;
  c.attn = AttnImpl::kSdpa;
  ModelSpec gqa = toy_llama();
  ModelSpec mha = toy_llama();
  mha.num_kv_heads = 4;
  auto forward_peak = [&](const ModelSpec& m) {
    auto e = estimate(m, c);
    REQUIRE(e.has_value());
    for (const auto& p : e->phases)
      if (p.phase == Phase::kForward) return p.peak.count();
    FAIL("no forward phase");
    return std::int64_t{0};
  };
  CHECK(forward_peak(mha) - forward_peak(gqa) == 524'288 + 524'288);
}

TEST_CASE("LoRA on o_proj only: estimated (every layer simulated when the reduced timelines differ), linear in layers") {
  // A LoRA on o_proj, v_proj or down_proj alone once stopped every method with "internal:
  // reduced-model timelines do not align": one more middle layer reordered a free inside a layer's
  // backward. The estimator then simulates every layer. Each middle layer adds the same bytes, so
  // the exact peaks of 6, 7 and 8 layers step by the same amount.
  for (const char* target : {"o_proj", "v_proj", "down_proj"}) {
    INFO(target);
    std::vector<std::int64_t> peaks;
    for (int layers : {6, 7, 8}) {
      TrainingConfig c = cfg(2, 128);
      c.lora.enabled = true;
      c.lora.target_modules = {target};
      auto est = Estimator::create(toy_llama(layers), c);
      REQUIRE(est.has_value());
      auto e = est->at(2, 128);
      REQUIRE(e.has_value());
      require_consistent(*e);
      peaks.push_back(e->peak.count());
    }
    CHECK(peaks[1] > peaks[0]);
    CHECK(peaks[2] - peaks[1] == peaks[1] - peaks[0]);
  }
}

// TRL's Liger DPO loss in the step (docs/formulas.md#liger-dpo-grpo): the logit buffers are one
// chosen/rejected pair's, 2(s - 1) rows, whatever the batch; the eager loss holds all 2b(s - 1).
// toy_llama with a 64,000-token vocabulary so that the loss sets the forward's peak: at s = 65 a
// pair is 128 rows x 64,000 = 8,192,000 logits, 10 bytes each while the reference's are computed
// beside the policy's fp32 log-probs, plus the pair's cat copies (2 x 128 x 256 x 2) and labels
// (128 x 8) in the same category.
TEST_CASE("Liger DPO holds one pair's logits whatever the batch") {
  ModelSpec m = memplan::testing::toy_llama(4);
  m.vocab_size = 64000;
  TrainingConfig c;
  c.method = Method::kDpo;
  c.torch_dtype = DType::kBFloat16;
  c.seq_len = 65;
  c.loss_kernel = LossKernel::kLiger;
  auto est = Estimator::create(m, c);
  REQUIRE(est);
  for (const std::int64_t b : {1, 2, 4}) {
    INFO("b = " << b);
    auto fwd = est->at_phase(b, 65, Phase::kForward);
    REQUIRE(fwd);
    require_consistent(*fwd);
    CHECK(component(*fwd, "logits_and_loss") == 8'192'000LL * 10 + 2 * 128 * 256 * 2 + 128 * 8);
  }
  // The eager loss at b = 4: the policy's 4 x 2 x 64 x 64,000 bf16 logits alone are 65.5 MB.
  c.loss_kernel = LossKernel::kEager;
  auto eager = Estimator::create(m, c);
  REQUIRE(eager);
  auto eager_fwd = eager->at_phase(4, 65, Phase::kForward);
  REQUIRE(eager_fwd);
  CHECK(component(*eager_fwd, "logits_and_loss") > 4LL * 2 * 64 * 64000 * 2);
  auto liger_fwd = est->at_phase(4, 65, Phase::kForward);
  REQUIRE(liger_fwd);
  CHECK(liger_fwd->peak < eager_fwd->peak);
  CHECK(liger_fwd->warnings.empty());  // modelled: no "estimated as eager" warning
}

TEST_CASE("every-N checkpointing extrapolates exactly and is refused without checkpointing") {
  // docs/formulas.md#every-n-checkpointing: the reduced models repeat whole periods of N layers;
  // simulating all 10 layers gives the same peaks.
  const ModelSpec m = toy_llama(10);
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.gradient_checkpointing = true;
  c.checkpoint_reentrant = false;
  for (const int n : {2, 3}) {
    INFO("every " << n);
    c.checkpoint_every = n;
    memplan::testing::same_as_every_layer(m, c, {{1, 64}, {2, 128}});
  }
  c.gradient_checkpointing = false;
  auto e = Estimator::create(m, c);
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().message == "checkpoint-every checkpoints every N-th layer: it needs gradient checkpointing");
}

TEST_CASE("a loss on 16-bit logits holds 6 bytes per logit instead of the fp32 upcast's") {
  // docs/formulas.md#loss-dtype: without .float() the log-probs log_softmax saves are bf16, and
  // in backward NLL's and log_softmax's gradients are bf16 too: 3 x 2 bytes per logit where the
  // upcast holds the fp32 copy's 4 + 4 saved + 4 + 4 gradients. The difference between the two
  // estimates is therefore at least (12 - 6) bytes per logit, b * s * V = 2 * 64 * 8000.
  const ModelSpec m = toy_llama(4);
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  auto up = Estimator::create(m, c);
  c.loss_upcast = false;
  auto own = Estimator::create(m, c);
  REQUIRE(up.has_value());
  REQUIRE(own.has_value());
  // b = 8, s = 512: 32.8M logits, whose 12 bytes each (393 MB) dwarf the toy's weights and
  // optimizer step (its 7M bf16 parameters: under 100 MB), so both peaks are at the loss.
  const std::int64_t logits = 8 * 512 * 8000;
  CHECK(up->peak_bytes(8, 512)->count() - own->peak_bytes(8, 512)->count() >= 6 * logits);
  // Under autocast cross_entropy upcasts anyway (log_softmax is on autocast's fp32 list).
  c.torch_dtype = DType::kFloat32;
  c.autocast = DType::kBFloat16;
  auto ac_own = Estimator::create(m, c);
  c.loss_upcast = true;
  auto ac_up = Estimator::create(m, c);
  CHECK(ac_own->peak_bytes(8, 512)->count() == ac_up->peak_bytes(8, 512)->count());
}

TEST_CASE("zero_grad(set_to_none=False) keeps every gradient at the peak, as a later accumulation micro-batch does") {
  // docs/formulas.md#zero-grad-set-to-none: from the second step on, every micro-batch runs with
  // every .grad allocated (zeroed) and adds its new gradients in place: the program of a later
  // micro-batch of gradient accumulation, whatever the accumulation steps.
  auto c = cfg(4, 512, DType::kFloat32);
  const auto freed = estimate(toy_llama(), c);
  c.zero_grad_keeps_grads = true;
  const auto kept = estimate(toy_llama(), c);
  auto acc = cfg(4, 512, DType::kFloat32);
  acc.grad_accum = 2;
  const auto accumulated = estimate(toy_llama(), acc);
  REQUIRE(freed.has_value());
  REQUIRE(kept.has_value());
  REQUIRE(accumulated.has_value());
  require_consistent(*kept);
  CHECK(kept->peak == accumulated->peak);
  // Whatever the phase of the peak, every gradient is live there: 4 bytes per trained fp32 parameter.
  CHECK(component(*kept, "gradients") == kept->params.trainable * 4);
  // No gradient exists in the first step's forward; in a later one all of them do.
  const auto forward = [](const Estimate& e) {
    for (const auto& p : e.phases)
      if (p.phase == Phase::kForward) return p.peak.count();
    return std::int64_t{-1};
  };
  CHECK(forward(*kept) - forward(*freed) == kept->params.trainable * 4);
}

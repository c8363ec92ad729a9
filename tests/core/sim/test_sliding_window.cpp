// Sliding-window attention (docs/formulas.md#sliding-window-attention): what SDPA holds once
// transformers materializes the sliding layers' mask (s >= sliding_window), the eager path's
// second mask, and the reduced models' period against simulating every layer.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "core/sim/program.hpp"
#include "memplan/engine.hpp"
#include "support/invariants.hpp"
#include "support/models.hpp"
#include "support/step_events.hpp"

using namespace memplan;
using namespace memplan::sim;
using memplan::testing::at;
using memplan::testing::at_backward_start;
using memplan::testing::bf16_program;

namespace {

// The toy Llama (hidden 256, 4 heads of 64, 2 KV heads) with Gemma 2's layout: even layers slide.
ModelSpec alternating(int layers, std::int64_t window) {
  ModelSpec m = memplan::testing::toy_llama(layers);
  m.sliding_window = window;
  for (int l = 1; l < layers; l += 2) m.full_attention_layers.push_back(l);
  return m;
}

// The same model with no window at all, and with every layer sliding (Mistral v0.1, Phi-3).
ModelSpec without_window(ModelSpec m) {
  m.sliding_window = 0;
  m.full_attention_layers.clear();
  return m;
}

ModelSpec all_sliding(ModelSpec m) {
  m.full_attention_layers.clear();
  return m;
}

TrainingConfig sdpa_config() {
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.device = Device::kCuda;
  c.attn = AttnImpl::kSdpa;
  return c;
}

}  // namespace

TEST_CASE("a materialized sliding mask: each sliding layer saves its dense mask and full-head K/V") {
  // 6 layers, 3 of them sliding. Without checkpointing, as backward begins each sliding layer's
  // memory-efficient SDPA node holds the (b, 1, s, s) bf16 mask SDPA converted from the bool one
  // (2 b s^2 bytes), and the repeat_kv copies of K and V: 4 heads instead of 2, 2 x b s x 2 x 64
  // x 2 more bytes. The (b, 1, s, s) bool mask itself is a local of the model's forward, gone.
  const ModelSpec m = alternating(6, 64);
  ProgramSpec plain = bf16_program(m);
  ProgramSpec masked = plain;
  masked.sdpa_sliding_mask = true;
  const CatVec p = at_backward_start(run_step(plain));
  const CatVec q = at_backward_start(run_step(masked));
  for (const auto& [b, s] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 64}, {2, 128}, {3, 1000}}) {
    CHECK(at(q, Cat::kInputs, b, s) - at(p, Cat::kInputs, b, s) == 3 * 2 * b * s * s);
    CHECK(at(q, Cat::kActivations, b, s) - at(p, Cat::kActivations, b, s) == 3 * 2 * b * s * 2 * 64 * 2);
    CHECK(at(q, Cat::kLogits, b, s) == at(p, Cat::kLogits, b, s));
  }
  // Every layer sliding (Mistral v0.1, Phi-3): all six.
  ProgramSpec all = bf16_program(all_sliding(m));
  all.sdpa_sliding_mask = true;
  const CatVec a = at_backward_start(run_step(all));
  CHECK(at(a, Cat::kInputs, 2, 128) - at(p, Cat::kInputs, 2, 128) == 6 * 2 * 2 * 128 * 128);
  // Gemma 3 with images: the full layers get a mask too.
  ProgramSpec both = masked;
  both.sdpa_full_mask = true;
  const CatVec f = at_backward_start(run_step(both));
  CHECK(at(f, Cat::kInputs, 2, 128) - at(p, Cat::kInputs, 2, 128) == 6 * 2 * 2 * 128 * 128);
  CHECK(at(f, Cat::kActivations, 2, 128) - at(p, Cat::kActivations, 2, 128) == 6 * 2 * 2 * 128 * 2 * 64 * 2);
}

TEST_CASE("with checkpointing the bool mask is held to the end, the dense copies only while a layer recomputes") {
  // Checkpointed layers hold the mask they were called with until their recomputation: the
  // (b, 1, s, s) bool mask (b s^2 bytes) is alive as backward begins; no layer's saved tensors are.
  const ModelSpec m = alternating(6, 64);
  ProgramSpec plain = bf16_program(m);
  plain.gradient_checkpointing = true;
  plain.checkpoint_reentrant = false;
  ProgramSpec masked = plain;
  masked.sdpa_sliding_mask = true;
  const CatVec p = at_backward_start(run_step(plain));
  const CatVec q = at_backward_start(run_step(masked));
  CHECK(at(q, Cat::kInputs, 2, 128) - at(p, Cat::kInputs, 2, 128) == 2 * 128 * 128);
  CHECK(at(q, Cat::kActivations, 2, 128) == at(p, Cat::kActivations, 2, 128));
}

TEST_CASE("reentrant checkpointing keeps the masks it was called with until backward has finished") {
  // The masks and rotary tables reach a reentrant checkpoint through the functools.partial stored
  // in ctx.run_function, which lives with the graph. At the run's last event (the embedding's
  // backward, after every layer) both eager masks (bf16: 2 b s^2 bytes each) and cos/sin (s x 64,
  // bf16, each) are still alive; non-reentrant checkpointing has freed them with the regions.
  const auto at_end = [](bool reentrant) {
    ProgramSpec sp = bf16_program(alternating(6, 64));
    sp.attn = AttnImpl::kEager;
    sp.full_finetune = true;
    sp.gradient_checkpointing = true;
    sp.checkpoint_reentrant = reentrant;
    const ProgramResult r = run_step(sp);
    return r.cats.at(r.events.back(), Cat::kInputs).eval(2, 128);
  };
  CHECK(at_end(true) - at_end(false) == 2 * (2 * 2 * 128 * 128) + 2 * (128 * 64 * 2));
}

TEST_CASE("eager Gemma 2/3: a second (b, 1, s, s) mask, for the sliding layers") {
  // causal_mask_mapping holds a full and a sliding mask, each in the activation dtype; with
  // checkpointing both are held until backward. Every layer sliding (one mask function): one.
  const ModelSpec m = alternating(6, 64);
  const auto eager_ckpt = [](const ModelSpec& model) {
    ProgramSpec sp = bf16_program(model);
    sp.attn = AttnImpl::kEager;
    sp.gradient_checkpointing = true;
    sp.checkpoint_reentrant = false;
    return at_backward_start(run_step(sp));
  };
  const CatVec two = eager_ckpt(m), one = eager_ckpt(without_window(m)), all = eager_ckpt(all_sliding(m));
  CHECK(at(two, Cat::kInputs, 2, 128) - at(one, Cat::kInputs, 2, 128) == 2 * 128 * 128 * 2);
  CHECK(at(all, Cat::kInputs, 2, 128) == at(one, Cat::kInputs, 2, 128));
}

TEST_CASE("the engine switches to the masked program at s = sliding_window, not before") {
  // transformers skips the sliding mask only while kv_length < sliding_window (strict).
  const ModelSpec m = alternating(6, 64);
  const ModelSpec none = without_window(m);
  const TrainingConfig c = sdpa_config();
  auto sliding = Estimator::create(m, c);
  auto plain = Estimator::create(none, c);
  REQUIRE(sliding.has_value());
  REQUIRE(plain.has_value());
  // The toy's step peaks at the optimizer step; backward shows the masks.
  const auto backward = [](const Estimator& e, std::int64_t b, std::int64_t s) {
    return e.at_phase(b, s, Phase::kBackward)->peak.count();
  };
  for (const std::int64_t b : {2, 4}) {
    CHECK(backward(*sliding, b, 63) == backward(*plain, b, 63));
    CHECK(backward(*sliding, b, 64) > backward(*plain, b, 64));
    CHECK(sliding->peak_bytes(b, 63)->count() == plain->peak_bytes(b, 63)->count());
  }
  // flash_attention_2 passes the window to the kernel: no mask at any length.
  TrainingConfig fa = c;
  fa.attn = AttnImpl::kFlashAttention2;
  CHECK(backward(*Estimator::create(m, fa), 2, 4096) == backward(*Estimator::create(none, fa), 2, 4096));
}

TEST_CASE("sliding layers: one repeating period extrapolated gives every layer's simulation") {
  // Gemma 2's alternation (12 layers: layer 0, then units [1, 3) ... [9, 11), then 11) and Gemma 3's
  // five-to-one (40 layers: 0-4, units of six from 5 up to 35, then 35-39), against simulating
  // every layer, on both sides of the window and with accumulation.
  ModelSpec gemma3 = memplan::testing::toy_llama(40);
  gemma3.sliding_window = 64;
  for (int l = 5; l < 40; l += 6) gemma3.full_attention_layers.push_back(l);
  for (const ModelSpec& m : {alternating(12, 64), gemma3})
    for (const bool lora : {false, true})
      for (const bool gc : {false, true})
        for (const bool reentrant : {false, true})
        for (const bool eager : {false, true}) {
          if (!gc && reentrant) continue;
          INFO("layers " << m.num_layers << " lora " << lora << " checkpointing " << gc << " reentrant " << reentrant << " eager " << eager);
          TrainingConfig c = sdpa_config();
          if (eager) c.attn = AttnImpl::kEager;
          c.lora.enabled = lora;
          c.lora.r = 8;
          c.gradient_checkpointing = gc;
          c.checkpoint_reentrant = reentrant;
          c.grad_accum = 2;
          memplan::testing::same_as_every_layer(m, c, {{1, 16}, {2, 63}, {1, 64}, {3, 300}});
        }
}

TEST_CASE("bidirectional Gemma 3 (EmbeddingGemma): every layer's mask at every length, periods extrapolated") {
  // use_bidirectional_attention gives create_causal_mask an or_mask_function, so transformers
  // never skips the mask: under SDPA the engine runs the every-layer-masked program at s = 16,
  // far below the 64-token window, and both programs agree with simulating every layer (the full
  // mask held by the full layers' checkpoints until the lowest one's backward).
  ModelSpec m = memplan::testing::toy_llama(20);
  m.sliding_window = 64;
  for (int l = 5; l < 20; l += 6) m.full_attention_layers.push_back(l);
  ModelSpec bidi = m;
  bidi.bidirectional = true;
  TrainingConfig c = sdpa_config();
  auto causal = Estimator::create(m, c);
  auto both = Estimator::create(bidi, c);
  REQUIRE(causal.has_value());
  REQUIRE(both.has_value());
  // At the forward's peak (the loss, after the model's forward has returned) without
  // checkpointing: the two (b, 1, s, s) bool masks were forward locals, gone; each of the 20
  // layers keeps SDPA's bf16 copy of its mask (2 b s^2) and K/V repeated to 4 heads from 2
  // (2 x b s x 2 x 64 x 2 more bytes): 20 x (1,024 + 16,384) = 348,160 bytes at b = 2, s = 16.
  const auto fwd_c = causal->at_phase(2, 16, Phase::kForward);
  const auto fwd_b = both->at_phase(2, 16, Phase::kForward);
  REQUIRE(fwd_c.has_value());
  REQUIRE(fwd_b.has_value());
  const std::int64_t b = 2, s = 16;
  CHECK(fwd_b->peak.count() - fwd_c->peak.count() == 20 * (2 * b * s * s + 2 * b * s * 2 * 64 * 2));
  for (const bool gc : {false, true})
    for (const bool reentrant : {false, true}) {
      if (!gc && reentrant) continue;
      INFO("checkpointing " << gc << " reentrant " << reentrant);
      TrainingConfig g = c;
      g.gradient_checkpointing = gc;
      g.checkpoint_reentrant = reentrant;
      memplan::testing::same_as_every_layer(bidi, g, {{1, 16}, {2, 63}, {3, 300}});
    }
}

TEST_CASE("the programs past the window are built when first asked, and answer as ones built at create") {
  // An estimator simulates only the half of its program classes that its own sequence length
  // needs (docs/plan.md#speed); the other half is built by the first call that evaluates a
  // length there. Created below the window or past it, both answer alike everywhere, also when
  // the first calls past the window come from several threads at once.
  const ModelSpec m = alternating(12, 64);
  for (const bool eager : {false, true}) {
    TrainingConfig below = sdpa_config();
    below.gradient_checkpointing = true;
    below.grad_accum = 2;
    if (eager) below.attn = AttnImpl::kEager;  // also b = 1's own program (eager: no mask rule, one half)
    below.seq_len = 32;
    TrainingConfig past = below;
    past.seq_len = 128;
    auto a = Estimator::create(m, below);
    auto b = Estimator::create(m, past);
    auto racing = Estimator::create(m, below);
    REQUIRE(a.has_value());
    REQUIRE(b.has_value());
    REQUIRE(racing.has_value());
    const std::vector<std::pair<std::int64_t, std::int64_t>> points{{1, 16}, {2, 63}, {1, 64}, {3, 128}, {2, 300}};
    std::vector<std::int64_t> raced(4 * points.size());
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (std::size_t i = 0; i < points.size(); ++i) {
          const auto& [bb, ss] = points[(i + t) % points.size()];
          raced[t * points.size() + (i + t) % points.size()] = racing->peak_bytes(bb, ss, 2)->count();
        }
      });
    for (auto& t : threads) t.join();
    for (std::size_t i = 0; i < points.size(); ++i) {
      const auto [bb, ss] = points[i];
      INFO("eager " << eager << " b " << bb << " s " << ss);
      const std::int64_t want = b->peak_bytes(bb, ss, 2)->count();
      CHECK(a->peak_bytes(bb, ss, 2)->count() == want);
      CHECK(a->at(bb, ss)->peak.count() == b->at(bb, ss)->peak.count());
      for (std::size_t t = 0; t < 4; ++t) CHECK(raced[t * points.size() + i] == want);
    }
  }
}

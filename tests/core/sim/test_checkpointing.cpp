// torch.utils.checkpoint as transformers calls it (docs/formulas.md#gradient-checkpointing):
// what each checkpointed layer keeps, and for how long.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/sim/ops.hpp"
#include "core/sim/program.hpp"
#include "support/models.hpp"

using namespace memplan;
using namespace memplan::sim;

namespace {

ProgramSpec checkpointed(int layers, bool reentrant) {
  ProgramSpec sp;
  sp.model = memplan::testing::toy_llama(layers);
  for (int l = 0; l < layers; ++l) sp.model_layers.push_back(l);
  sp.weight_dt = sp.embed_dt = sp.norm_dt = sp.compute_dt = DT::kBF16;
  sp.attn = AttnImpl::kSdpa;
  sp.ops.cuda = true;
  sp.ops.inplace_accumulation = true;
  sp.full_finetune = true;
  sp.gradient_checkpointing = true;
  sp.checkpoint_reentrant = reentrant;
  return sp;
}

// The checkpoint category at the run's last event: the embedding's backward, after every layer.
std::int64_t checkpoints_at_end(const ProgramResult& r) {
  REQUIRE(!r.events.empty());
  return r.cats.at(r.events.back(), Cat::kCheckpoints).eval(2, 128);
}

}  // namespace

TEST_CASE("reentrant checkpointing keeps every layer's RNG state until backward has finished") {
  // CheckpointFunction.forward stores torch.get_rng_state() (5,056 bytes on the CPU generator) in
  // ctx.fwd_cpu_state: an attribute of the backward node, which the graph keeps until backward
  // returns, not a saved tensor released when the node runs. When the embedding's gradient is
  // made, after every layer, all of them are still alive. Non-reentrant checkpointing keeps its
  // RNG state in the region's closure, freed once the region's nodes have run: none is left.
  for (const int layers : {4, 5}) {
    INFO("layers " << layers);
    CHECK(checkpoints_at_end(run_step(checkpointed(layers, true))) == layers * 5056);
    CHECK(checkpoints_at_end(run_step(checkpointed(layers, false))) == 0);
  }
}

namespace {

// Live bytes when the head begins (the first event of kSegHead): every layer has returned, so
// what is live is the weights, the inputs and what each layer left saved for its backward.
std::int64_t at_head(const ProgramResult& r) {
  for (const auto& e : r.events)
    if (e.segment == kSegHead) return e.total.eval(2, 128);
  FAIL("no head event");
  return 0;
}

}  // namespace

TEST_CASE("every-N checkpointing: a layer keeps its input or everything, linearly in the count") {
  // docs/formulas.md#every-n-checkpointing. torchtitan's selective_ac_option N wraps the blocks
  // whose 1-based count is a multiple of N. Each layer leaves either what a plain layer saves (A)
  // or a checkpoint's input (C), independently of its neighbours (a layer's input is saved by that
  // layer's first norm or by its checkpoint, never by the layer before). So at the head, with 4
  // layers and X the rest: none = 4A + X, every 1 = 4C + X, every 2 (layers 1 and 3) = 2A + 2C + X,
  // every 4 (layer 3 only) = 3A + C + X.
  ProgramSpec sp = checkpointed(4, false);
  const std::int64_t every1 = at_head(run_step(sp));
  sp.checkpoint_every = 2;
  const std::int64_t every2 = at_head(run_step(sp));
  sp.checkpoint_every = 4;
  const std::int64_t every4 = at_head(run_step(sp));
  sp.gradient_checkpointing = false;
  sp.checkpoint_every = 1;
  const std::int64_t none = at_head(run_step(sp));
  CHECK(every1 < every2);
  CHECK(every2 < none);
  // Linear up to a term where a checkpointed layer follows a plain one (every 2: two such
  // boundaries, every 4: one): the step keeps 128 bytes per token more activations there
  // (32,768 bytes at b = 2, s = 128), not yet traced to an op; bounded here, not derived.
  const std::int64_t tables = 2 * 128 * 64 * 2;
  CHECK(2 * every2 - (every1 + none) >= 0);
  CHECK(2 * every2 - (every1 + none) <= 2 * 2 * tables);
  CHECK(4 * every4 - (3 * none + every1) >= 0);
  CHECK(4 * every4 - (3 * none + every1) <= 4 * tables);
}

// A region of two ops on x (400 B, requires grad) and w (40 B): one under no_grad whose node
// would save its own 4,000 B output, then one saving a 1,000 B tensor (DeepSeek-V3.2's indexer
// inside a layer is the case). Non-reentrant checkpointing saves nothing in the forward and
// recomputes the region at the first backward node; the no_grad op saves nothing then either,
// so the second op gets back its own 1,000 B. Inside its backward: w 40 + x 400 + the output 4 +
// the root gradient 4 + the recomputed 1,000 + the two gradients 40 + 400 = 1,888 B (4,888 B if
// the no_grad op's output were handed to it instead).
TEST_CASE("a no_grad op inside a non-reentrant checkpoint region saves nothing when recomputed") {
  Graph g;
  const int w = g.param(Poly::constant(10), DT::kF32, Cat::kWeights, true);
  const int x = g.make(Poly::constant(100), DT::kF32, Cat::kActivations, true);
  Poly inside;
  const auto body = [&]() {
    g.set_grad_enabled(false);
    const int t = g.make(Poly::constant(1000), DT::kF32, Cat::kActivations);
    g.node({x}, {t}, {t}, [](Bwd&) {});
    g.set_grad_enabled(true);
    const int s = g.make(Poly::constant(250), DT::kF32, Cat::kActivations);
    const int y = g.make(Poly::constant(1), DT::kF32, Cat::kActivations);
    g.node({x, w}, {y}, {s}, [&inside, x, w](Bwd& c) {
      const int gw = c.like(w);
      const int gx = c.like(x);
      inside = c.graph().live_total();
      c.give(w, gw);
      c.give(x, gx);
    });
    g.drop(s);
    g.drop(t);
    return y;
  };
  g.begin_checkpoint_region([&]() { g.drop(body()); }, {x});
  const int y = body();
  g.end_checkpoint_region();
  g.backward(y);
  CHECK(inside == Poly::constant(1888));
  g.drop(g.take_grad(x));  // x's gradient, for whoever made x
  g.drop(y);
  g.drop(x);
  g.free_param_grads();
  g.drop(w);
  CHECK(g.live_total() == Poly{});
}

TEST_CASE("per-op selective checkpointing keeps every other mm's output and SDPA's, and nothing after backward") {
  // docs/formulas.md#per-op-selective-checkpointing. torchtitan's policy under
  // create_selective_checkpoint_contexts: in each checkpointed layer's forward the outputs of the
  // 1st, 3rd, 5th and 7th aten.mm (HF Llama's call order q, k, v, o, gate, up, down: q_proj,
  // v_proj, gate_proj, down_proj) and of the flash / memory-efficient SDPA kernel (output and fp32
  // logsumexp) are stored as detached aliases; the rest is recomputed. toy_llama in bf16 at b = 2,
  // s = 128 (256 tokens): q 256 x 2 B, v 2 x 64 x 2 B, gate 688 x 2 B, down 256 x 2 B per token
  // (2,656 B), SDPA's output 256 x 2 B and logsumexp 4 heads x 4 B (528 B): 3,184 B per token per
  // layer beyond full checkpointing when the head starts, 815,104 B a layer, 3,260,416 B for four.
  ProgramSpec sp = checkpointed(4, false);
  const ProgramResult full = run_step(sp);
  sp.checkpoint_op_policy = true;
  sp.sac_save_attention = true;
  const ProgramResult op = run_step(sp);
  CHECK(at_head(op) - at_head(full) == 4 * 256 * 3184);
  // CPU attention (SDPA's CPU kernel, eager, flash-attn's own op): not on the list, mm outputs only.
  sp.sac_save_attention = false;
  const ProgramResult mm_only = run_step(sp);
  CHECK(at_head(mm_only) - at_head(full) == 4 * 256 * 2656);
  // The recomputation pops each stored output (torch's storage.pop(0)) and the graph frees it with
  // the layer's saved tensors: after backward the step holds what full checkpointing holds.
  CHECK(op.events.back().total.eval(2, 128) == full.events.back().total.eval(2, 128));
  CHECK(mm_only.events.back().total.eval(2, 128) == full.events.back().total.eval(2, 128));
}

TEST_CASE("a stored op output is taken back by the recomputation, not allocated again") {
  // Graph::sac_store / sac_take as create_selective_checkpoint_contexts uses them: a region on x
  // (400 B, requires grad) with two mms by Ops: y1 = x W1 (1,000 B, the 1st mm: stored) and
  // y2 = y1 W2 (200 B, the 2nd: recomputed). After the forward the region keeps x (its hold), y1
  // (the storage) and returns y2: W1 40 + W2 40 + x 400 + y1 1,000 + y2 200 = 1,680 B. The
  // recomputation allocates no second y1: inside the second mm's backward (the first to run) live
  // are the 1,680 B, y2's gradient 200 B (the root) and W2's gradient 40 B and y1's 1,000 B, and
  // nothing else (2,920 B).
  Graph g;
  Ops ops(g, OpsBehaviour{});
  const int w1 = g.param(Poly::constant(10), DT::kF32, Cat::kWeights, true);
  const int w2 = g.param(Poly::constant(10), DT::kF32, Cat::kWeights, true);
  const int x = g.make(Poly::constant(100), DT::kF32, Cat::kActivations, true);
  const auto body = [&](Ops::SacMode mode) {
    ops.sac = Ops::Sac{mode, 0, false};
    const int y1 = ops.linear(x, w1, -1, Poly::constant(250));
    const int y2 = ops.linear(y1, w2, -1, Poly::constant(50));
    g.drop(y1);
    ops.sac = Ops::Sac{};
    return y2;
  };
  g.begin_checkpoint_region([&]() { g.drop(body(Ops::SacMode::kCached)); }, {x});
  const int y2 = body(Ops::SacMode::kCaching);
  g.end_checkpoint_region();
  CHECK(g.live_total().eval(1, 1) == 40 + 40 + 400 + 1000 + 200);
  const int root = g.make(Poly::constant(50), DT::kF32, Cat::kActivationGrads);
  std::int64_t max_live = 0;
  g.backward_from(y2, root, 0);
  for (const auto& e : g.events()) max_live = std::max(max_live, e.total.eval(1, 1));
  CHECK(max_live == 1680 + 200 + 40 + 1000);
  g.drop(y2);
  g.drop(g.take_grad(x));  // x's gradient (400 B), as a caller would take it
  g.drop(x);
  // Left: the weights and their .grad; y1 went with the second mm's saved tensors.
  CHECK(g.live_total().eval(1, 1) == 40 + 40 + 40 + 40);
}

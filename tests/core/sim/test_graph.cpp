// The Graph's timeline: one event per run of allocations, and the categories of every event as
// they were at that moment, kept compactly (EventCats) but read back exactly.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>

#include "core/sim/graph.hpp"
#include "core/sim/ops.hpp"

using namespace memplan::sim;

TEST_CASE("events record the categories as they were, coefficients added as they appear") {
  Graph g;
  const int w = g.make(Poly::constant(1000), DT::kBF16, Cat::kWeights);   // 2,000 B
  const int a = g.make(Poly::mono(kBS, 64), DT::kF32, Cat::kActivations);  // 256 b s
  g.drop(a);                                                               // event 1: both
  const int m = g.make(Poly::mono(kBSS, 1), DT::kBool, Cat::kInputs);      // b s^2
  const int x = g.make(Poly::mono(kS, 8), DT::kF32, Cat::kActivations);    // + 32 s, merged into event 2
  g.retag(x, Cat::kCheckpoints);                                           // event 2 written first
  const int y = g.make(Poly::constant(24), DT::kI64, Cat::kInputs);        // event 3
  const auto& events = g.events();
  const EventCats& cats = g.event_cats();
  REQUIRE(events.size() == 3);

  CHECK(events[0].total == Poly::constant(2000) + Poly::mono(kBS, 256));
  CHECK(cats.at(events[0], Cat::kWeights) == Poly::constant(2000));
  CHECK(cats.at(events[0], Cat::kActivations) == Poly::mono(kBS, 256));
  CHECK(cats.at(events[0], Cat::kInputs) == Poly{});  // recorded only from later events on

  CHECK(cats.at(events[1], Cat::kActivations) == Poly::mono(kS, 32));  // the first activation is gone
  CHECK(cats.at(events[1], Cat::kInputs) == Poly::mono(kBSS, 1));
  CHECK(events[1].total == Poly::constant(2000) + Poly::mono(kBSS, 1) + Poly::mono(kS, 32));

  const CatVec last = cats.all(events[2]);
  CHECK(last[static_cast<std::size_t>(Cat::kCheckpoints)] == Poly::mono(kS, 32));
  CHECK(last[static_cast<std::size_t>(Cat::kActivations)] == Poly{});
  CHECK(last[static_cast<std::size_t>(Cat::kInputs)] == Poly::mono(kBSS, 1) + Poly::constant(192));
  Poly sum;
  for (const auto& p : last) sum += p;
  CHECK(sum == events[2].total);
  for (int t : {w, m, x, y}) g.drop(t);
}

// A rule standing for several autograd nodes (Qwen's chunked vision attention) frees what the
// first of them saved, and the gradient it consumed, before the next allocates (Bwd::release,
// Bwd::release_grad): the rule's second temporary then finds 4,000 B (the saved tensor) and 4 B
// (the root's scalar gradient) gone. Each is dropped once: nothing is left when the step ends.
TEST_CASE("a backward rule releasing a saved tensor and its incoming gradient early") {
  std::array<Poly, 2> peak;
  for (const bool early : {false, true}) {
    Graph g;
    const int w = g.param(Poly::constant(10), DT::kF32, Cat::kWeights, true);  // 40 B
    const int saved = g.make(Poly::constant(1000), DT::kF32, Cat::kActivations);  // 4,000 B
    const int y = g.make(Poly::constant(1), DT::kF32, Cat::kActivations);  // the loss, 4 B
    g.node({w}, {y}, {saved}, [saved, w, early](Bwd& c) {
      const int t1 = c.temp(Poly::constant(2500), DT::kF32);  // 10,000 B
      if (early) {
        c.release(saved);
        c.release(saved);  // held once: a second release finds nothing
        c.release_grad(0);
      }
      const int t2 = c.temp(Poly::constant(2500), DT::kF32);  // 10,000 B
      c.drop(t1);
      c.drop(t2);
      c.give(w, c.temp(Poly::constant(10), DT::kF32));
    });
    g.drop(saved);
    g.backward(y);
    g.drop(y);
    Poly most;  // the step's peak (the forward state is 4,044 B)
    for (const Event& e : g.events())
      if (e.total.eval(1, 1) > most.eval(1, 1)) most = e.total;
    peak[early ? 1 : 0] = most;
    g.free_param_grads();
    g.drop(w);
    CHECK(g.live_total() == Poly{});
    for (const auto& t : g.tensors()) CHECK_FALSE(t.alive);
  }
  // w 40 + loss 4 + its gradient 4 + saved 4,000 + t1 10,000 + t2 10,000
  CHECK(peak[0] == Poly::constant(24048));
  CHECK(peak[1] == Poly::constant(24048 - 4000 - 4));
}

// A ViT's patch embedding is a convolution (stride = kernel) computed as one GEMM: its backward
// saves the input and the weight whichever needs a gradient. Under autocast, with pixels that need
// none and a trained fp32 weight, the weight's bf16 cast then outlives the autocast region (held
// for backward: 1,000 x 2 bytes); a Linear there keeps only its input.
TEST_CASE("a patch convolution keeps its weight's autocast cast for backward, a Linear does not") {
  for (const bool conv : {false, true}) {
    INFO((conv ? "patch_conv" : "linear"));
    Graph g;
    Ops ops(g, OpsBehaviour{});
    const int w = g.param(Poly::constant(1000), DT::kF32, Cat::kWeights, true);   // 4,000 B
    const int px = g.make(Poly::constant(500), DT::kF32, Cat::kInputs);          // 2,000 B
    ops.enter_autocast(DT::kBF16);
    const int y = conv ? ops.patch_conv(px, w, -1, Poly::constant(100)) : ops.linear(px, w, -1, Poly::constant(100));
    ops.exit_autocast();
    g.drop(px);
    // The weight 4,000 + the output 200 (bf16) + the input's bf16 cast 1,000 (saved for the
    // weight's gradient) + with the convolution the weight's bf16 cast 2,000.
    CHECK(g.live_total() == Poly::constant(4000 + 200 + 1000 + (conv ? 2000 : 0)));
    g.drop(y);
    g.release_graph();
    g.drop(w);
    CHECK(g.live_total() == Poly{});
  }
}

// Fused 3-D expert Parameters read per expert (MiniMaxM2Experts, DeepseekV32Experts: param[e]):
// each expert's SelectBackward returns a zero tensor of the whole Parameter, and the Parameter's
// input buffer sums them before AccumulateGrad. Counted by hand for a 1,000-element fp32
// Parameter (4,000 B) read by a stand-in op whose backward gives the view a gradient:
// torch 1.13 (out of place): the incoming 4,000 B slice gradient is released, then the running
// sum, the next expert's zeros and their sum are live at once: 12,000 B above the Parameter and
// the 4 B loss (the loss's gradient died with the stand-in's backward); torch 2.x (in place):
// 8,000 B. Either way .grad ends as one 4,000 B tensor.
TEST_CASE("expert Parameters indexed per expert: one whole-Parameter zero tensor per expert, summed") {
  for (const bool inplace : {false, true}) {
    INFO("in place " << inplace);
    Graph g;
    g.set_inplace_accumulation(inplace);
    Ops ops(g, OpsBehaviour{});
    const int w = g.param(Poly::constant(1000), DT::kF32, Cat::kWeights, true);
    const Ids views = ops.expert_parameter_views({w}, 8);
    REQUIRE(views.size() == 1);
    const int y = g.make(Poly::constant(1), DT::kF32, Cat::kActivations);  // the loss, 4 B
    const int v = views[0];
    g.node({v}, {y}, {}, [v](Bwd& c) { c.give(v, c.like(v)); });
    g.drop(v);
    const std::size_t forward_events = g.events().size();
    g.backward(y);
    g.drop(y);
    std::int64_t most = 0;
    for (std::size_t i = forward_events; i < g.events().size(); ++i)
      most = std::max(most, g.events()[i].total.eval(1, 1));
    CHECK(most == 4000 + 4 + (inplace ? 8000 : 12000));
    REQUIRE(g.at(w).grad >= 0);
    CHECK(g.at(g.at(w).grad).numel == Poly::constant(1000));
    g.free_param_grads();
    g.drop(w);
    CHECK(g.live_total() == Poly{});
  }
}

// gate_proj and up_proj standing for one gate_up_proj Parameter: their zero tensors are one
// tensor of both sizes (600 + 400 elements, 4,000 B fp32), so the out-of-place sum peaks at
// 12,000 B above the two Parameters, as for one 1,000-element Parameter; each gets its own grad.
TEST_CASE("expert Parameters split in two accumulate as one") {
  Graph g;
  Ops ops(g, OpsBehaviour{});
  const int gate = g.param(Poly::constant(600), DT::kF32, Cat::kWeights, true);
  const int up = g.param(Poly::constant(400), DT::kF32, Cat::kWeights, true);
  const Ids views = ops.expert_parameter_views({gate, up}, 8);
  REQUIRE(views.size() == 2);
  const int y = g.make(Poly::constant(1), DT::kF32, Cat::kActivations);
  const int a = views[0], b = views[1];
  g.node({a, b}, {y}, {}, [a, b](Bwd& c) {
    c.give(a, c.like(a));
    c.give(b, c.like(b));
  });
  g.drop(a);
  g.drop(b);
  const std::size_t forward_events = g.events().size();
  g.backward(y);
  g.drop(y);
  std::int64_t most = 0;
  for (std::size_t i = forward_events; i < g.events().size(); ++i)
    most = std::max(most, g.events()[i].total.eval(1, 1));
  CHECK(most == 4000 + 4 + 12000);
  CHECK(g.at(g.at(gate).grad).numel == Poly::constant(600));
  CHECK(g.at(g.at(up).grad).numel == Poly::constant(400));
  g.free_param_grads();
  g.drop(gate);
  g.drop(up);
  CHECK(g.live_total() == Poly{});
}

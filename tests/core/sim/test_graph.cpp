// The Graph's timeline: one event per run of allocations, and the categories of every event as
// they were at that moment, kept compactly (EventCats) but read back exactly.
#include <catch2/catch.hpp>

#include "core/sim/graph.hpp"

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

// The caching-allocator model against PyTorch's rules (c10/cuda/CUDACachingAllocator.cpp). Every
// expected figure is derived by hand from those rules in the comment beside it.
#include <catch2/catch.hpp>

#include "core/sim/caching_allocator.hpp"
#include "core/sim/graph.hpp"
#include "core/sim/program.hpp"

using memplan::sim::AllocTrace;
using memplan::sim::CachingAllocator;
using memplan::sim::CachingAllocatorSettings;
using memplan::sim::Mono;
using memplan::sim::Poly;

namespace {
constexpr std::int64_t MiB = 1 << 20;
}

TEST_CASE("caching allocator: request and segment sizes (round_size, get_allocation_size)", "[allocator]") {
  CHECK(CachingAllocator::round_size(1) == 512);
  CHECK(CachingAllocator::round_size(512) == 512);
  CHECK(CachingAllocator::round_size(513) == 1024);
  CHECK(CachingAllocator::segment_size(512) == 2 * MiB);            // small pool: 2 MiB buffers
  CHECK(CachingAllocator::segment_size(MiB) == 2 * MiB);            // 1 MiB is still small
  CHECK(CachingAllocator::segment_size(MiB + 512) == 20 * MiB);     // 1-10 MiB: a 20 MiB buffer
  CHECK(CachingAllocator::segment_size(10 * MiB) == 10 * MiB);      // >= 10 MiB: rounded to 2 MiB
  CHECK(CachingAllocator::segment_size(11 * MiB + 1) == 12 * MiB);
}

TEST_CASE("caching allocator: small requests share 2 MiB segments", "[allocator]") {
  CachingAllocator a;
  for (int i = 0; i < 4; ++i) a.malloc(512 * 1024);  // 4 x 512 KiB fill one 2 MiB segment
  CHECK(a.reserved() == 2 * MiB);
  CHECK(a.allocated() == 2 * MiB);
  a.malloc(1);  // a fifth request needs a second segment
  CHECK(a.reserved() == 4 * MiB);
  CHECK(a.allocated() == 2 * MiB + 512);
  CHECK(a.segments() == 2);
}

TEST_CASE("caching allocator: 1-10 MiB requests split 20 MiB segments", "[allocator]") {
  CachingAllocator a;
  for (int i = 0; i < 6; ++i) a.malloc(3 * MiB);  // 18 MiB of one 20 MiB segment; 2 MiB left (> 1 MiB: split)
  CHECK(a.reserved() == 20 * MiB);
  a.malloc(3 * MiB);  // the 2 MiB remainder cannot hold it
  CHECK(a.reserved() == 40 * MiB);
  CHECK(a.allocated() == 21 * MiB);
}

TEST_CASE("caching allocator: a freed block too small for the next request is fragmentation", "[allocator]") {
  CachingAllocator a;
  const int x = a.malloc(100 * MiB);
  a.malloc(100 * MiB);
  a.free(x);
  a.malloc(150 * MiB);  // no cached block holds 150 MiB: a new segment, the freed 100 MiB stay reserved
  CHECK(a.allocated() == 250 * MiB);
  CHECK(a.reserved() == 350 * MiB);
  CHECK(a.peak_reserved() == 350 * MiB);
}

TEST_CASE("caching allocator: best fit, splitting and merging", "[allocator]") {
  CachingAllocator a;
  const int x = a.malloc(100 * MiB);
  a.free(x);
  const int y = a.malloc(60 * MiB);  // reuses the 100 MiB block, split: 40 MiB stay free
  CHECK(a.reserved() == 100 * MiB);
  CHECK(a.allocated() == 60 * MiB);
  a.malloc(50 * MiB);  // the 40 MiB remainder is too small: a new 50 MiB segment
  CHECK(a.reserved() == 150 * MiB);
  a.free(y);           // merges with the free 40 MiB remainder: one 100 MiB block again
  a.malloc(90 * MiB);  // fits the merged block, no new segment
  CHECK(a.reserved() == 150 * MiB);
}

TEST_CASE("caching allocator: a remainder of 1 MiB or less is not split off", "[allocator]") {
  CachingAllocator a;
  const int x = a.malloc(100 * MiB);
  a.free(x);
  a.malloc(99 * MiB + MiB / 2);  // 0.5 MiB would remain: the whole block is handed out
  CHECK(a.allocated() == 100 * MiB);  // max_memory_allocated counts the block's size
}

TEST_CASE("caching allocator: max_split_size_mb keeps oversize blocks whole", "[allocator]") {
  CachingAllocatorSettings s;
  s.max_split_size = 64 * MiB;
  CachingAllocator a(s);
  const int x = a.malloc(100 * MiB);
  a.free(x);
  a.malloc(10 * MiB);  // below max_split: an oversize block does not serve it
  CHECK(a.reserved() == 110 * MiB);
  a.malloc(90 * MiB);  // above max_split and within 20 MiB of the 100 MiB block: served whole
  CHECK(a.reserved() == 110 * MiB);
  CHECK(a.allocated() == 110 * MiB);
}

TEST_CASE("caching allocator: expandable segments grow the free block at the mapped end", "[allocator]") {
  CachingAllocatorSettings s;
  s.expandable_segments = true;
  CachingAllocator a(s);
  const int x = a.malloc(100 * MiB);  // 5 pages of 20 MiB mapped
  CHECK(a.reserved() == 100 * MiB);
  a.free(x);
  a.malloc(150 * MiB);  // the free 100 MiB at the end grows by 3 pages (60 MiB): 160 MiB mapped
  CHECK(a.reserved() == 160 * MiB);
  // Without expandable segments the same two requests reserve 100 + 150 MiB.
  CachingAllocator b;
  b.free(b.malloc(100 * MiB));
  b.malloc(150 * MiB);
  CHECK(b.reserved() == 250 * MiB);
}

TEST_CASE("caching allocator: empty_cache returns whole free segments only", "[allocator]") {
  CachingAllocator a;
  const int x = a.malloc(100 * MiB);
  const int y = a.malloc(3 * MiB);  // a 20 MiB segment, split
  a.free(x);
  a.empty_cache();
  CHECK(a.reserved() == 20 * MiB);  // the 100 MiB segment went; the split one holds y
  a.free(y);
  a.empty_cache();
  CHECK(a.reserved() == 0);
}

TEST_CASE("caching allocator: at capacity the cache is released before an OOM", "[allocator]") {
  CachingAllocatorSettings s;
  s.capacity = 300 * MiB;
  CachingAllocator a(s);
  const int x = a.malloc(100 * MiB);
  a.malloc(100 * MiB);
  a.free(x);
  CHECK(a.malloc(150 * MiB) >= 0);  // 350 > 300: the free 100 MiB segment is released, then 250 fits
  CHECK(a.reserved() == 250 * MiB);
  CHECK(a.malloc(100 * MiB) == -1);  // nothing cached to release: out of memory
  CHECK(a.out_of_memory());
}

TEST_CASE("caching allocator: a replay keeps parameters, adds the optimizer's state, frees each step", "[allocator]") {
  // Set-up: a 40 MiB trainable weight. A step: a = b*s MiB, t = 2*b*s MiB, t freed, a freed.
  AllocTrace tr;
  tr.bytes = {Poly::constant(40 * MiB), Poly::mono(Mono::kBS, MiB), Poly::mono(Mono::kBS, 2 * MiB)};
  tr.ops = {1, 2, 3, -3, -2};
  tr.step_begin = 1;
  tr.optimizer_at = 5;
  tr.trainable = {0};
  memplan::sim::OptimizerAllocations opt;
  opt.state_ratio = 2;  // Adam: two moments the size of the weight
  opt.state_tensors = 2;
  SECTION("fixed lengths") {
    // Step 1 (s = 10): segments 40 + 10 + 20; the states (2 x 40 MiB) fit no free block: +80.
    // Step 2 reuses the 10 and 20 MiB blocks.
    const auto r = memplan::sim::replay(tr, {{1, 10}, {1, 10}}, opt, {});
    CHECK(r.peak_reserved == 150 * MiB);
    CHECK(r.peak_allocated == 150 * MiB);  // 40 + 80 + 10 + 20 in step 2
    CHECK(r.allocations == 5);  // the trace's requests: the weight once, two per step
  }
  SECTION("a longer second batch") {
    // Step 2 (s = 15): a (15 MiB) takes the 20 MiB block (split, 5 MiB left); t (30 MiB) fits
    // neither the 10 nor the 5: a new 30 MiB segment. Reserved 150 + 30; allocated 40+80+15+30.
    const auto r = memplan::sim::replay(tr, {{1, 10}, {1, 15}}, opt, {});
    CHECK(r.peak_reserved == 180 * MiB);
    CHECK(r.peak_allocated == 165 * MiB);
  }
}

TEST_CASE("caching allocator: a sharded optimizer steps each rank's shard of the whole parameter", "[allocator]") {
  // docs/formulas.md#the-caching-allocator. The trace's weight is whole (40 MiB); over 4 ranks
  // (ZeRO, FSDP) each steps a 10 MiB shard: Adam's two moments are 2 x 10 MiB and a foreach
  // temporary (ratio 1) is 10 MiB. Review finding on torchtitan's FSDP2 rows: the replay stepped
  // the whole model (2 x 40 MiB of states and a 40 MiB temporary on every rank).
  AllocTrace tr;
  tr.bytes = {Poly::constant(40 * MiB), Poly::mono(Mono::kBS, MiB)};
  tr.ops = {1, 2, -2};
  tr.step_begin = 1;
  tr.optimizer_at = 3;
  tr.trainable = {0};
  memplan::sim::OptimizerAllocations opt;
  opt.state_ratio = 2;
  opt.state_tensors = 2;
  opt.temp_ratio = 1;
  SECTION("one rank: the whole parameter's") {
    // Segments: 40 (weight), 10 (a, freed), states 2 x 40 new; the 40 MiB temporary fits no free
    // block (the 10 is too small): +40. Allocated 40 + 80 + 40 at the step.
    const auto r = memplan::sim::replay(tr, {{1, 10}}, opt, {});
    CHECK(r.peak_allocated == 160 * MiB);
    CHECK(r.peak_reserved == 170 * MiB);
  }
  SECTION("four ranks: a quarter") {
    // The states (2 x 10 MiB): the first takes a's freed 10 MiB block, the second a new segment;
    // the 10 MiB temporary a new one. Allocated 40 + 20 + 10; reserved 40 + 10 + 10 + 10.
    opt.shard_over = 4;
    const auto r = memplan::sim::replay(tr, {{1, 10}}, opt, {});
    CHECK(r.peak_allocated == 70 * MiB);
    CHECK(r.peak_reserved == 70 * MiB);
  }
}

TEST_CASE("caching allocator: zero_grad(set_to_none=False) keeps every .grad across steps", "[allocator]") {
  // docs/formulas.md#zero-grad-set-to-none. Set-up: a 40 MiB trainable weight. A step: an
  // activation a = b*s MiB, the weight's gradient g (40 MiB, its .grad), a freed; the optimizer;
  // zero_grad frees g (set_to_none=True).
  AllocTrace tr;
  tr.bytes = {Poly::constant(40 * MiB), Poly::mono(Mono::kBS, MiB), Poly::constant(40 * MiB)};
  tr.ops = {1, 2, 3, -2, -3};
  tr.step_begin = 1;
  tr.optimizer_at = 4;
  tr.trainable = {0};
  memplan::sim::OptimizerAllocations opt;
  SECTION("set_to_none=True: g reuses its block every step") {
    // Segments: the weight 40, a 10 (a 10 MiB request gets a segment of its own size), g 40; the
    // next steps reuse the 10 and the 40. Allocated peak 40 + 10 + 40.
    const auto r = memplan::sim::replay(tr, {{1, 10}, {1, 10}, {1, 10}}, opt, {});
    CHECK(r.peak_reserved == 90 * MiB);
    CHECK(r.peak_allocated == 90 * MiB);
  }
  SECTION("set_to_none=False: g stays, and the next step's new gradient needs a block of its own") {
    // Step 1 as above, but g is kept. Step 2: a reuses its 10 MiB block; the new gradient (40 MiB,
    // added in place into g and freed) finds no free block: a new 40 MiB segment. Step 3 reuses
    // it. Reserved 40 + 10 + 40 + 40; allocated the same at the moment of the in-place add.
    opt.keep_grads = true;
    const auto r = memplan::sim::replay(tr, {{1, 10}, {1, 10}, {1, 10}}, opt, {});
    CHECK(r.peak_reserved == 130 * MiB);
    CHECK(r.peak_allocated == 130 * MiB);
  }
}

TEST_CASE("caching allocator: a freed block serves only its own stream", "[allocator][streams]") {
  // BlockComparatorSize orders (stream, size, address) and get_free_block rejects another
  // stream's block: a 100 MiB block freed on stream 1 cannot hold stream 0's 100 MiB request.
  SECTION("one stream reuses the block") {
    CachingAllocator a;
    a.free(a.malloc(100 * MiB));
    a.malloc(100 * MiB);
    CHECK(a.reserved() == 100 * MiB);
  }
  SECTION("two streams reserve a segment each") {
    CachingAllocator a;
    a.free(a.malloc(100 * MiB, 1));
    a.malloc(100 * MiB, 0);  // new 100 MiB segment on stream 0
    CHECK(a.reserved() == 200 * MiB);
    CHECK(a.allocated() == 100 * MiB);
    a.malloc(100 * MiB, 1);  // stream 1's cached block
    CHECK(a.reserved() == 200 * MiB);
    CHECK(a.segments() == 2);
  }
  SECTION("small pools are per stream too") {
    CachingAllocator a;
    a.malloc(512 * 1024, 0);
    a.malloc(512 * 1024, 1);  // 1.5 MiB free in stream 0's segment, none of it for stream 1
    CHECK(a.reserved() == 4 * MiB);
  }
}

TEST_CASE("caching allocator: record_stream holds a freed block until its event completes", "[allocator][streams]") {
  // FSDP1's reshard: the all-gather output (stream 1) is used on the default stream, recorded,
  // then freed. free() takes it out of allocated at once (stats.allocated_bytes) but insert_events
  // keeps it out of the pool until process_events sees the event complete.
  CachingAllocator a;
  const int x = a.malloc(100 * MiB, 1);
  a.record_stream(x, 0);
  a.record_stream(x, 1);  // a use on its own stream records nothing
  a.free(x);
  CHECK(a.allocated() == 0);
  CHECK(a.pending() == 100 * MiB);
  const std::int64_t event = a.last_event();
  a.malloc(100 * MiB, 1);  // the event is outstanding: a second 100 MiB segment
  CHECK(a.reserved() == 200 * MiB);
  a.complete_events(event);
  CHECK(a.pending() == 0);
  a.malloc(100 * MiB, 1);  // the first block is back in stream 1's pool
  CHECK(a.reserved() == 200 * MiB);
  CHECK(a.allocated() == 200 * MiB);
}

TEST_CASE("caching allocator: per-stream pools reserve more than one pool would", "[allocator][streams]") {
  // A tiny FSDP-like step: a 300 MiB layer gathered, a 200 MiB activation made and freed while
  // it is live, the layer freed (used on stream 0), then a 300 MiB activation.
  //   one stream: the layer takes segment A (300), the activation B (200); after both frees the
  //     300 MiB activation reuses A: 500 MiB reserved.
  //   the gather on stream 1: A is stream 1's; B (200) cannot hold 300: a third segment, 800 MiB.
  const auto run = [](int gather_stream) {
    CachingAllocator a;
    const int layer = a.malloc(300 * MiB, gather_stream);
    a.free(a.malloc(200 * MiB, 0));
    a.record_stream(layer, 0);
    a.free(layer);
    a.complete_events(a.last_event());
    a.malloc(300 * MiB, 0);
    return a.peak_reserved();
  };
  CHECK(run(0) == 500 * MiB);  // A (300) and B (200); the 300 MiB activation reuses A
  CHECK(run(1) == 800 * MiB);  // A stays stream 1's: a new 300 MiB segment on stream 0
}

TEST_CASE("caching allocator: empty_cache waits for outstanding events first", "[allocator][streams]") {
  // release_cached_blocks calls synchronize_and_free_events before returning whole free segments.
  CachingAllocator a;
  const int x = a.malloc(100 * MiB, 1);
  a.record_stream(x, 0);
  a.free(x);
  a.empty_cache();
  CHECK(a.reserved() == 0);
  CHECK(a.pending() == 0);
}

TEST_CASE("caching allocator: FSDP1 replay gathers each layer on the unshard stream", "[allocator][streams]") {
  // Three decoder layers (forward segments 1, 2, 3; backward 8, 7, 6), one 10 MiB activation
  // per layer in forward, kept to its backward. Each layer unit gathers 100 MiB on stream 1.
  using namespace memplan::sim;
  AllocTrace tr;
  tr.bytes = {Poly::constant(10 * MiB), Poly::constant(10 * MiB), Poly::constant(10 * MiB)};
  tr.ops = {1, 2, 3, -3, -2, -1};
  tr.step_begin = 0;
  tr.optimizer_at = 6;
  tr.marks = {{0, kSegFwdFirst, 0}, {1, kSegFwdMid, 0}, {2, kSegFwdLast, 0},
              {3, kSegBwdLast, 0},  {4, kSegBwdMid, 0}, {5, kSegBwdFirst, 0}};
  FsdpStreams f;
  f.enabled = true;
  f.layers = 3;
  f.layer_bytes = 100 * MiB;
  f.backward_prefetch = false;
  SECTION("limit_all_gathers: the CPU two reshards ahead of the GPU") {
    // Forward: gather L0 (A), free L0 (event 1), gather L1 (B: event 1 not waited for), free L1
    // (event 2), gather L2: the queue holds 2, wait for event 1: L0's block is back, L2 takes A.
    // Backward: L2 gathered anew (its forward free is event 3); the queue [2, 3] waits for 2: B.
    // L1 waits for 3 (A is back), L0 for 4 (B): two 100 MiB blocks throughout, plus the three
    // 10 MiB activation segments.
    const auto r = replay(tr, {{1, 1}}, {}, {}, 0, f);
    CHECK(r.peak_reserved == 30 * MiB + 200 * MiB);
    CHECK(r.peak_allocated == 30 * MiB + 100 * MiB);  // one layer gathered at a time
  }
  SECTION("BACKWARD_PRE: the layer before is gathered while one freed block still waits") {
    // As above to L2's forward (A and B). Entering L2's backward: L2's forward free is event 3,
    // the queue [2, 3] waits for 2, L2 takes B; the prefetch of L1 (queue [3]: no wait) finds A
    // still waiting for event 3: a third block C. Entering L1's backward: L2's free (event 4),
    // L1 is already gathered; the prefetch of L0 waits for 3 and takes A. Three 100 MiB blocks;
    // at most two gathered at once (L2 and L1, with the three activations still alive).
    f.backward_prefetch = true;
    const auto r = replay(tr, {{1, 1}}, {}, {}, 0, f);
    CHECK(r.peak_reserved == 30 * MiB + 300 * MiB);
    CHECK(r.peak_allocated == 30 * MiB + 200 * MiB);
  }
  SECTION("no rate limiter: nothing waits, every gather needs its own block") {
    // Without limit_all_gathers the replay never sees an event complete inside the step: each of
    // the 6 gathers (3 forward, 3 backward) takes a new 100 MiB segment.
    f.inflight_limit = 0;
    const auto r = replay(tr, {{1, 1}}, {}, {}, 0, f);
    CHECK(r.peak_reserved == 30 * MiB + 600 * MiB);
  }
  SECTION("one stream: the freed layer block is reused at once") {
    const auto r = replay(tr, {{1, 1}}, {}, {}, 0);
    CHECK(r.peak_reserved == 30 * MiB);
  }
}

TEST_CASE("caching allocator: FSDP1 frees each unit's unsharded gradient after its reduce-scatter", "[allocator][streams]") {
  // docs/formulas.md#fsdp1-unsharded-gradients. Three decoder layers, one 10 MiB activation each
  // (a0, a1, a2), kept to its backward; each layer's backward frees its activation and makes its
  // parameters' gradient g2, g1, g0 (30 MiB, the trace's .grad, freed by zero_grad after the
  // optimizer). No gathers (layer_bytes 0), so no rate-limiter wait completes an event in the step.
  using namespace memplan::sim;
  AllocTrace tr;
  tr.bytes = {Poly::constant(10 * MiB), Poly::constant(10 * MiB), Poly::constant(10 * MiB),
              Poly::constant(30 * MiB), Poly::constant(30 * MiB), Poly::constant(30 * MiB)};
  tr.ops = {1, 2, 3, -3, 4, -2, 5, -1, 6, -4, -5, -6};
  tr.step_begin = 0;
  tr.optimizer_at = 9;
  tr.marks = {{0, kSegFwdFirst, 0}, {1, kSegFwdMid, 0}, {2, kSegFwdLast, 0},
              {3, kSegBwdLast, 0},  {5, kSegBwdMid, 0}, {7, kSegBwdFirst, 0}};
  FsdpStreams f;
  f.enabled = true;
  f.layers = 3;
  f.layer_bytes = 0;
  SECTION("kept to zero_grad (the unsharded step)") {
    // a0, a1, a2: three 10 MiB segments. g2, g1, g0 fit no freed 10 MiB block: three 30 MiB
    // segments, all live at the end of backward. Reserved 30 + 90, allocated peak 90.
    const auto r = replay(tr, {{1, 1}}, {}, {}, 0, f);
    CHECK(r.peak_reserved == 120 * MiB);
    CHECK(r.peak_allocated == 90 * MiB);
  }
  SECTION("freed after each unit's reduce-scatter") {
    // L2's backward: g2 a new 30 MiB segment (a0, a1, g2: 50 MiB). Its post-backward (entering
    // L1): the flat gradient (30 MiB) fits no free block: a new segment (80 MiB allocated, the
    // peak); g2's block is freed to the default pool; the flat one leaves allocated but waits for
    // the post_backward stream. L1: g1 takes g2's old block; its flat gradient a third 30 MiB
    // segment (the first still waits). L0: g0 takes the same block; its flat gradient a fourth.
    // zero_grad finds no .grad. Reserved 30 + 4 x 30; allocated peak 10 + 10 + 30 + 30.
    f.free_unsharded_grads = true;
    const auto r = replay(tr, {{1, 1}}, {}, {}, 0, f);
    CHECK(r.peak_reserved == 150 * MiB);
    CHECK(r.peak_allocated == 80 * MiB);
    // The second step: every event completed at the first one's end, so the blocks are back.
    const auto two = replay(tr, {{1, 1}, {1, 1}}, {}, {}, 0, f);
    CHECK(two.peak_reserved == 150 * MiB);
  }
}

TEST_CASE("caching allocator: expandable segments grow one segment per stream", "[allocator][streams]") {
  // Note [Expandable Segments]: "it tries to make one segment (per stream) that grows as
  // necessary". A 5 MiB request maps one 20 MiB large-pool page; another stream's 5 MiB cannot
  // use the 15 MiB left in it and maps a page of its own segment.
  CachingAllocatorSettings s;
  s.expandable_segments = true;
  CachingAllocator a(s);
  a.malloc(5 * MiB, 0);
  CHECK(a.reserved() == 20 * MiB);
  a.malloc(5 * MiB, 0);  // the same stream: the free tail of its page
  CHECK(a.reserved() == 20 * MiB);
  a.malloc(5 * MiB, 1);
  CHECK(a.reserved() == 40 * MiB);
}

TEST_CASE("caching allocator: FSDP1's construction leaves its moved originals and flat copy cached", "[allocator][streams]") {
  // One unit of two parameters, 100 and 200 MiB, sharded over 2 GPUs; the step allocates and
  // frees one 1 MiB tensor (a small-pool 2 MiB segment).
  using namespace memplan::sim;
  AllocTrace tr;
  tr.bytes = {Poly::constant(MiB)};
  tr.ops = {1, -1};
  tr.optimizer_at = 2;
  FsdpStreams f;
  f.enabled = true;
  f.layers = 1;
  f.shard_over = 2;
  f.construction = {{100 * MiB, 200 * MiB}};
  SECTION("sync_module_states: the broadcast buckets too") {
    // Moved: A (100), B (200). Buckets of at most 250 MiB: 100 + 200 > 250, so a 100 MiB bucket
    // (C, freed) and a 200 MiB one (D, freed). torch.cat: E (300). A and B freed. The 150 MiB
    // shard takes B, the first of the two free 200 MiB blocks (split: 50 MiB left). E freed.
    // Reserved 100 + 200 + 100 + 200 + 300 = 900 MiB, 150 MiB of it allocated. The peaks restart
    // after construction (reset_peak_memory_stats): the 300 MiB moved and the 300 MiB flat copy
    // allocated at once are not the step's allocated peak.
    const auto r = replay(tr, {{1, 1}}, {}, {}, 0, f);
    CHECK(r.peak_reserved == 900 * MiB + 2 * MiB);
    CHECK(r.peak_allocated == 150 * MiB + MiB);
  }
  SECTION("no broadcast") {
    f.sync_module_states = false;
    const auto r = replay(tr, {{1, 1}}, {}, {}, 0, f);
    CHECK(r.peak_reserved == 600 * MiB + 2 * MiB);  // A, B and E
  }
}

// Tests never bound how long something takes: a slow or busy machine breaks any such bound, and
// speed belongs in bench/. A test that guards complexity compares two sizes measured in one run
// (the ratio of their CPU times, with generous slack) or counts operations.
#pragma once

#include <algorithm>
#include <ctime>

namespace memplan::testing {

// The least CPU time (std::clock, seconds) of `reps` calls of f(): the minimum discards the runs a
// neighbour or a page fault slowed down.
template <class F>
double min_cpu_seconds(F&& f, int reps = 3) {
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const std::clock_t t0 = std::clock();
    f();
    best = std::min(best, static_cast<double>(std::clock() - t0) / CLOCKS_PER_SEC);
  }
  return best;
}

// How many times more CPU time work(large) takes than work(small), measured in one run. A linear
// algorithm gives about large/small; a quadratic one its square. The small size's time has a
// floor of 1 ms so that the clock's resolution cannot make the ratio huge.
template <class F>
double cpu_growth(F&& work, long small, long large, int reps = 3) {
  const double a = min_cpu_seconds([&] { work(small); }, reps);
  const double b = min_cpu_seconds([&] { work(large); }, reps);
  return b / std::max(a, 1e-3);
}

}  // namespace memplan::testing

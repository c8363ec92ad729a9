// parallel_for: independent pieces of one estimate (the reduced-model simulations, the pipeline
// stages' timelines) on several hardware threads (docs/plan.md#speed).
#pragma once

#include <cstddef>
#include <functional>

namespace memplan {

// Runs task(i) for every i in [0, n), each exactly once: on the calling thread and on up to
// n - 1 workers of a process-wide pool (started on first use and kept), at most one thread per
// hardware thread (max_threads caps it; 0 = no cap). The pool serves one call at a time: a call
// that finds it busy (nested in a task, or from another thread) runs every task itself. Tasks
// must not share mutable state. After every task has finished, the exception of the lowest
// index that threw (if any) is rethrown, so the outcome does not depend on the scheduling.
void parallel_for(std::size_t n, const std::function<void(std::size_t)>& task, unsigned max_threads = 0);

}  // namespace memplan

// Allocator settings for memplan's processes (the CLI and the benchmarks that time it).
#pragma once

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace memplan::cli {

// memplan is a short-lived process whose engine builds and frees a few MiB of simulation state
// per estimator, many estimators when a plan tries suggestions. By default glibc serves each
// large vector with a fresh mmap and unmaps it on free, so every reuse faults its pages in
// again (on a VM a page fault costs microseconds). Keeping large blocks on the heap and not
// trimming it lets freed memory be reused. docs/plan.md#speed has the measurements.
inline void tune_allocator() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
#endif
}

}  // namespace memplan::cli

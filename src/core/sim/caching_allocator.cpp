#include "core/sim/caching_allocator.hpp"

#include <algorithm>

#include "core/sim/graph.hpp"

namespace memplan::sim {

CachingAllocator::CachingAllocator(CachingAllocatorSettings s) : s_(s) {}

std::int64_t CachingAllocator::round_size(std::int64_t size) {
  if (size < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

std::int64_t CachingAllocator::segment_size(std::int64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((rounded + kRoundLarge - 1) / kRoundLarge);
}

int CachingAllocator::segments() const {
  int n = 0;
  for (const Block& b : blocks_)
    if (b.live && b.prev < 0) ++n;
  return n;
}

int CachingAllocator::new_block(std::int64_t addr, std::int64_t size, bool small) {
  Block b;
  b.addr = addr;
  b.size = size;
  b.small = small;
  blocks_.push_back(b);
  return static_cast<int>(blocks_.size()) - 1;
}

void CachingAllocator::insert_free(int i) {
  const Block& b = blocks_[static_cast<std::size_t>(i)];
  pool(b.small).insert({b.size, b.addr, i});
}

void CachingAllocator::erase_free(int i) {
  const Block& b = blocks_[static_cast<std::size_t>(i)];
  pool(b.small).erase({b.size, b.addr, i});
}

void CachingAllocator::bump() {
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  peak_reserved_ = std::max(peak_reserved_, reserved_);
}

bool CachingAllocator::should_split(const Block& b, std::int64_t rounded) const {
  const std::int64_t remaining = b.size - rounded;
  if (b.small || s_.expandable_segments) return remaining >= kMinBlockSize;
  return rounded < s_.max_split_size && remaining > kSmallSize;
}

// get_free_block: the smallest free block of the pool that holds the request, by (size, address).
int CachingAllocator::find_free(std::int64_t rounded, bool small) {
  std::set<Key>& p = pool(small);
  const auto it = p.lower_bound({rounded, std::numeric_limits<std::int64_t>::min(), -1});
  if (it == p.end()) return -1;
  const std::int64_t size = std::get<0>(*it);
  // Oversize blocks (>= max_split_size) serve no smaller request, and a large request only when
  // the block is less than 20 MiB bigger.
  if (rounded < s_.max_split_size && size >= s_.max_split_size) return -1;
  if (rounded >= s_.max_split_size && size >= rounded + kLargeBuffer) return -1;
  return std::get<2>(*it);
}

// release_cached_blocks: every free block that is a whole segment goes back to CUDA.
void CachingAllocator::release_cached() {
  for (std::set<Key>* p : {&small_free_, &large_free_}) {
    for (auto it = p->begin(); it != p->end();) {
      Block& b = blocks_[static_cast<std::size_t>(std::get<2>(*it))];
      if (b.prev < 0 && b.next < 0 && !s_.expandable_segments) {
        reserved_ -= b.size;
        b.live = false;
        it = p->erase(it);
      } else {
        ++it;
      }
    }
  }
}

int CachingAllocator::new_segment(std::int64_t rounded, bool small) {
  const std::int64_t size = segment_size(rounded);
  if (size > s_.capacity - reserved_) {
    release_cached();
    if (size > s_.capacity - reserved_) return -1;
  }
  const int i = new_block(next_addr_, size, small);
  next_addr_ += size;
  reserved_ += size;
  return i;
}

// try_allocate_expandable_block: the pool's one segment grows at its end by whole pages, and the
// free block at its end (if any) takes the new pages.
int CachingAllocator::extend_expandable(std::int64_t rounded, bool small) {
  Expandable& e = small ? exp_small_ : exp_large_;
  const std::int64_t page = small ? kSmallBuffer : kLargeBuffer;
  if (!e.exists) {
    e.exists = true;
    e.base = next_addr_;
    next_addr_ += std::int64_t{1} << 50;  // the reserved virtual range
  }
  int tail = e.last;
  const bool tail_free = tail >= 0 && !blocks_[static_cast<std::size_t>(tail)].in_use;
  const std::int64_t have = tail_free ? blocks_[static_cast<std::size_t>(tail)].size : 0;
  const std::int64_t grow = (rounded - have + page - 1) / page * page;
  if (grow > s_.capacity - reserved_) return -1;
  reserved_ += grow;
  e.mapped += grow;
  if (tail_free) {
    erase_free(tail);
    blocks_[static_cast<std::size_t>(tail)].size += grow;
    return tail;
  }
  const int i = new_block(e.base + e.mapped - grow, grow, small);
  if (tail >= 0) {
    blocks_[static_cast<std::size_t>(i)].prev = tail;
    blocks_[static_cast<std::size_t>(tail)].next = i;
  }
  e.last = i;
  return i;
}

int CachingAllocator::malloc(std::int64_t size) {
  if (size <= 0) return -2;
  const std::int64_t rounded = round_size(size);
  const bool small = rounded <= kSmallSize;
  int i = find_free(rounded, small);
  if (i >= 0) {
    erase_free(i);
  } else {
    i = s_.expandable_segments ? extend_expandable(rounded, small) : new_segment(rounded, small);
    if (i < 0) {
      oom_ = true;
      return -1;
    }
  }
  if (should_split(blocks_[static_cast<std::size_t>(i)], rounded)) {
    Block& b = blocks_[static_cast<std::size_t>(i)];
    const int r = new_block(b.addr + rounded, b.size - rounded, b.small);
    Block& rest = blocks_[static_cast<std::size_t>(r)];
    Block& used = blocks_[static_cast<std::size_t>(i)];  // blocks_ may have moved
    rest.prev = i;
    rest.next = used.next;
    if (used.next >= 0) blocks_[static_cast<std::size_t>(used.next)].prev = r;
    used.next = r;
    used.size = rounded;
    Expandable& e = used.small ? exp_small_ : exp_large_;
    if (s_.expandable_segments && e.last == i) e.last = r;
    insert_free(r);
  }
  Block& used = blocks_[static_cast<std::size_t>(i)];
  used.in_use = true;
  allocated_ += used.size;
  bump();
  return i;
}

void CachingAllocator::free(int handle) {
  if (handle < 0) return;
  int i = handle;
  Block& b = blocks_[static_cast<std::size_t>(i)];
  b.in_use = false;
  allocated_ -= b.size;
  Expandable& e = b.small ? exp_small_ : exp_large_;
  // Merge with a free previous block, then a free next one (try_merge_blocks).
  const int p = b.prev;
  if (p >= 0 && !blocks_[static_cast<std::size_t>(p)].in_use) {
    Block& pb = blocks_[static_cast<std::size_t>(p)];
    erase_free(p);
    pb.size += b.size;
    pb.next = b.next;
    if (b.next >= 0) blocks_[static_cast<std::size_t>(b.next)].prev = p;
    if (s_.expandable_segments && e.last == i) e.last = p;
    b.live = false;
    i = p;
  }
  Block& cur = blocks_[static_cast<std::size_t>(i)];
  const int n = cur.next;
  if (n >= 0 && !blocks_[static_cast<std::size_t>(n)].in_use) {
    Block& nb = blocks_[static_cast<std::size_t>(n)];
    erase_free(n);
    cur.size += nb.size;
    cur.next = nb.next;
    if (nb.next >= 0) blocks_[static_cast<std::size_t>(nb.next)].prev = i;
    if (s_.expandable_segments && e.last == n) e.last = i;
    nb.live = false;
  }
  insert_free(i);
}

void CachingAllocator::empty_cache() {
  if (!s_.expandable_segments) {
    release_cached();
    return;
  }
  // Expandable segments unmap the free pages; only the free pages at a segment's end are modelled.
  for (const bool small : {true, false}) {
    Expandable& e = small ? exp_small_ : exp_large_;
    if (e.last < 0) continue;
    Block& t = blocks_[static_cast<std::size_t>(e.last)];
    if (t.in_use) continue;
    const std::int64_t page = small ? kSmallBuffer : kLargeBuffer;
    const std::int64_t drop = t.size / page * page;
    if (drop == 0) continue;
    erase_free(e.last);
    t.size -= drop;
    e.mapped -= drop;
    reserved_ -= drop;
    if (t.size > 0) {
      insert_free(e.last);
    } else {
      t.live = false;
      const int prev = t.prev;
      if (prev >= 0) blocks_[static_cast<std::size_t>(prev)].next = -1;
      e.last = prev;
    }
  }
}

}  // namespace memplan::sim


namespace memplan::sim {

std::int64_t reserved_for_peak(std::int64_t peak, std::int64_t slack) {
  constexpr std::int64_t kSegment = CachingAllocator::kRoundLarge;
  const std::int64_t reserved = peak + std::max<std::int64_t>(0, slack);
  return (reserved + kSegment - 1) / kSegment * kSegment;
}

ReplayResult replay(const AllocTrace& trace, const std::vector<ReplayStep>& steps, const OptimizerAllocations& opt,
                    const CachingAllocatorSettings& settings, int empty_cache_every) {
  CachingAllocator a(settings);
  ReplayResult out;
  if (steps.empty()) return out;
  std::vector<int> handle(trace.bytes.size(), -2);
  std::vector<char> alive(trace.bytes.size(), 0);
  const auto bytes_at = [&](std::int32_t t, const ReplayStep& st) {
    return trace.bytes[static_cast<std::size_t>(t)].eval(st.b, st.s);
  };
  const auto run = [&](std::size_t from, std::size_t to, const ReplayStep& st, std::vector<std::int32_t>* made) {
    for (std::size_t i = from; i < to; ++i) {
      const std::int32_t op = trace.ops[i];
      if (op > 0) {
        const std::int32_t t = op - 1;
        handle[static_cast<std::size_t>(t)] = a.malloc(bytes_at(t, st));
        ++out.allocations;
        alive[static_cast<std::size_t>(t)] = 1;
        if (made != nullptr) made->push_back(t);
      } else {
        const std::int32_t t = -op - 1;
        if (!alive[static_cast<std::size_t>(t)]) continue;
        a.free(handle[static_cast<std::size_t>(t)]);
        alive[static_cast<std::size_t>(t)] = 0;
      }
    }
  };
  run(0, trace.step_begin, steps.front(), nullptr);
  std::vector<int> states;
  const std::size_t opt_at = std::clamp(trace.optimizer_at, trace.step_begin, trace.ops.size());
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const ReplayStep& st = steps[k];
    std::vector<std::int32_t> made;
    run(trace.step_begin, opt_at, st, &made);
    // optimizer.step(): its state on the first step (kept), its temporaries every step.
    if (k == 0 && opt.state_tensors > 0)
      for (const std::int32_t p : trace.trainable) {
        const double per = static_cast<double>(bytes_at(p, st)) * opt.state_ratio / opt.state_tensors;
        for (int j = 0; j < opt.state_tensors; ++j) states.push_back(a.malloc(static_cast<std::int64_t>(per)));
      }
    if (opt.temp_ratio > 0) {
      std::vector<int> temps;
      for (const std::int32_t p : trace.trainable) {
        const double bytes = static_cast<double>(bytes_at(p, st));
        if (opt.per_param_temps) {
          // Whole parameter-sized temporaries and the fraction left, freed before the next one.
          double left = opt.temp_ratio;
          for (; left >= 1; left -= 1) temps.push_back(a.malloc(static_cast<std::int64_t>(bytes)));
          if (left > 0) temps.push_back(a.malloc(static_cast<std::int64_t>(bytes * left)));
          for (const int h : temps) a.free(h);
          temps.clear();
        } else {
          temps.push_back(a.malloc(static_cast<std::int64_t>(bytes * opt.temp_ratio)));
        }
      }
      for (const int h : temps) a.free(h);
    }
    run(opt_at, trace.ops.size(), st, &made);
    for (const std::int32_t t : made)
      if (alive[static_cast<std::size_t>(t)]) {
        a.free(handle[static_cast<std::size_t>(t)]);
        alive[static_cast<std::size_t>(t)] = 0;
      }
    if (empty_cache_every > 0 && (k + 1) % static_cast<std::size_t>(empty_cache_every) == 0) a.empty_cache();
  }
  out.peak_allocated = a.peak_allocated();
  out.peak_reserved = a.peak_reserved();
  out.segments = a.segments();
  out.out_of_memory = a.out_of_memory();
  return out;
}

}  // namespace memplan::sim

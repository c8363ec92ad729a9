#include "core/sim/caching_allocator.hpp"

#include <algorithm>

#include "core/sim/graph.hpp"
#include "core/sim/program.hpp"

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

int CachingAllocator::new_block(std::int64_t addr, std::int64_t size, bool small, int stream) {
  Block b;
  b.addr = addr;
  b.size = size;
  b.small = small;
  b.stream = stream;
  blocks_.push_back(b);
  return static_cast<int>(blocks_.size()) - 1;
}

void CachingAllocator::insert_free(int i) {
  const Block& b = blocks_[static_cast<std::size_t>(i)];
  pool(b.small).insert({b.stream, b.size, b.addr, i});
}

void CachingAllocator::erase_free(int i) {
  const Block& b = blocks_[static_cast<std::size_t>(i)];
  pool(b.small).erase({b.stream, b.size, b.addr, i});
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

// get_free_block: the smallest free block of the pool and stream that holds the request, by
// (stream, size, address): the first key at or after (stream, rounded) must be of the stream.
int CachingAllocator::find_free(std::int64_t rounded, bool small, int stream) {
  std::set<Key>& p = pool(small);
  const auto it = p.lower_bound({stream, rounded, std::numeric_limits<std::int64_t>::min(), -1});
  if (it == p.end() || std::get<0>(*it) != stream) return -1;
  const std::int64_t size = std::get<1>(*it);
  // Oversize blocks (>= max_split_size) serve no smaller request, and a large request only when
  // the block is less than 20 MiB bigger.
  if (rounded < s_.max_split_size && size >= s_.max_split_size) return -1;
  if (rounded >= s_.max_split_size && size >= rounded + kLargeBuffer) return -1;
  return std::get<3>(*it);
}

// release_cached_blocks: synchronize_and_free_events first, then every free block that is a
// whole segment goes back to CUDA.
void CachingAllocator::release_cached() {
  complete_events(events_);
  for (std::set<Key>* p : {&small_free_, &large_free_}) {
    for (auto it = p->begin(); it != p->end();) {
      Block& b = blocks_[static_cast<std::size_t>(std::get<3>(*it))];
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

int CachingAllocator::new_segment(std::int64_t rounded, bool small, int stream) {
  const std::int64_t size = segment_size(rounded);
  if (size > s_.capacity - reserved_) {
    release_cached();
    if (size > s_.capacity - reserved_) return -1;
  }
  const int i = new_block(next_addr_, size, small, stream);
  next_addr_ += size;
  reserved_ += size;
  return i;
}

// try_allocate_expandable_block: the (pool, stream)'s one segment grows at its end by whole
// pages, and the free block at its end (if any) takes the new pages.
int CachingAllocator::extend_expandable(std::int64_t rounded, bool small, int stream) {
  Expandable& e = expandable_[{stream, small}];
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
  const int i = new_block(e.base + e.mapped - grow, grow, small, stream);
  if (tail >= 0) {
    blocks_[static_cast<std::size_t>(i)].prev = tail;
    blocks_[static_cast<std::size_t>(tail)].next = i;
  }
  e.last = i;
  return i;
}

int CachingAllocator::malloc(std::int64_t size, int stream) {
  if (size <= 0) return -2;
  const std::int64_t rounded = round_size(size);
  const bool small = rounded <= kSmallSize;
  int i = find_free(rounded, small, stream);
  if (i >= 0) {
    erase_free(i);
  } else {
    i = s_.expandable_segments ? extend_expandable(rounded, small, stream) : new_segment(rounded, small, stream);
    if (i < 0) {
      oom_ = true;
      return -1;
    }
  }
  if (should_split(blocks_[static_cast<std::size_t>(i)], rounded)) {
    Block& b = blocks_[static_cast<std::size_t>(i)];
    const int r = new_block(b.addr + rounded, b.size - rounded, b.small, b.stream);
    Block& rest = blocks_[static_cast<std::size_t>(r)];
    Block& used = blocks_[static_cast<std::size_t>(i)];  // blocks_ may have moved
    rest.prev = i;
    rest.next = used.next;
    if (used.next >= 0) blocks_[static_cast<std::size_t>(used.next)].prev = r;
    used.next = r;
    used.size = rounded;
    if (s_.expandable_segments) {
      Expandable& e = expandable(used);
      if (e.last == i) e.last = r;
    }
    insert_free(r);
  }
  Block& used = blocks_[static_cast<std::size_t>(i)];
  used.in_use = true;
  used.uses.clear();
  allocated_ += used.size;
  bump();
  return i;
}

void CachingAllocator::record_stream(int handle, int stream) {
  if (handle < 0) return;
  Block& b = blocks_[static_cast<std::size_t>(handle)];
  if (stream == b.stream || std::find(b.uses.begin(), b.uses.end(), stream) != b.uses.end()) return;
  b.uses.push_back(stream);
}

void CachingAllocator::free(int handle) {
  if (handle < 0) return;
  Block& b = blocks_[static_cast<std::size_t>(handle)];
  allocated_ -= b.size;
  if (!b.uses.empty()) {
    // insert_events: one event on each stream that used the block; it stays out of the pool
    // (and unmerged) until they complete.
    waiting_.emplace_back(++events_, handle);
    pending_bytes_ += b.size;
    return;
  }
  free_block(handle);
}

void CachingAllocator::complete_events(std::int64_t upto) {
  std::vector<std::pair<std::int64_t, int>> keep;
  for (const auto& [event, handle] : waiting_) {
    if (event > upto) {
      keep.emplace_back(event, handle);
      continue;
    }
    pending_bytes_ -= blocks_[static_cast<std::size_t>(handle)].size;
    blocks_[static_cast<std::size_t>(handle)].uses.clear();
    free_block(handle);
  }
  waiting_ = std::move(keep);
}

// free_block: back to its pool, merged with free neighbours of its segment (try_merge_blocks).
void CachingAllocator::free_block(int handle) {
  int i = handle;
  Block& b = blocks_[static_cast<std::size_t>(i)];
  b.in_use = false;
  Expandable* e = s_.expandable_segments ? &expandable(b) : nullptr;
  const int p = b.prev;
  if (p >= 0 && !blocks_[static_cast<std::size_t>(p)].in_use) {
    Block& pb = blocks_[static_cast<std::size_t>(p)];
    erase_free(p);
    pb.size += b.size;
    pb.next = b.next;
    if (b.next >= 0) blocks_[static_cast<std::size_t>(b.next)].prev = p;
    if (e != nullptr && e->last == i) e->last = p;
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
    if (e != nullptr && e->last == n) e->last = i;
    nb.live = false;
  }
  insert_free(i);
}

void CachingAllocator::empty_cache() {
  if (!s_.expandable_segments) {
    release_cached();
    return;
  }
  complete_events(events_);
  // Expandable segments unmap the free pages; only the free pages at a segment's end are modelled.
  for (auto& [key, e] : expandable_) {
    const bool small = key.second;
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

namespace {

// FSDP1's unshard / reshard / reduce-scatter on their streams, driven by the trace's marks.
class FsdpReplay {
  static std::size_t units(const FsdpStreams& f) { return static_cast<std::size_t>(std::max(0, f.layers)) + 1; }

 public:
  FsdpReplay(CachingAllocator& a, const FsdpStreams& f)
      : a_(a),
        f_(f),
        gathered_(units(f), -2),
        unit_grads_(units(f)),
        unit_grad_bytes_(units(f), 0) {}

  // The program enters (segment, instance).
  void enter(int segment, int instance) {
    if (!f_.enabled) return;
    if (!root_gathered_) {
      unshard(f_.layers, f_.root_bytes);
      root_gathered_ = true;
    }
    const int fwd = layer_of(segment, kSegFwdFirst, instance);
    const int bwd = layer_of(segment, kSegBwdFirst, instance);
    if (fwd >= 0) {
      if (fwd == fwd_) return;
      end_forward();
      unshard(fwd, f_.layer_bytes);
      fwd_ = fwd;
      return;
    }
    end_forward();
    if (bwd >= 0) {
      if (bwd == bwd_) return;
      end_backward();
      unshard(bwd, f_.layer_bytes);
      if (f_.backward_prefetch && bwd > 0) unshard(bwd - 1, f_.layer_bytes);
      bwd_ = bwd;
      return;
    }
    if (segment == kSegHeadBwd && bwd_ < 0 && f_.backward_prefetch && f_.layers > 0) unshard(f_.layers - 1, f_.layer_bytes);
    if (segment == kSegBwdPre) end_backward();
  }

  // The end of backward (before optimizer.step()): the last layer's post-backward and the root's.
  void end_of_backward() {
    if (!f_.enabled) return;
    end_forward();
    end_backward();
    const int root_flat = concat_grads(f_.layers);
    for (std::size_t l = 0; l < gathered_.size(); ++l) reshard(static_cast<int>(l));
    release_flat_grad(root_flat);
    root_gathered_ = false;
  }

  bool frees_grads() const { return f_.enabled && f_.free_unsharded_grads; }
  // A .grad the trace allocates now: the unit whose backward runs (the root outside the layers')
  // owns it until that unit's post-backward hook.
  void take_grad(int handle, std::int64_t bytes) {
    const std::size_t unit = static_cast<std::size_t>(bwd_ >= 0 ? bwd_ : f_.layers);
    unit_grads_[unit].push_back(handle);
    unit_grad_bytes_[unit] += bytes;
  }

  // After zero_grad: the sharded gradients go; the loss's .item() lets the GPU catch up.
  void end_of_step() {
    if (!f_.enabled) return;
    end_of_backward();
    for (const int h : grads_) a_.free(h);
    grads_.clear();
    a_.complete_events(a_.last_event());
    queue_.clear();
  }

 private:
  int layer_of(int segment, int first, int instance) const {
    if (segment == first) return 0;
    if (segment == first + 1) return instance + 1;
    if (segment == first + 2) return f_.layers - 1;
    return -1;
  }
  void end_forward() {
    if (fwd_ < 0) return;
    if (f_.reshard_after_forward && fwd_ < f_.layers) reshard(fwd_);
    fwd_ = -1;
  }
  void end_backward() {
    if (bwd_ < 0) return;
    const int flat = concat_grads(bwd_);
    reshard(bwd_);
    if (f_.grad_shard_bytes > 0) grads_.push_back(a_.malloc(f_.grad_shard_bytes, kStreamPostBackward));
    release_flat_grad(flat);
    bwd_ = -1;
  }
  // SplitWithSizesBackward: the unit's parameter gradients become its flat gradient (padded to the
  // shard group, as the flat parameter is), a default-stream block; -2 when the unit has none.
  int concat_grads(int unit) {
    auto& hs = unit_grads_[static_cast<std::size_t>(unit)];
    std::int64_t& bytes = unit_grad_bytes_[static_cast<std::size_t>(unit)];
    if (hs.empty()) return -2;
    const std::int64_t n = std::max(1, f_.shard_over);
    const int flat = a_.malloc((bytes + n - 1) / n * n);
    for (const int h : hs) a_.free(h);
    hs.clear();
    bytes = 0;
    return flat;
  }
  // The post-backward hook has issued the reduce-scatter of `flat` on the post_backward stream:
  // record_stream, then its last reference goes.
  void release_flat_grad(int flat) {
    if (flat == -2) return;
    a_.record_stream(flat, kStreamPostBackward);
    a_.free(flat);
  }
  void unshard(int l, std::int64_t bytes) {
    if (l < 0 || l > f_.layers || gathered_[static_cast<std::size_t>(l)] != -2 || bytes <= 0) return;
    if (f_.inflight_limit > 0 && static_cast<int>(queue_.size()) >= f_.inflight_limit) {
      a_.complete_events(queue_.front());  // event.synchronize()
      queue_.erase(queue_.begin());
    }
    gathered_[static_cast<std::size_t>(l)] = a_.malloc(bytes, kStreamUnshard);
  }
  void reshard(int l) {
    int& h = gathered_[static_cast<std::size_t>(l)];
    if (h == -2) return;
    a_.record_stream(h, kStreamDefault);
    a_.free(h);
    h = -2;
    if (f_.inflight_limit > 0) queue_.push_back(a_.last_event());
  }

  CachingAllocator& a_;
  const FsdpStreams& f_;
  std::vector<int> gathered_;  // per layer unit and the root (last): its block, or -2
  std::vector<int> grads_;
  // Per layer unit and the root: the .grads the trace made during its backward, not yet reduced.
  std::vector<std::vector<int>> unit_grads_;
  std::vector<std::int64_t> unit_grad_bytes_;
  std::vector<std::int64_t> queue_;  // the free events the rate limiter has not waited for
  int fwd_ = -1, bwd_ = -1;
  bool root_gathered_ = false;
};

// _init_param_handle_from_module for each unit of a CPU-resident model (torch/distributed/fsdp/
// _init_utils.py): _move_module_to_device, _sync_module_params_and_buffers (_sync_params_and_buffers
// in PARAM_BROADCAST_BUCKET_SIZE = 250 MiB buckets, each flattened for the broadcast), then
// FlatParamHandle: torch.cat of the flattened parameters padded to the shard group, the module's
// parameters replaced by views (the moved originals freed), shard(): chunk(...).clone() kept and
// the unsharded flat parameter freed.
void construct(CachingAllocator& a, const FsdpStreams& f) {
  constexpr std::int64_t kBucket = std::int64_t{250} << 20;
  const std::int64_t n = std::max(1, f.shard_over);
  for (const auto& unit : f.construction) {
    std::vector<int> moved;
    std::int64_t total = 0;
    for (const std::int64_t bytes : unit) {
      moved.push_back(a.malloc(bytes));
      total += bytes;
    }
    if (total == 0) continue;
    if (f.sync_module_states) {
      std::int64_t bucket = 0;
      for (const std::int64_t bytes : unit) {
        if (bucket > 0 && bucket + bytes > kBucket) {
          a.free(a.malloc(bucket));
          bucket = 0;
        }
        bucket += bytes;
      }
      if (bucket > 0) a.free(a.malloc(bucket));
    }
    const std::int64_t padded = (total + n - 1) / n * n;
    const int flat = a.malloc(padded);
    for (const int h : moved) a.free(h);
    a.malloc(padded / n);  // the shard, kept
    a.free(flat);
  }
}

}  // namespace

ReplayResult replay(const AllocTrace& trace, const std::vector<ReplayStep>& steps, const OptimizerAllocations& opt,
                    const CachingAllocatorSettings& settings, int empty_cache_every, const FsdpStreams& fsdp) {
  CachingAllocator a(settings);
  FsdpReplay streams(a, fsdp);
  ReplayResult out;
  if (steps.empty()) return out;
  std::vector<int> handle(trace.bytes.size(), -2);
  std::vector<char> alive(trace.bytes.size(), 0);
  const auto bytes_at = [&](std::int32_t t, const ReplayStep& st) {
    return trace.bytes[static_cast<std::size_t>(t)].eval(Point{st.b, st.s, st.p > 0 ? st.p : st.s});
  };
  const std::size_t opt_at = std::clamp(trace.optimizer_at, trace.step_begin, trace.ops.size());
  // The .grad tensors: what zero_grad frees after the optimizer step. With keep_grads they stay;
  // under FSDP1 each unit's post-backward frees them (FsdpReplay::take_grad).
  std::vector<char> is_grad(trace.bytes.size(), 0);
  for (std::size_t i = opt_at; i < trace.ops.size(); ++i)
    if (trace.ops[i] < 0) is_grad[static_cast<std::size_t>(-trace.ops[i] - 1)] = 1;
  std::vector<char> kept(trace.bytes.size(), 0);
  if (opt.keep_grads) kept = is_grad;
  std::size_t mark = 0;
  const auto run = [&](std::size_t from, std::size_t to, const ReplayStep& st, std::vector<std::int32_t>* made) {
    for (std::size_t i = from; i < to; ++i) {
      for (; mark < trace.marks.size() && trace.marks[mark].at <= i; ++mark)
        if (trace.marks[mark].at == i && i >= trace.step_begin) streams.enter(trace.marks[mark].segment, trace.marks[mark].instance);
      const std::int32_t op = trace.ops[i];
      if (op > 0) {
        const std::int32_t t = op - 1;
        ++out.allocations;
        if (kept[static_cast<std::size_t>(t)] && alive[static_cast<std::size_t>(t)]) {
          // AccumulateGrad with a .grad already there: `grad += new`, the new gradient freed.
          a.free(a.malloc(bytes_at(t, st)));
          continue;
        }
        handle[static_cast<std::size_t>(t)] = a.malloc(bytes_at(t, st));
        if (is_grad[static_cast<std::size_t>(t)] && i >= trace.step_begin && streams.frees_grads()) {
          streams.take_grad(handle[static_cast<std::size_t>(t)], bytes_at(t, st));
          continue;  // FSDP frees it; zero_grad finds no .grad to free
        }
        alive[static_cast<std::size_t>(t)] = 1;
        if (made != nullptr && !kept[static_cast<std::size_t>(t)]) made->push_back(t);
      } else {
        const std::int32_t t = -op - 1;
        if (!alive[static_cast<std::size_t>(t)] || (kept[static_cast<std::size_t>(t)] && i >= opt_at)) continue;
        a.free(handle[static_cast<std::size_t>(t)]);
        alive[static_cast<std::size_t>(t)] = 0;
      }
    }
  };
  if (fsdp.enabled && !fsdp.construction.empty()) {
    // The shards it keeps stand for the trace's whole-size parameters. The trainers reset the peak
    // statistics before training (reset_peak_memory_stats: the reserved peak restarts at what is
    // reserved then), so the allocated peak is the step's.
    construct(a, fsdp);
    a.reset_peaks();
  } else {
    run(0, trace.step_begin, steps.front(), nullptr);
  }
  std::vector<int> states;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const ReplayStep& st = steps[k];
    std::vector<std::int32_t> made;
    mark = 0;
    run(trace.step_begin, opt_at, st, &made);
    streams.end_of_backward();
    // optimizer.step(): its state on the first step (kept), its temporaries every step.
    const double shards = std::max(1, opt.shard_over);
    if (k == 0 && opt.state_tensors > 0)
      for (const std::int32_t p : trace.trainable) {
        const double per = static_cast<double>(bytes_at(p, st)) / shards * opt.state_ratio / opt.state_tensors;
        for (int j = 0; j < opt.state_tensors; ++j) states.push_back(a.malloc(static_cast<std::int64_t>(per)));
      }
    if (opt.temp_ratio > 0) {
      std::vector<int> temps;
      for (const std::int32_t p : trace.trainable) {
        const double bytes = static_cast<double>(bytes_at(p, st)) / shards;
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
    streams.end_of_step();
    if (empty_cache_every > 0 && (k + 1) % static_cast<std::size_t>(empty_cache_every) == 0) a.empty_cache();
  }
  out.peak_allocated = a.peak_allocated();
  out.peak_reserved = a.peak_reserved();
  out.segments = a.segments();
  out.out_of_memory = a.out_of_memory();
  out.fsdp_streams = fsdp.enabled;
  return out;
}

}  // namespace memplan::sim

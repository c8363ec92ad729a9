// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, the native
// backend), replayed over a step's allocations and frees to predict max_memory_reserved
// (docs/formulas.md#the-caching-allocator). No CUDA, no I/O: sizes and addresses only.
//
// What it keeps of the real allocator:
//  - request sizes rounded up to 512 bytes (round_size, without roundup_power2_divisions);
//  - two pools: small (<= 1 MiB) packed into 2 MiB segments, large (> 1 MiB); a large request
//    below 10 MiB gets a 20 MiB segment, a larger one a segment rounded up to 2 MiB;
//  - best fit: the smallest cached free block of the pool that holds the request (ties by address);
//  - splitting: a small block when at least 512 bytes remain, a large one when more than 1 MiB
//    remains and the request is below max_split_size_mb; blocks >= max_split_size_mb serve only
//    requests at most 20 MiB smaller;
//  - freed blocks merge with free neighbours of their segment; segments are returned only by
//    empty_cache or when a new segment would exceed the capacity (free every unsplit cached
//    segment, retry: release_cached_blocks);
//  - expandable_segments:True: one growing segment per pool and stream, mapped in 2 MiB (small)
//    or 20 MiB (large) pages; a request no free block holds extends the free block at the mapped end;
//  - streams (docs/formulas.md#allocator-streams): every block belongs to the stream it was
//    allocated on, and a freed block serves only that stream's requests (BlockComparatorSize
//    orders by stream first; get_free_block rejects another stream's block). record_stream()
//    marks a use on another stream: free() then takes the block out of allocated at once but keeps
//    it out of the pool until its event completes (insert_events / process_events), which the
//    caller says with complete_events(); release_cached (an OOM retry, empty_cache) first
//    completes every event (synchronize_and_free_events).
// What it leaves out: CUDA graphs' private pools, the garbage_collection_threshold (it acts only
// under set_per_process_memory_fraction), roundup_power2_divisions and max_non_split_rounding_mb.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <vector>

namespace memplan::sim {

struct CachingAllocatorSettings {
  bool expandable_segments = false;
  std::int64_t max_split_size = std::numeric_limits<std::int64_t>::max();  // bytes (max_split_size_mb << 20)
  std::int64_t capacity = std::numeric_limits<std::int64_t>::max();        // what cudaMalloc can give
};

class CachingAllocator {
 public:
  static constexpr std::int64_t kMinBlockSize = 512;
  static constexpr std::int64_t kSmallSize = 1 << 20;      // largest small-pool request
  static constexpr std::int64_t kSmallBuffer = 2 << 20;    // small-pool segment
  static constexpr std::int64_t kLargeBuffer = 20 << 20;   // segment for 1-10 MiB requests
  static constexpr std::int64_t kMinLargeAlloc = 10 << 20;
  static constexpr std::int64_t kRoundLarge = 2 << 20;

  explicit CachingAllocator(CachingAllocatorSettings s = {});

  static std::int64_t round_size(std::int64_t size);
  static std::int64_t segment_size(std::int64_t rounded);  // get_allocation_size

  // A handle for free(), or -1 when the capacity cannot hold it even after releasing the cache
  // (an OOM). A size of 0 allocates nothing and returns -2 (free(-2) does nothing). `stream`: the
  // current stream at the request (0: the default stream); the block serves that stream only.
  int malloc(std::int64_t size, int stream = 0);
  // Block `handle` is used on `stream` too (Tensor.record_stream); a use on its own stream is none.
  void record_stream(int handle, int stream);
  // A block with uses on other streams leaves `allocated` now and returns to its pool when
  // complete_events() reaches the event its free recorded (last_event() right after the free).
  void free(int handle);
  std::int64_t last_event() const { return events_; }
  // The GPU has passed every event up to `upto`: their blocks return to their pools.
  void complete_events(std::int64_t upto);
  // Bytes freed but waiting for an event (in reserved, not in allocated).
  std::int64_t pending() const { return pending_bytes_; }
  void empty_cache();

  std::int64_t allocated() const { return allocated_; }  // sum of the blocks in use (rounded sizes)
  std::int64_t reserved() const { return reserved_; }    // sum of segments (mapped pages)
  std::int64_t peak_allocated() const { return peak_allocated_; }
  std::int64_t peak_reserved() const { return peak_reserved_; }
  void reset_peaks() {
    peak_allocated_ = allocated_;
    peak_reserved_ = reserved_;
  }
  int segments() const;
  bool out_of_memory() const { return oom_; }

 private:
  struct Block {
    std::int64_t addr = 0, size = 0;
    int prev = -1, next = -1;  // neighbours in the segment, by address
    bool small = false;
    bool in_use = false;       // allocated, or freed and waiting for its event
    bool live = true;          // false once merged away or released
    int stream = 0;
    std::vector<int> uses;     // other streams it was used on (record_stream)
  };
  using Key = std::tuple<int, std::int64_t, std::int64_t, int>;  // (stream, size, addr, block)
  std::set<Key>& pool(bool small) { return small ? small_free_ : large_free_; }
  int new_block(std::int64_t addr, std::int64_t size, bool small, int stream);
  int find_free(std::int64_t rounded, bool small, int stream);
  int new_segment(std::int64_t rounded, bool small, int stream);
  int extend_expandable(std::int64_t rounded, bool small, int stream);
  void free_block(int handle);
  bool should_split(const Block& b, std::int64_t rounded) const;
  void release_cached();
  void insert_free(int b);
  void erase_free(int b);
  void bump();

  CachingAllocatorSettings s_;
  std::vector<Block> blocks_;
  std::set<Key> small_free_, large_free_;
  std::int64_t next_addr_ = 0;
  // expandable_segments: the one segment of each (pool, stream) [base, base + mapped), its last block.
  struct Expandable {
    bool exists = false;
    std::int64_t base = 0, mapped = 0;
    int last = -1;
  };
  std::map<std::pair<int, bool>, Expandable> expandable_;  // by (stream, small)
  Expandable& expandable(const Block& b) { return expandable_[{b.stream, b.small}]; }
  // Blocks freed with uses on other streams, with the event their free recorded.
  std::vector<std::pair<std::int64_t, int>> waiting_;
  std::int64_t events_ = 0, pending_bytes_ = 0;
  std::int64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
  bool oom_ = false;
};

}  // namespace memplan::sim

namespace memplan::sim {

struct AllocTrace;

// One step of a replay: its micro-batch, (local) sequence length and that padded to the
// chunked scans' chunk.
struct ReplayStep {
  std::int64_t b = 1, s = 1;
  std::int64_t p = 0;  // 0: s (a model without a chunked scan)
};

// What the optimizer allocates around the trace (the step program leaves it to the engine):
// `state_ratio` bytes of state per byte of trainable parameter, in `state_tensors` tensors per
// parameter (Adam: exp_avg, exp_avg_sq), made at the first optimizer step and kept; and
// `temp_ratio` bytes of temporaries per byte, made and freed inside every step.
// `per_param_temps`: a single-tensor implementation (foreach=False, transformers' Adafactor, the
// bitsandbytes kernels) makes one parameter's temporaries at a time, `temp_ratio` of that
// parameter each (the footprint's peak, reached at the largest); foreach and fused ones make
// every parameter's at once.
// `keep_grads`: zero_grad(set_to_none=False) (torch < 2.0; docs/formulas.md#zero-grad-set-to-none):
// the trace's .grad tensors (those its zero_grad frees) stay allocated from the first step on, and
// in a later step each new gradient is a temporary added in place into its .grad and freed at once.
// `shard_over`: the ranks the optimizer's states are split over (ZeRO-1/2/3, FSDP; 1 otherwise).
// The trace's parameters are whole; each rank steps its own shard of every parameter (FSDP2's
// DTensor shards, FSDP1's flat shard, DeepSpeed's partition), so its states and temporaries are
// 1/shard_over of the whole parameter's (docs/formulas.md#the-caching-allocator).
struct OptimizerAllocations {
  double state_ratio = 0;
  int state_tensors = 0;
  double temp_ratio = 0;
  bool per_param_temps = false;
  bool keep_grads = false;
  int shard_over = 1;
};

// FSDP1 in the replay (docs/formulas.md#allocator-streams). The step's trace has the parameters
// whole and no collectives; with `enabled` the replay runs FSDP's construction (`construction`,
// below) in place of the whole-size parameters and adds, at the trace's segment marks, what
// torch.distributed.fsdp allocates on its own streams:
//  - stream 1 (unshard): each decoder-layer unit's padded unsharded flat parameter, allocated when
//    its forward (or its backward) begins and freed at its reshard with a use recorded on the
//    default stream (_free_unsharded_flat_param: record_stream, then resize_(0)); the root unit's
//    from the forward's start to the end of backward;
//  - stream 2 (post_backward): each layer unit's sharded gradient (the reduce-scatter output),
//    made when the layer's backward ends and kept until zero_grad.
// limit_all_gathers: before each all-gather the CPU waits for the free event `inflight_limit`
// reshards back (_FreeEventQueue: 2), so the replay completes exactly the events the CPU has
// waited for (the GPU no further ahead than the rate limiter forces); every event completes at
// the end of a step (the trainer's loss.item() synchronizes).
struct FsdpStreams {
  bool enabled = false;
  int layers = 0;                     // decoder layers in the trace
  std::int64_t layer_bytes = 0;       // one layer unit's padded unsharded flat parameter
  std::int64_t root_bytes = 0;        // the root unit's (embeddings, final norm, lm_head)
  std::int64_t grad_shard_bytes = 0;  // one layer unit's sharded gradient
  bool backward_prefetch = true;      // BACKWARD_PRE: a layer's backward gathers the layer before it
  bool reshard_after_forward = true;  // FULL_SHARD (SHARD_GRAD_OP keeps each layer to its backward)
  int inflight_limit = 2;             // limit_all_gathers (0: unlimited; the GPU then keeps up)
  // FSDP's construction of a model that is on the CPU when it is wrapped (HF Trainer, accelerate,
  // Answer.AI's low_memory loading), replayed instead of the trace's whole-size parameters: unit
  // by unit (the layers, then the root) its parameters moved to the GPU, with
  // `sync_module_states` broadcast in 250 MiB buckets, flattened (torch.cat), the originals
  // freed, the shard cloned and kept, the flat copy freed. Each unit: its parameters' bytes.
  std::vector<std::vector<std::int64_t>> construction;
  bool sync_module_states = true;
  int shard_over = 1;
  // The unsharded gradients freed after their reduce-scatter (docs/formulas.md#fsdp1-unsharded-
  // gradients): a trainable parameter's .grad that the trace keeps to zero_grad is, under FSDP1,
  // held by its unit's SplitWithSizesBackward until the unit's last one is made, concatenated into
  // the unit's flat gradient (default stream; the per-parameter ones freed), and that one is freed
  // in the unit's post-backward hook after the reduce-scatter is issued, with a use recorded on
  // the post_backward stream (_post_backward_hook / _reduce_grad: record_stream, then it goes out
  // of scope). Off: the trace's whole-size .grads stay to zero_grad.
  bool free_unsharded_grads = false;
};
inline constexpr int kStreamDefault = 0, kStreamUnshard = 1, kStreamPostBackward = 2;

struct ReplayResult {
  std::int64_t peak_allocated = 0;  // max_memory_allocated (block sizes: rounded to 512 B)
  std::int64_t peak_reserved = 0;   // max_memory_reserved
  int segments = 0;                 // cudaMalloc'ed segments at the end
  std::int64_t allocations = 0;     // requests replayed
  bool out_of_memory = false;       // a request the capacity could not hold
  bool fsdp_streams = false;        // FSDP1's all-gathers and reduce-scatters replayed on their streams
};

// Replays `trace` through the allocator: the set-up allocations once (at the first step's
// sizes), then every step in order (each one's tensors at its own sizes; what a step leaves
// alive is freed at its end, as the next batch replaces its inputs), with the optimizer's
// allocations at the optimizer step. `empty_cache_every` > 0 calls empty_cache() after every
// that many steps (HF Trainer's torch_empty_cache_steps).
ReplayResult replay(const AllocTrace& trace, const std::vector<ReplayStep>& steps, const OptimizerAllocations& opt,
                    const CachingAllocatorSettings& settings, int empty_cache_every = 0,
                    const FsdpStreams& fsdp = {});

// max_memory_reserved for an allocated peak `peak` (the engine's own: sharded, extrapolated):
// `peak` plus `slack`, what the allocator holds beyond its blocks in use at its worst moment
// (negative counts as none), rounded up to the 2 MiB of a segment.
std::int64_t reserved_for_peak(std::int64_t peak, std::int64_t slack);

}  // namespace memplan::sim

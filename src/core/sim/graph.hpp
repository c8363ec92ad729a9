// A symbolic model of PyTorch's autograd memory behaviour (docs/formulas.md#the-step-simulator).
//
// The training step is written as a program of tensor ops (model_program.cpp) against this
// Graph. Each op allocates its outputs, records an autograd node holding exactly the tensors
// PyTorch saves for backward (only those needed for inputs that require grad), and a backward
// rule that allocates what PyTorch's derivative formula allocates. backward() then runs the
// nodes in reverse creation order (the single-threaded CPU engine's order), accumulating
// gradients out of place in input buffers, handing parameter gradients to AccumulateGrad and
// releasing each node's saved tensors after it runs.
//
// Sizes are Polys in (micro-batch, seq-len), so one symbolic run describes every (b, s): after
// each allocation the live total (split by category) is recorded as an Event; the peak for a
// given (b, s) is the largest event value.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <new>
#include <span>
#include <type_traits>
#include <utility>
#include <string>
#include <vector>

#include "core/sim/poly.hpp"

namespace memplan::sim {

// What a byte is for; these become the components of an Estimate.
enum class Cat : std::uint8_t {
  kWeights,            // model weights (frozen or trained), incl. quantized storage
  kAdapterWeights,     // LoRA A/B matrices
  kGradients,          // parameter .grad tensors
  kOptimizerStates,    // persistent optimizer state
  kOptimizerTemps,     // temporaries inside optimizer.step()
  kActivations,        // layer tensors alive in forward / saved for backward
  kAttentionScores,    // (b, heads, s, s) tensors of eager attention
  kLoraDropout,        // LoRA input casts and dropout copies
  kAutocastCopies,     // low-precision weight copies made by autocast
  kLogits,             // lm_head output, fp32 upcast, log-probs and their gradients
  kActivationGrads,    // gradients flowing backward and backward temporaries
  kCheckpoints,        // layer inputs kept by gradient checkpointing
  kInputs,             // token ids, labels, masks, rotary tables
  kReference,          // DPO/GRPO frozen reference model weights
  kKvCache,            // GRPO generation: the KV cache of every sequence being generated
  kMasterWeights,      // DeepSpeed's fp32 master copy of the trainable parameters
  kBuckets,            // DDP gradient buckets, DeepSpeed reduce buckets
  kGathered,           // ZeRO-3 / FSDP unsharded parameters of the layers being computed
  kWorkspace,          // cuBLAS workspaces (CUDA: allocated through the caching allocator)
  kInFlight,           // pipeline parallelism: other micro-batches' activations the schedule holds
  kCount
};
inline constexpr int kNumCats = static_cast<int>(Cat::kCount);
const char* cat_name(Cat c);

enum class DT : std::uint8_t { kF32, kBF16, kF16, kF64, kI64, kBool, kU8 };
inline std::int64_t esize(DT d) {
  switch (d) {
    case DT::kF32: return 4;
    case DT::kBF16:
    case DT::kF16: return 2;
    case DT::kF64:
    case DT::kI64: return 8;
    case DT::kBool:
    case DT::kU8: return 1;
  }
  return 4;
}

using CatVec = std::array<Poly, kNumCats>;

struct Tensor {
  Tensor() = default;
  // Every field written once, in order: value-initializing the 88 bytes first compiled to a
  // `rep stos` that cost a quarter of Graph::make (docs/plan.md#speed).
  Tensor(const Poly& n, DT d, Cat c, bool rg, int base_of = -1)
      : numel(n), dt(d), cat(c), refs(1), alive(true), requires_grad(rg), base(base_of) {}
  Poly numel;
  DT dt = DT::kF32;
  Cat cat = Cat::kActivations;
  int refs = 0;
  bool alive = false;
  bool requires_grad = false;
  bool is_param = false;   // a leaf whose gradient goes to .grad (AccumulateGrad)
  // A parameter that requires grad in PyTorch although no gradient ever reaches it (BERT's pooler
  // under mean pooling): autocast caches its casts like a trained weight's.
  bool cast_cached = false;
  int grad_uses = 0;       // params: how many nodes deliver a gradient to it
  int grad_received = 0;
  int grad = -1;           // params: the .grad tensor once it exists
  int base = -1;           // views: the tensor whose storage they share (they own no bytes)
  Poly bytes() const { return base >= 0 ? Poly{} : numel * esize(dt); }
};

class Graph;

// Every allocation and free of a step in program order, for the caching-allocator replay
// (caching_allocator.hpp, docs/formulas.md#the-caching-allocator). Views own no bytes and do not
// appear; a tensor's bytes are a Poly in (b, s) like every size here.
struct AllocTrace {
  std::vector<Poly> bytes;         // per tensor id
  std::vector<std::int32_t> ops;   // t + 1: tensor t allocated; -(t + 1): tensor t freed
  std::size_t step_begin = 0;      // ops before it are set-up (parameters): alive across steps
  std::vector<std::int32_t> trainable;  // tensor ids of the trainable parameters
  std::size_t optimizer_at = 0;    // where optimizer.step() runs (before zero_grad's frees)
  // Where the program enters a (segment, instance): the op index and the pair, at every change
  // (the FSDP replay gathers and frees each decoder layer's parameters there).
  struct Mark {
    std::size_t at = 0;
    int segment = 0, instance = 0;
  };
  std::vector<Mark> marks;
};

// A short list (a node's inputs, outputs, saved tensors; the gradients a backward rule gives): up
// to N stored in place, so recording an op allocates nothing for them; longer lists (a concat of
// many) spill.
template <class T, int N>
class InlineVec {
 public:
  static constexpr int kInline = N;
  InlineVec() = default;
  InlineVec(std::initializer_list<T> l) {
    if (l.size() <= static_cast<std::size_t>(kInline)) {  // one copy, no per-element branch
      std::copy(l.begin(), l.end(), a_.begin());
      n_ = static_cast<int>(l.size());
      return;
    }
    for (const T& v : l) push_back(v);
  }
  InlineVec(const std::vector<T>& v) {  // NOLINT: implicit, like the braced lists
    for (const T& x : v) push_back(x);
  }
  void push_back(const T& v) {
    if (n_ < kInline) {
      a_[static_cast<std::size_t>(n_++)] = v;
      return;
    }
    if (n_ == kInline) heap_.assign(a_.begin(), a_.end());
    heap_.push_back(v);
    ++n_;
  }
  const T* begin() const { return n_ <= kInline ? a_.data() : heap_.data(); }
  const T* end() const { return begin() + n_; }
  T* begin() { return n_ <= kInline ? a_.data() : heap_.data(); }
  T* end() { return begin() + n_; }
  const T& operator[](std::size_t i) const { return begin()[i]; }
  T& operator[](std::size_t i) { return begin()[i]; }
  std::size_t size() const { return static_cast<std::size_t>(n_); }
  bool empty() const { return n_ == 0; }
  void clear() {
    n_ = 0;
    heap_.clear();
  }

 private:
  std::array<T, static_cast<std::size_t>(N)> a_{};
  int n_ = 0;
  std::vector<T> heap_;
};

using Ids = InlineVec<int, 6>;

// What a node's backward rule can do while it runs.
class Bwd {
 public:
  Bwd(Graph& g, const Ids& outs, Ids& grads, int node) : g_(g), outs_(outs), grads_(grads), node_(node) {}
  // Gradients given by the rule, delivered by the engine once the node has released its saved
  // tensors and incoming gradients (as PyTorch's evaluate_function does).
  InlineVec<std::pair<int, int>, 4> pending;
  // Gradient arriving for output k (-1 if none arrived).
  int grad(int k = 0) const { return grads_[static_cast<std::size_t>(k)]; }
  // Allocates a temporary (refcount 1; drop it or give() it).
  int temp(Poly numel, DT dt, Cat cat = Cat::kActivationGrads);
  // A new tensor shaped like tensor t (same numel and dtype): the usual gradient buffer.
  int like(int t, Cat cat = Cat::kActivationGrads);
  // Delivers gradient g (ownership passes) for `input`, if input needs a gradient.
  void give(int input, int g);
  // Delivers an existing tensor (e.g. the incoming grad) without copying.
  void pass(int input, int g);
  void drop(int t);
  bool needs(int input) const;
  // What one backward rule standing for several autograd nodes frees between them: the node's
  // hold on saved tensor t (once; nothing if it does not hold t) and incoming gradient k, each
  // released now instead of when the rule returns.
  void release(int t);
  void release_grad(int k = 0);
  Graph& graph() { return g_; }

 private:
  Graph& g_;
  const Ids& outs_;
  Ids& grads_;
  int node_;
};

// A node's backward rule: a callable stored in place when its captures fit (nearly every op's
// do: a few ids and sizes), so recording an op allocates nothing; move-only.
class BackwardFn {
 public:
  BackwardFn() = default;
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, BackwardFn>>>
  BackwardFn(F&& f) {  // NOLINT: implicit, like std::function
    using T = std::decay_t<F>;
    if constexpr (sizeof(T) <= kInline && alignof(T) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<T>) {
      new (buf_) T(std::forward<F>(f));
      ops_ = &inline_ops<T>;
    } else {
      *reinterpret_cast<T**>(buf_) = new T(std::forward<F>(f));
      ops_ = &heap_ops<T>;
    }
  }
  BackwardFn(BackwardFn&& o) noexcept : ops_(o.ops_) {
    if (ops_ != nullptr) ops_->move(buf_, o.buf_);
    o.ops_ = nullptr;  // moved from: nothing left to destroy
  }
  BackwardFn& operator=(BackwardFn&& o) noexcept {
    if (this != &o) {
      reset();
      ops_ = o.ops_;
      if (ops_ != nullptr) ops_->move(buf_, o.buf_);
      o.ops_ = nullptr;
    }
    return *this;
  }
  BackwardFn(const BackwardFn&) = delete;
  BackwardFn& operator=(const BackwardFn&) = delete;
  ~BackwardFn() { reset(); }
  // Constructs the callable in place (Graph::node: no temporary to move from).
  template <class F>
  void emplace(F&& f) {
    reset();
    new (this) BackwardFn(std::forward<F>(f));
  }
  explicit operator bool() const { return ops_ != nullptr; }
  void operator()(Bwd& ctx) const { ops_->call(const_cast<unsigned char*>(buf_), ctx); }

 private:
  static constexpr std::size_t kInline = 96;
  struct Ops {
    void (*call)(void*, Bwd&);
    void (*move)(void* to, void* from);  // moves the callable from `from` into `to`; `from` holds none after
    void (*destroy)(void*);
  };
  template <class T>
  static constexpr Ops inline_ops{
      [](void* p, Bwd& c) { (*static_cast<T*>(p))(c); },
      [](void* to, void* from) {
        new (to) T(std::move(*static_cast<T*>(from)));
        static_cast<T*>(from)->~T();
      },
      [](void* p) { static_cast<T*>(p)->~T(); }};
  template <class T>
  static constexpr Ops heap_ops{[](void* p, Bwd& c) { (**static_cast<T**>(p))(c); },
                                [](void* to, void* from) { *static_cast<T**>(to) = *static_cast<T**>(from); },
                                [](void* p) { delete *static_cast<T**>(p); }};
  void reset() {
    if (ops_ != nullptr) ops_->destroy(buf_);
    ops_ = nullptr;
  }
  alignas(std::max_align_t) unsigned char buf_[kInline];
  const Ops* ops_ = nullptr;
};

struct Node {
  Ids inputs;   // inputs that require grad when the node was created
  Ids outputs;
  Ids saved;    // tensors held until the node has run
  BackwardFn fn;
  bool released = false;
  int group = -1;            // non-reentrant checkpoint region whose saved tensors are recomputed
  int saved_slots = 0;       // how many tensors it would have saved (filled on recomputation)
};

struct Event {
  int segment = 0;
  int instance = 0;  // which middle layer, for segments that repeat
  Poly total;
  // The categories at this event, in the run's EventCats: values [offset, offset + count), one
  // per (category, monomial) of its layout's first `count` entries.
  std::uint32_t offset = 0;
  std::uint32_t count = 0;
};

// The categories of a run's events, stored compactly: a (category, monomial) coefficient is
// recorded from the first event at which it is nonzero on, and most of the categories x monomials never are.
// An event then costs tens of bytes instead of a whole CatVec (categories x 9 monomials x 8 bytes) (docs/plan.md#speed).
class EventCats {
 public:
  Poly at(const Event& e, Cat c) const {
    Poly p;
    for (const std::uint16_t j : by_cat_[static_cast<std::size_t>(c)])
      if (j < e.count) p.c[layout_[j].second] = values_[e.offset + j];
    return p;
  }
  // Whether category c is the same at a and b (events of this run), without building it.
  bool same(const Event& a, const Event& b, Cat c) const { return same(a, b, by_cat_[static_cast<std::size_t>(c)]); }
  // The layout indices of categories `cats`, for same(a, b, indices): one list to compare
  // instead of one per category.
  std::vector<std::uint16_t> indices(std::span<const Cat> cats) const {
    std::vector<std::uint16_t> out;
    for (const Cat c : cats) out.insert(out.end(), by_cat_[static_cast<std::size_t>(c)].begin(), by_cat_[static_cast<std::size_t>(c)].end());
    return out;
  }
  bool same(const Event& a, const Event& b, std::span<const std::uint16_t> indices) const {
    for (const std::uint16_t j : indices)
      if ((j < a.count ? values_[a.offset + j] : 0) != (j < b.count ? values_[b.offset + j] : 0)) return false;
    return true;
  }
  CatVec all(const Event& e) const {
    CatVec v{};
    for (std::uint32_t j = 0; j < e.count; ++j) v[layout_[j].first].c[layout_[j].second] = values_[e.offset + j];
    return v;
  }

 private:
  friend class Graph;
  std::vector<std::pair<std::uint8_t, std::uint8_t>> layout_;  // (category, monomial)
  std::array<std::vector<std::uint16_t>, kNumCats> by_cat_;     // layout indices of each category
  std::vector<std::int64_t> values_;
};

class Graph {
 public:
  // Room for n tensors and nodes and `events` events (about 32 recorded coefficients each): a
  // growing vector copies itself, and faults its pages in, again at every doubling.
  void reserve(std::size_t n, std::size_t events) {
    tensors_.reserve(n);
    buffer_.reserve(n);
    nodes_.reserve(n);
    node_segment_.reserve(n);
    node_instance_.reserve(n);
    events_.reserve(events);
    cats_.values_.reserve(events * 32);
  }

  // ---- tensors
  int make(Poly numel, DT dt, Cat cat, bool requires_grad = false);
  int param(Poly numel, DT dt, Cat cat, bool trainable);
  // A view of `base` with logical size `numel` (its gradient has that size); owns no bytes.
  int view(int base, Poly numel);
  void hold(int t);
  void drop(int t);
  void retag(int t, Cat cat);
  Tensor& at(int t) { return tensors_[static_cast<std::size_t>(t)]; }
  const Tensor& at(int t) const { return tensors_[static_cast<std::size_t>(t)]; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  bool rg(int t) const { return grad_enabled_ && at(t).requires_grad; }

  // ---- autograd
  bool grad_enabled() const { return grad_enabled_; }
  void set_grad_enabled(bool on) { grad_enabled_ = on; }
  // Records a node if any of `inputs` requires grad (and grad mode is on); marks the outputs as
  // requiring grad; holds `saved`. Returns false (and saves nothing) otherwise.
  template <class F>
  bool node(const Ids& inputs, const Ids& outputs, const Ids& saved, F&& fn) {
    bool recorded = false;
    if (Node* n = open_node(inputs, outputs, saved, recorded)) n->fn.emplace(std::forward<F>(fn));
    return recorded;
  }
  // Runs backward from `root` (whose gradient is a 4-byte scalar) over the nodes created since
  // `first_node`; used for the whole step and for checkpoint recomputation.
  void backward(int root, int first_node = 0);
  // Like backward() but starts from an existing gradient tensor for `root` (owned by the caller).
  void backward_from(int root, int root_grad, int first_node);
  // Releases the saved tensors of every node from `first_node` on (the graph is freed).
  void release_graph(int first_node = 0);
  int node_count() const { return static_cast<int>(nodes_.size()); }
  // zero_grad(set_to_none=True): frees every parameter .grad.
  void free_param_grads();
  // Gives every trainable parameter a .grad (an earlier micro-batch's accumulated gradient).
  void preallocate_param_grads();

  // ---- non-reentrant checkpointing (saved_tensors_hooks that store nothing and recompute)
  // Nodes created between begin_/end_checkpoint_region keep no saved tensors; the first time
  // one of them runs in backward, `recompute` reruns the region in capture mode and the
  // recaptured tensors are handed back to the region's nodes in order.
  int begin_checkpoint_region(std::function<void()> recompute, std::vector<int> holds);
  void end_checkpoint_region();
  bool capturing() const { return capture_ != nullptr; }
  // Selective checkpointing (torch.utils.checkpoint.create_selective_checkpoint_contexts): in the
  // open region's forward, sac_store keeps tensor t (a detached alias of an op output the policy
  // saves) in the region's storage; in its recomputation, sac_take pops the next stored tensor in
  // store order (its reference passes to the caller) instead of the op running again. Entries
  // never popped go when the region is freed.
  void sac_store(int t);
  int sac_take();

  // torch >= 2.0 accumulates gradients in place when it holds the last reference.
  void set_inplace_accumulation(bool on) { inplace_accumulation_ = on; }
  bool inplace_accumulation() const { return inplace_accumulation_; }

  // Gradient of a non-parameter tensor after backward_from (checkpoint inputs), or -1.
  int take_grad(int t);

  // ---- recording
  void set_segment(int s) {
    flush();
    segment_ = s;
  }
  int segment() const { return segment_; }
  void set_instance(int i) {
    flush();
    instance_ = i;
  }
  // Set-up allocations (parameters) are not timeline events.
  void set_recording(bool on) {
    flush();
    recording_ = on;
    if (on && trace_ != nullptr && trace_->step_begin == 0) trace_->step_begin = trace_->ops.size();
  }
  // Records every allocation and free into `t` from now on (nullptr: none).
  void set_trace(AllocTrace* t) { trace_ = t; }
  // Marks where optimizer.step() runs in the trace (now).
  void mark_optimizer_step() {
    if (trace_ != nullptr) trace_->optimizer_at = trace_->ops.size();
  }
  // Maps the segment a node was created in to the segment its backward is recorded in.
  void set_backward_segment_map(std::function<int(int)> f) { backward_segment_ = std::move(f); }
  const std::vector<Event>& events() {
    flush();
    return events_;
  }
  const EventCats& event_cats() {
    flush();
    return cats_;
  }
  // Hands the timeline over at the end of a program (no copy; nothing is recorded after).
  void take_events(std::vector<Event>& events, EventCats& cats) {
    flush();
    recording_ = false;
    events = std::move(events_);
    cats = std::move(cats_);
  }
  const Poly& live_total() const { return live_total_; }
  const CatVec& live() const { return live_; }

 private:
  friend class Bwd;
  void deliver(int input, int g);
  void accumulate_param(int p, int g);
  // An allocation marks the live state for recording; the event is written when something is
  // freed next (or the segment changes), so a run of allocations copies the categories once.
  void record() { pending_ = recording_; }
  void flush();
  // Adds (kSign +1) or subtracts (-1) a tensor's bytes, numel x esize, to category c (and to the
  // total unless `total` is false), touching only its nonzero monomials: most tensors have one
  // or two of the kNumMono. A coefficient that becomes nonzero for the first time gets a slot in
  // the EventCats layout; flat_ keeps every slot's live value, so an event copies one array.
  // Overflow is checked as Poly arithmetic checks it: every product first, then the sums.
  template <int kSign>
  [[gnu::always_inline]] void account(Cat c, const Poly& numel, std::int64_t esize, bool total = true) {
    std::array<std::int64_t, kNumMono> v;
    unsigned nonzero = 0;
    for (int i = 0; i < kNumMono; ++i)
      if (numel.c[i] != 0) {
        v[static_cast<std::size_t>(i)] = checked_mul(numel.c[i], esize);
        nonzero |= 1u << i;
      }
    const auto ci = static_cast<std::size_t>(c);
    Poly& live = live_[ci];
    for (; nonzero != 0; nonzero &= nonzero - 1) {
      const int i = __builtin_ctz(nonzero);
      const std::int64_t x = v[static_cast<std::size_t>(i)];
      live.c[i] = kSign > 0 ? checked_add(live.c[i], x) : checked_sub(live.c[i], x);
      if (total) live_total_.c[i] = kSign > 0 ? checked_add(live_total_.c[i], x) : checked_sub(live_total_.c[i], x);
      std::uint16_t& slot = slot_[ci][static_cast<std::size_t>(i)];
      if (slot == 0) [[unlikely]] slot = new_slot(c, i);
      flat_[slot - 1u] = live.c[i];
    }
  }
  std::uint16_t new_slot(Cat c, int mono) {
    cats_.by_cat_[static_cast<std::size_t>(c)].push_back(static_cast<std::uint16_t>(cats_.layout_.size()));
    cats_.layout_.emplace_back(static_cast<std::uint8_t>(c), static_cast<std::uint8_t>(mono));
    flat_.push_back(0);
    return static_cast<std::uint16_t>(cats_.layout_.size());
  }
  void run_node(int n);
  // A trace mark where the op about to be traced is in another (segment, instance) than the last.
  void mark_trace() {
    auto& m = trace_->marks;
    if (m.empty() || m.back().segment != segment_ || m.back().instance != instance_)
      m.push_back({trace_->ops.size(), segment_, instance_});
  }
  // node() less its backward rule: the new node (made in place in nodes_), or nullptr where no
  // node is made; `recorded` is node()'s answer.
  Node* open_node(const Ids& inputs, const Ids& outputs, const Ids& saved, bool& recorded);

  std::vector<Tensor> tensors_;
  std::vector<Node> nodes_;
  std::vector<int> node_segment_;  // segment in which each node was created
  std::vector<int> node_instance_;
  std::vector<int> buffer_;  // per tensor: pending gradient (-1)
  std::vector<Event> events_;
  EventCats cats_;
  // Per (category, monomial): 1 + its index in the EventCats layout, 0 until it is first nonzero.
  std::array<std::array<std::uint16_t, kNumMono>, kNumCats> slot_{};
  std::vector<std::int64_t> flat_;  // the live value of each layout entry, in layout order
  CatVec live_{};
  Poly live_total_;
  int segment_ = 0;
  int instance_ = 0;
  bool recording_ = true;
  AllocTrace* trace_ = nullptr;
  bool freed_since_event_ = true;
  bool pending_ = false;  // allocations since the last event write
  std::function<int(int)> backward_segment_;
  bool grad_enabled_ = true;
  bool inplace_accumulation_ = false;
  struct Region {
    std::function<void()> recompute;
    std::vector<int> nodes;
    std::vector<int> holds;  // tensors the hooks' closures keep (inputs, mask, RNG state)
    std::vector<int> cache;  // selective checkpointing's stored op outputs, popped from `popped` on
    std::size_t popped = 0;
    bool done = false;
    bool freed = false;
  };
  void maybe_free_region(int r);
  std::vector<Region> regions_;
  int open_region_ = -1;
  std::vector<int>* capture_ = nullptr;
  int recomputing_ = -1;  // the region being recomputed (sac_take's storage)
  void recompute_region(int r);
};

}  // namespace memplan::sim

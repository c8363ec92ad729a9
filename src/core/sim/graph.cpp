#include "core/sim/graph.hpp"

#include <algorithm>

namespace memplan::sim {

const char* cat_name(Cat c) {
  switch (c) {
    case Cat::kWeights: return "weights";
    case Cat::kAdapterWeights: return "adapter_weights";
    case Cat::kGradients: return "gradients";
    case Cat::kOptimizerStates: return "optimizer_states";
    case Cat::kOptimizerTemps: return "optimizer_temporaries";
    case Cat::kActivations: return "activations";
    case Cat::kAttentionScores: return "attention_scores";
    case Cat::kLoraDropout: return "lora_inputs";
    case Cat::kAutocastCopies: return "autocast_weight_copies";
    case Cat::kLogits: return "logits_and_loss";
    case Cat::kActivationGrads: return "activation_gradients";
    case Cat::kCheckpoints: return "checkpointed_inputs";
    case Cat::kInputs: return "inputs_and_masks";
    case Cat::kReference: return "reference_model";
    case Cat::kKvCache: return "kv_cache";
    case Cat::kMasterWeights: return "master_weights";
    case Cat::kBuckets: return "communication_buckets";
    case Cat::kGathered: return "gathered_parameters";
    case Cat::kWorkspace: return "cublas_workspace";
    case Cat::kInFlight: return "in_flight_activations";
    case Cat::kCount: break;
  }
  return "?";
}

// ---- Bwd

int Bwd::temp(Poly numel, DT dt, Cat cat) { return g_.make(numel, dt, cat); }
int Bwd::like(int t, Cat cat) { return g_.make(g_.at(t).numel, g_.at(t).dt, cat); }
void Bwd::give(int input, int g) { pending.push_back({input, g}); }
void Bwd::pass(int input, int g) {
  g_.hold(g);
  pending.push_back({input, g});
}
void Bwd::drop(int t) { g_.drop(t); }
bool Bwd::needs(int input) const { return g_.at(input).requires_grad; }
void Bwd::release(int t) {
  for (int& s : g_.nodes_[static_cast<std::size_t>(node_)].saved)
    if (s == t) {
      s = -1;
      g_.drop(t);
      return;
    }
}
void Bwd::release_grad(int k) {
  int& gr = grads_[static_cast<std::size_t>(k)];
  if (gr < 0) return;
  g_.drop(gr);
  gr = -1;
}

// ---- tensors

int Graph::make(Poly numel, DT dt, Cat cat, bool requires_grad) {
  // Built in place: a Tensor assembled on the stack and copied in stalled on the copy.
  const Tensor& t = tensors_.emplace_back(numel, dt, cat, requires_grad);
  buffer_.push_back(-1);
  account<+1>(cat, t.numel, esize(dt));
  record();
  const int id = static_cast<int>(tensors_.size()) - 1;
  if (trace_ != nullptr) {
    mark_trace();
    trace_->bytes.resize(tensors_.size());
    trace_->bytes.back() = t.numel * esize(dt);
    trace_->ops.push_back(id + 1);
  }
  return id;
}

int Graph::param(Poly numel, DT dt, Cat cat, bool trainable) {
  const int t = make(numel, dt, cat, trainable);
  at(t).is_param = true;
  if (trace_ != nullptr && trainable) trace_->trainable.push_back(t);
  return t;
}

int Graph::view(int base, Poly numel) {
  const DT dt = at(base).dt;
  const Cat cat = at(base).cat;
  hold(base);
  tensors_.emplace_back(numel, dt, cat, false, base);
  buffer_.push_back(-1);
  return static_cast<int>(tensors_.size()) - 1;
}

void Graph::hold(int t) { ++at(t).refs; }

void Graph::drop(int t) {
  Tensor& x = at(t);
  if (--x.refs > 0 || !x.alive) return;
  x.alive = false;
  if (x.base >= 0) {
    drop(x.base);
    return;
  }
  flush();
  account<-1>(x.cat, x.numel, esize(x.dt));
  freed_since_event_ = true;
  if (trace_ != nullptr) {
    mark_trace();
    trace_->ops.push_back(-(t + 1));
  }
}

void Graph::retag(int t, Cat cat) {
  Tensor& x = at(t);
  if (x.alive) {
    flush();
    if (x.base < 0) {  // a view owns no bytes
      account<-1>(x.cat, x.numel, esize(x.dt), false);
      account<+1>(cat, x.numel, esize(x.dt), false);
    }
    freed_since_event_ = true;  // a category went down
  }
  x.cat = cat;
}

void Graph::flush() {
  // An allocation with no free since the previous event of the same segment only raises every
  // category, so it replaces that event. Whether something was freed depends only on the
  // program, not on sizes, so the timelines of the two reduced models still align event by event
  // (the engine prunes dominated events only after extrapolating).
  if (!pending_) return;
  pending_ = false;
  const auto write = [this](Event& e) {
    e.offset = static_cast<std::uint32_t>(cats_.values_.size());
    e.count = static_cast<std::uint32_t>(cats_.layout_.size());
    cats_.values_.insert(cats_.values_.end(), flat_.begin(), flat_.end());
  };
  if (!freed_since_event_ && !events_.empty() && events_.back().segment == segment_ &&
      events_.back().instance == instance_) {
    Event& e = events_.back();
    e.total = live_total_;
    cats_.values_.resize(e.offset);  // the last event's values are the last ones written
    write(e);
    return;
  }
  Event& e = events_.emplace_back();
  e.segment = segment_;
  e.instance = instance_;
  e.total = live_total_;
  write(e);
  freed_since_event_ = false;
}

// ---- autograd

Node* Graph::open_node(const Ids& inputs, const Ids& outputs, const Ids& saved, bool& recorded) {
  const auto needs_grad = [this](int i) { return i >= 0 && at(i).requires_grad; };
  if (capture_ != nullptr) {
    // Recomputation under checkpoint's inner pack hook: keep what this op saves, make no node
    // (an op under no_grad inside the region saves nothing, as in the forward).
    if (!grad_enabled_ || std::none_of(inputs.begin(), inputs.end(), needs_grad)) return nullptr;
    recorded = true;
    for (int o : outputs) at(o).requires_grad = true;
    for (int s : saved) {
      if (s < 0) continue;
      hold(s);
      capture_->push_back(s);
    }
    return nullptr;
  }
  if (!grad_enabled_ || std::none_of(inputs.begin(), inputs.end(), needs_grad)) return nullptr;
  recorded = true;
  // Made in place: a Node assembled on the stack and moved in cost a copy of its three lists.
  Node& n = nodes_.emplace_back();
  for (int i : inputs)
    if (needs_grad(i)) n.inputs.push_back(i);
  for (int o : outputs) at(o).requires_grad = true;
  if (open_region_ >= 0) {
    // The outer pack hook stores only an index: nothing stays alive.
    for (int s : saved) n.saved_slots += s >= 0 ? 1 : 0;
    n.group = open_region_;
    regions_[static_cast<std::size_t>(open_region_)].nodes.push_back(static_cast<int>(nodes_.size()) - 1);
  } else {
    for (int s : saved) {
      if (s < 0) continue;
      hold(s);
      n.saved.push_back(s);
    }
  }
  n.outputs = outputs;
  node_segment_.push_back(segment_);
  node_instance_.push_back(instance_);
  return &n;
}

void Graph::deliver(int input, int g) {
  // Indices, not references: make() may reallocate tensors_ and buffer_.
  if (!at(input).requires_grad) {
    drop(g);
    return;
  }
  const std::size_t slot = static_cast<std::size_t>(input);
  const int buf = buffer_[slot];
  if (buf < 0) {
    buffer_[slot] = g;
  } else if (inplace_accumulation_ && at(buf).refs == 1 && at(buf).base < 0) {
    drop(g);  // old.add_(new)
  } else if (inplace_accumulation_ && at(g).refs == 1 && at(g).base < 0) {
    drop(buf);  // new.add_(old)
    buffer_[slot] = g;
  } else {
    // InputBuffer::accumulate in torch 1.13 adds out of place: old + new is a new tensor.
    const Poly numel = at(input).numel;
    const DT dt = at(input).dt;
    const Cat cat = at(buf).cat == Cat::kGradients ? Cat::kActivationGrads : at(buf).cat;
    const int sum = make(numel, dt, cat);
    drop(buf);
    drop(g);
    buffer_[slot] = sum;
  }
  if (at(input).is_param) {
    if (++at(input).grad_received >= at(input).grad_uses) accumulate_param(input, buffer_[slot]);
  }
}

void Graph::accumulate_param(int p, int g) {
  // AccumulateGrad: the first gradient is stolen into .grad when nothing else references it
  // (otherwise cloned); later ones are added in place.
  buffer_[static_cast<std::size_t>(p)] = -1;
  at(p).grad_received = 0;
  const int existing = at(p).grad;
  if (existing >= 0 && at(existing).alive) {
    drop(g);
    return;
  }
  if (at(g).refs > 1) {
    const int c = make(at(p).numel, at(p).dt, Cat::kGradients);
    drop(g);
    at(p).grad = c;
  } else {
    retag(g, Cat::kGradients);
    at(p).grad = g;
  }
}

int Graph::begin_checkpoint_region(std::function<void()> recompute, std::vector<int> holds) {
  for (int t : holds) hold(t);
  regions_.push_back(Region{std::move(recompute), {}, std::move(holds), {}, 0, false, false});
  open_region_ = static_cast<int>(regions_.size()) - 1;
  return open_region_;
}

void Graph::end_checkpoint_region() {
  // A region whose forward recorded no node (nothing in it required grad, e.g. a frozen vision
  // tower) saved nothing: torch's checkpoint frame dies with the forward and keeps no input.
  if (open_region_ >= 0 && regions_[static_cast<std::size_t>(open_region_)].nodes.empty())
    maybe_free_region(open_region_);
  open_region_ = -1;
}

void Graph::maybe_free_region(int r) {
  Region& reg = regions_[static_cast<std::size_t>(r)];
  if (reg.freed) return;
  for (int ni : reg.nodes)
    if (!nodes_[static_cast<std::size_t>(ni)].released) return;
  reg.freed = true;
  for (int t : reg.holds) drop(t);
  for (std::size_t i = reg.popped; i < reg.cache.size(); ++i) drop(reg.cache[i]);
  reg.popped = reg.cache.size();
}

void Graph::sac_store(int t) {
  if (open_region_ < 0) return;
  hold(t);
  regions_[static_cast<std::size_t>(open_region_)].cache.push_back(t);
}

int Graph::sac_take() {
  if (recomputing_ < 0) return -1;
  Region& reg = regions_[static_cast<std::size_t>(recomputing_)];
  if (reg.popped >= reg.cache.size()) return -1;
  return reg.cache[reg.popped++];
}

void Graph::recompute_region(int r) {
  Region& reg = regions_[static_cast<std::size_t>(r)];
  reg.done = true;
  std::vector<int> captured;
  capture_ = &captured;
  const bool prev = grad_enabled_;
  grad_enabled_ = true;
  recomputing_ = r;
  reg.recompute();
  recomputing_ = -1;
  grad_enabled_ = prev;
  capture_ = nullptr;
  // storage[i] goes to the i-th saved slot, in node creation order.
  std::size_t k = 0;
  for (int ni : regions_[static_cast<std::size_t>(r)].nodes) {
    Node& n = nodes_[static_cast<std::size_t>(ni)];
    for (int s = 0; s < n.saved_slots && k < captured.size(); ++s) n.saved.push_back(captured[k++]);
  }
  for (; k < captured.size(); ++k) drop(captured[k]);
}

void Graph::run_node(int idx) {
  Node& n = nodes_[static_cast<std::size_t>(idx)];
  if (n.released) return;
  if (n.group >= 0 && n.saved_slots > 0 && !regions_[static_cast<std::size_t>(n.group)].done) {
    bool has_grad = false;
    for (int o : n.outputs) has_grad = has_grad || buffer_[static_cast<std::size_t>(o)] >= 0;
    if (has_grad) {
      flush();
      segment_ = backward_segment_ ? backward_segment_(node_segment_[static_cast<std::size_t>(idx)])
                                   : node_segment_[static_cast<std::size_t>(idx)];
      instance_ = node_instance_[static_cast<std::size_t>(idx)];
      recompute_region(n.group);
    }
  }
  Ids grads;
  bool any = false;
  for (int o : n.outputs) {
    int& b = buffer_[static_cast<std::size_t>(o)];
    grads.push_back(b);
    any = any || b >= 0;
    b = -1;
  }
  if (!any) return;
  const int seg = node_segment_[static_cast<std::size_t>(idx)];
  flush();
  segment_ = backward_segment_ ? backward_segment_(seg) : seg;
  instance_ = node_instance_[static_cast<std::size_t>(idx)];
  InlineVec<std::pair<int, int>, 4> pending;
  {
    // Moved out (a node runs once): the rule may append nodes (checkpoint recomputation).
    const BackwardFn fn = std::move(nodes_[static_cast<std::size_t>(idx)].fn);
    const Ids outs = nodes_[static_cast<std::size_t>(idx)].outputs;
    Bwd ctx(*this, outs, grads, idx);
    fn(ctx);
    pending = std::move(ctx.pending);
  }
  // evaluate_function: the incoming gradients die with the call, saved tensors are released,
  // then the outputs are added to the next nodes' input buffers.
  for (int gr : grads)
    if (gr >= 0) drop(gr);
  Node& m = nodes_[static_cast<std::size_t>(idx)];
  for (int s : m.saved)
    if (s >= 0) drop(s);
  m.saved.clear();
  m.released = true;
  if (m.group >= 0) maybe_free_region(m.group);
  for (const auto& [input, g] : pending) deliver(input, g);
}

void Graph::backward(int root, int first_node) {
  const int g = make(Poly::constant(1), DT::kF32, Cat::kActivationGrads);  // ones_like(loss)
  backward_from(root, g, first_node);
}

void Graph::backward_from(int root, int root_grad, int first_node) {
  const int end = static_cast<int>(nodes_.size());
  // Expected deliveries per parameter in this graph.
  for (int i = first_node; i < end; ++i)
    for (int in : nodes_[static_cast<std::size_t>(i)].inputs)
      if (at(in).is_param) at(in).grad_uses = 0;
  for (int i = first_node; i < end; ++i)
    for (int in : nodes_[static_cast<std::size_t>(i)].inputs)
      if (at(in).is_param) ++at(in).grad_uses;
  deliver(root, root_grad);
  for (int i = end - 1; i >= first_node; --i) run_node(i);
}

int Graph::take_grad(int t) {
  const int g = buffer_[static_cast<std::size_t>(t)];
  buffer_[static_cast<std::size_t>(t)] = -1;
  return g;
}

void Graph::release_graph(int first_node) {
  for (std::size_t i = static_cast<std::size_t>(first_node); i < nodes_.size(); ++i) {
    Node& n = nodes_[i];
    if (n.released) continue;
    for (int s : n.saved)
      if (s >= 0) drop(s);
    n.saved.clear();
    n.released = true;
    if (n.group >= 0) maybe_free_region(n.group);
  }
}

void Graph::preallocate_param_grads() {
  const std::size_t n = tensors_.size();  // make() appends: visit the parameters only
  for (std::size_t i = 0; i < n; ++i) {
    if (!tensors_[i].is_param || !tensors_[i].requires_grad || tensors_[i].grad >= 0) continue;
    const int g = make(tensors_[i].numel, tensors_[i].dt, Cat::kGradients);
    tensors_[i].grad = g;
  }
}

void Graph::free_param_grads() {
  for (auto& t : tensors_) {
    if (t.is_param && t.grad >= 0) {
      drop(t.grad);
      t.grad = -1;
    }
  }
}

}  // namespace memplan::sim

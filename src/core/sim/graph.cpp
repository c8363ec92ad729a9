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
    case Cat::kCount: break;
  }
  return "?";
}

std::int64_t esize(DT d) {
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

// ---- Bwd

int Bwd::temp(Poly numel, DT dt, Cat cat) { return g_.make(numel, dt, cat); }
int Bwd::like(int t, Cat cat) { return g_.make(g_.at(t).numel, g_.at(t).dt, cat); }
void Bwd::give(int input, int g) { g_.deliver(input, g); }
void Bwd::pass(int input, int g) {
  g_.hold(g);
  g_.deliver(input, g);
}
void Bwd::drop(int t) { g_.drop(t); }
bool Bwd::needs(int input) const { return g_.at(input).requires_grad; }

// ---- tensors

int Graph::make(Poly numel, DT dt, Cat cat, bool requires_grad) {
  Tensor t;
  t.numel = numel;
  t.dt = dt;
  t.cat = cat;
  t.refs = 1;
  t.alive = true;
  t.requires_grad = requires_grad;
  tensors_.push_back(t);
  buffer_.push_back(-1);
  const Poly b = t.bytes();
  live_[static_cast<int>(cat)] += b;
  live_total_ += b;
  record();
  return static_cast<int>(tensors_.size()) - 1;
}

int Graph::param(Poly numel, DT dt, Cat cat, bool trainable) {
  const int t = make(numel, dt, cat, trainable);
  at(t).is_param = true;
  return t;
}

int Graph::view(int base, Poly numel) {
  Tensor t;
  t.numel = numel;
  t.dt = at(base).dt;
  t.cat = at(base).cat;
  t.refs = 1;
  t.alive = true;
  t.base = base;
  hold(base);
  tensors_.push_back(t);
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
  const Poly b = x.bytes();
  live_[static_cast<int>(x.cat)] -= b;
  live_total_ -= b;
}

void Graph::retag(int t, Cat cat) {
  Tensor& x = at(t);
  if (x.alive) {
    const Poly b = x.bytes();
    live_[static_cast<int>(x.cat)] -= b;
    live_[static_cast<int>(cat)] += b;
  }
  x.cat = cat;
}

void Graph::record() {
  // Consecutive allocations in a segment only ever raise the total, so the previous event of
  // the same segment is dominated when nothing was freed in between; keep the list short.
  if (!events_.empty() && events_.back().segment == segment_ && live_total_.dominates(events_.back().total)) {
    bool only_growth = true;
    for (int i = 0; i < kNumCats && only_growth; ++i)
      only_growth = live_[static_cast<std::size_t>(i)].dominates(events_.back().cats[static_cast<std::size_t>(i)]);
    if (only_growth) {
      events_.back().total = live_total_;
      events_.back().cats = live_;
      return;
    }
  }
  events_.push_back(Event{segment_, live_total_, live_});
}

// ---- autograd

bool Graph::node(const std::vector<int>& inputs, const std::vector<int>& outputs, const std::vector<int>& saved,
                 BackwardFn fn) {
  if (!grad_enabled_) return false;
  Node n;
  for (int i : inputs)
    if (i >= 0 && at(i).requires_grad) n.inputs.push_back(i);
  if (n.inputs.empty()) return false;
  for (int o : outputs) at(o).requires_grad = true;
  for (int s : saved) {
    if (s < 0) continue;
    hold(s);
    n.saved.push_back(s);
  }
  n.outputs = outputs;
  n.fn = std::move(fn);
  nodes_.push_back(std::move(n));
  node_segment_.push_back(segment_);
  return true;
}

void Graph::deliver(int input, int g) {
  Tensor& x = at(input);
  if (!x.requires_grad) {
    drop(g);
    return;
  }
  int& buf = buffer_[static_cast<std::size_t>(input)];
  if (buf < 0) {
    buf = g;
  } else {
    // InputBuffer::accumulate in torch 1.13 adds out of place: old + new is a new tensor.
    const int sum = make(x.numel, x.dt, at(buf).cat == Cat::kGradients ? Cat::kActivationGrads : at(buf).cat);
    drop(buf);
    drop(g);
    buf = sum;
  }
  if (x.is_param) {
    if (++x.grad_received >= x.grad_uses) accumulate_param(input, buf);
  }
}

void Graph::accumulate_param(int p, int g) {
  // AccumulateGrad: the first gradient is stolen into .grad when nothing else references it
  // (otherwise cloned); later ones are added in place.
  Tensor& x = at(p);
  buffer_[static_cast<std::size_t>(p)] = -1;
  x.grad_received = 0;
  if (x.grad >= 0 && at(x.grad).alive) {
    drop(g);
    return;
  }
  if (at(g).refs > 1) {
    const int c = make(x.numel, x.dt, Cat::kGradients);
    drop(g);
    x.grad = c;
  } else {
    retag(g, Cat::kGradients);
    x.grad = g;
  }
}

void Graph::run_node(int idx) {
  Node& n = nodes_[static_cast<std::size_t>(idx)];
  if (n.released) return;
  std::vector<int> grads;
  bool any = false;
  for (int o : n.outputs) {
    int& b = buffer_[static_cast<std::size_t>(o)];
    grads.push_back(b);
    any = any || b >= 0;
    b = -1;
  }
  if (!any) return;
  const int seg = node_segment_[static_cast<std::size_t>(idx)];
  segment_ = backward_segment_ ? backward_segment_(seg) : seg;
  {
    BackwardFn fn = n.fn;  // the rule may append nodes (checkpoint recomputation)
    std::vector<int> outs = nodes_[static_cast<std::size_t>(idx)].outputs;
    Bwd ctx(*this, outs, grads);
    fn(ctx);
  }
  for (int gr : grads)
    if (gr >= 0) drop(gr);
  Node& m = nodes_[static_cast<std::size_t>(idx)];
  for (int s : m.saved) drop(s);
  m.saved.clear();
  m.released = true;
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
    for (int s : n.saved) drop(s);
    n.saved.clear();
    n.released = true;
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

std::vector<Event> Graph::pruned_events() const {
  std::vector<Event> out;
  for (const Event& e : events_) {
    bool dominated = false;
    for (const Event& k : out)
      if (k.segment == e.segment && k.total.dominates(e.total)) {
        dominated = true;
        break;
      }
    if (dominated) continue;
    out.erase(std::remove_if(out.begin(), out.end(),
                             [&](const Event& k) { return k.segment == e.segment && e.total.dominates(k.total); }),
              out.end());
    out.push_back(e);
  }
  return out;
}

}  // namespace memplan::sim

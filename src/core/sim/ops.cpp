#include "core/sim/ops.hpp"

namespace memplan::sim {

namespace {

bool is_float(DT d) { return d == DT::kF32 || d == DT::kBF16 || d == DT::kF16 || d == DT::kF64; }

// Gradients keep the "logits" label so the breakdown shows the loss block as one component.
Cat grad_cat(const Tensor& t) { return t.cat == Cat::kLogits ? Cat::kLogits : Cat::kActivationGrads; }

int grad_like(Bwd& c, int t) { return c.like(t, grad_cat(c.graph().at(t))); }

}  // namespace

void Ops::enter_autocast(DT dt) { autocast_ = dt; }

void Ops::exit_autocast() {
  for (auto& [src, copy] : cast_cache_) g_.drop(copy);
  cast_cache_.clear();
  autocast_.reset();
}

DT Ops::promote(int a, int b) const {
  const DT x = g_.at(a).dt, y = g_.at(b).dt;
  if (x == y) return x;
  if (!is_float(x)) return y;
  if (!is_float(y)) return x;
  if (x == DT::kF64 || y == DT::kF64) return DT::kF64;
  return DT::kF32;  // f32 with a half type, or bf16 with f16
}

int Ops::to(int x, DT dt) {
  if (g_.at(x).dt == dt) {
    g_.hold(x);
    return x;
  }
  const int y = g_.make(g_.at(x).numel, dt, cat);
  g_.node({x}, {y}, {}, [x](Bwd& c) { c.give(x, grad_like(c, x)); });
  return y;
}

Poly Ops::cached_cast_bytes() const {
  Poly total;
  for (const auto& [leaf, copy] : cast_cache_) total += g_.at(copy).bytes();
  return total;
}

int Ops::cast_for_autocast(int x) {
  const Tensor& t = g_.at(x);  // only until to(): make() may move the tensors
  const bool is_param = t.is_param;
  if (!autocast_ || !is_float(t.dt) || t.dt == DT::kF64 || t.dt == *autocast_) {
    g_.hold(x);
    return x;
  }
  const DT to_dt = *autocast_;
  // at::autocast::cached_cast: fp32 leaves that require grad (trainable weights) are cast once
  // per autocast region; everything else is cast at every use.
  const bool cacheable = t.is_param && (t.requires_grad || t.cast_cached) && t.dt == DT::kF32;
  if (cacheable) {
    const auto it = std::lower_bound(cast_cache_.begin(), cast_cache_.end(), std::pair<int, int>{x, -1});
    if (it != cast_cache_.end() && it->first == x) {
      g_.hold(it->second);
      return it->second;
    }
  }
  const Cat saved = cat;
  if (is_param) cat = Cat::kAutocastCopies;
  const int c = to(x, to_dt);
  cat = saved;
  if (cacheable) {
    cast_cache_.insert(std::lower_bound(cast_cache_.begin(), cast_cache_.end(), std::pair<int, int>{x, -1}), {x, c});
    g_.hold(c);
  }
  return c;
}

int Ops::view(int x) {
  const int v = g_.view(x, g_.at(x).numel);
  g_.node({x}, {v}, {}, [x](Bwd& c) { c.pass(x, c.grad()); });
  return v;
}

int Ops::transpose_view(int x) {
  const int v = g_.view(x, g_.at(x).numel);
  g_.node({x}, {v}, {}, [x](Bwd& c) { c.give(x, grad_like(c, x)); });
  return v;
}

int Ops::slice(int x, Poly numel, bool trivial) {
  if (trivial && !b_.trivial_slices_are_ops) {
    const int v = g_.view(x, numel);
    g_.node({x}, {v}, {}, [x](Bwd& c) { c.pass(x, c.grad()); });
    return v;
  }
  const int v = g_.view(x, numel);
  // slice_backward: a zero tensor of the input's size with the gradient copied into the slice.
  g_.node({x}, {v}, {}, [x](Bwd& c) { c.give(x, grad_like(c, x)); });
  return v;
}

int Ops::clone(int x) {
  const int y = g_.make(g_.at(x).numel, g_.at(x).dt, cat);
  g_.node({x}, {y}, {}, [x](Bwd& c) { c.pass(x, c.grad()); });
  return y;
}

// F.pad (constant_pad_nd) makes a new tensor even when every pad is 0; its backward runs
// constant_pad_nd with the negated pads, which narrows the gradient and clones it: a new
// tensor of x's size (a clone's backward passes the gradient on instead).
int Ops::pad(int x, Poly numel) {
  const int y = g_.make(std::move(numel), g_.at(x).dt, cat);
  g_.node({x}, {y}, {}, [x](Bwd& c) { c.give(x, grad_like(c, x)); });
  return y;
}

void Ops::give_reduced(Bwd& c, int input, int full, const Poly& out_numel, DT out_dt) {
  const Tensor in = c.graph().at(input);  // a copy: temp() may reallocate the tensor table
  int cur = full;
  if (!(in.numel == out_numel)) {  // sum_to_size for a broadcast input
    const int r = c.temp(in.numel, out_dt, grad_cat(in));
    c.drop(cur);
    cur = r;
  }
  if (in.dt != out_dt) {  // validate_outputs casts to the input's dtype
    const int r = c.temp(in.numel, in.dt, grad_cat(in));
    c.drop(cur);
    cur = r;
  }
  c.give(input, cur);
}

InlineVec<int, 2> Ops::promoted_copies(std::initializer_list<int> inputs, DT common) {
  InlineVec<int, 2> copies;
  if (!b_.promote_by_copy) return copies;
  for (const int in : inputs)
    if (g_.at(in).dt != common) copies.push_back(g_.make(g_.at(in).numel, common, cat));
  return copies;
}

int Ops::mul(int a, int b, Poly out_numel) {
  const DT dt = promote(a, b);
  const InlineVec<int, 2> copies = promoted_copies({a, b}, dt);
  const int y = g_.make(out_numel, dt, cat);
  for (const int t : copies) g_.drop(t);
  const int save_b = g_.rg(a) ? b : -1;
  const int save_a = g_.rg(b) ? a : -1;
  g_.node({a, b}, {y}, {save_b, save_a}, [this, a, b, out_numel, dt](Bwd& c) {
    // grad * b and grad * a: the gradient is in the output's dtype, so on the CPU a saved input
    // of another dtype is promoted by a copy for each product.
    const auto product = [&](int other, int input) {
      if (!c.needs(input)) return -1;
      const int copy = b_.promote_by_copy && c.graph().at(other).dt != dt ? c.temp(c.graph().at(other).numel, dt) : -1;
      const int g = c.temp(out_numel, dt, grad_cat(c.graph().at(input)));
      if (copy >= 0) c.drop(copy);
      return g;
    };
    const int ga = product(b, a);
    const int gb = product(a, b);
    if (ga >= 0) give_reduced(c, a, ga, out_numel, dt);
    if (gb >= 0) give_reduced(c, b, gb, out_numel, dt);
  });
  return y;
}

int Ops::add(int a, int b, Poly out_numel) {
  const DT dt = promote(a, b);
  const InlineVec<int, 2> copies = promoted_copies({a, b}, dt);
  const int y = g_.make(out_numel, dt, cat);
  for (const int t : copies) g_.drop(t);
  g_.node({a, b}, {y}, {}, [this, a, b, out_numel, dt](Bwd& c) {
    for (int in : {a, b}) {
      if (!c.needs(in)) continue;
      const Tensor t = c.graph().at(in);
      if (t.numel == out_numel && t.dt == dt) {
        c.pass(in, c.grad());
      } else {
        // Reduction or cast straight from the shared gradient.
        c.give(in, c.temp(t.numel, t.dt, grad_cat(t)));
      }
    }
  });
  return y;
}

int Ops::scalar_op(int x) {
  const int y = g_.make(g_.at(x).numel, g_.at(x).dt, cat);
  g_.node({x}, {y}, {}, [x](Bwd& c) { c.give(x, grad_like(c, x)); });
  return y;
}

int Ops::pow2(int x) {
  const int y = g_.make(g_.at(x).numel, g_.at(x).dt, cat);
  g_.node({x}, {y}, {x}, [x](Bwd& c) {
    // pow_backward: grad * (2 * x.pow(1)); both temporaries live until the product exists.
    const int a = grad_like(c, x), b = grad_like(c, x), r = grad_like(c, x);
    c.drop(a);
    c.drop(b);
    c.give(x, r);
  });
  return y;
}

int Ops::rsqrt(int x) {
  const int y = g_.make(g_.at(x).numel, g_.at(x).dt, cat);
  g_.node({x}, {y}, {y}, [x](Bwd& c) {
    const int a = grad_like(c, x), b = grad_like(c, x), r = grad_like(c, x);  // -0.5 * grad * y^3
    c.drop(a);
    c.drop(b);
    c.give(x, r);
  });
  return y;
}

int Ops::mean_last(int x, Poly out_numel) {
  const int y = g_.make(out_numel, g_.at(x).dt, cat);
  const int saved = b_.mean_saves_input ? x : -1;
  g_.node({x}, {y}, {saved}, [x](Bwd& c) { c.give(x, grad_like(c, x)); });  // grad.expand(...) / n
  return y;
}

int Ops::sum(int x, Poly out_numel) {
  const int y = g_.make(out_numel, g_.at(x).dt, cat);
  g_.node({x}, {y}, {}, [x](Bwd& c) { c.pass(x, c.grad()); });
  return y;
}

int Ops::neg(int x) { return scalar_op(x); }

int Ops::silu(int x) {
  const int y = g_.make(g_.at(x).numel, g_.at(x).dt, cat);
  g_.node({x}, {y}, {x}, [x](Bwd& c) { c.give(x, grad_like(c, x)); });
  return y;
}

int Ops::gelu(int x) { return silu(x); }

int Ops::tanh(int x) {
  const int y = g_.make(g_.at(x).numel, g_.at(x).dt, cat);
  g_.node({x}, {y}, {y}, [x](Bwd& c) { c.give(x, grad_like(c, x)); });
  return y;
}

int Ops::concat(const std::vector<int>& parts) {
  Poly n;
  DT dt = g_.at(parts.front()).dt;
  for (int p : parts) {
    n += g_.at(p).numel;
    dt = g_.at(p).dt == DT::kF32 ? DT::kF32 : dt;
  }
  const int y = g_.make(n, dt, cat);
  g_.node(parts, {y}, {}, [parts](Bwd& c) {
    for (int p : parts) {
      if (!c.needs(p)) continue;
      c.give(p, c.graph().view(c.grad(), c.graph().at(p).numel));  // narrow(): a view of the gradient
    }
  });
  return y;
}

Ids Ops::expert_parameter_views(const Ids& params, std::int64_t experts) {
  Ids views;
  for (int p : params) views.push_back(g_.view(p, g_.at(p).numel));
  g_.node(params, views, {}, [params, experts](Bwd& c) {
    Graph& gr = c.graph();
    Poly whole;
    for (int p : params) whole += gr.at(p).numel;
    const DT dt = gr.at(params[0]).dt;
    for (std::size_t k = 0; k < params.size(); ++k) c.release_grad(static_cast<int>(k));  // the slices, copied in
    int acc = c.temp(whole, dt);
    for (std::int64_t e = 1; e < experts; ++e) {
      const int z = c.temp(whole, dt);
      if (gr.inplace_accumulation()) {  // acc.add_(z)
        c.drop(z);
        continue;
      }
      const int sum = c.temp(whole, dt);  // acc + z
      c.drop(acc);
      c.drop(z);
      acc = sum;
    }
    if (params.size() == 1) {
      c.give(params[0], acc);
      return;
    }
    for (int p : params) c.give(p, c.like(p));
    c.drop(acc);
  });
  return views;
}

int Ops::dropout(int x, double p) {
  if (p <= 0.0) {
    g_.hold(x);
    return x;
  }
  const Tensor t = g_.at(x);
  if (b_.cuda) {
    // native_dropout: output plus a bool mask, which is what backward keeps.
    const int y = g_.make(t.numel, t.dt, cat);
    const int mask = g_.make(t.numel, DT::kBool, cat);
    g_.node({x}, {y}, {mask}, [x](Bwd& c) { c.give(x, grad_like(c, x)); });
    g_.drop(mask);
    return y;
  }
  // CPU: noise = empty_like(x).bernoulli_(1 - p).div_(1 - p); out = x * noise (noise saved).
  const int noise = g_.make(t.numel, t.dt, cat);
  const int y = g_.make(t.numel, t.dt, cat);
  g_.node({x}, {y}, {noise}, [x](Bwd& c) { c.give(x, grad_like(c, x)); });
  g_.drop(noise);
  return y;
}

int Ops::linear(int x, int w, int bias, Poly out_numel) { return gemm(x, w, bias, out_numel, false); }

int Ops::patch_conv(int x, int w, int bias, Poly out_numel) { return gemm(x, w, bias, out_numel, true); }

int Ops::gemm(int x, int w, int bias, Poly out_numel, bool conv) {
  const int xc = cast_for_autocast(x);
  const int wc = cast_for_autocast(w);
  const int bc = bias >= 0 ? cast_for_autocast(bias) : -1;
  // aten.mm (no bias) under the per-op selective policy: every odd-numbered call is saved.
  const bool saved = sac.mode != SacMode::kOff && !conv && bias < 0 && ++sac.mm_count % 2 == 1;
  int y = saved && sac.mode == SacMode::kCached ? g_.sac_take() : -1;
  if (y < 0) y = g_.make(out_numel, g_.at(xc).dt, cat);
  if (saved && sac.mode == SacMode::kCaching) g_.sac_store(y);
  // mm saves the input only to compute the weight gradient, the weight only for the input's;
  // a convolution's single backward formula saves both.
  const int save_x = conv || g_.rg(wc) ? xc : -1;
  const int save_w = conv || g_.rg(xc) ? wc : -1;
  g_.node({xc, wc, bc}, {y}, {save_x, save_w}, [xc, wc, bc](Bwd& c) {
    const int gw = c.needs(wc) ? c.like(wc) : -1;  // grad^T @ x
    const int gx = c.needs(xc) ? grad_like(c, xc) : -1;  // grad @ W
    const int gb = bc >= 0 && c.needs(bc) ? c.like(bc) : -1;  // grad.sum(0)
    if (gx >= 0) c.give(xc, gx);
    if (gw >= 0) c.give(wc, gw);
    if (gb >= 0) c.give(bc, gb);
  });
  g_.drop(xc);
  g_.drop(wc);
  if (bc >= 0) g_.drop(bc);
  return y;
}

int Ops::matmul(int a, int b, Poly out_numel, bool copy_a, bool copy_b) {
  int ac = cast_for_autocast(a);
  int bc = cast_for_autocast(b);
  if (copy_a) {
    const int c = clone(ac);
    g_.drop(ac);
    ac = c;
  }
  if (copy_b) {
    const int c = clone(bc);
    g_.drop(bc);
    bc = c;
  }
  const int y = g_.make(out_numel, promote(ac, bc), cat);
  const int save_b = g_.rg(ac) ? bc : -1;
  const int save_a = g_.rg(bc) ? ac : -1;
  g_.node({ac, bc}, {y}, {save_a, save_b}, [ac, bc](Bwd& c) {
    const int ga = c.needs(ac) ? grad_like(c, ac) : -1;
    const int gb = c.needs(bc) ? grad_like(c, bc) : -1;
    if (ga >= 0) c.give(ac, ga);
    if (gb >= 0) c.give(bc, gb);
  });
  g_.drop(ac);
  g_.drop(bc);
  return y;
}

int Ops::repeat_kv(int x, int n_rep, bool single_kv_head) {
  if (n_rep == 1) {
    g_.hold(x);
    return x;
  }
  // hidden_states[:, :, None, :, :]: two full slices, an unsqueeze, two more full slices.
  const Poly n = g_.at(x).numel;
  int cur = x;
  g_.hold(cur);
  for (int i = 0; i < 4; ++i) {
    const int next = i == 2 ? view(cur) : slice(cur, n, true);
    g_.drop(cur);
    cur = next;
  }
  const int last = slice(cur, n, true);
  g_.drop(cur);
  // .expand(...).reshape(...): the reshape of an expanded tensor copies (with one KV head the
  // expanded dimension merges as a view); backward sums over the repeats.
  const int y = single_kv_head ? g_.view(last, n * n_rep) : g_.make(n * n_rep, g_.at(x).dt, cat);
  g_.node({last}, {y}, {}, [last](Bwd& c) { c.give(last, grad_like(c, last)); });
  g_.drop(last);
  return y;
}

int Ops::fused_attention(int q, int k, int v, Poly out_numel, Poly rows, int bias) {
  // Under the per-op selective policy the kernel's output and logsumexp are stored in forward
  // and taken back, in the same order, by the recomputation.
  const bool saved = sac.mode != SacMode::kOff && sac.attention;
  int o = saved && sac.mode == SacMode::kCached ? g_.sac_take() : -1;
  if (o < 0) o = g_.make(out_numel, g_.at(q).dt, cat);
  int lse = saved && sac.mode == SacMode::kCached ? g_.sac_take() : -1;
  if (lse < 0) lse = g_.make(rows, DT::kF32, cat);
  if (saved && sac.mode == SacMode::kCaching) {
    g_.sac_store(o);
    g_.sac_store(lse);
  }
  const Poly qn = g_.at(q).numel;
  g_.node({q, k, v}, {o}, {q, k, v, o, lse, bias}, [q, k, v, rows, qn](Bwd& c) {
    const int acc = c.temp(qn, DT::kF32);
    const int d = c.temp(rows, DT::kF32);
    const int gq = c.needs(q) ? c.like(q) : -1;
    const int gk = c.needs(k) ? c.like(k) : -1;
    const int gv = c.needs(v) ? c.like(v) : -1;
    c.drop(acc);
    c.drop(d);
    if (gq >= 0) c.give(q, gq);
    if (gk >= 0) c.give(k, gk);
    if (gv >= 0) c.give(v, gv);
  });
  g_.drop(lse);
  return o;
}

int Ops::eager_probs(int q, int kT, int mask, const Poly& scores, bool copy_q, bool copy_k, bool softcap) {
  cat = Cat::kAttentionScores;
  const int sc = matmul(q, kT, scores, copy_q, copy_k);
  g_.drop(kT);
  int cur = scalar_op(sc);  // * scaling
  g_.drop(sc);
  if (softcap) {
    const int a = scalar_op(cur);
    g_.drop(cur);
    const int t = tanh(a);
    g_.drop(a);
    cur = scalar_op(t);
    g_.drop(t);
  }
  if (mask >= 0) {
    const int masked = add(cur, mask, scores);
    g_.drop(cur);
    cur = masked;
  }
  const int p32 = softmax_f32(cur);
  g_.drop(cur);
  const int probs = to(p32, g_.at(q).dt);
  g_.drop(p32);
  return probs;
}

int Ops::attention_output(int probs, int v, const Poly& out_numel, bool copy_v) {
  cat = Cat::kActivations;
  const int o = matmul(probs, v, out_numel, false, copy_v);
  g_.drop(probs);
  const int ot = transpose_view(o);
  g_.drop(o);
  const int out = clone(ot);
  g_.drop(ot);
  return out;
}

int Ops::rotary(int x, int cos, int sin, Poly numel) {
  Poly half = numel;
  for (auto& v : half.c) v /= 2;
  const int c1 = mul(x, cos, numel);
  const int x1 = slice(x, half, false);
  const int x2 = slice(x, half, false);
  const int nx2 = neg(x2);
  g_.drop(x2);
  const int rh = concat({nx2, x1});
  g_.drop(nx2);
  g_.drop(x1);
  const int c2 = mul(rh, sin, numel);
  g_.drop(rh);
  const int out = add(c1, c2, numel);
  g_.drop(c1);
  g_.drop(c2);
  return out;
}

int Ops::softmax_f32(int x) {
  const int xc = to(x, DT::kF32);
  const int y = g_.make(g_.at(xc).numel, DT::kF32, cat);
  g_.node({xc}, {y}, {y}, [xc](Bwd& c) { c.give(xc, grad_like(c, xc)); });
  g_.drop(xc);
  return y;
}

int Ops::softmax(int x) {
  if (autocast_ && b_.cuda) return softmax_f32(x);
  const int y = g_.make(g_.at(x).numel, g_.at(x).dt, cat);
  g_.node({x}, {y}, {y}, [x](Bwd& c) { c.give(x, grad_like(c, x)); });
  return y;
}

int Ops::log_softmax(int x) {
  const int y = g_.make(g_.at(x).numel, g_.at(x).dt, cat);
  g_.node({x}, {y}, {y}, [x](Bwd& c) { c.give(x, grad_like(c, x)); });
  return y;
}

int Ops::nll_loss(int logp, int target) {
  const int y = g_.make(Poly::constant(1), DT::kF32, cat);
  const int total_weight = g_.make(Poly::constant(1), DT::kF32, cat);
  g_.node({logp}, {y}, {logp, target, total_weight}, [logp](Bwd& c) { c.give(logp, grad_like(c, logp)); });
  g_.drop(total_weight);
  return y;
}

int Ops::embedding(int ids, int w, Poly out_numel) {
  const int y = g_.make(out_numel, g_.at(w).dt, cat);
  g_.node({w}, {y}, {ids}, [w](Bwd& c) { c.give(w, c.like(w)); });  // zeros(V, h) + index_add
  return y;
}

}  // namespace memplan::sim

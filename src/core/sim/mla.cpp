#include "core/sim/mla.hpp"

#include <algorithm>
#include <vector>

namespace memplan::sim {

namespace {

Poly scaled(const Poly& p, std::int64_t k) { return p * k; }

// torch.split(x, [a, b], dim=-1): two views; SplitWithSizesBackward allocates one gradient of
// x's size and copies both parts in (a missing part is zero-filled).
std::pair<int, int> split2(Graph& g, int x, const Poly& first, const Poly& second) {
  const int a = g.view(x, first);
  const int b = g.view(x, second);
  g.node({x}, {a, b}, {}, [x](Bwd& c) { c.give(x, c.like(x)); });
  return {a, b};
}

// k_rot.expand(b, heads, s, rope): a stride-0 view; ExpandBackward sums back to k_rot's size.
int expand_heads(Graph& g, int x, const Poly& numel) {
  const int v = g.view(x, numel);
  g.node({x}, {v}, {}, [x](Bwd& c) { c.give(x, c.like(x)); });
  return v;
}

// DeepseekV32Attention.expand_kv (transformers 5): key_states = new_empty(b, heads, s, qk) and
// two copy_ into its slices, k_nope then the expanded k_rot. The same bytes as a cat; backward
// runs two CopySlices: each copies the incoming gradient into a new whole-key tensor and clones
// its slice for the source (the k_rot one also fills zeros for the overwritten slice), where
// cat's backward only narrows the gradient.
int expand_kv_key(Graph& g, Cat cat, int k_nope, int k_rot, const Poly& numel) {
  const int key = g.make(numel, g.at(k_nope).dt, cat);
  g.node({k_nope, k_rot}, {key}, {}, [k_nope, k_rot, key](Bwd& c) {
    Graph& gr = c.graph();
    const Poly whole = gr.at(key).numel;
    const DT dt = gr.at(key).dt;
    const int r1 = c.temp(whole, dt);               // result.copy_(grad)
    const int rot = c.like(k_rot);                  // grad_slice.clone()
    const int z = c.like(k_rot);                    // zeros_like for the overwritten slice
    c.drop(z);
    c.release_grad(0);
    const int r2 = c.temp(whole, dt);               // the k_nope copy_'s CopySlices
    const int nope = c.like(k_nope);
    c.drop(r1);
    c.drop(r2);  // the new_empty base needs no gradient
    c.give(k_nope, nope);
    c.give(k_rot, rot);
  });
  return key;
}

// DeepSeek-V3.2's lightning indexer as transformers 5 runs it in training
// (modeling_deepseek_v32.py DeepseekV32Indexer.forward, read at huggingface/transformers 01f8fa55;
// docs/models.md#deepseek-v32), on the layer input x and the query latent qr, all under
// torch.no_grad(): nothing is saved and its parameters get no gradient. q = wq_b(qr) and
// k = k_norm(wk(x)), split into their first qk_rope_head_dim dims (rotated, half-split rotary) and
// the rest, concatenated back; the scores are matmul(q.float(), k^T.float()) over
// [b, s, heads, d] x [b, 1, d, s]: matmul expands the broadcast key to [b, s, d, s] and reshapes it
// (a copy), the product is one fp32 score per index head and query-key pair, [b, s, heads, s], then
// * softmax_scale and relu (each a new tensor); weights_proj (kept in fp32) on x.to(fp32),
// * heads^-0.5, contracted with the scores into [b, s, s], + the causal mask, topk. Python keeps
// every local (q, its rope part and the rest, k, the relu scores, the weights) until the return;
// the int32 top-k indices are what comes back.
int lightning_indexer(MlaStep& st, int x, int qr) {
  Graph& g = st.g;
  Ops& ops = st.ops;
  const ModelSpec& m = st.m;
  const bool grad = g.grad_enabled();
  g.set_grad_enabled(false);
  const std::int64_t ih = m.index_heads, id = m.index_head_dim, r = m.qk_rope_head_dim;
  auto tok = [&](std::int64_t k) { return scaled(st.tokens, k); };
  const Poly pairs = st.pair_scores;  // b x s x s
  std::vector<int> locals;
  const int q = st.linear(qr, "indexer.wq_b", tok(ih * id));
  const int kl = st.linear(x, "indexer.wk", tok(id));
  const int k = g.make(tok(id), g.at(kl).dt, ops.cat);  // k_norm: nn.LayerNorm
  g.drop(kl);
  const int q_rot = st.rotate_half_rope(q, tok(ih * r));
  const int k_rot = st.rotate_half_rope(k, tok(r));
  const int qc = g.make(tok(ih * id), g.at(q).dt, ops.cat);  // torch.cat([q_rot, q_pass])
  const int kc = g.make(tok(id), g.at(k).dt, ops.cat);
  locals.insert(locals.end(), {q, k, q_rot, k_rot, qc, kc});
  const int qf = ops.to(qc, DT::kF32);  // q.float()
  const int kf = ops.to(kc, DT::kF32);
  const int kx = g.make(scaled(pairs, id), DT::kF32, ops.cat);  // the expanded key, reshaped
  const int raw = g.make(scaled(pairs, ih), DT::kF32, Cat::kAttentionScores);
  g.drop(kx);
  g.drop(qf);
  g.drop(kf);
  const int sc = g.make(scaled(pairs, ih), DT::kF32, Cat::kAttentionScores);  // * softmax_scale
  g.drop(raw);
  const int relu = g.make(scaled(pairs, ih), DT::kF32, Cat::kAttentionScores);
  g.drop(sc);
  const int xf = ops.to(x, DT::kF32);  // hidden_states.to(weights_proj.weight.dtype)
  const int w = st.linear(xf, "indexer.weights_proj", tok(ih));
  g.drop(xf);
  const int ws = g.make(tok(ih), DT::kF32, ops.cat);  // .float() * n_heads^-0.5
  g.drop(w);
  locals.insert(locals.end(), {relu, ws});
  const int idx = g.make(pairs, DT::kF32, Cat::kAttentionScores);  // [b, s, 1, heads] @ [b, s, heads, s]
  const int masked = g.make(pairs, DT::kF32, Cat::kAttentionScores);  // + attention_mask
  g.drop(idx);
  // topk(min(index_topk, s)): values and int64 indices, then .indices.to(torch.int32). The
  // selection is counted at index_topk per query (s x s when s is shorter: a few bytes a row).
  const Poly sel = tok(m.index_topk);
  const int vals = g.make(sel, DT::kF32, ops.cat);
  const int i64 = g.make(sel, DT::kI64, ops.cat);
  const int out = g.make(sel, DT::kF32, Cat::kInputs);  // int32: four bytes, as fp32
  g.drop(vals);
  g.drop(i64);
  g.drop(masked);
  for (int t : locals) g.drop(t);
  g.set_grad_enabled(grad);
  return out;
}

}  // namespace

std::pair<int, int> mla_attention(MlaStep& st, int x, int q_norm, int kv_norm) {
  Graph& g = st.g;
  Ops& ops = st.ops;
  const ModelSpec& m = st.m;
  const std::int64_t nh = m.num_heads, nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim, vd = m.v_head_dim;
  const std::int64_t qk = nope + rope, kvr = m.kv_lora_rank;
  auto tok = [&](std::int64_t k) { return scaled(st.tokens, k); };
  const bool v2 = m.model_type == "deepseek_v2";
  // DeepSeek-V3.2 in transformers 5 (modeling_deepseek_v32.py at 01f8fa55): the indexer, its own
  // interleaved rotary and expand_kv (docs/models.md#deepseek-v32).
  const bool v32 = m.index_heads > 0 && m.q_lora_rank > 0;
  // Its locals that the V3 code passes inline (the kv_a_layernorm output, the rotated q and k)
  // live until the forward returns.
  std::vector<int> late;
  auto keep = [&](int t) {
    if (!v32) return;
    g.hold(t);
    late.push_back(t);
  };

  // ---- q: q_b_proj(q_a_layernorm(q_a_proj(x))), or q_proj(x) without q LoRA.
  int q;
  // DeepSeek-V3.2: q_resid (the query latent) is a local of the forward, read by the indexer.
  int q_resid = -1;
  if (m.q_lora_rank > 0) {
    const int qa = st.linear(x, "q_a_proj", tok(m.q_lora_rank));
    const int qn = st.rms_norm(qa, q_norm, m.q_lora_rank, tok(m.q_lora_rank));
    g.drop(qa);
    q = st.linear(qn, "q_b_proj", tok(nh * qk));
    if (v32) q_resid = qn;
    else g.drop(qn);
  } else {
    q = st.linear(x, "q_proj", tok(nh * qk));
  }
  const int qt = ops.transpose_view(q);  // .view(query_shape).transpose(1, 2)
  auto [q_pass, q_rot0] = split2(g, qt, tok(nh * nope), tok(nh * rope));
  g.drop(qt);

  // ---- the compressed K/V: kv_a_proj_with_mqa -> [latent | k_rot], latent normed and expanded.
  const int ckv = st.linear(x, "kv_a_proj_with_mqa", tok(kvr + rope));
  auto [latent, k_rot0] = split2(g, ckv, tok(kvr), tok(rope));
  const int ln = st.rms_norm(latent, kv_norm, kvr, tok(kvr));
  g.drop(latent);
  const int kvb = st.linear(ln, "kv_b_proj", tok(nh * (nope + vd)));
  keep(ln);
  g.drop(ln);
  const int kvt = ops.transpose_view(kvb);
  auto [k_pass, value] = split2(g, kvt, tok(nh * nope), tok(nh * vd));
  g.drop(kvt);
  const int k_rot1 = ops.view(k_rot0);  // .view(b, 1, s, rope)
  g.drop(k_rot0);

  // ---- rotary on the rope parts only.
  auto rotate = [&](int r, const Poly& numel) {
    if (v2) {
      // transformers' DeepseekV2 apply_rotary_emb: view_as_complex(x.float()) * freqs_cis,
      // view_as_real(...).type_as(x). The product saves only the (no-grad) frequencies.
      const DT dt = g.at(r).dt;
      const int f = ops.to(r, DT::kF32);
      const int p = ops.mul(f, st.cos, numel);
      g.drop(f);
      const int out = ops.to(p, dt);
      g.drop(p);
      return out;
    }
    if (v32) {
      // transformers 5's apply_rotary_pos_emb_interleave (DeepSeek-V3.2): the even and odd dims
      // as strided slices, cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin]) on half-width tables
      // (which need no gradient, so the products save nothing of x): no copy of the input.
      Poly half = numel;
      for (auto& v : half.c) v /= 2;
      const int x1 = ops.slice(r, half, false);  // x[..., 0::2]
      const int x2 = ops.slice(r, half, false);  // x[..., 1::2]
      const int a = ops.mul(x1, st.cos, half);
      const int b = ops.mul(x2, st.cos, half);  // x2 * sin (the same size)
      const int e1 = ops.add(a, b, half);
      g.drop(a);
      g.drop(b);
      const int c = ops.mul(x2, st.cos, half);
      const int d = ops.mul(x1, st.cos, half);
      const int e2 = ops.add(c, d, half);
      g.drop(c);
      g.drop(d);
      g.drop(x1);
      g.drop(x2);
      const int out = ops.concat({e1, e2});
      g.drop(e1);
      g.drop(e2);
      return out;
    }
    // DeepseekV3 (rope_interleave, the default; DeepSeek's own modeling code always):
    // view(.., d/2, 2).transpose(4, 3).reshape(..): a copy, then rotate_half.
    const int c = ops.clone(r);
    const int out = st.rotate_half_rope(c, numel);
    g.drop(c);
    return out;
  };
  const int q_rot = rotate(q_rot0, tok(nh * rope));
  g.drop(q_rot0);
  const int k_rot2 = rotate(k_rot1, tok(rope));
  g.drop(k_rot1);
  const int k_rot = expand_heads(g, k_rot2, tok(nh * rope));
  keep(q_rot);
  keep(k_rot2);
  g.drop(k_rot2);

  const int query = ops.concat({q_pass, q_rot});  // torch.cat((q_pass, q_rot), dim=-1)
  const int key = v32 ? expand_kv_key(g, ops.cat, k_pass, k_rot, tok(nh * qk)) : ops.concat({k_pass, k_rot});
  g.drop(q_pass);
  g.drop(q_rot);
  g.drop(k_pass);
  g.drop(k_rot);

  // DeepSeek-V3.2 (transformers 5's DeepseekV32Attention): after the query and key, the
  // indexer's int32 top-k indices, then index_mask = new_ones(bool [b, s, s]).scatter(-1,
  // topk.long(), False) (a new bool tensor; the ones and the int64 copy are transients), folded
  // into the mask: eager adds attention_mask.masked_fill(index_mask, min) (a new [b, 1, s, s] in
  // the mask's dtype), SDPA takes attention_mask & ~index_mask (bool). Locals until the return.
  int index_mask = -1;
  std::vector<int> index_locals;
  if (v32) {
    const int topk = lightning_indexer(st, x, q_resid);
    const int ones = g.make(st.pair_scores, DT::kBool, Cat::kInputs);
    const int i64 = g.make(g.at(topk).numel * 2, DT::kF32, Cat::kInputs);  // .long(): eight bytes
    const int sel = g.make(st.pair_scores, DT::kBool, Cat::kInputs);
    g.drop(ones);
    g.drop(i64);
    index_locals = {topk, sel};
    if (st.attn == AttnImpl::kEager) {
      index_mask = g.make(st.pair_scores, st.mask >= 0 ? g.at(st.mask).dt : g.at(q).dt, Cat::kInputs);
    } else {
      const int inv = g.make(st.pair_scores, DT::kBool, Cat::kInputs);  // ~index_mask
      index_locals.push_back(g.make(st.pair_scores, DT::kBool, Cat::kInputs));
      g.drop(inv);
    }
  }

  int out = -1, probs = -1;
  if (st.attn == AttnImpl::kEager) {
    // eager_attention_forward with one KV group: repeat_kv returns its input. query and key are
    // contiguous cat outputs, so matmul folds them into bmm without a copy. value_states is a
    // split of the transposed kv_b_proj output: with b > 1 matmul's reshape to (b * heads, s, v)
    // copies it, bmm saves the copy, and the kv_b_proj output dies when the forward returns
    // (measured: docs/accuracy.md#mla).
    // DeepSeek-V3.2: index_mask += mask, added to the scores in place of the causal mask.
    probs = ops.eager_probs(query, ops.view(key), index_mask >= 0 ? index_mask : st.mask, st.scores, false, false);
    g.hold(probs);  // returned to the caller as well
    out = ops.attention_output(probs, value, tok(nh * vd), !st.one_sequence);
  } else {
    // SDPA (q/k and v head dims differ: the memory-efficient kernel) or flash_attention_2,
    // which needs one head dim: value is zero-padded to qk_head_dim (F.pad: a new tensor) and
    // the output, qk_head_dim wide, sliced back to v_head_dim.
    const bool fa2 = st.attn == AttnImpl::kFlashAttention2;
    int v_in = value;
    if (fa2 && qk != vd) {
      v_in = g.make(tok(nh * qk), g.at(value).dt, ops.cat);
      g.node({value}, {v_in}, {}, [v = value](Bwd& c) { c.give(v, c.like(v)); });  // narrow + copy
    } else {
      g.hold(value);
    }
    const std::int64_t od = fa2 ? qk : vd;
    const int q16 = ops.cast_for_autocast(query);
    const int k16 = ops.cast_for_autocast(key);
    const int v16 = ops.cast_for_autocast(v_in);
    g.drop(v_in);
    // DeepSeek-V3.2 under SDPA: the top-k mask goes to the kernel as an attention bias in q's
    // dtype (a copy the memory-efficient kernel saves for backward). flash_attention_2 takes no
    // mask: the sparse selection needs DeepSeek's own kernels, which read only the top-k keys.
    const int bias = v32 && !fa2 ? g.make(st.pair_scores, g.at(q16).dt, Cat::kInputs) : -1;
    const int o = ops.fused_attention(q16, k16, v16, tok(nh * od), st.heads_rows, bias);
    if (bias >= 0) g.drop(bias);
    g.drop(q16);
    g.drop(k16);
    g.drop(v16);
    if (fa2 && qk != vd) {
      const int sl = ops.slice(o, tok(nh * vd), false);  // attn_output[..., :v_head_dim]
      g.drop(o);
      out = ops.clone(sl);  // reshape(b, s, -1) of a sliced tensor copies
      g.drop(sl);
    } else {
      out = ops.view(o);  // already (b, s, heads, v)
      g.drop(o);
    }
  }
  const int r = ops.view(out);
  g.drop(out);
  const int o = st.linear(r, "o_proj", tok(m.hidden_size));
  g.drop(r);
  // Locals of the forward until it returns: q_states (q_b_proj's output), compressed_kv, the
  // kv_b_proj output (through value_states), query_states and key_states.
  g.drop(q);
  g.drop(ckv);
  g.drop(kvb);
  g.drop(value);
  g.drop(query);
  g.drop(key);
  if (index_mask >= 0) g.drop(index_mask);
  for (int t : index_locals) g.drop(t);
  for (int t : late) g.drop(t);
  if (q_resid >= 0) g.drop(q_resid);
  return {o, probs};
}

}  // namespace memplan::sim

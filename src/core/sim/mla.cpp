#include "core/sim/mla.hpp"

#include <algorithm>

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

// DeepSeek-V3.2's lightning indexer (DeepSeek-V3.2-Exp inference/model.py Indexer.forward,
// docs/models.md#deepseek-v32) on the layer input x and the query latent qr: q = wq_b(qr)
// (index heads x index_head_dim, rotary on its rope part: a copy), k = k_norm(wk(x)), weights =
// weights_proj(x) * scale, then fp8_index's fused sum over heads of weights x relu(q k): one fp32
// score per query-key pair, [b, s, s]; topk(index_topk) indices, and the additive mask
// full(-inf).scatter_(-1, topk, 0) the attention adds to its scores. The selection has no
// gradient: the indexer's outputs die here (its KL training loss is not modelled), only the
// mask lives on into the attention.
int lightning_indexer(MlaStep& st, int x, int qr) {
  Graph& g = st.g;
  Ops& ops = st.ops;
  const ModelSpec& m = st.m;
  const std::int64_t ih = m.index_heads, id = m.index_head_dim;
  auto tok = [&](std::int64_t k) { return scaled(st.tokens, k); };
  const int q = st.linear(qr, "indexer.wq_b", tok(ih * id));
  const int qc = ops.clone(q);  // torch.cat of the rotated rope part and the rest
  g.drop(q);
  const int k = st.linear(x, "indexer.wk", tok(id));
  const int kn = g.make(tok(id), g.at(k).dt, ops.cat);  // k_norm
  g.drop(k);
  const int w = st.linear(x, "indexer.weights_proj", tok(ih));
  const int wf = g.make(tok(ih), DT::kF32, ops.cat);  // * n_heads^-0.5 * softmax_scale, in fp32
  g.drop(w);
  const int score = g.make(st.pair_scores, DT::kF32, Cat::kAttentionScores);
  g.drop(qc);
  g.drop(kn);
  g.drop(wf);
  const int topk = g.make(tok(std::min<std::int64_t>(m.index_topk, 1 << 20)), DT::kI64, Cat::kInputs);
  const int mask = g.make(st.pair_scores, DT::kF32, Cat::kInputs);
  g.drop(score);
  g.drop(topk);
  return mask;
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

  // ---- q: q_b_proj(q_a_layernorm(q_a_proj(x))), or q_proj(x) without q LoRA.
  int q;
  int index_mask = -1;  // DeepSeek-V3.2: the top-k selection as an additive (b, s, s) mask
  if (m.q_lora_rank > 0) {
    const int qa = st.linear(x, "q_a_proj", tok(m.q_lora_rank));
    const int qn = st.rms_norm(qa, q_norm, m.q_lora_rank, tok(m.q_lora_rank));
    g.drop(qa);
    q = st.linear(qn, "q_b_proj", tok(nh * qk));
    if (m.index_heads > 0) index_mask = lightning_indexer(st, x, qn);
    g.drop(qn);
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
  g.drop(k_rot2);

  const int query = ops.concat({q_pass, q_rot});  // torch.cat((q_pass, q_rot), dim=-1)
  const int key = ops.concat({k_pass, k_rot});
  g.drop(q_pass);
  g.drop(q_rot);
  g.drop(k_pass);
  g.drop(k_rot);

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
    const int bias = index_mask >= 0 && !fa2 ? g.make(st.pair_scores, g.at(q16).dt, Cat::kInputs) : -1;
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
  return {o, probs};
}

}  // namespace memplan::sim

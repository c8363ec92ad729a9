"""Llama 4's text model (Llama4ForCausalLM, model_type llama4_text) written to follow transformers'
*eager* code path in models/llama4/modeling_llama4.py (read at huggingface/transformers 000c33fd;
the same text classes in a copy of 4.57.3, feisenyu/transformers_4573 9c66b221), op for op, for the
CPU measurements
(docs/models.md#llama-4):

- Llama4TextRMSNorm: _norm(x.float()).type_as(x) * weight;
- Llama4TextAttention: q/k projections kept in (b, s, heads, head_dim) until after the rotary
  embedding and the norms; on a rotary layer (no_rope_layers[i] == 1) apply_rotary_emb:
  view_as_complex(x.float().reshape(..., -1, 2)) * freqs_cis, view_as_real, flatten, type_as,
  then the weightless Llama4TextL2Norm on q and k when use_qk_norm (x.float(), pow, mean, rsqrt,
  product, type_as); on a NoPE layer, attn_temperature_tuning scales q by a per-position fp32
  factor ((q * scales).to(q.dtype)); then transpose and Llama 4's eager attention, whose softmax
  stays in the scores' dtype (no fp32 upcast);
- both masks every forward (create_causal_mask and create_chunked_causal_mask, eager: a
  materialized (b, 1, s, s) in the activation dtype each), every layer reading the one of its
  layer_types ("chunked_attention" on the rotary layers, "full_attention" on the NoPE ones);
- Llama4TextMoe on the layers of moe_layers: Llama4Router (nn.Linear, topk, full_like(-inf)
  .scatter_, sigmoid of the .float() scores, back to the logits' dtype), hidden_states.repeat(E, 1)
  times the transposed scores, Llama4TextExperts' two bmm over the fused gate_up_proj / down_proj
  Parameters, the shared expert, out.add_(routed.reshape(E, -1, h).sum(0)); the other layers a
  Llama4TextMLP of intermediate_size_mlp;
- the rotary table as Llama4TextRotaryEmbedding returns it: torch.polar of the (1, s, d / 2)
  frequencies, times attention_scaling (complex64);
- the causal-LM head and ForCausalLMLoss from hf_llama. No router aux loss (output_router_logits
  false in the released configs).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_llama


class Config(hf_llama.Config):
    """Llama4TextConfig's defaults and __post_init__ (moe_layers, no_rope_layers, layer_types)."""

    def __init__(self, d):
        d = dict(d)
        d.setdefault("rope_theta", 500000.0)
        d.setdefault("intermediate_size", 8192)
        super().__init__(d)
        n = self.num_hidden_layers
        self.intermediate_size_mlp = d.get("intermediate_size_mlp", 16384)
        self.num_local_experts = d.get("num_local_experts", 16)
        self.num_experts_per_tok = d.get("num_experts_per_tok", 1)
        step = d.get("interleave_moe_layer_step", 1)
        moe = d.get("moe_layers")
        self.moe_layers = moe if moe is not None else list(range(step - 1, n, step))
        interval = d.get("no_rope_layer_interval", 4)
        rope = d.get("no_rope_layers")
        self.no_rope_layers = rope if rope else [int((i + 1) % interval != 0) for i in range(n)]
        self.layer_types = d.get("layer_types") or [
            "chunked_attention" if r else "full_attention" for r in self.no_rope_layers]
        self.attention_chunk_size = d.get("attention_chunk_size", 8192)
        self.use_qk_norm = d.get("use_qk_norm", True)
        self.attn_temperature_tuning = d.get("attn_temperature_tuning", True)
        self.floor_scale = d.get("floor_scale", 8192)
        self.attn_scale = d.get("attn_scale", 0.1)


class Llama4TextRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, x):
        f = x.float()
        output = (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)
        return output * self.weight


class Llama4TextL2Norm(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        f = x.float()
        return (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)


class Llama4TextMLP(nn.Module):
    def __init__(self, config, intermediate_size=None):
        super().__init__()
        h, i = config.hidden_size, intermediate_size or config.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)
        self.activation_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.activation_fn(self.gate_proj(x)) * self.up_proj(x))


class Llama4TextExperts(nn.Module):
    def __init__(self, config):
        super().__init__()
        e, h, i = config.num_local_experts, config.hidden_size, config.intermediate_size
        self.hidden_size = h
        self.gate_up_proj = nn.Parameter(torch.empty(e, h, 2 * i).normal_(std=0.02))
        self.down_proj = nn.Parameter(torch.empty(e, i, h).normal_(std=0.02))
        self.act_fn = nn.SiLU()

    def forward(self, hidden_states):
        hidden_states = hidden_states.view(self.gate_up_proj.shape[0], -1, self.hidden_size)
        gate_up = torch.bmm(hidden_states, self.gate_up_proj)
        gate, up = gate_up.chunk(2, dim=-1)
        next_states = torch.bmm(up * self.act_fn(gate), self.down_proj)
        return next_states.view(-1, self.hidden_size)


class Llama4Router(nn.Linear):
    def __init__(self, config):
        super().__init__(config.hidden_size, config.num_local_experts, bias=False)
        self.top_k = config.num_experts_per_tok

    def forward(self, hidden_states):
        router_logits = super().forward(hidden_states)
        router_top_value, router_indices = torch.topk(router_logits, self.top_k, dim=1)
        router_scores = torch.full_like(router_logits, float("-inf")).scatter_(1, router_indices, router_top_value)
        router_scores = torch.sigmoid(router_scores.float()).to(router_scores.dtype)
        return router_scores, router_logits


class Llama4TextMoe(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_dim = config.hidden_size
        self.experts = Llama4TextExperts(config)
        self.router = Llama4Router(config)
        self.shared_expert = Llama4TextMLP(config)

    def forward(self, hidden_states):
        hidden_states = hidden_states.reshape(-1, self.hidden_dim)
        router_scores, router_logits = self.router(hidden_states)
        routed_in = hidden_states.repeat(router_scores.shape[1], 1)
        routed_in = routed_in * router_scores.transpose(0, 1).reshape(-1, 1)
        routed_out = self.experts(routed_in)
        out = self.shared_expert(hidden_states)
        out.add_(routed_out.reshape(router_scores.shape[1], -1, routed_out.shape[-1]).sum(dim=0))
        return out, router_logits


class Llama4TextRotaryEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        dim = config.head_dim
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        with torch.autocast(device_type=x.device.type, enabled=False):
            freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
            freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
            freqs_cis = freqs_cis * self.attention_scaling
        return freqs_cis


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    xq_out = torch.view_as_real(xq_ * freqs_cis[:, :, None, :]).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis[:, :, None, :]).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    """Llama 4's eager attention: as Llama's, but the softmax stays in the scores' dtype."""
    key_states = hf_llama.repeat_kv(key, module.num_key_value_groups)
    value_states = hf_llama.repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class Llama4TextAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.attn_scale = config.attn_scale
        self.floor_scale = config.floor_scale
        self.attn_temperature_tuning = config.attn_temperature_tuning
        self.attention_dropout = 0.0
        self.use_rope = config.no_rope_layers[layer_idx]
        h, nh, nkv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        b = config.attention_bias
        self.q_proj = nn.Linear(h, nh * self.head_dim, bias=b)
        self.k_proj = nn.Linear(h, nkv * self.head_dim, bias=b)
        self.v_proj = nn.Linear(h, nkv * self.head_dim, bias=b)
        self.o_proj = nn.Linear(nh * self.head_dim, h, bias=b)
        if config.use_qk_norm and self.use_rope:
            self.qk_norm = Llama4TextL2Norm(config.rms_norm_eps)

    def forward(self, hidden_states, position_embeddings, attention_mask, cache_position):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape)
        key_states = self.k_proj(hidden_states).view(*input_shape, -1, self.head_dim)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        if self.use_rope:
            query_states, key_states = apply_rotary_emb(query_states, key_states, position_embeddings)
        if hasattr(self, "qk_norm"):
            query_states = self.qk_norm(query_states)
            key_states = self.qk_norm(key_states)
        if self.attn_temperature_tuning and not self.use_rope:
            attn_scales = torch.log1p(torch.floor((cache_position.float() + 1.0) / self.floor_scale)) * \
                self.attn_scale + 1.0
            attn_scales = attn_scales.view((1, input_shape[-1], 1, 1)).expand((*input_shape, 1, 1))
            query_states = (query_states * attn_scales).to(query_states.dtype)
        query_states = query_states.transpose(1, 2)
        key_states = key_states.transpose(1, 2)
        attn_output, attn_weights = eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class Llama4TextDecoderLayer(hf_llama.GradientCheckpointingLayer):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.attention_type = config.layer_types[layer_idx]
        self.self_attn = Llama4TextAttention(config, layer_idx)
        self.is_moe_layer = layer_idx in config.moe_layers
        if self.is_moe_layer:
            self.feed_forward = Llama4TextMoe(config)
        else:
            self.feed_forward = Llama4TextMLP(config, intermediate_size=config.intermediate_size_mlp)
        self.input_layernorm = Llama4TextRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Llama4TextRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask=None, cache_position=None, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        attention_states, _ = self.self_attn(hidden_states=hidden_states, position_embeddings=position_embeddings,
                                             attention_mask=attention_mask, cache_position=cache_position)
        hidden_states = residual + attention_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.feed_forward(hidden_states)
        if self.is_moe_layer:
            hidden_states, _ = hidden_states
        hidden_states = residual + hidden_states.view(residual.shape)
        return hidden_states


def eager_masks(attention_mask_2d, dtype, chunk_size):
    """masking_utils for the eager path: create_causal_mask and create_chunked_causal_mask, each a
    materialized (b, 1, s, s) bool (the padding function makes it depend on the batch row) turned
    into torch.where(mask, 0, dtype_min). The chunked function: causal and (kv - left_pad) //
    chunk == (q - left_pad) // chunk, left_pad counted per row from the 2-D mask."""
    b, s = attention_mask_2d.shape
    q = torch.arange(s)
    kv = torch.arange(s)
    pad = attention_mask_2d[:, None, None, :].bool()
    causal = kv[None, :] <= q[:, None]
    left = (attention_mask_2d.cumsum(dim=-1) == torch.zeros_like(attention_mask_2d)).sum(dim=-1)
    zero = torch.tensor(0.0, dtype=dtype)
    min_dtype = torch.finfo(dtype).min
    full = (causal[None, None, :, :] & pad).expand(b, 1, s, s).contiguous()
    full_mask = torch.where(full, zero, min_dtype)
    del full
    qc = (q[None, :] - left[:, None]) // chunk_size    # (b, s)
    kc = (kv[None, :] - left[:, None]) // chunk_size
    same = qc[:, None, :, None] == kc[:, None, None, :]  # (b, 1, s, s)
    chunked = causal[None, None, :, :] & same & pad
    del same
    chunked_mask = torch.where(chunked, zero, min_dtype)
    del chunked
    return full_mask, chunked_mask


class Llama4TextModel(hf_llama.CheckpointableModel):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([Llama4TextDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = Llama4TextRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = Llama4TextRotaryEmbedding(config)

    def forward(self, input_ids, attention_mask):
        inputs_embeds = self.embed_tokens(input_ids)
        cache_position = torch.arange(0, inputs_embeds.shape[1])
        position_ids = cache_position.unsqueeze(0)
        full_mask, chunked_mask = eager_masks(attention_mask, inputs_embeds.dtype, self.config.attention_chunk_size)
        masks = {"full_attention": full_mask, "chunked_attention": chunked_mask}
        hidden_states = inputs_embeds
        freq_cis = self.rotary_emb(hidden_states, position_ids)
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, attention_mask=masks[decoder_layer.attention_type],
                                          cache_position=cache_position, position_embeddings=freq_cis)
        hidden_states = self.norm(hidden_states)
        return hidden_states


class Llama4ForCausalLM(hf_llama.LlamaForCausalLM):
    base_model_class = Llama4TextModel

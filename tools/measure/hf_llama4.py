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

Below the text model: Llama4ForConditionalGeneration with its vision model, projector and own loss,
for the batches with images (docs/formulas.md#llama-4-vision; cases in llama4_vision_cases.json).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_llama
import hf_qwen_vl


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

    def forward(self, input_ids, attention_mask, inputs_embeds=None):
        if inputs_embeds is None:
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


# ---- Llama4ForConditionalGeneration with images (docs/formulas.md#llama-4-vision)
#
# The vision model, the projector and the wrapper's forward and loss, as modeling_llama4.py writes
# them (huggingface/transformers 000c33fd; the same classes in the 4.57.3 copy), eager:
# Llama4UnfoldConvolution (nn.Unfold, permute, a bias-free Linear), the class token appended after
# the patches, positional_embedding_vlm added, layernorm_pre, the encoder layers (LayerNorm,
# q/k/v/o with biases, the complex 2-D rotary table of Llama4VisionRotaryEmbedding, eager attention
# with the softmax in the scores' dtype, LayerNorm, fc1 / GELU / fc2 with biases), layernorm_post,
# the class token dropped, pixel_shuffle and Llama4VisionMLP2 (fc1, GELU, dropout, fc2, GELU),
# multi_modal_projector.linear_1, masked_scatter into the text embeddings, and the wrapper's own
# loss (logits[..., :-1, :][mask != 0].contiguous(), nn.CrossEntropyLoss, no fp32 upcast).
# Llama4VisionEncoder calls each layer with keyword arguments only (hidden_state=...), so
# GradientCheckpointingLayer hands torch.utils.checkpoint no positional tensor: reentrant
# checkpointing runs the layers without a graph.

IMAGE_TOKEN_ID = hf_qwen_vl.IMAGE_TOKEN_ID  # <|patch|>: config.image_token_index
START_ID, END_ID, FAKE_ID, TILE_X_ID, TILE_Y_ID = (IMAGE_TOKEN_ID + i for i in range(1, 6))


class VisionConfig:
    """Llama4VisionConfig's defaults."""

    def __init__(self, d):
        self.hidden_size = d.get("hidden_size", 768)
        self.intermediate_size = d.get("intermediate_size", 5632)
        self.num_hidden_layers = d.get("num_hidden_layers", 34)
        self.num_attention_heads = d.get("num_attention_heads", 16)
        self.num_channels = d.get("num_channels", 3)
        self.image_size = d.get("image_size", 448)
        self.patch_size = d.get("patch_size", 14)
        self.norm_eps = d.get("norm_eps", 1e-5)
        self.rope_theta = d.get("rope_theta", 10000)
        self.pixel_shuffle_ratio = d.get("pixel_shuffle_ratio", 0.5)
        self.projector_input_dim = d.get("projector_input_dim", 4096)
        self.projector_output_dim = d.get("projector_output_dim", 4096)
        self.vision_output_dim = d.get("vision_output_dim", 7680)
        self.projector_dropout = d.get("projector_dropout", 0.0)
        self.attention_dropout = d.get("attention_dropout", 0.0)


class Llama4UnfoldConvolution(nn.Module):
    def __init__(self, c):
        super().__init__()
        k = (c.patch_size, c.patch_size)
        self.unfold = nn.Unfold(kernel_size=k, stride=c.patch_size)
        self.linear = nn.Linear(c.num_channels * k[0] * k[1], c.hidden_size, bias=False)

    def forward(self, hidden_states):
        hidden_states = self.unfold(hidden_states)
        hidden_states = hidden_states.permute(0, 2, 1)
        hidden_states = self.linear(hidden_states)
        return hidden_states


class Llama4VisionRotaryEmbedding(nn.Module):
    """The (N, 1, head_dim / 2) complex64 table, a plain attribute (no buffer): it stays fp32 and
    on the CPU whatever the model's dtype."""

    def __init__(self, c):
        super().__init__()
        idx = c.image_size // c.patch_size
        img_idx = torch.arange(idx ** 2, dtype=torch.int32).reshape(idx ** 2, 1)
        img_idx = torch.cat([img_idx, img_idx[:1]], dim=0)
        img_idx[-1, -1] = -2
        frequencies_x = img_idx % idx
        frequencies_y = img_idx // idx
        freq_dim = c.hidden_size // c.num_attention_heads // 2
        rope_freq = 1.0 / (c.rope_theta ** (torch.arange(0, freq_dim, 2)[: (freq_dim // 2)].float() / freq_dim))
        freqs_x = ((frequencies_x + 1)[..., None] * rope_freq[None, None, :]).repeat_interleave(2, dim=-1)
        freqs_y = ((frequencies_y + 1)[..., None] * rope_freq[None, None, :]).repeat_interleave(2, dim=-1)
        freqs = torch.cat([freqs_x, freqs_y], dim=-1).float().contiguous()[..., ::2]
        freqs = freqs.masked_fill(img_idx.reshape(-1, 1, 1) < 0, 0)
        self.freqs_ci = torch.view_as_complex(torch.stack([torch.cos(freqs), torch.sin(freqs)], dim=-1))

    def forward(self, hidden_states):
        return self.freqs_ci.to(hidden_states.device)


def reshape_for_broadcast(freqs_ci, query):
    ndim = query.ndim
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(query.shape)]
    return freqs_ci.view(*shape)


def vision_apply_rotary_emb(query, key, freqs_ci):
    query_ = torch.view_as_complex(query.float().reshape(*query.shape[:-1], -1, 2))
    key_ = torch.view_as_complex(key.float().reshape(*key.shape[:-1], -1, 2))
    freqs_ci = reshape_for_broadcast(freqs_ci=freqs_ci, query=query_)
    freqs_ci = freqs_ci.to(query_.device)
    query_out = torch.view_as_real(query_ * freqs_ci).flatten(3)
    key_out = torch.view_as_real(key_ * freqs_ci).flatten(3)
    return query_out.type_as(query), key_out.type_as(key)


class Llama4VisionAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_dim = c.hidden_size
        self.num_heads = c.num_attention_heads
        self.head_dim = c.hidden_size // c.num_attention_heads
        self.num_key_value_groups = 1
        self.attention_dropout = c.attention_dropout
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(self.embed_dim, self.num_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(self.embed_dim, self.num_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(self.embed_dim, self.num_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.embed_dim, bias=True)

    def forward(self, hidden_states, freqs_ci, attention_mask=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape)
        key_states = self.k_proj(hidden_states).view(hidden_shape)
        value_states = self.v_proj(hidden_states).view(hidden_shape)
        query_states, key_states = vision_apply_rotary_emb(query_states, key_states, freqs_ci=freqs_ci)
        query_states = query_states.transpose(1, 2)
        key_states = key_states.transpose(1, 2)
        value_states = value_states.transpose(1, 2)
        # vision_eager_attention_forward: as the text model's (repeat_kv by 1 is the tensor itself),
        # scaled by head_dim ** -0.5, the softmax in the scores' dtype.
        attn_output, attn_weights = eager_attention_forward(
            self, query_states, key_states, value_states, None,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.head_dim ** -0.5)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class Llama4VisionMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.activation_fn = nn.GELU()
        self.fc1 = nn.Linear(c.hidden_size, c.intermediate_size, bias=True)
        self.fc2 = nn.Linear(c.intermediate_size, c.hidden_size, bias=True)

    def forward(self, hidden_states):
        hidden_states = self.fc1(hidden_states)
        hidden_states = self.activation_fn(hidden_states)
        hidden_states = self.fc2(hidden_states)
        return hidden_states


class Llama4VisionEncoderLayer(hf_llama.GradientCheckpointingLayer):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Llama4VisionAttention(c)
        self.mlp = Llama4VisionMLP(c)
        self.input_layernorm = nn.LayerNorm(c.hidden_size)
        self.post_attention_layernorm = nn.LayerNorm(c.hidden_size)

    def forward(self, hidden_state, freqs_ci, attention_mask=None, output_attentions=None):
        residual = hidden_state
        hidden_state = self.input_layernorm(hidden_state)
        hidden_state, attn_weights = self.self_attn(hidden_state, freqs_ci=freqs_ci, attention_mask=attention_mask)
        hidden_state = residual + hidden_state
        residual = hidden_state
        hidden_state = self.post_attention_layernorm(hidden_state)
        hidden_state = self.mlp(hidden_state)
        hidden_state = residual + hidden_state
        outputs = (hidden_state,)
        return outputs


class Llama4VisionEncoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layers = nn.ModuleList([Llama4VisionEncoderLayer(c) for _ in range(c.num_hidden_layers)])

    def forward(self, hidden_states, freqs_ci, attention_mask=None):
        for encoder_layer in self.layers:
            layer_outputs = encoder_layer(hidden_state=hidden_states, attention_mask=attention_mask,
                                          output_attentions=False, freqs_ci=freqs_ci)
            hidden_states = layer_outputs[0]
        return (hidden_states,)


class Llama4VisionMLP2(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc1 = nn.Linear(c.intermediate_size, c.projector_input_dim, bias=False)
        self.fc2 = nn.Linear(c.projector_output_dim, c.projector_output_dim, bias=False)
        self.activation_fn = nn.GELU()
        self.dropout = c.projector_dropout

    def forward(self, hidden_states):
        hidden_states = self.fc1(hidden_states)
        hidden_states = self.activation_fn(hidden_states)
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)
        return self.activation_fn(self.fc2(hidden_states))


def pixel_shuffle(input_tensor, shuffle_ratio):
    batch_size, num_patches, channels = input_tensor.shape
    patch_size = int(math.sqrt(num_patches))
    input_tensor = input_tensor.view(batch_size, patch_size, patch_size, -1)
    batch_size, height, width, channels = input_tensor.size()
    reshaped_tensor = input_tensor.view(batch_size, height, int(width * shuffle_ratio), int(channels / shuffle_ratio))
    reshaped_tensor = reshaped_tensor.permute(0, 2, 1, 3).contiguous()
    reshaped_tensor = reshaped_tensor.view(batch_size, int(height * shuffle_ratio), int(width * shuffle_ratio),
                                           int(channels / (shuffle_ratio ** 2)))
    reshaped_tensor = reshaped_tensor.permute(0, 2, 1, 3).contiguous()
    output_tensor = reshaped_tensor.view(batch_size, -1, reshaped_tensor.shape[-1])
    return output_tensor


class Llama4VisionPixelShuffleMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.pixel_shuffle_ratio = c.pixel_shuffle_ratio
        self.mlp = Llama4VisionMLP2(c)

    def forward(self, encoded_patches):
        encoded_patches = pixel_shuffle(encoded_patches, self.pixel_shuffle_ratio)
        return self.mlp(encoded_patches)


class Llama4VisionModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.hidden_size = c.hidden_size
        num_patches = (c.image_size // c.patch_size) ** 2 + 1
        scale = c.hidden_size ** -0.5
        self.patch_embedding = Llama4UnfoldConvolution(c)
        self.class_embedding = nn.Parameter(scale * torch.randn(c.hidden_size))
        self.positional_embedding_vlm = nn.Parameter(scale * torch.randn(num_patches, c.hidden_size))
        self.rotary_embedding = Llama4VisionRotaryEmbedding(c)
        self.layernorm_pre = nn.LayerNorm(c.hidden_size)
        self.layernorm_post = nn.LayerNorm(c.hidden_size)
        self.model = Llama4VisionEncoder(c)
        self.vision_adapter = Llama4VisionPixelShuffleMLP(c)

    def forward(self, pixel_values):
        batch_size_times_num_tiles, num_channels, height, width = pixel_values.shape
        hidden_state = self.patch_embedding(pixel_values)
        _, num_patches, hidden_dim = hidden_state.shape
        hidden_state = hidden_state.reshape(batch_size_times_num_tiles, num_patches, hidden_dim)
        class_embedding = self.class_embedding.expand(hidden_state.shape[0], 1, hidden_state.shape[-1])
        hidden_state = torch.cat([hidden_state, class_embedding], dim=1)
        num_patches += 1
        hidden_state = hidden_state.reshape(batch_size_times_num_tiles, 1, num_patches, hidden_dim)
        positional_embedding = self.positional_embedding_vlm.to(dtype=hidden_state.dtype, device=hidden_state.device)
        hidden_state = hidden_state + positional_embedding
        hidden_state = self.layernorm_pre(hidden_state)
        hidden_state = hidden_state.view(batch_size_times_num_tiles, -1, hidden_dim)
        freqs_ci = self.rotary_embedding(pixel_values)
        output = self.model(hidden_state, attention_mask=None, freqs_ci=freqs_ci)
        hidden_state = output[0]
        hidden_state = self.layernorm_post(hidden_state)
        hidden_state = hidden_state[:, :-1, :]
        hidden_state = self.vision_adapter(hidden_state)
        return hidden_state


class Llama4MultiModalProjector(nn.Module):
    def __init__(self, c, text_hidden):
        super().__init__()
        self.linear_1 = nn.Linear(c.vision_output_dim, text_hidden, bias=False)

    def forward(self, image_features):
        return self.linear_1(image_features)


class Llama4ForConditionalGeneration(hf_qwen_vl.VlmTraining, nn.Module):
    def __init__(self, d):
        super().__init__()
        text = Config(d["text_config"])
        text.tie_word_embeddings = d.get("tie_word_embeddings", False)
        self.config = text
        self.image_token_id = d.get("image_token_index", IMAGE_TOKEN_ID)
        vc = VisionConfig(d["vision_config"])
        self.vision_model = Llama4VisionModel(vc)
        self.multi_modal_projector = Llama4MultiModalProjector(vc, text.hidden_size)
        self.language_model = Llama4ForCausalLM(text)

    @property
    def visual(self):
        return self.vision_model

    def projector_modules(self):
        return [self.multi_modal_projector]

    def language_model_modules(self):
        return [self.language_model]

    def gradient_checkpointing_enable(self, use_reentrant=True):
        for m in self.modules():
            if isinstance(m, hf_llama.GradientCheckpointingLayer):
                m.gradient_checkpointing = True
                m.use_reentrant = use_reentrant

    def enable_input_require_grads(self):
        self._require_grads_hook = self.language_model.model.embed_tokens.register_forward_hook(
            lambda module, inp, out: out.requires_grad_(True))

    def language_model_logits(self, attention_mask, inputs_embeds):
        hidden_states = self.language_model.model(None, attention_mask, inputs_embeds=inputs_embeds)
        return self.language_model.lm_head(hidden_states[:, slice(0, None), :])

    def forward(self, input_ids, attention_mask, pixel_values=None, labels=None):
        inputs_embeds = self.language_model.model.embed_tokens(input_ids)
        image_features = None
        if pixel_values is not None:
            image_features = self.vision_model(pixel_values)  # get_image_features: last_hidden_state
            vision_flat = image_features.view(-1, image_features.size(-1))
            projected_vision_flat = self.multi_modal_projector(vision_flat).to(inputs_embeds.device,
                                                                               inputs_embeds.dtype)
            special_image_mask = input_ids == self.image_token_id  # get_placeholder_mask
            special_image_mask = special_image_mask.unsqueeze(-1).expand_as(inputs_embeds).to(inputs_embeds.device)
            if inputs_embeds[special_image_mask].numel() != projected_vision_flat.numel():
                raise ValueError("Image features and image tokens do not match")
            inputs_embeds = inputs_embeds.masked_scatter(special_image_mask, projected_vision_flat)
        # self.language_model(...) without labels: Llama4ForCausalLM's final hidden states are a
        # local of its forward (gone when it returns unless lm_head saved them); the merged
        # inputs_embeds stay a local of this forward through the loss.
        logits = self.language_model_logits(attention_mask, inputs_embeds)
        loss = None
        if labels is not None:
            shift_attention_mask = attention_mask[:, -(logits.shape[1] - 1):].to(logits.device)
            shift_logits = logits[..., :-1, :][shift_attention_mask.to(logits.device) != 0].contiguous()
            shift_labels = labels[..., 1:][shift_attention_mask.to(labels.device) != 0].contiguous()
            loss_fct = nn.CrossEntropyLoss()
            loss = loss_fct(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1).to(shift_logits.device))
        return {"loss": loss, "logits": logits, "image_hidden_states": image_features}


def supported_resolutions(max_num_chunks, tile):
    """image_processing_llama4_fast.find_supported_resolutions: every (h, w) tile grid with h x w
    <= max_num_chunks, grouped by aspect ratio in the order first met."""
    asp = {}
    for chunk in range(max_num_chunks, 0, -1):
        factors = sorted({f for i in range(1, int(chunk ** 0.5) + 1) if chunk % i == 0 for f in (i, chunk // i)})
        for f in factors:
            asp.setdefault(f / (chunk // f), []).append((f, chunk // f))
    return [(h * tile, w * tile) for v in asp.values() for h, w in v]


def tile_grid(height, width, tile, max_patches=16):
    """get_best_fit (resize_to_max_canvas False): the canvas whose no-distortion scale is the
    smallest >= 1, else the largest < 1; the smallest area among ties. Returns (rows, cols) of tiles."""
    res = torch.tensor(supported_resolutions(max_patches, tile))
    scale_w = res[:, 1] / width
    scale_h = res[:, 0] / height
    scales = torch.where(scale_h > scale_w, scale_w, scale_h)
    up = scales[scales >= 1]
    selected = torch.min(up) if len(up) > 0 else torch.max(scales[scales < 1])
    chosen = res[scales == selected]
    best = chosen[torch.argmin(chosen[:, 0] * chosen[:, 1])] if len(chosen) > 1 else chosen[0]
    return int(best[0]) // tile, int(best[1]) // tile


def image_tokens(rows, cols, per_tile):
    """Llama4Processor._prompt_split_image: <|image_start|>, with more than one tile each row of
    tiles (per_tile <|patch|> each, <|tile_x_separator|> between them, <|tile_y_separator|> after
    the row), then <|image|>, the global tile's per_tile <|patch|>, <|image_end|>."""
    ids = [START_ID]
    if rows * cols > 1:
        for _ in range(rows):
            for x in range(cols):
                ids += [IMAGE_TOKEN_ID] * per_tile
                if x < cols - 1:
                    ids.append(TILE_X_ID)
            ids.append(TILE_Y_ID)
    ids += [FAKE_ID] + [IMAGE_TOKEN_ID] * per_tile + [END_ID]
    return ids


def make_inputs(d, t, gen):
    """b sequences of seq_len tokens, each opening with `images` images of image_height x
    image_width pixels (or image_size square), tiled as Llama4ImageProcessorFast tiles them
    (tiles of vision_config.image_size, a global tile when there are several) and written as the
    processor writes them. pixel_values in the model's dtype (the processor returns bf16)."""
    vc = VisionConfig(d["vision_config"])
    b, s = t["batch"], t["seq_len"]
    hh, ww = t.get("image_height", t.get("image_size")), t.get("image_width", t.get("image_size"))
    rows, cols = tile_grid(hh, ww, vc.image_size, t.get("max_patches", 16))
    tiles = rows * cols + (1 if rows * cols > 1 else 0)
    side = vc.image_size // vc.patch_size
    per_tile = int(side * side * vc.pixel_shuffle_ratio ** 2)
    one = image_tokens(rows, cols, per_tile)
    n = t.get("images", 1)
    ids = torch.randint(TILE_Y_ID + 1, d["text_config"]["vocab_size"], (b, s), generator=gen)
    ids[:, :n * len(one)] = torch.tensor(one * n)
    inputs = {"input_ids": ids, "attention_mask": torch.ones(b, s, dtype=torch.long), "labels": ids.clone(),
              "pixel_values": None}
    if n:
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[t.get("torch_dtype", "float32")]
        inputs["pixel_values"] = torch.randn(b * n * tiles, 3, vc.image_size, vc.image_size, generator=gen).to(dtype)
    return inputs

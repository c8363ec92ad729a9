"""A Llama-family causal LM written to follow Hugging Face transformers' *eager* code path.

The point is memory fidelity, not speed: every tensor op that allocates in transformers'
modeling_llama.py (v4.48+ structure: eager_attention_forward, ForCausalLMLoss) is performed here in
the same order, dtype and shape, so autograd saves the same tensors. Covered: RMSNorm with the fp32
upcast, rotary embeddings computed in fp32, GQA via repeat_kv, eager attention with the fp32
softmax, the (b, 1, s, s) additive causal mask, SwiGLU MLP, tied or untied lm_head, and the loss
that upcasts logits to fp32 and pads labels instead of slicing logits.

Gradient checkpointing follows transformers' GradientCheckpointingLayer with its default
use_reentrant=True: the decoder layer is called through torch.utils.checkpoint.checkpoint with
hidden_states as the only positional argument and everything else bound with functools.partial.
"""
import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

import sac


class Config:
    def __init__(self, d):
        self.vocab_size = d["vocab_size"]
        self.hidden_size = d["hidden_size"]
        self.intermediate_size = d["intermediate_size"]
        self.num_hidden_layers = d["num_hidden_layers"]
        self.num_attention_heads = d["num_attention_heads"]
        self.num_key_value_heads = d.get("num_key_value_heads", self.num_attention_heads)
        self.head_dim = d.get("head_dim", self.hidden_size // self.num_attention_heads)
        self.rms_norm_eps = d.get("rms_norm_eps", 1e-5)
        self.rope_theta = d.get("rope_theta", 10000.0)
        self.tie_word_embeddings = d.get("tie_word_embeddings", False)
        self.attention_bias = d.get("attention_bias", False)
        self.mlp_bias = d.get("mlp_bias", False)
        self.pad_token_id = d.get("pad_token_id", None)


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
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
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = emb.cos() * self.attention_scaling
            sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, softcap=None):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if softcap is not None:  # Gemma 2's attn_logit_softcapping
        attn_weights = attn_weights / softcap
        attn_weights = torch.tanh(attn_weights)
        attn_weights = attn_weights * softcap
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class LlamaAttention(nn.Module):
    # The module's apply_rotary_pos_emb (hf_glm's attention swaps in GLM's interleaved one).
    rotary = staticmethod(apply_rotary_pos_emb)

    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = 0.0
        h, nh, nkv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        self.q_proj = nn.Linear(h, nh * self.head_dim, bias=config.attention_bias)
        self.k_proj = nn.Linear(h, nkv * self.head_dim, bias=config.attention_bias)
        self.v_proj = nn.Linear(h, nkv * self.head_dim, bias=config.attention_bias)
        self.o_proj = nn.Linear(nh * self.head_dim, h, bias=config.attention_bias)
        # Gemma's additions (hf_gemma3.Gemma3Attention sets them): q/k norms over head_dim before
        # the rotary embedding, and Gemma 2's attention logit softcapping.
        self.q_norm = self.k_norm = None
        self.softcap = None

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        if self.q_norm is not None:
            query_states = self.q_norm(query_states)
            key_states = self.k_norm(key_states)
        cos, sin = position_embeddings
        query_states, key_states = self.rotary(query_states, key_states, cos, sin)
        attn_output, attn_weights = eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling,
            softcap=self.softcap)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class LlamaMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=config.mlp_bias)
        self.up_proj = nn.Linear(h, i, bias=config.mlp_bias)
        self.down_proj = nn.Linear(i, h, bias=config.mlp_bias)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class GradientCheckpointingLayer(nn.Module):
    """transformers.modeling_layers.GradientCheckpointingLayer.__call__: the positional
    hidden_states checkpointed, everything else bound in a functools.partial."""
    gradient_checkpointing = False
    use_reentrant = True
    checkpoint_policy = "full"  # "op": torchtitan's per-op selective policy (sac.py)

    def __call__(self, *args, **kwargs):
        if self.gradient_checkpointing and self.training and self.checkpoint_policy == "op":
            return sac.checkpoint(functools.partial(super().__call__, **kwargs), *args)
        if self.gradient_checkpointing and self.training:
            return torch.utils.checkpoint.checkpoint(functools.partial(super().__call__, **kwargs), *args,
                                                     use_reentrant=self.use_reentrant)
        return super().__call__(*args, **kwargs)


class CheckpointableModel(nn.Module):
    """gradient_checkpointing_enable() and enable_input_require_grads() of a model with `layers`
    and `embed_tokens`."""

    def gradient_checkpointing_enable(self, use_reentrant=True):
        for layer in self.layers:
            layer.gradient_checkpointing = True
            layer.use_reentrant = use_reentrant

    def enable_input_require_grads(self):
        self._require_grads_hook = self.embed_tokens.register_forward_hook(
            lambda module, inp, out: out.requires_grad_(True))


class LlamaDecoderLayer(GradientCheckpointingLayer):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.self_attn = LlamaAttention(config, layer_idx)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask=None, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, attention_mask=attention_mask,
                                          position_embeddings=position_embeddings)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


def make_causal_mask(attention_mask_2d, dtype, device):
    """(b, 1, s, s) additive float mask, as transformers builds it for the eager path: 0 where a
    query may attend, dtype-min elsewhere (causal and padding), materialised per batch row."""
    b, s = attention_mask_2d.shape
    min_dtype = torch.finfo(dtype).min
    causal = torch.full((s, s), fill_value=min_dtype, dtype=dtype, device=device)
    causal = torch.triu(causal, diagonal=1)
    causal = causal[None, None, :, :].expand(b, 1, -1, -1)
    causal = causal.clone()
    padding_mask = causal[:, :, :, :s] + attention_mask_2d[:, None, None, :].to(dtype)
    padding_mask = padding_mask == 0
    causal[:, :, :, :s] = causal[:, :, :, :s].masked_fill(padding_mask, min_dtype)
    return causal


class LlamaModel(CheckpointableModel):
    """AutoModel (no LM head): what sentence-transformers loads for a decoder embedding model."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def forward(self, input_ids, attention_mask):
        inputs_embeds = self.embed_tokens(input_ids)
        cache_position = torch.arange(0, inputs_embeds.shape[1], device=inputs_embeds.device)
        position_ids = cache_position.unsqueeze(0)
        causal_mask = make_causal_mask(attention_mask, inputs_embeds.dtype, inputs_embeds.device)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, attention_mask=causal_mask,
                                          position_embeddings=position_embeddings)
        hidden_states = self.norm(hidden_states)
        return hidden_states


def for_causal_lm_loss(logits, labels, vocab_size, ignore_index=-100):
    """transformers.loss.loss_utils.ForCausalLMLoss (v4.48+)."""
    logits = logits.float()
    labels = nn.functional.pad(labels, (0, 1), value=ignore_index)
    shift_labels = labels[..., 1:].contiguous()
    logits = logits.view(-1, vocab_size)
    shift_labels = shift_labels.view(-1)
    return nn.functional.cross_entropy(logits, shift_labels, ignore_index=ignore_index, reduction="mean")


class LlamaForCausalLM(nn.Module):
    """*ForCausalLM: the decoder (`base_model_class`), lm_head (tied when the config says so), the
    final logit softcapping of configs that have one (Gemma 2, Gemma 3), ForCausalLMLoss."""
    base_model_class = LlamaModel

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = self.base_model_class(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def gradient_checkpointing_enable(self, use_reentrant=True):
        self.model.gradient_checkpointing_enable(use_reentrant)

    def enable_input_require_grads(self):
        """transformers PreTrainedModel.enable_input_require_grads: a forward hook that makes the
        embedding output require grad, so reentrant checkpointing propagates gradients to adapters."""
        self.model.enable_input_require_grads()

    def forward(self, input_ids, attention_mask, labels=None, logits_to_keep=0):
        hidden_states = self.model(input_ids, attention_mask)
        slice_indices = slice(-logits_to_keep, None)
        logits = self.lm_head(hidden_states[:, slice_indices, :])
        softcap = getattr(self.config, "final_logit_softcapping", None)
        if softcap is not None:
            logits = logits / softcap
            logits = torch.tanh(logits)
            logits = logits * softcap
        loss = None
        if labels is not None:
            loss = for_causal_lm_loss(logits, labels, self.config.vocab_size)
        return {"loss": loss, "logits": logits}

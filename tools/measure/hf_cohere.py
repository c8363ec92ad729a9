"""Cohere's causal LMs written to follow transformers' *eager* code path, op for op, for the CPU
measurements (docs/models.md#cohere): models/cohere/modeling_cohere.py (Command R / R+, Aya 23,
Aya Expanse) and models/cohere2/modeling_cohere2.py (Command R7B, Command A), read at
huggingface/transformers 015bfeb8 (cohere) and ca095230 (cohere2) and checked against the 4.57
layer_types form of Cohere2Config.

What differs from hf_llama: CohereLayerNorm (fp32 inside, mean subtracted twice, a weight and no
bias), one per layer, whose output feeds attention and the MLP (`residual + attn + mlp`); the
rotary tables built with repeat_interleave and applied in fp32 (q.float(), k.float(), rotate_half
by stack/flatten, cast back); use_qk_norm (cohere): CohereLayerNorm over head_dim with (heads,
head_dim) weights on q and k before the transpose; `logits * logit_scale`; tied embeddings by
default. cohere2: sliding layers ((i + 1) % sliding_window_pattern != 0) attend within the window
and rotate, full layers take no positional embedding; both masks are built every forward.
"""
import torch
import torch.nn as nn

import hf_gemma3
import hf_llama


class Config(hf_llama.Config):
    def __init__(self, d):
        d = dict(d)
        d.setdefault("tie_word_embeddings", True)
        self.cohere2 = d.get("model_type") == "cohere2"
        if self.cohere2:  # Cohere2Config: head_dim = hidden_size // num_attention_heads
            d["head_dim"] = d["hidden_size"] // d["num_attention_heads"]
        super().__init__(d)
        self.layer_norm_eps = d.get("layer_norm_eps", 1e-5)
        self.logit_scale = d.get("logit_scale", 0.0625)
        self.use_qk_norm = (not self.cohere2) and d.get("use_qk_norm", False)
        self.sliding_window = d.get("sliding_window", 4096) if self.cohere2 else None
        pattern = d.get("sliding_window_pattern", 4)
        self.layer_types = d.get("layer_types") or [
            "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(self.num_hidden_layers)]


class CohereLayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        mean = hidden_states.mean(-1, keepdim=True)
        variance = (hidden_states - mean).pow(2).mean(-1, keepdim=True)
        hidden_states = (hidden_states - mean) * torch.rsqrt(variance + self.variance_epsilon)
        hidden_states = self.weight.to(torch.float32) * hidden_states
        return hidden_states.to(input_dtype)


class CohereRotaryEmbedding(hf_llama.LlamaRotaryEmbedding):
    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        with torch.autocast(device_type=x.device.type, enabled=False):
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
            emb = torch.repeat_interleave(freqs, 2, dim=-1)
            cos = emb.cos()
            sin = emb.sin()
        cos = cos * self.attention_scaling
        sin = sin * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.stack([-x2, x1], dim=-1).flatten(-2)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    dtype = q.dtype
    q = q.float()
    k = k.float()
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed.to(dtype=dtype), k_embed.to(dtype=dtype)


class CohereAttention(hf_llama.LlamaAttention):
    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.cohere2 = config.cohere2
        self.sliding = config.layer_types[layer_idx] == "sliding_attention"
        if config.use_qk_norm:
            self.q_norm = CohereLayerNorm((config.num_attention_heads, self.head_dim), config.layer_norm_eps)
            self.k_norm = CohereLayerNorm((config.num_key_value_heads, self.head_dim), config.layer_norm_eps)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        if self.cohere2:  # Cohere2Attention: transpose first, rotate on the sliding layers only
            query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            cos, sin = position_embeddings
            if self.sliding:
                query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        else:
            query_states = self.q_proj(hidden_states).view(hidden_shape)
            key_states = self.k_proj(hidden_states).view(hidden_shape)
            value_states = self.v_proj(hidden_states).view(hidden_shape)
            if self.q_norm is not None:
                query_states = self.q_norm(query_states)
                key_states = self.k_norm(key_states)
            query_states = query_states.transpose(1, 2)
            key_states = key_states.transpose(1, 2)
            value_states = value_states.transpose(1, 2)
            cos, sin = position_embeddings
            query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        attn_output, attn_weights = hf_llama.eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask, dropout=0.0, scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class CohereDecoderLayer(hf_llama.GradientCheckpointingLayer):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.self_attn = CohereAttention(config, layer_idx)
        self.mlp = hf_llama.LlamaMLP(config)
        self.input_layernorm = CohereLayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, hidden_states, attention_mask=None, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states_attention, _ = self.self_attn(hidden_states=hidden_states, attention_mask=attention_mask,
                                                    position_embeddings=position_embeddings)
        hidden_states_mlp = self.mlp(hidden_states)
        hidden_states = residual + hidden_states_attention + hidden_states_mlp
        return hidden_states


class CohereModel(hf_llama.CheckpointableModel):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([CohereDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = CohereLayerNorm(config.hidden_size, config.layer_norm_eps)
        self.rotary_emb = CohereRotaryEmbedding(config)

    def forward(self, input_ids, attention_mask):
        inputs_embeds = self.embed_tokens(input_ids)
        position_ids = torch.arange(0, inputs_embeds.shape[1]).unsqueeze(0)
        if self.config.cohere2:  # causal_mask_mapping: the full mask and the sliding one
            full, sliding = hf_gemma3.eager_masks(attention_mask, inputs_embeds.dtype, self.config.sliding_window,
                                                  False)
            masks = {"full_attention": full, "sliding_attention": sliding}
        else:
            masks = None
            causal_mask = hf_llama.make_causal_mask(attention_mask, inputs_embeds.dtype, inputs_embeds.device)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for i, decoder_layer in enumerate(self.layers):
            mask = masks[self.config.layer_types[i]] if masks else causal_mask
            hidden_states = decoder_layer(hidden_states, attention_mask=mask, position_embeddings=position_embeddings)
        hidden_states = self.norm(hidden_states)
        return hidden_states


class CohereForCausalLM(hf_llama.LlamaForCausalLM):
    base_model_class = CohereModel

    def forward(self, input_ids, attention_mask, labels=None, logits_to_keep=0):
        hidden_states = self.model(input_ids, attention_mask)
        slice_indices = slice(-logits_to_keep, None)
        logits = self.lm_head(hidden_states[:, slice_indices, :])
        logits = logits * self.config.logit_scale
        loss = None
        if labels is not None:
            loss = hf_llama.for_causal_lm_loss(logits, labels, self.config.vocab_size)
        return {"loss": loss, "logits": logits}

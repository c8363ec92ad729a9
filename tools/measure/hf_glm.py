"""GLM-4 (model_type glm, GlmForCausalLM) and GLM-4-0414 (glm4, Glm4ForCausalLM) causal LMs written
to follow transformers' *eager* code path in models/glm/modular_glm.py and models/glm4/modeling_glm4.py
(read at huggingface/transformers 0325dc46 and 257314f8), op for op, for the CPU measurements
(docs/models.md#glm-4): q/k/v projections with attention_bias, o_proj without; a rotary embedding
over int(head_dim * partial_rotary_factor) dims whose cos and sin each call of apply_rotary_pos_emb
re-interleaves (cos[..., :d // 2].repeat_interleave(2, -1): a new tensor per layer) and GLM's
rotate_half (torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)) on the first d dims, the
rest concatenated back after both q and k are rotated; Phi3MLP (one gate_up_proj, chunk,
up * silu(gate), down_proj); Llama's RMSNorm, eager attention and loss (hf_llama). glm4 adds
post_self_attn_layernorm and post_mlp_layernorm on the two blocks' outputs (four norms per layer).
"""
import torch
import torch.nn as nn

import hf_llama


class Config(hf_llama.Config):
    def __init__(self, d):
        d = dict(d)
        # GlmConfig / Glm4Config defaults that change shapes.
        d.setdefault("head_dim", 128)
        d.setdefault("num_key_value_heads", 2)
        d.setdefault("attention_bias", True)
        super().__init__(d)
        self.glm4 = d.get("model_type") == "glm4"
        self.partial_rotary_factor = d.get("partial_rotary_factor", 0.5)


class GlmRotaryEmbedding(hf_llama.LlamaRotaryEmbedding):
    """Phi3RotaryEmbedding over dim = int(head_dim * partial_rotary_factor): (b, s, dim) cos, sin."""

    def __init__(self, config):
        class Rot:
            head_dim = int(config.head_dim * config.partial_rotary_factor)
            rope_theta = config.rope_theta
        super().__init__(Rot)


def rotate_half(x):
    x1 = x[..., 0::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
    sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = (q_rot * cos) + (rotate_half(q_rot) * sin)
    k_embed = (k_rot * cos) + (rotate_half(k_rot) * sin)
    q_embed = torch.cat([q_embed, q_pass], dim=-1)
    k_embed = torch.cat([k_embed, k_pass], dim=-1)
    return q_embed, k_embed


class GlmAttention(hf_llama.LlamaAttention):
    rotary = staticmethod(apply_rotary_pos_emb)

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=False)


class GlmMLP(nn.Module):
    """Phi3MLP."""

    def __init__(self, config):
        super().__init__()
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.activation_fn = nn.SiLU()

    def forward(self, hidden_states):
        up_states = self.gate_up_proj(hidden_states)
        gate, up_states = up_states.chunk(2, dim=-1)
        up_states = up_states * self.activation_fn(gate)
        return self.down_proj(up_states)


class GlmDecoderLayer(hf_llama.LlamaDecoderLayer):
    def __init__(self, config, layer_idx):
        hf_llama.GradientCheckpointingLayer.__init__(self)
        self.self_attn = GlmAttention(config, layer_idx)
        self.mlp = GlmMLP(config)
        self.input_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)


class Glm4DecoderLayer(GlmDecoderLayer):
    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.post_self_attn_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_mlp_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask=None, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, attention_mask=attention_mask,
                                          position_embeddings=position_embeddings)
        hidden_states = self.post_self_attn_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = self.post_mlp_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


class GlmModel(hf_llama.LlamaModel):
    def __init__(self, config):
        super().__init__(config)
        layer = Glm4DecoderLayer if config.glm4 else GlmDecoderLayer
        self.layers = nn.ModuleList([layer(config, i) for i in range(config.num_hidden_layers)])
        self.rotary_emb = GlmRotaryEmbedding(config)


class GlmForCausalLM(hf_llama.LlamaForCausalLM):
    base_model_class = GlmModel

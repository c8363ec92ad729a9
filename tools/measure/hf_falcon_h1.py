"""Falcon-H1's causal LM (model_type falcon_h1) written to follow transformers'
models/falcon_h1/modeling_falcon_h1.py on the path it takes without the mamba_ssm / causal-conv1d
kernels (FalconH1Mixer.torch_forward with its naive chunked SSD scan), op for op, for the CPU
measurements.

Every FalconH1DecoderLayer runs its Mamba-2 mixer and its attention on the same normed input:
mamba(h) * ssm_out_multiplier + self_attn(h * attention_in_multiplier) * attention_out_multiplier,
then the residual add; then norm -> FalconH1MLP (up_proj(x) * act(gate_proj(x) * gate_multiplier),
down_proj(y) * down_multiplier) -> add. The mixer multiplies its input by ssm_in_multiplier and
in_proj's output by the mup_vector buffer (ssm_multipliers over the z, x, B, C, dt segments); its
output is y * silu(gate) without mamba_rms_norm, else FalconH1RMSNormGated (per group, before or
after the gate). The attention multiplies K by key_multiplier after the transpose. The model
multiplies the embeddings by embedding_multiplier and the LM head's logits by lm_head_multiplier.
The model's mamba mask is None when every token attends (all measured inputs). Shared pieces
(RMSNorm, eager attention, rotary embedding, the causal mask, checkpointing, the loss) are
hf_llama's; the mixer's modules, its scan and the attention are hf_granitemoehybrid's (Bamba's
torch_forward and Granite's attention, the same lines), with Falcon-H1's widths, keys and multipliers.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_granitemoehybrid
import hf_llama


class Config(hf_llama.Config):
    def __init__(self, d):
        d = dict(d)
        d.setdefault("intermediate_size", 14336)
        super().__init__(d)
        self.rms_norm_eps = d.get("rms_norm_eps", 1e-5)
        self.mamba_expand = d.get("mamba_expand", 2)
        ssm = d.get("mamba_d_ssm", 1024)
        self.mamba_d_ssm = self.mamba_expand * self.hidden_size if ssm is None else ssm
        self.mamba_n_heads = d.get("mamba_n_heads", 128)
        head = d.get("mamba_d_head", "auto")
        self.mamba_d_head = self.mamba_d_ssm // self.mamba_n_heads if head == "auto" else head
        self.mamba_n_groups = d.get("mamba_n_groups", 1)
        self.mamba_d_state = d.get("mamba_d_state", 256)
        self.mamba_d_conv = d.get("mamba_d_conv", 4)
        self.mamba_chunk_size = d.get("mamba_chunk_size", 256)
        self.mamba_conv_bias = d.get("mamba_conv_bias", True)
        self.mamba_proj_bias = d.get("mamba_proj_bias", False)
        self.mamba_norm_before_gate = d.get("mamba_norm_before_gate", True)
        self.mamba_rms_norm = d.get("mamba_rms_norm", False)
        self.projectors_bias = d.get("projectors_bias", False)
        self.time_step_limit = (0.0, float("inf"))
        self.embedding_multiplier = d.get("embedding_multiplier", 1.0)
        self.lm_head_multiplier = d.get("lm_head_multiplier", 1.0)
        self.mlp_multipliers = d.get("mlp_multipliers") or [1.0, 1.0]
        self.key_multiplier = d.get("key_multiplier", 1.0)
        self.attention_out_multiplier = d.get("attention_out_multiplier", 1.0)
        self.attention_in_multiplier = d.get("attention_in_multiplier", 1.0)
        self.ssm_multipliers = d.get("ssm_multipliers") or [1.0] * 5
        self.ssm_in_multiplier = d.get("ssm_in_multiplier", 1.0)
        self.ssm_out_multiplier = d.get("ssm_out_multiplier", 1.0)


def compute_mup_vector(config):
    inner, gs = config.mamba_d_ssm, config.mamba_n_groups * config.mamba_d_state
    m = config.ssm_multipliers
    v = torch.ones(1, 1, 2 * inner + 2 * gs + config.mamba_n_heads)
    v[:, :, :inner] *= m[0]
    v[:, :, inner:2 * inner] *= m[1]
    v[:, :, 2 * inner:2 * inner + gs] *= m[2]
    v[:, :, 2 * inner + gs:2 * inner + 2 * gs] *= m[3]
    v[:, :, 2 * inner + 2 * gs:] *= m[4]
    return v


class FalconH1RMSNormGated(nn.Module):
    def __init__(self, hidden_size, eps, n_groups, norm_before_gate):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps
        self.n_groups = n_groups
        self.norm_before_gate = norm_before_gate

    def forward(self, hidden_states, gate):
        input_dtype = hidden_states.dtype
        if not self.norm_before_gate:
            hidden_states = hidden_states * F.silu(gate.to(torch.float32))
        batch_size, seq_len, dim = hidden_states.shape
        hidden_states = hidden_states.to(torch.float32)
        hidden_states = hidden_states.view(batch_size, seq_len, self.n_groups, int(dim // self.n_groups))
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        hidden_states = self.weight.view(self.n_groups, int(dim // self.n_groups)) * hidden_states
        hidden_states = hidden_states.view(batch_size, seq_len, dim)
        if self.norm_before_gate:
            hidden_states = hidden_states * F.silu(gate.to(torch.float32))
        return hidden_states.to(input_dtype)


class FalconH1Mixer(hf_granitemoehybrid.GraniteMoeHybridMambaLayer):
    """Bamba's modules with mamba_d_ssm as the inner width, optional gated norm, projectors_bias on
    out_proj; the scan is the parent's naive_scan."""

    def __init__(self, config):
        self.mamba_rms_norm = config.mamba_rms_norm
        super().__init__(config, intermediate_size=config.mamba_d_ssm, out_proj_bias=config.projectors_bias)
        self.ssm_in_multiplier = config.ssm_in_multiplier
        self.register_buffer("mup_vector", compute_mup_vector(config), persistent=False)

    def build_norm(self, config):
        if not self.mamba_rms_norm:
            return None
        return FalconH1RMSNormGated(self.intermediate_size, config.rms_norm_eps, self.n_groups,
                                    config.mamba_norm_before_gate)

    def forward(self, input_states):
        # torch_forward without a cache and without a mask
        batch_size, seq_len, _ = input_states.shape
        dtype = input_states.dtype
        input_states = input_states * self.ssm_in_multiplier
        projected_states = self.in_proj(input_states)
        projected_states = projected_states * self.mup_vector
        gate, hidden_states_B_C, dt = projected_states.split(
            [self.intermediate_size, self.conv_dim, self.num_heads], dim=-1)
        hidden_states_B_C = self.act(self.conv1d(hidden_states_B_C.transpose(1, 2))[..., :seq_len].transpose(1, 2))
        gs = self.n_groups * self.ssm_state_size
        hidden_states, B, C = torch.split(hidden_states_B_C, [self.intermediate_size, gs, gs], dim=-1)
        y, scan_locals = self.naive_scan(hidden_states, B, C, dt, batch_size, seq_len)
        if self.mamba_rms_norm:
            scan_output = self.norm(y, gate)
        else:
            scan_output = y * F.silu(gate)
        return self.out_proj(scan_output.to(dtype))


class FalconH1Attention(hf_granitemoehybrid.GraniteMoeHybridAttention):
    """Granite 4.0's q/k/v/o attention (rotary in every layer here), scaling head_dim ** -0.5, and
    k_proj(x).view(...).transpose(1, 2) * key_multiplier."""

    def __init__(self, config):
        super().__init__(config, scaling=config.head_dim ** -0.5)
        self.key_multiplier = config.key_multiplier

    def scale_keys(self, key_states):
        return key_states * self.key_multiplier


class FalconH1MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        h, i, b = config.hidden_size, config.intermediate_size, config.mlp_bias
        self.gate_proj = nn.Linear(h, i, bias=b)
        self.up_proj = nn.Linear(h, i, bias=b)
        self.down_proj = nn.Linear(i, h, bias=b)
        self.gate_multiplier, self.down_multiplier = config.mlp_multipliers

    def forward(self, x):
        y = self.up_proj(x) * F.silu(self.gate_proj(x) * self.gate_multiplier)
        y = self.down_proj(y) * self.down_multiplier
        return y


class FalconH1DecoderLayer(hf_llama.GradientCheckpointingLayer):
    def __init__(self, config):
        super().__init__()
        self.feed_forward = FalconH1MLP(config)
        self.mamba = FalconH1Mixer(config)
        self.self_attn = FalconH1Attention(config)
        self.attention_in_multiplier = config.attention_in_multiplier
        self.ssm_out_multiplier = config.ssm_out_multiplier
        self.attn_out_multiplier = config.attention_out_multiplier
        self.input_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.pre_ff_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask=None, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        mamba_hidden_states = self.mamba(hidden_states)
        mamba_hidden_states = mamba_hidden_states * self.ssm_out_multiplier
        attention_hidden_states, _ = self.self_attn(hidden_states * self.attention_in_multiplier, attention_mask,
                                                    position_embeddings)
        attention_hidden_states = attention_hidden_states * self.attn_out_multiplier
        hidden_states = mamba_hidden_states + attention_hidden_states
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.pre_ff_layernorm(hidden_states)
        hidden_states = self.feed_forward(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


class FalconH1Model(hf_llama.CheckpointableModel):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([FalconH1DecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.final_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = hf_llama.LlamaRotaryEmbedding(config)
        self.embedding_multiplier = config.embedding_multiplier

    def forward(self, input_ids, attention_mask):
        inputs_embeds = self.embed_tokens(input_ids) * self.embedding_multiplier
        hidden_states = inputs_embeds
        position_ids = torch.arange(0, hidden_states.shape[1], device=hidden_states.device).unsqueeze(0)
        causal_mask = hf_llama.make_causal_mask(attention_mask, inputs_embeds.dtype, inputs_embeds.device)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=causal_mask, position_embeddings=position_embeddings)
        return self.final_layernorm(hidden_states)


class FalconH1ForCausalLM(hf_llama.LlamaForCausalLM):
    base_model_class = FalconH1Model

    def forward(self, input_ids, attention_mask, labels=None, logits_to_keep=0):
        hidden_states = self.model(input_ids, attention_mask)
        logits = self.lm_head(hidden_states[:, slice(-logits_to_keep, None), :]) * self.config.lm_head_multiplier
        loss = hf_llama.for_causal_lm_loss(logits, labels, self.config.vocab_size) if labels is not None else None
        return {"loss": loss, "logits": logits}

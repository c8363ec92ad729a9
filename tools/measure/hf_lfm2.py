"""LFM2's causal LM written to follow transformers' models/lfm2/modeling_lfm2.py (4.5x) on the path
it takes without the causal-conv1d CUDA kernel (Lfm2ShortConv.slow_forward), op for op, for the
CPU measurements: gated short convolutions (in_proj to B, C, x; B * x; a depthwise Conv1d with
L_cache - 1 padding cut to the sequence; C * conv; out_proj) beside attention layers with q/k
layernorms over the head dim, the w1/w3/w2 SwiGLU feed-forward (block_auto_adjust_ff_dim), the
final embedding_norm and tied embeddings. Shared pieces (RMSNorm, rotary tables, eager attention,
the additive causal mask, checkpointing, the loss) are hf_llama's.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_llama


class Config(hf_llama.Config):
    def __init__(self, d):
        d = dict(d)
        d.setdefault("num_attention_heads", d.get("num_heads"))
        d.setdefault("intermediate_size", d.get("block_ff_dim", 12288))
        d["intermediate_size"] = d.get("block_ff_dim", d["intermediate_size"])
        if "tie_word_embeddings" not in d:
            d["tie_word_embeddings"] = d.get("tie_embedding", True)
        super().__init__(d)
        self.rms_norm_eps = d.get("norm_eps", 1e-5)
        self.conv_L_cache = d.get("conv_L_cache", 3)
        self.conv_bias = d.get("conv_bias", False)
        n = self.num_hidden_layers
        if "layer_types" in d:
            self.layer_types = list(d["layer_types"])
        else:
            full = set(d.get("full_attn_idxs", []))
            self.layer_types = ["full_attention" if i in full else "conv" for i in range(n)]
        # Lfm2MLP: the width shrunk to 2/3 (times block_ffn_dim_multiplier), rounded up to
        # block_multiple_of, when block_auto_adjust_ff_dim.
        ff = self.intermediate_size
        if d.get("block_auto_adjust_ff_dim", True):
            ff = int(2 * ff / 3)
            mult = d.get("block_ffn_dim_multiplier")
            if mult is not None:
                ff = int(mult * ff)
                m = d.get("block_multiple_of", 256)
                ff = m * ((ff + m - 1) // m)
        self.ff_dim = ff


class Lfm2MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.w1 = nn.Linear(config.hidden_size, config.ff_dim, bias=False)
        self.w3 = nn.Linear(config.hidden_size, config.ff_dim, bias=False)
        self.w2 = nn.Linear(config.ff_dim, config.hidden_size, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Lfm2Attention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        h, nh, nkv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        self.q_proj = nn.Linear(h, nh * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, nkv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, nkv * self.head_dim, bias=False)
        self.out_proj = nn.Linear(nh * self.head_dim, h, bias=False)
        self.q_layernorm = hf_llama.LlamaRMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_layernorm = hf_llama.LlamaRMSNorm(self.head_dim, config.rms_norm_eps)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_layernorm(self.q_proj(hidden_states).view(*hidden_shape)).transpose(1, 2)
        key_states = self.k_layernorm(self.k_proj(hidden_states).view(*hidden_shape)).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(*hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = hf_llama.apply_rotary_pos_emb(query_states, key_states, cos, sin)
        attn_output, attn_weights = hf_llama.eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask, dropout=0.0, scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.out_proj(attn_output), attn_weights


class Lfm2ShortConv(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.L_cache = config.conv_L_cache
        h = config.hidden_size
        self.conv = nn.Conv1d(h, h, kernel_size=self.L_cache, groups=h, bias=config.conv_bias,
                              padding=self.L_cache - 1)
        self.in_proj = nn.Linear(h, 3 * h, bias=config.conv_bias)
        self.out_proj = nn.Linear(h, h, bias=config.conv_bias)

    def forward(self, x):
        # slow_forward without a cache; apply_mask_to_padding_states is a no-op (the decoder
        # passes the 4-D causal mask, whose dim 1 is 1).
        seqlen = x.shape[1]
        BCx = self.in_proj(x).transpose(-1, -2)
        B, C, x = BCx.chunk(3, dim=-2)
        Bx = B * x
        conv_out = self.conv(Bx)[..., :seqlen]
        y = C * conv_out
        y = y.transpose(-1, -2).contiguous()
        return self.out_proj(y)


class Lfm2DecoderLayer(hf_llama.GradientCheckpointingLayer):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.is_attention_layer = config.layer_types[layer_idx] == "full_attention"
        if self.is_attention_layer:
            self.self_attn = Lfm2Attention(config, layer_idx)
        else:
            self.conv = Lfm2ShortConv(config, layer_idx)
        self.feed_forward = Lfm2MLP(config)
        self.operator_norm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.ffn_norm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask=None, position_embeddings=None):
        residual = hidden_states
        if self.is_attention_layer:
            hidden_states, _ = self.self_attn(self.operator_norm(hidden_states), position_embeddings, attention_mask)
        else:
            hidden_states = self.conv(self.operator_norm(hidden_states))
        hidden_states = hidden_states + residual
        hidden_states = hidden_states + self.feed_forward(self.ffn_norm(hidden_states))
        return hidden_states


class Lfm2Model(hf_llama.LlamaModel):
    def __init__(self, config):
        hf_llama.CheckpointableModel.__init__(self)
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([Lfm2DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.rotary_emb = hf_llama.LlamaRotaryEmbedding(config)
        self.norm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)  # embedding_norm


class Lfm2ForCausalLM(hf_llama.LlamaForCausalLM):
    base_model_class = Lfm2Model

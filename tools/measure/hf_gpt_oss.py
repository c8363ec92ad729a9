"""gpt-oss's causal LM written to follow transformers' *eager* code path in
models/gpt_oss/modeling_gpt_oss.py (4.55-4.57: GptOssForCausalLM, read at huggingface/transformers
00d4b3d2), op for op, for the CPU measurements (docs/models.md#gpt_oss):

- GptOssRMSNorm: (weight * normalized).to(input dtype), the product in fp32;
- GptOssAttention: q/k/v/o with biases, the rotary embedding on the two halves of each head
  (_apply_rotary_emb: chunk, four products, cat) with (b, s, head_dim / 2) tables, and the eager
  attention with sinks: matmul * scaling + mask, cat with the per-head sink logits, minus the row
  max, softmax in that dtype, the sink column dropped (a view), matmul with the values;
- the full and the sliding (window) (b, 1, s, s) masks, both built every forward, each layer
  reading the one its layer_types entry names;
- GptOssMLP: GptOssTopKRouter (F.linear with bias, topk, softmax over the k values, scatter_ into
  zeros) and GptOssExperts' training loop over the experts hit, with the per-expert weight
  gathers (param[expert_idx] with a one-element index tensor: a copy), the clamped SwiGLU and
  index_add_;
- the decoder layer returning `hidden_states, _ = self.mlp(...)` (the router scores live to its
  end), the causal-LM head and ForCausalLMLoss from hf_llama. No router aux loss
  (output_router_logits false, as the released configs say).

The MXFP4 checkpoint format plays no part: from_pretrained dequantizes the experts for training.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_gemma3
import hf_llama


class Config(hf_llama.Config):
    def __init__(self, d):
        d = dict(d)
        d.setdefault("attention_bias", True)
        super().__init__(d)
        self.num_local_experts = d.get("num_local_experts", 32)
        self.num_experts_per_tok = d.get("num_experts_per_tok", d.get("experts_per_token", 4))
        self.sliding_window = d.get("sliding_window", 128)
        self.layer_types = d.get("layer_types") or [
            "sliding_attention" if bool((i + 1) % 2) else "full_attention" for i in range(self.num_hidden_layers)]
        self.swiglu_limit = d.get("swiglu_limit", 7.0)
        self.rope_theta = d.get("rope_theta", 150000.0)


class GptOssRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return (self.weight * hidden_states).to(input_dtype)


class GptOssExperts(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_experts = config.num_local_experts
        self.hidden_size = config.hidden_size
        self.expert_dim = config.intermediate_size
        e, h, i = self.num_experts, self.hidden_size, self.expert_dim
        self.gate_up_proj = nn.Parameter(torch.empty(e, h, 2 * i).normal_(std=0.02))
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(e, 2 * i))
        self.down_proj = nn.Parameter(torch.empty(e, i, h).normal_(std=0.02))
        self.down_proj_bias = nn.Parameter(torch.zeros(e, h))
        self.alpha = 1.702
        self.limit = config.swiglu_limit

    def forward(self, hidden_states, router_indices=None, routing_weights=None):
        batch_size = hidden_states.shape[0]
        hidden_states = hidden_states.reshape(-1, self.hidden_size)
        num_experts = routing_weights.shape[1]
        next_states = torch.zeros_like(hidden_states, dtype=hidden_states.dtype, device=hidden_states.device)
        with torch.no_grad():
            expert_mask = torch.nn.functional.one_hot(router_indices, num_classes=num_experts)
            expert_mask = expert_mask.permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit[:]:
            with torch.no_grad():
                _, token_idx = torch.where(expert_mask[expert_idx[0]])
            current_state = hidden_states[token_idx]
            gate_up = current_state @ self.gate_up_proj[expert_idx] + self.gate_up_proj_bias[expert_idx]
            gate, up = gate_up[..., ::2], gate_up[..., 1::2]
            gate = gate.clamp(min=None, max=self.limit)
            up = up.clamp(min=-self.limit, max=self.limit)
            glu = gate * torch.sigmoid(gate * self.alpha)
            gated_output = (up + 1) * glu
            out = gated_output @ self.down_proj[expert_idx] + self.down_proj_bias[expert_idx]
            weighted_output = out[0] * routing_weights[token_idx, expert_idx, None]
            next_states.index_add_(0, token_idx, weighted_output.to(hidden_states.dtype))
        next_states = next_states.view(batch_size, -1, self.hidden_size)
        return next_states


class GptOssTopKRouter(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.num_experts = config.num_local_experts
        self.hidden_dim = config.hidden_size
        self.weight = nn.Parameter(torch.empty(self.num_experts, self.hidden_dim).normal_(std=0.02))
        self.bias = nn.Parameter(torch.empty(self.num_experts).normal_(std=0.02))

    def forward(self, hidden_states):
        hidden_states = hidden_states.reshape(-1, self.hidden_dim)
        router_logits = F.linear(hidden_states, self.weight, self.bias)
        router_top_value, router_indices = torch.topk(router_logits, self.top_k, dim=-1)
        router_top_value = torch.nn.functional.softmax(router_top_value, dim=1, dtype=router_top_value.dtype)
        router_scores = torch.zeros_like(router_logits).scatter_(1, router_indices, router_top_value)
        return router_scores, router_indices


class GptOssMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.router = GptOssTopKRouter(config)
        self.experts = GptOssExperts(config)

    def forward(self, hidden_states):
        router_scores, router_indices = self.router(hidden_states)
        routed_out = self.experts(hidden_states, router_indices=router_indices, routing_weights=router_scores)
        return routed_out, router_scores


class GptOssRotaryEmbedding(nn.Module):
    """The default rope of GptOssRotaryEmbedding.forward: emb = freqs (no cat), (b, s, head_dim / 2)."""

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
            emb = freqs
            cos = emb.cos() * self.attention_scaling
            sin = emb.sin() * self.attention_scaling
        return cos.to(x.dtype), sin.to(x.dtype)


def _apply_rotary_emb(x, cos, sin):
    first_half, second_half = torch.chunk(x, 2, dim=-1)
    first_ = first_half * cos - second_half * sin
    second_ = second_half * cos + first_half * sin
    return torch.cat((first_, second_), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return _apply_rotary_emb(q, cos, sin), _apply_rotary_emb(k, cos, sin)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    key_states = hf_llama.repeat_kv(key, module.num_key_value_groups)
    value_states = hf_llama.repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
    sinks = module.sinks.reshape(1, -1, 1, 1).expand(query.shape[0], -1, query.shape[-2], -1)
    combined_logits = torch.cat([attn_weights, sinks], dim=-1)
    combined_logits = combined_logits - combined_logits.max(dim=-1, keepdim=True).values
    probs = F.softmax(combined_logits, dim=-1, dtype=combined_logits.dtype)
    scores = probs[..., :-1]
    attn_weights = nn.functional.dropout(scores, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class GptOssAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = 0.0
        h, nh, nkv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        b = config.attention_bias
        self.q_proj = nn.Linear(h, nh * self.head_dim, bias=b)
        self.k_proj = nn.Linear(h, nkv * self.head_dim, bias=b)
        self.v_proj = nn.Linear(h, nkv * self.head_dim, bias=b)
        self.o_proj = nn.Linear(nh * self.head_dim, h, bias=b)
        self.sinks = nn.Parameter(torch.empty(nh).normal_(std=0.02))

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        attn_output, attn_weights = eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class GptOssDecoderLayer(hf_llama.GradientCheckpointingLayer):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.self_attn = GptOssAttention(config, layer_idx)
        self.mlp = GptOssMLP(config)
        self.input_layernorm = GptOssRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = GptOssRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attention_type = config.layer_types[layer_idx]

    def forward(self, hidden_states, attention_mask=None, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, attention_mask=attention_mask,
                                          position_embeddings=position_embeddings)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states, _ = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


class GptOssModel(hf_llama.CheckpointableModel):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([GptOssDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = GptOssRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = GptOssRotaryEmbedding(config)

    def forward(self, input_ids, attention_mask):
        inputs_embeds = self.embed_tokens(input_ids)
        position_ids = torch.arange(0, inputs_embeds.shape[1]).unsqueeze(0)
        # causal_mask_mapping: create_causal_mask and create_sliding_window_causal_mask, both.
        full_mask, sliding_mask = hf_gemma3.eager_masks(attention_mask, inputs_embeds.dtype,
                                                        self.config.sliding_window, False)
        masks = {"full_attention": full_mask, "sliding_attention": sliding_mask}
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, attention_mask=masks[decoder_layer.attention_type],
                                          position_embeddings=position_embeddings)
        hidden_states = self.norm(hidden_states)
        return hidden_states


class GptOssForCausalLM(hf_llama.LlamaForCausalLM):
    base_model_class = GptOssModel

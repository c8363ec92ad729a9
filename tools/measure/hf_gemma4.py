"""Gemma 4's text model (Gemma4ForCausalLM) written to follow transformers 5.5+'s *eager* code path
in models/gemma4/modeling_gemma4.py (read at huggingface/transformers 0246b4f3), op for op, for the
CPU measurements (docs/models.md#gemma-4):

- Gemma4RMSNorm: x.float() * pow(mean(x^2) + eps, -0.5), times weight.float() when it has one
  (v_norm, the router's norm: with_scale=False), type_as(x);
- Gemma4TextAttention: the layer's head_dim (global_head_dim on full layers), with
  attention_k_eq_v no v_proj on full layers (value_states = key_states before k_norm) and
  num_global_key_value_heads; q_norm/k_norm/v_norm before the rotary embedding (applied to the
  whole head width with the layer type's own (b, s, d) tables), scaling 1.0, eager attention with
  repeat_kv; the last num_kv_shared_layers layers have no k/v projections and read the K/V the
  last earlier layer of their type stored in shared_kv_states;
- Gemma4TextMLP (GELU-tanh, twice as wide on the KV-shared layers with use_double_wide_mlp);
- enable_moe_block: Gemma4TextRouter (weightless norm, scale, proj, softmax, topk, renormalize,
  per_expert_scale) on the pre-MLP residual and Gemma4TextExperts' loop over the experts hit
  (self.gate_up_proj[expert_idx] with a 0-d index: a select view), beside the dense MLP;
- per-layer inputs (hidden_size_per_layer_input): embed_tokens_per_layer, per_layer_model_projection
  and its norm at the model level, and in every layer the gate, GELU-tanh, product with the layer's
  slice, projection and norm; `hidden_states *= self.layer_scalar`;
- the full and sliding (b, 1, s, s) masks (hf_gemma3.eager_masks), final logit softcapping and
  ForCausalLMLoss from hf_llama.

Gradient checkpointing follows GradientCheckpointingLayer (hidden_states and per_layer_input
positional, the rest bound with functools.partial), reentrant as transformers' default.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_gemma3
import hf_llama


class Config:
    def __init__(self, d):
        self.vocab_size = d.get("vocab_size", 262144)
        self.hidden_size = d.get("hidden_size", 2304)
        self.intermediate_size = d.get("intermediate_size", 9216)
        self.num_hidden_layers = d.get("num_hidden_layers", 30)
        self.num_attention_heads = d.get("num_attention_heads", 8)
        self.num_key_value_heads = d.get("num_key_value_heads", 4)
        self.head_dim = d.get("head_dim", 256)
        self.global_head_dim = d.get("global_head_dim", 512)
        self.num_global_key_value_heads = d.get("num_global_key_value_heads")
        self.attention_k_eq_v = d.get("attention_k_eq_v", False)
        self.num_kv_shared_layers = d.get("num_kv_shared_layers", 0)
        self.use_double_wide_mlp = d.get("use_double_wide_mlp", False)
        self.hidden_size_per_layer_input = d.get("hidden_size_per_layer_input", 256)
        self.vocab_size_per_layer_input = d.get("vocab_size_per_layer_input", 262144)
        self.enable_moe_block = d.get("enable_moe_block", False)
        self.num_experts = d.get("num_experts")
        self.top_k_experts = d.get("top_k_experts")
        self.moe_intermediate_size = d.get("moe_intermediate_size")
        self.sliding_window = d.get("sliding_window", 512)
        self.rms_norm_eps = d.get("rms_norm_eps", 1e-6)
        self.pad_token_id = d.get("pad_token_id", 0)
        self.tie_word_embeddings = d.get("tie_word_embeddings", True)
        self.final_logit_softcapping = d.get("final_logit_softcapping")
        self.attention_bias = d.get("attention_bias", False)
        self.layer_types = list(d.get("layer_types") or [
            "sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(self.num_hidden_layers)])
        self.layer_types[-1] = "full_attention"  # Gemma4TextConfig.__post_init__


class Gemma4RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6, with_scale=True):
        super().__init__()
        self.eps = eps
        self.with_scale = with_scale
        if with_scale:
            self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        mean_squared = x.pow(2).mean(-1, keepdim=True) + self.eps
        return x * torch.pow(mean_squared, -0.5)

    def forward(self, x):
        normed = self._norm(x.float())
        if self.with_scale:
            normed = normed * self.weight.float()
        return normed.type_as(x)


class ScaledEmbedding(nn.Embedding):
    def __init__(self, num_embeddings, embedding_dim, padding_idx, embed_scale):
        super().__init__(num_embeddings, embedding_dim, padding_idx)
        self.register_buffer("embed_scale", torch.tensor(embed_scale), persistent=False)

    def forward(self, input_ids):
        return super().forward(input_ids) * self.embed_scale.to(self.weight.dtype)


class Rotary(nn.Module):
    """Gemma4TextRotaryEmbedding for one layer type: (b, s, dim) cos/sin in fp32, cast to x's dtype.
    The proportional rope of the full layers rotates partial_rotary_factor of the head and leaves
    the rest (zero frequencies): the tables cover the whole global_head_dim."""

    def __init__(self, dim, theta):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        pos = position_ids[:, None, :].float()
        freqs = (inv.float() @ pos.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def apply_rotary(x, cos, sin):
    cos = cos.unsqueeze(2)
    sin = sin.unsqueeze(2)
    return (x * cos) + (hf_llama.rotate_half(x) * sin)


class Gemma4Attention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_type = config.layer_types[layer_idx]
        self.is_sliding = self.layer_type == "sliding_attention"
        self.head_dim = config.global_head_dim if not self.is_sliding and config.global_head_dim else config.head_dim
        self.use_alternative_attention = config.attention_k_eq_v and not self.is_sliding
        nkv = config.num_global_key_value_heads if self.use_alternative_attention else config.num_key_value_heads
        self.num_key_value_groups = config.num_attention_heads // nkv
        self.scaling = 1.0
        first_shared = config.num_hidden_layers - config.num_kv_shared_layers
        self.is_kv_shared_layer = layer_idx >= first_shared >= 0
        prev = config.layer_types[:first_shared]
        self.store_full_length_kv = not self.is_kv_shared_layer and layer_idx == len(prev) - 1 - prev[::-1].index(
            self.layer_type)
        h, nh, hd, bias = config.hidden_size, config.num_attention_heads, self.head_dim, config.attention_bias
        self.q_proj = nn.Linear(h, nh * hd, bias=bias)
        self.q_norm = Gemma4RMSNorm(hd, config.rms_norm_eps)
        if not self.is_kv_shared_layer:
            self.k_norm = Gemma4RMSNorm(hd, config.rms_norm_eps)
            self.v_norm = Gemma4RMSNorm(hd, config.rms_norm_eps, with_scale=False)
            self.k_proj = nn.Linear(h, nkv * hd, bias=bias)
            self.v_proj = nn.Linear(h, nkv * hd, bias=bias) if not self.use_alternative_attention else None
        self.o_proj = nn.Linear(nh * hd, h, bias=bias)

    def forward(self, hidden_states, position_embeddings, attention_mask, shared_kv_states):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        cos, sin = position_embeddings
        query_states = self.q_proj(hidden_states).view(hidden_shape)
        query_states = self.q_norm(query_states)
        query_states = apply_rotary(query_states, cos, sin)
        query_states = query_states.transpose(1, 2)
        if self.is_kv_shared_layer:
            key_states, value_states = shared_kv_states[self.layer_type]
        else:
            key_states = self.k_proj(hidden_states).view(hidden_shape)
            value_states = self.v_proj(hidden_states).view(hidden_shape) if self.v_proj is not None else key_states
            key_states = self.k_norm(key_states)
            key_states = apply_rotary(key_states, cos, sin)
            key_states = key_states.transpose(1, 2)
            value_states = self.v_norm(value_states)
            value_states = value_states.transpose(1, 2)
        if self.store_full_length_kv:
            shared_kv_states[self.layer_type] = key_states, value_states
        attn_output, attn_weights = hf_llama.eager_attention_forward(self, query_states, key_states, value_states,
                                                                     attention_mask, self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class Gemma4MLP(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        first_shared = config.num_hidden_layers - config.num_kv_shared_layers
        wide = config.use_double_wide_mlp and layer_idx >= first_shared > 0
        h, i = config.hidden_size, config.intermediate_size * (2 if wide else 1)
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)
        self.act_fn = nn.GELU(approximate="tanh")

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Gemma4Experts(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_experts = config.num_experts
        e, h, i = config.num_experts, config.hidden_size, config.moe_intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h).normal_(std=0.02))
        self.down_proj = nn.Parameter(torch.empty(e, h, i).normal_(std=0.02))
        self.act_fn = nn.GELU(approximate="tanh")

    def forward(self, hidden_states, top_k_index, top_k_weights):
        final_hidden_states = torch.zeros_like(hidden_states)
        with torch.no_grad():
            expert_mask = F.one_hot(top_k_index, num_classes=self.num_experts)
            expert_mask = expert_mask.permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_idx = expert_idx[0]
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[token_idx]
            gate, up = F.linear(current_state, self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
            current_hidden_states = self.act_fn(gate) * up
            current_hidden_states = F.linear(current_hidden_states, self.down_proj[expert_idx])
            current_hidden_states = current_hidden_states * top_k_weights[token_idx, top_k_pos, None]
            final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(final_hidden_states.dtype))
        return final_hidden_states


class Gemma4Router(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.top_k = config.top_k_experts
        self.scalar_root_size = config.hidden_size ** -0.5
        self.norm = Gemma4RMSNorm(config.hidden_size, config.rms_norm_eps, with_scale=False)
        self.proj = nn.Linear(config.hidden_size, config.num_experts, bias=False)
        self.scale = nn.Parameter(torch.ones(config.hidden_size))
        self.per_expert_scale = nn.Parameter(torch.ones(config.num_experts))

    def forward(self, hidden_states):
        hidden_states = self.norm(hidden_states)
        hidden_states = hidden_states * self.scale * self.scalar_root_size
        expert_scores = self.proj(hidden_states)
        router_probabilities = F.softmax(expert_scores, dim=-1)
        top_k_weights, top_k_index = torch.topk(router_probabilities, k=self.top_k, dim=-1)
        top_k_weights /= top_k_weights.sum(dim=-1, keepdim=True)
        top_k_weights = top_k_weights * self.per_expert_scale[top_k_index]
        return router_probabilities, top_k_weights, top_k_index


class Gemma4DecoderLayer(hf_llama.GradientCheckpointingLayer):
    def __init__(self, config, layer_idx):
        super().__init__()
        h, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = Gemma4Attention(config, layer_idx)
        self.mlp = Gemma4MLP(config, layer_idx)
        self.input_layernorm = Gemma4RMSNorm(h, eps)
        self.post_attention_layernorm = Gemma4RMSNorm(h, eps)
        self.pre_feedforward_layernorm = Gemma4RMSNorm(h, eps)
        self.post_feedforward_layernorm = Gemma4RMSNorm(h, eps)
        self.register_buffer("layer_scalar", torch.ones(1))
        self.hidden_size_per_layer_input = config.hidden_size_per_layer_input
        if self.hidden_size_per_layer_input:
            self.act_fn = nn.GELU(approximate="tanh")
            self.per_layer_input_gate = nn.Linear(h, self.hidden_size_per_layer_input, bias=False)
            self.per_layer_projection = nn.Linear(self.hidden_size_per_layer_input, h, bias=False)
            self.post_per_layer_input_norm = Gemma4RMSNorm(h, eps)
        self.enable_moe_block = config.enable_moe_block
        if self.enable_moe_block:
            self.router = Gemma4Router(config)
            self.experts = Gemma4Experts(config)
            self.post_feedforward_layernorm_1 = Gemma4RMSNorm(h, eps)
            self.post_feedforward_layernorm_2 = Gemma4RMSNorm(h, eps)
            self.pre_feedforward_layernorm_2 = Gemma4RMSNorm(h, eps)

    def forward(self, hidden_states, per_layer_input=None, shared_kv_states=None, position_embeddings=None,
                attention_mask=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states, position_embeddings, attention_mask, shared_kv_states)
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.pre_feedforward_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        if self.enable_moe_block:
            hidden_states_1 = self.post_feedforward_layernorm_1(hidden_states)
            hidden_states_flat = residual.reshape(-1, residual.shape[-1])
            _, top_k_weights, top_k_index = self.router(hidden_states_flat)
            hidden_states_2 = self.pre_feedforward_layernorm_2(hidden_states_flat)
            hidden_states_2 = self.experts(hidden_states_2, top_k_index, top_k_weights)
            hidden_states_2 = hidden_states_2.reshape(residual.shape)
            hidden_states_2 = self.post_feedforward_layernorm_2(hidden_states_2)
            hidden_states = hidden_states_1 + hidden_states_2
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        if self.hidden_size_per_layer_input:
            residual = hidden_states
            hidden_states = self.per_layer_input_gate(hidden_states)
            hidden_states = self.act_fn(hidden_states)
            hidden_states = hidden_states * per_layer_input
            hidden_states = self.per_layer_projection(hidden_states)
            hidden_states = self.post_per_layer_input_norm(hidden_states)
            hidden_states = residual + hidden_states
        hidden_states *= self.layer_scalar
        return hidden_states


class Gemma4TextModel(hf_llama.CheckpointableModel):
    def __init__(self, config):
        super().__init__()
        self.config = config
        h = config.hidden_size
        self.embed_tokens = ScaledEmbedding(config.vocab_size, h, config.pad_token_id, h ** 0.5)
        self.layers = nn.ModuleList([Gemma4DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = Gemma4RMSNorm(h, config.rms_norm_eps)
        self.rotary = nn.ModuleDict({
            "sliding_attention": Rotary(config.head_dim, 10000.0),
            "full_attention": Rotary(config.global_head_dim or config.head_dim, 1000000.0)})
        self.hidden_size_per_layer_input = d = config.hidden_size_per_layer_input
        if d:
            n = config.num_hidden_layers * d
            self.embed_tokens_per_layer = ScaledEmbedding(config.vocab_size_per_layer_input, n, config.pad_token_id,
                                                          d ** 0.5)
            self.per_layer_input_scale = 2.0 ** -0.5
            self.per_layer_model_projection = nn.Linear(h, n, bias=False)
            self.per_layer_model_projection_scale = h ** -0.5
            self.per_layer_projection_norm = Gemma4RMSNorm(d, config.rms_norm_eps)

    def forward(self, input_ids, attention_mask):
        inputs_embeds = self.embed_tokens(input_ids)
        per_layer_inputs = None
        if self.hidden_size_per_layer_input:
            per_layer_inputs = self.embed_tokens_per_layer(input_ids).reshape(
                *input_ids.shape, self.config.num_hidden_layers, self.hidden_size_per_layer_input)
            projection = self.per_layer_model_projection(inputs_embeds) * self.per_layer_model_projection_scale
            projection = projection.reshape(*inputs_embeds.shape[:-1], self.config.num_hidden_layers,
                                            self.hidden_size_per_layer_input)
            projection = self.per_layer_projection_norm(projection)
            per_layer_inputs = (projection + per_layer_inputs) * self.per_layer_input_scale
        position_ids = torch.arange(inputs_embeds.shape[1]).unsqueeze(0)
        full_mask, sliding_mask = hf_gemma3.eager_masks(attention_mask, inputs_embeds.dtype, self.config.sliding_window,
                                                        False)
        masks = {"full_attention": full_mask, "sliding_attention": sliding_mask}
        hidden_states = inputs_embeds
        position_embeddings = {t: self.rotary[t](hidden_states, position_ids) for t in set(self.config.layer_types)}
        shared_kv_states = {}
        for i, layer in enumerate(self.layers):
            t = self.config.layer_types[i]
            per_layer_input = per_layer_inputs[:, :, i, :] if per_layer_inputs is not None else None
            hidden_states = layer(hidden_states, per_layer_input, shared_kv_states=shared_kv_states,
                                  position_embeddings=position_embeddings[t], attention_mask=masks[t])
        return self.norm(hidden_states)


class Gemma4ForCausalLM(hf_llama.LlamaForCausalLM):
    base_model_class = Gemma4TextModel

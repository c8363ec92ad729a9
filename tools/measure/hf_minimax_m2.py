"""MiniMax-M2's causal LM written to follow transformers' *eager* code path in
models/minimax_m2/modeling_minimax_m2.py (transformers 5, read at huggingface/transformers
0205eec1), op for op, for the CPU measurements (docs/models.md#minimax_m2): q_norm / k_norm
RMSNorms over all heads on the projections, partial rotary (the first rotary_dim of each head,
the rest concatenated back), Llama's eager attention, MiniMaxM2TopKRouter (sigmoid of the fp32
logits, e_score_correction_bias for the choice, gather, in-place normalization) and
MiniMaxM2Experts' loop over the experts hit with fused gate_up_proj / down_proj parameters indexed
by a 0-d tensor (a view), the weighted outputs cast back and index_add_-ed into zeros_like.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_llama


class Config(hf_llama.Config):
    def __init__(self, d):
        super().__init__(d)
        self.rms_norm_eps = d.get("rms_norm_eps", 1e-6)
        self.num_local_experts = d["num_local_experts"]
        self.num_experts_per_tok = d["num_experts_per_tok"]
        self.rotary_dim = d.get("rotary_dim", self.head_dim)


class MiniMaxM2TopKRouter(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.hidden_dim = config.hidden_size
        self.weight = nn.Parameter(torch.empty(config.num_local_experts, config.hidden_size).normal_(std=0.02))

    def forward(self, hidden_states, e_score_correction_bias):
        hidden_states = hidden_states.reshape(-1, self.hidden_dim)
        router_logits = F.linear(hidden_states.to(self.weight.dtype), self.weight)
        routing_weights = nn.functional.sigmoid(router_logits.float())
        scores_for_choice = routing_weights + e_score_correction_bias
        _, top_k_index = torch.topk(scores_for_choice, self.top_k, dim=-1, sorted=False)
        top_k_weights = routing_weights.gather(1, top_k_index)
        top_k_weights /= top_k_weights.sum(dim=-1, keepdim=True)
        return router_logits, top_k_weights, top_k_index


class MiniMaxM2Experts(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_experts = config.num_local_experts
        e, h, i = self.num_experts, config.hidden_size, config.intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h).normal_(std=0.02))
        self.down_proj = nn.Parameter(torch.empty(e, h, i).normal_(std=0.02))
        self.act_fn = nn.SiLU()

    def forward(self, hidden_states, top_k_index, top_k_weights):
        final_hidden_states = torch.zeros_like(hidden_states)
        with torch.no_grad():
            expert_mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts + 1)
            expert_mask = expert_mask.permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_idx = expert_idx[0]
            if expert_idx == self.num_experts:
                continue
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[token_idx]
            gate, up = nn.functional.linear(current_state, self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
            current_hidden_states = self.act_fn(gate) * up
            current_hidden_states = nn.functional.linear(current_hidden_states, self.down_proj[expert_idx])
            current_hidden_states = current_hidden_states * top_k_weights[token_idx, top_k_pos, None]
            final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(final_hidden_states.dtype))
        return final_hidden_states


class MiniMaxM2SparseMoeBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate = MiniMaxM2TopKRouter(config)
        self.experts = MiniMaxM2Experts(config)
        self.register_buffer("e_score_correction_bias", torch.zeros(config.num_local_experts))

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        _, top_k_weights, top_k_index = self.gate(hidden_states, self.e_score_correction_bias)
        hidden_states = self.experts(hidden_states, top_k_index, top_k_weights)
        return hidden_states.reshape(batch_size, sequence_length, hidden_dim)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = (q_rot * cos) + (hf_llama.rotate_half(q_rot) * sin)
    k_embed = (k_rot * cos) + (hf_llama.rotate_half(k_rot) * sin)
    return torch.cat([q_embed, q_pass], dim=-1), torch.cat([k_embed, k_pass], dim=-1)


class MiniMaxM2Attention(hf_llama.LlamaAttention):
    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        nh, nkv, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        self.q_norm_all = hf_llama.LlamaRMSNorm(nh * hd, config.rms_norm_eps)
        self.k_norm_all = hf_llama.LlamaRMSNorm(nkv * hd, config.rms_norm_eps)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_norm_all(self.q_proj(hidden_states))
        key_states = self.k_norm_all(self.k_proj(hidden_states))
        value_states = self.v_proj(hidden_states)
        query_states = query_states.view(hidden_shape).transpose(1, 2)
        key_states = key_states.view(hidden_shape).transpose(1, 2)
        value_states = value_states.view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        attn_output, attn_weights = hf_llama.eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask, scaling=self.scaling, dropout=0.0)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class MiniMaxM2DecoderLayer(hf_llama.LlamaDecoderLayer):
    def __init__(self, config, layer_idx):
        hf_llama.GradientCheckpointingLayer.__init__(self)
        self.self_attn = MiniMaxM2Attention(config, layer_idx)
        self.mlp = MiniMaxM2SparseMoeBlock(config)
        self.input_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)


class RotaryConfig:
    def __init__(self, dim, theta):
        self.head_dim, self.rope_theta = dim, theta


class MiniMaxM2Model(hf_llama.LlamaModel):
    def __init__(self, config):
        hf_llama.CheckpointableModel.__init__(self)
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([MiniMaxM2DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = hf_llama.LlamaRotaryEmbedding(RotaryConfig(config.rotary_dim, config.rope_theta))


class MiniMaxM2ForCausalLM(hf_llama.LlamaForCausalLM):
    base_model_class = MiniMaxM2Model

"""DeepSeek-V3.2's causal LM written to follow transformers' *eager* code path in
models/deepseek_v32/modeling_deepseek_v32.py (transformers 5, read at huggingface/transformers
01f8fa55), op for op, for the CPU measurements (docs/models.md#deepseek-v32).

What differs from DeepSeek-V3 as hf_deepseek mirrors it (transformers 4.5x):
- the lightning indexer (DeepseekV32Indexer), a torch.no_grad() forward on the layer input and the
  query latent q_resid: wq_b, wk, k_norm (nn.LayerNorm with a bias), a half-split (not interleaved)
  rotary on the first qk_rope_head_dim dims of q and k (split, rotate, cat), the fp32 scores
  matmul(q.float(), k^T.float()) of shape [b, s, index_heads, s], * softmax_scale, relu, the fp32
  weights_proj (kept in fp32: _keep_in_fp32_modules) * heads^-0.5 contracted over the heads into
  [b, s, s], + the causal mask, topk. Its parameters never get a gradient (no_grad);
- the sparse mask: new_ones(bool [b, s, s]).scatter(-1, topk, False), and the 4-D additive mask
  masked_fill-ed with it (a new [b, 1, s, s] tensor in the mask's dtype) that the eager attention adds;
- MLA's interleaved rotary on even/odd strided slices (no de-interleaving copy), and the key built by
  new_empty + two copy_ into its slices (expand_kv) instead of a cat;
- the routed experts as two 3-D Parameters (gate_up_proj [E, 2I, H], down_proj [E, H, I]) indexed
  per expert hit, outputs cast back to the hidden dtype and index_add_-ed into zeros_like(hidden).
What it shares with the Llama family (RMSNorm, the rotary tables, the additive causal mask,
checkpointing, the causal-LM head and loss) is hf_llama's; the dense MLP is hf_deepseek's.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_deepseek
import hf_llama


class Config(hf_deepseek.Config):
    def __init__(self, d):
        super().__init__(d)
        self.index_n_heads = d.get("index_n_heads", 64)
        self.index_head_dim = d.get("index_head_dim", 128)
        self.index_topk = d.get("index_topk", 2048)


class DeepseekV32Indexer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads = config.index_n_heads
        self.head_dim = config.index_head_dim
        self.rope_dim = config.qk_rope_head_dim
        self.index_topk = config.index_topk
        self.wq_b = nn.Linear(config.q_lora_rank, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(config.hidden_size, self.head_dim, bias=False)
        self.k_norm = nn.LayerNorm(self.head_dim, eps=1e-6)
        self.weights_proj = nn.Linear(config.hidden_size, self.n_heads, bias=False)
        self.softmax_scale = self.head_dim ** -0.5

    @torch.no_grad()
    def forward(self, hidden_states, q_resid, position_embeddings, attention_mask):
        b, s, _ = hidden_states.shape
        cos, sin = position_embeddings
        rest = self.head_dim - self.rope_dim
        q = self.wq_b(q_resid).view(b, s, self.n_heads, self.head_dim)
        q_rot, q_pass = torch.split(q, [self.rope_dim, rest], dim=-1)
        k = self.k_norm(self.wk(hidden_states)).unsqueeze(2)
        k_rot, k_pass = torch.split(k, [self.rope_dim, rest], dim=-1)
        q_rot, k_rot = hf_llama.apply_rotary_pos_emb(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
        q = torch.cat([q_rot, q_pass], dim=-1)
        k = torch.cat([k_rot, k_pass], dim=-1).squeeze(2)
        # [b, s, heads, d] @ [b, 1, d, s]: one fp32 score per head and query-key pair
        scores = torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)) * self.softmax_scale
        scores = F.relu(scores)
        weights = self.weights_proj(hidden_states.to(self.weights_proj.weight.dtype)).float() * (self.n_heads ** -0.5)
        index_scores = torch.matmul(weights.unsqueeze(-2), scores).squeeze(-2)
        index_scores = index_scores + attention_mask
        topk = min(self.index_topk, index_scores.shape[-1])
        return index_scores.topk(topk, dim=-1).indices.to(torch.int32)


def apply_rotary_pos_emb_interleave(q, k, cos, sin, unsqueeze_dim=1):
    # the first half of cat(freqs, freqs) holds each pair's angle
    cos = cos[..., : cos.shape[-1] // 2].unsqueeze(unsqueeze_dim)
    sin = sin[..., : sin.shape[-1] // 2].unsqueeze(unsqueeze_dim)
    q1, q2 = q[..., 0::2], q[..., 1::2]
    k1, k2 = k[..., 0::2], k[..., 1::2]
    q_embed = torch.cat([q1 * cos - q2 * sin, q2 * cos + q1 * sin], dim=-1)
    k_embed = torch.cat([k1 * cos - k2 * sin, k2 * cos + k1 * sin], dim=-1)
    return q_embed, k_embed


class DeepseekV32Attention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.num_key_value_groups = 1
        self.attention_dropout = 0.0
        self.num_heads = config.num_attention_heads
        self.qk_rope_head_dim = config.qk_rope_head_dim
        self.kv_lora_rank = config.kv_lora_rank
        self.v_head_dim = config.v_head_dim
        self.qk_nope_head_dim = config.qk_nope_head_dim
        self.qk_head_dim = config.qk_head_dim
        h = config.hidden_size
        self.q_a_proj = nn.Linear(h, config.q_lora_rank, bias=config.attention_bias)
        self.q_a_layernorm = hf_llama.LlamaRMSNorm(config.q_lora_rank, 1e-6)
        self.q_b_proj = nn.Linear(config.q_lora_rank, self.num_heads * self.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, self.kv_lora_rank + self.qk_rope_head_dim, bias=config.attention_bias)
        self.kv_a_layernorm = hf_llama.LlamaRMSNorm(self.kv_lora_rank, 1e-6)
        self.kv_b_proj = nn.Linear(self.kv_lora_rank, self.num_heads * (self.qk_nope_head_dim + self.v_head_dim),
                                   bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.v_head_dim, h, bias=config.attention_bias)
        self.scaling = self.qk_head_dim ** (-0.5)
        self.indexer = DeepseekV32Indexer(config)

    def expand_kv(self, kv_nope, k_rot):
        b, _, s, _ = kv_nope.shape
        kv_nope = self.kv_b_proj(kv_nope).view(b, s, -1, self.qk_nope_head_dim + self.v_head_dim).transpose(1, 2)
        k_nope, value_states = torch.split(kv_nope, [self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        k_rot = k_rot.expand(-1, k_nope.shape[1], -1, -1)
        key_states = kv_nope.new_empty(*kv_nope.shape[:-1], self.qk_nope_head_dim + self.qk_rope_head_dim)
        key_states[..., : self.qk_nope_head_dim].copy_(k_nope)
        key_states[..., self.qk_nope_head_dim:].copy_(k_rot)
        return key_states, value_states

    def forward(self, hidden_states, position_embeddings, attention_mask):
        b, s = hidden_states.shape[:-1]
        q_resid = self.q_a_layernorm(self.q_a_proj(hidden_states))
        q_states = self.q_b_proj(q_resid).view(b, s, -1, self.qk_head_dim).transpose(1, 2)
        q_pass, q_rot = torch.split(q_states, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        compressed_kv = self.kv_a_proj_with_mqa(hidden_states)
        kv_pass, k_rot = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        k_pass = self.kv_a_layernorm(kv_pass).view(b, 1, s, self.kv_lora_rank)
        k_rot = k_rot.view(b, 1, s, self.qk_rope_head_dim)
        cos, sin = position_embeddings
        q_rot, k_rot = apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin)
        query_states = torch.cat((q_pass, q_rot), dim=-1)
        key_states, value_states = self.expand_kv(k_pass, k_rot)
        topk_indices = self.indexer(hidden_states, q_resid, position_embeddings, attention_mask[:, 0, :, :])
        index_mask = (topk_indices.new_ones((b, s, key_states.shape[2]), dtype=torch.bool)
                      .scatter(-1, topk_indices.long(), False).unsqueeze(1))
        attention_mask = attention_mask.masked_fill(index_mask, torch.finfo(hidden_states.dtype).min)
        attn_output, attn_weights = hf_llama.eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask, scaling=self.scaling,
            dropout=0.0 if not self.training else self.attention_dropout)
        attn_output = attn_output.reshape(b, s, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class DeepseekV32TopkRouter(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.num_experts = config.n_routed_experts
        self.hidden_dim = config.hidden_size
        self.routed_scaling_factor = config.routed_scaling_factor
        self.num_group = config.n_group
        self.topk_group = config.topk_group
        self.norm_topk_prob = config.norm_topk_prob
        self.weight = nn.Parameter(torch.empty(self.num_experts, self.hidden_dim).normal_(std=0.02))
        self.register_buffer("e_score_correction_bias", torch.zeros(self.num_experts))

    def forward(self, hidden_states):
        hidden_states = hidden_states.view(-1, self.hidden_dim)
        router_logits = F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))
        scores = router_logits.sigmoid()
        scores_for_choice = scores + self.e_score_correction_bias
        per_group = self.num_experts // self.num_group
        group_scores = scores_for_choice.view(-1, self.num_group, per_group).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(-1, self.num_group, per_group).reshape(-1, self.num_experts)
        scores_for_choice = scores_for_choice.masked_fill(~score_mask.bool(), float("-inf"))
        topk_indices = torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=False)[1]
        topk_weights = scores.gather(1, topk_indices)
        if self.norm_topk_prob:
            topk_weights /= topk_weights.sum(dim=-1, keepdim=True) + 1e-20
        topk_weights = topk_weights * self.routed_scaling_factor
        return router_logits, topk_weights, topk_indices


class DeepseekV32Experts(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_experts = config.n_routed_experts
        e, h, i = self.num_experts, config.hidden_size, config.moe_intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h).normal_(std=0.02))
        self.down_proj = nn.Parameter(torch.empty(e, h, i).normal_(std=0.02))
        self.act_fn = nn.SiLU()

    def forward(self, hidden_states, top_k_index, top_k_weights):
        final_hidden_states = torch.zeros_like(hidden_states)
        with torch.no_grad():
            expert_mask = F.one_hot(top_k_index, num_classes=self.num_experts).permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_idx = expert_idx[0]
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[token_idx]
            gate, up = F.linear(current_state, self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
            current = self.act_fn(gate) * up
            current = F.linear(current, self.down_proj[expert_idx])
            current = current * top_k_weights[token_idx, top_k_pos, None]
            final_hidden_states.index_add_(0, token_idx, current.to(final_hidden_states.dtype))
        return final_hidden_states


class DeepseekV32MoE(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.experts = DeepseekV32Experts(config)
        self.gate = DeepseekV32TopkRouter(config)
        self.shared_experts = hf_deepseek.DeepseekV3MLP(config, config.moe_intermediate_size * config.n_shared_experts)

    def forward(self, hidden_states):
        residuals = hidden_states
        orig_shape = hidden_states.shape
        _, topk_weights, topk_indices = self.gate(hidden_states)
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        hidden_states = self.experts(hidden_states, topk_indices, topk_weights).view(*orig_shape)
        return hidden_states + self.shared_experts(residuals)


class DeepseekV32DecoderLayer(hf_llama.LlamaDecoderLayer):
    def __init__(self, config, layer_idx):
        hf_llama.GradientCheckpointingLayer.__init__(self)
        self.self_attn = DeepseekV32Attention(config, layer_idx)
        dense = layer_idx < config.first_k_dense_replace
        self.mlp = hf_deepseek.DeepseekV3MLP(config) if dense else DeepseekV32MoE(config)
        self.input_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)


class DeepseekV32Model(hf_llama.LlamaModel):
    def __init__(self, config):
        hf_llama.CheckpointableModel.__init__(self)
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([DeepseekV32DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = hf_llama.LlamaRotaryEmbedding(config)


class DeepseekV32ForCausalLM(hf_llama.LlamaForCausalLM):
    base_model_class = DeepseekV32Model

    def to(self, *args, **kwargs):
        """from_pretrained(torch_dtype=...) keeps _keep_in_fp32_modules (indexer.weights_proj) in fp32."""
        out = super().to(*args, **kwargs)
        for layer in out.model.layers:
            layer.self_attn.indexer.weights_proj.float()
        return out

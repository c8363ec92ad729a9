"""Qwen3-Next's causal LM written to follow transformers' models/qwen3_next/modeling_qwen3_next.py
(4.57) on the path it takes without flash-linear-attention and causal-conv1d, op for op, for the CPU
measurements:

- Gated DeltaNet layers (Qwen3NextGatedDeltaNet): in_proj_qkvz / in_proj_ba reordered by
  fix_query_key_value_ordering, the depthwise conv1d + silu over (q, k, v), beta = sigmoid(b),
  g = -exp(A_log) * softplus(a + dt_bias), keys and queries repeated to the value heads,
  torch_chunk_gated_delta_rule (l2norm in the kernel, chunk 64, the row-by-row triangular solve and
  the loop over chunks), Qwen3NextRMSNormGated (norm, weight, then * silu(z)), out_proj;
- gated full attention (Qwen3NextAttention): q_proj gives queries and an output gate, q/k norms,
  partial rotary embeddings, attn_output * sigmoid(gate);
- Qwen3NextRMSNorm is the zero-centred (1 + weight) norm computed in fp32;
- the sparse MoE block of 4.57 (Qwen2-MoE's: ModuleList experts, fp32 softmax router, top-k,
  norm_topk_prob, and a shared expert scaled by sigmoid(shared_expert_gate)).

The linear-attention layers get no mask when every token attends (all measured inputs). Shared
pieces (eager attention, the additive causal mask, checkpointing, the loss) are hf_llama's.

Qwen3.5 / Qwen3.6 (model_type qwen3_5_text, qwen3_5_moe_text; transformers 5.x
models/qwen3_5/modular_qwen3_5.py) are this model with two changes, mirrored here:
Qwen3_5GatedDeltaNet has separate in_proj_qkv, in_proj_z, in_proj_b and in_proj_a (no
fix_query_key_value_ordering: the projection goes straight into the convolution), and
Qwen3_5TextRotaryEmbedding is Qwen3-VL's interleaved MRoPE over the partial rotary dimensions,
fed (3, b, s) position ids.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_llama


class Config(hf_llama.Config):
    def __init__(self, d):
        d = dict(d)
        d.setdefault("intermediate_size", 5632)
        super().__init__(d)
        self.rms_norm_eps = d.get("rms_norm_eps", 1e-6)
        self.partial_rotary_factor = d.get("partial_rotary_factor", 0.25)
        n = self.num_hidden_layers
        interval = d.get("full_attention_interval", 4)
        self.layer_types = d.get("layer_types") or [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
        self.linear_num_key_heads = d.get("linear_num_key_heads", 16)
        self.linear_num_value_heads = d.get("linear_num_value_heads", 32)
        self.linear_key_head_dim = d.get("linear_key_head_dim", 128)
        self.linear_value_head_dim = d.get("linear_value_head_dim", 128)
        self.split_projections = d.get("model_type") in ("qwen3_5_text", "qwen3_5_moe_text")
        self.mrope_section = (d.get("rope_parameters") or {}).get("mrope_section", [11, 11, 10])
        self.linear_conv_kernel_dim = d.get("linear_conv_kernel_dim", 4)
        # Qwen3_5TextConfig has no experts (dense MLPs); Qwen3-Next and Qwen3.5-MoE default to 512.
        self.num_experts = d.get("num_experts", 0 if d.get("model_type") == "qwen3_5_text" else 512)
        self.num_experts_per_tok = d.get("num_experts_per_tok", 10)
        self.moe_intermediate_size = d.get("moe_intermediate_size", 512)
        self.shared_expert_intermediate_size = d.get("shared_expert_intermediate_size", 512)
        self.norm_topk_prob = d.get("norm_topk_prob", True)
        self.decoder_sparse_step = d.get("decoder_sparse_step", 1)
        self.mlp_only_layers = d.get("mlp_only_layers", [])


class Qwen3NextRMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


class Qwen3NextRMSNormGated(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states, gate):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        hidden_states = self.weight * hidden_states.to(input_dtype)
        hidden_states = hidden_states * F.silu(gate.to(torch.float32))
        return hidden_states.to(input_dtype)


class Qwen3NextRotaryEmbedding(hf_llama.LlamaRotaryEmbedding):
    def __init__(self, config):
        nn.Module.__init__(self)
        dim = int(config.head_dim * config.partial_rotary_factor)
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = (q_rot * cos) + (hf_llama.rotate_half(q_rot) * sin)
    k_embed = (k_rot * cos) + (hf_llama.rotate_half(k_rot) * sin)
    q_embed = torch.cat([q_embed, q_pass], dim=-1)
    k_embed = torch.cat([k_embed, k_pass], dim=-1)
    return q_embed, k_embed


class Qwen3NextAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        h, nh, nkv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        self.q_proj = nn.Linear(h, nh * self.head_dim * 2, bias=config.attention_bias)
        self.k_proj = nn.Linear(h, nkv * self.head_dim, bias=config.attention_bias)
        self.v_proj = nn.Linear(h, nkv * self.head_dim, bias=config.attention_bias)
        self.o_proj = nn.Linear(nh * self.head_dim, h, bias=config.attention_bias)
        self.q_norm = Qwen3NextRMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = Qwen3NextRMSNorm(self.head_dim, config.rms_norm_eps)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states, gate = torch.chunk(self.q_proj(hidden_states).view(*input_shape, -1, self.head_dim * 2), 2, dim=-1)
        gate = gate.reshape(*input_shape, -1)
        query_states = self.q_norm(query_states.view(hidden_shape)).transpose(1, 2)
        key_states = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        attn_output, attn_weights = hf_llama.eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask, dropout=0.0, scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = attn_output * torch.sigmoid(gate)
        return self.o_proj(attn_output), attn_weights


def l2norm(x, dim=-1, eps=1e-6):
    inv_norm = torch.rsqrt((x * x).sum(dim=dim, keepdim=True) + eps)
    return x * inv_norm


def torch_chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64, use_qk_l2norm_in_kernel=False):
    initial_dtype = query.dtype
    if use_qk_l2norm_in_kernel:
        query = l2norm(query, dim=-1, eps=1e-6)
        key = l2norm(key, dim=-1, eps=1e-6)
    query, key, value, beta, g = [x.transpose(1, 2).contiguous().to(torch.float32)
                                  for x in (query, key, value, beta, g)]
    batch_size, num_heads, sequence_length, k_head_dim = key.shape
    v_head_dim = value.shape[-1]
    pad_size = (chunk_size - sequence_length % chunk_size) % chunk_size
    query = F.pad(query, (0, 0, 0, pad_size))
    key = F.pad(key, (0, 0, 0, pad_size))
    value = F.pad(value, (0, 0, 0, pad_size))
    beta = F.pad(beta, (0, pad_size))
    g = F.pad(g, (0, pad_size))
    total_sequence_length = sequence_length + pad_size
    scale = 1 / (query.shape[-1] ** 0.5)
    query = query * scale
    v_beta = value * beta.unsqueeze(-1)
    k_beta = key * beta.unsqueeze(-1)
    query, key, value, k_beta, v_beta = [x.reshape(x.shape[0], x.shape[1], -1, chunk_size, x.shape[-1])
                                         for x in (query, key, value, k_beta, v_beta)]
    g = g.reshape(g.shape[0], g.shape[1], -1, chunk_size)
    mask = torch.triu(torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=query.device), diagonal=0)
    g = g.cumsum(dim=-1)
    decay_mask = ((g.unsqueeze(-1) - g.unsqueeze(-2)).tril().exp().float()).tril()
    attn = -((k_beta @ key.transpose(-1, -2)) * decay_mask).masked_fill(mask, 0)
    for i in range(1, chunk_size):
        row = attn[..., i, :i].clone()
        sub = attn[..., :i, :i].clone()
        attn[..., i, :i] = row + (row.unsqueeze(-1) * sub).sum(-2)
    attn = attn + torch.eye(chunk_size, dtype=attn.dtype, device=attn.device)
    value = attn @ v_beta
    k_cumdecay = attn @ (k_beta * g.exp().unsqueeze(-1))
    last_recurrent_state = torch.zeros(batch_size, num_heads, k_head_dim, v_head_dim).to(value)
    core_attn_out = torch.zeros_like(value)
    mask = torch.triu(torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=query.device), diagonal=1)
    for i in range(0, total_sequence_length // chunk_size):
        q_i, k_i, v_i = query[:, :, i], key[:, :, i], value[:, :, i]
        attn = (q_i @ k_i.transpose(-1, -2) * decay_mask[:, :, i]).masked_fill_(mask, 0)
        v_prime = (k_cumdecay[:, :, i]) @ last_recurrent_state
        v_new = v_i - v_prime
        attn_inter = (q_i * g[:, :, i, :, None].exp()) @ last_recurrent_state
        core_attn_out[:, :, i] = attn_inter + attn @ v_new
        last_recurrent_state = (
            last_recurrent_state * g[:, :, i, -1, None, None].exp()
            + (k_i * (g[:, :, i, -1, None] - g[:, :, i]).exp()[..., None]).transpose(-1, -2) @ v_new)
    core_attn_out = core_attn_out.reshape(core_attn_out.shape[0], core_attn_out.shape[1], -1, core_attn_out.shape[-1])
    core_attn_out = core_attn_out[:, :, :sequence_length]
    core_attn_out = core_attn_out.transpose(1, 2).contiguous().to(initial_dtype)
    return core_attn_out, None


class Qwen3NextGatedDeltaNet(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.num_v_heads = config.linear_num_value_heads
        self.num_k_heads = config.linear_num_key_heads
        self.head_k_dim = config.linear_key_head_dim
        self.head_v_dim = config.linear_value_head_dim
        self.key_dim = self.head_k_dim * self.num_k_heads
        self.value_dim = self.head_v_dim * self.num_v_heads
        self.conv_dim = self.key_dim * 2 + self.value_dim
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, bias=False, kernel_size=config.linear_conv_kernel_dim,
                                groups=self.conv_dim, padding=config.linear_conv_kernel_dim - 1)
        h = config.hidden_size
        self.in_proj_qkvz = nn.Linear(h, self.key_dim * 2 + self.value_dim * 2, bias=False)
        self.in_proj_ba = nn.Linear(h, self.num_v_heads * 2, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.num_v_heads).uniform_(0, 16)))
        self.norm = Qwen3NextRMSNormGated(self.head_v_dim, config.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, h, bias=False)

    def fix_query_key_value_ordering(self, mixed_qkvz, mixed_ba):
        r = self.num_v_heads // self.num_k_heads
        mixed_qkvz = mixed_qkvz.view(*mixed_qkvz.size()[:-1], self.num_k_heads,
                                     2 * self.head_k_dim + 2 * self.head_v_dim * r)
        mixed_ba = mixed_ba.view(*mixed_ba.size()[:-1], self.num_k_heads, 2 * r)
        query, key, value, z = torch.split(mixed_qkvz, [self.head_k_dim, self.head_k_dim, r * self.head_v_dim,
                                                        r * self.head_v_dim], dim=3)
        b, a = torch.split(mixed_ba, [r, r], dim=3)
        value = value.reshape(value.size(0), value.size(1), -1, self.head_v_dim)
        z = z.reshape(z.size(0), z.size(1), -1, self.head_v_dim)
        b = b.reshape(b.size(0), b.size(1), self.num_v_heads)
        a = a.reshape(a.size(0), a.size(1), self.num_v_heads)
        return query, key, value, z, b, a

    def forward(self, hidden_states):
        batch_size, seq_len, _ = hidden_states.shape
        projected_states_qkvz = self.in_proj_qkvz(hidden_states)
        projected_states_ba = self.in_proj_ba(hidden_states)
        query, key, value, z, b, a = self.fix_query_key_value_ordering(projected_states_qkvz, projected_states_ba)
        query, key, value = (x.reshape(x.shape[0], x.shape[1], -1) for x in (query, key, value))
        mixed_qkv = torch.cat((query, key, value), dim=-1)
        mixed_qkv = mixed_qkv.transpose(1, 2)
        mixed_qkv = F.silu(self.conv1d(mixed_qkv)[:, :, :seq_len])
        mixed_qkv = mixed_qkv.transpose(1, 2)
        query, key, value = torch.split(mixed_qkv, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        query = query.reshape(query.shape[0], query.shape[1], -1, self.head_k_dim)
        key = key.reshape(key.shape[0], key.shape[1], -1, self.head_k_dim)
        value = value.reshape(value.shape[0], value.shape[1], -1, self.head_v_dim)
        beta = b.sigmoid()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
        if self.num_v_heads // self.num_k_heads > 1:
            query = query.repeat_interleave(self.num_v_heads // self.num_k_heads, dim=2)
            key = key.repeat_interleave(self.num_v_heads // self.num_k_heads, dim=2)
        core_attn_out, _ = torch_chunk_gated_delta_rule(query, key, value, g=g, beta=beta,
                                                        use_qk_l2norm_in_kernel=True)
        z_shape_og = z.shape
        core_attn_out = core_attn_out.reshape(-1, core_attn_out.shape[-1])
        z = z.reshape(-1, z.shape[-1])
        core_attn_out = self.norm(core_attn_out, z)
        core_attn_out = core_attn_out.reshape(z_shape_og)
        core_attn_out = core_attn_out.reshape(core_attn_out.shape[0], core_attn_out.shape[1], -1)
        return self.out_proj(core_attn_out)


class Qwen3_5GatedDeltaNet(Qwen3NextGatedDeltaNet):
    """Qwen3_5GatedDeltaNet.forward on the training path (no cache; torch_causal_conv1d_fn is
    conv1d with padding, sliced, then the activation)."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        del self.in_proj_qkvz
        del self.in_proj_ba
        h = config.hidden_size
        self.in_proj_qkv = nn.Linear(h, self.key_dim * 2 + self.value_dim, bias=False)
        self.in_proj_z = nn.Linear(h, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(h, self.num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(h, self.num_v_heads, bias=False)

    def forward(self, hidden_states):
        batch_size, seq_len, _ = hidden_states.shape
        mixed_qkv = self.in_proj_qkv(hidden_states)
        mixed_qkv = mixed_qkv.transpose(1, 2)
        z = self.in_proj_z(hidden_states)
        z = z.reshape(batch_size, seq_len, -1, self.head_v_dim)
        b = self.in_proj_b(hidden_states)
        a = self.in_proj_a(hidden_states)
        mixed_qkv = F.silu(self.conv1d(mixed_qkv)[:, :, :seq_len])
        mixed_qkv = mixed_qkv.transpose(1, 2)
        query, key, value = torch.split(mixed_qkv, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        query = query.reshape(batch_size, seq_len, -1, self.head_k_dim)
        key = key.reshape(batch_size, seq_len, -1, self.head_k_dim)
        value = value.reshape(batch_size, seq_len, -1, self.head_v_dim)
        beta = b.sigmoid()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
        if self.num_v_heads // self.num_k_heads > 1:
            query = query.repeat_interleave(self.num_v_heads // self.num_k_heads, dim=2)
            key = key.repeat_interleave(self.num_v_heads // self.num_k_heads, dim=2)
        core_attn_out, _ = torch_chunk_gated_delta_rule(query, key, value, g=g, beta=beta,
                                                        use_qk_l2norm_in_kernel=True)
        core_attn_out = core_attn_out.reshape(-1, self.head_v_dim)
        z = z.reshape(-1, self.head_v_dim)
        core_attn_out = self.norm(core_attn_out, z)
        core_attn_out = core_attn_out.reshape(batch_size, seq_len, -1)
        return self.out_proj(core_attn_out)


class Qwen3_5TextRotaryEmbedding(nn.Module):
    """Qwen3_5TextRotaryEmbedding: Qwen3VLTextRotaryEmbedding over int(head_dim * partial) dims:
    the (3, b, s, d / 2) frequencies, apply_interleaved_mrope into the temporal row in place."""

    def __init__(self, config):
        super().__init__()
        dim = int(config.head_dim * config.partial_rotary_factor)
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.mrope_section = config.mrope_section

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv = self.inv_freq[None, None, :, None].float().expand(3, position_ids.shape[1], -1, 1)
        pos = position_ids[:, :, None, :].float()
        freqs = (inv.float() @ pos.float()).transpose(2, 3)
        freqs_t = freqs[0]
        for dim, offset in enumerate((1, 2), start=1):
            length = self.mrope_section[dim] * 3
            idx = slice(offset, length, 3)
            freqs_t[..., idx] = freqs[dim, ..., idx]
        emb = torch.cat((freqs_t, freqs_t), dim=-1)
        cos = emb.cos() * 1.0
        sin = emb.sin() * 1.0
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


class Qwen3NextMLP(nn.Module):
    def __init__(self, config, intermediate_size):
        super().__init__()
        h = config.hidden_size
        self.gate_proj = nn.Linear(h, intermediate_size, bias=False)
        self.up_proj = nn.Linear(h, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen3NextSparseMoeBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_experts = config.num_experts
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.gate = nn.Linear(config.hidden_size, config.num_experts, bias=False)
        self.experts = nn.ModuleList([Qwen3NextMLP(config, config.moe_intermediate_size)
                                      for _ in range(config.num_experts)])
        self.shared_expert = Qwen3NextMLP(config, config.shared_expert_intermediate_size)
        self.shared_expert_gate = nn.Linear(config.hidden_size, 1, bias=False)

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        if self.norm_topk_prob:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros((batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype,
                                          device=hidden_states.device)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_layer = self.experts[int(expert_idx)]
            idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        shared_expert_output = self.shared_expert(hidden_states)
        shared_expert_output = F.sigmoid(self.shared_expert_gate(hidden_states)) * shared_expert_output
        final_hidden_states = final_hidden_states + shared_expert_output
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


class Qwen3NextDecoderLayer(hf_llama.GradientCheckpointingLayer):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_type = config.layer_types[layer_idx]
        if self.layer_type == "linear_attention":
            gdn = Qwen3_5GatedDeltaNet if config.split_projections else Qwen3NextGatedDeltaNet
            self.linear_attn = gdn(config, layer_idx)
        else:
            self.self_attn = Qwen3NextAttention(config, layer_idx)
        if layer_idx not in config.mlp_only_layers and config.num_experts > 0 and \
                (layer_idx + 1) % config.decoder_sparse_step == 0:
            self.mlp = Qwen3NextSparseMoeBlock(config)
        else:
            self.mlp = Qwen3NextMLP(config, config.intermediate_size)
        self.input_layernorm = Qwen3NextRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3NextRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask=None, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        if self.layer_type == "linear_attention":
            hidden_states = self.linear_attn(hidden_states)
        else:
            hidden_states, _ = self.self_attn(hidden_states, position_embeddings, attention_mask)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        if isinstance(hidden_states, tuple):
            hidden_states, _ = hidden_states
        return residual + hidden_states


class Qwen3NextModel(hf_llama.LlamaModel):
    def __init__(self, config):
        hf_llama.CheckpointableModel.__init__(self)
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([Qwen3NextDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = Qwen3NextRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.split = config.split_projections
        self.rotary_emb = Qwen3_5TextRotaryEmbedding(config) if self.split else Qwen3NextRotaryEmbedding(config)

    def forward(self, input_ids, attention_mask):
        inputs_embeds = self.embed_tokens(input_ids)
        position_ids = torch.arange(0, inputs_embeds.shape[1], device=inputs_embeds.device).unsqueeze(0)
        if self.split:  # Qwen3_5TextModel: arange expanded to (4, b, s); rows 1..3 feed the rotary
            position_ids = position_ids.view(1, 1, -1).expand(4, inputs_embeds.shape[0], -1)[1:]
        causal_mask = hf_llama.make_causal_mask(attention_mask, inputs_embeds.dtype, inputs_embeds.device)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for layer in self.layers:
            # _update_linear_attn_mask: None when every token attends
            mask = causal_mask if layer.layer_type == "full_attention" else None
            hidden_states = layer(hidden_states, attention_mask=mask, position_embeddings=position_embeddings)
        return self.norm(hidden_states)


class Qwen3NextForCausalLM(hf_llama.LlamaForCausalLM):
    base_model_class = Qwen3NextModel

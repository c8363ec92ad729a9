"""Nemotron-H's causal LM written to follow transformers' models/nemotron_h/modeling_nemotron_h.py
on the path it takes without the mamba_ssm / causal-conv1d kernels (NemotronHMamba2Mixer.torch_forward
with its naive chunked SSD scan), op for op, for the CPU measurements.

Blocks follow hybrid_override_pattern: M (Mamba-2 mixer), * (attention without rotary embeddings),
- (NemotronHMLP: up_proj, relu2, down_proj), E (NemotronHMoE of Nemotron 3: the fp32 sigmoid router
with e_score_correction_bias and group-limited top-k, relu2 experts stored as 3-D parameters looped
over the experts hit, index_add_ into an fp32 accumulator, a relu2 shared expert; no latent
projections); each block is norm -> mixer -> residual add. The
mixer's norm is Zamba2RMSNormGated (gate before the group RMS norm, in fp32). The LM head's logits
are .float()-ed before the loss. The model's mamba mask is None when every token attends (all
measured inputs), so no padding multiplications run. Shared pieces (RMSNorm, eager attention, the
additive causal mask, checkpointing, the loss) are hf_llama's.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_llama


class Config(hf_llama.Config):
    def __init__(self, d):
        d = dict(d)
        d.setdefault("head_dim", d.get("attention_head_dim", d["hidden_size"] // d["num_attention_heads"]))
        d.setdefault("intermediate_size", 21504)
        super().__init__(d)
        self.rms_norm_eps = d.get("layer_norm_epsilon", 1e-5)
        self.pattern = d["hybrid_override_pattern"]
        self.mamba_num_heads = d.get("mamba_num_heads", 128)
        self.mamba_head_dim = d.get("mamba_head_dim", 64)
        self.ssm_state_size = d.get("ssm_state_size", 128)
        self.n_groups = d.get("n_groups", 8)
        self.chunk_size = d.get("chunk_size", 128)
        self.conv_kernel = d.get("conv_kernel", 4)
        self.use_conv_bias = d.get("use_conv_bias", True)
        self.use_bias = d.get("use_bias", False)
        self.mlp_bias = d.get("mlp_bias", False)
        self.time_step_min = d.get("time_step_min", 0.001)
        self.n_routed_experts = d.get("n_routed_experts", 8)
        self.num_experts_per_tok = d.get("num_experts_per_tok", 2)
        self.moe_intermediate_size = d.get("moe_intermediate_size", 7688)
        self.moe_shared_expert_intermediate_size = d.get("moe_shared_expert_intermediate_size", 7688)
        self.n_group = d.get("n_group", 1)
        self.topk_group = d.get("topk_group", 1)
        self.norm_topk_prob = d.get("norm_topk_prob", True)
        self.routed_scaling_factor = d.get("routed_scaling_factor", 1.0)


def pad_tensor_by_size(input_tensor, pad_size):
    pad_shape = (0, 0, 0, 0, 0, pad_size, 0, 0) if len(input_tensor.shape) == 4 else (0, 0, 0, pad_size, 0, 0)
    return F.pad(input_tensor, pad_shape, mode="constant", value=0)


def reshape_into_chunks(input_tensor, pad_size, chunk_size):
    input_tensor = pad_tensor_by_size(input_tensor, pad_size)
    if len(input_tensor.shape) == 3:
        return input_tensor.reshape(input_tensor.shape[0], -1, chunk_size, input_tensor.shape[2])
    return input_tensor.reshape(input_tensor.shape[0], -1, chunk_size, input_tensor.shape[2], input_tensor.shape[3])


def segment_sum(input_tensor):
    chunk_size = input_tensor.size(-1)
    input_tensor = input_tensor[..., None].expand(*input_tensor.size(), chunk_size)
    mask = torch.tril(torch.ones(chunk_size, chunk_size, device=input_tensor.device, dtype=torch.bool), diagonal=-1)
    input_tensor = input_tensor.masked_fill(~mask, 0)
    tensor_segsum = torch.cumsum(input_tensor, dim=-2)
    mask = torch.tril(torch.ones(chunk_size, chunk_size, device=input_tensor.device, dtype=torch.bool), diagonal=0)
    return tensor_segsum.masked_fill(~mask, -torch.inf)


class Zamba2RMSNormGated(nn.Module):
    def __init__(self, hidden_size, group_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps
        self.group_size = group_size

    def forward(self, hidden_states, gate):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        hidden_states = hidden_states * F.silu(gate.to(torch.float32))
        *prefix, last = hidden_states.shape
        groups = last // self.group_size
        grouped = hidden_states.view(*prefix, groups, self.group_size)
        variance = grouped.pow(2).mean(-1, keepdim=True)
        grouped = grouped * torch.rsqrt(variance + self.variance_epsilon)
        hidden_states = grouped.view(*prefix, groups * self.group_size)
        return self.weight * hidden_states.to(input_dtype)


class NemotronHMamba2Mixer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ssm_state_size = config.ssm_state_size
        self.conv_kernel_size = config.conv_kernel
        self.num_heads = config.mamba_num_heads
        self.head_dim = config.mamba_head_dim
        self.intermediate_size = self.num_heads * self.head_dim
        self.n_groups = config.n_groups
        self.chunk_size = config.chunk_size
        self.time_step_min = config.time_step_min
        self.conv_dim = self.intermediate_size + 2 * self.n_groups * self.ssm_state_size
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, bias=config.use_conv_bias, kernel_size=self.conv_kernel_size,
                                groups=self.conv_dim, padding=self.conv_kernel_size - 1)
        self.in_proj = nn.Linear(config.hidden_size, self.intermediate_size + self.conv_dim + self.num_heads,
                                 bias=config.use_bias)
        self.dt_bias = nn.Parameter(torch.ones(self.num_heads))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, self.num_heads + 1, dtype=torch.float32)))
        self.norm = Zamba2RMSNormGated(self.intermediate_size, self.intermediate_size // self.n_groups,
                                       config.rms_norm_eps)
        self.D = nn.Parameter(torch.ones(self.num_heads))
        self.out_proj = nn.Linear(self.intermediate_size, config.hidden_size, bias=config.use_bias)
        self.act = nn.SiLU()

    def forward(self, input_states):
        # torch_forward without a cache and without a mask
        batch_size, seq_len, _ = input_states.shape
        dtype = input_states.dtype
        projected_states = self.in_proj(input_states)
        d_mlp = (projected_states.shape[-1] - 2 * self.intermediate_size - 2 * self.n_groups * self.ssm_state_size
                 - self.num_heads) // 2
        _, _, gate, hidden_states, dt = projected_states.split(
            [d_mlp, d_mlp, self.intermediate_size, self.conv_dim, self.num_heads], dim=-1)
        hidden_states = hidden_states.transpose(1, 2)
        hidden_states = self.act(self.conv1d(hidden_states)[..., :seq_len].transpose(1, 2))
        gs = self.n_groups * self.ssm_state_size
        hidden_states, B, C = torch.split(hidden_states, [self.intermediate_size, gs, gs], dim=-1)
        A = -torch.exp(self.A_log.float())
        # the naive SSD scan
        dt = F.softplus(dt + self.dt_bias)
        dt = torch.clamp(dt, self.time_step_min)
        hidden_states = hidden_states.reshape(batch_size, seq_len, -1, self.head_dim).float()
        B = B.reshape(batch_size, seq_len, -1, self.ssm_state_size).float()
        C = C.reshape(batch_size, seq_len, -1, self.ssm_state_size).float()
        B = B.repeat_interleave(self.num_heads // self.n_groups, dim=2, output_size=self.num_heads)
        C = C.repeat_interleave(self.num_heads // self.n_groups, dim=2, output_size=self.num_heads)
        pad_size = (self.chunk_size - seq_len % self.chunk_size) % self.chunk_size
        D_residual = self.D[..., None] * pad_tensor_by_size(hidden_states, pad_size)
        hidden_states = hidden_states * dt[..., None]
        A = A.to(hidden_states.dtype) * dt
        hidden_states, A, B, C = [reshape_into_chunks(t, pad_size, self.chunk_size) for t in (hidden_states, A, B, C)]
        A = A.permute(0, 3, 1, 2)
        A_cumsum = torch.cumsum(A, dim=-1)
        L = torch.exp(segment_sum(A))
        G_intermediate = C[:, :, :, None, :, :] * B[:, :, None, :, :, :]
        G = G_intermediate.sum(dim=-1)
        M_intermediate = G[..., None] * L.permute(0, 2, 3, 4, 1)[..., None]
        M = M_intermediate.sum(dim=-1)
        Y_diag = (M[..., None] * hidden_states[:, :, None]).sum(3)
        decay_states = torch.exp(A_cumsum[:, :, :, -1:] - A_cumsum)
        B_decay = B * decay_states.permute(0, 2, 3, 1)[..., None]
        states = (B_decay.permute(0, 1, 3, 2, 4)[..., None]
                  * hidden_states.permute(0, 1, 3, 2, 4)[..., None, :]).sum(dim=3).permute(0, 1, 2, 4, 3)
        previous_states = torch.zeros_like(states[:, :1])
        states = torch.cat([previous_states, states], dim=1)
        decay_chunk = torch.exp(segment_sum(F.pad(A_cumsum[:, :, :, -1], (1, 0))))
        states_permuted = states.permute(0, 2, 1, 3, 4)
        result = (decay_chunk[..., None, None] * states_permuted[:, :, None, ...]).sum(dim=2)
        new_states = result.permute(0, 2, 1, 3, 4)
        states, ssm_state = new_states[:, :-1], new_states[:, -1]
        state_decay_out = torch.exp(A_cumsum)
        C_times_states = C[..., None, :] * states[:, :, None, ...]
        state_decay_out_permuted = state_decay_out.permute(0, 2, 3, 1)
        Y_off = C_times_states.sum(-1) * state_decay_out_permuted[..., None]
        y = Y_diag + Y_off
        y = y.reshape(batch_size, -1, self.num_heads, self.head_dim)
        y = y + D_residual
        if pad_size > 0:
            y = y[:, :seq_len, :, :]
        y = y.reshape(batch_size, seq_len, -1)
        scan_output = self.norm(y, gate)
        return self.out_proj(scan_output.to(dtype))


class NemotronHMLP(nn.Module):
    def __init__(self, config, intermediate_size=None):
        super().__init__()
        i = intermediate_size or config.intermediate_size
        self.up_proj = nn.Linear(config.hidden_size, i, bias=config.mlp_bias)
        self.down_proj = nn.Linear(i, config.hidden_size, bias=config.mlp_bias)

    def forward(self, x):
        # ACT2FN["relu2"] (ReLUSquaredActivation): square(relu(x))
        return self.down_proj(torch.square(F.relu(self.up_proj(x))))


class NemotronHExperts(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_experts = config.n_routed_experts
        i, h = config.moe_intermediate_size, config.hidden_size
        self.up_proj = nn.Parameter(torch.empty(self.num_experts, i, h).normal_(std=0.02))
        self.down_proj = nn.Parameter(torch.empty(self.num_experts, h, i).normal_(std=0.02))

    def forward(self, hidden_states, top_k_index, top_k_weights):
        final_hidden_states = torch.zeros_like(hidden_states, dtype=top_k_weights.dtype)
        with torch.no_grad():
            expert_mask = F.one_hot(top_k_index, num_classes=self.num_experts)
            expert_mask = expert_mask.permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero().squeeze(-1)
        for expert_idx in expert_hit:
            expert_idx = expert_idx.item()
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            if token_idx.numel() == 0:
                continue
            current_state = hidden_states[token_idx]
            current_hidden_states = F.linear(current_state, self.up_proj[expert_idx])
            current_hidden_states = torch.square(F.relu(current_hidden_states))
            current_hidden_states = F.linear(current_hidden_states, self.down_proj[expert_idx])
            current_hidden_states = current_hidden_states * top_k_weights[token_idx, top_k_pos, None]
            final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(final_hidden_states.dtype))
        return final_hidden_states.to(hidden_states.dtype)


class NemotronHTopkRouter(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.weight = nn.Parameter(torch.empty(config.n_routed_experts, config.hidden_size).normal_(std=0.02))
        self.register_buffer("e_score_correction_bias", torch.zeros(config.n_routed_experts))

    def forward(self, hidden_states):
        hidden_states = hidden_states.view(-1, self.hidden_size)
        return F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))


class NemotronHMoE(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.experts = NemotronHExperts(config)
        self.gate = NemotronHTopkRouter(config)
        self.shared_experts = NemotronHMLP(config, config.moe_shared_expert_intermediate_size)
        self.n_routed_experts = config.n_routed_experts
        self.n_group = config.n_group
        self.topk_group = config.topk_group
        self.norm_topk_prob = config.norm_topk_prob
        self.routed_scaling_factor = config.routed_scaling_factor
        self.top_k = config.num_experts_per_tok

    def route_tokens_to_experts(self, router_logits):
        router_logits = router_logits.sigmoid()
        router_logits_for_choice = router_logits + self.gate.e_score_correction_bias
        group_scores = (router_logits_for_choice.view(-1, self.n_group, self.n_routed_experts // self.n_group)
                        .topk(2, dim=-1)[0].sum(dim=-1))
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = (group_mask.unsqueeze(-1).expand(-1, self.n_group, self.n_routed_experts // self.n_group)
                      .reshape(-1, self.n_routed_experts))
        scores_for_choice = router_logits_for_choice.masked_fill(~score_mask.bool(), float("-inf"))
        topk_indices = torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=False)[1]
        topk_weights = router_logits.gather(1, topk_indices)
        if self.norm_topk_prob:
            denominator = topk_weights.sum(dim=-1, keepdim=True) + 1e-20
            topk_weights /= denominator
        topk_weights = topk_weights * self.routed_scaling_factor
        return topk_indices, topk_weights

    def forward(self, hidden_states):
        residuals = hidden_states
        orig_shape = hidden_states.shape
        router_logits = self.gate(hidden_states)
        topk_indices, topk_weights = self.route_tokens_to_experts(router_logits)
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        hidden_states = self.experts(hidden_states, topk_indices, topk_weights)  # no latent projections
        hidden_states = hidden_states.view(*orig_shape)
        return hidden_states + self.shared_experts(residuals)


class NemotronHAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        h, nh, nkv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        self.q_proj = nn.Linear(h, nh * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, nkv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, nkv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(nh * self.head_dim, h, bias=False)

    def forward(self, hidden_states, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        attn_output, attn_weights = hf_llama.eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask, dropout=0.0, scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class NemotronHBlock(hf_llama.GradientCheckpointingLayer):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.norm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.block_type = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}[config.pattern[layer_idx]]
        self.mixer = {"mamba": NemotronHMamba2Mixer, "attention": NemotronHAttention,
                      "mlp": NemotronHMLP, "moe": NemotronHMoE}[self.block_type](config)

    def forward(self, hidden_states, attention_mask=None, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.norm(hidden_states.to(dtype=self.norm.weight.dtype))
        if self.block_type == "attention":
            hidden_states, _ = self.mixer(hidden_states, attention_mask)
        else:
            hidden_states = self.mixer(hidden_states)
        return residual + hidden_states


class NemotronHModel(hf_llama.CheckpointableModel):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)  # `embeddings`
        self.layers = nn.ModuleList([NemotronHBlock(config, i) for i in range(config.num_hidden_layers)])
        self.norm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)  # norm_f

    def forward(self, input_ids, attention_mask):
        hidden_states = self.embed_tokens(input_ids)
        causal_mask = hf_llama.make_causal_mask(attention_mask, hidden_states.dtype, hidden_states.device)
        for block in self.layers:
            # mamba blocks get the mamba mask (None: every token attends), MLP blocks None
            hidden_states = block(hidden_states, attention_mask=causal_mask if block.block_type == "attention" else None)
        return self.norm(hidden_states)


class NemotronHForCausalLM(hf_llama.LlamaForCausalLM):
    base_model_class = NemotronHModel

    def forward(self, input_ids, attention_mask, labels=None, logits_to_keep=0):
        hidden_states = self.model(input_ids, attention_mask)
        logits = self.lm_head(hidden_states[:, slice(-logits_to_keep, None), :]).float()
        loss = hf_llama.for_causal_lm_loss(logits, labels, self.config.vocab_size) if labels is not None else None
        return {"loss": loss, "logits": logits}

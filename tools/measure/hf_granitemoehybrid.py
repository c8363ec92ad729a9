"""Granite 4.0's causal LM (model_type granitemoehybrid) written to follow transformers'
models/granitemoehybrid/modeling_granitemoehybrid.py on the path it takes without the mamba_ssm /
causal-conv1d kernels (GraniteMoeHybridMambaLayer.torch_forward, Bamba's mixer, with its naive
chunked SSD scan), op for op, for the CPU measurements.

Layers follow layer_types: "mamba" (the Mamba-2 mixer) or "attention" (GraniteMoeHybridAttention:
scaling = attention_multiplier, rotary only with position_embedding_type "rope"). Every layer is
norm -> mixer -> residual + out * residual_multiplier, norm -> (GraniteMoeHybridMoE + shared MLP,
or the shared MLP alone when num_local_experts is 0) -> residual + out * residual_multiplier. The
model multiplies the embeddings by embedding_multiplier and the LM head divides the logits by
logits_scaling. The MoE is GraniteMoeHybridTopKGating (top-k of fp32 logits, softmax over the k,
tokens sorted by expert) and two GraniteMoeHybridParallelExperts (3-D Parameters, one F.linear per
expert over its slice of the sorted tokens, torch.cat), index_add into zeros. The model's mamba
mask is None when every token attends (all measured inputs). Shared pieces (RMSNorm, eager
attention, rotary embedding, the additive causal mask, checkpointing, the loss) are hf_llama's;
the scan's helpers are hf_nemotron_h's (the same functions in both modelling files).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_llama
from hf_nemotron_h import pad_tensor_by_size, reshape_into_chunks, segment_sum


class Config(hf_llama.Config):
    def __init__(self, d):
        d = dict(d)
        d.setdefault("intermediate_size", 11008)
        super().__init__(d)
        self.rms_norm_eps = d.get("rms_norm_eps", 1e-6)
        n = self.num_hidden_layers
        self.layer_types = d.get("layer_types") or d.get("layers_block_type") or ["mamba"] * n
        self.embedding_multiplier = d.get("embedding_multiplier", 1.0)
        self.residual_multiplier = d.get("residual_multiplier", 1.0)
        self.attention_multiplier = d.get("attention_multiplier", 1.0)
        self.logits_scaling = d.get("logits_scaling", 1.0)
        self.num_local_experts = d.get("num_local_experts", 8)
        self.num_experts_per_tok = d.get("num_experts_per_tok", 2)
        self.shared_intermediate_size = d.get("shared_intermediate_size", 1024)
        self.position_embedding_type = d.get("position_embedding_type")
        self.mamba_n_heads = d.get("mamba_n_heads", 128)
        self.mamba_n_groups = d.get("mamba_n_groups", 1)
        self.mamba_d_state = d.get("mamba_d_state", 256)
        self.mamba_expand = d.get("mamba_expand", 2)
        head = d.get("mamba_d_head", "auto")
        self.mamba_d_head = self.mamba_expand * self.hidden_size // self.mamba_n_heads if head == "auto" else head
        self.mamba_d_conv = d.get("mamba_d_conv", 4)
        self.mamba_chunk_size = d.get("mamba_chunk_size", 256)
        self.mamba_conv_bias = d.get("mamba_conv_bias", True)
        self.mamba_proj_bias = d.get("mamba_proj_bias", False)
        self.time_step_limit = (0.0, float("inf"))


class GraniteMoeHybridRMSNormGated(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states, gate):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        hidden_states = hidden_states * F.silu(gate.to(torch.float32))
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class GraniteMoeHybridMambaLayer(nn.Module):
    def __init__(self, config, intermediate_size=None, out_proj_bias=None):
        # Falcon-H1's mixer passes mamba_d_ssm and projectors_bias (hf_falcon_h1.FalconH1Mixer).
        super().__init__()
        self.num_heads = config.mamba_n_heads
        self.ssm_state_size = config.mamba_d_state
        self.conv_kernel_size = config.mamba_d_conv
        self.intermediate_size = int(config.mamba_expand * config.hidden_size) if intermediate_size is None \
            else intermediate_size
        self.n_groups = config.mamba_n_groups
        self.head_dim = config.mamba_d_head
        self.chunk_size = config.mamba_chunk_size
        self.time_step_limit = config.time_step_limit
        self.conv_dim = self.intermediate_size + 2 * self.n_groups * self.ssm_state_size
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, bias=config.mamba_conv_bias,
                                kernel_size=self.conv_kernel_size, groups=self.conv_dim,
                                padding=self.conv_kernel_size - 1)
        self.in_proj = nn.Linear(config.hidden_size, self.intermediate_size + self.conv_dim + self.num_heads,
                                 bias=config.mamba_proj_bias)
        self.dt_bias = nn.Parameter(torch.ones(self.num_heads))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, self.num_heads + 1, dtype=torch.float32)))
        self.norm = self.build_norm(config)
        self.D = nn.Parameter(torch.ones(self.num_heads))
        self.out_proj = nn.Linear(self.intermediate_size, config.hidden_size,
                                  bias=config.mamba_proj_bias if out_proj_bias is None else out_proj_bias)
        self.act = nn.SiLU()

    def build_norm(self, config):
        return GraniteMoeHybridRMSNormGated(self.intermediate_size, config.rms_norm_eps)

    def forward(self, input_states):
        # torch_forward without a cache and without a mask
        batch_size, seq_len, _ = input_states.shape
        dtype = input_states.dtype
        projected_states = self.in_proj(input_states)
        gate, hidden_states_B_C, dt = projected_states.split(
            [self.intermediate_size, self.conv_dim, self.num_heads], dim=-1)
        hidden_states_B_C = self.act(self.conv1d(hidden_states_B_C.transpose(1, 2))[..., :seq_len].transpose(1, 2))
        gs = self.n_groups * self.ssm_state_size
        hidden_states, B, C = torch.split(hidden_states_B_C, [self.intermediate_size, gs, gs], dim=-1)
        y, scan_locals = self.naive_scan(hidden_states, B, C, dt, batch_size, seq_len)
        scan_output = self.norm(y, gate)
        return self.out_proj(scan_output.to(dtype))

    def naive_scan(self, hidden_states, B, C, dt, batch_size, seq_len):
        # torch_forward's "ssd naive implementation without einsums" (Bamba's, Falcon-H1's). Its
        # names are locals of torch_forward in transformers, alive until it returns: the caller
        # holds them (the second result) through the gate and out_proj.
        A = -torch.exp(self.A_log.float())
        dt = F.softplus(dt + self.dt_bias)
        dt = torch.clamp(dt, self.time_step_limit[0], self.time_step_limit[1])
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
        Y_diag = (M[..., None] * hidden_states[:, :, None]).sum(dim=3)
        decay_states = torch.exp(A_cumsum[:, :, :, -1:] - A_cumsum)
        B_decay = B * decay_states.permute(0, -2, -1, 1)[..., None]
        states = (B_decay[..., None, :] * hidden_states[..., None]).sum(dim=2)
        previous_states = torch.zeros_like(states[:, :1])
        states = torch.cat([previous_states, states], dim=1)
        decay_chunk = torch.exp(segment_sum(F.pad(A_cumsum[:, :, :, -1], (1, 0))))
        decay_chunk = decay_chunk.transpose(1, 3)
        new_states = (decay_chunk[..., None, None] * states[:, :, None, ...]).sum(dim=1)
        states, ssm_state = new_states[:, :-1], new_states[:, -1]
        state_decay_out = torch.exp(A_cumsum)
        C_times_states = (C[..., None, :] * states[:, :, None, ...])
        state_decay_out_permuted = state_decay_out.permute(0, 2, 3, 1)
        Y_off = (C_times_states.sum(-1) * state_decay_out_permuted[..., None])
        y = Y_diag + Y_off
        y = y.reshape(batch_size, -1, self.num_heads, self.head_dim)
        y = y + D_residual
        if pad_size > 0:
            y = y[:, :seq_len, :, :]
        y = y.reshape(batch_size, seq_len, -1)
        return y, locals()


class GraniteMoeHybridMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.input_linear = nn.Linear(config.hidden_size, config.shared_intermediate_size * 2, bias=False)
        self.output_linear = nn.Linear(config.shared_intermediate_size, config.hidden_size, bias=False)

    def forward(self, hidden_states):
        hidden_states = self.input_linear(hidden_states)
        chunked = hidden_states.chunk(2, dim=-1)
        hidden_states = F.silu(chunked[0]) * chunked[1]
        return self.output_linear(hidden_states)


class GraniteMoeHybridParallelExperts(nn.Module):
    def __init__(self, num_experts, input_size, output_size):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_experts, output_size, input_size).normal_(std=0.02))
        self.num_experts = num_experts

    def forward(self, inputs, expert_size):
        input_list = inputs.split(expert_size, dim=0)
        output_list = []
        for i in range(self.num_experts):
            output_list.append(F.linear(input_list[i], self.weight[i]))
        return torch.cat(output_list, dim=0)


class GraniteMoeHybridTopKGating(nn.Module):
    def __init__(self, input_size, num_experts, top_k):
        super().__init__()
        self.num_experts = num_experts
        self.top_k = top_k
        self.layer = nn.Linear(input_size, num_experts, bias=False)

    def forward(self, hidden_states):
        logits = self.layer(hidden_states).float()
        top_k_logits, top_k_indices = logits.topk(self.top_k, dim=1)
        top_k_gates = torch.softmax(top_k_logits, dim=1).type_as(hidden_states)
        zeros = torch.zeros([top_k_gates.size(0), self.num_experts], dtype=top_k_gates.dtype,
                            device=top_k_gates.device)
        gates = zeros.scatter(1, top_k_indices, 1)
        expert_size = gates.long().sum(0)
        expert_size = expert_size.tolist()
        top_k_experts = top_k_indices.flatten()
        _, index_sorted_experts = top_k_experts.sort(0)
        batch_index = index_sorted_experts.div(self.top_k, rounding_mode="trunc")
        top_k_gates = top_k_gates.flatten()
        batch_gates = top_k_gates[index_sorted_experts]
        return index_sorted_experts, batch_index, batch_gates, expert_size, logits


class GraniteMoeHybridMoE(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.input_size = config.hidden_size
        self.hidden_size = config.intermediate_size
        self.input_linear = GraniteMoeHybridParallelExperts(config.num_local_experts, self.input_size,
                                                            self.hidden_size * 2)
        self.output_linear = GraniteMoeHybridParallelExperts(config.num_local_experts, self.hidden_size,
                                                             self.input_size)
        self.router = GraniteMoeHybridTopKGating(self.input_size, config.num_local_experts,
                                                 config.num_experts_per_tok)

    def forward(self, layer_input):
        bsz, length, emb_size = layer_input.size()
        layer_input = layer_input.reshape(-1, emb_size)
        _, batch_index, batch_gates, expert_size, _ = self.router(layer_input)
        expert_inputs = layer_input[batch_index]
        hidden_states = self.input_linear(expert_inputs, expert_size)
        chunked = hidden_states.chunk(2, dim=-1)
        hidden_states = F.silu(chunked[0]) * chunked[1]
        expert_outputs = self.output_linear(hidden_states, expert_size)
        expert_outputs = expert_outputs * batch_gates[:, None]
        zeros = torch.zeros((bsz * length, self.input_size), dtype=expert_outputs.dtype, device=expert_outputs.device)
        layer_output = zeros.index_add(0, batch_index, expert_outputs)
        return layer_output.view(bsz, length, self.input_size)


class GraniteMoeHybridAttention(nn.Module):
    def __init__(self, config, scaling=None):
        # Falcon-H1's attention passes head_dim ** -0.5 and scales the keys (hf_falcon_h1).
        super().__init__()
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = config.attention_multiplier if scaling is None else scaling
        h, nh, nkv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        b = config.attention_bias
        self.q_proj = nn.Linear(h, nh * self.head_dim, bias=b)
        self.k_proj = nn.Linear(h, nkv * self.head_dim, bias=b)
        self.v_proj = nn.Linear(h, nkv * self.head_dim, bias=b)
        self.o_proj = nn.Linear(nh * self.head_dim, h, bias=b)

    def forward(self, hidden_states, attention_mask, position_embeddings):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.scale_keys(self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2))
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        if position_embeddings is not None:
            cos, sin = position_embeddings
            query_states, key_states = hf_llama.apply_rotary_pos_emb(query_states, key_states, cos, sin)
        attn_output, attn_weights = hf_llama.eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask, dropout=0.0, scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights

    def scale_keys(self, key_states):
        return key_states


class GraniteMoeHybridDecoderLayer(hf_llama.GradientCheckpointingLayer):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.input_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.block_sparse_moe = GraniteMoeHybridMoE(config) if config.num_local_experts > 0 else None
        self.residual_multiplier = config.residual_multiplier
        self.shared_mlp = GraniteMoeHybridMLP(config)
        self.layer_type = config.layer_types[layer_idx]
        if self.layer_type == "mamba":
            self.mamba = GraniteMoeHybridMambaLayer(config)
            self.self_attn = None
        else:
            self.mamba = None
            self.self_attn = GraniteMoeHybridAttention(config)
        self.has_experts = config.num_local_experts > 0

    def forward(self, hidden_states, attention_mask=None, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        if self.mamba is not None:
            hidden_states = self.mamba(hidden_states)
        else:
            hidden_states, _ = self.self_attn(hidden_states, attention_mask, position_embeddings)
        hidden_states = residual + hidden_states * self.residual_multiplier
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        if self.has_experts:
            moe_hidden_states = self.block_sparse_moe(hidden_states)
            hidden_states = moe_hidden_states + self.shared_mlp(hidden_states)
        else:
            hidden_states = self.shared_mlp(hidden_states)
        hidden_states = residual + hidden_states * self.residual_multiplier
        return hidden_states


class GraniteMoeHybridModel(hf_llama.CheckpointableModel):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([GraniteMoeHybridDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = hf_llama.LlamaRotaryEmbedding(config) if config.position_embedding_type == "rope" else None
        self.embedding_multiplier = config.embedding_multiplier

    def forward(self, input_ids, attention_mask):
        inputs_embeds = self.embed_tokens(input_ids)
        inputs_embeds = inputs_embeds * self.embedding_multiplier
        position_ids = torch.arange(0, inputs_embeds.shape[1], device=inputs_embeds.device).unsqueeze(0)
        causal_mask = hf_llama.make_causal_mask(attention_mask, inputs_embeds.dtype, inputs_embeds.device)
        hidden_states = inputs_embeds
        position_embeddings = None
        if self.rotary_emb is not None:
            position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for layer in self.layers:
            # the mamba layers get the mamba mask: None when every token attends
            mask = None if layer.layer_type == "mamba" else causal_mask
            hidden_states = layer(hidden_states, attention_mask=mask, position_embeddings=position_embeddings)
        return self.norm(hidden_states)


class GraniteMoeHybridForCausalLM(hf_llama.LlamaForCausalLM):
    base_model_class = GraniteMoeHybridModel

    def forward(self, input_ids, attention_mask, labels=None, logits_to_keep=0):
        hidden_states = self.model(input_ids, attention_mask)
        logits = self.lm_head(hidden_states[:, slice(-logits_to_keep, None), :])
        logits = logits / self.config.logits_scaling
        loss = hf_llama.for_causal_lm_loss(logits, labels, self.config.vocab_size) if labels is not None else None
        return {"loss": loss, "logits": logits}

"""Gemma 3n's text model (Gemma3nForCausalLM) written to follow transformers 5's *eager* code path
in models/gemma3n/modeling_gemma3n.py (read at huggingface/transformers 00aa0f5d), op for op, for
the CPU measurements (docs/models.md#gemma-3n):

- Gemma3nRMSNorm: x.float() / sqrt(mean(x^2) + eps), times weight.float() when it has one
  (v_norm: with_scale=False), type_as(x);
- Gemma3nTextModel.forward: embed_tokens * sqrt(h); the per-layer inputs (embed_tokens_per_layer
  * sqrt(d); per_layer_model_projection(inputs_embeds) *= h^-0.5 in place, per_layer_projection_norm,
  (+ per-layer embeddings) * 2^-0.5); the AltUp stack: altup_projections of the embeddings matched
  to their magnitude, torch.stack into (n, b, s, h), the list kept as a local; after the layers the
  same with altup_unembed_projections, torch.stack, mean over the streams, the final norm;
- Gemma3nTextDecoderLayer: AltUp predict (router_norm, modality_router, tanh, prediction_coefs,
  matmul of the permuted stack, += the stack in place, .contiguous()), input_layernorm, Laurel
  (linear_left, linear_right, post_laurel_norm, + input), attention, post_attention_layernorm,
  (attn_gated + laurel) / sqrt(2), the MLP (gate_proj, on the sparse layers the gaussian top-k:
  mean, std(unbiased=False), relu(x - mean - std * icdf(sparsity)); gelu_pytorch_tanh, * up_proj,
  down_proj), post_feedforward_layernorm, AltUp correct (innovation repeated n times, *
  (correction_coefs(modalities) + 1), += predictions in place), corrected[0].clone() *
  correct_output_scale, per_layer_input_gate, GELU-tanh, * the layer's per-layer input,
  per_layer_projection, post_per_layer_input_norm, added in place to corrected[1:];
- Gemma3nTextAttention: q/k norms and the weightless v_norm before the rotary embedding (one table
  pair per layer type, the same head width), scaling 1.0, eager attention with repeat_kv. With
  use_cache (on unless checkpointing turns it off, as check_model_inputs does) a DynamicCache:
  each non-shared layer's K and V go through torch.cat into the cache (the sliding layers' keep a
  view of it), the last non-shared layer of each type also stores them in shared_layers, the last
  num_kv_shared_layers layers read those instead of their own k/v projections; the cache is
  returned with the outputs. Without it every layer computes its own K/V.
- the full and sliding (b, 1, s, s) masks (hf_gemma3.eager_masks), final logit softcapping and
  ForCausalLMLoss from hf_llama.

Gradient checkpointing follows GradientCheckpointingLayer (hidden_states and per_layer_input
positional, the rest bound with functools.partial), reentrant as transformers' default.
"""
import math

import torch
import torch.nn as nn

import hf_gemma3
import hf_llama


class Config:
    def __init__(self, d):
        self.vocab_size = d.get("vocab_size", 262400)
        self.hidden_size = d.get("hidden_size", 2048)
        self.num_hidden_layers = n = d.get("num_hidden_layers", 35)
        inter = d.get("intermediate_size", 16384)
        self.intermediate_size = list(inter) if isinstance(inter, list) else [inter] * n
        self.num_attention_heads = d.get("num_attention_heads", 8)
        self.num_key_value_heads = d.get("num_key_value_heads", 2)
        self.head_dim = d.get("head_dim", 256)
        self.sliding_window = d.get("sliding_window", 512)
        self.rms_norm_eps = d.get("rms_norm_eps", 1e-6)
        self.pad_token_id = d.get("pad_token_id", 0)
        self.tie_word_embeddings = d.get("tie_word_embeddings", True)
        self.final_logit_softcapping = d.get("final_logit_softcapping", 30.0)
        self.attention_bias = d.get("attention_bias", False)
        self.layer_types = list(d.get("layer_types") or [
            "full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(n)])
        self.vocab_size_per_layer_input = d.get("vocab_size_per_layer_input", 262144)
        self.hidden_size_per_layer_input = d.get("hidden_size_per_layer_input", 256)
        self.altup_num_inputs = d.get("altup_num_inputs", 4)
        self.altup_active_idx = d.get("altup_active_idx", 0)
        self.altup_coef_clip = d.get("altup_coef_clip", 120.0)
        self.altup_correct_scale = d.get("altup_correct_scale", True)
        self.num_kv_shared_layers = d.get("num_kv_shared_layers", 15)
        self.laurel_rank = d.get("laurel_rank", 64)
        self.activation_sparsity_pattern = d.get("activation_sparsity_pattern") or (
            [0.95] * 10 + [0.0] * (n - 10) if n > 10 else [0.0] * n)
        self.use_cache = d.get("use_cache", True)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6, with_scale=True):
        super().__init__()
        self.eps = eps
        self.with_scale = with_scale
        if with_scale:
            self.weight = nn.Parameter(torch.ones(dim))
        else:
            self.register_buffer("weight", torch.tensor(1.0), persistent=False)

    def forward(self, x):
        xf = x.float()
        output = xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        output = output * self.weight.float()
        return output.type_as(x)


class ScaledEmbedding(nn.Embedding):
    def __init__(self, num_embeddings, embedding_dim, padding_idx, embed_scale):
        super().__init__(num_embeddings, embedding_dim, padding_idx)
        self.register_buffer("embed_scale", torch.tensor(embed_scale), persistent=False)

    def forward(self, input_ids):
        return super().forward(input_ids) * self.embed_scale.to(self.weight.dtype)


class Rotary(nn.Module):
    """Gemma3nRotaryEmbedding for one layer type: (b, s, head_dim) cos/sin in fp32, cast to x's dtype."""

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


class DynamicCache:
    """transformers 5's DynamicCache for training's one forward: per layer torch.cat([empty, new])
    (a copy); a sliding layer keeps the last sliding_window - 1 positions as a view of the copy."""

    def __init__(self, config):
        self.layers = {}
        self.sliding_window = config.sliding_window
        self.shared_layers = {}

    def update(self, key_states, value_states, layer_idx, sliding):
        empty = torch.tensor([], dtype=key_states.dtype)
        full_k = torch.cat([empty, key_states], dim=-2)
        full_v = torch.cat([empty, value_states], dim=-2)
        if sliding:
            self.layers[layer_idx] = (full_k[:, :, -self.sliding_window + 1:, :],
                                      full_v[:, :, -self.sliding_window + 1:, :])
        else:
            self.layers[layer_idx] = (full_k, full_v)
        return full_k, full_v


class Gemma3nAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.layer_type = config.layer_types[layer_idx]
        self.is_sliding = self.layer_type == "sliding_attention"
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = 1.0
        h, nh, nkv, hd, bias = (config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
                                config.head_dim, config.attention_bias)
        self.q_proj = nn.Linear(h, nh * hd, bias=bias)
        self.k_proj = nn.Linear(h, nkv * hd, bias=bias)
        self.v_proj = nn.Linear(h, nkv * hd, bias=bias)
        self.o_proj = nn.Linear(nh * hd, h, bias=bias)
        self.q_norm = RMSNorm(hd, config.rms_norm_eps)
        self.k_norm = RMSNorm(hd, config.rms_norm_eps)
        self.v_norm = RMSNorm(hd, config.rms_norm_eps, with_scale=False)
        first_shared = config.num_hidden_layers - config.num_kv_shared_layers
        self.is_kv_shared_layer = layer_idx >= first_shared > 0
        prev = config.layer_types[:first_shared]
        if self.is_kv_shared_layer:
            self.kv_shared_layer_index = len(prev) - 1 - prev[::-1].index(self.layer_type)
            self.store_full_length_kv = False
        else:
            self.kv_shared_layer_index = None
            self.store_full_length_kv = layer_idx == len(prev) - 1 - prev[::-1].index(self.layer_type)

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_values):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        cos, sin = position_embeddings
        query_states = self.q_proj(hidden_states).view(hidden_shape)
        query_states = self.q_norm(query_states)
        query_states = apply_rotary(query_states, cos, sin)
        query_states = query_states.transpose(1, 2)
        if self.is_kv_shared_layer and past_key_values is not None:
            key_states, value_states = past_key_values.shared_layers[self.kv_shared_layer_index]
        else:
            key_states = self.k_proj(hidden_states).view(hidden_shape)
            key_states = self.k_norm(key_states)
            key_states = apply_rotary(key_states, cos, sin)
            key_states = key_states.transpose(1, 2)
            value_states = self.v_proj(hidden_states).view(hidden_shape)
            value_states = self.v_norm(value_states)
            value_states = value_states.transpose(1, 2)
        if past_key_values is not None:
            if not self.is_kv_shared_layer:
                key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx,
                                                                  self.is_sliding)
            if self.store_full_length_kv:
                past_key_values.shared_layers[self.layer_idx] = key_states, value_states
        attn_output, attn_weights = hf_llama.eager_attention_forward(self, query_states, key_states, value_states,
                                                                     attention_mask, self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class Gemma3nMLP(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size[layer_idx]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)
        self.act_fn = nn.GELU(approximate="tanh")
        self.activation_sparsity = config.activation_sparsity_pattern[layer_idx]

    def forward(self, hidden_states):
        gate_proj = self.gate_proj(hidden_states)
        if self.activation_sparsity > 0.0:
            gate_proj = self._gaussian_topk(gate_proj)
        activations = self.act_fn(gate_proj)
        up_proj = self.up_proj(hidden_states)
        down_proj = self.down_proj(activations * up_proj)
        return down_proj

    def _gaussian_topk(self, inputs):
        target_sparsity_tensor = torch.tensor(self.activation_sparsity, dtype=torch.float32)
        normal_dist = torch.distributions.normal.Normal(0, 1)
        std_multiplier = normal_dist.icdf(target_sparsity_tensor)
        std_multiplier = std_multiplier.type(inputs.dtype)
        inputs_mean = torch.mean(inputs, dim=-1, keepdim=True)
        inputs_std = torch.std(inputs, dim=-1, keepdim=True, unbiased=False)
        cutoff_x = inputs_mean + inputs_std * std_multiplier
        return nn.functional.relu(inputs - cutoff_x)


class Gemma3nLaurel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.linear_left = nn.Linear(config.hidden_size, config.laurel_rank, bias=False)
        self.linear_right = nn.Linear(config.laurel_rank, config.hidden_size, bias=False)
        self.post_laurel_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden_states):
        laurel_hidden_states = self.linear_left(hidden_states)
        laurel_hidden_states = self.linear_right(laurel_hidden_states)
        normed_laurel_hidden_states = self.post_laurel_norm(laurel_hidden_states)
        return hidden_states + normed_laurel_hidden_states


class Gemma3nAltUp(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        n = config.altup_num_inputs
        self.correct_output_scale = nn.Parameter(torch.zeros(config.hidden_size))
        self.correction_coefs = nn.Linear(n, n, bias=False)
        self.prediction_coefs = nn.Linear(n, n ** 2, bias=False)
        self.modality_router = nn.Linear(config.hidden_size, n, bias=False)
        self.router_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.register_buffer("router_input_scale", torch.tensor(config.hidden_size ** -1.0), persistent=False)

    def compute_router_modalities(self, x):
        router_inputs = self.router_norm(x) * self.router_input_scale
        routed = self.modality_router(router_inputs)
        return torch.tanh(routed.float()).type_as(x)

    def predict(self, hidden_states):
        c = self.config
        modalities = self.compute_router_modalities(hidden_states[c.altup_active_idx])
        if self.training and c.altup_coef_clip is not None:
            self.prediction_coefs.weight.data.clamp_(-c.altup_coef_clip, c.altup_coef_clip)
        all_coefs = (self.prediction_coefs(modalities)
                     .reshape(*modalities.shape[:-1], c.altup_num_inputs, c.altup_num_inputs)
                     .permute(0, 1, 3, 2))
        predictions = torch.matmul(hidden_states.permute(1, 2, 3, 0), all_coefs)
        predictions = predictions.permute(3, 0, 1, 2)
        predictions += hidden_states
        return predictions.contiguous().type_as(hidden_states)

    def correct(self, predictions, activated):
        c = self.config
        modalities = self.compute_router_modalities(activated)
        innovation = activated - predictions[c.altup_active_idx]
        innovation = innovation.repeat(c.altup_num_inputs, 1, 1, 1)
        if c.altup_coef_clip is not None:
            self.correction_coefs.weight.data.clamp_(-c.altup_coef_clip, c.altup_coef_clip)
        all_coefs = self.correction_coefs(modalities) + 1.0
        all_coefs = all_coefs.permute(2, 0, 1).unsqueeze(-1)
        corrected = torch.mul(innovation, all_coefs)
        corrected += predictions
        return corrected.contiguous().type_as(activated)

    def forward(self, corrected):
        return (corrected.type_as(self.correct_output_scale) * self.correct_output_scale).type_as(corrected)


class Gemma3nDecoderLayer(hf_llama.GradientCheckpointingLayer):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        h, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = Gemma3nAttention(config, layer_idx)
        self.mlp = Gemma3nMLP(config, layer_idx)
        self.input_layernorm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.pre_feedforward_layernorm = RMSNorm(h, eps)
        self.post_feedforward_layernorm = RMSNorm(h, eps)
        self.act_fn = nn.GELU(approximate="tanh")
        self.altup = Gemma3nAltUp(config)
        self.laurel = Gemma3nLaurel(config)
        self.per_layer_input_gate = nn.Linear(h, config.hidden_size_per_layer_input, bias=False)
        self.per_layer_projection = nn.Linear(config.hidden_size_per_layer_input, h, bias=False)
        self.post_per_layer_input_norm = RMSNorm(h, eps)

    def forward(self, hidden_states, per_layer_input=None, position_embeddings=None, attention_mask=None,
                past_key_values=None):
        c = self.config
        predictions = self.altup.predict(hidden_states)
        active_prediction = predictions[c.altup_active_idx]
        active_prediction_normed = self.input_layernorm(active_prediction)
        laurel_output = self.laurel(active_prediction_normed)
        attn, _ = self.self_attn(active_prediction_normed, position_embeddings, attention_mask, past_key_values)
        attn = self.post_attention_layernorm(attn)
        attn_gated = active_prediction + attn
        attn_laurel = (attn_gated + laurel_output) / math.sqrt(2)
        attn_norm = self.pre_feedforward_layernorm(attn_laurel)
        attn_ffw = self.mlp(attn_norm)
        attn_ffw_norm = self.post_feedforward_layernorm(attn_ffw)
        attn_ffw_laurel_gated = attn_laurel + attn_ffw_norm
        corrected_predictions = self.altup.correct(predictions, attn_ffw_laurel_gated)
        first_prediction = corrected_predictions[c.altup_active_idx].clone()
        if c.altup_correct_scale:
            first_prediction = self.altup(first_prediction)
        first_prediction = self.per_layer_input_gate(first_prediction)
        first_prediction = self.act_fn(first_prediction)
        first_prediction = torch.multiply(first_prediction, per_layer_input)
        first_prediction = self.per_layer_projection(first_prediction)
        first_prediction = self.post_per_layer_input_norm(first_prediction)
        corrected_predictions[1:] += first_prediction
        return corrected_predictions


class Gemma3nTextModel(hf_llama.CheckpointableModel):
    def __init__(self, config):
        super().__init__()
        self.config = config
        h, n, d = config.hidden_size, config.num_hidden_layers, config.hidden_size_per_layer_input
        self.embed_tokens = ScaledEmbedding(config.vocab_size, h, config.pad_token_id, h ** 0.5)
        self.layers = nn.ModuleList([Gemma3nDecoderLayer(config, i) for i in range(n)])
        self.norm = RMSNorm(h, config.rms_norm_eps)
        self.rotary = nn.ModuleDict({"sliding_attention": Rotary(config.head_dim, 10000.0),
                                     "full_attention": Rotary(config.head_dim, 1000000.0)})
        self.embed_tokens_per_layer = ScaledEmbedding(config.vocab_size_per_layer_input, n * d, config.pad_token_id,
                                                      d ** 0.5)
        self.per_layer_model_projection = nn.Linear(h, n * d, bias=False)
        self.per_layer_projection_norm = RMSNorm(d, config.rms_norm_eps)
        self.altup_projections = nn.ModuleList(
            [nn.Linear(h, h, bias=False) for _ in range(1, config.altup_num_inputs)])
        self.altup_unembed_projections = nn.ModuleList(
            [nn.Linear(h, h, bias=False) for _ in range(1, config.altup_num_inputs)])
        self.register_buffer("per_layer_projection_scale", torch.tensor(h ** -0.5), persistent=False)
        self.register_buffer("per_layer_input_scale", torch.rsqrt(torch.tensor(2.0)), persistent=False)

    def get_per_layer_inputs(self, input_ids):
        return self.embed_tokens_per_layer(input_ids).reshape(
            *input_ids.shape, self.config.num_hidden_layers, self.config.hidden_size_per_layer_input)

    def project_per_layer_inputs(self, inputs_embeds, per_layer_inputs):
        per_layer_projection = self.per_layer_model_projection(inputs_embeds)
        per_layer_projection *= self.per_layer_projection_scale.to(dtype=inputs_embeds.dtype)
        per_layer_projection = per_layer_projection.reshape(
            *inputs_embeds.shape[:-1], self.config.num_hidden_layers, self.config.hidden_size_per_layer_input)
        per_layer_projection = self.per_layer_projection_norm(per_layer_projection)
        return (per_layer_projection + per_layer_inputs) * self.per_layer_input_scale.to(dtype=inputs_embeds.dtype)

    def forward(self, input_ids, attention_mask):
        c = self.config
        inputs_embeds = self.embed_tokens(input_ids)
        per_layer_inputs = self.get_per_layer_inputs(input_ids)
        per_layer_inputs = self.project_per_layer_inputs(inputs_embeds, per_layer_inputs)
        # check_model_inputs: use_cache off under gradient checkpointing in training.
        checkpointing = any(layer.gradient_checkpointing for layer in self.layers)
        past_key_values = DynamicCache(c) if c.use_cache and not (checkpointing and self.training) else None
        position_ids = torch.arange(inputs_embeds.shape[1]).unsqueeze(0)
        full_mask, sliding_mask = hf_gemma3.eager_masks(attention_mask, inputs_embeds.dtype, c.sliding_window, False)
        masks = {"full_attention": full_mask, "sliding_attention": sliding_mask}
        hidden_states_0 = inputs_embeds
        target_magnitude = torch.mean(hidden_states_0 ** 2, dim=-1, keepdim=True) ** 0.5
        epsilon_tensor = torch.tensor(1e-5)
        temp_hidden_states = [hidden_states_0]
        for i in range(1, c.altup_num_inputs):
            altup_proj = self.altup_projections[i - 1](hidden_states_0)
            current_hidden_state = altup_proj.to(dtype=hidden_states_0.dtype)
            new_magnitude = torch.mean(current_hidden_state ** 2, dim=-1, keepdim=True)
            new_magnitude = torch.sqrt(torch.maximum(new_magnitude, epsilon_tensor))
            current_hidden_state = current_hidden_state * target_magnitude / new_magnitude
            temp_hidden_states.append(current_hidden_state)
        hidden_states = torch.stack(temp_hidden_states, dim=0)
        position_embeddings = {}
        for layer_type in c.layer_types:
            position_embeddings[layer_type] = self.rotary[layer_type](hidden_states, position_ids)
        for i, layer in enumerate(self.layers):
            t = c.layer_types[i]
            per_layer_input = per_layer_inputs[:, :, i, :]
            hidden_states = layer(hidden_states, per_layer_input, position_embeddings=position_embeddings[t],
                                  attention_mask=masks[t], past_key_values=past_key_values)
        target_magnitude = torch.mean(hidden_states[0] ** 2, dim=-1, keepdim=True) ** 0.5
        temp_hidden_states = [hidden_states[0]]
        for i in range(1, c.altup_num_inputs):
            altup_unemb_proj = self.altup_unembed_projections[i - 1](hidden_states[i])
            current_hidden_state = altup_unemb_proj.to(dtype=hidden_states_0.dtype)
            new_magnitude = torch.mean(current_hidden_state ** 2, dim=-1, keepdim=True)
            new_magnitude = torch.sqrt(torch.maximum(new_magnitude, epsilon_tensor))
            current_hidden_state = current_hidden_state * target_magnitude / new_magnitude
            temp_hidden_states.append(current_hidden_state)
        hidden_states = torch.stack(temp_hidden_states)
        hidden_states = torch.mean(hidden_states, dim=0)
        hidden_states = self.norm(hidden_states)
        return hidden_states, past_key_values


class Gemma3nForCausalLM(hf_llama.LlamaForCausalLM):
    base_model_class = Gemma3nTextModel

    def forward(self, input_ids, attention_mask, labels=None, logits_to_keep=0):
        hidden_states, past_key_values = self.model(input_ids, attention_mask)
        slice_indices = slice(-logits_to_keep, None)
        logits = self.lm_head(hidden_states[:, slice_indices, :])
        softcap = self.config.final_logit_softcapping
        if softcap is not None:
            logits = logits / softcap
            logits = torch.tanh(logits)
            logits = logits * softcap
        loss = None
        if labels is not None:
            loss = hf_llama.for_causal_lm_loss(logits, labels, self.config.vocab_size)
        return {"loss": loss, "logits": logits, "past_key_values": past_key_values}

"""Qwen2.5-VL written to follow Hugging Face transformers' modeling_qwen2_5_vl.py (v4.53-4.57
structure), eager and SDPA-free, for memory fidelity on the CPU (docs/formulas.md#vision-language-models).

Vision: Qwen2_5_VisionPatchEmbed (Conv3d, stride = kernel), the 2-D rotary table, get_window_index
(windows of window_size // merge // patch merged units, hidden states reordered window by window),
Qwen2_5_VLVisionBlock (Qwen2RMSNorm, qkv Linear with the reshape/permute/unbind, rotations in fp32,
attention split into chunks by cu_seqlens -- the images in fullatt_block_indexes, the windows
elsewhere -- each through eager_attention_forward, torch.cat of the chunk outputs, proj; a SiLU
MLP with biases), Qwen2_5_VLPatchMerger and the reverse index.

Language model: Qwen2 decoder layers (q/k/v biases, no o bias) with the multimodal rotary
embedding: cos/sin of shape (3, b, s, head_dim) in the activation dtype, and per attention call
apply_multimodal_rotary_pos_emb's torch.cat of the mrope sections into (b, s, head_dim) tables.
The image features are written into the text embeddings with masked_scatter.

Gradient checkpointing follows GradientCheckpointingLayer for both decoder layers and vision
blocks. Freezing follows LLaMA-Factory (freeze_vision_tower, freeze_multi_modal_projector); LoRA
wraps only the language model's Linears unless the tower is trained.
"""
import functools

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

import hf_llama

IMAGE_TOKEN_ID = 7  # any id below the vocabulary; the collator marks image positions with it


class VisionConfig:
    def __init__(self, d):
        self.depth = d["depth"]
        self.hidden_size = d["hidden_size"]
        self.intermediate_size = d["intermediate_size"]
        self.num_heads = d["num_heads"]
        self.patch_size = d.get("patch_size", 14)
        self.temporal_patch_size = d.get("temporal_patch_size", 2)
        self.spatial_merge_size = d.get("spatial_merge_size", 2)
        self.window_size = d.get("window_size", 112)
        self.fullatt_block_indexes = d.get("fullatt_block_indexes", [])
        self.out_hidden_size = d["out_hidden_size"]


class Checkpointed(nn.Module):
    """transformers.modeling_layers.GradientCheckpointingLayer.__call__."""
    gradient_checkpointing = False
    use_reentrant = True

    def __call__(self, *args, **kwargs):
        if self.gradient_checkpointing and self.training:
            return torch.utils.checkpoint.checkpoint(functools.partial(super().__call__, **kwargs), *args,
                                                     use_reentrant=self.use_reentrant)
        return super().__call__(*args, **kwargs)


class VlmTraining:
    """What the trainers call on a *ForConditionalGeneration (self.model.language_model, self.lm_head)."""

    def language_model_modules(self):
        return [self.model.language_model, self.lm_head]

    def gradient_checkpointing_enable(self, use_reentrant=True):
        for m in self.modules():
            if isinstance(m, Checkpointed):
                m.gradient_checkpointing = True
                m.use_reentrant = use_reentrant

    def enable_input_require_grads(self):
        def hook(module, input, output):
            output.requires_grad_(True)
        self._require_grads_hook = self.model.language_model.embed_tokens.register_forward_hook(hook)


# ---- vision tower

class PatchEmbed(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        k = [c.temporal_patch_size, c.patch_size, c.patch_size]
        self.proj = nn.Conv3d(3, c.hidden_size, kernel_size=k, stride=k, bias=False)

    def forward(self, x):
        c = self.c
        x = x.view(-1, 3, c.temporal_patch_size, c.patch_size, c.patch_size)
        return self.proj(x.to(dtype=self.proj.weight.dtype)).view(-1, c.hidden_size)


def apply_rotary_pos_emb_vision(q, k, cos, sin):
    orig_q_dtype, orig_k_dtype = q.dtype, k.dtype
    q, k = q.float(), k.float()
    cos, sin = cos.unsqueeze(-2).float(), sin.unsqueeze(-2).float()
    q_embed = (q * cos) + (hf_llama.rotate_half(q) * sin)
    k_embed = (k * cos) + (hf_llama.rotate_half(k) * sin)
    return q_embed.to(orig_q_dtype), k_embed.to(orig_k_dtype)


class VisionAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.num_heads = c.num_heads
        self.head_dim = c.hidden_size // c.num_heads
        self.num_key_value_groups = 1
        self.qkv = nn.Linear(c.hidden_size, 3 * c.hidden_size, bias=True)
        self.proj = nn.Linear(c.hidden_size, c.hidden_size)
        self.scaling = self.head_dim ** -0.5

    def forward(self, hidden_states, cu_seqlens, position_embeddings):
        seq_length = hidden_states.shape[0]
        q, k, v = self.qkv(hidden_states).reshape(seq_length, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb_vision(q, k, cos, sin)
        q = q.transpose(0, 1).unsqueeze(0)
        k = k.transpose(0, 1).unsqueeze(0)
        v = v.transpose(0, 1).unsqueeze(0)
        lengths = cu_seqlens[1:] - cu_seqlens[:-1]
        splits = [torch.split(t, lengths.tolist(), dim=2) for t in (q, k, v)]
        outs = [hf_llama.eager_attention_forward(self, qq, kk, vv, None, scaling=self.scaling, dropout=0.0)[0]
                for qq, kk, vv in zip(*splits)]
        attn_output = torch.cat(outs, dim=1)
        attn_output = attn_output.reshape(seq_length, -1).contiguous()
        return self.proj(attn_output)


class VisionMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=True)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=True)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=True)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class VisionBlock(Checkpointed):
    def __init__(self, c):
        super().__init__()
        self.norm1 = hf_llama.LlamaRMSNorm(c.hidden_size, 1e-6)
        self.norm2 = hf_llama.LlamaRMSNorm(c.hidden_size, 1e-6)
        self.attn = VisionAttention(c)
        self.mlp = VisionMLP(c)

    def forward(self, hidden_states, cu_seqlens=None, position_embeddings=None):
        hidden_states = hidden_states + self.attn(self.norm1(hidden_states), cu_seqlens=cu_seqlens,
                                                  position_embeddings=position_embeddings)
        hidden_states = hidden_states + self.mlp(self.norm2(hidden_states))
        return hidden_states


class PatchMerger(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.hidden_size = c.hidden_size * c.spatial_merge_size ** 2
        self.ln_q = hf_llama.LlamaRMSNorm(c.hidden_size, 1e-6)
        self.mlp = nn.Sequential(nn.Linear(self.hidden_size, self.hidden_size), nn.GELU(),
                                 nn.Linear(self.hidden_size, c.out_hidden_size))

    def forward(self, x):
        return self.mlp(self.ln_q(x).view(-1, self.hidden_size))


class VisionRotaryEmbedding(nn.Module):
    def __init__(self, dim, theta=10000.0):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, seqlen):
        seq = torch.arange(seqlen, dtype=self.inv_freq.dtype)
        return torch.outer(seq, self.inv_freq)


class VisionTransformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.spatial_merge_unit = c.spatial_merge_size ** 2
        self.patch_embed = PatchEmbed(c)
        self.rotary_pos_emb = VisionRotaryEmbedding(c.hidden_size // c.num_heads // 2)
        self.blocks = nn.ModuleList([VisionBlock(c) for _ in range(c.depth)])
        self.merger = PatchMerger(c)

    @property
    def dtype(self):
        return self.patch_embed.proj.weight.dtype

    def rot_pos_emb(self, grid_thw):
        m = self.c.spatial_merge_size
        pos_ids = []
        for t, h, w in grid_thw.tolist():
            hpos = torch.arange(h).unsqueeze(1).expand(-1, w).reshape(h // m, m, w // m, m).permute(0, 2, 1, 3).flatten()
            wpos = torch.arange(w).unsqueeze(0).expand(h, -1).reshape(h // m, m, w // m, m).permute(0, 2, 1, 3).flatten()
            pos_ids.append(torch.stack([hpos, wpos], dim=-1).repeat(t, 1))
        pos_ids = torch.cat(pos_ids, dim=0)
        full = self.rotary_pos_emb(int(grid_thw[:, 1:].max()))
        return full[pos_ids].flatten(1)

    def get_window_index(self, grid_thw):
        c = self.c
        window_index, cu_window_seqlens, window_index_id = [], [0], 0
        ws = c.window_size // c.spatial_merge_size // c.patch_size
        for grid_t, grid_h, grid_w in grid_thw.tolist():
            lh, lw = grid_h // c.spatial_merge_size, grid_w // c.spatial_merge_size
            index = torch.arange(grid_t * lh * lw).reshape(grid_t, lh, lw)
            pad_h, pad_w = ws - lh % ws, ws - lw % ws
            nh, nw = (lh + pad_h) // ws, (lw + pad_w) // ws
            padded = F.pad(index, (0, pad_w, 0, pad_h), "constant", -100)
            padded = padded.reshape(grid_t, nh, ws, nw, ws).permute(0, 1, 3, 2, 4).reshape(grid_t, nh * nw, ws, ws)
            seqlens = (padded != -100).sum([2, 3]).reshape(-1)
            padded = padded.reshape(-1)
            window_index.append(padded[padded != -100] + window_index_id)
            cu = seqlens.cumsum(0) * self.spatial_merge_unit + cu_window_seqlens[-1]
            cu_window_seqlens.extend(cu.tolist())
            window_index_id += grid_t * lh * lw
        return torch.cat(window_index, dim=0), cu_window_seqlens

    def forward(self, hidden_states, grid_thw):
        hidden_states = self.patch_embed(hidden_states)
        rotary_pos_emb = self.rot_pos_emb(grid_thw)
        window_index, cu_window_seqlens = self.get_window_index(grid_thw)
        cu_window_seqlens = torch.unique_consecutive(torch.tensor(cu_window_seqlens, dtype=torch.int32))
        seq_len, _ = hidden_states.size()
        u = self.spatial_merge_unit
        hidden_states = hidden_states.reshape(seq_len // u, u, -1)[window_index, :, :].reshape(seq_len, -1)
        rotary_pos_emb = rotary_pos_emb.reshape(seq_len // u, u, -1)[window_index, :, :].reshape(seq_len, -1)
        emb = torch.cat((rotary_pos_emb, rotary_pos_emb), dim=-1)
        position_embeddings = (emb.cos(), emb.sin())
        cu_seqlens = torch.repeat_interleave(grid_thw[:, 1] * grid_thw[:, 2], grid_thw[:, 0]).cumsum(
            dim=0, dtype=torch.int32)
        cu_seqlens = F.pad(cu_seqlens, (1, 0), value=0)
        for i, blk in enumerate(self.blocks):
            cu = cu_seqlens if i in self.c.fullatt_block_indexes else cu_window_seqlens
            hidden_states = blk(hidden_states, cu_seqlens=cu, position_embeddings=position_embeddings)
        hidden_states = self.merger(hidden_states)
        reverse_indices = torch.argsort(window_index)
        return hidden_states[reverse_indices, :]


# ---- language model with the multimodal rotary embedding

class TextRotaryEmbedding(nn.Module):
    """Qwen2_5_VLRotaryEmbedding: (3, b, s, head_dim) cos/sin for the t/h/w position ids."""

    def __init__(self, config):
        super().__init__()
        dim = config.head_dim
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv = self.inv_freq[None, None, :, None].float().expand(3, position_ids.shape[1], -1, 1)
        pos = position_ids[:, :, None, :].float()
        with torch.autocast(device_type=x.device.type, enabled=False):
            freqs = (inv.float() @ pos.float()).transpose(2, 3)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = emb.cos() * 1.0
            sin = emb.sin() * 1.0
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section):
    mrope_section = mrope_section * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(mrope_section, dim=-1))], dim=-1).unsqueeze(1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(mrope_section, dim=-1))], dim=-1).unsqueeze(1)
    q_embed = (q * cos) + (hf_llama.rotate_half(q) * sin)
    k_embed = (k * cos) + (hf_llama.rotate_half(k) * sin)
    return q_embed, k_embed


class TextAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        h, nh, nkv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        self.num_key_value_groups = nh // nkv
        self.scaling = self.head_dim ** -0.5
        self.mrope_section = config.mrope_section
        self.q_proj = nn.Linear(h, nh * self.head_dim, bias=True)
        self.k_proj = nn.Linear(h, nkv * self.head_dim, bias=True)
        self.v_proj = nn.Linear(h, nkv * self.head_dim, bias=True)
        self.o_proj = nn.Linear(nh * self.head_dim, h, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        bsz, q_len, _ = hidden_states.size()
        q = self.q_proj(hidden_states).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = apply_multimodal_rotary_pos_emb(q, k, cos, sin, self.mrope_section)
        attn_output, attn_weights = hf_llama.eager_attention_forward(self, q, k, v, attention_mask,
                                                                     scaling=self.scaling, dropout=0.0)
        attn_output = attn_output.reshape(bsz, q_len, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class DecoderLayer(Checkpointed):
    def __init__(self, config):
        super().__init__()
        self.self_attn = TextAttention(config)
        self.mlp = hf_llama.LlamaMLP(config)
        self.input_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask=None, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states, position_embeddings, attention_mask)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.mlp(self.post_attention_layernorm(hidden_states))
        return residual + hidden_states


class TextModel(nn.Module):
    """Qwen2_5_VLTextModel: its forward's locals (causal mask, rotary tables) die when it returns."""

    def __init__(self, text):
        super().__init__()
        self.embed_tokens = nn.Embedding(text.vocab_size, text.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(text) for _ in range(text.num_hidden_layers)])
        self.norm = hf_llama.LlamaRMSNorm(text.hidden_size, text.rms_norm_eps)
        self.rotary_emb = TextRotaryEmbedding(text)

    def forward(self, inputs_embeds, attention_mask, position_ids):
        causal_mask = hf_llama.make_causal_mask(attention_mask, inputs_embeds.dtype, inputs_embeds.device)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=causal_mask, position_embeddings=position_embeddings)
        return self.norm(hidden_states)


class Model(nn.Module):
    """Qwen2_5_VLModel: embeddings, image features spliced in with masked_scatter, get_rope_index's
    (3, b, s) position ids (their values do not change memory; text positions here)."""

    def __init__(self, d, text):
        super().__init__()
        self.visual = VisionTransformer(VisionConfig(d["vision_config"]))
        self.language_model = TextModel(text)

    def get_image_features(self, pixel_values, image_grid_thw):
        # The cast copy of pixel_values is this method's local: it dies when the features return.
        pixel_values = pixel_values.type(self.visual.dtype)
        image_embeds = self.visual(pixel_values, grid_thw=image_grid_thw)
        split_sizes = (image_grid_thw.prod(-1) // self.visual.spatial_merge_unit).tolist()
        return torch.split(image_embeds, split_sizes)

    def forward(self, input_ids, attention_mask, pixel_values, image_grid_thw):
        inputs_embeds = self.language_model.embed_tokens(input_ids)
        if pixel_values is not None:  # text-only batches carry no pixel_values
            image_embeds = self.get_image_features(pixel_values, image_grid_thw)
            image_embeds = torch.cat(image_embeds, dim=0).to(inputs_embeds.device, inputs_embeds.dtype)
            image_mask = (input_ids == IMAGE_TOKEN_ID).unsqueeze(-1).expand_as(inputs_embeds)
            inputs_embeds = inputs_embeds.masked_scatter(image_mask, image_embeds)
        b, s = input_ids.shape
        position_ids = torch.arange(s).view(1, 1, s).expand(3, b, s).contiguous()
        return self.language_model(inputs_embeds, attention_mask, position_ids)


class Qwen25VLForConditionalGeneration(VlmTraining, nn.Module):
    def __init__(self, d):
        super().__init__()
        text = hf_llama.Config(d)
        text.rms_norm_eps = d.get("rms_norm_eps", 1e-6)
        text.mrope_section = d.get("rope_scaling", {}).get("mrope_section", [16, 24, 24])
        self.config = text
        self.model = Model(d, text)
        self.lm_head = nn.Linear(text.hidden_size, text.vocab_size, bias=False)
        if text.tie_word_embeddings:
            self.lm_head.weight = self.model.language_model.embed_tokens.weight

    @property
    def visual(self):
        return self.model.visual

    def forward(self, input_ids, attention_mask, pixel_values, image_grid_thw, labels=None):
        hidden_states = self.model(input_ids, attention_mask, pixel_values, image_grid_thw)
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = hf_llama.for_causal_lm_loss(logits, labels, self.config.vocab_size)
        return {"loss": loss, "logits": logits}


def make_inputs(d, t, gen):
    """A collated batch: b sequences of seq_len tokens, each with `images` square images of
    image_size pixels (already a multiple of patch x merge) whose tokens open the sequence."""
    v = d["vision_config"]
    b, s = t["batch"], t["seq_len"]
    side = t["image_size"]
    p, m, tp = v.get("patch_size", 14), v.get("spatial_merge_size", 2), v.get("temporal_patch_size", 2)
    grid = side // p
    n_img = b * t.get("images", 1)
    tokens = grid * grid // (m * m)
    ids = torch.randint(IMAGE_TOKEN_ID + 1, d["vocab_size"], (b, s), generator=gen)
    per_seq = t.get("images", 1) * tokens
    ids[:, :per_seq] = IMAGE_TOKEN_ID
    inputs = {"input_ids": ids, "attention_mask": torch.ones(b, s, dtype=torch.long), "labels": ids.clone(),
              "pixel_values": None, "image_grid_thw": None}
    if n_img:
        inputs["pixel_values"] = torch.randn(n_img * grid * grid, 3 * tp * p * p, generator=gen)
        inputs["image_grid_thw"] = torch.tensor([[1, grid, grid]] * n_img)
    return inputs

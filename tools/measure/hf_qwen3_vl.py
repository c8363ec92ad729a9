"""Qwen3-VL written to follow Hugging Face transformers' modeling_qwen3_vl.py (v4.57 structure),
eager and SDPA-free, for memory fidelity on the CPU (docs/models.md#qwen3-vl).

Vision (Qwen3VLVisionModel): Qwen3VLVisionPatchEmbed (Conv3d with a bias), the learned position
table read by fast_pos_embed_interpolate (the 4 bilinear corners of every patch looked up,
weighted, summed, repeated per frame, permuted into the merge order, concatenated), the 2-D rotary
table, Qwen3VLVisionBlock (LayerNorms, the qkv attention of Qwen2-VL split per image by cu_seqlens,
linear_fc1 / GELU-tanh / linear_fc2 with biases), a DeepStack merger (Qwen3VLVisionPatchMerger with
use_postshuffle_norm: view(-1, 4h), LayerNorm(4h), linear_fc1, GELU, linear_fc2) on the output of
every block in deepstack_visual_indexes, then the merger (LayerNorm(h) first).

Language model (Qwen3VLTextModel): Qwen3 decoder layers (q/k RMSNorm over head_dim), the
interleaved multimodal rotary embedding (the (3, b, s, head_dim / 2) frequencies folded into
one (b, s, head_dim) table pair in fp32, cast to the activation dtype), and _deepstack_process
after the first len(deepstack) layers: hidden_states.clone(), hidden_states[mask] + features,
written back by index assignment.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_llama
import hf_qwen_vl

IMAGE_TOKEN_ID = hf_qwen_vl.IMAGE_TOKEN_ID


class VisionConfig:
    def __init__(self, d):
        self.depth = d["depth"]
        self.hidden_size = d["hidden_size"]
        self.intermediate_size = d["intermediate_size"]
        self.num_heads = d["num_heads"]
        self.patch_size = d.get("patch_size", 16)
        self.temporal_patch_size = d.get("temporal_patch_size", 2)
        self.spatial_merge_size = d.get("spatial_merge_size", 2)
        self.out_hidden_size = d["out_hidden_size"]
        self.num_position_embeddings = d.get("num_position_embeddings", 2304)
        self.deepstack_visual_indexes = d.get("deepstack_visual_indexes", [8, 16, 24])


class PatchEmbed(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        k = [c.temporal_patch_size, c.patch_size, c.patch_size]
        self.proj = nn.Conv3d(3, c.hidden_size, kernel_size=k, stride=k, bias=True)

    def forward(self, x):
        c = self.c
        x = x.view(-1, 3, c.temporal_patch_size, c.patch_size, c.patch_size)
        return self.proj(x.to(dtype=self.proj.weight.dtype)).view(-1, c.hidden_size)


class VisionMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.linear_fc1 = nn.Linear(c.hidden_size, c.intermediate_size, bias=True)
        self.linear_fc2 = nn.Linear(c.intermediate_size, c.hidden_size, bias=True)

    def forward(self, x):
        return self.linear_fc2(F.gelu(self.linear_fc1(x), approximate="tanh"))


class VisionBlock(hf_qwen_vl.Checkpointed):
    def __init__(self, c):
        super().__init__()
        self.norm1 = nn.LayerNorm(c.hidden_size, eps=1e-6)
        self.norm2 = nn.LayerNorm(c.hidden_size, eps=1e-6)
        self.attn = hf_qwen_vl.VisionAttention(c)
        self.mlp = VisionMLP(c)

    def forward(self, hidden_states, cu_seqlens=None, position_embeddings=None):
        hidden_states = hidden_states + self.attn(self.norm1(hidden_states), cu_seqlens=cu_seqlens,
                                                  position_embeddings=position_embeddings)
        hidden_states = hidden_states + self.mlp(self.norm2(hidden_states))
        return hidden_states


class PatchMerger(nn.Module):
    def __init__(self, c, use_postshuffle_norm=False):
        super().__init__()
        self.hidden_size = c.hidden_size * c.spatial_merge_size ** 2
        self.use_postshuffle_norm = use_postshuffle_norm
        self.norm = nn.LayerNorm(self.hidden_size if use_postshuffle_norm else c.hidden_size, eps=1e-6)
        self.linear_fc1 = nn.Linear(self.hidden_size, self.hidden_size)
        self.act_fn = nn.GELU()
        self.linear_fc2 = nn.Linear(self.hidden_size, c.out_hidden_size)

    def forward(self, x):
        x = self.norm(x.view(-1, self.hidden_size) if self.use_postshuffle_norm else x).view(-1, self.hidden_size)
        return self.linear_fc2(self.act_fn(self.linear_fc1(x)))


class VisionModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.spatial_merge_size = c.spatial_merge_size
        self.spatial_merge_unit = c.spatial_merge_size ** 2
        self.patch_embed = PatchEmbed(c)
        self.pos_embed = nn.Embedding(c.num_position_embeddings, c.hidden_size)
        self.num_grid_per_side = int(c.num_position_embeddings ** 0.5)
        self.rotary_pos_emb = hf_qwen_vl.VisionRotaryEmbedding(c.hidden_size // c.num_heads // 2)
        self.blocks = nn.ModuleList([VisionBlock(c) for _ in range(c.depth)])
        self.merger = PatchMerger(c)
        self.deepstack_visual_indexes = c.deepstack_visual_indexes
        self.deepstack_merger_list = nn.ModuleList([PatchMerger(c, use_postshuffle_norm=True)
                                                    for _ in c.deepstack_visual_indexes])

    @property
    def dtype(self):
        return self.patch_embed.proj.weight.dtype

    def rot_pos_emb(self, grid_thw):
        return hf_qwen_vl.VisionTransformer.rot_pos_emb(self, grid_thw)

    def fast_pos_embed_interpolate(self, grid_thw):
        n = self.num_grid_per_side
        idx_list, weight_list = [[] for _ in range(4)], [[] for _ in range(4)]
        for t, h, w in grid_thw.tolist():
            h_idxs = torch.linspace(0, n - 1, h)
            w_idxs = torch.linspace(0, n - 1, w)
            hf, wf = h_idxs.int(), w_idxs.int()
            hc, wc = (hf + 1).clip(max=n - 1), (wf + 1).clip(max=n - 1)
            dh, dw = h_idxs - hf, w_idxs - wf
            bh, bhc = hf * n, hc * n
            indices = [(bh[None].T + wf[None]).flatten(), (bh[None].T + wc[None]).flatten(),
                       (bhc[None].T + wf[None]).flatten(), (bhc[None].T + wc[None]).flatten()]
            weights = [((1 - dh)[None].T * (1 - dw)[None]).flatten(), ((1 - dh)[None].T * dw[None]).flatten(),
                       (dh[None].T * (1 - dw)[None]).flatten(), (dh[None].T * dw[None]).flatten()]
            for i in range(4):
                idx_list[i].extend(indices[i].tolist())
                weight_list[i].extend(weights[i].tolist())
        idx_tensor = torch.tensor(idx_list, dtype=torch.long)
        weight_tensor = torch.tensor(weight_list, dtype=self.pos_embed.weight.dtype)
        pos_embeds = self.pos_embed(idx_tensor) * weight_tensor[:, :, None]
        patch_pos_embeds = pos_embeds[0] + pos_embeds[1] + pos_embeds[2] + pos_embeds[3]
        patch_pos_embeds = patch_pos_embeds.split([h * w for _, h, w in grid_thw.tolist()])
        m = self.c.spatial_merge_size
        permuted = []
        for pe, (t, h, w) in zip(patch_pos_embeds, grid_thw.tolist()):
            pe = pe.repeat(t, 1)
            pe = pe.view(t, h // m, m, w // m, m, -1).permute(0, 1, 3, 2, 4, 5).flatten(0, 4)
            permuted.append(pe)
        return torch.cat(permuted)

    def forward(self, hidden_states, grid_thw):
        input_dtype = hidden_states.dtype
        hidden_states = self.patch_embed(hidden_states)
        pos_embeds = self.fast_pos_embed_interpolate(grid_thw)
        hidden_states = (hidden_states + pos_embeds).to(input_dtype)
        rotary_pos_emb = self.rot_pos_emb(grid_thw)
        seq_len, _ = hidden_states.size()
        hidden_states = hidden_states.reshape(seq_len, -1)
        rotary_pos_emb = rotary_pos_emb.reshape(seq_len, -1)
        emb = torch.cat((rotary_pos_emb, rotary_pos_emb), dim=-1)
        position_embeddings = (emb.cos(), emb.sin())
        cu_seqlens = torch.repeat_interleave(grid_thw[:, 1] * grid_thw[:, 2], grid_thw[:, 0]).cumsum(
            dim=0, dtype=torch.int32)
        cu_seqlens = F.pad(cu_seqlens, (1, 0), value=0)
        deepstack_feature_lists = []
        for layer_num, blk in enumerate(self.blocks):
            hidden_states = blk(hidden_states, cu_seqlens=cu_seqlens, position_embeddings=position_embeddings)
            if layer_num in self.deepstack_visual_indexes:
                merger = self.deepstack_merger_list[self.deepstack_visual_indexes.index(layer_num)]
                deepstack_feature_lists.append(merger(hidden_states))
        hidden_states = self.merger(hidden_states)
        return hidden_states, deepstack_feature_lists


class TextRotaryEmbedding(nn.Module):
    """Qwen3VLTextRotaryEmbedding: the (3, b, s, d / 2) frequencies, apply_interleaved_mrope into
    the temporal row in place, one (b, s, head_dim) cos/sin pair."""

    def __init__(self, config):
        super().__init__()
        dim = config.head_dim
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.mrope_section = config.mrope_section

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv = self.inv_freq[None, None, :, None].float().expand(3, position_ids.shape[1], -1, 1)
        pos = position_ids[:, :, None, :].float()
        with torch.autocast(device_type=x.device.type, enabled=False):
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


class DecoderLayer(hf_llama.LlamaDecoderLayer):
    """Qwen3VLTextDecoderLayer: a Llama layer whose attention RMS-normalizes q and k per head."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.self_attn.q_norm = hf_llama.LlamaRMSNorm(config.head_dim, config.rms_norm_eps)
        self.self_attn.k_norm = hf_llama.LlamaRMSNorm(config.head_dim, config.rms_norm_eps)


class TextModel(nn.Module):
    def __init__(self, text):
        super().__init__()
        self.embed_tokens = nn.Embedding(text.vocab_size, text.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(text, i) for i in range(text.num_hidden_layers)])
        self.norm = hf_llama.LlamaRMSNorm(text.hidden_size, text.rms_norm_eps)
        self.rotary_emb = TextRotaryEmbedding(text)

    def forward(self, inputs_embeds, attention_mask, position_ids, visual_pos_masks=None,
                deepstack_visual_embeds=None):
        causal_mask = hf_llama.make_causal_mask(attention_mask, inputs_embeds.dtype, inputs_embeds.device)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for layer_idx, layer in enumerate(self.layers):
            hidden_states = layer(hidden_states, attention_mask=causal_mask, position_embeddings=position_embeddings)
            if deepstack_visual_embeds is not None and layer_idx in range(len(deepstack_visual_embeds)):
                hidden_states = self._deepstack_process(hidden_states, visual_pos_masks,
                                                        deepstack_visual_embeds[layer_idx])
        return self.norm(hidden_states)

    def _deepstack_process(self, hidden_states, visual_pos_masks, visual_embeds):
        visual_embeds = visual_embeds.to(hidden_states.device, hidden_states.dtype)
        hidden_states = hidden_states.clone()
        local_this = hidden_states[visual_pos_masks, :] + visual_embeds
        hidden_states[visual_pos_masks, :] = local_this
        return hidden_states


class Model(nn.Module):
    def __init__(self, d, text):
        super().__init__()
        self.visual = VisionModel(VisionConfig(d["vision_config"]))
        self.language_model = TextModel(text)

    def get_image_features(self, pixel_values, image_grid_thw):
        pixel_values = pixel_values.type(self.visual.dtype)
        image_embeds, deepstack_image_embeds = self.visual(pixel_values, grid_thw=image_grid_thw)
        split_sizes = (image_grid_thw.prod(-1) // self.visual.spatial_merge_unit).tolist()
        return torch.split(image_embeds, split_sizes), deepstack_image_embeds

    def forward(self, input_ids, attention_mask, pixel_values, image_grid_thw):
        inputs_embeds = self.language_model.embed_tokens(input_ids)
        visual_pos_masks = deepstack_visual_embeds = None
        if pixel_values is not None:
            image_embeds, deepstack_image_embeds = self.get_image_features(pixel_values, image_grid_thw)
            image_embeds = torch.cat(image_embeds, dim=0).to(inputs_embeds.device, inputs_embeds.dtype)
            image_mask = (input_ids == IMAGE_TOKEN_ID).unsqueeze(-1).expand_as(inputs_embeds)
            inputs_embeds = inputs_embeds.masked_scatter(image_mask, image_embeds)
            visual_pos_masks = image_mask[..., 0]
            deepstack_visual_embeds = deepstack_image_embeds
        b, s = input_ids.shape
        position_ids = torch.arange(s).view(1, 1, s).expand(3, b, s).contiguous()
        return self.language_model(inputs_embeds, attention_mask, position_ids, visual_pos_masks,
                                   deepstack_visual_embeds)


class Qwen3VLForConditionalGeneration(hf_qwen_vl.VlmTraining, nn.Module):
    def __init__(self, d):
        super().__init__()
        td = d["text_config"]
        text = hf_llama.Config(td)
        text.rms_norm_eps = td.get("rms_norm_eps", 1e-6)
        text.rope_theta = td.get("rope_theta", 5000000.0)
        text.mrope_section = td.get("rope_scaling", {}).get("mrope_section", [24, 20, 20])
        text.tie_word_embeddings = d.get("tie_word_embeddings", td.get("tie_word_embeddings", False))
        self.config = text
        self.model = Model(d, text)
        self.lm_head = nn.Linear(text.hidden_size, text.vocab_size, bias=False)
        if text.tie_word_embeddings:
            self.lm_head.weight = self.model.language_model.embed_tokens.weight

    @property
    def visual(self):
        return self.model.visual

    def gradient_checkpointing_enable(self, use_reentrant=True):
        # The vision blocks are hf_qwen_vl.Checkpointed, the decoder layers hf_llama's
        # GradientCheckpointingLayer: both wrap their call in torch.utils.checkpoint.
        for m in self.modules():
            if isinstance(m, (hf_qwen_vl.Checkpointed, hf_llama.GradientCheckpointingLayer)):
                m.gradient_checkpointing = True
                m.use_reentrant = use_reentrant

    def projector_modules(self):
        return [self.model.visual.merger, self.model.visual.deepstack_merger_list]

    def forward(self, input_ids, attention_mask, pixel_values, image_grid_thw, labels=None):
        hidden_states = self.model(input_ids, attention_mask, pixel_values, image_grid_thw)
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = hf_llama.for_causal_lm_loss(logits, labels, self.config.vocab_size)
        return {"loss": loss, "logits": logits}


def make_inputs(d, t, gen):
    """hf_qwen_vl.make_inputs with the text keys under text_config and patch 16."""
    flat = dict(d["text_config"])
    v = dict(d["vision_config"])
    v.setdefault("patch_size", 16)
    flat["vision_config"] = v
    return hf_qwen_vl.make_inputs(flat, t, gen)

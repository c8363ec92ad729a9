"""Mistral 3 (Mistral Small 3.1 / 3.2, Ministral 3) written to follow Hugging Face transformers'
modeling_mistral3.py and modeling_pixtral.py (v4.50-4.57 structure), eager, for memory fidelity on
the CPU (docs/formulas.md#pixtral).

Vision (PixtralVisionModel): patch_conv (Conv2d, no bias) over the padded (n, 3, H, W) pixel
values, each image's patch grid sliced out of the conv output (views kept in patch_embeds_list
until forward returns), flattened and concatenated into one sequence, ln_pre (RMSNorm), the 2-D
rotary table indexed by the meshgrid position ids (cos/sin cast to the activation dtype), one
block-diagonal (1, 1, N, N) additive mask, PixtralAttentionLayer blocks (RMSNorm, q/k/v/o without
biases, rotary with unsqueeze_dim=0, eager attention over the whole sequence, RMSNorm, the gated
SiLU MLP), all run with output_hidden_states=True (Mistral3Model.get_image_features asks for it)
so every block's output stays in the tuple.

Projector (Mistral3MultiModalProjector): RMSNorm over the vision width, Mistral3PatchMerger
(per image: view(h, w, d).permute(2, 0, 1), F.unfold by spatial_merge_size, .view().t(), then
torch.cat and merging_layer), linear_1, GELU, linear_2. The features are split per image,
concatenated and written into the text embeddings with masked_scatter.

Language model: Mistral's (hf_llama's decoder layers). Gradient checkpointing follows
GradientCheckpointingLayer for the decoder layers and the vision blocks (hidden_states and the
attention mask positional, the rest bound in the partial).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_llama
import hf_qwen_vl

IMAGE_TOKEN_ID = hf_qwen_vl.IMAGE_TOKEN_ID
BREAK_TOKEN_ID = IMAGE_TOKEN_ID + 1
END_TOKEN_ID = IMAGE_TOKEN_ID + 2


class VisionConfig:
    def __init__(self, d):
        self.hidden_size = d.get("hidden_size", 1024)
        self.intermediate_size = d.get("intermediate_size", 4096)
        self.num_hidden_layers = d.get("num_hidden_layers", 24)
        self.num_attention_heads = d.get("num_attention_heads", 16)
        self.image_size = d.get("image_size", 1024)
        self.patch_size = d.get("patch_size", 16)
        self.rope_theta = d.get("rope_theta", 10000.0)
        self.head_dim = d.get("head_dim") or self.hidden_size // self.num_attention_heads


class PixtralRotaryEmbedding(nn.Module):
    def __init__(self, c):
        super().__init__()
        dim = c.head_dim
        side = c.image_size // c.patch_size
        h = torch.arange(side)
        w = torch.arange(side)
        freqs = 1.0 / (c.rope_theta ** (torch.arange(0, dim, 2).float() / dim))
        freqs_h = torch.outer(h, freqs[::2]).float()
        freqs_w = torch.outer(w, freqs[1::2]).float()
        inv_freq = torch.cat([freqs_h[:, None, :].repeat(1, side, 1), freqs_w[None, :, :].repeat(side, 1, 1)],
                             dim=-1).reshape(-1, dim // 2)
        inv_freq = torch.cat((inv_freq, inv_freq), dim=-1)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("original_inv_freq", inv_freq.clone(), persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        freqs = self.inv_freq[position_ids]
        with torch.autocast(device_type=x.device.type, enabled=False):
            emb = freqs
            cos = emb.cos()
            sin = emb.sin()
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


class PixtralAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_dim = c.hidden_size
        self.num_heads = c.num_attention_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.scaling = self.head_dim ** -0.5
        self.num_key_value_groups = 1
        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.o_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)

    def forward(self, hidden_states, attention_mask, position_embeddings):
        b, patches, _ = hidden_states.size()
        q = self.q_proj(hidden_states).view(b, patches, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(b, patches, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, patches, self.num_heads, self.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = hf_llama.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=0)
        # siglip's eager_attention_forward: matmul, * scaling, + mask, fp32 softmax, .to(dtype),
        # dropout(p=0), matmul, transpose(1, 2).contiguous()
        attn_weights = torch.matmul(q, k.transpose(-1, -2)) * self.scaling
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        attn_weights = F.dropout(attn_weights, p=0.0, training=self.training)
        attn_output = torch.matmul(attn_weights, v)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(b, patches, -1).contiguous()
        return self.o_proj(attn_output)


class PixtralMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class PixtralAttentionLayer(hf_qwen_vl.Checkpointed):
    def __init__(self, c):
        super().__init__()
        self.attention_norm = hf_llama.LlamaRMSNorm(c.hidden_size, 1e-5)
        self.feed_forward = PixtralMLP(c)
        self.attention = PixtralAttention(c)
        self.ffn_norm = hf_llama.LlamaRMSNorm(c.hidden_size, 1e-5)

    def forward(self, hidden_states, attention_mask, position_embeddings=None, position_ids=None):
        residual = hidden_states
        hidden_states = self.attention_norm(hidden_states)
        hidden_states = self.attention(hidden_states, attention_mask, position_embeddings)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.ffn_norm(hidden_states)
        hidden_states = self.feed_forward(hidden_states)
        return (residual + hidden_states,)


def position_ids_in_meshgrid(patch_embeds_list, max_width):
    positions = []
    for patch in patch_embeds_list:
        height, width = patch.shape[-2:]
        mesh = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
        h_grid, v_grid = torch.stack(mesh, dim=-1).reshape(-1, 2).chunk(2, -1)
        ids = h_grid * max_width + v_grid
        positions.append(ids[:, 0])
    return torch.cat(positions)


def generate_block_attention_mask(patch_embeds_list, tensor):
    dtype = tensor.dtype
    seq_len = tensor.shape[1]
    d_min = torch.finfo(dtype).min
    causal_mask = torch.full((seq_len, seq_len), fill_value=d_min, dtype=dtype)
    block_end_idx = torch.tensor(patch_embeds_list).cumsum(-1)
    block_start_idx = torch.tensor([0] + patch_embeds_list[:-1]).cumsum(-1)
    for start, end in zip(block_start_idx, block_end_idx):
        causal_mask[start:end, start:end] = 0
    return causal_mask[None, None, :, :].expand(tensor.shape[0], 1, -1, -1)


class PixtralVisionModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.patch_size = c.patch_size
        self.patch_conv = nn.Conv2d(3, c.hidden_size, kernel_size=c.patch_size, stride=c.patch_size, bias=False)
        self.ln_pre = hf_llama.LlamaRMSNorm(c.hidden_size, 1e-5)
        self.layers = nn.ModuleList([PixtralAttentionLayer(c) for _ in range(c.num_hidden_layers)])
        self.patch_positional_embedding = PixtralRotaryEmbedding(c)

    def forward(self, pixel_values, image_sizes):
        patch_embeds = self.patch_conv(pixel_values.to(dtype=self.patch_conv.weight.dtype))
        patch_embeds_list = [embed[..., : (size[0] // self.patch_size), : (size[1] // self.patch_size)]
                             for embed, size in zip(patch_embeds, image_sizes)]
        patch_embeds = torch.cat([p.flatten(1).T for p in patch_embeds_list], dim=0).unsqueeze(0)
        patch_embeds = self.ln_pre(patch_embeds)
        position_ids = position_ids_in_meshgrid(patch_embeds_list, max_width=self.c.image_size // self.c.patch_size)
        position_ids_kw = position_ids.unsqueeze(0)
        position_embeddings = self.patch_positional_embedding(patch_embeds, position_ids)
        attention_mask = generate_block_attention_mask([p.shape[-2] * p.shape[-1] for p in patch_embeds_list],
                                                       patch_embeds)
        # PixtralTransformer with output_hidden_states=True
        encoder_states = ()
        hidden_states = patch_embeds
        for layer in self.layers:
            encoder_states = encoder_states + (hidden_states,)
            hidden_states = layer(hidden_states, attention_mask, position_embeddings=position_embeddings,
                                  position_ids=position_ids_kw)[0]
        encoder_states = encoder_states + (hidden_states,)
        return hidden_states, encoder_states


class PatchMerger(nn.Module):
    def __init__(self, c, merge):
        super().__init__()
        self.spatial_merge_size = merge
        self.patch_size = c.patch_size
        self.merging_layer = nn.Linear(c.hidden_size * merge ** 2, c.hidden_size, bias=False)

    def forward(self, image_features, image_sizes):
        image_sizes = [(s[0] // self.patch_size, s[1] // self.patch_size) for s in image_sizes]
        tokens_per_image = [h * w for h, w in image_sizes]
        d = image_features.shape[-1]
        permuted_tensor = []
        for image_index, image_tokens in enumerate(image_features.split(tokens_per_image)):
            h, w = image_sizes[image_index]
            image_grid = image_tokens.view(h, w, d).permute(2, 0, 1).unsqueeze(0)
            grid = F.unfold(image_grid, kernel_size=self.spatial_merge_size, stride=self.spatial_merge_size)
            grid = grid.view(d * self.spatial_merge_size ** 2, -1).t()
            permuted_tensor.append(grid)
        image_features = torch.cat(permuted_tensor, dim=0)
        return self.merging_layer(image_features)


class MultiModalProjector(nn.Module):
    def __init__(self, c, text_hidden, eps, merge, bias):
        super().__init__()
        self.norm = hf_llama.LlamaRMSNorm(c.hidden_size, eps)
        self.patch_merger = PatchMerger(c, merge)
        self.linear_1 = nn.Linear(c.hidden_size, text_hidden, bias=bias)
        self.act = nn.GELU()
        self.linear_2 = nn.Linear(text_hidden, text_hidden, bias=bias)

    def forward(self, image_features, image_sizes):
        image_features = self.norm(image_features)
        image_features = self.patch_merger(image_features, image_sizes)
        return self.linear_2(self.act(self.linear_1(image_features)))


class TextModel(nn.Module):
    """MistralModel from inputs_embeds (hf_llama's layers; no sliding window in these configs)."""

    def __init__(self, text):
        super().__init__()
        self.embed_tokens = nn.Embedding(text.vocab_size, text.hidden_size)
        self.layers = nn.ModuleList([hf_llama.LlamaDecoderLayer(text, i) for i in range(text.num_hidden_layers)])
        self.norm = hf_llama.LlamaRMSNorm(text.hidden_size, text.rms_norm_eps)
        self.rotary_emb = hf_llama.LlamaRotaryEmbedding(text)

    def forward(self, inputs_embeds, attention_mask):
        position_ids = torch.arange(inputs_embeds.shape[1]).unsqueeze(0)
        causal_mask = hf_llama.make_causal_mask(attention_mask, inputs_embeds.dtype, inputs_embeds.device)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=causal_mask, position_embeddings=position_embeddings)
        return self.norm(hidden_states)


class Model(nn.Module):
    def __init__(self, d, text):
        super().__init__()
        vc = VisionConfig(d["vision_config"])
        self.merge = d.get("spatial_merge_size", 2)
        self.vision_tower = PixtralVisionModel(vc)
        self.multi_modal_projector = MultiModalProjector(vc, text.hidden_size, text.rms_norm_eps, self.merge,
                                                         d.get("multimodal_projector_bias", False))
        self.language_model = TextModel(text)
        self.vision_feature_layer = d.get("vision_feature_layer", -1)

    def get_image_features(self, pixel_values, image_sizes):
        image_outputs = self.vision_tower(pixel_values, image_sizes)
        selected = image_outputs[1][self.vision_feature_layer]
        image_features = self.multi_modal_projector(selected.squeeze(0), image_sizes)
        ratio = self.vision_tower.patch_size * self.merge
        split_sizes = [(h // ratio) * (w // ratio) for h, w in image_sizes]
        return torch.split(image_features.squeeze(0), split_sizes)

    def forward(self, input_ids, attention_mask, pixel_values, image_sizes):
        inputs_embeds = self.language_model.embed_tokens(input_ids)
        if pixel_values is not None:
            image_features = self.get_image_features(pixel_values, image_sizes)
            image_features = torch.cat(image_features, dim=0)
            mask = (input_ids == IMAGE_TOKEN_ID).unsqueeze(-1).expand_as(inputs_embeds)
            image_features = image_features.to(inputs_embeds.device, inputs_embeds.dtype)
            inputs_embeds = inputs_embeds.masked_scatter(mask, image_features)
        return self.language_model(inputs_embeds, attention_mask)


class Mistral3ForConditionalGeneration(hf_qwen_vl.VlmTraining, nn.Module):
    def __init__(self, d):
        super().__init__()
        text = hf_llama.Config(d["text_config"])
        text.tie_word_embeddings = d.get("tie_word_embeddings", False)
        self.config = text
        self.model = Model(d, text)
        self.lm_head = nn.Linear(text.hidden_size, text.vocab_size, bias=False)

    @property
    def visual(self):
        return self.model.vision_tower

    def projector_modules(self):
        return [self.model.multi_modal_projector]

    def gradient_checkpointing_enable(self, use_reentrant=True):
        for m in self.modules():
            if isinstance(m, (hf_qwen_vl.Checkpointed, hf_llama.GradientCheckpointingLayer)):
                m.gradient_checkpointing = True
                m.use_reentrant = use_reentrant

    def forward(self, input_ids, attention_mask, pixel_values, image_sizes, labels=None):
        hidden_states = self.model(input_ids, attention_mask, pixel_values, image_sizes)
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = hf_llama.for_causal_lm_loss(logits, labels, self.config.vocab_size)
        return {"loss": loss, "logits": logits}


def resized(v, height, width, merge=2):
    """PixtralImageProcessor.get_resize_output_image_size with longest_edge = image_size and the
    patch_size PixtralProcessor passes it: patch_size * spatial_merge_size (transformers 4.50+)."""
    import math
    edge = v.get("image_size", 1024)
    p = v.get("patch_size", 16) * merge
    ratio = max(height / edge, width / edge)
    if ratio > 1:
        height = int(math.floor(height / ratio))
        width = int(math.floor(width / ratio))
    return ((height - 1) // p + 1) * p, ((width - 1) // p + 1) * p


def make_inputs(d, t, gen):
    """A collated batch: b sequences of seq_len tokens, each opening with `images` images of
    image_height x image_width pixels (or image_size square) as the processor writes them: rows of
    [IMG] tokens each closed by [IMG_BREAK], the last by [IMG_END]."""
    v = d["vision_config"]
    b, s = t["batch"], t["seq_len"]
    hh, ww = resized(v, t.get("image_height", t.get("image_size")), t.get("image_width", t.get("image_size")),
                     d.get("spatial_merge_size", 2))
    ratio = v.get("patch_size", 16) * d.get("spatial_merge_size", 2)
    rows, cols = hh // ratio, ww // ratio
    row = [IMAGE_TOKEN_ID] * cols + [BREAK_TOKEN_ID]
    one = row * rows
    one[-1] = END_TOKEN_ID
    n = t.get("images", 1)
    ids = torch.randint(END_TOKEN_ID + 1, d["text_config"]["vocab_size"], (b, s), generator=gen)
    ids[:, :n * len(one)] = torch.tensor(one * n)
    inputs = {"input_ids": ids, "attention_mask": torch.ones(b, s, dtype=torch.long), "labels": ids.clone(),
              "pixel_values": None, "image_sizes": None}
    if n:
        inputs["pixel_values"] = torch.randn(b * n, 3, hh, ww, generator=gen)
        inputs["image_sizes"] = [(hh, ww)] * (b * n)
    return inputs

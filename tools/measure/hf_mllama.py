"""Llama 3.2 Vision (mllama) written to follow Hugging Face transformers' modeling_mllama.py
(v4.56-4.57 structure), eager attention, for memory fidelity on the CPU
(docs/formulas.md#llama-32-vision).

Vision: MllamaVisionModel.forward as written there -- the Conv2d patch embedding (its output,
`patch_embeds`, a local until the forward returns), the gated pre-tile, positional/tile and
post-tile embeddings, the class token, layernorm_pre/post, padding to a multiple of 8 positions,
_prepare_aspect_ratio_attention_mask, the local and the gated global encoders (each keeps every
layer's output in its hidden_states tuple), torch.stack of the intermediate layers, and the
final torch.cat. Vision layers are not checkpointed (4.55+).

Language model: MllamaSelfAttentionDecoderLayer (Llama) and MllamaCrossAttentionDecoderLayer
(q_norm/k_norm, K/V from the image features, tanh gates, full_text_row_masked_out_mask), both
GradientCheckpointingLayer: the hidden states positional, every other argument bound in the
partial. _prepare_cross_attention_mask as written. Cross-attention layers are skipped for
text-only batches. The logits stay in the activation dtype; the loss upcasts them.

Freezing follows LLaMA-Factory's defaults for mllama (freeze_vision_tower, freeze_multi_modal_projector);
LoRA wraps only the language model's Linears.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_llama
from hf_qwen_vl import Checkpointed, VlmTraining

IMAGE_TOKEN_ID = 7  # any id below the vocabulary; the collator puts one per image at the start


class VisionConfig:
    def __init__(self, d):
        self.hidden_size = d.get("hidden_size", 1280)
        self.intermediate_size = d.get("intermediate_size", 5120)
        self.num_hidden_layers = d.get("num_hidden_layers", 32)
        self.num_global_layers = d.get("num_global_layers", 8)
        self.attention_heads = d.get("attention_heads", 16)
        self.image_size = d.get("image_size", 448)
        self.patch_size = d.get("patch_size", 14)
        self.max_num_tiles = d.get("max_num_tiles", 4)
        self.norm_eps = d.get("norm_eps", 1e-5)
        self.intermediate_layers_indices = d.get("intermediate_layers_indices", [3, 7, 15, 23, 30])
        self.max_aspect_ratio_id = len(d.get("supported_aspect_ratios", [[1, 1]] * 8))
        self.vision_output_dim = self.hidden_size * (1 + len(self.intermediate_layers_indices))


# ---- vision tower

def prepare_cross_attention_mask(cross_attention_mask, num_vision_tokens, dtype):
    batch_size, text_total_length, *_ = cross_attention_mask.shape
    cross_attention_mask = cross_attention_mask.repeat_interleave(num_vision_tokens, dim=3)
    cross_attention_mask = cross_attention_mask.view(batch_size, text_total_length, -1)
    cross_attention_mask = cross_attention_mask.unsqueeze(1)
    inverted_cross_attn_mask = (1.0 - cross_attention_mask).to(dtype)
    cross_attention_mask = inverted_cross_attn_mask.masked_fill(inverted_cross_attn_mask.to(torch.bool),
                                                                torch.finfo(dtype).min)
    negative_inf_value = torch.finfo(dtype).min
    full_text_row_masked_out_mask = ((cross_attention_mask != negative_inf_value).any(dim=-1)
                                     .type_as(cross_attention_mask)[..., None])
    cross_attention_mask *= full_text_row_masked_out_mask
    return cross_attention_mask, full_text_row_masked_out_mask


def prepare_aspect_ratio_attention_mask(aspect_ratio_mask, num_patches, target_length, dtype):
    batch_size, max_num_tiles = aspect_ratio_mask.shape
    attention_mask = aspect_ratio_mask.view(batch_size, max_num_tiles, 1, 1).to(dtype)
    attention_mask = attention_mask.repeat(1, 1, target_length, 1)
    pad_patches = target_length - num_patches
    attention_mask[:, :, -pad_patches:] = 0
    attention_mask = 1 - attention_mask
    attention_mask = attention_mask.reshape(batch_size, max_num_tiles * target_length, 1)
    attention_mask = attention_mask @ attention_mask.transpose(-1, -2) * torch.finfo(dtype).min
    return attention_mask.unsqueeze(1)


class AspectRatioEmbedding(nn.Module):
    def __init__(self, c, is_gated=True):
        super().__init__()
        self.max_num_tiles, self.hidden_size, self.is_gated = c.max_num_tiles, c.hidden_size, is_gated
        self.embedding = nn.Embedding(c.max_aspect_ratio_id + 1, c.max_num_tiles * c.hidden_size)
        if is_gated:
            self.gate = nn.Parameter(torch.zeros(1))

    def forward(self, hidden_state, aspect_ratio_ids):
        embeddings = self.embedding(aspect_ratio_ids)
        embeddings = embeddings.reshape(-1, self.max_num_tiles, 1, self.hidden_size)
        if self.is_gated:
            embeddings = embeddings * self.gate.tanh()
        return hidden_state + embeddings


class PositionEmbedding(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.max_num_tiles = c.max_num_tiles
        self.num_patches = (c.image_size // c.patch_size) ** 2 + 1
        self.hidden_size = c.hidden_size
        self.gate = nn.Parameter(torch.zeros(1))
        self.embedding = nn.Parameter(c.hidden_size ** -0.5 * torch.randn(self.num_patches, self.hidden_size))
        self.tile_embedding = nn.Embedding(c.max_aspect_ratio_id + 1,
                                           c.max_num_tiles * self.num_patches * self.hidden_size)

    def forward(self, hidden_state, aspect_ratio_ids):
        gated_position_embedding = (1 - self.gate.tanh()) * self.embedding
        hidden_state = hidden_state + gated_position_embedding.view(1, 1, self.num_patches, self.hidden_size)
        tile_position_embedding = self.tile_embedding(aspect_ratio_ids)
        batch_size = hidden_state.shape[0]
        tile_position_embedding = tile_position_embedding.reshape(batch_size, self.max_num_tiles, self.num_patches,
                                                                  self.hidden_size)
        gated_tile_position_embedding = self.gate.tanh() * tile_position_embedding
        return hidden_state + gated_tile_position_embedding


class VisionAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.num_heads = c.attention_heads
        self.head_dim = c.hidden_size // c.attention_heads
        self.scaling = self.head_dim ** -0.5
        self.num_key_value_groups = 1
        h = c.hidden_size
        self.q_proj = nn.Linear(h, h, bias=False)
        self.k_proj = nn.Linear(h, h, bias=False)
        self.v_proj = nn.Linear(h, h, bias=False)
        self.o_proj = nn.Linear(h, h, bias=False)

    def forward(self, hidden_state, attention_mask=None):
        query, key, value = self.q_proj(hidden_state), self.k_proj(hidden_state), self.v_proj(hidden_state)
        b, q_len, _ = query.shape
        query = query.view(b, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key = key.view(b, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        value = value.view(b, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        attn_output, _ = hf_llama.eager_attention_forward(self, query, key, value, attention_mask,
                                                          scaling=self.scaling, dropout=0.0)
        attn_output = attn_output.reshape(b, q_len, -1).contiguous()
        return self.o_proj(attn_output)


class VisionMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc1 = nn.Linear(c.hidden_size, c.intermediate_size)
        self.fc2 = nn.Linear(c.intermediate_size, c.hidden_size)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class VisionEncoderLayer(nn.Module):
    def __init__(self, c, is_gated=False):
        super().__init__()
        self.is_gated = is_gated
        self.self_attn = VisionAttention(c)
        self.mlp = VisionMLP(c)
        self.input_layernorm = nn.LayerNorm(c.hidden_size, eps=c.norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(c.hidden_size, eps=c.norm_eps)
        if is_gated:
            self.gate_attn = nn.Parameter(torch.ones(1) * math.pi / 4)
            self.gate_ffn = nn.Parameter(torch.ones(1) * math.pi / 4)

    def forward(self, hidden_state, attention_mask=None):
        residual = hidden_state
        hidden_state = self.input_layernorm(hidden_state)
        hidden_state = self.self_attn(hidden_state, attention_mask=attention_mask)
        if self.is_gated:
            hidden_state = self.gate_attn.tanh() * hidden_state
        hidden_state = residual + hidden_state
        residual = hidden_state
        hidden_state = self.post_attention_layernorm(hidden_state)
        hidden_state = self.mlp(hidden_state)
        if self.is_gated:
            hidden_state = self.gate_ffn.tanh() * hidden_state
        return residual + hidden_state


class VisionEncoder(nn.Module):
    def __init__(self, c, num_layers, is_gated=False):
        super().__init__()
        self.layers = nn.ModuleList([VisionEncoderLayer(c, is_gated) for _ in range(num_layers)])

    def forward(self, hidden_states, attention_mask=None):
        encoder_states = ()
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=attention_mask)
            encoder_states = encoder_states + (hidden_states,)
        return hidden_states, encoder_states


class VisionModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.num_patches = (c.image_size // c.patch_size) ** 2 + 1
        self.intermediate_layers_indices = c.intermediate_layers_indices
        self.patch_embedding = nn.Conv2d(3, c.hidden_size, kernel_size=c.patch_size, stride=c.patch_size,
                                         padding="valid", bias=False)
        self.class_embedding = nn.Parameter(c.hidden_size ** -0.5 * torch.randn(c.hidden_size))
        self.gated_positional_embedding = PositionEmbedding(c)
        self.pre_tile_positional_embedding = AspectRatioEmbedding(c, is_gated=True)
        self.post_tile_positional_embedding = AspectRatioEmbedding(c, is_gated=True)
        self.layernorm_pre = nn.LayerNorm(c.hidden_size)
        self.layernorm_post = nn.LayerNorm(c.hidden_size)
        self.transformer = VisionEncoder(c, c.num_hidden_layers, is_gated=False)
        self.global_transformer = VisionEncoder(c, c.num_global_layers, is_gated=True)

    @property
    def dtype(self):
        return self.patch_embedding.weight.dtype

    def apply_class_embedding(self, hidden_state):
        batch_size, _, hidden_size = hidden_state.shape
        class_embedding = self.class_embedding.expand(batch_size, 1, hidden_size)
        return torch.cat([class_embedding, hidden_state], dim=1)

    def forward(self, pixel_values, aspect_ratio_ids, aspect_ratio_mask):
        batch_size, num_concurrent_media, num_tiles, num_channels, height, width = pixel_values.shape
        pixel_values = pixel_values.reshape(batch_size * num_concurrent_media * num_tiles, num_channels, height, width)
        aspect_ratio_ids = aspect_ratio_ids.reshape(batch_size * num_concurrent_media, -1)
        patch_embeds = self.patch_embedding(pixel_values.to(self.patch_embedding.weight.dtype))
        hidden_state = patch_embeds.flatten(2).transpose(1, 2)
        _, num_patches, dim = hidden_state.shape
        hidden_state = hidden_state.reshape(batch_size * num_concurrent_media, num_tiles, -1, dim)
        hidden_state = self.pre_tile_positional_embedding(hidden_state, aspect_ratio_ids)
        hidden_state = hidden_state.reshape(batch_size * num_concurrent_media * num_tiles, num_patches, dim)
        hidden_state = self.apply_class_embedding(hidden_state)
        num_patches += 1
        hidden_state = hidden_state.reshape(batch_size * num_concurrent_media, num_tiles, num_patches, dim)
        hidden_state = self.gated_positional_embedding(hidden_state, aspect_ratio_ids)
        hidden_state = self.layernorm_pre(hidden_state)
        num_padding_patches = (8 - (hidden_state.shape[-2] % 8)) % 8
        hidden_state = F.pad(hidden_state, (0, 0, 0, num_padding_patches), mode="constant", value=0)
        slice_index = -num_padding_patches if num_padding_patches > 0 else None
        attention_mask = aspect_ratio_mask.reshape(batch_size * num_concurrent_media, -1)
        attention_mask = prepare_aspect_ratio_attention_mask(attention_mask, self.num_patches,
                                                             hidden_state.shape[2], self.dtype)
        hidden_state = hidden_state.view(batch_size * num_concurrent_media, -1, dim)
        output = self.transformer(hidden_state, attention_mask=attention_mask)
        hidden_state = output[0]
        hidden_state = self.layernorm_post(hidden_state)
        hidden_state = hidden_state.reshape(batch_size * num_concurrent_media, num_tiles,
                                            num_patches + num_padding_patches, dim)
        hidden_state = self.post_tile_positional_embedding(hidden_state, aspect_ratio_ids)
        hidden_state = hidden_state.reshape(batch_size * num_concurrent_media,
                                            num_tiles * (num_patches + num_padding_patches), dim)
        global_output = self.global_transformer(hidden_state, attention_mask=attention_mask)
        hidden_state = global_output[0]
        hidden_state = hidden_state.reshape(batch_size * num_concurrent_media, num_tiles,
                                            num_patches + num_padding_patches, dim)
        hidden_state = hidden_state[:, :, :slice_index]
        hidden_state = hidden_state.reshape(batch_size, num_concurrent_media, num_tiles, num_patches, dim)
        all_intermediate_hidden_states = [output[1][i] for i in self.intermediate_layers_indices]
        intermediate_hidden_states = torch.stack(all_intermediate_hidden_states, dim=-1)
        intermediate_hidden_states = intermediate_hidden_states.reshape(
            batch_size * num_concurrent_media, num_tiles, num_patches + num_padding_patches, -1)
        intermediate_hidden_states = intermediate_hidden_states[:, :, :slice_index]
        intermediate_hidden_states = intermediate_hidden_states.reshape(
            batch_size, num_concurrent_media, num_tiles, num_patches, -1)
        return torch.cat([hidden_state, intermediate_hidden_states], dim=-1)


# ---- language model

class CrossAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        h, nh, nkv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        self.num_heads, self.num_key_value_heads = nh, nkv
        self.head_dim = h // nh
        self.num_key_value_groups = nh // nkv
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(h, nh * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, nkv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, nkv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(nh * self.head_dim, h, bias=False)
        self.q_norm = hf_llama.LlamaRMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = hf_llama.LlamaRMSNorm(self.head_dim, config.rms_norm_eps)

    def forward(self, hidden_states, cross_attention_states, attention_mask):
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states)
        query_states = query_states.view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        query_states = self.q_norm(query_states)
        key_states = self.k_proj(cross_attention_states)
        value_states = self.v_proj(cross_attention_states)
        key_states = key_states.view(bsz, -1, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        value_states = value_states.view(bsz, -1, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        key_states = self.k_norm(key_states)
        attn_output, _ = hf_llama.eager_attention_forward(self, query_states, key_states, value_states,
                                                          attention_mask, scaling=self.scaling, dropout=0.0)
        attn_output = attn_output.reshape(bsz, q_len, -1).contiguous()
        return self.o_proj(attn_output)


class SelfAttentionDecoderLayer(Checkpointed):
    def __init__(self, config, idx):
        super().__init__()
        self.self_attn = hf_llama.LlamaAttention(config, idx)
        self.mlp = hf_llama.LlamaMLP(config)
        self.input_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden_states, cross_attention_states=None, cross_attention_mask=None, attention_mask=None,
                full_text_row_masked_out_mask=None, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, attention_mask=attention_mask,
                                          position_embeddings=position_embeddings)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


class CrossAttentionDecoderLayer(Checkpointed):
    def __init__(self, config, idx):
        super().__init__()
        self.cross_attn = CrossAttention(config)
        self.input_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.cross_attn_attn_gate = nn.Parameter(torch.zeros(1))
        self.mlp = hf_llama.LlamaMLP(config)
        self.post_attention_layernorm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.cross_attn_mlp_gate = nn.Parameter(torch.zeros(1))

    def forward(self, hidden_states, cross_attention_states=None, cross_attention_mask=None, attention_mask=None,
                full_text_row_masked_out_mask=None, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.cross_attn(hidden_states, cross_attention_states, cross_attention_mask)
        hidden_states = residual + self.cross_attn_attn_gate.tanh() * hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        if full_text_row_masked_out_mask is not None:
            hidden_states = full_text_row_masked_out_mask[:, 0] * hidden_states
        return residual + self.cross_attn_mlp_gate.tanh() * hidden_states


class TextModel(nn.Module):
    def __init__(self, config, cross_layers):
        super().__init__()
        self.cross_attention_layers = cross_layers
        self.embed_tokens = nn.Embedding(config.vocab_size + 8, config.hidden_size)
        self.layers = nn.ModuleList([CrossAttentionDecoderLayer(config, i) if i in cross_layers
                                     else SelfAttentionDecoderLayer(config, i)
                                     for i in range(config.num_hidden_layers)])
        self.norm = hf_llama.LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = hf_llama.LlamaRotaryEmbedding(config)

    def forward(self, input_ids, attention_mask, cross_attention_states, cross_attention_mask,
                full_text_row_masked_out_mask):
        hidden_states = self.embed_tokens(input_ids)
        b, s = input_ids.shape
        position_ids = torch.arange(s).unsqueeze(0)
        causal_mask = hf_llama.make_causal_mask(attention_mask, hidden_states.dtype, hidden_states.device)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for idx, layer in enumerate(self.layers):
            if idx in self.cross_attention_layers and cross_attention_states is None:
                continue
            hidden_states = layer(hidden_states, cross_attention_states=cross_attention_states,
                                  cross_attention_mask=cross_attention_mask, attention_mask=causal_mask,
                                  full_text_row_masked_out_mask=full_text_row_masked_out_mask,
                                  position_embeddings=position_embeddings)
        return self.norm(hidden_states)


class Model(nn.Module):
    """MllamaModel: the tower and projector, the cross-attention masks, the language model."""

    def __init__(self, d, text):
        super().__init__()
        self.vc = VisionConfig(d["vision_config"])
        self.vision_model = VisionModel(self.vc)
        self.language_model = TextModel(text, d["text_config"].get("cross_attention_layers", [3, 8, 13, 18, 23, 28, 33, 38]))
        self.multi_modal_projector = nn.Linear(self.vc.vision_output_dim, text.hidden_size, bias=True)
        self.hidden_size = text.hidden_size

    @property
    def dtype(self):
        return self.language_model.embed_tokens.weight.dtype

    def forward(self, input_ids, attention_mask, pixel_values, aspect_ratio_ids, aspect_ratio_mask,
                cross_attention_mask):
        cross_attention_states = None
        if pixel_values is not None:
            vision_outputs = self.vision_model(pixel_values=pixel_values, aspect_ratio_ids=aspect_ratio_ids,
                                               aspect_ratio_mask=aspect_ratio_mask)
            cross_attention_states = vision_outputs
            cross_attention_states = self.multi_modal_projector(cross_attention_states).reshape(
                -1, cross_attention_states.shape[-2], self.hidden_size)
        full_text_row_masked_out_mask = None
        if cross_attention_mask is not None:
            cross_attention_mask, full_text_row_masked_out_mask = prepare_cross_attention_mask(
                cross_attention_mask, num_vision_tokens=self.vision_model.num_patches, dtype=self.dtype)
        return self.language_model(input_ids, attention_mask, cross_attention_states, cross_attention_mask,
                                   full_text_row_masked_out_mask)


class MllamaForConditionalGeneration(VlmTraining, nn.Module):
    def __init__(self, d):
        super().__init__()
        t = dict(d["text_config"])
        text = hf_llama.Config(t)
        self.config = text
        self.model = Model(d, text)
        self.lm_head = nn.Linear(text.hidden_size, text.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask, pixel_values=None, aspect_ratio_ids=None, aspect_ratio_mask=None,
                cross_attention_mask=None, labels=None):
        hidden_states = self.model(input_ids, attention_mask, pixel_values, aspect_ratio_ids, aspect_ratio_mask,
                                   cross_attention_mask)
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = hf_llama.for_causal_lm_loss(logits, labels, self.config.vocab_size)
        return {"loss": loss, "logits": logits}


def make_inputs(d, t, gen):
    """A collated batch as MllamaProcessor and LLaMA-Factory's MllamaPlugin give it: b sequences of
    seq_len tokens, each opening with `images` <|image|> tokens; every image is max_num_tiles tiles
    of image_size pixels (one real tile: aspect ratio id 1); the cross-attention mask lets every
    later token see the image's real tile."""
    v = VisionConfig(d["vision_config"])
    b, s, n = t["batch"], t["seq_len"], t.get("images", 1)
    ids = torch.randint(IMAGE_TOKEN_ID + 1, d["text_config"]["vocab_size"], (b, s), generator=gen)
    inputs = {"input_ids": ids, "attention_mask": torch.ones(b, s, dtype=torch.long), "labels": ids.clone()}
    if n:
        ids[:, :n] = IMAGE_TOKEN_ID
        side = v.image_size
        inputs["pixel_values"] = torch.randn(b, n, v.max_num_tiles, 3, side, side, generator=gen)
        inputs["aspect_ratio_ids"] = torch.ones(b, n, dtype=torch.long)
        arm = torch.zeros(b, n, v.max_num_tiles, dtype=torch.long)
        arm[:, :, 0] = 1
        inputs["aspect_ratio_mask"] = arm
        cam = torch.zeros(b, s, n, v.max_num_tiles, dtype=torch.long)
        for i in range(n):
            cam[:, i:, i, 0] = 1
        inputs["cross_attention_mask"] = cam
    return inputs

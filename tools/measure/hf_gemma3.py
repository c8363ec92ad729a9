"""Gemma 3's text model as sentence-transformers trains EmbeddingGemma, written to follow
transformers 4.56's *eager* path (modeling_gemma3.py, masking_utils.py) and sentence-transformers'
modules (Pooling, Dense, Normalize), op for op, so autograd saves the same tensors.

Covered: Gemma3TextScaledWordEmbedding (the lookup times embed_scale), Gemma3RMSNorm (fp32,
x * rsqrt(mean(x^2) + eps) * (1 + weight)), q_norm/k_norm over head_dim before the rotary
embedding, the four norms of a decoder layer, the GELU-tanh MLP, eager attention with repeat_kv,
query_pre_attn_scalar ** -0.5 scaling and the fp32 softmax, two rotary tables (rope_theta for the
full layers, rope_local_base_freq for the sliding ones; 4.56 passes both to every layer), and
use_bidirectional_attention: the full mask is the padding mask alone, the sliding one keeps
|q - kv| < sliding_window // 2 + 1. Both are (b, 1, s, s) additive masks built per forward
(masking_utils.eager_mask: a materialized bool mask, then torch.where into the model dtype).

Gradient checkpointing follows GradientCheckpointingLayer (hidden_states positional, the rest
bound with functools.partial), reentrant by default as transformers' gradient_checkpointing_enable.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_bert
import hf_llama


class Config:
    def __init__(self, d):
        self.vocab_size = d["vocab_size"]
        self.hidden_size = d["hidden_size"]
        self.intermediate_size = d["intermediate_size"]
        self.num_hidden_layers = d["num_hidden_layers"]
        self.num_attention_heads = d["num_attention_heads"]
        self.num_key_value_heads = d.get("num_key_value_heads", self.num_attention_heads)
        self.head_dim = d.get("head_dim", 256)
        self.rms_norm_eps = d.get("rms_norm_eps", 1e-6)
        self.rope_theta = d.get("rope_theta", 1000000.0)
        self.rope_local_base_freq = d.get("rope_local_base_freq", 10000.0)
        self.query_pre_attn_scalar = d.get("query_pre_attn_scalar", 256)
        self.pad_token_id = d.get("pad_token_id", 0)
        self.attention_bias = False  # Gemma's projections and MLP carry no biases
        self.mlp_bias = False
        self.tie_word_embeddings = d.get("tie_word_embeddings", True)
        self.final_logit_softcapping = d.get("final_logit_softcapping")
        # Gemma 2 (modeling_gemma2.py): no q/k norms, one rotary table, attention logit softcapping,
        # every other layer sliding.
        self.gemma2 = d.get("model_type") == "gemma2"
        self.attn_logit_softcapping = d.get("attn_logit_softcapping") if self.gemma2 else None
        self.use_bidirectional_attention = d.get("use_bidirectional_attention", False)
        self.sliding_window = d.get("sliding_window", 4096)
        if self.use_bidirectional_attention:
            self.sliding_window = self.sliding_window // 2 + 1  # Gemma3TextConfig.__init__
        pattern = d.get("sliding_window_pattern", d.get("_sliding_window_pattern", 2 if self.gemma2 else 6))
        self.layer_types = d.get("layer_types") or [
            "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(self.num_hidden_layers)]


class RotaryConfig:
    def __init__(self, head_dim, theta):
        self.head_dim = head_dim
        self.rope_theta = theta


class Gemma3RMSNorm(nn.Module):
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


class Gemma3TextScaledWordEmbedding(nn.Embedding):
    def __init__(self, num_embeddings, embedding_dim, padding_idx, embed_scale):
        super().__init__(num_embeddings, embedding_dim, padding_idx)
        self.register_buffer("embed_scale", torch.tensor(embed_scale), persistent=False)

    def forward(self, input_ids):
        return super().forward(input_ids) * self.embed_scale.to(self.weight.dtype)


class Gemma3Attention(hf_llama.LlamaAttention):
    """LlamaAttention's projections, rotary embedding and eager attention, with Gemma's
    query_pre_attn_scalar scaling, q/k norms (Gemma 3) or attention logit softcapping (Gemma 2)."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.scaling = config.query_pre_attn_scalar ** -0.5
        self.is_sliding = config.layer_types[layer_idx] == "sliding_attention"
        self.softcap = config.attn_logit_softcapping
        if not config.gemma2:
            self.q_norm = Gemma3RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = Gemma3RMSNorm(self.head_dim, config.rms_norm_eps)


class Gemma3MLP(hf_llama.LlamaMLP):
    """LlamaMLP's gated MLP with GELU-tanh (gelu_pytorch_tanh)."""

    def __init__(self, config):
        super().__init__(config)
        self.act_fn = nn.GELU(approximate="tanh")


class Gemma3DecoderLayer(hf_llama.GradientCheckpointingLayer):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.self_attn = Gemma3Attention(config, layer_idx)
        self.mlp = Gemma3MLP(config)
        h, eps = config.hidden_size, config.rms_norm_eps
        self.input_layernorm = Gemma3RMSNorm(h, eps)
        self.post_attention_layernorm = Gemma3RMSNorm(h, eps)
        self.pre_feedforward_layernorm = Gemma3RMSNorm(h, eps)
        self.post_feedforward_layernorm = Gemma3RMSNorm(h, eps)

    def forward(self, hidden_states, position_embeddings_global=None, position_embeddings_local=None,
                attention_mask=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        position_embeddings = position_embeddings_local if self.self_attn.is_sliding else position_embeddings_global
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, position_embeddings=position_embeddings,
                                          attention_mask=attention_mask)
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.pre_feedforward_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


def eager_masks(attention_mask_2d, dtype, window, bidirectional):
    """masking_utils.eager_mask for causal_mask_mapping: each mask function evaluated into a
    materialized (b, 1, s, s) bool (the padding function makes it depend on the batch row), then
    torch.where(mask, 0, dtype_min): the full mask, then the sliding one."""
    b, s = attention_mask_2d.shape
    q = torch.arange(s)
    kv = torch.arange(s)
    pad = attention_mask_2d[:, None, None, :].bool()
    causal = kv[None, :] <= q[:, None]
    if bidirectional:
        full_fn = torch.ones(s, s, dtype=torch.bool)
        slide_fn = (causal & (q[:, None] - kv[None, :] < window)) | ((q[:, None] - kv[None, :]).abs() < window)
    else:
        full_fn = causal
        slide_fn = causal & (q[:, None] - kv[None, :] < window)
    zero = torch.tensor(0.0, dtype=dtype)
    min_dtype = torch.finfo(dtype).min
    masks = []
    for fn in (full_fn, slide_fn):
        allowed = (fn[None, None, :, :] & pad).expand(b, 1, s, s).contiguous()
        masks.append(torch.where(allowed, zero, min_dtype))
        del allowed
    return masks[0], masks[1]


class Gemma3TextModel(hf_llama.CheckpointableModel):
    """AutoModel (no LM head): what sentence-transformers loads for EmbeddingGemma."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = Gemma3TextScaledWordEmbedding(config.vocab_size, config.hidden_size, config.pad_token_id,
                                                          config.hidden_size ** 0.5)
        self.layers = nn.ModuleList([Gemma3DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = Gemma3RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = hf_llama.LlamaRotaryEmbedding(RotaryConfig(config.head_dim, config.rope_theta))
        self.rotary_emb_local = None if config.gemma2 else hf_llama.LlamaRotaryEmbedding(
            RotaryConfig(config.head_dim, config.rope_local_base_freq))

    def forward(self, input_ids, attention_mask):
        inputs_embeds = self.embed_tokens(input_ids)
        position_ids = torch.arange(0, inputs_embeds.shape[1]).unsqueeze(0)
        full_mask, sliding_mask = eager_masks(attention_mask, inputs_embeds.dtype, self.config.sliding_window,
                                              self.config.use_bidirectional_attention)
        hidden_states = inputs_embeds
        position_embeddings_global = self.rotary_emb(hidden_states, position_ids)
        position_embeddings_local = (position_embeddings_global if self.rotary_emb_local is None
                                     else self.rotary_emb_local(hidden_states, position_ids))
        for decoder_layer in self.layers:
            mask = sliding_mask if decoder_layer.self_attn.is_sliding else full_mask
            hidden_states = decoder_layer(hidden_states, position_embeddings_global=position_embeddings_global,
                                          position_embeddings_local=position_embeddings_local, attention_mask=mask)
        hidden_states = self.norm(hidden_states)
        return hidden_states


class Gemma3ForCausalLM(hf_llama.LlamaForCausalLM):
    """Gemma3ForCausalLM (and Gemma2ForCausalLM): the text model, lm_head tied by default, the
    optional final logit softcapping, transformers' ForCausalLMLoss."""
    base_model_class = Gemma3TextModel


class SentenceModel(nn.Module):
    """SentenceTransformer(Transformer, Pooling(mean), Dense..., Normalize): the Dense modules sit
    outside the transformers model, so PEFT (which wraps that model) leaves them trainable."""

    def __init__(self, config, dense):
        super().__init__()
        self.auto_model = Gemma3TextModel(config)
        self.dense = nn.ModuleList([nn.Linear(d["in_features"], d["out_features"], bias=d.get("bias", True))
                                    for d in dense])
        self.tanh = [not d.get("activation_function", "Tanh").endswith("Identity") for d in dense]

    def embed(self, ids, am):
        """One text column: the features dict keeps token_embeddings; sentence_embedding is
        replaced by each module in turn."""
        token_embeddings = self.auto_model(ids, am)
        emb = hf_bert.pool(token_embeddings, am, "mean")
        for linear, tanh in zip(self.dense, self.tanh):
            emb = linear(emb)
            if tanh:
                emb = torch.tanh(emb)
        emb = F.normalize(emb, p=2, dim=1)  # Normalize
        return token_embeddings, emb


def mnrl_loss(model, columns):
    reps, features = [], []
    for ids, am in columns:
        x, emb = model.embed(ids, am)
        reps.append(emb)
        features.append(x)
        del x, emb
    return hf_bert.ranking_loss(reps)

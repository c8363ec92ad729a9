"""NomicBERT as nomic-ai's remote code runs it, op for op (contrastors
src/contrastors/models/huggingface/modeling_hf_nomic_bert.py, the modeling file the hub's
nomic-ai/nomic-bert-2048 serves to nomic-embed-text-v1/v1.5 with trust_remote_code).

NomicBertEmbeddings (word + token types, no positions with rotary), emb_ln, emb_drop;
get_extended_attention_mask's (b, 1, 1, s) additive mask in the model dtype; NomicBertBlock with
prenorm false: NomicBertAttention (Wqkv, NomicBertRotaryEmbedding applied out of place to
qkv[:, :, 0] and qkv[:, :, 1] with the module's cached cos/sin, torch.stack back, eager matmul /
norm_factor + mask, softmax, dropout, matmul, out_proj), norm1(dropout1(attn) + x), the gated MLP
(fc11 * silu(fc12), fc2), norm2(dropout2(mlp) + x). einops is not installed here: its rearrange /
repeat calls are written as the torch ops they lower to (views, and a copy where the layout
demands one). Gradient checkpointing is non-reentrant, as the remote code hard-codes it.
Mean pooling and MNRL come from hf_bert (sentence-transformers' Pooling and loss).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint


class Config:
    def __init__(self, d):
        self.vocab_size = d.get("vocab_size", 50257)
        pad = d.get("pad_vocab_size_multiple", 1)
        if self.vocab_size % pad:
            self.vocab_size += pad - self.vocab_size % pad
        self.n_embd = d.get("n_embd", 768)
        self.n_layer = d.get("n_layer", 12)
        self.n_head = d.get("n_head", 12)
        act = d.get("activation_function", "gelu_new")
        self.gated = act in ("swiglu", "geglu")
        self.activation = F.silu if act == "swiglu" else F.gelu
        inner = d.get("n_inner") or (int(8 * self.n_embd / 3) if self.gated else 4 * self.n_embd)
        self.n_inner = (inner + 255) // 256 * 256 if self.gated else inner
        self.qkv_proj_bias = d.get("qkv_proj_bias", True)
        self.mlp_fc1_bias = d.get("mlp_fc1_bias", True)
        self.mlp_fc2_bias = d.get("mlp_fc2_bias", True)
        self.type_vocab_size = d.get("type_vocab_size", 2)
        self.resid_pdrop = d.get("resid_pdrop", 0.1)
        self.attn_pdrop = d.get("attn_pdrop", 0.1)
        self.rotary_emb_base = d.get("rotary_emb_base", 10000)
        self.layer_norm_epsilon = d.get("layer_norm_epsilon", 1e-5)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_emb(x, cos, sin):
    ro_dim = cos.shape[-1] * 2
    cos, sin = cos[0:x.shape[1]], sin[0:x.shape[1]]
    # einops.repeat(cos, "... d -> ... 1 (2 d)"): a new (s, 1, 2 d) tensor
    cos = cos.unsqueeze(-2).repeat(1, 1, 2)
    sin = sin.unsqueeze(-2).repeat(1, 1, 2)
    return torch.cat([x[..., :ro_dim] * cos + rotate_half(x[..., :ro_dim]) * sin, x[..., ro_dim:]], dim=-1)


class Rotary(nn.Module):
    """NomicBertRotaryEmbedding: the cos/sin cache is kept on the module, in qkv's dtype."""

    def __init__(self, dim, base):
        super().__init__()
        self.dim = dim
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)),
                             persistent=False)
        self._seq_len_cached = 0
        self._cos_cached = None
        self._sin_cached = None

    def forward(self, qkv):
        s = qkv.shape[1]
        if s > self._seq_len_cached or self._cos_cached is None or self._cos_cached.dtype != qkv.dtype:
            self._seq_len_cached = s
            t = torch.arange(s, dtype=torch.float32)
            freqs = torch.outer(t, self.inv_freq)
            self._cos_cached = torch.cos(freqs).to(qkv.dtype)
            self._sin_cached = torch.sin(freqs).to(qkv.dtype)
        q_rot = apply_rotary_emb(qkv[:, :, 0], self._cos_cached, self._sin_cached)
        k_rot = apply_rotary_emb(qkv[:, :, 1], self._cos_cached, self._sin_cached)
        return torch.stack((q_rot, k_rot, qkv[:, :, 2]), dim=2)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n = c.n_head
        self.d = c.n_embd // c.n_head
        self.register_buffer("norm_factor", torch.sqrt(torch.tensor(self.d, dtype=torch.float32)), persistent=False)
        self.rotary_emb = Rotary(self.d, c.rotary_emb_base)
        self.Wqkv = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.qkv_proj_bias)
        self.out_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.qkv_proj_bias)
        self.p = c.attn_pdrop

    def forward(self, x, mask):
        qkv = self.Wqkv(x)
        qkv = qkv.view(qkv.shape[:-1] + (3, self.n, self.d))  # rearrange "... (three h d) -> ... three h d"
        qkv = self.rotary_emb(qkv)
        query, key, value = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        query = query.permute(0, 2, 1, 3)
        key = key.permute(0, 2, 1, 3)
        value = value.permute(0, 2, 1, 3)
        scores = torch.matmul(query, key.transpose(-1, -2)) / self.norm_factor
        scores = scores + mask
        probs = F.softmax(scores, dim=-1)
        probs = F.dropout(probs, self.p, self.training)
        out = torch.matmul(probs, value)
        out = out.permute(0, 2, 1, 3)
        out = out.reshape(out.shape[:-2] + (-1,))  # rearrange "... h d -> ... (h d)"
        return self.out_proj(out)


class MLP(nn.Module):
    """NomciBertGatedMLP (fc11, fc12, fc2) or NomicBertMLP (fc1, fc2)."""

    def __init__(self, c):
        super().__init__()
        self.gated = c.gated
        self.activation = c.activation
        if c.gated:
            self.fc11 = nn.Linear(c.n_embd, c.n_inner, bias=c.mlp_fc1_bias)
            self.fc12 = nn.Linear(c.n_embd, c.n_inner, bias=c.mlp_fc1_bias)
        else:
            self.fc1 = nn.Linear(c.n_embd, c.n_inner, bias=c.mlp_fc1_bias)
        self.fc2 = nn.Linear(c.n_inner, c.n_embd, bias=c.mlp_fc2_bias)

    def forward(self, x):
        if self.gated:
            y = self.fc11(x)
            gate = self.fc12(x)
            y = y * self.activation(gate)
        else:
            y = self.activation(self.fc1(x))
        return self.fc2(y)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attn = Attention(c)
        self.mlp = MLP(c)
        self.norm1 = nn.LayerNorm(c.n_embd, eps=c.layer_norm_epsilon)
        self.norm2 = nn.LayerNorm(c.n_embd, eps=c.layer_norm_epsilon)
        self.p = c.resid_pdrop

    def forward(self, hidden_states, mask):
        attn_outputs = self.attn(hidden_states, mask)
        hidden_states = self.norm1((F.dropout(attn_outputs, self.p, self.training) + hidden_states)
                                   .to(dtype=self.norm1.weight.dtype))
        mlp_out = self.mlp(hidden_states)
        return self.norm2((F.dropout(mlp_out, self.p, self.training) + hidden_states).to(dtype=self.norm2.weight.dtype))


class NomicBert(nn.Module):
    """NomicBertModel (no pooler, as from_pretrained builds it) with a head: pooling
    (sentence-transformers) or classification (NomicBertForSequenceClassification: pooler, dropout,
    classifier)."""

    def __init__(self, c, head="pooling", num_labels=2):
        super().__init__()
        self.c = c
        self.head = head
        self.word_embeddings = nn.Embedding(c.vocab_size, c.n_embd)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.n_embd)
        self.emb_ln = nn.LayerNorm(c.n_embd, eps=c.layer_norm_epsilon)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        if head == "classification":
            self.pooler = nn.Linear(c.n_embd, c.n_embd)
            self.classifier = nn.Linear(c.n_embd, num_labels)
        self.gradient_checkpointing = False

    def gradient_checkpointing_enable(self, use_reentrant=True):
        self.gradient_checkpointing = True  # the encoder passes use_reentrant=False itself

    def encode(self, input_ids, token_type_ids, attention_mask):
        x = self.word_embeddings(input_ids)
        x = x + self.token_type_embeddings(token_type_ids)
        x = self.emb_ln(x)
        x = F.dropout(x, self.c.resid_pdrop, self.training)  # emb_drop
        dtype = self.emb_ln.weight.dtype
        ext = attention_mask[:, None, None, :].to(dtype=dtype)
        mask = (1.0 - ext) * torch.finfo(dtype).min
        del ext
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(layer, x, mask, use_reentrant=False)
            else:
                x = layer(x, mask)
        return x

    def forward(self, input_ids, token_type_ids, attention_mask, labels=None):
        x = self.encode(input_ids, token_type_ids, attention_mask)
        if self.head == "classification":
            pooled = torch.tanh(self.pooler(x[:, 0]))
            logits = self.classifier(F.dropout(pooled, self.c.resid_pdrop, self.training))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))
        return x, None

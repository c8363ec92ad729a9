"""DeBERTa-v2/v3 written to follow Hugging Face transformers' modeling_deberta_v2.py op for op.

As hf_bert.py does for BERT: DebertaV2Embeddings (no absolute positions when
position_biased_input is false, the input mask multiplied in), DebertaV2Encoder (the (b, 1, s, s)
mask product, the log-bucketed (1, s, s) relative positions, the LayerNorm-ed relative
embeddings), DisentangledSelfAttention with share_att_key and pos_att_type c2p|p2c
(transpose_for_scores' contiguous copies, k^T / scale, the repeated position projections, bmm +
gather per side, masked_fill, softmax, dropout), BERT-style output/intermediate blocks,
ContextPooler + classifier, the legacy MLM head; sentence-transformers mean pooling and MNRL via
hf_bert. Read from transformers 4.57 / 5.x (the module is the same in both). Dropout is active
(training): hidden 0.1, attention probabilities 0.1, the relative embeddings' pos_dropout 0.1,
ContextPooler's pooler_dropout 0, the classifier's dropout hidden_dropout_prob.
"""
import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

import hf_bert


class Config(hf_bert.Config):
    """The shape hf_bert reads, plus DebertaV2Config's relative-attention fields (v3 values as
    defaults: relative_attention, position_buckets 256, share_att_key, p2c|c2p, layer_norm)."""

    def __init__(self, d):
        super().__init__(d)
        self.type_vocab_size = d.get("type_vocab_size", 0)
        self.position_buckets = d.get("position_buckets", 256)
        mrp = d.get("max_relative_positions", -1)
        self.max_relative_positions = mrp if mrp >= 1 else self.max_position_embeddings
        self.pos_ebd_size = self.position_buckets if self.position_buckets > 0 else self.max_relative_positions
        self.position_biased_input = d.get("position_biased_input", False)
        types = d.get("pos_att_type", ["p2c", "c2p"])
        self.pos_att_type = [x.strip() for x in types.lower().split("|")] if isinstance(types, str) else types
        self.layer_norm_eps = 1e-7


def make_log_bucket_position(relative_pos, bucket_size, max_position):
    sign = torch.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = torch.where((relative_pos < mid) & (relative_pos > -mid), torch.tensor(mid - 1).type_as(relative_pos),
                          torch.abs(relative_pos))
    log_pos = torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid)) * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, relative_pos.type_as(log_pos), log_pos * sign)


def build_relative_position(s, bucket_size, max_position):
    q_ids = torch.arange(s, dtype=torch.long)
    k_ids = torch.arange(s, dtype=torch.long)
    rel = q_ids[:, None] - k_ids[None, :]
    if bucket_size > 0 and max_position > 0:
        rel = make_log_bucket_position(rel, bucket_size, max_position)
    return rel.to(torch.long)[:s, :].unsqueeze(0)


def scaled_size_sqrt(x, factor):
    return torch.sqrt(torch.tensor(x.size(-1), dtype=torch.float) * factor)


class Dense(nn.Module):
    """A module holding `dense` (and a LayerNorm): the module names PEFT's "dense" target matches."""

    def __init__(self, n_in, n_out, norm_eps=None):
        super().__init__()
        self.dense = nn.Linear(n_in, n_out)
        if norm_eps is not None:
            self.LayerNorm = nn.LayerNorm(n_out, eps=norm_eps)


class Attention(nn.Module):
    """DisentangledSelfAttention (share_att_key, c2p and p2c) + DebertaV2SelfOutput."""

    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.n = c.num_attention_heads
        self.span = c.pos_ebd_size
        self.types = c.pos_att_type
        self.scale_factor = 1 + ("c2p" in self.types) + ("p2c" in self.types)
        self.query_proj = nn.Linear(h, h)
        self.key_proj = nn.Linear(h, h)
        self.value_proj = nn.Linear(h, h)
        self.output = Dense(h, h, c.layer_norm_eps)  # DebertaV2SelfOutput

    def t(self, x):  # transpose_for_scores
        x = x.view(x.size()[:-1] + (self.n, -1))
        return x.permute(0, 2, 1, 3).contiguous().view(-1, x.size(1), x.size(-1))

    def forward(self, hidden, mask, relative_pos, rel_embeddings):
        # DebertaV2Attention: the self-attention returns (its locals die), then the output block.
        ctx = self.self_attention(hidden, mask, relative_pos, rel_embeddings)
        out = F.dropout(self.output.dense(ctx), 0.1, self.training)
        return self.output.LayerNorm(out + hidden)

    def self_attention(self, hidden, mask, relative_pos, rel_embeddings):
        # DisentangledSelfAttention.forward: rel_att, the masked scores and the bool mask are
        # locals, alive until it returns.
        q = self.t(self.query_proj(hidden))
        k = self.t(self.key_proj(hidden))
        v = self.t(self.value_proj(hidden))
        scale = scaled_size_sqrt(q, self.scale_factor)
        scores = torch.bmm(q, k.transpose(-1, -2) / scale.to(dtype=q.dtype))
        rel = F.dropout(rel_embeddings, 0.1, self.training)  # pos_dropout
        rel_att = self.bias(q, k, relative_pos, rel)
        scores = scores + rel_att
        scores = scores.view(-1, self.n, scores.size(-2), scores.size(-1))
        mask = mask.bool()
        scores = scores.masked_fill(~mask, torch.finfo(q.dtype).min)
        probs = F.softmax(scores, dim=-1)
        probs = F.dropout(probs, 0.1, self.training)
        ctx = torch.bmm(probs.view(-1, probs.size(-2), probs.size(-1)), v)
        ctx = ctx.view(-1, self.n, ctx.size(-2), ctx.size(-1)).permute(0, 2, 1, 3).contiguous()
        return ctx.view(ctx.size()[:-2] + (-1,))

    def bias(self, q, k, relative_pos, rel):
        relative_pos = relative_pos.unsqueeze(1)
        span = self.span
        rel = rel[0:span * 2, :].unsqueeze(0)
        reps = q.size(0) // self.n
        # share_att_key: both projections exist whichever terms pos_att_type asks for
        pos_q = self.t(self.query_proj(rel)).repeat(reps, 1, 1)
        pos_k = self.t(self.key_proj(rel)).repeat(reps, 1, 1)
        score = 0
        if "c2p" in self.types:
            scale = scaled_size_sqrt(pos_k, self.scale_factor)
            c2p = torch.bmm(q, pos_k.transpose(-1, -2))
            c2p_pos = torch.clamp(relative_pos + span, 0, span * 2 - 1)
            c2p = torch.gather(c2p, dim=-1,
                               index=c2p_pos.squeeze(0).expand([q.size(0), q.size(1), relative_pos.size(-1)]))
            score += c2p / scale.to(dtype=c2p.dtype)
        if "p2c" in self.types:
            scale = scaled_size_sqrt(pos_q, self.scale_factor)
            p2c_pos = torch.clamp(-relative_pos + span, 0, span * 2 - 1)
            p2c = torch.bmm(k, pos_q.transpose(-1, -2))
            p2c = torch.gather(p2c, dim=-1, index=p2c_pos.squeeze(0).expand([q.size(0), k.size(-2), k.size(-2)]))
            p2c = p2c.transpose(-1, -2)
            score += p2c / scale.to(dtype=p2c.dtype)
        return score


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.attention = Attention(c)
        self.intermediate = Dense(h, c.intermediate_size)
        self.output = Dense(c.intermediate_size, h, c.layer_norm_eps)

    def forward(self, hidden, mask, relative_pos=None, rel_embeddings=None):
        a = self.attention(hidden, mask, relative_pos, rel_embeddings)
        i = F.gelu(self.intermediate.dense(a))
        return self.output.LayerNorm(F.dropout(self.output.dense(i), 0.1, self.training) + a)


class Deberta(nn.Module):
    def __init__(self, c, head="pooling", num_labels=2):
        super().__init__()
        self.c = c
        self.head = head
        h = c.hidden_size
        self.word_embeddings = nn.Embedding(c.vocab_size, h)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, h) if c.position_biased_input else None
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, h) if c.type_vocab_size > 0 else None
        self.emb_ln = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.num_hidden_layers))
        self.rel_embeddings = nn.Embedding(c.pos_ebd_size * 2, h)
        self.rel_ln = nn.LayerNorm(h, eps=c.layer_norm_eps)
        if head == "mlm":  # LegacyDebertaV2OnlyMLMHead (config.legacy defaults to True)
            self.transform = Dense(h, h, c.layer_norm_eps)
            self.decoder_bias = nn.Parameter(torch.zeros(c.vocab_size))
        if head == "classification":  # ContextPooler + classifier
            self.pooler = Dense(h, h)
            self.classifier = nn.Linear(h, num_labels)
        self.gradient_checkpointing = False
        self.use_reentrant = True

    def gradient_checkpointing_enable(self, use_reentrant=True):
        self.gradient_checkpointing = True
        self.use_reentrant = use_reentrant

    def embed(self, input_ids, token_type_ids, attention_mask):
        s = input_ids.shape[1]
        inputs_embeds = self.word_embeddings(input_ids)
        if self.position_embeddings is not None:
            position_embeddings = self.position_embeddings(torch.arange(s).unsqueeze(0))
        else:
            position_embeddings = torch.zeros_like(inputs_embeds)
        embeddings = inputs_embeds
        if self.position_embeddings is not None:
            embeddings = embeddings + position_embeddings
        if self.token_type_embeddings is not None:
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        embeddings = self.emb_ln(embeddings)
        mask = attention_mask.unsqueeze(2).to(embeddings.dtype)
        embeddings = embeddings * mask
        return F.dropout(embeddings, 0.1, self.training)

    def encode(self, input_ids, token_type_ids, attention_mask):
        x = self.embed(input_ids, token_type_ids, attention_mask)
        # DebertaV2Encoder: the (b, 1, s, s) product of the input mask, relative positions, the
        # LayerNorm-ed relative embeddings; output_hidden_states=True keeps every layer's output.
        ext = attention_mask.unsqueeze(1).unsqueeze(2)
        mask = ext * ext.squeeze(-2).unsqueeze(-1)
        del ext
        relative_pos = build_relative_position(x.size(-2), self.c.position_buckets, self.c.max_relative_positions)
        all_hidden = [x]
        rel = self.rel_ln(self.rel_embeddings.weight)
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                # GradientCheckpointingLayer: the keyword arguments go into a partial.
                x = torch.utils.checkpoint.checkpoint(
                    functools.partial(layer.__call__, relative_pos=relative_pos, rel_embeddings=rel), x, mask,
                    use_reentrant=self.use_reentrant)
            else:
                x = layer(x, mask, relative_pos=relative_pos, rel_embeddings=rel)
            all_hidden.append(x)
        del all_hidden, mask, relative_pos, rel
        return x

    def forward(self, input_ids, token_type_ids, attention_mask, labels=None):
        x = self.encode(input_ids, token_type_ids, attention_mask)
        if self.head == "mlm":
            t = self.transform.LayerNorm(F.gelu(self.transform.dense(x)))
            scores = F.linear(t, self.word_embeddings.weight, self.decoder_bias)
            return F.cross_entropy(scores.view(-1, self.c.vocab_size), labels.view(-1))
        if self.head == "classification":
            # ContextPooler: x[:, 0], dropout (pooler_dropout 0), dense, GELU; then dropout,
            # classifier; the loss on the gathered labelled rows, upcast with .float().
            pooled = F.gelu(self.pooler.dense(F.dropout(x[:, 0], 0.0, self.training)))
            logits = self.classifier(F.dropout(pooled, 0.1, self.training))
            label_index = (labels >= 0).nonzero()
            labeled = torch.gather(logits, 0, label_index.expand(label_index.size(0), logits.size(1)))
            labels = torch.gather(labels, 0, label_index.view(-1))
            return F.cross_entropy(labeled.view(-1, logits.size(1)).float(), labels.view(-1))
        return x, None

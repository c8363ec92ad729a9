"""A BERT-family encoder written to follow Hugging Face transformers' *eager* code path.

As hf_llama.py does for decoders: every op of transformers' modeling_bert.py (BertEmbeddings,
BertSelfAttention with eager_attention_forward, BertSelfOutput, BertIntermediate, BertOutput,
BertPooler, BertOnlyMLMHead, BertForSequenceClassification) in the same order, dtype and shape,
so autograd saves the same tensors; plus sentence-transformers' Pooling(mean) and
MultipleNegativesRankingLoss (cos_sim * 20, cross_entropy over in-batch candidates).
Dropout is active (training): hidden 0.1, attention probabilities 0.1.
"""
import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, d):
        self.vocab_size = d["vocab_size"]
        self.hidden_size = d["hidden_size"]
        self.num_hidden_layers = d["num_hidden_layers"]
        self.num_attention_heads = d["num_attention_heads"]
        self.intermediate_size = d["intermediate_size"]
        self.max_position_embeddings = d.get("max_position_embeddings", 512)
        self.type_vocab_size = d.get("type_vocab_size", 2)
        self.model_type = d.get("model_type", "bert")


class Embeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, input_ids, token_type_ids):
        s = input_ids.shape[1]
        position_ids = torch.arange(s).unsqueeze(0)
        e = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        e = e + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(e))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.n = c.num_attention_heads
        self.d = h // self.n
        self.query = nn.Linear(h, h)
        self.key = nn.Linear(h, h)
        self.value = nn.Linear(h, h)
        self.attn_out = nn.Linear(h, h)
        self.ln1 = nn.LayerNorm(h, eps=1e-12)
        self.inter = nn.Linear(h, c.intermediate_size)
        self.out = nn.Linear(c.intermediate_size, h)
        self.ln2 = nn.LayerNorm(h, eps=1e-12)

    def forward(self, x, mask):
        # BertAttention: the self-attention's locals die when it returns; its output stays alive
        # through BertSelfOutput (dense, dropout, LayerNorm). feed_forward_chunk: the intermediate
        # output stays alive through BertOutput.
        o = self.self_attention(x, mask)
        a = self.ln1(F.dropout(self.attn_out(o), 0.1, self.training) + x)
        del o
        i = F.gelu(self.inter(a))
        return self.ln2(F.dropout(self.out(i), 0.1, self.training) + a)

    def self_attention(self, x, mask):
        b, s, h = x.shape
        shape = (b, s, self.n, self.d)
        q = self.query(x).view(shape).transpose(1, 2)
        k = self.key(x).view(shape).transpose(1, 2)
        v = self.value(x).view(shape).transpose(1, 2)
        w = torch.matmul(q, k.transpose(2, 3)) * (self.d ** -0.5)
        w = w + mask
        w = F.softmax(w, dim=-1)
        w = F.dropout(w, p=0.1, training=self.training)
        return torch.matmul(w, v).transpose(1, 2).contiguous().reshape(b, s, h)


class Bert(nn.Module):
    def __init__(self, c, head="pooling", num_labels=2):
        super().__init__()
        self.c = c
        self.head = head
        self.embeddings = Embeddings(c)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.num_hidden_layers))
        h = c.hidden_size
        if head != "mlm":
            self.pooler = nn.Linear(h, h)
        if head == "mlm":
            self.transform = nn.Linear(h, h)
            self.transform_ln = nn.LayerNorm(h, eps=1e-12)
            self.decoder_bias = nn.Parameter(torch.zeros(c.vocab_size))
        if head == "classification":
            self.classifier = nn.Linear(h, num_labels)

    def encode(self, input_ids, token_type_ids, attention_mask):
        x = self.embeddings(input_ids, token_type_ids)
        b, s = input_ids.shape
        # get_extended_attention_mask: (b, 1, 1, s) in the activation dtype
        ext = attention_mask[:, None, None, :].to(x.dtype)
        mask = (1.0 - ext) * torch.finfo(x.dtype).min
        del ext
        for layer in self.layers:
            x = layer(x, mask)
        pooled = torch.tanh(self.pooler(x[:, 0])) if hasattr(self, "pooler") else None
        return x, pooled

    def forward(self, input_ids, token_type_ids, attention_mask, labels=None):
        x, pooled = self.encode(input_ids, token_type_ids, attention_mask)
        if self.head == "mlm":
            t = self.transform_ln(F.gelu(self.transform(x)))
            scores = F.linear(t, self.embeddings.word_embeddings.weight, self.decoder_bias)
            return F.cross_entropy(scores.view(-1, self.c.vocab_size), labels.view(-1))
        if self.head == "classification":
            logits = self.classifier(F.dropout(pooled, 0.1, self.training))
            return F.cross_entropy(logits, labels)
        return x, pooled


def pool(token_embeddings, attention_mask, mode="mean"):
    """sentence_transformers.models.Pooling.forward (3.0-5.3) for one mode: mean, cls or lasttoken."""
    if mode == "cls":
        vec = token_embeddings[:, 0]
    else:
        m = attention_mask.unsqueeze(-1).expand(token_embeddings.size()).to(token_embeddings.dtype)
        if mode == "lasttoken":
            bs, seq_len, hidden_dim = token_embeddings.shape
            values, indices = attention_mask.flip(1).max(1)
            indices = torch.where(values == 0, seq_len - 1, indices)
            gather_indices = seq_len - indices - 1
            gather_indices = gather_indices.unsqueeze(-1).repeat(1, hidden_dim).unsqueeze(1)
            vec = torch.gather(token_embeddings * m, 1, gather_indices).squeeze(dim=1)
        else:
            vec = torch.sum(token_embeddings * m, 1) / torch.clamp(m.sum(1), min=1e-9)
    return torch.cat([vec], 1)  # output_vector = torch.cat(output_vectors, 1)


def mean_pool(token_embeddings, attention_mask):
    return pool(token_embeddings, attention_mask, "mean")


def mnrl_loss(model, columns):
    """sentence-transformers MultipleNegativesRankingLoss: one forward per column. Each column's
    features dict keeps its token embeddings until compute_loss returns the loss."""
    reps, features = [], []
    for ids, types, am in columns:
        x, pooled = model(ids, types, am)
        reps.append(mean_pool(x, am))
        features.append(x)
        del x, pooled
    return ranking_loss(reps)


def llm2vec_pool(last_hidden_states, attention_mask, mode="mean"):
    """LLM2Vec.get_pooling (left padding; no padding here): per-sequence means stacked, the last
    token (a view), or the bos token (boolean indexing: a copy)."""
    if mode == "lasttoken":
        return last_hidden_states[:, -1]
    if mode == "cls":
        first = torch.zeros_like(attention_mask, dtype=torch.bool)
        first[:, 0] = True
        return last_hidden_states[first]
    seq_lengths = attention_mask.sum(dim=-1)
    return torch.stack([last_hidden_states[i, -int(length):, :].mean(dim=0)
                        for i, length in enumerate(seq_lengths)], dim=0)


def decoder_mnrl_loss(model, columns, mode, library="sentence-transformers"):
    """The same with a decoder's last hidden state (AutoModel: no LM head) and `mode` pooling.
    LLM2Vec's trainer keeps only the pooled embeddings (LLM2Vec.forward pools and returns)."""
    reps, features = [], []
    for ids, am in columns:
        x = model(ids, am)
        if library == "llm2vec":
            reps.append(llm2vec_pool(x, am, mode))
        else:
            reps.append(pool(x, am, mode))
            features.append(x)
        del x
    return ranking_loss(reps)


def ranking_loss(reps):
    """MultipleNegativesRankingLoss on the columns' embeddings: the first column's rows are the
    anchors, every other column's the candidates; scale 20, in-batch negatives."""
    anchors = reps[0]
    candidates = torch.cat(reps[1:])
    a = F.normalize(anchors, p=2, dim=1)
    c = F.normalize(candidates, p=2, dim=1)
    scores = torch.mm(a, c.transpose(0, 1)) * 20.0
    labels = torch.arange(anchors.size(0))
    return F.cross_entropy(scores, labels)


def gradcache_loss(embed, columns, mini_batch_size, loss_context=contextlib.nullcontext):
    """sentence-transformers' CachedMultipleNegativesRankingLoss (GradCache, 3.x-5.x) around
    `embed(mini_batch, with_grad)`, where a mini-batch is a slice of each of a column's tensors:
    1) every column embedded in mini-batches without grad (detached embeddings that require grad);
    2) the loss per anchor mini-batch, each backward at once, caching d(loss)/d(embedding); 3) in
    the loss's backward hook, each mini-batch embedded again with grad and backward from
    dot(embedding, cached gradient). Returns the detached loss carrying the hook."""
    def minibatches(col):
        for b in range(0, col[0].size(0), mini_batch_size):
            yield tuple(x[b:b + mini_batch_size] for x in col)

    reps = [[embed(mb, False).detach().requires_grad_() for mb in minibatches(col)] for col in columns]
    embeddings_a = torch.cat(reps[0])
    embeddings_b = torch.cat([torch.cat(r) for r in reps[1:]])
    batch_size = len(embeddings_a)
    labels = torch.arange(batch_size)
    losses = []
    for b in range(0, batch_size, mini_batch_size):
        e = b + mini_batch_size
        with loss_context():
            a = F.normalize(embeddings_a[b:e], p=2, dim=1)
            c = F.normalize(embeddings_b, p=2, dim=1)
            scores = torch.mm(a, c.transpose(0, 1)) * 20.0
            loss_mbatch = F.cross_entropy(scores, labels[b:e]) * len(scores) / batch_size
        loss_mbatch.backward()
        losses.append(loss_mbatch.detach())
    loss = sum(losses).requires_grad_()
    cache = [[r.grad for r in rs] for rs in reps]
    del reps, embeddings_a, embeddings_b

    def hook(grad_output):
        with torch.enable_grad():
            for col, grads in zip(columns, cache):
                for mb, grad in zip(minibatches(col), grads):
                    r = embed(mb, True)
                    surrogate = torch.dot(r.flatten(), grad.flatten()) * grad_output
                    surrogate.backward()
        return None

    loss.register_hook(hook)
    return loss


def cached_mnrl_loss(model, columns, mini_batch_size):
    """GradCache with a BERT-family model and mean pooling (columns: ids, token types, mask)."""
    def embed(mb, with_grad):
        ids, types, am = mb
        with torch.set_grad_enabled(with_grad):
            x, pooled = model(ids, types, am)
            return mean_pool(x, am)

    return gradcache_loss(embed, columns, mini_batch_size)


def decoder_cached_mnrl_loss(model, columns, mode, mini_batch_size, autocast=None):
    """GradCache with a decoder embedding model (AutoModel, `mode` pooling; columns: ids, mask).
    The embedding model's forward runs under its own autocast context each call, as accelerate
    wraps model.forward, so the mini-batches embedded inside the backward hook are autocast too."""
    def in_autocast():
        return torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None)

    def embed(mb, with_grad):
        ids, am = mb
        with torch.set_grad_enabled(with_grad), in_autocast():
            return pool(model(ids, am), am, mode)

    return gradcache_loss(embed, columns, mini_batch_size, in_autocast)

"""StarCoder2's causal LM written to follow transformers' *eager* code path in
models/starcoder2/modeling_starcoder2.py (4.5x, read at huggingface/transformers 00d4b3d2), op for
op, for the CPU measurements (docs/models.md#starcoder2): nn.LayerNorm with a bias, q/k/v/o with
biases (use_bias), the Llama rotary embedding and eager attention (hf_llama) with dropout on the
probabilities (attention_dropout), residual_dropout after o_proj and after the MLP, the non-gated
MLP c_fc -> gelu_pytorch_tanh -> c_proj, embedding_dropout on the embeddings, one (b, 1, s, s)
mask (the sliding-window one when sliding_window is set, else the causal one), tied embeddings by
default.
"""
import torch
import torch.nn as nn

import hf_gemma3
import hf_llama


class Config(hf_llama.Config):
    def __init__(self, d):
        d = dict(d)
        d.setdefault("tie_word_embeddings", True)
        super().__init__(d)
        bias = d.get("use_bias", True)
        self.attention_bias = bias
        self.mlp_bias = bias
        self.norm_epsilon = d.get("norm_epsilon", 1e-5)
        self.sliding_window = d.get("sliding_window")
        self.residual_dropout = d.get("residual_dropout", 0.0)
        self.embedding_dropout = d.get("embedding_dropout", 0.0)
        self.attention_dropout = d.get("attention_dropout", 0.0)


class Starcoder2MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.c_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)
        self.act = nn.GELU(approximate="tanh")
        self.residual_dropout = config.residual_dropout

    def forward(self, hidden_states):
        hidden_states = self.c_fc(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.c_proj(hidden_states)
        return nn.functional.dropout(hidden_states, p=self.residual_dropout, training=self.training)


class Starcoder2Attention(hf_llama.LlamaAttention):
    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.attention_dropout = config.attention_dropout
        self.residual_dropout = config.residual_dropout

    def forward(self, hidden_states, position_embeddings, attention_mask):
        attn_output, attn_weights = super().forward(hidden_states, position_embeddings, attention_mask)
        attn_output = nn.functional.dropout(attn_output, p=self.residual_dropout, training=self.training)
        return attn_output, attn_weights


class Starcoder2DecoderLayer(hf_llama.LlamaDecoderLayer):
    def __init__(self, config, layer_idx):
        hf_llama.GradientCheckpointingLayer.__init__(self)
        self.self_attn = Starcoder2Attention(config, layer_idx)
        self.mlp = Starcoder2MLP(config)
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.norm_epsilon)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=config.norm_epsilon)


class Starcoder2Model(hf_llama.CheckpointableModel):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([Starcoder2DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_epsilon)
        self.rotary_emb = hf_llama.LlamaRotaryEmbedding(config)
        self.embedding_dropout = config.embedding_dropout

    def forward(self, input_ids, attention_mask):
        inputs_embeds = self.embed_tokens(input_ids)
        position_ids = torch.arange(0, inputs_embeds.shape[1]).unsqueeze(0)
        if self.config.sliding_window is None:
            mask = hf_llama.make_causal_mask(attention_mask, inputs_embeds.dtype, inputs_embeds.device)
        else:
            full, mask = hf_gemma3.eager_masks(attention_mask, inputs_embeds.dtype, self.config.sliding_window, False)
            del full  # create_sliding_window_causal_mask builds only the sliding one
        hidden_states = nn.functional.dropout(inputs_embeds, p=self.embedding_dropout, training=self.training)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, attention_mask=mask, position_embeddings=position_embeddings)
        hidden_states = self.norm(hidden_states)
        return hidden_states


class Starcoder2ForCausalLM(hf_llama.LlamaForCausalLM):
    base_model_class = Starcoder2Model

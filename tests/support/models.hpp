// Model specs built by hand for tests (independent of the catalog files).
#pragma once

#include "memplan/model.hpp"

namespace memplan::testing {

// meta-llama/Llama-3.1-8B config.json
inline ModelSpec llama31_8b() {
  ModelSpec m;
  m.name = "llama-3.1-8b";
  m.model_type = "llama";
  m.vocab_size = 128256;
  m.hidden_size = 4096;
  m.intermediate_size = 14336;
  m.num_layers = 32;
  m.num_heads = 32;
  m.num_kv_heads = 8;
  m.head_dim = 128;
  m.max_position_embeddings = 131072;
  m.torch_dtype = "bfloat16";
  return m;
}

// answerdotai/ModernBERT-base config.json (ModernBertConfig defaults for what it leaves out):
// 22 layers of 768, 12 heads, GeGLU of 1,152, global attention every third layer, a 128-token
// local window, no biases except the MLM decoder's. `layers` and `vocab` shrink it for the step
// tests, the rest kept.
inline ModelSpec modernbert_base(int layers = 22, std::int64_t vocab = 50368) {
  ModelSpec m;
  m.name = "modernbert-base";
  m.model_type = "modernbert";
  m.encoder = true;
  m.vocab_size = vocab;
  m.hidden_size = 768;
  m.intermediate_size = 1152;
  m.num_layers = layers;
  m.num_heads = m.num_kv_heads = 12;
  m.head_dim = 64;
  m.max_position_embeddings = 8192;
  m.norm = NormKind::kLayerNorm;
  m.activation = Activation::kGelu;
  m.gated_mlp = true;
  m.tie_word_embeddings = true;
  m.global_attn_every_n_layers = 3;
  m.local_attention = 128;
  return m;
}

// What BERT-base-shaped encoders share: 768 wide, 12 heads of 64, a GELU MLP of 3,072 with
// biases, LayerNorm with bias, the MLM decoder tied to the word embeddings.
inline void bert_base_shape(ModelSpec& m, int layers, std::int64_t vocab) {
  m.encoder = true;
  m.vocab_size = vocab;
  m.hidden_size = 768;
  m.intermediate_size = 3072;
  m.num_layers = layers;
  m.num_heads = m.num_kv_heads = 12;
  m.head_dim = 64;
  m.max_position_embeddings = 512;
  m.norm = NormKind::kLayerNorm;
  m.norm_bias = true;
  m.qkv_bias = m.o_bias = m.mlp_bias = true;
  m.activation = Activation::kGelu;
  m.gated_mlp = false;
  m.tie_word_embeddings = true;
}

// bert-base-uncased's config.json (BertConfig defaults for the rest): 12 layers, learned absolute
// positions, token types, the pooler, dropout 0.1.
inline ModelSpec bert_base_uncased() {
  ModelSpec m;
  m.name = "bert-base-uncased";
  m.model_type = "bert";
  bert_base_shape(m, 12, 30522);
  m.type_vocab_size = 2;
  m.learned_positions = true;
  m.pooler = true;
  m.hidden_dropout = m.attention_dropout = 0.1;
  return m;
}

// microsoft/deberta-v3-base's config.json (docs/formulas.md#deberta): relative attention over
// 256 position buckets, share_att_key, p2c|c2p, LayerNorm-ed rel_embeddings, no absolute positions.
inline ModelSpec deberta_v3_base(int layers = 12, std::int64_t vocab = 128100) {
  ModelSpec m;
  m.name = "deberta-v3-base";
  m.model_type = "deberta-v2";
  bert_base_shape(m, layers, vocab);
  m.relative_span = 256;
  m.relative_buckets = true;
  m.c2p = m.p2c = true;
  m.rel_layer_norm = true;
  return m;
}

// A toy Llama (the "gqa" shape of tools/measure/cases.py).
inline ModelSpec toy_llama(int layers = 4) {
  ModelSpec m;
  m.name = "toy";
  m.model_type = "llama";
  m.vocab_size = 8000;
  m.hidden_size = 256;
  m.intermediate_size = 688;
  m.num_layers = layers;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 64;
  return m;
}

// toy_llama with Mixtral's MoE MLP: 8 routed experts of width 128, top-2.
inline ModelSpec toy_mixtral(int layers = 4) {
  ModelSpec m = toy_llama(layers);
  m.model_type = "mixtral";
  m.moe.num_experts = 8;
  m.moe.experts_per_token = 2;
  m.moe.expert_intermediate_size = 128;
  return m;
}

// google/gemma-3-27b-pt's language model (text_config with Gemma3TextConfig's defaults): 62
// layers, every sixth from 5 attending in full, the rest over a 1,024-token window.
inline ModelSpec gemma3_27b_text() {
  ModelSpec m;
  m.name = "gemma-3-27b-text";
  m.model_type = "gemma3_text";
  m.vocab_size = 262208;
  m.hidden_size = 5376;
  m.intermediate_size = 21504;
  m.num_layers = 62;
  m.num_heads = 32;
  m.num_kv_heads = 16;
  m.head_dim = 128;
  m.activation = Activation::kGeluTanh;
  m.norms_per_layer = 4;
  m.qk_norm = true;
  m.scale_embeddings = true;
  m.tie_word_embeddings = true;
  m.max_position_embeddings = 131072;
  m.torch_dtype = "bfloat16";
  m.sliding_window = 1024;
  for (int l = 5; l < 62; l += 6) m.full_attention_layers.push_back(l);
  return m;
}

// A small Qwen2.5-VL: a Qwen2 language model (hidden 128) and a 3-block vision tower of width 64
// (docs/formulas.md#vision-language-models).
inline ModelSpec tiny_qwen25_vl() {
  ModelSpec m;
  m.name = "tiny-qwen2.5-vl";
  m.model_type = "qwen2";
  m.vocab_size = 1000;
  m.hidden_size = 128;
  m.intermediate_size = 256;
  m.num_layers = 2;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 32;
  m.qkv_bias = true;
  m.torch_dtype = "bfloat16";
  VisionSpec& v = m.vision;
  v.kind = VisionKind::kQwen25Vl;
  v.model_type = "qwen2_5_vl";
  v.depth = 3;
  v.hidden_size = 64;
  v.intermediate_size = 96;
  v.num_heads = 4;
  v.patch_size = 14;
  v.temporal_patch_size = 2;
  v.spatial_merge_size = 2;
  v.window_size = 112;
  v.fullatt_blocks = {2};
  return m;
}

// meta-llama/Llama-3.2-11B-Vision by hand (configs/models/llama-3.2-11b-vision.json):
// 10,670,220,835 parameters.
inline ModelSpec llama32_11b_vision() {
  ModelSpec m;
  m.name = "meta-llama/Llama-3.2-11B-Vision-Instruct";
  m.model_type = "mllama";
  m.vocab_size = 128256;
  m.hidden_size = 4096;
  m.intermediate_size = 14336;
  m.num_layers = 40;
  m.num_heads = 32;
  m.num_kv_heads = 8;
  m.head_dim = 128;
  m.torch_dtype = "bfloat16";
  m.cross_attention_layers = {3, 8, 13, 18, 23, 28, 33, 38};
  m.extra_embedding_rows = 8;
  VisionSpec& v = m.vision;
  v.kind = VisionKind::kMllama;
  v.model_type = "mllama";
  v.depth = 32;
  v.global_depth = 8;
  v.hidden_size = 1280;
  v.intermediate_size = 5120;
  v.num_heads = 16;
  v.patch_size = 14;
  v.image_size = 560;
  v.max_num_tiles = 4;
  v.max_aspect_ratio_id = 8;
  v.intermediate_layers = {3, 7, 15, 23, 30};
  return m;
}

// A small Llama 3.2 Vision (mllama): 5 decoder layers, 1 and 3 cross-attention; a 4 + 2 layer
// tower of 64 wide on 56-pixel tiles (4 x 4 patches + the class token = 17 positions, padded to
// 24), intermediate layers 1 and 3 (output 192 wide). tools/measure/mllama_cases.json's model.
inline ModelSpec tiny_mllama() {
  ModelSpec m;
  m.name = "tiny-mllama";
  m.model_type = "mllama";
  m.vocab_size = 1000;
  m.hidden_size = 128;
  m.intermediate_size = 256;
  m.num_layers = 5;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 32;
  m.torch_dtype = "bfloat16";
  m.cross_attention_layers = {1, 3};
  m.extra_embedding_rows = 8;
  VisionSpec& v = m.vision;
  v.kind = VisionKind::kMllama;
  v.model_type = "mllama";
  v.depth = 4;
  v.global_depth = 2;
  v.hidden_size = 64;
  v.intermediate_size = 128;
  v.num_heads = 4;
  v.patch_size = 14;
  v.image_size = 56;
  v.max_num_tiles = 4;
  v.max_aspect_ratio_id = 8;
  v.intermediate_layers = {1, 3};
  return m;
}

}  // namespace memplan::testing

// ModelSpec: the architecture facts that decide memory, normalized from a Hugging Face
// config.json (any supported model_type) or the built-in catalog. Everything else in the engine
// (parameter counts, LoRA targets, quantized layers, activations) is derived from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memplan/result.hpp"

namespace memplan {

enum class Activation { kSilu, kGelu, kGeluTanh, kRelu, kRelu2 };  // kRelu2: relu(x)^2 (Nemotron-H)
enum class NormKind { kRmsNorm, kLayerNorm };

// The head on top of an encoder (docs/formulas.md#encoders): which AutoModel class is trained.
enum class EncoderHead {
  kPooling,                 // AutoModel (BertModel) as sentence-transformers loads it: no vocabulary head
  kMaskedLm,                // *ForMaskedLM: transform (dense, GELU, LayerNorm) + decoder tied to the embedding
  kSequenceClassification,  // *ForSequenceClassification: pooler/head + classifier (num_labels)
};

// sentence-transformers' Pooling module (1_Pooling/config.json): how the token embeddings become
// one vector per text (docs/formulas.md#pooling).
enum class PoolingMode {
  kMean,       // pooling_mode_mean_tokens: the default for a model without a Pooling config
  kCls,        // pooling_mode_cls_token: the first token (BGE, GTE v1.5, Arctic)
  kLastToken,  // pooling_mode_lasttoken: the last non-padding token (Qwen3-Embedding, e5-mistral, gte-Qwen2)
};

// Which library wraps an embedding model (docs/formulas.md#pooling): its pooling code and what its
// trainer keeps alive differ.
enum class EmbeddingLibrary {
  kSentenceTransformers,  // Pooling module; the trainer keeps each column's features dict until the loss
  kLlm2Vec,               // LLM2Vec.get_pooling: per-sequence means, a view of the last token
};

// Mixture-of-experts layout. num_experts == 0 means a dense model.
struct MoeSpec {
  int num_experts = 0;                          // routed experts per MoE layer
  int experts_per_token = 0;                    // top-k
  std::int64_t expert_intermediate_size = 0;    // width of one routed expert's MLP
  int num_shared_experts = 0;                   // DeepSeek / Qwen2-MoE always-active experts
  std::int64_t shared_intermediate_size = 0;    // width of ONE shared expert
  bool shared_expert_gate = false;              // Qwen2-MoE: Linear(hidden, 1) gating the shared expert
  int first_dense_layers = 0;                   // DeepSeek first_k_dense_replace: leading dense layers
  int layer_freq = 1;                           // DeepSeek moe_layer_freq / Qwen decoder_sparse_step
  bool router_bias = false;
  // A layer at or past first_dense_layers is MoE when (layer + layer_freq_offset) % layer_freq == 0:
  // DeepSeek counts from 0 (offset 0), Qwen2/3-MoE from 1 (offset 1), as their modeling code does.
  int layer_freq_offset = 0;
  std::vector<int> dense_layers;                // Qwen mlp_only_layers: always dense
  // Expert parallelism: the routed experts one GPU holds (0: all). Set only on the per-GPU
  // model the engine simulates; the router still scores every expert.
  int local_experts = 0;

  bool enabled() const { return num_experts > 0; }
  bool is_moe_layer(int layer) const;
  bool operator==(const MoeSpec&) const = default;
};

// The token mixer of one layer of a hybrid model (docs/models.md#hybrid-layers).
enum class MixerKind {
  kAttention,      // the model's self-attention
  kGatedDeltaNet,  // Qwen3-Next Qwen3NextGatedDeltaNet: linear attention with a delta-rule state
  kMamba2,         // Nemotron-H NemotronHMamba2Mixer: Mamba-2 SSD
  kShortConv,      // LFM2 Lfm2ShortConv: gated depthwise short convolution
  kNone,           // Nemotron-H MLP / MoE layers: no mixer at all
};

// Per-layer layout of a hybrid model. Empty mixers: every layer attends (all other models).
struct HybridSpec {
  std::vector<MixerKind> mixers;   // one per layer
  std::vector<bool> no_ffn;        // Nemotron-H: true for a layer without MLP / MoE (empty: all have one)
  // Gated DeltaNet (linear_num_key_heads, linear_key_head_dim, ...; linear_conv_kernel_dim).
  int gdn_key_heads = 0, gdn_value_heads = 0;
  std::int64_t gdn_key_head_dim = 0, gdn_value_head_dim = 0;
  // Mamba-2 (mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups, chunk_size).
  int mamba_heads = 0, mamba_groups = 0;
  std::int64_t mamba_head_dim = 0, ssm_state = 0, mamba_chunk = 0;
  bool mamba_conv_bias = true;     // use_conv_bias
  bool mamba_proj_bias = false;    // use_bias: in_proj and out_proj
  int conv_kernel = 0;             // GDN linear_conv_kernel_dim, Mamba conv_kernel, LFM2 conv_L_cache
  bool short_conv_bias = false;    // LFM2 conv_bias: in_proj, conv and out_proj
  // Qwen3.5 (Qwen3_5GatedDeltaNet): in_proj_qkv, in_proj_z, in_proj_b and in_proj_a in place of
  // Qwen3-Next's in_proj_qkvz and in_proj_ba (the same weights, no per-head reordering).
  bool gdn_split_projections = false;
  // Falcon-H1 (docs/models.md#falcon-h1): every layer runs the self-attention beside its Mamba-2
  // mixer on the same normed input. mamba_rms_norm: the gated RMSNorm exists (else y * silu(gate));
  // mamba_norm_before_gate: it norms y before the gate; projectors_bias: out_proj's bias (unset:
  // use_bias / mamba_proj_bias, as Nemotron-H and Granite 4.0 give both projections).
  bool parallel_attention = false;
  bool mamba_norm = true;
  bool mamba_norm_before_gate = false;
  std::optional<bool> mamba_out_bias;
  bool mamba_out_proj_bias() const { return mamba_out_bias.value_or(mamba_proj_bias); }

  bool enabled() const { return !mixers.empty(); }
  MixerKind mixer(int layer) const {
    return layer >= 0 && static_cast<std::size_t>(layer) < mixers.size() ? mixers[static_cast<std::size_t>(layer)]
                                                                           : MixerKind::kAttention;
  }
  bool has_ffn(int layer) const {
    return !(layer >= 0 && static_cast<std::size_t>(layer) < no_ffn.size() && no_ffn[static_cast<std::size_t>(layer)]);
  }
  std::int64_t gdn_key_dim() const { return gdn_key_heads * gdn_key_head_dim; }
  std::int64_t gdn_value_dim() const { return gdn_value_heads * gdn_value_head_dim; }
  std::int64_t mamba_inner() const { return mamba_heads * mamba_head_dim; }
  bool operator==(const HybridSpec&) const = default;
};

// The vision tower of a vision-language model (docs/formulas.md#vision-language-models), as
// transformers builds it for *ForConditionalGeneration. depth == 0: a text-only model.
enum class VisionKind {
  kNone,
  kQwen2Vl,   // Qwen2-VL: LayerNorm, fc1/QuickGELU/fc2 MLP, LayerNorm patch merger
  kQwen25Vl,  // Qwen2.5-VL: RMSNorm, gated SiLU MLP with biases, windowed attention, RMSNorm merger
  kSiglip,    // Gemma 3: SigLIP ViT (LayerNorm, GELU-tanh MLP) + average pooling + RMSNorm projector
  kMllama,    // Llama 3.2 Vision: tiled ViT (local + gated global layers) read by cross-attention layers
  kQwen3Vl,   // Qwen3-VL: LayerNorm, fc1/GELU-tanh/fc2 MLP, learned positions, DeepStack mergers into early layers
  kLlama4,    // Llama 4: unfold patch Linear, 2D-rope ViT over 336-px tiles, pixel-shuffle adapter, projector
  kGemma4,    // Gemma 4: counted (patch Linear, 2D position table, q/k/v-normed ViT, gated GELU-tanh MLP), not simulated
  kPixtral,   // Mistral 3 (Mistral Small 3.1/3.2, Ministral 3): Pixtral ViT + patch merger, counted, not simulated
  kGemma3n,   // Gemma 3n: timm's MobileNetV5-300M and Gemma3nMultimodalEmbedder, counted, not simulated
};

struct VisionSpec {
  VisionKind kind = VisionKind::kNone;
  int depth = 0;                        // vision blocks
  std::int64_t hidden_size = 0;         // ViT width (Qwen2-VL: embed_dim)
  std::int64_t intermediate_size = 0;   // ViT MLP width (Qwen2-VL: embed_dim * mlp_ratio)
  int num_heads = 0;
  std::int64_t patch_size = 14;
  int temporal_patch_size = 1;          // Qwen: 2 (a still image fills both frames of a patch)
  int spatial_merge_size = 1;           // Qwen: 2 (2 x 2 patches per image token)
  std::int64_t image_size = 0;          // SigLIP: the fixed input resolution (Gemma 3: 896)
  std::int64_t tokens_per_image = 0;    // Gemma 3 mm_tokens_per_image (256)
  std::int64_t window_size = 0;         // Qwen2.5-VL: attention window in pixels (112)
  std::vector<int> fullatt_blocks;      // Qwen2.5-VL fullatt_block_indexes
  // Llama 3.2 Vision (mllama): depth counts the local layers ("transformer"); global_depth the
  // gated ones; every image is max_num_tiles tiles of image_size pixels; the outputs of the
  // intermediate_layers are concatenated to the last one (vision_output_dim = hidden x (1 + n)).
  int global_depth = 0;
  int max_num_tiles = 0;
  int max_aspect_ratio_id = 0;          // len(supported_aspect_ratios): 8
  std::vector<int> intermediate_layers;
  std::string model_type;               // the multimodal config's model_type: qwen2_5_vl, qwen2_vl, gemma3
  // Qwen3-VL (docs/models.md#qwen3-vl): the learned position table (num_position_embeddings rows,
  // bilinearly interpolated to the patch grid) and the blocks whose outputs go through a DeepStack
  // merger and are added to the image tokens' hidden states after text layer 0, 1, ...
  std::int64_t num_position_embeddings = 0;
  std::vector<int> deepstack_indexes;
  // Llama 4 (docs/models.md#llama-4): the vision adapter's pixel-shuffle MLP width and output
  // (spatial_merge_size holds 1 / pixel_shuffle_ratio).
  std::int64_t projector_input_dim = 0;
  std::int64_t projector_output_dim = 0;
  // Mistral 3 (docs/models.md#mistral-3): multimodal_projector_bias on linear_1 and linear_2;
  // projector_input_dim is the vision width times the number of vision_feature_layer entries.
  bool projector_bias = false;
  // Gemma 3n (docs/models.md#gemma-3n): Gemma3nMultimodalEmbedder's embedding rows (vocab_size).
  std::int64_t embed_vocab = 0;

  bool enabled() const { return depth > 0; }
  // Rows of the patch-embedding input: channels x temporal x patch x patch values per patch.
  std::int64_t patch_values() const { return 3 * temporal_patch_size * patch_size * patch_size; }
  // mllama: positions per tile (patches + the class token), and padded to a multiple of 8.
  std::int64_t tile_positions() const { return (image_size / patch_size) * (image_size / patch_size) + 1; }
  std::int64_t tile_positions_padded() const { return (tile_positions() + 7) / 8 * 8; }
  bool operator==(const VisionSpec&) const = default;
};

// A sentence-transformers Dense module after the pooling (N_Dense/config.json): Linear(in, out),
// with its bias if any, then the activation (docs/formulas.md#sentence-transformers-dense).
struct DenseModule {
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  bool bias = true;
  bool tanh = false;  // activation_function torch.nn.Tanh (the module's default); else Identity
  bool operator==(const DenseModule&) const = default;
};

// The audio tower of Gemma 4 E2B / E4B (Gemma4AudioModel, a Conformer; docs/models.md#gemma-4):
// counted with its embedder into the language model, never simulated (audio batches are refused).
struct AudioSpec {
  int depth = 0;                        // num_hidden_layers (0: no audio tower)
  std::int64_t hidden_size = 0;
  int num_heads = 0;
  std::int64_t conv_channels0 = 0;      // subsampling_conv_channels
  std::int64_t conv_channels1 = 0;
  std::int64_t conv_kernel = 0;         // conv_kernel_size of the depthwise convolution
  std::int64_t output_dims = 0;         // output_proj_dims: the embedder's input (Gemma 3n: 0, no output_proj)
  std::int64_t embed_vocab = 0;         // Gemma 3n: Gemma3nMultimodalEmbedder's embedding rows
  bool enabled() const { return depth > 0; }
  bool operator==(const AudioSpec&) const = default;
};

struct ModelSpec {
  std::string name;         // how the user named it: catalog id, short name or path
  std::string model_type;   // HF "model_type": llama, mistral, qwen2, qwen3, gemma2, phi3, gpt2, mixtral...
  // The model_type of the config.json as written, before memplan reads a wrapper's text_config or
  // an unknown type as Llama's layout: what `model.config.model_type` is for PEFT's default LoRA
  // targets (qwen2_5_vl, gemma3, ministral3, an unknown type). "" when it is `model_type`.
  std::string config_model_type;
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;  // dense MLP width
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;                // == num_heads for MHA, 1 for MQA
  std::int64_t head_dim = 0;           // may differ from hidden/heads (Gemma, Qwen3)
  Activation activation = Activation::kSilu;
  bool gated_mlp = true;               // gate/up/down (SwiGLU, GeGLU) vs fc/proj
  NormKind norm = NormKind::kRmsNorm;
  bool norm_bias = false;              // LayerNorm with a bias (GPT-2)
  int norms_per_layer = 2;             // Gemma 2/3 add post-attention and post-MLP norms: 4
  bool qk_norm = false;                // Qwen3, Gemma 3: RMSNorm(head_dim) on q and k
  bool qk_norm_per_head = true;        // false: OLMo 2 normalizes all of q (heads x head_dim) and k
  bool qkv_bias = false;               // Qwen2: bias on q, k, v projections
  bool o_bias = false;
  bool mlp_bias = false;
  bool lm_head_bias = false;
  bool tie_word_embeddings = false;
  bool learned_positions = false;      // GPT-2 wpe: max_position_embeddings x hidden
  std::int64_t max_position_embeddings = 0;
  bool fused_qkv = false;              // one projection for q,k,v (Phi-3 qkv_proj, GPT-2 c_attn)
  bool fused_gate_up = false;          // Phi-3 gate_up_proj
  bool scale_embeddings = false;       // Gemma multiplies embeddings by sqrt(hidden)
  double final_logit_softcap = 0.0;    // Gemma 2: tanh soft-capping of logits
  double attn_logit_softcap = 0.0;     // Gemma 2: tanh soft-capping of attention scores
  // Sliding-window attention (docs/formulas.md#sliding-window-attention): the window in tokens
  // (0: none) and the layers that attend in full despite it, from config.json's layer_types or
  // the model type's pattern (Gemma 2: the odd layers; Gemma 3: every sixth, from 5; Qwen2/3 with
  // use_sliding_window: those below max_window_layers; Mistral, Mixtral, Phi-3: none).
  std::int64_t sliding_window = 0;
  std::vector<int> full_attention_layers;
  // Qwen2-VL / Qwen2.5-VL multimodal rotary embedding: (3, b, s, head_dim) cos/sin tables, and
  // per attention call the mrope sections concatenated into (b, s, head_dim) ones.
  bool mrope = false;
  // Qwen3-VL / Qwen3.5 interleaved MRoPE: the (3, b, s, d / 2) frequencies folded into one plain
  // (b, s, d) table pair (apply_interleaved_mrope). Set for Qwen3.5 text models; Qwen3-VL's is
  // implied by its vision tower.
  bool mrope_interleaved = false;
  std::string torch_dtype;             // dtype the checkpoint is stored in, e.g. "bfloat16"
  MoeSpec moe;
  // ---- Bidirectional encoders (BERT, RoBERTa, XLM-R, DeBERTa-v2/v3, NomicBERT, ModernBERT;
  // docs/formulas.md#encoders).
  // Decoders leave these at their defaults.
  bool encoder = false;                // a bidirectional encoder: no causal mask, no causal LM head
  EncoderHead head = EncoderHead::kPooling;
  // With the pooling head (an encoder's, or a decoder's below): sentence-transformers' Pooling.
  PoolingMode pooling = PoolingMode::kMean;
  EmbeddingLibrary embedding_library = EmbeddingLibrary::kSentenceTransformers;
  // A decoder trained as an embedding model (docs/formulas.md#decoder-embeddings): loaded by
  // sentence-transformers as AutoModel (Qwen3Model, MistralModel: no LM head), pooled; the
  // layers stay causal. Qwen3-Embedding, e5-mistral, gte-Qwen2, or any decoder with --head pooling.
  bool decoder_embedding = false;
  // Gemma 3 use_bidirectional_attention (EmbeddingGemma): every layer attends both ways, the
  // sliding ones within sliding_window of each side; transformers then always builds both masks
  // (docs/formulas.md#embeddinggemma).
  bool bidirectional = false;
  // sentence-transformers Dense modules after the pooling, in order (EmbeddingGemma: 768 -> 3072 -> 768).
  std::vector<DenseModule> st_dense;
  std::int64_t type_vocab_size = 0;    // BERT token_type embeddings (2; RoBERTa/XLM-R 1; ModernBERT 0)
  bool pooler = false;                 // BertPooler (dense + tanh on [CLS]) is part of the model
  int num_labels = 2;                  // sequence classification: classifier outputs
  int global_attn_every_n_layers = 0;  // ModernBERT: global attention every n layers, local otherwise
  std::int64_t local_attention = 0;    // ModernBERT: local attention window (tokens)
  bool mean_pooled_classifier = false; // ModernBERT classifier_pooling "mean" (default "cls": the first token)
  // ModernBERT reference_compile: unset, transformers compiles the MLP, embeddings and MLM head
  // where triton is installed (not modelled: docs/formulas.md#modernbert).
  std::optional<bool> reference_compile;
  // Tied MLM decoder bias (BERT cls.predictions.bias, RoBERTa lm_head.bias): vocab_size values.
  bool decoder_bias = true;
  // Dropout probabilities in training (config.json hidden_dropout_prob / attention_probs_dropout_prob;
  // NomicBERT resid_pdrop / attn_pdrop). p > 0 keeps a mask per dropped tensor.
  double hidden_dropout = 0.1;
  double attention_dropout = 0.1;
  // NomicBERT (docs/formulas.md#nomicbert): mlp_fc2_bias (mlp_bias is mlp_fc1_bias; qkv_bias and
  // o_bias are qkv_proj_bias).
  bool mlp_out_bias = false;
  // DeBERTa-v2/v3 disentangled attention (docs/formulas.md#deberta). relative_span is att_span
  // (pos_ebd_size): position_buckets, else max_relative_positions; 0 without relative_attention.
  // rel_embeddings has 2 x relative_span rows; c2p / p2c are pos_att_type's two terms.
  std::int64_t relative_span = 0;
  bool relative_buckets = false;       // position_buckets > 0: log-bucketed relative positions
  bool c2p = false, p2c = false;
  bool rel_layer_norm = false;         // norm_rel_ebd "layer_norm"
  // MPNet (docs/models.md#mpnet): MPNetEncoder.relative_attention_bias, an Embedding of
  // relative_attention_num_buckets rows x heads whose (b, heads, s, s) bias every layer adds to
  // its attention scores. 0 for every other model.
  std::int64_t relative_attention_buckets = 0;
  // ---- Multi-head latent attention (DeepSeek-V2/V3, Kimi K2; docs/formulas.md#mla). Other
  // models leave kv_lora_rank at 0. head_dim holds qk_head_dim = qk_nope_head_dim + qk_rope_head_dim.
  std::int64_t q_lora_rank = 0;        // 0 (config null): a plain q_proj, as DeepSeek-V2-Lite
  std::int64_t kv_lora_rank = 0;       // width of the compressed K/V latent (kv_a_proj_with_mqa)
  std::int64_t qk_rope_head_dim = 0;   // rotary part of q/k per head; k's is shared by all heads
  std::int64_t qk_nope_head_dim = 0;   // non-rotary part of q/k per head
  std::int64_t v_head_dim = 0;
  // DeepSeek-V3 num_nextn_predict_layers: the MTP module is in the checkpoint (layer 61) but
  // transformers' DeepseekV3ForCausalLM does not load it, so it is not counted.
  int mtp_layers = 0;
  VisionSpec vision;                   // vision-language models: the vision tower and projector
  // Hybrid models (docs/models.md#hybrid-layers): Qwen3-Next, Nemotron-H, LFM2.
  HybridSpec hybrid;
  // Qwen3-Next gated attention: q_proj gives queries and an output gate (2 x heads x head_dim),
  // o_proj's input is attention * sigmoid(gate).
  bool attn_output_gate = false;
  // Llama 3.2 Vision: the decoder layers that are MllamaCrossAttentionDecoderLayer (their K/V
  // read the projected image features), and the embedding rows beyond vocab_size (8: the
  // <|image|> token and 7 reserved; lm_head has vocab_size rows).
  std::vector<int> cross_attention_layers;
  std::int64_t extra_embedding_rows = 0;
  // gpt-oss (docs/models.md#gpt_oss): GptOssAttention.sinks, one learned logit per head that the
  // eager softmax normalizes over with the scores (cat, max, subtract, softmax over s + 1 columns).
  bool attention_sinks = false;
  // DeepSeek-V3.2 lightning indexer (docs/models.md#deepseek-v32): per layer wq_b (q_lora_rank ->
  // heads x head_dim), wk (hidden -> head_dim), k_norm (LayerNorm), weights_proj (hidden -> heads);
  // attention then reads the index_topk keys of highest index score. 0 heads: no indexer.
  int index_heads = 0;
  std::int64_t index_head_dim = 0;
  std::int64_t index_topk = 0;
  // Llama 4 (docs/models.md#llama-4): chunked local attention (attention_chunk_size) on the rotary
  // layers, the NoPE layers (no_rope_layers == 0) attending in full; use_qk_norm: a weightless L2
  // norm of q and k on the rotary layers.
  std::int64_t attention_chunk_size = 0;
  std::vector<int> nope_layers;
  bool qk_l2_norm = false;
  // Gemma 4 (docs/models.md#gemma-4). Full-attention layers use global_head_dim (0: head_dim) and,
  // with attention_k_eq_v, num_global_kv_heads and no v_proj (V is k_proj's output before k_norm).
  // Every attention layer has a weightless v_norm. The last kv_shared_layers layers have no k/v
  // projections or norms: they read the K/V of the last earlier layer of their type; with
  // double_wide_mlp their MLP is 2 x intermediate_size wide. per_layer_input_dim (PLE):
  // embed_tokens_per_layer (per_layer_input_vocab x layers x dim), per_layer_model_projection and its
  // norm, and in every layer per_layer_input_gate / per_layer_projection and a norm.
  // moe_beside_mlp (enable_moe_block): every layer runs its routed experts beside the dense MLP.
  std::int64_t global_head_dim = 0;
  int num_global_kv_heads = 0;
  bool attention_k_eq_v = false;
  bool v_norm = false;
  int kv_shared_layers = 0;
  bool double_wide_mlp = false;
  std::int64_t per_layer_input_dim = 0;
  std::int64_t per_layer_input_vocab = 0;
  bool moe_beside_mlp = false;
  AudioSpec audio;
  // Gemma 3n (docs/models.md#gemma-3n): altup_inputs copies of the residual stream (AltUp, 0: none)
  // with laurel_rank's low-rank residual in every layer; the MatFormer MLP width of each layer
  // (empty: intermediate_size everywhere); the layers whose MLP gate goes through the gaussian
  // top-k (activation_sparsity_pattern > 0). Its KV-shared layers keep their k/v projections.
  int altup_inputs = 0;
  std::int64_t laurel_rank = 0;
  std::vector<std::int64_t> intermediate_sizes;
  std::vector<int> sparse_mlp_layers;

  bool is_encoder() const { return encoder; }
  // Sentence embeddings (pooled, no vocabulary head): an encoder's pooling head or a decoder
  // embedding model. Contrastive training (texts per example) needs one.
  bool embeds() const { return encoder ? head == EncoderHead::kPooling : decoder_embedding; }
  bool is_cross_attention_layer(int layer) const;
  bool is_sliding_layer(int layer) const;
  // Both kinds of layer: Gemma 2 and 3 build a full and a sliding mask each forward.
  bool mixes_attention_kinds() const;
  bool is_mla() const { return kv_lora_rank > 0; }
  // Gemma 4: a layer's head width and K/V heads (full layers may differ), whether its V is its K,
  // and whether it reads an earlier layer's K/V; every other model: head_dim, num_kv_heads, no, no.
  std::int64_t layer_head_dim(int layer) const;
  int layer_kv_heads(int layer) const;
  bool layer_k_eq_v(int layer) const;
  bool is_kv_shared_layer(int layer) const;
  std::int64_t layer_intermediate_size(int layer) const;  // Gemma 4 double_wide_mlp on shared layers
  // Gemma 3 builds a second pair of rotary tables for its sliding layers (rope_local_base_freq),
  // OLMo 3 one without the rope scaling of its full-attention layers.
  bool local_rotary_tables() const { return model_type == "gemma3_text" || model_type == "olmo3"; }
  bool is_modernbert() const { return model_type == "modernbert"; }  // docs/formulas.md#modernbert
  bool is_deberta() const { return model_type == "deberta-v2"; }     // docs/formulas.md#deberta
  bool is_nomic_bert() const { return model_type == "nomic_bert"; }  // docs/formulas.md#nomicbert
  bool is_mpnet() const { return model_type == "mpnet"; }            // docs/models.md#mpnet
  // DeBERTa, MPNet and NomicBERT's remote code have no SDPA or flash path: eager whatever is asked.
  bool eager_attention_only() const { return is_deberta() || is_nomic_bert() || is_mpnet(); }
  bool operator==(const ModelSpec&) const = default;
};

enum class LinearRole { kAttention, kMlp, kRoutedExpert, kSharedExpert, kRouter };

// One nn.Linear (or GPT-2 Conv1D) of a decoder layer: the unit that LoRA targets and that
// bitsandbytes quantizes. Routed experts appear once with count == num_experts.
struct LinearModule {
  std::string name;  // the module name PEFT matches: "q_proj", "gate_up_proj", "w1", "c_attn"
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  bool bias = false;
  int count = 1;     // instances in the layer (routed experts)
  LinearRole role = LinearRole::kAttention;
  // false for a bare weight Parameter (DeepSeek's MoEGate): PEFT cannot wrap it and
  // bitsandbytes does not quantize it, though it counts like a Linear.
  bool nn_linear = true;

  std::int64_t weight_params() const { return in_features * out_features * count; }
  std::int64_t bias_params() const { return bias ? out_features * count : 0; }
};

struct ParameterCounts {
  std::int64_t embedding = 0;           // token embedding (vocab x hidden)
  std::int64_t position_embedding = 0;  // learned positions (GPT-2); encoders: positions + token types
  std::int64_t attention = 0;           // all layers: projections, biases, q/k norms
  std::int64_t mlp = 0;                 // all layers: dense MLP, experts, shared experts, routers
  std::int64_t norms = 0;               // all layers' layer norms plus the final norm
  std::int64_t lm_head = 0;             // 0 when tied to the embedding; encoders: pooler and head
  std::int64_t vision = 0;              // vision-language models: the vision tower
  std::int64_t projector = 0;           // and the projector (Qwen merger, Gemma 3 multi_modal_projector)
  std::int64_t audio = 0;               // Gemma 4 E2B/E4B: the audio tower and its embedder
  std::int64_t per_layer_embedding = 0; // Gemma 4 PLE: embed_tokens_per_layer and per_layer_model_projection + norm
  std::int64_t total = 0;
  std::int64_t layer_linear_weights = 0;  // weights of decoder-layer Linear modules (quantizable)
  std::int64_t active_per_token = 0;      // MoE: parameters one token actually uses
};

// Structural checks (positive sizes, heads dividing, top-k <= experts, a total that fits in
// int64 with room to spare...). Errors name the field and quote its value.
Status validate(const ModelSpec& m);

// The Linear modules of decoder layer `layer` (0-based), in forward order.
std::vector<LinearModule> layer_linears(const ModelSpec& m, int layer);

// Hybrid layers (docs/models.md#hybrid-layers): the name of the attention output projection
// (LFM2: out_proj), the parameters of a layer's mixer that are not Linear weights (convolution
// weights, A_log, dt_bias, D, gated norms), and the layer norms of a layer (Nemotron-H: one).
std::string attention_out_name(const ModelSpec& m);
std::int64_t mixer_params(const ModelSpec& m, int layer);
int layer_norm_count(const ModelSpec& m, int layer);

// Exact parameter count as PyTorch's sum(p.numel() for p in model.parameters()), with
// sentence-transformers' Dense modules (in lm_head) for an embedding model that has them.
ParameterCounts count_parameters(const ModelSpec& m);
// The parameters of those Dense modules alone.
std::int64_t dense_module_params(const ModelSpec& m);

// Encoders (src/core/model_encoders.cpp, docs/formulas.md#encoder-parameters): the Linear modules
// of one encoder layer under the names PEFT matches, and the exact parameter count of the model
// with its head.
std::vector<LinearModule> encoder_layer_linears(const ModelSpec& m);
ParameterCounts count_encoder_parameters(const ModelSpec& m);
// Whether the encoder carries BertPooler: AutoModel (sentence-transformers) and BERT's
// sequence classifier do; *ForMaskedLM and RoBERTa's classifier are built without it.
bool encoder_has_pooler(const ModelSpec& m);
// Whether the encoder has an absolute position table: the BERT family always; DeBERTa only with
// position_biased_input (learned_positions); ModernBERT never (rotary).
bool encoder_has_position_table(const ModelSpec& m);

// Vision-language models (src/core/model_vision.cpp, docs/formulas.md#vision-language-models).
// The Linear modules of one vision block under the names PEFT matches (qkv/proj, q_proj/...).
std::vector<LinearModule> vision_block_linears(const VisionSpec& v);
// The Linear modules of the projector, into the language model's hidden size.
std::vector<LinearModule> vision_projector_linears(const VisionSpec& v, std::int64_t text_hidden);
struct VisionCounts {
  std::int64_t tower = 0;
  std::int64_t projector = 0;
};
VisionCounts count_vision_parameters(const VisionSpec& v, std::int64_t text_hidden);
// Gemma 4's audio tower (tower) and embed_audio (projector) into the language model's hidden size.
VisionCounts count_audio_parameters(const AudioSpec& a, std::int64_t text_hidden);
// What one image of height x width pixels becomes, as the model's image processor resizes it:
// patches through the tower and tokens in the language model's sequence.
struct ImageGrid {
  std::int64_t height = 0, width = 0;  // after resizing
  std::int64_t rows = 0, cols = 0;     // patches down and across
  std::int64_t patches = 0;            // rows x cols
  std::int64_t tokens = 0;
};
ImageGrid image_grid(const VisionSpec& v, std::int64_t height, std::int64_t width);
// Llama 4: the (rows, cols) of tiles Llama4ImageProcessorFast fits an image into (get_best_fit
// over the grids of at most max_patches tiles of `tile` pixels; docs/formulas.md#llama-4-vision).
std::pair<std::int64_t, std::int64_t> llama4_tile_grid(std::int64_t height, std::int64_t width, std::int64_t tile,
                                                       int max_patches = 16);
// mllama: the width of the tower's output, the last layer concatenated with the intermediate ones.
std::int64_t mllama_output_dim(const VisionSpec& v);
// The resolution memplan assumes when none is given (docs/formulas.md#image-tokens).
std::int64_t default_image_side(const VisionSpec& v);
std::string to_string(VisionKind k);
Status validate_vision(const VisionSpec& v);

std::string to_string(Activation a);
std::string to_string(NormKind n);
std::string to_string(EncoderHead h);  // pooling, mlm, classification
Result<EncoderHead> parse_encoder_head(const std::string& s);
std::string to_string(PoolingMode p);  // mean, cls, lasttoken (sentence-transformers' names)
Result<PoolingMode> parse_pooling_mode(const std::string& s);
std::string to_string(EmbeddingLibrary l);  // sentence-transformers, llm2vec

}  // namespace memplan

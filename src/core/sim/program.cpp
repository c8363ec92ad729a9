#include "core/sim/program.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <functional>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "core/sim/fused_ce.hpp"
#include "core/sim/gpt_oss.hpp"
#include "core/sim/llama4.hpp"
#include "core/sim/mla.hpp"
#include "core/sim/sentence.hpp"
#include "memplan/bytes.hpp"
#include "memplan/stack.hpp"

namespace memplan::sim {

namespace {

struct LinearParams {
  LinearModule mod;
  int w = -1, b = -1;   // base weight and bias
  int A = -1, B = -1;   // LoRA adapters
  bool quant4 = false;
  bool quant8 = false;
};

struct LayerParams {
  std::map<std::string, LinearParams> lin;  // by module name (MoE: routed/shared prefixes)
  std::vector<int> norms;                    // weights (and biases) of the layer norms, in order
  int q_norm = -1, k_norm = -1;
  bool moe = false;
  bool cross = false;                        // mllama MllamaCrossAttentionDecoderLayer
  bool sliding = false;                      // a sliding-window attention layer (Gemma 2/3, Mistral v0.1)
  int attn_gate = -1, mlp_gate = -1;         // its tanh gates (mllama global vision layers: gate_attn/gate_ffn)
  // Hybrid layers (docs/models.md#hybrid-layers): the mixer, whether an MLP / MoE follows, and
  // the mixer's non-Linear parameters (conv1d weight and bias, dt_bias, A_log, D, gated norm).
  MixerKind mixer = MixerKind::kAttention;
  bool ffn = true;
  int conv_w = -1, conv_b = -1, dt_bias = -1, a_log = -1, d = -1, mix_norm = -1;
  int sinks = -1;  // gpt-oss GptOssAttention.sinks (docs/models.md#gpt_oss)
  bool nope = false;  // Llama 4: a NoPE layer (no_rope_layers[i] == 0; docs/models.md#llama-4)
  // The layer's attention shape (Gemma 4's full layers differ: docs/models.md#gemma-4) and MLP width.
  std::int64_t head_dim = 0;
  int kv_heads = 0;
  std::int64_t intermediate = 0;
  bool kv_shared = false;  // Gemma 4: reads an earlier layer's K/V
  bool store_kv = false;   // Gemma 4: the last non-shared layer of its type, whose K/V the shared ones read
  bool k_eq_v = false;     // Gemma 4: V is k_proj's output
  bool sparse_mlp = false; // Gemma 3n: activation_sparsity_pattern > 0 (the gaussian top-k on the gate)
  // Gemma 4: post_feedforward_layernorm_1, _2 and pre_feedforward_layernorm_2 (MoE), then
  // post_per_layer_input_norm (PLE); the router's scale and per_expert_scale as one tensor.
  std::vector<int> extra_norms;
  int router_scale = -1;
};

// Qwen2.5-VL get_window_index: the merged-token grid of an image is cut into windows of
// window_size / patch / merge units a side (the last row and column of windows shorter); the
// blocks outside fullatt_block_indexes attend within a window. Returns the sum over one image's
// windows of (patches per window)^2 = merge^4 x (sum of squared window heights) x (sum of
// squared window widths), in merged units.
std::int64_t window_square_sum(const ProgramSpec& sp) {
  const VisionSpec& v = sp.model.vision;
  if (v.kind != VisionKind::kQwen25Vl || sp.image_patches <= 0) return 0;
  const std::int64_t merge = v.spatial_merge_size;
  const std::int64_t units = std::max<std::int64_t>(1, v.window_size / v.patch_size / merge);
  const auto squares = [units](std::int64_t n) { return (n / units) * units * units + (n % units) * (n % units); };
  return checked_mul(checked_mul(squares(sp.image_rows / merge), squares(sp.image_cols / merge)),
                     merge * merge * merge * merge);
}

// The patches of the largest Qwen2.5-VL window of an image (a full window, or the whole image
// when it is smaller than one).
std::int64_t largest_window(const ProgramSpec& sp) {
  const VisionSpec& v = sp.model.vision;
  if (v.kind != VisionKind::kQwen25Vl || sp.image_patches <= 0) return 0;
  const std::int64_t merge = v.spatial_merge_size;
  const std::int64_t units = std::max<std::int64_t>(1, v.window_size / v.patch_size / merge);
  return std::min(units, sp.image_rows / merge) * std::min(units, sp.image_cols / merge) * merge * merge;
}

bool contains_layer(const std::vector<int>& v, int layer) { return std::find(v.begin(), v.end(), layer) != v.end(); }

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

class Step {
 public:
  explicit Step(const ProgramSpec& sp)
      : sp_(sp), m_(sp.model), ops_(g_, sp.ops),
        cached_(sp.model.decoder_embedding && sp.contrastive.enabled() && sp.contrastive.cached) {
    // About 200 events and 300 tensors per decoder layer or vision block with LoRA and
    // recomputation (measured on Gemma 3 and Llama 3.2 Vision programs).
    const std::size_t layers = sp.model_layers.size() + static_cast<std::size_t>(std::max(0, sp.model.vision.depth));
    g_.reserve(std::max<std::size_t>(4096, 320 * layers), 256 + 240 * layers);
    vision_window_sq_ = window_square_sum(sp);
    vision_window_max_ = largest_window(sp);
  }

  ProgramResult run();

 private:
  // ---- sizes (Polys in b and s); DPO/GRPO scale the batch. A forward of cached MNRL (GradCache)
  // takes a mini-batch of a fixed size, whatever b is: its sizes are in s alone.
  Mono tok_mono() const { return cached_ ? kS : kBS; }
  std::int64_t seqs_per_forward() const { return cached_ ? sp_.contrastive.mini_batch_size : sp_.batch_multiplier; }
  Poly tok(std::int64_t k) const { return Poly::mono(tok_mono(), k * seqs_per_forward()); }
  // The residual stream per rank: hidden-size rows of all tokens, or of s / t tokens under
  // sequence parallelism.
  bool seq_par() const { return sp_.sequence_parallel > 1; }
  Poly htok() const {
    return seq_par() ? Poly::mono(tok_mono(), m_.hidden_size * seqs_per_forward() / sp_.sequence_parallel)
                     : tok(m_.hidden_size);
  }
  // Sequence parallelism's all-gather (to every token) or reduce-scatter (to the rank's share):
  // a new tensor; backward does the opposite, a gradient shaped like the input.
  int sp_region(int x, const Poly& out_numel) {
    const int r = g_.make(out_numel, g_.at(x).dt, ops_.cat);
    g_.node({x}, {r}, {}, [x](Bwd& ctx) { ctx.give(x, ctx.like(x)); });
    return r;
  }
  // The all-gathered input of a column-parallel GEMM (QKV, FC1): a transient; the GEMM saves
  // the rank's share and gathers again in backward.
  void sp_gather_buffer(int x) {
    if (!seq_par()) return;
    g_.drop(g_.make(tok(m_.hidden_size), g_.at(x).dt, ops_.cat));
  }
  Poly scores(std::int64_t k) const { return Poly::mono(cached_ ? kSS : kBSS, k * seqs_per_forward()); }
  Poly per_seq(std::int64_t k) const { return Poly::mono(cached_ ? kOne : kB, k * seqs_per_forward()); }
  // A chunked scan's sizes: its tokens are the sequence padded to whole chunks (p of
  // Poly::Point, docs/formulas.md#chunked-scans). Contrastive encoders (cached_) have no scan.
  Poly ptok(std::int64_t k) const { return cached_ ? tok(k) : Poly::mono(kBP, k * seqs_per_forward()); }
  Poly pscores(std::int64_t k) const { return cached_ ? scores(k) : Poly::mono(kBPP, k * seqs_per_forward()); }
  // One sequence per forward: reshapes of (1, ...) tensors are views.
  bool one_sequence() const { return cached_ ? sp_.contrastive.mini_batch_size == 1 : sp_.batch_one; }
  static Poly c(std::int64_t k) { return Poly::constant(k); }

  // Parameters bitsandbytes does not quantize keep the load dtype unless the k-bit preparation
  // cast them (docs/formulas.md#qlora): embeddings/lm_head, and norms with the biases.
  DT other_dt() const { return sp_.norm_dt; }
  DT embed_dt() const { return sp_.embed_dt; }
  // PEFT's modules_to_save keeps the original module frozen and trains a copy (made separately).
  bool trainable(const std::string&) const { return sp_.full_finetune; }

  // ---- parameters
  int make_param(std::int64_t numel, DT dt, bool train, Cat cat = Cat::kWeights, std::int64_t rows = 0,
                 std::int64_t cols = 0, int count = 1, bool fused = false) {
    if (making_ref_) return g_.param(c(numel), dt, Cat::kReference, false);  // frozen copy
    train = train && !no_grad_params_;
    params_.push_back({numel, dt, train, cur_layer_, rows, cols, count, fused});
    return g_.param(c(numel), dt, cat, train);
  }
  // train: whether the base weight is trained (full fine-tuning); lora_ok: whether LoRA may wrap it;
  // frozen_dt: the dtype an unquantized weight and bias keep when not trained (the load dtype).
  LinearParams make_linear(const LinearModule& mod, bool train, bool lora_ok = true,
                           std::optional<DT> frozen_dt = std::nullopt);
  LinearParams make_linear(const LinearModule& mod) { return make_linear(mod, sp_.full_finetune); }
  void make_params();
  void make_vision_params();

  // ---- building blocks
  int norm(int x, int w, int bias, std::int64_t width, Poly numel);
  int rms_normalize(int x, const Poly& numel, const Poly& rows);
  // liger: Liger's kernel replaces it when --liger is on (the language model's norms only).
  int llama_rmsnorm(int x, int w, Poly numel, Poly rows, bool liger = true);
  int gemma_rmsnorm(int x, int w, Poly numel, Poly rows);
  int layer_norm(int x, int w, int bias, Poly numel, Poly rows);
  int lin(int x, LinearParams& p, Poly out_numel);
  int linear4bit(int x, LinearParams& p, Poly out_numel);
  int linear8bit(int x, LinearParams& p, Poly out_numel);
  int rope(int x, Poly numel);
  std::pair<int, int> attention(int x, LayerParams& lp);
  int sdpa_kernel(int q, int k, int v, const Poly& out_numel, const Poly& bias_numel, std::optional<DT> bias_dt);
  // groups > 1: one of that many equal shares of the tokens (an expert group; sizes round up).
  int mlp(int x, LayerParams& lp, const std::string& prefix, std::int64_t width, Poly tokens_k, bool gpt2,
          int groups = 1);
  int moe(int x, LayerParams& lp);
  // gpt-oss (docs/models.md#gpt_oss): GptOssMLP's training loop; returns the output and the
  // router scores the decoder layer keeps until it returns.
  std::pair<int, int> gpt_oss_moe(int x, LayerParams& lp);
  int gelu_new(int x);
  int decoder_layer(int h, int layer);
  // Gemma 4 (docs/models.md#gemma-4): Gemma4TextDecoderLayer, and its MoE block's router and
  // experts on the pre-MLP residual.
  int gemma4_layer(int h, LayerParams& lp);
  int gemma4_experts(int x, LayerParams& lp);
  // Gemma 3n (docs/models.md#gemma-3n): Gemma3nTextDecoderLayer on the (n, b, s, h) AltUp stack;
  // the model's stack of the embeddings and its projections before the layers, and the unembed
  // projections and mean after them.
  int gemma3n_layer(int h, LayerParams& lp);
  int gemma3n_mlp(int x, LayerParams& lp, bool sparse);
  int gemma3n_router(int x, LayerParams& lp);
  int gemma3n_magnitude_match(int x, int target);
  int gemma3n_target_magnitude(int h0);
  int gemma3n_stack(int h0);
  int gemma3n_unstack(int h, DT dt);  // dt: inputs_embeds' dtype
  bool gemma3n() const { return m_.altup_inputs > 0; }
  // Gemma 3n's KV-shared layers read the cache (use_cache, on unless checkpointing turns it off);
  // without one every layer computes its own K/V.
  bool gemma3n_cache() const { return gemma3n() && !sp_.gradient_checkpointing; }
  // The end of one step of the eager expert loops (moe's fused-Parameter path, gpt-oss, Gemma 4).
  int weighted_index_add(int next, int out, int weights, DT weight_dt, const Ids& weight_index, const Poly& pairs,
                         const Poly& pairs_h, DT out_dt, const Poly& total);
  // Hybrid layers (docs/models.md#hybrid-layers), as transformers' torch fallbacks run them.
  int hybrid_layer(int h, LayerParams& lp);
  int residual_scale(int x);
  int short_conv(int x, LayerParams& lp);
  int mamba2_mixer(int x, LayerParams& lp);
  int gated_deltanet(int x, LayerParams& lp);
  int f32_copy(int x);
  int causal_conv(int x, LayerParams& lp, std::int64_t channels, const Poly& n);  // x.to(torch.float32): a copy unless x is already fp32 (x is taken)
  // torch.utils.checkpoint around `body` (a decoder layer or a vision block): `holds` are the
  // tensors the bound arguments keep (mask, rotary tables); fsdp_unit: the body is an FSDP unit
  // whose reshard-only hook keeps its input (decoder layers under PEFT's wrap policy).
  using Body = std::function<int(int)>;
  // extra: a second positional input (Gemma 4's per_layer_input) the node saves, whose gradient
  // the recomputation computes and returns; the body reads it from ple_slice_.
  int checkpointed(int h, const Body& body, const std::vector<int>& holds, bool fsdp_unit, int extra = -1);
  int checkpointed_nonreentrant(int h, const Body& body, const std::vector<int>& holds);
  int layer_forward(int h, const Body& body, const std::vector<int>& holds, bool fsdp_unit, int extra = -1);
  // ---- vision-language models (docs/formulas.md#vision-language-models)
  bool vision_on() const { return m_.vision.enabled() && sp_.images > 0 && sp_.stage_embedding; }
  Poly vpt(std::int64_t k) const {  // per patch through the tower
    return Poly::mono(kB, checked_mul(checked_mul(k, sp_.images * sp_.image_patches), sp_.batch_multiplier));
  }
  Poly per_image(std::int64_t k) const {  // k per image of the batch
    return Poly::mono(kB, checked_mul(checked_mul(k, sp_.images), sp_.batch_multiplier));
  }
  // mllama: the image tokens cross-attention reads per sequence (tiles x positions per image).
  std::int64_t cross_tokens() const {
    return checked_mul(sp_.images, checked_mul(m_.vision.max_num_tiles, m_.vision.tile_positions()));
  }
  Poly xtok(std::int64_t k) const {  // per image token cross-attention reads
    return Poly::mono(kB, checked_mul(checked_mul(k, cross_tokens()), sp_.batch_multiplier));
  }
  bool mllama() const { return m_.vision.kind == VisionKind::kMllama; }
  bool llama4() const { return m_.model_type == "llama4_text"; }  // docs/models.md#llama-4
  // Command R / Aya (cohere) and Command R7B / A (cohere2), docs/models.md#cohere.
  bool cohere() const { return m_.model_type == "cohere" || m_.model_type == "cohere2"; }
  // GLM-4 and GLM-4-0414: interleaved partial rotary (docs/formulas.md#partial-rotary).
  bool glm_rope() const { return m_.model_type == "glm" || m_.model_type == "glm4"; }
  int cohere_layer(int h, LayerParams& lp);
  int cohere_layer_norm(int x, int w, const Poly& numel, const Poly& rows);
  std::pair<int, int> cohere_rope(int q, int k, const Poly& qn, const Poly& kvn);
  // Granite 4.0 (docs/models.md#granite-4-0): its multipliers, and NoPE unless position_embedding_type is "rope".
  bool granite_hybrid() const { return m_.model_type == "granitemoehybrid"; }
  bool granite_nope() const { return granite_hybrid() && !m_.nope_layers.empty(); }
  // Granite 3.x (modeling_granite.py, "diff w/ Llama") and Granite 4.0: inputs_embeds *
  // embedding_multiplier, residual + out * residual_multiplier, logits / logits_scaling.
  bool granite_multipliers() const { return granite_hybrid() || m_.model_type == "granite"; }
  // Falcon-H1 (docs/models.md#falcon-h1): Mamba-2 and attention side by side in every layer, and
  // muP multipliers on the embedding, the logits, both mixers' inputs and outputs, K, the MLP's
  // gate and down projections and the Mamba-2 in_proj's output.
  bool falcon_h1() const { return m_.model_type == "falcon_h1"; }
  int falcon_mixers(int x, LayerParams& lp, int& probs);
  int mllama_vision_features();
  // gate.tanh() * branch (mllama's gated vision layers and cross-attention layers); consumes branch.
  int tanh_gate(int branch, int gate, const Poly& numel);
  void mllama_cross_masks();
  int cross_decoder_layer(int h, LayerParams& lp);
  int cross_attention(int x, LayerParams& lp);
  Poly vtok(std::int64_t k) const {  // per image token in the language model's sequence
    return Poly::mono(kB, checked_mul(checked_mul(k, sp_.images * sp_.image_tokens), sp_.batch_multiplier));
  }
  int vision_norm(int x, int w, int bias, const Poly& numel, const Poly& rows);
  int vision_attention(int x, LayerParams& lp, int block);
  int chunked_eager_attention(int q, int k, int v, std::int64_t chunk_scores, const Poly& all_scores,
                              std::int64_t chunk_rows, bool one_chunk);
  int vision_mlp(int x, LayerParams& lp);
  int vision_block(int h, int block);
  int trained_vision_blocks(int x, const std::vector<int>& holds, const std::function<bool(int)>& full_block);
  int vision_features();
  // Llama 4 (docs/formulas.md#llama-4-vision): tiles per image, the tower and adapter, one
  // encoder layer's attention, and the wrapper's merge of the projected features.
  std::int64_t llama4_tiles() const {
    const std::int64_t side = m_.vision.image_size / m_.vision.patch_size;
    return sp_.image_patches / (side * side + 1);
  }
  int llama4_vision_features();
  int llama4_vision_attention(int x, LayerParams& lp);
  int llama4_merge_images(int embeds);
  std::vector<int> wrapper_locals_;  // Llama 4: image_features and projected_vision_flat, locals of the wrapper's forward
  int pixtral_features();
  int pixtral_attention(int x, LayerParams& lp);
  int vision_fused_attention(int q, int k, int val, const Poly& qn, std::int64_t heads, int mask);
  int vision_attention_out(int out, int q, int k, int val, LayerParams& lp, const Poly& qn);
  int merge_image_features(int embeds, int features);
  // Qwen3-VL (docs/models.md#qwen3-vl): a DeepStack merger on a block's output, the learned
  // position table's bilinear interpolation, and the add of a merger's features into the image
  // tokens' hidden states after an early text layer.
  int deepstack_merger(int x, std::size_t i);
  int qwen3_vl_positions(int x);
  int deepstack_add(int h, int features);
  int embed_and_layers(bool policy);
  void drop_forward_locals();
  int head_logits(int h, const Poly& rows);
  // A decoder embedding model's loss (docs/formulas.md#decoder-embeddings): one forward per text
  // column, the final norm, Pooling, MultipleNegativesRankingLoss. `leaves` collects each
  // column's embedding output that enable_input_require_grads made a leaf.
  ColumnsLoss embedding_loss(std::vector<int>& leaves);
  Column embed_column(std::vector<int>& leaves);
  void cached_embedding_step();
  void release_backward(std::vector<int>& leaves, int first_node);
  std::int64_t texts() const { return sp_.contrastive.texts(); }
  int to_output_dtype(int logits);
  int sft_loss(int logits);
  int fused_sft_loss(int h);  // final norm, then a loss kernel on the hidden states (fused_ce.cpp)
  // The backbone's last_hidden_state: the final norm's output (gathered under sequence
  // parallelism), after the model's forward locals are gone.
  int final_hidden(int h);
  int head_weight() const;  // lm_head's weight, or the tied embedding's
  // A Liger chunked loss on x (rows x H) with the policy's head, `chunk_rows` per chunk.
  ChunkedLossHead chunked_head(int x, const Poly& rows, const Poly& chunk_rows) const;
  int dpo_liger_loss();
  int grpo_liger_loss(int ref_logps);
  int selective_log_softmax(int logits, const Poly& rows, std::int64_t rows_per_seq_offset);
  int entropy_no_grad(int logits, const Poly& rows);
  // The no-grad reference forward (frozen copy, or the policy with adapters disabled): up to the
  // logits of `logit_rows` the wrapped forward returns, or, with nullptr, the backbone's
  // last_hidden_state (TRL's Liger DPO); the caller disables grad around it.
  int reference_forward(const Poly* logit_rows);
  int reference_logps(const Poly& rows, std::int64_t per_seq_offset, std::int64_t keep_offset);
  int dpo_loss();
  int grpo_loss(int ref_logps);
  int emb_leaf_ = -1;
  int ref_logits_ = -1;

  const ProgramSpec& sp_;
  const ModelSpec& m_;
  Graph g_;
  Ops ops_;
  int ids_ = -1, attn_mask2d_ = -1, labels_ = -1;
  // One model's parameters; the DPO/GRPO reference copy is a second set.
  struct VisionWeights {
    int patch_w = -1, patch_b = -1, pos = -1, post_w = -1, post_b = -1;  // patch embedding, SigLIP positions/post norm
    std::vector<LayerParams> blocks;                                    // norms: norm1 (w, b), norm2 (w, b)
    int merge_norm_w = -1, merge_norm_b = -1;                           // Qwen ln_q, Gemma 3 mm_soft_emb_norm
    std::vector<std::pair<int, int>> deepstack_norms;                   // Qwen3-VL: each DeepStack merger's LayerNorm(4h)
    std::map<std::string, LinearParams> proj;                           // projector Linears
    // Llama 4: class_embedding, layernorm_pre (w, b), the rotary table (a plain fp32 attribute)
    // and the vision adapter's fc1 / fc2 (pos: positional_embedding_vlm; post_w/b: layernorm_post).
    int cls = -1, pre_w = -1, pre_b = -1, freqs = -1;
    std::map<std::string, LinearParams> adapter;
  };
  struct Weights {
    int embed = -1, pos_embed = -1, final_norm = -1, final_norm_b = -1, lm_head = -1;
    int embed_copy = -1, lm_head_copy = -1;  // PEFT modules_to_save trainable copies
    std::vector<std::pair<int, int>> dense;  // sentence-transformers Dense modules: weight, bias (-1: none)
    std::vector<LayerParams> layers;
    VisionWeights vision;
    // Gemma 4: embed_tokens_per_layer, per_layer_model_projection and its norm (PLE); the audio
    // tower with its embedder, one frozen tensor.
    int ple_embed = -1, ple_proj = -1, ple_norm = -1, audio = -1;
    // Gemma 3n: altup_projections, then altup_unembed_projections (n - 1 each).
    std::vector<LinearParams> altup;
  };
  Weights policy_, ref_;
  Weights* w_ = &policy_;
  bool adapters_off_ = false;  // PeftModel.disable_adapter(): the reference under PEFT
  bool making_ref_ = false;
  // Parameters no gradient reaches (mllama's cross-attention layers in a text-only batch): they
  // get no .grad and no optimizer state, whatever their requires_grad.
  bool no_grad_params_ = false;
  int mask_ = -1, cos_ = -1, sin_ = -1;
  int cos_local_ = -1, sin_local_ = -1;  // Gemma 3's second rotary tables (rope_local_base_freq)
  // Gemma 4: the (b, s, layers, d) per-layer inputs every layer reads a slice of, and
  // Gemma4Model.forward's llm_inputs_embeds (a torch.where copy of the embeddings), both locals
  // of the model forward.
  int ple_ = -1, ple_where_ = -1;
  int ple_slice_ = -1;  // the current layer's per_layer_inputs[:, :, i, :] (a select view)
  // Gemma 3n: Gemma3nTextModel.forward's temp_hidden_states list and target_magnitude (locals
  // until it returns); the wrapper's vision_embeds and audio_embeds are ple_where_.
  std::vector<int> altup_locals_;
  // Gemma 3n with use_cache (no checkpointing): DynamicCache's torch.cat copies of each
  // non-shared layer's K and V, returned with the outputs: alive until the loss is computed.
  std::vector<int> cache_kv_;
  void drop_cache_kv() {
    for (const int t : cache_kv_) g_.drop(t);
    cache_kv_.clear();
  }
  // Gemma 4 shared_kv_states: the K and V (sliding, full) the KV-shared layers read. The dict is
  // bound into every layer's call, so under checkpointing it lives until backward ends; the
  // recomputations read the forward's tensors. Stored in the forward only.
  int shared_kv_[2][2] = {{-1, -1}, {-1, -1}};
  bool layers_forward_ = false;
  // The sliding layers' own mask (docs/formulas.md#sliding-window-attention): eager, when the
  // model also has full layers (a second (b, 1, s, s) float mask); SDPA, the (b, 1, s, s) bool
  // mask once s >= sliding_window. -1: the sliding layers use mask_.
  int sliding_mask_ = -1;
  int pixels_ = -1, vpos_ids_ = -1;
  // mllama: the projected image features every cross-attention layer reads, the (b, 1, s, M)
  // cross-attention mask, full_text_row_masked_out_mask, and the collator's (b, s, images, tiles) mask.
  int cross_states_ = -1, cross_mask_ = -1, cross_rows_ = -1, cross_mask_in_ = -1;
  int vision_mask_ = -1;  // mllama: the tower's (images, 1, n, n) aspect-ratio mask while it runs; Pixtral's block-diagonal one
  int vision_out_ = -1;   // mllama: the tower's concatenated output, a local of MllamaModel.forward
  std::vector<int> deepstack_;  // Qwen3-VL: the DeepStack features, locals of Qwen3VLModel.forward
  int mrope_ids_ = -1;  // Qwen-VL get_rope_index position ids
  // Qwen2.5-VL windowed blocks: the sum over windows of (patches in the window)^2, per image,
  // and the patches of the largest window.
  std::int64_t vision_window_sq_ = 0;
  std::int64_t vision_window_max_ = 0;  // pixel_values from the collator; SigLIP position ids (a buffer)
  int layer_ = 0;
  int cur_layer_ = -1;
  std::vector<ParamRec> params_;
  std::vector<int> fsdp_retained_;  // layer inputs and their grads the FSDP hooks keep (to backward's end)
  std::vector<int> graph_held_;     // tensors the autograd graph itself keeps (leaves held by AccumulateGrad)
  const bool cached_;               // cached MNRL (GradCache) for a decoder embedding model
};

LinearParams Step::make_linear(const LinearModule& mod, bool train, bool lora_ok, std::optional<DT> frozen_dt) {
  const bool keep_dt = !train && frozen_dt.has_value();
  LinearParams p;
  p.mod = mod;
  const std::int64_t n = mod.weight_params();
  const bool quant = sp_.load_in_4bit && mod.nn_linear;  // bitsandbytes replaces nn.Linear only
  if (sp_.load_in_8bit && mod.nn_linear && !sp_.load_in_4bit) {
    // bitsandbytes Int8Params: one int8 per weight (kept in the igemmlt layout after the first
    // forward, the row-major copy deleted) plus an fp32 absmax per output row (SCB).
    p.quant8 = true;
    p.w = make_param(n + mod.out_features * mod.count * 4, DT::kU8, false);
  } else if (quant) {
    // bitsandbytes Params4bit: two 4-bit values per byte, one absmax per 64-value block (fp32),
    // or with double quantization one byte per block plus an fp32 absmax per 256 blocks.
    p.quant4 = true;
    const std::int64_t blocks = (n + 63) / 64;
    std::int64_t bytes = (n + 1) / 2;
    bytes += sp_.double_quant ? blocks + ((blocks + 255) / 256) * 4 + 256 * 4 : blocks * 4;
    p.w = make_param(bytes, DT::kU8, false);
  } else {
    // Experts that are no nn.Linear are 3-D Parameters (gate_up_proj [E, ..]): one tensor.
    p.w = make_param(n, keep_dt ? *frozen_dt : sp_.weight_dt, train, Cat::kWeights, mod.out_features, mod.in_features,
                     mod.count, !mod.nn_linear && mod.count > 1);
  }
  if (mod.bias) p.b = make_param(mod.bias_params(), keep_dt ? *frozen_dt : other_dt(), train);
  if (lora_ok && sp_.lora.enabled && !making_ref_ && mod.nn_linear && contains(sp_.lora.targets, mod.name)) {
    const std::int64_t r = sp_.lora.r;
    p.A = make_param(r * mod.in_features * mod.count, sp_.adapter_dt, true, Cat::kAdapterWeights, r, mod.in_features,
                     mod.count);
    p.B = make_param(r * mod.out_features * mod.count, sp_.adapter_dt, true, Cat::kAdapterWeights, mod.out_features,
                     r, mod.count);
  }
  return p;
}

void Step::make_params() {
  const std::int64_t h = m_.hidden_size;
  const std::int64_t V = m_.vocab_size;
  if (sp_.stage_embedding) {
    const std::int64_t rows = V + m_.extra_embedding_rows;  // mllama: 8 rows past the vocabulary
    w_->embed = make_param(rows * h, embed_dt(), trainable("embed_tokens"), Cat::kWeights, rows, h);
    if (contains(sp_.lora.modules_to_save, "embed_tokens") && sp_.lora.enabled && !making_ref_)
      w_->embed_copy = make_param(rows * h, embed_dt(), true, Cat::kWeights, rows, h);
    if (m_.learned_positions)
      w_->pos_embed = make_param(m_.max_position_embeddings * h, embed_dt(), trainable("wpe"), Cat::kWeights,
                                 m_.max_position_embeddings, h);
  }
  if (sp_.stage_embedding && m_.per_layer_input_dim > 0) {
    const std::int64_t packed = static_cast<std::int64_t>(m_.num_layers) * m_.per_layer_input_dim;
    w_->ple_embed = make_param(m_.per_layer_input_vocab * packed, embed_dt(), trainable("embed_tokens_per_layer"),
                               Cat::kWeights, m_.per_layer_input_vocab, packed);
    w_->ple_proj = make_param(h * packed, sp_.weight_dt, sp_.full_finetune, Cat::kWeights, packed, h);
    w_->ple_norm = make_param(m_.per_layer_input_dim, other_dt(), sp_.full_finetune);
  }
  if (sp_.stage_embedding && gemma3n()) {
    // Gemma3nTextModel's altup_projections and altup_unembed_projections (hidden x hidden, no bias).
    w_->altup.clear();
    for (int i = 0; i < 2 * (m_.altup_inputs - 1); ++i)
      w_->altup.push_back(make_linear({i < m_.altup_inputs - 1 ? "altup_projections" : "altup_unembed_projections", h, h,
                                       false, 1, LinearRole::kMlp}));
  }
  if (sp_.stage_embedding && m_.audio.enabled()) {
    // Gemma 4's audio tower: no gradient reaches it in a text (or image) step, so no grads or
    // optimizer states whatever its requires_grad.
    const VisionCounts ac = count_audio_parameters(m_.audio, h);
    w_->audio = make_param(ac.tower + ac.projector, other_dt(), false);
  }
  if (sp_.stage_embedding && m_.vision.enabled()) make_vision_params();
  const int n = static_cast<int>(sp_.model_layers.size());
  for (int l = 0; l < n; ++l) {
    cur_layer_ = l;
    LayerParams lp;
    const int model_layer = sp_.model_layers[static_cast<std::size_t>(l)];
    lp.moe = m_.moe.is_moe_layer(model_layer) && m_.hybrid.has_ffn(model_layer);
    lp.sliding = m_.is_sliding_layer(model_layer);
    lp.nope = (llama4() || m_.model_type == "cohere2") && contains_layer(m_.nope_layers, model_layer);
    lp.mixer = m_.hybrid.mixer(model_layer);
    lp.ffn = m_.hybrid.has_ffn(model_layer);
    lp.head_dim = m_.layer_head_dim(model_layer);
    lp.kv_heads = m_.layer_kv_heads(model_layer);
    lp.intermediate = m_.layer_intermediate_size(model_layer);
    lp.kv_shared = m_.is_kv_shared_layer(model_layer) && (!gemma3n() || gemma3n_cache());
    lp.k_eq_v = m_.layer_k_eq_v(model_layer);
    // Gemma4TextAttention.store_full_length_kv: the last non-shared layer of each type stores its
    // K/V in shared_kv_states, whether or not any layer reads them (Gemma 3n: in the cache).
    if ((m_.model_type == "gemma4_text" || gemma3n_cache()) && !lp.kv_shared) {
      bool last_of_type = true;
      for (int later = model_layer + 1; later < m_.num_layers - m_.kv_shared_layers && last_of_type; ++later)
        if (m_.is_sliding_layer(later) == lp.sliding) last_of_type = false;
      lp.store_kv = last_of_type;
    }
    no_grad_params_ = m_.is_cross_attention_layer(model_layer) && !vision_on();
    for (const auto& mod : layer_linears(m_, model_layer)) {
      std::string key = mod.name;
      if (mod.role == LinearRole::kSharedExpert) key = "shared." + key;
      if (mod.role == LinearRole::kMlp && m_.model_type == "gpt2") key = "mlp." + key;
      if (key.rfind("indexer.", 0) == 0) {
        // DeepSeek-V3.2's indexer runs under no_grad: its weights get no gradient (and so no
        // optimizer state); weights_proj is in _keep_in_fp32_modules, loaded in fp32 and left
        // unquantized (docs/models.md#deepseek-v32).
        LinearModule im = mod;
        const bool fp32 = key == "indexer.weights_proj";
        if (fp32) im.nn_linear = false;
        lp.lin.emplace(key, make_linear(im, false, false, fp32 ? std::optional<DT>(DT::kF32) : std::nullopt));
        continue;
      }
      lp.lin.emplace(key, make_linear(mod));
    }
    const bool bias = m_.norm == NormKind::kLayerNorm && m_.norm_bias;
    for (int i = 0; i < m_.norms_per_layer; ++i) {
      lp.norms.push_back(make_param(h, other_dt(), sp_.full_finetune));
      lp.norms.push_back(bias ? make_param(h, other_dt(), sp_.full_finetune) : -1);
    }
    if (m_.is_cross_attention_layer(model_layer)) {  // q_norm, k_norm over head_dim; two scalar tanh gates
      lp.cross = true;
      lp.q_norm = make_param(m_.head_dim, other_dt(), sp_.full_finetune);
      lp.k_norm = make_param(m_.head_dim, other_dt(), sp_.full_finetune);
      lp.attn_gate = make_param(1, other_dt(), sp_.full_finetune);
      lp.mlp_gate = make_param(1, other_dt(), sp_.full_finetune);
    } else if (m_.is_mla()) {  // q_a_layernorm (with q LoRA) and kv_a_layernorm
      if (m_.q_lora_rank > 0) lp.q_norm = make_param(m_.q_lora_rank, other_dt(), sp_.full_finetune);
      lp.k_norm = make_param(m_.kv_lora_rank, other_dt(), sp_.full_finetune);
    } else if (m_.qk_norm && cohere()) {  // CohereLayerNorm((heads, head_dim)) and ((kv_heads, head_dim))
      lp.q_norm = make_param(m_.num_heads * m_.head_dim, other_dt(), sp_.full_finetune);
      lp.k_norm = make_param(m_.num_kv_heads * m_.head_dim, other_dt(), sp_.full_finetune);
    } else if (m_.qk_norm && lp.mixer == MixerKind::kAttention) {
      lp.q_norm = make_param(lp.head_dim, other_dt(), sp_.full_finetune);
      if (!lp.kv_shared) lp.k_norm = make_param(lp.head_dim, other_dt(), sp_.full_finetune);
      else if (gemma3n()) make_param(lp.head_dim, other_dt(), sp_.full_finetune);  // loaded, unused with the cache
    }
    if (gemma3n()) {
      lp.sparse_mlp = contains_layer(m_.sparse_mlp_layers, model_layer);
      // router_norm, post_laurel_norm, post_per_layer_input_norm; AltUp's correct_output_scale.
      for (int i = 0; i < 3; ++i) lp.extra_norms.push_back(make_param(h, other_dt(), sp_.full_finetune));
      lp.router_scale = make_param(h, other_dt(), sp_.full_finetune);
    }
    if (m_.model_type == "gemma4_text") {
      const bool moe_block = m_.moe_beside_mlp && lp.moe;
      const int extra = (moe_block ? 3 : 0) + (m_.per_layer_input_dim > 0 ? 1 : 0);
      for (int i = 0; i < extra; ++i) lp.extra_norms.push_back(make_param(h, other_dt(), sp_.full_finetune));
      if (moe_block) lp.router_scale = make_param(h + m_.moe.num_experts, other_dt(), sp_.full_finetune);
    }
    if (m_.attention_sinks && lp.mixer == MixerKind::kAttention)
      lp.sinks = make_param(m_.num_heads, sp_.weight_dt, sp_.full_finetune);
    const HybridSpec& hy = m_.hybrid;
    const bool ft = sp_.full_finetune;
    if (lp.mixer == MixerKind::kGatedDeltaNet) {
      const std::int64_t conv_dim = 2 * hy.gdn_key_dim() + hy.gdn_value_dim();
      lp.conv_w = make_param(conv_dim * hy.conv_kernel, sp_.weight_dt, ft);
      lp.dt_bias = make_param(hy.gdn_value_heads, other_dt(), ft);
      lp.a_log = make_param(hy.gdn_value_heads, other_dt(), ft);
      lp.mix_norm = make_param(hy.gdn_value_head_dim, other_dt(), ft);
    } else if (lp.mixer == MixerKind::kMamba2) {
      const std::int64_t conv_dim = hy.mamba_inner() + 2 * hy.mamba_groups * hy.ssm_state;
      lp.conv_w = make_param(conv_dim * hy.conv_kernel, sp_.weight_dt, ft);
      if (hy.mamba_conv_bias) lp.conv_b = make_param(conv_dim, other_dt(), ft);
      lp.dt_bias = make_param(hy.mamba_heads, other_dt(), ft);
      lp.a_log = make_param(hy.mamba_heads, other_dt(), ft);
      lp.d = make_param(hy.mamba_heads, other_dt(), ft);
      if (hy.mamba_norm) lp.mix_norm = make_param(hy.mamba_inner(), other_dt(), ft);
      // Falcon-H1's mup_vector: a (1, 1, in_proj width) buffer per layer, cast with the model.
      if (hy.parallel_attention)
        make_param(2 * hy.mamba_inner() + 2 * hy.mamba_groups * hy.ssm_state + hy.mamba_heads, sp_.weight_dt, false);
    } else if (lp.mixer == MixerKind::kShortConv) {
      lp.conv_w = make_param(h * hy.conv_kernel, sp_.weight_dt, ft);
      if (hy.short_conv_bias) lp.conv_b = make_param(h, other_dt(), ft);
    }
    w_->layers.push_back(std::move(lp));
    no_grad_params_ = false;
  }
  cur_layer_ = -1;
  if (!sp_.stage_head) return;
  w_->final_norm = make_param(h, other_dt(), sp_.full_finetune);
  if (m_.norm == NormKind::kLayerNorm && m_.norm_bias) w_->final_norm_b = make_param(h, other_dt(), sp_.full_finetune);
  // sentence-transformers Dense modules (docs/formulas.md#embeddinggemma): outside the
  // transformers model PEFT wraps, so trained under LoRA too; in the norms' dtype.
  if (m_.decoder_embedding)
    for (const DenseModule& d : m_.st_dense)
      w_->dense.emplace_back(make_param(d.in_features * d.out_features, other_dt(), true, Cat::kWeights, d.out_features,
                                        d.in_features),
                             d.bias ? make_param(d.out_features, other_dt(), true) : -1);
  // A last pipeline stage without the embedding keeps its own copy of tied word embeddings
  // (Megatron's shared embedding on the last stage; its gradient is all-reduced with the first).
  // An embedding model (AutoModel) has no lm_head.
  if ((!m_.tie_word_embeddings || !sp_.stage_embedding) && !m_.decoder_embedding) {
    w_->lm_head = make_param(V * h, embed_dt(), trainable("lm_head"), Cat::kWeights, V, h);
    if (contains(sp_.lora.modules_to_save, "lm_head") && sp_.lora.enabled && !making_ref_)
      w_->lm_head_copy = make_param(V * h, embed_dt(), true, Cat::kWeights, V, h);
  }
}


// The vision tower and projector as *ForConditionalGeneration loads them: trained only with
// full fine-tuning and train_vision_tower / train_projector; LoRA wraps tower Linears (by the
// names PEFT matches) only when the tower is trained, as LLaMA-Factory's freeze_vision_tower
// excludes them otherwise. A projector trained next to LoRA is a PEFT modules_to_save copy.
void Step::make_vision_params() {
  const VisionSpec& v = m_.vision;
  VisionWeights& vw = w_->vision;
  if (v.kind == VisionKind::kGemma3n) {
    // Gemma 3n's MobileNetV5 tower and embed_vision, counted, never run (docs/models.md#gemma-3n):
    // one frozen tensor; its embedder's forward on the text tokens is modelled with the embeddings.
    const VisionCounts vc = count_vision_parameters(v, m_.hidden_size);
    vw.pos = make_param(vc.tower + vc.projector, other_dt(), false);
    return;
  }
  const std::int64_t h = v.hidden_size;
  const bool siglip = v.kind == VisionKind::kSiglip;
  const bool ln = v.kind != VisionKind::kQwen25Vl && v.kind != VisionKind::kPixtral;  // else RMSNorm
  const bool adapter_trained = sp_.full_finetune && sp_.train_vision_tower;
  // Llama 4 under reentrant checkpointing: Llama4VisionEncoder calls its layers with keyword
  // arguments only, so torch.utils.checkpoint gets no tensor input and runs them without a graph:
  // the patch embedding, the embeddings, layernorm_pre and the layers get no gradient (and AdamW
  // no state); layernorm_post and the adapter still train (docs/formulas.md#llama-4-vision).
  const bool no_layer_grads = v.kind == VisionKind::kLlama4 && sp_.gradient_checkpointing && sp_.checkpoint_reentrant;
  const bool tower = adapter_trained && !no_layer_grads;
  // Frozen parameters may stay in the load dtype (LLaMA-Factory upcasts trainable ones only).
  const auto dt = [this](bool train, DT usual) { return !train && sp_.vision_frozen_dt ? *sp_.vision_frozen_dt : usual; };
  vw.patch_w = make_param(v.patch_values() * h, dt(tower, other_dt()), tower, Cat::kWeights, h, v.patch_values());
  if (v.kind == VisionKind::kMllama) {
    // class_embedding, gated positional and tile embeddings, pre/post-tile embeddings and their
    // gates: one frozen tensor (memplan does not model training this tower).
    const std::int64_t T = v.max_num_tiles, P = v.tile_positions(), A = v.max_aspect_ratio_id + 1;
    vw.pos = make_param(h + P * h + 1 + A * T * P * h + 2 * (A * T * h + 1), dt(false, other_dt()), false);
    vw.post_w = make_param(4 * h, dt(false, other_dt()), false);  // layernorm_pre and layernorm_post
  }
  if (v.kind == VisionKind::kLlama4) {
    // Llama4VisionModel (docs/formulas.md#llama-4-vision): class_embedding, positional_embedding_vlm
    // ((image / patch)^2 + 1 rows), layernorm_pre, layernorm_post, the pixel-shuffle adapter's
    // fc1 / fc2 (no biases; LoRA reaches them by name with the tower), and
    // Llama4VisionRotaryEmbedding.freqs_ci: complex64 (N, 1, head_dim / 2), a plain attribute that
    // neither .to(dtype) nor from_pretrained casts (on a GPU, .to(device) copies it each forward).
    const std::int64_t side = v.image_size / v.patch_size, n = side * side + 1;
    vw.cls = make_param(h, dt(tower, other_dt()), tower);
    vw.pos = make_param(n * h, dt(tower, other_dt()), tower, Cat::kWeights, n, h);
    vw.pre_w = make_param(h, dt(tower, other_dt()), tower);
    vw.pre_b = make_param(h, dt(tower, other_dt()), tower);
    vw.post_w = make_param(h, dt(adapter_trained, other_dt()), adapter_trained);
    vw.post_b = make_param(h, dt(adapter_trained, other_dt()), adapter_trained);
    vw.freqs = make_param(n * (h / v.num_heads), DT::kF32, false);
    vw.adapter.clear();
    for (const auto& mod : std::vector<LinearModule>{
             {"fc1", v.intermediate_size, v.projector_input_dim, false, 1, LinearRole::kMlp},
             {"fc2", v.projector_output_dim, v.projector_output_dim, false, 1, LinearRole::kMlp}})
      vw.adapter.emplace(mod.name, make_linear(mod, adapter_trained, sp_.train_vision_tower, sp_.vision_frozen_dt));
  }
  if (v.kind == VisionKind::kPixtral) {  // ln_pre (docs/formulas.md#pixtral)
    vw.pos = make_param(h, dt(tower, other_dt()), tower);
    // PixtralRotaryEmbedding's inv_freq and original_inv_freq buffers, (image_size / patch)^2 x
    // head_dim each, fp32 as from_pretrained leaves buffers.
    const std::int64_t side = v.image_size / v.patch_size;
    vw.post_w = make_param(2 * side * side * (h / v.num_heads), DT::kF32, false);
  }
  if (v.kind == VisionKind::kGemma4)  // position_embedding_table (2, position_embedding_size, h)
    vw.pos = make_param(2 * v.num_position_embeddings * h, dt(tower, other_dt()), tower);
  if (v.kind == VisionKind::kQwen3Vl) {
    // patch_embed.proj's bias and pos_embed (num_position_embeddings x h), with the tower.
    vw.patch_b = make_param(h, dt(tower, other_dt()), tower);
    vw.pos = make_param(v.num_position_embeddings * h, dt(tower, other_dt()), tower, Cat::kWeights,
                        v.num_position_embeddings, h);
  }
  if (siglip) {
    vw.patch_b = make_param(h, dt(tower, other_dt()), tower);
    const std::int64_t side = v.image_size / v.patch_size;
    vw.pos = make_param(side * side * h, dt(tower, other_dt()), tower, Cat::kWeights, side * side, h);
  }
  for (int l = 0; l < v.depth + v.global_depth; ++l) {  // mllama: the global layers follow the local ones
    LayerParams lp;
    for (const auto& mod : vision_block_linears(v))
      lp.lin.emplace(mod.name, make_linear(mod, tower, sp_.train_vision_tower && !no_layer_grads, sp_.vision_frozen_dt));
    for (int i = 0; i < 2; ++i) {
      lp.norms.push_back(make_param(h, dt(tower, other_dt()), tower));
      lp.norms.push_back(ln ? make_param(h, dt(tower, other_dt()), tower) : -1);
    }
    if (v.kind == VisionKind::kGemma4) lp.q_norm = make_param(2 * (h / v.num_heads), dt(tower, other_dt()), tower);
    if (l >= v.depth) {  // gate_attn, gate_ffn
      lp.attn_gate = make_param(1, dt(tower, other_dt()), tower);
      lp.mlp_gate = make_param(1, dt(tower, other_dt()), tower);
    }
    vw.blocks.push_back(std::move(lp));
  }
  if (siglip) {
    vw.post_w = make_param(h, dt(tower, other_dt()), tower);
    vw.post_b = make_param(h, dt(tower, other_dt()), tower);
  }
  const bool copy = sp_.lora.enabled && sp_.train_projector;  // modules_to_save: frozen original + trained copy
  for (int pass = copy ? 0 : 1; pass < 2; ++pass) {
    const bool train = pass == 1 && sp_.train_projector;
    if (v.kind != VisionKind::kMllama && v.kind != VisionKind::kLlama4 && v.kind != VisionKind::kGemma4) {  // their projector is one Linear
      vw.merge_norm_w = make_param(h, dt(train, other_dt()), train);
      vw.merge_norm_b = ln && !siglip ? make_param(h, dt(train, other_dt()), train) : -1;
    }
    if (v.kind == VisionKind::kQwen3Vl) {  // the DeepStack mergers' LayerNorm(4h), trained with the projector
      const std::int64_t wide = h * v.spatial_merge_size * v.spatial_merge_size;
      vw.deepstack_norms.clear();
      for (std::size_t i = 0; i < v.deepstack_indexes.size(); ++i)
        vw.deepstack_norms.emplace_back(make_param(wide, dt(train, other_dt()), train),
                                        make_param(wide, dt(train, other_dt()), train));
    }
    for (const auto& mod : vision_projector_linears(v, m_.hidden_size))
      vw.proj.insert_or_assign(mod.name, make_linear(mod, train, false, sp_.vision_frozen_dt));
  }
}

// ---- norms

int Step::rms_normalize(int x, const Poly& numel, const Poly& rows) {
  // x.to(fp32), pow(2).mean(-1), rsqrt(var + eps), x * rsqrt: the fp32 normalized tensor.
  const int h32 = ops_.to(x, DT::kF32);
  const int p = ops_.pow2(h32);
  const int var = ops_.mean_last(p, rows);
  g_.drop(p);
  const int ve = ops_.scalar_op(var);
  g_.drop(var);
  const int r = ops_.rsqrt(ve);
  g_.drop(ve);
  const int n = ops_.mul(h32, r, numel);
  g_.drop(h32);
  g_.drop(r);
  return n;
}

int Step::llama_rmsnorm(int x, int w, Poly numel, Poly rows, bool liger) {
  if (liger && sp_.liger_kernels) return liger_rms_norm(g_, ops_, x, w, numel, rows);
  // LlamaRMSNorm: rms_normalize, to(input dtype), weight * x
  const DT in_dt = g_.at(x).dt;
  const int n = rms_normalize(x, numel, rows);
  const int nd = ops_.to(n, in_dt);
  g_.drop(n);
  const int out = ops_.mul(w, nd, numel);
  g_.drop(nd);
  return out;
}

int Step::gemma_rmsnorm(int x, int w, Poly numel, Poly rows) {
  if (sp_.liger_kernels) return liger_rms_norm(g_, ops_, x, w, numel, rows);  // LigerRMSNormForGemma
  // GemmaRMSNorm: output = norm(x.float()) * (1 + weight.float()); output.type_as(x)
  const DT in_dt = g_.at(x).dt;
  const int n = rms_normalize(x, numel, rows);
  const int w32 = ops_.to(w, DT::kF32);
  const int w1 = ops_.scalar_op(w32);
  g_.drop(w32);
  const int o = ops_.mul(n, w1, numel);
  g_.drop(n);
  g_.drop(w1);
  const int out = ops_.to(o, in_dt);
  g_.drop(o);
  return out;
}

int Step::layer_norm(int x, int w, int bias, Poly numel, Poly rows) {
  // native_layer_norm: output plus fp32 mean and rstd per row; saves input, mean, rstd, weight.
  Graph& g = g_;
  const int y = g.make(numel, g.at(x).dt, ops_.cat);
  const int mean = g.make(rows, DT::kF32, ops_.cat);
  const int rstd = g.make(rows, DT::kF32, ops_.cat);
  g.node({x, w, bias}, {y}, {x, mean, rstd, w, bias}, [x, w, bias](Bwd& ctx) {
    const int gx = ctx.needs(x) ? ctx.like(x) : -1;
    const int gw = ctx.needs(w) ? ctx.like(w) : -1;
    const int gb = bias >= 0 && ctx.needs(bias) ? ctx.like(bias) : -1;
    if (gx >= 0) ctx.give(x, gx);
    if (gw >= 0) ctx.give(w, gw);
    if (gb >= 0) ctx.give(bias, gb);
  });
  g.drop(mean);
  g.drop(rstd);
  return y;
}

int Step::norm(int x, int w, int bias, std::int64_t width, Poly numel) {
  Poly rows = numel;
  for (auto& v : rows.c) v /= width;
  if (cohere()) return cohere_layer_norm(x, w, numel, rows);
  if (m_.norm == NormKind::kLayerNorm) return layer_norm(x, w, bias, numel, rows);
  // Qwen3NextRMSNorm (and Qwen3.5's, which is it) is Gemma's zero-centred (1 + weight) norm.
  const std::string& t = m_.model_type;
  if (t.rfind("gemma", 0) == 0 || t == "qwen3_next" || t == "qwen3_5_text" || t == "qwen3_5_moe_text")
    return gemma_rmsnorm(x, w, numel, rows);
  if (m_.model_type == "gpt_oss" && !sp_.liger_kernels) {
    // GptOssRMSNorm: (weight * normalized).to(input dtype): the product is fp32, cast after.
    const DT in_dt = g_.at(x).dt;
    const int n = rms_normalize(x, numel, rows);
    const int o = ops_.mul(w, n, numel);
    g_.drop(n);
    const int out = ops_.to(o, in_dt);
    g_.drop(o);
    return out;
  }
  return llama_rmsnorm(x, w, numel, rows);
}

// ---- linears

int Step::linear4bit(int x, LinearParams& p, Poly out_numel) {
  // bnb Linear4bit: x.to(compute_dtype); MatMul4Bit dequantizes the weight for the product in
  // forward and again in backward (transient copies), saving nothing of size.
  const DT in_dt = g_.at(x).dt;
  const int xc = ops_.to(x, sp_.compute_dt);
  const std::int64_t wn = p.mod.weight_params();
  const int deq = g_.make(c(wn), sp_.compute_dt, Cat::kAutocastCopies);
  const int y = g_.make(out_numel, sp_.compute_dt, ops_.cat);
  g_.drop(deq);
  const DT cdt = sp_.compute_dt;
  g_.node({xc}, {y}, {}, [xc, wn, cdt](Bwd& ctx) {
    const int d = ctx.temp(Poly::constant(wn), cdt, Cat::kAutocastCopies);
    const int gx = ctx.like(xc);
    ctx.drop(d);
    ctx.give(xc, gx);
  });
  g_.drop(xc);
  const int out = ops_.to(y, in_dt);
  g_.drop(y);
  return out;
}

int Step::linear8bit(int x, LinearParams& p, Poly out_numel) {
  // bnb Linear8bitLt -> MatMul8bitLt (bitsandbytes 0.43.3, has_fp16_weights=False, igemmlt):
  // A.to(fp16) and F.double_quant make the row- and column-wise int8 copies CA and CAt, CA is
  // transformed to col32 for igemmlt, whose int32 result is dequantized to the output (then
  // cloned for 3-D inputs). Saved: CAt (an int8 copy of the input) and A itself. Backward
  // quantizes the fp16 gradient the same way and dequantizes the whole weight to A's dtype for
  // grad_A = grad_output @ W (docs/formulas.md#llm-int8).
  const Tensor xt = g_.at(x);
  const Poly in_numel = xt.numel;
  const std::int64_t wn = p.mod.weight_params();
  const int a16 = xt.dt == DT::kF16 ? -1 : g_.make(in_numel, DT::kF16, ops_.cat);
  const int ca = g_.make(in_numel, DT::kU8, ops_.cat);
  const int cat_t = g_.make(in_numel, DT::kU8, ops_.cat);
  if (a16 >= 0) g_.drop(a16);
  const int c32 = g_.make(in_numel, DT::kU8, ops_.cat);
  const int out32 = g_.make(out_numel, DT::kF32, ops_.cat);  // int32, four bytes like fp32
  g_.drop(c32);
  g_.drop(ca);
  const int y0 = g_.make(out_numel, xt.dt, ops_.cat);
  g_.drop(out32);
  const int y = g_.make(out_numel, xt.dt, ops_.cat);  // clone_func for 3-D inputs
  g_.drop(y0);
  const DT adt = xt.dt;
  const Poly on = out_numel;
  const bool made = g_.node({x}, {y}, {x, cat_t}, [x, wn, adt, on](Bwd& ctx) {
    const int g16 = ctx.temp(on, DT::kF16);
    const int cg = ctx.temp(on, DT::kU8);
    const int cgt = ctx.temp(on, DT::kU8);
    const int w = ctx.temp(Poly::constant(wn), adt, Cat::kAutocastCopies);
    const int gx = ctx.like(x);
    ctx.drop(w);
    ctx.drop(cgt);
    ctx.drop(cg);
    ctx.drop(g16);
    ctx.give(x, gx);
  });
  (void)made;
  g_.drop(cat_t);
  return y;
}

int Step::lin(int x, LinearParams& p, Poly out_numel) {
  if (p.quant4 || p.quant8) {
    int base = p.quant4 ? linear4bit(x, p, out_numel) : linear8bit(x, p, out_numel);
    if (p.A < 0 || adapters_off_) return base;
    // peft lora/bnb.py Linear4bit/Linear8bitLt.forward (PEFT 0.13): result = base(x).clone();
    // the input is cast to the adapter dtype only when autocast is off (and the LoRA output cast
    // back); under autocast lora_A gets x as it is.
    const int cl = ops_.clone(base);
    g_.drop(base);
    base = cl;
    const DT res_dt = g_.at(base).dt;
    const bool convert = !ops_.autocast().has_value();
    const Cat saved_cat = ops_.cat;
    ops_.cat = Cat::kLoraDropout;
    const int xc = convert ? ops_.to(x, sp_.adapter_dt) : (g_.hold(x), x);
    const int d = ops_.dropout(xc, sp_.lora.dropout);
    Poly a_numel = out_numel;
    for (auto& v : a_numel.c) v = v / p.mod.out_features * sp_.lora.r;
    const int a = ops_.linear(d, p.A, -1, a_numel);
    g_.drop(d);
    const int bb = ops_.linear(a, p.B, -1, out_numel);
    g_.drop(a);
    ops_.cat = saved_cat;
    int sc = ops_.scalar_op(bb);
    g_.drop(bb);
    if (convert) {
      const int sc2 = ops_.to(sc, res_dt);
      g_.drop(sc);
      sc = sc2;
    }
    const int sum = ops_.add(base, sc, out_numel);
    g_.drop(base);
    g_.drop(sc);
    g_.drop(xc);
    return sum;
  }
  const int base = ops_.linear(x, p.w, p.b, out_numel);
  if (p.A < 0 || adapters_off_) return base;
  // peft lora.Linear.forward: x = x.to(lora_A dtype) lives until the method returns.
  const DT res_dt = g_.at(base).dt;
  const Cat saved_cat = ops_.cat;
  ops_.cat = Cat::kLoraDropout;
  const int xc = ops_.to(x, sp_.adapter_dt);
  const int d = ops_.dropout(xc, sp_.lora.dropout);
  Poly a_numel = out_numel;
  for (auto& v : a_numel.c) v = v / p.mod.out_features * sp_.lora.r;
  const int a = ops_.linear(d, p.A, -1, a_numel);
  g_.drop(d);
  const int bb = ops_.linear(a, p.B, -1, out_numel);
  g_.drop(a);
  ops_.cat = saved_cat;
  const int sc = ops_.scalar_op(bb);
  g_.drop(bb);
  const int sum = ops_.add(base, sc, out_numel);
  g_.drop(base);
  g_.drop(sc);
  const int res = ops_.to(sum, res_dt);
  g_.drop(sum);
  g_.drop(xc);
  return res;
}

// ---- attention

int Step::rope(int x, Poly numel) { return ops_.rotary(x, cos_, sin_, numel); }

std::pair<int, int> Step::attention(int x, LayerParams& lp) {
  if (m_.is_mla()) {  // DeepSeek-V2/V3, Kimi K2: src/core/sim/mla.cpp
    MlaStep st{g_, ops_, m_, tok(1), tok(m_.num_heads), scores(m_.num_heads), sp_.attn, one_sequence(), mask_, cos_,
               [this, &lp](int in, const std::string& name, Poly n) { return lin(in, lp.lin.at(name), n); },
               [this](int in, int w, std::int64_t width, Poly n) { return norm(in, w, -1, width, n); },
               [this](int in, Poly n) { return rope(in, n); },
               scores(1)};  // DeepSeek-V3.2's indexer: one score per query-key pair
    return mla_attention(st, x, lp.q_norm, lp.k_norm);
  }
  const std::int64_t nh = m_.num_heads;
  const std::int64_t nkv = lp.kv_heads > 0 ? lp.kv_heads : m_.num_kv_heads;
  const std::int64_t hd = lp.head_dim > 0 ? lp.head_dim : m_.head_dim;
  const Poly qn = tok(nh * hd), kvn = tok(nkv * hd);
  // Gemma 4's sliding layers rotate with their own (s, head_dim) tables, its full layers with
  // the (s, global_head_dim) ones.
  const bool local_tables = m_.model_type == "gemma4_text" && lp.sliding && cos_local_ >= 0;
  if (local_tables) {
    std::swap(cos_, cos_local_);
    std::swap(sin_, sin_local_);
  }
  int q, k, v;
  int out_gate = -1;
  if (m_.fused_qkv) {
    const int qkv = lin(x, lp.lin.at(m_.model_type == "gpt2" ? "c_attn" : "qkv_proj"), tok(nh * hd + 2 * nkv * hd));
    q = ops_.slice(qkv, qn, false);
    k = ops_.slice(qkv, kvn, false);
    v = ops_.slice(qkv, kvn, false);
    g_.drop(qkv);
  } else {
    if (m_.attn_output_gate) {
      // Qwen3NextAttention: chunk(q_proj(x).view(..., 2 * head_dim), 2): queries and a gate, whose
      // reshape(*input_shape, -1) copies (a chunk is not contiguous).
      const int qg = lin(x, lp.lin.at("q_proj"), qn * 2);
      q = ops_.slice(qg, qn, false);
      const int gv = ops_.slice(qg, qn, false);
      out_gate = ops_.clone(gv);
      g_.drop(gv);
      g_.drop(qg);
    } else {
      q = lin(x, lp.lin.at("q_proj"), qn);
    }
    if (lp.kv_shared) {
      // Gemma 4: the K/V the last earlier layer of this type stored in shared_kv_states (normed
      // and rotated); tensors of their size when that layer is not in this run (a later
      // pipeline stage).
      const int* kv = shared_kv_[lp.sliding ? 0 : 1];
      if (kv[0] >= 0) {
        k = kv[0];
        v = kv[1];
        g_.hold(k);
        g_.hold(v);
      } else {
        k = g_.make(kvn, g_.at(q).dt, Cat::kActivations);
        v = g_.make(kvn, g_.at(q).dt, Cat::kActivations);
      }
    } else {
      k = lin(x, lp.lin.at("k_proj"), kvn);
      if (lp.k_eq_v) {  // Gemma 4 attention_k_eq_v: value_states = key_states (before k_norm)
        g_.hold(k);
        v = k;
      } else {
        v = lin(x, lp.lin.at("v_proj"), kvn);
      }
    }
  }
  if (lp.q_norm >= 0) {  // Qwen3 / Gemma 3: RMSNorm over head_dim before the transpose
    const int qn2 = norm(q, lp.q_norm, -1, hd, qn);
    g_.drop(q);
    q = qn2;
    if (lp.k_norm >= 0) {
      const int kn2 = norm(k, lp.k_norm, -1, hd, kvn);
      g_.drop(k);
      k = kn2;
    }
  }
  if (m_.v_norm && !lp.kv_shared) {  // Gemma 4 v_norm: RMSNorm without a weight, fp32 inside
    Poly rows = kvn;
    for (auto& r : rows.c) r /= hd;
    const DT in_dt = g_.at(v).dt;
    const int n = rms_normalize(v, kvn, rows);
    const int vn = ops_.to(n, in_dt);
    g_.drop(n);
    g_.drop(v);
    v = vn;
  }
  // Llama4TextAttention (docs/models.md#llama-4) keeps q and k in (b, s, heads, head_dim) through
  // its rotary embedding (complex, in fp32) and L2 norm on the rotary layers, and the temperature
  // scaling of q on the NoPE layers; the transpose comes after. A q or k made by one of those
  // elementwise ops needs no copy for its gradient: the op's backward writes a new tensor.
  bool fresh_q = false, fresh_k = false;
  if (llama4()) {
    if (!lp.nope) {
      const auto [qr, kr] = llama4_rotary(g_, ops_, q, k, cos_, qn, kvn);
      g_.drop(q);
      g_.drop(k);
      q = qr;
      k = kr;
      if (m_.qk_l2_norm) {
        const int q2 = llama4_l2_norm(g_, ops_, q, qn, tok(nh));
        g_.drop(q);
        q = q2;
        const int k2 = llama4_l2_norm(g_, ops_, k, kvn, tok(nkv));
        g_.drop(k);
        k = k2;
      }
      fresh_k = true;
    } else {
      // attn_temperature_tuning (true or truthy in the released configs; memplan assumes it on).
      const int q2 = llama4_temperature(g_, ops_, q, qn, Poly::mono(kS, 1));
      g_.drop(q);
      q = q2;
    }
    fresh_q = true;
  }
  if (falcon_h1()) {  // FalconH1Attention: k_proj(x).view(...).transpose(1, 2) * key_multiplier
    const int k2 = ops_.scalar_op(k);
    g_.drop(k);
    k = k2;
  }
  // .view(...).transpose(1, 2): the gradient needs a contiguous copy before the projection's
  // backward, except when the head dimension has size one (a single KV head).
  const bool one_kv = nkv == 1;
  const int qt = m_.num_heads == 1 || fresh_q ? ops_.view(q) : ops_.transpose_view(q);
  const int kt = one_kv || fresh_k ? ops_.view(k) : ops_.transpose_view(k);
  const int vt = one_kv ? ops_.view(v) : ops_.transpose_view(v);
  g_.drop(q);
  g_.drop(k);
  g_.drop(v);
  int qe = qt, ke = kt;
  // NemotronHAttention applies no rotary embedding (the Mamba-2 layers carry the positions).
  // Cohere2Attention rotates on its sliding layers only (docs/models.md#cohere).
  const bool no_rope = m_.model_type == "gpt2" || m_.model_type == "nemotron_h" || llama4() || lp.nope || granite_nope();
  if (!no_rope && cohere()) {
    std::tie(qe, ke) = cohere_rope(qt, kt, qn, kvn);
    g_.drop(qt);
    g_.drop(kt);
  } else if (!no_rope && sp_.liger_kernels && !glm_rope()) {
    // (GLM keeps its own rotary under Liger: apply_liger_kernel_to_glm4 refuses rope=True.)
    std::tie(qe, ke) = liger_rope(g_, qt, kt);
    g_.drop(qt);
    g_.drop(kt);
  } else if (!no_rope) {
    // apply_multimodal_rotary_pos_emb: torch.cat of the mrope sections gives this call its own
    // (b, s, head_dim) cos and sin, which the products with q and k keep for backward.
    const int tables_cos = cos_, tables_sin = sin_;
    if (m_.mrope) {
      cos_ = g_.make(tok(hd), g_.at(tables_cos).dt, Cat::kInputs);
      sin_ = g_.make(tok(hd), g_.at(tables_sin).dt, Cat::kInputs);
    }
    const std::int64_t rd = m_.qk_rope_head_dim;
    if (rd > 0 && rd < hd) {
      // Partial rotary (Qwen3-Next): q[..., :rd] rotated, q[..., rd:] passed, torch.cat of both.
      // GLM's apply_rotary_pos_emb makes this call's own (1, 1, s, rd) cos and sin, the tables'
      // size (cos[..., :rd // 2].repeat_interleave(2, -1)), which the products keep for backward, and
      // rotates both q and k before either torch.cat. Its rotate_half (torch.stack((-x2, x1), -1)
      // of the odd and even dims) allocates what the half-split one's torch.cat does.
      const bool glm = glm_rope();
      if (glm) {
        cos_ = g_.make(g_.at(tables_cos).numel, g_.at(tables_cos).dt, Cat::kInputs);
        sin_ = g_.make(g_.at(tables_sin).numel, g_.at(tables_sin).dt, Cat::kInputs);
      }
      const auto rotate = [&](int t, std::int64_t heads) {
        const int rot = ops_.slice(t, tok(heads * rd), false);
        const int pass = ops_.slice(t, tok(heads * (hd - rd)), false);
        const int emb = rope(rot, tok(heads * rd));
        g_.drop(rot);
        return std::pair{emb, pass};
      };
      const auto join = [&](std::pair<int, int> ep) {
        const int out = ops_.concat({ep.first, ep.second});
        g_.drop(ep.first);
        g_.drop(ep.second);
        return out;
      };
      if (glm) {
        const auto q_parts = rotate(qt, nh);
        const auto k_parts = rotate(kt, nkv);
        qe = join(q_parts);
        ke = join(k_parts);
        g_.drop(cos_);
        g_.drop(sin_);
        cos_ = tables_cos;
        sin_ = tables_sin;
      } else {
        qe = join(rotate(qt, nh));
        ke = join(rotate(kt, nkv));
      }
    } else {
      qe = rope(qt, qn);
      if (lp.kv_shared) {  // already rotated by the layer that stored them
        g_.hold(kt);
        ke = kt;
      } else {
        ke = rope(kt, kvn);
      }
    }
    g_.drop(qt);
    g_.drop(kt);
    if (lp.store_kv && layers_forward_) {  // shared_kv_states[layer_type] = key_states, value_states
      int* kv = shared_kv_[lp.sliding ? 0 : 1];
      kv[0] = ke;
      kv[1] = vt;
      g_.hold(ke);
      g_.hold(vt);
    }
    if (m_.mrope) {
      g_.drop(cos_);
      g_.drop(sin_);
      cos_ = tables_cos;
      sin_ = tables_sin;
    }
  }
  const int n_rep = static_cast<int>(nh / nkv);
  int out = -1, probs = -1;
  const AttnImpl impl = sp_.attn;
  if (impl == AttnImpl::kEager) {
    const int kr = ops_.repeat_kv(ke, n_rep, one_kv);
    const int vr = ops_.repeat_kv(vt, n_rep, one_kv);
    // matmul folds (b, heads) into bmm's batch: the permuted query needs a copy unless b == 1;
    // a stride-0 (single KV head) key/value needs one unless b == 1.
    const bool copy_kv = one_kv && n_rep > 1 && !one_sequence();
    const int layer_mask = lp.sliding && sliding_mask_ >= 0 ? sliding_mask_ : mask_;
    probs = lp.sinks >= 0 ? sink_eager_probs(g_, ops_, qe, ops_.view(kr), layer_mask, lp.sinks, scores(nh), tok(nh),
                                             !one_sequence(), copy_kv)
            : llama4()    ? llama4_eager_probs(g_, ops_, qe, ops_.view(kr), layer_mask, scores(nh), !one_sequence(), copy_kv)
                          : ops_.eager_probs(qe, ops_.view(kr), layer_mask, scores(nh), !one_sequence(), copy_kv,
                                             m_.attn_logit_softcap > 0);
    if (m_.model_type == "starcoder2" && m_.attention_dropout > 0) {  // dropout(attn_weights, attention_dropout)
      ops_.cat = Cat::kAttentionScores;
      const int pd = ops_.dropout(probs, m_.attention_dropout);
      g_.drop(probs);
      probs = pd;
    }
    g_.hold(probs);  // returned to the caller as well
    out = ops_.attention_output(probs, vr, qn, copy_kv);
    g_.drop(vr);
    g_.drop(kr);
  } else {
    // SDPA (flash / memory-efficient / cuDNN kernels) and flash_attention_2: no (s x s) tensor;
    // the kernel saves q, k, v, the output and a per-row fp32 logsumexp; backward allocates dq,
    // dk, dv plus an fp32 dq accumulator and per-row softmax sums. transformers'
    // sdpa_attention_forward passes enable_gqa=True instead of repeat_kv when there is no mask
    // (unpadded batches: the causal mask is skipped for is_causal) and head_dim <= 256; the
    // kernels write the output in (b, s, heads, d) layout, so .transpose(1, 2).contiguous() copies
    // nothing. Measured on an H100 (tests/data/measurements/cuda_h100.json).
    // A layer given a materialized mask (a sliding layer at s >= sliding_window; every layer of
    // Gemma 3 with images) makes transformers repeat K/V; SDPA converts the bool mask to a dense
    // (b, 1, s, s) additive one in q's dtype (convert_boolean_attn_mask), which the
    // memory-efficient kernel saves for backward.
    const bool sdpa_masked = impl == AttnImpl::kSdpa && (lp.sliding ? sp_.sdpa_sliding_mask : sp_.sdpa_full_mask);
    // torchtune's MultiHeadAttention expands K and V to every head itself (expand + flatten: a
    // copy unless there is one KV head) and never passes enable_gqa.
    const bool native_gqa = !sdpa_masked && !sp_.expand_kv && (impl == AttnImpl::kFlashAttention2 || hd <= 256);
    const int kr0 = native_gqa ? (g_.hold(ke), ke) : ops_.repeat_kv(ke, n_rep, one_kv);
    const int vr0 = native_gqa ? (g_.hold(vt), vt) : ops_.repeat_kv(vt, n_rep, one_kv);
    const int o = sdpa_kernel(qe, kr0, vr0, qn, sdpa_masked ? scores(1) : Poly{}, std::nullopt);
    out = ops_.view(o);  // already (b, s, heads, d)
    g_.drop(o);
  }
  int r = ops_.view(out);  // reshape(*input_shape, -1).contiguous()
  g_.drop(out);
  if (out_gate >= 0) {  // attn_output * torch.sigmoid(gate): sigmoid saves its result, the product both
    const int sg = ops_.tanh(out_gate);
    g_.drop(out_gate);
    const int gr = ops_.mul(r, sg, qn);
    g_.drop(r);
    g_.drop(sg);
    r = gr;
  }
  const int o = lin(r, lp.lin.at(m_.model_type == "gpt2" ? "c_proj" : attention_out_name(m_)), tok(m_.hidden_size));
  g_.drop(r);
  // query_states/key_states/value_states are locals of the attention forward until it returns.
  g_.drop(qe);
  g_.drop(ke);
  g_.drop(vt);
  if (local_tables) {
    std::swap(cos_, cos_local_);
    std::swap(sin_, sin_local_);
  }
  return {o, probs};
}

// ---- MLP and MoE

int Step::gelu_new(int x) {
  // GPT-2 NewGELUActivation: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
  const Poly n = g_.at(x).numel;
  const int x3 = ops_.pow2(x);
  const int a = ops_.scalar_op(x3);
  g_.drop(x3);
  const int s = ops_.add(x, a, n);
  g_.drop(a);
  const int s2 = ops_.scalar_op(s);
  g_.drop(s);
  const int t = ops_.tanh(s2);
  g_.drop(s2);
  const int t1 = ops_.scalar_op(t);
  g_.drop(t);
  const int hx = ops_.scalar_op(x);
  const int out = ops_.mul(hx, t1, n);
  g_.drop(hx);
  g_.drop(t1);
  return out;
}

int Step::mlp(int x, LayerParams& lp, const std::string& prefix, std::int64_t width, Poly tokens_k, bool gpt2,
              int groups) {
  Poly wide = tokens_k, narrow = tokens_k;
  for (auto& v : wide.c) v = (v * width + groups - 1) / groups;
  for (auto& v : narrow.c) v = (v * m_.hidden_size + groups - 1) / groups;
  if (gpt2) {
    const int f = lin(x, lp.lin.at("mlp.c_fc"), wide);
    const int a = gelu_new(f);
    g_.drop(f);
    const int o = lin(a, lp.lin.at("mlp.c_proj"), narrow);
    g_.drop(a);
    return o;
  }
  if (m_.model_type == "starcoder2") {  // Starcoder2MLP: c_proj(act(c_fc(x))), gelu_pytorch_tanh keeps its input
    const int f = lin(x, lp.lin.at("c_fc"), wide);
    const int a = ops_.gelu(f);
    g_.drop(f);
    const int o = lin(a, lp.lin.at("c_proj"), narrow);
    g_.drop(a);
    return o;
  }
  if (!m_.gated_mlp) {  // NemotronHMLP: down_proj(square(relu(up_proj(x))))
    const int u = lin(x, lp.lin.at(prefix + "up_proj"), wide);
    const int r = ops_.tanh(u);  // relu: saves its result
    g_.drop(u);
    const int sq = ops_.pow2(r);  // torch.square: saves its input
    g_.drop(r);
    const int o = lin(sq, lp.lin.at(prefix + "down_proj"), narrow);
    g_.drop(sq);
    return o;
  }
  // Mixtral's experts and LFM2's MLP are w1 (gate), w3 (up), w2 (down).
  const bool mixtral = (m_.model_type == "mixtral" && prefix.empty() && lp.moe) || m_.model_type == "lfm2";
  int act, up;
  // Phi-3's gate_up_proj Linear, and the fused expert Parameters (DeepSeek-V3.2's routed experts).
  if (m_.fused_gate_up || lp.lin.count(prefix + "gate_up_proj") > 0) {
    Poly both = wide * 2;
    const int gu = lin(x, lp.lin.at(prefix + "gate_up_proj"), both);
    const int gate = ops_.slice(gu, wide, false);
    up = ops_.slice(gu, wide, false);
    g_.drop(gu);
    act = m_.activation == Activation::kSilu ? ops_.silu(gate) : ops_.gelu(gate);
    g_.drop(gate);
  } else if (falcon_h1()) {
    // FalconH1MLP: up_proj(x) * act(gate_proj(x) * gate_multiplier): Python evaluates up_proj
    // first, and the multiplier makes a new tensor (the SiLU saves it); down_multiplier below.
    up = lin(x, lp.lin.at(prefix + "up_proj"), wide);
    const int gate = lin(x, lp.lin.at(prefix + "gate_proj"), wide);
    const int gs = ops_.scalar_op(gate);
    g_.drop(gate);
    act = ops_.silu(gs);
    g_.drop(gs);
  } else if (sp_.liger_kernels) {
    // LigerSwiGLUMLP / LigerGEGLUMLP: down_proj(act_mul(gate_proj(x), up_proj(x))).
    const int gate = lin(x, lp.lin.at(prefix + (mixtral ? "w1" : "gate_proj")), wide);
    up = lin(x, lp.lin.at(prefix + (mixtral ? "w3" : "up_proj")), wide);
    const int pl = liger_swiglu(g_, ops_, gate, up);
    g_.drop(gate);
    g_.drop(up);
    const int o = lin(pl, lp.lin.at(prefix + (mixtral ? "w2" : "down_proj")), narrow);
    g_.drop(pl);
    return o;
  } else {
    const int gate = lin(x, lp.lin.at(prefix + (mixtral ? "w1" : "gate_proj")), wide);
    act = m_.activation == Activation::kSilu ? ops_.silu(gate) : ops_.gelu(gate);
    g_.drop(gate);
    up = lin(x, lp.lin.at(prefix + (mixtral ? "w3" : "up_proj")), wide);
  }
  const int p = ops_.mul(act, up, wide);
  g_.drop(act);
  g_.drop(up);
  const int o = lin(p, lp.lin.at(prefix + (mixtral ? "w2" : "down_proj")), narrow);
  g_.drop(p);
  if (falcon_h1()) {  // down_proj(y) * down_multiplier: a new tensor
    const int os = ops_.scalar_op(o);
    g_.drop(o);
    return os;
  }
  return o;
}

// The expert loops run in G groups of E / G experts (G: E up to 8, else the largest divisor of E
// up to 8), so each group's transients and backward temporaries are those of E / G experts, as
// the per-expert loop's are of one, at a bounded cost in graph size (docs/models.md#gpt_oss).
int expert_loop_groups(std::int64_t E) {
  if (E <= 8) return static_cast<int>(E);
  int groups = 1;
  for (int gsz = 1; gsz <= 8; ++gsz)
    if (E % gsz == 0) groups = gsz;
  return groups;
}

// `out * weights[pairs..., None]` (out: `pairs_h` elements; a gathered copy of the pairs' weights:
// `pairs` rows, kept indices weight_index; IndexBackward fills zeros of the weights' size), cast to out_dt, then
// next.index_add_(0, weight_index[0], weighted) into `total` elements: IndexAddBackward keeps the
// index and the source. Consumes out and next; the caller drops its index tensors.
int Step::weighted_index_add(int next, int out, int weights, DT weight_dt, const Ids& weight_index, const Poly& pairs,
                             const Poly& pairs_h, DT out_dt, const Poly& total) {
  const int rw = g_.make(pairs, weight_dt, ops_.cat);
  g_.node({weights}, {rw}, weight_index, [weights](Bwd& ctx) { ctx.give(weights, ctx.like(weights)); });
  int wo = ops_.mul(out, rw, pairs_h);
  g_.drop(out);
  g_.drop(rw);
  if (g_.at(wo).dt != out_dt) {  // .to(the output's dtype)
    const int c2 = ops_.to(wo, out_dt);
    g_.drop(wo);
    wo = c2;
  }
  const int token_idx = weight_index[0];
  const int sum = g_.make(total, out_dt, ops_.cat);
  g_.node({next, wo}, {sum}, {wo, token_idx}, [next, wo](Bwd& ctx) {
    ctx.pass(next, ctx.grad());
    ctx.give(wo, ctx.like(wo));
  });
  g_.drop(next);
  g_.drop(wo);
  return sum;
}

int Step::moe(int x, LayerParams& lp) {
  // Routed experts, as transformers' eager MoE blocks (docs/formulas.md#the-model-forward): the router, top-k;
  // each expert runs on the tokens routed to it (balanced routing: tokens * k in all), scaled by
  // its routing weight and index_add_-ed into a zero-initialised output.
  const std::int64_t h = m_.hidden_size, E = m_.moe.num_experts;
  // Llama4TextMoe runs every token through every expert (hidden_states.repeat(E, 1) scaled by a
  // sigmoid score that is 0 for the experts not chosen, two bmm over all experts): E token-expert
  // pairs per token, and a full (tokens, E) score tensor (docs/models.md#llama-4).
  const std::int64_t k = m_.model_type == "llama4_text" ? E : m_.moe.experts_per_token;
  const DT xdt = g_.at(x).dt;
  // DeepseekV3MoE (DeepSeek-V3, Kimi K2; Glm4MoeMoE is the same code): a sigmoid router on fp32
  // copies, its weights kept in fp32, so the weighted expert outputs and the output they are
  // added into are fp32 too.
  // MiniMaxM2TopKRouter scores the same way (sigmoid of fp32 logits, gather, in-place
  // normalization), but its experts add into zeros_like(hidden_states): the weighted outputs are
  // cast back to the hidden dtype before index_add_ (docs/models.md#minimax_m2).
  const bool minimax = m_.model_type == "minimax_m2";
  // NemotronHMoE (Nemotron 3) routes the same way; its experts are relu2 MLPs.
  const bool ds3 = m_.model_type == "deepseek_v3" || m_.model_type == "kimi_k2" || m_.model_type == "glm4_moe" ||
                   m_.model_type == "nemotron_h" || m_.model_type == "deepseek_v32" || minimax;
  // The tokens this rank routes: all of them, or its s / t share when the sequence is not
  // gathered for the experts (ProgramSpec::moe_gather).
  const std::int64_t div = seq_par() && !sp_.moe_gather ? sp_.sequence_parallel : 1;
  const auto tok = [&](std::int64_t w) { return Poly::mono(tok_mono(), (w * seqs_per_forward() + div - 1) / div); };
  int topw = -1, topi = -1;
  DT weights_dt = DT::kF32;
  if (ds3) {
    // DeepseekV3TopkRouter: F.linear(hidden.float(), weight.float()), sigmoid (saves its result),
    // top-k under no_grad, scores.gather (saves the indices), topk_weights /= (sum + eps) in place
    // (saves a copy of the weights before and the denominator), * routed_scaling_factor.
    const LinearParams& gate = lp.lin.at("gate");
    int logits;
    if (minimax) {
      // MiniMaxM2TopKRouter: F.linear(hidden_states.to(weight.dtype), weight) in the model's
      // dtype (no copies: linear saves x and the weight as they are), then
      // sigmoid(router_logits.float()): an fp32 copy of the (tokens, experts) logits.
      const int l = ops_.linear(x, gate.w, -1, tok(E));
      logits = ops_.to(l, DT::kF32);
      g_.drop(l);
    } else {
      const int xf = ops_.to(x, DT::kF32);
      const int wf = ops_.to(gate.w, DT::kF32);
      logits = ops_.linear(xf, wf, -1, tok(E));
      g_.drop(xf);
      g_.drop(wf);
    }
    // Under autocast F.linear computes in the autocast dtype whatever the .float() casts did: the
    // scores, weights and everything weighted by them follow the logits' dtype.
    weights_dt = g_.at(logits).dt;
    const int scores = ops_.tanh(logits);  // sigmoid: saves its result, as tanh does
    g_.drop(logits);
    topi = g_.make(tok(k), DT::kI64, ops_.cat);
    const int gathered = g_.make(tok(k), weights_dt, ops_.cat);
    g_.node({scores}, {gathered}, {topi}, [scores](Bwd& ctx) { ctx.give(scores, ctx.like(scores)); });
    g_.drop(scores);
    const int denom = g_.make(tok(1), weights_dt, ops_.cat);
    g_.node({gathered}, {denom}, {}, [gathered](Bwd& ctx) { ctx.give(gathered, ctx.like(gathered)); });
    const int before = g_.make(tok(k), weights_dt, ops_.cat);  // the in-place division's saved original
    const int normed = g_.make(tok(k), weights_dt, ops_.cat);
    g_.node({gathered, denom}, {normed}, {before, denom}, [gathered, denom](Bwd& ctx) {
      ctx.give(gathered, ctx.like(gathered));
      ctx.give(denom, ctx.like(denom));
    });
    g_.drop(before);
    g_.drop(denom);
    g_.drop(gathered);
    if (minimax) {  // no routed_scaling_factor
      topw = normed;
    } else {
      topw = ops_.scalar_op(normed);
      g_.drop(normed);
    }
  } else if (granite_hybrid()) {
    // GraniteMoeHybridTopKGating: router.layer(x).float(), topk of the fp32 logits (saves its
    // indices), softmax over the k (saves its result); the (tokens, E) gates scatter and its
    // .long() copy are transients of the router.
    const int l = lin(x, lp.lin.at("gate"), tok(E));
    const int lf = ops_.to(l, DT::kF32);
    g_.drop(l);
    topi = g_.make(tok(k), DT::kI64, ops_.cat);
    const int tv = g_.make(tok(k), DT::kF32, ops_.cat);
    g_.node({lf}, {tv}, {topi}, [lf](Bwd& ctx) { ctx.give(lf, ctx.like(lf)); });
    g_.drop(lf);
    g_.drop(g_.make(tok(E), xdt, ops_.cat));
    g_.drop(g_.make(tok(E), DT::kI64, ops_.cat));
    topw = ops_.softmax_f32(tv);
    g_.drop(tv);
  } else {
    // Mixtral / Qwen-MoE: fp32 softmax, torch.topk (saves its indices).
    const int logits = lin(x, lp.lin.at("gate"), tok(E));
    const int probs = ops_.softmax_f32(logits);
    g_.drop(logits);
    topi = g_.make(tok(k), DT::kI64, ops_.cat);
    topw = g_.make(tok(k), DT::kF32, ops_.cat);
    g_.node({probs}, {topw}, {topi}, [probs](Bwd& ctx) { ctx.give(probs, ctx.like(probs)); });
    g_.drop(probs);
  }
  // Mixtral casts the routing weights to the hidden dtype; DeepSeek keeps them fp32.
  const int weights = ds3 ? topw : ops_.to(topw, xdt);
  if (!ds3) g_.drop(topw);
  // MiniMaxM2Experts and DeepseekV32Experts add into zeros_like(hidden_states) (the weighted
  // outputs cast back), DeepseekV3MoE into zeros of the weights' dtype.
  const DT out_dt = ds3 && !minimax && m_.model_type != "deepseek_v32" ? weights_dt : xdt;
  const int out = g_.make(tok(h), out_dt, ops_.cat);  // zeros (zeros_like(..., dtype=topk_weights.dtype))
  // Token-expert pairs this GPU's experts compute: tokens x k with balanced dropless routing;
  // with a capacity factor, every expert padded to its capacity (docs/formulas.md#expert-parallelism).
  const auto routed = [&](std::int64_t width) {
    return Poly::mono(tok_mono(), (checked_mul(checked_mul(width * k, seqs_per_forward()), sp_.moe_tokens_per_mille) +
                                   1000 * div - 1) /
                                      (1000 * div));
  };
  // MiniMaxM2Experts and DeepseekV32Experts (transformers 5) hold the experts as two 3-D
  // Parameters, gate_up_proj [E, 2I, H] and down_proj [E, H, I], and loop over the experts hit:
  // self.gate_up_proj[expert_idx] is a select view, and each expert's SelectBackward returns a
  // zero tensor of the whole Parameter with its slice copied in, which the Parameter's input
  // buffer adds to the running sum (out of place in torch 1.13: the sum, the new zero tensor and
  // their sum at once). Backward runs the experts one after another, so this happens while the
  // experts not yet reached still hold what they saved: the peak is at the second expert, above
  // six eighths of the layer's expert activations (measured, docs/models.md#fused-expert-parameters).
  // The loop runs in G groups as gpt-oss's does (G: E up to 8, else the largest divisor of E up
  // to 8), each group reading the Parameters through its own views.
  // GraniteMoeHybridParallelExperts likewise: input_linear [E, 2I, H] and output_linear [E, H, I],
  // self.weight[i] per expert (docs/models.md#granite-4-0).
  const bool param_experts =
      (minimax || m_.model_type == "deepseek_v32" || granite_hybrid()) && sp_.expert_parallel <= 1;
  int summed = -1;
  if (param_experts) {
    const int groups = expert_loop_groups(E);
    // Group grp's share of the token-expert pairs: the pairs split as evenly as whole numbers
    // allow (per token), so the groups add up to routed(w) exactly.
    int grp = 0;
    const auto grouped = [&](std::int64_t w) {
      Poly r = routed(w);
      for (auto& v : r.c) v = v / groups + (grp < v % groups ? 1 : 0);
      return r;
    };
    const bool fused_gu = lp.lin.count("gate_up_proj") > 0;
    const std::vector<std::string> gu_names =
        fused_gu ? std::vector<std::string>{"gate_up_proj"} : std::vector<std::string>{"gate_proj", "up_proj"};
    // one_hot(top_k_index); Granite sorts the pairs by expert instead.
    const int onehot = granite_hybrid() ? -1 : g_.make(tok(checked_mul(k, E)), DT::kI64, ops_.cat);
    int next = out;
    for (; grp < groups; ++grp) {
      // torch.where(expert_mask[e]): the pairs' top-k slots and tokens (int64)
      const int slot_idx = g_.make(grouped(1), DT::kI64, ops_.cat);
      const int token_idx = g_.make(grouped(1), DT::kI64, ops_.cat);
      // hidden_states[token_idx]: IndexBackward fills zeros of the input's size
      const int cs = g_.make(grouped(h), xdt, ops_.cat);
      g_.node({x}, {cs}, {token_idx}, [x](Bwd& ctx) { ctx.give(x, ctx.like(x)); });
      std::vector<std::pair<LinearParams*, int>> swapped;
      const auto select_view = [&](const std::vector<std::string>& names) {
        Ids params;
        for (const auto& n : names) params.push_back(lp.lin.at(n).w);
        const Ids views = ops_.expert_parameter_views(params, 1);
        for (std::size_t i = 0; i < names.size(); ++i) {
          LinearParams& p = lp.lin.at(names[i]);
          swapped.emplace_back(&p, p.w);
          p.w = views[i];
        }
      };
      select_view(gu_names);
      select_view({"down_proj"});
      const int eo = mlp(cs, lp, "", m_.moe.expert_intermediate_size, routed(1), false, groups);
      for (auto& [p, w] : swapped) {
        g_.drop(p->w);
        p->w = w;
      }
      g_.drop(cs);
      // * top_k_weights[token_idx, top_k_pos, None], final_hidden_states.index_add_(0, token_idx, ...)
      next = weighted_index_add(next, eo, weights, g_.at(weights).dt, {token_idx, slot_idx}, grouped(1), grouped(h), out_dt,
                                tok(h));
      g_.drop(token_idx);
      g_.drop(slot_idx);
    }
    if (onehot >= 0) g_.drop(onehot);
    g_.drop(weights);
    g_.drop(topi);
    summed = next;
  } else {
    // one_hot(topk_indices, num_experts) (int64), alive through the expert loop.
    const int onehot = g_.make(tok(checked_mul(k, E)), DT::kI64, ops_.cat);
    // torch.where(expert_mask[e]) per expert: the token and top-k slot of each pair (int64), kept by
    // the gather of the rows, the routing weights' indexing and index_add_.
    const int token_idx = g_.make(routed(1), DT::kI64, ops_.cat);
    const int slot_idx = g_.make(routed(1), DT::kI64, ops_.cat);
    // hidden_states[token_idx] for every expert: tokens * k gathered rows; backward scatters them back.
    const int xs = g_.make(routed(h), xdt, ops_.cat);
    g_.node({x}, {xs}, {token_idx}, [x](Bwd& ctx) { ctx.give(x, ctx.like(x)); });
    // routing_weights[token_idx, slot_idx]: the pairs' weights.
    const int rw = g_.make(routed(1), g_.at(weights).dt, ops_.cat);
    g_.node({weights}, {rw}, {token_idx, slot_idx}, [weights](Bwd& ctx) { ctx.give(weights, ctx.like(weights)); });
    g_.drop(weights);
    g_.drop(slot_idx);
    // Expert parallelism: an all-to-all sends the permuted tokens to the experts' GPUs and one
    // brings the outputs back; neither saves anything for backward, whose all-to-alls allocate
    // the same buffers for the gradients.
    const auto all_to_all = [&](int t) {
      const int r = g_.make(g_.at(t).numel, g_.at(t).dt, ops_.cat);
      g_.node({t}, {r}, {}, [t](Bwd& ctx) { ctx.give(t, ctx.like(t)); });
      g_.drop(t);
      return r;
    };
    const int ein = sp_.expert_parallel > 1 ? all_to_all(xs) : xs;
    int e = mlp(ein, lp, "", m_.moe.expert_intermediate_size, routed(1), false);
    g_.drop(ein);
    if (sp_.expert_parallel > 1) e = all_to_all(e);
    int scaled = ops_.mul(e, rw, routed(h));
    g_.drop(e);
    g_.drop(rw);
    if (g_.at(scaled).dt != out_dt) {  // MiniMax-M2: .to(final_hidden_states.dtype)
      const int c2 = ops_.to(scaled, out_dt);
      g_.drop(scaled);
      scaled = c2;
    }
    g_.drop(onehot);
    // final_hidden_states.index_add_(0, token_idx, scaled): its backward
    // (grad.index_select(dim, index).expand_as(source)) saves the source and the index.
    summed = g_.make(tok(h), out_dt, ops_.cat);
    g_.node({out, scaled}, {summed}, {scaled, token_idx}, [out, scaled](Bwd& ctx) {
      ctx.pass(out, ctx.grad());
      ctx.give(scaled, ctx.like(scaled));
    });
    g_.drop(out);
    g_.drop(scaled);
    g_.drop(token_idx);
    g_.drop(topi);
  }
  if (out_dt != xdt) {  // final_hidden_states.type(hidden_states.dtype)
    const int c = ops_.to(summed, xdt);
    g_.drop(summed);
    summed = c;
  }
  int result = summed;
  if (m_.moe.num_shared_experts > 0) {
    const int sh = mlp(x, lp, "shared.", m_.moe.shared_intermediate_size * m_.moe.num_shared_experts, tok(1), false);
    int shv = sh;
    if (m_.moe.shared_expert_gate) {
      const int gl = lin(x, lp.lin.at("shared_expert_gate"), tok(1));
      const int sg = ops_.tanh(gl);  // sigmoid: saves its result like tanh
      g_.drop(gl);
      shv = ops_.mul(sg, sh, tok(h));
      g_.drop(sg);
      g_.drop(sh);
    }
    result = ops_.add(summed, shv, tok(h));
    g_.drop(summed);
    g_.drop(shv);
  }
  return result;
}

std::pair<int, int> Step::gpt_oss_moe(int x, LayerParams& lp) {
  // GptOssMLP in training (transformers 4.55-4.57, docs/models.md#gpt_oss). GptOssTopKRouter:
  // F.linear with its bias, topk (keeps the indices), softmax over the k values in their dtype,
  // zeros_like(logits).scatter_ of them: the (tokens, experts) router scores. GptOssExperts'
  // training branch then loops over the experts hit: hidden_states[token_idx]; `current_state @
  // self.gate_up_proj[expert_idx] + self.gate_up_proj_bias[expert_idx]`, where expert_idx is a
  // one-element index tensor, so each expert's weights and biases are gathered into a copy that
  // the product keeps for backward; gate and up are strided halves, clamped (each clamp keeps its
  // input), glu = gate * sigmoid(gate * alpha), (up + 1) * glu, the same gather for down_proj,
  // `out[0] * routing_weights[token_idx, expert_idx, None]`, index_add_ into zeros (tokens x k
  // rows in all, balanced routing).
  const std::int64_t h = m_.hidden_size, E = m_.moe.num_experts, k = m_.moe.experts_per_token;
  const std::int64_t I = m_.moe.expert_intermediate_size;
  const DT xdt = g_.at(x).dt;
  const auto routed = [&](std::int64_t w) {
    return Poly::mono(tok_mono(),
                      checked_mul(checked_mul(w * k, seqs_per_forward()), sp_.moe_tokens_per_mille) / 1000);
  };
  const LinearParams& gate = lp.lin.at("gate");
  const int logits = ops_.linear(x, gate.w, gate.b, tok(E));
  const DT ldt = g_.at(logits).dt;
  const int topv = g_.make(tok(k), ldt, ops_.cat);
  const int topi = g_.make(tok(k), DT::kI64, ops_.cat);
  g_.node({logits}, {topv}, {topi}, [logits](Bwd& ctx) { ctx.give(logits, ctx.like(logits)); });
  g_.drop(logits);
  const int sm = g_.make(tok(k), ldt, ops_.cat);  // softmax(dtype=router_top_value.dtype)
  g_.node({topv}, {sm}, {sm}, [topv](Bwd& ctx) { ctx.give(topv, ctx.like(topv)); });
  g_.drop(topv);
  const int scores_t = g_.make(tok(E), ldt, ops_.cat);  // zeros_like(logits).scatter_(1, indices, values)
  g_.node({sm}, {scores_t}, {topi}, [sm](Bwd& ctx) { ctx.give(sm, ctx.like(sm)); });
  g_.drop(sm);
  // The experts: next_states = zeros_like; one_hot(router_indices) (int64) through the loop, in
  // expert_loop_groups(E) groups (what the loop saves is the same either way; docs/models.md#gpt_oss).
  const int groups = expert_loop_groups(E);
  const auto grouped = [&](std::int64_t w) {
    const Poly r = routed(w);
    Poly out = r;
    for (auto& v : out.c) v = (v + groups - 1) / groups;
    return out;
  };
  const LinearParams& gu = lp.lin.at("gate_up_proj");
  const LinearParams& dp = lp.lin.at("down_proj");
  // param[expert_idx] for the group's experts: gathered copies (IndexBackward: a zero tensor of
  // the parameter's size per expert, index_put_).
  const auto gathered = [&](int param) {
    Poly n = g_.at(param).numel;
    for (auto& v : n.c) v /= groups;
    const int cp = g_.make(n, g_.at(param).dt, ops_.cat, g_.rg(param));
    g_.node({param}, {cp}, {}, [param](Bwd& ctx) { ctx.give(param, ctx.like(param)); });
    return cp;
  };
  const auto clamp = [&](int v) {  // clamp keeps its input
    const int y = g_.make(g_.at(v).numel, g_.at(v).dt, ops_.cat);
    g_.node({v}, {y}, {v}, [v](Bwd& ctx) { ctx.give(v, ctx.like(v)); });
    g_.drop(v);
    return y;
  };
  int next = g_.make(tok(h), xdt, ops_.cat);
  const int onehot = g_.make(tok(checked_mul(k, E)), DT::kI64, ops_.cat);
  for (int grp = 0; grp < groups; ++grp) {
    const int token_idx = g_.make(grouped(1), DT::kI64, ops_.cat);  // torch.where(expert_mask[e])
    const int cs = g_.make(grouped(h), xdt, ops_.cat);              // hidden_states[token_idx]
    // IndexBackward: a zero tensor of the input's size, index_put_ into it.
    g_.node({x}, {cs}, {token_idx}, [x](Bwd& ctx) { ctx.give(x, ctx.like(x)); });
    const int wgu = gathered(gu.w);
    const int prod = ops_.matmul(cs, wgu, grouped(2 * I));
    g_.drop(wgu);
    g_.drop(cs);
    int gate_up = prod;
    if (gu.b >= 0) {
      const int bgu = gathered(gu.b);
      gate_up = ops_.add(prod, bgu, grouped(2 * I));
      g_.drop(prod);
      g_.drop(bgu);
    }
    const int gv = ops_.slice(gate_up, grouped(I), false);  // gate_up[..., ::2]
    const int uv = ops_.slice(gate_up, grouped(I), false);  // gate_up[..., 1::2]
    g_.drop(gate_up);
    const int gc = clamp(gv);
    const int uc = clamp(uv);
    const int ga = ops_.scalar_op(gc);  // gate * alpha
    const int sg = ops_.tanh(ga);       // sigmoid: keeps its result, as tanh does
    g_.drop(ga);
    const int glu = ops_.mul(gc, sg, grouped(I));
    g_.drop(gc);
    g_.drop(sg);
    const int u1 = ops_.scalar_op(uc);  // up + 1
    g_.drop(uc);
    const int go = ops_.mul(u1, glu, grouped(I));
    g_.drop(u1);
    g_.drop(glu);
    const int wd = gathered(dp.w);
    const int od = ops_.matmul(go, wd, grouped(h));
    g_.drop(wd);
    g_.drop(go);
    int out = od;
    if (dp.b >= 0) {
      const int bd = gathered(dp.b);
      out = ops_.add(od, bd, grouped(h));
      g_.drop(od);
      g_.drop(bd);
    }
    const int o0 = ops_.slice(out, grouped(h), false);  // out[0]: SelectBackward fills zeros of out's size
    g_.drop(out);
    // * routing_weights[token_idx, expert_idx, None], next_states.index_add_(0, token_idx, ...)
    next = weighted_index_add(next, o0, scores_t, ldt, {token_idx}, grouped(1), grouped(h), xdt, tok(h));
    g_.drop(token_idx);
  }
  g_.drop(onehot);
  g_.drop(topi);
  return {next, scores_t};
}

// ---- layers

int Step::decoder_layer(int h, int layer) {
  LayerParams& lp = w_->layers[static_cast<std::size_t>(layer)];
  if (lp.cross) return cross_decoder_layer(h, lp);
  if (lp.mixer != MixerKind::kAttention || !lp.ffn || granite_hybrid()) return hybrid_layer(h, lp);
  if (m_.model_type == "gemma4_text") return gemma4_layer(h, lp);
  if (cohere()) return cohere_layer(h, lp);
  if (gemma3n()) return gemma3n_layer(h, lp);
  const std::int64_t hs = m_.hidden_size;
  const bool gpt2 = m_.model_type == "gpt2";
  const bool post_norms = m_.norms_per_layer == 4;
  g_.hold(h);  // residual = hidden_states
  const int residual = h;
  const Poly H = htok();
  const int n1 = norm(h, lp.norms[0], lp.norms[1], hs, H);
  sp_gather_buffer(n1);
  auto [attn, probs] = attention(n1, lp);
  g_.drop(n1);
  if (seq_par()) {  // reduce-scatter of the row-parallel output projection
    const int a = sp_region(attn, H);
    g_.drop(attn);
    attn = a;
  }
  if (post_norms) {
    const int a2 = norm(attn, lp.norms[2], lp.norms[3], hs, H);
    g_.drop(attn);
    attn = a2;
  }
  // GPT-2 resid_dropout; Starcoder2 residual_dropout after o_proj and after c_proj (docs/models.md#starcoder2).
  const double resid_p = gpt2 ? 0.1 : m_.model_type == "starcoder2" ? m_.hidden_dropout : 0.0;
  if (resid_p > 0) {
    const int d = ops_.dropout(attn, resid_p);
    g_.drop(attn);
    attn = d;
  }
  if (granite_multipliers()) attn = residual_scale(attn);  // GraniteDecoderLayer
  const int h2 = ops_.add(residual, attn, H);
  // Llama4TextDecoderLayer binds the attention output to its own name (`attention_states, _ =
  // self.self_attn(...)`): it lives to the layer's end, not only to the residual add.
  int attention_states = -1;
  if (llama4()) attention_states = attn;
  else g_.drop(attn);
  g_.drop(residual);
  const int n2 = norm(h2, lp.norms[post_norms ? 4 : 2], lp.norms[post_norms ? 5 : 3], hs, H);
  int m;
  int router_scores = -1;  // gpt-oss: `hidden_states, _ = self.mlp(...)`, `_` lives to the layer's end
  if (lp.moe) {
    // MoE layers route every token of the sequence: gathered (and kept by the router) under
    // sequence parallelism.
    const int in = seq_par() && sp_.moe_gather ? sp_region(n2, tok(hs)) : n2;
    if (m_.model_type == "gpt_oss") {
      std::tie(m, router_scores) = gpt_oss_moe(in, lp);
    } else if (llama4() && sp_.expert_parallel <= 1 && sp_.moe_tokens_per_mille == 1000 && !seq_par()) {
      // Llama4TextMoe: every token through every expert (src/core/sim/llama4.cpp); with expert
      // parallelism or capacity factors, the generic routed path with E pairs per token below.
      Llama4Moe st;
      st.experts = m_.moe.num_experts;
      st.top_k = m_.moe.experts_per_token;
      st.hidden = hs;
      st.width = m_.moe.expert_intermediate_size;
      st.tokens = tok(1);
      st.router = [this, &lp](int xi, Poly n) { return lin(xi, lp.lin.at("gate"), n); };
      st.shared = [this, &lp](int xi) {
        return mlp(xi, lp, "shared.", m_.moe.shared_intermediate_size * m_.moe.num_shared_experts, tok(1), false);
      };
      st.w_gate = lp.lin.at("gate_proj").w;
      st.w_up = lp.lin.at("up_proj").w;
      st.w_down = lp.lin.at("down_proj").w;
      m = llama4_moe(g_, ops_, st, in);
    } else {
      m = moe(in, lp);
    }
    if (in != n2) g_.drop(in);
  } else {
    sp_gather_buffer(n2);
    m = mlp(n2, lp, "", lp.intermediate > 0 ? lp.intermediate : m_.intermediate_size, tok(1), gpt2);
  }
  g_.drop(n2);
  if (seq_par() && (!lp.moe || sp_.moe_gather)) {  // reduce-scatter back to the rank's share
    const int r = sp_region(m, H);
    g_.drop(m);
    m = r;
  }
  if (post_norms) {
    const int m2 = norm(m, lp.norms[6], lp.norms[7], hs, H);
    g_.drop(m);
    m = m2;
  }
  if (resid_p > 0) {
    const int d = ops_.dropout(m, resid_p);
    g_.drop(m);
    m = d;
  }
  if (granite_multipliers()) m = residual_scale(m);
  const int h3 = ops_.add(h2, m, H);
  g_.drop(m);
  g_.drop(h2);
  if (probs >= 0) g_.drop(probs);  // `hidden_states, _ = self.self_attn(...)`: `_` lives to here
  if (router_scores >= 0) g_.drop(router_scores);
  if (attention_states >= 0) g_.drop(attention_states);
  return h3;
}

// ---- Command R / Aya and Command R7B / A (docs/models.md#cohere)

// CohereDecoderLayer: one input_layernorm whose output feeds attention and the MLP, and
// `residual + hidden_states_attention + hidden_states_mlp`; every local lives to the return.
int Step::cohere_layer(int h, LayerParams& lp) {
  const Poly H = htok();
  g_.hold(h);  // residual = hidden_states
  const int residual = h;
  const int n1 = norm(h, lp.norms[0], -1, m_.hidden_size, H);
  sp_gather_buffer(n1);
  auto [attn, probs] = attention(n1, lp);
  int m = mlp(n1, lp, "", lp.intermediate > 0 ? lp.intermediate : m_.intermediate_size, tok(1), false);
  if (seq_par()) {  // reduce-scatter of the two row-parallel output projections
    const int a = sp_region(attn, H);
    g_.drop(attn);
    attn = a;
    const int r = sp_region(m, H);
    g_.drop(m);
    m = r;
  }
  const int sum = ops_.add(residual, attn, H);
  const int out = ops_.add(sum, m, H);
  for (const int t : {sum, n1, attn, m, residual}) g_.drop(t);
  if (probs >= 0) g_.drop(probs);
  return out;
}

// CohereLayerNorm: in fp32, mean, (x - mean).pow(2).mean(-1), rsqrt(var + eps), a second
// (x - mean) times it, weight.to(fp32) times that, cast back. Saved: both differences, rsqrt,
// the normalized tensor when the weight trains.
int Step::cohere_layer_norm(int x, int w, const Poly& numel, const Poly& rows) {
  const DT in_dt = g_.at(x).dt;
  const int h32 = ops_.to(x, DT::kF32);
  const int mean = ops_.mean_last(h32, rows);
  const int d1 = ops_.add(h32, mean, numel);
  const int p = ops_.pow2(d1);
  g_.drop(d1);
  const int var = ops_.mean_last(p, rows);
  g_.drop(p);
  const int ve = ops_.scalar_op(var);
  g_.drop(var);
  const int r = ops_.rsqrt(ve);
  g_.drop(ve);
  const int d2 = ops_.add(h32, mean, numel);
  g_.drop(h32);
  g_.drop(mean);
  const int n = ops_.mul(d2, r, numel);
  g_.drop(d2);
  g_.drop(r);
  const int w32 = ops_.to(w, DT::kF32);
  const int o = ops_.mul(w32, n, numel);
  g_.drop(w32);
  g_.drop(n);
  const int out = ops_.to(o, in_dt);
  g_.drop(o);
  return out;
}

// Cohere's apply_rotary_pos_emb: q.float(), k.float(), then (x * cos) + (rotate_half(x) * sin)
// in fp32 (rotate_half stacks -x[..., 1::2] and x[..., ::2]: a full-width copy, as torch.cat's),
// both cast back at the end; the fp32 locals live until it returns.
std::pair<int, int> Step::cohere_rope(int q, int k, const Poly& qn, const Poly& kvn) {
  const DT dt = g_.at(q).dt;
  const int q32 = ops_.to(q, DT::kF32);
  const int k32 = ops_.to(k, DT::kF32);
  const int qr = ops_.rotary(q32, cos_, sin_, qn);
  const int kr = ops_.rotary(k32, cos_, sin_, kvn);
  const int qe = ops_.to(qr, dt);
  const int ke = ops_.to(kr, dt);
  for (const int t : {q32, k32, qr, kr}) g_.drop(t);
  return {qe, ke};
}

// ---- Gemma 4 (docs/models.md#gemma-4)

int Step::gemma4_layer(int h, LayerParams& lp) {
  // Gemma4TextDecoderLayer.forward: Gemma 3's sandwich norms around attention and the MLP; with
  // enable_moe_block the MLP's output goes through post_feedforward_layernorm_1 and is added to
  // the experts' (on the pre-MLP residual, through pre_feedforward_layernorm_2 and
  // post_feedforward_layernorm_2) before post_feedforward_layernorm; with PLE a gated projection
  // of the layer's per-layer input is added; `hidden_states *= self.layer_scalar` multiplies in
  // place by a buffer (nothing saved; its backward makes a new gradient).
  const std::int64_t hs = m_.hidden_size;
  const Poly H = htok();
  g_.hold(h);
  const int residual = h;
  const int n1 = norm(h, lp.norms[0], lp.norms[1], hs, H);
  auto [attn, probs] = attention(n1, lp);
  g_.drop(n1);
  const int a2 = norm(attn, lp.norms[2], lp.norms[3], hs, H);
  g_.drop(attn);
  const int h2 = ops_.add(residual, a2, H);
  g_.drop(a2);
  g_.drop(residual);
  const int n2 = norm(h2, lp.norms[4], lp.norms[5], hs, H);
  int m = mlp(n2, lp, "", lp.intermediate, tok(1), false);
  g_.drop(n2);
  if (lp.router_scale >= 0) {
    const int m1 = norm(m, lp.extra_norms[0], -1, hs, H);
    g_.drop(m);
    const int e = gemma4_experts(h2, lp);
    const int m2 = norm(e, lp.extra_norms[1], -1, hs, H);
    g_.drop(e);
    m = ops_.add(m1, m2, H);
    g_.drop(m1);
    g_.drop(m2);
  }
  const int m3 = norm(m, lp.norms[6], lp.norms[7], hs, H);
  g_.drop(m);
  int h3 = ops_.add(h2, m3, H);
  g_.drop(m3);
  g_.drop(h2);
  if (m_.per_layer_input_dim > 0 && ple_slice_ >= 0) {
    // per_layer_input_gate, GELU-tanh, * per_layer_input (a slice of the (b, s, layers, d)
    // tensor: saving it keeps that tensor), per_layer_projection, post_per_layer_input_norm.
    const std::int64_t d = m_.per_layer_input_dim;
    const int gt = lin(h3, lp.lin.at("per_layer_input_gate"), tok(d));
    const int ac = ops_.gelu(gt);
    g_.drop(gt);
    const int pm = ops_.mul(ac, ple_slice_, tok(d));
    g_.drop(ac);
    const int pr = lin(pm, lp.lin.at("per_layer_projection"), H);
    g_.drop(pm);
    const int pn = norm(pr, lp.extra_norms.back(), -1, hs, H);
    g_.drop(pr);
    const int h4 = ops_.add(h3, pn, H);
    g_.drop(pn);
    g_.drop(h3);
    h3 = h4;
  }
  // hidden_states *= self.layer_scalar: in place (no new tensor), but MulBackward0 computes
  // grad * layer_scalar, a new gradient the size of the layer's output.
  const int scaled = ops_.transpose_view(h3);
  g_.drop(h3);
  if (probs >= 0) g_.drop(probs);
  return scaled;
}

int Step::gemma4_experts(int x, LayerParams& lp) {
  // Gemma4TextRouter on the residual: a weightless RMSNorm (fp32 inside), * scale (saves both),
  // * hidden^-0.5, proj, softmax in the activation dtype (saves its result), topk (keeps the
  // indices), top_k_weights /= sum in place (keeps a copy of the weights before and the sum),
  // * per_expert_scale[top_k_index] (a gathered copy; the product keeps both).
  const std::int64_t h = m_.hidden_size, E = m_.moe.num_experts, k = m_.moe.experts_per_token;
  const std::int64_t I = m_.moe.expert_intermediate_size;
  const DT xdt = g_.at(x).dt;
  const Poly H = tok(h);
  Poly rows = H;
  for (auto& r : rows.c) r /= h;
  const int rn = rms_normalize(x, H, rows);
  const int rnd = ops_.to(rn, xdt);
  g_.drop(rn);
  const int scaled = ops_.mul(rnd, lp.router_scale, H);
  g_.drop(rnd);
  const int ss = ops_.scalar_op(scaled);
  g_.drop(scaled);
  const int logits = lin(ss, lp.lin.at("gate"), tok(E));
  g_.drop(ss);
  const int probs = ops_.softmax(logits);
  g_.drop(logits);
  const DT wdt = g_.at(probs).dt;
  const int topv = g_.make(tok(k), wdt, ops_.cat);
  const int topi = g_.make(tok(k), DT::kI64, ops_.cat);
  g_.node({probs}, {topv}, {topi}, [probs](Bwd& ctx) { ctx.give(probs, ctx.like(probs)); });
  g_.drop(probs);
  const int denom = g_.make(tok(1), wdt, ops_.cat);
  g_.node({topv}, {denom}, {}, [topv](Bwd& ctx) { ctx.give(topv, ctx.like(topv)); });
  const int before = g_.make(tok(k), wdt, ops_.cat);
  const int normed = g_.make(tok(k), wdt, ops_.cat);
  g_.node({topv, denom}, {normed}, {before, denom}, [topv, denom](Bwd& ctx) {
    ctx.give(topv, ctx.like(topv));
    ctx.give(denom, ctx.like(denom));
  });
  g_.drop(before);
  g_.drop(denom);
  g_.drop(topv);
  const int pes = g_.make(tok(k), g_.at(lp.router_scale).dt, ops_.cat, g_.rg(lp.router_scale));
  g_.node({lp.router_scale}, {pes}, {topi}, [rs = lp.router_scale](Bwd& ctx) { ctx.give(rs, ctx.like(rs)); });
  const int weights = ops_.mul(normed, pes, tok(k));
  g_.drop(normed);
  g_.drop(pes);
  // pre_feedforward_layernorm_2, then Gemma4TextExperts' loop over the experts hit (all of them
  // at training lengths): hidden_states[token_idx]; F.linear(current_state,
  // self.gate_up_proj[expert_idx]) where expert_idx is a 0-d tensor, so the weight is a select
  // view (no copy, unlike gpt-oss's one-element index: docs/models.md#gpt_oss); chunk(2) into gate
  // and up (views), act(gate) * up, the same for down_proj, * top_k_weights[token_idx, top_k_pos,
  // None] (a gathered copy), index_add_ into zeros_like. Trained experts get a gradient of the
  // whole parameter's size per group (SelectBackward's zeros).
  const int x2 = norm(x, lp.extra_norms[2], -1, h, H);
  const int groups = expert_loop_groups(E);
  const auto grouped = [&](std::int64_t w) {
    Poly out = Poly::mono(tok_mono(), checked_mul(checked_mul(w * k, seqs_per_forward()), sp_.moe_tokens_per_mille) / 1000);
    for (auto& v : out.c) v = (v + groups - 1) / groups;
    return out;
  };
  const LinearParams& gu = lp.lin.at("experts.gate_up_proj");
  const LinearParams& dp = lp.lin.at("experts.down_proj");
  const auto gathered = [&](int param) {  // the select view
    g_.hold(param);
    return param;
  };
  int next = g_.make(H, xdt, ops_.cat);  // zeros_like
  const int onehot = g_.make(tok(checked_mul(k, E)), DT::kI64, ops_.cat);
  for (int grp = 0; grp < groups; ++grp) {
    const int token_idx = g_.make(grouped(1), DT::kI64, ops_.cat);
    const int cs = g_.make(grouped(h), xdt, ops_.cat);
    g_.node({x2}, {cs}, {token_idx}, [x2](Bwd& ctx) { ctx.give(x2, ctx.like(x2)); });
    const int wgu = gathered(gu.w);
    const int gate_up = ops_.matmul(cs, wgu, grouped(2 * I));
    g_.drop(wgu);
    g_.drop(cs);
    const int gv = ops_.slice(gate_up, grouped(I), false);
    const int uv = ops_.slice(gate_up, grouped(I), false);
    g_.drop(gate_up);
    const int act = ops_.gelu(gv);
    g_.drop(gv);
    const int prod = ops_.mul(act, uv, grouped(I));
    g_.drop(act);
    g_.drop(uv);
    const int wd = gathered(dp.w);
    const int od = ops_.matmul(prod, wd, grouped(h));
    g_.drop(wd);
    g_.drop(prod);
    next = weighted_index_add(next, od, weights, wdt, {token_idx}, grouped(1), grouped(h), xdt, H);
    g_.drop(token_idx);
  }
  g_.drop(onehot);
  g_.drop(topi);
  g_.drop(weights);
  g_.drop(x2);
  return next;
}

// ---- Gemma 3n (docs/models.md#gemma-3n)

int Step::gemma3n_router(int x, LayerParams& lp) {
  // Gemma3nTextAltUp.compute_router_modalities: router_norm(x) * hidden^-1 (a buffer: nothing
  // saved), modality_router (saves its input), tanh(routed.float()).type_as(x).
  const std::int64_t hs = m_.hidden_size, n = m_.altup_inputs;
  const DT xdt = g_.at(x).dt;
  const int rn = norm(x, lp.extra_norms[0], -1, hs, tok(hs));
  const int ri = ops_.scalar_op(rn);
  g_.drop(rn);
  const int routed = lin(ri, lp.lin.at("altup.modality_router"), tok(n));
  g_.drop(ri);
  const int r32 = ops_.to(routed, DT::kF32);
  g_.drop(routed);
  const int t = ops_.tanh(r32);
  g_.drop(r32);
  const int out = ops_.to(t, xdt);
  g_.drop(t);
  return out;
}

int Step::gemma3n_mlp(int x, LayerParams& lp, bool sparse) {
  // Gemma3nTextMLP: gate_proj; on the sparse layers _gaussian_topk: mean and std (unbiased=False:
  // its backward keeps the gate output) over the width, cutoff = mean + std * icdf(sparsity),
  // relu(gate - cutoff) (keeps its result); then act_fn (gelu_pytorch_tanh), * up_proj, down_proj.
  const Poly wide = tok(lp.intermediate), narrow = tok(m_.hidden_size);
  int gate = lin(x, lp.lin.at("gate_proj"), wide);
  if (sparse) {
    const int mean = ops_.mean_last(gate, tok(1));
    const int sd = g_.make(tok(1), g_.at(gate).dt, ops_.cat);
    g_.node({gate}, {sd}, {gate, sd}, [gate](Bwd& ctx) { ctx.give(gate, ctx.like(gate)); });
    const int cut0 = ops_.scalar_op(sd);  // std * std_multiplier (a 0-d tensor)
    g_.drop(sd);
    const int cut = ops_.add(mean, cut0, tok(1));
    g_.drop(mean);
    g_.drop(cut0);
    const int diff = ops_.add(gate, cut, wide);  // inputs - cutoff_x
    g_.drop(cut);
    g_.drop(gate);
    gate = ops_.tanh(diff);  // relu: keeps its result
    g_.drop(diff);
  }
  const int act = ops_.gelu(gate);
  g_.drop(gate);
  const int up = lin(x, lp.lin.at("up_proj"), wide);
  const int p = ops_.mul(act, up, wide);
  g_.drop(act);
  g_.drop(up);
  const int o = lin(p, lp.lin.at("down_proj"), narrow);
  g_.drop(p);
  return o;
}

int Step::gemma3n_magnitude_match(int x, int target) {
  // Gemma3nTextModel.forward, for each projected stream: new_magnitude = sqrt(maximum(mean(x ** 2),
  // eps)); x * target_magnitude / new_magnitude (both products keep their inputs).
  const Poly H = tok(m_.hidden_size);
  const int p = ops_.pow2(x);
  const int mean = ops_.mean_last(p, tok(1));
  g_.drop(p);
  const int mx = ops_.scalar_op(mean);  // torch.maximum with the 0-d epsilon
  g_.drop(mean);
  const int nm = ops_.rsqrt(mx);  // sqrt: keeps its result
  g_.drop(mx);
  const int prod = ops_.mul(x, target, H);
  const int out = ops_.mul(prod, nm, H);
  g_.drop(prod);
  g_.drop(nm);
  return out;
}

// target_magnitude = torch.mean(h0 ** 2, dim=-1, keepdim=True) ** 0.5 (the ** 0.5 keeps its input).
int Step::gemma3n_target_magnitude(int h0) {
  const int p = ops_.pow2(h0);
  const int mean = ops_.mean_last(p, tok(1));
  g_.drop(p);
  const int target = ops_.pow2(mean);
  g_.drop(mean);
  return target;
}

int Step::gemma3n_stack(int h0) {
  // target_magnitude of h0; altup_projections[i - 1](h0), magnitude-matched;
  // torch.stack of [h0, ...] into (n, b, s, h). The list (temp_hidden_states) and
  // target_magnitude are locals of the forward: they live until the layers are done.
  const Poly H = tok(m_.hidden_size);
  const int target = gemma3n_target_magnitude(h0);
  std::vector<int> parts{h0};
  for (int i = 1; i < m_.altup_inputs; ++i) {
    const int a0 = lin(h0, w_->altup[static_cast<std::size_t>(i - 1)], H);
    const int a = ops_.to(a0, g_.at(h0).dt);  // .to(dtype=hidden_states_0.dtype): a copy under autocast
    g_.drop(a0);
    parts.push_back(gemma3n_magnitude_match(a, target));
    g_.drop(a);
  }
  const int stacked = ops_.concat(parts);
  altup_locals_.assign(parts.begin() + 1, parts.end());
  altup_locals_.push_back(target);
  return stacked;
}

int Step::gemma3n_unstack(int h, DT dt) {
  // After the layers: the same magnitude match of altup_unembed_projections[i - 1](h[i]) to
  // h[0], torch.stack, mean over the streams; the new list replaces the old one (whose tensors
  // nothing saved go).
  const Poly H = tok(m_.hidden_size);
  for (const int t : altup_locals_) g_.drop(t);
  altup_locals_.clear();
  const int h0 = ops_.slice(h, H, false);
  const int target = gemma3n_target_magnitude(h0);
  std::vector<int> parts{h0};
  const std::size_t first = static_cast<std::size_t>(m_.altup_inputs - 1);
  for (int i = 1; i < m_.altup_inputs; ++i) {
    const int hi = ops_.slice(h, H, false);
    const int a0 = lin(hi, w_->altup[first + static_cast<std::size_t>(i - 1)], H);
    g_.drop(hi);
    const int a = ops_.to(a0, dt);
    g_.drop(a0);
    parts.push_back(gemma3n_magnitude_match(a, target));
    g_.drop(a);
  }
  const int stacked = ops_.concat(parts);
  const int out = ops_.mean_last(stacked, H);  // torch.mean(dim=0)
  g_.drop(stacked);
  altup_locals_ = parts;
  altup_locals_.push_back(target);
  return out;
}

int Step::gemma3n_layer(int x, LayerParams& lp) {
  // Gemma3nTextDecoderLayer.forward on the (n, b, s, h) stack. Its intermediate results are named
  // locals (active_prediction_normed, laurel_output, attn_gated, attn_laurel, attn_norm,
  // attn_ffw, attn_ffw_norm, attn_ffw_laurel_gated, predictions) that live until it returns.
  const std::int64_t hs = m_.hidden_size, n = m_.altup_inputs, d = m_.per_layer_input_dim;
  const Poly H = tok(hs), N = tok(n * hs);
  const DT xdt = g_.at(x).dt;
  std::vector<int> locals;
  // AltUp predict: modalities of x[0], prediction_coefs -> (b, s, n, n) permuted; matmul of
  // x.permute(1, 2, 3, 0) (b, s, h, n) with it folds (b, s) into bmm's batch as views (measured:
  // autograd saves the views, no copy); bmm makes the permuted stack contiguous for its kernel, a
  // transient in forward and again in backward for the coefficients' gradient.
  // `predictions += hidden_states` in place, then .contiguous() of the permuted product.
  const int x0 = ops_.slice(x, H, false);
  const int mod = gemma3n_router(x0, lp);
  g_.drop(x0);
  const int coefs = lin(mod, lp.lin.at("altup.prediction_coefs"), tok(n * n));
  g_.drop(mod);
  const int xa = ops_.cast_for_autocast(x);
  const int ca = ops_.cast_for_autocast(coefs);
  g_.drop(coefs);
  const DT mdt = g_.at(xa).dt;
  const int folded = g_.make(N, mdt, ops_.cat);
  const int mm = g_.make(N, mdt, ops_.cat);
  g_.drop(folded);
  g_.node({xa, ca}, {mm}, {xa, ca}, [xa, ca, N, mdt](Bwd& ctx) {
    const int gx = ctx.needs(xa) ? ctx.like(xa) : -1;
    if (ctx.needs(ca)) {
      const int t = ctx.temp(N, mdt);
      const int gc = ctx.like(ca);
      ctx.drop(t);
      ctx.give(ca, gc);
    }
    if (gx >= 0) ctx.give(xa, gx);
  });
  g_.drop(xa);
  g_.drop(ca);
  const int mmp = ops_.view(mm);
  g_.drop(mm);
  int pred = ops_.clone(mmp);
  g_.drop(mmp);
  {  // .type_as(hidden_states): under autocast an fp32 copy of the bf16 product
    const int p2 = ops_.to(pred, xdt);
    g_.drop(pred);
    pred = p2;
  }
  locals.push_back(pred);
  const int active = ops_.slice(pred, H, false);  // predictions[altup_active_idx]
  locals.push_back(active);
  const int normed = norm(active, lp.norms[0], -1, hs, H);
  locals.push_back(normed);
  // Laurel: linear_right(linear_left(x)), post_laurel_norm, + x.
  const int ll = lin(normed, lp.lin.at("laurel.linear_left"), tok(m_.laurel_rank));
  const int lr = lin(ll, lp.lin.at("laurel.linear_right"), H);
  g_.drop(ll);
  const int ln = norm(lr, lp.extra_norms[1], -1, hs, H);
  g_.drop(lr);
  const int laurel = ops_.add(normed, ln, H);
  g_.drop(ln);
  locals.push_back(laurel);
  if (gemma3n_cache() && !lp.kv_shared && !lp.store_kv && layers_forward_ && g_.grad_enabled()) {
    // past_key_values.update: torch.cat([empty, k]) and the same for v, copies the cache keeps
    // (the last layer of each type's are shared_kv_ instead). Attention reads the copies; the
    // projections' own k and v go when it returns.
    const std::int64_t kvn = static_cast<std::int64_t>(lp.kv_heads > 0 ? lp.kv_heads : m_.num_kv_heads) *
                             (lp.head_dim > 0 ? lp.head_dim : m_.head_dim);
    for (int i = 0; i < 2; ++i) cache_kv_.push_back(g_.make(tok(kvn), xdt, Cat::kActivations));
  }
  auto [attn, probs] = attention(normed, lp);
  const int a2 = norm(attn, lp.norms[2], -1, hs, H);
  g_.drop(attn);
  locals.push_back(a2);
  const int gated = ops_.add(active, a2, H);
  locals.push_back(gated);
  const int sum = ops_.add(gated, laurel, H);
  const int al = ops_.scalar_op(sum);  // / sqrt(2)
  g_.drop(sum);
  locals.push_back(al);
  const int n2 = norm(al, lp.norms[4], -1, hs, H);
  locals.push_back(n2);
  const int f = gemma3n_mlp(n2, lp, lp.sparse_mlp);
  locals.push_back(f);
  const int f2 = norm(f, lp.norms[6], -1, hs, H);
  locals.push_back(f2);
  const int activated = ops_.add(al, f2, H);
  locals.push_back(activated);
  // AltUp correct: modalities of the output; innovation = activated - predictions[0], repeated
  // n times; * (correction_coefs(modalities) + 1) (keeps both); `corrected += predictions` in place.
  const int cm = gemma3n_router(activated, lp);
  const int diff = ops_.add(activated, active, H);
  const int innov = g_.make(N, xdt, ops_.cat);
  g_.node({diff}, {innov}, {}, [diff](Bwd& ctx) { ctx.give(diff, ctx.like(diff)); });
  g_.drop(diff);
  const int cc = lin(cm, lp.lin.at("altup.correction_coefs"), tok(n));
  g_.drop(cm);
  const int cc1 = ops_.scalar_op(cc);
  g_.drop(cc);
  const int corr = ops_.mul(innov, cc1, N);
  g_.drop(innov);
  g_.drop(cc1);
  // first_prediction = corrected[0].clone() * correct_output_scale; per_layer_input_gate, act,
  // * per_layer_input, per_layer_projection, post_per_layer_input_norm.
  const int c0 = ops_.slice(corr, H, false);
  const int first = ops_.clone(c0);
  g_.drop(c0);
  const int scaled = ops_.mul(first, lp.router_scale, H);
  g_.drop(first);
  int pn = -1;
  if (ple_slice_ >= 0) {
    const int gt = lin(scaled, lp.lin.at("per_layer_input_gate"), tok(d));
    const int ga = ops_.gelu(gt);
    g_.drop(gt);
    const int pm = ops_.mul(ga, ple_slice_, tok(d));
    g_.drop(ga);
    const int pr = lin(pm, lp.lin.at("per_layer_projection"), H);
    g_.drop(pm);
    pn = norm(pr, lp.extra_norms[2], -1, hs, H);
    g_.drop(pr);
  } else {
    pn = ops_.scalar_op(scaled);
  }
  g_.drop(scaled);
  // corrected_predictions[1:] += first_prediction: in place (a view of the same storage); its
  // backward gives the stack its gradient and the branch the sum over the n - 1 streams.
  const int out = g_.view(corr, N);
  g_.node({corr, pn}, {out}, {}, [corr, pn](Bwd& ctx) {
    ctx.give(corr, ctx.like(corr));
    ctx.give(pn, ctx.like(pn));
  });
  g_.drop(corr);
  g_.drop(pn);
  for (const int t : locals) g_.drop(t);
  if (probs >= 0) g_.drop(probs);
  return out;
}

// ---- hybrid layers (docs/models.md#hybrid-layers)

int Step::causal_conv(int x, LayerParams& lp, std::int64_t channels, const Poly& n) {
  // nn.Conv1d(groups=channels, padding=kernel - 1): the output is kernel - 1 positions longer than
  // the input; [..., :seq_len] is a view of it.
  const int full = ops_.patch_conv(x, lp.conv_w, lp.conv_b,
                                   n + per_seq(channels * (m_.hybrid.conv_kernel - 1)));
  const int cut = ops_.slice(full, n, false);
  g_.drop(full);
  return cut;
}

int Step::f32_copy(int x) {
  const int y = ops_.to(x, DT::kF32);
  g_.drop(x);
  return y;
}

// GraniteMoeHybridDecoderLayer: residual + hidden_states * residual_multiplier, a new tensor
// (a product with a Python float saves nothing for backward); consumes x.
int Step::residual_scale(int x) {
  const int s = ops_.scalar_op(x);
  g_.drop(x);
  return s;
}

int Step::hybrid_layer(int h, LayerParams& lp) {
  // Qwen3NextDecoderLayer / Lfm2DecoderLayer: norm -> mixer -> add, norm -> MLP or MoE -> add.
  // NemotronHBlock: norm -> mixer (Mamba-2, attention, MLP) -> add, one per block.
  const std::int64_t hs = m_.hidden_size;
  const Poly H = htok();
  g_.hold(h);
  int cur = h;
  std::size_t ni = 0;
  int probs = -1;
  if (lp.mixer != MixerKind::kNone) {
    const int n1 = norm(cur, lp.norms[0], lp.norms[1], hs, H);
    int a = -1;
    switch (lp.mixer) {
      case MixerKind::kAttention: std::tie(a, probs) = attention(n1, lp); break;
      case MixerKind::kGatedDeltaNet: a = gated_deltanet(n1, lp); break;
      case MixerKind::kMamba2:
        a = m_.hybrid.parallel_attention ? falcon_mixers(n1, lp, probs) : mamba2_mixer(n1, lp);
        break;
      case MixerKind::kShortConv: a = short_conv(n1, lp); break;
      case MixerKind::kNone: break;
    }
    g_.drop(n1);
    if (granite_hybrid()) a = residual_scale(a);
    const int h2 = ops_.add(cur, a, H);
    g_.drop(a);
    g_.drop(cur);
    cur = h2;
    ni = 2;
  }
  if (lp.ffn) {
    const int n2 = norm(cur, lp.norms[ni], lp.norms[ni + 1], hs, H);
    int mo = lp.moe ? moe(n2, lp) : mlp(n2, lp, "", m_.intermediate_size, tok(1), false);
    g_.drop(n2);
    if (granite_hybrid()) mo = residual_scale(mo);
    const int h3 = ops_.add(cur, mo, H);
    g_.drop(mo);
    g_.drop(cur);
    cur = h3;
  }
  if (probs >= 0) g_.drop(probs);
  return cur;
}

int Step::short_conv(int x, LayerParams& lp) {
  // Lfm2ShortConv.slow_forward (transformers' path without causal-conv1d's CUDA kernel):
  // BCx = in_proj(x).transpose(-1, -2); B, C, x = BCx.chunk(3); Bx = B * x;
  // conv_out = conv(Bx)[..., :s]; y = C * conv_out; out_proj(y.transpose(-1, -2).contiguous()).
  const std::int64_t h = m_.hidden_size;
  const Poly n = tok(h);
  const int bcx = lin(x, lp.lin.at("in_proj"), tok(3 * h));
  const int bt = ops_.transpose_view(bcx);
  g_.drop(bcx);
  const int b = ops_.slice(bt, n, false), c = ops_.slice(bt, n, false), xv = ops_.slice(bt, n, false);
  g_.drop(bt);
  const int bx = ops_.mul(b, xv, n);  // saves B and x: views that keep in_proj's output
  g_.drop(b);
  g_.drop(xv);
  // The depthwise Conv1d (padding L_cache - 1) saves its input and weight; its output is
  // L_cache - 1 positions longer than the sequence and [..., :s] is a view that keeps all of it.
  const int conv = causal_conv(bx, lp, h, n);
  g_.drop(bx);
  const int y = ops_.mul(c, conv, n);
  g_.drop(c);
  g_.drop(conv);
  const int yt = ops_.transpose_view(y);
  g_.drop(y);
  const int yc = ops_.clone(yt);
  g_.drop(yt);
  const int o = lin(yc, lp.lin.at("out_proj"), tok(h));
  g_.drop(yc);
  return o;
}

int Step::mamba2_mixer(int x, LayerParams& lp) {
  // NemotronHMamba2Mixer.torch_forward (no mamba_ssm / causal-conv1d kernels; the CPU path), with
  // the chunked SSD scan in fp32. Named locals live until the method returns.
  const HybridSpec& y = m_.hybrid;
  const std::int64_t I = y.mamba_inner(), Hh = y.mamba_heads, N = y.ssm_state, G = y.mamba_groups;
  const std::int64_t l = y.mamba_chunk;
  const std::int64_t conv_dim = I + 2 * G * N;
  std::vector<int> locals;
  const auto keep = [&](int t) { locals.push_back(t); return t; };
  int proj = -1;
  if (falcon_h1()) {
    // FalconH1Mixer.torch_forward: in_proj(input_states * ssm_in_multiplier) * mup_vector, two new
    // tensors (products with a float and with a buffer save nothing for backward); the split
    // below views the second.
    // input_states (the scaled input) is a local: it lives until the mixer returns even where
    // in_proj does not save it (LoRA on a frozen in_proj).
    const int xs = keep(ops_.scalar_op(x));
    const int p0 = lin(xs, lp.lin.at("in_proj"), tok(2 * I + 2 * G * N + Hh));
    proj = ops_.scalar_op(p0);
    g_.drop(p0);
  } else {
    proj = lin(x, lp.lin.at("in_proj"), tok(2 * I + 2 * G * N + Hh));
  }
  const int gate = keep(ops_.slice(proj, tok(I), false));
  const int xbc = ops_.slice(proj, tok(conv_dim), false);
  const int dt = ops_.slice(proj, tok(Hh), false);
  g_.drop(proj);
  // act(conv1d(xBC.transpose(1, 2))[..., :s].transpose(1, 2)): silu saves the conv's output.
  const int xt = ops_.transpose_view(xbc);
  g_.drop(xbc);
  const int conv = causal_conv(xt, lp, conv_dim, tok(conv_dim));
  g_.drop(xt);
  // hidden_states_B_C, the activation's output, is a local: under 16-bit weights it outlives its
  // fp32 copies (.float() of the x, B and C views) until the mixer returns.
  const int act = keep(ops_.silu(conv));
  g_.drop(conv);
  const int hs0 = ops_.slice(act, tok(I), false);
  const int b0 = ops_.slice(act, tok(G * N), false);
  const int c0 = ops_.slice(act, tok(G * N), false);
  // dt = clamp(softplus(dt + dt_bias)): softplus and clamp save their inputs.
  const int dtb = ops_.add(dt, lp.dt_bias, tok(Hh));
  g_.drop(dt);
  const int sp = ops_.silu(dtb);
  g_.drop(dtb);
  const int dtc = keep(ops_.silu(sp));
  g_.drop(sp);
  const int hs = keep(f32_copy(hs0));
  // B, C: .float() and repeat_interleave to every head.
  const int rep = static_cast<int>(Hh / G);
  const int b32 = f32_copy(b0), c32 = f32_copy(c0);
  const int bh0 = ops_.repeat_kv(b32, rep, false);
  const int ch0 = ops_.repeat_kv(c32, rep, false);
  g_.drop(b32);
  g_.drop(c32);
  // D_residual = D[..., None] * pad_tensor_by_size(hidden_states, pad_size): F.pad copies even
  // when pad_size is 0 (to the padded length p), and the product saves that copy.
  const int hpad = ops_.pad(hs, ptok(I));
  const int dres = keep(ops_.mul(lp.d, hpad, ptok(I)));
  g_.drop(hpad);
  const int hsd0 = ops_.mul(hs, dtc, tok(I));                 // hidden_states * dt
  // A = -torch.exp(self.A_log.float()) is fp32 whatever the weights, so A * dt, its cumsum and
  // the (b, heads, chunks, l, l) decay L are fp32 too.
  const int a32 = ops_.to(lp.a_log, DT::kF32);
  const int aexp = ops_.tanh(a32);  // exp: saves its result
  g_.drop(a32);
  const int aneg = ops_.neg(aexp);
  g_.drop(aexp);
  const int adt0 = ops_.mul(aneg, dtc, tok(Hh));               // A * dt
  g_.drop(aneg);
  // reshape_into_chunks pads (copies) hidden_states, A, B and C to p tokens; the list is built
  // before the names are rebound, so the four originals go only once all four copies exist.
  // Every tensor of the scan from here on has p tokens.
  const int hsd = keep(ops_.pad(hsd0, ptok(I))), adt = keep(ops_.pad(adt0, ptok(Hh)));
  const int bh = keep(ops_.pad(bh0, ptok(Hh * N))), ch = keep(ops_.pad(ch0, ptok(Hh * N)));
  for (const int t : {hsd0, adt0, bh0, ch0}) g_.drop(t);
  const int acs = keep(ops_.sum(adt, ptok(Hh)));               // A_cumsum
  // L = exp(segment_sum(A)): (b, heads, chunks, l, l); segment_sum's masked_fill / cumsum /
  // masked_fill are locals of that function.
  const Poly LL = ptok(Hh * l);
  const int seg1 = ops_.scalar_op(acs);
  const int seg_full = ops_.add(seg1, seg1, LL);
  g_.drop(seg1);
  const int seg2 = ops_.sum(seg_full, LL);
  g_.drop(seg_full);
  const int seg3 = ops_.scalar_op(seg2);
  g_.drop(seg2);
  const int L = keep(ops_.tanh(seg3));  // exp: saves its result
  g_.drop(seg3);
  // G_intermediate = C[:, :, :, None] * B[:, :, None]: (b, chunks, l, l, heads, N), a local.
  const int gi = keep(ops_.mul(ch, bh, ptok(l * Hh * N)));
  const int gs = keep(ops_.sum(gi, LL));
  const int mi = keep(ops_.mul(gs, L, LL));
  const int mm = keep(ops_.sum(mi, LL));
  // Y_diag = (M[..., None] * hidden_states[:, :, None]).sum(dim=3): the product is a temporary.
  const int yt = ops_.mul(mm, hsd, ptok(l * I));
  const int yd = keep(ops_.sum(yt, ptok(I)));
  g_.drop(yt);
  // decay_states, B_decay, states = (B_decay[..., None, :] * hidden_states[..., None]).sum(dim=2)
  const int ds = keep(ops_.tanh(acs));
  const int bd = keep(ops_.mul(bh, ds, ptok(Hh * N)));
  const std::int64_t per_chunk = std::max<std::int64_t>(1, I * N / l);
  const int st = ops_.mul(bd, hsd, ptok(I * N));
  const int states = ops_.sum(st, ptok(per_chunk));
  g_.drop(st);
  // Inter-chunk recurrence over c + 1 states: torch.cat([zeros_like(states[:, :1]), states])
  // (the sum's result goes with its name), decay_chunk (b, heads, c + 1, c + 1), and the
  // (b, heads, c + 1, c + 1, P, N) product summed over the source chunk.
  const Poly one_state = per_seq(I * N);
  const int prev = keep(g_.make(one_state, DT::kF32, ops_.cat));
  const int st_all = keep(ops_.concat({prev, states}));
  g_.drop(states);
  const Poly quad = pscores(std::max<std::int64_t>(1, I * N / (l * l))) + ptok(2 * per_chunk) + one_state;
  const int nst = ops_.mul(st_all, st_all, quad);
  const int new_states = keep(ops_.sum(nst, ptok(per_chunk) + one_state));
  g_.drop(nst);
  // C_times_states = C[..., None, :] * states[:, :, None]: (b, chunks, l, heads, P, N), a local.
  const int cts = keep(ops_.mul(ch, new_states, ptok(I * N)));
  const int csum = ops_.sum(cts, ptok(I));
  const int sdo = keep(ops_.tanh(acs));  // state_decay_out = exp(A_cumsum)
  const int yoff = keep(ops_.mul(csum, sdo, ptok(I)));
  g_.drop(csum);
  const int y1 = ops_.add(yd, yoff, ptok(I));
  const int y2 = ops_.add(y1, dres, ptok(I));
  g_.drop(y1);
  // y[:, :seq_len] (only when padded) and reshape(b, s, -1): modelled as views of the padded y,
  // which the gated norm saves. For b > 1 with padding the reshape copies the s rows instead
  // and the padded y goes: p - s rows of one fp32 tensor over (docs/formulas.md#chunked-scans).
  // MambaRMSNormGated(y, gate): y * silu(gate.float()), RMS over the inner width, * weight; then
  // out_proj(scan_output.to(dtype)).
  int nrm = -1;
  if (!y.mamba_norm) {
    // Falcon-H1 without mamba_rms_norm: y * silu(gate), the gate in the weights' dtype (the
    // product is fp32 and saves both factors).
    const int sg = ops_.silu((g_.hold(gate), gate));
    g_.drop(gate);
    nrm = ops_.mul(y2, sg, tok(I));
    g_.drop(y2);
    g_.drop(sg);
  } else if (y.mamba_norm_before_gate) {
    // FalconH1RMSNormGated(norm_before_gate=True): the RMS norm of y, then * silu(gate.float()).
    const int n0 = llama_rmsnorm(y2, lp.mix_norm, tok(I), tok(1), false);
    g_.drop(y2);
    const int g32 = f32_copy((g_.hold(gate), gate));
    const int sg = ops_.silu(g32);
    g_.drop(g32);
    nrm = ops_.mul(n0, sg, tok(I));
    g_.drop(n0);
    g_.drop(sg);
  } else {
    const int g32 = f32_copy((g_.hold(gate), gate));
    const int sg = ops_.silu(g32);
    g_.drop(g32);
    const int yg = ops_.mul(y2, sg, tok(I));
    g_.drop(y2);
    g_.drop(sg);
    nrm = llama_rmsnorm(yg, lp.mix_norm, tok(I), tok(1), false);
    g_.drop(yg);
  }
  // scan_output is a local: under 16-bit weights its fp32 tensor lives through out_proj.
  const int nb = ops_.to(nrm, sp_.weight_dt);
  const int o = lin(nb, lp.lin.at("out_proj"), tok(m_.hidden_size));
  g_.drop(nb);
  g_.drop(nrm);
  for (const int t : locals) g_.drop(t);
  return o;
}

int Step::falcon_mixers(int x, LayerParams& lp, int& probs) {
  // FalconH1DecoderLayer: mamba(h) * ssm_out_multiplier, then self_attn(h * attention_in_multiplier)
  // * attention_out_multiplier, their sum (each product a new tensor that saves nothing).
  const Poly H = htok();
  const int m0 = mamba2_mixer(x, lp);
  const int ms = ops_.scalar_op(m0);
  g_.drop(m0);
  const int xi = ops_.scalar_op(x);
  int a0 = -1;
  std::tie(a0, probs) = attention(xi, lp);
  g_.drop(xi);
  const int as = ops_.scalar_op(a0);
  g_.drop(a0);
  const int sum = ops_.add(ms, as, H);
  g_.drop(ms);
  g_.drop(as);
  return sum;
}

int Step::gated_deltanet(int x, LayerParams& lp) {
  // Qwen3NextGatedDeltaNet.forward without flash-linear-attention (torch_causal_conv1d_update is
  // inference only; training runs conv1d + silu and torch_chunk_gated_delta_rule, chunk 64).
  const HybridSpec& y = m_.hybrid;
  const std::int64_t K = y.gdn_key_dim(), V = y.gdn_value_dim(), Hv = y.gdn_value_heads;
  const std::int64_t dk = y.gdn_key_head_dim, dv = y.gdn_value_head_dim, l = kGatedDeltaChunk;
  const std::int64_t HK = Hv * dk;  // keys repeated to the value heads
  std::vector<int> locals;
  const auto keep = [&](int t) { locals.push_back(t); return t; };
  const auto copy_of = [&](int src, const Poly& n) {
    const int v = ops_.slice(src, n, false);
    const int c = ops_.clone(v);
    g_.drop(v);
    return c;
  };
  const int rep = static_cast<int>(Hv / y.gdn_key_heads);
  int mt = -1, z = -1, bsl = -1, asl = -1;
  if (y.gdn_split_projections) {
    // Qwen3_5GatedDeltaNet: mixed_qkv = in_proj_qkv(x).transpose(1, 2) goes straight into the
    // convolution (a view; the convolution saves it); z, b and a are their own projections, and
    // forward's locals b and a live until it returns.
    const int qkv = lin(x, lp.lin.at("in_proj_qkv"), tok(2 * K + V));
    z = keep(lin(x, lp.lin.at("in_proj_z"), tok(V)));
    bsl = lin(x, lp.lin.at("in_proj_b"), tok(Hv));
    asl = lin(x, lp.lin.at("in_proj_a"), tok(Hv));
    g_.hold(bsl);
    g_.hold(asl);
    keep(bsl);
    keep(asl);
    mt = ops_.transpose_view(qkv);
    g_.drop(qkv);
  } else {
    // projected_states_qkvz / _ba are locals of forward: alive until it returns.
    const int qkvz = keep(lin(x, lp.lin.at("in_proj_qkvz"), tok(2 * K + 2 * V)));
    const int ba = keep(lin(x, lp.lin.at("in_proj_ba"), tok(2 * Hv)));
    // fix_query_key_value_ordering splits each key head's group [q, k, v, z] of the projection:
    // with more than one key head, q, k and v reshape(b, s, -1) into copies, and with more than
    // one value head per key head, so do z, b and a (reshape(..., head_v_dim) / (..., num_v_heads)).
    const bool per_head = y.gdn_key_heads > 1, grouped = per_head && rep > 1;
    const auto part = [&](int src, const Poly& n, bool copy) { return copy ? copy_of(src, n) : ops_.slice(src, n, false); };
    const int qc = part(qkvz, tok(K), per_head), kc = part(qkvz, tok(K), per_head), vc = part(qkvz, tok(V), per_head);
    z = keep(part(qkvz, tok(V), grouped));
    bsl = part(ba, tok(Hv), grouped);
    asl = part(ba, tok(Hv), grouped);
    const int mixed = ops_.concat({qc, kc, vc});
    g_.drop(qc);
    g_.drop(kc);
    g_.drop(vc);
    mt = ops_.transpose_view(mixed);
    g_.drop(mixed);
  }
  const int conv = causal_conv(mt, lp, 2 * K + V, tok(2 * K + V));
  g_.drop(mt);
  const int act = ops_.silu(conv);
  g_.drop(conv);
  const int q0 = ops_.slice(act, tok(K), false), k0 = ops_.slice(act, tok(K), false);
  const int v0 = ops_.slice(act, tok(V), false);
  g_.drop(act);
  const int beta = ops_.tanh(bsl);  // sigmoid
  g_.drop(bsl);
  // g = -A_log.exp() * softplus(a.float() + dt_bias)
  const int a32 = f32_copy(asl);
  const int ad = ops_.add(a32, lp.dt_bias, tok(Hv));
  g_.drop(a32);
  const int spl = ops_.silu(ad);
  g_.drop(ad);
  const int gdec = ops_.mul(spl, lp.a_log, tok(Hv));
  g_.drop(spl);
  const int qr = ops_.repeat_kv(q0, rep, false), kr = ops_.repeat_kv(k0, rep, false);
  g_.drop(q0);
  g_.drop(k0);
  // torch_chunk_gated_delta_rule: l2norm(q), l2norm(k) = x * rsqrt((x * x).sum(-1) + eps)
  const auto l2 = [&](int t) {
    const int sq = ops_.mul(t, t, tok(HK));
    const int s = ops_.sum(sq, tok(Hv));
    g_.drop(sq);
    const int e = ops_.scalar_op(s);
    g_.drop(s);
    const int r = ops_.rsqrt(e);
    g_.drop(e);
    const int o = ops_.mul(t, r, tok(HK));
    g_.drop(r);
    g_.drop(t);
    return o;
  };
  const int qn = l2(qr), kn = l2(kr);
  // x.transpose(1, 2).contiguous().to(torch.float32)
  const auto tf32 = [&](int t) {
    const int tv = ops_.transpose_view(t);
    g_.drop(t);
    const int c = ops_.clone(tv);
    g_.drop(tv);
    return f32_copy(c);
  };
  const int q32 = tf32(qn), k32u = tf32(kn), v32u = tf32(v0), b32u = tf32(beta), g32u = tf32(gdec);
  // F.pad of each to p tokens (a copy even when pad_size is 0); each unpadded one goes as its
  // name is rebound. Every tensor of the scan from here on has p tokens.
  const auto padded = [&](int t, std::int64_t per_token) {
    const int r = ops_.pad(t, ptok(per_token));
    g_.drop(t);
    return r;
  };
  const int qp = padded(q32, HK), k32 = keep(padded(k32u, HK)), v32 = padded(v32u, Hv * dv);
  const int b32 = padded(b32u, Hv), g32 = padded(g32u, Hv);
  const int qs = keep(ops_.scalar_op(qp));  // query * scale
  g_.drop(qp);
  const int vb = keep(ops_.mul(v32, b32, ptok(Hv * dv)));
  const int kb = keep(ops_.mul(k32, b32, ptok(HK)));
  g_.drop(v32);
  g_.drop(b32);
  const int gc = keep(ops_.sum(g32, ptok(Hv)));  // g.cumsum(-1)
  g_.drop(g32);
  // decay_mask = ((g[..., None] - g[..., None, :]).tril().exp().float()).tril(): (b, H, c, l, l)
  const Poly LL = ptok(Hv * l);
  const int dm1 = ops_.add(gc, gc, LL);
  const int dm2 = ops_.scalar_op(dm1);
  g_.drop(dm1);
  const int dm3 = ops_.tanh(dm2);  // exp
  g_.drop(dm2);
  const int dm = keep(ops_.scalar_op(dm3));
  g_.drop(dm3);
  // attn = -((k_beta @ key^T) * decay_mask).masked_fill(mask, 0)
  const int kk = ops_.matmul(kb, k32, LL);
  const int at1 = ops_.mul(kk, dm, LL);
  g_.drop(kk);
  const int at2 = ops_.scalar_op(at1);
  g_.drop(at1);
  const int attn = ops_.neg(at2);
  g_.drop(at2);
  // The row-by-row solve: for i in 1..l-1, row = attn[..., i, :i].clone(), sub = attn[..., :i,
  // :i].clone(), attn[..., i, :i] = row + (row[..., None] * sub).sum(-2). The products save every
  // row and sub (sum of i and of i^2 values per chunk and head); the product and its sum are one
  // step's (i, i) and (i) temporaries. Backward runs the steps one at a time: each CopySlices
  // clones the (b, heads, chunks, l, l) gradient with the slice zeroed and the clones' slice
  // backwards scatter into zero-filled gradients of that size, so three of them live at once.
  const std::int64_t solve = (l - 1) * l * (2 * l - 1) / 6;
  const int subs = g_.make(ptok(Hv * solve / l), DT::kF32, ops_.cat);
  const int rows = g_.make(ptok(Hv * (l - 1) / 2), DT::kF32, ops_.cat);
  const int attn2 = g_.make(LL, DT::kF32, ops_.cat);
  g_.node({attn}, {attn2}, {rows, subs}, [attn, LL](Bwd& c) {
    const int kept = c.temp(LL, DT::kF32);
    const int row_grad = c.temp(LL, DT::kF32), sub_grad = c.temp(LL, DT::kF32);
    c.drop(row_grad);
    c.drop(sub_grad);
    c.give(attn, kept);
  });
  g_.drop(subs);
  g_.drop(rows);
  g_.drop(attn);
  const int attn_i = ops_.scalar_op(attn2);  // + eye
  g_.drop(attn2);
  const int value = keep(ops_.matmul(attn_i, vb, ptok(Hv * dv)));
  const int ge = keep(ops_.tanh(gc));  // g.exp()
  const int kbg = ops_.mul(kb, ge, ptok(HK));
  const int kcd = keep(ops_.matmul(attn_i, kbg, ptok(HK)));
  g_.drop(kbg);
  g_.drop(attn_i);
  // The loop over chunks: per chunk attn = (q_i @ k_i^T * decay_mask_i).masked_fill_, v_new =
  // v_i - k_cumdecay_i @ state, out_i = (q_i * g_i.exp()) @ state + attn @ v_new, and the next
  // state (b, H, dk, dv) -- one per chunk, each kept by the next chunk's products.
  const int state0 = ops_.scalar_op(ge);
  const Poly states_n = ptok(std::max<std::int64_t>(1, Hv * dk * dv / l));
  const int states = keep(ops_.add(state0, state0, states_n));
  g_.drop(state0);
  const int qk = ops_.matmul(qs, k32, LL);
  const int ai = keep(ops_.mul(qk, dm, LL));
  g_.drop(qk);
  const int vp = ops_.matmul(kcd, states, ptok(Hv * dv));
  const int vn = keep(ops_.add(value, vp, ptok(Hv * dv)));
  g_.drop(vp);
  const int qg = ops_.mul(qs, ge, ptok(HK));
  const int inter = ops_.matmul(qg, states, ptok(Hv * dv));
  g_.drop(qg);
  const int av = ops_.matmul(ai, vn, ptok(Hv * dv));
  const int core = ops_.add(inter, av, ptok(Hv * dv));
  g_.drop(inter);
  g_.drop(av);
  // The last chunk's state update feeds only last_recurrent_state, which training drops
  // (output_final_state=False): that branch of the graph dies with it, so its k_i * decay product
  // is not kept -- one chunk of l positions fewer.
  const int kd = ops_.mul(k32, ge, ptok(HK) - per_seq(l * HK));
  const int nxt = ops_.matmul(kd, vn, states_n);
  g_.drop(kd);
  g_.drop(nxt);
  // core_attn_out[:, :, :sequence_length] (a SliceBackward even when nothing was padded: its
  // gradient is a zero tensor of p tokens), then .transpose(1, 2).contiguous().to(initial dtype)
  const int cs = ops_.slice(core, tok(Hv * dv), false);
  g_.drop(core);
  const int ct = ops_.transpose_view(cs);
  g_.drop(cs);
  const int cc = ops_.clone(ct);
  g_.drop(ct);
  const int cb = ops_.to(cc, sp_.weight_dt);
  g_.drop(cc);
  // Qwen3NextRMSNormGated(core, z): RMS over head_v_dim, * weight, * silu(z.float())
  const int nrm = llama_rmsnorm(cb, lp.mix_norm, tok(V), tok(Hv), false);
  g_.drop(cb);
  const int z32 = f32_copy((g_.hold(z), z));
  const int sz = ops_.silu(z32);
  g_.drop(z32);
  const int gated = ops_.mul(nrm, sz, tok(V));
  g_.drop(nrm);
  g_.drop(sz);
  const int gb = ops_.to(gated, sp_.weight_dt);
  g_.drop(gated);
  const int o = lin(gb, lp.lin.at("out_proj"), tok(m_.hidden_size));
  g_.drop(gb);
  for (const int t : locals) g_.drop(t);
  return o;
}

int Step::checkpointed(int h, const Body& body, const std::vector<int>& holds, bool fsdp_unit, int extra) {
  // torch.utils.checkpoint (use_reentrant=True): forward without grad; the node saves the
  // positional input and (through the bound functools.partial) the mask and rotary tables, plus
  // the CPU RNG state; backward recomputes the layer with grad (and autocast, if it was on)
  // and runs a nested backward through it.
  const bool outer = g_.grad_enabled();
  g_.set_grad_enabled(false);
  const int out = body(h);
  g_.set_grad_enabled(outer);
  const int rng = g_.make(Poly::constant(5056), DT::kU8, Cat::kCheckpoints);
  const std::optional<DT> ac = ops_.autocast();
  if (g_.at(h).cat == Cat::kActivations) g_.retag(h, Cat::kCheckpoints);
  // save_for_backward keeps the positional input, released when the node runs. The partial's
  // kwargs (ctx.run_function) and the RNG state (ctx.fwd_cpu_state) are attributes of ctx, which
  // lives as long as the graph: until backward has finished (docs/formulas.md#gradient-checkpointing).
  if (g_.grad_enabled() && g_.rg(h)) {
    for (const int t : holds) {
      g_.hold(t);
      graph_held_.push_back(t);
    }
    g_.hold(rng);
    graph_held_.push_back(rng);
  }
  std::vector<int> ins{h};
  if (extra >= 0) ins.push_back(extra);
  const bool made = g_.node(ins, {out}, ins, [this, h, body, ac, fsdp_unit, extra](Bwd& ctx) {
    Graph& g = ctx.graph();
    const int rng2 = g.make(Poly::constant(5056), DT::kU8, Cat::kCheckpoints);  // fork_rng
    const int hv = g.view(h, g.at(h).numel);
    g.at(hv).requires_grad = g.at(h).requires_grad;
    int xv = -1;  // detach_variable of the second positional input
    if (extra >= 0) {
      xv = g.view(extra, g.at(extra).numel);
      g.at(xv).requires_grad = g.at(extra).requires_grad;
      ple_slice_ = xv;
    }
    const int first = g.node_count();
    const bool prev = g.grad_enabled();
    g.set_grad_enabled(true);
    const Cat saved_cat = ops_.cat;
    ops_.cat = Cat::kActivations;
    if (ac) ops_.enter_autocast(*ac);
    const int rec = body(hv);
    if (ac) ops_.exit_autocast();
    ops_.cat = saved_cat;
    g.set_grad_enabled(false);
    g.hold(ctx.grad());
    g.backward_from(rec, ctx.grad(), first);
    g.release_graph(first);
    g.drop(rec);
    g.drop(rng2);
    g.set_grad_enabled(prev);
    const int gi = g.take_grad(hv);
    if (fsdp_unit && sp_.fsdp_frozen_units) {
      // docs/formulas.md#fsdp-reshard-only-hook: FSDP's _pre_forward registered a multi-grad hook
      // on the detached input (a leaf); its closure holds the leaf's AccumulateGrad node, which
      // holds the leaf: the input's storage and its .grad live until _finalize_params removes the
      // hook at the end of backward.
      g.hold(h);
      fsdp_retained_.push_back(h);
      if (gi >= 0) {
        g.hold(gi);
        fsdp_retained_.push_back(gi);
      }
    }
    g.drop(hv);
    if (gi >= 0) ctx.give(h, gi);
    if (xv >= 0) {
      const int gx = g.take_grad(xv);
      g.drop(xv);
      ple_slice_ = -1;
      if (gx >= 0) ctx.give(extra, gx);
    }
  });
  (void)made;
  g_.drop(rng);
  return out;
}

int Step::checkpointed_nonreentrant(int h, const Body& body, const std::vector<int>& holds) {
  // torch.utils.checkpoint (use_reentrant=False): the forward builds the graph but its pack hook
  // stores only an index; the closure keeps the inputs (and through the partial the mask and
  // rotary tables) and the RNG state. The first unpack in backward reruns the layer with an
  // inner pack hook that stores every saved tensor; each is released after its node runs.
  const int rng = g_.make(Poly::constant(5056), DT::kU8, Cat::kCheckpoints);
  const std::optional<DT> ac = ops_.autocast();
  if (g_.at(h).cat == Cat::kActivations) g_.retag(h, Cat::kCheckpoints);
  std::vector<int> kept{h};
  kept.insert(kept.end(), holds.begin(), holds.end());
  kept.push_back(rng);
  // torchtitan's per-op selective policy (docs/formulas.md#per-op-selective-checkpointing): the
  // forward stores the policy's op outputs in the region, the recomputation takes them back; each
  // counts its mm calls from zero (the policy's meta counter is made per checkpoint call).
  const auto sac = [this](Ops::SacMode mode) {
    const Ops::Sac outer = ops_.sac;
    if (sp_.checkpoint_op_policy) ops_.sac = Ops::Sac{mode, 0, sp_.sac_save_attention};
    return outer;
  };
  g_.begin_checkpoint_region(
      [this, h, body, ac, sac]() {
        const int rng2 = g_.make(Poly::constant(5056), DT::kU8, Cat::kCheckpoints);  // fork_rng
        const Cat saved_cat = ops_.cat;
        ops_.cat = Cat::kActivations;
        if (ac) ops_.enter_autocast(*ac);
        const Ops::Sac outer = sac(Ops::SacMode::kCached);
        const int unused = body(h);
        ops_.sac = outer;
        if (ac) ops_.exit_autocast();
        ops_.cat = saved_cat;
        g_.drop(unused);
        g_.drop(rng2);
      },
      kept);
  const Ops::Sac outer = sac(Ops::SacMode::kCaching);
  const int out = body(h);
  ops_.sac = outer;
  g_.end_checkpoint_region();
  g_.drop(rng);
  return out;
}

// One layer of the trained forward: plain, or checkpointed as the config asks.
int Step::layer_forward(int h, const Body& body, const std::vector<int>& holds, bool fsdp_unit, int extra) {
  if (!sp_.gradient_checkpointing) return body(h);
  return sp_.checkpoint_reentrant ? checkpointed(h, body, holds, fsdp_unit, extra)
                                  : checkpointed_nonreentrant(h, body, holds);
}


// ---- vision tower (docs/formulas.md#vision-language-models)

int Step::vision_norm(int x, int w, int bias, const Poly& numel, const Poly& rows) {
  if (m_.vision.kind != VisionKind::kQwen25Vl && m_.vision.kind != VisionKind::kPixtral)
    return layer_norm(x, w, bias, numel, rows);
  return llama_rmsnorm(x, w, numel, rows, /*liger=*/false);  // Qwen2RMSNorm / PixtralRMSNorm, as LlamaRMSNorm
}

int Step::vision_attention(int x, LayerParams& lp, int block) {
  const VisionSpec& v = m_.vision;
  if (v.kind == VisionKind::kPixtral) return pixtral_attention(x, lp);
  if (v.kind == VisionKind::kLlama4) return llama4_vision_attention(x, lp);
  const std::int64_t h = v.hidden_size;
  // SigLIP and mllama project q, k, v separately; both run one attention call over the image
  // (mllama: over all tiles of an image, with the aspect-ratio mask).
  const bool siglip = v.kind == VisionKind::kSiglip || v.kind == VisionKind::kMllama;
  const Poly qn = vpt(h);
  int q, k, val;
  if (siglip) {  // SiglipAttention / MllamaVisionAttention: q/k/v_proj, .view().transpose(1, 2)
    const int q0 = lin(x, lp.lin.at("q_proj"), qn);
    const int k0 = lin(x, lp.lin.at("k_proj"), qn);
    const int v0 = lin(x, lp.lin.at("v_proj"), qn);
    q = ops_.transpose_view(q0);
    k = ops_.transpose_view(k0);
    val = ops_.transpose_view(v0);
    g_.drop(q0);
    g_.drop(k0);
    g_.drop(v0);
  } else {
    // qkv(x).reshape(seq, 3, heads, -1).permute(1, 0, 2, 3).unbind(0): three views; UnbindBackward
    // stacks their gradients into one qkv-sized tensor.
    const int qkv = lin(x, lp.lin.at("qkv"), vpt(3 * h));
    const int q0 = g_.view(qkv, qn), k0 = g_.view(qkv, qn), v0 = g_.view(qkv, qn);
    g_.node({qkv}, {q0, k0, v0}, {}, [qkv](Bwd& c) { c.give(qkv, c.like(qkv)); });
    g_.drop(qkv);
    // apply_rotary_pos_emb_vision: q and k in fp32 with fp32 cos/sin, cast back to their dtype.
    const auto rotate = [&](int t) {
      const DT dt = g_.at(t).dt;
      const int t32 = ops_.to(t, DT::kF32);
      const int r = rope(t32, qn);
      g_.drop(t32);
      const int back = ops_.to(r, dt);
      g_.drop(r);
      return back;
    };
    q = rotate(q0);
    k = rotate(k0);
    g_.drop(q0);
    g_.drop(k0);
    val = v0;
  }
  const std::int64_t heads = v.num_heads;
  // Attention runs per image (Qwen: per window in the windowed blocks); the score elements of a
  // sequence are heads x the sum of the chunk lengths squared.
  const bool full = v.kind != VisionKind::kQwen25Vl ||
                    std::find(v.fullatt_blocks.begin(), v.fullatt_blocks.end(), block) != v.fullatt_blocks.end();
  const std::int64_t sq = full ? sp_.image_patches * sp_.image_patches : vision_window_sq_;
  const Poly scores = Poly::mono(kB, checked_mul(checked_mul(heads * sp_.images, sq), sp_.batch_multiplier));
  int out = -1;
  if (sp_.attn == AttnImpl::kEager && !siglip) {
    // The largest chunk: a whole image in the full-attention blocks, else the largest window. One
    // sample of one image (a single window, in the windowed blocks) is the whole sequence.
    const std::int64_t rows = full ? sp_.image_patches : vision_window_max_;
    const bool one_chunk = sp_.batch_one && sp_.batch_multiplier == 1 && sp_.images == 1 &&
                           (full || vision_window_max_ * vision_window_max_ == vision_window_sq_);
    out = chunked_eager_attention(q, k, val, heads * rows * rows, scores, rows, one_chunk);
  } else if (sp_.attn == AttnImpl::kEager) {
    // SigLIP's (images, heads, n, d) query folds into bmm with a copy; Qwen's chunks have batch 1.
    // mllama adds the aspect-ratio mask (vision_mask_, else none).
    const int probs = ops_.eager_probs(q, ops_.view(k), vision_mask_, scores, siglip, false);
    out = ops_.attention_output(probs, val, qn, false);
  } else {
    // SDPA / flash-attention kernels: saved q, k, v, output and an fp32 logsumexp per row.
    const int q16 = ops_.cast_for_autocast(q);
    const int k16 = ops_.cast_for_autocast(k);
    const int v16 = ops_.cast_for_autocast(val);
    const int o = ops_.fused_attention(q16, k16, v16, qn, vpt(heads));
    g_.drop(q16);
    g_.drop(k16);
    g_.drop(v16);
    if (!siglip && sp_.attn != AttnImpl::kFlashAttention2) {
      out = ops_.clone(o);  // SDPA per chunk, then torch.cat of the chunk outputs
    } else {
      out = ops_.view(o);   // one varlen flash call (or SigLIP's single SDPA call)
    }
    g_.drop(o);
  }
  g_.drop(q);
  g_.drop(k);
  g_.drop(val);
  const int r = ops_.view(out);  // reshape(seq, -1)
  g_.drop(out);
  const char* out_name = v.kind == VisionKind::kMllama ? "o_proj" : siglip ? "out_proj" : "proj";
  const int o = lin(r, lp.lin.at(out_name), qn);
  g_.drop(r);
  return o;
}

// Qwen's eager vision attention runs chunk by chunk (a list comprehension over torch.split by
// cu_seqlens, then torch.cat): the score tensors of one chunk are transients, those autograd
// saves (fp32 softmax output, the probabilities in the activation dtype) accumulate over the
// chunks, and so do the chunk outputs until the cat. Modelled as the state before the last
// chunk (every other chunk's saved scores and outputs), the last (largest) chunk's ops, and the
// cat. Backward runs chunk by chunk too: its score-sized temporaries are one chunk's; the q/k/v
// gradients of every chunk accumulate (docs/formulas.md#vision-language-models).
int Step::chunked_eager_attention(int q, int k, int v, std::int64_t chunk_scores, const Poly& all_scores,
                                  std::int64_t chunk_rows, bool one_chunk) {
  const DT dt = g_.at(q).dt;
  const Poly qn = g_.at(q).numel;
  const Poly c_sc = Poly::constant(chunk_scores);
  const Poly c_out = Poly::constant(chunk_rows * m_.vision.hidden_size);
  const bool train = g_.rg(q) || g_.rg(k) || g_.rg(v);
  const Cat sc_cat = Cat::kAttentionScores;
  // Earlier chunks: their saved scores (with grad) and their contiguous outputs in the list.
  const int prev_out = g_.make(qn - c_out, dt, Cat::kActivations);
  const int prev_p32 = train ? g_.make(all_scores - c_sc, DT::kF32, sc_cat) : -1;
  const int prev_probs = train && dt != DT::kF32 ? g_.make(all_scores - c_sc, dt, sc_cat) : -1;
  // The last chunk: q k^T, * scaling, softmax in fp32 (a cast first when dt is 16-bit), .to(dt).
  const int sc = g_.make(c_sc, dt, sc_cat);
  const int scaled = g_.make(c_sc, dt, sc_cat);
  g_.drop(sc);
  const int xc = dt != DT::kF32 ? g_.make(c_sc, DT::kF32, sc_cat) : (g_.hold(scaled), scaled);
  const int p32 = g_.make(c_sc, DT::kF32, sc_cat);
  g_.drop(xc);
  g_.drop(scaled);
  const int probs = dt != DT::kF32 ? g_.make(c_sc, dt, sc_cat) : (g_.hold(p32), p32);
  const int o = g_.make(c_out, dt, Cat::kActivations);  // probs @ v
  const int oc = g_.make(c_out, dt, Cat::kActivations);  // .transpose(1, 2).contiguous()
  g_.drop(o);
  const int out = g_.make(qn, dt, Cat::kActivations);    // torch.cat of every chunk's output
  g_.drop(oc);
  g_.drop(prev_out);
  std::vector<int> saved{q, k, v, p32, probs};
  if (prev_p32 >= 0) saved.push_back(prev_p32);
  if (prev_probs >= 0) saved.push_back(prev_probs);
  g_.node({q, k, v}, {out}, saved, [q, k, v, p32, probs, c_sc, c_out, dt, one_chunk](Bwd& ctx) {
    // One chunk's chain, each gradient alive until the next node has produced its own: dprobs
    // (with the chunk's dv) from the second bmm, its fp32 cast (ToCopyBackward), softmax
    // backward, the cast back to the input dtype, * scaling, then dq and dk from the first bmm.
    // Each autograd node of the chain releases what it saved when it returns: the second bmm its
    // probabilities and v, the softmax its fp32 output. The incoming gradient (a slice of the
    // cat's) and v (a view of the qkv output, as every chunk's is) die there only when the chunk
    // is the whole sequence; else the chunks not yet run keep them.
    const Cat scores_cat = Cat::kAttentionScores;
    const int dv = ctx.temp(c_out, dt);
    int cur = ctx.temp(c_sc, dt, scores_cat);  // dprobs
    ctx.release(probs);  // in 16 bits the second bmm's own; in fp32 the softmax output, still saved there
    if (one_chunk) {
      ctx.release_grad(0);
      ctx.release(v);
    }
    const auto step = [&](DT to_dt) {
      const int next = ctx.temp(c_sc, to_dt, scores_cat);
      ctx.drop(cur);
      cur = next;
    };
    if (dt != DT::kF32) step(DT::kF32);  // probs = p32.to(dt)
    step(DT::kF32);                      // _softmax_backward_data
    ctx.release(p32);
    if (dt != DT::kF32) step(dt);        // the softmax input's cast to fp32
    step(dt);                            // * scaling
    const int dq = ctx.temp(c_out, dt), dk = ctx.temp(c_out, dt);
    ctx.drop(cur);
    ctx.drop(dq);
    ctx.drop(dk);
    ctx.drop(dv);
    // SplitWithSizesBackward concatenates every chunk's gradient for q, k and v.
    if (ctx.needs(q)) ctx.give(q, ctx.like(q));
    if (ctx.needs(k)) ctx.give(k, ctx.like(k));
    if (ctx.needs(v)) ctx.give(v, ctx.like(v));
  });
  g_.drop(p32);
  g_.drop(probs);
  if (prev_p32 >= 0) g_.drop(prev_p32);
  if (prev_probs >= 0) g_.drop(prev_probs);
  return out;
}

int Step::vision_mlp(int x, LayerParams& lp) {
  const VisionSpec& v = m_.vision;
  const Poly wide = vpt(v.intermediate_size), narrow = vpt(v.hidden_size);
  if (v.kind == VisionKind::kQwen25Vl || v.kind == VisionKind::kPixtral) {
    // down_proj(silu(gate_proj(x)) * up_proj(x)), with biases (Qwen2.5-VL) or without (PixtralMLP)
    const int gate = lin(x, lp.lin.at("gate_proj"), wide);
    const int act = ops_.silu(gate);
    g_.drop(gate);
    const int up = lin(x, lp.lin.at("up_proj"), wide);
    const int p = ops_.mul(act, up, wide);
    g_.drop(act);
    g_.drop(up);
    const int o = lin(p, lp.lin.at("down_proj"), narrow);
    g_.drop(p);
    return o;
  }
  const int f = lin(x, lp.lin.at(v.kind == VisionKind::kQwen3Vl ? "linear_fc1" : "fc1"), wide);
  int act;
  const bool q3 = v.kind == VisionKind::kQwen3Vl;
  if (v.kind == VisionKind::kSiglip || v.kind == VisionKind::kMllama || v.kind == VisionKind::kLlama4 || q3) {
    // gelu_pytorch_tanh (SigLIP, Qwen3-VL), exact GELU (mllama, Llama 4): one op saving its input
    act = ops_.gelu(f);
  } else {               // QuickGELU: x * sigmoid(1.702 x)
    const int a = ops_.scalar_op(f);
    const int sg = ops_.tanh(a);  // sigmoid saves its result, as tanh does
    g_.drop(a);
    act = ops_.mul(f, sg, wide);
    g_.drop(sg);
  }
  g_.drop(f);
  const int o = lin(act, lp.lin.at(q3 ? "linear_fc2" : "fc2"), narrow);
  g_.drop(act);
  return o;
}

int Step::vision_block(int h, int block) {
  LayerParams& lp = w_->vision.blocks[static_cast<std::size_t>(block)];
  const Poly H = vpt(m_.vision.hidden_size), rows = vpt(1);
  g_.hold(h);
  const int residual = h;
  // mllama's global layers (is_gated) scale each residual branch by its gate's tanh.
  const int n1 = vision_norm(h, lp.norms[0], lp.norms[1], H, rows);
  int a = vision_attention(n1, lp, block);
  if (lp.attn_gate >= 0) a = tanh_gate(a, lp.attn_gate, H);
  g_.drop(n1);
  const int h2 = ops_.add(residual, a, H);
  g_.drop(a);
  g_.drop(residual);
  const int n2 = vision_norm(h2, lp.norms[2], lp.norms[3], H, rows);
  int m = vision_mlp(n2, lp);
  if (lp.mlp_gate >= 0) m = tanh_gate(m, lp.mlp_gate, H);
  g_.drop(n2);
  const int h3 = ops_.add(h2, m, H);
  g_.drop(m);
  g_.drop(h2);
  return h3;
}

// A trained tower: every block of one attention kind adds the same saved tensors in forward and
// the same gradients in backward, so the live bytes at a block are linear in its position among
// the blocks of its kind, and a maximum over them lies at the first or the last. Those are
// simulated; each run of blocks between simulated ones is a single node holding their saved
// bytes per category (measured across the simulated block of the same kind), whose backward
// frees them and then gives every parameter of those blocks its gradient, as the blocks' own
// backward would by the time the next simulated block runs (docs/formulas.md#vision-language-models).
int Step::trained_vision_blocks(int x, const std::vector<int>& holds, const std::function<bool(int)>& full_block) {
  const VisionSpec& v = m_.vision;
  // Block 0 is always simulated and never measured: its input may not require grad (a frozen
  // patch embedding under LoRA), which changes what it saves.
  std::array<int, 2> first{-1, -1}, last{-1, -1};
  for (int l = 1; l < v.depth; ++l) {
    const int k = full_block(l) ? 1 : 0;
    if (first[k] < 0) first[k] = l;
    last[k] = l;
  }
  std::array<std::optional<CatVec>, 2> delta;  // live bytes one block of each kind leaves behind
  // Of those, the reentrant checkpoint's RNG state: ctx keeps it until backward has finished.
  std::array<std::int64_t, 2> rng{0, 0};
  std::array<std::int64_t, 2> pending{0, 0};
  std::vector<int> pending_params;
  const auto flush = [&]() {
    if (pending[0] + pending[1] == 0) return;
    if (!g_.rg(x)) {
      // No graph reaches these blocks (reentrant checkpointing from an input that needs no
      // gradient: their LoRA adapters get none, as in PyTorch); they leave nothing behind.
      pending = {0, 0};
      pending_params.clear();
      return;
    }
    std::vector<int> held;
    for (int c = 0; c < kNumCats; ++c) {
      Poly bytes;
      for (int k = 0; k < 2; ++k)
        if (pending[k] > 0) bytes += (*delta[k])[static_cast<std::size_t>(c)] * pending[k];
      if (!(bytes == Poly{})) held.push_back(g_.make(bytes, DT::kU8, static_cast<Cat>(c)));
    }
    if (const std::int64_t r = rng[0] * pending[0] + rng[1] * pending[1]; r > 0)
      graph_held_.push_back(g_.make(Poly::constant(r), DT::kU8, Cat::kCheckpoints));
    const int out = g_.make(g_.at(x).numel, g_.at(x).dt, Cat::kActivations);
    std::vector<int> inputs{x};
    inputs.insert(inputs.end(), pending_params.begin(), pending_params.end());
    const bool made = g_.node(inputs, {out}, {}, [held, params = pending_params, x](Bwd& c) {
      for (const int t : held) c.drop(t);
      for (const int p : params)
        if (c.needs(p)) c.give(p, c.like(p));
      if (c.needs(x)) c.give(x, c.like(x));
    });
    if (!made)
      for (const int t : held) g_.drop(t);
    g_.drop(x);
    x = out;
    pending = {0, 0};
    pending_params.clear();
  };
  const auto nonnegative = [](const CatVec& d) {
    for (const auto& p : d)
      for (const auto c : p.c)
        if (c < 0) return false;
    return true;
  };
  for (int l = 0; l < v.depth; ++l) {
    const int k = full_block(l) ? 1 : 0;
    if (l != 0 && l != first[k] && l != last[k] && delta[k]) {
      ++pending[k];
      const LayerParams& lp = w_->vision.blocks[static_cast<std::size_t>(l)];
      for (const auto& [name, lin] : lp.lin)
        for (const int p : {lin.w, lin.b, lin.A, lin.B})
          if (p >= 0 && g_.at(p).requires_grad) pending_params.push_back(p);
      for (const int p : lp.norms)
        if (p >= 0 && g_.at(p).requires_grad) pending_params.push_back(p);
      continue;
    }
    flush();
    const CatVec before = g_.live();
    const std::size_t held_before = graph_held_.size();
    const Body body = [this, l](int t) { return vision_block(t, l); };
    const int next = layer_forward(x, body, holds, false);
    g_.drop(x);
    x = next;
    if (l == first[k]) {
      CatVec d = g_.live();
      for (int c = 0; c < kNumCats; ++c) d[static_cast<std::size_t>(c)] -= before[static_cast<std::size_t>(c)];
      // What the block's reentrant checkpoint handed the graph: its RNG state (the kwargs it
      // also holds are the forward's masks and tables, already counted).
      for (std::size_t i = held_before; i < graph_held_.size(); ++i)
        if (g_.at(graph_held_[i]).cat == Cat::kCheckpoints) rng[k] += g_.at(graph_held_[i]).bytes().eval(1, 1);
      d[static_cast<std::size_t>(Cat::kCheckpoints)] -= Poly::constant(rng[k]);
      if (nonnegative(d)) delta[k] = d;  // otherwise every block of this kind is simulated
    }
  }
  flush();
  return x;
}

// The image features of the batch: patch embedding, every vision block (checkpointed like the
// decoder layers), then Qwen's patch merger or Gemma 3's pooling projector; one row of the
// language model's hidden size per image token.
int Step::vision_features() {
  const VisionSpec& v = m_.vision;
  if (v.kind == VisionKind::kPixtral) return pixtral_features();
  VisionWeights& vw = w_->vision;
  const std::int64_t h = v.hidden_size;
  const bool siglip = v.kind == VisionKind::kSiglip;
  const Poly H = vpt(h);
  ops_.cat = Cat::kActivations;
  // pixel_values.type(visual.dtype) / .to(patch_embedding.weight.dtype): a copy in the model
  // dtype, a local of get_image_features (transformers >= 4.52) alive until the features return.
  const int px = ops_.to(pixels_, g_.at(vw.patch_w).dt);
  // Conv3d / Conv2d with stride == kernel: one GEMM over the patches, saving its input.
  int x = ops_.patch_conv(px, vw.patch_w, vw.patch_b, H);
  const bool q3 = v.kind == VisionKind::kQwen3Vl;
  if (q3) x = qwen3_vl_positions(x);
  if (siglip) {  // + position_embedding(position_ids): a (1, patches, h) lookup broadcast over images
    const std::int64_t n = (v.image_size / v.patch_size) * (v.image_size / v.patch_size);
    const int pe = ops_.embedding(vpos_ids_, vw.pos, Poly::constant(n * h));
    const int sum = ops_.add(x, pe, H);
    g_.drop(pe);
    g_.drop(x);
    x = sum;
  }
  // Rotary tables (Qwen): fp32 (patches, head_dim) cos and sin, kept by every block. The
  // tower's forward keeps its locals until it returns: rotary_pos_emb (patches, head_dim / 2;
  // Qwen2.5-VL rebinds it to its window_index gather, a copy), emb = cat((rotary, rotary), -1)
  // and the (cos, sin) pair. fp32 whatever the weights: from_pretrained(torch_dtype=...) leaves
  // the inv_freq buffer in fp32 (huggingface/transformers#30709).
  const int lm_cos = cos_, lm_sin = sin_;
  int rotary = -1, emb = -1;
  if (!siglip) {
    const Poly rot = vpt(h / v.num_heads);
    rotary = g_.make(vpt(h / v.num_heads / 2), DT::kF32, Cat::kInputs);
    if (v.kind == VisionKind::kQwen25Vl) {
      const int gathered = g_.make(vpt(h / v.num_heads / 2), DT::kF32, Cat::kInputs);
      g_.drop(rotary);
      rotary = gathered;
    }
    emb = g_.make(rot, DT::kF32, Cat::kInputs);
    cos_ = g_.make(rot, DT::kF32, Cat::kInputs);
    sin_ = g_.make(rot, DT::kF32, Cat::kInputs);
  }
  if (v.kind == VisionKind::kQwen25Vl) {  // hidden_states[window_index]: a gathered copy
    const int r = g_.make(H, g_.at(x).dt, ops_.cat);
    g_.node({x}, {r}, {}, [x](Bwd& c) { c.give(x, c.like(x)); });
    g_.drop(x);
    x = r;
  }
  const std::vector<int> holds = siglip ? std::vector<int>{} : std::vector<int>{cos_, sin_};
  // A frozen tower runs without a graph: every block starts from the same live set and leaves
  // only its output, so the blocks of one attention kind record identical events. One block of
  // each kind (windowed, full) gives the same timeline maximum as all of them.
  std::vector<int> blocks;
  const auto full_block = [&v](int l) {
    return v.kind != VisionKind::kQwen25Vl ||
           std::find(v.fullatt_blocks.begin(), v.fullatt_blocks.end(), l) != v.fullatt_blocks.end();
  };
  const auto& ds = v.deepstack_indexes;
  if (q3 && !ds.empty()) {
    // Qwen3-VL: a DeepStack merger runs on the output of each block in deepstack_visual_indexes,
    // and its features stay alive until the language model returns. A frozen tower's blocks
    // leave nothing behind: the first block, the mergers (in order), then the last block with
    // every feature alive stand for the tower; a trained tower runs every block.
    for (int l = 0; l < v.depth; ++l) {
      const auto at = std::find(ds.begin(), ds.end(), l);
      const bool run = sp_.train_vision_tower || sp_.vision_all_blocks || l == 0 || l == v.depth - 1;
      if (run) {
        const Body body = [this, l](int t) { return vision_block(t, l); };
        const int next = layer_forward(x, body, holds, false);
        g_.drop(x);
        x = next;
      }
      if (at != ds.end()) deepstack_.push_back(deepstack_merger(x, static_cast<std::size_t>(at - ds.begin())));
    }
  } else if (!sp_.train_vision_tower || sp_.vision_all_blocks) {
    for (int l = 0; l < v.depth; ++l)
      if (sp_.vision_all_blocks || blocks.empty() || (blocks.size() == 1 && full_block(l) != full_block(blocks[0])))
        blocks.push_back(l);
    for (const int l : blocks) {
      const Body body = [this, l](int t) { return vision_block(t, l); };
      const int next = layer_forward(x, body, holds, false);
      g_.drop(x);
      x = next;
    }
  } else {
    x = trained_vision_blocks(x, holds, full_block);
  }
  const int tower_cos = cos_, tower_sin = sin_;
  cos_ = lm_cos;
  sin_ = lm_sin;
  const Poly T = vtok(m_.hidden_size);
  int feats;
  if (siglip) {
    // post_layernorm; Gemma3MultiModalProjector: transpose + reshape (a copy), AvgPool2d (saves
    // its input), flatten/transpose, Gemma3RMSNorm, matmul with mm_input_projection_weight.
    const int pn = layer_norm(x, vw.post_w, vw.post_b, H, vpt(1));
    g_.drop(x);
    const int tv = ops_.transpose_view(pn);
    g_.drop(pn);
    const int grid = ops_.clone(tv);
    g_.drop(tv);
    const int pooled = g_.make(vtok(h), g_.at(grid).dt, ops_.cat);
    g_.node({grid}, {pooled}, {grid}, [grid](Bwd& c) { c.give(grid, c.like(grid)); });
    g_.drop(grid);
    const int pv = ops_.transpose_view(pooled);
    g_.drop(pooled);
    Poly rows = vtok(1);
    const int nrm = gemma_rmsnorm(pv, vw.merge_norm_w, vtok(h), rows);
    g_.drop(pv);
    feats = lin(nrm, vw.proj.at("mm_input_projection_weight"), T);
    g_.drop(nrm);
  } else {
    // PatchMerger: ln_q, view(-1, 4h), Linear, GELU, Linear into the text hidden size.
    const int n = vision_norm(x, vw.merge_norm_w, vw.merge_norm_b, H, vpt(1));
    g_.drop(x);
    const int nv = ops_.view(n);
    g_.drop(n);
    const int l0 = lin(nv, vw.proj.at(q3 ? "linear_fc1" : "mlp.0"), H);
    g_.drop(nv);
    const int ge = ops_.gelu(l0);
    g_.drop(l0);
    feats = lin(ge, vw.proj.at(q3 ? "linear_fc2" : "mlp.2"), T);
    g_.drop(ge);
    if (v.kind == VisionKind::kQwen25Vl) {  // hidden_states[reverse_indices]
      const int r = g_.make(T, g_.at(feats).dt, ops_.cat);
      g_.node({feats}, {r}, {}, [f = feats](Bwd& c) { c.give(f, c.like(f)); });
      g_.drop(feats);
      feats = r;
    }
    // The tower's forward returns.
    for (const int t : {rotary, emb, tower_cos, tower_sin}) g_.drop(t);
  }
  g_.drop(px);  // get_image_features returns
  if (!siglip) {
    const int cat = ops_.clone(feats);  // torch.cat of the per-image splits
    g_.drop(feats);
    feats = cat;
  }
  return feats;
}

// ---- Mistral 3's Pixtral tower and projector (docs/formulas.md#pixtral)

// The rows of every image of the batch, one sequence through the tower (N = images x patches x
// batch): its attention scores and mask are N x N, quadratic in the batch.
namespace {
Poly pixtral_square(std::int64_t per_seq, std::int64_t bm, std::int64_t k) {
  const std::int64_t n = checked_mul(per_seq, bm);
  return Poly::mono(kBB, checked_mul(k, checked_mul(n, n)));
}
}  // namespace

// PixtralAttention: q/k/v_proj, .view().transpose(1, 2), apply_rotary_pos_emb with the (N,
// head_dim) tables in the activation dtype, then one attention call over the whole sequence of
// patches with the block-diagonal mask (eager: q k^T * scaling + mask, fp32 softmax, .to(dtype);
// SDPA: the mask as attn_mask; flash-attention: no mask), o_proj.
int Step::pixtral_attention(int x, LayerParams& lp) {
  const VisionSpec& v = m_.vision;
  const std::int64_t h = v.hidden_size, heads = v.num_heads;
  const Poly qn = vpt(h);
  const int q0 = lin(x, lp.lin.at("q_proj"), qn);
  const int k0 = lin(x, lp.lin.at("k_proj"), qn);
  const int v0 = lin(x, lp.lin.at("v_proj"), qn);
  const int q1 = ops_.transpose_view(q0);
  const int k1 = ops_.transpose_view(k0);
  const int val = ops_.transpose_view(v0);
  g_.drop(q0);
  g_.drop(k0);
  g_.drop(v0);
  const int q = rope(q1, qn);
  const int k = rope(k1, qn);
  g_.drop(q1);
  g_.drop(k1);
  const std::int64_t per_seq = checked_mul(sp_.images, sp_.image_patches);
  int out = -1;
  if (sp_.attn == AttnImpl::kEager) {
    // (1, heads, N, d) contiguous q and a transposed k fold into bmm without copies.
    const Poly scores = pixtral_square(per_seq, sp_.batch_multiplier, heads);
    const int probs = ops_.eager_probs(q, ops_.view(k), vision_mask_, scores, false, false);
    out = ops_.attention_output(probs, val, qn, false);
  } else {
    out = vision_fused_attention(q, k, val, qn, heads, vision_mask_);  // (1, N, heads, d)
  }
  return vision_attention_out(out, q, k, val, lp, qn);  // reshape(1, N, -1).contiguous()
}

// A vision tower's SDPA / flash-attention call on q, k, v in the autocast dtype:
// sdpa_attention_forward's transpose(1, 2).contiguous() is a copy; flash-attention's output is
// already (.., N, heads, d).
int Step::vision_fused_attention(int q, int k, int val, const Poly& qn, std::int64_t heads, int mask) {
  const int q16 = ops_.cast_for_autocast(q);
  const int k16 = ops_.cast_for_autocast(k);
  const int v16 = ops_.cast_for_autocast(val);
  const int o = ops_.fused_attention(q16, k16, v16, qn, vpt(heads), mask);
  g_.drop(q16);
  g_.drop(k16);
  g_.drop(v16);
  const int out = sp_.attn == AttnImpl::kFlashAttention2 ? ops_.view(o) : ops_.clone(o);
  g_.drop(o);
  return out;
}

// The attention output reshaped to (.., N, h) (.contiguous() of a contiguous tensor: a view) into
// o_proj; q, k and v are let go.
int Step::vision_attention_out(int out, int q, int k, int val, LayerParams& lp, const Poly& qn) {
  g_.drop(q);
  g_.drop(k);
  g_.drop(val);
  const int r = ops_.view(out);
  g_.drop(out);
  const int o = lin(r, lp.lin.at("o_proj"), qn);
  g_.drop(r);
  return o;
}

// Mistral3Model.get_image_features (transformers 4.50-4.57): PixtralVisionModel with
// output_hidden_states=True, then Mistral3MultiModalProjector on the last hidden state. What stays
// alive follows Python's references: the conv output (patch_embeds_list holds views of it), the
// position ids, the (N, head_dim) cos/sin and the (1, 1, N, N) mask are locals of the tower's
// forward until it returns; the hidden_states tuple (the ln_pre output and every block's output)
// lives in image_outputs until get_image_features returns, past the projector.
int Step::pixtral_features() {
  const VisionSpec& v = m_.vision;
  VisionWeights& vw = w_->vision;
  const std::int64_t h = v.hidden_size, hd = h / v.num_heads;
  const Poly H = vpt(h);
  ops_.cat = Cat::kActivations;
  // patch_conv(pixel_values.to(weight dtype)): the cast is a temporary the conv saves when it
  // has a graph.
  const int px = ops_.to(pixels_, g_.at(vw.patch_w).dt);
  const int conv = ops_.patch_conv(px, vw.patch_w, -1, H);
  g_.drop(px);
  // torch.cat([p.flatten(1).T ...]): a copy. Its backward goes through .T, flatten (a reshape of
  // the transposed gradient: a copy) and the slices (SliceBackward: zeros of the conv output's
  // size, the gradient copied in), one conv-sized temporary beside the conv's gradient.
  const int flat = g_.make(g_.at(conv).numel, g_.at(conv).dt, ops_.cat);
  g_.node({conv}, {flat}, {}, [conv](Bwd& c) {
    const int t = c.like(conv);
    const int g = c.like(conv);
    c.drop(t);
    c.give(conv, g);
  });
  const int x0 = llama_rmsnorm(flat, vw.pos, H, vpt(1), /*liger=*/false);  // ln_pre
  g_.drop(flat);
  const DT dt = g_.at(x0).dt;
  // position_ids_in_meshgrid (int64); PixtralRotaryEmbedding: inv_freq[position_ids] (fp32),
  // cos and sin in fp32, then .to(x.dtype).
  const int pos = g_.make(vpt(1), DT::kI64, Cat::kInputs);
  const int freqs = g_.make(vpt(hd), DT::kF32, Cat::kInputs);
  const int c32 = g_.make(vpt(hd), DT::kF32, Cat::kInputs);
  const int s32 = g_.make(vpt(hd), DT::kF32, Cat::kInputs);
  const int lm_cos = cos_, lm_sin = sin_;
  cos_ = ops_.to(c32, dt);
  sin_ = ops_.to(s32, dt);
  g_.drop(c32);
  g_.drop(s32);
  g_.drop(freqs);
  // generate_block_attention_mask: an (N, N) tensor of the activation dtype, expanded; none
  // under flash-attention (is_flash_attention_requested).
  const std::int64_t per_seq = checked_mul(sp_.images, sp_.image_patches);
  vision_mask_ = sp_.attn == AttnImpl::kFlashAttention2
                     ? -1
                     : g_.make(pixtral_square(per_seq, sp_.batch_multiplier, 1), dt, Cat::kAttentionScores);
  std::vector<int> holds{cos_, sin_, pos};
  if (vision_mask_ >= 0) holds.push_back(vision_mask_);
  // Every block runs: each leaves its output in the hidden_states tuple.
  std::vector<int> hidden{x0};
  g_.hold(x0);
  int x = x0;
  for (int l = 0; l < v.depth; ++l) {
    const Body body = [this, l](int t) { return vision_block(t, l); };
    const int next = layer_forward(x, body, holds, false);
    g_.hold(next);
    hidden.push_back(next);
    g_.drop(x);
    x = next;
  }
  // The tower's forward returns.
  for (const int t : {conv, pos, cos_, sin_}) g_.drop(t);
  if (vision_mask_ >= 0) g_.drop(vision_mask_);
  vision_mask_ = -1;
  cos_ = lm_cos;
  sin_ = lm_sin;
  // Mistral3MultiModalProjector: norm (Mistral3RMSNorm over the vision width), the patch merger,
  // linear_1, GELU, linear_2.
  const std::int64_t merge2 = static_cast<std::int64_t>(v.spatial_merge_size) * v.spatial_merge_size;
  const int n = llama_rmsnorm(x, vw.merge_norm_w, H, vpt(1), /*liger=*/false);
  g_.drop(x);
  // Mistral3PatchMerger, per image: view(h, w, d).permute(2, 0, 1) into F.unfold, whose im2col
  // makes its input contiguous (one image's features, a transient) and returns (d x merge^2, L);
  // backward (col2im) saves nothing. The unfolded images stay in a list until forward returns;
  // torch.cat of their .t() views is a copy.
  const int image_copy = g_.make(Poly::constant(checked_mul(sp_.image_patches, h)), g_.at(n).dt, ops_.cat);
  const int unfolded = g_.make(vtok(checked_mul(merge2, h)), g_.at(n).dt, ops_.cat);
  // Backward: col2im's output, the reshape of its permuted gradient (a copy) and, once every
  // image's is there, SplitBackward's torch.cat: two feature-sized tensors at once.
  g_.node({n}, {unfolded}, {}, [n](Bwd& c) {
    const int t = c.like(n);
    const int g = c.like(n);
    c.drop(t);
    c.give(n, g);
  });
  g_.drop(image_copy);
  g_.drop(n);
  const int grid = ops_.clone(unfolded);
  const int merged = lin(grid, vw.proj.at("patch_merger.merging_layer"), vtok(h));
  g_.drop(grid);
  g_.drop(unfolded);
  const Poly T = vtok(m_.hidden_size);
  const int l1 = lin(merged, vw.proj.at("linear_1"), T);
  g_.drop(merged);
  const int ge = ops_.gelu(l1);  // GELUActivation: saves its input
  g_.drop(l1);
  const int feats = lin(ge, vw.proj.at("linear_2"), T);
  g_.drop(ge);
  for (const int t : hidden) g_.drop(t);  // get_image_features returns: image_outputs dies
  const int cat = ops_.clone(feats);  // torch.cat of the per-image splits
  g_.drop(feats);
  return cat;
}

// ---- Llama 4's vision model and projector (docs/formulas.md#llama-4-vision)

// Llama4VisionAttention over every tile (tiles x N rows, N = (image / patch)^2 + 1): q/k/v_proj
// with biases, .view(tiles, N, heads, head_dim), vision_apply_rotary_emb (the text model's complex
// rotation in fp32, with the (N, 1, head_dim / 2) table), transpose(1, 2), then
// vision_eager_attention_forward (repeat_kv by 1 returns the tensor; matmul folds (tiles, heads)
// into bmm's batch and copies the permuted q, k^T and v unless there is one tile; the softmax
// stays in the scores' dtype) or SDPA / flash-attention without a mask; o_proj with a bias.
int Step::llama4_vision_attention(int x, LayerParams& lp) {
  const VisionSpec& v = m_.vision;
  const std::int64_t h = v.hidden_size, heads = v.num_heads;
  const std::int64_t side = v.image_size / v.patch_size, n = side * side + 1;
  const Poly qn = vpt(h);
  const int q0 = lin(x, lp.lin.at("q_proj"), qn);
  const int k0 = lin(x, lp.lin.at("k_proj"), qn);
  const int v0 = lin(x, lp.lin.at("v_proj"), qn);
  const auto [qr, kr] = llama4_rotary(g_, ops_, q0, k0, w_->vision.freqs, qn, qn);
  g_.drop(q0);
  g_.drop(k0);
  // q and k come from the rotation's elementwise ops, whose backward writes a new tensor (as in
  // the text model); v's transposed gradient needs a contiguous copy.
  const int q = ops_.view(qr);
  const int k = ops_.view(kr);
  const int val = ops_.transpose_view(v0);
  g_.drop(qr);
  g_.drop(kr);
  g_.drop(v0);
  const bool one_tile = sp_.batch_one && sp_.batch_multiplier == 1 && sp_.images == 1 && llama4_tiles() == 1;
  int out = -1;
  if (sp_.attn == AttnImpl::kEager) {
    const Poly scores = per_image(checked_mul(llama4_tiles(), checked_mul(heads, n * n)));
    const int probs = llama4_eager_probs(g_, ops_, q, ops_.view(k), -1, scores, !one_tile, !one_tile);
    out = ops_.attention_output(probs, val, qn, !one_tile);
  } else {
    out = vision_fused_attention(q, k, val, qn, heads, -1);  // no mask; (tiles, N, heads, d)
  }
  return vision_attention_out(out, q, k, val, lp, qn);  // reshape(tiles, N, -1).contiguous()
}

// Llama4VisionModel.forward on the batch's tiles (transformers 4.51-4.57): what stays alive
// follows Python's references. The encoder's last output stays in `output` until the forward
// returns; layernorm_post's output stays under the class-token slice while the adapter runs.
int Step::llama4_vision_features() {
  const VisionSpec& v = m_.vision;
  VisionWeights& vw = w_->vision;
  const std::int64_t h = v.hidden_size, side = v.image_size / v.patch_size, tiles = llama4_tiles();
  const auto patch_rows = [&](std::int64_t k) { return per_image(checked_mul(tiles * side * side, k)); };
  const Poly H = vpt(h);
  ops_.cat = Cat::kActivations;
  const DT dt = g_.at(vw.patch_w).dt;
  // Llama4UnfoldConvolution: nn.Unfold (im2col, a new (tiles, 3 p^2, patches) tensor; the pixels
  // need no gradient), .permute(0, 2, 1), the bias-free Linear, whose matmul folds the permuted
  // 3-D input into 2-D: a contiguous copy, kept for the weight's gradient.
  const int unfolded = g_.make(patch_rows(v.patch_values()), dt, ops_.cat);
  const int folded = g_.make(patch_rows(v.patch_values()), dt, ops_.cat);
  const int pe = ops_.linear(folded, vw.patch_w, -1, patch_rows(h));
  g_.drop(folded);
  g_.drop(unfolded);
  // torch.cat([patches, class_embedding.expand(tiles, 1, h)], dim=1), the class token last;
  // + positional_embedding_vlm (its .to(dtype) is the Parameter itself); layernorm_pre.
  const int ce = g_.view(vw.cls, per_image(checked_mul(tiles, h)));
  g_.node({vw.cls}, {ce}, {}, [c = vw.cls](Bwd& b) { b.give(c, b.like(c)); });  // ExpandBackward: a sum
  const int x0 = ops_.concat({pe, ce});
  g_.drop(pe);
  g_.drop(ce);
  const int x1 = ops_.add(x0, vw.pos, H);
  g_.drop(x0);
  int x = layer_norm(x1, vw.pre_w, vw.pre_b, H, vpt(1));
  g_.drop(x1);
  // Llama4VisionEncoder: under reentrant checkpointing each layer runs without a graph (no tensor
  // argument reaches torch.utils.checkpoint; make_vision_params leaves these weights untrained).
  // Layers without a graph record identical events: one stands for all.
  const bool reentrant_gc = sp_.gradient_checkpointing && sp_.checkpoint_reentrant;
  if (sp_.train_vision_tower && !reentrant_gc) {
    x = trained_vision_blocks(x, {}, [](int) { return true; });
  } else {
    const bool outer = g_.grad_enabled();
    if (reentrant_gc) g_.set_grad_enabled(false);
    for (int l = 0; l < (sp_.vision_all_blocks ? v.depth : 1); ++l) {
      const int next = reentrant_gc ? vision_block(x, l)
                                    : layer_forward(x, [this, l](int t) { return vision_block(t, l); }, {}, false);
      g_.drop(x);
      x = next;
    }
    g_.set_grad_enabled(outer);
  }
  const int ln = layer_norm(x, vw.post_w, vw.post_b, H, vpt(1));
  // hidden_state[:, :-1, :] drops each tile's class token (a view; its backward scatters into a
  // zero tensor of ln's size). pixel_shuffle: views, then two permute(...).contiguous() copies,
  // the first freed once the second is made.
  const int sl = ops_.slice(ln, patch_rows(h), false);
  const int c1 = ops_.clone(sl);
  const int c2 = ops_.clone(c1);
  g_.drop(c1);
  // Llama4VisionMLP2: fc1, GELU, F.dropout(p=projector_dropout, 0: the tensor itself), fc2, GELU.
  const int a1 = lin(c2, vw.adapter.at("fc1"), vtok(v.projector_input_dim));
  g_.drop(c2);
  const int g1 = ops_.gelu(a1);
  g_.drop(a1);
  const int a2 = lin(g1, vw.adapter.at("fc2"), vtok(v.projector_output_dim));
  g_.drop(g1);
  const int feats = ops_.gelu(a2);
  g_.drop(a2);
  for (const int t : {sl, ln, x}) g_.drop(t);  // the vision model's forward returns
  return feats;
}

// Llama4ForConditionalGeneration.forward with pixel_values: the image features flattened
// (a view), multi_modal_projector.linear_1, .to(inputs_embeds' dtype), get_placeholder_mask
// (inputs_embeds[special_image_mask].numel(): nonzero of the expanded (b, s, hidden) bool mask,
// (K, 3) int64 for K = features x hidden values, and the selected copy, both freed at once), then
// masked_scatter. image_features, projected_vision_flat and the merged inputs_embeds stay locals
// of the forward: alive through the language model and the loss.
int Step::llama4_merge_images(int embeds) {
  const std::int64_t hs = m_.hidden_size;
  const int feats = llama4_vision_features();
  const int flat = ops_.view(feats);
  const int proj = lin(flat, w_->vision.proj.at("linear_1"), vtok(hs));
  g_.drop(flat);
  const int projected = ops_.to(proj, g_.at(embeds).dt);
  g_.drop(proj);
  const int nz = g_.make(vtok(checked_mul(3, hs)), DT::kI64, Cat::kActivations);
  const int sel = g_.make(vtok(hs), g_.at(embeds).dt, Cat::kActivations);
  g_.drop(sel);
  g_.drop(nz);
  const int merged = merge_image_features(embeds, projected);
  g_.hold(merged);  // inputs_embeds: the wrapper's local too, passed to the language model
  wrapper_locals_ = {feats, projected, merged};
  return merged;
}

// Qwen3VLVisionPatchMerger(use_postshuffle_norm=True) on block output x: x.view(-1, 4h),
// LayerNorm(4h), linear_fc1, GELU, linear_fc2 into the text hidden size.
int Step::deepstack_merger(int x, std::size_t i) {
  const VisionSpec& v = m_.vision;
  VisionWeights& vw = w_->vision;
  const std::int64_t wide = v.hidden_size * v.spatial_merge_size * v.spatial_merge_size;
  const auto [nw, nb] = vw.deepstack_norms.at(i);
  const int xv = ops_.view(x);
  const int n = layer_norm(xv, nw, nb, vpt(v.hidden_size), vtok(1));
  g_.drop(xv);
  const std::string name = fmt::format("deepstack_merger_list.{}.", i);
  const int l0 = lin(n, vw.proj.at(name + "linear_fc1"), vtok(wide));
  g_.drop(n);
  const int ge = ops_.gelu(l0);  // nn.GELU(): saves its input
  g_.drop(l0);
  const int f = lin(ge, vw.proj.at(name + "linear_fc2"), vtok(m_.hidden_size));
  g_.drop(ge);
  return f;
}

// Qwen3VLVisionModel.fast_pos_embed_interpolate: pos_embed looked up at the 4 bilinear corners of
// every patch ((4, patches, h)), times their weights, summed, repeated per frame and permuted
// into the merge order (copies), concatenated over images, then added to the patch embeddings.
int Step::qwen3_vl_positions(int x) {
  VisionWeights& vw = w_->vision;
  const Poly H = vpt(m_.vision.hidden_size);
  const DT dt = g_.at(vw.pos).dt;
  const int idx = g_.make(vpt(4), DT::kI64, Cat::kInputs);
  const int wts = g_.make(vpt(4), dt, Cat::kInputs);
  const int looked = ops_.embedding(idx, vw.pos, H * 4);
  const int weighted = ops_.mul(looked, wts, H * 4);
  g_.drop(looked);
  g_.drop(wts);
  g_.drop(idx);
  // pos_embeds[0] + pos_embeds[1] + pos_embeds[2] + pos_embeds[3]
  int sum = ops_.add(weighted, weighted, H);
  for (int k = 0; k < 2; ++k) {
    const int next = ops_.add(sum, weighted, H);
    g_.drop(sum);
    sum = next;
  }
  g_.drop(weighted);
  for (int k = 0; k < 3; ++k) {  // .repeat(t, 1), the permute's flatten, torch.cat
    const int next = ops_.clone(sum);
    g_.drop(sum);
    sum = next;
  }
  const int out = ops_.add(x, sum, H);
  g_.drop(sum);
  g_.drop(x);
  return out;
}

// Qwen3VLTextModel._deepstack_process after a text layer: hidden_states.clone(), then
// hidden_states[visual_pos_masks, :] + visual_embeds written back with index_put_. Nothing large
// is saved; backward builds a full-size gradient for the clone (IndexPutBackward) and for the
// gather (IndexBackward: zeros then index_put).
int Step::deepstack_add(int h, int features) {
  const DT dt = g_.at(h).dt;
  const Poly n = g_.at(h).numel, nf = g_.at(features).numel;
  const int c = ops_.clone(h);
  const int gathered = g_.make(nf, dt, ops_.cat);
  g_.node({c}, {gathered}, {}, [c](Bwd& ctx) { ctx.give(c, ctx.like(c)); });
  const int sum = ops_.add(gathered, features, nf);
  g_.drop(gathered);
  const int out = g_.make(n, dt, ops_.cat);  // index_put_ into the clone: its storage, a new version
  g_.node({c, sum}, {out}, {}, [c, sum](Bwd& ctx) {
    ctx.give(c, ctx.like(c));
    ctx.give(sum, ctx.like(sum));
  });
  g_.drop(sum);
  g_.drop(c);
  return out;
}

// inputs_embeds.masked_scatter(image_mask, image_features): a new embedding tensor; backward
// gives the embeddings a masked_fill copy and the features a masked_select.
int Step::merge_image_features(int embeds, int features) {
  const int mask = g_.make(tok(1), DT::kBool, Cat::kInputs);  // input_ids == image_token_id
  const int out = g_.make(g_.at(embeds).numel, g_.at(embeds).dt, ops_.cat);
  g_.node({embeds, features}, {out}, {mask}, [embeds, features](Bwd& c) {
    if (c.needs(embeds)) c.give(embeds, c.like(embeds));
    if (c.needs(features)) c.give(features, c.like(features));
  });
  g_.drop(mask);
  return out;
}

// ---- Llama 3.2 Vision (docs/formulas.md#llama-32-vision)

// MllamaVisionModel under no_grad (the tower is frozen; its outputs need no graph), then the
// projector, following transformers 4.56-4.57 (docs/formulas.md#llama-32-vision). Every image is
// max_num_tiles tiles of (side^2 + 1) positions, padded to a multiple of 8 for the encoders. What
// stays alive is decided by Python references: the conv output (`patch_embeds`), the aspect-ratio
// mask and both encoders' outputs with their hidden_states tuples are locals of the forward until
// it returns, so the last local layer runs with depth - 1 earlier outputs alive and the last
// global one with those, its own tuple and the local tuple. Blocks without a graph record
// identical events, so one local and one global block stand for all.
int Step::mllama_vision_features() {
  const VisionSpec& v = m_.vision;
  VisionWeights& vw = w_->vision;
  const std::int64_t h = v.hidden_size, T = v.max_num_tiles, P = v.tile_positions();
  const std::int64_t side = v.image_size / v.patch_size;
  const DT dt = g_.at(vw.patch_w).dt;
  ops_.cat = Cat::kActivations;
  const bool outer = g_.grad_enabled();
  g_.set_grad_enabled(false);
  const Poly patches = per_image(checked_mul(T * side * side, h)), tiles = per_image(checked_mul(T * P, h));
  // patch_embedding(pixel_values.to(dtype)): Conv2d with stride == kernel, as one GEMM; its
  // flatten/transpose/reshape are views of it.
  const int px = ops_.to(pixels_, dt);
  const int conv = ops_.patch_conv(px, vw.patch_w, -1, patches);
  g_.drop(px);
  const auto make = [&](const Poly& numel) { return g_.make(numel, dt, ops_.cat); };
  int x = make(patches);  // + pre_tile_positional_embedding(aspect_ratio_ids) * gate.tanh()
  int next = make(tiles);  // torch.cat with class_embedding
  g_.drop(x);
  x = next;
  // gated_positional_embedding: hidden + (1 - gate.tanh()) * embedding, the tile_embedding
  // lookup (tiles x positions x h per image), gate.tanh() * it, the sum; its locals die on return,
  // the caller's hidden_state (the cat) when it is rebound.
  const int a1 = make(tiles), te = make(tiles), tg = make(tiles);
  next = make(tiles);
  for (const int t : {a1, te, tg, x}) g_.drop(t);
  x = next;
  next = layer_norm(x, vw.post_w, -1, tiles, per_image(T * P));  // layernorm_pre
  g_.drop(x);
  x = make(vpt(h));  // F.pad to a multiple of 8 positions per tile
  g_.drop(next);
  // _prepare_aspect_ratio_attention_mask: m @ m^T, * finfo.min; (images, 1, n, n) in the model dtype.
  const std::int64_t n = sp_.image_patches;
  const int mm = g_.make(per_image(checked_mul(n, n)), dt, Cat::kInputs);
  vision_mask_ = g_.make(per_image(checked_mul(n, n)), dt, Cat::kInputs);
  g_.drop(mm);
  // Local encoder: the earlier layers' outputs in its tuple, then the last layer.
  const int earlier = g_.make(vpt(checked_mul(v.depth - 1, h)), dt, ops_.cat);
  const int last_local = vision_block(x, v.depth - 1);
  g_.drop(x);  // hidden_state = output.last_hidden_state
  // layernorm_post, the post-tile embedding, then the gated global encoder and its tuple.
  next = layer_norm(last_local, vw.post_w, -1, vpt(h), vpt(1));
  x = make(vpt(h));
  g_.drop(next);
  int g_earlier = -1, g_last = -1;
  if (v.global_depth > 0) {
    g_earlier = g_.make(vpt(checked_mul(v.global_depth - 1, h)), dt, ops_.cat);
    g_last = vision_block(x, v.depth);  // the first global layer
    g_.drop(x);
    x = -1;
  }
  // torch.stack of the intermediate layers' outputs, then torch.cat with the final hidden states
  // (padding sliced off as views): (images, tiles, positions, vision_output_dim).
  const std::int64_t k = static_cast<std::int64_t>(v.intermediate_layers.size());
  const int stacked = k > 0 ? make(vpt(checked_mul(k, h))) : -1;
  vision_out_ = make(per_image(checked_mul(T * P, mllama_output_dim(v))));
  // The forward returns: its locals go.
  for (const int t : {stacked, x, g_earlier, g_last, earlier, last_local, vision_mask_, conv})
    if (t >= 0) g_.drop(t);
  vision_mask_ = -1;
  g_.set_grad_enabled(outer);
  // multi_modal_projector (trainable with train_projector), reshaped into (images x tiles,
  // positions, text hidden) for every cross-attention layer. vision_outputs (the concatenated
  // features) stays a local of MllamaModel.forward until the language model returns.
  return lin(vision_out_, vw.proj.at("multi_modal_projector"), xtok(m_.hidden_size));
}

// F.scaled_dot_product_attention on the fused path. It is on autocast's lower-precision list (and
// flash_attention_2 casts fp32 inputs to the autocast dtype): with fp32 weights the kernel gets,
// and saves, 16-bit copies of q, k and v. A mask SDPA makes its own copy of (bias_numel elements
// in bias_dt, or in the dtype q reaches the kernel in; none when bias_numel is empty) is saved by
// the memory-efficient kernel too. Takes k and v (the caller's references); q stays the caller's.
int Step::sdpa_kernel(int q, int k, int v, const Poly& out_numel, const Poly& bias_numel, std::optional<DT> bias_dt) {
  const int q16 = ops_.cast_for_autocast(q);
  const int k16 = ops_.cast_for_autocast(k);
  const int v16 = ops_.cast_for_autocast(v);
  g_.drop(k);
  g_.drop(v);
  const int bias = bias_numel.is_zero() ? -1 : g_.make(bias_numel, bias_dt.value_or(g_.at(q16).dt), Cat::kInputs);
  const int o = ops_.fused_attention(q16, k16, v16, out_numel, tok(m_.num_heads), bias);
  if (bias >= 0) g_.drop(bias);
  g_.drop(q16);
  g_.drop(k16);
  g_.drop(v16);
  return o;
}

int Step::tanh_gate(int branch, int gate, const Poly& numel) {
  const int t = ops_.tanh(gate);
  const int y = ops_.mul(t, branch, numel);
  g_.drop(t);
  g_.drop(branch);
  return y;
}

// _prepare_cross_attention_mask: the collator's (b, s, images, tiles) int64 mask repeated per
// position (int64), 1.0 - it (fp32), .to(dtype), masked_fill into the additive (b, 1, s, M)
// mask; full_text_row_masked_out_mask from a (mask != min) comparison. The int64 copy lives until
// masked_fill replaces it, the inverted mask until the function returns.
void Step::mllama_cross_masks() {
  const DT dt = g_.at(w_->embed).dt;
  const std::int64_t M = cross_tokens();
  const Poly xm = tok(M);
  const int rep = g_.make(xm, DT::kI64, Cat::kInputs);
  const int inv32 = g_.make(xm, DT::kF32, Cat::kInputs);
  const int inv = g_.make(xm, dt, Cat::kInputs);
  g_.drop(inv32);
  const int as_bool = g_.make(xm, DT::kBool, Cat::kInputs);
  cross_mask_ = g_.make(xm, dt, Cat::kInputs);
  g_.drop(as_bool);
  g_.drop(rep);
  const int ne = g_.make(xm, DT::kBool, Cat::kInputs);
  cross_rows_ = g_.make(tok(1), dt, Cat::kInputs);
  g_.drop(ne);
  g_.drop(inv);
}

// MllamaTextCrossAttention: q from the text (q_norm over head_dim), k and v from the image
// features (k_norm); the mask is never None, so sdpa_attention_forward repeats K/V to every head
// and the memory-efficient kernel gets the mask, padded to a multiple of 8 keys when it is not
// (PyTorch's preprocess_mask), and saves it.
int Step::cross_attention(int x, LayerParams& lp) {
  const std::int64_t nh = m_.num_heads, nkv = m_.num_kv_heads, hd = m_.head_dim;
  const Poly qn = tok(nh * hd), kvn = xtok(nkv * hd);
  const int q = lin(x, lp.lin.at("q_proj"), qn);
  const int k = lin(cross_states_, lp.lin.at("k_proj"), kvn);
  const int v = lin(cross_states_, lp.lin.at("v_proj"), kvn);
  const int qt = ops_.transpose_view(q);
  const int kt = ops_.transpose_view(k);
  const int vt = ops_.transpose_view(v);
  g_.drop(q);
  g_.drop(k);
  g_.drop(v);
  const int qe = norm(qt, lp.q_norm, -1, hd, qn);
  const int ke = norm(kt, lp.k_norm, -1, hd, kvn);
  g_.drop(qt);
  g_.drop(kt);
  const int n_rep = static_cast<int>(nh / nkv);
  const int kr0 = ops_.repeat_kv(ke, n_rep, nkv == 1);
  const int vr0 = ops_.repeat_kv(vt, n_rep, nkv == 1);
  const std::int64_t M = cross_tokens();
  int out = -1;  // (b, s, heads x head_dim), o_proj's input
  if (sp_.attn == AttnImpl::kEager) {
    // eager_attention_forward: q k^T * scaling + mask, fp32 softmax cast back, @ v, then
    // .transpose(1, 2).contiguous(); the (b, heads, s, M) score tensors as in the decoder's.
    const Poly sc_n = tok(checked_mul(nh, M));
    const int probs = ops_.eager_probs(qe, ops_.view(kr0), cross_mask_, sc_n, !one_sequence(), false);
    out = ops_.attention_output(probs, vr0, qn, false);
    g_.drop(kr0);
    g_.drop(vr0);
  } else {
    const int o = sdpa_kernel(qe, kr0, vr0, qn, M % 8 != 0 ? tok((M + 7) / 8 * 8) : Poly{}, g_.at(cross_mask_).dt);
    // The kernel's (b, s, heads, d) output: transpose(1, 2).contiguous() and the reshape are views.
    const int t = ops_.view(o);
    g_.drop(o);
    out = ops_.view(t);
    g_.drop(t);
  }
  const int y = lin(out, lp.lin.at("o_proj"), tok(m_.hidden_size));
  g_.drop(out);
  g_.drop(qe);
  g_.drop(ke);
  g_.drop(vt);
  return y;
}

// MllamaCrossAttentionDecoderLayer: residual + attn_gate.tanh() * cross_attn(norm(h)), then
// residual + mlp_gate.tanh() * (full_text_row_masked_out_mask * mlp(norm(h))).
int Step::cross_decoder_layer(int h, LayerParams& lp) {
  const std::int64_t hs = m_.hidden_size;
  const Poly H = htok();
  g_.hold(h);
  const int n1 = norm(h, lp.norms[0], lp.norms[1], hs, H);
  const int a = tanh_gate(cross_attention(n1, lp), lp.attn_gate, H);
  g_.drop(n1);
  const int h2 = ops_.add(h, a, H);
  g_.drop(a);
  g_.drop(h);
  const int n2 = norm(h2, lp.norms[2], lp.norms[3], hs, H);
  const int m = mlp(n2, lp, "", m_.intermediate_size, tok(1), false);
  g_.drop(n2);
  const int rows = ops_.mul(cross_rows_, m, H);
  g_.drop(m);
  const int gm = tanh_gate(rows, lp.mlp_gate, H);
  const int h3 = ops_.add(h2, gm, H);
  g_.drop(gm);
  g_.drop(h2);
  return h3;
}

// ---- model forward

// Embedding, mask, rotary tables and every decoder layer; returns the last layer's output.
// policy: the trained model with grad (and checkpointing); otherwise the reference forward, under
// no_grad, in the reference segments.
int Step::embed_and_layers(bool policy) {
  const std::int64_t h = m_.hidden_size;
  ops_.cat = Cat::kActivations;
  const int emb_w = w_->embed_copy >= 0 ? w_->embed_copy : w_->embed;
  const bool received = policy && !sp_.stage_embedding;
  // A later pipeline stage: the previous stage's hidden states arrive (requires_grad: their
  // gradient is sent back).
  if (vision_on() && mllama() && !received) {
    // MllamaModel.forward: the tower and projector first, then the cross-attention masks, then
    // the language model (whose <|image|> token is an ordinary embedding row).
    cross_states_ = mllama_vision_features();
    mllama_cross_masks();
  }
  int hcur = received ? g_.make(htok(), embed_dt(), Cat::kActivations, true) : ops_.embedding(ids_, emb_w, tok(h));
  // Gemma: inputs_embeds * sqrt(hidden); Granite 4.0: inputs_embeds * embedding_multiplier.
  if ((m_.scale_embeddings || granite_multipliers() || falcon_h1()) && !received) {
    const int s = ops_.scalar_op(hcur);
    g_.drop(hcur);
    hcur = s;
  }
  if (m_.per_layer_input_dim > 0 && !received && w_->ple_embed >= 0) {
    // Gemma 4 PLE (docs/models.md#gemma-4): Gemma4Model.forward's llm_inputs_embeds (torch.where
    // over the embeddings, kept as a local; Gemma4ForCausalLM has none), embed_tokens_per_layer(ids) * sqrt(d);
    // project_per_layer_inputs: per_layer_model_projection(inputs_embeds) * hidden^-0.5,
    // per_layer_projection_norm over d, (+ per-layer embeddings) * 2^-0.5.
    const std::int64_t d = m_.per_layer_input_dim, packed = static_cast<std::int64_t>(m_.num_layers) * d;
    // enable_input_require_grads hooks embed_tokens, whose output the projection reads: under
    // PEFT with checkpointing the per-layer inputs require grad too.
    if (policy && sp_.lora.enabled && sp_.gradient_checkpointing && sp_.input_require_grads &&
        !g_.at(hcur).requires_grad)
      g_.at(hcur).requires_grad = true;
    if (m_.vision.kind == VisionKind::kGemma4 || m_.audio.enabled())  // the wrapper, not Gemma4ForCausalLM
      // Gemma 3n's wrapper keeps two: embed_vision's and embed_audio's outputs on the text tokens.
      ple_where_ = g_.make(tok(gemma3n() ? 2 * h : h), g_.at(hcur).dt, Cat::kActivations);
    const int pe = ops_.embedding(ids_, w_->ple_embed, tok(packed));
    const int pes = ops_.scalar_op(pe);
    g_.drop(pe);
    const int pp = ops_.linear(hcur, w_->ple_proj, -1, tok(packed));
    const int pps = ops_.scalar_op(pp);
    g_.drop(pp);
    const int pn = norm(pps, w_->ple_norm, -1, d, tok(packed));
    g_.drop(pps);
    const int sum = ops_.add(pn, pes, tok(packed));
    g_.drop(pn);
    g_.drop(pes);
    ple_ = ops_.scalar_op(sum);
    g_.drop(sum);
  }
  if (vision_on() && !mllama() && !received) {  // image features replace the image placeholder tokens' embeddings
    if (policy && sp_.lora.enabled && sp_.gradient_checkpointing && !g_.at(hcur).requires_grad) {
      // enable_input_require_grads hooks embed_tokens: its output, before the merge, is the leaf.
      // Nothing saves it (masked_scatter keeps only the mask), but its AccumulateGrad node holds
      // it until the graph is freed.
      g_.at(hcur).requires_grad = true;
      emb_leaf_ = hcur;
      g_.hold(emb_leaf_);
      g_.hold(hcur);
      graph_held_.push_back(hcur);
    }
    if (m_.vision.kind == VisionKind::kLlama4) {
      const int merged = llama4_merge_images(hcur);
      g_.drop(hcur);
      hcur = merged;
    } else {
      const int feats = vision_features();
      const int merged = merge_image_features(hcur, feats);
      g_.drop(feats);
      g_.drop(hcur);
      hcur = merged;
    }
  }
  if (m_.learned_positions && !received) {  // GPT-2: wte + wpe, then embd dropout
    const int pe = ops_.embedding(ids_, w_->pos_embed, Poly::mono(kS, h));
    const int sum = ops_.add(hcur, pe, tok(h));
    g_.drop(pe);
    g_.drop(hcur);
    const int d = ops_.dropout(sum, policy ? 0.1 : 0.0);
    g_.drop(sum);
    hcur = d;
  }
  if (m_.model_type == "starcoder2" && m_.hidden_dropout > 0 && !received) {  // Starcoder2Model embedding_dropout
    const int d = ops_.dropout(hcur, policy ? m_.hidden_dropout : 0.0);
    g_.drop(hcur);
    hcur = d;
  }
  if (seq_par() && !received) {  // the embedding's output is scattered over the sequence
    const int sc = sp_region(hcur, htok());
    g_.drop(hcur);
    hcur = sc;
  }
  if (policy && sp_.lora.enabled && sp_.gradient_checkpointing && sp_.input_require_grads &&
      !g_.at(hcur).requires_grad) {
    // TRL calls enable_input_require_grads() for PEFT with checkpointing: the embedding output
    // becomes a leaf that requires grad.
    g_.at(hcur).requires_grad = true;
  }
  if (policy && emb_leaf_ < 0) {
    emb_leaf_ = hcur;
    g_.hold(emb_leaf_);
  }
  // The 4D additive causal mask for the eager path (b, 1, s, s) in the activation dtype:
  // full(s, s) -> triu -> expand(b) -> clone -> + padding -> == 0 -> masked_fill -> copy_.
  const DT mdt = g_.at(hcur).dt;
  const auto eager_mask = [&]() {
    const int full = g_.make(Poly::mono(kSS, 1), mdt, Cat::kInputs);
    const int tri = g_.make(Poly::mono(kSS, 1), mdt, Cat::kInputs);
    g_.drop(full);
    const int mask = g_.make(scores(1), mdt, Cat::kInputs);
    g_.drop(tri);
    const int padd = g_.make(scores(1), mdt, Cat::kInputs);
    const int eq = g_.make(scores(1), DT::kBool, Cat::kInputs);
    g_.drop(padd);
    const int filled = g_.make(scores(1), mdt, Cat::kInputs);
    g_.drop(filled);
    g_.drop(eq);
    return mask;
  };
  sliding_mask_ = -1;
  if (sp_.attn == AttnImpl::kEager) {
    mask_ = eager_mask();
    // Gemma 2/3 build causal_mask_mapping: the full mask, then the sliding one, both alive
    // through the forward (docs/formulas.md#sliding-window-attention).
    // Llama 4 builds the full and the chunked mask every forward (docs/models.md#llama-4).
    if (m_.mixes_attention_kinds() || llama4()) sliding_mask_ = eager_mask();
  } else {
    // sdpa_mask, where transformers does not skip it: a (b, 1, s, s) bool tensor (the
    // attention_mask's padding function makes it depend on the batch index, so vmap materializes
    // every row). Otherwise None: causal kernels need no mask.
    const bool sdpa = sp_.attn == AttnImpl::kSdpa;
    mask_ = sdpa && sp_.sdpa_full_mask ? g_.make(scores(1), DT::kBool, Cat::kInputs) : g_.make(Poly{}, mdt, Cat::kInputs);
    if (sdpa && sp_.sdpa_sliding_mask && m_.sliding_window > 0) sliding_mask_ = g_.make(scores(1), DT::kBool, Cat::kInputs);
  }
  // Rotary cos/sin: (1, s, head_dim), computed in fp32 and cast to the activation dtype.
  {
    // MLA rotates its rope part, Qwen3-Next its partial_rotary_factor share (both in qk_rope_head_dim).
    const std::int64_t rot_dim =
        m_.is_mla() || (m_.qk_rope_head_dim > 0 && m_.qk_rope_head_dim < m_.head_dim) ? m_.qk_rope_head_dim : m_.head_dim;
    // Qwen-VL's multimodal rotary embedding computes t/h/w tables per sequence: (3, b, s, d),
    // from get_rope_index's (3, b, s) int64 position ids (a local of the model forward).
    // Qwen3-VL's interleaved MRoPE computes the (3, b, s, d / 2) frequencies too, but folds them
    // into one (b, s, d) table pair (apply_interleaved_mrope) used like a plain rotary table.
    const bool interleaved = m_.vision.kind == VisionKind::kQwen3Vl || m_.mrope_interleaved;
    if (m_.mrope || interleaved) mrope_ids_ = g_.make(tok(3), DT::kI64, Cat::kInputs);
    // NemotronHModel has no rotary embedding: empty tables stand in for them.
    const bool rotary = m_.model_type != "nemotron_h" && !granite_nope();
    const auto tables = [&](int& cos, int& sin, std::int64_t dim) {
      const Poly rot = !rotary ? Poly{} : m_.mrope ? tok(3 * dim) : interleaved ? tok(dim) : Poly::mono(kS, dim);
      const int f = g_.make(!rotary              ? Poly{}
                            : m_.mrope || interleaved ? tok(3 * dim / 2)
                                                      : Poly::mono(kS, dim / 2),
                            DT::kF32,
                            Cat::kInputs);
      const int e = g_.make(rot, DT::kF32, Cat::kInputs);
      g_.drop(f);
      const int c0 = g_.make(rot, DT::kF32, Cat::kInputs);
      cos = g_.make(rot, DT::kF32, Cat::kInputs);
      g_.drop(c0);
      const int s0 = g_.make(rot, DT::kF32, Cat::kInputs);
      sin = g_.make(rot, DT::kF32, Cat::kInputs);
      g_.drop(s0);
      g_.drop(e);
      if (mdt != DT::kF32) {
        const int c2 = g_.make(rot, mdt, Cat::kInputs);
        g_.drop(cos);
        cos = c2;
        const int s2 = g_.make(rot, mdt, Cat::kInputs);
        g_.drop(sin);
        sin = s2;
      }
    };
    // Gemma 4 computes one pair per layer type: (s, global_head_dim) for the full layers, (s,
    // head_dim) for the sliding ones (docs/models.md#gemma-4).
    const bool gemma4 = m_.model_type == "gemma4_text";
    if (llama4()) {
      // Llama4TextRotaryEmbedding: freqs (1, s, d / 2) fp32, torch.polar(ones_like(freqs), freqs),
      // * attention_scaling: one complex64 freqs_cis (as many bytes as fp32 (s, d)), in fp32
      // whatever the model's dtype; it stands in cos_, sin_ is empty.
      const int f = g_.make(Poly::mono(kS, rot_dim / 2), DT::kF32, Cat::kInputs);
      const int ones = g_.make(Poly::mono(kS, rot_dim / 2), DT::kF32, Cat::kInputs);
      const int polar = g_.make(Poly::mono(kS, rot_dim), DT::kF32, Cat::kInputs);
      g_.drop(ones);
      cos_ = g_.make(Poly::mono(kS, rot_dim), DT::kF32, Cat::kInputs);
      g_.drop(polar);
      g_.drop(f);
      sin_ = g_.make(Poly{}, DT::kF32, Cat::kInputs);
    } else {
      tables(cos_, sin_, gemma4 ? m_.layer_head_dim(m_.num_layers - 1) : rot_dim);
    }
    // Gemma 3 also builds the sliding layers' tables (rotary_emb_local, rope_local_base_freq), and
    // transformers 4.56-4.57 pass both pairs to every decoder layer (docs/formulas.md#embeddinggemma).
    // Gemma 3n likewise: one pair per layer type (rope_local_base_freq for the sliding ones).
    if (m_.local_rotary_tables() || ((gemma4 || gemma3n()) && m_.mixes_attention_kinds()))
      tables(cos_local_, sin_local_, rot_dim);
  }
  if (gemma3n() && !received) {  // the (n, b, s, h) AltUp stack the layers carry
    const int stacked = gemma3n_stack(hcur);
    altup_locals_.push_back(hcur);  // inputs_embeds, a local until the forward returns
    hcur = stacked;
  }
  const int n = static_cast<int>(sp_.model_layers.size());
  const int first = policy ? kSegFwdFirst : kSegRefFirst;
  for (auto& kv : shared_kv_) kv[0] = kv[1] = -1;
  layers_forward_ = true;
  for (int l = 0; l < n; ++l) {
    // A text-only batch skips the cross-attention layers (MllamaTextModel: no cross_attention_states).
    const bool cross = w_->layers[static_cast<std::size_t>(l)].cross;
    if (cross && cross_states_ < 0) continue;
    const bool last = l == n - 1 && n > 1;
    if (sp_.layer_slots.empty()) {
      g_.set_segment(first + (l == 0 ? 0 : (last ? 2 : 1)));
      g_.set_instance(l == 0 || last ? 0 : l - 1);
    } else {
      const auto [part, instance] = sp_.layer_slots[static_cast<std::size_t>(l)];
      g_.set_segment(first + part);
      g_.set_instance(instance);
    }
    ops_.cat = Cat::kActivations;
    layer_ = l;
    // Gemma 4: per_layer_inputs[:, :, i, :], a select view made before the layer's call (its
    // backward puts the slice's gradient into zeros of the whole tensor), passed positionally.
    int slice = -1;
    if (ple_ >= 0) {
      const int base = ple_;
      slice = g_.view(base, tok(m_.per_layer_input_dim));
      g_.node({base}, {slice}, {}, [base](Bwd& c) { c.give(base, c.like(base)); });
    }
    // A cross-attention layer's recomputation (in backward, after this forward's locals are
    // gone) reads the image features and masks its call was given; a Gemma 4 layer its slice
    // (the reentrant checkpoint's recomputation gives it the detached one instead).
    const Body body = [this, l, cs = cross_states_, cm = cross_mask_, cr = cross_rows_, slice](int x) {
      if (cs >= 0) std::tie(cross_states_, cross_mask_, cross_rows_) = std::make_tuple(cs, cm, cr);
      const int outer = ple_slice_;
      if (ple_slice_ < 0) ple_slice_ = slice;
      const int r = decoder_layer(x, l);
      ple_slice_ = outer;
      return r;
    };
    const bool sliding = w_->layers[static_cast<std::size_t>(l)].sliding && sliding_mask_ >= 0;
    std::vector<int> holds{sliding ? sliding_mask_ : mask_, cos_, sin_};  // the layer's own mask
    if (cos_local_ >= 0) holds.insert(holds.end(), {cos_local_, sin_local_});
    if (ple_ >= 0) holds.push_back(ple_);  // Gemma 4: the per-layer inputs its slice views
    if (cross) holds.insert(holds.end(), {cross_states_, cross_mask_, cross_rows_});  // the call's keyword arguments
    // Every-N checkpointing (torchtitan's selective_ac_option N: its wrapper counts the blocks
    // from 1 and wraps those whose count is a multiple of N): the other layers run plain.
    const int model_layer = sp_.model_layers[static_cast<std::size_t>(l)];
    const bool wrapped = sp_.checkpoint_every <= 1 || (model_layer + 1) % sp_.checkpoint_every == 0;
    const bool reentrant = policy && wrapped && sp_.gradient_checkpointing && sp_.checkpoint_reentrant;
    if (slice >= 0 && !reentrant) holds.push_back(slice);  // read again by a non-reentrant recomputation
    int next = policy && wrapped ? layer_forward(hcur, body, holds, true, slice) : body(hcur);
    if (slice >= 0) g_.drop(slice);
    g_.drop(hcur);
    if (model_layer >= 0 && static_cast<std::size_t>(model_layer) < deepstack_.size()) {
      const int added = deepstack_add(next, deepstack_[static_cast<std::size_t>(model_layer)]);
      g_.drop(next);
      next = added;
    }
    hcur = next;
  }
  g_.set_instance(0);
  layers_forward_ = false;
  // Gemma 4's shared_kv_states: freed with the forward's locals, or, bound into the checkpointed
  // layers' calls, kept by the graph until backward ends (the recomputations read them).
  const bool kept = policy && sp_.gradient_checkpointing && g_.grad_enabled();
  for (auto& kv : shared_kv_)
    for (int& t : kv)
      if (t >= 0) {
        if (kept) {
          graph_held_.push_back(t);
        } else {
          g_.drop(t);
          t = -1;
        }
      }
  if (gemma3n()) {
    g_.set_segment(policy ? kSegHead : kSegRefHead);
    const int h0 = altup_locals_.empty() ? -1 : altup_locals_.back();  // inputs_embeds stays
    if (h0 >= 0) altup_locals_.pop_back();
    const int out = gemma3n_unstack(hcur, h0 >= 0 ? g_.at(h0).dt : g_.at(hcur).dt);
    if (h0 >= 0) altup_locals_.push_back(h0);
    g_.drop(hcur);
    hcur = out;
  }
  return hcur;
}

void Step::drop_forward_locals() {
  for (const int t : altup_locals_) g_.drop(t);
  altup_locals_.clear();
  if (sp_.method != StepMethod::kSft) drop_cache_kv();  // the SFT loss drops it with the outputs
  for (int* t : {&ple_, &ple_where_}) {
    if (*t >= 0) g_.drop(*t);
    *t = -1;
  }
  for (const int t : deepstack_) g_.drop(t);
  deepstack_.clear();
  // Llama 4's wrapper locals live until its forward returns: after the loss it computes itself
  // (SFT with the eager loss, dropped by sft_loss), else once the logits are made.
  if (!(sp_.method == StepMethod::kSft && sp_.loss_kernel == LossKernel::kEager)) {
    for (const int t : wrapper_locals_) g_.drop(t);
    wrapper_locals_.clear();
  }
  if (mrope_ids_ >= 0) g_.drop(mrope_ids_);
  mrope_ids_ = -1;
  for (int* t : {&cross_states_, &cross_mask_, &cross_rows_, &vision_out_}) {
    if (*t >= 0) g_.drop(*t);
    *t = -1;
  }
  g_.drop(mask_);
  if (sliding_mask_ >= 0) g_.drop(sliding_mask_);
  g_.drop(cos_);
  g_.drop(sin_);
  for (int* t : {&cos_local_, &sin_local_}) {
    if (*t < 0) continue;
    // Without checkpointing the sliding layers' rotary products saved Gemma 3's local tables:
    // they live until those layers' backward (the last of them, layer 0, ends it).
    if (g_.grad_enabled() && (!sp_.gradient_checkpointing || sp_.checkpoint_every > 1)) graph_held_.push_back(*t);
    else g_.drop(*t);
    *t = -1;
  }
}

// Final norm, hidden_states[:, slice_indices, :] (logits_to_keep) and lm_head. `rows` is the
// number of positions kept (tokens); fewer than all makes the middle slice a real one.
int Step::head_logits(int h, const Poly& rows) {
  const std::int64_t hs = m_.hidden_size, V = m_.vocab_size;
  // The output layer's input is gathered over the sequence; LlamaModel.forward returns, so its
  // locals (mask, rotary tables) go.
  const int hn = final_hidden(h);
  const bool all = rows == tok(1);
  const int s1 = ops_.slice(hn, tok(hs), true);
  const int s2 = ops_.slice(s1, rows * hs, all);
  const int s3 = ops_.slice(s2, rows * hs, true);
  g_.drop(hn);
  g_.drop(s1);
  g_.drop(s2);
  ops_.cat = Cat::kLogits;
  int logits = ops_.linear(s3, head_weight(), -1, rows * V);
  g_.drop(s3);
  if (m_.final_logit_softcap > 0) {  // Gemma 2: logits / cap, tanh, * cap
    const int a = ops_.scalar_op(logits);
    g_.drop(logits);
    const int t = ops_.tanh(a);
    g_.drop(a);
    logits = ops_.scalar_op(t);
    g_.drop(t);
  }
  // Cohere: logits * self.logit_scale; Granite(MoeHybrid)ForCausalLM: logits / logits_scaling.
  // A second logits-sized tensor; the first is freed.
  if (cohere() || granite_multipliers() || falcon_h1()) {  // Falcon-H1: * lm_head_multiplier
    const int scaled = ops_.scalar_op(logits);
    g_.drop(logits);
    logits = scaled;
  }
  return logits;
}

// accelerate's convert_outputs_to_fp32 (autocast on, not DeepSpeed): the 16-bit logits are
// replaced by an fp32 copy when the wrapped forward returns.
int Step::to_output_dtype(int logits) {
  if (!sp_.fp32_outputs) return logits;
  const int l32 = ops_.to(logits, DT::kF32);
  g_.drop(logits);
  return l32;
}

// ---- Decoder embedding models (docs/formulas.md#decoder-embeddings)

// One text column's forward as sentence-transformers runs it: AutoModel's forward (the layers and
// the final norm), which returns last_hidden_state; its locals (mask, rotary tables, the embedding
// output) go with it; then the pooling. `leaves` collects the embedding output when it is a leaf
// that requires grad (LoRA with checkpointing: its graph holds it for its .grad).
Column Step::embed_column(std::vector<int>& leaves) {
  const std::int64_t hs = m_.hidden_size;
  g_.set_segment(kSegFwdPre);
  emb_leaf_ = -1;
  const int h = embed_and_layers(true);
  g_.set_segment(kSegHead);
  ops_.cat = Cat::kActivations;
  const int hn = norm(h, w_->final_norm, w_->final_norm_b, hs, htok());
  g_.drop(h);
  drop_forward_locals();
  if (g_.at(emb_leaf_).requires_grad && g_.grad_enabled()) leaves.push_back(emb_leaf_);
  g_.drop(emb_leaf_);
  emb_leaf_ = -1;
  const PoolShape shape{tok(1), per_seq(1), hs};
  if (m_.embedding_library == EmbeddingLibrary::kLlm2Vec) {
    // LLM2Vec.forward pools and returns: nothing else keeps the last hidden state.
    const int rep = llm2vec_pool(g_, ops_, hn, m_.pooling, shape);
    g_.drop(hn);
    return Column{rep, -1};
  }
  const int pooled = pool(g_, ops_, hn, m_.pooling, shape);
  return Column{dense_modules(g_, ops_, pooled, m_.st_dense, w_->dense, per_seq(1)), hn};
}

ColumnsLoss Step::embedding_loss(std::vector<int>& leaves) {
  return contrastive_columns(g_, ops_, texts(), m_.hidden_size, per_seq(1), [this, &leaves] { return embed_column(leaves); });
}

// sentence-transformers' CachedMultipleNegativesRankingLoss (GradCache, sentence.hpp) on a decoder,
// as on an encoder. The embedding model's forward runs under accelerate's autocast wrapper, one
// context per call (docs/formulas.md#decoder-embeddings).
void Step::cached_embedding_step() {
  std::vector<int> leaves;
  const auto embed = [&](bool) {
    if (sp_.autocast) ops_.enter_autocast(*sp_.autocast);
    const Column c = embed_column(leaves);
    if (c.token_embeddings >= 0) g_.drop(c.token_embeddings);  // the forward's output dict is a local
    if (sp_.autocast) ops_.exit_autocast();
    return c.embedding;
  };
  gradcache_step(g_, ops_, {m_.hidden_size, texts(), sp_.contrastive.mini_batch_size, sp_.autocast}, embed,
                 [&](int first, bool hook) {
                   if (hook) release_backward(leaves, first);
                   else g_.release_graph(first);
                 });
}

// After a backward over the nodes from `first_node` on: what FSDP's post-backward final callback
// and the graph itself held goes, and the embedding leaves' .grad die with the graph.
void Step::release_backward(std::vector<int>& leaves, int first_node) {
  g_.set_segment(kSegBwdPre);
  for (const int t : fsdp_retained_) g_.drop(t);
  fsdp_retained_.clear();
  for (const int t : graph_held_) g_.drop(t);
  graph_held_.clear();
  std::vector<int> leaf_grads;
  for (const int leaf : leaves)
    if (const int eg = g_.take_grad(leaf); eg >= 0) leaf_grads.push_back(eg);
  leaves.clear();
  g_.release_graph(first_node);
  for (const int eg : leaf_grads) g_.drop(eg);
}

// ---- SFT loss

int Step::sft_loss(int logits) {
  // ForCausalLMLoss: logits.float(); labels padded by one and shifted (a contiguous copy);
  // cross_entropy = log_softmax + nll_loss. transformers <= 4.48 shifted the logits instead:
  // logits[..., :-1, :].contiguous() is a second fp32 copy alive until the function returns,
  // and in backward the slice scatters its gradient into a logits-sized zero tensor.
  // A loss on the logits' own dtype (docs/formulas.md#loss-dtype): no fp32 copy; log_softmax
  // saves its output in that dtype.
  const int l32 = sp_.loss_upcast ? ops_.to(logits, DT::kF32) : ops_.view(logits);
  // `logits = logits.float()` rebinds the model's only reference (transformers <= 4.44; and
  // NemotronHForCausalLM, whose lm_head(...).float() keeps only the fp32 logits).
  if ((sp_.loss_upcast_in_model || m_.model_type == "nemotron_h") && sp_.loss_upcast) {
    g_.drop(logits);
    logits = -1;
  }
  int shifted = -1;
  int shift = -1;
  if (sp_.loss_index_copy) {
    // Llama4ForConditionalGeneration: logits[..., :-1, :] (a slice, whose backward scatters into
    // a logits-sized zero tensor), [mask != 0]: nonzero's (rows, 2) int64 indices (kept by
    // IndexBackward, which index_puts into a zero tensor of the slice's size) and the selected
    // copy; labels[..., 1:][mask != 0] the same way (its indices are freed at once).
    const Poly rows = tok(1) - per_seq(1);
    ops_.cat = Cat::kLogits;
    const int sl = ops_.slice(l32, rows * m_.vocab_size, false);
    const int idx = g_.make(rows * 2, DT::kI64, Cat::kInputs);
    shifted = g_.make(rows * m_.vocab_size, g_.at(sl).dt, Cat::kLogits);
    g_.node({sl}, {shifted}, {idx}, [sl](Bwd& c) { c.give(sl, c.like(sl)); });
    g_.drop(idx);
    g_.drop(sl);
    const int lidx = g_.make(rows * 2, DT::kI64, Cat::kInputs);
    shift = g_.make(rows, DT::kI64, Cat::kInputs);
    g_.drop(lidx);
  } else if (sp_.loss_shift_copy) {
    const Poly rows = tok(1) - per_seq(1);
    ops_.cat = Cat::kLogits;
    const int sl = ops_.slice(l32, rows * m_.vocab_size, false);
    shifted = ops_.clone(sl);
    g_.drop(sl);
    shift = g_.make(rows, DT::kI64, Cat::kInputs);  // labels[..., 1:].contiguous()
  } else {
    const int padded = g_.make(per_seq(1) + tok(1), DT::kI64, Cat::kInputs);
    shift = g_.make(tok(1), DT::kI64, Cat::kInputs);
    g_.drop(padded);
  }
  ops_.cat = Cat::kLogits;
  const int lv = ops_.view(shifted >= 0 ? shifted : l32);
  const int logp = ops_.log_softmax(lv);
  const int loss = ops_.nll_loss(logp, shift);
  g_.drop(logp);
  g_.drop(lv);
  if (shifted >= 0) g_.drop(shifted);
  g_.drop(l32);
  g_.drop(shift);
  if (logits >= 0) g_.drop(logits);  // CausalLMOutputWithPast is dropped by compute_loss before backward
  drop_cache_kv();                     // and Gemma 3n's past_key_values in it
  for (const int t : wrapper_locals_) g_.drop(t);  // Llama 4's wrapper forward returns
  wrapper_locals_.clear();
  return loss;
}

// The final norm and a loss kernel that takes the hidden states and the output weight instead
// of logits (docs/formulas.md#fused-cross-entropy).
int Step::final_hidden(int h) {
  const std::int64_t hs = m_.hidden_size;
  ops_.cat = Cat::kActivations;
  int hn = norm(h, w_->final_norm, w_->final_norm_b, hs, htok());
  if (seq_par()) {
    const int g = sp_region(hn, tok(hs));
    g_.drop(hn);
    hn = g;
  }
  drop_forward_locals();
  return hn;
}

ChunkedLossHead Step::chunked_head(int x, const Poly& rows, const Poly& chunk_rows) const {
  ChunkedLossHead lh;
  lh.hidden = x;
  lh.weight = head_weight();
  lh.rows = rows;
  lh.chunk_rows = chunk_rows;
  lh.vocab = m_.vocab_size;
  lh.hidden_size = m_.hidden_size;
  return lh;
}

int Step::head_weight() const {
  return w_->lm_head_copy >= 0 ? w_->lm_head_copy
         : w_->lm_head >= 0    ? w_->lm_head
         : w_->embed_copy >= 0 ? w_->embed_copy
                               : w_->embed;
}

int Step::fused_sft_loss(int h) {
  const std::int64_t hs = m_.hidden_size;
  const int hn = final_hidden(h);
  const LossHead lh{hn, head_weight(), tok(1), per_seq(1), m_.vocab_size, hs, sp_.ops.cuda};
  int loss = -1;
  switch (sp_.loss_kernel) {
    case LossKernel::kLiger: loss = liger_fused_linear_cross_entropy(g_, ops_, lh); break;
    case LossKernel::kChunked: loss = chunked_linear_cross_entropy(g_, ops_, lh); break;
    case LossKernel::kCce: loss = cut_cross_entropy(g_, ops_, lh); break;
    case LossKernel::kEager: break;
  }
  g_.drop(hn);
  drop_cache_kv();
  return loss;
}

// ---- TRL log-probs (trl/trainer/utils.py)

// selective_log_softmax on `logits` (a view of `rows` positions x vocab). fp32: gather plus a
// per-sequence logsumexp, both saving views of the logits (the logits storage stays alive until
// backward); the backward stacks per-sequence gradients (UnbindBackward) and scatters the
// gathered one (new_zeros + scatter_add), then adds the two. bf16/fp16: a log_softmax per
// sequence, each output saved. Returns the [rows] per-token log-probs.
int Step::selective_log_softmax(int logits, const Poly& rows, std::int64_t) {
  const std::int64_t V = m_.vocab_size;
  Graph& g = g_;
  const Tensor lt = g.at(logits);
  const Poly full = rows * V;
  Poly row = full;  // one sequence's rows x vocab
  for (auto& v : row.c) v /= sp_.batch_multiplier;
  // per sequence: divide out b (the Poly's b-terms become constants per sequence)
  Poly seq;
  assert(row.c[kBP] == 0 && row.c[kBPP] == 0);  // logits are never padded to a scan's chunk
  seq.c[kOne] = row.c[kB];
  seq.c[kS] = row.c[kBS];
  seq.c[kSS] = row.c[kBSS];
  ops_.cat = Cat::kLogits;
  const bool grad = g.rg(logits);
  int result;
  if (lt.dt == DT::kF32 || lt.dt == DT::kF64) {
    const int gathered = g.make(rows, lt.dt, Cat::kLogits);
    // gather_backward: one zero-filled tensor the gradient is scattered into.
    g.node({logits}, {gathered}, {logits}, [logits](Bwd& c) { c.give(logits, c.like(logits, Cat::kLogits)); });
    // torch.stack([logsumexp(lg) for lg in logits]): one node per sequence, modelled as one node
    // whose backward allocates each sequence's (x - lse).exp() * grad and stacks them.
    const int t = g.make(seq, lt.dt, Cat::kLogits);  // the kernel's (x - max) row temporary
    g.drop(t);
    const int lse = g.make(rows, lt.dt, Cat::kLogits);
    const std::int64_t nseq_mult = sp_.batch_multiplier;
    g.node({logits}, {lse}, {logits}, [logits, seq, full, nseq_mult](Bwd& c) {
      Graph& gg = c.graph();
      // rows of every sequence are buffered until UnbindBackward stacks them
      const int rows_all = gg.make(full, DT::kF32, Cat::kLogits);
      const int a = gg.make(seq, DT::kF32, Cat::kLogits);
      const int e = gg.make(seq, DT::kF32, Cat::kLogits);
      gg.drop(a);
      gg.drop(e);
      const int stacked = c.like(logits, Cat::kLogits);
      gg.drop(rows_all);
      c.give(logits, stacked);
      (void)nseq_mult;
    });
    result = ops_.add(gathered, lse, rows);  // selected - logsumexp
    g.drop(gathered);
    g.drop(lse);
  } else {
    // per sequence F.log_softmax(row) (saved) and a gather: a full 16-bit copy kept for backward.
    // Backward runs row by row: gather's row gradient, log_softmax's row gradient (buffered until
    // UnbindBackward stacks them), each row's saved output released as it goes.
    // Without grad nothing is saved: a sequence's log_softmax is computed while the previous
    // one is still bound to `row_logps`, so two exist at once.
    const int logp = g.make(g.rg(logits) ? full : seq * 2, lt.dt, Cat::kLogits);
    g.hold(logp);  // released by the backward rule, row by row
    const int gathered = g.make(rows, lt.dt, Cat::kLogits);
    const bool made = g.node({logits}, {gathered}, {}, [logits, logp, full, seq, dt = lt.dt](Bwd& c) {
      Graph& gg = c.graph();
      const int rows_all = gg.make(full, dt, Cat::kLogits);  // the buffered row gradients
      gg.drop(logp);
      const int grow = gg.make(seq, dt, Cat::kLogits);  // one row's gather gradient
      gg.drop(grow);
      const int stacked = c.like(logits, Cat::kLogits);
      gg.drop(rows_all);
      c.give(logits, stacked);
    });
    if (!made) g.drop(logp);  // no grad: nothing is kept
    g.drop(logp);
    result = gathered;
  }
  (void)grad;
  return result;
}

// entropy_from_logits under no_grad: reshape(-1, V) of the non-contiguous logits view copies it
// when there is more than one sequence; then 128-row chunks (log_softmax, exp, product).
int Step::entropy_no_grad(int logits, const Poly& rows) {
  const std::int64_t V = m_.vocab_size;
  const bool prev = g_.grad_enabled();
  g_.set_grad_enabled(false);
  const DT dt = g_.at(logits).dt;
  const bool copy = !one_sequence();
  const int flat = copy ? g_.make(rows * V, dt, Cat::kLogits) : -1;
  const Poly chunk = Poly::constant(128 * V);
  const int a = g_.make(chunk, dt, Cat::kLogits);
  const int b = g_.make(chunk, dt, Cat::kLogits);
  const int c2 = g_.make(chunk, dt, Cat::kLogits);
  g_.drop(a);
  g_.drop(b);
  g_.drop(c2);
  const int ent = g_.make(rows, dt, Cat::kLogits);
  if (flat >= 0) g_.drop(flat);
  g_.set_grad_enabled(prev);
  return ent;
}

// The reference model's per-token log-probs: a no-grad forward of the frozen copy, or of the
// policy with its adapters disabled; TRL keeps the returned outputs until the loss returns.
int Step::reference_forward(const Poly* logit_rows) {
  Weights* saved_w = w_;
  if (sp_.ref == RefKind::kCopy) w_ = &ref_;
  adapters_off_ = sp_.ref == RefKind::kAdaptersDisabled;
  if (sp_.autocast) ops_.enter_autocast(*sp_.autocast);
  g_.set_segment(kSegRefPre);
  const int h = embed_and_layers(false);
  g_.set_segment(kSegRefHead);
  int out = logit_rows != nullptr ? head_logits(h, *logit_rows) : final_hidden(h);
  g_.drop(h);
  if (sp_.autocast) ops_.exit_autocast();
  if (logit_rows != nullptr) out = to_output_dtype(out);
  adapters_off_ = false;
  w_ = saved_w;
  return out;
}

int Step::reference_logps(const Poly& rows, std::int64_t, std::int64_t) {
  const bool prev = g_.grad_enabled();
  g_.set_grad_enabled(false);
  const Poly all = tok(1);
  const int logits = reference_forward(&all);
  ref_logits_ = logits;  // ref_outputs: alive until _compute_loss returns
  const int v = g_.view(logits, rows * m_.vocab_size);  // ref_shift_logits
  const int lp = selective_log_softmax(v, rows, 0);
  g_.drop(v);
  g_.set_grad_enabled(prev);
  return lp;
}

// A small differentiable result (a loss or a [rows] reduction) of `x`.
int small_from(Graph& g, int x, const Poly& numel) {
  const int y = g.make(numel, DT::kF32, Cat::kLogits);
  g.node({x}, {y}, {}, [x](Bwd& c) { c.give(x, c.like(x, Cat::kLogits)); });
  return y;
}

// TRL >= 0.29 DPOTrainer._compute_loss_liger (docs/formulas.md#liger-dpo-grpo): the backbone
// without lm_head on [2b, s], the hidden states shifted into a contiguous copy, the reference's
// likewise, and LigerFusedLinearDPOLoss on them with both output weights.
int Step::dpo_liger_loss() {
  const std::int64_t hs = m_.hidden_size;
  if (sp_.autocast) ops_.enter_autocast(*sp_.autocast);
  const int h = embed_and_layers(true);
  g_.set_segment(kSegHead);
  const int hn = final_hidden(h);  // outputs.last_hidden_state: alive until the loss returns
  g_.drop(h);
  const Poly rows = tok(1) - per_seq(1);
  const int sl = ops_.slice(hn, rows * hs, false);  // [:, :-1]
  const int x = ops_.clone(sl);                     // .contiguous()
  g_.drop(sl);
  const int labels = g_.make(rows, DT::kI64, Cat::kInputs);  // input_ids[:, 1:].clone()
  int rx = -1, rhn = -1;
  if (sp_.ref != RefKind::kNone) {  // the reference backbone under no_grad, and its shifted copy
    const bool prev = g_.grad_enabled();
    g_.set_grad_enabled(false);
    rhn = reference_forward(nullptr);
    g_.set_segment(kSegHead);
    rx = g_.make(rows * hs, g_.at(rhn).dt, Cat::kActivations);
    g_.set_grad_enabled(prev);
  }
  // chunk_size 1: one pair of s - 1 rows.
  ChunkedLossHead lh = chunked_head(x, rows, Poly::mono(kS, 2) - Poly::constant(2));
  lh.ref_hidden = rx;
  const int loss = liger_fused_linear_preference(g_, ops_, lh);
  if (sp_.autocast) ops_.exit_autocast();
  // _compute_loss_liger returns: the outputs, the copies and the labels go.
  g_.drop(x);
  g_.drop(hn);
  g_.drop(labels);
  if (rx >= 0) g_.drop(rx);
  if (rhn >= 0) g_.drop(rhn);
  return loss;
}

int Step::dpo_loss() {
  if (sp_.loss_kernel == LossKernel::kLiger) return dpo_liger_loss();
  // DPOTrainer._compute_loss: one policy forward on [2b, s] (chosen, then rejected).
  const std::int64_t V = m_.vocab_size;
  if (sp_.autocast) ops_.enter_autocast(*sp_.autocast);
  const int h = embed_and_layers(true);
  g_.set_segment(kSegHead);
  int logits = head_logits(h, tok(1));
  g_.drop(h);
  if (sp_.autocast) ops_.exit_autocast();
  logits = to_output_dtype(logits);  // outputs.logits: held by `outputs` until the loss returns
  const Poly rows = tok(1) - per_seq(1);  // shift_logits = logits[..., :-1, :]
  ops_.cat = Cat::kLogits;
  const int sl1 = ops_.slice(logits, rows * V, false);
  const int sl2 = ops_.slice(sl1, rows * V, true);
  g_.drop(sl1);
  const int lp = selective_log_softmax(sl2, rows, 0);
  // per_token_logps[shift_completion_mask == 0] = 0.0: index_put_ keeps the boolean mask.
  const int mask = g_.make(rows, DT::kBool, Cat::kInputs);
  const int masked = g_.view(lp, rows);
  g_.node({lp}, {masked}, {mask}, [lp](Bwd& c) { c.give(lp, c.like(lp, Cat::kLogits)); });
  g_.drop(mask);
  g_.drop(lp);
  const int logps = small_from(g_, masked, per_seq(1));  // .sum(dim=1)
  g_.drop(masked);
  if (sp_.ref != RefKind::kNone) {
    const int ref_lp = reference_logps(rows, 0, 0);
    g_.drop(ref_lp);
  }
  g_.set_segment(kSegHead);
  const int loss = small_from(g_, logps, Poly::constant(1));
  g_.drop(logps);
  // Logged metrics, before backward: entropy (a full copy of the shifted logits), the masked mean
  // logits of chosen and of rejected completions, the argmax accuracy.
  const int ent = entropy_no_grad(sl2, rows);
  g_.drop(ent);
  Poly half = rows;
  for (auto& v : half.c) v /= 2;
  for (int i = 0; i < 2; ++i) {
    const int sel = g_.make(half * V, g_.at(sl2).dt, Cat::kLogits);
    g_.drop(sel);
  }
  const int argmax = g_.make(half, DT::kI64, Cat::kLogits);
  g_.drop(argmax);
  // _compute_loss returns: reference outputs and the policy outputs go (the graph keeps what
  // backward needs).
  if (ref_logits_ >= 0) g_.drop(ref_logits_);
  ref_logits_ = -1;
  g_.drop(sl2);
  g_.drop(logits);
  return loss;
}

// TRL >= 1.5 GRPOTrainer.compute_liger_loss with Liger >= 0.8 (docs/formulas.md#liger-dpo-grpo):
// the backbone's last_hidden_state on [b, P + C], sliced to the completion ([:, :-1] then
// [:, -C:]: views of it), and LigerFusedLinearGRPOLoss one sequence at a time. The reference
// log-probs come from the scoring pass, as for the eager loss.
int Step::grpo_liger_loss(int ref_logps) {
  const std::int64_t hs = m_.hidden_size;
  const Poly rows = tok(1) - per_seq(sp_.prompt_len);  // b * C
  if (sp_.autocast) ops_.enter_autocast(*sp_.autocast);
  const int h = embed_and_layers(true);
  g_.set_segment(kSegHead);
  const int hn = final_hidden(h);
  g_.drop(h);
  const int s1 = ops_.slice(hn, (tok(1) - per_seq(1)) * hs, false);
  const int x = ops_.slice(s1, rows * hs, false);
  g_.drop(s1);
  // chunk_size 1: one completion of C rows.
  const int loss =
      liger_fused_linear_grpo(g_, ops_, chunked_head(x, rows, Poly::mono(kS, 1) - Poly::constant(sp_.prompt_len)));
  if (sp_.autocast) ops_.exit_autocast();
  g_.drop(x);
  g_.drop(hn);
  if (ref_logps >= 0) g_.drop(ref_logps);
  return loss;
}

int Step::grpo_loss(int ref_logps) {
  if (sp_.loss_kernel == LossKernel::kLiger) return grpo_liger_loss(ref_logps);
  // GRPOTrainer._compute_loss on b completions of P + C tokens: logits_to_keep = C + 1.
  const std::int64_t V = m_.vocab_size;
  const Poly keep = tok(1) - per_seq(sp_.prompt_len - 1);  // b * (C + 1)
  const Poly rows = tok(1) - per_seq(sp_.prompt_len);      // b * C
  if (sp_.autocast) ops_.enter_autocast(*sp_.autocast);
  const int h = embed_and_layers(true);
  g_.set_segment(kSegHead);
  int logits = head_logits(h, keep);
  g_.drop(h);
  if (sp_.autocast) ops_.exit_autocast();
  logits = to_output_dtype(logits);
  ops_.cat = Cat::kLogits;
  // logits[:, :-1, :] then logits[:, -C:, :], then logits.div_(temperature) in place: autograd
  // rebases the view on the base through CopySlices.
  const int view = g_.view(logits, rows * V);
  const int base_after = g_.view(logits, keep * V);
  const DT ldt = g_.at(logits).dt;
  g_.node({logits}, {base_after}, {}, [logits, rows, V, ldt](Bwd& c) {
    // CopySlices: a base-shaped gradient, a clone of the view's part and DivBackward's result.
    const int r = c.like(logits, Cat::kLogits);
    const int cl = c.temp(rows * V, ldt, Cat::kLogits);
    const int dv = c.temp(rows * V, ldt, Cat::kLogits);
    c.drop(cl);
    c.drop(dv);
    c.give(logits, r);
  });
  g_.node({base_after}, {view}, {}, [base_after](Bwd& c) {
    c.give(base_after, c.like(base_after, Cat::kLogits));  // AsStridedBackward: zeros + copy
  });
  const int lp = selective_log_softmax(view, rows, 0);
  const int ent = entropy_no_grad(view, rows);
  // The clipped-ratio loss and the KL term are [b, C]-sized.
  const int loss = small_from(g_, lp, Poly::constant(1));
  g_.drop(lp);
  g_.drop(ent);
  g_.drop(view);
  g_.drop(base_after);
  g_.drop(logits);
  if (ref_logps >= 0) g_.drop(ref_logps);
  return loss;
}

ProgramResult Step::run() {
  ProgramResult res;
  if (sp_.trace) g_.set_trace(&res.trace);
  g_.set_backward_segment_map([](int seg) {
    if (seg == kSegFwdPre) return static_cast<int>(kSegBwdPre);
    if (seg >= kSegFwdFirst && seg <= kSegFwdLast) return kSegBwdFirst + (seg - kSegFwdFirst);
    if (seg == kSegHead) return static_cast<int>(kSegHeadBwd);
    return seg;
  });
  g_.set_segment(kSegFwdPre);
  g_.set_inplace_accumulation(sp_.ops.inplace_accumulation);
  g_.set_recording(false);
  make_params();
  if (sp_.ref == RefKind::kCopy) {
    making_ref_ = true;
    w_ = &ref_;
    make_params();
    w_ = &policy_;
    making_ref_ = false;
  }
  if (sp_.grads_accumulated) g_.preallocate_param_grads();
  g_.set_recording(true);
  // Trainer inputs (int64), alive for the whole step: SFT input_ids, attention_mask, labels;
  // DPO input_ids, attention_mask, completion_mask; GRPO prompt/completion ids and masks.
  // A sentence-transformers batch: input_ids and attention_mask for every text column, no labels.
  // The whole batch's, also under cached MNRL (its mini-batches are slices of them).
  ids_ = g_.make(Poly::mono(kBS, texts() * sp_.batch_multiplier), DT::kI64, Cat::kInputs);
  attn_mask2d_ = g_.make(Poly::mono(kBS, texts() * sp_.batch_multiplier), DT::kI64, Cat::kInputs);
  if (!m_.decoder_embedding) labels_ = g_.make(tok(1), DT::kI64, Cat::kInputs);
  if (vision_on() && mllama()) {
    // pixel_values (b, images, tiles, 3, side, side) fp32, aspect_ratio_ids / aspect_ratio_mask
    // (int64, per image and tile) and cross_attention_mask (b, s, images, tiles) int64.
    const VisionSpec& v = m_.vision;
    const std::int64_t side = v.image_size / v.patch_size;
    pixels_ = g_.make(per_image(checked_mul(v.max_num_tiles * side * side, v.patch_values())), DT::kF32, Cat::kInputs);
    cross_mask_in_ = g_.make(tok(checked_mul(sp_.images, v.max_num_tiles)), DT::kI64, Cat::kInputs);
    vpos_ids_ = g_.make(per_image(1 + v.max_num_tiles), DT::kI64, Cat::kInputs);
  } else if (vision_on() && m_.vision.kind == VisionKind::kLlama4) {
    // pixel_values (tiles, 3, image_size, image_size). Llama4ImageProcessorFast returns bf16 and
    // the tower takes them uncast: memplan gives them the tower's dtype (the bf16 of a bf16 model).
    const std::int64_t side = m_.vision.image_size / m_.vision.patch_size;
    pixels_ = g_.make(per_image(checked_mul(llama4_tiles() * side * side, m_.vision.patch_values())),
                      g_.at(w_->vision.patch_w).dt, Cat::kInputs);
  } else if (vision_on()) {  // pixel_values (fp32, flattened patches); SigLIP's position_ids buffer
    pixels_ = g_.make(vpt(m_.vision.patch_values()), DT::kF32, Cat::kInputs);
    if (m_.vision.kind == VisionKind::kSiglip) {
      const std::int64_t side = m_.vision.image_size / m_.vision.patch_size;
      vpos_ids_ = g_.make(Poly::constant(side * side), DT::kI64, Cat::kInputs);
    }
  }

  int loss = -1;
  int sent = -1;
  bool sent_freed = false;
  std::vector<int> column_block, column_leaves;
  switch (sp_.method) {
    case StepMethod::kSft: {
      if (cached_) {
        cached_embedding_step();
        break;
      }
      if (sp_.autocast) ops_.enter_autocast(*sp_.autocast);
      if (m_.decoder_embedding) {
        ColumnsLoss cl = embedding_loss(column_leaves);
        loss = cl.loss;
        column_block = std::move(cl.block);
        if (sp_.autocast) ops_.exit_autocast();
        break;
      }
      const int h = embed_and_layers(true);
      if (!sp_.stage_head) {
        // Not the last pipeline stage: the hidden states are sent on and kept for backward
        // (torch.distributed.pipelining caches a stage's outputs until their backward).
        drop_forward_locals();
        if (sp_.autocast) ops_.exit_autocast();
        sent = h;
        if (sp_.free_stage_output) {  // its graph stays; its bytes go with the send
          g_.drop(h);
          sent_freed = true;
        }
        break;
      }
      g_.set_segment(kSegHead);
      if (sp_.loss_kernel != LossKernel::kEager) {
        loss = fused_sft_loss(h);
        g_.drop(h);
        if (sp_.autocast) ops_.exit_autocast();
        break;
      }
      const int logits = head_logits(h, tok(1));
      g_.drop(h);
      loss = sft_loss(logits);
      if (sp_.autocast) ops_.exit_autocast();
      break;
    }
    case StepMethod::kDpo:
      loss = dpo_loss();
      break;
    case StepMethod::kGrpo: {
      // The scoring pass (no grad) computes reference log-probs before the update.
      int ref_lp = -1;
      if (sp_.ref != RefKind::kNone) {
        const Poly keep = tok(1) - per_seq(sp_.prompt_len - 1);
        const Poly rows = tok(1) - per_seq(sp_.prompt_len);
        const bool prev = g_.grad_enabled();
        g_.set_grad_enabled(false);
        const int logits = reference_forward(&keep);
        const int v = g_.view(logits, rows * m_.vocab_size);  // slices and in-place div_: views
        ref_lp = selective_log_softmax(v, rows, 0);
        g_.drop(v);
        g_.drop(logits);
        g_.set_grad_enabled(prev);
      }
      g_.set_segment(kSegFwdPre);
      loss = grpo_loss(ref_lp);
      break;
    }
  }
  if (emb_leaf_ >= 0) g_.drop(emb_leaf_);

  if (sent >= 0) {
    // The next stage sends the gradient of these hidden states back.
    g_.set_segment(kSegHeadBwd);
    const int rg = g_.make(g_.at(sent).numel, g_.at(sent).dt, Cat::kActivationGrads);
    g_.backward_from(sent, rg, 0);
    loss = sent_freed ? -1 : sent;
  } else if (loss >= 0) {
    g_.backward(loss, 0);
  }
  for (const int t : column_block) g_.drop(t);  // the text columns between the simulated ones
  if (emb_leaf_ >= 0) column_leaves.push_back(emb_leaf_);
  release_backward(column_leaves, 0);
  if (loss >= 0) g_.drop(loss);
  g_.take_events(res.events, res.cats);
  res.params = params_;
  g_.mark_optimizer_step();
  // zero_grad(set_to_none=True) after the optimizer step.
  g_.free_param_grads();
  res.end_of_step = g_.live();
  for (std::size_t i = 0; i < g_.tensors().size(); ++i) {
    const Tensor& t = g_.tensors()[i];
    if (t.alive && !t.is_param && t.base < 0 && t.cat != Cat::kInputs) res.leaked.push_back(static_cast<int>(i));
  }
  return res;
}

}  // namespace

std::vector<std::string> default_lora_targets(const ModelSpec& m) {
  // PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING in the newest release memplan has
  // read, by model.config.model_type (docs/formulas.md#peft-default-targets); the CLI applies the
  // stack's release (apply_stack). Empty: PEFT has no entry and asks for target_modules.
  const std::string& type = m.config_model_type.empty() ? m.model_type : m.config_model_type;
  if (auto d = peft_default_lora_targets(type, newest_modelled(Library::kPeft))) return d->modules;
  return {};
}

ProgramResult run_step(const ProgramSpec& spec) {
  if (spec.model.is_encoder()) return run_encoder_step(spec);
  Step s(spec);
  return s.run();
}

std::int64_t scan_chunk(const ModelSpec& m) {
  const auto& mixers = m.hybrid.mixers;
  if (std::find(mixers.begin(), mixers.end(), MixerKind::kMamba2) != mixers.end())
    return std::max<std::int64_t>(1, m.hybrid.mamba_chunk);
  if (std::find(mixers.begin(), mixers.end(), MixerKind::kGatedDeltaNet) != mixers.end()) return kGatedDeltaChunk;
  return 1;
}

}  // namespace memplan::sim

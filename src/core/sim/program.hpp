// The training step as a program of ops: transformers' eager Llama-family forward (and its
// GPT-2/Phi-3/Gemma/MoE variants), PEFT LoRA, bitsandbytes 4-bit linears, reentrant gradient
// checkpointing, ForCausalLMLoss, and backward, run on a sim::Graph (docs/formulas.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/sim/graph.hpp"
#include "core/sim/ops.hpp"
#include "memplan/model.hpp"
#include "memplan/training.hpp"

namespace memplan::sim {

// Segments of the recorded timeline. A reduced model is simulated: the first decoder layer, one
// or two middle layers (instances 0 and 1 of the middle segments) and the last one; the engine
// extrapolates to every layer from the difference between the two (docs/formulas.md).
enum Segment : int {
  kSegFwdPre = 0,
  kSegFwdFirst = 1,
  kSegFwdMid = 2,
  kSegFwdLast = 3,
  kSegHead = 4,       // final norm, lm_head and loss forward
  kSegHeadBwd = 5,
  kSegBwdFirst = 6,
  kSegBwdMid = 7,
  kSegBwdLast = 8,
  kSegBwdPre = 9,     // embedding backward
  kSegRefPre = 10,    // DPO/GRPO reference forward (no grad), by layer role like the policy's
  kSegRefFirst = 11,
  kSegRefMid = 12,
  kSegRefLast = 13,
  kSegRefHead = 14,
  kNumSegments = 15,
};

enum class StepMethod { kSft, kDpo, kGrpo };
enum class RefKind { kNone, kCopy, kAdaptersDisabled };

struct LoraPlan {
  bool enabled = false;
  int r = 16;
  double dropout = 0.0;
  std::vector<std::string> targets;        // module names (already validated)
  std::vector<std::string> modules_to_save;
  bool operator==(const LoraPlan&) const = default;
};

struct ProgramSpec {
  ModelSpec model;
  std::vector<int> model_layers;  // the model layer each simulated decoder layer stands for
  // Where each simulated layer's events are recorded: {0 first, 1 middle, 2 last} and the middle
  // instance. Empty: by position (the first layer, the last, the ones between as instances 0, 1..).
  // A repeating group of layers shares one middle instance (docs/formulas.md#extrapolation).
  std::vector<std::pair<int, int>> layer_slots;
  DT weight_dt = DT::kF32;        // torch_dtype
  std::optional<DT> autocast;
  bool full_finetune = true;
  LoraPlan lora;
  bool load_in_4bit = false;
  bool load_in_8bit = false;      // LLM.int8(): bitsandbytes Linear8bitLt for layer Linears
  bool double_quant = false;
  // dtypes of the parameters bitsandbytes leaves unquantized, after the k-bit preparation
  // (docs/formulas.md#qlora): embeddings and lm_head, and norms (with biases).
  DT embed_dt = DT::kF32;
  DT norm_dt = DT::kF32;
  DT compute_dt = DT::kF32;       // bnb_4bit_compute_dtype
  DT adapter_dt = DT::kF32;       // LoRA weights: fp32 (PEFT autocast_adapter_dtype), bf16 for QLoRA in TRL
  // transformers <= 4.48 ForCausalLMLoss: shift_logits = logits.float()[..., :-1, :].contiguous().
  bool loss_shift_copy = false;
  // transformers <= 4.45: the forward rebinds logits = logits.float(), freeing the 16-bit logits.
  bool loss_upcast_in_model = false;
  // Llama4ForConditionalGeneration's own loss (docs/formulas.md#llama-4-vision): the shifted
  // logits taken by a boolean index, logits[..., :-1, :][mask != 0] (a copy whose IndexBackward
  // keeps the (rows, 2) int64 nonzero indices and scatters its gradient into a zero tensor).
  bool loss_index_copy = false;
  bool gradient_checkpointing = false;
  bool checkpoint_reentrant = true;  // torch.utils.checkpoint use_reentrant
  // With gradient_checkpointing: only the decoder layers whose 1-based model index is a multiple
  // of this are checkpointed (torchtitan's selective_ac_option N; docs/formulas.md#every-n-checkpointing).
  int checkpoint_every = 1;
  // torchtitan's per-op selective checkpointing (non-reentrant only): each checkpointed layer also
  // keeps the outputs of every other aten.mm and, with sac_save_attention, of the fused attention
  // kernel (docs/formulas.md#per-op-selective-checkpointing).
  bool checkpoint_op_policy = false;
  bool sac_save_attention = false;
  // The eager loss upcasts the logits to fp32 (false: cross_entropy on the logits' own dtype;
  // docs/formulas.md#loss-dtype).
  bool loss_upcast = true;
  // FSDP1 with frozen decoder-layer units (PEFT's auto-wrap policy: LoRA/QLoRA) under reentrant
  // checkpointing: the post-backward reshard-only hook on each layer's detached input keeps that
  // input and its .grad alive until the end of backward (docs/formulas.md#fsdp-reshard-only-hook).
  bool fsdp_frozen_units = false;
  AttnImpl attn = AttnImpl::kEager;
  // SDPA with sliding-window layers (docs/formulas.md#sliding-window-attention): transformers
  // materializes the sliding mask once s >= sliding_window (the engine runs this program for
  // those lengths), and then the sliding layers repeat K/V and SDPA saves a dense copy of it.
  bool sdpa_sliding_mask = false;
  // Gemma 3 with images: token_type_ids' bidirectional image blocks (an or_mask_function) keep
  // transformers from skipping any mask, so every layer gets one under SDPA, at every s.
  bool sdpa_full_mask = false;
  OpsBehaviour ops;
  // DPO/GRPO shape the batch: sequences in the policy forward, and logit tokens per sequence.
  std::int64_t batch_multiplier = 1;
  StepMethod method = StepMethod::kSft;
  RefKind ref = RefKind::kNone;
  // accelerate's convert_outputs_to_fp32: under autocast (not DeepSpeed), 16-bit model outputs
  // are converted with .float() before TRL sees them.
  bool fp32_outputs = false;
  // torchtune's MultiHeadAttention: K and V copied to every query head (expand + flatten) before
  // SDPA, which saves the copies (docs/formulas.md#torchtune-attention).
  bool expand_kv = false;
  // PEFT with gradient checkpointing: the trainer calls enable_input_require_grads() (TRL, and
  // transformers for adapters it loaded: sentence-transformers). LLM2Vec's script does not.
  bool input_require_grads = true;
  std::int64_t prompt_len = 0;  // GRPO: P; the sequence is P + C and logits_to_keep = C + 1
  // Whether the forward batch is a single sequence. Some reshapes are views only then (the
  // permuted query folding into bmm), so the engine compiles one program for b == 1 and one
  // for b >= 2.
  bool batch_one = false;
  // Loss kernel and Liger's module kernels (docs/formulas.md#fused-cross-entropy).
  LossKernel loss_kernel = LossKernel::kEager;
  bool liger_kernels = false;
  // Encoders: contrastive texts per example and cached (GradCache) mini-batches.
  ContrastiveConfig contrastive;
  // Pipeline stage (docs/formulas.md#pipeline-parallelism): whether this stage holds the
  // embedding (else its input is the previous stage's hidden states, received with
  // requires_grad) and the head (else its output is sent on and backward starts from the
  // gradient the next stage sends back). SFT only.
  bool stage_embedding = true;
  bool stage_head = true;
  // Megatron-Core frees a stage output's storage once it is sent (deallocate_output_tensor);
  // torch.distributed.pipelining keeps it until its backward.
  bool free_stage_output = false;
  // A micro-batch after the first of a gradient-accumulation step: every trainable parameter
  // already has its .grad from the earlier micro-batches; backward adds into it in place
  // (docs/formulas.md#gradient-accumulation).
  bool grads_accumulated = false;
  // Expert parallelism (docs/formulas.md#expert-parallelism): the all-to-all dispatch/combine
  // buffers when ep > 1, and the routed token-expert pairs per GPU relative to tokens x top-k
  // (per mille: 1000 = dropless with balanced routing; capacity factor x 1000 with padding).
  int expert_parallel = 1;
  std::int64_t moe_tokens_per_mille = 1000;
  // Megatron sequence parallelism with tensor parallelism t (docs/formulas.md#sequence-parallelism):
  // the residual stream, norms and dropouts hold s / t tokens per rank; 1 = off.
  int sequence_parallel = 1;
  // Under sequence parallelism, whether the MoE layers gather the sequence over the tensor-parallel
  // group (experts split with it: expert_tensor_parallel_size = tp) or route each rank's s / t
  // tokens on their own (expert_tensor_parallel_size 1: Megatron-Core's dispatcher gathers over
  // the expert-tensor group only).
  bool moe_gather = true;
  // Vision-language models (docs/formulas.md#vision-language-models): images per sequence, the
  // patches one image is cut into for the tower and the tokens it becomes in the sequence; whether
  // the tower and the projector are trained (LoRA reaches the tower only when it is).
  std::int64_t images = 0;
  std::int64_t image_patches = 0;   // rows x cols of the patch grid
  std::int64_t image_rows = 0, image_cols = 0;
  std::int64_t image_tokens = 0;
  bool train_vision_tower = false;
  bool train_projector = false;
  std::optional<DT> vision_frozen_dt;  // dtype of frozen vision parameters, when not weight_dt
  // Simulate every vision block instead of the first and last of each kind (tests check that
  // both give the same maximum).
  bool vision_all_blocks = false;
  // Every field: two equal specs run the same program (the engine shares their results).
  // Record every allocation and free (ProgramResult::trace) for the caching-allocator replay.
  bool trace = false;
  bool operator==(const ProgramSpec&) const = default;
};

// A parameter tensor of the simulated model, for the optimizer model.
struct ParamRec {
  std::int64_t numel = 0;
  DT dt = DT::kF32;
  bool trainable = false;
  int sim_layer = -1;              // decoder layer of the reduced model, -1 outside the layers
  std::int64_t rows = 0, cols = 0; // 2-D shape of one matrix (0 for vectors)
  int count = 1;                   // matrices of that shape (routed experts)
  bool fused = false;              // the count matrices are one 3-D Parameter (fused experts)
};

struct ProgramResult {
  std::vector<ParamRec> params;       // every parameter of the reduced model
  std::vector<Event> events;          // live bytes after every allocation
  EventCats cats;                     // their categories (cats.at(event, category))
  CatVec end_of_step;                 // live after zero_grad (persistent state)
  std::vector<int> leaked;            // non-persistent tensors alive at the end (must be empty)
  AllocTrace trace;                   // ProgramSpec::trace: every allocation and free in order
};

// transformers' torch_chunk_gated_delta_rule runs in chunks of 64 positions (chunk_size=64).
inline constexpr std::int64_t kGatedDeltaChunk = 64;
// The chunk a model's chunked scans pad the sequence to (Poly::Point's p): Mamba-2's chunk_size,
// else Gated DeltaNet's 64, else 1 (no scan: p = s). No released model has both kinds of layer;
// one that did would need a p per kind.
std::int64_t scan_chunk(const ModelSpec& m);

// Runs one SFT step of the reduced model. Throws SizeOverflow on absurd sizes.
ProgramResult run_step(const ProgramSpec& spec);
// The encoder step (encoder_program.cpp): BERT-family forward, its head and loss, backward.
ProgramResult run_encoder_step(const ProgramSpec& spec);

// The names LoRA targets by default for a model type (PEFT's mapping), and validation of
// user-given names against the model's Linear modules ("all-linear" expands to all of them).
std::vector<std::string> default_lora_targets(const ModelSpec& m);

}  // namespace memplan::sim

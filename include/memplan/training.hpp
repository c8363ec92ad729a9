// TrainingConfig: everything about a training step that decides memory, except the model.
// Field names follow the Hugging Face TrainingArguments / TRL / PEFT names users already write
// in their configs; every field documents its default and why it matters.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "memplan/result.hpp"

namespace memplan {

enum class Method { kSft, kDpo, kGrpo };
enum class DType { kFloat32, kBFloat16, kFloat16 };
enum class Device { kCuda, kCpu };
enum class AttnImpl { kEager, kSdpa, kFlashAttention2 };

// Hugging Face `optim` names (TrainingArguments.optim).
enum class OptimizerKind {
  kAdamWTorch,        // adamw_torch: torch.optim.AdamW (foreach on CUDA, single-tensor on CPU)
  kAdamWTorchFused,   // adamw_torch_fused: fused CUDA kernel, no parameter-sized temporaries
  kAdamW8bit,         // adamw_bnb_8bit / adamw_8bit: bitsandbytes blockwise 8-bit states
  kPagedAdamW8bit,    // paged_adamw_8bit: same states in CUDA unified (paged) memory
  kPagedAdamW32bit,   // paged_adamw_32bit
  kAdafactor,         // adafactor: transformers' Adafactor, factored second moment
  kSgd,               // sgd: momentum buffer only when momentum != 0 (--optim-args momentum=0.9)
  kAdagrad,           // adagrad: one state (sum of squares)
  kRmsprop,           // rmsprop: square_avg (+ momentum_buffer, + grad_avg when centered)
  kLion8bit,          // lion_8bit: bitsandbytes, one 8-bit state
  kLion32bit,         // lion_32bit: bitsandbytes, one fp32 state
  kAdamWTorchao8bit,  // adamw_torch_8bit: torchao AdamW8bit, block-wise 8-bit states (blocks of 256)
  kAdamWTorchao4bit,  // adamw_torch_4bit: torchao AdamW4bit, block-wise 4-bit states (blocks of 128)
};

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdamWTorch;  // HF TrainingArguments default
  // --optim-args K=V pairs as given (momentum=0.9, foreach=false, amsgrad=true, centered=true...).
  std::map<std::string, std::string> args;

  bool operator==(const OptimizerConfig&) const = default;
};

struct LoraConfig {
  bool enabled = false;                     // --use-peft
  int r = 16;                               // TRL ModelConfig.lora_r default
  double alpha = 32;                        // lora_alpha: scales the update, no memory effect
  double dropout = 0.05;                    // > 0 keeps a dropped-out copy of each target's input
  std::vector<std::string> target_modules;  // empty: PEFT's default for the model type
  bool all_linear = false;                  // "all-linear": every Linear in the layers
  std::vector<std::string> modules_to_save; // e.g. embed_tokens, lm_head: trained in full
  // dtype of lora_A/lora_B. Default: fp32 (get_peft_model's autocast_adapter_dtype), bf16 when
  // TRL casts the adapters of a quantized model (KbitPrepare::kTrlLegacy, or current TRL's QLoRA).
  std::optional<DType> adapter_dtype;

  bool operator==(const LoraConfig&) const = default;
};

struct QuantConfig {
  bool load_in_4bit = false;                // QLoRA: bitsandbytes Linear4bit for layer Linears
  bool load_in_8bit = false;                // LLM.int8()
  std::string quant_type = "nf4";           // bnb_4bit_quant_type: nf4 | fp4 (same storage)
  bool double_quant = false;                // bnb_4bit_use_double_quant (TRL: use_bnb_nested_quant)
  std::optional<DType> compute_dtype;       // bnb_4bit_compute_dtype; default: torch_dtype
  // bnb_4bit_quant_storage: the dtype Params4bit packs its 4-bit values in (same bytes). A 16-bit
  // storage is what lets FSDP flatten and shard the quantized weights with the others
  // (FSDP-QLoRA); the default uint8 cannot be sharded, so they stay whole on every GPU.
  std::optional<DType> quant_storage;
  // How the quantized model was prepared for training (docs/formulas.md#qlora):
  //  kFreezeOnly   freeze the parameters, nothing cast (current TRL; fms-acceleration's plugin)
  //  kPeftUpcast   PEFT prepare_model_for_kbit_training: every non-4-bit parameter to fp32
  //  kTrlLegacy    TRL <= 0.x SFTTrainer: prepare_model_for_kbit_training, then
  //                peft_module_casting_to_bf16 (adapters and embeddings/lm_head back to bf16,
  //                norms stay fp32)
  enum class KbitPrepare { kFreezeOnly, kPeftUpcast, kTrlLegacy };
  KbitPrepare kbit_prepare = KbitPrepare::kFreezeOnly;

  bool operator==(const QuantConfig&) const = default;
};

enum class RefModel {
  kAuto,         // a frozen copy, or the adapter-disabled policy under PEFT
  kCopy,         // separate frozen copy of the model
  kNone,         // reference-free losses (ORPO, SimPO) or precomputed log-probs
};

struct DpoConfig {
  RefModel ref_model = RefModel::kAuto;
  bool precompute_ref_log_probs = false;    // reference log-probs computed before training
  bool concatenated_forward = true;         // chosen+rejected in one batch of 2x sequences
  std::int64_t max_prompt_length = 0;       // informational; seq_len is the full pair length

  bool operator==(const DpoConfig&) const = default;
};

enum class VllmMode { kNone, kColocate, kServer };

struct GrpoConfig {
  int num_generations = 8;                  // completions per prompt
  std::int64_t max_prompt_length = 512;     // TRL default
  std::int64_t max_completion_length = 256; // TRL default
  double beta = 0.0;                        // KL weight; 0 means no reference model
  double temperature = 1.0;
  VllmMode vllm = VllmMode::kNone;          // --use-vllm with --vllm-mode colocate|server
  double vllm_gpu_memory_utilization = 0.3; // colocate: fraction of the GPU vLLM reserves

  bool operator==(const GrpoConfig&) const = default;
};

// How the language-model loss is computed (docs/formulas.md#fused-cross-entropy).
enum class LossKernel {
  kEager,    // lm_head -> full logits -> .float() -> cross_entropy (transformers ForCausalLMLoss)
  kLiger,    // Liger's fused linear cross-entropy (use_liger_kernel): chunked logits, grads in forward
  kChunked,  // torchtune LinearCrossEntropyLoss (num_output_chunks = 8): logits per chunk, fp32 log-probs kept
  kCce,      // Apple's cut cross-entropy: no logits in memory, backward recomputes them blockwise
};

// Whose modelling code runs the forward (docs/formulas.md#torchtune-attention): transformers' (the
// default), or torchtune's TransformerDecoder, whose MultiHeadAttention copies K and V to every
// query head (expand + flatten) before SDPA instead of passing enable_gqa.
enum class ModelCode { kTransformers, kTorchtune };

// Contrastive training of an embedding model (sentence-transformers, seed 002's n_positives /
// n_negatives): each example is an anchor and texts_per_example - 1 candidate texts.
struct ContrastiveConfig {
  int texts_per_example = 0;   // 0: not contrastive; else 1 + n_positives + n_negatives (>= 2)
  bool cached = false;         // CachedMultipleNegativesRankingLoss (GradCache)
  int mini_batch_size = 32;    // cached: sequences per forward/backward chunk (its default 32)

  bool enabled() const { return texts_per_example > 0; }
  // Texts each example embeds: one forward per text column (1 without contrastive texts).
  int texts() const { return enabled() ? texts_per_example : 1; }
  bool operator==(const ContrastiveConfig&) const = default;
};

// Images in a vision-language model's training step (docs/formulas.md#vision-language-models).
struct VisionInputs {
  int images = -1;                  // images per sequence; -1: 1 for Qwen-VL, 0 for Gemma 3
  std::int64_t image_height = 0;    // pixels before the processor resizes; 0: the model's default
  std::int64_t image_width = 0;
  bool train_vision_tower = false;  // LLaMA-Factory freeze_vision_tower: false / ms-swift freeze_vit: false
  bool train_projector = false;     // freeze_multi_modal_projector: false / freeze_aligner: false
  // The dtype frozen vision parameters keep when it differs from torch_dtype: LLaMA-Factory loads
  // in bf16/fp16 and upcasts only trainable parameters to fp32 for full fine-tuning.
  std::optional<DType> frozen_dtype;

  bool operator==(const VisionInputs&) const = default;
};

// Pipeline schedules (docs/formulas.md#pipeline-parallelism): how many micro-batches' activations
// a stage holds at once. GPipe: all forwards, then all backwards. 1F1B (Megatron, DeepSpeed,
// torch.distributed.pipelining): stage i holds min(p - i, m). Interleaved 1F1B: v model chunks
// per GPU. Zero-bubble ZB-H1 (torch ScheduleInterleavedZeroBubble's basis): 1F1B's peak.
enum class PipelineSchedule { k1F1B, kInterleaved1F1B, kGPipe, kZeroBubble };

// kFsdpNoShard: FSDP1's NO_SHARD (docs/formulas.md#fsdp-no-shard): full parameters, gradients
// and optimizer states on every GPU like DDP, but the gradients are all-reduced in place in the
// FlatParameter's .grad (torch/distributed/fsdp/_runtime_utils.py _reduce_grad_no_shard): no
// second copy in communication buckets.
enum class ShardingStrategy {
  kNone,
  kZero1,
  kZero2,
  kZero3,
  kFsdpFullShard,
  kFsdpShardGradOp,
  kFsdpHybridShard,
  kFsdpNoShard
};

// DeepSpeed's zero_optimization keys that size its buffers (docs/formulas.md#deepspeed-buffers),
// with DeepSpeed's defaults (deepspeed/runtime/zero/config.py) where a config leaves them out.
// Sizes are elements. A size written "auto" is filled in by transformers' HfTrainerDeepSpeedConfig
// from the model's hidden size h (h^2; ZeRO-3's prefetch 0.9 h^2 and persistence 10 h): the
// *_auto flags say so and the engine resolves them once it knows the model.
struct ZeroConfig {
  std::int64_t reduce_bucket_size = 500'000'000;
  std::int64_t allgather_bucket_size = 500'000'000;
  std::int64_t prefetch_bucket_size = 50'000'000;        // stage3_prefetch_bucket_size
  std::int64_t max_live_parameters = 1'000'000'000;      // stage3_max_live_parameters
  std::int64_t max_reuse_distance = 1'000'000'000;       // stage3_max_reuse_distance
  std::int64_t param_persistence_threshold = 100'000;    // stage3_param_persistence_threshold
  std::int64_t sub_group_size = 1'000'000'000;
  bool contiguous_gradients = true;
  std::optional<bool> overlap_comm;  // unset: DeepSpeed's default, true for stage 3 only
  bool round_robin_gradients = false;
  bool reduce_bucket_auto = false;
  bool prefetch_bucket_auto = false;
  bool persistence_threshold_auto = false;

  bool operator==(const ZeroConfig&) const = default;
};

struct ParallelConfig {
  int num_gpus = 1;               // GPUs per node
  int nodes = 1;
  int tensor_parallel = 1;
  ShardingStrategy sharding = ShardingStrategy::kNone;
  bool offload_optimizer = false; // ZeRO/FSDP CPU offload of optimizer states
  bool offload_params = false;    // ZeRO-3/FSDP parameter offload
  // FSDP implementation: 1 (FullyShardedDataParallel, flat parameters; accelerate's default) or
  // 2 (fully_shard, per-parameter DTensor shards). Only read when sharding is an FSDP strategy.
  int fsdp_version = 1;
  // FSDP2's MixedPrecisionPolicy as torchtitan sets it (docs/formulas.md#fsdp-mixed-precision):
  // parameters, gradients and optimizer states stored in fp32 and sharded; the layers gathered
  // and computed in the weight dtype (torch_dtype: bfloat16), without autocast.
  bool fsdp_mixed_precision = false;
  // FSDP2's reshard_after_forward (default true: a layer's gathered parameters are freed after its
  // forward). false, as torchtitan's "default" policy sets it under pipeline parallelism: every
  // layer stays gathered from its forward until the backward that syncs gradients, as FSDP1's
  // SHARD_GRAD_OP (docs/formulas.md#reshard-after-forward). Needs fsdp_version 2.
  bool fsdp_reshard_after_forward = true;
  // Pipeline parallelism (docs/formulas.md#pipeline-parallelism): stages, the schedule, model
  // chunks per GPU (interleaved 1F1B: virtual stages) and explicit first/last stage layer counts
  // (Megatron's decoder_first/last_pipeline_num_layers; 0: split evenly).
  int pipeline_parallel = 1;
  PipelineSchedule pp_schedule = PipelineSchedule::k1F1B;
  int virtual_stages = 1;
  int pp_first_stage_layers = 0;
  int pp_last_stage_layers = 0;
  // torchtitan / NeMo Automodel layers_per_stage (0: not given): the stage count is
  // ceil((num_layers + 2) / layers_per_stage), the embedding and the head weighing a layer each.
  int pp_layers_per_stage = 0;
  // Context parallelism (docs/formulas.md#context-parallelism): each of the cp GPUs of a group
  // holds seq_len / cp tokens of every sequence; ring attention passes K/V around.
  int context_parallel = 1;
  // Expert parallelism (docs/formulas.md#expert-parallelism): routed experts split over ep GPUs
  // of the data-parallel group; capacity factor 0 = dropless (balanced routing assumed).
  int expert_parallel = 1;
  // Megatron-Core's expert_tensor_parallel_size: how many ways each routed expert's matrices are
  // split (0: as the dense layers, tensor_parallel, Megatron's default). The expert groups are
  // carved out of tp x cp x dp: each expert-parallel x expert-tensor group holds one copy of the
  // experts, and the expert data-parallel size is tp x cp x dp / (ep x etp).
  int expert_tensor_parallel = 0;
  double moe_capacity_factor = 0.0;
  // Megatron sequence parallelism (docs/formulas.md#sequence-parallelism): with tensor
  // parallelism, norms, dropouts and the residual stream hold seq_len / tp tokens per GPU.
  bool sequence_parallel = false;
  // Megatron-Core's layouts (docs/formulas.md#megatron-core): the embedding, the output layer and
  // the cross-entropy split over the vocabulary across tensor-parallel ranks, and pipeline stage
  // outputs freed after their send (deallocate_output_tensor). Otherwise Hugging Face's tp_plan
  // (whole vocabulary on every rank) and torch.distributed.pipelining (outputs kept).
  bool megatron_core = false;
  // Loss parallelism (torchtitan's default with tensor parallelism, `loss_parallel()`; always on
  // in Megatron-Core): the embedding, the output layer and the cross-entropy hold V / t of the
  // vocabulary per tensor-parallel rank, the logits are never gathered
  // (docs/formulas.md#loss-parallel). Needs tensor_parallel > 1.
  bool loss_parallel = false;
  // HSDP (hybrid_shard) replica groups: the data-parallel x context ranks split into this many
  // replicas, each sharding over the rest (torchtitan data_parallel_replicate_degree, Automodel
  // dp_replicate_size). 0: one replica per node, each sharding over its node's GPUs.
  int dp_replicate = 0;
  // DeepSpeed's buffer settings; read only under ZeRO-1/2/3.
  ZeroConfig zero;

  int world_size() const { return num_gpus * nodes; }
  // GPUs that hold one copy of the model: a tensor x pipeline x context parallel group.
  int model_parallel_size() const {
    return std::max(1, tensor_parallel) * std::max(1, pipeline_parallel) * std::max(1, context_parallel);
  }
  int data_parallel_size() const { return std::max(1, world_size() / model_parallel_size()); }
  int expert_tensor_parallel_size() const { return expert_tensor_parallel > 0 ? expert_tensor_parallel : std::max(1, tensor_parallel); }

  bool operator==(const ParallelConfig&) const = default;
};

// PYTORCH_CUDA_ALLOC_CONF as PyTorch's CUDACachingAllocator parses it: comma-separated
// key:value pairs (c10/cuda/CUDAAllocatorConfig.cpp). Only the keys that change how much of the
// GPU a step can use are kept; the rest are listed in `other`.
struct AllocatorConf {
  std::string text;                               // as given ("" = PyTorch's defaults)
  bool expandable_segments = false;               // expandable_segments:True
  std::optional<std::int64_t> max_split_size_mb;  // max_split_size_mb:N
  std::optional<double> garbage_collection_threshold;  // garbage_collection_threshold:0.6
  std::vector<std::string> other;                 // other keys, kept for the message
  bool operator==(const AllocatorConf&) const = default;
};

// The lengths a run's micro-batches take, for the caching-allocator replay
// (docs/formulas.md#sequence-lengths). Empty `histogram`: every micro-batch is seq_len tokens long
// (padding to max_length, or packing). Otherwise each micro-batch is padded to its longest example
// (the collators' padding="longest"), examples drawn from the histogram (length, weight) and
// truncated at seq_len; `steps` micro-batches are drawn (a fixed seed: the same answer each run).
struct SequenceLengths {
  std::vector<std::pair<std::int64_t, double>> histogram;
  std::int64_t steps = 1000;
  std::int64_t pad_to_multiple_of = 1;
  bool operator==(const SequenceLengths&) const = default;
};

struct TrainingConfig {
  Method method = Method::kSft;
  std::int64_t micro_batch = 1;        // per_device_train_batch_size (sequences; GRPO: completions)
  std::int64_t seq_len = 1024;         // tokens per sequence (TRL SFTConfig.max_length default)
  std::int64_t grad_accum = 1;         // gradient_accumulation_steps (> 1: later micro-batches hold .grad)
  // zero_grad(set_to_none=False), torch < 2.0's default (docs/formulas.md#zero-grad-set-to-none):
  // every .grad stays allocated (zeroed) into the next step, so every micro-batch after the first
  // step holds all of them, as a later micro-batch of gradient accumulation does. Set by the stack.
  bool zero_grad_keeps_grads = false;
  DType torch_dtype = DType::kFloat32; // dtype weights are loaded in (from_pretrained default)
  std::optional<DType> autocast;       // --bf16 / --fp16: torch.autocast around forward and loss
  OptimizerConfig optim;
  bool gradient_checkpointing = false; // keep layer inputs only, recompute one layer at a time
  // torch.utils.checkpoint use_reentrant (HF gradient_checkpointing_kwargs). Default: true on
  // cpu (torch 1.13 / transformers 4.x), false on cuda (transformers >= 5 default).
  std::optional<bool> checkpoint_reentrant;
  // Every-N-layers checkpointing (torchtitan activation_checkpoint.mode: selective with
  // selective_ac_option: N; docs/formulas.md#every-n-checkpointing): with gradient_checkpointing,
  // only the layers whose 1-based index is a multiple of N are checkpointed (N = 1: every layer).
  int checkpoint_every = 1;
  // What a checkpointed layer keeps for its backward (docs/formulas.md#per-op-selective-checkpointing).
  // kFull: its input only (torch.utils.checkpoint). kOp: torchtitan's per-op selective policy
  // (selective_ac_option: op) also keeps the outputs of every other aten.mm in call order and of
  // the fused attention kernel, which its recomputation then reuses. Needs gradient_checkpointing.
  enum class CheckpointPolicy { kFull, kOp };
  CheckpointPolicy checkpoint_policy = CheckpointPolicy::kFull;
  // The loss upcasts the logits to fp32 before cross_entropy (transformers, torchtitan); false:
  // cross_entropy on the logits in their own dtype, as a training loop of one's own may do
  // (docs/formulas.md#loss-dtype). Eager loss kernel only.
  bool loss_upcast = true;
  std::optional<AttnImpl> attn;        // default: sdpa on CUDA, eager on CPU
  LoraConfig lora;
  QuantConfig quant;
  Device device = Device::kCuda;
  DpoConfig dpo;
  GrpoConfig grpo;
  ParallelConfig parallel;
  // The caching allocator's settings and the run's sequence lengths: reserved memory is replayed
  // from them (docs/formulas.md#the-caching-allocator). empty_cache_steps: HF Trainer's
  // torch_empty_cache_steps (0: never).
  AllocatorConf allocator;
  SequenceLengths lengths;
  std::int64_t empty_cache_steps = 0;
  // transformers' causal-LM loss (docs/formulas.md#logits-and-loss): >= 4.49 pads the labels;
  // 4.46-4.48 ForCausalLMLoss shifts the fp32 logits with a contiguous copy; <= 4.45 does the same
  // inside the model forward after rebinding `logits = logits.float()` (the 16-bit logits go).
  enum class LossShift { kPadLabels, kShiftLogitsCopy, kUpcastInModel };
  LossShift loss_shift = LossShift::kPadLabels;
  // Loss kernel for decoders' cross-entropy (default eager). use_liger_kernel sets kLiger and
  // liger_kernels (Liger's RMSNorm, SwiGLU and RoPE replace the eager modules; CUDA only).
  LossKernel loss_kernel = LossKernel::kEager;
  bool liger_kernels = false;
  ModelCode model_code = ModelCode::kTransformers;
  ContrastiveConfig contrastive;
  VisionInputs vision;
  // Validation of the engine itself: simulate every decoder layer instead of extrapolating from
  // the reduced models (docs/formulas.md#extrapolation). Same answer, slower; tests compare both.
  bool simulate_every_layer = false;

  // Tokens per sequence in the trained forward: GRPO's prompt + completion, else seq_len.
  std::int64_t sequence_length() const {
    return method == Method::kGrpo ? grpo.max_prompt_length + grpo.max_completion_length : seq_len;
  }

  bool reentrant_checkpointing() const { return checkpoint_reentrant.value_or(device == Device::kCpu); }

  AttnImpl attn_impl() const {
    return attn ? *attn : (device == Device::kCuda ? AttnImpl::kSdpa : AttnImpl::kEager);
  }

  bool operator==(const TrainingConfig&) const = default;
};

// Parsers for the names users write. Errors quote the value and suggest the nearest name.
Result<Method> parse_method(const std::string& s);
Result<DType> parse_dtype(const std::string& s);            // float32, fp32, bfloat16, bf16, float16, fp16
Result<AttnImpl> parse_attn_impl(const std::string& s);
Result<OptimizerKind> parse_optimizer(const std::string& s); // HF optim names and their aliases
Result<Device> parse_device(const std::string& s);
Result<ShardingStrategy> parse_fsdp(const std::string& s);
Result<LossKernel> parse_loss_kernel(const std::string& s);  // eager, liger, chunked, cce
Result<ModelCode> parse_model_code(const std::string& s);    // transformers, torchtune
Result<PipelineSchedule> parse_pp_schedule(const std::string& s);  // 1f1b, interleaved_1f1b, gpipe, zero_bubble

std::string to_string(Method m);
std::string to_string(DType d);
std::string to_string(AttnImpl a);
std::string to_string(OptimizerKind o);  // canonical HF name
std::string to_string(Device d);
std::string to_string(ShardingStrategy s);
std::string to_string(LossKernel k);
std::string to_string(ModelCode m);
std::string to_string(PipelineSchedule s);
std::int64_t dtype_size(DType d);
// The k-bit preparation and the loss variant by the names flags and --show-config use:
// freeze_only | peft_upcast | trl_legacy; pad_labels | shift_contiguous | upcast_in_model.
std::string to_string(QuantConfig::KbitPrepare k);
Result<QuantConfig::KbitPrepare> parse_kbit_prepare(const std::string& s);
std::string to_string(TrainingConfig::LossShift l);
// The dtype the LoRA adapters are trained in: adapter_dtype when set, else bf16 for a 4-bit model
// that is only frozen (current TRL casts its trainable parameters), else fp32 (PEFT's
// autocast_adapter_dtype) (docs/formulas.md#qlora).
DType effective_adapter_dtype(const TrainingConfig& c);

// Range and consistency checks on a config (batch >= 1, lora r >= 1, 4-bit needs LoRA...).
Status validate(const TrainingConfig& c);
// The parallel layout alone (degrees, tp x pp x cp dividing the GPUs, ep dividing dp x cp, HSDP
// replicas, schedules): validate() calls it; plan suggestions and config loaders that pick a GPU
// count check their pick with it.
Status validate_parallel(const ParallelConfig& p);

}  // namespace memplan

// The engine: builds the step program for a (model, config), simulates it once symbolically
// (sim::run_step), extrapolates the reduced model to every layer, adds the optimizer step, and
// evaluates the peak for any (micro-batch, seq-len). docs/formulas.md derives each piece.
#include "memplan/engine.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "core/optimizer_model.hpp"
#include "core/parallel.hpp"
#include "core/pipeline.hpp"
#include "core/sharding.hpp"
#include "core/sim/caching_allocator.hpp"
#include "core/sim/program.hpp"
#include "memplan/text.hpp"

namespace memplan {

namespace {

using sim::Cat;
using sim::CatVec;
using sim::DT;
using sim::Poly;

// cuBLAS workspaces, allocated through PyTorch's caching allocator (so inside
// max_memory_allocated) on first use and kept: one per thread and stream, 32 MiB each on Hopper
// (torch's default CUBLAS_WORKSPACE_CONFIG :4096:8), the forward's and the autograd thread's.
// Measured: 32 MiB after the first matmul; GC steps on an H100 ran 66 MiB above the simulation.
constexpr std::int64_t kCublasWorkspaces = 64LL << 20;

constexpr int kSegOptimizer = sim::kNumSegments;
constexpr std::size_t kNumPhases = static_cast<std::size_t>(Phase::kGeneration) + 1;
// Programs per stage: b == 1 or not, x s below the sliding window or not (StageSim::candidates).
constexpr int kClasses = 4;

// Simulated layers (decoder layers and vision blocks, over every reduced-model run) from which
// the runs go to several threads (docs/plan.md#speed).
constexpr std::size_t kParallelLayers = 16;
constexpr int kSegGeneration = sim::kNumSegments + 1;

DT to_dt(DType d) {
  switch (d) {
    case DType::kFloat32: return DT::kF32;
    case DType::kBFloat16: return DT::kBF16;
    case DType::kFloat16: return DT::kF16;
  }
  return DT::kF32;
}

Phase phase_of(int seg) {
  if (seg == kSegOptimizer) return Phase::kOptimizerStep;
  if (seg == kSegGeneration) return Phase::kGeneration;
  if (seg >= sim::kSegRefPre && seg <= sim::kSegRefHead) return Phase::kReferenceForward;
  if (seg <= sim::kSegHead) return Phase::kForward;
  return Phase::kBackward;
}

CatVec add(CatVec a, const CatVec& b) {
  for (int i = 0; i < sim::kNumCats; ++i) a[static_cast<std::size_t>(i)] += b[static_cast<std::size_t>(i)];
  return a;
}

CatVec sub(CatVec a, const CatVec& b) {
  for (int i = 0; i < sim::kNumCats; ++i) a[static_cast<std::size_t>(i)] -= b[static_cast<std::size_t>(i)];
  return a;
}

CatVec scale(CatVec a, std::int64_t k) {
  for (auto& p : a) p = p * k;
  return a;
}

Poly total(const CatVec& v) {
  Poly t;
  for (const auto& p : v) t += p;
  return t;
}

struct Candidate {
  int segment = 0;
  Poly total;
  // A candidate's categories are computed only when a breakdown asks for them (categories()):
  // a plan needs the totals alone. They are those of `cats` where the candidate has its own
  // (the optimizer step, GRPO's generation), else base + c + m * (d - c) from the two reduced
  // timelines' events (categories in rc->cats and rd->cats); then the terms below.
  std::shared_ptr<const CatVec> cats;
  const sim::ProgramResult* rc = nullptr;
  const sim::ProgramResult* rd = nullptr;
  const sim::Event* c = nullptr;
  const sim::Event* d = nullptr;
  std::int64_t m = 0;
  // Multi-GPU: the sharding applied (the total already has it).
  struct Sharding {
    const ShardPlan* plan = nullptr;
    bool optimizer_step = false;
    int gathered_layers = 0;
    bool backward = false;  // from the loss's backward to the embedding's (DeepSpeed's ipg buffers)
  };
  std::optional<Sharding> sharding;
  // Context parallelism's ring-attention buffers at this event, in communication_buckets (the
  // total already has them). Points into the stage's StageSim, like grads.
  const Poly* ring = nullptr;
  // A later micro-batch's candidate (docs/formulas.md#gradient-accumulation): the same
  // categories with this gradient term.
  const Poly* grads = nullptr;
};

// The quant state of every Params4bit in decoder layers [first, first + n) (docs/formulas.md#qlora),
// as program.cpp stores it. A layer's Linears depend on the layer only through whether it is an
// MoE layer (layer_linears; tests/core/test_model.cpp), so each kind is listed once; a hybrid
// model's layers (docs/models.md#hybrid-layers) differ in their mixers and are listed one by one.
std::int64_t quant_state_bytes(const ModelSpec& m, int first, int n, bool double_quant) {
  const auto of_layer = [&](int layer) {
    std::int64_t b = 0;
    for (const auto& mod : layer_linears(m, layer)) {
      if (!mod.nn_linear) continue;
      const std::int64_t blocks = (mod.weight_params() + 63) / 64;
      b += double_quant ? blocks + ((blocks + 255) / 256) * 4 + 256 * 4 : blocks * 4;
    }
    return b;
  };
  std::array<std::optional<std::int64_t>, 2> of_kind;
  std::int64_t bytes = 0;
  for (int layer = first; layer < first + n; ++layer) {
    // Gemma 4: full, sliding and KV-shared layers differ; Gemma 3n: its MatFormer widths.
    if (m.hybrid.enabled() || m.model_type == "gemma4_text" || m.altup_inputs > 0) {
      bytes += of_layer(layer);
      continue;
    }
    std::optional<std::int64_t>& kind = of_kind[m.moe.is_moe_layer(layer) ? 1 : 0];
    if (!kind) kind = of_layer(layer);
    bytes += *kind;
  }
  return bytes;
}

// A candidate with categories of its own (not a simulated event's).
Candidate own_candidate(int segment, const CatVec& v) {
  Candidate k;
  k.segment = segment;
  k.total = total(v);
  k.cats = std::make_shared<const CatVec>(v);
  return k;
}

constexpr Cat kGradientCats[] = {Cat::kGradients};

// LoRA targets as PEFT resolves them: explicit names must match a Linear module of the layers.
Result<std::vector<std::string>> resolve_lora_targets(const ModelSpec& m, const LoraConfig& l) {
  std::vector<std::string> names;
  for (int layer = 0; layer < m.num_layers; ++layer) {
    for (const auto& mod : layer_linears(m, layer))
      if (mod.nn_linear && std::find(names.begin(), names.end(), mod.name) == names.end()) names.push_back(mod.name);
    if (!m.moe.enabled() && !m.hybrid.enabled()) break;  // hybrids: layers differ (docs/models.md#hybrid-layers)
  }
  // A vision tower's Linears are PEFT targets too; LoRA reaches them when the tower is trained
  // (docs/formulas.md#vision-language-models).
  for (const auto& mod : vision_block_linears(m.vision))
    if (m.vision.enabled() && std::find(names.begin(), names.end(), mod.name) == names.end()) names.push_back(mod.name);
  if (l.all_linear) {
    // PEFT "all-linear": every Linear except the output layer; MoE routers are Linear too.
    return names;
  }
  std::vector<std::string> targets = l.target_modules.empty() ? sim::default_lora_targets(m) : l.target_modules;
  if (targets.empty()) {  // PEFT raises "Please specify `target_modules` in `peft_config`"
    std::string attn;
    std::vector<std::string> seen;
    for (int layer = 0; layer < (m.hybrid.enabled() ? m.num_layers : 1); ++layer)  // hybrids: every mixer's
      for (const auto& lin : layer_linears(m, layer))
        if (lin.role == LinearRole::kAttention && std::find(seen.begin(), seen.end(), lin.name) == seen.end()) {
          seen.push_back(lin.name);
          attn += (attn.empty() ? "" : ", ") + lin.name;
        }
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("PEFT has no default LoRA target modules for model_type '{}'",
                                  m.config_model_type.empty() ? m.model_type : m.config_model_type),
                      "set target_modules (its attention projections: " + attn + ") or all-linear");
  }
  // Granite 4.0 (docs/models.md#granite-4-0): transformers' shared_mlp.input_linear / output_linear
  // and router.layer are memplan's gate_up_proj / down_proj and gate.
  if (m.model_type == "granitemoehybrid")
    for (auto& t : targets)
      t = t == "input_linear" ? "gate_up_proj" : t == "output_linear" ? "down_proj" : t == "layer" ? "gate" : t;
  for (const auto& t : targets) {
    // PEFT matches a target as a suffix of the module path: "dense" names three BERT modules.
    const bool suffix = m.is_encoder() && std::any_of(names.begin(), names.end(), [&](const std::string& n) {
      return n.size() > t.size() && n.compare(n.size() - t.size(), t.size(), t) == 0 && n[n.size() - t.size() - 1] == '.';
    });
    if (!suffix && std::find(names.begin(), names.end(), t) == names.end()) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("LoRA target module '{}' matches no Linear module of this {} model", t, m.model_type),
                        did_you_mean(t, names).empty() ? "its modules are: " + list : did_you_mean(t, names));
    }
  }
  return targets;
}

bool deepspeed(const TrainingConfig& c) {
  const auto s = c.parallel.sharding;
  return s == ShardingStrategy::kZero1 || s == ShardingStrategy::kZero2 || s == ShardingStrategy::kZero3;
}

// docs/formulas.md#fsdp-reshard-only-hook: FSDP1 with PEFT's wrap policy makes every decoder
// layer a unit of frozen parameters; under reentrant checkpointing the hook that reshards such a
// unit holds the layer's checkpointed input and its gradient until the end of backward.
// FSDP2 (fully_shard) has no FlatParameter and no reshard-only hook: its post-backward runs from
// RegisterPostBackwardFunction on the unit's inputs, which saves nothing.
bool fsdp(const TrainingConfig& c) { return fsdp_family(c.parallel.sharding); }

bool fsdp_frozen_layer_units(const TrainingConfig& c) {
  return fsdp(c) && c.parallel.fsdp_version == 1 && c.lora.enabled && c.gradient_checkpointing && c.reentrant_checkpointing();
}

// Which reference model a step holds (docs/formulas.md#dpo): TRL loads a frozen copy, or under
// PEFT disables the adapters of the policy; none with precomputed log-probs, reference-free
// losses, or GRPO with beta = 0 (its default).
sim::RefKind reference_kind(const TrainingConfig& c) {
  if (c.method == Method::kSft) return sim::RefKind::kNone;
  if (c.method == Method::kDpo && (c.dpo.precompute_ref_log_probs || c.dpo.ref_model == RefModel::kNone))
    return sim::RefKind::kNone;
  if (c.method == Method::kGrpo && (c.grpo.beta == 0.0 || c.dpo.ref_model == RefModel::kNone))
    return sim::RefKind::kNone;
  if (c.dpo.ref_model == RefModel::kCopy || !c.lora.enabled) return sim::RefKind::kCopy;
  return sim::RefKind::kAdaptersDisabled;
}

// Pipeline, context and expert parallelism: what memplan models (docs/formulas.md#parallelism-layout).
// The images of a vision-language model's step (docs/formulas.md#vision-language-models): how many
// per sequence and the grid they are resized to. Text-only models take none.
struct ImagePlan {
  std::int64_t images = 0;
  ImageGrid grid;
};

// The tokens one image takes in the sequence: its features' placeholders, and for Pixtral an
// [IMG_BREAK] after every row of merged patches but the last, which is [IMG_END]
// (Mistral3Processor / PixtralProcessor; docs/formulas.md#pixtral).
// Llama 4: <|image_start|>, <|image|> and <|image_end|>, and with more than one tile a
// <|tile_x_separator|> between the tiles of a row and a <|tile_y_separator|> after each row, one
// per tile (Llama4Processor._prompt_split_image; docs/formulas.md#llama-4-vision).
std::int64_t sequence_tokens(const VisionSpec& v, const ImageGrid& g) {
  if (v.kind == VisionKind::kLlama4) {
    const std::int64_t side = v.image_size / v.patch_size;
    const std::int64_t tiles = (g.rows / side) * (g.cols / side);
    return g.tokens + 3 + (tiles > 1 ? tiles : 0);
  }
  if (v.kind != VisionKind::kPixtral) return g.tokens;
  return g.tokens + g.rows / v.spatial_merge_size;
}

ImagePlan image_plan(const ModelSpec& m, const TrainingConfig& c) {
  ImagePlan p;
  if (!m.vision.enabled()) return p;
  // Qwen-VL and Llama 3.2 Vision models are trained on images; Gemma 3 is mostly fine-tuned on
  // text (its tower loaded, unused).
  // Llama 4 is mostly fine-tuned on text (docs/models.md#llama-4): images only when asked.
  const bool text_default = m.vision.kind == VisionKind::kSiglip || m.vision.kind == VisionKind::kLlama4 ||
                            m.vision.kind == VisionKind::kGemma4 || m.vision.kind == VisionKind::kPixtral ||
                            m.vision.kind == VisionKind::kGemma3n;
  p.images = c.vision.images >= 0 ? c.vision.images : text_default ? 0 : 1;
  const std::int64_t side = default_image_side(m.vision);
  p.grid = image_grid(m.vision, c.vision.image_height > 0 ? c.vision.image_height : side,
                      c.vision.image_width > 0 ? c.vision.image_width : side);
  return p;
}

// Whether the layout splits one step over ranks (tensor, pipeline or context parallelism).
// Sequence parallelism alone is not one: it splits activations over the tensor-parallel ranks and
// Megatron turns it off at tensor_model_parallel_size 1 (megatron/training/arguments.py).
bool splits_model(const ParallelConfig& p) {
  return p.pipeline_parallel > 1 || p.tensor_parallel > 1 || p.context_parallel > 1;
}

Status check_vision(const ModelSpec& m, const TrainingConfig& c) {
  // Images asked of a text-only model are an error; the other image options (a resolution, the
  // freeze switches of a LLaMA-Factory file) have nothing to act on and get a warning instead.
  if (!m.vision.enabled() && c.vision.images > 0)
    return make_error(ErrorCode::kConflict,
                      fmt::format("images need a vision-language model; {} has no vision tower",
                                  m.name.empty() ? m.model_type : m.name),
                      "use a Qwen2-VL, Qwen2.5-VL or Gemma 3 (4B and up) model, or --images 0");
  if (!m.vision.enabled()) return Ok{};
  if (m.vision.kind == VisionKind::kLlama4 && c.vision.images > 0) {
    // Llama4VisionPixelShuffleMLP: fc1 reads the shuffled width (hidden x merge^2) as
    // intermediate_size, and fc2 reads fc1's projector_input_dim as projector_output_dim; a config
    // where they differ loads but cannot run an image.
    const VisionSpec& v = m.vision;
    const std::int64_t shuffled = v.hidden_size * v.spatial_merge_size * v.spatial_merge_size;
    if (v.intermediate_size != shuffled || v.projector_input_dim != v.projector_output_dim)
      return make_error(ErrorCode::kUnsupported,
                        fmt::format("Llama 4's vision adapter cannot run an image with this vision_config: fc1 takes "
                                    "intermediate_size ({}) for the pixel-shuffled width ({}), and fc2 "
                                    "projector_output_dim ({}) for fc1's projector_input_dim ({})",
                                    v.intermediate_size, shuffled, v.projector_output_dim, v.projector_input_dim),
                        "estimate text-only fine-tuning (--images 0)");
  }
  if (m.vision.kind == VisionKind::kPixtral && c.vision.images > 0 && m.vision.projector_input_dim != m.vision.hidden_size)
    return make_error(ErrorCode::kUnsupported,
                      "Mistral 3 with a list of vision_feature_layer entries (the chosen hidden states concatenated "
                      "before the projector) is not modelled with images",
                      "estimate text-only fine-tuning (--images 0), or a config whose vision_feature_layer is one "
                      "index (-1, as every published Mistral 3)");
  if (m.vision.kind == VisionKind::kGemma4 && c.vision.images > 0)
    return make_error(ErrorCode::kUnsupported,
                      "Gemma 4's vision tower (2D position table, q/k/v-normed ViT, spatial pooling) is counted but "
                      "not simulated: batches with images are not modelled",
                      "estimate text-only fine-tuning (--images 0), the default for Gemma 4");
  if (m.vision.kind == VisionKind::kGemma3n && c.vision.images > 0)
    return make_error(ErrorCode::kUnsupported,
                      "Gemma 3n's vision tower (timm's MobileNetV5-300M with its multi-scale fusion adapter) is counted "
                      "but not simulated: batches with images are not modelled",
                      "estimate text-only fine-tuning (--images 0), the default for Gemma 3n");
  if (m.vision.kind == VisionKind::kMllama) {
    // docs/formulas.md#llama-32-vision: what is and is not modelled.
    if (c.vision.train_vision_tower)
      return make_error(ErrorCode::kUnsupported,
                        "training the Llama 3.2 Vision tower is not modelled (transformers 4.55-4.57 do not "
                        "checkpoint its 40 layers: about 11 GB of activations per image)",
                        "freeze the vision tower (LLaMA-Factory's default); the projector may be trained");
    if (splits_model(c.parallel))
      return make_error(ErrorCode::kUnsupported,
                        "Llama 3.2 Vision with tensor, pipeline, context or sequence parallelism is not modelled",
                        "estimate a data-parallel (DDP, ZeRO, FSDP) layout");
    if (c.attn_impl() == AttnImpl::kFlashAttention2)
      return make_error(ErrorCode::kUnsupported,
                        "Llama 3.2 Vision does not run with flash_attention_2: its vision and cross-attention layers "
                        "take a 4D mask, and transformers 4.56-4.57 give its attention classes no is_causal",
                        "use --attn-implementation sdpa (the transformers default on CUDA) or eager");
  }
  const ImagePlan p = image_plan(m, c);
  if (p.images == 0) return Ok{};
  if (splits_model(c.parallel))
    return make_error(ErrorCode::kUnsupported,
                      "images with tensor, pipeline, context or sequence parallelism are not modelled",
                      "estimate a data-parallel (DDP, ZeRO, FSDP) layout, or --images 0 for text-only batches");
  const std::int64_t tokens = checked_mul(p.images, sequence_tokens(m.vision, p.grid));
  // GRPO's images are in the prompt.
  const std::int64_t seq = c.method == Method::kGrpo ? c.grpo.max_prompt_length : c.seq_len;
  if (seq < tokens)
    return make_error(ErrorCode::kConflict,
                      fmt::format("a {} of {} tokens cannot hold {} image(s) of {}x{}: {} image tokens",
                                  c.method == Method::kGrpo ? "prompt" : "sequence", seq,
                                  p.images, p.grid.width, p.grid.height, tokens),
                      fmt::format("raise {}, or lower --images or --image-size (image tokens are part of the {})",
                                  c.method == Method::kGrpo ? "--max-prompt-length" : "--seq-len",
                                  c.method == Method::kGrpo ? "prompt" : "sequence"));
  return Ok{};
}

Status check_parallel_supported(const ModelSpec& m, const TrainingConfig& c) {
  const ParallelConfig& p = c.parallel;
  // docs/models.md#hybrid-layers: how Megatron splits Gated DeltaNet / Mamba-2 / short-conv mixers
  // over ranks is not simulated.
  if (m.hybrid.enabled() && splits_model(p))
    return make_error(ErrorCode::kUnsupported,
                      fmt::format("{} ({}) with tensor, pipeline, context or sequence parallelism is not modelled: "
                                  "its linear-attention, Mamba-2 or short-convolution layers are simulated on one rank",
                                  m.name.empty() ? m.model_type : m.name, m.model_type),
                      "estimate a data-parallel (DDP, ZeRO, FSDP) layout");
  // Gemma 4's full layers have their own K/V heads (num_global_key_value_heads), which the
  // tensor-parallel split of heads (sharding.cpp) does not divide.
  if (m.model_type == "gemma4_text" && (p.tensor_parallel > 1 || p.context_parallel > 1))
    return make_error(ErrorCode::kUnsupported,
                      "Gemma 4 with tensor or context parallelism is not modelled: its full-attention layers' own "
                      "key/value heads (num_global_key_value_heads) are not split over ranks",
                      "estimate a data-parallel (DDP, ZeRO, FSDP) layout");
  if (m.altup_inputs > 0 && (p.tensor_parallel > 1 || p.context_parallel > 1 || p.pipeline_parallel > 1))
    return make_error(ErrorCode::kUnsupported,
                      "Gemma 3n with tensor, context or pipeline parallelism is not modelled: its AltUp stack of "
                      "residual streams is simulated on one rank",
                      "estimate a data-parallel (DDP, ZeRO, FSDP) layout");
  if (p.expert_parallel > 1 || p.moe_capacity_factor > 0 || p.expert_tensor_parallel > 0) {
    const char* what = p.expert_parallel > 1           ? "expert-parallel"
                       : p.expert_tensor_parallel > 0 ? "expert-tensor-parallel"
                                                      : "moe-capacity-factor";
    if (!m.moe.enabled())
      return make_error(ErrorCode::kConflict,
                        fmt::format("{} needs a mixture-of-experts model; {} has no routed experts", what,
                                    m.name.empty() ? "this model" : m.name),
                        "drop --expert-parallel / --expert-tensor-parallel / --moe-capacity-factor");
    if (p.expert_tensor_parallel > 0 && m.moe.expert_intermediate_size % p.expert_tensor_parallel != 0)
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("expert-tensor-parallel = {} must divide the experts' intermediate size ({})",
                                    p.expert_tensor_parallel, m.moe.expert_intermediate_size));
    if (m.moe.num_experts % p.expert_parallel != 0)
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("expert-parallel = {} must divide the number of routed experts ({})",
                                    p.expert_parallel, m.moe.num_experts));
  }
  if (p.sequence_parallel && p.tensor_parallel > 1) {
    // (Encoders with tensor parallelism are refused before this: check_supported.)
    if (m.hidden_size % p.tensor_parallel != 0)
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("sequence parallelism splits hidden states over tensor-parallel ranks: "
                                    "hidden_size {} is not a multiple of tensor-parallel {}",
                                    m.hidden_size, p.tensor_parallel));
  }
  const bool pp = p.pipeline_parallel > 1, cp = p.context_parallel > 1;
  if (!pp && !cp) return Ok{};
  const char* what = pp ? "pipeline parallelism" : "context parallelism";
  if (m.is_encoder() || c.method != Method::kSft)
    return make_error(ErrorCode::kUnsupported,
                      fmt::format("{} is modelled for decoder SFT/pre-training only (got {} of {})", what,
                                  to_string(c.method), m.model_type),
                      "TRL's DPO/GRPO trainers and encoders do not run pipeline or context parallel stages");
  if (pp && (p.sharding == ShardingStrategy::kZero2 || p.sharding == ShardingStrategy::kZero3))
    return make_error(ErrorCode::kUnsupported,
                      "DeepSpeed's pipeline engine supports ZeRO stage 0 or 1 only",
                      "use --zero-stage 1 (Megatron's distributed optimizer shards the same way), or FSDP2");
  if (pp && fsdp(c) && p.fsdp_version != 2)
    return make_error(ErrorCode::kUnsupported, "pipeline parallelism with FSDP1 is not a supported combination",
                      "torchtitan composes pipeline stages with FSDP2: add --fsdp-version 2");
  if (cp && c.attn_impl() == AttnImpl::kEager)
    return make_error(ErrorCode::kUnsupported,
                      "context parallelism needs a fused attention kernel (ring attention over SDPA/flash/TE)",
                      "use --attn-implementation sdpa or flash_attention_2");
  if (cp && c.device == Device::kCpu) return make_error(ErrorCode::kUnsupported, "context parallelism needs CUDA devices");
  return Ok{};
}

Status check_supported(const ModelSpec& m, const TrainingConfig& c) {
  // Every-N and per-op checkpointing and a loss without the fp32 upcast are modelled for decoders'
  // layers and eager loss (docs/formulas.md#every-n-checkpointing, #loss-dtype). A vision-language
  // model fine-tuned on text (no images in the batch) runs its language model's layers only.
  const bool images = m.vision.enabled() && image_plan(m, c).images > 0;
  if (c.checkpoint_every > 1 && (m.is_encoder() || images))
    return make_error(ErrorCode::kUnsupported,
                      "checkpoint-every is modelled for decoder language models only (torchtitan's layer-selective "
                      "checkpointing), and for vision-language models on text-only batches",
                      "drop --checkpoint-every (every layer is then checkpointed), or train on text (--images 0)");
  if (c.checkpoint_policy == TrainingConfig::CheckpointPolicy::kOp && (m.is_encoder() || images))
    return make_error(ErrorCode::kUnsupported,
                      "checkpoint-policy op is modelled for decoder language models only (torchtitan's per-op "
                      "selective checkpointing), and for vision-language models on text-only batches",
                      "drop --checkpoint-policy (full checkpointing keeps each layer's input only), or train on text "
                      "(--images 0)");
  if (!c.loss_upcast && (c.loss_kernel != LossKernel::kEager || m.is_encoder() || c.method != Method::kSft))
    return make_error(ErrorCode::kUnsupported,
                      "a loss without the fp32 upcast is modelled for decoders' eager SFT cross-entropy only",
                      "drop --loss-dtype (the logits are then upcast to fp32)");
  if (c.method == Method::kGrpo && c.grpo.max_prompt_length < 1)
    return make_error(ErrorCode::kInvalidArgument, "GRPO needs --max-prompt-length >= 1");
  if (c.attn_impl() == AttnImpl::kFlashAttention2 && c.device == Device::kCpu)
    return make_error(ErrorCode::kUnsupported, "flash_attention_2 needs a CUDA device",
                      "use --attn-implementation eager or sdpa with --device cpu");
  // ModernBERT's flash path casts an fp32 qkv to bf16 itself (docs/formulas.md#modernbert).
  if (c.attn_impl() == AttnImpl::kFlashAttention2 && c.torch_dtype == DType::kFloat32 && !c.autocast &&
      !m.is_modernbert())
    return make_error(ErrorCode::kUnsupported, "flash_attention_2 runs in fp16/bf16 only",
                      "load the model with --torch-dtype bfloat16 or train with --bf16");
  if ((c.optim.kind == OptimizerKind::kAdamWTorchao8bit || c.optim.kind == OptimizerKind::kAdamWTorchao4bit) &&
      c.device == Device::kCpu)
    return make_error(ErrorCode::kUnsupported,
                      fmt::format("{} (torchao) needs PyTorch >= 2.3; --device cpu models PyTorch 1.13", to_string(c.optim.kind)),
                      "use --device cuda, or --optim adamw_torch on the CPU");
  // gpt-oss (docs/models.md#gpt_oss): GptOssPreTrainedModel has _supports_sdpa = False. Its
  // flash path is the kernels-community/vllm-flash-attn3 hub kernel (sinks inside the kernel),
  // which memplan models as flash_attention_2 (no s x s tensor; q, k, v, output and logsumexp saved).
  if (m.attention_sinks && c.attn && *c.attn == AttnImpl::kSdpa)
    return make_error(ErrorCode::kUnsupported,
                      "gpt-oss has no SDPA attention in transformers (GptOssForCausalLM: _supports_sdpa = False); its "
                      "attention sinks run in the eager attention or in the vllm-flash-attn3 hub kernel",
                      "use --attn-implementation eager, or flash_attention_2 for the hub kernel");
  if (m.model_type == "gpt_oss" && (c.parallel.expert_parallel > 1 || splits_model(c.parallel)))
    return make_error(ErrorCode::kUnsupported,
                      "gpt-oss's expert loop (GptOssExperts) under tensor, sequence, context or expert parallelism is "
                      "not modelled",
                      "estimate it with data parallelism, FSDP or ZeRO");
  if (m.is_encoder()) {
    if (m.eager_attention_only() && c.attn && *c.attn != AttnImpl::kEager)
      return make_error(ErrorCode::kUnsupported,
                        m.is_deberta()
                            ? fmt::format("DeBERTa-v2/v3 has only the eager attention in transformers (asked for {}): "
                                          "its disentangled attention adds position terms no SDPA or flash kernel "
                                          "computes",
                                          to_string(*c.attn))
                        : m.is_mpnet()
                            ? fmt::format("MPNet has only the eager attention in transformers (asked for {}): its "
                                          "relative-position bias is added to the attention scores",
                                          to_string(*c.attn))
                            : fmt::format("NomicBERT's remote code has only its eager attention (asked for {}); "
                                          "transformers refuses another implementation for it",
                                          to_string(*c.attn)),
                        "drop --attn-implementation (or attn_implementation in the config); memplan then models eager");
    // MPNetPreTrainedModel does not set supports_gradient_checkpointing: transformers'
    // gradient_checkpointing_enable() raises for it (docs/models.md#mpnet).
    if (m.is_mpnet() && c.gradient_checkpointing)
      return make_error(ErrorCode::kUnsupported,
                        "MPNet does not support gradient checkpointing: transformers raises \"MPNetModel does not "
                        "support gradient checkpointing.\"",
                        "drop --gradient-checkpointing (gradient_checkpointing in the config)");
    if (c.method != Method::kSft)
      return make_error(ErrorCode::kUnsupported,
                        fmt::format("{} is a decoder method; {} is an encoder", to_string(c.method), m.model_type),
                        "encoders train with --method sft and a head (--head pooling|mlm|classification)");
    if (c.quant.load_in_4bit || c.quant.load_in_8bit || c.parallel.tensor_parallel > 1 || !c.lora.modules_to_save.empty())
      return make_error(ErrorCode::kUnsupported,
                        "4/8-bit weights, tensor parallelism and modules_to_save are not modelled for encoders");
    if (c.contrastive.enabled() && m.head != EncoderHead::kPooling)
      return make_error(ErrorCode::kConflict, "texts-per-example needs the pooling head (sentence embeddings)",
                        "use --head pooling");
  } else if (m.decoder_embedding) {
    // sentence-transformers on a decoder (docs/formulas.md#decoder-embeddings).
    if (c.method != Method::kSft)
      return make_error(ErrorCode::kUnsupported,
                        fmt::format("{} trains a causal LM head; {} is loaded as an embedding model (no LM head)",
                                    to_string(c.method), m.name.empty() ? m.model_type : m.name),
                        "embedding models train with --method sft (sentence-transformers' losses)");
    if (c.contrastive.cached && m.embedding_library == EmbeddingLibrary::kLlm2Vec)
      return make_error(ErrorCode::kUnsupported,
                        "cached MNRL (GradCache) is sentence-transformers' loss; LLM2Vec's trainer has none",
                        "drop --cached-mnrl (LLM2Vec trains with its HardNegativeNLLLoss)");
    if (c.parallel.pipeline_parallel > 1 || c.parallel.tensor_parallel > 1 || c.parallel.context_parallel > 1 ||
        c.parallel.expert_parallel > 1)
      return make_error(ErrorCode::kUnsupported,
                        "pipeline, tensor, context and expert parallelism are not modelled for embedding models "
                        "(sentence-transformers trains with data parallelism, DeepSpeed or FSDP)");
    if (m.vision.enabled())
      return make_error(ErrorCode::kUnsupported, "a vision-language model as an embedding model is not modelled");
  } else if (c.contrastive.enabled()) {
    return make_error(ErrorCode::kUnsupported,
                      fmt::format("texts-per-example (contrastive training) needs an embedding model; {} is a decoder "
                                  "with its LM head",
                                  m.model_type.empty() ? "the model" : m.model_type),
                      "use an encoder such as bge-base-en-v1.5, a decoder embedding model such as "
                      "Qwen/Qwen3-Embedding-0.6B, or --head pooling to train this decoder as one");
  }
  if (auto s = check_parallel_supported(m, c); !s) return s;
  if (auto s = check_vision(m, c); !s) return s;
  for (const auto& s : c.lora.modules_to_save)
    if (s != "embed_tokens" && s != "lm_head")
      return make_error(ErrorCode::kUnsupported,
                        fmt::format("modules_to_save '{}' is not modelled", s),
                        "memplan models embed_tokens and lm_head as modules_to_save");
  (void)m;
  return Ok{};
}

}  // namespace

// One simulated pipeline stage (the whole model without pipeline parallelism).
struct StageSim {
  // Every event that can be the peak, offsets applied: [accumulated][class]. accumulated 0:
  // the first micro-batch of a step; 1: a later one, with the earlier micro-batches' gradients.
  // class (program_class()): 0 b == 1, 1 b >= 2; 2 and 3 the same at s >= the sliding window
  // when SDPA materializes the sliding layers' mask there.
  std::array<std::array<std::vector<Candidate>, kClasses>, 2> candidates;
  // One micro-batch's activations as its backward begins, per class (pipeline in-flight).
  std::array<CatVec, kClasses> retained{};
  OptimizerFootprint opt;
  std::vector<OptParam> opt_params;
  ShardPlan shard;
  // What every event adds (the optimizer's persistent state, cuBLAS workspaces) and what only
  // the optimizer step adds (every gradient, the step's temporaries).
  CatVec base{}, opt_extra{};
  // Every gradient as a later micro-batch holds it (sharded as the config shards it).
  Poly later_grads;
  // Context parallelism's ring-attention buffers in forward and in backward (else zero).
  std::array<Poly, 2> ring{};
  std::int64_t trainable = 0;
  bool extrapolated = false;  // from the reduced models (else every layer was simulated)
  int simulated_layers = 0;   // decoder layers in the reduced models' runs
};

struct RankSim {
  PipelineRank rank;
  std::size_t sim = 0;  // index into Impl::sims
};

// The simulated step programs of an estimator and of those derived from it (docs/plan.md#speed),
// by their complete spec: equal specs run the same program. Shared between threads.
struct Estimator::Programs {
  // The program's result if it has been simulated, else null.
  std::shared_ptr<const sim::ProgramResult> find(const sim::ProgramSpec& spec) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [s, r] : done_)
      if (s == spec) return r;
    return nullptr;
  }
  // The program's result, simulated now if it has not been. Throws SizeOverflow on absurd sizes.
  std::shared_ptr<const sim::ProgramResult> run(const sim::ProgramSpec& spec) {
    if (auto r = find(spec)) return r;
    auto r = std::make_shared<const sim::ProgramResult>(sim::run_step(spec));
    if (!r->leaked.empty()) throw std::logic_error("step simulation left tensors alive");
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [s, other] : done_)
      if (s == spec) return other;  // simulated meanwhile by another thread: the same result
    done_.emplace_back(spec, r);
    return r;
  }
  // extrapolate()'s candidates for a pair of reduced-model runs and the terms every event adds,
  // shared by the estimators derived from one another whose step is the same and that differ
  // only in what sharding does with it (a nothing-fits plan tries ZeRO-3 over 2 to 64 GPUs:
  // seven estimators, one extrapolation; docs/plan.md#speed). With the candidates, each one's
  // sharded categories before sharding, filled by the first multi-GPU estimator that needs them.
  struct Extrapolated {
    std::vector<Candidate> cands;
    // Built once (pruned): consecutive candidates whose sharded categories come from the same
    // inputs share a part (part_of[i]); within a run of one part and one segment every estimator
    // adds the same to each candidate (the sharding's change, ring-attention buffers, a later
    // micro-batch's gradients, a pipeline's in-flight activations), so only the run's candidates
    // no other of the run dominates can be a peak: `survivors`, in index order.
    std::once_flag pruned;
    std::vector<std::uint32_t> part_of;
    std::vector<std::uint32_t> survivors;
    // Each part's categories before sharding, by part (multi-GPU estimators; built once).
    std::once_flag parts_built;
    std::vector<ShardedCats> parts;
  };
  std::shared_ptr<Extrapolated> extrapolated(const sim::ProgramResult* r3, const sim::ProgramResult* r4,
                                             std::int64_t m, const std::function<std::vector<Candidate>()>& make) {
    const auto same = [&](const ExtrapolationKey& k) { return k.r3 == r3 && k.r4 == r4 && k.m == m; };
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [k, e] : extrapolated_)
        if (same(k)) return e;
    }
    auto e = std::make_shared<Extrapolated>();
    e->cands = make();  // may throw TimelineMismatch: nothing is stored then
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [k, other] : extrapolated_)
      if (same(k)) return other;
    extrapolated_.push_back({ExtrapolationKey{r3, r4, m}, e});
    return e;
  }
  // The model's parameter counts, counted once: every estimator sharing these programs has the
  // same model (Estimator::derive changes only the config). A nothing-fits plan builds 15.
  const ParameterCounts& counts(const ModelSpec& model) {
    std::call_once(counted_, [&] { counts_ = count_parameters(model); });
    return counts_;
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<sim::ProgramSpec, std::shared_ptr<const sim::ProgramResult>>> done_;
  struct ExtrapolationKey {
    const sim::ProgramResult* r3 = nullptr;
    const sim::ProgramResult* r4 = nullptr;
    std::int64_t m = 0;
  };
  std::vector<std::pair<ExtrapolationKey, std::shared_ptr<Extrapolated>>> extrapolated_;
  std::once_flag counted_;
  ParameterCounts counts_;
};

struct ProgramBuild;

struct Estimator::Impl {
  ModelSpec model;
  TrainingConfig config;
  std::int64_t window_from = 0;  // s from which the sliding-mask programs apply (0: none)
  std::int64_t scan_chunk = 1;   // what the chunked scans pad the local sequence to (sim::scan_chunk)
  // Classes 0-1 (s < window_from) and 2-3 (s >= window_from) are built a half at a time: the
  // half of the config's own sequence length at create(), the other when first evaluated
  // (docs/plan.md#speed). `build` keeps what that needs.
  std::shared_ptr<ProgramBuild> build;
  std::array<std::once_flag, 2> half_built;
  void build_half(int half);
  void ensure(std::size_t cls) {
    const int half = static_cast<int>(cls / 2);
    std::call_once(half_built[static_cast<std::size_t>(half)], [&] { build_half(half); });
  }
  std::vector<StageSim> sims;
  std::vector<RankSim> ranks;  // every pipeline rank (one without pipeline parallelism)
  ParamSummary params;
  std::vector<std::string> assumptions;
  std::vector<std::string> warnings;
  std::shared_ptr<Programs> programs;
  // The caching allocator replayed over the step of the rank at (b, s) and the run's lengths
  // (docs/formulas.md#the-caching-allocator); nullopt where no trace exists (encoders) or sizes
  // overflow.
  std::optional<sim::ReplayResult> replay(const RankSim& rank, std::int64_t b, std::int64_t s,
                                         std::int64_t capacity = std::numeric_limits<std::int64_t>::max());
};

namespace {

// A run's events grouped by (segment, instance), in that order, each group in timeline order.
struct Timeline {
  struct Group {
    int segment = 0, instance = 0;
    std::size_t begin = 0, end = 0;  // into events
  };
  std::vector<const sim::Event*> events;
  std::vector<Group> groups;

  std::span<const sim::Event* const> of(const Group& g) const { return {events.data() + g.begin, g.end - g.begin}; }
  // The group's events (none when the run has no such group).
  std::span<const sim::Event* const> get(int segment, int instance) const {
    const auto it = std::lower_bound(groups.begin(), groups.end(), std::pair{segment, instance},
                                     [](const Group& g, const std::pair<int, int>& k) {
                                       return std::pair{g.segment, g.instance} < k;
                                     });
    if (it == groups.end() || it->segment != segment || it->instance != instance) return {};
    return of(*it);
  }
};

Timeline by_segment(const sim::ProgramResult& r) {
  // A timeline comes in stretches of one (segment, instance): a layer's forward, its
  // recomputation, its backward. The stretches are sorted (stably: a group keeps timeline order)
  // and their events copied out, instead of sorting every event (docs/plan.md#speed).
  struct Stretch {
    int segment, instance;
    std::size_t begin, end;
  };
  std::vector<Stretch> stretches;
  const std::vector<sim::Event>& ev = r.events;
  for (std::size_t i = 0; i < ev.size(); ++i) {
    if (stretches.empty() || stretches.back().segment != ev[i].segment || stretches.back().instance != ev[i].instance)
      stretches.push_back({ev[i].segment, ev[i].instance, i, i});
    stretches.back().end = i + 1;
  }
  std::stable_sort(stretches.begin(), stretches.end(), [](const Stretch& a, const Stretch& b) {
    return std::pair{a.segment, a.instance} < std::pair{b.segment, b.instance};
  });
  Timeline t;
  t.events.reserve(ev.size());
  for (const Stretch& x : stretches) {
    if (t.groups.empty() || t.groups.back().segment != x.segment || t.groups.back().instance != x.instance)
      t.groups.push_back({x.segment, x.instance, t.events.size(), t.events.size()});
    for (std::size_t i = x.begin; i < x.end; ++i) t.events.push_back(&ev[i]);
    t.groups.back().end = t.events.size();
  }
  return t;
}

CatVec lerp(const CatVec& c, const CatVec& d, std::int64_t m) { return add(c, scale(sub(d, c), m)); }

// The two reduced models' timelines of a segment have different event counts: one more middle
// layer changed the order of frees inside a layer, so events cannot be paired. The caller then
// simulates every layer (exact, slower) instead of extrapolating.
struct TimelineMismatch : std::logic_error {
  using std::logic_error::logic_error;
};

// Turns the reduced model's timeline into the full model's (docs/formulas.md#extrapolation).
// r3 simulates layers {first, middle, last}; r4 {first, middle, middle, last}. Every event of
// r4 outside the added layer pairs with the same event of r3, and their difference is what one
// more middle layer keeps alive at that moment (its saved tensors, its gradients, cached casts:
// whatever it is in that phase); m extra layers add m times that difference. For the middle
// layers themselves the extremes are taken: the last middle layer in forward; in backward the
// first processed (most activations below it) and the last processed (most gradients above).
// What every estimator adds (its optimizer's persistent state, the optimizer step's gradients and
// temporaries) is not in them: the estimators sharing the runs share the extrapolation whatever
// their optimizer (build_half adds its stage's terms as it copies the survivors).
std::vector<Candidate> extrapolate(const sim::ProgramResult& r3, const sim::ProgramResult* r4, std::int64_t m) {
  // Totals extrapolate linearly on their own; categories are computed only for a breakdown
  // (categories()).
  std::vector<Candidate> out;
  out.reserve(r3.events.size() + (r4 != nullptr ? r4->events.size() : 0) + 1);
  auto push = [&](int seg, const sim::Event& c, const sim::Event* d) {
    Candidate& k = out.emplace_back();
    k.segment = seg;
    k.total = c.total;
    if (d != nullptr && m != 0) k.total += (d->total - c.total) * m;
    k.rc = &r3;
    k.rd = d != nullptr ? r4 : nullptr;
    k.c = &c;
    k.d = d;
    k.m = m;
  };
  if (r4 == nullptr || m == 0) {
    for (const auto& e : r3.events) push(e.segment, e, nullptr);
    out.push_back(own_candidate(kSegOptimizer, r3.end_of_step));
    return out;
  }
  const Timeline t3 = by_segment(r3), t4 = by_segment(*r4);
  using Events = std::span<const sim::Event* const>;
  auto pair_up = [&](Events c, Events d, int seg) {
    if (c.size() != d.size())
      throw TimelineMismatch(fmt::format("reduced-model timelines do not align (segment {}: {} vs {} events)", seg,
                                         c.size(), d.size()));
    for (std::size_t i = 0; i < c.size(); ++i) push(seg, *c[i], d[i]);
  };
  for (const Timeline::Group& g : t3.groups) {
    const int seg = g.segment;
    const Events events = t3.of(g);
    if (seg == sim::kSegFwdMid || seg == sim::kSegRefMid) {
      pair_up(events, t4.get(seg, 1), seg);
    } else if (seg == sim::kSegBwdMid) {
      pair_up(events, t4.get(seg, 1), seg);
      pair_up(events, t4.get(seg, 0), seg);
    } else {
      pair_up(events, t4.get(seg, g.instance), seg);
    }
  }
  out.push_back(own_candidate(kSegOptimizer, lerp(r3.end_of_step, r4->end_of_step, m)));
  return out;
}

// Whether two candidates carry the same ring-attention buffers (none, or equal ones).
bool same_ring(const Candidate& a, const Candidate& b) {
  if (a.ring == nullptr || b.ring == nullptr) return a.ring == b.ring;
  return *a.ring == *b.ring;
}

// Category i of a candidate before sharding: its own categories' or base + c + m * (d - c);
// plus its ring buffers in communication_buckets.
// Inlined into its callers: called out of line (GCC 12 stopped inlining it once a third caller
// appeared) the whole 8B plan ran 7 % slower for the same instructions (docs/plan.md#speed).
[[gnu::always_inline]] inline Poly unsharded_at(const Candidate& k, std::size_t i, const CatVec& base) {
  Poly p;
  if (k.c == nullptr) {
    p = (*k.cats)[i];
  } else {
    const Cat cat = static_cast<Cat>(i);
    p = k.rc->cats.at(*k.c, cat);
    if (k.d != nullptr && k.m != 0) p += (k.rd->cats.at(*k.d, cat) - p) * k.m;
    p += base[i];
  }
  if (i == static_cast<std::size_t>(Cat::kBuckets) && k.ring != nullptr) p += *k.ring;
  return p;
}

// Every category of a candidate before sharding.
CatVec unsharded(const Candidate& k, const CatVec& base) {
  CatVec v;
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = unsharded_at(k, i, base);
  return v;
}

// Whether two candidates add the same terms to their events' categories (extrapolation, ring
// buffers) and come from events of the same kind.
bool same_terms(const Candidate& a, const Candidate& b) {
  return a.m == b.m && same_ring(a, b) && (a.c == nullptr) == (b.c == nullptr) &&
         (a.d == nullptr) == (b.d == nullptr);
}

// Whether two candidates' categories `cats` come from the same inputs (so anything computed from
// them alone is the same): most events change only activations.
bool same_inputs(const Candidate& a, const Candidate& b, std::span<const Cat> cats) {
  if (!same_terms(a, b)) return false;
  for (Cat c : cats) {
    const auto i = static_cast<std::size_t>(c);
    if (a.c == nullptr) {
      if (!((*a.cats)[i] == (*b.cats)[i])) return false;
      continue;
    }
    const auto same = [c](const sim::ProgramResult* ra, const sim::Event* ea, const sim::ProgramResult* rb,
                          const sim::Event* eb) {
      return ra == rb ? ra->cats.same(*ea, *eb, c) : ra->cats.at(*ea, c) == rb->cats.at(*eb, c);
    };
    if (!same(a.rc, a.c, b.rc, b.c)) return false;
    if (a.d != nullptr && !same(a.rd, a.d, b.rd, b.d)) return false;
  }
  return true;
}

// A candidate's categories, as its total counts them (`base`: its stage's, StageSim::base).
// Built only for the breakdown of the candidate that is the peak (docs/plan.md#speed).
CatVec categories(const Candidate& k, const CatVec& base) {
  CatVec v = unsharded(k, base);
  if (k.sharding)
    v = apply_sharding(*k.sharding->plan, v, k.sharding->optimizer_step, k.sharding->gathered_layers,
                       k.sharding->backward);
  if (k.grads) v[static_cast<std::size_t>(Cat::kGradients)] = *k.grads;
  return v;
}

// GRPO generation with model.generate (docs/formulas.md#grpo-generation): no gradients exist
// (zero_grad ran), the weights and optimizer state are resident, and transformers' DynamicCache
// holds keys and values of every layer for all B_gen = b x steps_per_generation sequences of
// P + C tokens, in the activation dtype (bf16 under autocast). Decoding adds one position's
// logits and their fp32 copy per sequence; growing a layer's cache with torch.cat briefly holds
// that layer twice.
Candidate generation_candidate(const ModelSpec& m, const TrainingConfig& c, const CatVec& persistent) {
  const std::int64_t act = c.autocast ? 2 : dtype_size(c.torch_dtype);
  const std::int64_t spg = std::max<std::int64_t>(1, c.grad_accum);  // steps_per_generation default
  const std::int64_t len = c.grpo.max_prompt_length + c.grpo.max_completion_length;
  const std::int64_t per_seq_layer = checked_mul(checked_mul(2LL * m.num_kv_heads, m.head_dim), checked_mul(len, act));
  CatVec v = persistent;
  v[static_cast<int>(Cat::kKvCache)] =
      Poly::mono(sim::kB, checked_mul(checked_mul(per_seq_layer, m.num_layers + 1), spg));
  v[static_cast<int>(Cat::kLogits)] += Poly::mono(sim::kB, checked_mul(m.vocab_size * (act + 4), spg));
  return own_candidate(kSegGeneration, v);
}

// Decoder layers whose full parameters ZeRO-3/FSDP hold at an event of `segment`
// (docs/formulas.md#fsdp-and-lora): the layer computing in forward (no forward prefetch, the
// accelerate/HF default); none at the loss; in backward the layer computing and the one
// BACKWARD_PRE prefetches (at the head only the prefetched last layer).
// Under FSDP with reentrant checkpointing nothing is prefetched in backward
// (`no_backward_prefetch`): see fsdp_no_backward_prefetch().
//
// FSDP2 (`fsdp2`, docs/formulas.md#fsdp2): the all-gather output of the layer computing in forward
// stays alive until the next layer's copy-out (implicit prefetch keeps a reference in
// all_gather_state), and at the loss the last layer's output is still referenced, so forward
// holds two layers' worth and the head one; backward as FSDP1 with prefetch.
int gathered_layers(int segment, bool no_backward_prefetch = false, bool fsdp2 = false) {
  if (segment == sim::kSegHead || segment == sim::kSegRefHead) return fsdp2 ? 1 : 0;
  if (segment == sim::kSegFwdPre || segment == sim::kSegRefPre || segment == sim::kSegBwdPre ||
      segment == kSegOptimizer || segment == kSegGeneration)
    return 0;
  if (segment == sim::kSegHeadBwd) return no_backward_prefetch ? 0 : 1;
  if (segment >= sim::kSegBwdFirst && segment <= sim::kSegBwdLast) return no_backward_prefetch ? 1 : 2;
  return fsdp2 ? 2 : 1;
}

// docs/formulas.md#fsdp-reshard-only-hook: torch 2.4 _get_handle_to_prefetch prefetches a unit
// only if its _needs_pre_backward_unshard is set, which _register_pre_backward_hooks does only
// when the unit's forward ran with grad. Under reentrant checkpointing the decoder layers' forward
// runs without grad, so BACKWARD_PRE never prefetches one: each is gathered when its recomputation
// starts.
bool fsdp_no_backward_prefetch(const TrainingConfig& c) {
  return fsdp(c) && c.parallel.fsdp_version == 1 && c.gradient_checkpointing && c.reentrant_checkpointing();
}

// The candidates no other candidate of the same phase dominates coefficient-wise (the rest can
// never be a phase's maximum for any (b, s)), by their totals or by `totals` where given; in
// order of decreasing coefficient sum.
std::vector<std::size_t> undominated(const std::vector<Candidate>& in, const std::vector<Poly>* totals) {
  const auto total_of = [&](std::size_t i) -> const Poly& { return totals != nullptr ? (*totals)[i] : in[i].total; };
  // One pass in index order, per phase: a candidate is dropped when a kept one dominates it
  // (an equal one is kept first) and removes the kept ones it dominates. Every candidate ever
  // seen stays dominated by a kept one, so what remains is exactly the undominated set.
  std::array<std::vector<std::size_t>, kNumPhases> by_phase;
  for (std::size_t i = 0; i < in.size(); ++i) {
    auto& kept = by_phase[static_cast<std::size_t>(phase_of(in[i].segment))];
    const Poly& t = total_of(i);
    // The kept candidate that dominated the previous one usually dominates this one too: it
    // moves to the front.
    bool dominated = false;
    for (std::size_t j = 0; j < kept.size(); ++j)
      if (total_of(kept[j]).dominates(t)) {
        std::swap(kept[0], kept[j]);
        dominated = true;
        break;
      }
    if (dominated) continue;
    std::erase_if(kept, [&](std::size_t k) { return t.dominates(total_of(k)); });
    kept.push_back(i);
  }
  // Largest coefficient sum first (a candidate dominating another has the larger sum), then by index.
  std::vector<std::pair<std::int64_t, std::size_t>> order;
  for (const auto& kept : by_phase)
    for (std::size_t i : kept) {
      std::int64_t sum = 0;
      for (auto v : total_of(i).c) sum += v;
      order.emplace_back(sum, i);
    }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<std::size_t> kept;
  kept.reserve(order.size());
  for (const auto& [sum, i] : order) kept.push_back(i);
  return kept;
}

// Memory outside live tensors (docs/formulas.md#runtime-overhead). None on the CPU. On CUDA:
// the caching allocator's reserve above the allocated peak (block rounding and fragmentation),
// replayed from the step's allocations (docs/formulas.md#the-caching-allocator) where a trace
// exists, else the measured median of 9%; and the CUDA context with loaded kernel images and
// library handles (measured, tests/data/measurements/cuda_h100.json).
void add_runtime_overhead(const TrainingConfig& c, Estimate& e, const std::optional<sim::ReplayResult>& replayed) {
  e.reserved = e.peak;
  e.total = e.peak;
  if (c.device != Device::kCuda) return;
  constexpr std::int64_t kSegment = 2LL << 20;  // the allocator reserves 2 MiB-multiple segments
  if (replayed) {
    // What the allocator holds beyond its blocks in use at its worst moment: the replay's reserved
    // peak over its allocated peak, added to the engine's own (sharded, extrapolated) peak.
    const std::int64_t slack = std::max<std::int64_t>(0, replayed->peak_reserved - replayed->peak_allocated);
    e.reserved = Bytes::of(sim::reserved_for_peak(e.peak.count(), slack));
    e.assumptions.push_back(fmt::format(
        "reserved: the caching allocator replayed over the step's {} allocations{}{}{}: {:.2f} GiB reserved beyond "
        "the allocated peak ({} segments)",
        replayed->allocations,
        c.lengths.histogram.empty() ? std::string()
                                    : fmt::format(", {} micro-batches padded to their longest example", c.lengths.steps),
        c.allocator.expandable_segments ? ", expandable_segments:True" : "",
        replayed->fsdp_streams ? ", after FSDP's construction of a CPU-resident model (each unit moved, broadcast, "
                                 "flattened and sharded on the GPU), with its all-gathers and reduce-scatters in their own "
                                 "streams' pools"
                               : "",
        static_cast<double>(slack) / static_cast<double>(1LL << 30), replayed->segments));
  } else {
    // The median of max_memory_reserved / max_memory_allocated over the H100 measurements is
    // 1.09 (spread 1.02-1.40: Adafactor's and checkpointing's many odd-sized temporaries most).
    const std::int64_t slack = std::max<std::int64_t>(e.peak.count() / 100 * 9, kSegment);
    e.reserved = Bytes::of(sim::reserved_for_peak(e.peak.count(), slack));
  }
  e.overhead.push_back({"cuda_context", Bytes::mib(768), Placement::kPerDevice,
                        "CUDA context, kernel images and library handles (measured 767-779 MiB on an H100, "
                        "CUDA 13.0; varies by driver and GPU)"});
  e.total = e.reserved;
  for (const auto& o : e.overhead) e.total += o.bytes;
}

}  // namespace

Estimator::Estimator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Estimator::~Estimator() = default;
Estimator::Estimator(Estimator&&) noexcept = default;
Estimator& Estimator::operator=(Estimator&&) noexcept = default;
const ModelSpec& Estimator::model() const { return impl_->model; }
const TrainingConfig& Estimator::config() const { return impl_->config; }

namespace {

// The decoder layers the reduced models simulate (docs/formulas.md#extrapolation), for a stage of
// n layers from `first`: r3 and r4, where r4 has one more repeating unit than r3; `extra` more
// units make the stage. Usually the unit is one middle layer: r3 = {first, mid, last} and
// r4 = {first, mid, mid, last}, the middle layer standing for all but the first and last; when
// the run's second layer is not of their majority kind (DeepSeek-V3's first_k_dense_replace = 3:
// layer 1 dense, 56 of the 59 MoE), one that is (docs/formulas.md#mla-parameters). Llama 3.2
// Vision interleaves cross-attention layers at a fixed period, and so do Gemma 2/3's
// full-attention layers among sliding ones once their masks are materialized (SDPA, s >=
// sliding_window): the unit is one period, starting right after the first layer (the first
// part); as many whole periods as fit before the last layer repeat, and the layers after them
// are the last part (docs/formulas.md#extrapolation). Interleavings without a period, and stages
// shorter than the two reduced models together, are simulated in full.
struct SimulatedLayers {
  std::vector<int> r3, r4;
  std::vector<std::pair<int, int>> slots3, slots4;  // empty: by position
  std::vector<int> reps3;                           // model layers each of r3's layers stands for
  std::int64_t extra = 0;
};

SimulatedLayers simulated_layers(const ModelSpec& model, int first, int n, bool every_layer, bool windowed,
                                 int checkpoint_every) {
  SimulatedLayers s;
  const auto all = [&]() {
    for (int l = first; l < first + n; ++l) s.r3.push_back(l);
    s.reps3.assign(s.r3.size(), 1);
    return s;
  };
  if (n <= 3 || every_layer) return all();
  // Gemma 4 (docs/models.md#gemma-4): its KV-shared layers end the period of the others.
  if (model.model_type == "gemma4_text" && model.kv_shared_layers > 0) return all();
  // Gemma 3n (docs/models.md#gemma-3n): sparse, KV-shared and MatFormer layers differ.
  if (model.altup_inputs > 0) return all();
  const int last = first + n - 1;
  // The layers that break the run of identical ones: cross-attention layers, or (with the
  // sliding mask materialized) the full-attention layers among sliding ones.
  std::vector<int> x;
  if (!model.cross_attention_layers.empty()) {
    x = model.cross_attention_layers;
  } else if (model.hybrid.enabled()) {
    // Hybrid layers (docs/models.md#hybrid-layers): the attention layers among the others, when
    // the whole layout repeats with their period (Qwen3-Next: every fourth); else in full.
    for (int l = first; l <= last; ++l)
      if (model.hybrid.mixer(l) == MixerKind::kAttention) x.push_back(l);
    if (x.size() < 2) return all();
  } else if ((windowed || !model.nope_layers.empty() || model.model_type == "gemma4_text") &&
             model.mixes_attention_kinds()) {
    // Llama 4's NoPE layers differ from its rotary ones (no rotary embedding or L2 norm) at
    // every length, not only once the chunked mask is materialized; Gemma 4's full layers differ
    // from its sliding ones in size too (global_head_dim), whatever the masks.
    x = model.full_attention_layers;
  }
  // Every-N checkpointing (docs/formulas.md#every-n-checkpointing): the checkpointed layers
  // repeat with period N. With a period of the model's own as well, every layer is simulated.
  if (checkpoint_every > 1) {
    if (!x.empty()) return all();
    for (int l = first; l <= last; ++l)
      if ((l + 1) % checkpoint_every == 0) x.push_back(l);
  }
  if (!x.empty()) {
    std::erase_if(x, [&](int l) { return l < first || l > last; });
    std::sort(x.begin(), x.end());
    if (x.size() < 2) return all();
    const int period = x[1] - x[0];
    for (std::size_t i = 1; i < x.size(); ++i)
      if (x[i] - x[i - 1] != period) return all();
    // Sliding windows: as many whole periods as fit after the first layer and before the last,
    // the unit starting right after the first layer wherever the full layer falls in it.
    // Cross-attention layers share the projected image features, whose gradient the first of
    // them to run backward allocates: the units run from the first cross-attention layer to the
    // last, which starts the last part.
    const bool cross = !model.cross_attention_layers.empty();
    if (cross && x.front() == first) return all();
    const int units = cross ? static_cast<int>(x.size()) - 1 : (n - 2) / period;
    const int u0 = cross ? x.front() : first + 1;
    const auto special = [&x](int l) { return std::binary_search(x.begin(), x.end(), l); };
    // A layer's kind: its mixer, MLP or MoE (hybrids), and whether it is one of x.
    const auto kind = [&](int l) {
      return std::tuple(special(l), model.hybrid.mixer(l), model.hybrid.has_ffn(l), model.moe.is_moe_layer(l));
    };
    for (int l = u0; l + period < u0 + units * period; ++l)
      if (kind(l) != kind(l + period)) return all();
    // Fewer layers in all than the two reduced models would simulate: simulate them all.
    if (units < 2 || 2 * (n - units * period) + 3 * period >= n) return all();
    const auto add = [&](std::vector<int>& layers, std::vector<std::pair<int, int>>& slots, int units_simulated) {
      for (int l = first; l < u0; ++l) {
        layers.push_back(l);
        slots.emplace_back(0, 0);
      }
      for (int u = 0; u < units_simulated; ++u)
        for (int l = u0 + u * period; l < u0 + (u + 1) * period; ++l) {
          layers.push_back(l);
          slots.emplace_back(1, u);
        }
      for (int l = u0 + units * period; l <= last; ++l) {
        layers.push_back(l);
        slots.emplace_back(2, 0);
      }
    };
    add(s.r3, s.slots3, 1);
    add(s.r4, s.slots4, 2);
    for (const auto& [part, instance] : s.slots3) s.reps3.push_back(part == 1 ? units : 1);
    s.extra = units - 1;
    return s;
  }
  int mid = first + 1;
  int moe_mid = 0;
  for (int l = first + 1; l < last; ++l) moe_mid += model.moe.is_moe_layer(l) ? 1 : 0;
  const bool want_moe = 2 * moe_mid > n - 2;
  for (int l = first + 1; l < last && model.moe.is_moe_layer(first + 1) != want_moe; ++l)
    if (model.moe.is_moe_layer(l) == want_moe) {
      mid = l;
      break;
    }
  s.r3 = {first, mid, last};
  s.r4 = {first, mid, mid, last};
  s.reps3 = {1, n - 2, 1};
  s.extra = n - 3;
  return s;
}

// What one micro-batch holds as its backward begins (the first backward event, less the
// gradient that starts it): its saved activations, checkpoints, inputs and masks, logits.
// A pipeline schedule keeps this alive for every micro-batch in flight.
CatVec retained_at_backward(const sim::ProgramResult& r3, const sim::ProgramResult* r4, std::int64_t m) {
  auto first_backward = [](const sim::ProgramResult& r) -> const sim::Event* {
    for (const auto& e : r.events)
      if (phase_of(e.segment) == Phase::kBackward) return &e;
    return nullptr;
  };
  const sim::Event* e3 = first_backward(r3);
  const sim::Event* e4 = r4 != nullptr ? first_backward(*r4) : nullptr;
  CatVec out{};
  if (e3 == nullptr) return out;
  Poly sum;
  for (Cat c : {Cat::kActivations, Cat::kAttentionScores, Cat::kLoraDropout, Cat::kAutocastCopies, Cat::kLogits,
                Cat::kCheckpoints, Cat::kInputs}) {
    Poly v = r3.cats.at(*e3, c);
    if (e4 != nullptr && m != 0) v += (r4->cats.at(*e4, c) - v) * m;
    sum += v;
  }
  out[static_cast<std::size_t>(Cat::kInFlight)] = sum;
  return out;
}

// Context parallelism's ring attention (docs/formulas.md#context-parallelism), Transformer
// Engine's AttnFuncWithCPAndKVP2P: in forward every K/V block received (cp of them) and cp
// per-step outputs live until the layer's attention returns; backward holds dQ and two K/V +
// dK/dV ring buffers. Polynomials in the local sequence (the engine evaluates at s / cp).
// Extrapolated::part_of and ::survivors (see there): the one-pass pruning of undominated() run
// by run, on the candidates' totals before anything per estimator is added.
template <class Extrapolated>
void prune_runs(Extrapolated& x) {
  const std::vector<Candidate>& all = x.cands;
  x.part_of.resize(all.size());
  std::uint32_t part = 0;
  std::vector<std::uint32_t> kept;
  const auto close_run = [&] {
    std::sort(kept.begin(), kept.end());
    x.survivors.insert(x.survivors.end(), kept.begin(), kept.end());
    kept.clear();
  };
  // The sharded categories' layout indices in the two runs nearly every candidate comes from.
  const sim::ProgramResult* rc = all.empty() ? nullptr : all.front().rc;
  const sim::ProgramResult* rd = all.empty() ? nullptr : all.front().rd;
  std::vector<std::uint16_t> in_rc, in_rd;
  if (rc != nullptr) in_rc = rc->cats.indices(kShardedCats);
  if (rd != nullptr) in_rd = rd->cats.indices(kShardedCats);
  const auto same_sharded = [&](const Candidate& a, const Candidate& b) {
    // same_inputs(a, b, kShardedCats), comparing one index list per run where both are from them.
    if (a.c == nullptr || b.c == nullptr || a.rc != rc || b.rc != rc || a.rd != rd || b.rd != rd)
      return same_inputs(a, b, kShardedCats);
    if (!same_terms(a, b) || !rc->cats.same(*a.c, *b.c, in_rc)) return false;
    return a.d == nullptr || rd->cats.same(*a.d, *b.d, in_rd);
  };
  for (std::size_t i = 0; i < all.size(); ++i) {
    const bool same_part = i > 0 && same_sharded(all[i - 1], all[i]);
    if (i > 0 && !same_part) ++part;
    x.part_of[i] = part;
    if (i > 0 && (!same_part || all[i].segment != all[i - 1].segment)) close_run();
    const Poly& t = all[i].total;
    if (std::any_of(kept.begin(), kept.end(), [&](std::uint32_t k) { return all[k].total.dominates(t); })) continue;
    std::erase_if(kept, [&](std::uint32_t k) { return t.dominates(all[k].total); });
    kept.push_back(static_cast<std::uint32_t>(i));
  }
  close_run();
}

std::array<Poly, 2> ring_attention_buffers(const ModelSpec& rank_model, const TrainingConfig& c) {
  const std::int64_t cp = c.parallel.context_parallel;
  const std::int64_t act = c.autocast ? 2 : dtype_size(c.torch_dtype);
  const std::int64_t hd = rank_model.head_dim;
  const std::int64_t q = checked_mul(checked_mul(rank_model.num_heads, hd), act);
  const std::int64_t kv = checked_mul(checked_mul(2LL * rank_model.num_kv_heads, hd), act);  // K and V
  return {Poly::mono(sim::kBS, checked_mul(cp, kv + q)), Poly::mono(sim::kBS, q + 4 * kv)};
}

// `buffers` (ring_attention_buffers(): forward, backward) must outlive the candidates' materialize().
void add_ring_attention_buffers(const std::array<Poly, 2>& buffers, std::vector<Candidate>& cands) {
  for (auto& cand : cands) {
    const bool fwd_layer = cand.segment >= sim::kSegFwdFirst && cand.segment <= sim::kSegFwdLast;
    const bool bwd_layer = cand.segment >= sim::kSegBwdFirst && cand.segment <= sim::kSegBwdLast;
    if (!fwd_layer && !bwd_layer) continue;
    cand.ring = &buffers[fwd_layer ? 0 : 1];
    cand.total += *cand.ring;
  }
}

}  // namespace

// What building an estimator's programs needs, kept for the half of its classes built on first
// use (Estimator::Impl::build_half; docs/plan.md#speed).
struct ProgramBuild {
  sim::ProgramSpec sp;
  // A distinct stage (ranks whose simulation would be the same share one) and the decoder layers
  // its reduced models simulate, without and with the sliding masks.
  struct StageWork {
    PipelineRank rank;
    std::array<SimulatedLayers, 2> simulated;
    std::vector<int> key;  // the reduced-model runs it uses: stages of one kind share them
  };
  std::vector<StageWork> stages;
  // The reduced-model runs of a stage kind, simulated once and extrapolated per layer count.
  using Run = std::shared_ptr<const sim::ProgramResult>;
  struct Runs {
    std::array<Run, kClasses> r3, r4;
  };
  std::map<std::vector<int>, Runs> runs_of;
  std::vector<int> classes;  // the classes simulated (the others copy one)
  bool batch_one_differs = false, window_differs = false, multi = false, pipelined = false;
  bool prepared = false;          // the stages' parameters computed (by the first half built)
  std::int64_t vision_layers = 0;  // vision-tower layers every run adds (images in the batch)
  // The simulated class that answers for class cls.
  int class_of(int cls) const { return (batch_one_differs ? cls % 2 : 1) + (window_differs ? cls / 2 * 2 : 0); }
};

// The program of a pipeline stage for a class (docs/formulas.md#pipeline-parallelism).
static sim::ProgramSpec stage_program(const sim::ProgramSpec& sp, const PipelineRank& rk, int cls, const TrainingConfig& config) {
  sim::ProgramSpec s = sp;
  s.stage_embedding = rk.embedding;
  s.stage_head = rk.head;
  s.free_stage_output = config.parallel.megatron_core;
  s.batch_one = cls % 2 == 0;
  s.sdpa_sliding_mask = sp.sdpa_sliding_mask || cls >= 2;
  return s;
}

// Simulates, extrapolates, shards and prunes the programs of one half of the classes: 0 (s below
// the sliding window, or no window) or 1 (s at or past it). Each half writes only its own
// classes' slots, so the two may be built by different threads.
void Estimator::Impl::build_half(int half) {
  ProgramBuild& pb = *build;
  const sim::ProgramSpec& sp = pb.sp;
  const std::vector<ProgramBuild::StageWork>& stages = pb.stages;
  std::map<std::vector<int>, ProgramBuild::Runs>& runs_of = pb.runs_of;
  using Run = ProgramBuild::Run;
  using Runs = ProgramBuild::Runs;
  using StageWork = ProgramBuild::StageWork;
  std::vector<int> classes;
  for (const int cls : pb.classes)
    if (cls / 2 == half) classes.push_back(cls);
  // The program of a stage for a class (docs/formulas.md#pipeline-parallelism).
  const auto stage_spec = [&](const PipelineRank& rk, int cls) { return stage_program(sp, rk, cls, config); };
  // The reduced-model runs of a stage kind, simulated once and extrapolated per layer count.
  // Every run is independent of the others: they run in parallel (docs/plan.md#speed); a run
  // an estimator this one derives from (or another derived one) has made is not made again.
  std::vector<std::pair<sim::ProgramSpec, Run*>> jobs;
  std::set<std::vector<int>> kinds;
  for (const auto& w : stages) {
    if (!kinds.insert(w.key).second) continue;
    const auto it = runs_of.find(w.key);
    for (const int cls : classes) {
      const auto ci = static_cast<std::size_t>(cls);
      const SimulatedLayers& layers = w.simulated[cls >= 2 ? 1 : 0];
      sim::ProgramSpec s = stage_spec(w.rank, cls);
      s.model_layers = layers.r3;
      s.layer_slots = layers.slots3;
      jobs.emplace_back(s, &it->second.r3[ci]);
      if (layers.r4.empty()) continue;
      s.model_layers = layers.r4;
      s.layer_slots = layers.slots4;
      jobs.emplace_back(std::move(s), &it->second.r4[ci]);
    }
  }
  std::erase_if(jobs, [&](auto& job) { return (*job.second = programs->find(job.first)) != nullptr; });
  // A thread costs tens of microseconds to start: worth it only for a long program (measured:
  // a plain 8B plan of 3 + 4 simulated layers got slower, docs/plan.md#speed).
  std::size_t layers_run = 0;
  for (const auto& job : jobs) layers_run += job.first.model_layers.size();
  layers_run += jobs.size() * static_cast<std::size_t>(pb.vision_layers);
  const unsigned threads = layers_run >= kParallelLayers ? 0 : 1;
  // Longest first: workers take jobs in order, so the longest must not start last.
  std::stable_sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) {
    return a.first.model_layers.size() > b.first.model_layers.size();
  });
  parallel_for(
      jobs.size(),
      [&jobs, this](std::size_t i) {
        auto& [spec, out] = jobs[i];
        *out = programs->run(spec);
      },
      threads);
  // Each stage's parameters: what the optimizer holds and how sharding divides it, from the
  // first half built's first simulated class's reduced model (every class has the same
  // parameters when the layers do; the sliding-window units stand for every layer kind).
  const auto prepare_stage = [&](std::size_t si) {
    const StageWork& w = stages[si];
    const PipelineRank& rk = w.rank;
    StageSim& st = sims[si];
    const int L = rk.layers;
    const Runs& runs = runs_of.at(w.key);
    const auto ci = static_cast<std::size_t>(classes.front());
    const SimulatedLayers& simulated = w.simulated[classes.front() >= 2 ? 1 : 0];
    const sim::ProgramResult& r3 = *runs.r3[ci];
    // How many of the stage's layers a simulated parameter stands for: the middle
    // simulated layer repeats.
    const auto reps_of = [&simulated](const sim::ParamRec& p) {
      return p.sim_layer >= 0 ? simulated.reps3[static_cast<std::size_t>(p.sim_layer)] : 1;
    };
    for (const auto& p : r3.params) {
      if (!p.trainable) continue;
      const int reps = reps_of(p);
      OptParam op{p.numel, static_cast<int>(sim::esize(p.dt)), p.rows, p.cols, p.count};
      if (p.rows > 0 && p.count > 1) op.numel = p.rows * p.cols;  // per expert matrix
      op.count = p.rows > 0 && p.count > 1 ? p.count * reps : reps;
      op.fused = p.rows > 0 && p.count > 1 && p.fused ? p.count : 1;
      st.opt_params.push_back(op);
      st.trainable += p.numel * reps;
    }
    std::int64_t tbytes = 0, layer_bytes = 0, expert_bytes = 0, all_bytes = 0, expert_trainable = 0;
    for (const auto& p : st.opt_params) {
      tbytes += p.numel * p.elem_bytes * p.count;
      if (p.rows > 0 && p.count > 1) expert_trainable += p.numel * p.elem_bytes * p.count;
    }
    for (const auto& p : r3.params) {
      const int reps = reps_of(p);
      if (p.sim_layer == (L > 1 ? 1 : 0)) layer_bytes += p.numel * sim::esize(p.dt);
      if (p.rows > 0 && p.count > 1) expert_bytes += p.numel * sim::esize(p.dt) * reps;
      all_bytes += p.numel * sim::esize(p.dt) * reps;
    }
    st.shard = make_shard_plan(model, config, st.trainable, tbytes, layer_bytes);
    if (st.shard.fp32_master) {
      // DeepSpeed steps the client optimizer on its fp32 master partition; FSDP's
      // MixedPrecisionPolicy on the fp32 sharded parameters.
      std::vector<OptParam> master = st.opt_params;
      for (auto& p : master) p.elem_bytes = 4;
      st.opt = optimizer_footprint(config.optim, config.device, master);
    } else {
      st.opt = optimizer_footprint(config.optim, config.device, st.opt_params);
    }
    for (const auto& p : r3.params)
      if (p.sim_layer < 0) st.shard.root_param_bytes += p.numel * sim::esize(p.dt);
    // docs/formulas.md#reshard-after-forward: the stage's decoder layers, all unsharded.
    if (st.shard.keep_gathered) st.shard.kept_gathered_bytes = all_bytes - st.shard.root_param_bytes;
    // Routed experts' share of the stage's parameters: sharded over the expert
    // data-parallel group (docs/formulas.md#expert-parallelism).
    st.shard.expert_share_per_mille = all_bytes > 0 ? expert_bytes * 1000 / all_bytes : 0;
    st.shard.expert_trainable_share_per_mille = tbytes > 0 ? expert_trainable * 1000 / tbytes : 0;
    if (config.quant.load_in_4bit)
      st.shard.quant_state_bytes = quant_state_bytes(sp.model, rk.first_layer, rk.layers, config.quant.double_quant);
    // Persistent optimizer state everywhere; at the step, every gradient and the temporaries.
    st.base[static_cast<int>(Cat::kOptimizerStates)] = Poly::constant(st.opt.state_bytes);
    if (config.device == Device::kCuda) st.base[static_cast<int>(Cat::kWorkspace)] = Poly::constant(kCublasWorkspaces);
    // Megatron-Core keeps every gradient in a persistent fp32 buffer (main_grad; Megatron-LM
    // forces accumulate_allreduce_grads_in_fp32 with bf16), allocated when the model is
    // wrapped: all of it is live from the first micro-batch's forward on.
    const bool main_grads32 = config.parallel.megatron_core && st.trainable > 0;
    Poly grads;
    for (const auto& p : st.opt_params)
      grads += Poly::constant(p.numel * (main_grads32 ? 4 : p.elem_bytes) * p.count);
    st.opt_extra[static_cast<int>(Cat::kGradients)] = grads;
    st.opt_extra[static_cast<int>(Cat::kOptimizerTemps)] = Poly::constant(st.opt.temp_bytes);
    if (st.trainable > 0)
      st.later_grads = pb.multi ? sharded_gradients(st.shard, grads, !pb.pipelined && fsdp(config)) : grads;
    if (config.parallel.context_parallel > 1) st.ring = ring_attention_buffers(sp.model, config);
  };
  // Each (stage, class) timeline: extrapolated, sharded, pruned. They are independent: Gemma 3
  // past its window processes its plain and its masked program at once (docs/plan.md#speed).
  struct ClassWork {
    std::size_t stage = 0;
    int cls = 0;
    bool extrapolated = false;  // the reduced models' timelines were extrapolated
  };
  std::vector<ClassWork> work;
  for (std::size_t si = 0; si < stages.size(); ++si)
    for (const int cls : classes) work.push_back({si, cls});
  const auto process_class = [&](std::size_t wi) {
    ClassWork& cw = work[wi];
    const std::size_t si = cw.stage;
    const int cls = cw.cls;
    const StageWork& w = stages[si];
    const PipelineRank& rk = w.rank;
    StageSim& st = sims[si];
    const Runs& runs = runs_of.at(w.key);
    const auto ci = static_cast<std::size_t>(cls);
    const SimulatedLayers& simulated = w.simulated[cls >= 2 ? 1 : 0];
    const std::int64_t extra = simulated.extra;
    const sim::ProgramResult& r3 = *runs.r3[ci];
    const sim::ProgramResult* r4 = runs.r4[ci].get();
    const CatVec& base = st.base;
    const CatVec& opt_extra = st.opt_extra;
    const bool main_grads32 = config.parallel.megatron_core && st.trainable > 0;
    std::vector<Candidate> cands;
    Run full;
    cw.extrapolated = r4 != nullptr;
    std::shared_ptr<Programs::Extrapolated> shared;
    try {
      shared = programs->extrapolated(&r3, r4, extra, [&] { return extrapolate(r3, r4, extra); });
    } catch (const TimelineMismatch&) {
      cw.extrapolated = false;
      // Every layer simulated: nothing to extrapolate (docs/formulas.md#extrapolation).
      sim::ProgramSpec every = stage_spec(rk, cls);
      for (int l = rk.first_layer; l < rk.first_layer + rk.layers; ++l) every.model_layers.push_back(l);
      full = programs->run(every);
      shared = programs->extrapolated(full.get(), nullptr, 0, [&] { return extrapolate(*full, nullptr, 0); });
    }
    std::call_once(shared->pruned, [&] { prune_runs(*shared); });
    const std::vector<std::uint32_t>& origin = shared->survivors;  // cands[j] is shared->cands[origin[j]]
    cands.reserve(origin.size() + 1);
    const Poly base_total = total(base);
    for (const std::uint32_t i : origin) {
      const Candidate& k = shared->cands[i];
      if (k.c == nullptr) {
        // The optimizer step: this estimator's own (its states, every gradient, its temporaries).
        cands.push_back(own_candidate(k.segment, add(add(*k.cats, base), opt_extra)));
      } else {
        cands.push_back(k);
        cands.back().total += base_total;
      }
    }
    // One micro-batch's activations as its backward begins: what a pipeline schedule holds
    // for every micro-batch in flight (docs/formulas.md#pipeline-parallelism).
    st.retained[ci] = full ? retained_at_backward(*full, nullptr, 0) : retained_at_backward(r3, r4, extra);
    if (config.method == Method::kGrpo && config.grpo.vllm == VllmMode::kNone) {
      const CatVec persistent =
          add(full ? full->end_of_step : r4 ? lerp(r3.end_of_step, r4->end_of_step, extra) : r3.end_of_step, base);
      cands.push_back(generation_candidate(model, config, persistent));
    }
    // Context parallelism adds this config's own ring buffers to the candidates: their
    // unsharded categories are then not the shared extrapolation's.
    const bool ring_buffers = config.parallel.context_parallel > 1;
    if (ring_buffers) add_ring_attention_buffers(st.ring, cands);
    // Candidates i - 1 and i (both of the shared extrapolation's) are of one part.
    const auto same_part = [&](std::size_t i) {
      return i > 0 && i < origin.size() && shared->part_of[origin[i]] == shared->part_of[origin[i - 1]];
    };
    // Each candidate's gradient term as its total counts it (for the later micro-batches).
    std::vector<Poly> grads_now(cands.size());
    if (pb.multi) {
      // Multi-GPU rules act per category: the totals are computed from each candidate's
      // sharded categories.
      Poly delta;  // the previous candidate's total change by sharding
      // The unsharded categories of an event are the shared extrapolation's plus this stage's
      // base, except where this config adds its own terms (ring-attention buffers). The
      // optimizer step and GRPO's generation have categories of their own.
      const bool share_parts = !ring_buffers;
      if (share_parts)
        std::call_once(shared->parts_built, [&] {
          static const CatVec kNoBase{};
          const std::vector<Candidate>& all = shared->cands;
          for (std::size_t i = 0; i < all.size(); ++i) {
            if (i > 0 && shared->part_of[i] == shared->part_of[i - 1]) continue;
            auto& part = shared->parts.emplace_back();
            for (std::size_t j = 0; j < std::size(kShardedCats); ++j)
              part[j] = unsharded_at(all[i], static_cast<std::size_t>(kShardedCats[j]), kNoBase);
          }
        });
      const std::size_t shared_n = share_parts ? origin.size() : 0;
      // The sharded categories the stage's base adds to (the optimizer's states, at most).
      std::vector<std::size_t> base_sharded;
      for (std::size_t j = 0; j < std::size(kShardedCats); ++j)
        if (!base[static_cast<std::size_t>(kShardedCats[j])].is_zero()) base_sharded.push_back(j);
      for (std::size_t i = 0; i < cands.size(); ++i) {
        Candidate& cand = cands[i];
        cand.sharding = Candidate::Sharding{
            &st.shard, cand.segment == kSegOptimizer,
            gathered_layers(cand.segment, fsdp_no_backward_prefetch(config),
                            fsdp(config) && config.parallel.fsdp_version == 2),
            cand.segment >= sim::kSegHeadBwd && cand.segment <= sim::kSegBwdPre};
        const bool same_parts = i > 0 && (i < shared_n ? same_part(i) : same_inputs(cands[i - 1], cand, kShardedCats));
        if (same_parts && cands[i - 1].sharding->optimizer_step == cand.sharding->optimizer_step &&
            cands[i - 1].sharding->gathered_layers == cand.sharding->gathered_layers &&
            cands[i - 1].sharding->backward == cand.sharding->backward) {
          cand.total += delta;
          grads_now[i] = grads_now[i - 1];
          continue;
        }
        // apply_sharding maps each category on its own: only the ones it changes matter.
        ShardedCats unsharded_cats;
        if (i < shared_n && cand.c != nullptr) {
          unsharded_cats = shared->parts[shared->part_of[origin[i]]];
          for (const std::size_t j : base_sharded) unsharded_cats[j] += base[static_cast<std::size_t>(kShardedCats[j])];
        } else {
          for (std::size_t j = 0; j < std::size(kShardedCats); ++j)
            unsharded_cats[j] = unsharded_at(cand, static_cast<std::size_t>(kShardedCats[j]), base);
        }
        const ShardedCats v =
            apply_sharding(st.shard, unsharded_cats, cand.sharding->optimizer_step, cand.sharding->gathered_layers,
                           cand.sharding->backward);
        delta = Poly{};
        for (std::size_t j = 0; j < v.size(); ++j) delta += v[j] - unsharded_cats[j];
        cand.total += delta;
        grads_now[i] = v[sharded_index(Cat::kGradients)];
      }
    } else if (st.trainable > 0) {
      // Gradients change at few events (a parameter's accumulation): consecutive candidates of
      // one run mostly share them.
      for (std::size_t i = 0; i < cands.size(); ++i) {
        if (i > 0 && (same_part(i) || same_inputs(cands[i - 1], cands[i], kGradientCats))) {
          grads_now[i] = grads_now[i - 1];
          continue;
        }
        grads_now[i] = unsharded_at(cands[i], static_cast<std::size_t>(Cat::kGradients), base);
      }
    }
    // A later micro-batch of an accumulation step (docs/formulas.md#gradient-accumulation):
    // the same program with every .grad allocated from the start. A new gradient is then
    // added in place and freed instead of becoming .grad, so at every event the first
    // micro-batch's gradients so far are replaced by all of them (as sharded: under FSDP
    // through accelerate/Trainer the earlier micro-batches run in no_sync(), where gradients
    // accumulate unsharded); the step is the same. Totals first: categories only for the
    // candidates that survive pruning.
    std::vector<Poly> later_totals;
    const Poly& all = st.later_grads;
    if (st.trainable > 0) {
      later_totals.reserve(cands.size());
      for (std::size_t i = 0; i < cands.size(); ++i) {
        const bool grads_change = cands[i].segment != kSegOptimizer && cands[i].segment != kSegGeneration;
        later_totals.push_back(grads_change ? cands[i].total + (all - grads_now[i]) : cands[i].total);
      }
    }
    for (int acc = 0; acc < 2; ++acc) {
      // Nothing trainable: every micro-batch is the first.
      const bool later = st.trainable > 0 && (acc == 1 || main_grads32);
      std::vector<Candidate> kept;
      for (std::size_t i : undominated(cands, later ? &later_totals : nullptr)) {
        Candidate k = cands[i];
        if (later && k.segment != kSegOptimizer && k.segment != kSegGeneration) {
          k.total = later_totals[i];
          k.grads = &all;
        }
        kept.push_back(std::move(k));
      }
      st.candidates[static_cast<std::size_t>(acc)][ci] = std::move(kept);
    }
  };
  if (!pb.prepared) parallel_for(stages.size(), prepare_stage, threads);
  pb.prepared = true;
  parallel_for(work.size(), process_class, threads);
  for (const ClassWork& cw : work) {
    if (cw.cls >= 2) continue;  // the assumptions describe the program without the sliding masks
    StageSim& st = sims[cw.stage];
    const SimulatedLayers& simulated = stages[cw.stage].simulated[0];
    st.extrapolated = cw.extrapolated;
    st.simulated_layers = static_cast<int>(simulated.r3.size() + simulated.r4.size());
  }
  // The classes not simulated are the same program as one that is.
  for (StageSim& st : sims)
    for (int cls = 0; cls < kClasses; ++cls) {
      if (pb.window_differs && cls / 2 != half) continue;
      const auto from = static_cast<std::size_t>(pb.class_of(cls)), to = static_cast<std::size_t>(cls);
      if (from == to) continue;
      for (auto& slot : st.candidates) slot[to] = slot[from];
      st.retained[to] = st.retained[from];
    }
}

Result<Estimator> Estimator::create(const ModelSpec& model, const TrainingConfig& config) {
  return build(model, config, std::make_shared<Programs>());
}

Result<Estimator> Estimator::derive(const TrainingConfig& config) const {
  return build(impl_->model, config, impl_->programs);
}

Result<Estimator> Estimator::build(const ModelSpec& model, const TrainingConfig& config,
                                   std::shared_ptr<Programs> programs) {
  if (auto s = validate(model); !s) return s.error();
  if (auto s = validate(config); !s) return s.error();
  if (auto s = check_supported(model, config); !s) return s.error();
  if (auto s = validate_optim_args(config.optim); !s) return s.error();
  auto impl = std::make_unique<Impl>();
  impl->model = model;
  impl->config = config;
  impl->programs = std::move(programs);
  try {
    sim::ProgramSpec sp;
    // Each tensor-parallel rank computes a slice of every layer.
    sp.model = tensor_parallel_rank(model, config.parallel.tensor_parallel,
                                    config.parallel.megatron_core || config.parallel.loss_parallel,
                                    config.parallel.expert_tensor_parallel_size());
    // Each expert-parallel rank holds num_experts / ep routed experts and computes every token
    // routed to them (docs/formulas.md#expert-parallelism).
    if (config.parallel.expert_parallel > 1) sp.model.moe.local_experts = model.moe.num_experts / config.parallel.expert_parallel;
    sp.expert_parallel = config.parallel.expert_parallel;
    if (config.parallel.sequence_parallel && config.parallel.tensor_parallel > 1)
      sp.sequence_parallel = config.parallel.tensor_parallel;
    sp.moe_gather = config.parallel.expert_tensor_parallel_size() > 1;
    if (config.parallel.moe_capacity_factor > 0)
      sp.moe_tokens_per_mille = static_cast<std::int64_t>(std::ceil(config.parallel.moe_capacity_factor * 1000 - 1e-9));
    sp.weight_dt = to_dt(config.torch_dtype);
    if (config.autocast) sp.autocast = to_dt(*config.autocast);
    sp.full_finetune = !config.lora.enabled;
    if (config.lora.enabled) {
      MEMPLAN_TRY(sp.lora.targets, resolve_lora_targets(model, config.lora));
      sp.lora.enabled = true;
      sp.lora.r = config.lora.r;
      sp.lora.dropout = config.lora.dropout;
      sp.lora.modules_to_save = config.lora.modules_to_save;
    }
    sp.load_in_4bit = config.quant.load_in_4bit;
    sp.load_in_8bit = config.quant.load_in_8bit;
    sp.double_quant = config.quant.double_quant;
    sp.compute_dt = to_dt(config.quant.compute_dtype.value_or(config.torch_dtype));
    const bool quantized = config.quant.load_in_4bit || config.quant.load_in_8bit;
    using KP = QuantConfig::KbitPrepare;
    // docs/formulas.md#qlora: what the k-bit preparation casts. PEFT's
    // prepare_model_for_kbit_training upcasts every non-4-bit parameter to fp32; TRL 0.x then
    // casts embeddings and lm_head back to bf16 (peft_module_casting_to_bf16), norms stay fp32.
    sp.embed_dt = sp.norm_dt = sp.weight_dt;
    if (quantized && config.quant.kbit_prepare == KP::kPeftUpcast) sp.embed_dt = sp.norm_dt = DT::kF32;
    if (quantized && config.quant.kbit_prepare == KP::kTrlLegacy) sp.norm_dt = DT::kF32;
    // Adapters: PEFT's autocast_adapter_dtype makes them fp32; current TRL casts the trainable
    // parameters of quantized models to bf16 (QLoRA paper). An explicit dtype wins.
    sp.adapter_dt = to_dt(effective_adapter_dtype(config));
    sp.loss_shift_copy = config.loss_shift != TrainingConfig::LossShift::kPadLabels;
    sp.loss_upcast_in_model = config.loss_shift == TrainingConfig::LossShift::kUpcastInModel;
    // Gemma3nForConditionalGeneration computes its own loss (docs/models.md#gemma-3n): `logits =
    // logits.float()` (the model's only reference), shift_logits[mask != 0].contiguous() (a second
    // fp32 copy), nn.CrossEntropyLoss. Gemma3nForCausalLM (a bare gemma3n_text) uses ForCausalLMLoss.
    if (model.vision.kind == VisionKind::kGemma3n && config.loss_kernel == LossKernel::kEager) {
      sp.loss_shift_copy = true;
      sp.loss_upcast_in_model = true;
    }
    // Llama4ForConditionalGeneration (the class a batch with images needs) computes its own loss
    // (docs/formulas.md#llama-4-vision): logits[..., :-1, :][mask != 0].contiguous() in the
    // logits' dtype, then nn.CrossEntropyLoss (fp32 only under autocast). Text-only Llama 4 is
    // estimated as Llama4ForCausalLM (ForCausalLMLoss).
    if (model.vision.kind == VisionKind::kLlama4 && image_plan(model, config).images > 0 &&
        config.loss_kernel == LossKernel::kEager) {
      sp.loss_index_copy = true;
    }
    switch (config.method) {
      case Method::kSft: sp.method = sim::StepMethod::kSft; break;
      case Method::kDpo: sp.method = sim::StepMethod::kDpo; break;
      case Method::kGrpo: sp.method = sim::StepMethod::kGrpo; break;
    }
    // DPO runs chosen and rejected sequences in one batch of 2b.
    sp.batch_multiplier = config.method == Method::kDpo ? 2 : 1;
    sp.fp32_outputs = config.autocast.has_value() && !deepspeed(config);
    if (deepspeed(config) && config.autocast) {
      // The DeepSpeed engine casts the model to bf16/fp16 and runs without torch autocast.
      sp.weight_dt = to_dt(*config.autocast);
      sp.embed_dt = sp.norm_dt = sp.weight_dt;  // every floating parameter
      sp.autocast.reset();
    }
    sp.ref = reference_kind(config);
    sp.prompt_len = config.grpo.max_prompt_length;
    sp.gradient_checkpointing = config.gradient_checkpointing;
    sp.checkpoint_every = config.checkpoint_every;
    sp.expand_kv = config.model_code == ModelCode::kTorchtune;
    // Under autocast cross_entropy runs in fp32 whatever the logits' dtype (its log_softmax is on
    // autocast's fp32 list): a loss without the upcast differs only without autocast.
    sp.loss_upcast = config.loss_upcast || config.autocast.has_value();
    if (sp.loss_index_copy) sp.loss_upcast = config.autocast.has_value();  // nn.CrossEntropyLoss on the logits as they are
    // NomicBERT's encoder calls torch.utils.checkpoint(..., use_reentrant=False) itself.
    sp.checkpoint_reentrant = config.reentrant_checkpointing() && !model.is_nomic_bert();
    sp.fsdp_frozen_units = fsdp_frozen_layer_units(config);
    sp.ops.inplace_accumulation = config.device == Device::kCuda;
    // DeBERTa-v2 and NomicBERT have no SDPA or flash path: eager whatever the default.
    sp.attn = model.eager_attention_only() || (model.attention_sinks && !config.attn) ? AttnImpl::kEager
                                                                                     : config.attn_impl();
    // torchtitan's per-op policy (docs/formulas.md#per-op-selective-checkpointing); its save list
    // names CUDA's flash and memory-efficient SDPA kernels, not flash-attn's or the CPU's.
    sp.checkpoint_op_policy = config.gradient_checkpointing && !sp.checkpoint_reentrant &&
                              config.checkpoint_policy == TrainingConfig::CheckpointPolicy::kOp;
    sp.sac_save_attention = config.device == Device::kCuda && sp.attn == AttnImpl::kSdpa;
    // No vocabulary head to fuse for an embedding model; sentence-transformers applies no Liger kernel.
    const bool lm_head = !model.is_encoder() && !model.decoder_embedding;
    // DPO and GRPO have TRL's Liger losses (docs/formulas.md#liger-dpo-grpo); the other kernels
    // are SFT's only.
    const bool kernel_applies =
        config.method == Method::kSft || (config.loss_kernel == LossKernel::kLiger && !config.contrastive.enabled());
    sp.loss_kernel = lm_head && kernel_applies ? config.loss_kernel : LossKernel::kEager;
    sp.liger_kernels = config.liger_kernels && lm_head;
    // LLM2Vec's scripts wrap the model in PEFT themselves and checkpoint without reentrancy: no
    // enable_input_require_grads (docs/formulas.md#pooling).
    sp.input_require_grads = !(model.decoder_embedding && model.embedding_library == EmbeddingLibrary::kLlm2Vec);
    sp.contrastive = config.contrastive;
    const ImagePlan images = image_plan(model, config);
    sp.images = images.images;
    sp.image_patches = images.grid.patches;
    sp.image_rows = images.grid.rows;
    sp.image_cols = images.grid.cols;
    sp.image_tokens = images.grid.tokens;
    // Without images no gradient reaches the tower or the projector: AdamW creates no state for them.
    sp.train_vision_tower = config.vision.train_vision_tower && images.images > 0;
    sp.train_projector = config.vision.train_projector && images.images > 0;
    if (config.vision.frozen_dtype) sp.vision_frozen_dt = to_dt(*config.vision.frozen_dtype);
    sp.ops.cuda = config.device == Device::kCuda;
    sp.ops.trivial_slices_are_ops = config.device == Device::kCpu;
    sp.ops.mean_saves_input = config.device == Device::kCpu;
    sp.ops.promote_by_copy = config.device == Device::kCpu;
    // Pipeline ranks (one, without pipeline parallelism); ranks whose simulation would be the
    // same (embedding, head, layer count and kinds) share it.
    MEMPLAN_TRY(const std::vector<PipelineRank> ranks, pipeline_ranks(model, config.parallel));
    const bool pipelined = ranks.size() > 1;
    // Batch 1 changes the program only where a reshape becomes a view: eager attention's
    // query (and single-KV-head) copies and GRPO's entropy copy. Otherwise one program serves:
    // DeBERTa's attention copies with .contiguous() at every batch size, and GradCache's
    // forwards take mini-batches of a fixed size whatever b is (encoder_program.cpp).
    const bool eager_copies = sp.attn == AttnImpl::kEager && !model.is_deberta() &&
                              !((model.is_encoder() || model.decoder_embedding) && config.contrastive.enabled() &&
                                config.contrastive.cached);
    const bool batch_one_differs = sp.batch_multiplier == 1 && (eager_copies || config.method == Method::kGrpo);
    // DeepSpeed's ZeRO optimizer wraps the model on one GPU too: its fp32 master partition (the
    // whole of it), its buckets and its fp32 gradient step are there with dp = 1 (the sharding
    // rules divide by 1). FSDP on one GPU runs as NO_SHARD (torch switches FULL_SHARD over).
    const bool multi = config.parallel.world_size() > 1 || config.parallel.offload_optimizer ||
                       config.parallel.offload_params || zero_family(config.parallel.sharding);
    // Sliding-window layers under SDPA: transformers materializes their mask only from s =
    // sliding_window on, so those lengths get programs of their own (docs/formulas.md#sliding-window-attention).
    // Gemma 3 with images keeps every mask at every length: one program.
    // So does a bidirectional Gemma 3 (EmbeddingGemma): its or_mask_function keeps
    // create_causal_mask from ever skipping the mask (docs/formulas.md#embeddinggemma).
    sp.sdpa_full_mask = sp.attn == AttnImpl::kSdpa &&
                        (model.bidirectional || (model.vision.kind == VisionKind::kSiglip && images.images > 0));
    sp.sdpa_sliding_mask = sp.sdpa_full_mask;
    const bool window_differs = sp.attn == AttnImpl::kSdpa && model.sliding_window > 0 && !sp.sdpa_full_mask;
    // Where every length has both kinds of mask (eager's two additive masks; SDPA given a mask
    // for every layer), each layer's checkpoint holds its own kind's: the full mask lives until
    // the lowest full layer's backward, so the reduced models repeat whole periods there too
    // (docs/formulas.md#extrapolation).
    const bool masks_always =
        model.mixes_attention_kinds() && (sp.attn == AttnImpl::kEager || (sp.sdpa_full_mask && sp.sdpa_sliding_mask));
    if (window_differs) impl->window_from = model.sliding_window;
    impl->scan_chunk = sim::scan_chunk(model);
    // The classes simulated (the others copy one): cls % 2 == 0 is b == 1, cls >= 2 s >= window.
    auto pb = std::make_shared<ProgramBuild>();
    pb->sp = sp;
    pb->batch_one_differs = batch_one_differs;
    pb->window_differs = window_differs;
    pb->multi = multi;
    pb->pipelined = pipelined;
    if (images.images > 0) pb->vision_layers = model.vision.depth + model.vision.global_depth;
    for (int cls = 0; cls < kClasses; ++cls)
      if ((batch_one_differs || cls % 2 == 1) && (window_differs || cls < 2)) pb->classes.push_back(cls);
    // The distinct stages (ranks whose simulation would be the same share one) and, for each,
    // the decoder layers its reduced models simulate, without and with the sliding masks.
    std::vector<ProgramBuild::StageWork>& stages = pb->stages;
    std::map<std::vector<int>, std::size_t> sim_of;
    for (const auto& rk : ranks) {
      std::array<SimulatedLayers, 2> simulated;
      for (int win = 0; win < (window_differs ? 2 : 1); ++win)
        simulated[static_cast<std::size_t>(win)] =
            simulated_layers(model, rk.first_layer, rk.layers, config.simulate_every_layer, win == 1 || masks_always,
                             config.gradient_checkpointing ? config.checkpoint_every : 1);
      std::vector<int> key{rk.embedding, rk.head, std::min(rk.layers, 4)};
      for (int l : simulated[0].r3) key.push_back(model.moe.is_moe_layer(l) ? 1 : 0);
      if (config.gradient_checkpointing && config.checkpoint_every > 1)  // which simulated layers are checkpointed
        for (const auto* layers : {&simulated[0].r3, &simulated[0].r4}) {
          key.push_back(-static_cast<int>(layers->size()) - 1);
          for (int l : *layers) key.push_back((l + 1) % config.checkpoint_every == 0 ? 1 : 0);
        }
      if (window_differs || masks_always) {  // where the full-attention layers fall in the windowed runs
        const SimulatedLayers& windowed = simulated[window_differs ? 1 : 0];
        for (const auto* layers : {&windowed.r3, &windowed.r4}) {
          key.push_back(-static_cast<int>(layers->size()) - 1);
          for (int l : *layers) key.push_back(model.is_sliding_layer(l) ? 1 : 0);
        }
      }
      std::vector<int> stage_key = key;
      stage_key.push_back(rk.layers);
      const auto [it, added] = sim_of.try_emplace(std::move(stage_key), stages.size());
      impl->ranks.push_back({rk, it->second});
      if (added) stages.push_back({rk, std::move(simulated), std::move(key)});
    }
    impl->sims.resize(stages.size());
    // Every stage kind's runs exist before any is filled: each half fills its own classes' slots.
    for (const auto& w : stages) pb->runs_of.try_emplace(w.key);
    impl->build = std::move(pb);
    // The half of the config's own sequence length now (its first class's reduced model gives
    // the stages' parameters); the other when a length there is first evaluated.
    impl->ensure(window_differs && config.sequence_length() >= model.sliding_window ? 2 : 0);
    std::int64_t trainable_all = 0;
    for (const auto& r : impl->ranks) trainable_all += impl->sims[r.sim].trainable;
    // A last stage's own copy of tied embeddings is not a second trainable parameter of the model.
    std::int64_t trainable = trainable_all;
    if (pipelined && model.tie_word_embeddings && !config.lora.enabled)
      trainable -= model.vocab_size * model.hidden_size;
    const ShardPlan& first_shard = impl->sims[impl->ranks.front().sim].shard;

    impl->params.counts = impl->programs->counts(model);
    impl->params.total = impl->params.counts.total;
    impl->params.trainable = trainable;
    if (config.device == Device::kCpu)
      impl->assumptions.push_back("cpu: PyTorch 1.13 behaviour (single-tensor optimizers, eager attention)");
    if (config.parallel.megatron_core)
      impl->assumptions.push_back(
          "Megatron-Core: vocabulary-parallel embedding, output layer and loss, pipeline outputs freed after the "
          "send; the layers themselves are simulated as Hugging Face's modules (Transformer Engine's fused kernels "
          "are not modelled)");
    if (config.parallel.fsdp_mixed_precision)
      impl->assumptions.push_back(fmt::format(
          "FSDP MixedPrecisionPolicy: fp32 sharded parameters, gradients and optimizer states; each layer gathered "
          "and computed in {0} (counted as {0} shards, {0} gradients and an fp32 master copy: the same bytes after "
          "backward, more before)",
          to_string(config.torch_dtype)));
    if (model.is_modernbert())
      impl->assumptions.push_back(fmt::format(
          "ModernBERT: {}; {}", sp.attn == AttnImpl::kFlashAttention2
                                    ? "flash_attention_2 on unpadded batches of full sequences"
                                    : "padded batches with a global and a local (b, 1, s, s) additive mask in the model's dtype",
          config.device == Device::kCpu ? "its modules run eagerly (transformers does not compile on the CPU)"
          : model.reference_compile == false
              ? "its modules run eagerly (reference_compile false), as modelled"
              : fmt::format("reference_compile {}: transformers compiles the MLP, embeddings and MLM head, which then "
                            "save less than the eager modules modelled here (an upper bound; reference_compile false "
                            "in config.json runs the modelled step exactly)",
                            model.reference_compile ? "true" : "unset (on where triton is installed)")));
    if (config.quant.load_in_4bit && first_shard.fsdp && first_shard.shard_params &&
        (!config.quant.quant_storage || dtype_size(*config.quant.quant_storage) != dtype_size(config.torch_dtype)))
      impl->assumptions.push_back(
          "FSDP cannot flatten bitsandbytes' uint8 4-bit storage with the model's other parameters; memplan assumes "
          "bnb_4bit_quant_storage = torch_dtype (the FSDP-QLoRA setup), which shards the 4-bit weights");
    if (config.loss_kernel != LossKernel::kEager && sp.loss_kernel == LossKernel::kEager)
      impl->warnings.push_back(fmt::format(
          "loss kernel '{}' is modelled for decoders with their LM head only (SFT; Liger also for DPO and GRPO); the "
          "{} loss is estimated as eager",
          to_string(config.loss_kernel),
          model.is_encoder() ? "encoder" : model.decoder_embedding ? "embedding model's" : to_string(config.method)));
    if (!model.vision.enabled() && (config.vision.image_height > 0 || config.vision.train_vision_tower ||
                                    config.vision.train_projector))
      impl->warnings.push_back("the image size and vision-tower settings are ignored: the model has no vision tower");
    if (model.vision.kind == VisionKind::kMllama && images.images > 0) {
      const VisionSpec& v = model.vision;
      impl->assumptions.push_back(fmt::format(
          "Llama 3.2 Vision: {} image(s) per sequence, each {} tiles of {}x{} pixels ({:L} positions through the frozen "
          "tower, {:L} image tokens read by each of the {} cross-attention layers; {}); projector {} "
          "(--images, --train-projector)",
          images.images, v.max_num_tiles, v.image_size, v.image_size, images.grid.patches,
          v.max_num_tiles * v.tile_positions(), model.cross_attention_layers.size(),
          !impl->sims.front().extrapolated
              ? std::string("every layer simulated")
              : fmt::format("{} layers simulated, the repeating cross-attention period extrapolated to {}",
                            impl->sims.front().simulated_layers, model.num_layers),
          config.vision.train_projector ? "trained" : "frozen"));
      if (config.vision.image_height > 0)
        impl->warnings.push_back(fmt::format(
            "the image size has no effect on Llama 3.2 Vision: every image is packed as {} tiles of {}x{}",
            v.max_num_tiles, v.image_size, v.image_size));
      if (config.vision.train_projector && config.gradient_checkpointing && config.reentrant_checkpointing())
        impl->warnings.push_back(
            "a trained projector with reentrant gradient checkpointing fails in PyTorch (\"Trying to backward through the "
            "graph a second time\"): every cross-attention layer's recomputation backpropagates into the shared "
            "projector output; use gradient_checkpointing_kwargs {\"use_reentrant\": false}");
    } else if (model.vision.enabled()) {
      const VisionSpec& v = model.vision;
      impl->assumptions.push_back(
          images.images == 0
              ? fmt::format("vision-language model ({}): text-only batches, the vision tower's weights loaded but not run",
                            v.model_type)
              : fmt::format("vision-language model ({}): {} image(s) per sequence at {}x{} after resizing, {:L} patches "
                            "through the tower and {:L} image tokens in the sequence each; vision tower {}, projector {} "
                            "(--images, --image-size, --train-vision-tower, --train-projector)",
                            v.model_type, images.images, images.grid.width, images.grid.height, images.grid.patches,
                            sequence_tokens(v, images.grid), config.vision.train_vision_tower ? "trained" : "frozen",
                            config.vision.train_projector ? "trained" : "frozen"));
      if (v.kind == VisionKind::kLlama4 && images.images > 0) {
        const std::int64_t side = v.image_size / v.patch_size;
        impl->assumptions.push_back(fmt::format(
            "Llama 4 images: {}x{} tiles of {} px (Llama4ImageProcessorFast, max_patches 16) and a global tile when "
            "there are several, {} tower rows and {} features per tile after the pixel shuffle; pixel_values in the "
            "tower's dtype{}",
            images.grid.rows / side, images.grid.cols / side, v.image_size, side * side + 1,
            (side / v.spatial_merge_size) * (side / v.spatial_merge_size),
            sp.loss_index_copy && config.method == Method::kSft
                ? "; Llama4ForConditionalGeneration's own loss (a boolean-indexed copy of the shifted logits, no fp32 "
                  "upcast)"
                : ""));
        if (config.vision.train_vision_tower && config.gradient_checkpointing && config.reentrant_checkpointing())
          impl->warnings.push_back(
              "Llama 4's vision layers get no gradient under reentrant gradient checkpointing: Llama4VisionEncoder "
              "passes hidden_state as a keyword argument, so torch.utils.checkpoint runs them without a graph "
              "(transformers 4.57); only layernorm_post and the pixel-shuffle adapter train. Use "
              "gradient_checkpointing_kwargs {\"use_reentrant\": false} to train the tower");
      }
    }
    if (model.audio.enabled())  // Gemma 4 E2B / E4B (docs/models.md#gemma-4), Gemma 3n (#gemma-3n)
      impl->assumptions.push_back(fmt::format(
          "audio tower ({}, {} Conformer layers): loaded and counted, never run: text-only batches; audio "
          "fine-tuning is not modelled",
          model.altup_inputs > 0 ? "Gemma 3n" : "Gemma 4", model.audio.depth));
    if (model.sliding_window > 0 && sp.attn == AttnImpl::kSdpa) {
      int sliding = 0;
      for (int l = 0; l < model.num_layers; ++l) sliding += model.is_sliding_layer(l) ? 1 : 0;
      impl->assumptions.push_back(
          sp.sdpa_full_mask && model.bidirectional
              ? fmt::format("bidirectional attention (use_bidirectional_attention): {} of {} layers attend within {:L} "
                            "tokens of each side; transformers gives SDPA every layer's (b, 1, s, s) mask at any length, "
                            "so each layer saves a dense copy of it and full-head K/V for backward "
                            "(docs/formulas.md#embeddinggemma)",
                            sliding, model.num_layers, model.sliding_window - 1)
          : model.attention_chunk_size > 0
              ? fmt::format("chunked attention (Llama 4): {} of {} layers attend within {:L}-token chunks; from a "
                            "sequence of {:L} tokens transformers gives SDPA their (b, 1, s, s) mask, and each of them "
                            "saves a dense copy of it and full-head K/V for backward; below it they run as causal "
                            "(docs/models.md#llama-4-chunked)",
                            sliding, model.num_layers, model.attention_chunk_size, model.attention_chunk_size)
          : sp.sdpa_full_mask
              ? fmt::format("sdpa with images: the token_type_ids image blocks keep every layer's (b, 1, s, s) mask, "
                            "so each of the {} layers saves a dense copy of it and full-head K/V for backward "
                            "(docs/formulas.md#sliding-window-attention)",
                            model.num_layers)
              : fmt::format("sliding-window attention: {} of {} layers attend over {:L} tokens; from a sequence of "
                            "{:L} tokens transformers gives SDPA their (b, 1, s, s) mask, and each of them saves a dense "
                            "copy of it and full-head K/V for backward (flash_attention_2 needs neither; "
                            "docs/formulas.md#sliding-window-attention)",
                            sliding, model.num_layers, model.sliding_window, model.sliding_window));
    }
    if (model.decoder_embedding) {
      const bool llm2vec = model.embedding_library == EmbeddingLibrary::kLlm2Vec;
      impl->assumptions.push_back(fmt::format(
          "embedding model: {} loads the decoder as AutoModel (no LM head) and pools ({}){}; {}; batches without "
          "padding; use_cache off (a K/V cache is a copy the attention keeps anyway under SDPA with GQA; "
          "docs/formulas.md#decoder-embeddings)",
          llm2vec ? "LLM2Vec" : "sentence-transformers", to_string(model.pooling),
          model.st_dense.empty() ? std::string()
                                 : fmt::format(", then {} Dense module(s), trained with the model", model.st_dense.size()),
          !config.contrastive.enabled() ? std::string("one text per example")
          : config.contrastive.cached
              ? fmt::format("CachedMultipleNegativesRankingLoss over {} texts per example, embedded in mini-batches of {} "
                            "(GradCache: without grad, then again with grad in the loss's backward)",
                            config.contrastive.texts_per_example, config.contrastive.mini_batch_size)
              : fmt::format("{} over {} texts per example, one forward per text column",
                            llm2vec ? "HardNegativeNLLLoss" : "MultipleNegativesRankingLoss",
                            config.contrastive.texts_per_example)));
      if (config.liger_kernels)
        impl->warnings.push_back("Liger kernels are not modelled for an embedding model (a SentenceTransformer is "
                                 "not the transformers model Liger patches); estimated without them");
    }
    if (model.is_encoder()) {
      impl->assumptions.push_back(fmt::format(
          "encoder: {} head{}; batches without padding{}",
          model.head == EncoderHead::kPooling ? fmt::format("pooling ({})", to_string(model.pooling)) : to_string(model.head),
          config.contrastive.enabled()
              ? fmt::format(", {} texts per example, {}", config.contrastive.texts_per_example,
                            config.contrastive.cached
                                ? fmt::format("embedded in mini-batches of {} (cached MNRL)", config.contrastive.mini_batch_size)
                                : std::string("one forward per text column (sentence-transformers)"))
              : "",
          model.is_modernbert() || model.eager_attention_only() ? "" : " (no SDPA mask)"));
      if (model.is_nomic_bert())
        impl->assumptions.push_back(fmt::format(
            "NomicBERT (nomic-ai's remote code): eager attention{}; gradient checkpointing is non-reentrant whatever "
            "gradient_checkpointing_kwargs say (docs/formulas.md#nomicbert)",
            model.learned_positions ? "" : ", rotary embeddings applied out of place and q/k/v re-stacked"));
      if (model.is_deberta())
        impl->assumptions.push_back(
            model.relative_span > 0
                ? fmt::format("DeBERTa: eager disentangled attention (transformers has no SDPA/flash path for it); "
                              "every layer keeps its c2p/p2c products, (b x heads, s, {}) each, for gather's backward "
                              "(docs/formulas.md#deberta)",
                              2 * model.relative_span)
                : std::string("DeBERTa: eager attention (transformers has no SDPA/flash path for it)"));
      if (model.is_deberta() && model.relative_span > 0 && config.gradient_checkpointing &&
          config.reentrant_checkpointing() && !config.lora.enabled)
        impl->warnings.push_back(
            "DeBERTa with reentrant gradient checkpointing and trained rel_embeddings fails in PyTorch (\"Trying to "
            "backward through the graph a second time\"): every layer's recomputation backpropagates into the shared "
            "LayerNorm-ed relative embeddings; use gradient_checkpointing_kwargs {\"use_reentrant\": false}");
    }
  } catch (const SizeOverflow& ex) {
    return make_error(ErrorCode::kOverflow, ex.what(), "the model or batch is far too large");
  } catch (const std::logic_error& ex) {
    return make_error(ErrorCode::kUnsupported, fmt::format("internal: {}", ex.what()),
                      "please report this configuration");
  }
  return Estimator(std::move(impl));
}

namespace {

// The worst GPU at (b, s): every pipeline rank's candidates, plus the activations of the other
// micro-batches its schedule holds (docs/formulas.md#pipeline-parallelism). Context parallelism
// evaluates the local sequence, s / cp.
struct Worst {
  std::int64_t peak = -1;
  const Candidate* cand = nullptr;
  const RankSim* rank = nullptr;
  std::int64_t in_flight = 0;  // bytes of the other micro-batches on that rank
  std::array<std::int64_t, 5> phase_peak{-1, -1, -1, -1, -1};
};

std::int64_t local_seq(const TrainingConfig& c, std::int64_t s) {
  const std::int64_t cp = std::max(1, c.parallel.context_parallel);
  return (s + cp - 1) / cp;
}

// Where a rank's sizes are evaluated: its local sequence, and that padded to the scans' chunk.
sim::Point local_point(const TrainingConfig& c, std::int64_t b, std::int64_t s, std::int64_t chunk) {
  return sim::point(b, local_seq(c, s), chunk);
}

// Which program answers for (b, s) (StageSim::candidates).
std::size_t program_class(std::int64_t b, std::int64_t s, std::int64_t window_from) {
  return (b == 1 ? 0 : 1) + (window_from > 0 && s >= window_from ? 2 : 0);
}

// Whether a micro-batch can find every .grad already allocated: a later one of an accumulation
// step, or any after the first step when zero_grad zeroes instead of freeing
// (docs/formulas.md#zero-grad-set-to-none).
bool holds_grads(const TrainingConfig& c, std::int64_t accum) { return accum > 1 || c.zero_grad_keeps_grads; }

Worst evaluate(const std::vector<StageSim>& sims, const std::vector<RankSim>& ranks, const TrainingConfig& c,
               std::int64_t window_from, std::int64_t chunk, std::int64_t b, std::int64_t s, std::int64_t accum,
               std::optional<Phase> only) {
  Worst w;
  const sim::Point at = local_point(c, b, s, chunk);
  const std::size_t cls = program_class(b, s, window_from);
  const std::size_t acc = holds_grads(c, accum) ? 1 : 0;
  for (const auto& rk : ranks) {
    const StageSim& st = sims[rk.sim];
    std::int64_t held = 0;
    if (ranks.size() > 1) {
      const std::int64_t k = in_flight_chunks(c.parallel, rk.rank.rank, rk.rank.chunks, accum);
      const std::int64_t v = rk.rank.chunks;
      const std::int64_t r = total(st.retained[cls]).eval(at);
      held = (checked_mul(r, std::max<std::int64_t>(0, k - v)) + v - 1) / v;
    }
    for (const auto& cand : st.candidates[acc][cls]) {
      // No micro-batch is in flight at the optimizer step (the pipeline has drained).
      const Phase ph = phase_of(cand.segment);
      const std::int64_t h = ph == Phase::kForward || ph == Phase::kBackward ? held : 0;
      const std::int64_t v = checked_add(cand.total.eval(at), h);
      auto& pp = w.phase_peak[static_cast<std::size_t>(phase_of(cand.segment))];
      pp = std::max(pp, v);
      if (only && phase_of(cand.segment) != *only) continue;
      if (v > w.peak) {
        w.peak = v;
        w.cand = &cand;
        w.rank = &rk;
        w.in_flight = h;
      }
    }
  }
  return w;
}

}  // namespace

Result<Bytes> Estimator::peak_bytes(std::int64_t b, std::int64_t s) const {
  return peak_bytes(b, s, impl_->config.grad_accum);
}

Result<Bytes> Estimator::peak_bytes(std::int64_t b, std::int64_t s, std::int64_t accum) const {
  if (b < 1 || s < 1) return make_error(ErrorCode::kInvalidArgument, "batch and seq-len must be positive");
  if (impl_->config.method == Method::kGrpo && s <= impl_->config.grpo.max_prompt_length)
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("GRPO sequence length {} leaves no room for a completion after the {}-token prompt",
                                  s, impl_->config.grpo.max_prompt_length));
  try {
    impl_->ensure(program_class(b, s, impl_->window_from));
    if (impl_->ranks.size() == 1) {  // the common case, kept tight
      const auto& cands =
          impl_->sims.front().candidates[holds_grads(impl_->config, accum) ? 1 : 0][program_class(b, s, impl_->window_from)];
      const sim::Point at = local_point(impl_->config, b, s, impl_->scan_chunk);
      std::int64_t best = 0;
      for (const auto& c : cands) best = std::max(best, c.total.eval(at));
      return Bytes::of(best);
    }
    return Bytes::of(std::max<std::int64_t>(0, evaluate(impl_->sims, impl_->ranks, impl_->config, impl_->window_from, impl_->scan_chunk, b, s, accum, std::nullopt).peak));
  } catch (const SizeOverflow& ex) {
    return make_error(ErrorCode::kOverflow, ex.what(), "the batch or sequence length is far too large");
  } catch (const std::logic_error& ex) {  // from the programs of a half built now (build_half)
    return make_error(ErrorCode::kUnsupported, fmt::format("internal: {}", ex.what()),
                      "please report this configuration");
  }
}

Result<Estimate> Estimator::at(std::int64_t b, std::int64_t s) const { return at_impl(b, s, std::nullopt); }

Result<Estimate> Estimator::at_phase(std::int64_t b, std::int64_t s, Phase phase) const {
  return at_impl(b, s, phase);
}

// The lengths of the micro-batches a replay runs (docs/formulas.md#sequence-lengths): the
// first, each one longer than all before it (only those can need new segments: a shorter batch
// fits the blocks a longer one left cached), and the longest again after the optimizer's state
// exists. Fixed lengths: three steps at s (the measured step of tools/measure is the third).
std::vector<std::int64_t> replay_lengths(const SequenceLengths& l, std::int64_t b, std::int64_t s) {
  if (l.histogram.empty()) return {s, s, s};
  double total = 0;
  for (const auto& [len, w] : l.histogram) total += std::max(0.0, w);
  if (!(total > 0)) return {s, s, s};
  std::mt19937_64 rng(0);  // fully specified by the standard: the same draws everywhere
  const auto draw = [&] {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
    double acc = 0;
    for (const auto& [len, w] : l.histogram) {
      acc += std::max(0.0, w);
      if (u < acc) return len;
    }
    return l.histogram.back().first;
  };
  const std::int64_t pad = std::max<std::int64_t>(1, l.pad_to_multiple_of);
  std::vector<std::int64_t> out;
  std::int64_t longest = 0;
  for (std::int64_t k = 0; k < std::max<std::int64_t>(1, l.steps); ++k) {
    std::int64_t m = 1;
    for (std::int64_t i = 0; i < b; ++i) m = std::max(m, draw());
    m = std::min(s, (m + pad - 1) / pad * pad);
    if (out.empty() || m > longest) out.push_back(m);
    longest = std::max(longest, m);
  }
  out.push_back(longest);
  return out;
}

// FSDP1's all-gathers and reduce-scatters on their own streams in the allocator replay
// (docs/formulas.md#allocator-streams): what one decoder-layer unit gathers (its flat parameter,
// padded to a multiple of the shard group), the root unit and one layer's sharded gradient.
// FSDP2, NO_SHARD and parameter offload keep the one-stream replay.
namespace {
sim::FsdpStreams fsdp_streams(const TrainingConfig& c, const ShardPlan& p, int layers,
                              const std::vector<sim::ParamRec>& params) {
  sim::FsdpStreams f;
  if (!fsdp(c) || c.parallel.fsdp_version != 1 || !p.shard_params || p.offload_params || layers <= 0) return f;
  const std::int64_t n = std::max(1, p.shard_over);
  f.enabled = true;
  f.layers = layers;
  f.layer_bytes = (p.layer_param_bytes + n - 1) / n * n;
  f.root_bytes = (p.root_param_bytes + n - 1) / n * n;
  // LoRA trains only inside the layers; a full fine-tune also trains the root's parameters.
  const std::int64_t layer_trainable =
      std::max<std::int64_t>(0, p.trainable_bytes - (c.lora.enabled ? 0 : std::min(p.root_param_bytes, p.trainable_bytes))) / layers;
  f.grad_shard_bytes = (layer_trainable + n - 1) / n;
  f.backward_prefetch = !fsdp_no_backward_prefetch(c);
  f.reshard_after_forward = !p.keep_gathered;
  f.inflight_limit = 2;  // limit_all_gathers=True, FSDP's and accelerate's default
  // The model is on the CPU when FSDP1 wraps it (HF Trainer and accelerate load it there; Answer.AI's
  // low_memory keeps it there on rank 0): each unit is moved, broadcast (sync_module_states:
  // TrainingArguments' fsdp_config default "true"), flattened and sharded on the GPU, layers first,
  // the root last.
  f.construction.assign(static_cast<std::size_t>(layers) + 1, {});
  for (const auto& q : params) {
    const std::size_t unit = q.sim_layer >= 0 && q.sim_layer < layers ? static_cast<std::size_t>(q.sim_layer)
                                                                       : static_cast<std::size_t>(layers);
    f.construction[unit].push_back(checked_mul(q.numel, sim::esize(q.dt)));
  }
  f.shard_over = static_cast<int>(n);
  f.free_unsharded_grads = true;  // the replay's one micro-batch per step is the synchronizing one
  return f;
}
}  // namespace

std::optional<sim::ReplayResult> Estimator::Impl::replay(const RankSim& rank, std::int64_t b, std::int64_t s,
                                                         std::int64_t capacity) {
  try {
    const std::size_t cls = program_class(b, s, window_from);
    ensure(cls);
    const PipelineRank& rk = build->stages[rank.sim].rank;
    sim::ProgramSpec every = stage_program(build->sp, rk, static_cast<int>(build->class_of(static_cast<int>(cls))), config);
    every.model_layers.clear();
    every.layer_slots.clear();
    for (int l = rk.first_layer; l < rk.first_layer + rk.layers; ++l) every.model_layers.push_back(l);
    every.trace = true;
    const auto run = programs->run(every);
    const sim::AllocTrace& trace = run->trace;
    if (trace.ops.empty()) return std::nullopt;
    std::vector<sim::ReplayStep> steps;
    for (const std::int64_t len : replay_lengths(config.lengths, b, s)) {
      const sim::Point at = local_point(config, b, len, scan_chunk);
      steps.push_back({at.b, at.s, at.p});
    }
    // The optimizer's state and temporaries per byte of trainable parameter (optimizer_model).
    const StageSim& st = sims[rank.sim];
    sim::OptimizerAllocations opt;
    std::int64_t param_bytes = 0, values = 0;
    for (const auto& p : st.opt_params) {
      param_bytes += p.numel * p.elem_bytes * p.count;
      values += p.numel * p.count;
    }
    if (param_bytes > 0) {
      opt.state_ratio = static_cast<double>(st.opt.state_bytes) / static_cast<double>(param_bytes);
      // Adam's two fp32 moments are 8 bytes per value; one-state optimizers (SGD momentum, Lion,
      // Adagrad) 4 or fewer.
      opt.state_tensors = st.opt.state_bytes == 0 ? 0 : (st.opt.state_bytes > 5 * values ? 2 : 1);
      const std::string& impl = st.opt.implementation;
      opt.per_param_temps = impl.find("foreach") == std::string::npos && impl.find("fused") == std::string::npos;
      if (opt.per_param_temps) {
        std::int64_t largest = 0;
        for (const auto& p : st.opt_params) largest = std::max<std::int64_t>(largest, p.numel * p.elem_bytes);
        opt.temp_ratio = largest > 0 ? static_cast<double>(st.opt.temp_bytes) / static_cast<double>(largest) : 0;
      } else {
        opt.temp_ratio = static_cast<double>(st.opt.temp_bytes) / static_cast<double>(param_bytes);
      }
    }
    opt.keep_grads = config.zero_grad_keeps_grads;
    // Each rank steps its shard (ZeRO, FSDP); an offloaded optimizer steps on the CPU (DeepSpeed's
    // CPU Adam, FSDP's CPU offload): no state or temporary on the GPU.
    if (st.shard.shard_optim) opt.shard_over = std::max(1, st.shard.shard_over);
    if (st.shard.offload_optimizer) opt.state_tensors = 0, opt.temp_ratio = 0;
    sim::CachingAllocatorSettings settings;
    settings.expandable_segments = config.allocator.expandable_segments;
    if (config.allocator.max_split_size_mb) settings.max_split_size = *config.allocator.max_split_size_mb << 20;
    settings.capacity = capacity;
    return sim::replay(trace, steps, opt, settings, static_cast<int>(std::min<std::int64_t>(config.empty_cache_steps, 1 << 20)),
                       fsdp_streams(config, st.shard, rk.layers, run->params));
  } catch (const SizeOverflow&) {
    return std::nullopt;
  }
}

std::optional<Estimator::AllocatorReplay> Estimator::replay_allocator(std::int64_t b, std::int64_t s,
                                                                      std::optional<Bytes> capacity) const {
  if (impl_->config.device != Device::kCuda) return std::nullopt;
  if (!peak_bytes(b, s)) return std::nullopt;
  const Worst w = evaluate(impl_->sims, impl_->ranks, impl_->config, impl_->window_from, impl_->scan_chunk, b, s,
                           impl_->config.grad_accum, std::nullopt);
  if (w.rank == nullptr) return std::nullopt;
  const auto r = impl_->replay(*w.rank, b, s, capacity ? capacity->count() : std::numeric_limits<std::int64_t>::max());
  if (!r) return std::nullopt;
  return AllocatorReplay{Bytes::of(r->peak_allocated), Bytes::of(r->peak_reserved), r->out_of_memory};
}

Result<Estimate> Estimator::at_impl(std::int64_t b, std::int64_t s, std::optional<Phase> only) const {
  TrainingConfig c = impl_->config;
  c.micro_batch = b;
  c.seq_len = s;
  if (auto v = validate(c); !v) return v.error();
  if (auto p = peak_bytes(b, s); !p) return p.error();
  try {
    Estimate e;
    const Worst w = evaluate(impl_->sims, impl_->ranks, c, impl_->window_from, impl_->scan_chunk, b, s, c.grad_accum, only);
    if (w.cand == nullptr)
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("phase '{}' does not run in this configuration", to_string(*only)));
    const std::int64_t best = w.peak;
    const StageSim& st = impl_->sims[w.rank->sim];
    e.peak = Bytes::of(best);
    e.peak_phase = phase_of(w.cand->segment);
    for (int ph = 0; ph < 5; ++ph)
      if (w.phase_peak[static_cast<std::size_t>(ph)] >= 0 && (!only || w.phase_peak[static_cast<std::size_t>(ph)] <= best))
        e.phases.push_back({static_cast<Phase>(ph), Bytes::of(w.phase_peak[static_cast<std::size_t>(ph)])});
    const sim::Point at = local_point(c, b, s, impl_->scan_chunk);
    const CatVec cats = categories(*w.cand, st.base);
    for (int i = 0; i < sim::kNumCats; ++i) {
      std::int64_t v = cats[static_cast<std::size_t>(i)].eval(at);
      if (static_cast<Cat>(i) == Cat::kInFlight) v += w.in_flight;
      const std::string name = sim::cat_name(static_cast<Cat>(i));
      if (v != 0) e.components.push_back({name, Bytes::of(v), placement_of(st.shard, name), ""});
    }
    if (impl_->ranks.size() > 1) {
      const PipelineRank& r = w.rank->rank;
      e.pipeline_rank = r.rank;
      e.pipeline_ranks = static_cast<int>(impl_->ranks.size());
      const std::int64_t k = in_flight_chunks(c.parallel, r.rank, r.chunks, c.grad_accum);
      e.assumptions.push_back(fmt::format(
          "pipeline: the worst GPU is stage {} of {} ({} decoder layers{}{}), holding the activations of {} "
          "({} schedule, {} micro-batches per step; {})",
          r.rank, impl_->ranks.size(), r.layers, r.embedding ? ", the embedding" : "", r.head ? ", the head and loss" : "",
          r.chunks > 1 ? fmt::format("{} model-chunk micro-batches ({} chunks per GPU)", k, r.chunks)
                       : fmt::format("{} micro-batch(es)", k),
          to_string(c.parallel.pp_schedule), c.grad_accum,
          c.parallel.megatron_core ? "stage outputs freed after their send, as Megatron-Core does"
                                   : "stage outputs kept until their backward, as torch.distributed.pipelining does"));
    }
    std::optional<sim::ReplayResult> replayed;
    if (impl_->config.device == Device::kCuda) replayed = impl_->replay(*w.rank, b, s);
    add_runtime_overhead(impl_->config, e, replayed);
    if (st.opt.paged_bytes > 0 && impl_->config.device == Device::kCuda) {
      // bitsandbytes paged states: unified memory outside the allocator, so outside the peak;
      // resident on the GPU while there is room, evicted to the CPU under pressure.
      std::int64_t paged = st.opt.paged_bytes;
      if (st.shard.shard_optim) paged = (paged + st.shard.shard_over - 1) / st.shard.shard_over;
      if (st.shard.offload_optimizer) paged = 0;
      e.overhead.push_back({"paged_optimizer_states", Bytes::of(paged), placement_of(st.shard, "optimizer_states"),
                            "bitsandbytes paged optimizer states (cudaMallocManaged): not in max_memory_allocated, "
                            "evicted to CPU memory when the GPU runs out"});
      e.total += Bytes::of(paged);
    }
    e.params = impl_->params;
    e.assumptions.insert(e.assumptions.begin(), impl_->assumptions.begin(), impl_->assumptions.end());
    e.warnings = impl_->warnings;
    return e;
  } catch (const SizeOverflow& ex) {
    return make_error(ErrorCode::kOverflow, ex.what(), "the batch or sequence length is far too large");
  }
}

std::int64_t image_tokens_per_sequence(const ModelSpec& model, const TrainingConfig& config) {
  const ImagePlan p = image_plan(model, config);
  return checked_mul(p.images, sequence_tokens(model.vision, p.grid));
}

Result<Estimate> estimate(const ModelSpec& model, const TrainingConfig& config) {
  auto est = Estimator::create(model, config);
  if (!est) return est.error();
  return est->at(config.micro_batch, config.sequence_length());
}

}  // namespace memplan

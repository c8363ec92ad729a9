#include "cli/training_flags.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <set>
#include <tuple>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/exit_codes.hpp"
#include "cli/plan_flags.hpp"
#include "io/allocator_env.hpp"
#include "io/fs.hpp"
#include "io/model/model_source.hpp"
#include "io/stack_source.hpp"
#include "memplan/stack.hpp"
#include "memplan/text.hpp"
#include "report/estimate_render.hpp"

namespace memplan::cli {

namespace {

io::Origin flag_origin(const std::string& name) { return io::Origin{io::OriginKind::kFlag, {}, name}; }

// Splits "a,b" and repeated values into one list, trimming blanks.
std::vector<std::string> split_list(const std::vector<std::string>& raw) {
  std::vector<std::string> out;
  for (const auto& item : raw) {
    std::size_t start = 0;
    while (start <= item.size()) {
      const std::size_t comma = item.find(',', start);
      const std::string part = trim(item.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (!part.empty()) out.push_back(part);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

// --image-size: "WxH" (width x height, as image tools print it) or "N" for a square.
Result<std::pair<std::int64_t, std::int64_t>> parse_image_size(const std::string& text) {
  const auto number = [](std::string_view part, std::int64_t& out) {
    if (part.empty() || part.size() > 6) return false;
    const auto* end = part.data() + part.size();
    const auto r = std::from_chars(part.data(), end, out);
    return r.ec == std::errc() && r.ptr == end && out > 0;
  };
  const std::string t = trim(text);
  const std::size_t x = t.find_first_of("xX*");
  std::int64_t w = 0, h = 0;
  const bool ok = x == std::string::npos ? number(t, w) && (h = w, true)
                                         : number(std::string_view(t).substr(0, x), w) &&
                                               number(std::string_view(t).substr(x + 1), h);
  if (!ok)
    return make_error(ErrorCode::kInvalidArgument, fmt::format("'{}' is not an image size", text),
                      "write WIDTHxHEIGHT in pixels, e.g. 1024x768, or one number for a square");
  return std::pair{w, h};
}

Error flag_error(const std::string& flag, Error e) {
  e.message = flag + ": " + e.message;
  return e;
}

}  // namespace

bool flag_given(const TrainingFlags& f, const std::string& name) {
  if (f.app == nullptr) return false;
  const CLI::Option* o = f.app->get_option_no_throw(name);
  return o != nullptr && o->count() > 0;
}

void read_integers_as_decimal(CLI::App& app) {
  static const CLI::Validator decimal(
      [](std::string& s) -> std::string {
        const std::string t = trim(s);
        std::size_t i = t.size() > 0 && (t[0] == '-' || t[0] == '+') ? 1 : 0;
        if (i == t.size() || t.find_first_not_of("0123456789", i) != std::string::npos)
          return fmt::format("expected a decimal integer, got \"{}\"", escape_control(s));
        const std::string sign = t[0] == '-' ? "-" : "";
        while (i + 1 < t.size() && t[i] == '0') ++i;  // 010 is ten, not octal eight
        s = sign + t.substr(i);
        return {};
      },
      "", "decimal");
  for (CLI::Option* o : app.get_options()) {
    const std::string type = o->get_type_name();
    if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0) o->transform(decimal);
  }
  for (CLI::App* sub : app.get_subcommands(std::function<bool(CLI::App*)>{})) read_integers_as_decimal(*sub);
}

void add_training_flags(CLI::App& app, TrainingFlags& f) {
  f.app = &app;
  app.add_option("--model", f.model, "Model: HF id, catalog name, path to config.json, or cached HF model")
      ->group("Model");
  app.add_option("--model-params", f.model_params, "Bare parameter count (e.g. 7B): assumes a Llama-style shape")
      ->group("Model");
  for (const auto& [flag, field, what] :
       {std::tuple<const char*, std::int64_t*, const char*>{"--hidden-size", &f.hidden_size, "hidden size (d_model)"},
        {"--num-hidden-layers", &f.num_hidden_layers, "number of layers"},
        {"--num-attention-heads", &f.num_attention_heads, "attention heads"},
        {"--num-key-value-heads", &f.num_key_value_heads, "key/value heads (default: attention heads)"},
        {"--intermediate-size", &f.intermediate_size, "MLP width"},
        {"--vocab-size", &f.vocab_size, "vocabulary size"},
        {"--head-dim", &f.head_dim, "head dimension (default: hidden / heads)"}})
    app.add_option(flag, *field, fmt::format("Custom model (no --model): {}, as in config.json", what))
        ->group("Model")
        ->check(CLI::PositiveNumber);
  app.add_option("--method", f.method, "Training method: sft (default), dpo, grpo; orpo, simpo, cpo (no reference model), kto, ipo (with one); lora = sft --use-peft, qlora = lora --load-in-4bit")->group("Training");
  app.add_option("--batch,--per-device-train-batch-size", f.batch, "Per-device micro-batch (sequences)")
      ->group("Training");
  app.add_option("--seq-len,--max-length,--max-seq-length", f.seq_len, "Tokens per sequence (default 1024)")
      ->group("Training");
  app.add_option("--grad-accum,--gradient-accumulation-steps", f.grad_accum, "Gradient accumulation steps")
      ->group("Training");
  app.add_option("--length-histogram", f.length_histogram,
                 "Example lengths LEN:WEIGHT,... (tokens): micro-batches padded to their longest example, "
                 "replayed through the caching allocator for reserved memory")
      ->group("Training");
  app.add_option("--length-steps", f.length_steps, "Micro-batches drawn from --length-histogram (default 1000)")
      ->group("Training")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{10000000}));
  app.add_option("--pad-to-multiple-of", f.pad_to_multiple_of, "Collator padding multiple (default 1)")
      ->group("Training")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  app.add_option("--empty-cache-steps,--torch-empty-cache-steps", f.empty_cache_steps,
                 "torch.cuda.empty_cache() every N steps (HF torch_empty_cache_steps)")
      ->group("Training")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--torch-dtype", f.torch_dtype, "dtype the weights are loaded in: float32 (default), bfloat16, float16")
      ->group("Precision");
  app.add_flag("--bf16", f.bf16, "bf16 autocast mixed precision (HF Trainer --bf16)")->group("Precision");
  app.add_flag("--fp16", f.fp16, "fp16 autocast mixed precision (HF Trainer --fp16)")->group("Precision");
  app.add_option("--optim", f.optim, "Optimizer, by HF name: adamw_torch (default), adamw_torch_fused, adamw_8bit, ...")
      ->group("Optimizer");
  app.add_option("--optim-args", f.optim_args, "Optimizer arguments K=V[,K=V] (momentum=0.9, foreach=false)")
      ->group("Optimizer");
  app.add_flag("--gradient-checkpointing", f.gradient_checkpointing, "Recompute activations layer by layer")
      ->group("Training");
  app.add_option("--use-reentrant", f.use_reentrant,
                 "Checkpointing's use_reentrant, true or false (gradient_checkpointing_kwargs; default false on "
                 "cuda as TRL sets it, true on cpu; LLaMA-Factory's use_reentrant_gc defaults to true)")
      ->group("Training");
  app.add_option("--checkpoint-every", f.checkpoint_every,
                 "With --gradient-checkpointing, checkpoint only every N-th decoder layer (torchtitan "
                 "activation_checkpoint.mode selective, selective_ac_option N; default 1: every layer)")
      ->group("Training");
  app.add_option("--checkpoint-policy", f.checkpoint_policy,
                 "With --gradient-checkpointing, what each checkpointed layer keeps: full (default: its input "
                 "only) or op (torchtitan's per-op selective policy, selective_ac_option op: also every other "
                 "matmul's output and SDPA's output; needs --use-reentrant false)")
      ->group("Training");
  app.add_option("--loss-dtype", f.loss_dtype,
                 "Cross-entropy on float32 logits (default: the upcast transformers and torchtitan do) or on the "
                 "logits' own dtype ('logits': a training loop of one's own without .float())")
      ->group("Training");
  app.add_option("--attn-implementation", f.attn, "eager, sdpa, flash_attention_2 (default: sdpa on cuda, eager on cpu)")
      ->group("Training");
  app.add_flag("--use-peft", f.use_peft, "Train LoRA adapters instead of all weights")->group("PEFT");
  app.add_option("--lora-r", f.lora_r, "LoRA rank (default 16)")->group("PEFT");
  app.add_option("--lora-alpha", f.lora_alpha, "LoRA alpha (default 32)")->group("PEFT");
  app.add_option("--lora-dropout", f.lora_dropout, "LoRA dropout (default 0.05)")->group("PEFT");
  app.add_option("--lora-target-modules", f.lora_targets, "Target module names, or all-linear")->group("PEFT");
  app.add_option("--modules-to-save", f.modules_to_save, "Modules trained in full besides the adapters")->group("PEFT");
  app.add_flag("--load-in-4bit", f.load_in_4bit, "QLoRA: bitsandbytes 4-bit base weights")->group("PEFT");
  app.add_flag("--load-in-8bit", f.load_in_8bit, "bitsandbytes LLM.int8() base weights")->group("PEFT");
  app.add_option("--bnb-4bit-quant-type", f.bnb_quant_type, "nf4 (default) or fp4")->group("PEFT");
  app.add_flag("--use-bnb-nested-quant,--bnb-4bit-use-double-quant", f.double_quant, "4-bit double quantization")
      ->group("PEFT");
  app.add_option("--bnb-4bit-quant-storage,--quant-storage", f.quant_storage,
                 "dtype the 4-bit weights are packed in: uint8 (default) or the weights' 16-bit dtype, which lets "
                 "FSDP shard them (FSDP-QLoRA)")
      ->group("PEFT");
  app.add_option("--kbit-prepare", f.kbit_prepare,
                 "How a quantized model is prepared: freeze_only (current TRL, fms-acceleration), peft_upcast "
                 "(prepare_model_for_kbit_training), trl_legacy (TRL < 0.15); default: from --stack's TRL")
      ->group("PEFT");
  app.add_option("--adapter-dtype", f.adapter_dtype,
                 "dtype of the LoRA adapters: float32 (PEFT's autocast_adapter_dtype), bfloat16, float16 (default: "
                 "what the stack's PEFT/TRL do)")
      ->group("PEFT");
  app.add_option("--device", f.device, "cuda (default) or cpu")->group("Training");
  app.add_option("--stack", f.stack,
                 "Library versions the run uses, NAME==VERSION[,...] (torch, transformers, peft, trl, accelerate, "
                 "bitsandbytes, deepspeed, liger-kernel, vllm, flash-attn, torchao); default: read from the active "
                 "Python environment, then the lock/requirements file beside the config")
      ->group("Stack");
  app.add_option("--launch", f.launch,
                 "The launch script or .env file the run starts from: the allocator settings it exports "
                 "(PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF) apply to the run; a .env beside the config is read too")
      ->group("Stack");
  app.add_option("--python", f.python,
                 "The Python environment the run uses (its python, its folder or its site-packages): its installed "
                 "library versions are read (default: $VIRTUAL_ENV, $CONDA_PREFIX, else python3 on $PATH)")
      ->group("Stack");
  // DPO / GRPO
  app.add_option("--ref-model", f.ref_model, "DPO/GRPO reference: auto (default), copy, none")->group("DPO/GRPO");
  app.add_flag("--precompute-ref-log-probs", f.precompute_ref, "DPO: reference log-probs computed beforehand")
      ->group("DPO/GRPO");
  app.add_flag("--no-concatenated-forward", f.dpo_two_passes, "DPO: chosen and rejected in two passes")
      ->group("DPO/GRPO");
  app.add_option("--num-generations", f.num_generations, "GRPO: completions per prompt (default 8)")->group("DPO/GRPO");
  app.add_option("--max-prompt-length", f.max_prompt_length, "GRPO/DPO prompt tokens (GRPO default 512)")
      ->group("DPO/GRPO");
  app.add_option("--max-completion-length", f.max_completion_length, "GRPO completion tokens (default 256)")
      ->group("DPO/GRPO");
  app.add_option("--beta", f.beta, "GRPO KL weight (0: no reference model)")->group("DPO/GRPO");
  app.add_option("--temperature", f.temperature, "GRPO sampling temperature")->group("DPO/GRPO");
  app.add_flag("--use-vllm", f.use_vllm, "GRPO: generate with vLLM")->group("DPO/GRPO");
  app.add_option("--vllm-mode", f.vllm_mode, "colocate (default with --use-vllm) or server")->group("DPO/GRPO");
  app.add_option("--vllm-gpu-memory-utilization", f.vllm_util, "colocate: GPU fraction vLLM reserves (default 0.3)")
      ->group("DPO/GRPO");
  // Multi-GPU
  app.add_option("--num-gpus", f.num_gpus, "GPUs per node (default 1)")->group("Multi-GPU");
  app.add_option("--nodes", f.nodes, "Nodes (default 1)")->group("Multi-GPU");
  app.add_option("--zero-stage", f.zero_stage, "DeepSpeed ZeRO stage 0-3")->group("Multi-GPU");
  app.add_option("--fsdp", f.fsdp, "FSDP strategy: full_shard, shard_grad_op, hybrid_shard, no_shard")->group("Multi-GPU");
  app.add_option("--fsdp-version", f.fsdp_version,
                 "FSDP implementation: 1 (FullyShardedDataParallel, default) or 2 (fully_shard)")
      ->group("Multi-GPU");
  app.add_flag("--offload-optimizer", f.offload_optimizer, "Offload optimizer states to CPU")->group("Multi-GPU");
  app.add_flag("--offload-params", f.offload_params, "Offload parameters to CPU (ZeRO-3/FSDP)")->group("Multi-GPU");
  app.add_option("--tensor-parallel", f.tensor_parallel, "Tensor-parallel degree (default 1)")->group("Multi-GPU");
  app.add_option("--pipeline-parallel", f.pipeline_parallel, "Pipeline-parallel stages (default 1)")->group("Multi-GPU");
  app.add_option("--pp-schedule", f.pp_schedule, "Pipeline schedule: 1f1b (default), interleaved_1f1b, gpipe, zero_bubble")
      ->group("Multi-GPU");
  app.add_option("--virtual-stages", f.virtual_stages,
                 "Model chunks per GPU for interleaved_1f1b (Megatron virtual_pipeline_model_parallel_size)")
      ->group("Multi-GPU");
  app.add_option("--pp-first-stage-layers", f.pp_first_stage_layers,
                 "Decoder layers on the first pipeline stage (default: an even split)")
      ->group("Multi-GPU");
  app.add_option("--pp-last-stage-layers", f.pp_last_stage_layers,
                 "Decoder layers on the last pipeline stage (default: an even split)")
      ->group("Multi-GPU");
  app.add_option("--pp-layers-per-stage", f.pp_layers_per_stage,
                 "torchtitan's layers_per_stage: stages = ceil((layers + 2) / N), the embedding and head as a layer each")
      ->group("Multi-GPU");
  app.add_flag("--sequence-parallel", f.sequence_parallel,
               "Megatron sequence parallelism with --tensor-parallel: norms and residuals hold seq-len / tp tokens")
      ->group("Multi-GPU");
  app.add_flag("--fsdp-mixed-precision", f.fsdp_mixed_precision,
               "FSDP2 MixedPrecisionPolicy (torchtitan): fp32 sharded parameters, gradients and states, layers computed "
               "in --torch-dtype")
      ->group("Multi-GPU");
  app.add_option("--fsdp-reshard-after-forward", f.fsdp_reshard_after_forward,
                 "FSDP2's reshard_after_forward: true (default) or false (every layer stays gathered until its "
                 "backward, torchtitan's default under pipeline parallelism)")
      ->group("Multi-GPU");
  app.add_flag("--loss-parallel", f.loss_parallel,
               "Loss parallelism with --tensor-parallel (torchtitan's default): embedding, output layer and "
               "cross-entropy hold vocab / tp per GPU")
      ->group("Multi-GPU");
  app.add_flag("--megatron-core", f.megatron_core,
               "Megatron-Core layouts: vocabulary-parallel embedding/output/loss, pipeline outputs freed after the send")
      ->group("Multi-GPU");
  app.add_option("--dp-replicate", f.dp_replicate,
                 "HSDP replica groups (with --fsdp hybrid_shard): shards span the other data-parallel ranks "
                 "(default: one replica per node)")
      ->group("Multi-GPU");
  app.add_option("--context-parallel", f.context_parallel, "Context-parallel degree: GPUs that split each sequence (default 1)")
      ->group("Multi-GPU");
  app.add_option("--expert-parallel", f.expert_parallel, "Expert-parallel degree: GPUs that split the routed experts (default 1)")
      ->group("Multi-GPU");
  app.add_option("--expert-tensor-parallel", f.expert_tensor_parallel,
                 "Ways each routed expert is split (Megatron's expert_tensor_parallel_size; default: as --tensor-parallel)")
      ->group("Multi-GPU");
  app.add_option("--moe-capacity-factor", f.moe_capacity_factor,
                 "Expert capacity factor with token dropping and padding (default: dropless)")
      ->group("Multi-GPU");
  // Loss kernels, encoders, contrastive training
  app.add_option("--model-code", f.model_code,
                 "Whose modelling code runs the forward: transformers (default) or torchtune (its attention copies K/V "
                 "to every query head; a torchtune recipe config sets it)")
      ->group("Loss");
  app.add_option("--loss-kernel", f.loss_kernel, "Decoder loss: eager (default), liger (fused linear CE), chunked "
                                                 "(torchtune, 8 chunks), cce (cut cross-entropy)")
      ->group("Loss");
  app.add_flag("--liger,--use-liger-kernel", f.liger,
               "HF use_liger_kernel: Liger fused linear CE plus RMSNorm, SwiGLU and RoPE kernels (CUDA)")
      ->group("Loss");
  app.add_flag("--fused-ce", f.fused_ce, "Liger's fused linear cross-entropy only (= --loss-kernel liger)")->group("Loss");
  app.add_option("--head", f.head,
                 "Encoder head: pooling (sentence embeddings, default), mlm, classification; a decoder with pooling "
                 "is trained as an embedding model (no LM head)")
      ->group("Encoders");
  app.add_option("--pooling", f.pooling,
                 "Embedding models: sentence-transformers' pooling, mean, cls or lasttoken (default: the model's "
                 "1_Pooling config in the catalog, else mean)")
      ->group("Encoders");
  app.add_option("--num-labels", f.num_labels, "Classification head outputs (default: the config's id2label, or 2)")
      ->group("Encoders");
  app.add_option("--texts-per-example", f.texts_per_example,
                 "Contrastive: texts per example = 1 anchor + positives + negatives (in-batch negatives)")
      ->group("Encoders");
  app.add_flag("--cached-mnrl", f.cached_mnrl, "Contrastive: CachedMultipleNegativesRankingLoss (GradCache)")
      ->group("Encoders");
  app.add_option("--mini-batch-size", f.mini_batch_size, "Cached MNRL: sequences per forward/backward (default 32)")
      ->group("Encoders");
  // Vision-language models
  app.add_option("--images", f.images, "Vision-language models: images per sequence (default: 1 for Qwen-VL, 0 for Gemma 3; 0: text-only batches)")
      ->group("Vision");
  app.add_option("--image-size", f.image_size,
                 "Image resolution before the processor resizes it: WxH or N for N x N (default: 768 x 768 for Qwen-VL, "
                 "Gemma 3 always 896)")
      ->group("Vision");
  app.add_flag("--train-vision-tower", f.train_vision_tower,
               "Train the vision tower (default frozen, as LLaMA-Factory and ms-swift; LoRA then reaches its Linears)")
      ->group("Vision");
  app.add_flag("--train-projector", f.train_projector, "Train the projector / patch merger (default frozen)")
      ->group("Vision");
  // Config files
  // One file per --config, so that `check --config main.yaml stage.yaml` leaves stage.yaml positional.
  app.add_option("--config", f.configs, "Training config (YAML/JSON); repeat for stage files that override it")
      ->allow_extra_args(false)
      ->group("Config files");
  app.add_option("--dialect", f.dialect, "hf, axolotl, llama-factory, torchtune, lightning, flat, deepspeed, keys "
                                         "(default: detected)")
      ->group("Config files");
  app.add_option("--keys", f.keys, "Where values live: batch=KEY.PATH,grad_accum=KEY.PATH,... or a mapping file")
      ->group("Config files");
  app.add_option("--override", f.overrides,
                 "Hydra override, as the trainer's command line takes it: a.b=V, +a.b=V, ~a.b, group=option (may "
                 "also be written bare after the config)")
      ->allow_extra_args(false)
      ->group("Config files");
  app.add_flag("--show-config", f.show_config, "Print every input, its value and where it came from")
      ->group("Config files");
}

namespace {

// Defaults that hold for decoder LLMs but not for an encoder or any embedding model trained by
// sentence-transformers (docs/configs.md#encoder-defaults): TRL's bf16 and gradient
// checkpointing become transformers' TrainingArguments' own (off), and
// a default sequence longer than the model's positions becomes the positions (tokenizers
// truncate to them); a sequence a flag or file gives that is longer than a learned position
// table fails in transformers, which is said.
void apply_encoder_defaults(io::ResolvedInputs& in) {
  TrainingConfig& c = in.config;
  bool reverted = false;
  for (const std::string& key : in.trl_defaults) {
    if (!in.is_default(key)) continue;  // a flag said otherwise
    io::Origin o;
    o.kind = io::OriginKind::kDefault;
    if (key == "autocast") {
      c.autocast.reset();
      o.note = "none: transformers' TrainingArguments (bf16 = false); TRL's bf16 default is for decoder LLMs";
    } else if (key == "gradient_checkpointing") {
      c.gradient_checkpointing = false;
      o.note = "false: transformers' TrainingArguments; TRL's default is for decoder LLMs";
    } else {
      continue;
    }
    in.set_origin(key, std::move(o));
    reverted = true;
  }
  if (reverted) std::erase(in.warnings, in.trl_defaults_warning);
  const ModelSpec& m = in.model;
  if (m.max_position_embeddings <= 0) return;
  // RoBERTa and XLM-R number positions from padding_idx + 1 = 2: 514 rows hold 512 tokens.
  const bool offset = m.model_type == "roberta" || m.model_type == "xlm-roberta" || m.model_type == "camembert";
  const std::int64_t positions = m.max_position_embeddings - (offset ? 2 : 0);
  if (c.seq_len <= positions) return;
  if (in.is_default("seq_len")) {
    io::Origin o;
    o.kind = io::OriginKind::kDerived;
    o.note = fmt::format("{}'s {} positions, to which its tokenizer truncates; memplan's default {} is longer",
                         in.model_name, positions, c.seq_len);
    c.seq_len = positions;
    in.set_origin("seq_len", std::move(o));
  } else if (m.learned_positions) {
    in.warnings.push_back(fmt::format("seq_len {} ({}) is longer than {}'s {} learned positions: transformers fails "
                                      "with an index error; its tokenizer truncates to {}",
                                      c.seq_len, in.origins["seq_len"].to_string(), in.model_name, positions,
                                      positions));
  }
}

// The library versions of the run (--stack, then the active environment, then the lock files
// beside the config) and the inputs they decide where nothing else did
// (docs/formulas.md#versions).
Result<io::ResolvedInputs> apply_stack_inputs(const TrainingFlags& f, io::ResolvedInputs in) {
  io::StackSources found;
  if (flag_given(f, "--stack")) {
    MEMPLAN_TRY(found, io::parse_stack_flag(f.stack));
  }
  io::StackSearchEnv env = io::StackSearchEnv::from_process();
  env.python = f.python;
  MEMPLAN_TRY(io::StackSources installed, io::find_environment_stack(env));
  found.fill_from(installed);
  found.environment = installed.environment;
  found.fill_from(io::find_locked_stack(in.config_files));
  in.stack = found.stack;
  in.stack_origins = found.origins;
  in.stack_environment = found.environment;
  for (const auto& w : found.warnings) in.warnings.push_back(w);
  std::set<std::string> fixed;
  for (const auto& [key, o] : in.origins)
    if (o.kind != io::OriginKind::kDefault) fixed.insert(key);
  const StackApplied applied = apply_stack(in.stack, in.config, fixed, in.run, &in.model);
  if (applied.error) return *applied.error;
  for (const auto& e : applied.effects) {
    io::Origin o;
    o.kind = io::OriginKind::kDerived;
    o.note = e.why;
    in.set_origin(e.key, std::move(o));
  }
  for (const auto& w : applied.warnings) in.warnings.push_back(w);

  // The launch environment: a .env beside a config, then the files --launch names (later win).
  io::AllocatorSettings launch;
  for (const auto& cfg : in.config_files) {
    const std::string env_file = (std::filesystem::path(cfg).parent_path() / ".env").string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(env_file, ec)) continue;
    if (auto text = io::real_file_system().read_file(env_file)) launch = io::layer(launch, io::parse_launch_file(*text, env_file));
  }
  for (const auto& path : f.launch) {
    auto text = io::real_file_system().read_file(path);
    if (!text) return flag_error("--launch", text.error());
    launch = io::layer(launch, io::parse_launch_file(*text, path));
  }
  in.allocator = io::layer(in.allocator, launch);
  return in;
}

}  // namespace

Result<std::vector<std::pair<std::int64_t, double>>> parse_length_histogram(std::string_view text) {
  std::vector<std::pair<std::int64_t, double>> out;
  std::vector<std::string> items;
  for (std::size_t from = 0;;) {
    const std::size_t comma = text.find(',', from);
    items.emplace_back(text.substr(from, comma == std::string_view::npos ? std::string_view::npos : comma - from));
    if (comma == std::string_view::npos) break;
    from = comma + 1;
  }
  for (const std::string& item : items) {
    const std::string t = trim(item);
    const auto colon = t.find(':');
    if (colon == std::string::npos)
      return make_error(ErrorCode::kInvalidArgument, fmt::format("'{}' is not LEN:WEIGHT", t),
                        "write the example lengths and their shares, e.g. 256:40,512:35,2048:25");
    auto len = parse_int(trim(t.substr(0, colon)), "length");
    auto w = parse_double(trim(t.substr(colon + 1)), "weight");
    if (!len || *len < 1 || *len > (std::int64_t{1} << 30))
      return make_error(ErrorCode::kInvalidArgument, fmt::format("'{}': the length must be a positive token count", t));
    if (!w || !(*w >= 0) || !std::isfinite(*w))
      return make_error(ErrorCode::kInvalidArgument, fmt::format("'{}': the weight must be a finite number >= 0", t));
    out.emplace_back(*len, *w);
  }
  double total = 0;
  for (const auto& [l, w] : out) total += w;
  if (out.empty() || !(total > 0))
    return make_error(ErrorCode::kInvalidArgument, "the length histogram has no weight",
                      "write e.g. 256:40,512:35,2048:25");
  std::sort(out.begin(), out.end());
  return out;
}

Result<io::ResolvedInputs> apply_training_flags(const TrainingFlags& f, io::ResolvedInputs in) {
  TrainingConfig& c = in.config;
  auto given = [&](const char* name) { return flag_given(f, name); };
  auto mark = [&](const char* key, const char* flag) { in.set_origin(key, flag_origin(flag)); };

  // --method lora / qlora / full: shorthands people use for SFT with adapters, with adapters on
  // 4-bit base weights, and for training all weights.
  const std::string method = to_lower(trim(f.method));
  const bool lora_method = given("--method") && (method == "lora" || method == "qlora");
  if (given("--method")) {
    if (lora_method || method == "full") {
      c.method = Method::kSft;
    } else if (method == "orpo" || method == "simpo" || method == "cpo") {
      // Reference-free preference losses (TRL ORPOTrainer, CPOTrainer): DPO's pair, no reference.
      c.method = Method::kDpo;
      c.dpo.ref_model = RefModel::kNone;
      mark("ref_model", "--method");
    } else if (method == "kto" || method == "ipo") {
      c.method = Method::kDpo;  // a reference model, as DPO (docs/configs.md#preference-methods)
      c.dpo.ref_model = RefModel::kAuto;
      mark("ref_model", "--method");
    } else {
      MEMPLAN_TRY(c.method, parse_method(f.method));
    }
    mark("method", "--method");
  }
  if (given("--batch")) {
    c.micro_batch = f.batch;
    mark("batch", "--batch");
  }
  if (given("--seq-len")) {
    c.seq_len = f.seq_len;
    mark("seq_len", "--seq-len");
  }
  if (given("--grad-accum")) {
    c.grad_accum = f.grad_accum;
    mark("grad_accum", "--grad-accum");
  }
  if (given("--length-histogram")) {
    auto h = parse_length_histogram(f.length_histogram);
    if (!h) return flag_error("--length-histogram", h.error());
    c.lengths.histogram = std::move(*h);
    mark("lengths", "--length-histogram");
  }
  if (given("--length-steps")) c.lengths.steps = f.length_steps;
  if (given("--pad-to-multiple-of")) c.lengths.pad_to_multiple_of = f.pad_to_multiple_of;
  if (given("--empty-cache-steps")) {
    c.empty_cache_steps = f.empty_cache_steps;
    mark("empty_cache_steps", "--empty-cache-steps");
  }
  if (given("--torch-dtype")) {
    auto d = parse_dtype(f.torch_dtype);
    if (!d) return flag_error("--torch-dtype", d.error());
    c.torch_dtype = *d;
    mark("torch_dtype", "--torch-dtype");
  }
  if (f.bf16 && f.fp16) return make_error(ErrorCode::kConflict, "--bf16 and --fp16 are mutually exclusive");
  if (f.bf16 || f.fp16) {
    c.autocast = f.bf16 ? DType::kBFloat16 : DType::kFloat16;
    mark("autocast", f.bf16 ? "--bf16" : "--fp16");
  }
  if (given("--optim")) {
    auto o = parse_optimizer(f.optim);
    if (o) {
      c.optim.kind = *o;
    } else if (auto e = io::estimate_optimizer(f.optim)) {
      c.optim.kind = e->kind;
      in.warnings.push_back("--optim: " + e->note);
    } else {
      return flag_error("--optim", o.error());
    }
    mark("optim", "--optim");
  }
  if (given("--optim-args")) {
    for (const auto& kv : split_list(f.optim_args)) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0)
        return make_error(ErrorCode::kInvalidArgument, fmt::format("--optim-args: expected K=V, got \"{}\"", kv),
                          "e.g. --optim-args momentum=0.9");
      c.optim.args[trim(kv.substr(0, eq))] = trim(kv.substr(eq + 1));
    }
    mark("optim_args", "--optim-args");
  }
  if (f.gradient_checkpointing) {
    c.gradient_checkpointing = true;
    mark("gradient_checkpointing", "--gradient-checkpointing");
  }
  if (given("--use-reentrant")) {
    const std::string v = to_lower(trim(f.use_reentrant));
    if (v != "true" && v != "false")
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--use-reentrant = '{}' must be true or false", f.use_reentrant));
    c.checkpoint_reentrant = v == "true";
    mark("use_reentrant", "--use-reentrant");
  }
  if (given("--checkpoint-every")) {
    c.checkpoint_every = f.checkpoint_every;
    mark("checkpoint_every", "--checkpoint-every");
  }
  if (given("--checkpoint-policy")) {
    const std::string v = to_lower(trim(f.checkpoint_policy));
    if (v != "full" && v != "op")
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--checkpoint-policy = '{}' must be full or op", f.checkpoint_policy),
                        "op is torchtitan's per-op selective checkpointing; full keeps each layer's input only");
    c.checkpoint_policy = v == "op" ? TrainingConfig::CheckpointPolicy::kOp : TrainingConfig::CheckpointPolicy::kFull;
    mark("checkpoint_policy", "--checkpoint-policy");
  }
  if (given("--loss-dtype")) {
    const std::string v = to_lower(trim(f.loss_dtype));
    if (v != "float32" && v != "fp32" && v != "logits")
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--loss-dtype = '{}' must be float32 or logits", f.loss_dtype),
                        "float32: the logits are upcast before cross_entropy (transformers, torchtitan); logits: "
                        "cross_entropy on the logits' own dtype");
    c.loss_upcast = v != "logits";
    mark("loss_dtype", "--loss-dtype");
  }
  if (given("--attn-implementation")) {
    auto a = parse_attn_impl(f.attn);
    if (!a) return flag_error("--attn-implementation", a.error());
    c.attn = *a;
    mark("attn_implementation", "--attn-implementation");
  }
  if (f.use_peft || lora_method) {
    c.lora.enabled = true;
    mark("use_peft", f.use_peft ? "--use-peft" : "--method");
    if (!in.lora_ignored_warning.empty()) std::erase(in.warnings, in.lora_ignored_warning);
  }
  if (given("--method") && method == "qlora") {
    c.quant.load_in_4bit = true;
    mark("load_in_4bit", "--method");
  }
  const bool lora_flag = given("--lora-r") || given("--lora-alpha") || given("--lora-dropout") ||
                         given("--lora-target-modules") || given("--modules-to-save");
  if (lora_flag && !c.lora.enabled)
    in.warnings.push_back("LoRA flags have no effect without --use-peft (training all weights)");
  if (given("--lora-r")) {
    c.lora.r = f.lora_r;
    mark("lora_r", "--lora-r");
  }
  if (given("--lora-alpha")) {
    c.lora.alpha = f.lora_alpha;
    mark("lora_alpha", "--lora-alpha");
  }
  if (given("--lora-dropout")) {
    c.lora.dropout = f.lora_dropout;
    mark("lora_dropout", "--lora-dropout");
  }
  if (given("--lora-target-modules")) {
    auto t = split_list(f.lora_targets);
    c.lora.all_linear = t.size() == 1 && to_lower(t[0]) == "all-linear";
    c.lora.target_modules = c.lora.all_linear ? std::vector<std::string>{} : t;
    mark("lora_target_modules", "--lora-target-modules");
  }
  if (given("--modules-to-save")) {
    c.lora.modules_to_save = split_list(f.modules_to_save);
    mark("modules_to_save", "--modules-to-save");
  }
  if (f.load_in_4bit) {
    c.quant.load_in_4bit = true;
    mark("load_in_4bit", "--load-in-4bit");
  }
  if (f.load_in_8bit) {
    c.quant.load_in_8bit = true;
    mark("load_in_8bit", "--load-in-8bit");
  }
  if (given("--bnb-4bit-quant-type")) {
    const std::string q = to_lower(f.bnb_quant_type);
    if (q != "nf4" && q != "fp4")
      return make_error(ErrorCode::kUnknownName, fmt::format("--bnb-4bit-quant-type: unknown '{}'", f.bnb_quant_type),
                        did_you_mean(q, {"nf4", "fp4"}));
    c.quant.quant_type = q;
    mark("bnb_4bit_quant_type", "--bnb-4bit-quant-type");
  }
  if (f.double_quant) {
    c.quant.double_quant = true;
    mark("bnb_4bit_use_double_quant", "--use-bnb-nested-quant");
  }
  if (given("--bnb-4bit-quant-storage")) {
    const std::string q = to_lower(trim(f.quant_storage));
    if (q == "uint8") {
      c.quant.quant_storage.reset();
    } else {
      auto d = parse_dtype(q);
      if (!d) return flag_error("--bnb-4bit-quant-storage", d.error());
      c.quant.quant_storage = *d;
    }
    mark("bnb_4bit_quant_storage", "--bnb-4bit-quant-storage");
  }
  if (given("--kbit-prepare")) {
    auto k = parse_kbit_prepare(f.kbit_prepare);
    if (!k) return flag_error("--kbit-prepare", k.error());
    c.quant.kbit_prepare = *k;
    mark("kbit_prepare", "--kbit-prepare");
  }
  if (given("--adapter-dtype")) {
    auto d = parse_dtype(f.adapter_dtype);
    if (!d) return flag_error("--adapter-dtype", d.error());
    c.lora.adapter_dtype = *d;
    mark("adapter_dtype", "--adapter-dtype");
  }
  if (given("--device")) {
    auto d = parse_device(f.device);
    if (!d) return flag_error("--device", d.error());
    c.device = *d;
    mark("device", "--device");
  }
  // DPO / GRPO
  if (given("--ref-model")) {
    const std::string r = to_lower(f.ref_model);
    if (r == "auto") c.dpo.ref_model = RefModel::kAuto;
    else if (r == "copy") c.dpo.ref_model = RefModel::kCopy;
    else if (r == "none") c.dpo.ref_model = RefModel::kNone;
    else
      return make_error(ErrorCode::kUnknownName, fmt::format("--ref-model: unknown '{}'", f.ref_model),
                        did_you_mean(r, {"auto", "copy", "none"}));
    mark("ref_model", "--ref-model");
  }
  if (f.precompute_ref) {
    c.dpo.precompute_ref_log_probs = true;
    mark("precompute_ref_log_probs", "--precompute-ref-log-probs");
  }
  if (f.dpo_two_passes) {
    c.dpo.concatenated_forward = false;
    mark("concatenated_forward", "--no-concatenated-forward");
  }
  if (given("--num-generations")) {
    c.grpo.num_generations = f.num_generations;
    mark("num_generations", "--num-generations");
  }
  if (given("--max-prompt-length")) {
    c.grpo.max_prompt_length = f.max_prompt_length;
    c.dpo.max_prompt_length = f.max_prompt_length;
    mark("max_prompt_length", "--max-prompt-length");
  }
  if (given("--max-completion-length")) {
    c.grpo.max_completion_length = f.max_completion_length;
    mark("max_completion_length", "--max-completion-length");
  }
  if (given("--beta")) {
    c.grpo.beta = f.beta;
    mark("beta", "--beta");
  }
  if (given("--temperature")) {
    c.grpo.temperature = f.temperature;
    mark("temperature", "--temperature");
  }
  if (f.use_vllm) {
    c.grpo.vllm = VllmMode::kColocate;
    mark("use_vllm", "--use-vllm");
  }
  if (given("--vllm-mode")) {
    const std::string v = to_lower(f.vllm_mode);
    if (v == "colocate") c.grpo.vllm = VllmMode::kColocate;
    else if (v == "server") c.grpo.vllm = VllmMode::kServer;
    else
      return make_error(ErrorCode::kUnknownName, fmt::format("--vllm-mode: unknown '{}'", f.vllm_mode),
                        did_you_mean(v, {"colocate", "server"}));
    mark("vllm_mode", "--vllm-mode");
  }
  if (given("--vllm-gpu-memory-utilization")) {
    c.grpo.vllm_gpu_memory_utilization = f.vllm_util;
    mark("vllm_gpu_memory_utilization", "--vllm-gpu-memory-utilization");
  }
  // Multi-GPU
  if (given("--num-gpus") || given("--nodes")) {
    for (const auto& w : in.gpu_count_warnings) std::erase(in.warnings, w);
    in.gpu_count_warnings.clear();
  }
  if (given("--num-gpus")) {
    c.parallel.num_gpus = f.num_gpus;
    mark("num_gpus", "--num-gpus");
  }
  if (given("--nodes")) {
    c.parallel.nodes = f.nodes;
    mark("nodes", "--nodes");
  }
  if (given("--zero-stage") && given("--fsdp"))
    return make_error(ErrorCode::kConflict, "--zero-stage and --fsdp are mutually exclusive",
                      "DeepSpeed ZeRO and PyTorch FSDP are alternatives; pick one");
  if (given("--zero-stage")) {
    switch (f.zero_stage) {
      case 0: c.parallel.sharding = ShardingStrategy::kNone; break;
      case 1: c.parallel.sharding = ShardingStrategy::kZero1; break;
      case 2: c.parallel.sharding = ShardingStrategy::kZero2; break;
      case 3: c.parallel.sharding = ShardingStrategy::kZero3; break;
      default:
        return make_error(ErrorCode::kInvalidArgument, fmt::format("--zero-stage = {} must be 0, 1, 2 or 3", f.zero_stage));
    }
    mark("sharding", "--zero-stage");
  }
  if (given("--fsdp")) {
    auto s = parse_fsdp(f.fsdp);
    if (!s) return flag_error("--fsdp", s.error());
    c.parallel.sharding = *s;
    mark("sharding", "--fsdp");
  }
  if (given("--fsdp-version")) {
    if (f.fsdp_version != 1 && f.fsdp_version != 2)
      return make_error(ErrorCode::kInvalidArgument, fmt::format("--fsdp-version = {} must be 1 or 2", f.fsdp_version));
    c.parallel.fsdp_version = f.fsdp_version;
    mark("fsdp_version", "--fsdp-version");
  }
  if (f.offload_optimizer) {
    c.parallel.offload_optimizer = true;
    mark("offload_optimizer", "--offload-optimizer");
  }
  if (f.offload_params) {
    c.parallel.offload_params = true;
    mark("offload_params", "--offload-params");
  }
  if (given("--tensor-parallel")) {
    c.parallel.tensor_parallel = f.tensor_parallel;
    mark("tensor_parallel", "--tensor-parallel");
  }
  if (given("--pipeline-parallel")) {
    c.parallel.pipeline_parallel = f.pipeline_parallel;
    mark("pipeline_parallel", "--pipeline-parallel");
  }
  if (given("--pp-schedule")) {
    auto s = parse_pp_schedule(f.pp_schedule);
    if (!s) return flag_error("--pp-schedule", s.error());
    c.parallel.pp_schedule = *s;
    mark("pp_schedule", "--pp-schedule");
  }
  if (given("--virtual-stages")) {
    c.parallel.virtual_stages = f.virtual_stages;
    mark("virtual_stages", "--virtual-stages");
    // Megatron: a virtual pipeline size selects the interleaved schedule.
    if (!given("--pp-schedule") && f.virtual_stages > 1) c.parallel.pp_schedule = PipelineSchedule::kInterleaved1F1B;
  }
  if (given("--pp-first-stage-layers")) {
    c.parallel.pp_first_stage_layers = f.pp_first_stage_layers;
    mark("pp_first_stage_layers", "--pp-first-stage-layers");
  }
  if (given("--pp-last-stage-layers")) {
    c.parallel.pp_last_stage_layers = f.pp_last_stage_layers;
    mark("pp_last_stage_layers", "--pp-last-stage-layers");
  }
  if (given("--pp-layers-per-stage")) {
    c.parallel.pp_layers_per_stage = f.pp_layers_per_stage;
    mark("pp_layers_per_stage", "--pp-layers-per-stage");
  }
  if (f.sequence_parallel) {
    c.parallel.sequence_parallel = true;
    mark("sequence_parallel", "--sequence-parallel");
  }
  if (f.megatron_core) {
    c.parallel.megatron_core = true;
    mark("megatron_core", "--megatron-core");
  }
  if (f.fsdp_mixed_precision) {
    c.parallel.fsdp_mixed_precision = true;
    mark("fsdp_mixed_precision", "--fsdp-mixed-precision");
  }
  if (given("--fsdp-reshard-after-forward")) {
    // torchtitan's policy names are accepted too ("default" depends on the pipeline: not here).
    const std::string v = to_lower(trim(f.fsdp_reshard_after_forward));
    if (v != "true" && v != "false" && v != "always" && v != "never")
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--fsdp-reshard-after-forward = '{}' must be true or false",
                                    f.fsdp_reshard_after_forward));
    c.parallel.fsdp_reshard_after_forward = v == "true" || v == "always";
    mark("fsdp_reshard_after_forward", "--fsdp-reshard-after-forward");
  }
  if (f.loss_parallel) {
    c.parallel.loss_parallel = true;
    mark("loss_parallel", "--loss-parallel");
  }
  if (given("--dp-replicate")) {
    c.parallel.dp_replicate = f.dp_replicate;
    mark("dp_replicate", "--dp-replicate");
  }
  if (given("--context-parallel")) {
    c.parallel.context_parallel = f.context_parallel;
    mark("context_parallel", "--context-parallel");
  }
  if (given("--expert-parallel")) {
    c.parallel.expert_parallel = f.expert_parallel;
    mark("expert_parallel", "--expert-parallel");
  }
  if (given("--expert-tensor-parallel")) {
    c.parallel.expert_tensor_parallel = f.expert_tensor_parallel;
    mark("expert_tensor_parallel", "--expert-tensor-parallel");
  }
  if (given("--moe-capacity-factor")) {
    c.parallel.moe_capacity_factor = f.moe_capacity_factor;
    mark("moe_capacity_factor", "--moe-capacity-factor");
  }
  // Loss kernels and contrastive training
  if (given("--model-code")) {
    auto mc = parse_model_code(f.model_code);
    if (!mc) return flag_error("--model-code", mc.error());
    c.model_code = *mc;
    mark("model_code", "--model-code");
  }
  if (given("--loss-kernel")) {
    auto k = parse_loss_kernel(f.loss_kernel);
    if (!k) return flag_error("--loss-kernel", k.error());
    c.loss_kernel = *k;
    mark("loss_kernel", "--loss-kernel");
  }
  if (f.liger || f.fused_ce) {
    if (given("--loss-kernel") && c.loss_kernel != LossKernel::kLiger)
      return make_error(ErrorCode::kConflict,
                        fmt::format("{} uses Liger's fused linear cross-entropy; --loss-kernel says '{}'",
                                    f.liger ? "--liger" : "--fused-ce", f.loss_kernel));
    c.loss_kernel = LossKernel::kLiger;
    c.liger_kernels = c.liger_kernels || f.liger;
    mark("loss_kernel", f.liger ? "--liger" : "--fused-ce");
  }
  if (given("--texts-per-example")) {
    c.contrastive.texts_per_example = f.texts_per_example;
    mark("texts_per_example", "--texts-per-example");
  }
  if (f.cached_mnrl) {
    c.contrastive.cached = true;
    mark("cached_mnrl", "--cached-mnrl");
  }
  if (given("--mini-batch-size")) {
    c.contrastive.mini_batch_size = f.mini_batch_size;
    mark("mini_batch_size", "--mini-batch-size");
  }
  if (given("--images")) {
    // -1 is the engine's "not given" (the model's default); a user's -1 is not a count.
    if (f.images < 0)
      return make_error(ErrorCode::kInvalidArgument, fmt::format("--images = {} is out of range (0 to 1024)", f.images),
                        "give the images per sequence, or leave --images out for the model's default");
    c.vision.images = f.images;
    mark("images", "--images");
  }
  if (given("--image-size")) {
    auto size = parse_image_size(f.image_size);
    if (!size) return flag_error("--image-size", size.error());
    c.vision.image_width = size->first;
    c.vision.image_height = size->second;
    mark("image_size", "--image-size");
  }
  if (f.train_vision_tower) {
    c.vision.train_vision_tower = true;
    mark("train_vision_tower", "--train-vision-tower");
  }
  if (f.train_projector) {
    c.vision.train_projector = true;
    mark("train_projector", "--train-projector");
  }
  if (c.contrastive.cached && !c.contrastive.enabled())
    return make_error(ErrorCode::kInvalidArgument, "--cached-mnrl needs --texts-per-example N",
                      "an anchor and its positives/negatives: N = 1 + positives + negatives");

  // The model last: a flag beats a name read from a config file, and says so.
  if ((given("--model") || given("--model-params")) && !in.is_default("model")) {
    const io::Origin& from = in.origins["model"];
    if (from.kind == io::OriginKind::kFile && !(given("--model") && f.model == in.model_name))
      in.warnings.push_back(fmt::format("{} {} replaces the model the config gives at {} ({})",
                                        given("--model") ? "--model" : "--model-params",
                                        given("--model") ? f.model : f.model_params, from.to_string(),
                                        in.custom_model ? in.custom_model->name
                                                        : (in.model_name.empty() ? std::string("its model")
                                                                                 : in.model_name)));
  }
  if (given("--model") && given("--model-params"))
    return make_error(ErrorCode::kConflict, "--model and --model-params are mutually exclusive");
  static const char* kArchFlags[] = {"--hidden-size", "--num-hidden-layers", "--num-attention-heads",
                                     "--num-key-value-heads", "--intermediate-size", "--vocab-size", "--head-dim"};
  std::vector<std::string> arch_given;
  for (const char* a : kArchFlags)
    if (given(a)) arch_given.emplace_back(a);
  if (!arch_given.empty() && (given("--model") || given("--model-params")))
    return make_error(ErrorCode::kConflict,
                      fmt::format("{} describe a custom model; they cannot be combined with {}",
                                  fmt::join(arch_given, " "), given("--model") ? "--model" : "--model-params"));
  if (!given("--model") && !given("--model-params") && (in.custom_model || !arch_given.empty())) {
    // A custom architecture from the config (model: {n_layers: ...}) and/or the flags.
    io::CustomModel cm = in.custom_model.value_or(io::CustomModel{});
    if (!in.custom_model) cm.name = "custom model (--hidden-size ...)";
    auto set = [&](const char* flag, std::int64_t v, std::optional<std::int64_t>& field) {
      if (given(flag)) field = v;
    };
    set("--hidden-size", f.hidden_size, cm.hidden_size);
    set("--num-hidden-layers", f.num_hidden_layers, cm.num_layers);
    set("--num-attention-heads", f.num_attention_heads, cm.num_heads);
    set("--num-key-value-heads", f.num_key_value_heads, cm.num_kv_heads);
    set("--intermediate-size", f.intermediate_size, cm.intermediate_size);
    set("--vocab-size", f.vocab_size, cm.vocab_size);
    set("--head-dim", f.head_dim, cm.head_dim);
    std::vector<std::string> assumed;
    MEMPLAN_TRY(in.model, io::build_custom_model(cm, assumed));
    in.assumptions.insert(in.assumptions.end(), assumed.begin(), assumed.end());
    in.model_name = cm.name;
    if (!arch_given.empty()) {
      io::Origin o = flag_origin(arch_given.front().c_str());
      if (in.custom_model) {
        auto it = in.origins.find("model");
        o.kind = io::OriginKind::kDerived;
        o.note = fmt::format("{} with {}", it != in.origins.end() ? it->second.to_string() : "config",
                             fmt::join(arch_given, " "));
      }
      in.set_origin("model", std::move(o));
    }
  } else if (given("--model-params")) {
    MEMPLAN_TRY(std::int64_t n, parse_count(f.model_params));
    MEMPLAN_TRY(in.model, io::model_from_param_count(n));
    in.model_name = f.model_params;
    in.model_from_param_count = true;
    in.assumptions.push_back(fmt::format(
        "architecture assumed from the parameter count {} (a Llama-style decoder: {}); a model with its own "
        "attention, an encoder or a mixture of experts can differ a lot; give --model ID|PATH for the real one",
        f.model_params, io::describe_shape(in.model)));
    mark("model", "--model-params");
  } else {
    if (given("--model")) {
      in.model_name = f.model;
      mark("model", "--model");
    }
    if (in.model_name.empty())
      return make_error(ErrorCode::kInvalidArgument, "no model given",
                        in.model_hint.empty() ? "use --model ID|PATH (see 'memplan models') or --model-params N"
                                              : in.model_hint);
    auto m = io::resolve_model_source(in.model_name, io::ModelSearchEnv::from_process());
    if (!m) {
      Error e = m.error();
      auto it = in.origins.find("model");
      if (!e.where && it != in.origins.end() && it->second.kind == io::OriginKind::kFile) e.where = it->second.loc;
      return e;
    }
    in.model = m->spec;
    if (!m->via.empty()) in.notes.push_back("model: " + m->via);
    // from_pretrained applies the checkpoint's own quantization_config, whatever the training
    // config says: a bitsandbytes 4-bit re-upload loads as Linear4bit layers.
    if (m->prequantized_4bit && m->quantization == "bitsandbytes" && !c.lora.enabled)
      return make_error(ErrorCode::kUnsupported,
                        fmt::format("model '{}' is a pre-quantized bitsandbytes 4-bit checkpoint, whose weights "
                                    "cannot be trained in full",
                                    in.model_name),
                        fmt::format("train LoRA adapters on it (--use-peft or --method lora, which makes it QLoRA), "
                                    "or pass the unquantized model ({})",
                                    m->spec.name));
    if (m->prequantized_4bit && m->quantization == "bitsandbytes" && !c.quant.load_in_4bit) {
      c.quant.load_in_4bit = true;
      io::Origin o;
      o.kind = io::OriginKind::kDerived;
      o.note = "the checkpoint is pre-quantized (bitsandbytes 4-bit)";
      in.set_origin("load_in_4bit", std::move(o));
    } else if (m->prequantized_4bit && m->quantization != "bitsandbytes") {
      in.warnings.push_back(fmt::format("model '{}' is a {} 4-bit checkpoint; memplan models bitsandbytes 4-bit "
                                        "weights only, so its weights are counted at the training dtype",
                                        in.model_name, m->quantization));
    } else if (!m->prequantized_4bit && !m->quantization.empty()) {
      in.warnings.push_back(fmt::format("model '{}' has a quantization_config (quant_method '{}') that memplan does "
                                        "not model; its weights are counted unquantized at the training dtype",
                                        in.model_name, m->quantization));
    }
    if (in.model.name.empty()) in.model.name = in.model_name;
    // `torch_dtype: auto` in a config: the dtype the checkpoint is stored in.
    if (in.torch_dtype_from_model && !given("--torch-dtype")) {
      auto d = parse_dtype(in.model.torch_dtype.empty() ? "float32" : in.model.torch_dtype);
      if (d) {
        c.torch_dtype = *d;
        io::Origin o;
        o.kind = io::OriginKind::kDerived;
        o.note = fmt::format("auto: the checkpoint's {}", to_string(*d));
        in.set_origin("torch_dtype", std::move(o));
      }
    }
  }
  // DeBERTa-v2/v3 and NomicBERT have only the eager attention: the default follows (an explicit
  // sdpa/flash_attention_2 is refused by the engine, as transformers refuses it).
  if ((in.model.eager_attention_only() || in.model.attention_sinks) && !c.attn) {
    c.attn = AttnImpl::kEager;
    io::Origin o;
    o.kind = io::OriginKind::kDerived;
    o.note = in.model.attention_sinks ? "gpt-oss: eager only (attention sinks)"
             : in.model.is_deberta()  ? "DeBERTa: eager only"
                                      : "NomicBERT: eager only";
    in.set_origin("attn_implementation", std::move(o));
  }
  if (given("--head")) {
    auto h = parse_encoder_head(f.head);
    if (!h) return flag_error("--head", h.error());
    if (!in.model.is_encoder() && *h != EncoderHead::kPooling)
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--head {} applies to encoders; {} is a decoder", to_string(*h), in.model_name),
                        "a decoder trains with its LM head, or as an embedding model with --head pooling");
    if (in.model.is_encoder()) in.model.head = *h;
    else in.model.decoder_embedding = true;
    mark("head", "--head");
  }
  if (given("--num-labels")) {
    if (!in.model.is_encoder())
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--num-labels applies to encoders; {} is a decoder", in.model_name),
                        "encoders: bert, roberta, xlm-roberta, modernbert models (see 'memplan models')");
    if (f.num_labels < 1 || f.num_labels > (1 << 20))
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--num-labels = {} is out of range (1 to 1048576)", f.num_labels));
    in.model.num_labels = f.num_labels;
    mark("num_labels", "--num-labels");
  }
  // The head a config file states, where no flag set one. A pooling head makes a decoder an
  // embedding model (sentence-transformers' AutoModel); the other heads are encoders' own.
  const bool file_head = in.encoder_head && !given("--head");
  const bool file_labels = in.num_labels && !given("--num-labels");
  const bool decoder_pooling = file_head && !in.model.is_encoder() && *in.encoder_head == EncoderHead::kPooling;
  if (decoder_pooling) in.model.decoder_embedding = true;
  if (((file_head && !decoder_pooling) || file_labels) && !in.model.is_encoder()) {
    const bool head_key = file_head && !decoder_pooling;
    const io::Origin& o = in.origins[head_key ? "head" : "num_labels"];
    in.warnings.push_back(fmt::format("{}: {} describes an encoder's head; {} is a decoder (ignored)", o.to_string(),
                                      o.note.empty() ? std::string(head_key ? "the head" : "num_labels") : o.note,
                                      in.model_name));
  } else if (in.model.is_encoder()) {
    if (file_head) in.model.head = *in.encoder_head;
    if (file_labels) in.model.num_labels = static_cast<int>(*in.num_labels);  // 1 to 2^20, checked where read
  }
  if (in.model.embeds()) {  // what a config file says of the pooling, where no flag does
    if (in.pooling && !given("--pooling")) in.model.pooling = *in.pooling;
    if (in.embedding_library) in.model.embedding_library = *in.embedding_library;
  }
  if (given("--pooling")) {
    auto p = parse_pooling_mode(f.pooling);
    if (!p) return flag_error("--pooling", p.error());
    if (!in.model.embeds())
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--pooling applies to embedding models; {} is trained with its {}", in.model_name,
                                    in.model.is_encoder() ? to_string(in.model.head) + " head" : "LM head"),
                        in.model.is_encoder() ? "add --head pooling" : "add --head pooling to train it as an embedding model");
    in.model.pooling = *p;
    mark("pooling", "--pooling");
  }
  if (in.model.is_encoder() || in.model.decoder_embedding) apply_encoder_defaults(in);
  MEMPLAN_TRY(in, apply_stack_inputs(f, std::move(in)));
  static const char* kKeys[] = {"method", "batch", "seq_len", "grad_accum", "torch_dtype", "autocast", "optim",
                                "gradient_checkpointing", "attn_implementation", "use_peft", "device"};
  for (const char* k : kKeys)
    if (!in.origins.count(k)) in.set_origin(k, io::Origin{});
  // FSDP2's option, given as a flag: the layout it applies to must be FSDP2 sharding parameters
  // (a config's own derived value is ignored where a flag changes the layout).
  if (given("--fsdp-reshard-after-forward") && !c.parallel.fsdp_reshard_after_forward) {
    if (c.parallel.sharding != ShardingStrategy::kFsdpFullShard && c.parallel.sharding != ShardingStrategy::kFsdpHybridShard)
      return make_error(ErrorCode::kConflict,
                        "--fsdp-reshard-after-forward false is an option of FSDP2 sharding parameters: it needs --fsdp "
                        "full_shard or hybrid_shard",
                        "add --fsdp full_shard --fsdp-version 2");
    if (c.parallel.fsdp_version != 2)
      return make_error(ErrorCode::kConflict,
                        "--fsdp-reshard-after-forward is FSDP2's fully_shard option; FSDP1 spells it --fsdp shard_grad_op",
                        "add --fsdp-version 2, or use --fsdp shard_grad_op");
  }
  if (f.loss_parallel && c.parallel.tensor_parallel < 2)
    return make_error(ErrorCode::kConflict,
                      "--loss-parallel splits the vocabulary over tensor-parallel ranks: it needs --tensor-parallel > 1",
                      "add --tensor-parallel N, or drop --loss-parallel");
  if (auto s = io::check_inputs(in); !s) return s.error();
  if (auto s = validate(c); !s) return s.error();
  return in;
}


namespace {

// The config request the flags describe, with `more_files` layered after --config.
Result<io::ConfigRequest> config_request(const TrainingFlags& f, const std::vector<std::string>& more_files,
                                         io::FileSystem& fs) {
  io::ConfigRequest req;
  req.files = f.configs;
  req.files.insert(req.files.end(), more_files.begin(), more_files.end());
  req.dialect = f.dialect;
  req.overrides = f.overrides;
  if (req.files.empty() && !f.overrides.empty())
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("override '{}' changes a config file, and none is given", f.overrides.front()),
                      "add --config FILE before it");
  if (!f.keys.empty()) {
    MEMPLAN_TRY(req.key_map, io::parse_key_map(f.keys, fs));
  }
  if (req.files.empty() && (!f.dialect.empty() || !f.keys.empty()))
    return make_error(ErrorCode::kInvalidArgument, "--dialect and --keys describe config files", "add --config FILE");
  return req;
}

}  // namespace

namespace {
Result<Inputs> load_inputs_from(const TrainingFlags& f, const std::vector<std::string>& more_files, io::FileSystem& fs);
}

Result<Inputs> load_inputs(const TrainingFlags& f, const std::vector<std::string>& more_files, io::FileSystem& fs) {
  MEMPLAN_TRY(Inputs out, load_inputs_from(f, more_files, fs));
  // The allocator settings the run will have (its files, else this environment) for the
  // caching-allocator replay; a malformed one is reported where the budget reads it.
  if (auto m = allocator_margin(Bytes::zero(), &out.resolved); m) out.resolved.config.allocator = m->conf;
  return out;
}

namespace {
Result<Inputs> load_inputs_from(const TrainingFlags& f, const std::vector<std::string>& more_files, io::FileSystem& fs) {
  Inputs out;
  MEMPLAN_TRY(io::ConfigRequest req, config_request(f, more_files, fs));
  if (req.files.empty()) {
    MEMPLAN_TRY(out.resolved, apply_training_flags(f, io::ResolvedInputs{}));
    return out;
  }
  MEMPLAN_TRY(io::LoadedConfig loaded, io::load_config(req, fs));
  MEMPLAN_TRY(out.resolved, apply_training_flags(f, loaded.inputs));
  // A global batch the config fixes: the accumulation follows --num-gpus / --nodes / --batch, and
  // --apply keeps the global batch at micro-batch x accumulation x the data-parallel size in use.
  if (out.resolved.global_batch) {
    io::apply_global_batch(out.resolved);
    const ParallelConfig& p = out.resolved.config.parallel;
    const std::int64_t world = static_cast<std::int64_t>(std::max(1, p.num_gpus)) * std::max(1, p.nodes);
    for (auto& s : loaded.sites)
      if (s.knob == io::Knob::kGlobalBatch && s.world_size >= 1 && world % p.model_parallel_size() == 0)
        s.world_size = world / p.model_parallel_size();
  }
  // A file warning the resolution withdrew (TRL's defaults for an encoder, LoRA keys that
  // --use-peft turned on) is gone from the located diagnostics too (memplan check prints those).
  std::erase_if(loaded.diagnostics, [&](const Error& d) {
    return std::find(out.resolved.warnings.begin(), out.resolved.warnings.end(), d.to_string()) ==
           out.resolved.warnings.end();
  });
  out.resolved.allocator = io::layer(io::find_allocator_settings(loaded.files), out.resolved.allocator);
  out.loaded = std::move(loaded);
  return out;
}
}  // namespace

Result<io::ResolvedInputs> resolve_training_args(const std::vector<std::string>& args) {
  CLI::App app{"training flags"};
  TrainingFlags f;
  add_training_flags(app, f);
  read_integers_as_decimal(app);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes argv back to front
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("{}: {}", fmt::join(args, " "), e.what()));
  }
  MEMPLAN_TRY(Inputs in, load_inputs(f));
  return std::move(in.resolved);
}

Result<int> show_config(std::ostream& out, const TrainingFlags& f, report::Format format,
                        const std::vector<std::string>& more_files) {
  std::optional<io::LoadedConfig> loaded;
  io::ResolvedInputs base;
  MEMPLAN_TRY(io::ConfigRequest req, config_request(f, more_files, io::real_file_system()));
  if (!req.files.empty()) {
    MEMPLAN_TRY(loaded, io::load_config(req, io::real_file_system()));
    base = loaded->inputs;
  }
  auto resolved = apply_training_flags(f, base);
  // Flags that fail leave the files' values alone to show: say so, or `use_peft false` next to
  // --use-peft reads as a misreading.
  if (!resolved && format != report::Format::kJson)
    out << "the flags were not applied (the error below): these are the config files' values alone\n";
  out << report::render_sources(resolved ? *resolved : base, loaded ? &*loaded : nullptr, format);
  if (!resolved) return resolved.error();
  return kExitOk;
}

}  // namespace memplan::cli

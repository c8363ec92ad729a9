// torchtune recipe configs: `_component_` builders (torchtune.models.llama3_1.lora_llama3_1_8b),
// batch_size, gradient_accumulation_steps, tokenizer.max_seq_len, dtype (weights and compute in
// that dtype, no autocast), enable_activation_checkpointing, optimizer._component_.
#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

struct Builder {
  const char* name;  // torchtune builder, without the lora_/qlora_ prefix
  const char* hf_id;
};

// torchtune's model builders and the Hugging Face checkpoints they load.
constexpr Builder kBuilders[] = {
    {"llama3_1_8b", "meta-llama/Llama-3.1-8B"},
    {"llama3_1_70b", "meta-llama/Llama-3.1-70B"},
    {"llama3_1_405b", "meta-llama/Llama-3.1-405B"},
    {"llama3_8b", "meta-llama/Meta-Llama-3-8B"},
    {"llama3_70b", "meta-llama/Meta-Llama-3-70B"},
    {"llama3_2_1b", "meta-llama/Llama-3.2-1B"},
    {"llama3_2_3b", "meta-llama/Llama-3.2-3B"},
    {"llama2_7b", "meta-llama/Llama-2-7b-hf"},
    {"llama2_13b", "meta-llama/Llama-2-13b-hf"},
    {"llama2_70b", "meta-llama/Llama-2-70b-hf"},
    {"mistral_7b", "mistralai/Mistral-7B-v0.1"},
    {"gemma_2b", "google/gemma-2b"},
    {"gemma_7b", "google/gemma-7b"},
    {"gemma2_2b", "google/gemma-2-2b"},
    {"gemma2_9b", "google/gemma-2-9b"},
    {"gemma2_27b", "google/gemma-2-27b"},
    {"phi3_mini", "microsoft/Phi-3-mini-4k-instruct"},
    {"phi4_14b", "microsoft/phi-4"},                       // torchtune.models.phi4 (recipes/configs/phi4)
    {"llama3_3_70b", "meta-llama/Llama-3.3-70B-Instruct"},  // torchtune.models.llama3_3
    {"qwen2_5_0_5b", "Qwen/Qwen2.5-0.5B"},
    {"qwen2_5_1_5b_base", "Qwen/Qwen2.5-1.5B"},
    {"qwen2_5_1_5b_instruct", "Qwen/Qwen2.5-1.5B-Instruct"},
    {"qwen2_5_3b", "Qwen/Qwen2.5-3B"},
    {"qwen2_5_7b_base", "Qwen/Qwen2.5-7B"},
    {"qwen2_5_7b_instruct", "Qwen/Qwen2.5-7B-Instruct"},
    {"qwen2_5_14b_base", "Qwen/Qwen2.5-14B"},
    {"qwen2_5_14b_instruct", "Qwen/Qwen2.5-14B-Instruct"},
    {"qwen2_5_32b_base", "Qwen/Qwen2.5-32B"},
    {"qwen2_5_32b_instruct", "Qwen/Qwen2.5-32B-Instruct"},
    {"qwen2_5_72b_base", "Qwen/Qwen2.5-72B"},
    {"qwen2_5_72b_instruct", "Qwen/Qwen2.5-72B-Instruct"},
    {"qwen3_0_6b_base", "Qwen/Qwen3-0.6B-Base"},
    {"qwen3_0_6b_instruct", "Qwen/Qwen3-0.6B"},
    {"qwen3_1_7b_base", "Qwen/Qwen3-1.7B-Base"},
    {"qwen3_1_7b_instruct", "Qwen/Qwen3-1.7B"},
    {"qwen3_4b_base", "Qwen/Qwen3-4B-Base"},
    {"qwen3_4b_instruct", "Qwen/Qwen3-4B"},
    {"qwen3_8b_base", "Qwen/Qwen3-8B-Base"},
    {"qwen3_8b_instruct", "Qwen/Qwen3-8B"},
    {"qwen3_14b_base", "Qwen/Qwen3-14B-Base"},
    {"qwen3_14b_instruct", "Qwen/Qwen3-14B"},
    {"qwen3_32b", "Qwen/Qwen3-32B"},
};

struct OptimizerComponent {
  const char* component;
  OptimizerKind kind;
};

constexpr OptimizerComponent kOptimizers[] = {
    {"torch.optim.AdamW", OptimizerKind::kAdamWTorch},
    {"torch.optim.Adam", OptimizerKind::kAdamWTorch},
    {"torch.optim.SGD", OptimizerKind::kSgd},
    {"torch.optim.Adagrad", OptimizerKind::kAdagrad},
    {"torch.optim.RMSprop", OptimizerKind::kRmsprop},
    {"bitsandbytes.optim.PagedAdamW8bit", OptimizerKind::kPagedAdamW8bit},
    {"bitsandbytes.optim.PagedAdamW", OptimizerKind::kPagedAdamW32bit},
    {"bitsandbytes.optim.PagedAdamW32bit", OptimizerKind::kPagedAdamW32bit},
    {"bitsandbytes.optim.AdamW8bit", OptimizerKind::kAdamW8bit},
    {"bitsandbytes.optim.Adam8bit", OptimizerKind::kAdamW8bit},
    {"bitsandbytes.optim.Lion8bit", OptimizerKind::kLion8bit},
    {"bitsandbytes.optim.Lion", OptimizerKind::kLion32bit},
    {"torchao.optim.AdamW8bit", OptimizerKind::kAdamWTorchao8bit},
    {"torchao.prototype.low_bit_optim.AdamW8bit", OptimizerKind::kAdamWTorchao8bit},
    {"torchao.optim.AdamW4bit", OptimizerKind::kAdamWTorchao4bit},
    {"torchao.prototype.low_bit_optim.AdamW4bit", OptimizerKind::kAdamWTorchao4bit},
};

// torchtune's LoRA module names -> the Hugging Face names the engine uses.
std::string hf_module_name(const std::string& tt) {
  if (tt == "output_proj") return "o_proj";
  return tt;
}

Status read_model(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto component, m.text("model._component_"));
  if (!component) {
    m.out().inputs.model_hint = "the config has no model._component_; give --model ID|PATH";
    return Ok{};
  }
  const YamlNode& n = *m.node("model._component_");
  std::string builder = component->substr(component->rfind('.') == std::string::npos ? 0 : component->rfind('.') + 1);
  bool lora = false, qlora = false;
  if (builder.rfind("qlora_", 0) == 0) {
    qlora = lora = true;
    builder = builder.substr(6);
  } else if (builder.rfind("lora_", 0) == 0) {
    lora = true;
    builder = builder.substr(5);
  }
  std::vector<std::string> names;
  for (const auto& b : kBuilders) {
    names.emplace_back(b.name);
    if (builder == b.name) {
      m.out().inputs.model_name = b.hf_id;
      m.from_file("model", n, "model._component_");
    }
  }
  if (m.out().inputs.model_name.empty()) {
    m.warn_at(n, fmt::format("memplan does not know the torchtune builder '{}'", builder), did_you_mean(builder, names));
    m.out().inputs.model_hint =
        fmt::format("{}: torchtune builder '{}' has no known Hugging Face checkpoint; give --model ID|PATH",
                    m.where_text(n), *component);
  }
  // The model is torchtune's own TransformerDecoder, not transformers' (docs/formulas.md#torchtune-attention).
  c.model_code = ModelCode::kTorchtune;
  m.from_file("model_code", n, "model._component_");
  c.lora.enabled = lora;
  m.from_file("use_peft", n, "model._component_");
  if (qlora) {
    // torchtune's QLoRA stores base weights as NF4 tensors with quantized scales.
    c.quant.load_in_4bit = true;
    c.quant.quant_type = "nf4";
    c.quant.double_quant = true;
    m.from_file("load_in_4bit", n, "model._component_");
  }
  if (!lora) return Ok{};
  MEMPLAN_TRY(bool r, m.read("model.lora_rank", "lora_r", c.lora.r));
  if (!r) {
    c.lora.r = 8;
    m.from_default("lora_r", "torchtune LoRA builders' lora_rank = 8");
  }
  MEMPLAN_IO_CHECK(m.read("model.lora_alpha", "lora_alpha", c.lora.alpha));
  MEMPLAN_TRY(bool d, m.read("model.lora_dropout", "lora_dropout", c.lora.dropout));
  if (!d) {
    c.lora.dropout = 0.0;
    m.from_default("lora_dropout", "torchtune lora_dropout = 0.0");
  }
  std::vector<std::string> targets;
  MEMPLAN_TRY(auto attn, m.list("model.lora_attn_modules"));
  if (attn)
    for (const auto& t : *attn) targets.push_back(hf_module_name(t));
  MEMPLAN_TRY(auto mlp, m.boolean("model.apply_lora_to_mlp"));
  if (mlp.value_or(false)) targets.insert(targets.end(), {"gate_proj", "up_proj", "down_proj"});
  MEMPLAN_TRY(auto out, m.boolean("model.apply_lora_to_output"));
  if (out.value_or(false))
    m.warn_at(*m.node("model.apply_lora_to_output"),
              "the LoRA adapter on the output projection is not modelled (it adds a few MiB)");
  if (!targets.empty()) {
    c.lora.target_modules = targets;
    m.from_file("lora_target_modules", attn ? *m.node("model.lora_attn_modules") : *m.node("model.apply_lora_to_mlp"),
                "model.lora_attn_modules");
  }
  return Ok{};
}

Status read_optimizer(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto component, m.text("optimizer._component_"));
  if (!component) return Ok{};
  const YamlNode& n = *m.node("optimizer._component_");
  std::vector<std::string> names;
  bool found = false;
  for (const auto& o : kOptimizers) {
    names.emplace_back(o.component);
    if (*component == o.component) {
      c.optim.kind = o.kind;
      found = true;
    }
  }
  if (!found)
    return m.error_at(n, ErrorCode::kUnknownName, fmt::format("unknown optimizer component '{}'", *component),
                      did_you_mean(*component, names));
  m.from_file("optim", n, "optimizer._component_");
  MEMPLAN_TRY(auto fused, m.boolean("optimizer.fused"));
  if (fused.value_or(false) && c.optim.kind == OptimizerKind::kAdamWTorch) {
    c.optim.kind = OptimizerKind::kAdamWTorchFused;
    m.from_file("optim", *m.node("optimizer.fused"), "optimizer.fused");
  }
  MEMPLAN_TRY(auto momentum, m.text("optimizer.momentum"));
  if (momentum) {
    c.optim.args["momentum"] = *momentum;
    m.from_file("optim_args", *m.node("optimizer.momentum"), "optimizer.momentum");
  }
  MEMPLAN_TRY(auto in_bwd, m.boolean("optimizer_in_bwd"));
  if (in_bwd.value_or(false))
    m.warn_at(*m.node("optimizer_in_bwd"),
              "optimizer_in_bwd is not modelled: the estimate keeps a full set of gradients");
  return Ok{};
}

}  // namespace

Status map_torchtune(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_IO_CHECK(read_model(m));

  MEMPLAN_TRY(auto loss, m.text("loss._component_"));
  if (loss && loss->find("DPOLoss") != std::string::npos) {
    c.method = Method::kDpo;
    m.from_file("method", *m.node("loss._component_"), "loss._component_");
  } else if (loss && loss->find("SimPOLoss") != std::string::npos) {
    c.method = Method::kDpo;
    c.dpo.ref_model = RefModel::kNone;
    m.from_file("method", *m.node("loss._component_"), "loss._component_");
    m.from_file("ref_model", *m.node("loss._component_"), "loss._component_");
  } else if ((loss && to_lower(*loss).find("grpo") != std::string::npos) || m.node("grpo_samples") != nullptr) {
    // torchtune's dev GRPO recipes (grpo_full_finetune_distributed): batch_size prompts, each
    // with grpo_samples completions of up to max_generated_tokens, trained together against a
    // reference model (ref_checkpointer) whose KL weight is loss.kl_coeff.
    c.method = Method::kGrpo;
    const YamlNode* at = loss ? m.node("loss._component_") : m.node("grpo_samples");
    m.from_file("method", *at, loss ? "loss._component_" : "grpo_samples");
    MEMPLAN_TRY(bool samples, m.read("grpo_samples", "num_generations", c.grpo.num_generations));
    if (!samples) {
      c.grpo.num_generations = 16;
      m.from_default("num_generations", "torchtune's GRPO configs' grpo_samples = 16");
    }
    MEMPLAN_TRY(bool gen, m.read("max_generated_tokens", "max_completion_length", c.grpo.max_completion_length));
    if (!gen) m.from_default("max_completion_length", "no max_generated_tokens");
    MEMPLAN_TRY(auto prompt, m.integer("tokenizer.max_seq_len"));
    if (prompt) {
      c.grpo.max_prompt_length = *prompt;
      m.from_file("max_prompt_length", *m.node("tokenizer.max_seq_len"), "tokenizer.max_seq_len (the prompt)");
    } else {
      m.from_default("max_prompt_length", "the prompts' length depends on the data (tokenizer.max_seq_len is not set): "
                                          "512 assumed; pass --max-prompt-length");
    }
    MEMPLAN_TRY(auto kl, m.number("loss.kl_coeff"));
    c.grpo.beta = kl.value_or(0.0);
    if (kl) m.from_file("beta", *m.node("loss.kl_coeff"), "loss.kl_coeff");
    else m.from_default("beta", "no loss.kl_coeff");
    if (c.grpo.beta <= 0 && m.node("ref_checkpointer") != nullptr)
      m.warn_at(*m.node("ref_checkpointer"),
                "the recipe loads a reference model (ref_checkpointer) though loss.kl_coeff is 0; memplan leaves it "
                "out, an estimate too low by its weights");
    c.grpo.vllm = VllmMode::kNone;
    m.derived("use_vllm", "torchtune's GRPO generates with the policy itself");
    MEMPLAN_TRY(auto batch_size, m.integer("batch_size"));
    const std::int64_t prompts = batch_size.value_or(1);
    c.micro_batch = prompts * c.grpo.num_generations;
    m.derived("batch", fmt::format("batch_size {} prompts x grpo_samples {} completions, trained in one step", prompts,
                                   c.grpo.num_generations));
    m.site(Knob::kBatch, "completions_per_step", {},
           "torchtune's GRPO batch_size counts prompts (each with grpo_samples completions); memplan does not write a "
           "micro-batch of completions back");
    m.site(Knob::kGradAccum, "gradient_accumulation_steps", "batch_size");
    m.site(Knob::kSeqLen, "max_generated_tokens", {},
           "a GRPO run's sequences are prompt + max_generated_tokens; memplan does not split a new length between them");
    MEMPLAN_TRY(bool gc, m.read("enable_activation_checkpointing", "gradient_checkpointing", c.gradient_checkpointing));
    if (!gc) m.from_default("gradient_checkpointing", "torchtune enable_activation_checkpointing = false");
  } else {
    m.from_default("method", "the loss is not a preference loss: SFT");
    // torchtune's LinearCrossEntropyLoss (older: CEWithChunkedOutputLoss) computes the output
    // projection and the loss chunk by chunk, never holding the whole logits.
    if (loss && loss->find("LinearCrossEntropyLoss") != std::string::npos)
      m.set_loss_kernel(*m.node("loss._component_"), "loss._component_", LossKernel::kChunked, false);
    else if (loss && loss->find("ChunkedOutputLoss") != std::string::npos)
      m.warn_at(*m.node("loss._component_"),
                fmt::format("{} is not modelled: it never holds the full logits, so the estimate is too high by about "
                            "the fp32 logits (batch x seq_len x vocab x 4 bytes)",
                            *loss));
  }

  const bool grpo = c.method == Method::kGrpo;
  if (!grpo) {
    MEMPLAN_IO_CHECK(m.read_or("batch_size", "batch", c.micro_batch, 1, "no batch_size: 1"));
    m.site(Knob::kBatch, "batch_size");
  }
  MEMPLAN_IO_CHECK(m.read_or("gradient_accumulation_steps", "grad_accum", c.grad_accum, 1,
                             "torchtune gradient_accumulation_steps = 1"));
  if (!grpo) m.site(Knob::kGradAccum, "gradient_accumulation_steps", "batch_size");

  // The sequence length is a tokenizer setting (older configs: dataset.max_seq_len).
  std::string seq_key = "tokenizer.max_seq_len";
  const YamlNode* tok = m.node("tokenizer.max_seq_len");
  const YamlNode* ds = m.node("dataset.max_seq_len");
  if ((tok == nullptr || tok->is_null()) && ds != nullptr && !ds->is_null()) seq_key = "dataset.max_seq_len";
  MEMPLAN_TRY(bool seq, grpo ? Result<bool>(true) : m.read(seq_key, "seq_len", c.seq_len));
  if (!seq) {
    const YamlNode* null_node = tok != nullptr ? tok : ds;
    if (null_node != nullptr)
      m.warn_at(*null_node,
                fmt::format("{} is null: sequences are not truncated, so their length depends on the data; memplan "
                            "assumes {} tokens (pass --seq-len)",
                            seq_key, c.seq_len));
    m.from_default("seq_len", "max_seq_len is not set");
  }
  if (!grpo) m.site(Knob::kSeqLen, seq_key, {});

  MEMPLAN_TRY(auto dtype, m.text("dtype"));
  if (dtype) {
    const YamlNode& n = *m.node("dtype");
    auto d = parse_dtype(*dtype);
    if (!d) return m.error_at(n, d.error().code, d.error().message, d.error().suggestion);
    c.torch_dtype = *d;
    m.from_file("torch_dtype", n, "dtype");
  } else {
    c.torch_dtype = DType::kFloat32;
    m.from_default("torch_dtype", "torchtune dtype = fp32");
  }
  c.autocast.reset();
  m.from_default("autocast", "none: torchtune computes in the weights' dtype");
  if (!grpo) {
    MEMPLAN_TRY(bool gc, m.read("enable_activation_checkpointing", "gradient_checkpointing", c.gradient_checkpointing));
    if (!gc) m.from_default("gradient_checkpointing", "torchtune enable_activation_checkpointing = false");
  }
  MEMPLAN_TRY(auto offload, m.boolean("enable_activation_offloading"));
  if (offload.value_or(false))
    m.warn_at(*m.node("enable_activation_offloading"),
              "activation offloading is not modelled: activations are counted on the GPU");
  MEMPLAN_IO_CHECK(read_optimizer(m));
  MEMPLAN_TRY(auto device, m.text("device"));
  if (device) {
    auto d = parse_device(*device);
    if (!d) return m.error_at(*m.node("device"), d.error().code, d.error().message, d.error().suggestion);
    c.device = *d;
    m.from_file("device", *m.node("device"), "device");
  }
  MEMPLAN_TRY(auto cpu_offload, m.boolean("fsdp_cpu_offload"));
  if (cpu_offload.value_or(false)) {
    c.parallel.offload_params = c.parallel.offload_optimizer = true;
    m.from_file("offload_params", *m.node("fsdp_cpu_offload"), "fsdp_cpu_offload");
    m.from_file("offload_optimizer", *m.node("fsdp_cpu_offload"), "fsdp_cpu_offload");
  }

  // Recipes define their own top-level keys, so only near-misses of the keys read are reported.
  m.check_unknown("", torchtune_known_keys(), /*strict=*/false);
  m.check_unknown("model", {}, /*strict=*/false);
  return Ok{};
}

}  // namespace memplan::io

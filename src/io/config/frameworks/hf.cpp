// Hugging Face TrainingArguments / TRL configs as YAML (`trl sft --config train.yaml`): one flat
// mapping holding TrainingArguments, the trainer's config (SFTConfig, DPOConfig, GRPOConfig) and
// TRL's ModelConfig. Defaults are TRL >= 0.22's where they differ from transformers'.
#include <cctype>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

constexpr const char* kTrlDefaultNote = "TRL >= 0.22 default; transformers' Trainer alone defaults to false";

// Keys only the GRPO trainer has, then keys only the DPO trainer has.
constexpr std::string_view kGrpoKeys[] = {"num_generations", "use_vllm", "vllm_mode", "vllm_gpu_memory_utilization",
                                          "max_completion_length", "reward_weights", "steps_per_generation",
                                          "generation_batch_size", "num_iterations", "epsilon", "scale_rewards"};
constexpr std::string_view kDpoKeys[] = {"precompute_ref_log_probs", "reference_free", "rpo_alpha", "ref_adapter_name",
                                         "force_use_ref_model", "f_divergence_type", "use_weighting", "ld_alpha",
                                         "label_smoothing", "beta", "max_prompt_length"};

// Keys only the CPO trainer has (SimPO is CPO with loss_type simpo): no reference model.
constexpr std::string_view kCpoKeys[] = {"cpo_alpha", "simpo_gamma"};
// Keys only the KTO trainer has: a reference model, like DPO.
constexpr std::string_view kKtoKeys[] = {"desirable_weight", "undesirable_weight"};

// Sets DPO-family `name` (orpo, cpo, simpo, kto, ipo, dpo) with the reference model it needs
// (TRL: ORPOTrainer and CPOTrainer have none; KTOTrainer and DPOTrainer keep one).
void set_preference(Mapper& m, const std::string& name, std::string why) {
  TrainingConfig& c = m.config();
  c.method = Method::kDpo;
  const bool reference_free = name == "orpo" || name == "cpo" || name == "simpo";
  if (reference_free) c.dpo.ref_model = RefModel::kNone;
  std::string label = name;
  for (auto& ch : label) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  m.derived("method", fmt::format("{} ({}): {}", label,
                                  reference_free ? "no reference model" : "policy + reference model, as DPO",
                                  std::move(why)));
  if (reference_free) m.derived("ref_model", fmt::format("none: {} has no reference model", label));
}

Status read_method(Mapper& m) {
  TrainingConfig& c = m.config();
  const std::string from_path = m.out().files.empty() ? std::string() : method_from_path(m.out().files[0].path);
  for (auto k : kGrpoKeys) {
    if (k == "max_completion_length" && !from_path.empty() && from_path != "grpo") continue;  // ORPO/CPO have it too
    if (const YamlNode* n = m.node(k)) {
      c.method = Method::kGrpo;
      m.derived("method", fmt::format("GRPOConfig key {} at {}", k, m.where_text(*n)));
      return Ok{};
    }
  }
  MEMPLAN_TRY(auto loss, m.text("loss_type"));
  const std::string loss_type = to_lower(loss.value_or(""));
  for (auto k : kCpoKeys)
    if (const YamlNode* n = m.node(k)) {
      set_preference(m, loss_type == "simpo" ? "simpo" : "cpo", fmt::format("CPOConfig key {} at {}", k, m.where_text(*n)));
      return Ok{};
    }
  for (auto k : kKtoKeys)
    if (const YamlNode* n = m.node(k)) {
      set_preference(m, "kto", fmt::format("KTOConfig key {} at {}", k, m.where_text(*n)));
      return Ok{};
    }
  if (loss_type == "simpo") {
    set_preference(m, "simpo", fmt::format("loss_type simpo at {}", m.where_text(*m.node("loss_type"))));
    return Ok{};
  }
  if (from_path == "orpo" || from_path == "simpo" || from_path == "cpo" || from_path == "kto" || from_path == "ipo") {
    set_preference(m, from_path, fmt::format("the recipe's path {} names the trainer", m.out().files[0].path));
    return Ok{};
  }
  for (auto k : kDpoKeys) {
    if (const YamlNode* n = m.node(k)) {
      c.method = Method::kDpo;
      m.derived("method", fmt::format("DPOConfig key {} at {}", k, m.where_text(*n)));
      return Ok{};
    }
  }
  c.method = Method::kSft;
  m.from_default("method", "no DPO or GRPO keys: SFT");
  return Ok{};
}

// bf16/fp16 and the weights' dtype. Without bf16 or fp16, TRL's default (bf16) where `trl`, else
// TrainingArguments' (neither).
Status read_precision(Mapper& m, bool& defaulted, bool trl = true) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto bf, m.boolean("bf16"));
  MEMPLAN_TRY(auto fp, m.boolean("fp16"));
  if (bf.value_or(false) && fp.value_or(false))
    return m.error_at(*m.node("fp16"), ErrorCode::kConflict, "bf16 and fp16 are both true", "set only one of them");
  if (fp.value_or(false)) {
    c.autocast = DType::kFloat16;
    m.from_file("autocast", *m.node("fp16"), "fp16");
  } else if (bf) {
    if (*bf) c.autocast = DType::kBFloat16;
    else c.autocast.reset();
    m.from_file("autocast", *m.node("bf16"), "bf16");
  } else if (trl) {
    c.autocast = DType::kBFloat16;
    m.from_default("autocast", fmt::format("bf16 = true: {}", kTrlDefaultNote));
    m.out().inputs.trl_defaults.emplace_back("autocast");
    defaulted = true;
  } else {
    c.autocast.reset();
    m.from_default("autocast", "none: TrainingArguments' bf16 = fp16 = false");
  }
  const YamlNode* dtype = m.node("dtype");
  const YamlNode* torch_dtype = m.node("torch_dtype");
  if (dtype != nullptr && torch_dtype != nullptr && dtype->is_scalar() && torch_dtype->is_scalar() &&
      dtype->value != torch_dtype->value)
    m.contradiction(*dtype, "dtype", *torch_dtype, "torch_dtype");
  MEMPLAN_TRY(bool got, m.read_dtype("dtype", "torch_dtype", c.torch_dtype));
  if (!got) MEMPLAN_IO_CHECK(m.read_dtype("torch_dtype", "torch_dtype", c.torch_dtype));
  return Ok{};
}

Status read_peft(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_IO_CHECK(m.read("use_peft", "use_peft", c.lora.enabled));
  const YamlNode* first_lora = m.first_of({"lora_r", "lora_alpha", "lora_dropout", "lora_target_modules"});
  if (first_lora != nullptr && !c.lora.enabled) {
    m.warn_at(*first_lora, "LoRA settings have no effect without use_peft: true (all weights are trained)");
    m.out().inputs.lora_ignored_warning = m.out().inputs.warnings.back();
  }
  MEMPLAN_IO_CHECK(m.read("lora_r", "lora_r", c.lora.r));
  MEMPLAN_IO_CHECK(m.read("lora_alpha", "lora_alpha", c.lora.alpha));
  MEMPLAN_IO_CHECK(m.read("lora_dropout", "lora_dropout", c.lora.dropout));
  MEMPLAN_TRY(auto targets, m.list("lora_target_modules"));
  if (targets) {
    set_lora_targets(c, *targets);
    m.from_file("lora_target_modules", *m.node("lora_target_modules"), "lora_target_modules");
  }
  MEMPLAN_TRY(auto save, m.list("lora_modules_to_save"));
  if (save) {
    c.lora.modules_to_save = *save;
    m.from_file("modules_to_save", *m.node("lora_modules_to_save"), "lora_modules_to_save");
  }
  MEMPLAN_IO_CHECK(m.read("load_in_4bit", "load_in_4bit", c.quant.load_in_4bit));
  MEMPLAN_IO_CHECK(m.read("load_in_8bit", "load_in_8bit", c.quant.load_in_8bit));
  MEMPLAN_TRY(auto qt, m.text("bnb_4bit_quant_type"));
  if (qt) {
    const std::string q = to_lower(*qt);
    if (q != "nf4" && q != "fp4")
      return m.error_at(*m.node("bnb_4bit_quant_type"), ErrorCode::kUnknownName,
                        fmt::format("unknown bnb_4bit_quant_type '{}'", *qt), did_you_mean(q, {"nf4", "fp4"}));
    c.quant.quant_type = q;
    m.from_file("bnb_4bit_quant_type", *m.node("bnb_4bit_quant_type"), "bnb_4bit_quant_type");
  }
  MEMPLAN_IO_CHECK(m.read("use_bnb_nested_quant", "bnb_4bit_use_double_quant", c.quant.double_quant));
  return Ok{};
}

// `fsdp: "full_shard auto_wrap"` or a list of the same options; `fsdp_config.version` (transformers'
// name) or `fsdp_config.fsdp_version` (accelerate's) selects FSDP2.
Status read_hf_fsdp(Mapper& m) {
  if (m.node("fsdp_config") != nullptr && m.node("fsdp_config")->is_map()) {
    MEMPLAN_TRY(bool v, m.read_fsdp_version("fsdp_config.version"));
    if (!v) MEMPLAN_IO_CHECK(m.read_fsdp_version("fsdp_config.fsdp_version"));
  }
  MEMPLAN_TRY(auto opts, m.list("fsdp"));
  if (!opts) return Ok{};
  const YamlNode& n = *m.node("fsdp");
  std::vector<std::string> words;
  for (const auto& o : *opts) {
    std::size_t start = 0;
    while (start < o.size()) {
      const std::size_t sp = o.find(' ', start);
      const std::string w = trim(o.substr(start, sp == std::string::npos ? std::string::npos : sp - start));
      if (!w.empty()) words.push_back(to_lower(w));
      if (sp == std::string::npos) break;
      start = sp + 1;
    }
  }
  TrainingConfig& c = m.config();
  for (const auto& w : words) {
    if (w == "offload") {
      c.parallel.offload_optimizer = c.parallel.offload_params = true;
      m.from_file("offload_optimizer", n, "fsdp");
      m.from_file("offload_params", n, "fsdp");
    } else if (w == "auto_wrap") {
      continue;
    } else {
      auto s = parse_fsdp(w);
      if (!s) return m.error_at(n, s.error().code, s.error().message, s.error().suggestion);
      c.parallel.sharding = *s;
      m.from_file("sharding", n, "fsdp");
    }
  }
  return Ok{};
}

}  // namespace

// The preference method a recipe's path names (alignment-handbook recipes/<model>/orpo/...,
// open-r1 recipes/<model>/grpo/...): the trainer is chosen by the script it is passed to, which
// the YAML does not say.
std::string method_from_path(const std::string& path) {
  std::string token;
  std::vector<std::string> tokens;
  for (char ch : path + "/") {
    if (ch == '/' || ch == '\\' || ch == '-' || ch == '_' || ch == '.') {
      if (!token.empty()) tokens.push_back(to_lower(token));
      token.clear();
    } else {
      token += ch;
    }
  }
  for (auto it = tokens.rbegin(); it != tokens.rend(); ++it)
    for (const char* m : {"orpo", "simpo", "cpo", "kto", "ipo", "dpo", "grpo", "sft"})
      if (*it == m) return m;
  return {};
}

Status warn_unmodelled_hf(Mapper& m) {
  // transformers' use_liger_kernel (TRL's older use_liger) patches the model with Liger's RMSNorm,
  // SwiGLU and RoPE, and SFT's loss with its fused linear cross-entropy. TRL's DPO and GRPO
  // trainers use Liger's chunked DPO/GRPO losses instead: with use_liger_loss (TRL 0.17/0.19 to
  // 0.27, the model not patched) or use_liger_kernel (TRL >= 0.25, the model patched too).
  // docs/formulas.md#liger-dpo-grpo.
  const Method method = m.config().method;
  for (const char* k : {"use_liger_kernel", "use_liger", "use_liger_loss"}) {
    MEMPLAN_TRY(auto on, m.boolean(k));
    if (!on.value_or(false)) continue;
    const bool loss_only = std::string_view(k) == "use_liger_loss";
    if (method == Method::kSft && loss_only) {
      m.warn_at(*m.node(k), "use_liger_loss is a DPO/GRPO option of TRL; an SFT loss is not changed by it");
      continue;
    }
    m.set_loss_kernel(*m.node(k), k, LossKernel::kLiger, /*liger_kernels=*/!loss_only);
    if (!loss_only && method != Method::kSft)
      m.warn_at(*m.node(k), fmt::format("{}: read as TRL >= 0.25 does, Liger's {} loss and module kernels; TRL "
                                        "0.17 to 0.24 patch only the modules with it (use_liger_loss selects the "
                                        "loss), and their eager loss holds the full logits",
                                        k, to_string(method)));
  }
  MEMPLAN_TRY(auto offload, m.boolean("activation_offloading"));
  if (offload.value_or(false))
    m.warn_at(*m.node("activation_offloading"),
              "activation_offloading is not modelled: memplan keeps activations on the GPU (an overestimate)");
  MEMPLAN_TRY(auto optim_target, m.list("optim_target_modules"));
  if (optim_target)
    m.warn_at(*m.node("optim_target_modules"),
              "optim_target_modules (GaLore/APOLLO projection) is not modelled: optimizer states are estimated for "
              "the full matrices (an overestimate)");
  // TrainingArguments.torch_compile wraps the model in torch.compile (docs/formulas.md#compile):
  // inductor fuses elementwise chains, so fewer intermediates are saved; torchtitan measured
  // 82.4 -> 77.0 GiB reserved for Llama 3.1 8B. The eager estimate is therefore an upper bound.
  for (const char* k : {"torch_compile", "torchdynamo"}) {
    const YamlNode* n = m.node(k);
    if (n == nullptr || n->is_null()) continue;
    bool on = false;
    if (std::string_view(k) == "torch_compile") {
      MEMPLAN_TRY(auto b, m.boolean(k));
      on = b.value_or(false);
    } else {
      on = n->is_scalar() && !n->value.empty() && to_lower(n->value) != "none";
    }
    if (on)
      m.warn_at(*n, fmt::format("{}: torch.compile is not modelled; its fused kernels save fewer intermediates, so "
                                "the estimate (eager execution) is an upper bound",
                                k));
  }
  return Ok{};
}

Status read_checkpoint_kwargs(Mapper& m) {
  TrainingConfig& c = m.config();
  const YamlNode* kw = m.node("gradient_checkpointing_kwargs");
  if (kw == nullptr || kw->kind == YamlKind::kNull) return Ok{};
  if (kw->is_map()) {
    MEMPLAN_TRY(auto reentrant, m.boolean("gradient_checkpointing_kwargs.use_reentrant"));
    if (reentrant) {
      c.checkpoint_reentrant = *reentrant;
      m.from_file("use_reentrant", *m.node("gradient_checkpointing_kwargs.use_reentrant"),
                  "gradient_checkpointing_kwargs.use_reentrant");
    }
    return Ok{};
  }
  if (!kw->is_scalar())
    return m.error_at(*kw, ErrorCode::kInvalidConfig, "gradient_checkpointing_kwargs must be a mapping",
                      "write gradient_checkpointing_kwargs: {use_reentrant: false}");
  // A command line's JSON string: '{"use_reentrant": false}'.
  const auto j = nlohmann::json::parse(kw->value, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return m.error_at(*kw, ErrorCode::kInvalidConfig,
                      fmt::format("gradient_checkpointing_kwargs '{}' is not a JSON object", kw->value),
                      "write gradient_checkpointing_kwargs: {use_reentrant: false}");
  if (!j.contains("use_reentrant")) return Ok{};
  if (!j["use_reentrant"].is_boolean())
    return m.error_at(*kw, ErrorCode::kInvalidConfig, "gradient_checkpointing_kwargs use_reentrant must be true or false");
  c.checkpoint_reentrant = j["use_reentrant"].get<bool>();
  m.from_file("use_reentrant", *kw, "gradient_checkpointing_kwargs");
  return Ok{};
}

Status read_vllm(Mapper& m, std::string_view use_vllm_key, std::string_view mode_key) {
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto vllm, m.boolean(use_vllm_key));
  if (vllm) {
    c.grpo.vllm = *vllm ? VllmMode::kColocate : VllmMode::kNone;
    m.from_file("use_vllm", *m.node(use_vllm_key), use_vllm_key);
  }
  MEMPLAN_TRY(auto mode, m.text(mode_key));
  if (mode && c.grpo.vllm != VllmMode::kNone) {
    const std::string v = to_lower(*mode);
    if (v == "colocate") c.grpo.vllm = VllmMode::kColocate;
    else if (v == "server") c.grpo.vllm = VllmMode::kServer;
    else
      return m.error_at(*m.node(mode_key), ErrorCode::kUnknownName, fmt::format("unknown vllm_mode '{}'", *mode),
                        did_you_mean(v, {"colocate", "server"}));
    m.from_file("vllm_mode", *m.node(mode_key), mode_key);
  }
  return Ok{};
}

Status read_training_arguments_batch(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_IO_CHECK(m.read_or("per_device_train_batch_size", "batch", c.micro_batch, 8,
                             "TrainingArguments per_device_train_batch_size = 8"));
  m.site(Knob::kBatch, "per_device_train_batch_size");
  MEMPLAN_IO_CHECK(m.read_or("gradient_accumulation_steps", "grad_accum", c.grad_accum, 1,
                             "TrainingArguments gradient_accumulation_steps = 1"));
  m.site(Knob::kGradAccum, "gradient_accumulation_steps", "per_device_train_batch_size");
  return Ok{};
}

// LLM2Vec's experiment scripts (McGill-NLP/llm2vec experiments/run_mntp.py, run_simcse.py,
// run_supervised.py) read one JSON file with HfArgumentParser: TrainingArguments plus their own
// ModelArguments (peft_model_name_or_path, bidirectional, pooling_mode, ...) and CustomArguments
// (simcse_dropout, lora_r, stop_after_n_steps, loss_scale, ...). docs/configs.md#llm2vec.
constexpr std::string_view kLlm2VecKeys[] = {"bidirectional", "simcse_dropout", "stop_after_n_steps",
                                             "peft_model_name_or_path", "loss_class", "loss_scale",
                                             "experiment_id", "mask_token_type", "data_collator_type"};

bool is_llm2vec(Mapper& m) {
  for (auto k : kLlm2VecKeys)
    if (m.root().get(k) != nullptr) return true;
  return false;
}

// What LLM2Vec's scripts do beyond TrainingArguments: LoRA on the inner model always
// (initialize_peft: r = lora_r, default 8, every Llama/Mistral projection), non-reentrant
// checkpointing, and for run_supervised / run_simcse an embedding model: LLM2Vec's pooling over
// one forward per text (query, positive and, with E5's data, a hard negative; SimCSE a text twice).
Status read_llm2vec(Mapper& m) {
  TrainingConfig& c = m.config();
  LoadedConfig& out = m.out();
  for (auto k : kLlm2VecKeys) (void)m.node(k);
  for (auto k : {"dataset_file_path", "dataset_config_name", "max_train_samples", "mlm_probability"}) (void)m.node(k);
  c.lora.enabled = true;
  m.derived("use_peft", "LLM2Vec's scripts wrap the model in LoRA (initialize_peft)");
  if (m.node("lora_r") == nullptr) {
    c.lora.r = 8;
    m.from_default("lora_r", "8: LLM2Vec's CustomArguments");
  }
  if (m.node("lora_dropout") == nullptr) {
    c.lora.dropout = 0.05;
    m.from_default("lora_dropout", "0.05: LLM2Vec's CustomArguments");
  }
  c.lora.all_linear = true;
  m.derived("lora_target_modules", "q/k/v/o and gate/up/down projections: LLM2Vec's initialize_peft");
  if (c.gradient_checkpointing) {
    c.checkpoint_reentrant = false;
    m.derived("use_reentrant", "false: LLM2Vec's scripts set gradient_checkpointing_kwargs");
  }
  if (m.node("attn_implementation") == nullptr) {
    c.attn = AttnImpl::kSdpa;
    m.from_default("attn_implementation", "sdpa: LLM2Vec's ModelArguments");
  }
  // run_mntp.py trains a masked next-token head (LM logits): the decoder's own loss.
  if (m.first_of({"mlm_probability", "mask_token_type", "data_collator_type"}) != nullptr) return Ok{};
  out.inputs.encoder_head = EncoderHead::kPooling;
  out.inputs.embedding_library = EmbeddingLibrary::kLlm2Vec;
  MEMPLAN_TRY(auto pooling, m.text("pooling_mode"));
  const std::string mode = to_lower(pooling.value_or("mean"));
  if (mode == "mean" || mode == "weighted_mean") {
    out.inputs.pooling = PoolingMode::kMean;  // weighted_mean saves its (b, s) weights only
  } else if (mode == "eos_token" || mode == "last_token") {
    out.inputs.pooling = PoolingMode::kLastToken;
  } else if (mode == "bos_token") {
    out.inputs.pooling = PoolingMode::kCls;
  } else {
    return m.error_at(*m.node("pooling_mode"), ErrorCode::kUnknownName,
                      fmt::format("unknown LLM2Vec pooling_mode '{}'", *pooling),
                      did_you_mean(mode, {"mean", "weighted_mean", "eos_token", "last_token", "bos_token"}));
  }
  if (const YamlNode* n = m.node("pooling_mode")) m.from_file("pooling", *n, "pooling_mode");
  else m.from_default("pooling", "mean: LLM2Vec's ModelArguments");
  m.derived("head", "pooling: LLM2Vec trains the decoder as an embedding model (no LM head)");
  MEMPLAN_TRY(auto dataset, m.text("dataset_name"));
  if (const YamlNode* n = m.node("simcse_dropout")) {
    c.contrastive.texts_per_example = 2;
    m.from_file("texts_per_example", *n, "SimCSE (simcse_dropout): every text twice, two forwards");
    if (c.attn == AttnImpl::kEager)
      m.warn_at(*n, "simcse_dropout sets the attention dropout: eager attention's dropout masks are not modelled");
  } else if (to_lower(dataset.value_or("")) == "e5") {
    c.contrastive.texts_per_example = 3;
    m.from_file("texts_per_example", *m.node("dataset_name"), "LLM2Vec's E5 data: query, positive, hard negative");
  } else {
    c.contrastive.texts_per_example = 2;
    m.from_default("texts_per_example",
                   "2: a query and a positive (LLM2Vec's E5 data adds a hard negative: --texts-per-example 3)");
  }
  return Ok{};
}

Status map_hf_trl(Mapper& m) {
  TrainingConfig& c = m.config();
  MEMPLAN_IO_CHECK(m.read_model("model_name_or_path"));
  const bool llm2vec = is_llm2vec(m);  // transformers' Trainer under LLM2Vec's scripts, not TRL
  if (!llm2vec) MEMPLAN_IO_CHECK(read_method(m));
  MEMPLAN_IO_CHECK(read_training_arguments_batch(m));

  if (c.method == Method::kGrpo) {
    MEMPLAN_IO_CHECK(m.read("num_generations", "num_generations", c.grpo.num_generations));
    MEMPLAN_IO_CHECK(m.read("max_prompt_length", "max_prompt_length", c.grpo.max_prompt_length));
    MEMPLAN_IO_CHECK(m.read("max_completion_length", "max_completion_length", c.grpo.max_completion_length));
    MEMPLAN_IO_CHECK(m.read("beta", "beta", c.grpo.beta));
    MEMPLAN_IO_CHECK(m.read("temperature", "temperature", c.grpo.temperature));
    MEMPLAN_IO_CHECK(read_vllm(m, "use_vllm", "vllm_mode"));
    MEMPLAN_IO_CHECK(m.read("vllm_gpu_memory_utilization", "vllm_gpu_memory_utilization",
                               c.grpo.vllm_gpu_memory_utilization));
    m.site(Knob::kSeqLen, "max_length", {},
           "a GRPO run's sequences are max_prompt_length + max_completion_length; memplan does not split a new "
           "length between them");
  } else {
    const YamlNode* ml = m.node("max_length");
    const YamlNode* msl = m.node("max_seq_length");
    if (ml != nullptr && msl != nullptr && !ml->is_null() && !msl->is_null() && ml->value != msl->value)
      m.contradiction(*ml, "max_length", *msl, "max_seq_length");
    const char* seq_key = (ml == nullptr || ml->is_null()) && msl != nullptr ? "max_seq_length" : "max_length";
    MEMPLAN_IO_CHECK(m.read_or(seq_key, "seq_len", c.seq_len, llm2vec ? 512 : 1024,
                               llm2vec ? "LLM2Vec.from_pretrained's max_length = 512"
                                       : "TRL SFTConfig/DPOConfig max_length = 1024"));
    m.site(Knob::kSeqLen, seq_key, "per_device_train_batch_size");
    if (c.method == Method::kDpo) {
      MEMPLAN_IO_CHECK(m.read("max_prompt_length", "max_prompt_length", c.dpo.max_prompt_length));
      MEMPLAN_IO_CHECK(m.read("precompute_ref_log_probs", "precompute_ref_log_probs",
                                   c.dpo.precompute_ref_log_probs));
      MEMPLAN_TRY(auto free, m.boolean("reference_free"));
      if (free.value_or(false)) {
        c.dpo.ref_model = RefModel::kNone;
        m.from_file("ref_model", *m.node("reference_free"), "reference_free");
      }
    }
  }

  bool precision_defaulted = false;
  MEMPLAN_IO_CHECK(read_precision(m, precision_defaulted, !llm2vec));
  MEMPLAN_TRY(bool gc, m.read("gradient_checkpointing", "gradient_checkpointing", c.gradient_checkpointing));
  if (!gc && llm2vec) {
    m.from_default("gradient_checkpointing", "false: TrainingArguments");
  } else if (!gc) {
    c.gradient_checkpointing = true;
    m.from_default("gradient_checkpointing", fmt::format("true: {}", kTrlDefaultNote));
    m.out().inputs.trl_defaults.emplace_back("gradient_checkpointing");
  }
  MEMPLAN_IO_CHECK(read_checkpoint_kwargs(m));
  if (precision_defaulted || !gc) {
    m.warn_file(0, precision_defaulted && !gc
                       ? "bf16 and gradient_checkpointing are not set: memplan assumes TRL >= 0.22's defaults (both "
                         "true; transformers' Trainer alone leaves them off); set them to be sure"
                       : fmt::format("{} is not set: memplan assumes TRL >= 0.22's default (true; transformers' "
                                     "Trainer alone leaves it off); set it to be sure",
                                     precision_defaulted ? "bf16" : "gradient_checkpointing"));
    m.out().inputs.trl_defaults_warning = m.out().inputs.warnings.back();
  }

  MEMPLAN_IO_CHECK(m.read_optimizer("optim", "optim", c.optim.kind));
  MEMPLAN_TRY(auto optim_args, m.list("optim_args"));
  if (optim_args) {
    const YamlNode& n = *m.node("optim_args");
    for (const auto& kv : *optim_args) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0)
        return m.error_at(n, ErrorCode::kInvalidConfig, fmt::format("optim_args: expected K=V, got \"{}\"", kv));
      c.optim.args[trim(kv.substr(0, eq))] = trim(kv.substr(eq + 1));
    }
    m.from_file("optim_args", n, "optim_args");
  }
  MEMPLAN_IO_CHECK(m.read_attn_impl("attn_implementation"));
  if (llm2vec) MEMPLAN_IO_CHECK(read_llm2vec(m));
  MEMPLAN_IO_CHECK(read_peft(m));
  MEMPLAN_TRY(auto cpu, m.boolean("use_cpu"));
  if (!cpu) {
    MEMPLAN_TRY(cpu, m.boolean("no_cuda"));
  }
  if (cpu.value_or(false)) {
    c.device = Device::kCpu;
    m.from_file("device", *m.first_of({"use_cpu", "no_cuda"}), "use_cpu");
  }
  MEMPLAN_IO_CHECK(read_hf_fsdp(m));
  m.set_deepspeed_ref(m.node("deepspeed"));

  MEMPLAN_IO_CHECK(warn_unmodelled_hf(m));
  m.check_unknown("", hf_known_keys(), /*strict=*/true);
  return Ok{};
}

}  // namespace memplan::io

#include "report/estimate_render.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "io/model/model_source.hpp"
#include "report/html.hpp"
#include "report/json.hpp"
#include "report/table.hpp"

namespace memplan::report {

std::string component_label(const std::string& name) {
  std::string s = name;
  for (char& c : s)
    if (c == '_') c = ' ';
  return s;
}

std::string describe_inputs(const io::ResolvedInputs& in) {
  const TrainingConfig& c = in.config;
  std::string precision = to_string(c.torch_dtype) + " weights";
  if (c.autocast) precision += fmt::format(", {} autocast", *c.autocast == DType::kBFloat16 ? "bf16" : "fp16");
  // GRPO trains on prompt + completion, counted in completions (docs/plan.md#grpo).
  const std::string shape =
      c.method == Method::kGrpo
          ? fmt::format("batch {} completion{} × ({} prompt + {} completion) tokens, {} generations per prompt",
                        c.micro_batch, c.micro_batch == 1 ? "" : "s", c.grpo.max_prompt_length, c.grpo.max_completion_length, c.grpo.num_generations)
          : fmt::format("batch {} × {} tokens", c.micro_batch, c.seq_len);
  std::string s = fmt::format("{} · {} · {} · {} · {}", in.model.name, to_string(c.method), shape, precision,
                              to_string(c.optim.kind));
  if (c.lora.enabled) s += fmt::format(" · {}LoRA r={}", c.quant.load_in_4bit ? "Q" : "", c.lora.r);
  if (c.gradient_checkpointing) s += " · gradient checkpointing";
  if (c.loss_kernel != LossKernel::kEager) s += fmt::format(" · {} loss", to_string(c.loss_kernel));
  if (c.model_code != ModelCode::kTransformers) s += fmt::format(" · {} model code", to_string(c.model_code));
  if (c.liger_kernels) s += " · Liger kernels";
  s += fmt::format(" · {} attention · {}", to_string(c.attn_impl()), to_string(c.device));
  if (c.parallel.world_size() > 1) s += fmt::format(" · {} GPUs", c.parallel.world_size());
  return s;
}

std::string breakdown_text(const Estimate& e) {
  std::string out;
  TextTable t({"component", "GiB", "%", ""}, {Align::kLeft, Align::kRight, Align::kRight, Align::kLeft});
  const double peak = static_cast<double>(e.peak.count());
  for (const auto& c : e.components) {
    const double frac = peak > 0 ? static_cast<double>(c.bytes.count()) / peak : 0;
    t.add_row({component_label(c.name), fmt::format("{:.2f}", c.bytes.as_gib()), fmt::format("{:.1f}%", 100 * frac),
               bar(frac, 24)});
  }
  t.add_separator();
  t.add_row({fmt::format("peak live tensors ({})", to_string(e.peak_phase)), fmt::format("{:.2f}", e.peak.as_gib()),
             "100.0%", ""});
  if (e.reserved > e.peak)
    t.add_row({"allocator reserve", fmt::format("+{:.2f}", (e.reserved - e.peak).as_gib()), "", ""});
  for (const auto& o : e.overhead) t.add_row({component_label(o.name), fmt::format("+{:.2f}", o.bytes.as_gib()), "", ""});
  t.add_row({"total (as nvidia-smi shows)", fmt::format("{:.2f}", e.total.as_gib()), "", ""});
  out += t.render();
  if (!e.phases.empty()) {
    out += "\nphase peaks:";
    for (const auto& p : e.phases) out += fmt::format("  {} {:.2f} GiB", to_string(p.phase), p.peak.as_gib());
    out += "\n";
  }
  out += fmt::format("parameters: {:.3f}B total, {:.3f}B trainable\n", static_cast<double>(e.params.total) / 1e9,
                     static_cast<double>(e.params.trainable) / 1e9);
  for (const auto& a : e.assumptions) out += "assumption: " + a + "\n";
  for (const auto& w : e.warnings) out += "warning: " + w + "\n";
  return out;
}

namespace {

std::string render_text(const io::ResolvedInputs& in, const Estimate& e) {
  std::string out = describe_inputs(in) + "\n";
  for (const auto& n : in.notes) out += "note: " + n + "\n";  // how the model was found, the GPU
  for (const auto& a : in.assumptions) out += "assumed: " + a + "\n";
  out += '\n';
  out += breakdown_text(e);
  for (const auto& w : in.warnings) out += "warning: " + w + "\n";
  return out;
}

std::string render_markdown(const io::ResolvedInputs& in, const Estimate& e) {
  std::string out = "**" + describe_inputs(in) + "**\n\n";
  for (const auto& n : in.notes) out += "- note: " + n + "\n";
  if (!in.notes.empty()) out += "\n";
  for (const auto& a : in.assumptions) out += "- assumed: " + a + "\n";
  if (!in.assumptions.empty()) out += "\n";
  TextTable t({"component", "GiB", "%"}, {Align::kLeft, Align::kRight, Align::kRight});
  const double peak = static_cast<double>(e.peak.count());
  for (const auto& c : e.components)
    t.add_row({component_label(c.name), fmt::format("{:.2f}", c.bytes.as_gib()),
               fmt::format("{:.1f}%", peak > 0 ? 100.0 * static_cast<double>(c.bytes.count()) / peak : 0.0)});
  t.add_row({fmt::format("**peak** ({})", to_string(e.peak_phase)), fmt::format("**{:.2f}**", e.peak.as_gib()), "100.0%"});
  t.add_row({"reserved (allocator)", fmt::format("{:.2f}", e.reserved.as_gib()), ""});
  t.add_row({"total (nvidia-smi)", fmt::format("{:.2f}", e.total.as_gib()), ""});
  out += t.render_markdown();
  for (const auto& a : in.assumptions) out += "\n- model assumption: " + a;
  for (const auto& a : e.assumptions) out += "\n- assumption: " + a;
  for (const auto& w : in.warnings) out += "\n- warning: " + w;
  for (const auto& w : e.warnings) out += "\n- warning: " + w;
  if (!e.assumptions.empty() || !e.warnings.empty() || !in.warnings.empty() || !in.assumptions.empty()) out += "\n";
  return out;
}

// (input, value) for every input --show-config lists, in a stable order.
std::vector<std::pair<std::string, std::string>> input_values(const io::ResolvedInputs& in) {
  const TrainingConfig& c = in.config;
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  std::vector<std::pair<std::string, std::string>> v = {
      {"model", in.model_name.empty() ? std::string("(none)") : in.model_name},
      {"method", to_string(c.method)},
      {"batch", std::to_string(c.micro_batch)},
      {"grad_accum", std::to_string(c.grad_accum)},
      {"seq_len", std::to_string(c.seq_len)},
      {"torch_dtype", to_string(c.torch_dtype)},
      {"autocast", c.autocast ? to_string(*c.autocast) : "none"},
      {"optim", to_string(c.optim.kind)},
      {"gradient_checkpointing", b(c.gradient_checkpointing)},
      {"attn_implementation", to_string(c.attn_impl())},
      {"device", to_string(c.device)},
      {"use_peft", b(c.lora.enabled)},
  };
  if (c.gradient_checkpointing) {  // after gradient_checkpointing
    auto at = v.insert(std::find_if(v.begin(), v.end(), [](const auto& kv) { return kv.first == "gradient_checkpointing"; }) + 1,
                       {"use_reentrant", b(c.reentrant_checkpointing())});
    if (c.checkpoint_every > 1) v.insert(at + 1, {"checkpoint_every", std::to_string(c.checkpoint_every)});
    if (c.checkpoint_policy == TrainingConfig::CheckpointPolicy::kOp) v.insert(at + 1, {"checkpoint_policy", "op"});
  }
  if (!c.loss_upcast) v.push_back({"loss_dtype", "logits"});
  if (c.zero_grad_keeps_grads) v.push_back({"zero_grad", "set_to_none=false"});  // torch < 2.0 (stack)
  if (!c.optim.args.empty()) {
    std::string args;
    for (const auto& [k, val] : c.optim.args) args += (args.empty() ? "" : ",") + k + "=" + val;
    v.insert(v.begin() + 8, {"optim_args", args});
  }
  if (c.lora.enabled) {
    v.push_back({"lora_r", std::to_string(c.lora.r)});
    v.push_back({"lora_alpha", fmt::format("{:g}", c.lora.alpha)});
    v.push_back({"lora_dropout", fmt::format("{:g}", c.lora.dropout)});
    v.push_back({"lora_target_modules", c.lora.all_linear              ? std::string("all-linear")
                                        : c.lora.target_modules.empty() ? std::string("(PEFT default)")
                                                                        : fmt::format("{}", fmt::join(c.lora.target_modules, ","))});
    if (!c.lora.modules_to_save.empty())
      v.push_back({"modules_to_save", fmt::format("{}", fmt::join(c.lora.modules_to_save, ","))});
  }
  if (in.model.is_encoder()) v.push_back({"head", to_string(in.model.head)});
  if (c.contrastive.enabled()) {
    v.push_back({"texts_per_example", std::to_string(c.contrastive.texts_per_example)});
    v.push_back({"cached_mnrl", b(c.contrastive.cached)});
    if (c.contrastive.cached) v.push_back({"mini_batch_size", std::to_string(c.contrastive.mini_batch_size)});
  }
  if (c.quant.load_in_4bit || c.quant.load_in_8bit) {
    v.push_back({"load_in_4bit", b(c.quant.load_in_4bit)});
    v.push_back({"load_in_8bit", b(c.quant.load_in_8bit)});
    if (c.quant.load_in_4bit) {
      v.push_back({"bnb_4bit_quant_type", c.quant.quant_type});
      v.push_back({"bnb_4bit_use_double_quant", b(c.quant.double_quant)});
      v.push_back({"bnb_4bit_quant_storage", c.quant.quant_storage ? to_string(*c.quant.quant_storage) : "uint8"});
      v.push_back({"kbit_prepare", to_string(c.quant.kbit_prepare)});
    }
  }
  if (c.lora.enabled) v.push_back({"adapter_dtype", to_string(effective_adapter_dtype(c))});
  if (!in.model.is_encoder() && !in.model.embeds())
    v.push_back({"transformers_loss", to_string(c.loss_shift)});
  if (c.method == Method::kDpo) {
    const char* ref = c.dpo.ref_model == RefModel::kCopy ? "copy" : c.dpo.ref_model == RefModel::kNone ? "none" : "auto";
    v.push_back({"ref_model", ref});
    v.push_back({"precompute_ref_log_probs", b(c.dpo.precompute_ref_log_probs)});
  }
  if (c.method == Method::kGrpo) {
    const auto& g = c.grpo;
    v.push_back({"num_generations", std::to_string(g.num_generations)});
    v.push_back({"max_prompt_length", std::to_string(g.max_prompt_length)});
    v.push_back({"max_completion_length", std::to_string(g.max_completion_length)});
    v.push_back({"beta", fmt::format("{:g}", g.beta)});
    v.push_back({"use_vllm", b(g.vllm != VllmMode::kNone)});
    if (g.vllm != VllmMode::kNone) {
      v.push_back({"vllm_mode", g.vllm == VllmMode::kServer ? "server" : "colocate"});
      v.push_back({"vllm_gpu_memory_utilization", fmt::format("{:g}", g.vllm_gpu_memory_utilization)});
    }
  }
  const auto& p = c.parallel;
  v.push_back({"num_gpus", std::to_string(p.num_gpus)});
  v.push_back({"nodes", std::to_string(p.nodes)});
  v.push_back({"sharding", to_string(p.sharding)});
  if (p.fsdp_version != 1) v.push_back({"fsdp_version", std::to_string(p.fsdp_version)});
  // Shown when on, or when a version decided it was off (accelerate's upcast, docs/formulas.md#versions).
  if (p.fsdp_mixed_precision || in.origins.count("fsdp_mixed_precision"))
    v.push_back({"fsdp_mixed_precision", b(p.fsdp_mixed_precision)});
  v.push_back({"offload_optimizer", b(p.offload_optimizer)});
  v.push_back({"offload_params", b(p.offload_params)});
  if (p.sharding == ShardingStrategy::kZero1 || p.sharding == ShardingStrategy::kZero2 ||
      p.sharding == ShardingStrategy::kZero3) {
    // DeepSpeed's buffer sizes (docs/formulas.md#deepspeed-buffers): its defaults unless a file says.
    const auto& z = p.zero;
    const bool z3 = p.sharding == ShardingStrategy::kZero3;
    const auto size = [](std::int64_t n, bool is_auto, const char* rule) {
      return is_auto ? fmt::format("auto ({})", rule) : std::to_string(n);
    };
    v.push_back({"zero.reduce_bucket_size", size(z.reduce_bucket_size, z.reduce_bucket_auto, "hidden_size^2")});
    v.push_back({"zero.contiguous_gradients", b(z.contiguous_gradients)});
    v.push_back({"zero.overlap_comm", b(z.overlap_comm.value_or(z3))});
    if (z3) {
      v.push_back({"zero.stage3_prefetch_bucket_size",
                   size(z.prefetch_bucket_size, z.prefetch_bucket_auto, "0.9 x hidden_size^2")});
      v.push_back({"zero.stage3_max_live_parameters", std::to_string(z.max_live_parameters)});
      v.push_back({"zero.stage3_max_reuse_distance", std::to_string(z.max_reuse_distance)});
      v.push_back({"zero.stage3_param_persistence_threshold",
                   size(z.param_persistence_threshold, z.persistence_threshold_auto, "10 x hidden_size")});
      v.push_back({"zero.sub_group_size", std::to_string(z.sub_group_size)});
    } else {
      v.push_back({"zero.allgather_bucket_size", std::to_string(z.allgather_bucket_size)});
      v.push_back({"zero.round_robin_gradients", b(z.round_robin_gradients)});
    }
  }
  if (p.tensor_parallel != 1) v.push_back({"tensor_parallel", std::to_string(p.tensor_parallel)});
  if (p.sequence_parallel) v.push_back({"sequence_parallel", b(true)});
  if (p.megatron_core) v.push_back({"megatron_core", b(true)});
  if (p.loss_parallel) v.push_back({"loss_parallel", b(true)});
  if (!p.fsdp_reshard_after_forward) v.push_back({"fsdp_reshard_after_forward", b(false)});
  if (p.dp_replicate > 0) v.push_back({"dp_replicate", std::to_string(p.dp_replicate)});
  if (p.pipeline_parallel != 1) {
    v.push_back({"pipeline_parallel", std::to_string(p.pipeline_parallel)});
    v.push_back({"pp_schedule", to_string(p.pp_schedule)});
    if (p.virtual_stages != 1) v.push_back({"virtual_stages", std::to_string(p.virtual_stages)});
    if (p.pp_first_stage_layers > 0) v.push_back({"pp_first_stage_layers", std::to_string(p.pp_first_stage_layers)});
    if (p.pp_last_stage_layers > 0) v.push_back({"pp_last_stage_layers", std::to_string(p.pp_last_stage_layers)});
    if (p.pp_layers_per_stage > 0) v.push_back({"pp_layers_per_stage", std::to_string(p.pp_layers_per_stage)});
  }
  if (p.context_parallel != 1) v.push_back({"context_parallel", std::to_string(p.context_parallel)});
  if (p.expert_parallel != 1) v.push_back({"expert_parallel", std::to_string(p.expert_parallel)});
  if (p.expert_tensor_parallel > 0 && p.expert_tensor_parallel != std::max(1, p.tensor_parallel))
    v.push_back({"expert_tensor_parallel", std::to_string(p.expert_tensor_parallel)});
  if (p.moe_capacity_factor > 0) v.push_back({"moe_capacity_factor", fmt::format("{:g}", p.moe_capacity_factor)});
  return v;
}

std::string source_of(const io::ResolvedInputs& in, const std::string& key) {
  auto it = in.origins.find(key);
  if (it == in.origins.end()) return "default";
  const io::Origin& o = it->second;
  if (o.kind == io::OriginKind::kFile && !o.note.empty()) return fmt::format("{} ({})", o.to_string(), o.note);
  return o.to_string();
}

}  // namespace

std::string render_sources(const io::ResolvedInputs& in, const io::LoadedConfig* loaded, Format f) {
  const auto values = input_values(in);
  if (f == Format::kJson) {
    nlohmann::ordered_json inputs = nlohmann::ordered_json::array();
    for (const auto& [k, v] : values) inputs.push_back({{"input", k}, {"value", v}, {"source", source_of(in, k)}});
    nlohmann::ordered_json j = {{"schema", kSchema}, {"command", "show-config"}};
    if (loaded != nullptr) {
      nlohmann::ordered_json files = nlohmann::ordered_json::array();
      for (const auto& file : loaded->files) files.push_back(file.path);
      j["dialect"] = io::to_string(loaded->dialect);
      j["evidence"] = loaded->evidence;
      j["files"] = files;
    }
    j["inputs"] = inputs;
    j["stack"] = stack_json(in);
    j["warnings"] = in.warnings;
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  std::string out;
  if (loaded != nullptr) {
    out += fmt::format("dialect: {} ({})\n", io::to_string(loaded->dialect), fmt::join(loaded->evidence, ", "));
    for (const auto& file : loaded->files) out += fmt::format("file:    {}\n", file.path);
    out += "\n";
  }
  TextTable t({"input", "value", "source"}, {Align::kLeft, Align::kLeft, Align::kLeft});
  for (const auto& [k, v] : values) t.add_row({k, v, source_of(in, k)});
  out += t.render();
  out += "\n";
  TextTable libs({"library", "version", "source"}, {Align::kLeft, Align::kLeft, Align::kLeft});
  for (const auto& row : stack_rows(in)) libs.add_row({row.library, row.version, row.source});
  out += libs.render();
  for (const auto& w : in.warnings) out += "warning: " + w + "\n";
  return out;
}

namespace {

// One line: "on NVIDIA H100 ...: fits, peak 13.15 GiB <= budget 70.58 GiB (79.10 GiB - safety
// margin 8.91 GiB - headroom 0.00 GiB)".
std::string fit_line(const EstimateFit& f, const Estimate& e) {
  const bool fits = f.fits(e);
  return fmt::format("on {}: {}, peak {:.2f} GiB {} budget {:.2f} GiB ({:.2f} GiB - safety margin {:.2f} GiB - "
                     "headroom {:.2f} GiB)",
                     f.gpu, fits ? "fits" : "does not fit", e.peak.as_gib(), fits ? "<=" : ">",
                     f.budget.budget().as_gib(), f.budget.capacity.as_gib(), f.budget.safety_margin.as_gib(),
                     f.budget.headroom.as_gib());
}

}  // namespace

std::string render_estimate(const io::ResolvedInputs& in, const Estimate& e, Format f,
                            const std::optional<EstimateFit>& fit) {
  switch (f) {
    case Format::kJson:
    case Format::kHtml: {
      nlohmann::ordered_json j = {{"schema", kSchema}, {"command", "estimate"}, {"inputs", inputs_json(in)},
                          {"estimate", to_json(e)}};
      if (fit)
        j["fit"] = {{"gpu", fit->gpu},
                    {"fits", fit->fits(e)},
                    {"peak_bytes", e.peak.count()},
                    {"budget_bytes", fit->budget.budget().count()},
                    {"capacity_bytes", fit->budget.capacity.count()},
                    {"safety_margin_bytes", fit->budget.safety_margin.count()},
                    {"headroom_bytes", fit->budget.headroom.count()}};
      j["warnings"] = in.warnings;
      if (f == Format::kHtml) return estimate_html(j);
      return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    case Format::kMarkdown: return render_markdown(in, e) + (fit ? "\n**" + fit_line(*fit, e) + "**\n" : "");
    case Format::kText:
    case Format::kGithub: return render_text(in, e) + (fit ? fit_line(*fit, e) + "\n" : "");
  }
  return {};
}

}  // namespace memplan::report

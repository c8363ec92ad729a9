#include "report/json.hpp"

#include "report/format.hpp"
#include "memplan/text.hpp"

namespace memplan::report {

using json = nlohmann::ordered_json;

Result<Format> parse_format(const std::string& s, bool html) {
  const std::string t = to_lower(s);
  if (t == "html") {
    if (html) return Format::kHtml;
    return make_error(ErrorCode::kInvalidArgument, "--format html is a page for estimate, plan and sweep only",
                      "use text, json, markdown or github here");
  }
  if (t == "text") return Format::kText;
  if (t == "json") return Format::kJson;
  if (t == "markdown" || t == "md") return Format::kMarkdown;
  if (t == "github") return Format::kGithub;
  return make_error(ErrorCode::kUnknownName, "unknown format '" + s + "'",
                    did_you_mean(t, html ? std::vector<std::string>{"text", "json", "markdown", "github", "html"}
                                         : std::vector<std::string>{"text", "json", "markdown", "github"}));
}

json to_json(const ModelSpec& m) {
  const auto c = count_parameters(m);
  json j = {{"name", m.name},
            {"model_type", m.model_type},
            {"vocab_size", m.vocab_size},
            {"hidden_size", m.hidden_size},
            {"intermediate_size", m.intermediate_size},
            {"num_hidden_layers", m.num_layers},
            {"num_attention_heads", m.num_heads},
            {"num_key_value_heads", m.num_kv_heads},
            {"head_dim", m.head_dim},
            {"tie_word_embeddings", m.tie_word_embeddings},
            {"parameters", c.total}};
  if (m.moe.enabled())
    j["moe"] = {{"num_experts", m.moe.num_experts},
                {"experts_per_token", m.moe.experts_per_token},
                {"expert_intermediate_size", m.moe.expert_intermediate_size},
                {"num_shared_experts", m.moe.num_shared_experts},
                {"active_parameters", c.active_per_token}};
  if (m.vision.enabled())
    j["vision"] = {{"model_type", m.vision.model_type},
                   {"kind", to_string(m.vision.kind)},
                   {"depth", m.vision.depth},
                   {"hidden_size", m.vision.hidden_size},
                   {"intermediate_size", m.vision.intermediate_size},
                   {"num_heads", m.vision.num_heads},
                   {"patch_size", m.vision.patch_size},
                   {"tower_parameters", c.vision},
                   {"projector_parameters", c.projector}};
  if (m.sliding_window > 0) {
    j["sliding_window"] = m.sliding_window;
    j["full_attention_layers"] = m.full_attention_layers;
  }
  if (m.is_encoder() || m.decoder_embedding) j["head"] = m.is_encoder() ? to_string(m.head) : "pooling";
  if (m.embeds()) {  // sentence embeddings: how they are pooled, and by which library
    j["pooling"] = to_string(m.pooling);
    j["embedding_library"] = to_string(m.embedding_library);
    if (!m.st_dense.empty()) {  // sentence-transformers Dense modules after the pooling
      json dense = json::array();
      for (const DenseModule& d : m.st_dense)
        dense.push_back({{"in_features", d.in_features},
                         {"out_features", d.out_features},
                         {"bias", d.bias},
                         {"activation", d.tanh ? "tanh" : "identity"}});
      j["dense_modules"] = std::move(dense);
    }
  }
  if (m.bidirectional) j["bidirectional"] = true;  // Gemma 3 use_bidirectional_attention
  if (!m.cross_attention_layers.empty()) {  // mllama: its global layers, tiles and cross-attention layers
    j["vision"]["global_depth"] = m.vision.global_depth;
    j["vision"]["max_num_tiles"] = m.vision.max_num_tiles;
    j["vision"]["image_size"] = m.vision.image_size;
    j["cross_attention_layers"] = m.cross_attention_layers;
  }
  return j;
}

json to_json(const TrainingConfig& c) {
  json j = {{"method", to_string(c.method)},
            {"micro_batch", c.micro_batch},
            {"seq_len", c.seq_len},
            {"grad_accum", c.grad_accum},
            {"torch_dtype", to_string(c.torch_dtype)},
            {"autocast", c.autocast ? json(to_string(*c.autocast)) : json(nullptr)},
            {"optim", to_string(c.optim.kind)},
            {"optim_args", c.optim.args},
            {"gradient_checkpointing", c.gradient_checkpointing},
            {"use_reentrant", c.gradient_checkpointing ? json(c.reentrant_checkpointing()) : json(nullptr)},
            {"checkpoint_every", c.checkpoint_every},
            {"checkpoint_policy", c.checkpoint_policy == TrainingConfig::CheckpointPolicy::kOp ? "op" : "full"},
            {"loss_dtype", c.loss_upcast ? "float32" : "logits"},
            {"attn_implementation", to_string(c.attn_impl())},
            {"loss_kernel", to_string(c.loss_kernel)},
            {"model_code", to_string(c.model_code)},
            {"liger_kernels", c.liger_kernels},
            {"device", to_string(c.device)}};
  if (c.lora.enabled) {
    j["peft"] = {{"lora_r", c.lora.r},
                 {"lora_alpha", c.lora.alpha},
                 {"lora_dropout", c.lora.dropout},
                 {"lora_target_modules", c.lora.all_linear ? json("all-linear") : json(c.lora.target_modules)},
                 {"modules_to_save", c.lora.modules_to_save}};
  } else {
    j["peft"] = nullptr;
  }
  if (c.quant.load_in_4bit || c.quant.load_in_8bit)
    j["quantization"] = {{"load_in_4bit", c.quant.load_in_4bit},
                         {"load_in_8bit", c.quant.load_in_8bit},
                         {"bnb_4bit_quant_type", c.quant.quant_type},
                         {"bnb_4bit_use_double_quant", c.quant.double_quant}};
  if (c.method == Method::kDpo)
    j["dpo"] = {{"sequences_per_forward", 2 * c.micro_batch},
                {"ref_model", c.dpo.ref_model == RefModel::kNone ? "none" : c.dpo.ref_model == RefModel::kCopy ? "copy" : "auto"},
                {"precompute_ref_log_probs", c.dpo.precompute_ref_log_probs}};
  if (c.method == Method::kGrpo)
    j["grpo"] = {{"num_generations", c.grpo.num_generations},
                 {"max_prompt_length", c.grpo.max_prompt_length},
                 {"max_completion_length", c.grpo.max_completion_length},
                 {"beta", c.grpo.beta},
                 {"temperature", c.grpo.temperature},
                 {"vllm_mode", c.grpo.vllm == VllmMode::kNone ? "none" : c.grpo.vllm == VllmMode::kColocate ? "colocate" : "server"},
                 {"vllm_gpu_memory_utilization", c.grpo.vllm_gpu_memory_utilization}};
  const auto& p = c.parallel;
  j["parallel"] = {{"num_gpus", p.num_gpus},
                   {"nodes", p.nodes},
                   {"tensor_parallel", p.tensor_parallel},
                   {"sequence_parallel", p.sequence_parallel},
                   {"megatron_core", p.megatron_core},
                   {"loss_parallel", p.loss_parallel},
                   {"dp_replicate", p.dp_replicate},
                   {"pipeline_parallel", p.pipeline_parallel},
                   {"pp_schedule", to_string(p.pp_schedule)},
                   {"virtual_stages", p.virtual_stages},
                   {"context_parallel", p.context_parallel},
                   {"expert_parallel", p.expert_parallel},
                   {"expert_tensor_parallel", p.expert_tensor_parallel_size()},
                   {"moe_capacity_factor", p.moe_capacity_factor},
                   {"data_parallel", p.data_parallel_size()},
                   {"sharding", to_string(p.sharding)},
                   {"fsdp_version", p.fsdp_version},
                   {"fsdp_reshard_after_forward", p.fsdp_reshard_after_forward},
                   {"offload_optimizer", p.offload_optimizer},
                   {"offload_params", p.offload_params}};
  if (p.fsdp_mixed_precision) j["parallel"]["fsdp_mixed_precision"] = true;  // FSDP MixedPrecisionPolicy
  if (c.vision != VisionInputs{})  // vision-language models (docs/formulas.md#vision-language-models)
    j["vision"] = {{"images", c.vision.images < 0 ? json(nullptr) : json(c.vision.images)},
                   {"image_height", c.vision.image_height},
                   {"image_width", c.vision.image_width},
                   {"train_vision_tower", c.vision.train_vision_tower},
                   {"train_projector", c.vision.train_projector}};
  return j;
}

json to_json(const Estimate& e) {
  json comps = json::array();
  for (const auto& c : e.components)
    comps.push_back({{"name", c.name}, {"bytes", c.bytes.count()}, {"placement", to_string(c.placement)},
                     {"detail", c.detail}});
  json over = json::array();
  for (const auto& c : e.overhead) over.push_back({{"name", c.name}, {"bytes", c.bytes.count()}, {"detail", c.detail}});
  json phases = json::array();
  for (const auto& p : e.phases) phases.push_back({{"phase", to_string(p.phase)}, {"peak_bytes", p.peak.count()}});
  json out = {{"peak_bytes", e.peak.count()},
          {"peak_phase", to_string(e.peak_phase)},
          {"reserved_bytes", e.reserved.count()},
          {"total_bytes", e.total.count()},
          {"components", comps},
          {"overhead", over},
          {"phases", phases},
          {"parameters", {{"total", e.params.total}, {"trainable", e.params.trainable}}},
          {"assumptions", e.assumptions},
          {"warnings", e.warnings}};
  // Pipeline parallelism: the numbers are the worst stage's.
  if (e.pipeline_ranks > 0) out["pipeline"] = {{"worst_stage", e.pipeline_rank}, {"stages", e.pipeline_ranks}};
  return out;
}

std::vector<StackRow> stack_rows(const io::ResolvedInputs& in) {
  std::vector<StackRow> rows;
  for (Library l : all_libraries()) {
    const auto it = in.stack_origins.find(l);
    rows.push_back({std::string(library_name(l)), in.stack.of(l).text,
                    it != in.stack_origins.end() ? it->second.to_string()
                                                 : "default (the newest release memplan models)"});
  }
  return rows;
}

nlohmann::ordered_json stack_json(const io::ResolvedInputs& in) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& r : stack_rows(in))
    out.push_back({{"library", r.library}, {"version", r.version}, {"source", r.source}});
  return out;
}

json inputs_json(const io::ResolvedInputs& in) {
  json sources = json::object();
  for (const auto& [k, o] : in.origins) sources[k] = o.to_string();
  json j = {{"model", to_json(in.model)}, {"training", to_json(in.config)}, {"sources", sources}};
  j["stack"] = stack_json(in);
  if (in.model_from_param_count) j["model"]["assumed_shape"] = true;
  j["assumptions"] = in.assumptions;
  if (!in.notes.empty()) j["notes"] = in.notes;
  if (!in.assumptions.empty()) j["assumptions"] = in.assumptions;
  j["warnings"] = in.warnings;
  return j;
}

}  // namespace memplan::report

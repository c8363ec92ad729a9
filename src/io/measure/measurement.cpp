#include "io/measure/measurement.hpp"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/model/model_source.hpp"
#include "memplan/plan.hpp"

namespace memplan::io {

using nlohmann::json;

namespace {

Error case_error(const std::string& path, const std::string& id, const std::string& msg) {
  Error e = make_error(ErrorCode::kInvalidConfig, fmt::format("case '{}': {}", id, msg));
  e.where = SourceLocation{path, 0, 0};
  return e;
}

Result<MeasuredCase> parse_case(const json& j, const std::string& path) {
  MeasuredCase c;
  c.id = j.value("id", std::string("?"));
  if (!j.contains("model") || !j.contains("training") || !j.contains("measured"))
    return case_error(path, c.id, "needs \"model\", \"training\" and \"measured\"");
  json model = j["model"];
  if (!model.contains("model_type")) model["model_type"] = "llama";
  MEMPLAN_TRY(c.model, parse_hf_config(model.dump(), path + ":" + c.id));
  c.model.name = c.id;
  const json& t = j["training"];
  if (c.model.is_encoder()) {  // encoder cases: head and contrastive texts (docs/formulas.md#encoders)
    MEMPLAN_TRY(c.model.head, parse_encoder_head(t.value("head", std::string("pooling"))));
    c.config.contrastive.texts_per_example = t.value("texts_per_example", 0);
  } else if (t.value("head", std::string()) == "pooling") {  // a decoder embedding model (docs/formulas.md#decoder-embeddings)
    c.model.decoder_embedding = true;
    c.config.contrastive.texts_per_example = t.value("texts_per_example", 2);
  }
  if (c.model.embeds()) {  // CachedMultipleNegativesRankingLoss (GradCache)
    c.config.contrastive.cached = t.value("cached_mnrl", false);
    c.config.contrastive.mini_batch_size = t.value("mini_batch_size", 32);
  }
  if (c.model.embeds() && t.contains("pooling")) {
    MEMPLAN_TRY(c.model.pooling, parse_pooling_mode(t.value("pooling", std::string("mean"))));
  }
  if (c.model.embeds() && t.contains("sentence_transformers")) {  // its Dense modules (docs/formulas.md#embeddinggemma)
    MEMPLAN_TRY(c.model.st_dense, parse_dense_modules(t["sentence_transformers"].dump(), path + ":" + c.id));
    if (auto ok = check_dense_width(c.model, path + ":" + c.id); !ok) return ok.error();
  }
  if (c.model.decoder_embedding && t.value("embedding_library", std::string()) == to_string(EmbeddingLibrary::kLlm2Vec))
    c.model.embedding_library = EmbeddingLibrary::kLlm2Vec;
  TrainingConfig& cfg = c.config;
  MEMPLAN_TRY(cfg.device, parse_device(t.value("device", std::string("cpu"))));
  cfg.micro_batch = t.value("batch", 1);
  cfg.seq_len = t.value("seq_len", 1024);
  MEMPLAN_TRY(cfg.torch_dtype, parse_dtype(t.value("torch_dtype", std::string("float32"))));
  if (t.contains("autocast") && t["autocast"].is_string()) {
    MEMPLAN_TRY(DType a, parse_dtype(t["autocast"].get<std::string>()));
    cfg.autocast = a;
  }
  MEMPLAN_TRY(cfg.optim.kind, parse_optimizer(t.value("optim", std::string("adamw_torch"))));
  if (t.contains("optim_args") && t["optim_args"].is_object())
    for (const auto& [k, v] : t["optim_args"].items())
      cfg.optim.args[k] = v.is_string() ? v.get<std::string>() : v.dump();
  MEMPLAN_TRY(cfg.method, parse_method(t.value("method", std::string("sft"))));
  cfg.dpo.precompute_ref_log_probs = t.value("precompute_ref_log_probs", false);
  if (t.value("ref_model", std::string("auto")) == "none") cfg.dpo.ref_model = RefModel::kNone;
  cfg.grpo.beta = t.value("beta", 0.0);
  cfg.grpo.temperature = t.value("temperature", 1.0);
  cfg.grpo.max_prompt_length = t.value("max_prompt_length", std::int64_t{512});
  cfg.grpo.max_completion_length = t.value("max_completion_length", std::int64_t{256});
  cfg.gradient_checkpointing = t.value("gradient_checkpointing", false);
  if (t.contains("checkpoint_reentrant")) cfg.checkpoint_reentrant = t["checkpoint_reentrant"].get<bool>();
  if (t.value("checkpoint_policy", std::string("full")) == "op") cfg.checkpoint_policy = TrainingConfig::CheckpointPolicy::kOp;
  MEMPLAN_TRY(cfg.attn, parse_attn_impl(t.value("attn_implementation", std::string("eager"))));
  MEMPLAN_TRY(cfg.loss_kernel, parse_loss_kernel(t.value("loss_kernel", std::string("eager"))));
  MEMPLAN_TRY(cfg.model_code, parse_model_code(t.value("model_code", std::string("transformers"))));
  if (t.contains("lora") && t["lora"].is_object()) {
    const json& l = t["lora"];
    cfg.lora.enabled = true;
    cfg.lora.r = l.value("r", 16);
    cfg.lora.alpha = l.value("alpha", 32.0);
    cfg.lora.dropout = l.value("dropout", 0.05);
    if (l.contains("target_modules")) {
      if (l["target_modules"].is_string() && l["target_modules"].get<std::string>() == "all-linear")
        cfg.lora.all_linear = true;
      else if (l["target_modules"].is_array())
        for (const auto& m : l["target_modules"]) cfg.lora.target_modules.push_back(m.get<std::string>());
    }
    if (l.contains("modules_to_save"))
      for (const auto& m : l["modules_to_save"]) cfg.lora.modules_to_save.push_back(m.get<std::string>());
  }
  if (t.contains("lora") && t["lora"].is_object() && t["lora"].contains("adapter_dtype")) {
    MEMPLAN_TRY(DType a, parse_dtype(t["lora"]["adapter_dtype"].get<std::string>()));
    cfg.lora.adapter_dtype = a;
  }
  // Published cases (tests/data/published/) also name quantization, multi-GPU and library paths.
  if (t.contains("quant") && t["quant"].is_object()) {
    const json& q = t["quant"];
    cfg.quant.load_in_4bit = q.value("load_in_4bit", false);
    cfg.quant.load_in_8bit = q.value("load_in_8bit", false);
    cfg.quant.quant_type = q.value("quant_type", std::string("nf4"));
    cfg.quant.double_quant = q.value("double_quant", false);
    if (q.contains("compute_dtype")) {
      MEMPLAN_TRY(DType d, parse_dtype(q["compute_dtype"].get<std::string>()));
      cfg.quant.compute_dtype = d;
    }
    const std::string storage = q.value("quant_storage", std::string("uint8"));
    if (storage != "uint8") {
      MEMPLAN_TRY(DType d, parse_dtype(storage));
      cfg.quant.quant_storage = d;
    }
    const std::string prep = q.value("kbit_prepare", std::string("freeze_only"));
    if (prep == "peft_upcast") cfg.quant.kbit_prepare = QuantConfig::KbitPrepare::kPeftUpcast;
    else if (prep == "trl_legacy") cfg.quant.kbit_prepare = QuantConfig::KbitPrepare::kTrlLegacy;
    else if (prep != "freeze_only") return case_error(path, c.id, "quant.kbit_prepare must be freeze_only, peft_upcast or trl_legacy");
  }
  // Vision-language cases (tools/measure/hf_qwen_vl.py): square images of image_size pixels.
  if (c.model.vision.enabled()) {
    cfg.vision.images = t.value("images", 1);
    cfg.vision.image_height = cfg.vision.image_width = t.value("image_size", std::int64_t{0});
    // Mistral 3 cases (tools/measure/hf_pixtral.py) may give a non-square image.
    cfg.vision.image_height = t.value("image_height", cfg.vision.image_height);
    cfg.vision.image_width = t.value("image_width", cfg.vision.image_width);
    cfg.vision.train_vision_tower = t.value("train_vision_tower", false);
    cfg.vision.train_projector = t.value("train_projector", false);
  }
  cfg.parallel.num_gpus = t.value("num_gpus", 1);
  if (t.contains("fsdp")) {
    MEMPLAN_TRY(cfg.parallel.sharding, parse_fsdp(t["fsdp"].get<std::string>()));
  }
  // fp32 trainable shards gathered in 16 bits: torchtitan's policy, or accelerate's upcast of a
  // 16-bit model under the Trainer's mixed precision (docs/formulas.md#accelerate-fsdp-upcast).
  cfg.parallel.fsdp_mixed_precision = t.value("fsdp_mixed_precision", false);
  const std::string loss = t.value("transformers_loss", std::string("pad_labels"));
  if (loss == "shift_contiguous") cfg.loss_shift = TrainingConfig::LossShift::kShiftLogitsCopy;
  else if (loss == "upcast_in_model") cfg.loss_shift = TrainingConfig::LossShift::kUpcastInModel;
  else if (loss != "pad_labels")
    return case_error(path, c.id, "transformers_loss must be pad_labels, shift_contiguous or upcast_in_model");
  // The run's PYTORCH_CUDA_ALLOC_CONF: the reserved-memory replay follows it.
  if (const std::string conf = j.value("allocator_conf", std::string()); !conf.empty()) {
    auto a = parse_allocator_conf(conf);
    if (!a) return case_error(path, c.id, a.error().message);
    cfg.allocator = *a;
  }
  const json& m = j["measured"];
  c.peak_bytes = m.value("peak_bytes", std::int64_t{0});
  c.reserved_bytes = m.value("reserved_bytes", std::int64_t{0});
  c.peak_phase = m.value("peak_phase", std::string());
  c.known_gap = j.value("known_gap", std::string());
  if (j.contains("flags") && j["flags"].is_array())
    for (const auto& f : j["flags"]) c.flags.push_back(f.get<std::string>());
  c.stack = j.value("stack", std::string());
  if (m.contains("phases"))
    for (const auto& [k, v] : m["phases"].items())
      if (v.is_number()) c.phase_peaks[k] = v.get<std::int64_t>();
  if (c.peak_bytes <= 0) return case_error(path, c.id, "measured.peak_bytes must be positive");
  // A published row whose only figure is max_memory_reserved: that figure is its measured.peak_bytes.
  if (j.value("reserved_only", false)) {
    c.reserved_only = true;
    c.reserved_bytes = c.peak_bytes;
  }
  return c;
}

Result<json> read_json_list(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(ErrorCode::kIoError, fmt::format("cannot read '{}'", path));
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::exception& e) {
    Error err = make_error(ErrorCode::kParseError, fmt::format("invalid JSON: {}", e.what()));
    err.where = SourceLocation{path, 0, 0};
    return err;
  }
  // A published-data file (tests/data/published/) keeps its cases under "cases" with its source,
  // and the rows that report max_memory_reserved under "reserved_only" (either may be absent).
  if (j.is_object() && (j.contains("cases") || j.contains("reserved_only"))) {
    json cases = j.value("cases", json::array());
    for (json c : j.value("reserved_only", json::array())) {
      c["reserved_only"] = true;
      cases.push_back(std::move(c));
    }
    j = std::move(cases);
  }
  if (!j.is_array()) return case_error(path, "-", "the file must hold a JSON list of cases");
  return j;
}

}  // namespace

Result<std::vector<CapacityCase>> load_capacity(const std::string& path) {
  MEMPLAN_TRY(json j, read_json_list(path));
  std::vector<CapacityCase> out;
  try {
    for (json c : j) {
      if (!c.contains("runs") || !c["runs"].is_array())
        return case_error(path, c.value("id", std::string("?")), "needs \"runs\"");
      CapacityCase cc;
      for (const auto& r : c["runs"]) {
        const std::int64_t b = r.value("batch", std::int64_t{0});
        if (r.value("oom", false)) {
          if (cc.smallest_oom == 0 || b < cc.smallest_oom) cc.smallest_oom = b;
        } else if (b > cc.largest_ran) {
          cc.largest_ran = b;
        }
      }
      cc.allocator_conf = c.value("allocator_conf", std::string());
      c["training"]["batch"] = 1;
      c["measured"] = json{{"peak_bytes", 1}};
      MEMPLAN_TRY(MeasuredCase mc, parse_case(c, path));
      cc.id = mc.id;
      cc.model = std::move(mc.model);
      cc.config = std::move(mc.config);
      out.push_back(std::move(cc));
    }
  } catch (const json::exception& e) {
    return case_error(path, "-", e.what());
  }
  return out;
}

Result<std::vector<MeasuredCase>> load_measurements(const std::string& path) {
  MEMPLAN_TRY(json j, read_json_list(path));
  std::vector<MeasuredCase> out;
  try {
    for (const auto& c : j) {
      MEMPLAN_TRY(MeasuredCase mc, parse_case(c, path));
      out.push_back(std::move(mc));
    }
  } catch (const json::exception& e) {
    return case_error(path, "-", e.what());
  }
  return out;
}

}  // namespace memplan::io

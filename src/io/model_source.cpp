#include "io/model_source.hpp"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/embedded.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Error config_error(const std::string& origin, const std::string& msg, std::string suggestion = {}) {
  Error e = make_error(ErrorCode::kInvalidConfig, msg, std::move(suggestion));
  e.where = SourceLocation{origin, 0, 0};
  return e;
}

// Reads an integer field, trying each name in turn (configs name the same thing differently).
Result<std::int64_t> get_int(const json& j, std::initializer_list<const char*> names, const std::string& origin,
                             std::optional<std::int64_t> fallback = std::nullopt) {
  for (const char* n : names) {
    auto it = j.find(n);
    if (it == j.end() || it->is_null()) continue;
    if (it->is_number_integer() || it->is_number_unsigned()) return it->get<std::int64_t>();
    if (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>())
      return static_cast<std::int64_t>(it->get<double>());
    return config_error(origin, fmt::format("\"{}\" must be an integer, got {}", n, it->dump()));
  }
  if (fallback) return *fallback;
  return config_error(origin, fmt::format("missing \"{}\"", *names.begin()));
}

bool get_bool(const json& j, const char* name, bool fallback) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_boolean()) return fallback;
  return it->get<bool>();
}

std::string get_string(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

double get_double(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

Activation parse_activation(const std::string& s) {
  if (s == "gelu" || s == "gelu_new" || s == "gelu_fast") return s == "gelu" ? Activation::kGelu : Activation::kGeluTanh;
  if (s == "gelu_pytorch_tanh") return Activation::kGeluTanh;
  if (s == "relu") return Activation::kRelu;
  return Activation::kSilu;
}

const std::vector<std::string>& known_model_types() {
  static const std::vector<std::string> t = {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text",
                                             "phi3", "gpt2", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek",
                                             "olmo2", "granite", "smollm3"};
  return t;
}

}  // namespace

Result<ModelSpec> parse_hf_config(std::string_view text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    Error err = make_error(ErrorCode::kParseError, fmt::format("invalid JSON: {}", e.what()));
    err.where = SourceLocation{origin, 0, 0};
    return err;
  }
  if (!j.is_object()) return config_error(origin, "config.json must be a JSON object");
  // Multimodal configs (Gemma 3) keep the language model under text_config.
  if (j.contains("text_config") && j["text_config"].is_object()) {
    json t = j["text_config"];
    if (!t.contains("model_type") && j.contains("model_type")) t["model_type"] = j["model_type"];
    j = t;
  }
  ModelSpec m;
  m.model_type = get_string(j, "model_type");
  if (m.model_type.empty()) return config_error(origin, "missing \"model_type\"");
  const auto& types = known_model_types();
  if (std::find(types.begin(), types.end(), m.model_type) == types.end())
    return make_error(ErrorCode::kUnsupported,
                      fmt::format("{}: model_type '{}' is not supported", origin, m.model_type),
                      did_you_mean(m.model_type, types));
  const bool gpt2 = m.model_type == "gpt2";
  MEMPLAN_TRY(m.vocab_size, get_int(j, {"vocab_size"}, origin));
  MEMPLAN_TRY(m.hidden_size, get_int(j, {"hidden_size", "n_embd"}, origin));
  MEMPLAN_TRY(std::int64_t layers, get_int(j, {"num_hidden_layers", "n_layer"}, origin));
  MEMPLAN_TRY(std::int64_t heads, get_int(j, {"num_attention_heads", "n_head"}, origin));
  MEMPLAN_TRY(std::int64_t kv, get_int(j, {"num_key_value_heads"}, origin, heads));
  if (layers <= 0 || layers > 4096 || heads <= 0 || heads > 65536 || kv <= 0 || kv > 65536)
    return config_error(origin, "num_hidden_layers, num_attention_heads or num_key_value_heads out of range");
  m.num_layers = static_cast<int>(layers);
  m.num_heads = static_cast<int>(heads);
  m.num_kv_heads = static_cast<int>(kv);
  if (heads <= 0) return config_error(origin, "num_attention_heads must be positive");
  MEMPLAN_TRY(m.head_dim, get_int(j, {"head_dim"}, origin, m.hidden_size / heads));
  MEMPLAN_TRY(m.intermediate_size, get_int(j, {"intermediate_size", "n_inner"}, origin, gpt2 ? 4 * m.hidden_size : 0));
  MEMPLAN_TRY(m.max_position_embeddings, get_int(j, {"max_position_embeddings", "n_positions"}, origin, 0));
  m.tie_word_embeddings = get_bool(j, "tie_word_embeddings", gpt2 || m.model_type.rfind("gemma", 0) == 0);
  m.activation = parse_activation(get_string(j, gpt2 ? "activation_function" : "hidden_act").empty()
                                      ? get_string(j, "hidden_activation")
                                      : get_string(j, gpt2 ? "activation_function" : "hidden_act"));
  m.torch_dtype = get_string(j, "torch_dtype");
  if (m.torch_dtype.empty()) m.torch_dtype = get_string(j, "dtype");
  m.qkv_bias = get_bool(j, "attention_bias", m.model_type == "qwen2" || m.model_type == "qwen2_moe");
  m.o_bias = m.model_type == "qwen2" || m.model_type == "qwen2_moe" ? false : get_bool(j, "attention_bias", false);
  m.mlp_bias = get_bool(j, "mlp_bias", false);
  m.qk_norm = m.model_type == "qwen3" || m.model_type == "qwen3_moe" || m.model_type == "gemma3_text" ||
              m.model_type == "olmo2";
  if (m.model_type == "gemma2" || m.model_type == "gemma3_text") m.norms_per_layer = 4;
  m.scale_embeddings = m.model_type.rfind("gemma", 0) == 0;
  m.final_logit_softcap = get_double(j, "final_logit_softcapping");
  m.attn_logit_softcap = get_double(j, "attn_logit_softcapping");
  MEMPLAN_TRY(m.sliding_window, get_int(j, {"sliding_window"}, origin, 0));
  if (m.model_type == "phi3") {
    m.fused_qkv = true;
    m.fused_gate_up = true;
  }
  if (gpt2) {
    m.norm = NormKind::kLayerNorm;
    m.norm_bias = true;
    m.gated_mlp = false;
    m.learned_positions = true;
    m.qkv_bias = m.o_bias = m.mlp_bias = true;
    m.fused_qkv = true;
  }
  if (j.contains("num_local_experts") || j.contains("num_experts") || j.contains("n_routed_experts")) {
    MEMPLAN_TRY(std::int64_t e, get_int(j, {"num_local_experts", "num_experts", "n_routed_experts"}, origin));
    MEMPLAN_TRY(std::int64_t k, get_int(j, {"num_experts_per_tok"}, origin));
    if (e < 0 || e > 65536 || k < 0 || k > 65536) return config_error(origin, "expert counts out of range");
    m.moe.num_experts = static_cast<int>(e);
    m.moe.experts_per_token = static_cast<int>(k);
    MEMPLAN_TRY(m.moe.expert_intermediate_size,
                get_int(j, {"moe_intermediate_size"}, origin, m.intermediate_size));
    MEMPLAN_TRY(std::int64_t shared, get_int(j, {"n_shared_experts"}, origin, 0));
    MEMPLAN_TRY(std::int64_t shared_width, get_int(j, {"shared_expert_intermediate_size"}, origin, 0));
    if (shared_width > 0) {
      m.moe.num_shared_experts = 1;
      m.moe.shared_intermediate_size = shared_width;
      m.moe.shared_expert_gate = m.model_type == "qwen2_moe";
    } else if (shared > 0) {
      m.moe.num_shared_experts = static_cast<int>(shared);
      m.moe.shared_intermediate_size = m.moe.expert_intermediate_size;
    }
    MEMPLAN_TRY(std::int64_t first_dense, get_int(j, {"first_k_dense_replace"}, origin, 0));
    MEMPLAN_TRY(std::int64_t freq, get_int(j, {"moe_layer_freq", "decoder_sparse_step"}, origin, 1));
    m.moe.first_dense_layers = static_cast<int>(first_dense);
    m.moe.layer_freq = static_cast<int>(freq);
  }
  if (auto s = validate(m); !s) {
    Error e = s.error();
    e.where = SourceLocation{origin, 0, 0};
    return e;
  }
  return m;
}

Result<std::vector<CatalogEntry>> load_catalog() {
  std::vector<CatalogEntry> out;
  for (const auto& f : embedded_files()) {
    if (f.path.rfind("models/", 0) != 0) continue;
    const std::string origin = "configs/" + std::string(f.path);
    json j;
    try {
      j = json::parse(f.content);
    } catch (const json::parse_error& e) {
      return config_error(origin, fmt::format("invalid JSON: {}", e.what()));
    }
    CatalogEntry c;
    c.id = get_string(j, "id");
    c.short_name = get_string(j, "short_name");
    if (j.contains("aliases"))
      for (const auto& a : j["aliases"]) c.aliases.push_back(a.get<std::string>());
    MEMPLAN_TRY(c.published_params, get_int(j, {"published_params"}, origin, 0));
    c.params_source = get_string(j, "params_source");
    if (!j.contains("config")) return config_error(origin, "catalog entry has no \"config\"");
    MEMPLAN_TRY(c.spec, parse_hf_config(j["config"].dump(), origin));
    c.spec.name = c.id;
    out.push_back(std::move(c));
  }
  return out;
}

ModelSearchEnv ModelSearchEnv::from_process() {
  auto env = [](const char* n) {
    const char* v = std::getenv(n);
    return v ? std::string(v) : std::string();
  };
  ModelSearchEnv e;
  e.hf_home = env("HF_HOME");
  e.hub_cache = env("HF_HUB_CACHE");
  if (e.hub_cache.empty()) e.hub_cache = env("HUGGINGFACE_HUB_CACHE");
  e.home = env("HOME");
  return e;
}

namespace {

Result<std::string> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return make_error(ErrorCode::kIoError, fmt::format("cannot read '{}'", p.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// models--ORG--NAME/snapshots/<rev>/config.json under the hub cache, newest snapshot first.
std::optional<fs::path> find_in_hf_cache(const std::string& id, const ModelSearchEnv& env) {
  if (id.find('/') == std::string::npos) return std::nullopt;
  std::vector<fs::path> roots;
  if (!env.hub_cache.empty()) roots.emplace_back(env.hub_cache);
  if (!env.hf_home.empty()) roots.emplace_back(fs::path(env.hf_home) / "hub");
  if (!env.home.empty()) roots.emplace_back(fs::path(env.home) / ".cache" / "huggingface" / "hub");
  std::string dir = "models--" + id;
  for (std::size_t p = dir.find('/'); p != std::string::npos; p = dir.find('/')) dir.replace(p, 1, "--");
  for (const auto& r : roots) {
    std::error_code ec;
    const fs::path snaps = r / dir / "snapshots";
    if (!fs::is_directory(snaps, ec)) continue;
    std::optional<fs::path> best;
    fs::file_time_type best_t{};
    for (const auto& s : fs::directory_iterator(snaps, ec)) {
      const fs::path cfg = s.path() / "config.json";
      if (!fs::is_regular_file(cfg, ec)) continue;
      auto t = fs::last_write_time(cfg, ec);
      if (!best || t > best_t) {
        best = cfg;
        best_t = t;
      }
    }
    if (best) return best;
  }
  return std::nullopt;
}

}  // namespace

Result<ModelSpec> resolve_model(const std::string& name, const ModelSearchEnv& env) {
  std::error_code ec;
  const fs::path p(name);
  if (fs::exists(p, ec)) {
    const fs::path cfg = fs::is_directory(p, ec) ? p / "config.json" : p;
    MEMPLAN_TRY(std::string text, read_file(cfg));
    MEMPLAN_TRY(ModelSpec m, parse_hf_config(text, cfg.string()));
    m.name = name;
    return m;
  }
  MEMPLAN_TRY(auto catalog, load_catalog());
  const std::string lname = to_lower(name);
  for (const auto& c : catalog) {
    bool hit = to_lower(c.id) == lname || to_lower(c.short_name) == lname;
    for (const auto& a : c.aliases) hit = hit || to_lower(a) == lname;
    if (hit) return c.spec;
  }
  if (auto cfg = find_in_hf_cache(name, env)) {
    MEMPLAN_TRY(std::string text, read_file(*cfg));
    MEMPLAN_TRY(ModelSpec m, parse_hf_config(text, cfg->string()));
    m.name = name;
    return m;
  }
  std::vector<std::string> names;
  for (const auto& c : catalog) {
    names.push_back(c.short_name);
    names.push_back(c.id);
  }
  return make_error(ErrorCode::kUnknownName, fmt::format("unknown model '{}'", name),
                    did_you_mean(name, names).empty()
                        ? "give a path to a config.json, a model in the local Hugging Face cache, a catalog name "
                          "(memplan models), or --model-params"
                        : did_you_mean(name, names));
}

Result<ModelSpec> model_from_param_count(std::int64_t params) {
  // Placeholder shape table; refined with the catalog work.
  ModelSpec m;
  m.name = fmt::format("{:.2f}B-parameter Llama-style model", static_cast<double>(params) / 1e9);
  m.model_type = "llama";
  m.vocab_size = 32000;
  m.hidden_size = 4096;
  m.num_heads = 32;
  m.num_kv_heads = 32;
  m.head_dim = 128;
  m.intermediate_size = 11008;
  const std::int64_t per_layer = 4 * m.hidden_size * m.hidden_size + 3 * m.hidden_size * m.intermediate_size;
  const std::int64_t rest = 2 * m.vocab_size * m.hidden_size;
  m.num_layers = static_cast<int>(std::max<std::int64_t>(1, (params - rest) / per_layer));
  return m;
}

std::string describe_shape(const ModelSpec& m) {
  return fmt::format("{}: {} layers, hidden {}, {} heads ({} kv), intermediate {}, vocab {}", m.model_type,
                     m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.intermediate_size, m.vocab_size);
}

}  // namespace memplan::io

#include "io/model/model_source.hpp"

#include "io/fs.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/embedded.hpp"
#include "io/model/model_names.hpp"
#include "io/model/model_source_encoders.hpp"
#include "io/model/model_source_falcon_h1.hpp"
#include "io/model/model_source_granite.hpp"
#include "io/model/model_source_moe2025.hpp"
#include "io/model/model_source_wrappers.hpp"
#include "io/model/unknown_type.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kWrongFileHint =
    "is this the model's config.json? generation_config.json and tokenizer_config.json do not describe the "
    "architecture";

Error config_error(const std::string& origin, std::string msg, std::string suggestion = {}) {
  Error e = make_error(ErrorCode::kInvalidConfig, std::move(msg), std::move(suggestion));
  e.where = SourceLocation{origin, 0, 0};
  return e;
}

// A JSON value as an error message quotes it. Containers are named, not dumped: dumping recurses
// and a hostile file could nest deeply enough to exhaust the stack.
std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: {
      std::string s = v.get_ref<const std::string&>();
      if (s.size() > 40) s = s.substr(0, 37) + "...";
      return "\"" + s + "\"";
    }
    case json::value_t::null: return "null";
    case json::value_t::number_float: {
      const double d = v.get<double>();  // dump() writes null for these
      if (std::isnan(d)) return "NaN";
      if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
      return v.dump();
    }
    default: return v.dump();
  }
}

// JSON parse errors carry a byte offset; turn it into a line and keep nlohmann's own description
// ("syntax error while parsing object - unexpected '}'; expected string literal").
Error json_parse_error(std::string_view text, const std::string& origin, const json::parse_error& e) {
  const std::size_t end = std::min<std::size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size());
  const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(end), '\n'));
  std::string what = e.what();
  const std::size_t col = what.find("column ");
  const std::size_t colon = col == std::string::npos ? std::string::npos : what.find(": ", col);
  if (colon != std::string::npos) what = what.substr(colon + 2);
  Error err = make_error(ErrorCode::kParseError, "invalid JSON: " + what, "fix the syntax at that line");
  err.where = SourceLocation{origin, line, 0};
  return err;
}

// Python's json module (which transformers reads config.json with) accepts three literals that
// JSON has not: NaN, Infinity and -Infinity. Nemotron-H 56B writes "time_step_limit": [0.0,
// Infinity]. Outside strings they are replaced by marker strings (no newline moves, so error
// lines stay right) and, after parsing, turned back into the non-finite doubles Python would
// hold: a field that means a number sees inf or nan (and refuses it where it needs a finite
// value), one memplan does not read is ignored. nullopt: the text has none.
constexpr std::string_view kNonFiniteMarker = "\\u0000memplan-nonfinite:";

std::optional<std::string> replace_python_constants(std::string_view text) {
  std::optional<std::string> out;
  const auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; };
  std::size_t copied = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (i > 0 && ident(text[i - 1])) continue;
    for (const std::string_view lit : {std::string_view("-Infinity"), std::string_view("Infinity"), std::string_view("NaN")}) {
      if (text.substr(i, lit.size()) != lit) continue;
      if (i + lit.size() < text.size() && ident(text[i + lit.size()])) break;
      if (!out) out.emplace();
      out->append(text.substr(copied, i - copied));
      out->append("\"").append(kNonFiniteMarker).append(lit).append("\"");
      i += lit.size() - 1;
      copied = i + 1;
      break;
    }
  }
  if (out) out->append(text.substr(copied));
  return out;
}

// The marker strings back to doubles, without recursion (a hostile file may nest deeply).
void restore_python_constants(json& root) {
  const std::string marker = std::string(1, '\0') + "memplan-nonfinite:";
  std::vector<json*> todo{&root};
  while (!todo.empty()) {
    json* v = todo.back();
    todo.pop_back();
    if (v->is_structured()) {
      for (auto& child : *v) todo.push_back(&child);
    } else if (v->is_string() && v->get_ref<const std::string&>().rfind(marker, 0) == 0) {
      const std::string lit = v->get_ref<const std::string&>().substr(marker.size());
      const double inf = std::numeric_limits<double>::infinity();
      *v = lit == "NaN" ? std::numeric_limits<double>::quiet_NaN() : lit == "Infinity" ? inf : -inf;
    }
  }
}

Result<json> parse_json(std::string_view original, const std::string& origin) {
  const std::optional<std::string> replaced = replace_python_constants(original);
  const std::string_view text = replaced ? std::string_view(*replaced) : original;
  try {
    json j = json::parse(text.begin(), text.end());
    if (replaced) restore_python_constants(j);
    return j;
  } catch (const json::parse_error& e) {
    return json_parse_error(text, origin, e);
  } catch (const json::exception& e) {
    // A number beyond a double (1e400: out_of_range.406 "number overflow parsing '1e400'") or
    // nesting too deep: no byte offset, so the line is that of the token quoted in the message.
    std::string what = e.what();
    if (const std::size_t close = what.find("] "); close != std::string::npos) what = what.substr(close + 2);
    int line = 0;
    const std::size_t q1 = what.find('\''), q2 = q1 == std::string::npos ? q1 : what.find('\'', q1 + 1);
    if (q2 != std::string::npos) {
      const std::size_t at = text.find(what.substr(q1 + 1, q2 - q1 - 1));
      if (at != std::string_view::npos)
        line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
    }
    Error err = make_error(ErrorCode::kParseError, "invalid JSON: " + what, "fix the value at that line");
    err.where = SourceLocation{origin, line, 0};
    return err;
  }
}

// Reads config.json fields. Every accessor checks the type first: nlohmann's get<>() throws on a
// mismatch, and no input may crash memplan.
class Fields {
 public:
  Fields(const json& j, const std::string& origin) : j_(j), origin_(origin) {}

  const json* find(const char* name) const {
    auto it = j_.find(name);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(const char* name) const { return find(name) != nullptr; }
  // The key is written, null included (a null that means "none" where absent means a default).
  bool written(const char* name) const { return j_.contains(name); }

  // The first of `names` present. Config classes name the same thing differently (GPT-2's n_embd).
  Result<std::int64_t> integer(std::initializer_list<const char*> names,
                               std::optional<std::int64_t> fallback = std::nullopt) const {
    for (const char* n : names) {
      const json* v = find(n);
      if (!v) continue;
      return to_integer(*v, n);
    }
    if (fallback) return *fallback;
    return config_error(origin_, fmt::format("missing \"{}\"", *names.begin()), kWrongFileHint);
  }

  Result<std::optional<bool>> boolean(const char* name) const {
    const json* v = find(name);
    if (!v) return std::optional<bool>();
    if (!v->is_boolean())
      return config_error(origin_, fmt::format("\"{}\" must be true or false, got {}", name, describe(*v)));
    return std::optional<bool>(v->get<bool>());
  }

  Result<std::string> string(const char* name) const {
    const json* v = find(name);
    if (!v) return std::string();
    if (!v->is_string())
      return config_error(origin_, fmt::format("\"{}\" must be a string, got {}", name, describe(*v)));
    return v->get<std::string>();
  }

  Result<double> number(const char* name) const {
    const json* v = find(name);
    if (!v) return 0.0;
    if (!v->is_number() || std::isnan(v->get<double>()))
      return config_error(origin_, fmt::format("\"{}\" must be a number, got {}", name, describe(*v)));
    return v->get<double>();
  }

  Result<std::vector<int>> int_list(const char* name) const {
    std::vector<int> out;
    const json* v = find(name);
    if (!v) return out;
    if (!v->is_array())
      return config_error(origin_, fmt::format("\"{}\" must be a list of layer numbers, got {}", name, describe(*v)));
    for (const auto& item : *v) {
      MEMPLAN_TRY(std::int64_t n, to_integer(item, name));
      out.push_back(static_cast<int>(std::min<std::int64_t>(n, std::numeric_limits<int>::max())));
    }
    return out;
  }

 private:
  // Integers up to 2^40: no real dimension comes close, and the bound keeps every later product
  // of two dimensions inside int64.
  Result<std::int64_t> to_integer(const json& v, const char* name) const {
    constexpr std::int64_t kMax = std::int64_t{1} << 40;
    std::optional<std::int64_t> n;
    if (v.is_number_unsigned()) {
      if (v.get<std::uint64_t>() <= static_cast<std::uint64_t>(kMax)) n = static_cast<std::int64_t>(v.get<std::uint64_t>());
    } else if (v.is_number_integer()) {
      n = v.get<std::int64_t>();
    } else if (v.is_number_float()) {
      const double d = v.get<double>();
      if (!(std::floor(d) == d))
        return config_error(origin_, fmt::format("\"{}\" must be an integer, got {}", name, describe(v)));
      if (std::fabs(d) <= static_cast<double>(kMax)) n = static_cast<std::int64_t>(d);
    } else {
      return config_error(origin_, fmt::format("\"{}\" must be an integer, got {}", name, describe(v)));
    }
    if (!n || *n > kMax) return config_error(origin_, fmt::format("\"{}\" is out of range: {}", name, describe(v)));
    if (*n < 0) return config_error(origin_, fmt::format("\"{}\" must not be negative, got {}", name, *n));
    return *n;
  }

  const json& j_;
  const std::string& origin_;
};

Error unsupported_at(const std::string& origin, std::string msg, std::string suggestion);

Result<Activation> parse_activation(const std::string& s, const std::string& origin) {
  if (s.empty() || s == "silu" || s == "swish") return Activation::kSilu;
  // Names as transformers' ACT2FN spells them: exact GELU, or one of its tanh approximations.
  if (s == "gelu" || s == "gelu_python") return Activation::kGelu;
  if (s == "gelu_new" || s == "gelu_fast" || s == "gelu_pytorch_tanh" || s == "gelu_accurate")
    return Activation::kGeluTanh;
  if (s == "relu") return Activation::kRelu;
  if (s == "relu2") return Activation::kRelu2;  // squared ReLU (Nemotron-H mlp_hidden_act)
  static const std::vector<std::string> known = {"silu", "gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "relu2"};
  // Activations with parameters of their own, whose models are not read as any known layout: a
  // near-miss name (silu for xielu) would suggest a different MLP.
  if (s == "xielu")
    return unsupported_at(origin, "activation 'xielu' (Apertus's xIELU, with learnable parameters) is not modelled",
                          "use --model-params for a Llama-shaped estimate of the same size");
  std::string hint = did_you_mean(s, known);
  return config_error(origin, fmt::format("activation '{}' is not supported", s),
                      hint.empty() ? "supported: silu, gelu, gelu_new, gelu_pytorch_tanh, relu" : hint);
}

// Architectures people ask about that memplan does not count, with the block it lacks: an
// estimate that ignored the block would be a silent wrong answer (docs/models.md#not-modelled).
std::optional<std::string> unsupported_reason(const std::string& type) {
  static const std::pair<const char*, const char*> kNotModelled[] = {
      // Families checked from their transformers modelling code (docs/models.md#not-modelled).
      {"phi4mm", "its vision and audio towers and the LoRA adapters built into the checkpoint are not modelled"},
      // Remote-code families one edit from a known type, whose layout is not that type's: a
      // "did you mean" would send the user to a different model (the held-out corpus of
      // tests/data/corpus/MANIFEST.yaml found each).
      {"qwen", "Qwen (v1)'s remote-code layout (a fused c_attn with biases; intermediate_size is twice its MLP's "
               "width) is not Qwen2's and is not modelled"},
      {"internlm", "InternLM (v1) and InternLM2's early checkpoints, which carry this type, run remote code whose "
                   "layout (biases on q/k/v/o; InternLM2's fused wqkv) is not InternLM3's and is not modelled"},
      {"baichuan", "Baichuan's attention is chosen by its remote code, not by config.json (ALiBi in the 13B "
                   "checkpoints, RoPE in the 7B), and is not modelled"},
      {"orion", "Orion's remote code normalizes with LayerNorm (mean subtraction and a bias) although its "
                "config.json names rms_norm_eps, and that layout is not modelled"},
      {"new", "it is a remote-code encoder (GTE v1.5's NewModel: rotary positions, fused qkv, unpadded inputs) whose "
              "layout is not modelled"},
  };
  for (const auto& [t, why] : kNotModelled)
    if (type == t) return std::string(why);
  if (type == "phi" || type == "phimoe" || type == "falcon" || type == "gpt_neox" || type == "opt" ||
      type == "bloom" || type == "gptj" || type == "mpt" || type == "gpt_bigcode" ||
      type == "internlm2" || type == "olmo")
    return std::string("its module layout is not modelled");
  return std::nullopt;
}

// Every model_type that parses: the decoders, then the encoders.
std::string supported_list() {
  std::string s;
  for (const auto& t : supported_model_types()) s += (s.empty() ? "" : ", ") + t;
  for (const auto& t : encoder_model_types()) s += ", " + t;
  return "supported model types: " + s;
}

// The keys of a Llama-compatible layout: all must be there to read an unknown type as one.
constexpr const char* kLlamaKeys[] = {"hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
                                      "vocab_size"};

// transformers' Gemma3TextConfig defaults: multimodal Gemma 3 config.json files spell out only
// the text_config keys that differ from them.
void apply_gemma3_text_defaults(json& t) {
  static const std::pair<const char*, json> kDefaults[] = {
      {"vocab_size", 262208},          {"hidden_size", 2304},       {"intermediate_size", 9216},
      {"num_hidden_layers", 26},       {"num_attention_heads", 8},  {"num_key_value_heads", 4},
      {"head_dim", 256},               {"max_position_embeddings", 131072},
      {"sliding_window", 4096},        {"hidden_activation", "gelu_pytorch_tanh"}};
  for (const auto& [k, v] : kDefaults)
    if (!t.contains(k)) t[k] = v;
}

// transformers' Gemma4TextConfig defaults (5.5+): a config.json may leave them out. Its
// __post_init__ builds layer_types with every sixth layer full when absent, and always makes the
// last layer full.
void apply_gemma4_text_defaults(json& t) {
  static const std::pair<const char*, json> kDefaults[] = {
      {"vocab_size", 262144},       {"hidden_size", 2304},        {"intermediate_size", 9216},
      {"num_hidden_layers", 30},    {"num_attention_heads", 8},   {"num_key_value_heads", 4},
      {"head_dim", 256},            {"max_position_embeddings", 131072},
      {"sliding_window", 512},      {"hidden_activation", "gelu_pytorch_tanh"}};
  for (const auto& [k, v] : kDefaults)
    if (!t.contains(k) || t[k].is_null()) t[k] = v;
  if ((!t.contains("layer_types") || t["layer_types"].is_null()) && t["num_hidden_layers"].is_number_integer()) {
    const std::int64_t n = t["num_hidden_layers"].get<std::int64_t>();
    if (n > 0 && n <= 4096) {
      json types = json::array();
      for (std::int64_t i = 0; i < n; ++i) types.push_back((i + 1) % 6 != 0 ? "sliding_attention" : "full_attention");
      t["layer_types"] = std::move(types);
    }
  }
  if (t["layer_types"].is_array() && !t["layer_types"].empty()) t["layer_types"].back() = "full_attention";
}

// transformers' GlmConfig and Glm4Config defaults that change the module shapes (GLM-4-9B's):
// head_dim 128 whatever hidden_size / num_attention_heads is, two KV heads, q/k/v biases.
void apply_glm_defaults(json& t) {
  static const std::pair<const char*, json> kDefaults[] = {
      {"head_dim", 128}, {"num_key_value_heads", 2}, {"attention_bias", true}};
  for (const auto& [k, v] : kDefaults)
    if (!t.contains(k) || t[k].is_null()) t[k] = v;
}

// transformers' Glm4MoeConfig MoE defaults (GLM-4.5-Air's values): a config.json that leaves
// them out is still the MoE model Glm4MoeForCausalLM builds, not a dense one.
void apply_glm4_moe_defaults(json& t) {
  static const std::pair<const char*, json> kDefaults[] = {
      {"n_routed_experts", 128}, {"n_shared_experts", 1}, {"first_k_dense_replace", 1},
      {"moe_intermediate_size", 1408}, {"num_experts_per_tok", 8}};
  for (const auto& [k, v] : kDefaults)
    if (!t.contains(k) || t[k].is_null()) t[k] = v;
}

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

// Sliding-window attention (docs/formulas.md#sliding-window-attention), as transformers 4.56-4.57
// build the layers: config.json's layer_types when present, else each config class's default.
// Model types without sliding-window layers ignore the key (Llama configs may carry it unused).
Status parse_sliding_window(const Fields& f, ModelSpec& m, const std::string& origin) {
  const std::string& t = m.model_type;
  const bool qwen = starts_with(t, "qwen2") || starts_with(t, "qwen3");
  const bool windowed_type = t == "mistral" || t == "mixtral" || t == "phi3" || t == "gemma2" || t == "gemma3_text" ||
                             t == "gemma4_text" || t == "gemma3n_text" ||
                             t == "olmo3" || t == "gpt_oss" || t == "starcoder2" || t == "cohere2" ||
                             t == "exaone4" || qwen;
  // Exaone4Config's sliding_window defaults to 4096 (absent); null is no window.
  MEMPLAN_TRY(m.sliding_window, f.integer({"sliding_window"}, t == "exaone4" && !f.written("sliding_window") ? 4096 : 0));
  if (qwen) {
    // Qwen configs always carry a sliding_window; it only applies with use_sliding_window.
    MEMPLAN_TRY(auto use_sw, f.boolean("use_sliding_window"));
    if (!use_sw.value_or(false)) m.sliding_window = 0;
  }
  m.full_attention_layers.clear();
  if (!windowed_type || m.sliding_window == 0) {
    m.sliding_window = 0;
    return Ok{};
  }
  if (const json* lt = f.find("layer_types")) {
    if (!lt->is_array())
      return config_error(origin, fmt::format("\"layer_types\" must be a list, got {}", describe(*lt)));
    if (lt->size() != static_cast<std::size_t>(m.num_layers))
      return config_error(origin, fmt::format("\"layer_types\" must list one entry per layer ({}), got {}", m.num_layers,
                                              lt->size()));
    for (std::size_t i = 0; i < lt->size(); ++i) {
      const json& v = (*lt)[i];
      if (v.is_string() && v.get<std::string>() == "full_attention") {
        m.full_attention_layers.push_back(static_cast<int>(i));
      } else if (!v.is_string() || v.get<std::string>() != "sliding_attention") {
        return config_error(origin, fmt::format("\"layer_types\"[{}] is {}; memplan models \"sliding_attention\" and "
                                                "\"full_attention\" layers", i, describe(v)));
      }
    }
  } else if (t == "gemma2") {  // Gemma2Config: sliding if (i + 1) % 2
    for (int l = 1; l < m.num_layers; l += 2) m.full_attention_layers.push_back(l);
  } else if (t == "gemma3_text" || t == "cohere2") {
    // Gemma3TextConfig and Cohere2Config: sliding if (i + 1) % sliding_window_pattern (6; Cohere2: 4)
    MEMPLAN_TRY(std::int64_t pattern,
                f.integer({"sliding_window_pattern", "_sliding_window_pattern"}, t == "cohere2" ? 4 : 6));
    if (pattern < 1) return config_error(origin, "\"sliding_window_pattern\" must be positive, got 0");
    for (std::int64_t l = pattern - 1; l < m.num_layers; l += pattern) m.full_attention_layers.push_back(static_cast<int>(l));
  } else if (t == "exaone4") {
    // Exaone4Config.__post_init__: sliding unless (i + 1) % sliding_window_pattern == 0 (4 by
    // default). A string pattern ("LLLG", which EXAONE 4.0's config.json writes beside its
    // layer_types) fails there; memplan reads it as EXAONE's own code does: the letters repeat
    // from layer 0 and the last layer is always global.
    const json* p = f.find("sliding_window_pattern");
    if (p && p->is_string()) {
      const std::string pat = p->get<std::string>();
      if (pat.empty() || pat.find_first_not_of("LG") != std::string::npos)
        return config_error(origin, fmt::format("\"sliding_window_pattern\" is {}; EXAONE 4 writes L (local) and G "
                                                "(global) per layer", describe(*p)));
      for (int l = 0; l < m.num_layers; ++l)
        if (pat[static_cast<std::size_t>(l) % pat.size()] == 'G' || l == m.num_layers - 1)
          m.full_attention_layers.push_back(l);
    } else {
      MEMPLAN_TRY(std::int64_t pattern, f.integer({"sliding_window_pattern"}, 4));
      if (pattern < 1) return config_error(origin, "\"sliding_window_pattern\" must be positive, got 0");
      for (std::int64_t l = pattern - 1; l < m.num_layers; l += pattern)
        m.full_attention_layers.push_back(static_cast<int>(l));
    }
  } else if (t == "olmo3") {  // Olmo3Config: sliding unless (i + 1) % 4 == 0
    for (int l = 3; l < m.num_layers; l += 4) m.full_attention_layers.push_back(l);
  } else if (qwen) {  // Qwen2Config: sliding if i >= max_window_layers
    MEMPLAN_TRY(std::int64_t below, f.integer({"max_window_layers"}, 28));
    for (std::int64_t l = 0; l < std::min<std::int64_t>(below, m.num_layers); ++l)
      m.full_attention_layers.push_back(static_cast<int>(l));
  }
  // Every layer attending in full: no window anywhere.
  if (static_cast<int>(m.full_attention_layers.size()) == m.num_layers) {
    m.sliding_window = 0;
    m.full_attention_layers.clear();
  }
  return Ok{};
}

// Command R / R+ / Aya (cohere) and Command R7B / A (cohere2), docs/models.md#cohere: one
// CohereLayerNorm (a weight, no bias) per layer feeding attention and the MLP in parallel;
// use_qk_norm (cohere only) adds q_norm and k_norm, LayerNorms over head_dim whose weights are
// (heads, head_dim) and (kv_heads, head_dim). Cohere2Attention rotates q and k on its sliding
// layers only: its full-attention layers take no positional embedding.
Status read_cohere(const Fields& f, ModelSpec& m) {
  m.norm = NormKind::kLayerNorm;
  m.norm_bias = false;
  m.norms_per_layer = 1;
  if (m.model_type == "cohere") {
    MEMPLAN_TRY(auto qk, f.boolean("use_qk_norm"));
    m.qk_norm = qk.value_or(false);
    m.qk_norm_per_head = false;  // weights of heads x head_dim, counted as OLMo 2's
    return Ok{};
  }
  // Cohere2Config: head_dim is hidden_size // num_attention_heads whatever config.json says.
  if (m.num_heads > 0) m.head_dim = m.hidden_size / m.num_heads;
  m.nope_layers.clear();
  for (int l = 0; l < m.num_layers; ++l)
    if (!m.is_sliding_layer(l)) m.nope_layers.push_back(l);
  return Ok{};
}

// DeepSeek-V2/V3 and Kimi K2 (docs/formulas.md#mla): the latent attention's widths, with
// DeepseekV3Config's defaults where a key is absent. q_lora_rank null means a plain q_proj.
Status parse_mla_fields(const Fields& f, ModelSpec& m, const std::string& origin) {
  const bool v2 = m.model_type == "deepseek_v2";
  MEMPLAN_TRY(m.q_lora_rank, f.integer({"q_lora_rank"}, 0));
  MEMPLAN_TRY(m.kv_lora_rank, f.integer({"kv_lora_rank"}, 512));
  MEMPLAN_TRY(m.qk_rope_head_dim, f.integer({"qk_rope_head_dim"}, 64));
  MEMPLAN_TRY(m.qk_nope_head_dim, f.integer({"qk_nope_head_dim"}, 128));
  MEMPLAN_TRY(m.v_head_dim, f.integer({"v_head_dim"}, 128));
  if (m.kv_lora_rank == 0) return config_error(origin, "\"kv_lora_rank\" must be positive, got 0");
  // The heads' q/k width; hidden_size / num_attention_heads plays no part in MLA.
  m.head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
  MEMPLAN_TRY(std::int64_t mtp, f.integer({"num_nextn_predict_layers"}, 0));
  m.mtp_layers = narrow_count(mtp);
  // DeepSeek-V3's router carries e_score_correction_bias (one value per routed expert; a buffer
  // in transformers, a Parameter in DeepSeek's own code, stored in the checkpoint): counted
  // like a router bias. V2's softmax router has none.
  m.moe.router_bias = !v2 && m.moe.enabled();
  return Ok{};
}

// The vision_config of a vision-language model (docs/formulas.md#vision-language-models), with
// the config classes' defaults where a key is absent: Qwen2VLVisionConfig,
// Qwen2_5_VLVisionConfig, SiglipVisionConfig (as Gemma 3 checkpoints spell it out).
Result<VisionSpec> parse_vision_config(const json& top, const std::string& type, const std::string& origin,
                                       std::int64_t& out_hidden) {
  VisionSpec v;
  const json* vc = Fields(top, origin).find("vision_config");
  if (!vc) return v;
  if (!vc->is_object())
    return config_error(origin, fmt::format("\"vision_config\" must be an object, got {}", describe(*vc)));
  const std::string where = origin + " vision_config";  // Fields keeps a reference to it
  const Fields f(*vc, where);
  v.model_type = type;
  if (type == "mllama") {
    // MllamaVisionConfig: attention_heads is how the config stores num_attention_heads.
    v.kind = VisionKind::kMllama;
    MEMPLAN_TRY(std::int64_t depth, f.integer({"num_hidden_layers"}, 32));
    MEMPLAN_TRY(std::int64_t global, f.integer({"num_global_layers"}, 8));
    MEMPLAN_TRY(v.hidden_size, f.integer({"hidden_size"}, 1280));
    MEMPLAN_TRY(v.intermediate_size, f.integer({"intermediate_size"}, 5120));
    MEMPLAN_TRY(std::int64_t heads, f.integer({"attention_heads", "num_attention_heads"}, 16));
    MEMPLAN_TRY(v.image_size, f.integer({"image_size"}, 448));
    MEMPLAN_TRY(v.patch_size, f.integer({"patch_size"}, 14));
    MEMPLAN_TRY(std::int64_t tiles, f.integer({"max_num_tiles"}, 4));
    MEMPLAN_TRY(std::int64_t chans, f.integer({"num_channels"}, 3));
    if (chans != 3) return config_error(origin, fmt::format("vision_config \"num_channels\" = {} is not modelled (3)", chans));
    if (f.has("intermediate_layers_indices")) {
      MEMPLAN_TRY(v.intermediate_layers, f.int_list("intermediate_layers_indices"));
    } else {
      v.intermediate_layers = {3, 7, 15, 23, 30};
    }
    v.max_aspect_ratio_id = 8;  // the 8 arrangements of up to 4 tiles, the only ones the config allows
    if (const json* ar = f.find("supported_aspect_ratios"); ar && ar->is_array())
      v.max_aspect_ratio_id = static_cast<int>(std::min<std::size_t>(ar->size(), 1 << 20));
    MEMPLAN_TRY(std::string act, f.string("hidden_act"));
    if (!act.empty() && act != "gelu")
      return config_error(origin, fmt::format("vision_config \"hidden_act\" '{}' is not modelled (mllama uses gelu)", act));
    v.depth = narrow_count(depth);
    v.global_depth = narrow_count(global);
    v.num_heads = narrow_count(heads);
    v.max_num_tiles = narrow_count(tiles);
    MEMPLAN_TRY(std::int64_t out_dim, f.integer({"vision_output_dim"}, 0));
    const std::int64_t concat = v.hidden_size * (1 + static_cast<std::int64_t>(v.intermediate_layers.size()));
    if (out_dim != 0 && out_dim != concat)
      return config_error(origin, fmt::format("vision_config \"vision_output_dim\" {} must be hidden_size x (1 + "
                                              "len(intermediate_layers_indices)) = {}: MllamaVisionModel concatenates "
                                              "those layers' outputs",
                                              out_dim, concat));
  } else if (type == "gemma3") {
    v.kind = VisionKind::kSiglip;
    MEMPLAN_TRY(std::int64_t depth, f.integer({"num_hidden_layers"}, 12));
    MEMPLAN_TRY(v.hidden_size, f.integer({"hidden_size"}, 768));
    MEMPLAN_TRY(v.intermediate_size, f.integer({"intermediate_size"}, 3072));
    MEMPLAN_TRY(std::int64_t heads, f.integer({"num_attention_heads"}, 12));
    MEMPLAN_TRY(v.image_size, f.integer({"image_size"}, 224));
    MEMPLAN_TRY(v.patch_size, f.integer({"patch_size"}, 16));
    MEMPLAN_TRY(auto head, f.boolean("vision_use_head"));
    if (head.value_or(false))
      return config_error(origin, "vision_config \"vision_use_head\": true is not modelled (Gemma 3 has no pooling head)");
    MEMPLAN_TRY(v.tokens_per_image, Fields(top, origin).integer({"mm_tokens_per_image"}, 256));
    v.depth = narrow_count(depth);
    v.num_heads = narrow_count(heads);
  } else {
    const bool v25 = type == "qwen2_5_vl";
    v.kind = v25 ? VisionKind::kQwen25Vl : VisionKind::kQwen2Vl;
    MEMPLAN_TRY(std::int64_t depth, f.integer({"depth"}, 32));
    MEMPLAN_TRY(std::int64_t heads, f.integer({"num_heads"}, 16));
    if (v25) {
      MEMPLAN_TRY(v.hidden_size, f.integer({"hidden_size"}));
      MEMPLAN_TRY(out_hidden, f.integer({"out_hidden_size"}, 0));
      MEMPLAN_TRY(v.intermediate_size, f.integer({"intermediate_size"}, 3420));
      MEMPLAN_TRY(v.window_size, f.integer({"window_size"}, 112));
      MEMPLAN_TRY(v.fullatt_blocks, f.int_list("fullatt_block_indexes"));
      MEMPLAN_TRY(std::string act, f.string("hidden_act"));
      if (!act.empty() && act != "silu")
        return config_error(origin, fmt::format("vision_config \"hidden_act\" '{}' is not modelled (Qwen2.5-VL uses silu)", act));
    } else {
      // Qwen2-VL: embed_dim is the ViT width; vision_config.hidden_size is the merger's output.
      MEMPLAN_TRY(v.hidden_size, f.integer({"embed_dim"}, 1280));
      MEMPLAN_TRY(out_hidden, f.integer({"hidden_size"}, 0));
      MEMPLAN_TRY(std::int64_t ratio, f.integer({"mlp_ratio"}, 4));
      v.intermediate_size = v.hidden_size <= (1 << 20) && ratio >= 0 && ratio <= 64 ? v.hidden_size * ratio : -1;
    }
    MEMPLAN_TRY(v.patch_size, f.integer({"patch_size", "spatial_patch_size"}, 14));
    MEMPLAN_TRY(std::int64_t tps, f.integer({"temporal_patch_size"}, 2));
    MEMPLAN_TRY(std::int64_t merge, f.integer({"spatial_merge_size"}, 2));
    MEMPLAN_TRY(std::int64_t chans, f.integer({"in_chans", "in_channels"}, 3));
    if (chans != 3) return config_error(origin, fmt::format("vision_config \"in_chans\" = {} is not modelled (3)", chans));
    v.depth = narrow_count(depth);
    v.num_heads = narrow_count(heads);
    v.temporal_patch_size = narrow_count(tps);
    v.spatial_merge_size = narrow_count(merge);
  }
  if (v.depth <= 0) return config_error(origin, fmt::format("vision_config depth = {} must be positive", v.depth));
  return v;
}

// LFM2 (docs/models.md#lfm2): Lfm2Config reads block_ff_dim over intermediate_size and
// full_attn_idxs where layer_types is absent; Lfm2MLP shrinks the width to 2/3 (times
// block_ffn_dim_multiplier), rounded up to block_multiple_of, when block_auto_adjust_ff_dim.
Status apply_lfm2_fields(json& j, const std::string& origin) {
  Fields f(j, origin);
  if (!f.has("num_attention_heads") && f.has("num_heads")) j["num_attention_heads"] = j["num_heads"];
  MEMPLAN_TRY(std::int64_t ff, f.integer({"block_ff_dim", "intermediate_size"}, 12288));
  MEMPLAN_TRY(auto adjust, f.boolean("block_auto_adjust_ff_dim"));
  if (adjust.value_or(true)) {
    MEMPLAN_TRY(std::int64_t multiple, f.integer({"block_multiple_of"}, 256));
    if (multiple <= 0) return config_error(origin, "\"block_multiple_of\" must be positive, got 0");
    ff = 2 * ff / 3;
    if (f.has("block_ffn_dim_multiplier")) {
      MEMPLAN_TRY(double mult, f.number("block_ffn_dim_multiplier"));
      if (!(mult > 0) || mult > 64)
        return config_error(origin, fmt::format("\"block_ffn_dim_multiplier\" must be between 0 and 64, got {}", mult));
      ff = static_cast<std::int64_t>(mult * static_cast<double>(ff));
    }
    ff = multiple * ((ff + multiple - 1) / multiple);
  }
  j["intermediate_size"] = ff;
  if (!f.has("hidden_act")) j["hidden_act"] = "silu";  // Lfm2MLP: F.silu
  if (!j.contains("tie_word_embeddings") && j.contains("tie_embedding")) j["tie_word_embeddings"] = j["tie_embedding"];
  return Ok{};
}

Error unsupported_at(const std::string& origin, std::string msg, std::string suggestion) {
  Error e = make_error(ErrorCode::kUnsupported, std::move(msg), std::move(suggestion));
  e.where = SourceLocation{origin, 0, 0};
  return e;
}

// partial_rotary_factor in (0, 1]: the top-level key, else (transformers 5, Qwen3.5's small
// checkpoints) the one in rope_parameters, else the config class's default.
Result<double> partial_rotary_factor(const Fields& f, const std::string& origin, double fallback) {
  double partial = fallback;
  if (f.has("partial_rotary_factor")) {
    MEMPLAN_TRY(partial, f.number("partial_rotary_factor"));
  } else if (const json* rp = f.find("rope_parameters");
             rp && rp->is_object() && Fields(*rp, origin).has("partial_rotary_factor")) {
    MEMPLAN_TRY(partial, Fields(*rp, origin).number("partial_rotary_factor"));
  }
  if (!(partial > 0) || partial > 1)
    return config_error(origin, fmt::format("\"partial_rotary_factor\" must be in (0, 1], got {}", partial));
  return partial;
}

// Qwen3-Next's layers: Qwen3-Next itself and Qwen3.5's language models (Qwen3_5TextModel is
// Qwen3NextModel with split Gated DeltaNet projections; docs/models.md#qwen3-5).
bool qwen3_next_layout(const std::string& t) {
  return t == "qwen3_next" || t == "qwen3_5_text" || t == "qwen3_5_moe_text";
}

// The per-layer layout of Qwen3-Next, Nemotron-H and LFM2 (docs/models.md#hybrid-layers).
Status parse_hybrid(const Fields& f, ModelSpec& m, const std::string& origin) {
  HybridSpec& y = m.hybrid;
  const std::string& t = m.model_type;
  const int n = m.num_layers;
  if (qwen3_next_layout(t)) {
    y.gdn_split_projections = t != "qwen3_next";
    m.mrope_interleaved = t != "qwen3_next";  // Qwen3_5TextRotaryEmbedding is Qwen3-VL's
    // Qwen3NextConfig: layer_types, else every full_attention_interval-th layer (from the
    // interval's last) attends in full and the others are Gated DeltaNet.
    if (const json* lt = f.find("layer_types")) {
      if (!lt->is_array() || lt->size() != static_cast<std::size_t>(n))
        return config_error(origin, fmt::format("\"layer_types\" must list one entry per layer ({})", n));
      for (std::size_t i = 0; i < lt->size(); ++i) {
        const json& v = (*lt)[i];
        const std::string s = v.is_string() ? v.get<std::string>() : "";
        if (s == "linear_attention") y.mixers.push_back(MixerKind::kGatedDeltaNet);
        else if (s == "full_attention") y.mixers.push_back(MixerKind::kAttention);
        else
          return config_error(origin, fmt::format("\"layer_types\"[{}] is {}; {} has \"linear_attention\" and "
                                                  "\"full_attention\" layers", i, describe(v), t));
      }
    } else {
      MEMPLAN_TRY(std::int64_t interval, f.integer({"full_attention_interval"}, 4));
      if (interval <= 0) return config_error(origin, "\"full_attention_interval\" must be positive, got 0");
      for (int l = 0; l < n; ++l)
        y.mixers.push_back((l + 1) % interval == 0 ? MixerKind::kAttention : MixerKind::kGatedDeltaNet);
    }
    MEMPLAN_TRY(std::int64_t kh, f.integer({"linear_num_key_heads"}, 16));
    MEMPLAN_TRY(std::int64_t vh, f.integer({"linear_num_value_heads"}, 32));
    MEMPLAN_TRY(y.gdn_key_head_dim, f.integer({"linear_key_head_dim"}, 128));
    MEMPLAN_TRY(y.gdn_value_head_dim, f.integer({"linear_value_head_dim"}, 128));
    MEMPLAN_TRY(std::int64_t k, f.integer({"linear_conv_kernel_dim"}, 4));
    y.gdn_key_heads = static_cast<int>(std::min<std::int64_t>(kh, 1 << 20));
    y.gdn_value_heads = static_cast<int>(std::min<std::int64_t>(vh, 1 << 20));
    y.conv_kernel = static_cast<int>(std::min<std::int64_t>(k, 1 << 20));
    m.attn_output_gate = true;
    // Qwen3NextRotaryEmbedding rotates int(head_dim * partial_rotary_factor) dimensions (0.25 by
    // default); qk_rope_head_dim holds that rotary part, as it does for MLA.
    MEMPLAN_TRY(const double partial, partial_rotary_factor(f, origin, 0.25));
    m.qk_rope_head_dim = static_cast<std::int64_t>(static_cast<double>(m.head_dim) * partial);
    return Ok{};
  }
  if (t == "nemotron_h") {
    // NemotronHConfig.hybrid_override_pattern: one character per block, M (Mamba-2), * (attention),
    // - (MLP), E (MoE); each block is norm -> mixer -> residual add.
    MEMPLAN_TRY(std::string pattern, f.string("hybrid_override_pattern"));
    if (pattern.empty())
      return config_error(origin, "model_type 'nemotron_h' has no \"hybrid_override_pattern\"", kWrongFileHint);
    if (static_cast<std::int64_t>(pattern.size()) != n)
      return config_error(origin, fmt::format("\"hybrid_override_pattern\" names {} blocks, "
                                              "\"num_hidden_layers\" is {}", pattern.size(), n));
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      const char c = pattern[i];
      if (c == 'M') y.mixers.push_back(MixerKind::kMamba2);
      else if (c == '*') y.mixers.push_back(MixerKind::kAttention);
      else if (c == '-') y.mixers.push_back(MixerKind::kNone);
      else if (c == 'E') y.mixers.push_back(MixerKind::kNone);  // NemotronHMoE, below
      else
        return config_error(origin, fmt::format("\"hybrid_override_pattern\"[{}] is '{}'; nemotron_h has M, *, - and E "
                                                "blocks", i, std::string(1, c)));
      y.no_ffn.push_back(c != '-' && c != 'E');
      if (c == '-') m.moe.dense_layers.push_back(static_cast<int>(i));
    }
    if (pattern.find('E') != std::string::npos) {
      // NemotronHMoE (Nemotron 3): a sigmoid router with e_score_correction_bias and group-limited
      // top-k (DeepSeek-V3's), n_routed_experts relu2 experts (up_proj, down_proj) and a shared
      // relu2 expert of moe_shared_expert_intermediate_size; the '-' blocks stay dense MLPs.
      MEMPLAN_TRY(std::int64_t latent, f.integer({"moe_latent_size"}, 0));  // null: none
      if (latent > 0)
        return unsupported_at(origin,
                              fmt::format("\"moe_latent_size\": {}: the MoE blocks' latent projections "
                                          "(fc1_latent_proj / fc2_latent_proj, Nemotron 3 Super) are not modelled",
                                          latent),
                              "use --model-params for a Llama-shaped estimate of the same size");
      MEMPLAN_TRY(std::int64_t experts, f.integer({"n_routed_experts"}, 128));
      MEMPLAN_TRY(std::int64_t topk, f.integer({"num_experts_per_tok"}, 6));
      MEMPLAN_TRY(std::int64_t width, f.integer({"moe_intermediate_size"}, 1856));
      MEMPLAN_TRY(std::int64_t shared, f.integer({"n_shared_experts"}, 1));
      MEMPLAN_TRY(std::int64_t shared_width, f.integer({"moe_shared_expert_intermediate_size"}, 3712));
      if (experts <= 0 || experts > (1 << 16))
        return config_error(origin, fmt::format("\"n_routed_experts\" must be between 1 and 65536, got {}", experts));
      if (topk <= 0 || topk > experts)
        return config_error(origin, fmt::format("\"num_experts_per_tok\" must be between 1 and n_routed_experts ({}), "
                                                "got {}", experts, topk));
      m.moe.num_experts = static_cast<int>(experts);
      m.moe.experts_per_token = static_cast<int>(topk);
      m.moe.expert_intermediate_size = width;
      // NemotronHMoE builds one shared NemotronHMLP whatever n_shared_experts says (> 0).
      m.moe.num_shared_experts = shared > 0 ? 1 : 0;
      m.moe.shared_intermediate_size = shared_width;
    } else {
      m.moe.dense_layers.clear();
    }
    MEMPLAN_TRY(std::int64_t heads, f.integer({"mamba_num_heads"}, 128));
    MEMPLAN_TRY(y.mamba_head_dim, f.integer({"mamba_head_dim"}, 64));
    MEMPLAN_TRY(y.ssm_state, f.integer({"ssm_state_size"}, 128));
    MEMPLAN_TRY(std::int64_t groups, f.integer({"n_groups", "mamba_n_groups"}, 8));
    MEMPLAN_TRY(y.mamba_chunk, f.integer({"chunk_size"}, 128));
    MEMPLAN_TRY(std::int64_t k, f.integer({"conv_kernel"}, 4));
    y.mamba_heads = static_cast<int>(std::min<std::int64_t>(heads, 1 << 20));
    y.mamba_groups = static_cast<int>(std::min<std::int64_t>(groups, 1 << 20));
    y.conv_kernel = static_cast<int>(std::min<std::int64_t>(k, 1 << 20));
    MEMPLAN_TRY(auto conv_bias, f.boolean("use_conv_bias"));
    MEMPLAN_TRY(auto use_bias, f.boolean("use_bias"));
    MEMPLAN_TRY(auto proj_bias, f.boolean("mamba_proj_bias"));
    y.mamba_conv_bias = conv_bias.value_or(true);
    y.mamba_proj_bias = use_bias.value_or(proj_bias.value_or(false));
    MEMPLAN_TRY(auto fp32_residual, f.boolean("residual_in_fp32"));
    if (fp32_residual.value_or(false))
      return unsupported_at(origin, "\"residual_in_fp32\": true (an fp32 residual stream) is not modelled",
                            "set it to false, as the released Nemotron-H checkpoints do");
    return Ok{};
  }
  if (t == "lfm2") {
    // Lfm2Config: layer_types ("conv" / "full_attention"), else full_attn_idxs.
    if (const json* lt = f.find("layer_types")) {
      if (!lt->is_array() || lt->size() != static_cast<std::size_t>(n))
        return config_error(origin, fmt::format("\"layer_types\" must list one entry per layer ({})", n));
      for (std::size_t i = 0; i < lt->size(); ++i) {
        const json& v = (*lt)[i];
        const std::string s = v.is_string() ? v.get<std::string>() : "";
        if (s == "conv") y.mixers.push_back(MixerKind::kShortConv);
        else if (s == "full_attention") y.mixers.push_back(MixerKind::kAttention);
        else
          return config_error(origin, fmt::format("\"layer_types\"[{}] is {}; lfm2 has \"conv\" and \"full_attention\" "
                                                  "layers", i, describe(v)));
      }
    } else {
      MEMPLAN_TRY(std::vector<int> full, f.int_list("full_attn_idxs"));
      y.mixers.assign(static_cast<std::size_t>(std::max(n, 0)), MixerKind::kShortConv);
      for (const int l : full) {
        if (l < 0 || l >= n)
          return config_error(origin, fmt::format("\"full_attn_idxs\" names layer {}, outside 0..{}", l, n - 1));
        y.mixers[static_cast<std::size_t>(l)] = MixerKind::kAttention;
      }
    }
    MEMPLAN_TRY(std::int64_t k, f.integer({"conv_L_cache"}, 3));
    y.conv_kernel = static_cast<int>(std::min<std::int64_t>(k, 1 << 20));
    MEMPLAN_TRY(auto bias, f.boolean("conv_bias"));
    y.short_conv_bias = bias.value_or(false);
    return Ok{};
  }
  return Ok{};
}

// assumption: where to state how an unknown model_type was read (as a Llama-compatible layout);
// nullptr refuses unknown types.
Result<ModelSpec> parse_config(json j, const std::string& origin, std::string* assumption = nullptr) {
  if (!j.is_object())
    return config_error(origin, fmt::format("config.json must be a JSON object, got {}", describe(j)), kWrongFileHint);
  ModelSpec m;
  VisionSpec vision;
  AudioSpec audio;  // Gemma 4 E2B / E4B
  std::int64_t vision_out = 0;  // the merger's output width, which must be the text hidden size
  std::string top_type;         // the model_type written at the top: model.config.model_type
  {
    Fields top(j, origin);
    MEMPLAN_TRY(std::string type, top.string("model_type"));
    top_type = type;
    // Gemma 3 checkpoints above 1B and Qwen2-VL / Qwen2.5-VL are vision-language models: the
    // language model is the text_config (Qwen: the top level, or a text_config in configs saved by
    // transformers >= 4.52), the vision tower the vision_config.
    const bool qwen_vl = type == "qwen2_vl" || type == "qwen2_5_vl";
    const bool qwen3_5 = type == "qwen3_5" || type == "qwen3_5_moe";
    if (type == "qwen3_vl" || type == "qwen3_vl_moe" || type == "llama4" || qwen3_5) {
      // Qwen3-VL, Qwen3.5 and Llama 4 (docs/models.md#qwen3-vl, #qwen3-5, #llama-4): the language
      // model is the text_config (Qwen3 / Qwen3-MoE; Qwen3.5's Qwen3-Next layout; Llama4TextConfig),
      // the tower the vision_config (Qwen3.5's is Qwen3-VL's without DeepStack mergers).
      const json* t = top.find("text_config");
      if (!t || !t->is_object())
        return config_error(origin, fmt::format("model_type '{}' has no \"text_config\" object", type), kWrongFileHint);
      json text = *t;
      if (const json* vc = top.find("vision_config")) {
        if (!vc->is_object())
          return config_error(origin, fmt::format("\"vision_config\" must be an object, got {}", describe(*vc)));
        if (type == "llama4") {
          std::int64_t out_dim = 0;
          MEMPLAN_TRY(vision, parse_llama4_vision(*vc, origin, out_dim));
          if (out_dim != vision.projector_output_dim)
            return config_error(origin, fmt::format("vision_config \"vision_output_dim\" {} differs from "
                                                    "\"projector_output_dim\" {}: the projector's input is the "
                                                    "adapter's output", out_dim, vision.projector_output_dim));
        } else {
          MEMPLAN_TRY(vision, parse_qwen3_vl_vision(*vc, origin, vision_out, /*deepstack_by_default=*/!qwen3_5));
        }
        vision.model_type = type;
      }
      for (const char* inherited : {"tie_word_embeddings", "torch_dtype", "dtype"})
        if (!text.contains(inherited) && j.contains(inherited)) text[inherited] = j[inherited];
      text["model_type"] = type == "llama4"        ? "llama4_text"
                           : type == "qwen3_vl"    ? "qwen3"
                           : type == "qwen3_vl_moe" ? "qwen3_moe"
                           : type == "qwen3_5"     ? "qwen3_5_text"
                                                   : "qwen3_5_moe_text";
      j = std::move(text);
    } else if (type == "mistral3") {
      // Mistral 3 (Mistral Small 3.1 / 3.2, Magistral, Ministral 3; docs/models.md#mistral-3): the
      // language model is the text_config (MistralConfig, or Ministral3Config, Mistral's layout);
      // the Pixtral tower and the patch-merging projector are counted, never simulated.
      const json* t = top.find("text_config");
      if (!t || !t->is_object())
        return config_error(origin, "model_type 'mistral3' has no \"text_config\" object", kWrongFileHint);
      json text = *t;
      const std::string inner = text.contains("model_type") && text["model_type"].is_string()
                                    ? text["model_type"].get<std::string>()
                                    : std::string("mistral");
      if (inner != "mistral" && inner != "ministral3")
        return unsupported_at(origin,
                              fmt::format("model_type 'mistral3' with a text_config of model_type '{}' is not modelled",
                                          inner),
                              "memplan reads Mistral 3 wrappers around 'mistral' and 'ministral3' language models");
      if (const json* vc = top.find("vision_config")) {
        if (!vc->is_object())
          return config_error(origin, fmt::format("\"vision_config\" must be an object, got {}", describe(*vc)));
        MEMPLAN_TRY(vision, parse_pixtral_vision(*vc, j, origin));
        vision.model_type = type;
      }
      for (const char* inherited : {"tie_word_embeddings", "torch_dtype", "dtype"})
        if (!text.contains(inherited) && j.contains(inherited)) text[inherited] = j[inherited];
      // Ministral3Attention scales the rotated query by 1 + beta log(1 + floor(pos / original max)):
      // one more query-sized product per layer, which nothing saves (a transient; Mistral's layout
      // otherwise).
      text["model_type"] = "mistral";
      j = std::move(text);
    } else if (type == "ministral3") {
      // Ministral3ForCausalLM saved alone (Devstral 2): Mistral's layout (docs/models.md#mistral-3).
      j["model_type"] = "mistral";
    } else if (type == "gemma4") {
      // Gemma 4 (docs/models.md#gemma-4): the language model is the text_config (Gemma4TextConfig);
      // the vision and audio towers are counted, never simulated.
      const json* t = top.find("text_config");
      if (!t || !t->is_object())
        return config_error(origin, "model_type 'gemma4' has no \"text_config\" object", kWrongFileHint);
      json text = *t;
      if (const json* vc = top.find("vision_config")) {
        if (!vc->is_object())
          return config_error(origin, fmt::format("\"vision_config\" must be an object, got {}", describe(*vc)));
        MEMPLAN_TRY(vision, parse_gemma4_vision(*vc, origin));
        vision.model_type = type;
      }
      if (const json* ac = top.find("audio_config")) {
        if (!ac->is_object())
          return config_error(origin, fmt::format("\"audio_config\" must be an object, got {}", describe(*ac)));
        MEMPLAN_TRY(audio, parse_gemma4_audio(*ac, origin));
      }
      for (const char* inherited : {"tie_word_embeddings", "torch_dtype", "dtype"})
        if (!text.contains(inherited) && j.contains(inherited)) text[inherited] = j[inherited];
      text["model_type"] = "gemma4_text";
      j = std::move(text);
    } else if (type == "gemma3n") {
      // Gemma 3n (docs/models.md#gemma-3n): the language model is the text_config
      // (Gemma3nTextConfig); the vision and audio towers are counted, never simulated.
      const json* t = top.find("text_config");
      if (!t || !t->is_object())
        return config_error(origin, "model_type 'gemma3n' has no \"text_config\" object", kWrongFileHint);
      json text = *t;
      const json* vc = top.find("vision_config");
      const json* ac = top.find("audio_config");
      if (vc && !vc->is_object())
        return config_error(origin, fmt::format("\"vision_config\" must be an object, got {}", describe(*vc)));
      if (ac && !ac->is_object())
        return config_error(origin, fmt::format("\"audio_config\" must be an object, got {}", describe(*ac)));
      // Gemma3nConfig builds both towers, from their defaults when a config leaves them out.
      MEMPLAN_TRY(vision, parse_gemma3n_vision(vc ? *vc : json::object(), origin));
      vision.model_type = type;
      MEMPLAN_TRY(audio, parse_gemma3n_audio(ac ? *ac : json::object(), origin));
      for (const char* inherited : {"tie_word_embeddings", "torch_dtype", "dtype"})
        if (!text.contains(inherited) && j.contains(inherited)) text[inherited] = j[inherited];
      text["model_type"] = "gemma3n_text";
      j = std::move(text);
    } else if (type == "mllama") {
      // Llama 3.2 Vision: the language model is the text_config (MllamaTextConfig), a Llama with
      // cross-attention layers; the vision tower the vision_config.
      MEMPLAN_TRY(vision, parse_vision_config(j, type, origin, vision_out));
      const json* t = top.find("text_config");
      if (!t || !t->is_object())
        return config_error(origin, "model_type 'mllama' has no \"text_config\" object", kWrongFileHint);
      json text = *t;
      for (const char* inherited : {"tie_word_embeddings", "torch_dtype", "dtype"})
        if (!text.contains(inherited) && j.contains(inherited)) text[inherited] = j[inherited];
      text["model_type"] = "mllama";
      j = std::move(text);
    } else if (type == "gemma3" || qwen_vl) {
      MEMPLAN_TRY(vision, parse_vision_config(j, type, origin, vision_out));
      const json* t = top.find("text_config");
      if (type == "gemma3" && (!t || !t->is_object()))
        return config_error(origin, "model_type 'gemma3' has no \"text_config\" object", kWrongFileHint);
      if (t && !t->is_object())
        return config_error(origin, fmt::format("\"text_config\" must be an object, got {}", describe(*t)));
      json text = t ? *t : j;
      if (t && qwen_vl)  // the top level still carries the text keys in older saves
        for (const auto& [k, val] : j.items())
          if (!text.contains(k) && k != "vision_config") text[k] = val;
      for (const char* inherited : {"tie_word_embeddings", "torch_dtype", "dtype"})
        if (!text.contains(inherited) && j.contains(inherited)) text[inherited] = j[inherited];
      if (qwen_vl) text["model_type"] = "qwen2";  // Qwen2-architecture language model
      else if (!text.contains("model_type")) text["model_type"] = "gemma3_text";
      text.erase("vision_config");
      j = std::move(text);
    }
  }
  Fields f(j, origin);
  MEMPLAN_TRY(m.model_type, f.string("model_type"));
  if (m.model_type.empty()) return config_error(origin, "missing \"model_type\"", kWrongFileHint);
  if (is_encoder_model_type(m.model_type)) return parse_encoder_config(j, origin);
  const auto& types = supported_model_types();
  if (std::find(types.begin(), types.end(), m.model_type) == types.end()) {
    Error e = make_error(ErrorCode::kUnsupported, fmt::format("model_type '{}' is not supported", m.model_type));
    e.where = SourceLocation{origin, 0, 0};
    if (auto why = unsupported_reason(m.model_type)) {
      e.message += ": " + *why;
      e.suggestion = "use --model-params for a Llama-shaped estimate of the same size";
      return e;
    }
    // An unknown type (docs/models.md#unknown-types): read as a Llama when its config has a
    // Llama's keys and no key of a block a Llama lacks; else say which key is not understood.
    const char* missing = nullptr;
    for (const char* k : kLlamaKeys)
      if (!f.has(k) && !missing) missing = k;
    const UnknownLayout layout = inspect_unknown_layout(j);
    const bool block = !layout.block.empty();
    const std::string hint = did_you_mean(m.model_type, types);
    // A near-miss name (llava for llama) is no help when the config carries a block a Llama lacks.
    if (assumption && !missing && !block && hint.empty()) {
      std::string unread;
      for (const auto& k : layout.unread) unread += (unread.empty() ? "\"" : ", \"") + k + "\"";
      *assumption =
          layout.unread.empty()
              ? fmt::format("model_type '{}' is not known; its config.json has the keys of a Llama-compatible layout "
                            "and nothing else, so it is read as a Llama (q/k/v/o attention, gated MLP, RMSNorm); "
                            "parameter counts and memory are right only if its modules are a Llama's",
                            m.model_type)
              : fmt::format("model_type '{}' is not known; its config.json has the keys of a Llama-compatible layout, "
                            "so it is read as a Llama (q/k/v/o attention, gated MLP, RMSNorm); memplan does not read "
                            "its {}: if they add modules or change what a step computes, the figures miss it; "
                            "parameter counts and memory are right only if its modules are a Llama's",
                            m.model_type, unread);
      j["model_type"] = "llama";
      m.model_type = "llama";
    } else {
      if (block) {
        e.message += fmt::format(": its config.json has {}, a block memplan does not model for this type",
                                 describe_block(layout));
      } else if (!hint.empty()) {
        // a near miss of a known type: the suggestion says it all
      } else if (missing) {
        e.message += fmt::format(": its config.json has no \"{}\", so it cannot be read as a Llama-compatible layout",
                                 missing);
      }
      // A block memplan does not model: the types that parse, or a Llama-shaped estimate of the
      // same size for a user who wants a figure anyway.
      e.suggestion = block ? supported_list() + "; or use --model-params for a Llama-shaped estimate of the same size"
                           : hint.empty() ? supported_list() : hint;
      return e;
    }
  }
  const std::string& t = m.model_type;
  if (t == "gemma3_text") apply_gemma3_text_defaults(j);
  if (t == "gemma4_text") apply_gemma4_text_defaults(j);
  if (t == "gemma3n_text")
    if (auto s = normalize_gemma3n_text(j, origin); !s) return s.error();
  if (t == "glm4_moe") apply_glm4_moe_defaults(j);
  if (t == "glm" || t == "glm4") apply_glm_defaults(j);
  if (t == "lfm2")
    if (auto s = apply_lfm2_fields(j, origin); !s) return s.error();
  if (t == "starcoder2" && !j.contains("hidden_act")) j["hidden_act"] = "gelu_pytorch_tanh";  // Starcoder2Config
  if (t == "arcee" && (!j.contains("hidden_act") || j["hidden_act"].is_null())) j["hidden_act"] = "relu2";  // ArceeConfig
  if (t == "nemotron_h") {
    // NemotronHConfig: attention_head_dim in the first releases, head_dim later; relu2 MLP.
    if (!j.contains("head_dim") && j.contains("attention_head_dim")) j["head_dim"] = j["attention_head_dim"];
    if (j.contains("mlp_hidden_act")) j["hidden_act"] = j["mlp_hidden_act"];
    else if (!j.contains("hidden_act")) j["hidden_act"] = "relu2";
  }
  const bool gpt2 = t == "gpt2";
  const bool gemma = starts_with(t, "gemma");
  const bool qwen2_family = t == "qwen2" || t == "qwen2_moe";
  const bool mla_type = t == "deepseek_v2" || t == "deepseek_v3" || t == "kimi_k2" || t == "deepseek_v32";
  // GLM-4.5 (glm4_moe): DeepSeek-V3's MoE (sigmoid router with e_score_correction_bias, fused
  // shared experts, first_k_dense_replace) under grouped-query attention (docs/models.md#glm4_moe).
  const bool glm4_moe = t == "glm4_moe";
  // GLM-4-9B (glm) and GLM-4-0414 (glm4): Phi-3's fused gate_up_proj MLP, q/k/v biases, half of
  // each head rotated with GLM's interleaved pairs; glm4 adds sandwich norms (docs/models.md#glm-4).
  const bool glm_dense = t == "glm" || t == "glm4";
  const bool deepseek_moe = t == "deepseek" || mla_type || glm4_moe;
  // Qwen3-Next: Qwen2-MoE's block (gated shared expert) under hybrid layers (docs/models.md#qwen3_next).
  const bool qwen_shared_moe = t == "qwen2_moe" || qwen3_next_layout(t);
  // gpt-oss and MiniMax-M2: experts intermediate_size wide, like Mixtral's (docs/models.md#gpt_oss).
  const bool mixtral_width = t == "mixtral" || t == "gpt_oss" || t == "minimax_m2";
  const bool moe_type = mixtral_width || qwen_shared_moe || t == "qwen3_moe" || deepseek_moe;

  MEMPLAN_TRY(m.vocab_size, f.integer({"vocab_size"}));
  MEMPLAN_TRY(m.hidden_size, f.integer({"hidden_size", "n_embd"}));
  MEMPLAN_TRY(std::int64_t layers, f.integer({"num_hidden_layers", "n_layer"}));
  MEMPLAN_TRY(std::int64_t heads, f.integer({"num_attention_heads", "n_head"}));
  MEMPLAN_TRY(std::int64_t kv, f.integer({"num_key_value_heads"}, heads));
  if (layers > 4096)  // before narrowing, so the message quotes the value written
    return config_error(origin, fmt::format("\"num_hidden_layers\" = {} must be at most 4096", layers),
                        "check the config");
  m.num_layers = narrow_count(layers);
  m.num_heads = narrow_count(heads);
  m.num_kv_heads = narrow_count(kv);
  if (heads > 0 && !f.has("head_dim") && !mla_type && m.hidden_size % heads != 0)
    return config_error(origin,
                        fmt::format("\"hidden_size\" {} is not divisible by \"num_attention_heads\" {}",
                                    m.hidden_size, heads),
                        "set \"head_dim\" when heads do not split hidden_size evenly");
  MEMPLAN_TRY(m.head_dim, f.integer({"head_dim"}, heads > 0 ? m.hidden_size / heads : 0));
  std::optional<std::int64_t> inter_fallback;
  // n_inner null means 4 x n_embd (checked: n_embd is not validated yet; validate() refuses the huge ones).
  if (gpt2) inter_fallback = m.hidden_size <= (std::int64_t{1} << 40) ? 4 * m.hidden_size : m.hidden_size;
  // All-MoE models may omit the dense width.
  if (t == "qwen2_moe" || t == "qwen3_moe" || qwen3_next_layout(t)) inter_fallback = 0;
  MEMPLAN_TRY(m.intermediate_size, f.integer({"intermediate_size", "n_inner"}, inter_fallback));
  MEMPLAN_TRY(m.max_position_embeddings, f.integer({"max_position_embeddings", "n_positions"}, 0));

  // transformers' per-class defaults when the key is absent.
  MEMPLAN_TRY(auto tie, f.boolean("tie_word_embeddings"));
  m.tie_word_embeddings = tie.value_or(gpt2 || gemma || t == "smollm3" || t == "lfm2" || t == "cohere" || t == "cohere2");
  MEMPLAN_TRY(std::string act, f.string(gpt2 ? "activation_function" : "hidden_act"));
  if (gemma) {
    MEMPLAN_TRY(std::string gemma_act, f.string("hidden_activation"));
    if (!gemma_act.empty()) act = gemma_act;
  }
  MEMPLAN_TRY(m.activation, parse_activation(act, origin));
  MEMPLAN_TRY(m.torch_dtype, f.string("torch_dtype"));
  if (m.torch_dtype.empty()) {
    MEMPLAN_TRY(m.torch_dtype, f.string("dtype"));  // transformers 5 renamed torch_dtype
  }

  MEMPLAN_TRY(auto attention_bias, f.boolean("attention_bias"));
  MEMPLAN_TRY(auto mlp_bias, f.boolean("mlp_bias"));
  if (qwen2_family) {
    m.qkv_bias = true;  // hard-coded in Qwen2Attention: q, k, v carry biases, o does not
  } else if (t != "mistral" && t != "mixtral" && t != "phi3" && !gpt2) {
    m.qkv_bias = m.o_bias = attention_bias.value_or(false);
  }
  // Seed-OSS (SeedOssConfig, read as a Llama): attention_bias on q/k/v, attention_out_bias on o_proj.
  MEMPLAN_TRY(auto attention_out_bias, f.boolean("attention_out_bias"));
  if (t == "llama" && attention_out_bias) m.o_bias = *attention_out_bias;
  if (t == "llama" || t == "granite" || t == "smollm3" || t == "arcee") m.mlp_bias = mlp_bias.value_or(false);
  if (t == "internlm3") {
    // InternLM3Attention: q/k/v carry qkv_bias, o_proj `bias`; InternLM3MLP: `bias` on all three.
    MEMPLAN_TRY(auto qkv_bias, f.boolean("qkv_bias"));
    MEMPLAN_TRY(auto bias, f.boolean("bias"));
    m.qkv_bias = qkv_bias.value_or(false);
    m.o_bias = m.mlp_bias = bias.value_or(false);
  }
  m.qk_norm = t == "qwen3" || t == "qwen3_moe" || t == "gemma3_text" || t == "gemma4_text" || t == "gemma3n_text" ||
              t == "olmo2" ||
              t == "olmo3" || qwen3_next_layout(t) || t == "lfm2" || t == "exaone4";
  m.qk_norm_per_head = t != "olmo2" && t != "olmo3";  // OLMo 2 and 3 norm the whole q and k projections
  if (glm_dense) {
    // GlmAttention / Glm4Attention: q/k/v with attention_bias, o_proj never; GlmMLP is Phi3MLP
    // (gate_up_proj to 2 x intermediate_size, chunk, up * silu(gate)); Glm4DecoderLayer adds
    // post_self_attn_layernorm and post_mlp_layernorm around the two blocks, as Gemma 2's.
    m.o_bias = false;
    m.fused_gate_up = true;
    if (t == "glm4") m.norms_per_layer = 4;
  }
  if (glm4_moe) {
    // Glm4MoeAttention: q/k/v with attention_bias, o_proj never; use_qk_norm: RMSNorm(head_dim).
    m.o_bias = false;
    MEMPLAN_TRY(auto qk, f.boolean("use_qk_norm"));
    m.qk_norm = qk.value_or(false);
  }
  if (t == "gemma2" || t == "gemma3_text" || t == "gemma4_text" || t == "gemma3n_text") m.norms_per_layer = 4;
  m.scale_embeddings = gemma;
  MEMPLAN_TRY(m.final_logit_softcap, f.number("final_logit_softcapping"));
  MEMPLAN_TRY(m.attn_logit_softcap, f.number("attn_logit_softcapping"));
  // cap * tanh(x / cap) tends to x as the cap grows: an infinite cap (Python's Infinity) is none.
  if (std::isinf(m.final_logit_softcap)) m.final_logit_softcap = 0.0;
  if (std::isinf(m.attn_logit_softcap)) m.attn_logit_softcap = 0.0;
  // Exaone4Attention rotates q and k only when config.sliding_window is None or the layer slides:
  // with a window written (4096 when absent), the global layers are NoPE, all of them when every
  // layer attends in full (parse_sliding_window then drops the unused window).
  const json* exaone_window = t == "exaone4" ? f.find("sliding_window") : nullptr;
  const bool exaone_windowed = t == "exaone4" && (!f.written("sliding_window") ||
                                                  (exaone_window && exaone_window->is_number() &&
                                                   exaone_window->get<double>() > 0));
  if (auto s = parse_sliding_window(f, m, origin); !s) return s.error();
  if (exaone_windowed) {
    m.nope_layers.clear();
    for (int l = 0; l < m.num_layers; ++l)
      if (!m.is_sliding_layer(l)) m.nope_layers.push_back(l);
  }
  if (t == "cohere" || t == "cohere2")
    if (auto s = read_cohere(f, m); !s) return s.error();
  if (t == "gemma4_text") {
    // Gemma4TextConfig use_bidirectional_attention: "vision" only changes the mask around image
    // tokens (text-only steps are causal); "all" makes every layer bidirectional, as Gemma 3's True.
    MEMPLAN_TRY(std::string bidi, f.string("use_bidirectional_attention"));
    if (bidi == "all") {
      m.bidirectional = true;
      if (m.sliding_window > 0) m.sliding_window = m.sliding_window / 2 + 1;
    } else if (!bidi.empty() && bidi != "vision") {
      return config_error(origin, fmt::format("\"use_bidirectional_attention\" '{}' is not one of \"all\", \"vision\"", bidi));
    }
    if (auto s = read_gemma4_text(j, m, origin); !s) return s.error();
  }
  if (t == "gemma3n_text")  // Gemma 3n's AltUp, Laurel, MatFormer widths and sparse layers (docs/models.md#gemma-3n)
    if (auto s = read_gemma3n_text(j, m, origin); !s) return s.error();
  if (t == "gemma3_text") {
    // Gemma3TextConfig(use_bidirectional_attention=True), EmbeddingGemma: the window becomes a
    // radius, sliding_window // 2 + 1 ("due to fa we set exclusive bounds", transformers 4.56+).
    MEMPLAN_TRY(auto bidi, f.boolean("use_bidirectional_attention"));
    m.bidirectional = bidi.value_or(false);
    if (m.bidirectional && m.sliding_window > 0) m.sliding_window = m.sliding_window / 2 + 1;
  }
  if (t == "phi3") m.fused_qkv = m.fused_gate_up = true;
  // A rotary embedding on part of each head: apply_rotary_pos_emb takes rotary_dim = cos.shape[-1],
  // rotates q[..., :rotary_dim] and concatenates the rest (Phi-4-mini's partial_rotary_factor 0.75,
  // GLM-4.5's 0.5 by Glm4MoeConfig's default, MiniMax-M2's rotary_dim 64 of 128); the simulator runs
  // it as Qwen3-Next's (docs/formulas.md#partial-rotary).
  if (t == "phi3" || glm4_moe || glm_dense || t == "minimax_m2") {
    std::int64_t rd = m.head_dim;
    if (t == "minimax_m2") {
      MEMPLAN_TRY(rd, f.integer({"rotary_dim"}, m.head_dim));
    } else {
      // The config classes' defaults: GlmConfig, Glm4Config and Glm4MoeConfig 0.5, Phi3Config 1.0.
      MEMPLAN_TRY(const double partial, partial_rotary_factor(f, origin, glm4_moe || glm_dense ? 0.5 : 1.0));
      rd = static_cast<std::int64_t>(static_cast<double>(m.head_dim) * partial);
    }
    if (rd <= 0 || rd > m.head_dim || rd % 2 != 0)
      return config_error(origin, fmt::format("the rotary part of each head ({}) must be even and at most head_dim ({})",
                                              rd, m.head_dim));
    if (rd < m.head_dim) m.qk_rope_head_dim = rd;
  }
  if (t == "arcee") {
    m.gated_mlp = false;  // ArceeMLP is NemotronMLP: up_proj, act (relu2), down_proj
    // The simulator runs relu2's ops (relu, square); another activation saves other tensors.
    if (m.activation != Activation::kRelu2)
      return unsupported_at(origin, "arcee with a hidden_act other than relu2 is not modelled",
                            "AFM checkpoints use relu2; drop hidden_act or set it to relu2");
  }
  if (t == "nemotron_h") {
    m.norms_per_layer = 1;  // NemotronHBlock: one norm before its one mixer
    m.gated_mlp = false;    // NemotronHMLP: up_proj, relu2, down_proj
    MEMPLAN_TRY(auto nemotron_mlp_bias, f.boolean("mlp_bias"));
    m.mlp_bias = nemotron_mlp_bias.value_or(false);
  }
  if (auto s = parse_hybrid(f, m, origin); !s) return s.error();
  if (t == "granitemoehybrid")  // Granite 4.0 (docs/models.md#granite-4-0)
    if (auto s = apply_granite_hybrid_fields(j, m, origin); !s) return s.error();
  if (t == "falcon_h1")  // Falcon-H1 (docs/models.md#falcon-h1)
    if (auto s = apply_falcon_h1_fields(j, m, origin); !s) return s.error();
  if (gpt2) {
    m.norm = NormKind::kLayerNorm;
    m.norm_bias = true;
    m.gated_mlp = false;
    m.learned_positions = true;
    m.qkv_bias = m.o_bias = m.mlp_bias = true;
    m.fused_qkv = true;
  }

  if (moe_type) {
    MEMPLAN_TRY(std::int64_t experts, f.integer({"num_local_experts", "num_experts", "n_routed_experts"}, 0));
    MEMPLAN_TRY(std::int64_t top_k, f.integer({"num_experts_per_tok", "experts_per_token"}, experts > 0 ? std::nullopt
                                                                                      : std::optional<std::int64_t>(0)));
    m.moe.num_experts = narrow_count(experts);
    m.moe.experts_per_token = narrow_count(top_k);
    if (mixtral_width) {
      m.moe.expert_intermediate_size = m.intermediate_size;
    } else if (experts > 0) {
      MEMPLAN_TRY(m.moe.expert_intermediate_size, f.integer({"moe_intermediate_size"}));
    }
    if (qwen_shared_moe) {
      MEMPLAN_TRY(std::int64_t shared, f.integer({"shared_expert_intermediate_size"}, 0));
      if (shared > 0) {
        m.moe.num_shared_experts = 1;
        m.moe.shared_intermediate_size = shared;
        m.moe.shared_expert_gate = true;
      }
    }
    if (qwen_shared_moe || t == "qwen3_moe") {
      MEMPLAN_TRY(std::int64_t step, f.integer({"decoder_sparse_step"}, 1));
      m.moe.layer_freq = narrow_count(step);
      m.moe.layer_freq_offset = 1;
      MEMPLAN_TRY(m.moe.dense_layers, f.int_list("mlp_only_layers"));
    }
    if (deepseek_moe) {
      MEMPLAN_TRY(std::int64_t shared, f.integer({"n_shared_experts"}, 0));
      m.moe.num_shared_experts = narrow_count(shared);
      m.moe.shared_intermediate_size = m.moe.expert_intermediate_size;
      MEMPLAN_TRY(std::int64_t first_dense, f.integer({"first_k_dense_replace"}, 0));
      MEMPLAN_TRY(std::int64_t freq, f.integer({"moe_layer_freq"}, 1));
      m.moe.first_dense_layers = narrow_count(first_dense);
      m.moe.layer_freq = narrow_count(freq);
    }
  }
  if (mla_type)
    if (auto mla = parse_mla_fields(f, m, origin); !mla) return mla.error();
  // DeepSeek-V3.2: the lightning indexer beside MLA (docs/models.md#deepseek-v32).
  if (t == "deepseek_v32")
    if (auto s = read_dsa_indexer(j, m, origin); !s) return s.error();
  // Llama 4's text layers (docs/models.md#llama-4).
  if (t == "llama4_text")
    if (auto s = read_llama4_text(j, m, origin); !s) return s.error();
  // Glm4MoeTopkRouter's e_score_correction_bias is stored in the checkpoint like DeepSeek-V3's;
  // the MTP layer (num_nextn_predict_layers) is not loaded by Glm4MoeForCausalLM.
  if (glm4_moe) m.moe.router_bias = m.moe.enabled();
  if (is_moe2025_type(t))
    if (auto s = apply_moe2025_fields(j, m, origin); !s) return s.error();
  if (t == "mllama") {
    // MllamaTextConfig: cross_attention_layers (default every fifth from 3), and embed_tokens of
    // vocab_size + 8 rows (MllamaTextModel); lm_head has vocab_size.
    if (f.has("cross_attention_layers")) {
      MEMPLAN_TRY(m.cross_attention_layers, f.int_list("cross_attention_layers"));
    } else {
      m.cross_attention_layers = {3, 8, 13, 18, 23, 28, 33, 38};
    }
    for (const int l : m.cross_attention_layers)
      if (l < 0 || l >= m.num_layers)
        return config_error(origin, fmt::format("text_config \"cross_attention_layers\" names layer {}, outside "
                                                "0..{}", l, m.num_layers - 1));
    m.extra_embedding_rows = 8;
    if (!vision.enabled())
      return config_error(origin, "model_type 'mllama' has no \"vision_config\" object", kWrongFileHint);
  }
  if (vision_out > 0 && vision_out != m.hidden_size)
    return config_error(origin, fmt::format("vision_config's output width {} differs from the language model's "
                                            "hidden_size {}", vision_out, m.hidden_size));
  m.mrope = vision.kind == VisionKind::kQwen2Vl || vision.kind == VisionKind::kQwen25Vl;
  m.vision = std::move(vision);
  m.audio = audio;
  // A checkpoint saved as the bare decoder ("MistralModel", "Qwen2Model": intfloat/e5-mistral-7b-instruct;
  // not a head class such as "GPT2LMHeadModel") has no LM head: it is an embedding model, trained as
  // sentence-transformers loads it (docs/formulas.md#decoder-embeddings).
  if (auto a = j.find("architectures"); a != j.end() && a->is_array() && !a->empty() && !m.vision.enabled()) {
    m.decoder_embedding = std::all_of(a->begin(), a->end(), [](const json& name) {
      if (!name.is_string()) return false;
      const std::string n = name.get<std::string>();
      return n.size() > 5 && n.compare(n.size() - 5, 5, "Model") == 0 && n.find("For") == std::string::npos &&
             n.find("Head") == std::string::npos;
    });
  }
  if (top_type != m.model_type) m.config_model_type = top_type;
  if (auto s = validate(m); !s) {
    Error e = s.error();
    e.where = SourceLocation{origin, 0, 0};
    return e;
  }
  return m;
}

}  // namespace

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> t = {"llama",   "mistral",     "mixtral",  "qwen2",     "qwen2_moe",
                                             "qwen3",   "qwen3_moe",   "gemma",    "gemma2",    "gemma3",
                                             "gemma3_text", "phi3",    "gpt2",     "deepseek",  "olmo2", "olmo3",
                                             "granite", "smollm3", "deepseek_v2", "deepseek_v3", "kimi_k2",
                                             "qwen2_vl", "qwen2_5_vl", "mllama", "internlm3", "glm", "glm4", "glm4_moe",
                                             "qwen3_next", "nemotron_h", "lfm2", "gpt_oss", "minimax_m2",
                                             "starcoder2", "qwen3_vl", "qwen3_vl_moe", "llama4", "llama4_text",
                                             "deepseek_v32", "qwen3_5", "qwen3_5_moe", "qwen3_5_text",
                                             "qwen3_5_moe_text", "gemma4", "gemma4_text", "mistral3", "ministral3",
                                             "arcee", "cohere", "cohere2",
                                             "granitemoehybrid", "gemma3n", "gemma3n_text", "exaone4", "falcon_h1"};
  return t;
}

Result<ModelSpec> parse_hf_config(std::string_view text, const std::string& origin) {
  MEMPLAN_TRY(json j, parse_json(text, origin));
  return parse_config(std::move(j), origin);
}

Result<ModelSpec> parse_hf_config(std::string_view text, const std::string& origin, std::string& assumption) {
  MEMPLAN_TRY(json j, parse_json(text, origin));
  assumption.clear();
  return parse_config(std::move(j), origin, &assumption);
}

bool CatalogEntry::matches(std::string_view name) const {
  const std::string n = to_lower(name);
  if (to_lower(id) == n || to_lower(short_name) == n) return true;
  return std::any_of(aliases.begin(), aliases.end(), [&](const std::string& a) { return to_lower(a) == n; });
}

namespace {

// sentence-transformers Dense modules (N_Dense/config.json: in_features, out_features, bias,
// activation_function), listed in order under "dense" of a "sentence_transformers" object.
Result<std::vector<DenseModule>> parse_dense_modules(const json& st, const std::string& origin) {
  std::vector<DenseModule> out;
  const auto it = st.find("dense");
  if (it == st.end() || it->is_null()) return out;
  if (!it->is_array())
    return config_error(origin, fmt::format("\"dense\" must be a list of Dense module configs, got {}", describe(*it)));
  for (const json& d : *it) {
    if (!d.is_object())
      return config_error(origin, fmt::format("each \"dense\" entry must be an object (a Dense module's config.json), got {}",
                                              describe(d)));
    Fields f(d, origin);
    DenseModule m;
    MEMPLAN_TRY(m.in_features, f.integer({"in_features"}));
    MEMPLAN_TRY(m.out_features, f.integer({"out_features"}));
    if (m.in_features == 0 || m.out_features == 0)
      return config_error(origin, "a Dense module's in_features and out_features must be positive");
    // Real ones are a few thousand wide; the bounds keep every product of them inside int64.
    constexpr std::int64_t kMaxFeatures = std::int64_t{1} << 24;
    if (m.in_features > kMaxFeatures || m.out_features > kMaxFeatures)
      return config_error(origin, fmt::format("a Dense module of {} x {} features is out of range (at most {} each)",
                                              m.in_features, m.out_features, kMaxFeatures));
    if (out.size() >= 16) return config_error(origin, "more than 16 Dense modules: not a sentence-transformers model");
    MEMPLAN_TRY(auto bias, f.boolean("bias"));
    m.bias = bias.value_or(true);
    // sentence_transformers.models.Dense: activation_function defaults to nn.Tanh().
    MEMPLAN_TRY(const std::string act, f.string("activation_function"));
    if (act.empty() || act.ends_with(".Tanh") || act == "Tanh") {
      m.tanh = true;
    } else if (!act.ends_with(".Identity") && act != "Identity") {
      return config_error(origin, fmt::format("Dense activation_function \"{}\" is not modelled", act),
                          "memplan models torch.nn.modules.linear.Identity and torch.nn.modules.activation.Tanh");
    }
    if (!out.empty() && out.back().out_features != m.in_features)
      return config_error(origin, fmt::format("Dense module {} takes {} features, but the one before gives {}",
                                              out.size() + 1, m.in_features, out.back().out_features));
    out.push_back(m);
  }
  return out;
}

}  // namespace

Status check_dense_width(const ModelSpec& m, const std::string& origin) {
  if (!m.st_dense.empty() && m.st_dense.front().in_features != m.hidden_size)
    return config_error(origin, fmt::format("the first Dense module takes {} features, but the model's embeddings have "
                                            "{} (hidden_size)",
                                            m.st_dense.front().in_features, m.hidden_size));
  return Ok{};
}

Result<std::vector<DenseModule>> parse_dense_modules(std::string_view json_text, const std::string& origin) {
  MEMPLAN_TRY(const json j, parse_json(json_text, origin));
  if (!j.is_object()) return config_error(origin, fmt::format("expected an object, got {}", describe(j)));
  return parse_dense_modules(j, origin);
}

Result<CatalogEntry> parse_catalog_entry(std::string_view text, const std::string& origin) {
  MEMPLAN_TRY(json j, parse_json(text, origin));
  if (!j.is_object()) return config_error(origin, "a catalog entry must be a JSON object");
  Fields f(j, origin);
  CatalogEntry c;
  c.file = origin;
  MEMPLAN_TRY(c.id, f.string("id"));
  MEMPLAN_TRY(c.short_name, f.string("short_name"));
  if (c.id.empty() || c.short_name.empty())
    return config_error(origin, "a catalog entry needs \"id\" and \"short_name\"");
  if (const json* a = f.find("aliases")) {
    if (!a->is_array()) return config_error(origin, fmt::format("\"aliases\" must be a list, got {}", describe(*a)));
    for (const auto& alias : *a) {
      if (!alias.is_string())
        return config_error(origin, fmt::format("\"aliases\" must hold strings, got {}", describe(alias)));
      c.aliases.push_back(alias.get<std::string>());
    }
  }
  MEMPLAN_TRY(c.published_params, f.integer({"published_params"}));
  MEMPLAN_TRY(c.params_source, f.string("params_source"));
  const json* cfg = f.find("config");
  if (!cfg) return config_error(origin, "catalog entry has no \"config\"");
  MEMPLAN_TRY(c.spec, parse_config(*cfg, origin));
  c.spec.name = c.id;
  // What sentence-transformers' files add to config.json (modules.json, 1_Pooling/config.json):
  // the model is trained as an embedding model with that pooling.
  if (const json* st = f.find("sentence_transformers")) {
    if (!st->is_object())
      return config_error(origin, fmt::format("\"sentence_transformers\" must be an object, got {}", describe(*st)));
    Fields sf(*st, origin);
    MEMPLAN_TRY(const std::string pooling, sf.string("pooling"));
    auto mode = parse_pooling_mode(pooling);
    if (!mode) return config_error(origin, mode.error().message);
    c.spec.pooling = *mode;
    if (!c.spec.is_encoder()) c.spec.decoder_embedding = true;
    MEMPLAN_TRY(c.spec.st_dense, parse_dense_modules(*st, origin));
    if (auto ok = check_dense_width(c.spec, origin); !ok) return ok.error();
  }
  return c;
}

namespace {

// Digit runs compare as numbers, so sizes list as people read them: 8b, 70b, 405b; gpt2 before gpt2-xl.
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      std::size_t ie = i, je = j;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      const std::string_view na = std::string_view(a).substr(i, ie - i), nb = std::string_view(b).substr(j, je - j);
      // Equal-length digit strings compare as text; otherwise the shorter (leading zeros aside) is smaller.
      const std::string_view ta = na.substr(std::min(na.find_first_not_of('0'), na.size()));
      const std::string_view tb = nb.substr(std::min(nb.find_first_not_of('0'), nb.size()));
      if (ta.size() != tb.size()) return ta.size() < tb.size();
      if (ta != tb) return ta < tb;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

}  // namespace

Result<std::vector<CatalogEntry>> load_catalog() {
  static const Result<std::vector<CatalogEntry>> catalog = []() -> Result<std::vector<CatalogEntry>> {
    std::vector<CatalogEntry> out;
    for (const auto& file : embedded_files()) {
      if (file.path.rfind("models/", 0) != 0) continue;
      MEMPLAN_TRY(CatalogEntry c, parse_catalog_entry(file.content, "configs/" + std::string(file.path)));
      out.push_back(std::move(c));
    }
    std::sort(out.begin(), out.end(),
              [](const CatalogEntry& a, const CatalogEntry& b) { return natural_less(a.short_name, b.short_name); });
    return out;
  }();
  return catalog;
}

namespace {

// The embedded catalog files with a lower-case copy of their text, made once per process, so
// that the name lookups below are plain substring searches.
struct CatalogText {
  std::string_view path;
  std::string_view content;
  std::string lower;
};

const std::vector<CatalogText>& catalog_texts() {
  static const std::vector<CatalogText> texts = [] {
    std::vector<CatalogText> out;
    for (const auto& file : embedded_files())
      if (file.path.rfind("models/", 0) == 0) {
        std::string lower(file.content);
        for (char& c : lower)  // ASCII: ids are; std::tolower per character costs several times more
          if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        out.push_back({file.path, file.content, std::move(lower)});
      }
    return out;
  }();
  return texts;
}

}  // namespace

std::optional<CatalogEntry> find_catalog_entry_fast(std::string_view name) {
  // Parsing all 78 entries is most of a command's start-up; the entry a name belongs to holds
  // that name as a JSON string (its id, short name or an alias), so only entries whose text
  // contains "name" (any case) are parsed. A miss falls back to the whole catalog.
  if (name.empty() || name.find('"') != std::string_view::npos) return std::nullopt;
  const std::string quoted = "\"" + to_lower(name) + "\"";
  for (const auto& file : catalog_texts()) {
    if (file.lower.find(quoted) == std::string::npos) continue;
    auto entry = parse_catalog_entry(file.content, "configs/" + std::string(file.path));
    if (entry && entry->matches(name)) return std::move(*entry);
  }
  return std::nullopt;
}

const CatalogEntry* find_catalog_entry(const std::vector<CatalogEntry>& catalog, std::string_view name) {
  for (const auto& c : catalog)
    if (c.matches(name)) return &c;
  return nullptr;
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
  e.xdg_cache_home = env("XDG_CACHE_HOME");
  return e;
}

std::vector<std::string> ModelSearchEnv::hub_dirs() const {
  // huggingface_hub's own precedence; searching them all also finds a cache left by an
  // earlier setting.
  std::vector<std::string> dirs;
  auto add = [&](const fs::path& p) {
    const std::string s = p.lexically_normal().string();
    if (std::find(dirs.begin(), dirs.end(), s) == dirs.end()) dirs.push_back(s);
  };
  if (!hub_cache.empty()) add(hub_cache);
  if (!hf_home.empty()) add(fs::path(hf_home) / "hub");
  if (!xdg_cache_home.empty()) add(fs::path(xdg_cache_home) / "huggingface" / "hub");
  if (!home.empty()) add(fs::path(home) / ".cache" / "huggingface" / "hub");
  return dirs;
}

namespace {

// Through the bounded reader: a FIFO or /dev/zero given as --model is refused, not read forever.
Result<std::string> read_file(const fs::path& p) { return RealFileSystem().read_file(p.string()); }

// An "org/name" id as the Hub spells them: two non-empty parts, no path syntax.
bool looks_like_hub_id(const std::string& s) {
  const std::size_t slash = s.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == s.size()) return false;
  if (s.find('/', slash + 1) != std::string::npos || s.find('\\') != std::string::npos) return false;
  return s[0] != '.' && s[0] != '~' && s.find("..") == std::string::npos;
}

bool looks_like_path(const std::string& s) {
  auto ends_with = [&](std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return s.find('/') != std::string::npos || s.find('\\') != std::string::npos || ends_with(".json") ||
         (!s.empty() && (s[0] == '.' || s[0] == '~'));
}

// The snapshot directory holding the revision `main` points to, else the newest one.
std::optional<fs::path> pick_snapshot(const fs::path& model_dir) {
  std::error_code ec;
  const fs::path snaps = model_dir / "snapshots";
  if (!fs::is_directory(snaps, ec)) return std::nullopt;
  std::ifstream ref(model_dir / "refs" / "main");
  std::string rev;
  if (ref && std::getline(ref, rev)) {
    rev = trim(rev);
    const fs::path cfg = snaps / rev / "config.json";
    if (!rev.empty() && rev.find('/') == std::string::npos && fs::is_regular_file(cfg, ec)) return cfg;
  }
  std::optional<fs::path> best;
  fs::file_time_type best_t{};
  for (fs::directory_iterator it(snaps, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path cfg = it->path() / "config.json";
    if (!fs::is_regular_file(cfg, ec)) continue;
    const auto t = fs::last_write_time(cfg, ec);
    if (ec) continue;
    // Equal times fall back to the name so the choice does not depend on directory order.
    if (!best || t > best_t || (t == best_t && cfg > *best)) {
      best = cfg;
      best_t = t;
    }
  }
  return best;
}

// A checkpoint's quantization_config, as transformers writes it: bitsandbytes with
// load_in_4bit (or the private _load_in_4bit of newer versions), GPTQ or AWQ with bits 4.
void read_quantization(std::string_view text, ResolvedModel& r) {
  const json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (!j.is_object()) return;
  const auto q = j.find("quantization_config");
  if (q == j.end() || !q->is_object()) return;
  auto flag = [&](const char* k) {
    const auto it = q->find(k);
    return it != q->end() && it->is_boolean() && it->get<bool>();
  };
  const auto method = q->find("quant_method");
  const std::string m = method != q->end() && method->is_string() ? to_lower(method->get<std::string>()) : "";
  const auto bits = q->find("bits");
  const bool four = bits != q->end() && bits->is_number_integer() && bits->get<std::int64_t>() == 4;
  if ((m == "bitsandbytes" || m.empty()) && (flag("load_in_4bit") || flag("_load_in_4bit"))) {
    r.prequantized_4bit = true;
    r.quantization = "bitsandbytes";
  } else if ((m == "gptq" || m == "awq") && four) {
    r.prequantized_4bit = true;
    r.quantization = m == "gptq" ? "GPTQ" : "AWQ";
  } else if (m != "mxfp4") {  // gpt-oss's MXFP4 experts: docs/models.md#gpt_oss
    // Any other storage (fp8 blocks, 8-bit bitsandbytes, auto-round, compressed-tensors, GPTQ at
    // other widths): named, so that the caller can say the estimate does not model it.
    r.quantization = m.empty() ? std::string("unnamed") : m;
  }
}

Result<ResolvedModel> resolve_impl(const std::string& name, const ModelSearchEnv& env, int depth);

// A sentence-transformers model directory (modules.json beside config.json): the Pooling
// module's mode and every Dense module (docs/formulas.md#embeddinggemma). The model is then
// trained as an embedding model. Returns a sentence for ResolvedModel::via, empty without
// modules.json.
Result<std::string> read_sentence_transformers_modules(const fs::path& dir, ModelSpec& m) {
  std::error_code ec;
  const fs::path list = dir / "modules.json";
  if (!fs::is_regular_file(list, ec)) return std::string();
  MEMPLAN_TRY(const std::string text, read_file(list));
  MEMPLAN_TRY(const json mods, parse_json(text, list.string()));
  if (!mods.is_array())
    return config_error(list.string(), fmt::format("modules.json must be a list of modules, got {}", describe(mods)));
  json dense = json::array();  // each Dense module's config.json, checked at its file, then chained
  std::string pooling = "mean";
  for (const json& mod : mods) {
    if (!mod.is_object() || !mod.contains("type") || !mod["type"].is_string()) continue;
    const std::string type = mod["type"].get<std::string>();
    const bool is_pool = type.ends_with("models.Pooling"), is_dense = type.ends_with("models.Dense");
    if (!is_pool && !is_dense) continue;
    // json::value() throws on a non-string: read the type first, as everywhere in this file.
    const auto path_it = mod.find("path");
    const std::string rel = path_it != mod.end() && path_it->is_string() ? path_it->get<std::string>() : std::string();
    if (is_dense && rel.empty())
      return config_error(list.string(), "a Dense module without a \"path\" naming its folder");
    const fs::path sub(rel);
    // Only folders inside the model directory: a modules.json is the user's file, but memplan
    // reads nothing it does not name as part of the model.
    if (sub.is_absolute() || std::any_of(sub.begin(), sub.end(), [](const fs::path& c) { return c == ".."; }))
      return config_error(list.string(), fmt::format("module path \"{}\" leaves the model directory", rel));
    const fs::path conf = dir / sub / "config.json";
    if (!fs::is_regular_file(conf, ec)) {
      if (is_pool) continue;  // sentence-transformers' own default: mean
      return config_error(list.string(), fmt::format("the Dense module in \"{}\" has no config.json", rel),
                          "download the module's folder with the model (its in_features and out_features size it)");
    }
    MEMPLAN_TRY(const std::string ctext, read_file(conf));
    MEMPLAN_TRY(const json c, parse_json(ctext, conf.string()));
    if (!c.is_object()) return config_error(conf.string(), fmt::format("expected an object, got {}", describe(c)));
    if (is_dense) {
      MEMPLAN_TRY(const auto one, parse_dense_modules(json{{"dense", json::array({c})}}, conf.string()));
      (void)one;
      dense.push_back(c);
      continue;
    }
    const auto flag = [&c](const char* k) { return c.contains(k) && c[k].is_boolean() && c[k].get<bool>(); };
    if (flag("pooling_mode_cls_token")) pooling = "cls";
    else if (flag("pooling_mode_lasttoken")) pooling = "lasttoken";
    else if (flag("pooling_mode_mean_tokens")) pooling = "mean";
    else if (flag("pooling_mode_max_tokens") || flag("pooling_mode_mean_sqrt_len_tokens") ||
             flag("pooling_mode_weightedmean_tokens"))
      return config_error(conf.string(), "this Pooling mode is not modelled",
                          "memplan models pooling_mode_mean_tokens, pooling_mode_cls_token and pooling_mode_lasttoken");
  }
  MEMPLAN_TRY(m.pooling, parse_pooling_mode(pooling));
  MEMPLAN_TRY(m.st_dense, parse_dense_modules(json{{"dense", dense}}, list.string()));
  if (auto ok = check_dense_width(m, list.string()); !ok) return ok.error();
  if (!m.is_encoder()) m.decoder_embedding = true;
  return fmt::format("{}: a sentence-transformers model (pooling {}{})", list.string(), pooling,
                     m.st_dense.empty() ? std::string() : fmt::format(", {} Dense module(s)", m.st_dense.size()));
}

// A config.json, or a PEFT adapter_config.json: an adapter has no architecture of its own
// (no model_type) but names its base model, which is resolved in turn.
Result<ResolvedModel> load_model_file(const fs::path& cfg, const std::string& name, const ModelSearchEnv& env,
                                      int depth) {
  MEMPLAN_TRY(std::string text, read_file(cfg));
  const json j = json::parse(text, nullptr, false);
  if (j.is_object() && !j.contains("model_type") && j.contains("base_model_name_or_path")) {
    const json& b = j["base_model_name_or_path"];
    Error where = make_error(ErrorCode::kInvalidConfig, "");
    where.where = SourceLocation{cfg.string(), 0, 0};
    if (!b.is_string() || trim(b.get<std::string>()).empty()) {
      where.message = fmt::format("a PEFT adapter config whose \"base_model_name_or_path\" is {}", describe(b));
      where.suggestion = "pass the base model with --model BASE_ID";
      return where;
    }
    const std::string base = b.get<std::string>();
    // An adapter whose base is another adapter is legal; a loop of them is not.
    if (depth >= 4) {
      where.message = fmt::format("base_model_name_or_path '{}': adapters nest more than 4 deep", base);
      where.suggestion = "pass the base model with --model BASE_ID";
      return where;
    }
    auto inner = resolve_impl(base, env, depth + 1);
    if (!inner) {
      Error e = inner.error();
      e.message = fmt::format("base_model_name_or_path '{}': {}", base, e.message);
      if (!e.where) e.where = SourceLocation{cfg.string(), 0, 0};
      return e;
    }
    ResolvedModel r = std::move(*inner);
    const std::string inner_via = r.via;
    r.via = fmt::format("{}: a PEFT adapter; its base model '{}' is what is counted", cfg.string(), base);
    if (!inner_via.empty()) r.via += "; " + inner_via;
    return r;
  }
  std::string assumption;
  MEMPLAN_TRY(ModelSpec m, parse_hf_config(text, cfg.string(), assumption));
  m.name = name;
  ResolvedModel r;
  r.spec = std::move(m);
  read_quantization(text, r);
  MEMPLAN_TRY(const std::string st, read_sentence_transformers_modules(cfg.parent_path(), r.spec));
  if (!st.empty()) r.via = st;
  if (!assumption.empty()) r.via = cfg.string() + ": " + assumption + (r.via.empty() ? "" : "; " + r.via);
  if (r.spec.model_type == "gpt_oss" && text.find("\"mxfp4\"") != std::string_view::npos) {
    // docs/models.md#gpt_oss: the MXFP4 experts are the checkpoint's storage, not a training mode.
    const std::string note = cfg.string() + ": its experts are stored in MXFP4; from_pretrained dequantizes them to "
                             "bf16 for training (Mxfp4Config(dequantize=True)), which is what is counted";
    r.via = r.via.empty() ? note : r.via + "; " + note;
  }
  return r;
}

// The checkpoint-N subdirectory with the largest N that holds a config: a Trainer output
// directory before (or without) its final save.
std::optional<fs::path> latest_checkpoint(const fs::path& dir) {
  std::error_code ec;
  std::optional<fs::path> best;
  std::uint64_t best_step = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind("checkpoint-", 0) != 0 || n.size() == 11 || n.size() > 30) continue;
    const std::string digits = n.substr(11);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    std::error_code ec2;
    if (!fs::is_regular_file(it->path() / "config.json", ec2) &&
        !fs::is_regular_file(it->path() / "adapter_config.json", ec2))
      continue;
    const std::uint64_t step = std::stoull(digits);
    if (!best || step > best_step) {
      best = it->path();
      best_step = step;
    }
  }
  return best;
}

Result<ResolvedModel> resolve_path(const fs::path& p, const std::string& name, const ModelSearchEnv& env, int depth) {
  std::error_code ec;
  if (!fs::is_directory(p, ec)) return load_model_file(p, name, env, depth);
  for (const char* file : {"config.json", "adapter_config.json"})
    if (fs::is_regular_file(p / file, ec)) return load_model_file(p / file, name, env, depth);
  if (auto ckpt = latest_checkpoint(p)) {
    MEMPLAN_TRY(ResolvedModel r, resolve_path(*ckpt, name, env, depth));
    const std::string inner = r.via;
    r.via = fmt::format("{}: the latest checkpoint in '{}'", ckpt->filename().string(), name);
    if (!inner.empty()) r.via += "; " + inner;
    return r;
  }
  return make_error(ErrorCode::kIoError,
                    fmt::format("no config.json, adapter_config.json or checkpoint-N in directory '{}'", name),
                    "point --model at a model directory or at its config.json; for the output of a training stage "
                    "that has not saved yet, pass the model that stage trains (--model BASE_ID)");
}

// ---- the name rules (model_names.hpp) over the catalog

struct IndexedName {
  NameKey key;
  std::size_t entry = 0;  // index into NameIndex::catalog: the entry the name has the architecture of
  int rule = -1;          // index into NameIndex::rules.rules; -1 for the catalog's own names
  std::string id;         // the name as written in the catalog or the rules
};

// Owns its copies of the catalog and the rules: load_catalog() and load_name_rules() return values.
struct NameIndex {
  std::vector<CatalogEntry> catalog;
  NameRules rules;
  std::vector<IndexedName> names;
  bool mirror(const std::string& org) const {
    return std::find(rules.mirror_orgs.begin(), rules.mirror_orgs.end(), org) != rules.mirror_orgs.end();
  }
  const NameRule* rule_of(const IndexedName& n) const {
    return n.rule < 0 ? nullptr : &rules.rules[static_cast<std::size_t>(n.rule)];
  }
};

Result<NameIndex> build_name_index(std::vector<CatalogEntry> catalog, NameRules rules) {
  NameIndex idx;
  idx.catalog = std::move(catalog);
  idx.rules = std::move(rules);
  for (std::size_t i = 0; i < idx.catalog.size(); ++i) {
    const CatalogEntry& c = idx.catalog[i];
    idx.names.push_back({name_key(c.short_name), i, -1, c.short_name});
    idx.names.push_back({name_key(c.id), i, -1, c.id});
    for (const auto& a : c.aliases) idx.names.push_back({name_key(a), i, -1, a});
  }
  for (std::size_t r = 0; r < idx.rules.rules.size(); ++r) {
    const NameRule& rule = idx.rules.rules[r];
    if (rule.kind == NameRule::Kind::kNotModelled) continue;  // no catalog entry: see not_modelled()
    const CatalogEntry* target = find_catalog_entry(idx.catalog, rule.target);
    if (!target)
      return make_error(ErrorCode::kInvalidConfig,
                        fmt::format("configs/model_names.json: '{}' names '{}', which is not in the catalog", rule.id,
                                    rule.target));
    idx.names.push_back({name_key(rule.id), static_cast<std::size_t>(target - idx.catalog.data()),
                         static_cast<int>(r), rule.id});
  }
  return idx;
}

// The index for one query key, over the catalog entries that can hold a name with that key: every
// token of a key is a lower-cased piece of the name it came from, so an entry whose text lacks one
// cannot match. Parsing only those keeps a rule lookup near the exact-name fast path instead of
// parsing the whole catalog (docs/models.md#lookup-cost).
Result<NameIndex> name_index_for(const NameKey& q) {
  MEMPLAN_TRY(auto rules, load_name_rules());
  std::vector<std::string> tokens;
  for (std::size_t start = 0; start <= q.key.size();) {
    const std::size_t dash = std::min(q.key.find('-', start), q.key.size());
    if (dash > start) tokens.push_back(q.key.substr(start, dash - start));
    start = dash + 1;
  }
  std::vector<CatalogEntry> subset;
  for (const auto& file : catalog_texts()) {
    if (!std::all_of(tokens.begin(), tokens.end(),
                     [&](const std::string& t) { return file.lower.find(t) != std::string::npos; }))
      continue;
    MEMPLAN_TRY(CatalogEntry c, parse_catalog_entry(file.content, "configs/" + std::string(file.path)));
    subset.push_back(std::move(c));
  }
  for (const auto& r : rules.rules) {
    if (name_key(r.id).key != q.key || find_catalog_entry(subset, r.target)) continue;
    if (auto target = find_catalog_entry_fast(r.target)) subset.push_back(std::move(*target));
  }
  // Rows that cannot match are dropped so that the index names only entries it holds.
  rules.rules.erase(std::remove_if(rules.rules.begin(), rules.rules.end(),
                                   [&](const NameRule& r) {
                                     return r.kind == NameRule::Kind::kNotModelled ||
                                            !find_catalog_entry(subset, r.target);
                                   }),
                    rules.rules.end());
  return build_name_index(std::move(subset), std::move(rules));
}

std::string catalog_ref(const CatalogEntry& c) { return fmt::format("{} (catalog {})", c.id, c.short_name); }

// The catalog entry `name` has the architecture of by the name rules, nullopt when none applies,
// or an error when the name is a known variant whose architecture differs.
Result<std::optional<ResolvedModel>> match_name_rules(const std::string& name) {
  const NameKey q = name_key(name);
  if (q.key.empty()) return std::optional<ResolvedModel>();
  MEMPLAN_TRY(const NameIndex idx, name_index_for(q));
  const std::string lname = to_lower(name);
  std::vector<const IndexedName*> hits;
  for (const auto& n : idx.names) {
    if (n.rule >= 0 && to_lower(n.id) == lname) {  // a row of the table, spelled out
      hits = {&n};
      break;
    }
    if (n.key.key != q.key) continue;
    // A name's own organisation, a mirror's, or none; never another maker's. A table row is
    // one organisation's upload, so a bare name does not reach it.
    const bool org_ok = q.org == n.key.org || (!q.org.empty() && idx.mirror(q.org)) || (q.org.empty() && n.rule < 0);
    if (org_ok) hits.push_back(&n);
  }
  if (hits.empty()) return std::optional<ResolvedModel>();
  for (const auto* h : hits) {
    const NameRule* rule = idx.rule_of(*h);
    if (rule && rule->kind == NameRule::Kind::kDifferentArchitecture) {
      Error e = make_error(ErrorCode::kUnknownName,
                           fmt::format("model '{}' is not in the catalog: {} differs from {}: {}", name, h->id,
                                       catalog_ref(idx.catalog[h->entry]), rule->why),
                           fmt::format("pass the path to its config.json ('huggingface-cli download {} config.json' "
                                       "fetches it)",
                                       h->id));
      return e;
    }
  }
  const std::size_t entry_index = hits.front()->entry;
  for (const auto* h : hits)
    if (h->entry != entry_index) return std::optional<ResolvedModel>();  // ambiguous: no guess
  const CatalogEntry& entry = idx.catalog[entry_index];
  // The most specific explanation: a table row over a catalog name.
  const NameRule* best = nullptr;
  for (const auto* h : hits)
    if (const NameRule* rule = idx.rule_of(*h)) best = rule;
  ResolvedModel r;
  r.spec = entry.spec;
  if (best && best->kind == NameRule::Kind::kFineTune)
    r.via = fmt::format("{}: {}; counted as its base {}", name, best->why, catalog_ref(entry));
  else if (best)
    r.via = fmt::format("{}: {}; counted as {}", name, best->why, catalog_ref(entry));
  else
    r.via = fmt::format("{}: the same architecture as {}", name, catalog_ref(entry));
  const NameQuantization nq = name_quantization(name);
  r.prequantized_4bit = nq.prequantized_4bit;
  r.quantization = nq.method;
  return std::optional<ResolvedModel>(std::move(r));
}

// A popular model whose architecture memplan does not count (configs/model_names.json
// not_modelled): said plainly, instead of a did-you-mean that would offer a different model
// (phi-4 for phi-2).
Result<std::optional<Error>> not_modelled(const std::string& name) {
  MEMPLAN_TRY(const auto rules, load_name_rules());
  const NameKey q = name_key(name);
  const bool mirror =
      std::find(rules.mirror_orgs.begin(), rules.mirror_orgs.end(), q.org) != rules.mirror_orgs.end();
  for (const auto& r : rules.rules) {
    if (r.kind != NameRule::Kind::kNotModelled) continue;
    const NameKey k = name_key(r.id);
    if (to_lower(r.id) != to_lower(name) && !(!q.key.empty() && k.key == q.key && (q.org == k.org || mirror)))
      continue;
    Error e = make_error(ErrorCode::kUnsupported,
                         fmt::format("model '{}' is a '{}' model, whose module layout memplan does not model", name,
                                     r.target),
                         r.params > 0 ? fmt::format("use --model-params {} (its published total: {}) for a "
                                                    "Llama-shaped estimate of the same size",
                                                    r.params, r.why)
                                      : "use --model-params with its parameter count for a Llama-shaped estimate "
                                        "of the same size");
    return std::optional<Error>(std::move(e));
  }
  return std::optional<Error>();
}

// Did-you-mean over the catalog's names, keeping to the size the name asks for: a 7B that is not
// in the catalog is not a 1.5B that is.
std::string suggest(const std::string& name, const std::vector<CatalogEntry>& catalog) {
  std::vector<std::string> names;
  for (const auto& c : catalog) names.push_back(c.short_name);
  for (const auto& c : catalog) {
    names.push_back(c.id);
    names.insert(names.end(), c.aliases.begin(), c.aliases.end());
  }
  const std::string size = size_token(name);
  if (!size.empty())
    names.erase(std::remove_if(names.begin(), names.end(), [&](const std::string& n) { return size_token(n) != size; }),
                names.end());
  // A name that starts a catalog name ("mistral-7b" of "mistral-7b-v0.1") is a truncation, not a
  // typo; edit distance alone would prefer "mixtral-8x7b".
  std::string hint;
  const std::string lname = to_lower(name);
  for (const auto& n : names)
    if (to_lower(n).rfind(lname, 0) == 0 && (hint.empty() || n.size() < hint.size())) hint = n;
  return hint.empty() ? did_you_mean(name, names) : fmt::format("did you mean '{}'?", hint);
}

Result<ResolvedModel> resolve_impl(const std::string& name, const ModelSearchEnv& env, int depth) {
  if (trim(name).empty())
    return make_error(ErrorCode::kInvalidArgument, "empty model name",
                      "give a catalog name (memplan models), a Hugging Face id, or a path to a config.json");
  std::error_code ec;
  const fs::path p(name);
  if (fs::exists(p, ec)) return resolve_path(p, name, env, depth);
  if (auto hit = find_catalog_entry_fast(name)) {
    ResolvedModel r;
    r.spec = hit->spec;
    return r;
  }
  // find_catalog_entry_fast's miss is definitive (every catalog name is a JSON string in its
  // entry's text; tested), so the whole catalog is parsed only for an error's suggestion.
  if (!looks_like_path(name) || looks_like_hub_id(name)) {
    MEMPLAN_TRY(auto ruled, match_name_rules(name));
    if (ruled) return std::move(*ruled);
  }
  const std::string cached = find_in_hf_cache(name, env);
  if (!cached.empty()) return load_model_file(cached, name, env, depth);
  if (!looks_like_path(name) || looks_like_hub_id(name)) {
    MEMPLAN_TRY(auto refused, not_modelled(name));
    if (refused) return std::move(*refused);
  }

  if (looks_like_path(name) && !looks_like_hub_id(name)) {
    const bool json_file = name.size() > 5 && to_lower(name.substr(name.size() - 5)) == ".json";
    return make_error(ErrorCode::kIoError, fmt::format("cannot read '{}': no such file or directory", name),
                      json_file ? "check the path, or give a catalog name (memplan models)"
                                : "if it is the output of an earlier training stage, pass the model that stage "
                                  "trains (--model BASE_ID) or the path to its config.json once it exists");
  }
  MEMPLAN_TRY(const auto& catalog, load_catalog());
  std::string hint = suggest(name, catalog);
  if (hint.empty() && looks_like_hub_id(name)) {
    std::string dirs;
    for (const auto& d : env.hub_dirs()) dirs += (dirs.empty() ? "" : ", ") + d;
    hint = fmt::format(
        "it is not in the catalog (memplan models) nor in the local Hugging Face cache ({}); if it is a fine-tune, "
        "pass the model it was trained from (--model BASE_ID: fine-tunes keep their base's architecture), "
        "otherwise the path to its config.json ('huggingface-cli download {} config.json' fetches it) or "
        "--model-params",
        dirs.empty() ? "no cache directory is set" : dirs, name);
  }
  if (hint.empty())
    hint = "give a catalog name (memplan models), a Hugging Face id in the local cache, a path to a config.json, "
           "or --model-params";
  return make_error(ErrorCode::kUnknownName, fmt::format("unknown model '{}'", name), hint);
}

}  // namespace

std::string find_in_hf_cache(const std::string& id, const ModelSearchEnv& env) {
  if (!looks_like_hub_id(id)) return {};
  std::string dir = "models--" + id;
  dir.replace(dir.find('/'), 1, "--");
  for (const auto& root : env.hub_dirs()) {
    std::error_code ec;
    if (auto cfg = pick_snapshot(fs::path(root) / dir)) return cfg->string();
    // The Hub treats ids case-insensitively, so a cache folder may differ in case from the name typed.
    const std::string want = to_lower(dir);
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
      if (to_lower(it->path().filename().string()) != want) continue;
      if (auto cfg = pick_snapshot(it->path())) return cfg->string();
    }
  }
  return {};
}

Result<std::optional<ResolvedModel>> resolve_by_name_rules(const std::string& name) { return match_name_rules(name); }

Result<ResolvedModel> resolve_model_source(const std::string& name, const ModelSearchEnv& env) {
  return resolve_impl(name, env, 0);
}

Result<ModelSpec> resolve_model(const std::string& name, const ModelSearchEnv& env) {
  MEMPLAN_TRY(ResolvedModel r, resolve_model_source(name, env));
  return std::move(r.spec);
}

// ---------------------------------------------------------------------------------------------
// --model-params: docs/models.md#model-params

const std::vector<ShapeRow>& param_count_shapes() {
  // Real Llama-family shapes, smallest first: llama2.c's TinyStories models (tied embeddings,
  // MLP width by its multiple_of rule), SmolLM2, then Meta's Llama releases.
  static const std::vector<ShapeRow> rows = {
      {"stories260K", 64, 5, 8, 4, 8, 172, 512, true},
      {"stories15M", 288, 6, 6, 6, 48, 768, 32000, true},
      {"stories42M", 512, 8, 8, 8, 64, 1376, 32000, true},
      {"stories110M", 768, 12, 12, 12, 64, 2048, 32000, true},
      {"SmolLM2-135M", 576, 30, 9, 3, 64, 1536, 49152, true},
      {"SmolLM2-360M", 960, 32, 15, 5, 64, 2560, 49152, true},
      {"Llama-3.2-1B", 2048, 16, 32, 8, 64, 8192, 128256, true},
      {"Llama-3.2-3B", 3072, 28, 24, 8, 128, 8192, 128256, true},
      {"Llama-2-7B", 4096, 32, 32, 32, 128, 11008, 32000, false},
      {"Llama-3.1-8B", 4096, 32, 32, 8, 128, 14336, 128256, false},
      {"Llama-2-13B", 5120, 40, 40, 40, 128, 13824, 32000, false},
      {"CodeLlama-34B", 8192, 48, 64, 8, 128, 22016, 32000, false},
      {"Llama-3.1-70B", 8192, 80, 64, 8, 128, 28672, 128256, false},
      {"Llama-3.1-405B", 16384, 126, 128, 8, 128, 53248, 128256, false},
  };
  return rows;
}

namespace {

// "7B", "1.5B", "125M", "1T": how people write --model-params.
std::string short_count(std::int64_t n) {
  const double v = static_cast<double>(n);
  if (v >= 1e12) return fmt::format("{:.3g}T", v / 1e12);
  if (v >= 1e9) return fmt::format("{:.3g}B", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  return group_digits(n);
}

ModelSpec shape_spec(const ShapeRow& r, int layers, std::int64_t intermediate) {
  ModelSpec m;
  m.model_type = "llama";
  m.hidden_size = r.hidden_size;
  m.num_layers = layers;
  m.num_heads = r.num_heads;
  m.num_kv_heads = r.num_kv_heads;
  m.head_dim = r.head_dim;
  m.intermediate_size = intermediate;
  m.vocab_size = r.vocab_size;
  m.tie_word_embeddings = r.tie_word_embeddings;
  m.torch_dtype = "bfloat16";
  return m;
}

struct Fit {
  ModelSpec spec;
  std::int64_t error = -1;
};

// The row resized toward `params`: the layer count that fits at the row's own MLP width (within
// [min_layers, max_layers]), two either side of it, each with the MLP width that comes closest,
// in steps that keep matrix shapes tensor-core friendly and within half to twice the row's width.
// The count is linear in both, so one closed form per layer count replaces a search.
Fit fit_row(const ShapeRow& row, std::int64_t params, std::int64_t min_layers, std::int64_t max_layers) {
  const std::int64_t h = row.hidden_size;
  const std::int64_t step = row.intermediate_size >= 1024 ? 256 : 4;
  const std::int64_t lo = std::max(step, row.intermediate_size / 2 / step * step);
  const std::int64_t hi = row.intermediate_size * 2;
  // With one layer, the total minus that layer is what does not scale: embeddings and final norm.
  const ParameterCounts one = count_parameters(shape_spec(row, 1, row.intermediate_size));
  const std::int64_t attn = one.attention;
  const std::int64_t fixed = one.total - one.attention - one.mlp - 2 * h;
  const std::int64_t per_layer = attn + 3 * h * row.intermediate_size + 2 * h;
  const std::int64_t guess = std::clamp<std::int64_t>((params - fixed + per_layer / 2) / per_layer, min_layers, max_layers);
  Fit best;
  for (std::int64_t layers = std::max(min_layers, guess - 2); layers <= std::min(max_layers, guess + 2); ++layers) {
    const double mlp = static_cast<double>(params - fixed) / static_cast<double>(layers) - static_cast<double>(attn + 2 * h);
    const double ideal = mlp / static_cast<double>(3 * h);
    const std::int64_t below =
        std::clamp<std::int64_t>(static_cast<std::int64_t>(std::floor(ideal / static_cast<double>(step))) * step, lo, hi);
    for (std::int64_t inter : {below, std::min(below + step, hi), row.intermediate_size}) {
      ModelSpec m = shape_spec(row, static_cast<int>(layers), inter);
      const std::int64_t err = std::llabs(count_parameters(m).total - params);
      // Ties keep the row's own width: a real shape beats an invented one.
      if (best.error < 0 || err < best.error || (err == best.error && inter == row.intermediate_size)) {
        best.spec = std::move(m);
        best.error = err;
      }
    }
  }
  return best;
}

}  // namespace

Result<ModelSpec> model_from_param_count(std::int64_t params) {
  // Ten trillion: past it even the largest row would need more layers than validate() allows.
  constexpr std::int64_t kMax = 10'000'000'000'000;
  if (params <= 0)
    return make_error(ErrorCode::kInvalidArgument, fmt::format("--model-params must be positive, got {}", params));
  if (params > kMax)
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("--model-params {} is beyond the largest shape memplan assumes (10T)", params),
                      "give a count up to 10T, or a config.json with --model");
  const auto& rows = param_count_shapes();
  std::vector<const ShapeRow*> by_distance;
  for (const auto& r : rows) by_distance.push_back(&r);
  auto distance = [&](const ShapeRow* r) {
    const double total = static_cast<double>(count_parameters(shape_spec(*r, r->num_layers, r->intermediate_size)).total);
    return std::fabs(std::log(static_cast<double>(params) / total));
  };
  std::stable_sort(by_distance.begin(), by_distance.end(),
                   [&](const ShapeRow* a, const ShapeRow* b) { return distance(a) < distance(b); });
  // The nearest row that gets within 1% at half to twice its own depth; the smallest and largest
  // rows may shrink or grow without bound. Between rows no real shape reaches, the least error wins.
  const ShapeRow* row = nullptr;
  Fit fit;
  for (const ShapeRow* r : by_distance) {
    const std::int64_t min_layers = r == &rows.front() ? 1 : std::max(1, r->num_layers / 2);
    const std::int64_t max_layers = r == &rows.back() ? 4096 : 2 * r->num_layers;
    Fit f = fit_row(*r, params, min_layers, max_layers);
    if (f.error <= params / 100) {
      row = r;
      fit = std::move(f);
      break;
    }
  }
  if (!row) {
    for (const ShapeRow* r : by_distance) {
      Fit f = fit_row(*r, params, 1, 4096);
      if (!row || f.error < fit.error) {
        row = r;
        fit = std::move(f);
      }
    }
  }
  ModelSpec best = std::move(fit.spec);
  const bool exact_row = best.num_layers == row->num_layers && best.intermediate_size == row->intermediate_size;
  best.name = exact_row ? fmt::format("{}-shaped model", row->source)
                        : fmt::format("{}-parameter Llama-style model ({} shape, resized)", short_count(params),
                                      row->source);
  if (auto s = validate(best); !s) return s.error();
  return best;
}

std::string group_digits(std::int64_t n) {
  // Through unsigned so that INT64_MIN has a magnitude.
  const std::uint64_t magnitude = n < 0 ? 0 - static_cast<std::uint64_t>(n) : static_cast<std::uint64_t>(n);
  const std::string digits = std::to_string(magnitude);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string describe_shape(const ModelSpec& m) {
  const auto c = count_parameters(m);
  std::string s = fmt::format("{}: {} ({}), {} layers, hidden {}, {} heads ({} kv, head_dim {}), intermediate {}, "
                              "vocab {}, {} embeddings",
                              m.name.empty() ? m.model_type : m.name, m.model_type, to_string(m.norm), m.num_layers,
                              m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim, m.intermediate_size,
                              m.vocab_size, m.tie_word_embeddings ? "tied" : "untied");
  if (m.moe.enabled())
    s += fmt::format(", {} experts (top {}, width {})", m.moe.num_experts, m.moe.experts_per_token,
                     m.moe.expert_intermediate_size);
  return s + fmt::format(" = {} parameters", group_digits(c.total));
}

}  // namespace memplan::io

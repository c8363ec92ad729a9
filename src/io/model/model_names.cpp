#include "io/model/model_names.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/embedded.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

using nlohmann::json;

std::vector<std::string> split_tokens(std::string_view name) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : name) {
    if (c == '-') {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

// Tokens that name a variant sharing the base's architecture: instruct/chat tuning, the -hf
// conversion suffix, Gemma's -pt/-it, a re-upload's storage dtype.
bool is_variant_token(const std::string& t) {
  static const char* const kTokens[] = {"instruct", "it", "chat", "base", "hf", "pt", "fp16", "bf16"};
  return std::find(std::begin(kTokens), std::end(kTokens), t) != std::end(kTokens);
}

// Tokens of pre-quantized re-uploads: unsloth's -bnb-4bit and -unsloth-bnb-4bit, TheBloke's
// -GPTQ and -AWQ, Qwen's -GPTQ-Int4.
const char* quantization_method(const std::string& t) {
  if (t == "bnb" || t == "4bit") return "bitsandbytes";
  if (t == "gptq" || t == "int4") return "GPTQ";
  if (t == "awq") return "AWQ";
  if (t == "unsloth") return "";
  return nullptr;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// "7b", "1.5b", "135m", "8x7b", "8x22b": digits, an optional ".digits", optional "xN", then b/m.
bool is_size(const std::string& t) {
  if (t.size() < 2 || (t.back() != 'b' && t.back() != 'm')) return false;
  std::size_t i = 0;
  auto number = [&] {
    const std::size_t start = i;
    while (i + 1 < t.size() && is_digit(t[i])) ++i;
    if (i == start) return false;
    if (t[i] == '.') {
      ++i;
      const std::size_t frac = i;
      while (i + 1 < t.size() && is_digit(t[i])) ++i;
      if (i == frac) return false;
    }
    return true;
  };
  if (!number()) return false;
  if (t[i] == 'x') {
    ++i;
    if (!number()) return false;
  }
  return i + 1 == t.size();
}

Error rules_error(const std::string& origin, std::string msg) {
  Error e = make_error(ErrorCode::kInvalidConfig, std::move(msg));
  e.where = SourceLocation{origin, 0, 0};
  return e;
}

Result<std::string> string_field(const json& row, const char* key, const std::string& origin, std::size_t index,
                                 const char* list) {
  auto it = row.find(key);
  if (it == row.end() || !it->is_string() || it->get_ref<const std::string&>().empty())
    return rules_error(origin, fmt::format("\"{}\"[{}] needs a non-empty string \"{}\"", list, index, key));
  return it->get<std::string>();
}

}  // namespace

NameKey name_key(std::string_view id) {
  NameKey k;
  std::string_view name = id;
  if (const auto slash = id.find('/'); slash != std::string_view::npos) {
    k.org = to_lower(id.substr(0, slash));
    name = id.substr(slash + 1);
  }
  const auto tokens = split_tokens(name);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    if (is_variant_token(t) || quantization_method(t) != nullptr) continue;
    // Meta-Llama-3.1-8B and Llama-3.1-8B are the same model under two spellings.
    if (t == "meta" && i + 1 < tokens.size() && tokens[i + 1].rfind("llama", 0) == 0) continue;
    k.key += (k.key.empty() ? "" : "-") + t;
  }
  return k;
}

NameQuantization name_quantization(std::string_view id) {
  NameQuantization q;
  const std::string_view name = id.substr(id.find('/') == std::string_view::npos ? 0 : id.find('/') + 1);
  const auto tokens = split_tokens(name);
  bool int8 = false;
  for (const auto& t : tokens) {
    const char* m = quantization_method(t);
    if (m && *m && q.method.empty()) q.method = m;
    if (t == "int8" || t == "8bit") int8 = true;
  }
  q.prequantized_4bit = !q.method.empty() && !int8;
  return q;
}

std::string size_token(std::string_view name) {
  const std::string_view base = name.substr(name.find('/') == std::string_view::npos ? 0 : name.find('/') + 1);
  for (const auto& t : split_tokens(base))
    if (is_size(t)) return t;
  // "Qwen2.5-0.5B" splits cleanly; "llama2_7b" or "gemma2b" do not, so look inside tokens too.
  for (const auto& t : split_tokens(base)) {
    for (std::size_t i = 1; i < t.size(); ++i) {
      if (!is_digit(t[i]) || is_digit(t[i - 1]) || t[i - 1] == '.') continue;
      std::size_t j = i;
      while (j < t.size() && (is_digit(t[j]) || t[j] == '.')) ++j;
      if (j < t.size() && (t[j] == 'b' || t[j] == 'm') && (j + 1 == t.size() || !std::isalpha(static_cast<unsigned char>(t[j + 1]))))
        return t.substr(i, j + 1 - i);
    }
  }
  return {};
}

Result<NameRules> parse_name_rules(std::string_view text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return rules_error(origin, std::string("invalid JSON: ") + e.what());
  }
  if (!j.is_object()) return rules_error(origin, "must be a JSON object");
  NameRules r;
  if (auto it = j.find("mirror_orgs"); it != j.end()) {
    if (!it->is_array()) return rules_error(origin, "\"mirror_orgs\" must be a list of organisation names");
    for (const auto& o : *it) {
      if (!o.is_string()) return rules_error(origin, "\"mirror_orgs\" must be a list of organisation names");
      r.mirror_orgs.push_back(to_lower(o.get<std::string>()));
    }
  }
  struct List {
    const char* name;
    const char* target_key;
    NameRule::Kind kind;
  };
  for (const List& list : {List{"same_architecture", "as", NameRule::Kind::kSameArchitecture},
                           List{"fine_tunes", "base", NameRule::Kind::kFineTune},
                           List{"different_architecture", "like", NameRule::Kind::kDifferentArchitecture},
                           List{"not_modelled", "model_type", NameRule::Kind::kNotModelled}}) {
    auto it = j.find(list.name);
    if (it == j.end()) continue;
    if (!it->is_array()) return rules_error(origin, fmt::format("\"{}\" must be a list", list.name));
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json& row = (*it)[i];
      if (!row.is_object()) return rules_error(origin, fmt::format("\"{}\"[{}] must be an object", list.name, i));
      NameRule rule;
      rule.kind = list.kind;
      MEMPLAN_TRY(rule.id, string_field(row, "id", origin, i, list.name));
      MEMPLAN_TRY(rule.target, string_field(row, list.target_key, origin, i, list.name));
      MEMPLAN_TRY(rule.why, string_field(row, "why", origin, i, list.name));
      if (auto p = row.find("params"); p != row.end()) {
        if (!p->is_number_unsigned() || p->get<std::uint64_t>() > (std::uint64_t{1} << 50))
          return rules_error(origin, fmt::format("\"{}\"[{}] \"params\" must be a parameter count", list.name, i));
        rule.params = static_cast<std::int64_t>(p->get<std::uint64_t>());
      }
      r.rules.push_back(std::move(rule));
    }
  }
  return r;
}

Result<NameRules> load_name_rules() {
  static const Result<NameRules> rules = []() -> Result<NameRules> {
    for (const auto& f : embedded_files())
      if (f.path == "model_names.json") return parse_name_rules(f.content, "configs/model_names.json");
    return NameRules{};
  }();
  return rules;
}

}  // namespace memplan::io

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>

#include "io/model_source.hpp"
#include "memplan/text.hpp"

using namespace memplan;
namespace fs = std::filesystem;

namespace {

// A scratch directory removed at scope exit; tests build fake Hugging Face caches in it.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("memplan-test-" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string error_text(const Result<ModelSpec>& r) {
  REQUIRE_FALSE(r.has_value());
  return r.error().to_string();
}

// A minimal llama config.json: hidden 64, 2 layers, 4 heads (2 kv), MLP 128, vocab 100.
std::string tiny_llama(const std::string& extra = "") {
  return R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100)" +
         extra + "}";
}
// Its count by hand: embeddings 2 x 100 x 64 = 12,800; per layer q,o 2 x 64 x 64 = 8,192,
// k,v 2 x 64 x 32 = 4,096, MLP 3 x 64 x 128 = 24,576, norms 128 -> 36,992; final norm 64.
constexpr std::int64_t kTinyLlamaParams = 12'800 + 2 * 36'992 + 64;

io::ModelSearchEnv empty_env() { return io::ModelSearchEnv{}; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// The catalog

TEST_CASE("every catalog entry counts exactly its published total") {
  auto catalog = io::load_catalog();
  REQUIRE(catalog.has_value());
  for (const auto& c : *catalog) {
    INFO(c.file << " (" << c.params_source << ")");
    CHECK(count_parameters(c.spec).total == c.published_params);
  }
}

TEST_CASE("the catalog covers the families the issue names, at least 30 models") {
  auto catalog = io::load_catalog();
  REQUIRE(catalog.has_value());
  CHECK(catalog->size() >= 30);
  std::set<std::string> types;
  for (const auto& c : *catalog) types.insert(c.spec.model_type);
  for (const char* t : {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma2",
                        "gemma3_text", "phi3", "gpt2", "deepseek"})
    CHECK(types.count(t) == 1);
}

TEST_CASE("catalog names are unique, lower-case short names, one file per short name") {
  auto catalog = io::load_catalog();
  REQUIRE(catalog.has_value());
  std::set<std::string> seen;
  for (const auto& c : *catalog) {
    INFO(c.file);
    CHECK(c.short_name == to_lower(c.short_name));
    CHECK(c.file == "configs/models/" + c.short_name + ".json");
    CHECK_FALSE(c.params_source.empty());
    CHECK(c.spec.name == c.id);
    std::set<std::string> own;  // an alias may repeat the short name (gpt2)
    own.insert(to_lower(c.id));
    own.insert(to_lower(c.short_name));
    for (const auto& a : c.aliases) own.insert(to_lower(a));
    for (const auto& n : own) {
      INFO(n);
      CHECK(seen.insert(n).second);
    }
  }
}

TEST_CASE("the fast catalog lookup finds the entry the whole catalog finds, for every name") {
  auto catalog = io::load_catalog();
  REQUIRE(catalog.has_value());
  for (const auto& c : *catalog) {
    std::vector<std::string> names = c.aliases;
    names.push_back(c.id);
    names.push_back(c.short_name);
    names.push_back(to_lower(c.id));
    for (const auto& n : names) {
      INFO(c.file << " answers to '" << n << "'");
      const auto fast = io::find_catalog_entry_fast(n);
      const io::CatalogEntry* full = io::find_catalog_entry(*catalog, n);
      REQUIRE(full != nullptr);
      REQUIRE(fast.has_value());
      CHECK(fast->id == full->id);
    }
  }
  // Names that appear in an entry's text but are not its names, and names of nothing.
  for (const char* n : {"llama", "LlamaForCausalLM", "silu", "meta-llama/Llama-3.1-9B", "", "\""}) {
    INFO(n);
    CHECK_FALSE(io::find_catalog_entry_fast(n).has_value());
    CHECK(io::find_catalog_entry(*catalog, n) == nullptr);
  }
}

TEST_CASE("the catalog lists in natural order: sizes as people read them") {
  auto catalog = io::load_catalog();
  REQUIRE(catalog.has_value());
  std::vector<std::string> llama31, gpt2;
  for (const auto& c : *catalog) {
    if (c.short_name.rfind("llama-3.1-", 0) == 0) llama31.push_back(c.short_name);
    if (c.short_name.rfind("gpt2", 0) == 0) gpt2.push_back(c.short_name);
  }
  CHECK(llama31 == std::vector<std::string>{"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b"});
  CHECK(gpt2 == std::vector<std::string>{"gpt2", "gpt2-large", "gpt2-medium", "gpt2-xl"});
}

TEST_CASE("catalog entries are found by id, short name and alias in any case") {
  auto catalog = io::load_catalog();
  REQUIRE(catalog.has_value());
  for (const auto& c : *catalog) {
    std::string upper = c.id;
    std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char ch) { return std::toupper(ch); });
    CHECK(io::find_catalog_entry(*catalog, upper) == &c);
    CHECK(io::find_catalog_entry(*catalog, c.short_name) == &c);
    for (const auto& a : c.aliases) CHECK(io::find_catalog_entry(*catalog, a) == &c);
  }
  CHECK(io::find_catalog_entry(*catalog, "no-such-model") == nullptr);
}

TEST_CASE("MoE catalog entries: active parameters match the published active counts") {
  auto catalog = io::load_catalog();
  REQUIRE(catalog.has_value());
  auto active = [&](const char* name) {
    const auto* c = io::find_catalog_entry(*catalog, name);
    REQUIRE(c != nullptr);
    return count_parameters(c->spec).active_per_token;
  };
  // DeepSeek-MoE-16B's is published with its total (model_arch record); Qwen3-30B-A3B's comes from
  // an independent count. Mixtral-8x7B by hand: the total less 6 idle experts of 3 x 4096 x 14336
  // in each of 32 layers.
  CHECK(active("deepseek-moe-16b") == 2'828'650'496);
  CHECK(active("mixtral-8x7b") == 46'702'792'704 - 6LL * 3 * 4096 * 14336 * 32);
  CHECK(active("qwen3-30b-a3b") == 3'353'032'704);
  CHECK(active("llama-3.1-8b") == 8'030'261'248);  // dense: every parameter is active
}

TEST_CASE("catalog entry files: malformed entries fail with the file named") {
  const std::string f = "configs/models/x.json";
  CHECK(io::parse_catalog_entry("[1]", f).error().to_string() == "configs/models/x.json: a catalog entry must be a JSON object");
  CHECK(io::parse_catalog_entry(R"({"id": "a/b"})", f).error().to_string() ==
        "configs/models/x.json: a catalog entry needs \"id\" and \"short_name\"");
  CHECK(io::parse_catalog_entry(R"({"id": "a/b", "short_name": "b", "aliases": "c"})", f).error().to_string() ==
        "configs/models/x.json: \"aliases\" must be a list, got \"c\"");
  CHECK(io::parse_catalog_entry(R"({"id": "a/b", "short_name": "b", "aliases": [3]})", f).error().to_string() ==
        "configs/models/x.json: \"aliases\" must hold strings, got 3");
  CHECK(io::parse_catalog_entry(R"({"id": "a/b", "short_name": "b", "published_params": 1})", f)
            .error()
            .to_string() == "configs/models/x.json: catalog entry has no \"config\"");
  auto ok = io::parse_catalog_entry(
      R"({"id": "a/B", "short_name": "b", "aliases": ["a/b-it"], "published_params": 1, "params_source": "s",
          "config": )" + tiny_llama() + "}",
      f);
  REQUIRE(ok.has_value());
  CHECK(ok->matches("A/b-IT"));
  CHECK(ok->spec.name == "a/B");
}

// ---------------------------------------------------------------------------------------------
// config.json parsing: families

TEST_CASE("a minimal llama config counts by hand") {
  auto m = io::parse_hf_config(tiny_llama(), "config.json");
  REQUIRE(m.has_value());
  CHECK(count_parameters(*m).total == kTinyLlamaParams);
  CHECK(m->head_dim == 16);
  CHECK_FALSE(m->tie_word_embeddings);  // LlamaConfig's default
  CHECK(m->activation == Activation::kSilu);
}

TEST_CASE("attention_bias and mlp_bias add one bias per output feature") {
  auto m = io::parse_hf_config(tiny_llama(R"(, "attention_bias": true, "mlp_bias": true)"), "c");
  REQUIRE(m.has_value());
  // q 64 + k 32 + v 32 + o 64 = 192 attention biases, gate/up 128 each + down 64 = 320 MLP biases, per layer.
  CHECK(count_parameters(*m).total == kTinyLlamaParams + 2 * (192 + 320));
}

TEST_CASE("Qwen2 always has q/k/v biases and never an o bias") {
  const std::string cfg = R"({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
      "sliding_window": 4096, "use_sliding_window": false, "tie_word_embeddings": true})";
  auto m = io::parse_hf_config(cfg, "c");
  REQUIRE(m.has_value());
  CHECK(m->qkv_bias);
  CHECK_FALSE(m->o_bias);
  CHECK(m->sliding_window == 0);  // present but switched off
  // Tied: one 100 x 64 embedding; biases q 64 + k 32 + v 32 per layer.
  CHECK(count_parameters(*m).total == kTinyLlamaParams - 6'400 + 2 * 128);
}

TEST_CASE("Qwen3 normalizes q and k per head; OLMo 2 over the whole projection") {
  const std::string shape = R"("hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100})";
  auto qwen3 = io::parse_hf_config(R"({"model_type": "qwen3", )" + shape, "c");
  auto olmo2 = io::parse_hf_config(R"({"model_type": "olmo2", )" + shape, "c");
  REQUIRE(qwen3.has_value());
  REQUIRE(olmo2.has_value());
  CHECK(count_parameters(*qwen3).total == kTinyLlamaParams + 2 * (16 + 16));
  CHECK(count_parameters(*olmo2).total == kTinyLlamaParams + 2 * (4 * 16 + 2 * 16));
}

TEST_CASE("Gemma 2 has four norms per layer, tied embeddings and head_dim apart from hidden/heads") {
  const std::string cfg = R"({"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
      "vocab_size": 100, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
      "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0})";
  auto m = io::parse_hf_config(cfg, "c");
  REQUIRE(m.has_value());
  CHECK(m->tie_word_embeddings);
  CHECK(m->norms_per_layer == 4);
  CHECK(m->final_logit_softcap == 30.0);
  CHECK(m->activation == Activation::kGeluTanh);
  // embed 6,400; per layer q,o 2 x 64 x 128, k,v 2 x 64 x 64, MLP 24,576, 4 norms 256; final norm 64.
  CHECK(count_parameters(*m).total == 6'400 + 2 * (16'384 + 8'192 + 24'576 + 256) + 64);
}

TEST_CASE("a multimodal Gemma 3 config counts its text_config, with Gemma3TextConfig defaults") {
  // The shape of google/gemma-3-4b-it's config.json: text_config names only what differs from
  // the defaults (heads 8, kv 4, head_dim 256, vocab 262208).
  const std::string cfg = R"({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
      "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                      "num_hidden_layers": 34, "sliding_window": 1024},
      "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"},
      "torch_dtype": "bfloat16"})";
  auto m = io::parse_hf_config(cfg, "c");
  REQUIRE(m.has_value());
  CHECK(m->model_type == "gemma3_text");
  CHECK(m->vocab_size == 262208);
  CHECK(m->torch_dtype == "bfloat16");
  CHECK(m->tie_word_embeddings);
  // The language-model total derived in configs/models/gemma-3-4b.json from published counts.
  CHECK(count_parameters(*m).total == 3'880'263'168);
}

TEST_CASE("GPT-2's own config names: n_embd, n_layer, n_head, n_inner null") {
  const std::string cfg = R"({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": null,
      "n_positions": 1024, "n_ctx": 1024, "vocab_size": 50257, "activation_function": "gelu_new"})";
  auto m = io::parse_hf_config(cfg, "c");
  REQUIRE(m.has_value());
  CHECK(m->intermediate_size == 3072);
  CHECK(m->tie_word_embeddings);
  CHECK(m->learned_positions);
  CHECK(count_parameters(*m).total == 124'439'808);
}

TEST_CASE("MoE keys per family") {
  SECTION("Qwen2-MoE: shared expert with its gate, decoder_sparse_step counted from 1, mlp_only_layers") {
    auto m = io::parse_hf_config(R"({"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 128,
        "moe_intermediate_size": 32, "shared_expert_intermediate_size": 96, "num_experts": 4,
        "num_experts_per_tok": 2, "decoder_sparse_step": 2, "mlp_only_layers": [3], "num_hidden_layers": 6,
        "num_attention_heads": 4, "vocab_size": 100})",
                                 "c");
    REQUIRE(m.has_value());
    CHECK(m->moe.shared_expert_gate);
    CHECK(m->moe.shared_intermediate_size == 96);
    std::vector<bool> moe;
    for (int l = 0; l < 6; ++l) moe.push_back(m->moe.is_moe_layer(l));
    CHECK(moe == std::vector<bool>{false, true, false, false, false, true});
  }
  SECTION("DeepSeek: first_k_dense_replace, n_shared_experts fused, moe_layer_freq counted from 0") {
    auto m = io::parse_hf_config(R"({"model_type": "deepseek", "hidden_size": 64, "intermediate_size": 128,
        "moe_intermediate_size": 32, "n_routed_experts": 8, "n_shared_experts": 2, "num_experts_per_tok": 2,
        "first_k_dense_replace": 1, "moe_layer_freq": 2, "num_hidden_layers": 5, "num_attention_heads": 4,
        "vocab_size": 100})",
                                 "c");
    REQUIRE(m.has_value());
    CHECK(m->moe.num_shared_experts == 2);
    std::vector<bool> moe;
    for (int l = 0; l < 5; ++l) moe.push_back(m->moe.is_moe_layer(l));
    CHECK(moe == std::vector<bool>{false, false, true, false, true});
  }
  SECTION("Mixtral: experts as wide as intermediate_size") {
    auto m = io::parse_hf_config(R"({"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128,
        "num_local_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 100})",
                                 "c");
    REQUIRE(m.has_value());
    // The tiny llama with 4 MLPs per layer instead of 1 plus a 64 x 4 router.
    CHECK(count_parameters(*m).total == kTinyLlamaParams + 2 * (3 * 24'576 + 256));
    CHECK(count_parameters(*m).active_per_token == kTinyLlamaParams + 2 * (24'576 + 256));
  }
}

TEST_CASE("numbers written as floats are accepted when integral") {
  auto m = io::parse_hf_config(tiny_llama(R"(, "rms_norm_eps": 1e-05, "head_dim": 16.0)"), "c");
  REQUIRE(m.has_value());
  CHECK(m->head_dim == 16);
  CHECK(io::parse_hf_config(tiny_llama(R"(, "torch_dtype": "bfloat16")"), "c")->torch_dtype == "bfloat16");
  CHECK(io::parse_hf_config(tiny_llama(R"(, "dtype": "float16")"), "c")->torch_dtype == "float16");
}

// ---------------------------------------------------------------------------------------------
// config.json parsing: errors, exact text

TEST_CASE("malformed JSON names the file and line") {
  CHECK(error_text(io::parse_hf_config("{\n  \"model_type\": \"llama\",\n}", "/m/config.json")) ==
        "/m/config.json:3: invalid JSON: syntax error while parsing object key - unexpected '}'; expected string "
        "literal; fix the syntax at that line");
  CHECK(error_text(io::parse_hf_config("", "c.json")) ==
        "c.json:1: invalid JSON: syntax error while parsing value - unexpected end of input; expected '[', '{', or "
        "a literal; fix the syntax at that line");
  CHECK(io::parse_hf_config("{", "c").error().code == ErrorCode::kParseError);
}

TEST_CASE("a file that is not a config.json") {
  CHECK(error_text(io::parse_hf_config("[1, 2]", "c.json")) ==
        "c.json: config.json must be a JSON object, got an array; is this the model's config.json? "
        "generation_config.json and tokenizer_config.json do not describe the architecture");
  CHECK(error_text(io::parse_hf_config(R"({"temperature": 0.6, "top_p": 0.9})", "generation_config.json")) ==
        "generation_config.json: missing \"model_type\"; is this the model's config.json? generation_config.json "
        "and tokenizer_config.json do not describe the architecture");
}

TEST_CASE("a missing required field is named") {
  CHECK(error_text(io::parse_hf_config(R"({"model_type": "llama", "vocab_size": 100})", "c.json")) ==
        "c.json: missing \"hidden_size\"; is this the model's config.json? generation_config.json and "
        "tokenizer_config.json do not describe the architecture");
  CHECK(error_text(io::parse_hf_config(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "vocab_size": 100})",
                                       "c.json")) ==
        "c.json: missing \"intermediate_size\"; is this the model's config.json? generation_config.json and "
        "tokenizer_config.json do not describe the architecture");
}

TEST_CASE("a field of the wrong type quotes the value") {
  CHECK(error_text(io::parse_hf_config(tiny_llama(R"(, "num_hidden_layers": "32")"), "c.json")) ==
        "c.json: \"num_hidden_layers\" must be an integer, got \"32\"");
  CHECK(error_text(io::parse_hf_config(tiny_llama(R"(, "head_dim": 16.5)"), "c.json")) ==
        "c.json: \"head_dim\" must be an integer, got 16.5");
  CHECK(error_text(io::parse_hf_config(tiny_llama(R"(, "vocab_size": true)"), "c.json")) ==
        "c.json: \"vocab_size\" must be an integer, got true");
  CHECK(error_text(io::parse_hf_config(tiny_llama(R"(, "head_dim": [16])"), "c.json")) ==
        "c.json: \"head_dim\" must be an integer, got an array");
  CHECK(error_text(io::parse_hf_config(tiny_llama(R"(, "tie_word_embeddings": "yes")"), "c.json")) ==
        "c.json: \"tie_word_embeddings\" must be true or false, got \"yes\"");
  CHECK(error_text(io::parse_hf_config(R"({"model_type": 7})", "c.json")) ==
        "c.json: \"model_type\" must be a string, got 7");
  CHECK(error_text(io::parse_hf_config(tiny_llama(R"(, "hidden_act": "swiglu")"), "c.json")) ==
        "c.json: activation 'swiglu' is not supported; did you mean 'silu'?");
  CHECK(error_text(io::parse_hf_config(tiny_llama(R"(, "hidden_act": "mish")"), "c.json")) ==
        "c.json: activation 'mish' is not supported; supported: silu, gelu, gelu_new, gelu_pytorch_tanh, relu");
  CHECK(error_text(io::parse_hf_config(tiny_llama(R"(, "final_logit_softcapping": "30")"), "c.json")) ==
        "c.json: \"final_logit_softcapping\" must be a number, got \"30\"");
}

TEST_CASE("out-of-range numbers are refused before any arithmetic") {
  CHECK(error_text(io::parse_hf_config(tiny_llama(R"(, "num_hidden_layers": -2)"), "c.json")) ==
        "c.json: \"num_hidden_layers\" must not be negative, got -2");
  CHECK(error_text(io::parse_hf_config(tiny_llama(R"(, "vocab_size": 1e300)"), "c.json")) ==
        "c.json: \"vocab_size\" is out of range: 1e+300");
  CHECK(error_text(io::parse_hf_config(tiny_llama(R"(, "vocab_size": 18446744073709551615)"), "c.json")) ==
        "c.json: \"vocab_size\" is out of range: 18446744073709551615");
  CHECK(error_text(io::parse_hf_config(tiny_llama(R"(, "num_hidden_layers": 0)"), "c.json")) ==
        "c.json: model num_hidden_layers = 0 must be positive");
  CHECK(error_text(io::parse_hf_config(tiny_llama(R"(, "vocab_size": 1000000000)"), "c.json")) ==
        "c.json: model dimensions are implausibly large; check hidden_size, vocab_size, num_hidden_layers and "
        "intermediate_size");
  // Within every per-field bound, yet 4096 layers of 2^20 x 2^22 MLPs is no model.
  CHECK(error_text(io::parse_hf_config(R"({"model_type": "llama", "hidden_size": 1048576,
      "intermediate_size": 4194304, "num_hidden_layers": 4096, "num_attention_heads": 8192, "vocab_size": 100})",
                                       "c.json")) ==
        "c.json: model has about 7.21e+16 parameters, more than memplan models; check the sizes in the config");
}

TEST_CASE("inconsistent heads") {
  CHECK(error_text(io::parse_hf_config(tiny_llama(R"(, "num_key_value_heads": 3)"), "c.json")) ==
        "c.json: model num_key_value_heads = 3 must divide num_attention_heads (4)");
  CHECK(error_text(io::parse_hf_config(tiny_llama(R"(, "num_attention_heads": 5, "num_key_value_heads": 5)"),
                                       "c.json")) ==
        "c.json: \"hidden_size\" 64 is not divisible by \"num_attention_heads\" 5; set \"head_dim\" when heads do "
        "not split hidden_size evenly");
  // An explicit head_dim makes the same heads legal.
  CHECK(io::parse_hf_config(tiny_llama(R"(, "num_attention_heads": 5, "num_key_value_heads": 5, "head_dim": 16)"), "c")
            .has_value());
  CHECK(error_text(io::parse_hf_config(R"({"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128,
      "num_local_experts": 4, "num_experts_per_tok": 5, "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 100})",
                                       "c.json")) ==
        "c.json: model num_experts_per_tok = 5 must be between 1 and the number of experts (4)");
}

TEST_CASE("unsupported model types: near misses suggested, known ones explained") {
  auto e = io::parse_hf_config(R"({"model_type": "lama"})", "c.json");
  CHECK(error_text(e) == "c.json: model_type 'lama' is not supported; did you mean 'llama'?");
  CHECK(e.error().code == ErrorCode::kUnsupported);
  CHECK(error_text(io::parse_hf_config(R"({"model_type": "deepseek_v3"})", "c.json")) ==
        "c.json: model_type 'deepseek_v3' is not supported: its multi-head latent attention (MLA) is not modelled; "
        "use --model-params for a Llama-shaped estimate of the same size");
  CHECK(error_text(io::parse_hf_config(R"({"model_type": "t5"})", "c.json")) ==
        "c.json: model_type 't5' is not supported; supported model types: llama, mistral, mixtral, qwen2, "
        "qwen2_moe, qwen3, qwen3_moe, gemma, gemma2, gemma3, gemma3_text, phi3, gpt2, deepseek, olmo2, granite, "
        "smollm3");
  CHECK(error_text(io::parse_hf_config(R"({"model_type": "gemma3"})", "c.json")) ==
        "c.json: model_type 'gemma3' has no \"text_config\" object; is this the model's config.json? "
        "generation_config.json and tokenizer_config.json do not describe the architecture");
}

TEST_CASE("no input crashes the parser") {
  // Deep nesting, odd types everywhere, and truncations of a real config.
  std::string deep(100000, '[');
  CHECK_FALSE(io::parse_hf_config(deep, "c").has_value());
  CHECK_FALSE(io::parse_hf_config(R"({"model_type": "llama", "hidden_size": )" + deep, "c").has_value());
  deep += std::string(100000, ']');
  CHECK_FALSE(io::parse_hf_config(deep, "c").has_value());
  CHECK_FALSE(io::parse_hf_config(tiny_llama(R"(, "num_attention_heads": {"a": 1})"), "c").has_value());
  CHECK(error_text(io::parse_hf_config(R"({"model_type": "qwen3_moe", "hidden_size": 64, "moe_intermediate_size": 32,
      "num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": [1, "x"], "num_hidden_layers": 2,
      "num_attention_heads": 4, "vocab_size": 100})",
                                       "c")) == "c: \"mlp_only_layers\" must be an integer, got \"x\"");
  CHECK_FALSE(io::parse_hf_config("null", "c").has_value());
  CHECK_FALSE(io::parse_hf_config("\"llama\"", "c").has_value());
  const std::string real = tiny_llama(R"(, "attention_bias": false, "rope_scaling": {"factor": 8.0})");
  for (std::size_t n = 0; n < real.size(); ++n) CHECK_FALSE(io::parse_hf_config(real.substr(0, n), "c").has_value());
  CHECK(io::parse_hf_config(real, "c").has_value());
}

// ---------------------------------------------------------------------------------------------
// resolve_model

TEST_CASE("resolve_model: catalog names in any case") {
  auto m = io::resolve_model("LLAMA-3.1-8B", empty_env());
  REQUIRE(m.has_value());
  CHECK(m->name == "meta-llama/Llama-3.1-8B");
  CHECK(count_parameters(*m).total == 8'030'261'248);
  CHECK(io::resolve_model("meta-llama/llama-3.1-8b-instruct", empty_env())->name == "meta-llama/Llama-3.1-8B");
}

TEST_CASE("resolve_model: a path to a config.json or to its directory") {
  TempDir tmp;
  write(tmp.path() / "my-model" / "config.json", tiny_llama());
  auto by_dir = io::resolve_model((tmp.path() / "my-model").string(), empty_env());
  REQUIRE(by_dir.has_value());
  CHECK(count_parameters(*by_dir).total == kTinyLlamaParams);
  CHECK(by_dir->name == (tmp.path() / "my-model").string());
  auto by_file = io::resolve_model((tmp.path() / "my-model" / "config.json").string(), empty_env());
  REQUIRE(by_file.has_value());
  CHECK(count_parameters(*by_file).total == kTinyLlamaParams);

  fs::create_directories(tmp.path() / "empty");
  auto empty = io::resolve_model((tmp.path() / "empty").string(), empty_env());
  CHECK(error_text(empty) == "no config.json in directory '" + (tmp.path() / "empty").string() +
                                 "'; point --model at a model directory or at its config.json");
  CHECK(empty.error().code == ErrorCode::kIoError);

  write(tmp.path() / "bad" / "config.json", "{\"model_type\": }");
  CHECK(error_text(io::resolve_model((tmp.path() / "bad").string(), empty_env())) ==
        (tmp.path() / "bad" / "config.json").string() +
            ":1: invalid JSON: syntax error while parsing value - unexpected '}'; expected '[', '{', or a literal; "
            "fix the syntax at that line");

  auto missing = io::resolve_model("./no/such/config.json", empty_env());
  CHECK(error_text(missing) ==
        "cannot read './no/such/config.json': no such file or directory; check the path, or give a catalog name "
        "(memplan models)");
}

TEST_CASE("resolve_model: the local Hugging Face cache, never the network") {
  TempDir tmp;
  const fs::path repo = tmp.path() / "hub" / "models--acme--Tiny-LM";
  write(repo / "snapshots" / "aaa" / "config.json", tiny_llama(R"(, "num_hidden_layers": 1)"));
  write(repo / "snapshots" / "bbb" / "config.json", tiny_llama());
  write(repo / "refs" / "main", "bbb\n");

  SECTION("HF_HUB_CACHE, the snapshot refs/main names") {
    io::ModelSearchEnv env;
    env.hub_cache = (tmp.path() / "hub").string();
    auto m = io::resolve_model("acme/Tiny-LM", env);
    REQUIRE(m.has_value());
    CHECK(m->num_layers == 2);
    CHECK(m->name == "acme/Tiny-LM");
    CHECK(io::find_in_hf_cache("acme/Tiny-LM", env) == (repo / "snapshots" / "bbb" / "config.json").string());
  }
  SECTION("ids are case-insensitive, as on the Hub") {
    io::ModelSearchEnv env;
    env.hub_cache = (tmp.path() / "hub").string();
    CHECK(io::resolve_model("ACME/tiny-lm", env)->num_layers == 2);
  }
  SECTION("HF_HOME/hub") {
    io::ModelSearchEnv env;
    env.hf_home = tmp.path().string();
    CHECK(io::resolve_model("acme/Tiny-LM", env)->num_layers == 2);
  }
  SECTION("~/.cache/huggingface/hub and $XDG_CACHE_HOME/huggingface/hub") {
    fs::create_directories(tmp.path() / "home" / ".cache" / "huggingface");
    fs::create_directories(tmp.path() / "xdg" / "huggingface");
    fs::copy(tmp.path() / "hub", tmp.path() / "home" / ".cache" / "huggingface" / "hub", fs::copy_options::recursive);
    fs::copy(tmp.path() / "hub", tmp.path() / "xdg" / "huggingface" / "hub", fs::copy_options::recursive);
    io::ModelSearchEnv home_env;
    home_env.home = (tmp.path() / "home").string();
    CHECK(io::resolve_model("acme/Tiny-LM", home_env)->num_layers == 2);
    io::ModelSearchEnv xdg_env;
    xdg_env.xdg_cache_home = (tmp.path() / "xdg").string();
    CHECK(io::resolve_model("acme/Tiny-LM", xdg_env)->num_layers == 2);
  }
  SECTION("without refs/main, the newest snapshot") {
    fs::remove(repo / "refs" / "main");
    const auto now = fs::file_time_type::clock::now();
    fs::last_write_time(repo / "snapshots" / "bbb" / "config.json", now - std::chrono::hours(2));
    fs::last_write_time(repo / "snapshots" / "aaa" / "config.json", now - std::chrono::hours(1));
    io::ModelSearchEnv env;
    env.hub_cache = (tmp.path() / "hub").string();
    CHECK(io::resolve_model("acme/Tiny-LM", env)->num_layers == 1);
  }
  SECTION("HF_HUB_CACHE wins over HF_HOME") {
    write(tmp.path() / "other" / "hub" / "models--acme--Tiny-LM" / "snapshots" / "ccc" / "config.json",
          tiny_llama(R"(, "num_hidden_layers": 3)"));
    io::ModelSearchEnv env;
    env.hub_cache = (tmp.path() / "hub").string();
    env.hf_home = (tmp.path() / "other").string();
    CHECK(io::resolve_model("acme/Tiny-LM", env)->num_layers == 2);
    CHECK(env.hub_dirs() == std::vector<std::string>{(tmp.path() / "hub").string(),
                                                     (tmp.path() / "other" / "hub").string()});
  }
  SECTION("a cached config that does not parse is reported with its path") {
    write(repo / "snapshots" / "bbb" / "config.json", R"({"model_type": "lama"})");
    io::ModelSearchEnv env;
    env.hub_cache = (tmp.path() / "hub").string();
    CHECK(error_text(io::resolve_model("acme/Tiny-LM", env)) ==
          (repo / "snapshots" / "bbb" / "config.json").string() +
              ": model_type 'lama' is not supported; did you mean 'llama'?");
  }
  SECTION("the catalog comes before the cache") {
    write(tmp.path() / "hub" / "models--meta-llama--Llama-3.1-8B" / "snapshots" / "x" / "config.json", tiny_llama());
    io::ModelSearchEnv env;
    env.hub_cache = (tmp.path() / "hub").string();
    CHECK(count_parameters(*io::resolve_model("meta-llama/Llama-3.1-8B", env)).total == 8'030'261'248);
  }
}

TEST_CASE("resolve_model: unknown names suggest the nearest catalog entry") {
  CHECK(error_text(io::resolve_model("llama-3.1-7b", empty_env())) ==
        "unknown model 'llama-3.1-7b'; did you mean 'llama-3.1-8b'?");
  CHECK(error_text(io::resolve_model("mistral-7b", empty_env())) ==
        "unknown model 'mistral-7b'; did you mean 'mistral-7b-v0.1'?");
  CHECK(error_text(io::resolve_model("qwen2.5-7", empty_env())) ==
        "unknown model 'qwen2.5-7'; did you mean 'qwen2.5-7b'?");
  CHECK(error_text(io::resolve_model("gemma-2-7b", empty_env())) ==
        "unknown model 'gemma-2-7b'; did you mean 'gemma-2-2b'?");  // one edit from 27b too; catalog order decides
  CHECK(io::resolve_model("gemma-2-7b", empty_env()).error().code == ErrorCode::kUnknownName);
  CHECK(error_text(io::resolve_model("zzzzzzzz", empty_env())) ==
        "unknown model 'zzzzzzzz'; give a catalog name (memplan models), a Hugging Face id in the local cache, a "
        "path to a config.json, or --model-params");
  io::ModelSearchEnv env;
  env.hub_cache = "/nonexistent/hub";
  CHECK(error_text(io::resolve_model("acme/zzzzzzzzzzzz", env)) ==
        "unknown model 'acme/zzzzzzzzzzzz'; it is not in the catalog (memplan models) nor in the local Hugging Face "
        "cache (/nonexistent/hub); fetch its config with 'huggingface-cli download acme/zzzzzzzzzzzz config.json' "
        "or use --model-params");
  CHECK(error_text(io::resolve_model("  ", env)) ==
        "empty model name; give a catalog name (memplan models), a Hugging Face id, or a path to a config.json");
}

// ---------------------------------------------------------------------------------------------
// --model-params

TEST_CASE("--model-params: a row's own total gives back that real shape exactly") {
  for (const auto& row : io::param_count_shapes()) {
    ModelSpec m;
    m.model_type = "llama";
    m.hidden_size = row.hidden_size;
    m.num_layers = row.num_layers;
    m.num_heads = row.num_heads;
    m.num_kv_heads = row.num_kv_heads;
    m.head_dim = row.head_dim;
    m.intermediate_size = row.intermediate_size;
    m.vocab_size = row.vocab_size;
    m.tie_word_embeddings = row.tie_word_embeddings;
    const std::int64_t total = count_parameters(m).total;
    auto got = io::model_from_param_count(total);
    REQUIRE(got.has_value());
    INFO(row.source);
    CHECK(got->num_layers == row.num_layers);
    CHECK(got->intermediate_size == row.intermediate_size);
    CHECK(count_parameters(*got).total == total);
    CHECK(got->name == std::string(row.source) + "-shaped model");
  }
}

TEST_CASE("--model-params: the table rows are the shapes they name") {
  // Catalog models by their published totals; llama2.c's tied TinyStories models by hand, e.g.
  // stories15M: 32000 x 288 + 6 x (4 x 288^2 + 3 x 288 x 768 + 2 x 288) + 288.
  const std::vector<std::int64_t> totals = {
      512 * 64 + 5 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 172 + 128) + 64,
      32000 * 288 + 6 * (4 * 288 * 288 + 3 * 288 * 768 + 576) + 288,
      32000 * 512 + 8 * (4 * 512 * 512 + 3 * 512 * 1376 + 1024) + 512,
      32000 * 768 + 12 * (4 * 768 * 768 + 3 * 768 * 2048 + 1536) + 768,
      134'515'008, 361'821'120, 1'235'814'400, 3'212'749'824, 6'738'415'616, 8'030'261'248, 13'015'864'320,
      33'743'970'304,  // CodeLlama-34B: together.ai lists Phind-CodeLlama-34B at 33,743,970,304
      70'553'706'496, 405'853'388'800};
  const auto& rows = io::param_count_shapes();
  REQUIRE(rows.size() == totals.size());
  CHECK(totals[0] == 260'032);
  CHECK(totals[1] == 15'191'712);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    INFO(rows[i].source);
    auto m = io::model_from_param_count(totals[i]);
    REQUIRE(m.has_value());
    CHECK(count_parameters(*m).total == totals[i]);
    CHECK(m->hidden_size == rows[i].hidden_size);
  }
}

TEST_CASE("--model-params boundaries") {
  struct Case {
    std::int64_t params;
    std::int64_t hidden;
    int layers;
    std::int64_t intermediate;
    std::int64_t total;
  };
  // Expected shapes from a brute-force search over every MLP width for the layer counts within
  // two of the row's natural fit (a script outside the tree); 125M checked by hand: SmolLM2-135M
  // row, fixed 49,152 x 576 + 576, per layer 3,540,096 -> 27 layers, 123,894,720.
  const Case cases[] = {
      {1'000'000, 64, 22, 164, 998'720},  // stories260K, grown: no row reaches 1M within its depth band
      {125'000'000, 576, 27, 1536, 123'894'720},
      {7'000'000'000, 4096, 35, 10240, 7'015'264'256},
      {70'000'000'000, 8192, 80, 28416, 70'050'390'016},
      {405'000'000'000, 16384, 124, 54272, 405'719'105'536},
      {1'000'000'000'000, 16384, 310, 53760, 1'000'192'294'912},
  };
  for (const auto& c : cases) {
    INFO(c.params);
    auto m = io::model_from_param_count(c.params);
    REQUIRE(m.has_value());
    CHECK(m->hidden_size == c.hidden);
    CHECK(m->num_layers == c.layers);
    CHECK(m->intermediate_size == c.intermediate);
    CHECK(count_parameters(*m).total == c.total);
  }
  // Across the range the shape lands within 1% of the request.
  for (double p = 2e5; p <= 1e13; p *= 1.37) {
    INFO(p);
    auto m = io::model_from_param_count(static_cast<std::int64_t>(p));
    REQUIRE(m.has_value());
    CHECK(std::fabs(static_cast<double>(count_parameters(*m).total) / p - 1) < 0.01);
  }
}

TEST_CASE("--model-params out of range") {
  CHECK(io::model_from_param_count(0).error().to_string() == "--model-params must be positive, got 0");
  CHECK(io::model_from_param_count(-5).error().to_string() == "--model-params must be positive, got -5");
  CHECK(io::model_from_param_count(10'000'000'000'000).has_value());
  CHECK(io::model_from_param_count(10'000'000'000'001).error().to_string() ==
        "--model-params 10000000000001 is beyond the largest shape memplan assumes (10T); give a count up to 10T, "
        "or a config.json with --model");
}

TEST_CASE("describe_shape states everything the estimate assumes") {
  auto m = io::model_from_param_count(8'030'261'248);
  REQUIRE(m.has_value());
  CHECK(io::describe_shape(*m) ==
        "Llama-3.1-8B-shaped model: llama (rmsnorm), 32 layers, hidden 4096, 32 heads (8 kv, head_dim 128), "
        "intermediate 14336, vocab 128256, untied embeddings = 8,030,261,248 parameters");
  auto resized = io::model_from_param_count(7'000'000'000);
  REQUIRE(resized.has_value());
  CHECK(io::describe_shape(*resized) ==
        "7B-parameter Llama-style model (Llama-2-7B shape, resized): llama (rmsnorm), 35 layers, hidden 4096, 32 "
        "heads (32 kv, head_dim 128), intermediate 10240, vocab 32000, untied embeddings = 7,015,264,256 parameters");
  auto moe = io::resolve_model("mixtral-8x7b", io::ModelSearchEnv{});
  REQUIRE(moe.has_value());
  CHECK(io::describe_shape(*moe) ==
        "mistralai/Mixtral-8x7B-v0.1: mixtral (rmsnorm), 32 layers, hidden 4096, 32 heads (8 kv, head_dim 128), "
        "intermediate 14336, vocab 32000, untied embeddings, 8 experts (top 2, width 14336) = 46,702,792,704 "
        "parameters");
}

TEST_CASE("group_digits") {
  CHECK(io::group_digits(0) == "0");
  CHECK(io::group_digits(999) == "999");
  CHECK(io::group_digits(1000) == "1,000");
  CHECK(io::group_digits(-1234567) == "-1,234,567");
  CHECK(io::group_digits(9'223'372'036'854'775'807) == "9,223,372,036,854,775,807");
}

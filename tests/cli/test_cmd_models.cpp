#include <catch2/catch.hpp>

#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/exit_codes.hpp"
#include "cli_harness.hpp"

using memplan::testing::CliRun;
using memplan::testing::run_cli;

namespace {

}  // namespace

TEST_CASE("memplan models: the whole catalog as a table") {
  const CliRun r = run_cli({"models"});
  CHECK(r.code == memplan::cli::kExitOk);
  CHECK(r.err.empty());
  CHECK(r.out.rfind("name ", 0) == 0);
  // The name column is as wide as the longest short name (deepseek-r1-distill-qwen-1.5b, 29).
  CHECK(r.out.find("\nllama-3.1-8b" + std::string(29 - 12 + 2, ' ') + "meta-llama/Llama-3.1-8B ") != std::string::npos);
  CHECK(r.out.find("8,030,261,248") != std::string::npos);
  CHECK(r.out.find("153 models. Pass a name, id or alias to --model; their mirrors and re-uploads (NousResearch/..., "
                   "unsloth/...-bnb-4bit, TheBloke/...-GPTQ) and -Instruct, -it, -chat and -Base variants are "
                   "recognised too.") != std::string::npos);
}

TEST_CASE("memplan models FILTER --format markdown") {
  const CliRun r = run_cli({"models", "mixtral", "--format", "markdown"});
  CHECK(r.code == memplan::cli::kExitOk);
  // Active parameters by hand: the total less 6 idle experts of 3 x h x width per layer.
  CHECK(r.out ==
        "| name | Hugging Face id | type | parameters | active (MoE) |\n"
        "|---|---|---|---:|---:|\n"
        "| mixtral-8x7b | mistralai/Mixtral-8x7B-v0.1 | mixtral | 46,702,792,704 | 12,879,925,248 |\n"
        "| mixtral-8x22b | mistralai/Mixtral-8x22B-v0.1 | mixtral | 140,620,634,112 | 39,152,031,744 |\n");
}

TEST_CASE("memplan models --format json") {
  const CliRun r = run_cli({"models", "GPT2-XL", "--format", "json"});
  REQUIRE(r.code == memplan::cli::kExitOk);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["schema"] == "memplan/1");
  REQUIRE(j["models"].size() == 1);
  const auto& m = j["models"][0];
  CHECK(m["short_name"] == "gpt2-xl");
  CHECK(m["id"] == "openai-community/gpt2-xl");
  CHECK(m["parameters"] == 1'557'611'200);
  CHECK(m["active_parameters"].is_null());
  CHECK(m["architecture"]["num_hidden_layers"] == 48);
}

TEST_CASE("memplan models: a filter that matches nothing is an error with a suggestion") {
  CliRun r = run_cli({"models", "lamma-3.1-8b"});
  CHECK(r.code == memplan::cli::kExitInvalidInput);
  CHECK(r.out.empty());
  CHECK(r.err == "memplan: error: no catalog model matches 'lamma-3.1-8b'; did you mean 'llama-3.1-8b'?\n");
  r = run_cli({"models", "zzzzzz"});
  CHECK(r.err ==
        "memplan: error: no catalog model matches 'zzzzzz'; run 'memplan models' for the whole catalog, or pass a "
        "config.json or --model-params to estimate\n");
  r = run_cli({"models", "--format", "yaml"});
  CHECK(r.code == memplan::cli::kExitInvalidInput);
  CHECK(r.err.rfind("memplan: error: unknown format 'yaml'", 0) == 0);
}

TEST_CASE("memplan models: a re-upload's name lists the catalog entry it resolves to") {
  const CliRun r = run_cli({"models", "unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit"});
  CHECK(r.code == memplan::cli::kExitOk);
  CHECK(r.out.find("llama-3.1-8b  meta-llama/Llama-3.1-8B") != std::string::npos);
  CHECK(r.out.find("1 model. ") != std::string::npos);
  CHECK(r.out.find("note: unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit: the same architecture as "
                   "meta-llama/Llama-3.1-8B (catalog llama-3.1-8b)\n") != std::string::npos);
  const CliRun refused = run_cli({"models", "mistralai/Mixtral-8x22B-Instruct-v0.1"});
  CHECK(refused.code == memplan::cli::kExitInvalidInput);
  CHECK(refused.err.find("differs from mistralai/Mixtral-8x22B-v0.1") != std::string::npos);
}

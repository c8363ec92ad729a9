// The encoder and loss-kernel flags through the real CLI (docs/models.md#encoders).
#include <catch2/catch.hpp>

#include "cli/exit_codes.hpp"
#include "cli_harness.hpp"

using memplan::testing::CliRun;
using memplan::testing::run_cli;

TEST_CASE("encoder flags: head, contrastive texts, cached MNRL") {
  const CliRun mlm = run_cli({"estimate", "--model", "bert-base-uncased", "--head", "mlm", "--batch", "8", "--seq-len", "128"});
  CHECK(mlm.code == memplan::cli::kExitOk);
  CHECK(mlm.out.find("assumption: encoder: mlm head") != std::string::npos);
  CHECK(mlm.out.find("0.110B total") != std::string::npos);  // 109,514,298 with the MLM head

  const CliRun mnrl = run_cli({"estimate", "--model", "bge-base-en-v1.5", "--texts-per-example", "57", "--batch", "4",
                               "--seq-len", "64", "--cached-mnrl", "--mini-batch-size", "16"});
  CHECK(mnrl.code == memplan::cli::kExitOk);
  CHECK(mnrl.out.find("57 texts per example, embedded in mini-batches of 16 (cached MNRL)") != std::string::npos);
}

TEST_CASE("encoder and loss flags reject what does not apply, saying why") {
  const CliRun head = run_cli({"estimate", "--model", "llama-3.2-1b", "--head", "mlm"});
  CHECK(head.code != memplan::cli::kExitOk);
  CHECK(head.err.find("--head applies to encoders; llama-3.2-1b is a decoder") != std::string::npos);

  const CliRun bad = run_cli({"estimate", "--model", "bert-base-uncased", "--head", "pooler"});
  CHECK(bad.code != memplan::cli::kExitOk);
  CHECK(bad.err.find("unknown encoder head 'pooler'") != std::string::npos);

  const CliRun cached = run_cli({"estimate", "--model", "bert-base-uncased", "--cached-mnrl"});
  CHECK(cached.code != memplan::cli::kExitOk);
  CHECK(cached.err.find("--cached-mnrl needs --texts-per-example N") != std::string::npos);

  const CliRun kernel = run_cli({"estimate", "--model", "llama-3.2-1b", "--loss-kernel", "ligr"});
  CHECK(kernel.code != memplan::cli::kExitOk);
  CHECK(kernel.err.find("--loss-kernel: unknown loss kernel 'ligr'") != std::string::npos);
  CHECK(kernel.err.find("did you mean 'liger'?") != std::string::npos);

  const CliRun cpu = run_cli({"estimate", "--model", "llama-3.2-1b", "--liger", "--device", "cpu"});
  CHECK(cpu.code != memplan::cli::kExitOk);
  CHECK(cpu.err.find("loss kernel 'liger' is a Triton GPU kernel") != std::string::npos);

  // ModernBERT from the catalog: its step is simulated, and the answer says which path it models.
  const CliRun modern = run_cli(
      {"estimate", "--model", "answerdotai/ModernBERT-base", "--batch", "8", "--attn-implementation", "flash_attention_2", "--bf16"});
  CHECK(modern.code == memplan::cli::kExitOk);
  CHECK(modern.out.find("ModernBERT: flash_attention_2 on unpadded batches of full sequences") != std::string::npos);
  CHECK(modern.err.find("internal") == std::string::npos);

  const CliRun both = run_cli({"estimate", "--model", "llama-3.2-1b", "--liger", "--loss-kernel", "cce"});
  CHECK(both.code != memplan::cli::kExitOk);
  CHECK(both.err.find("--liger uses Liger's fused linear cross-entropy; --loss-kernel says 'cce'") != std::string::npos);
}

TEST_CASE("--liger lowers a large-vocabulary decoder's peak below the eager loss") {
  const CliRun eager = run_cli({"estimate", "--model", "llama-3.2-1b", "--batch", "4", "--seq-len", "2048", "--bf16",
                                "--format", "json"});
  const CliRun liger = run_cli({"estimate", "--model", "llama-3.2-1b", "--batch", "4", "--seq-len", "2048", "--bf16",
                                "--liger", "--format", "json"});
  REQUIRE(eager.code == memplan::cli::kExitOk);
  REQUIRE(liger.code == memplan::cli::kExitOk);
  auto peak = [](const std::string& out) {
    const auto at = out.find("\"peak_bytes\": ");
    return std::stoll(out.substr(at + 14));
  };
  CHECK(peak(liger.out) < peak(eager.out));
}

// The encoder and loss-kernel flags through the real CLI (docs/models.md#encoders).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

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
  CHECK(head.err.find("--head mlm applies to encoders; llama-3.2-1b is a decoder") != std::string::npos);
  CHECK(head.err.find("as an embedding model with --head pooling") != std::string::npos);

  const CliRun pooling = run_cli({"estimate", "--model", "llama-3.2-1b", "--pooling", "lasttoken"});
  CHECK(pooling.code != memplan::cli::kExitOk);
  CHECK(pooling.err.find("--pooling applies to embedding models; llama-3.2-1b is trained with its LM head") !=
        std::string::npos);

  const CliRun mode = run_cli({"estimate", "--model", "bge-base-en-v1.5", "--pooling", "max"});
  CHECK(mode.code != memplan::cli::kExitOk);
  CHECK(mode.err.find("unknown pooling mode 'max'") != std::string::npos);

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

TEST_CASE("an encoder head a config states applies to the model, and the flags override it") {
  const memplan::testing::TempDir dir;
  // Composer's BERT pretraining recipe (mosaicml/examples): hf_bert without num_labels is main.py's
  // masked-LM pretraining.
  const std::string mlm = dir.write("mlm.yaml",
                                    "tokenizer_name: bert-base-uncased\nmax_seq_len: 128\n"
                                    "model:\n  name: hf_bert\n  pretrained_model_name: ${tokenizer_name}\n"
                                    "device_train_microbatch_size: 8\nprecision: amp_bf16\n");
  const CliRun a = run_cli({"estimate", "--config", mlm});
  REQUIRE(a.code == memplan::cli::kExitOk);
  CHECK(a.out.find("assumption: encoder: mlm head") != std::string::npos);
  CHECK(a.out.find("0.110B total") != std::string::npos);  // 109,514,298 with the MLM head
  const CliRun shown = run_cli({"estimate", "--config", mlm, "--show-config"});
  CHECK(shown.out.find("mlm.yaml:4 (model.name hf_bert without num_labels: masked-LM pretraining (main.py))") !=
        std::string::npos);

  const CliRun flag = run_cli({"estimate", "--config", mlm, "--head", "classification"});
  REQUIRE(flag.code == memplan::cli::kExitOk);
  CHECK(flag.out.find("assumption: encoder: classification head") != std::string::npos);

  const std::string cls = dir.write("cls.yaml",
                                    "model:\n  name: hf_bert\n  num_labels: 5\n  pretrained_model_name: bert-base-uncased\n"
                                    "device_train_microbatch_size: 16\nmax_seq_len: 128\n");
  const CliRun c = run_cli({"estimate", "--config", cls, "--format", "json"});
  REQUIRE(c.code == memplan::cli::kExitOk);
  // bert-base-uncased with BertForSequenceClassification's 768 x 5 + 5 classifier: 109,482,240
  // + 3,845 parameters.
  CHECK(c.out.find("\"parameters\": 109486085") != std::string::npos);

  // A decoder named with an encoder's head: said, and ignored.
  const std::string dec = dir.write("dec.yaml",
                                    "model:\n  name: hf_bert\n  num_labels: 3\n  pretrained_model_name: llama-3.2-1b\n"
                                    "device_train_microbatch_size: 1\nmax_seq_len: 128\n");
  const CliRun d = run_cli({"estimate", "--config", dec});
  REQUIRE(d.code == memplan::cli::kExitOk);
  CHECK((d.out + d.err).find("dec.yaml:3: model.num_labels describes an encoder's head; llama-3.2-1b is a decoder (ignored)") !=
        std::string::npos);
}

TEST_CASE("an encoder's defaults are transformers' Trainer's and its own positions, not a decoder LLM's") {
  // No --seq-len: memplan's 1024 would not fit BERT's 512-row position table; RoBERTa's 514 rows
  // hold 512 tokens (positions start after padding_idx 1).
  const CliRun bert = run_cli({"estimate", "--model", "bert-base-uncased", "--show-config"});
  REQUIRE(bert.code == memplan::cli::kExitOk);
  CHECK(bert.out.find("seq_len                 512                derived (bert-base-uncased's 512 positions, to "
                      "which its tokenizer truncates; memplan's default 1024 is longer)") != std::string::npos);
  const CliRun xlmr = run_cli({"estimate", "--model", "xlm-roberta-base", "--format", "json"});
  CHECK(xlmr.out.find("\"seq_len\": 512") != std::string::npos);
  // Asked for, it is kept, and said to fail.
  const CliRun longer = run_cli({"estimate", "--model", "bert-base-uncased", "--seq-len", "1024"});
  CHECK((longer.out + longer.err).find("seq_len 1024 (flag --seq-len) is longer than bert-base-uncased's 512 learned "
                                       "positions: transformers fails with an index error") != std::string::npos);
  // ModernBERT has 8,192 (rotary): the default stands.
  const CliRun modern = run_cli({"estimate", "--model", "answerdotai/ModernBERT-base", "--format", "json"});
  CHECK(modern.out.find("\"seq_len\": 1024") != std::string::npos);

  // TrainingArguments in YAML without bf16 or gradient_checkpointing: TRL's defaults (both on)
  // for a decoder, transformers' (both off) for an encoder, which TRL does not train.
  const memplan::testing::TempDir dir;
  const std::string enc = dir.write("st.yaml", "model_name_or_path: bert-base-uncased\nper_device_train_batch_size: 32\n"
                                               "max_seq_length: 128\n");
  const CliRun e = run_cli({"estimate", "--config", enc, "--show-config"});
  REQUIRE(e.code == memplan::cli::kExitOk);
  CHECK(e.out.find("autocast                none") != std::string::npos);
  CHECK(e.out.find("gradient_checkpointing  false              default (false: transformers' TrainingArguments; "
                   "TRL's default is for decoder LLMs)") != std::string::npos);
  CHECK((e.out + e.err).find("assumes TRL") == std::string::npos);
  const std::string dec = dir.write("sft.yaml", "model_name_or_path: llama-3.2-1b\nper_device_train_batch_size: 4\n");
  const CliRun d = run_cli({"estimate", "--config", dec, "--show-config"});
  REQUIRE(d.code == memplan::cli::kExitOk);
  CHECK(d.out.find("gradient_checkpointing  true") != std::string::npos);
  CHECK((d.out + d.err).find("memplan assumes TRL >= 0.22's defaults") != std::string::npos);
  // A flag wins over either default.
  const CliRun f = run_cli({"estimate", "--config", enc, "--gradient-checkpointing", "--show-config"});
  CHECK(f.out.find("gradient_checkpointing  true") != std::string::npos);
}

TEST_CASE("a file's LoRA keys warned as ineffective are not, once --use-peft turns LoRA on") {
  const memplan::testing::TempDir dir;
  const std::string f = dir.write("sft.yaml", "model_name_or_path: llama-3.2-1b\nlora_r: 16\nbf16: true\n"
                                              "gradient_checkpointing: true\n");
  const CliRun without = run_cli({"estimate", "--config", f});
  CHECK((without.out + without.err).find("LoRA settings have no effect without use_peft") != std::string::npos);
  const CliRun with = run_cli({"estimate", "--config", f, "--use-peft", "--show-config"});
  REQUIRE(with.code == memplan::cli::kExitOk);
  CHECK((with.out + with.err).find("no effect") == std::string::npos);
  CHECK(with.out.find("lora_r                  16") != std::string::npos);
  // memplan check prints a config's located warnings: the withdrawn one is not among them.
  const CliRun check = run_cli({"check", f, "--gpu", "h100-sxm", "--use-peft"});
  CHECK(check.code == memplan::cli::kExitOk);
  CHECK((check.out + check.err).find("no effect") == std::string::npos);
  const CliRun check_full = run_cli({"check", f, "--gpu", "h100-sxm"});
  CHECK(check_full.out.find("LoRA settings have no effect without use_peft") != std::string::npos);
}

TEST_CASE("sentence-transformers' training arguments in a file: known keys, transformers' defaults") {
  // SentenceTransformerTrainingArguments = TrainingArguments + prompts, batch_sampler,
  // multi_dataset_batch_sampler, router_mapping, learning_rate_mapping.
  const memplan::testing::TempDir dir;
  const std::string f = dir.write("st.yaml", "model_name_or_path: bert-base-uncased\nper_device_train_batch_size: 64\n"
                                             "batch_sampler: no_duplicates\nmulti_dataset_batch_sampler: proportional\n"
                                             "prompts:\n  query: 'query: '\nrouter_mapping: {}\n"
                                             "learning_rate_mapping: {}\nfp16: true\n");
  const CliRun r = run_cli({"estimate", "--config", f, "--format", "json"});
  REQUIRE(r.code == memplan::cli::kExitOk);
  CHECK(r.out.find("\"warnings\": []") != std::string::npos);  // no unknown key, no TRL default
  CHECK(r.out.find("\"gradient_checkpointing\": false") != std::string::npos);
}

TEST_CASE("show-config says when the flags could not be applied") {
  const memplan::testing::TempDir dir;
  const std::string f = dir.write("l.yaml", "model_name_or_path: llama-3.2-1b\nlora_r: 16\n");
  const CliRun r = run_cli({"estimate", "--config", f, "--use-peft", "--head", "mlm", "--show-config"});
  CHECK(r.code != memplan::cli::kExitOk);
  CHECK(r.out.rfind("the flags were not applied (the error below): these are the config files' values alone\n", 0) == 0);
  CHECK(r.err.find("--head mlm applies to encoders") != std::string::npos);
}

TEST_CASE("fine-tuned encoders named by their hub id are counted as their base, and estimate says so") {
  // configs/model_names.json: cross-encoder/nli-deberta-v3-base is microsoft/deberta-v3-base with
  // a 3-label classifier; multilingual-e5-large is xlm-roberta-large's shape.
  const CliRun nli = run_cli({"estimate", "--model", "cross-encoder/nli-deberta-v3-base", "--head", "classification",
                              "--num-labels", "3", "--seq-len", "128"});
  REQUIRE(nli.code == memplan::cli::kExitOk);
  CHECK(nli.out.find("note: model: cross-encoder/nli-deberta-v3-base: sentence-transformers' NLI cross-encoder, "
                     "trained from microsoft/deberta-v3-base") != std::string::npos);
  CHECK(nli.out.find("0.184B total") != std::string::npos);  // 184,424,451 with the 3-label classifier
  const CliRun e5 = run_cli({"estimate", "--model", "intfloat/multilingual-e5-large", "--seq-len", "128",
                             "--format", "json"});
  REQUIRE(e5.code == memplan::cli::kExitOk);
  CHECK(e5.out.find("\"parameters\": 559890432") != std::string::npos);
}

TEST_CASE("decoder embedding models: from the catalog, or any decoder with --head pooling") {
  // Qwen3-Embedding: Qwen3Model without an LM head (595,776,512 parameters), last-token pooling
  // from the catalog's sentence-transformers entry.
  const CliRun q = run_cli({"estimate", "--model", "Qwen/Qwen3-Embedding-0.6B", "--texts-per-example", "3",
                            "--batch", "4", "--seq-len", "256"});
  CHECK(q.code == memplan::cli::kExitOk);
  CHECK(q.out.find("0.596B total") != std::string::npos);
  CHECK(q.out.find("assumption: embedding model: sentence-transformers loads the decoder as AutoModel (no LM head) "
                   "and pools (lasttoken); MultipleNegativesRankingLoss over 3 texts per example") != std::string::npos);

  // Cached MNRL (GradCache) on the decoder: its mini-batches named in the assumption.
  const CliRun qc = run_cli({"estimate", "--model", "Qwen/Qwen3-Embedding-0.6B", "--texts-per-example", "3",
                             "--cached-mnrl", "--mini-batch-size", "16", "--batch", "256", "--seq-len", "256"});
  CHECK(qc.code == memplan::cli::kExitOk);
  CHECK(qc.out.find("CachedMultipleNegativesRankingLoss over 3 texts per example, embedded in mini-batches of 16 "
                    "(GradCache: without grad, then again with grad in the loss's backward)") != std::string::npos);

  // The JSON names the head, the pooling and the library that does it.
  const CliRun qj = run_cli({"estimate", "--model", "Qwen/Qwen3-Embedding-0.6B", "--format", "json"});
  REQUIRE(qj.code == memplan::cli::kExitOk);
  const auto model = nlohmann::json::parse(qj.out)["inputs"]["model"];
  CHECK(model["head"] == "pooling");
  CHECK(model["pooling"] == "lasttoken");
  CHECK(model["embedding_library"] == "sentence-transformers");
  CHECK(model["parameters"] == 595776512);
  CHECK_FALSE(model.contains("dense_modules"));
  // EmbeddingGemma: bidirectional, with its two Dense modules.
  const CliRun gj = run_cli({"estimate", "--model", "google/embeddinggemma-300m", "--format", "json"});
  REQUIRE(gj.code == memplan::cli::kExitOk);
  const auto gm = nlohmann::json::parse(gj.out)["inputs"]["model"];
  CHECK(gm["bidirectional"] == true);
  CHECK(gm["sliding_window"] == 257);
  CHECK(gm["parameters"] == 307581696);
  CHECK(gm["dense_modules"] == nlohmann::json::parse(R"([
      {"in_features": 768, "out_features": 3072, "bias": false, "activation": "identity"},
      {"in_features": 3072, "out_features": 768, "bias": false, "activation": "identity"}])"));

  // A decoder LLM trained as an embedding model: the same model without its untied lm_head.
  const CliRun lm = run_cli({"estimate", "--model", "llama-3.2-1b", "--format", "json"});
  const CliRun emb = run_cli({"estimate", "--model", "llama-3.2-1b", "--head", "pooling", "--pooling", "mean",
                              "--texts-per-example", "2", "--format", "json"});
  REQUIRE(lm.code == memplan::cli::kExitOk);
  REQUIRE(emb.code == memplan::cli::kExitOk);
  CHECK(emb.out.find("pools (mean)") != std::string::npos);

  // e5-mistral's config.json names MistralModel: an embedding model without being told.
  const CliRun e5 = run_cli({"estimate", "--model", "intfloat/e5-mistral-7b-instruct", "--method", "dpo"});
  CHECK(e5.code != memplan::cli::kExitOk);
  CHECK(e5.err.find("dpo trains a causal LM head; intfloat/e5-mistral-7b-instruct is loaded as an embedding model") !=
        std::string::npos);

  // LLM2Vec's supervised config: LoRA, its mean pooling over query, positive and hard negative.
  const CliRun l2v = run_cli({"estimate", "--config",
                              std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/realworld/llm2vec/supervised-metallama3.json",
                              "--format", "json"});
  REQUIRE(l2v.code == memplan::cli::kExitOk);
  const auto lj = nlohmann::json::parse(l2v.out);
  CHECK(lj["inputs"]["model"]["embedding_library"] == "llm2vec");
  CHECK(lj["inputs"]["model"]["pooling"] == "mean");
  CHECK(lj["inputs"]["warnings"].empty());

  // A vision-language model is not trained as one.
  const CliRun vlm = run_cli({"estimate", "--model", "gemma-3-4b-it", "--head", "pooling"});
  CHECK(vlm.code != memplan::cli::kExitOk);
  CHECK(vlm.err == "memplan: error: a vision-language model as an embedding model is not modelled\n");

  // Contrastive texts on a decoder with its LM head: said, with the ways out.
  const CliRun texts = run_cli({"estimate", "--model", "llama-3.2-1b", "--texts-per-example", "3"});
  CHECK(texts.code != memplan::cli::kExitOk);
  CHECK(texts.err.find("or --head pooling to train this decoder as one") != std::string::npos);
}

TEST_CASE("a contrastive plan that accumulates says the micro-batch sets the in-batch negatives") {
  // 3 texts per example: each anchor is scored against micro-batch x 2 candidates; a global batch
  // of 64 reached by accumulation is not 64 x 2 candidates.
  const CliRun r = run_cli({"plan", "--model", "bge-base-en-v1.5", "--texts-per-example", "3", "--seq-len", "512",
                            "--target-global-batch", "4096", "--gpu", "rtx-4090"});
  REQUIRE(r.code == memplan::cli::kExitOk);
  const auto at = r.out.find("in-batch negatives: each anchor is scored against its micro-batch's ");
  REQUIRE(at != std::string::npos);
  CHECK(r.out.find("not the global batch's 8192", at) != std::string::npos);
  CHECK(r.out.find("(cached MNRL, --cached-mnrl, keeps them in one step)", at) != std::string::npos);

  // A decoder embedding model trained by sentence-transformers gets the same hint.
  const CliRun d = run_cli({"plan", "--model", "Qwen/Qwen3-Embedding-0.6B", "--texts-per-example", "3", "--seq-len",
                            "512", "--target-global-batch", "4096", "--gpu", "rtx-4090"});
  REQUIRE(d.code == memplan::cli::kExitOk);
  CHECK(d.out.find("(cached MNRL, --cached-mnrl, keeps them in one step)") != std::string::npos);

  // Cached MNRL embeds the whole batch in one step: no such note.
  const CliRun c = run_cli({"plan", "--model", "bge-base-en-v1.5", "--texts-per-example", "3", "--seq-len", "512",
                            "--target-global-batch", "4096", "--cached-mnrl", "--gpu", "rtx-4090"});
  REQUIRE(c.code == memplan::cli::kExitOk);
  CHECK(c.out.find("in-batch negatives") == std::string::npos);
}

// Tests for src/io/config/frameworks/open_instruct.cpp: allenai/open-instruct's finetune.py and DPO YAML,
// read with the script's own defaults (not TRL's).
#include <catch2/catch.hpp>

#include "io/config/config_loader.hpp"

using namespace memplan;
using namespace memplan::io;

namespace {

Result<LoadedConfig> load(const std::string& path, const std::string& text) {
  MemoryFileSystem fs;
  fs.files[path] = text;
  ConfigRequest req;
  req.files = {path};
  return load_config(req, fs);
}

bool has_warning(const LoadedConfig& c, const std::string& text) {
  for (const auto& w : c.inputs.warnings)
    if (w == text) return true;
  return false;
}

}  // namespace

// configs/train_configs/sft/tulu2_7b_qlora.yaml, reduced to its memory keys: read as TRL before,
// it was a full fp32 fine-tune with only an unknown-key warning.
TEST_CASE("open-instruct: use_qlora is QLoRA (4-bit NF4, double quantization, paged AdamW), not a full fine-tune") {
  auto r = load("sft/tulu2_7b_qlora.yaml",
                "model_name_or_path: meta-llama/Llama-2-7b-hf\ngradient_checkpointing: true\nuse_qlora: true\n"
                "use_lora: true\nlora_rank: 64\nlora_alpha: 16\nlora_dropout: 0.1\nuse_slow_tokenizer: true\n"
                "max_seq_length: 4096\nper_device_train_batch_size: 1\ngradient_accumulation_steps: 16\n"
                "with_tracking: true\ncheckpointing_steps: epoch\n");
  REQUIRE(r);
  const TrainingConfig& t = r->inputs.config;
  CHECK(r->dialect == Dialect::kOpenInstruct);
  CHECK(t.method == Method::kSft);
  CHECK(t.micro_batch == 1);
  CHECK(t.grad_accum == 16);
  CHECK(t.seq_len == 4096);
  CHECK(t.lora.enabled);
  CHECK(t.lora.r == 64);
  CHECK(t.lora.alpha == 16);
  CHECK(t.lora.target_modules.size() == 7);  // q/k/v/o and gate/up/down: open-instruct's LoraConfig
  CHECK(t.quant.load_in_4bit);
  CHECK(t.quant.double_quant);
  CHECK(t.quant.quant_type == "nf4");
  CHECK(t.optim.kind == OptimizerKind::kPagedAdamW32bit);
  CHECK(t.torch_dtype == DType::kBFloat16);
  CHECK(t.gradient_checkpointing);
  CHECK(t.attn_impl() == AttnImpl::kFlashAttention2);
  CHECK(r->inputs.warnings.empty());
}

TEST_CASE("open-instruct: defaults are the script's (batch 8, no checkpointing, fused AdamW, no LoRA)") {
  auto r = load("sft/x.yaml", "model_name_or_path: meta-llama/Llama-3.1-8B\nuse_slow_tokenizer: true\n"
                              "dataset_mixer:\n  allenai/tulu-3-sft-mixture: 1.0\nmax_seq_length: 4096\n");
  REQUIRE(r);
  const TrainingConfig& t = r->inputs.config;
  CHECK(t.micro_batch == 8);
  CHECK(t.grad_accum == 1);
  CHECK_FALSE(t.gradient_checkpointing);
  CHECK_FALSE(t.lora.enabled);
  CHECK(t.optim.kind == OptimizerKind::kAdamWTorchFused);
}

TEST_CASE("open-instruct: DPO from the keys or the path; the cache script holds no reference model") {
  SECTION("dpo_tune_cache.py: loss_type dpo_norm, reference log-probs cached before training") {
    auto r = load("olmo2/olmo2_1124_7b_dpo.yaml", "model_name_or_path: m\nuse_slow_tokenizer: false\n"
                                                  "max_seq_length: 2048\nuse_lora: false\nloss_type: dpo_norm\n"
                                                  "beta: 5\n");
    REQUIRE(r);
    CHECK(r->inputs.config.method == Method::kDpo);
    CHECK(r->inputs.config.dpo.precompute_ref_log_probs);
  }
  SECTION("dpo_tune.py's keys: a reference model in the step") {
    auto r = load("x.yaml", "model_name_or_path: m\nuse_slow_tokenizer: true\nmax_seq_length: 2048\n"
                            "dpo_beta: 0.1\ndpo_loss_type: dpo\n");
    REQUIRE(r);
    CHECK(r->inputs.config.method == Method::kDpo);
    CHECK_FALSE(r->inputs.config.dpo.precompute_ref_log_probs);
    CHECK(r->inputs.config.dpo.ref_model == RefModel::kAuto);
  }
  SECTION("SimPO: no reference model") {
    auto r = load("dpo/simpo.yaml", "model_name_or_path: m\nuse_slow_tokenizer: true\nmax_seq_length: 2048\n"
                                    "loss_type: simpo\ngamma_beta_ratio: 0.3\nbeta: 10\n");
    REQUIRE(r);
    CHECK(r->inputs.config.method == Method::kDpo);
    CHECK(r->inputs.config.dpo.ref_model == RefModel::kNone);
  }
  SECTION("no DPO key: the path's dpo/ folder names the script") {
    auto r = load("configs/train_configs/dpo/default.yaml",
                  "model_name_or_path: m\nuse_slow_tokenizer: true\nmax_seq_length: 2048\n");
    REQUIRE(r);
    CHECK(r->inputs.config.method == Method::kDpo);
  }
}

TEST_CASE("open-instruct: what the estimate leaves out is said at its line") {
  auto r = load("x.yaml", "model_name_or_path: m\nuse_slow_tokenizer: true\nmax_seq_length: 2048\npacking: true\n"
                          "sequence_parallel_size: 4\nlora_rank: 8\n");
  REQUIRE(r);
  CHECK(has_warning(*r, "x.yaml:4: packing: memplan plans every sequence at the full sequence length, which a packed "
                        "or padding-free batch fills; the estimate holds (a padded batch of shorter texts uses less)"));
  CHECK(has_warning(*r, "x.yaml:5: sequence_parallel_size = 4 is not modelled for open-instruct: the estimate keeps "
                        "the whole sequence and every weight on each GPU (an overestimate)"));
  CHECK(has_warning(*r, "x.yaml:6: LoRA settings have no effect without use_lora: true (all weights are trained)"));
}

TEST_CASE("open-instruct: an unset max_seq_length is a warning, not a silent default") {
  auto r = load("x.yaml", "model_name_or_path: m\nuse_slow_tokenizer: true\n");
  REQUIRE(r);
  CHECK(r->inputs.config.seq_len == 2048);
  CHECK(has_warning(*r, "x.yaml: max_seq_length is not set: open-instruct does not truncate, so the longest example "
                        "sets the memory; memplan plans 2048 tokens (pass --seq-len)"));
}

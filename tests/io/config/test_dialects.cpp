// Dialects and config loading: detection, every dialect's mapping with file:line origins,
// unknown and contradictory keys, stage overrides, DeepSpeed alongside, key maps, directives;
// and every shipped example gives the same estimate as the equivalent flags.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "io/config/config_loader.hpp"
#include "io/model/custom_model.hpp"
#include "io/config/dialects.hpp"
#include "cli/cli_harness.hpp"

using namespace memplan;
using namespace memplan::io;

using memplan::testing::CliRun;
using memplan::testing::run_cli;

namespace {

const std::string kExamples = std::string(MEMPLAN_SOURCE_DIR) + "/configs/examples/";

Result<LoadedConfig> load(MemoryFileSystem& fs, std::vector<std::string> files, std::string dialect = {},
                          std::vector<KeyMapEntry> keys = {}) {
  ConfigRequest req;
  req.files = std::move(files);
  req.dialect = std::move(dialect);
  req.key_map = std::move(keys);
  return load_config(req, fs);
}

LoadedConfig load_ok(MemoryFileSystem& fs, std::vector<std::string> files, std::string dialect = {}) {
  auto r = load(fs, std::move(files), std::move(dialect));
  if (!r) FAIL(r.error().to_string());
  return *r;
}

std::string origin(const LoadedConfig& c, const std::string& key) {
  auto it = c.inputs.origins.find(key);
  if (it == c.inputs.origins.end()) return "(none)";
  return it->second.to_string();
}

std::vector<std::string> warnings(const LoadedConfig& c) {
  std::vector<std::string> w;
  for (const auto& d : c.diagnostics) w.push_back(d.to_string());
  return w;
}

Dialect detect(const std::string& yaml) {
  auto doc = parse_yaml(yaml, "x.yaml");
  REQUIRE(doc.has_value());
  auto d = detect_dialect(doc->root, "x.yaml");
  if (!d) FAIL(d.error().to_string());
  return d->dialect;
}

// The estimate and the engine inputs of `estimate --format json`.
nlohmann::json estimate_json(std::vector<std::string> args) {
  args.insert(args.begin(), "estimate");
  args.push_back("--format");
  args.push_back("json");
  CliRun r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  return {{"estimate", j["estimate"]}, {"training", j["inputs"]["training"]}, {"model", j["inputs"]["model"]}};
}

}  // namespace

TEST_CASE("dialect names and aliases") {
  CHECK(*parse_dialect("hf") == Dialect::kHfTrl);
  CHECK(*parse_dialect("TRL") == Dialect::kHfTrl);
  CHECK(*parse_dialect("llamafactory") == Dialect::kLlamaFactory);
  CHECK(*parse_dialect("hydra") == Dialect::kLightning);
  CHECK(*parse_dialect("ds") == Dialect::kDeepSpeed);
  CHECK(parse_dialect("axolotol").error().to_string() == "unknown dialect 'axolotol'; did you mean 'axolotl'?");
  CHECK(parse_dialect("zzz").error().to_string() ==
        "unknown dialect 'zzz'; known dialects: hf, axolotl, llama-factory, torchtune, lightning, flat, deepspeed, "
        "accelerate, litgpt, nemo-automodel, llm-foundry, nemo-megatron, torchtitan, megatron-lm, verl, open-instruct, ms-swift, oumi, megatron-bridge, nemo-rl, roll, prime-rl, keys, inferred");
  CHECK(to_string(Dialect::kLlamaFactory) == "llama-factory");
}

TEST_CASE("detection from keys") {
  CHECK(detect("model_name_or_path: x\nper_device_train_batch_size: 2\nuse_peft: true\n") == Dialect::kHfTrl);
  CHECK(detect("base_model: x\nmicro_batch_size: 2\nsequence_len: 2048\n") == Dialect::kAxolotl);
  CHECK(detect("model_name_or_path: x\nstage: sft\nfinetuning_type: lora\nper_device_train_batch_size: 2\n") ==
        Dialect::kLlamaFactory);
  CHECK(detect("model:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\nbatch_size: 2\n") ==
        Dialect::kTorchtune);
  CHECK(detect("data_loader:\n  batch_size: 45\ntraining:\n  trainer:\n    accumulate_grad_batches: 5\n") ==
        Dialect::kLightning);
  CHECK(detect("trainer:\n  accumulate_grad_batches: 2\ndata:\n  init_args:\n    batch_size: 8\n") ==
        Dialect::kLightning);
  CHECK(detect("micro_batch_size: 2\ngradient_accumulation_steps: 32\nmax_seq_len: 1024\n") == Dialect::kFlat);
  CHECK(detect("train_micro_batch_size_per_gpu: 4\nzero_optimization:\n  stage: 2\n") == Dialect::kDeepSpeed);
}

TEST_CASE("detection failures name the way out") {
  // No key of any framework: the file is read by meaning, which finds neither a model nor a batch.
  auto doc = parse_yaml("foo: 1\nbar: 2\n", "x.yaml");
  CHECK(detect_dialect(doc->root, "x.yaml")->dialect == Dialect::kInferred);
  {
    MemoryFileSystem nothing;
    nothing.files["x.yaml"] = "foo: 1\nbar: 2\n";
    CHECK(load(nothing, {"x.yaml"}).error().to_string() ==
          "x.yaml: cannot tell which training framework this config is for: no key memplan recognizes, and reading it "
          "by meaning finds neither the model (no key like model_name_or_path, model.name, base_model, pretrain) nor "
          "the per-device batch (no key like micro_batch_size, per_device_train_batch_size, batch_size); name it with "
          "--dialect (hf, axolotl, llama-factory, torchtune, lightning, flat, deepspeed, accelerate, litgpt, "
          "nemo-automodel, llm-foundry, nemo-megatron, torchtitan, megatron-lm, verl, open-instruct, ms-swift, oumi, "
          "megatron-bridge, nemo-rl, roll, prime-rl, keys, inferred) or say where the values are with --keys "
          "batch=KEY,grad_accum=KEY,seq_len=KEY");
  }
  auto tie = parse_yaml("sequence_len: 1\ncutoff_len: 1\n", "x.yaml");
  CHECK(detect_dialect(tie->root, "x.yaml").error().to_string() ==
        "x.yaml: the keys fit both axolotl (sequence_len) and llama-factory (cutoff_len); name the dialect with "
        "--dialect");
  MemoryFileSystem fs;
  fs.files["x.yaml"] = "- a\n- b\n";
  CHECK(load(fs, {"x.yaml"}).error().to_string() == "x.yaml:1: expected a mapping of keys at the top level, got a list");
  CHECK(load(fs, {"missing.yaml"}).error().to_string() == "missing.yaml: cannot read: No such file or directory");
}

TEST_CASE("hf/trl: values, origins, TRL defaults and value sites") {
  MemoryFileSystem fs;
  fs.files["train.yaml"] =
      "model_name_or_path: meta-llama/Llama-3.1-8B\n"  // 1
      "per_device_train_batch_size: 2\n"              // 2
      "max_length: 4096\n"                            // 3
      "use_peft: true\n"                              // 4
      "lora_r: 64\n"                                  // 5
      "lora_target_modules: [q_proj, v_proj]\n"       // 6
      "load_in_4bit: true\n"                          // 7
      "use_bnb_nested_quant: true\n"                  // 8
      "optim: paged_adamw_8bit\n"                     // 9
      "torch_dtype: auto\n";                          // 10
  LoadedConfig c = load_ok(fs, {"train.yaml"});
  const TrainingConfig& t = c.inputs.config;
  CHECK(c.dialect == Dialect::kHfTrl);
  CHECK(c.inputs.model_name == "meta-llama/Llama-3.1-8B");
  CHECK(t.micro_batch == 2);
  CHECK(t.grad_accum == 1);
  CHECK(t.seq_len == 4096);
  CHECK(t.lora.enabled);
  CHECK(t.lora.r == 64);
  CHECK(t.lora.target_modules == std::vector<std::string>{"q_proj", "v_proj"});
  CHECK(t.quant.load_in_4bit);
  CHECK(t.quant.double_quant);
  CHECK(t.optim.kind == OptimizerKind::kPagedAdamW8bit);
  CHECK(t.autocast == DType::kBFloat16);  // TRL >= 0.22: bf16 unless fp16
  CHECK(t.gradient_checkpointing);        // TRL >= 0.22 default
  CHECK(c.inputs.torch_dtype_from_model);
  CHECK(origin(c, "batch") == "train.yaml:2");
  CHECK(origin(c, "grad_accum") == "default (TrainingArguments gradient_accumulation_steps = 1)");
  CHECK(origin(c, "seq_len") == "train.yaml:3");
  CHECK(origin(c, "lora_target_modules") == "train.yaml:6");
  CHECK(origin(c, "method") == "default (no DPO or GRPO keys: SFT)");
  CHECK(warnings(c) == std::vector<std::string>{
                           "train.yaml: bf16 and gradient_checkpointing are not set: memplan assumes TRL >= 0.22's "
                           "defaults (both true; transformers' Trainer alone leaves them off); set them to be sure"});
  // One of them set: the warning names the other.
  fs.files["gc.yaml"] = "model_name_or_path: meta-llama/Llama-3.1-8B\ngradient_checkpointing: true\n";
  CHECK(warnings(load_ok(fs, {"gc.yaml"})) ==
        std::vector<std::string>{"gc.yaml: bf16 is not set: memplan assumes TRL >= 0.22's default (true; transformers' "
                                 "Trainer alone leaves it off); set it to be sure"});
  const ValueSite* b = c.primary_site(Knob::kBatch);
  REQUIRE(b != nullptr);
  CHECK(b->present);
  CHECK(b->line == 2);
  CHECK(b->value == 2);
  const ValueSite* g = c.primary_site(Knob::kGradAccum);
  REQUIRE(g != nullptr);
  CHECK_FALSE(g->present);
  CHECK(g->key() == "gradient_accumulation_steps");
  CHECK(g->insert_after == "per_device_train_batch_size");
  CHECK(g->no_insert_reason.empty());
  CHECK(c.batch_location().to_string() == "train.yaml:2");
}

TEST_CASE("hf/trl: the method comes from trainer-specific keys") {
  MemoryFileSystem fs;
  fs.files["dpo.yaml"] = "model_name_or_path: m\nbeta: 0.1\nmax_prompt_length: 256\nbf16: true\n"
                         "gradient_checkpointing: false\nprecompute_ref_log_probs: true\n";
  LoadedConfig d = load_ok(fs, {"dpo.yaml"});
  CHECK(d.inputs.config.method == Method::kDpo);
  CHECK(origin(d, "method") == "derived (DPOConfig key precompute_ref_log_probs at dpo.yaml:6)");
  CHECK(d.inputs.config.dpo.max_prompt_length == 256);
  CHECK(d.inputs.config.dpo.precompute_ref_log_probs);
  CHECK_FALSE(d.inputs.config.gradient_checkpointing);
  CHECK(d.diagnostics.empty());

  fs.files["grpo.yaml"] = "model_name_or_path: m\nbeta: 0.0\nnum_generations: 4\nuse_vllm: true\nvllm_mode: server\n"
                          "bf16: true\ngradient_checkpointing: true\n";
  LoadedConfig g = load_ok(fs, {"grpo.yaml"});
  CHECK(g.inputs.config.method == Method::kGrpo);
  CHECK(g.inputs.config.grpo.num_generations == 4);
  CHECK(g.inputs.config.grpo.vllm == VllmMode::kServer);
  CHECK(g.primary_site(Knob::kSeqLen)->no_insert_reason ==
        "a GRPO run's sequences are max_prompt_length + max_completion_length; memplan does not split a new length "
        "between them");
}

TEST_CASE("unknown keys: near-misses suggest the key, others are reported as ignored") {
  MemoryFileSystem fs;
  fs.files["train.yaml"] =
      "model_name_or_path: meta-llama/Llama-3.1-8B\n"
      "per_device_train_batch_size: 2\n"
      "use_peft: true\n"
      "lora_rnak: 8\n"
      "learning_rat: 1e-4\n"
      "my_custom_flag: 1\n"
      "bf16: true\n"
      "gradient_checkpointing: true\n";
  LoadedConfig c = load_ok(fs, {"train.yaml"});
  CHECK(warnings(c) == std::vector<std::string>{
                           "train.yaml:4: unknown key 'lora_rnak'; did you mean 'lora_r'?",
                           "train.yaml:5: unknown key 'learning_rat'; did you mean 'learning_rate'?",
                           "train.yaml:6: unknown key 'my_custom_flag' (ignored)",
                       });
  // The same strings reach the estimate output.
  CHECK(c.inputs.warnings.size() == 3);
}

TEST_CASE("contradictory and malformed values are located") {
  MemoryFileSystem fs;
  fs.files["c.yaml"] = "model_name_or_path: m\nmax_length: 1024\nmax_seq_length: 2048\nbf16: true\n"
                       "gradient_checkpointing: false\n";
  LoadedConfig c = load_ok(fs, {"c.yaml"});
  CHECK(c.inputs.config.seq_len == 1024);
  CHECK(warnings(c) == std::vector<std::string>{"c.yaml:3: max_seq_length = 2048 contradicts max_length = 1024 "
                                                "(c.yaml:2); memplan uses max_length"});

  fs.files["bad.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: four\n";
  CHECK(load(fs, {"bad.yaml"}).error().to_string() ==
        "bad.yaml:2: per_device_train_batch_size must be an integer, got \"four\"");
  fs.files["zero.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: 0\n";
  CHECK(load(fs, {"zero.yaml"}).error().to_string() ==
        "zero.yaml:2: per_device_train_batch_size = 0 is out of range (>= 1)");
  fs.files["opt.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: 1\noptim: adamw_torh\nbf16: true\n"
                         "gradient_checkpointing: true\n";
  // Every name a trainer accepts is accepted; an unknown one is a located warning, estimated as adamw_torch.
  CHECK(warnings(load_ok(fs, {"opt.yaml"})) ==
        std::vector<std::string>{"opt.yaml:3: unknown optimizer 'adamw_torh'; estimated as adamw_torch (two fp32 "
                                 "states); did you mean 'adamw_torch'?"});
  fs.files["ademamix.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: 1\noptim: ademamix\nbf16: true\n"
                              "gradient_checkpointing: true\n";
  LoadedConfig ade = load_ok(fs, {"ademamix.yaml"});
  CHECK(ade.inputs.config.optim.kind == OptimizerKind::kAdamWTorch);
  CHECK(warnings(ade) == std::vector<std::string>{"ademamix.yaml:3: optimizer 'ademamix' is not modelled; estimated "
                                                  "as adamw_torch (AdEMAMix keeps a third state (a slow EMA): an "
                                                  "underestimate)"});
  for (const auto& [name, kind] : {std::pair<const char*, OptimizerKind>{"adamw_torch_8bit", OptimizerKind::kAdamWTorchao8bit},
                                   {"adamw_torch_4bit", OptimizerKind::kAdamWTorchao4bit},
                                   {"ao_adamw_fp8", OptimizerKind::kAdamWTorchao8bit},
                                   {"paged_lion_8bit", OptimizerKind::kLion8bit},
                                   {"schedule_free_adamw", OptimizerKind::kAdamWTorch},
                                   {"galore_adamw", OptimizerKind::kAdamWTorch},
                                   {"lomo", OptimizerKind::kSgd}}) {
    fs.files["o.yaml"] = std::string("model_name_or_path: m\noptim: ") + name + "\n";
    LoadedConfig o = load_ok(fs, {"o.yaml"});
    CHECK(o.inputs.config.optim.kind == kind);
    CHECK(origin(o, "optim") == "o.yaml:2");
  }
  fs.files["both.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: 1\nbf16: true\nfp16: true\n";
  CHECK(load(fs, {"both.yaml"}).error().to_string() == "both.yaml:4: bf16 and fp16 are both true; set only one of them");
  fs.files["list.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: [1, 2]\n";
  CHECK(load(fs, {"list.yaml"}).error().to_string() ==
        "list.yaml:2: per_device_train_batch_size must be an integer, got a list");
  fs.files["syntax.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: [1, 2\n";
  CHECK(load(fs, {"syntax.yaml"}).error().to_string() == "syntax.yaml:3: invalid YAML: end of sequence flow not found");
}

TEST_CASE("axolotl: adapter, dtype resolution, defaults") {
  MemoryFileSystem fs;
  fs.files["a.yaml"] = "base_model: meta-llama/Llama-3.1-8B\nadapter: qlora\nload_in_4bit: true\nlora_r: 16\n"
                       "lora_target_modules:\n  - q_proj\n  - v_proj\nmicro_batch_size: 4\nfp16: true\n";
  LoadedConfig c = load_ok(fs, {"a.yaml"});
  const TrainingConfig& t = c.inputs.config;
  CHECK(t.lora.enabled);
  CHECK(t.quant.load_in_4bit);
  CHECK(t.quant.double_quant);
  CHECK(t.torch_dtype == DType::kFloat16);
  CHECK(t.autocast == DType::kFloat16);  // fp16 turns bf16: auto off
  CHECK(t.seq_len == 512);
  CHECK(origin(c, "seq_len") == "default (axolotl sequence_len = 512)");
  CHECK(t.optim.kind == OptimizerKind::kAdamWTorchFused);
  CHECK(t.lora.target_modules == std::vector<std::string>{"q_proj", "v_proj"});

  fs.files["q.yaml"] = "base_model: m\nadapter: qlora\nmicro_batch_size: 1\nsequence_len: 512\n";
  CHECK(load(fs, {"q.yaml"}).error().to_string() ==
        "q.yaml:2: adapter: qlora needs load_in_4bit: true; add load_in_4bit: true (axolotl refuses qlora without it)");
  fs.files["rl.yaml"] = "base_model: m\nrl: ppo\nsequence_len: 512\n";
  CHECK(load(fs, {"rl.yaml"}).error().to_string() ==
        "rl.yaml:2: rl: ppo is not modelled; memplan models SFT, DPO (dpo, ipo, kto, orpo, simpo, cpo) and GRPO");
  // KTO keeps a reference model (TRL KTOTrainer); ORPO and CPO do not.
  fs.files["kto.yaml"] = "base_model: m\nrl: kto\nsequence_len: 512\n";
  CHECK(load_ok(fs, {"kto.yaml"}).inputs.config.dpo.ref_model == RefModel::kAuto);
  CHECK(load_ok(fs, {"kto.yaml"}).inputs.config.method == Method::kDpo);
  fs.files["cpo.yaml"] = "base_model: m\nrl: cpo\nsequence_len: 512\n";
  CHECK(load_ok(fs, {"cpo.yaml"}).inputs.config.dpo.ref_model == RefModel::kNone);
  fs.files["auto.yaml"] = "base_model: m\nsequence_len: 512\nbatch_size: 32\nmicro_batch_size: 4\n";
  LoadedConfig a = load_ok(fs, {"auto.yaml"});
  CHECK(a.inputs.config.grad_accum == 8);
  CHECK(origin(a, "grad_accum") == "derived (batch_size 32 / micro_batch_size 4 (auto.yaml:3))");
  CHECK(a.inputs.config.torch_dtype == DType::kBFloat16);
  CHECK(origin(a, "torch_dtype") == "default (axolotl bf16: auto, assuming a GPU with bf16 (Ampere or newer))");
}

TEST_CASE("llama-factory: vision-language keys") {
  MemoryFileSystem fs;
  fs.files["vl.yaml"] = "model_name_or_path: Qwen/Qwen2.5-VL-7B-Instruct\nimage_max_pixels: 262144\n"
                        "finetuning_type: full\nfreeze_vision_tower: false\nfreeze_multi_modal_projector: false\n"
                        "bf16: true\n";
  LoadedConfig c = load_ok(fs, {"vl.yaml"});
  const VisionInputs& v = c.inputs.config.vision;
  CHECK(v.image_height == 512);  // a square of 262,144 pixels
  CHECK(v.image_width == 512);
  CHECK(v.train_vision_tower);
  CHECK(v.train_projector);
  CHECK(v.frozen_dtype == DType::kBFloat16);  // full fine-tuning upcasts only what trains
  CHECK(origin(c, "train_vision_tower") == "vl.yaml:4");

  // Defaults: both frozen; an absurd pixel bound plans like the processor's own cap.
  fs.files["d.yaml"] = "model_name_or_path: m\nstage: sft\ncutoff_len: 1024\nimage_max_pixels: 9000000000000000000\n"
                       "train_mm_proj_only: true\n";
  LoadedConfig d = load_ok(fs, {"d.yaml"});
  CHECK_FALSE(d.inputs.config.vision.train_vision_tower);
  CHECK(d.inputs.config.vision.train_projector);
  CHECK(d.inputs.config.vision.image_height == 65536);
  bool warned = false;
  for (const auto& w : d.diagnostics) warned = warned || w.message.find("train_mm_proj_only freezes the language model") == 0;
  CHECK(warned);
}

TEST_CASE("llama-factory: LoRA by default, checkpointing by default, full fine-tuning upcasts") {
  MemoryFileSystem fs;
  fs.files["lf.yaml"] = "model_name_or_path: m\nstage: sft\nfinetuning_type: full\ncutoff_len: 1024\nbf16: true\n";
  LoadedConfig c = load_ok(fs, {"lf.yaml"});
  const TrainingConfig& t = c.inputs.config;
  CHECK_FALSE(t.lora.enabled);
  CHECK(t.gradient_checkpointing);
  CHECK(t.torch_dtype == DType::kFloat32);
  CHECK(t.autocast == DType::kBFloat16);
  CHECK(t.micro_batch == 8);
  CHECK(origin(c, "torch_dtype") == "derived (float32: full fine-tuning upcasts trainable weights (bf16 at lf.yaml:5))");

  fs.files["q.yaml"] = "model_name_or_path: m\nstage: dpo\nquantization_bit: 4\ncutoff_len: 1024\n"
                       "pref_loss: simpo\ndisable_gradient_checkpointing: true\n";
  LoadedConfig q = load_ok(fs, {"q.yaml"});
  CHECK(q.inputs.config.method == Method::kDpo);
  CHECK(q.inputs.config.lora.enabled);
  CHECK(q.inputs.config.lora.r == 8);
  CHECK(q.inputs.config.lora.alpha == 16.0);
  CHECK(q.inputs.config.lora.all_linear);
  CHECK(q.inputs.config.quant.load_in_4bit);
  CHECK(q.inputs.config.quant.double_quant);
  CHECK(q.inputs.config.dpo.ref_model == RefModel::kNone);
  CHECK_FALSE(q.inputs.config.gradient_checkpointing);
  fs.files["kto.yaml"] = "model_name_or_path: m\nstage: kto\nfinetuning_type: lora\n";
  LoadedConfig kto = load_ok(fs, {"kto.yaml"});
  CHECK(kto.inputs.config.method == Method::kDpo);
  CHECK(kto.inputs.config.dpo.ref_model == RefModel::kAuto);
  fs.files["rm.yaml"] = "model_name_or_path: m\nstage: rm\nfinetuning_type: lora\n";
  CHECK(load(fs, {"rm.yaml"}).error().to_string() ==
        "rm.yaml:2: stage: rm is not modelled; memplan models stage: pt, sft, dpo and kto; stage: sft with the same "
        "--model sizes the backbone alone (a lower bound)");
}

TEST_CASE("checkpointing's use_reentrant: gradient_checkpointing_kwargs, LLaMA-Factory's use_reentrant_gc") {
  MemoryFileSystem fs;
  // LLaMA-Factory passes use_reentrant_gc (default true) as gradient_checkpointing_kwargs.
  fs.files["lf.yaml"] = "model_name_or_path: m\nstage: sft\ncutoff_len: 1024\n";
  LoadedConfig lf = load_ok(fs, {"lf.yaml"});
  CHECK(lf.inputs.config.checkpoint_reentrant == true);
  CHECK(origin(lf, "use_reentrant") == "default (LLaMA-Factory use_reentrant_gc = true)");
  fs.files["lf2.yaml"] = "model_name_or_path: m\nstage: sft\nfinetuning_type: lora\nuse_reentrant_gc: false\n";
  LoadedConfig lf2 = load_ok(fs, {"lf2.yaml"});
  CHECK(lf2.inputs.config.checkpoint_reentrant == false);
  CHECK(origin(lf2, "use_reentrant") == "lf2.yaml:4");
  fs.files["lf3.yaml"] = "model_name_or_path: m\nstage: sft\nfinetuning_type: lora\ndisable_gradient_checkpointing: true\n";
  CHECK_FALSE(load_ok(fs, {"lf3.yaml"}).inputs.config.checkpoint_reentrant.has_value());
  // TrainingArguments' gradient_checkpointing_kwargs: a mapping, or a command line's JSON string.
  fs.files["hf.yaml"] = "model_name_or_path: m\ngradient_checkpointing: true\n"
                        "gradient_checkpointing_kwargs:\n  use_reentrant: true\n";
  LoadedConfig hf = load_ok(fs, {"hf.yaml"}, "hf");
  CHECK(hf.inputs.config.checkpoint_reentrant == true);
  CHECK(origin(hf, "use_reentrant") == "hf.yaml:4");
  fs.files["hf2.yaml"] = "model_name_or_path: m\ngradient_checkpointing: true\n"
                         "gradient_checkpointing_kwargs: '{\"use_reentrant\": false}'\n";
  CHECK(load_ok(fs, {"hf2.yaml"}, "hf").inputs.config.checkpoint_reentrant == false);
  fs.files["hf3.yaml"] = "model_name_or_path: m\ngradient_checkpointing_kwargs: use_reentrant\n";
  CHECK(load(fs, {"hf3.yaml"}, "hf").error().to_string() ==
        "hf3.yaml:2: gradient_checkpointing_kwargs 'use_reentrant' is not a JSON object; write "
        "gradient_checkpointing_kwargs: {use_reentrant: false}");
  fs.files["ax.yaml"] = "base_model: m\nmicro_batch_size: 1\ngradient_checkpointing: true\n"
                        "gradient_checkpointing_kwargs:\n  use_reentrant: false\n";
  CHECK(load_ok(fs, {"ax.yaml"}, "axolotl").inputs.config.checkpoint_reentrant == false);
  // And on the command line.
  CliRun bad = run_cli({"estimate", "--model", "llama-3.1-8b", "--gradient-checkpointing", "--use-reentrant", "yes"});
  CHECK(bad.code == 2);
  CHECK(bad.err == "memplan: error: --use-reentrant = 'yes' must be true or false\n");
  auto j = estimate_json({"--model", "llama-3.1-8b", "--gradient-checkpointing", "--use-reentrant", "true"});
  CHECK(j["training"]["use_reentrant"] == true);
}

TEST_CASE("torchtune: builders, LoRA modules, null max_seq_len") {
  MemoryFileSystem fs;
  fs.files["tt.yaml"] =
      "model:\n"                                                    // 1
      "  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\n" // 2
      "  lora_attn_modules: ['q_proj', 'output_proj']\n"            // 3
      "  lora_rank: 8\n"                                            // 4
      "tokenizer:\n"                                                // 5
      "  _component_: torchtune.models.llama3.llama3_tokenizer\n"   // 6
      "  max_seq_len: null\n"                                       // 7
      "batch_size: 2\n"                                             // 8
      "optimizer:\n"                                                // 9
      "  _component_: bitsandbytes.optim.PagedAdamW8bit\n"          // 10
      "loss:\n"                                                     // 11
      "  _component_: torchtune.rlhf.loss.DPOLoss\n"                // 12
      "dtype: bf16\n";                                              // 13
  LoadedConfig c = load_ok(fs, {"tt.yaml"});
  const TrainingConfig& t = c.inputs.config;
  CHECK(c.inputs.model_name == "meta-llama/Llama-3.1-8B");
  CHECK(t.method == Method::kDpo);
  CHECK(t.lora.enabled);
  CHECK_FALSE(t.quant.load_in_4bit);
  CHECK(t.lora.target_modules == std::vector<std::string>{"q_proj", "o_proj"});
  CHECK(t.optim.kind == OptimizerKind::kPagedAdamW8bit);
  CHECK(t.torch_dtype == DType::kBFloat16);
  CHECK_FALSE(t.autocast.has_value());
  CHECK(warnings(c) == std::vector<std::string>{
                           "tt.yaml:7: tokenizer.max_seq_len is null: sequences are not truncated, so their length "
                           "depends on the data; memplan assumes 1024 tokens (pass --seq-len)"});
  const ValueSite* s = c.primary_site(Knob::kSeqLen);
  CHECK(s->present);  // an explicit null can be replaced
  CHECK(s->line == 7);

  // Builders of catalog models (torchtune.models.phi4, llama3_3), QLoRA prefix included.
  fs.files["phi4.yaml"] = "model:\n  _component_: torchtune.models.phi4.qlora_phi4_14b\nbatch_size: 2\n";
  CHECK(load_ok(fs, {"phi4.yaml"}).inputs.model_name == "microsoft/phi-4");
  fs.files["l33.yaml"] = "model:\n  _component_: torchtune.models.llama3_3.lora_llama3_3_70b\nbatch_size: 2\n";
  CHECK(load_ok(fs, {"l33.yaml"}).inputs.model_name == "meta-llama/Llama-3.3-70B-Instruct");

  fs.files["unknown.yaml"] = "model:\n  _component_: torchtune.models.llama3_1.llama3_1_9b\nbatch_size: 2\n";
  LoadedConfig u = load_ok(fs, {"unknown.yaml"});
  CHECK(warnings(u) == std::vector<std::string>{
                           "unknown.yaml:2: memplan does not know the torchtune builder 'llama3_1_9b'; did you mean "
                           "'llama3_1_8b'?"});
  CHECK(u.inputs.model_hint == "unknown.yaml:2: torchtune builder 'torchtune.models.llama3_1.llama3_1_9b' has no known "
                               "Hugging Face checkpoint; give --model ID|PATH");
}

TEST_CASE("lightning/hydra: a main file plus a stage file that overrides it") {
  MemoryFileSystem fs;
  fs.files["conf/config.yaml"] =
      "data_loader:\n"                                    // 1
      "  batch_size: 45\n"                                // 2
      "training:\n"                                       // 3
      "  trainer:\n"                                      // 4
      "    accumulate_grad_batches: 5  # effective 225\n" // 5
      "    devices: 2\n"                                  // 6
      "    precision: 16-mixed\n"                         // 7
      "    acumulate_grad_batches: 3\n"                   // 8
      "model:\n"                                          // 9
      "  n_layers: 4\n";                                  // 10
  fs.files["conf/stage/01.yaml"] = "# stage 01\ndata_loader:\n  batch_size: 32\nn_positives: 32\n";
  LoadedConfig c = load_ok(fs, {"conf/config.yaml", "conf/stage/01.yaml"});
  const TrainingConfig& t = c.inputs.config;
  CHECK(c.dialect == Dialect::kLightning);
  CHECK(t.micro_batch == 32);
  CHECK(t.grad_accum == 5);
  CHECK(t.parallel.num_gpus == 2);
  CHECK(t.torch_dtype == DType::kFloat32);
  CHECK(t.autocast == DType::kFloat16);
  CHECK(origin(c, "batch") == "conf/stage/01.yaml:3");
  CHECK(origin(c, "grad_accum") == "conf/config.yaml:5");
  CHECK(warnings(c) == std::vector<std::string>{"conf/config.yaml:8: unknown key 'training.trainer."
                                                "acumulate_grad_batches'; did you mean "
                                                "'training.trainer.accumulate_grad_batches'?"});
  CHECK(c.inputs.model_hint ==
        "conf/config.yaml:10: the model is the project's own (model: ...), not a Hugging Face id; give --model "
        "ID|PATH for an equivalent architecture or --model-params N");
  const ValueSite* b = c.primary_site(Knob::kBatch);
  CHECK(b->file == 1);
  CHECK(b->line == 3);
  const ValueSite* g = c.primary_site(Knob::kGradAccum);
  CHECK(g->file == 0);
  CHECK(g->line == 5);
  CHECK(c.primary_site(Knob::kSeqLen)->no_insert_reason ==
        "this layout has no standard sequence-length key; name yours with --keys seq_len=KEY");
}

TEST_CASE("seed 002's stage files: n_positives and n_negatives make the texts per anchor") {
  MemoryFileSystem fs;
  fs.files["conf/config.yaml"] = "data_loader:\n  batch_size: 45\ntraining:\n  trainer:\n    accumulate_grad_batches: 5\n";
  fs.files["conf/text_curriculum/01_stage.yaml"] = "n_positives: 32\nn_negatives: 24\n";
  fs.files["conf/text_curriculum/02_stage.yaml"] = "n_positives: 16\nn_negatives: 8\n";
  LoadedConfig one = load_ok(fs, {"conf/config.yaml", "conf/text_curriculum/01_stage.yaml"});
  CHECK(one.inputs.config.contrastive.texts_per_example == 1 + 32 + 24);
  CHECK(origin(one, "texts_per_example") == "conf/text_curriculum/01_stage.yaml:2");
  LoadedConfig two = load_ok(fs, {"conf/config.yaml", "conf/text_curriculum/02_stage.yaml"});
  CHECK(two.inputs.config.contrastive.texts_per_example == 1 + 16 + 8);
  // Without the stage file nothing is contrastive; negatives alone mean one positive each.
  CHECK(load_ok(fs, {"conf/config.yaml"}).inputs.config.contrastive.texts_per_example == 0);
  fs.files["flat.yaml"] = "micro_batch_size: 8\nmax_seq_len: 256\ndata:\n  num_negatives: 3\n";
  LoadedConfig flat = load_ok(fs, {"flat.yaml"});
  CHECK(flat.inputs.config.contrastive.texts_per_example == 1 + 1 + 3);
  fs.files["bad.yaml"] = "data_loader:\n  batch_size: 4\nn_positives: 0\n";
  auto bad = load(fs, {"bad.yaml"});
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().to_string().find("bad.yaml:3") != std::string::npos);
  CHECK(bad.error().message ==
        "1 + 0 positives + 0 negatives = 1 texts per anchor: contrastive training needs 2 to 1048576");
}

TEST_CASE("flat in-house configs: spellings, precision, custom models") {
  MemoryFileSystem fs;
  fs.files["pre.yaml"] = "micro_batch_size: 2\ngradient_accumulation_steps: 32\nmax_seq_len: 1024\n"
                         "gradient_checkpointing: true\nprecision: bf16\nbatch_size: 4\nmax_seq_lne: 2048\n"
                         "model:\n  n_layers: 8\n";
  LoadedConfig c = load_ok(fs, {"pre.yaml"});
  const TrainingConfig& t = c.inputs.config;
  CHECK(c.dialect == Dialect::kFlat);
  CHECK(t.micro_batch == 2);
  CHECK(t.autocast == DType::kBFloat16);
  CHECK(t.torch_dtype == DType::kFloat32);
  CHECK(warnings(c) == std::vector<std::string>{
                           "pre.yaml:6: batch_size = 4 contradicts micro_batch_size = 2 (pre.yaml:1); memplan uses "
                           "micro_batch_size",
                           "pre.yaml:7: unknown key 'max_seq_lne'; did you mean 'max_seq_len'?"});
  CHECK(c.inputs.model_hint ==
        "pre.yaml:9: the model is described by the project's own keys (model: {...}), not a Hugging Face id, and "
        "memplan did not find its shape there (n_layers, d_model, n_heads); give --model ID|PATH for an equivalent "
        "architecture, --model-params N, or --hidden-size --num-hidden-layers --num-attention-heads");
  CHECK_FALSE(c.inputs.custom_model.has_value());
}

TEST_CASE("deepspeed next to a trainer config: paths, agreement, GPU count") {
  MemoryFileSystem fs;
  fs.files["conf/train.yaml"] =
      "model_name_or_path: meta-llama/Llama-3.1-8B\n"  // 1
      "per_device_train_batch_size: 4\n"              // 2
      "gradient_accumulation_steps: 2\n"              // 3
      "bf16: true\n"                                  // 4
      "gradient_checkpointing: true\n"                // 5
      "deepspeed: ds/z3.json\n";                      // 6
  fs.files["conf/ds/z3.json"] =
      "{\n"
      "  \"train_micro_batch_size_per_gpu\": 8,\n"
      "  \"gradient_accumulation_steps\": \"auto\",\n"
      "  \"train_batch_size\": 64,\n"
      "  \"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"cpu\"}},\n"
      "  \"fp16\": {\"enabled\": true}\n"
      "}\n";
  LoadedConfig c = load_ok(fs, {"conf/train.yaml"});
  const TrainingConfig& t = c.inputs.config;
  REQUIRE(c.files.size() == 2);
  CHECK(c.files[1].path == "conf/ds/z3.json");
  CHECK(c.files[1].deepspeed);
  CHECK(t.micro_batch == 4);
  CHECK(t.parallel.sharding == ShardingStrategy::kZero3);
  CHECK(t.parallel.offload_params);
  CHECK(t.parallel.num_gpus == 8);
  CHECK(origin(c, "num_gpus") == "derived (train_batch_size 64 / (4 x 2) at conf/ds/z3.json:4)");
  CHECK(origin(c, "sharding") == "conf/ds/z3.json:5");
  CHECK(warnings(c) == std::vector<std::string>{
                           "conf/ds/z3.json:2: train_micro_batch_size_per_gpu = 8 contradicts the trainer's batch = 4 "
                           "(conf/train.yaml:2); the trainer refuses to start with both; memplan uses 4",
                           "conf/ds/z3.json:6: fp16.enabled: true contradicts the trainer's precision (bf16); memplan "
                           "uses the trainer's"});
  int mirrors = 0;
  for (const auto& s : c.sites)
    if (s.mirror) {
      ++mirrors;
      CHECK(s.file == 1);
      if (s.knob == Knob::kGlobalBatch) CHECK(s.world_size == 8);
    }
  CHECK(mirrors == 2);  // the micro-batch and train_batch_size; "auto" follows the YAML

  fs.files["conf/missing.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: 4\ndeepspeed: none.json\n";
  CHECK(load(fs, {"conf/missing.yaml"}).error().to_string() ==
        "conf/missing.yaml:3: DeepSpeed config 'none.json' not found (looked for conf/none.json, none.json); fix the "
        "path, or pass the JSON with another --config");
}

TEST_CASE("deepspeed on its own, and given with --config next to YAML") {
  MemoryFileSystem fs;
  fs.files["ds.json"] = "{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 4,\n"
                        " \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"},"
                        " \"stgae\": 1}}\n";
  LoadedConfig c = load_ok(fs, {"ds.json"});
  CHECK(c.dialect == Dialect::kDeepSpeed);
  CHECK(c.inputs.config.micro_batch == 2);
  CHECK(c.inputs.config.grad_accum == 4);
  CHECK(c.inputs.config.parallel.offload_optimizer);
  CHECK(warnings(c) == std::vector<std::string>{
                           "ds.json:2: unknown key 'zero_optimization.stgae'; did you mean 'zero_optimization.stage'?",
                           "ds.json: zero2 shards across GPUs, but the config does not say how many; memplan assumes "
                           "1 unless --num-gpus says otherwise"});
  fs.files["t.yaml"] = "base_model: m\nmicro_batch_size: 2\ngradient_accumulation_steps: 4\nsequence_len: 512\n";
  LoadedConfig both = load_ok(fs, {"t.yaml", "ds.json"});
  CHECK(both.dialect == Dialect::kAxolotl);
  CHECK(both.files[1].path == "ds.json");
  CHECK(both.inputs.config.parallel.sharding == ShardingStrategy::kZero2);
}

TEST_CASE("key maps: inline, from a file, and their errors") {
  MemoryFileSystem fs;
  auto km = parse_key_map("batch=opt.bs, grad_accum=opt.accum", fs);
  REQUIRE(km.has_value());
  REQUIRE(km->size() == 2);
  CHECK((*km)[1].path == std::vector<std::string>{"opt", "accum"});
  CHECK(parse_key_map("bacth=a.b", fs).error().to_string() == "--keys: unknown input 'bacth'; did you mean 'batch'?");
  CHECK(parse_key_map("batch=", fs).error().to_string() ==
        "--keys: expected INPUT=KEY.PATH, got \"batch=\"; e.g. --keys "
        "batch=data_loader.batch_size,grad_accum=trainer.accumulate_grad_batches");
  CHECK(parse_key_map("batch", fs).error().to_string() ==
        "--keys: expected INPUT=KEY.PATH,... or a mapping file, got \"batch\"; e.g. --keys "
        "batch=data_loader.batch_size,grad_accum=trainer.accumulate_grad_batches");
  fs.files["k.yaml"] = "batch: opt.bs\nseqlen: data.len\n";
  CHECK(parse_key_map("k.yaml", fs).error().to_string() == "k.yaml:2: --keys: unknown input 'seqlen'; did you mean 'seq_len'?");

  fs.files["c.yaml"] = "opt:\n  bs: 6\n  accum: 3\nexp:\n  model: meta-llama/Llama-3.1-8B\n";
  LoadedConfig c = *load(fs, {"c.yaml"}, {}, *parse_key_map("batch=opt.bs,grad_accum=opt.accum,model=exp.model", fs));
  CHECK(c.dialect == Dialect::kKeyMap);
  CHECK(c.inputs.config.micro_batch == 6);
  CHECK(c.inputs.config.grad_accum == 3);
  CHECK(c.inputs.model_name == "meta-llama/Llama-3.1-8B");
  CHECK(origin(c, "batch") == "c.yaml:2");
  CHECK(c.primary_site(Knob::kBatch)->key() == "opt.bs");

  // A key map on top of a detected dialect moves that value's site.
  fs.files["l.yaml"] = "data_loader:\n  batch_size: 4\n  seq: 2048\ntrainer:\n  accumulate_grad_batches: 2\n";
  LoadedConfig l = *load(fs, {"l.yaml"}, {}, *parse_key_map("seq_len=data_loader.seq", fs));
  CHECK(l.dialect == Dialect::kLightning);
  CHECK(l.inputs.config.seq_len == 2048);
  CHECK(l.primary_site(Knob::kSeqLen)->key() == "data_loader.seq");
  CHECK(l.primary_site(Knob::kSeqLen)->present);
}

TEST_CASE("memplan comment directives name the GPU for check") {
  MemoryFileSystem fs;
  fs.files["g.yaml"] = "# memplan: gpu=H100-80GB\nbase_model: m\n# memplan: gpu-memory=80GiB gpuu=x\nsequence_len: 512\n";
  LoadedConfig c = load_ok(fs, {"g.yaml"});
  CHECK(c.gpu == std::optional<std::string>("H100-80GB"));
  CHECK(c.gpu_memory == Bytes::gib(80));
  CHECK(c.gpu_where.to_string() == "g.yaml:3");
  CHECK(warnings(c) == std::vector<std::string>{"g.yaml:3: unknown memplan directive 'gpuu=x'; did you mean 'gpu'?"});
}

TEST_CASE("--config on the command line: dialect flag, flags override files, custom-model advice") {
  const std::string flat = kExamples + "flat-pretrain.yaml";
  // The model described in the file is built (docs/configs.md#custom-models). By hand, Llama-style,
  // untied: embeddings and head 2 x 50257 x 1536 = 154,389,504; per layer q,k,v,o 4 x 1536^2 =
  // 9,437,184, gated MLP 3 x 1536 x 1536 = 7,077,888, two norms 3,072: 16,518,144 x 8 layers =
  // 132,145,152; final norm 1,536. Total 286,536,192.
  CliRun r = run_cli({"estimate", "--config", flat, "--format", "json"});
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["estimate"]["parameters"]["total"] == 286'536'192);
  CHECK(j["inputs"]["assumptions"] ==
        nlohmann::json::array({"no key/value head count: assumed 12 (one per attention head, no GQA)",
                               "embeddings and output head assumed untied",
                               "layers assumed Llama-style: RMSNorm, gated SiLU MLP, no biases"}));
  CHECK(j["inputs"]["sources"]["model"] == flat + ":7");
  // The same model from flags named like config.json.
  CliRun f = run_cli({"estimate", "--hidden-size", "1536", "--num-hidden-layers", "8", "--num-attention-heads", "12",
                      "--intermediate-size", "1536", "--vocab-size", "50257", "--format", "json"});
  REQUIRE(f.code == 0);
  CHECK(nlohmann::json::parse(f.out)["estimate"]["parameters"]["total"] == 286'536'192);
  // A flag overrides the file's value: 12 layers add 4 x 16,518,144.
  auto more = nlohmann::json::parse(run_cli({"estimate", "--config", flat, "--num-hidden-layers", "12", "--format",
                                             "json"}).out);
  CHECK(more["estimate"]["parameters"]["total"] == 286'536'192 + 4 * 16'518'144);
  CliRun both = run_cli({"estimate", "--model", "llama-3.1-8b", "--hidden-size", "1024"});
  CHECK(both.code == 2);
  CHECK(both.err == "memplan: error: --hidden-size describe a custom model; they cannot be combined with --model\n");
  CliRun partial = run_cli({"estimate", "--hidden-size", "1024"});
  CHECK(partial.err ==
        "memplan: error: custom model (--hidden-size ...): cannot build the model without the number of layers "
        "(n_layers / num_hidden_layers), the number of attention heads (n_heads / num_attention_heads); write them, "
        "or give --model ID|PATH for an equivalent architecture, or --model-params N\n");
  CliRun d = run_cli({"estimate", "--dialect", "hf", "--model", "llama-3.1-8b"});
  CHECK(d.code == 2);
  CHECK(d.err == "memplan: error: --dialect and --keys describe config files; add --config FILE\n");
  // A flag beats the file.
  auto from_file = estimate_json({"--config", kExamples + "hf-trl-sft-lora.yaml", "--batch", "1"});
  CHECK(from_file["training"]["micro_batch"] == 1);
}

TEST_CASE("the shipped Qwen2.5-VL example: its image bound becomes the tower's input") {
  // image_max_pixels 262,144 is a 512 x 512 square; smart_resize rounds 512 / 28 = 18.3 down to 18:
  // 504 x 504, 36 x 36 = 1296 patches, 1296 / 4 = 324 image tokens in the 2048-token sequence.
  auto j = estimate_json({"--config", kExamples + "llama-factory-qwen2.5-vl-lora.yaml"});
  CHECK(j["training"]["vision"]["image_height"] == 512);
  CHECK(j["training"]["vision"]["train_vision_tower"] == false);
  CHECK(j["model"]["vision"]["model_type"] == "qwen2_5_vl");
  CHECK(j["model"]["parameters"] == 8'292'166'656LL);
  bool said = false;
  for (const auto& a : j["estimate"]["assumptions"])
    said = said || a.get<std::string>().find("1 image(s) per sequence at 504x504 after resizing, 1296 patches through "
                                             "the tower and 324 image tokens") != std::string::npos;
  CHECK(said);
}

TEST_CASE("the shipped Llama 3.2 Vision example: LoRA on every text Linear, one image of 4 tiles per sequence") {
  // lora_target: all with the tower frozen (LLaMA-Factory) is every Linear of the 40 text layers,
  // the cross-attention ones included: 32 self-attention layers and 8 cross-attention layers have
  // the same Linears. r = 32: q, o 32 x (4096 + 4096); k, v 32 x (4096 + 1024); gate, up, down
  // 32 x (4096 + 14336): 524,288 + 327,680 + 1,769,472 = 2,621,440 per layer, x 40.
  auto j = estimate_json({"--config", kExamples + "llama-factory-llama3.2-vision-lora.yaml"});
  CHECK(j["model"]["model_type"] == "mllama");
  CHECK(j["model"]["parameters"] == 10'670'220'835LL);
  CHECK(j["training"]["micro_batch"] == 4);
  CHECK(j["training"]["seq_len"] == 2048);
  CHECK(j["estimate"]["parameters"]["trainable"] == 40LL * 2'621'440);
  bool said = false;
  for (const auto& a : j["estimate"]["assumptions"])
    said = said || a.get<std::string>().find("1 image(s) per sequence, each 4 tiles of 560x560 pixels (6432 positions "
                                             "through the frozen tower, 6404 image tokens read by each of the 8 "
                                             "cross-attention layers") != std::string::npos;
  CHECK(said);
}

TEST_CASE("torch_dtype: auto takes the checkpoint's dtype once the model is known") {
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string path = dir + "/memplan-auto-dtype.yaml";
  std::ofstream(path) << "model_name_or_path: meta-llama/Llama-3.1-8B\ntorch_dtype: auto\nbf16: true\n"
                         "gradient_checkpointing: true\n";
  CliRun r = run_cli({"estimate", "--config", path, "--show-config", "--format", "json"});
  std::filesystem::remove(path);
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["inputs"][5]["input"] == "torch_dtype");
  CHECK(j["inputs"][5]["value"] == "bfloat16");  // configs/models/llama-3.1-8b.json: "torch_dtype": "bfloat16"
  CHECK(j["inputs"][5]["source"] == "derived (auto: the checkpoint's bfloat16)");
}

TEST_CASE("--show-config with a custom model prints what the files say, then the error") {
  const std::string path = std::filesystem::temp_directory_path().string() + "/memplan-custom-partial.yaml";
  std::ofstream(path) << "model:\n  n_layers: 8\nmicro_batch_size: 2\nmax_seq_len: 1024\n";
  CliRun r = run_cli({"estimate", "--config", path, "--show-config"});
  std::filesystem::remove(path);
  CHECK(r.code == 2);
  CHECK(r.out.find("\nmodel                   (none)  ") != std::string::npos);
  CHECK(r.err.rfind("memplan: error: no model given; ", 0) == 0);
}

TEST_CASE("--show-config says where every value came from") {
  CliRun r = run_cli({"estimate", "--config", kExamples + "axolotl-qlora.yaml", "--batch", "3", "--show-config"});
  CHECK(r.code == 0);
  CHECK(r.out.find("dialect: axolotl (base_model, sequence_len, lora_target_linear, adapter, num_epochs, "
                   "micro_batch_size)\n") == 0);
  // Columns: the longest input name (bnb_4bit_use_double_quant, 25) and value (the model id, 23), plus 2.
  CHECK(r.out.find("\nbatch" + std::string(22, ' ') + "3" + std::string(24, ' ') + "flag --batch\n") !=
        std::string::npos);
  CHECK(r.out.find("\nseq_len" + std::string(20, ' ') + "4096" + std::string(21, ' ') + kExamples +
                   "axolotl-qlora.yaml:20 (sequence_len)\n") != std::string::npos);
  CliRun j = run_cli({"estimate", "--config", kExamples + "axolotl-qlora.yaml", "--show-config", "--format", "json"});
  auto js = nlohmann::json::parse(j.out);
  CHECK(js["dialect"] == "axolotl");
  CHECK(js["inputs"][2]["input"] == "batch");
  CHECK(js["inputs"][2]["value"] == "2");
  CHECK(js["inputs"][2]["source"] == kExamples + "axolotl-qlora.yaml:25 (micro_batch_size)");
}

// Every shipped example against the same configuration written as flags, both through the
// engine: the estimate and the engine inputs must be identical.
TEST_CASE("every shipped example gives the same estimate as the equivalent flags") {
  struct Case {
    std::vector<std::string> config;
    std::vector<std::string> flags;
  };
  const std::vector<Case> cases = {
      {{"--config", kExamples + "hf-trl-sft-lora.yaml"},
       {"--model", "meta-llama/Llama-3.1-8B-Instruct", "--torch-dtype", "bfloat16", "--attn-implementation", "sdpa",
        "--use-peft", "--lora-r", "16", "--lora-alpha", "32", "--lora-dropout", "0.05", "--lora-target-modules",
        "all-linear", "--seq-len", "2048", "--batch", "4", "--grad-accum", "8", "--bf16", "--gradient-checkpointing",
        "--optim", "adamw_torch_fused"}},
      {{"--config", kExamples + "hf-trl-grpo.yaml"},
       {"--model", "meta-llama/Llama-3.1-8B-Instruct", "--method", "grpo", "--torch-dtype", "bfloat16", "--use-peft",
        "--lora-r", "32", "--lora-alpha", "64", "--lora-target-modules", "q_proj,k_proj,v_proj,o_proj", "--batch", "8",
        "--grad-accum", "4", "--num-generations", "8", "--max-prompt-length", "512", "--max-completion-length", "1024",
        "--beta", "0.04", "--temperature", "0.9", "--use-vllm", "--vllm-mode", "colocate",
        "--vllm-gpu-memory-utilization", "0.35", "--bf16", "--gradient-checkpointing"}},
      {{"--config", kExamples + "axolotl-qlora.yaml"},
       {"--model", "meta-llama/Llama-3.1-8B", "--use-peft", "--load-in-4bit", "--use-bnb-nested-quant", "--lora-r",
        "32", "--lora-alpha", "16", "--lora-dropout", "0.05", "--lora-target-modules", "all-linear", "--seq-len", "4096",
        "--batch", "2", "--grad-accum", "4", "--optim", "paged_adamw_8bit", "--torch-dtype", "bfloat16", "--bf16",
        "--gradient-checkpointing", "--attn-implementation", "flash_attention_2"}},
      {{"--config", kExamples + "llama-factory-lora-sft.yaml"},
       {"--model", "meta-llama/Llama-3.1-8B-Instruct", "--use-peft", "--lora-r", "16", "--lora-alpha", "32",
        "--lora-dropout", "0", "--lora-target-modules", "all-linear", "--seq-len", "2048", "--batch", "2",
        "--grad-accum", "8", "--torch-dtype", "bfloat16", "--bf16", "--gradient-checkpointing", "--use-reentrant",
        "true", "--zero-stage", "2", "--offload-optimizer"}},
      {{"--config", kExamples + "torchtune-llama3_1-8b-qlora.yaml"},
       {"--model", "meta-llama/Llama-3.1-8B", "--use-peft", "--load-in-4bit", "--bnb-4bit-quant-type", "nf4",
        "--use-bnb-nested-quant", "--lora-r", "16", "--lora-alpha", "32", "--lora-dropout", "0",
        "--lora-target-modules", "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", "--seq-len", "4096", "--batch",
        "4", "--grad-accum", "4", "--torch-dtype", "bf16", "--optim", "adamw_torch_fused", "--gradient-checkpointing",
        "--device", "cuda", "--loss-kernel", "chunked", "--model-code", "torchtune"}},
      {{"--config", kExamples + "lightning/config.yaml", "--config", kExamples + "lightning/stages/01_long_context.yaml"},
       {"--model", "meta-llama/Llama-3.1-8B", "--batch", "2", "--grad-accum", "16", "--seq-len", "4096", "--bf16",
        "--gradient-checkpointing", "--num-gpus", "8", "--nodes", "1", "--zero-stage", "3"}},
      {{"--config", kExamples + "lightning/config.yaml", "--config",
        kExamples + "lightning/stages/02_short_context.yaml"},
       {"--model", "meta-llama/Llama-3.1-8B", "--batch", "8", "--grad-accum", "4", "--seq-len", "512", "--bf16",
        "--gradient-checkpointing", "--num-gpus", "8", "--zero-stage", "3"}},
      {{"--config", kExamples + "flat-pretrain.yaml", "--model-params", "512M"},
       {"--model-params", "512M", "--batch", "2", "--grad-accum", "32", "--seq-len", "1024", "--num-gpus", "4",
        "--gradient-checkpointing", "--bf16", "--optim", "adamw"}},
      {{"--config", kExamples + "custom-keys.yaml", "--keys", kExamples + "custom-keys.map.yaml"},
       {"--model", "meta-llama/Llama-3.1-8B", "--batch", "4", "--grad-accum", "16", "--gradient-checkpointing",
        "--seq-len", "2048"}},
  };
  for (const auto& c : cases) {
    INFO(c.config[1]);
    const nlohmann::json from_config = estimate_json(c.config);
    const nlohmann::json from_flags = estimate_json(c.flags);
    CHECK(from_config["training"] == from_flags["training"]);
    CHECK(from_config["model"] == from_flags["model"]);
    CHECK(from_config["estimate"] == from_flags["estimate"]);
  }
  // deepspeed-zero3.json sets stage3_prefetch_bucket_size 5e8, which no flag says (the flags get
  // DeepSpeed's 5e7): the same inputs and model, and gathered parameters of two whole layers
  // instead of one layer + 5e7 elements. Llama-3.1-8B's layer by hand: q, o 4096^2, k, v
  // 4096 x 1024, MLP 3 x 4096 x 14336, two norms of 4096 = 218,112,000 parameters, bf16.
  const nlohmann::json ds = estimate_json({"--config", kExamples + "deepspeed-zero3.json", "--model", "llama-3.1-8b"});
  const nlohmann::json flags = estimate_json({"--model", "llama-3.1-8b", "--batch", "4", "--grad-accum", "8", "--bf16",
                                              "--num-gpus", "8", "--zero-stage", "3", "--optim", "adamw_torch"});
  CHECK(ds["training"] == flags["training"]);
  CHECK(ds["model"] == flags["model"]);
  const auto gathered = [](const nlohmann::json& j) {
    for (const auto& c : j["estimate"]["components"])
      if (c["name"] == "gathered_parameters") return c["bytes"].get<std::int64_t>();
    return std::int64_t{-1};
  };
  CHECK(gathered(ds) == 2 * 218'112'000LL * 2);
  CHECK(gathered(flags) == 218'112'000LL * 2 + 50'000'000LL * 2);
}

// ---- issue 9: more layouts, interpolation, methods, unmodelled features ----

TEST_CASE("accelerate launcher configs: alone, and next to the trainer config") {
  MemoryFileSystem fs;
  fs.files["zero3.yaml"] = "compute_environment: LOCAL_MACHINE\ndeepspeed_config:\n  offload_optimizer_device: cpu\n"
                           "  offload_param_device: none\n  zero_stage: 3\ndistributed_type: DEEPSPEED\n"
                           "mixed_precision: bf16\nnum_machines: 2\nnum_processes: 16\nrdzv_backnd: static\n";
  LoadedConfig a = load_ok(fs, {"zero3.yaml"});
  CHECK(a.dialect == Dialect::kAccelerate);
  const TrainingConfig& c = a.inputs.config;
  CHECK(c.parallel.num_gpus == 8);  // 16 processes over 2 machines
  CHECK(c.parallel.nodes == 2);
  CHECK(c.parallel.world_size() == 16);
  CHECK(c.parallel.sharding == ShardingStrategy::kZero3);
  CHECK(c.parallel.offload_optimizer);
  CHECK_FALSE(c.parallel.offload_params);
  CHECK(c.autocast == DType::kBFloat16);
  CHECK(origin(a, "num_gpus") == "zero3.yaml:9");
  CHECK(origin(a, "sharding") == "zero3.yaml:5");
  CHECK(warnings(a) == std::vector<std::string>{"zero3.yaml:10: unknown key 'rdzv_backnd'; did you mean 'rdzv_backend'?"});
  CHECK(a.inputs.model_hint == "zero3.yaml is an accelerate launcher config, which names no model; give the training "
                               "config with another --config (memplan estimate --config train.yaml --config "
                               "zero3.yaml), or --model ID|PATH");

  // With a trainer config: the launch adds GPUs and sharding; the trainer's precision wins.
  fs.files["sft.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: 2\nfp16: true\n"
                         "gradient_checkpointing: true\n";
  fs.files["fsdp.yaml"] = "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 2\n"
                          "  fsdp_offload_params: true\nmixed_precision: bf16\nnum_processes: 4\n";
  LoadedConfig both = load_ok(fs, {"sft.yaml", "fsdp.yaml"});
  CHECK(both.dialect == Dialect::kHfTrl);
  CHECK(both.inputs.config.parallel.num_gpus == 4);
  CHECK(both.inputs.config.parallel.sharding == ShardingStrategy::kFsdpShardGradOp);
  CHECK(both.inputs.config.parallel.offload_params);
  CHECK(both.inputs.config.autocast == DType::kFloat16);
  CHECK(origin(both, "autocast") == "sft.yaml:3");
  CHECK(warnings(both).empty());
  CHECK(both.inputs.config.parallel.fsdp_version == 1);

  // FSDP2: accelerate's fsdp_config.fsdp_version, transformers' fsdp_config.version; 1 or 2 only.
  fs.files["fsdp2.yaml"] = "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n"
                           "  fsdp_reshard_after_forward: true\nnum_processes: 8\n";
  LoadedConfig v2 = load_ok(fs, {"sft.yaml", "fsdp2.yaml"});
  CHECK(v2.inputs.config.parallel.fsdp_version == 2);
  CHECK(v2.inputs.config.parallel.sharding == ShardingStrategy::kFsdpFullShard);
  CHECK(origin(v2, "fsdp_version") == "fsdp2.yaml:3");
  fs.files["hf2.yaml"] = "model_name_or_path: m\nfsdp: full_shard auto_wrap\nfsdp_config:\n  version: 2\n";
  LoadedConfig h2 = load_ok(fs, {"hf2.yaml"});
  CHECK(h2.inputs.config.parallel.fsdp_version == 2);
  CHECK(origin(h2, "fsdp_version") == "hf2.yaml:4");
  fs.files["bad2.yaml"] = "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 3\n";
  CHECK(load(fs, {"sft.yaml", "bad2.yaml"}).error().to_string() ==
        "bad2.yaml:3: fsdp_config.fsdp_version must be 1 or 2, got 3");

  // A deepspeed_config_file accelerate resolves from the launch directory: a warning when absent.
  fs.files["ds.yaml"] = "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: z.json\n"
                        "num_processes: 2\n";
  LoadedConfig d = load_ok(fs, {"ds.yaml"});
  CHECK(d.inputs.config.parallel.num_gpus == 2);
  REQUIRE(warnings(d).size() == 1);
  CHECK(warnings(d)[0].rfind("ds.yaml:3: DeepSpeed config 'z.json' not found (looked for z.json", 0) == 0);
  fs.files["z.json"] = "{\"zero_optimization\": {\"stage\": 2}, \"train_micro_batch_size_per_gpu\": \"auto\"}";
  CHECK(load_ok(fs, {"ds.yaml"}).inputs.config.parallel.sharding == ShardingStrategy::kZero2);
}

TEST_CASE("Composer BERT recipes: hf_bert's checkpoint and its head from num_labels or the script") {
  MemoryFileSystem fs;
  // mosaicml/examples benchmarks/bert/yamls/main/hf-bert-base-uncased.yaml, abridged: main.py
  // pretrains BertForMaskedLM.
  fs.files["mlm.yaml"] = "tokenizer_name: bert-base-uncased\n"                            // 1
                         "max_seq_len: 128\n"                                             // 2
                         "model:\n"                                                       // 3
                         "  name: hf_bert\n"                                              // 4
                         "  use_pretrained: false\n"                                      // 5
                         "  pretrained_model_name: ${tokenizer_name}\n"                   // 6
                         "  tokenizer_name: ${tokenizer_name}\n"                          // 7
                         "device_train_microbatch_size: 128\n"                            // 8
                         "precision: amp_bf16\n";                                         // 9
  LoadedConfig mlm = load_ok(fs, {"mlm.yaml"});
  CHECK(mlm.dialect == Dialect::kLlmFoundry);
  CHECK(mlm.inputs.model_name == "bert-base-uncased");
  CHECK(origin(mlm, "model") == "mlm.yaml:6");
  REQUIRE(mlm.inputs.encoder_head.has_value());
  CHECK(*mlm.inputs.encoder_head == EncoderHead::kMaskedLm);
  CHECK(origin(mlm, "head") == "mlm.yaml:4");
  CHECK_FALSE(mlm.inputs.num_labels.has_value());
  CHECK(mlm.inputs.config.micro_batch == 128);
  CHECK(mlm.inputs.config.seq_len == 128);
  CHECK(warnings(mlm).empty());

  // sequence_classification.py: the classifier's label count is in the model section.
  fs.files["cls.yaml"] = "tokenizer_name: bert-base-uncased\nmax_seq_len: 128\n"
                         "model:\n  name: hf_bert\n  num_labels: 3\n  use_pretrained: true\n"
                         "  pretrained_model_name: ${tokenizer_name}\n"
                         "global_train_batch_size: 16\ndevice_train_microbatch_size: 16\n";
  LoadedConfig cls = load_ok(fs, {"cls.yaml"});
  CHECK(*cls.inputs.encoder_head == EncoderHead::kSequenceClassification);
  CHECK(cls.inputs.num_labels == 3);
  CHECK(origin(cls, "num_labels") == "cls.yaml:5");

  // ModernBERT's GLUE configs leave the batch to glue.py: model.name alone names Composer, and
  // the tasks are sequence classifiers.
  fs.files["glue.yaml"] = "precision: amp_bf16\ntokenizer_name: microsoft/deberta-v3-base\n"
                          "model:\n  name: hf_bert\n  use_pretrained: true\n  pretrained_model_name: ${tokenizer_name}\n"
                          "tasks:\n  mnli:\n    seeds: [19]\n  rte:\n    seeds: [19, 8364]\n";
  LoadedConfig glue = load_ok(fs, {"glue.yaml"});
  CHECK(glue.dialect == Dialect::kLlmFoundry);
  CHECK(glue.inputs.model_name == "microsoft/deberta-v3-base");
  CHECK(*glue.inputs.encoder_head == EncoderHead::kSequenceClassification);
  CHECK(origin(glue, "head") == "glue.yaml:8");  // the first task

  // Their own architectures are named, not estimated as something else.
  fs.files["flex.yaml"] = "max_seq_len: 1024\ndevice_train_microbatch_size: 96\n"
                          "model:\n  name: flex_bert\n  pretrained_model_name: bert-base-uncased\n"
                          "  model_config:\n    num_hidden_layers: 22\n    hidden_size: 768\n";
  LoadedConfig flex = load_ok(fs, {"flex.yaml"});
  CHECK(flex.inputs.model_name.empty());
  CHECK(flex.inputs.model_hint ==
        "flex.yaml:4: model.name flex_bert is FlexBERT, ModernBERT's research architecture (model_config picks its "
        "layers), which memplan does not model (it models Hugging Face checkpoints); give --model with the Hugging "
        "Face model of the same shape to estimate that instead");
  CHECK(warnings(flex).empty());  // model_config is read (for the hint), not unknown
  fs.files["mosaic.yaml"] = "device_train_microbatch_size: 8\nmodel:\n  name: mosaic_bert\n"
                            "  pretrained_model_name: bert-base-uncased\n";
  CHECK(load_ok(fs, {"mosaic.yaml"}).inputs.model_hint.find("model.name mosaic_bert is MosaicBERT (ALiBi") !=
        std::string::npos);
  // ModernBERT's StableAdamW keeps AdamW's two moments; evaluation batch sizes are known keys.
  fs.files["opt.yaml"] = "device_train_microbatch_size: 8\nglobal_eval_batch_size: 64\n"
                         "model:\n  name: hf_bert\n  pretrained_model_name: bert-base-uncased\n"
                         "optimizer:\n  name: decoupled_stableadamw\n";
  LoadedConfig opt = load_ok(fs, {"opt.yaml"});
  CHECK(opt.inputs.config.optim.kind == OptimizerKind::kAdamWTorch);
  CHECK(warnings(opt).empty());
  fs.files["bad.yaml"] = "device_train_microbatch_size: 8\nmodel:\n  name: hf_bert\n  num_labels: 0\n"
                         "  pretrained_model_name: bert-base-uncased\n";
  auto bad = load(fs, {"bad.yaml"});
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().to_string().rfind("bad.yaml:4: ", 0) == 0);
}

TEST_CASE("NeMo's GLUE model reads as Lightning with the encoder NeMo wraps; contrastors is refused by name") {
  MemoryFileSystem fs;
  // NVIDIA/NeMo examples/nlp/glue_benchmark/glue_benchmark_config.yaml, abridged.
  fs.files["glue.yaml"] = "trainer:\n"                                                // 1
                          "  devices: 1\n"                                            // 2
                          "  accumulate_grad_batches: 1\n"                            // 3
                          "  precision: 16\n"                                         // 4
                          "model:\n"                                                  // 5
                          "  task_name: mrpc\n"                                       // 6
                          "  dataset:\n"                                              // 7
                          "    max_seq_length: 128\n"                                 // 8
                          "  train_ds:\n"                                             // 9
                          "    batch_size: 32\n"                                      // 10
                          "  language_model:\n"                                       // 11
                          "    pretrained_model_name: bert-base-uncased\n";           // 12
  LoadedConfig glue = load_ok(fs, {"glue.yaml"});
  CHECK(glue.dialect == Dialect::kLightning);
  CHECK(glue.inputs.model_name == "bert-base-uncased");
  CHECK(origin(glue, "model") == "glue.yaml:12");
  CHECK(glue.inputs.config.micro_batch == 32);
  CHECK(origin(glue, "batch") == "glue.yaml:10");
  CHECK(glue.inputs.config.seq_len == 128);
  CHECK(origin(glue, "seq_len") == "glue.yaml:8");
  CHECK(glue.inputs.config.autocast == DType::kFloat16);
  REQUIRE(glue.inputs.encoder_head.has_value());
  CHECK(*glue.inputs.encoder_head == EncoderHead::kSequenceClassification);
  CHECK(origin(glue, "head") == "glue.yaml:6");

  // nomic-ai/contrastors trains its own NomicBERT (FlashAttention, unpadded): not estimated as
  // transformers' eager one.
  fs.files["c.yaml"] = "train_args:\n  num_epochs: 1\n  grad_cache: false\n"
                       "model_args:\n  model_type: encoder\n  model_name: nomic-ai/nomic-embed-text-v1-unsupervised\n"
                       "  num_negatives: 7\ndata_args:\n  batch_size: 256\n";
  auto c = load(fs, {"c.yaml"});
  REQUIRE_FALSE(c.has_value());
  CHECK(c.error().to_string().rfind("c.yaml:5: a nomic-ai/contrastors config (train_args, model_args.model_type: "
                                    "encoder): contrastors trains its own models",
                                    0) == 0);
  CHECK(c.error().suggestion.find("--model nomic-ai/nomic-embed-text-v1.5 --texts-per-example N") != std::string::npos);
}

TEST_CASE("NeMo's Megatron BERT is an encoder of the written shape; the embedding recipe is contrastive") {
  MemoryFileSystem fs;
  // NVIDIA/NeMo examples/nlp/information_retrieval/conf/megatron_bert_embedding_config.yaml, abridged.
  fs.files["bert.yaml"] = "name: megatron_bert\n"                          // 1
                          "trainer:\n  devices: 1\n  precision: 16\n"     // 2-4
                          "model:\n"                                       // 5
                          "  mcore_bert: True\n"                           // 6
                          "  micro_batch_size: 4\n"                        // 7
                          "  global_batch_size: 8\n"                       // 8
                          "  encoder_seq_length: 512\n"                    // 9
                          "  num_layers: 24\n"                             // 10
                          "  hidden_size: 1024\n"                          // 11
                          "  ffn_hidden_size: 4096\n"                      // 12
                          "  num_attention_heads: 16\n"                    // 13
                          "  add_pooler: True\n"                           // 14
                          "  add_lm_head: False\n"                         // 15
                          "  data:\n    hard_negatives_to_train: 4\n";   // 16-17
  LoadedConfig c = load_ok(fs, {"bert.yaml"});
  CHECK(c.dialect == Dialect::kMegatron);
  REQUIRE(c.inputs.custom_model.has_value());
  CHECK(c.inputs.custom_model->family == "bert");
  CHECK(*c.inputs.encoder_head == EncoderHead::kPooling);
  CHECK(origin(c, "head") == "bert.yaml:15");
  CHECK(c.inputs.config.contrastive.texts_per_example == 6);  // query, positive, 4 hard negatives
  CHECK(origin(c, "texts_per_example") == "bert.yaml:17");
  std::vector<std::string> assumed;
  auto m = build_custom_model(*c.inputs.custom_model, assumed);
  REQUIRE(m.has_value());
  CHECK(m->is_encoder());
  CHECK(m->model_type == "bert");
  CHECK(m->num_layers == 24);
  CHECK(m->intermediate_size == 4096);
  // BERT-large's BertModel (with pooler): 24 x 12,596,224 per layer + embeddings
  // (30522 + 512 + 2) x 1024 + LayerNorm 2,048 + pooler 1,049,600 = 335,141,888.
  CHECK(count_parameters(*m).total == 335141888);
  // With the LM head it is Megatron BERT pretraining: the masked-LM head.
  fs.files["mlm.yaml"] = "name: megatron_bert\nmodel:\n  micro_batch_size: 8\n  num_layers: 2\n  hidden_size: 64\n"
                         "  num_attention_heads: 4\n  bert_binary_head: True\n";
  LoadedConfig mlm = load_ok(fs, {"mlm.yaml"});
  CHECK(mlm.inputs.custom_model->family == "bert");
  CHECK(*mlm.inputs.encoder_head == EncoderHead::kMaskedLm);
  CHECK(mlm.inputs.config.contrastive.texts_per_example == 0);
}

TEST_CASE("flat in-house trainers: lr and epochs are theirs, accelerate's mixed_precision, neg_nums") {
  MemoryFileSystem fs;
  // NLPJCL/RAG-Retrieval's embedding trainer: model_name_or_path alone is no TrainingArguments.
  fs.files["rag.yaml"] = "model_name_or_path: BAAI/bge-base-en-v1.5\nneg_nums: 15\nepochs: 2\nlr: 2e-5\n"
                         "batch_size: 32\ngradient_accumulation_steps: 3\nmixed_precision: fp16\n";
  LoadedConfig c = load_ok(fs, {"rag.yaml"});
  CHECK(c.dialect == Dialect::kFlat);
  CHECK(c.inputs.config.micro_batch == 32);
  CHECK(c.inputs.config.grad_accum == 3);
  CHECK(c.inputs.config.autocast == DType::kFloat16);
  CHECK(origin(c, "autocast") == "rag.yaml:7");
  CHECK(c.inputs.config.contrastive.texts_per_example == 17);  // query, positive, 15 negatives
  CHECK(warnings(c).empty());  // "lr" is not a misspelt "r"
  fs.files["no.yaml"] = "batch_size: 4\nmax_seq_len: 64\nmixed_precision: 'no'\n";
  LoadedConfig no = load_ok(fs, {"no.yaml"});
  CHECK_FALSE(no.inputs.config.autocast.has_value());
  CHECK(origin(no, "autocast") == "no.yaml:3");
}

TEST_CASE("OmegaConf interpolation is resolved as OmegaConf does") {
  MemoryFileSystem fs;
  fs.files["f.yaml"] = "variables:\n  max_seq_len: 2048\n  model_name: meta-llama/Llama-3.1-8B\n"
                       "max_seq_len: ${variables.max_seq_len}\n"
                       "model:\n  name: hf_causal_lm\n  pretrained_model_name_or_path: ${variables.model_name}\n"
                       "  tag: ${.name}-x\n"
                       "device_train_microbatch_size: ${oc.env:MICRO,4}\n"
                       "global_train_batch_size: 64\ntrain_loader:\n  name: text\n";
  LoadedConfig c = load_ok(fs, {"f.yaml"});
  CHECK(c.dialect == Dialect::kLlmFoundry);
  CHECK(c.inputs.config.seq_len == 2048);          // an int stays an int
  CHECK(origin(c, "seq_len") == "f.yaml:4");       // the line that uses it
  CHECK(c.inputs.model_name == "meta-llama/Llama-3.1-8B");
  CHECK(c.inputs.config.micro_batch == 4);         // the env default
  CHECK(warnings(c) == std::vector<std::string>{
                           "f.yaml:9: ${oc.env:MICRO,4} depends on the environment variable MICRO; memplan uses its "
                           "default '4'"});

  fs.files["g.yaml"] = "max_seq_len: ${oc.env:SEQ}\nmicro_batch_size: ${nope.x}\nprecision: bf16\n";
  LoadedConfig g = load_ok(fs, {"g.yaml"});
  CHECK(g.inputs.config.seq_len == 1024);  // treated as absent: the default, said so
  CHECK(g.inputs.config.micro_batch == 1);
  CHECK(warnings(g) ==
        std::vector<std::string>{"g.yaml:1: ${oc.env:SEQ} depends on the environment variable SEQ of the run, which "
                                 "memplan does not read; the value is treated as absent; write the value, or give it "
                                 "a default: ${oc.env:SEQ,VALUE}",
                                 "g.yaml:2: interpolation ${nope.x}: no key 'nope.x' in the config"});
  // A resolver memplan cannot evaluate matters only where memplan reads the value: NeMo's
  // ${multiply:...} in exp_manager is not said; in the micro-batch it is.
  fs.files["nemo.yaml"] = "exp_manager:\n  checkpoint_callback_params:\n"
                          "    model_parallel_size: ${multiply:${model.tp}, ${model.pp}}\n"
                          "model:\n  tp: 1\n  pp: 1\nmicro_batch_size: ${multiply:2, 2}\nmax_seq_len: 8\n";
  const std::vector<std::string> nemo = warnings(load_ok(fs, {"nemo.yaml"}));
  REQUIRE(nemo.size() == 1);
  CHECK(nemo[0].rfind("nemo.yaml:7: the OmegaConf resolver in ${multiply:2, 2} is not evaluated by memplan", 0) == 0);
  fs.files["loop.yaml"] = "a: ${b}\nb: ${a}\nmicro_batch_size: 2\nmax_seq_len: 8\n";
  LoadedConfig loop = load_ok(fs, {"loop.yaml"});  // never hangs
  CHECK(loop.inputs.config.micro_batch == 2);
  // References that fan out stop after a bounded number of resolutions.
  fs.files["fan.yaml"] = "a:\n- ${b}\n- ${b}\n- ${b}\nb:\n- ${a}\n- ${a}\n- ${a}\nc: ${}\nmicro_batch_size: 2\nmax_seq_len: 8\n";
  LoadedConfig fan = load_ok(fs, {"fan.yaml"});
  CHECK(fan.inputs.config.micro_batch == 2);
  CHECK(warnings(fan).empty());  // the fan-out is in keys memplan does not read: nothing to say
}

TEST_CASE("LightningCLI strategy objects: class_path and init_args") {
  MemoryFileSystem fs;
  fs.files["l.yaml"] = "trainer:\n  devices: 4\n  accumulate_grad_batches: 2\n  strategy:\n"
                       "    class_path: lightning.pytorch.strategies.FSDPStrategy\n    init_args:\n"
                       "      sharding_strategy: HYBRID_SHARD\n      cpu_offload: true\n"
                       "data:\n  init_args:\n    batch_size: 3\n";
  LoadedConfig l = load_ok(fs, {"l.yaml"});
  CHECK(l.inputs.config.parallel.sharding == ShardingStrategy::kFsdpHybridShard);
  CHECK(l.inputs.config.parallel.offload_params);
  CHECK(l.inputs.config.micro_batch == 3);
  CHECK(origin(l, "sharding") == "l.yaml:5");
  fs.files["d.yaml"] = "trainer:\n  accumulate_grad_batches: 2\n  strategy:\n"
                       "    class_path: lightning.pytorch.strategies.DeepSpeedStrategy\n    init_args:\n      stage: 3\n";
  CHECK(load_ok(fs, {"d.yaml"}).inputs.config.parallel.sharding == ShardingStrategy::kZero3);
  fs.files["x.yaml"] = "trainer:\n  accumulate_grad_batches: 2\n  strategy:\n    class_path: my.Strategy\n";
  CHECK(warnings(load_ok(fs, {"x.yaml"})) ==
        std::vector<std::string>{"x.yaml:4: strategy my.Strategy is not modelled; memplan estimates plain data "
                                 "parallelism"});
}

TEST_CASE("did-you-mean offers only close keys") {
  MemoryFileSystem fs;
  fs.files["t.yaml"] = "model_name_or_path: m\nbf16: true\ngradient_checkpointing: true\nmodel_confg: x\n"
                       "lora_rnak: 8\nmodel_config: {}\n";
  CHECK(warnings(load_ok(fs, {"t.yaml"})) ==
        std::vector<std::string>{"t.yaml:4: unknown key 'model_confg' (ignored)",
                                 "t.yaml:5: unknown key 'lora_rnak'; did you mean 'lora_r'?",
                                 "t.yaml:6: unknown key 'model_config' (ignored)"});
}

TEST_CASE("preference methods: which keep a reference model") {
  MemoryFileSystem fs;
  auto method = [&](const std::string& path, const std::string& body) {
    fs.files[path] = "model_name_or_path: m\nbf16: true\ngradient_checkpointing: true\n" + body;
    LoadedConfig c = load_ok(fs, {path});
    std::string m = to_string(c.inputs.config.method);
    if (c.inputs.config.method == Method::kDpo)
      m += c.inputs.config.dpo.ref_model == RefModel::kNone ? "/no-ref" : "/ref";
    return m;
  };
  CHECK(method("a.yaml", "beta: 0.1\n") == "dpo/ref");
  CHECK(method("b.yaml", "loss_type: ipo\nbeta: 0.1\n") == "dpo/ref");
  CHECK(method("c.yaml", "cpo_alpha: 1.0\n") == "dpo/no-ref");
  CHECK(method("d.yaml", "simpo_gamma: 0.5\nloss_type: simpo\n") == "dpo/no-ref");
  CHECK(method("e.yaml", "desirable_weight: 1.0\n") == "dpo/ref");
  CHECK(method("recipes/zephyr/orpo/config_full.yaml", "beta: 0.05\nmax_prompt_length: 512\n") == "dpo/no-ref");
  CHECK(method("recipes/x/kto/config.yaml", "beta: 0.1\n") == "dpo/ref");
  CHECK(method("orpo/grpo.yaml", "num_generations: 8\n") == "grpo");
  LoadedConfig o = load_ok(fs, {"recipes/zephyr/orpo/config_full.yaml"});
  CHECK(origin(o, "method") == "derived (ORPO (no reference model): the recipe's path "
                               "recipes/zephyr/orpo/config_full.yaml names the trainer)");
}

TEST_CASE("memory features memplan does not model are located warnings") {
  MemoryFileSystem fs;
  fs.files["h.yaml"] = "model_name_or_path: m\nbf16: true\ngradient_checkpointing: true\nuse_liger_kernel: true\n";
  // SFT: modelled (Liger's fused linear cross-entropy and kernels), the key is the origin.
  const LoadedConfig h = load_ok(fs, {"h.yaml"});
  CHECK(warnings(h).empty());
  CHECK(h.inputs.config.loss_kernel == LossKernel::kLiger);
  CHECK(h.inputs.config.liger_kernels);
  CHECK(origin(h, "loss_kernel") == "h.yaml:4");
  // GRPO: TRL's Liger GRPO loss and the module kernels, as TRL >= 0.25 reads use_liger_kernel,
  // with a warning naming the older meaning.
  fs.files["r.yaml"] = "model_name_or_path: m\nbf16: true\ngradient_checkpointing: true\nnum_generations: 8\nuse_liger_kernel: true\n";
  const LoadedConfig r = load_ok(fs, {"r.yaml"});
  CHECK(r.inputs.config.loss_kernel == LossKernel::kLiger);
  CHECK(r.inputs.config.liger_kernels);
  CHECK(warnings(r) == std::vector<std::string>{"r.yaml:5: use_liger_kernel: read as TRL >= 0.25 does, Liger's grpo "
                                                "loss and module kernels; TRL 0.17 to 0.24 patch only the modules "
                                                "with it (use_liger_loss selects the loss), and their eager loss holds "
                                                "the full logits"});
  // use_liger_loss (TRL 0.17/0.19 to 0.27): the loss alone, the model unpatched; in SFT a warning.
  fs.files["l.yaml"] = "model_name_or_path: m\nbf16: true\ngradient_checkpointing: true\nbeta: 0.1\nmax_prompt_length: 8\nuse_liger_loss: true\n";
  const LoadedConfig l = load_ok(fs, {"l.yaml"});
  CHECK(l.inputs.config.method == Method::kDpo);
  CHECK(l.inputs.config.loss_kernel == LossKernel::kLiger);
  CHECK_FALSE(l.inputs.config.liger_kernels);
  CHECK(warnings(l).empty());
  fs.files["s.yaml"] = "model_name_or_path: m\nbf16: true\ngradient_checkpointing: true\nuse_liger_loss: true\n";
  CHECK(warnings(load_ok(fs, {"s.yaml"})) ==
        std::vector<std::string>{"s.yaml:4: use_liger_loss is a DPO/GRPO option of TRL; an SFT loss is not changed by it"});
  fs.files["a.yaml"] = "base_model: m\nsequence_len: 512\ncontext_parallel_size: 4\nunfrozen_parameters:\n  - a\n";
  CHECK(warnings(load_ok(fs, {"a.yaml"})) ==
        std::vector<std::string>{"a.yaml:3: context_parallel_size = 4 is not modelled: each GPU holds 1/4 of every "
                                 "sequence, but memplan estimates whole sequences per GPU (activations too high about "
                                 "4x)",
                                 "a.yaml:5: unfrozen_parameters trains only the parameters it matches; memplan "
                                 "estimates training all of them (gradients and optimizer states too high)"});
  fs.files["g.yaml"] = "model_name_or_path: m\nstage: sft\nfinetuning_type: full\nuse_galore: true\ncutoff_len: 8\n";
  CHECK(warnings(load_ok(fs, {"g.yaml"})) ==
        std::vector<std::string>{"g.yaml:4: use_galore: GaLore changes the optimizer states (or which layers train) "
                                 "and is not modelled; memplan estimates adamw_torch over every trained parameter"});
}

TEST_CASE("DeepSpeed train_batch_size gives the GPU count only when micro-batch and accumulation are written") {
  MemoryFileSystem fs;
  fs.files["ds.json"] = "{\"train_batch_size\": 16, \"zero_optimization\": {\"stage\": 2}}";
  LoadedConfig c = load_ok(fs, {"ds.json"});
  CHECK(c.inputs.config.parallel.num_gpus == 1);
  CHECK(warnings(c) == std::vector<std::string>{
                           "ds.json:1: train_batch_size = 16 is micro-batch x accumulation x GPUs, but the micro-batch "
                           "is not written; memplan does not derive the GPU count from it (give --num-gpus)",
                           "ds.json: zero2 shards across GPUs, but the config does not say how many; memplan assumes "
                           "1 unless --num-gpus says otherwise"});
  fs.files["ds2.json"] = "{\"train_batch_size\": 16, \"train_micro_batch_size_per_gpu\": 2, "
                         "\"gradient_accumulation_steps\": 2, \"zero_optimization\": {\"stage\": 2}}";
  CHECK(load_ok(fs, {"ds2.json"}).inputs.config.parallel.num_gpus == 4);
}

TEST_CASE("LLaMA-Factory v1 layout and flat LoRA sections") {
  MemoryFileSystem fs;
  fs.files["v1.yaml"] = "model: Qwen/Qwen3-4B\nmodel_class: llm\npeft_config:\n  name: lora\n  r: 16\n"
                        "  lora_alpha: 32\ndist_config:\n  name: fsdp2\nmicro_batch_size: 2\ncutoff_len: 4096\n";
  LoadedConfig v = load_ok(fs, {"v1.yaml"});
  CHECK(v.dialect == Dialect::kLlamaFactory);
  CHECK(v.inputs.model_name == "Qwen/Qwen3-4B");
  CHECK(v.inputs.config.lora.enabled);
  CHECK(v.inputs.config.lora.r == 16);
  CHECK(v.inputs.config.micro_batch == 2);
  CHECK(v.inputs.config.seq_len == 4096);
  CHECK(v.inputs.config.parallel.sharding == ShardingStrategy::kFsdpFullShard);
  CHECK(warnings(v) == std::vector<std::string>{"v1.yaml: fsdp_full_shard shards across GPUs, but the config does not "
                                                "say how many; memplan assumes 1 unless --num-gpus says otherwise"});
  fs.files["flat.yaml"] = "micro_batch_size: 2\nmax_seq_len: 1024\nmodel: m\nLoRA:\n  r: 32\n  alpha: 64\n";
  LoadedConfig f = load_ok(fs, {"flat.yaml"});
  CHECK(f.inputs.config.lora.enabled);
  CHECK(f.inputs.config.lora.r == 32);
  CHECK(f.inputs.config.lora.alpha == 64);
  CHECK(origin(f, "lora_r") == "flat.yaml:5");
  fs.files["off.yaml"] = "micro_batch_size: 2\nmax_seq_len: 1024\nmodel: m\nlora:\n  enabled: false\n  r: 32\n";
  CHECK_FALSE(load_ok(fs, {"off.yaml"}).inputs.config.lora.enabled);
}

TEST_CASE("--show-config on every command prints the inputs, and JSON carries the warnings") {
  const std::string cfg = kExamples + "hf-trl-sft-lora.yaml";
  for (const char* cmd : {"estimate", "plan", "sweep"}) {
    std::vector<std::string> args = {cmd, "--config", cfg, "--show-config"};
    if (std::string(cmd) != "estimate") args.insert(args.end(), {"--gpu", "h100-sxm"});
    CliRun r = run_cli(args);
    INFO(cmd << "\n" << r.out << r.err);
    CHECK(r.code == 0);
    CHECK(r.out.find("dialect: hf") == 0);
    CHECK(r.out.find("recommended") == std::string::npos);
  }
  const std::string path = std::filesystem::temp_directory_path().string() + "/memplan-warn.yaml";
  std::ofstream(path) << "model_name_or_path: meta-llama/Llama-3.1-8B\nbf16: true\ngradient_checkpointing: true\n"
                         "activation_offloading: true\n";
  for (const char* cmd : {"estimate", "plan"}) {
    std::vector<std::string> args = {cmd, "--config", path, "--format", "json"};
    if (std::string(cmd) == "plan") args.insert(args.end(), {"--gpu", "h100-sxm"});
    CliRun r = run_cli(args);
    INFO(r.err);
    REQUIRE(r.code == (std::string(cmd) == "plan" ? 1 : 0));  // full fine-tuning of 8B fits no H100 micro-batch
    auto j = nlohmann::json::parse(r.out);
    REQUIRE(j["warnings"].size() == 1);
    CHECK(j["warnings"][0].get<std::string>().rfind(path + ":4: activation_offloading is not modelled", 0) == 0);
  }
  std::filesystem::remove(path);
}

TEST_CASE("method flag: preference losses with and without a reference model") {
  auto ref = [](const char* m) {
    auto j = nlohmann::json::parse(
        run_cli({"estimate", "--model", "llama-3.1-8b", "--method", m, "--format", "json"}).out);
    return j["inputs"]["training"]["dpo"]["ref_model"].get<std::string>() + " " +
           j["inputs"]["training"]["method"].get<std::string>();
  };
  CHECK(ref("orpo") == "none dpo");
  CHECK(ref("simpo") == "none dpo");
  CHECK(ref("kto") == "auto dpo");
  CHECK(ref("dpo") == "auto dpo");
}

TEST_CASE("--optim accepts every HF optimizer name, estimating the unmodelled ones with a warning") {
  auto j = nlohmann::json::parse(
      run_cli({"estimate", "--model", "llama-3.1-8b", "--optim", "paged_ademamix_8bit", "--format", "json"}).out);
  CHECK(j["inputs"]["training"]["optim"] == "paged_adamw_8bit");
  CHECK(j["warnings"] == nlohmann::json::array({"--optim: optimizer 'paged_ademamix_8bit' is not modelled; estimated "
                                                "as paged_adamw_8bit (AdEMAMix keeps a third 8-bit state)"}));
  CliRun bad = run_cli({"estimate", "--model", "llama-3.1-8b", "--optim", "adamw_torh"});
  CHECK(bad.code != 0);
}

TEST_CASE("hf: LLM2Vec's JSON configs are embedding training with LoRA, not TRL") {
  MemoryFileSystem fs;
  fs.files["sup.json"] =
         "{\n  \"model_name_or_path\": \"meta-llama/Meta-Llama-3-8B-Instruct\",\n  \"bidirectional\": true,\n"
         "  \"pooling_mode\": \"eos_token\",\n  \"dataset_name\": \"E5\",\n  \"per_device_train_batch_size\": 8,\n"
         "  \"gradient_checkpointing\": true\n}\n";
  const LoadedConfig c = load_ok(fs, {"sup.json"});
  const TrainingConfig& t = c.inputs.config;
  // initialize_peft always, with CustomArguments' r = 8 and every Llama projection.
  CHECK(t.lora.enabled);
  CHECK(t.lora.r == 8);
  CHECK(t.lora.all_linear);
  CHECK_FALSE(t.checkpoint_reentrant.value_or(true));  // the scripts set use_reentrant false
  CHECK_FALSE(t.autocast.has_value());                  // transformers' Trainer: no bf16 by default
  CHECK(t.seq_len == 512);                              // LLM2Vec.from_pretrained's max_length
  CHECK(t.contrastive.texts_per_example == 3);          // E5: query, positive, hard negative
  REQUIRE(c.inputs.encoder_head.has_value());
  CHECK(*c.inputs.encoder_head == EncoderHead::kPooling);
  CHECK(c.inputs.pooling == PoolingMode::kLastToken);
  CHECK(c.inputs.embedding_library == EmbeddingLibrary::kLlm2Vec);
  CHECK(origin(c, "texts_per_example") == "sup.json:5");  // dataset_name
  for (const auto& w : warnings(c)) CHECK(w.find("TRL") == std::string::npos);

  fs.files["bad.json"] = "{\n  \"model_name_or_path\": \"x/y\",\n  \"bidirectional\": true,\n  \"pooling_mode\": \"max\"\n}\n";
  auto bad = load(fs, {"bad.json"});
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().to_string().find("bad.json:4") != std::string::npos);
  CHECK(bad.error().message == "unknown LLM2Vec pooling_mode 'max'");

  // The masked next-token stage keeps the LM head.
  fs.files["mntp.json"] = "{\n  \"model_name_or_path\": \"x/y\",\n  \"mlm_probability\": 0.8,\n"
                      "  \"stop_after_n_steps\": 1000\n}\n";
  const LoadedConfig mntp = load_ok(fs, {"mntp.json"});
  CHECK_FALSE(mntp.inputs.encoder_head.has_value());
  CHECK(mntp.inputs.config.lora.enabled);
  CHECK(mntp.inputs.config.contrastive.texts_per_example == 0);
}

TEST_CASE("the shipped torchtitan example gives the estimate of its flags") {
  const auto file = estimate_json({"--config", kExamples + "torchtitan-llama3-8b.toml"});
  const auto flags = estimate_json({"--model", "meta-llama/Llama-3.1-8B", "--batch", "1", "--seq-len", "8192",
                                    "--num-gpus", "8", "--fsdp", "full_shard", "--fsdp-version", "2",
                                    "--torch-dtype", "bfloat16", "--fsdp-mixed-precision", "--gradient-checkpointing",
                                    "--use-reentrant", "false", "--optim", "adamw_torch_fused"});
  CHECK(file["estimate"]["peak_bytes"] == flags["estimate"]["peak_bytes"]);
  CHECK(file["estimate"]["total_bytes"] == flags["estimate"]["total_bytes"]);
  CHECK(file["training"]["parallel"]["num_gpus"] == 8);
  CHECK(file["training"]["parallel"]["fsdp_mixed_precision"] == true);
  CHECK(file["estimate"]["peak_bytes"].is_number_integer());
}

TEST_CASE("hf: torch_compile warns at its line that the eager estimate is an upper bound") {
  // docs/formulas.md#compile: inductor's fused kernels save fewer intermediates than eager mode.
  MemoryFileSystem fs;
  fs.files["train.yaml"] = "model_name_or_path: meta-llama/Llama-3.1-8B\nbf16: true\ntorch_compile: true\n";
  const LoadedConfig c = load_ok(fs, {"train.yaml"});
  CHECK(std::count(c.inputs.warnings.begin(), c.inputs.warnings.end(),
                   "train.yaml:3: torch_compile: torch.compile is not modelled; its fused kernels save fewer "
                   "intermediates, so the estimate (eager execution) is an upper bound") == 1);
  fs.files["train.yaml"] = "model_name_or_path: meta-llama/Llama-3.1-8B\nbf16: true\ntorch_compile: false\n";
  for (const auto& w : load_ok(fs, {"train.yaml"}).inputs.warnings) CHECK(w.find("torch_compile") == std::string::npos);
}

TEST_CASE("a dialect says whether its framework prepares the model through accelerate and PEFT") {
  // HF Trainer (TRL, axolotl, LLaMA-Factory, ms-swift) calls Accelerator.prepare_model; torchtitan,
  // torchtune, NeMo, Megatron, verl and Lightning shard with PyTorch's FSDP themselves
  // (docs/formulas.md#accelerate-fsdp-upcast). torchtune, LitGPT, NeMo and Megatron have their own
  // LoRA; verl and LLM Foundry call PEFT's get_peft_model.
  for (Dialect d : {Dialect::kHfTrl, Dialect::kAxolotl, Dialect::kLlamaFactory, Dialect::kMsSwift,
                    Dialect::kOpenInstruct, Dialect::kAccelerate}) {
    CHECK(run_context(d).accelerate == std::optional<bool>(true));
    CHECK(run_context(d).peft);
  }
  for (Dialect d : {Dialect::kTorchtitan, Dialect::kTorchtune, Dialect::kMegatron, Dialect::kMegatronLm,
                    Dialect::kNemoRl, Dialect::kAutomodel, Dialect::kLitgpt}) {
    CHECK(run_context(d).accelerate == std::optional<bool>(false));
    CHECK_FALSE(run_context(d).peft);
  }
  CHECK(run_context(Dialect::kVerl).accelerate == std::optional<bool>(false));
  CHECK(run_context(Dialect::kVerl).peft);
  CHECK_FALSE(run_context(Dialect::kFlat).accelerate.has_value());
  CHECK_FALSE(run_context(Dialect::kInferred).accelerate.has_value());
  CHECK(run_context(Dialect::kTorchtitan).framework == "torchtitan");
  MemoryFileSystem fs;
  fs.files["sft.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: 4\n";
  ConfigRequest req;
  req.files = {"sft.yaml"};
  auto c = load_config(req, fs);
  REQUIRE(c.has_value());
  CHECK(c->dialect == Dialect::kHfTrl);
  CHECK(c->inputs.run.accelerate == std::optional<bool>(true));
  CHECK(c->inputs.run.framework == "HF Trainer / TRL");
}

// Library versions and the rules they decide (src/core/stack.cpp, docs/formulas.md#versions).
#include <catch2/catch.hpp>

#include "memplan/stack.hpp"
#include "support/models.hpp"

using namespace memplan;

namespace {

Stack stack_of(std::initializer_list<std::pair<Library, const char*>> v) {
  Stack s;
  for (const auto& [lib, text] : v) s.versions[lib] = version(text);
  return s;
}

const StackEffect* effect(const StackApplied& a, const std::string& key) {
  for (const auto& e : a.effects)
    if (e.key == key) return &e;
  return nullptr;
}

TrainingConfig qlora() {
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.autocast = DType::kBFloat16;
  c.lora.enabled = true;
  c.quant.load_in_4bit = true;
  c.gradient_checkpointing = true;
  return c;
}

}  // namespace

TEST_CASE("versions parse as pip writes them and compare by release") {
  CHECK(version("4.48.1") < version("4.49"));
  CHECK(version("4.49") == version("4.49.0"));
  CHECK(version("4.49.0.dev0") < version("4.49.0"));
  CHECK(version("4.49.0rc1") < version("4.49.0"));
  CHECK(version("4.48.9") < version("4.49.0rc1"));
  CHECK(version("2.4.1+cu121") == version("2.4.1"));
  CHECK(version("1.0.0.post1") == version("1.0.0"));
  CHECK(version("v0.13.0") == version("0.13"));
  CHECK(version("2!1.0") == version("1.0"));
  CHECK(version("10.0") > version("9.99"));
  CHECK(version("0.8.2").major() == 0);
  CHECK(version("0.8.2").minor() == 8);
  for (const char* bad : {"", "abc", "4..8", "4.48-", "1.2.3.4.5.6.7", "4.48.x", "1234567890.1"}) {
    INFO(bad);
    CHECK_FALSE(parse_version(bad));
  }
  CHECK(parse_version("x4.48").error().to_string() ==
        "'x4.48' is not a version; write a release number as pip shows it, e.g. 4.48.1");
}

TEST_CASE("library names are read as pip normalizes them") {
  CHECK(library_from_name("Liger_Kernel") == Library::kLiger);
  CHECK(library_from_name("flash_attn") == Library::kFlashAttn);
  CHECK(library_from_name("pytorch") == Library::kTorch);
  CHECK(library_from_name("Transformers") == Library::kTransformers);
  CHECK_FALSE(library_from_name("numpy"));
  CHECK(all_libraries().size() == 11);
  for (Library l : all_libraries()) CHECK(oldest_modelled(l) < newest_modelled(l));
}

TEST_CASE("transformers' loss variant follows its version (PR #35646 in 4.49)") {
  using LS = TrainingConfig::LossShift;
  for (const auto& [v, want] : {std::pair{"4.45.2", LS::kUpcastInModel}, {"4.46.0", LS::kShiftLogitsCopy},
                                {"4.48.1", LS::kShiftLogitsCopy}, {"4.49.0", LS::kPadLabels},
                                {"5.17.0", LS::kPadLabels}}) {
    INFO(v);
    TrainingConfig c;
    const auto a = apply_stack(stack_of({{Library::kTransformers, v}}), c, {});
    CHECK(c.loss_shift == want);
    REQUIRE(effect(a, "transformers_loss"));
  }
  // Nothing said: the newest release's behaviour, and no effect reported.
  TrainingConfig c;
  c.loss_shift = LS::kUpcastInModel;
  const auto a = apply_stack(Stack{}, c, {});
  CHECK(c.loss_shift == LS::kPadLabels);
  CHECK_FALSE(effect(a, "transformers_loss"));
  // A value a flag or a file set is kept.
  TrainingConfig fixed;
  fixed.loss_shift = LS::kUpcastInModel;
  apply_stack(stack_of({{Library::kTransformers, "4.49"}}), fixed, {"transformers_loss"});
  CHECK(fixed.loss_shift == LS::kUpcastInModel);
}

TEST_CASE("checkpointing's use_reentrant follows transformers and TRL") {
  auto reentrant = [](std::initializer_list<std::pair<Library, const char*>> v, bool lora = false,
                      ShardingStrategy sh = ShardingStrategy::kNone) {
    TrainingConfig c;
    c.gradient_checkpointing = true;
    c.lora.enabled = lora;
    c.parallel.sharding = sh;
    c.parallel.num_gpus = 2;
    apply_stack(stack_of(v), c, {});
    return c.checkpoint_reentrant;
  };
  CHECK(reentrant({{Library::kTransformers, "4.48.1"}}) == true);
  CHECK(reentrant({{Library::kTransformers, "5.0.0"}}) == false);
  CHECK(reentrant({{Library::kTransformers, "4.48.1"}, {Library::kTrl, "0.13.0"}}) == true);
  CHECK(reentrant({{Library::kTransformers, "4.57.0"}, {Library::kTrl, "0.27.0"}}) == false);
  CHECK(reentrant({{Library::kTrl, "0.13.0"}}) == true);
  // TRL 0.28+: PEFT under ZeRO-3 forces reentrant checkpoints back on.
  CHECK(reentrant({{Library::kTrl, "0.28.0"}, {Library::kTransformers, "4.57.0"}}, true, ShardingStrategy::kZero3) ==
        true);
  CHECK(reentrant({{Library::kTrl, "0.28.0"}, {Library::kTransformers, "4.57.0"}}, true) == false);
  // Without versions the engine's own default stands.
  CHECK(reentrant({}) == std::nullopt);
}

TEST_CASE("TRL's QLoRA preparation follows its version") {
  using KP = QuantConfig::KbitPrepare;
  struct Row {
    const char* trl;
    bool bf16;
    ShardingStrategy sharding;
    KP want;
    DType adapters;
  };
  const Row rows[] = {
      {"0.13.0", true, ShardingStrategy::kNone, KP::kTrlLegacy, DType::kFloat32},
      {"0.13.0", false, ShardingStrategy::kNone, KP::kPeftUpcast, DType::kFloat32},
      {"0.13.0", true, ShardingStrategy::kFsdpFullShard, KP::kFreezeOnly, DType::kBFloat16},
      {"0.25.1", false, ShardingStrategy::kNone, KP::kTrlLegacy, DType::kFloat32},
      {"0.26.2", true, ShardingStrategy::kNone, KP::kTrlLegacy, DType::kFloat32},
      {"0.26.2", false, ShardingStrategy::kNone, KP::kFreezeOnly, DType::kFloat32},
      {"0.27.0", true, ShardingStrategy::kNone, KP::kFreezeOnly, DType::kBFloat16},
      {"1.9.0", false, ShardingStrategy::kZero3, KP::kFreezeOnly, DType::kBFloat16},
  };
  for (const auto& r : rows) {
    INFO(r.trl << " bf16=" << r.bf16);
    TrainingConfig c = qlora();
    if (!r.bf16) c.autocast.reset();
    c.parallel.sharding = r.sharding;
    c.parallel.num_gpus = 2;
    const auto a = apply_stack(stack_of({{Library::kTrl, r.trl}}), c, {});
    CHECK(c.quant.kbit_prepare == r.want);
    CHECK(effective_adapter_dtype(c) == r.adapters);
    CHECK(effect(a, "kbit_prepare"));
  }
  // A flag's preparation and dtype stay.
  TrainingConfig c = qlora();
  c.quant.kbit_prepare = KP::kFreezeOnly;
  c.lora.adapter_dtype = DType::kFloat32;
  apply_stack(stack_of({{Library::kTrl, "0.13.0"}}), c, {"kbit_prepare", "adapter_dtype"});
  CHECK(c.quant.kbit_prepare == KP::kFreezeOnly);
  CHECK(effective_adapter_dtype(c) == DType::kFloat32);
}

TEST_CASE("PEFT before 0.12 keeps the adapters in the base layer's dtype") {
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.lora.enabled = true;
  apply_stack(stack_of({{Library::kPeft, "0.11.1"}}), c, {});
  CHECK(effective_adapter_dtype(c) == DType::kBFloat16);
  TrainingConfig d = c;
  d.lora.adapter_dtype.reset();
  apply_stack(stack_of({{Library::kPeft, "0.12.0"}}), d, {});
  CHECK(effective_adapter_dtype(d) == DType::kFloat32);
}

TEST_CASE("TRL's GRPO defaults follow its version") {
  auto grpo = [](const char* trl, bool vllm) {
    TrainingConfig c;
    c.method = Method::kGrpo;
    if (vllm) c.grpo.vllm = VllmMode::kColocate;
    apply_stack(stack_of({{Library::kTrl, trl}}), c, {});
    return c.grpo;
  };
  CHECK(grpo("0.16.0", true).vllm_gpu_memory_utilization == 0.9);
  CHECK(grpo("0.16.0", true).vllm == VllmMode::kColocate);  // only the colocated engine before 0.18
  CHECK(grpo("0.16.0", false).beta == 0.04);
  CHECK(grpo("0.19.0", false).beta == 0.0);
  CHECK(grpo("0.20.0", true).vllm == VllmMode::kServer);    // vllm_mode server: 0.18-0.29
  CHECK(grpo("1.0.0", true).vllm == VllmMode::kColocate);
  CHECK(grpo("1.0.0", true).vllm_gpu_memory_utilization == 0.3);
}

TEST_CASE("versions outside what memplan read, and behaviours it does not model, are warned") {
  TrainingConfig c;
  c.method = Method::kDpo;
  const auto a = apply_stack(stack_of({{Library::kTrl, "0.20.0"}, {Library::kTransformers, "3.0.0"}}), c, {});
  REQUIRE(a.warnings.size() == 2);
  CHECK(a.warnings[0] ==
        "transformers 3.0.0 is older than the oldest release memplan's rules were read from (4.36.0): its rules are "
        "taken as 4.36.0's");
  CHECK(a.warnings[1].rfind("trl 0.20.0's DPO forwards pass output_hidden_states=True", 0) == 0);
  TrainingConfig d;
  const auto b = apply_stack(stack_of({{Library::kTorch, "9.1"}}), d, {});
  REQUIRE(b.warnings.size() == 1);
  CHECK(b.warnings[0].find("newer than the newest release") != std::string::npos);
  // A patch release past the newest read is the same minor release: no warning.
  CHECK(apply_stack(stack_of({{Library::kTorch, "2.13.5"}}), d, {}).warnings.empty());
}

TEST_CASE("which allocator variable takes effect depends on torch") {
  const std::optional<std::string> none;
  // torch 2.4: only PYTORCH_CUDA_ALLOC_CONF exists.
  auto a = choose_allocator_conf(version("2.4.1"), "expandable_segments:True", none);
  CHECK_FALSE(a.value);
  CHECK(a.note ==
        "torch 2.4.1 reads only PYTORCH_CUDA_ALLOC_CONF (PYTORCH_ALLOC_CONF arrived in 2.8): "
        "PYTORCH_ALLOC_CONF=expandable_segments:True has no effect");
  a = choose_allocator_conf(version("2.4.1"), none, "expandable_segments:True");
  CHECK(a.value == "expandable_segments:True");
  CHECK(a.variable == "PYTORCH_CUDA_ALLOC_CONF");
  // torch 2.9.1: the new name's expandable_segments is ignored on CUDA; its other keys apply.
  a = choose_allocator_conf(version("2.9.1"), "expandable_segments:True,max_split_size_mb:128", none);
  CHECK(a.value == "max_split_size_mb:128");
  CHECK(a.variable == "PYTORCH_ALLOC_CONF");
  CHECK(a.note.find("pytorch issue #183387") != std::string::npos);
  a = choose_allocator_conf(version("2.9.1"), "expandable_segments:True", "expandable_segments:True");
  CHECK(a.value == "expandable_segments:True");
  // torch 2.11: the new name wins over the deprecated one.
  a = choose_allocator_conf(version("2.11.0"), "expandable_segments:True", "max_split_size_mb:64");
  CHECK(a.value == "expandable_segments:True");
  CHECK(a.note == "torch 2.11.0 reads PYTORCH_ALLOC_CONF and ignores the deprecated PYTORCH_CUDA_ALLOC_CONF="
                  "max_split_size_mb:64");
  a = choose_allocator_conf(version("2.11.0"), none, "max_split_size_mb:64");
  CHECK(a.value == "max_split_size_mb:64");
  CHECK(a.note.empty());
}

TEST_CASE("torch before 2.0 runs torch.optim's single-tensor loop on CUDA (foreach=False by default)") {
  // torch 1.13 torch/optim/adamw.py: `if foreach is None: foreach = False`; 2.0 defaults CUDA
  // parameters to the multi-tensor path (docs/formulas.md#optimizer-step-temporaries).
  const auto foreach_arg = [](const char* torch, OptimizerKind k, Device d = Device::kCuda) {
    TrainingConfig c;
    c.device = d;
    c.optim.kind = k;
    const auto a = apply_stack(stack_of({{Library::kTorch, torch}}), c, {});
    const auto it = c.optim.args.find("foreach");
    return std::pair{it == c.optim.args.end() ? std::string("-") : it->second, effect(a, "optim_args") != nullptr};
  };
  CHECK(foreach_arg("1.10.1", OptimizerKind::kAdamWTorch) == std::pair{std::string("false"), true});
  CHECK(foreach_arg("1.13.1", OptimizerKind::kSgd) == std::pair{std::string("false"), true});
  CHECK(foreach_arg("1.13.1", OptimizerKind::kRmsprop) == std::pair{std::string("false"), true});
  CHECK(foreach_arg("2.0.0", OptimizerKind::kAdamWTorch) == std::pair{std::string("-"), false});
  // Fused and bitsandbytes optimizers have no foreach path; on the CPU single-tensor is already the default.
  CHECK(foreach_arg("1.13.1", OptimizerKind::kAdamWTorchFused) == std::pair{std::string("-"), false});
  CHECK(foreach_arg("1.13.1", OptimizerKind::kAdamW8bit) == std::pair{std::string("-"), false});
  CHECK(foreach_arg("1.13.1", OptimizerKind::kAdamWTorch, Device::kCpu) == std::pair{std::string("-"), false});
  // No torch version given: the newest release's default (foreach), nothing added.
  TrainingConfig c;
  c.device = Device::kCuda;
  apply_stack(Stack{}, c, {});
  CHECK(c.optim.args.count("foreach") == 0);
  // An explicit foreach=True is kept.
  TrainingConfig given;
  given.device = Device::kCuda;
  given.optim.args["foreach"] = "true";
  apply_stack(stack_of({{Library::kTorch, "1.13.1"}}), given, {});
  CHECK(given.optim.args.at("foreach") == "true");
}

TEST_CASE("torch before 2.0 zeroes the gradients instead of freeing them (zero_grad(set_to_none=False))") {
  // torch 1.13 torch/optim/optimizer.py and torch/nn/modules/module.py: `def zero_grad(self,
  // set_to_none: bool = False)`, then `p.grad.zero_()`; 2.0 made True the default
  // (docs/formulas.md#zero-grad-set-to-none).
  const auto kept = [](const char* torch, ShardingStrategy sh = ShardingStrategy::kNone, Device d = Device::kCuda) {
    TrainingConfig c;
    c.device = d;
    c.parallel.sharding = sh;
    const auto a = apply_stack(stack_of({{Library::kTorch, torch}}), c, {});
    const StackEffect* e = effect(a, "zero_grad");
    CHECK((e != nullptr) == c.zero_grad_keeps_grads);
    return c.zero_grad_keeps_grads;
  };
  CHECK(kept("1.10.1"));
  CHECK(kept("1.13.1"));
  CHECK(kept("1.13.1", ShardingStrategy::kNone, Device::kCpu));  // the default is the same on every device
  CHECK_FALSE(kept("2.0.0"));
  CHECK_FALSE(kept("2.0.0rc1"));  // the 2.0 release candidates already had the new default
  // DeepSpeed's engine and FSDP keep their gradients their own way.
  CHECK_FALSE(kept("1.13.1", ShardingStrategy::kZero2));
  CHECK_FALSE(kept("1.13.1", ShardingStrategy::kFsdpFullShard));
  TrainingConfig c;
  const auto a = apply_stack(stack_of({{Library::kTorch, "1.10.1"}}), c, {});
  REQUIRE(effect(a, "zero_grad") != nullptr);
  CHECK(effect(a, "zero_grad")->why ==
        "set_to_none=false: torch 1.10.1 (as 1.13.0) zeroes every .grad instead of freeing it, so the gradients "
        "stay allocated into the next step (< 2.0)");  // older than 1.13.0: its rules are taken as 1.13.0's
  // No torch version: the newest release's default (set_to_none=True).
  TrainingConfig none;
  apply_stack(Stack{}, none, {});
  CHECK_FALSE(none.zero_grad_keeps_grads);
}

TEST_CASE("accelerate 0.30+ upcasts FSDP's trainable 16-bit FlatParameters to fp32 under mixed precision") {
  // accelerate src/accelerate/accelerator.py prepare_model (v0.30.0 to v1.14.0, PR #2674): with
  // mixed_precision != "no", every FSDP1 FlatParameter that requires grad and is not fp32 gets
  // `param.data = param.data.to(torch.float32)` (docs/formulas.md#accelerate-fsdp-upcast).
  const auto upcast = [](const char* accelerate, TrainingConfig c) {
    const auto a = apply_stack(accelerate ? stack_of({{Library::kAccelerate, accelerate}}) : Stack{}, c, {});
    CHECK((effect(a, "fsdp_mixed_precision") != nullptr && effect(a, "fsdp_mixed_precision")->why.rfind("true", 0) == 0) ==
          c.parallel.fsdp_mixed_precision);
    return c.parallel.fsdp_mixed_precision;
  };
  TrainingConfig full;
  full.torch_dtype = DType::kBFloat16;
  full.autocast = DType::kBFloat16;
  full.parallel.num_gpus = 2;
  full.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  CHECK(upcast("0.33.0", full));
  CHECK(upcast("0.30.0", full));
  CHECK_FALSE(upcast("0.29.3", full));  // before PR #2674 the 16-bit FlatParameters stayed 16-bit
  CHECK(upcast(nullptr, full));          // no version: the newest release, which still upcasts
  TrainingConfig pure = full;            // no mixed precision (no --bf16): nothing is upcast
  pure.autocast.reset();
  CHECK_FALSE(upcast("0.33.0", pure));
  TrainingConfig fp32 = full;            // an fp32 model has nothing to upcast
  fp32.torch_dtype = DType::kFloat32;
  CHECK_FALSE(upcast("0.33.0", fp32));
  TrainingConfig one = full;             // no FSDP
  one.parallel.sharding = ShardingStrategy::kNone;
  CHECK_FALSE(upcast("0.33.0", one));
  TrainingConfig fsdp2 = full;           // FSDP2 did not exist in accelerate before 1.6
  fsdp2.parallel.fsdp_version = 2;
  CHECK_FALSE(upcast("0.33.0", fsdp2));
  TrainingConfig lora = full;            // PEFT's fp32 adapters are already fp32, the base is frozen
  lora.lora.enabled = true;
  CHECK_FALSE(upcast("0.33.0", lora));
  lora.lora.adapter_dtype = DType::kBFloat16;  // 16-bit adapters (sharded QLoRA under TRL < 0.27)
  CHECK(upcast("0.33.0", lora));
  TrainingConfig c = full;
  const auto a = apply_stack(stack_of({{Library::kAccelerate, "0.33.0"}}), c, {});
  REQUIRE(effect(a, "fsdp_mixed_precision") != nullptr);
  CHECK(effect(a, "fsdp_mixed_precision")->why ==
        "true: accelerate 0.33.0 upcasts FSDP's trainable bfloat16 FlatParameters to fp32 under mixed precision and "
        "gathers them in bfloat16 (>= 0.30)");
  // 0.29 is a release memplan has read (its accelerator.py has no upcast): no "taken as" warning,
  // and the version that decided is said.
  TrainingConfig old = full;
  const auto b = apply_stack(stack_of({{Library::kAccelerate, "0.29.3"}}), old, {});
  CHECK(b.warnings.empty());
  REQUIRE(effect(b, "fsdp_mixed_precision") != nullptr);
  CHECK(effect(b, "fsdp_mixed_precision")->why ==
        "false: accelerate 0.29.3 keeps FSDP's FlatParameters in bfloat16 (the fp32 upcast arrived in 0.30)");
  // Older than anything read: taken as the oldest release read, and the rules do what that one does.
  TrainingConfig older = full;
  const auto d = apply_stack(stack_of({{Library::kAccelerate, "0.15.0"}}), older, {});
  REQUIRE(d.warnings.size() == 1);
  CHECK(d.warnings[0] == "accelerate 0.15.0 is older than the oldest release memplan's rules were read from (0.20.0): "
                         "its rules are taken as 0.20.0's");
  CHECK_FALSE(older.parallel.fsdp_mixed_precision);
  CHECK(effect(d, "fsdp_mixed_precision")->why ==
        "false: accelerate 0.15.0 (as 0.20.0) keeps FSDP's FlatParameters in bfloat16 (the fp32 upcast arrived in 0.30)");
}

TEST_CASE("accelerate's upcast holds only for runs that go through accelerate") {
  // torchtitan, torchtune, NeMo, Megatron, verl and plain PyTorch FSDP never call
  // Accelerator.prepare_model: their FlatParameters keep the weights' dtype.
  TrainingConfig full;
  full.torch_dtype = DType::kBFloat16;
  full.autocast = DType::kBFloat16;
  full.parallel.num_gpus = 8;
  full.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  RunContext verl;
  verl.accelerate = false;
  verl.framework = "verl";
  TrainingConfig c = full;
  auto a = apply_stack(Stack{}, c, {}, verl);
  CHECK_FALSE(c.parallel.fsdp_mixed_precision);
  REQUIRE(effect(a, "fsdp_mixed_precision") != nullptr);
  CHECK(effect(a, "fsdp_mixed_precision")->why == "false: verl does not prepare the model through accelerate, so "
                                                  "accelerate's FSDP upcast does not apply; the trainable parameters "
                                                  "stay bfloat16");
  RunContext unknown;
  unknown.accelerate.reset();
  unknown.framework = "a flat config";
  TrainingConfig u = full;
  a = apply_stack(Stack{}, u, {}, unknown);
  CHECK_FALSE(u.parallel.fsdp_mixed_precision);
  REQUIRE(a.warnings.size() == 1);
  CHECK(a.warnings[0] == "whether this run prepares its model through accelerate is not known (a flat config): under "
                         "HF Trainer or accelerate (accelerate 1.14.0) the trainable bfloat16 parameters would be upcast "
                         "to fp32 shards (--fsdp-mixed-precision), which this estimate does not count");
}

TEST_CASE("accelerate's FSDP2 upcast by release: the whole model, nothing, then the trainable parameters") {
  // accelerate src/accelerate/utils/fsdp_utils.py fsdp2_prepare_model (git log -S upcast):
  //   v1.6.0-v1.12.0 (PR #3394, #3528): `model = model.to(torch.float32)` after fully_shard
  //   v1.13.0 (PR #3848): `param = param.to(torch.float32)` rebinds a local: nothing is cast
  //   v1.14.0 (PR #3985): `param.data = param.data.to(torch.float32)` for requires_grad
  //     parameters before fully_shard, skipped when the model holds Params4bit
  TrainingConfig c;
  c.torch_dtype = DType::kBFloat16;
  c.autocast = DType::kBFloat16;
  c.parallel.num_gpus = 8;
  c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  c.parallel.fsdp_version = 2;
  const auto mp = [](const char* v, TrainingConfig t, const ModelSpec* m = nullptr) {
    const auto a = apply_stack(stack_of({{Library::kAccelerate, v}}), t, {}, RunContext{}, m);
    return std::pair{t.parallel.fsdp_mixed_precision, a};
  };
  CHECK(mp("1.6.0", c).first);
  CHECK(mp("1.12.0", c).first);
  CHECK(effect(mp("1.8.0", c).second, "fsdp_mixed_precision")->why ==
        "true: accelerate 1.8.0 casts the whole sharded model to fp32 after fully_shard and gathers it in bfloat16 "
        "(1.6-1.12)");
  CHECK_FALSE(mp("1.13.0", c).first);
  CHECK(effect(mp("1.13.0", c).second, "fsdp_mixed_precision")->why ==
        "false: accelerate 1.13.0's FSDP2 upcast rebinds a local variable (`param = param.to(torch.float32)`) and "
        "casts nothing (1.13)");
  CHECK(mp("1.14.0", c).first);
  CHECK(effect(mp("1.14.0", c).second, "fsdp_mixed_precision")->why ==
        "true: accelerate 1.14.0 casts the trainable bfloat16 parameters to fp32 before fully_shard and gathers them "
        "in bfloat16 (>= 1.14)");
  const auto before = mp("1.5.0", c);
  CHECK_FALSE(before.first);
  REQUIRE(before.second.warnings.size() == 1);
  CHECK(before.second.warnings[0] == "accelerate 1.5.0 has no FSDP2 (fsdp_version 2 arrived in 1.6): memplan "
                                     "estimates fully_shard without accelerate's upcast");
  TrainingConfig pure = c;  // no mixed precision: nothing is cast
  pure.autocast.reset();
  CHECK_FALSE(mp("1.8.0", pure).first);
  CHECK(mp("1.8.0", pure).second.warnings.empty());
  TrainingConfig q = c;  // QLoRA: 1.14 skips a model holding Params4bit
  q.lora.enabled = true;
  q.lora.adapter_dtype = DType::kBFloat16;
  q.quant.load_in_4bit = true;
  CHECK_FALSE(mp("1.14.0", q).first);
  // LoRA with PEFT's fp32 adapters under 1.6-1.12: the adapters are fp32 already, but the frozen
  // bf16 base is cast to fp32 shards as well, which memplan does not count: warned with the amount.
  // Llama 3.1 8B has 8,030,261,248 parameters (its model card: 8.03B); 2 bytes more each over 8
  // GPUs is 2,007,565,312 bytes = 1.87 GiB.
  TrainingConfig l = c;
  l.lora.enabled = true;
  const ModelSpec m = memplan::testing::llama31_8b();
  const auto lw = mp("1.10.0", l, &m);
  CHECK_FALSE(lw.first);
  REQUIRE(lw.second.warnings.size() == 1);
  CHECK(lw.second.warnings[0] ==
        "accelerate 1.10.0's FSDP2 preparation casts the frozen bfloat16 weights to fp32 shards too "
        "(`model.to(torch.float32)`, 1.6-1.12), which memplan does not count: the sharded weights are twice what is "
        "shown (+1.87 GiB per GPU: 2 bytes x 8030261248 frozen parameters / 8 GPUs)");
  CHECK(mp("1.14.0", l, &m).second.warnings.empty());  // 1.14: the frozen base stays bf16
}

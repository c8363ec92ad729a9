// Library versions and the settings they decide (docs/formulas.md#versions). Every rule below
// names the releases it was read from; a version outside what memplan has read is treated as the
// nearest one it has, with a warning.
#include "memplan/stack.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <fmt/format.h>

#include "core/sharding.hpp"
#include "memplan/bytes.hpp"
#include "memplan/text.hpp"

namespace memplan {

std::strong_ordering Version::operator<=>(const Version& o) const {
  const std::size_t n = std::max(release.size(), o.release.size());
  for (std::size_t i = 0; i < n; ++i) {
    const int a = i < release.size() ? release[i] : 0;
    const int b = i < o.release.size() ? o.release[i] : 0;
    if (a != b) return a <=> b;
  }
  if (pre != o.pre) return pre ? std::strong_ordering::less : std::strong_ordering::greater;
  return std::strong_ordering::equal;
}

Result<Version> parse_version(std::string_view text) {
  const std::string t = trim(text);
  const auto bad = [&] {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("'{}' is not a version", escape_control(t)),
                      "write a release number as pip shows it, e.g. 4.48.1");
  };
  std::size_t i = 0;
  if (i < t.size() && (t[i] == 'v' || t[i] == 'V')) ++i;
  // An epoch ("2!1.0") changes nothing for the releases memplan knows.
  if (const std::size_t bang = t.find('!'); bang != std::string::npos) i = bang + 1;
  Version v;
  v.text = t;
  while (true) {
    if (i >= t.size() || !std::isdigit(static_cast<unsigned char>(t[i]))) return bad();
    long part = 0;
    std::size_t digits = 0;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) {
      if (++digits > 9) return bad();
      part = part * 10 + (t[i] - '0');
      ++i;
    }
    v.release.push_back(static_cast<int>(part));
    if (v.release.size() > 6) return bad();
    if (i + 1 < t.size() && t[i] == '.' && std::isdigit(static_cast<unsigned char>(t[i + 1]))) {
      ++i;
      continue;
    }
    break;
  }
  if (i == t.size()) return v;
  // What may follow the release: a pre-release (a1, b2, rc1, .dev0, -alpha), a post-release
  // (.post1), a local part (+cu121). Anything else is not a version.
  std::string rest = to_lower(t.substr(i));
  if (const std::size_t plus = rest.find('+'); plus != std::string::npos) rest = rest.substr(0, plus);
  if (rest.empty()) return v;  // only a local part
  for (char& ch : rest)
    if (ch == '-' || ch == '_') ch = '.';
  if (rest[0] == '.') rest = rest.substr(1);
  if (rest.empty()) return bad();  // "4.48-": a separator with nothing after it
  static const char* kPre[] = {"dev", "alpha", "beta", "rc", "pre", "preview", "a", "b", "c"};
  static const char* kPost[] = {"post", "rev", "r"};
  // Pre-release spellings first: "rc1" is not the post-release "r".
  for (const char* p : kPre)
    if (rest.rfind(p, 0) == 0) {
      v.pre = true;
      return v;
    }
  for (const char* p : kPost)
    if (rest.rfind(p, 0) == 0) return v;
  return bad();
}

Version version(std::string_view text) {
  auto v = parse_version(text);
  if (!v) std::abort();  // a literal in a rule table: a programming error
  return *v;
}

namespace {

struct LibraryInfo {
  Library lib;
  const char* name;    // pip's distribution name
  const char* oldest;  // the oldest release memplan's rules were read from
  const char* newest;  // the newest
};

// The releases each library's rules were read from (docs/formulas.md#versions). The newest is
// what a library is taken as when nothing says: the release people install today.
const LibraryInfo kLibraries[] = {
    {Library::kTorch, "torch", "1.13.0", "2.13.0"},
    {Library::kTransformers, "transformers", "4.36.0", "5.17.0"},
    {Library::kPeft, "peft", "0.6.0", "0.21.0"},
    {Library::kTrl, "trl", "0.8.0", "1.9.0"},
    {Library::kAccelerate, "accelerate", "0.20.0", "1.14.0"},
    {Library::kBitsandbytes, "bitsandbytes", "0.43.3", "0.50.1"},
    {Library::kDeepspeed, "deepspeed", "0.14.0", "0.19.5"},
    {Library::kLiger, "liger-kernel", "0.5.10", "0.8.2"},
    {Library::kVllm, "vllm", "0.7.0", "0.28.0"},
    {Library::kFlashAttn, "flash-attn", "2.5.0", "2.8.3"},
    {Library::kTorchao, "torchao", "0.8.0", "0.18.0"},
};

const LibraryInfo& info(Library l) {
  for (const auto& i : kLibraries)
    if (i.lib == l) return i;
  std::abort();
}

std::string normalize(std::string_view name) {
  std::string out;
  for (char ch : name) {
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    out += (c == '_' || c == '.') ? '-' : c;
  }
  return out;
}

std::string lib_version(const Stack& s, Library l) {
  return fmt::format("{} {}", library_name(l), s.of(l).text);
}

}  // namespace

const std::vector<Library>& all_libraries() {
  static const std::vector<Library> all = [] {
    std::vector<Library> v;
    for (const auto& i : kLibraries) v.push_back(i.lib);
    return v;
  }();
  return all;
}

std::string_view library_name(Library l) { return info(l).name; }

std::optional<Library> library_from_name(std::string_view name) {
  const std::string n = normalize(trim(name));
  if (n == "pytorch") return Library::kTorch;
  if (n == "liger-kernel-nightly") return Library::kLiger;
  for (const auto& i : kLibraries)
    if (n == i.name) return i.lib;
  return std::nullopt;
}

const Version& newest_modelled(Library l) {
  static const std::map<Library, Version> v = [] {
    std::map<Library, Version> m;
    for (const auto& i : kLibraries) m[i.lib] = version(i.newest);
    return m;
  }();
  return v.at(l);
}

const Version& oldest_modelled(Library l) {
  static const std::map<Library, Version> v = [] {
    std::map<Library, Version> m;
    for (const auto& i : kLibraries) m[i.lib] = version(i.oldest);
    return m;
  }();
  return v.at(l);
}

const Version& Stack::of(Library l) const {
  const auto it = versions.find(l);
  return it != versions.end() ? it->second : newest_modelled(l);
}

StackApplied apply_stack(const Stack& given, TrainingConfig& c, const std::set<std::string>& fixed,
                         const RunContext& run, const ModelSpec* model) {
  StackApplied out;
  const auto free = [&](const char* key) { return fixed.count(key) == 0; };
  // A version outside what memplan has read is taken as the nearest release it has read, and the
  // rules below see that release, so what the warning says is what they do.
  Stack s = given;
  for (auto& [lib, v] : s.versions) {
    const Version* as = nullptr;
    if (v < oldest_modelled(lib)) {
      as = &oldest_modelled(lib);
      out.warnings.push_back(fmt::format("{} {} is older than the oldest release memplan's rules were read from ({}): "
                                         "its rules are taken as {}'s",
                                         library_name(lib), v.text, as->text, as->text));
    } else if (v > newest_modelled(lib) && (v.major() != newest_modelled(lib).major() ||
                                            v.minor() != newest_modelled(lib).minor())) {
      as = &newest_modelled(lib);
      out.warnings.push_back(fmt::format("{} {} is newer than the newest release memplan's rules were read from ({}): "
                                         "its rules are taken as {}'s",
                                         library_name(lib), v.text, as->text, as->text));
    }
    if (as) {
      Version taken = *as;
      taken.text = fmt::format("{} (as {})", v.text, as->text);
      v = taken;
    }
  }

  // transformers' causal-LM loss (docs/formulas.md#logits-and-loss): 4.46-4.48's ForCausalLMLoss
  // shifts a contiguous fp32 copy of the logits; <= 4.45 the model's forward did the same after
  // rebinding the 16-bit logits to their fp32 copy; PR #35646 (4.49) pads the labels instead.
  if (free("transformers_loss")) {
    const Version& t = s.of(Library::kTransformers);
    using LS = TrainingConfig::LossShift;
    if (t >= version("4.49")) {
      c.loss_shift = LS::kPadLabels;
      if (s.has(Library::kTransformers))
        out.effects.push_back({"transformers_loss", fmt::format("pad_labels: {} pads the labels (>= 4.49)",
                                                                lib_version(s, Library::kTransformers))});
    } else if (t >= version("4.46")) {
      c.loss_shift = LS::kShiftLogitsCopy;
      out.effects.push_back({"transformers_loss", fmt::format("shift_contiguous: {} shifts a contiguous fp32 copy of "
                                                              "the logits in ForCausalLMLoss (4.46-4.48)",
                                                              lib_version(s, Library::kTransformers))});
    } else {
      c.loss_shift = LS::kUpcastInModel;
      out.effects.push_back({"transformers_loss", fmt::format("upcast_in_model: {} shifts the fp32 logits in the "
                                                              "model's forward (<= 4.45)",
                                                              lib_version(s, Library::kTransformers))});
    }
  }

  // torch.optim's default implementation (docs/formulas.md#optimizer-step-temporaries): torch 2.0
  // made the multi-tensor (foreach) path the default for CUDA parameters; before it AdamW, SGD,
  // Adagrad and RMSprop run their single-tensor loop unless foreach=True is passed (torch 1.13
  // torch/optim/adamw.py: `if foreach is None: foreach = False`; 1.10-1.12 alike).
  {
    using OK = OptimizerKind;
    const OK k = c.optim.kind;
    const bool takes_foreach = k == OK::kAdamWTorch || k == OK::kSgd || k == OK::kAdagrad || k == OK::kRmsprop;
    if (takes_foreach && c.device == Device::kCuda && s.has(Library::kTorch) &&
        s.of(Library::kTorch) < version("2.0") && c.optim.args.count("foreach") == 0) {
      c.optim.args["foreach"] = "false";
      out.effects.push_back({"optim_args", fmt::format("foreach=false: {} runs torch.optim's single-tensor loop "
                                                       "unless foreach=True is given (< 2.0)",
                                                       lib_version(s, Library::kTorch))});
    }
  }

  // zero_grad's set_to_none (docs/formulas.md#zero-grad-set-to-none): before torch 2.0
  // Optimizer.zero_grad and nn.Module.zero_grad default to set_to_none=False (torch 1.13
  // torch/optim/optimizer.py and torch/nn/modules/module.py: `p.grad.zero_()`), and the trainers
  // call them without the argument (transformers' Trainer `model.zero_grad()`, later
  // `self.optimizer.zero_grad()`); 2.0 made True the default. So every .grad stays allocated
  // into the next step. DeepSpeed's engine and Megatron-Core keep gradients their own way, and
  // FSDP's .grad is the sharded one: the rule is for one GPU and DDP. 2.0's release candidates
  // already have the new default (2.0.0a0: below every 2.0 pre-release).
  if (s.has(Library::kTorch) && s.of(Library::kTorch) < version("2.0.0a0") &&
      c.parallel.sharding == ShardingStrategy::kNone && !c.parallel.megatron_core) {
    c.zero_grad_keeps_grads = true;
    out.effects.push_back({"zero_grad", fmt::format("set_to_none=false: {} zeroes every .grad instead of freeing it, "
                                                    "so the gradients stay allocated into the next step (< 2.0)",
                                                    lib_version(s, Library::kTorch))});
  }

  // Checkpointing's use_reentrant when nothing sets it (docs/formulas.md#gradient-checkpointing):
  // transformers 4.37-4.x passes use_reentrant=True (before, torch's own default, also reentrant);
  // transformers 5 checkpoints non-reentrantly. TRL 0.27+ sets use_reentrant=False where
  // transformers is below 5, except that TRL 0.28+ forces it back to True for PEFT under ZeRO-3.
  if (c.gradient_checkpointing && free("use_reentrant") &&
      (s.has(Library::kTransformers) || s.has(Library::kTrl))) {
    const bool tf5 = s.has(Library::kTransformers) ? s.of(Library::kTransformers).major() >= 5
                                                   : s.of(Library::kTrl) >= version("0.27");
    const Version& trl = s.of(Library::kTrl);
    std::string why;
    bool reentrant = false;
    if (s.has(Library::kTrl) && trl >= version("0.28") && c.lora.enabled &&
        c.parallel.sharding == ShardingStrategy::kZero3) {
      reentrant = true;
      why = fmt::format("true: {} forces use_reentrant=True for PEFT under ZeRO-3 (>= 0.28)", lib_version(s, Library::kTrl));
    } else if (tf5) {
      why = s.has(Library::kTransformers)
                ? fmt::format("false: {} checkpoints non-reentrantly by default (>= 5)",
                              lib_version(s, Library::kTransformers))
                : fmt::format("false: {} sets use_reentrant=False (>= 0.27)", lib_version(s, Library::kTrl));
    } else if (s.has(Library::kTrl) && trl >= version("0.27")) {
      why = fmt::format("false: {} sets use_reentrant=False under transformers 4.x (>= 0.27)",
                        lib_version(s, Library::kTrl));
    } else {
      reentrant = true;
      why = s.has(Library::kTransformers)
                ? fmt::format("true: {} checkpoints reentrantly when nothing sets use_reentrant (4.x)",
                              lib_version(s, Library::kTransformers))
                : fmt::format("true: {} leaves transformers 4.x's reentrant default (< 0.27)", lib_version(s, Library::kTrl));
    }
    c.checkpoint_reentrant = reentrant;
    out.effects.push_back({"use_reentrant", why});
  }

  // A bitsandbytes-quantized model with adapters under TRL's SFTTrainer (docs/formulas.md#qlora):
  //   < 0.25  PEFT's prepare_model_for_kbit_training (every non-4-bit parameter to fp32), then,
  //           with bf16, peft_module_casting_to_bf16 (norms fp32, embeddings and lm_head bf16):
  //           trl_legacy; without bf16 nothing is cast back: peft_upcast
  //   0.25    TRL's own preparation upcasts only the norms: trl_legacy
  //   0.26    no upcast, but peft_module_casting_to_bf16 still casts the norms to fp32: trl_legacy
  //           with bf16, freeze_only without
  //   >= 0.27 neither: every trainable parameter cast to bf16: freeze_only, bf16 adapters
  // Sharded QLoRA (FSDP or ZeRO-3, Params4bit not on the GPU when the trainer starts) skips the
  // preparation and asks PEFT for adapters in the weights' dtype.
  const bool quantized = c.quant.load_in_4bit || c.quant.load_in_8bit;
  if (quantized && c.lora.enabled && free("kbit_prepare") && s.has(Library::kTrl)) {
    using KP = QuantConfig::KbitPrepare;
    const Version& trl = s.of(Library::kTrl);
    const bool sharded = c.parallel.sharding == ShardingStrategy::kZero3 || fsdp_family(c.parallel.sharding);
    const bool bf16 = c.autocast == DType::kBFloat16;
    KP kp = KP::kFreezeOnly;
    std::optional<DType> adapters;
    std::string why, adapters_why;
    if (trl >= version("0.27")) {
      adapters = DType::kBFloat16;
      why = fmt::format("freeze_only: {} only freezes the quantized model and casts its trainable parameters to "
                        "bf16 (>= 0.27)",
                        lib_version(s, Library::kTrl));
      adapters_why = fmt::format("{} casts a quantized model's trainable parameters to bf16 (>= 0.27)",
                                 lib_version(s, Library::kTrl));
    } else if (sharded) {
      adapters = c.torch_dtype;
      why = fmt::format("freeze_only: {} skips the k-bit preparation for sharded QLoRA (FSDP or ZeRO-3)",
                        lib_version(s, Library::kTrl));
      adapters_why = fmt::format("{} passes autocast_adapter_dtype=False for sharded QLoRA: adapters in the "
                                 "weights' dtype",
                                 lib_version(s, Library::kTrl));
    } else if (bf16 || (trl >= version("0.25") && trl < version("0.26"))) {
      kp = KP::kTrlLegacy;
      adapters = DType::kFloat32;
      why = fmt::format("trl_legacy: {} prepares the model for k-bit training with the norms in fp32 (< 0.27)",
                        lib_version(s, Library::kTrl));
    } else if (trl < version("0.25")) {
      kp = KP::kPeftUpcast;
      adapters = DType::kFloat32;
      why = fmt::format("peft_upcast: {} runs prepare_model_for_kbit_training and, without bf16, casts nothing "
                        "back (< 0.25)",
                        lib_version(s, Library::kTrl));
    } else {
      adapters = DType::kFloat32;
      why = fmt::format("freeze_only: {} neither upcasts nor, without bf16, casts to bf16 (0.26)",
                        lib_version(s, Library::kTrl));
    }
    c.quant.kbit_prepare = kp;
    out.effects.push_back({"kbit_prepare", why});
    if (adapters_why.empty())
      adapters_why = fmt::format("{} keeps PEFT's autocast_adapter_dtype (fp32 adapters)", lib_version(s, Library::kTrl));
    if (free("adapter_dtype") && adapters) {
      c.lora.adapter_dtype = adapters;
      out.effects.push_back({"adapter_dtype", fmt::format("{}: {}", to_string(*adapters), adapters_why)});
    }
  }

  // PEFT's adapter dtype (docs/formulas.md#qlora): get_peft_model(autocast_adapter_dtype=True)
  // upcasts 16-bit adapters to fp32 since PEFT 0.12; from 0.6 to 0.11 the adapters took the base
  // layer's dtype (fp32 on a 4-bit base).
  if (c.lora.enabled && free("adapter_dtype") && !c.lora.adapter_dtype && s.has(Library::kPeft) &&
      s.of(Library::kPeft) < version("0.12") && !quantized) {
    c.lora.adapter_dtype = c.torch_dtype;
    out.effects.push_back({"adapter_dtype", fmt::format("{}: {} creates the adapters in the base layer's dtype "
                                                        "(autocast_adapter_dtype arrived in 0.12)",
                                                        to_string(c.torch_dtype), lib_version(s, Library::kPeft))});
  }

  // PEFT's default LoRA targets (docs/formulas.md#peft-default-targets): with no target_modules,
  // get_peft_model looks model.config.model_type up in the mapping of the PEFT release installed
  // and raises where it has no entry.
  if (model && !model->model_type.empty() && run.peft && c.lora.enabled && !c.lora.all_linear && c.lora.target_modules.empty() &&
      free("lora_target_modules")) {
    const std::string& type = model->config_model_type.empty() ? model->model_type : model->config_model_type;
    const Version& peft = s.of(Library::kPeft);
    const std::string peftv = lib_version(s, Library::kPeft);
    if (auto d = peft_default_lora_targets(type, peft)) {
      c.lora.target_modules = d->modules;
      std::string list;
      for (const auto& m : d->modules) list += (list.empty() ? "" : ", ") + m;
      out.effects.push_back({"lora_target_modules", fmt::format("{}: {}'s default for model_type '{}' (since {})", list,
                                                                peftv, type, d->since.text)});
    } else {
      std::string attn;
      std::vector<std::string> seen;
      for (int layer = 0; layer < (model->hybrid.enabled() ? model->num_layers : 1); ++layer)
        for (const auto& lin : layer_linears(*model, layer))
          if (lin.role == LinearRole::kAttention && lin.nn_linear &&
              std::find(seen.begin(), seen.end(), lin.name) == seen.end()) {
            seen.push_back(lin.name);
            attn += (attn.empty() ? "" : ",") + lin.name;
          }
      const auto first = peft_first_release_with(type);
      out.error = make_error(
          ErrorCode::kInvalidArgument,
          fmt::format("{} has no default LoRA target modules for model_type '{}'{}: get_peft_model raises \"Please "
                      "specify `target_modules` in `peft_config`\"",
                      peftv, type,
                      first ? fmt::format(" (its mapping gained them in {})", first->text) : std::string()),
          fmt::format("name the targets: --lora-target-modules {} (or all-linear), or target_modules: all-linear in "
                      "the config",
                      attn.empty() ? std::string("all-linear") : attn));
    }
  }

  // accelerate's FSDP upcast (docs/formulas.md#accelerate-fsdp-upcast). Only a run that goes
  // through Accelerator.prepare_model (HF Trainer and the trainers built on it) has it; torchtitan,
  // torchtune, NeMo, Megatron, verl or plain PyTorch FSDP keep the weights' dtype.
  //   FSDP1, since 0.30 (PR #2674): with mixed_precision != "no" every FlatParameter that requires
  //     grad and is not fp32 is cast in place (`param.data = param.data.to(torch.float32)`) and
  //     MixedPrecision(param_dtype=bf16/fp16) gathers it in 16 bits; frozen FlatParameters and fp32
  //     adapters are left alone. Before 0.30: nothing cast.
  //   FSDP2 (fsdp2_prepare_model, since 1.6, PR #3394): 1.6-1.12 cast the whole sharded model
  //     after fully_shard (`model = model.to(torch.float32)`: frozen weights too; FSDPModule._apply
  //     replaces each shard, so the 16-bit shards are freed); 1.13 (PR #3848) rebinds a local
  //     (`param = param.to(torch.float32)`), which casts nothing; 1.14 (PR #3985) casts the
  //     trainable parameters in place before fully_shard, unless the model holds Params4bit.
  {
    const bool sixteen = c.torch_dtype == DType::kBFloat16 || c.torch_dtype == DType::kFloat16;
    const bool trainable16 = !c.lora.enabled || (c.lora.adapter_dtype && (*c.lora.adapter_dtype == DType::kBFloat16 ||
                                                                          *c.lora.adapter_dtype == DType::kFloat16));
    const bool applies = fsdp_family(c.parallel.sharding) && c.autocast && sixteen &&
                         !c.parallel.fsdp_mixed_precision && free("fsdp_mixed_precision");
    const Version& acc = s.of(Library::kAccelerate);
    const std::string accv = lib_version(s, Library::kAccelerate);
    const bool v2 = c.parallel.fsdp_version == 2;
    if (applies && run.accelerate == false) {
      if (acc >= version("0.30") && trainable16)
        out.effects.push_back({"fsdp_mixed_precision",
                               fmt::format("false: {} does not prepare the model through accelerate, so accelerate's "
                                           "FSDP upcast does not apply; the trainable parameters stay {}",
                                           run.framework, to_string(c.torch_dtype))});
    } else if (applies && !run.accelerate) {
      if (acc >= version("0.30") && trainable16)
        out.warnings.push_back(fmt::format(
            "whether this run prepares its model through accelerate is not known ({}): under HF Trainer or accelerate "
            "({}) the trainable {} parameters would be upcast to fp32 shards (--fsdp-mixed-precision), which this "
            "estimate does not count",
            run.framework, accv, to_string(c.torch_dtype)));
    } else if (applies && !v2) {
      if (acc >= version("0.30") && trainable16) {
        c.parallel.fsdp_mixed_precision = true;
        out.effects.push_back(
            {"fsdp_mixed_precision",
             fmt::format("true: {} upcasts FSDP's trainable {} FlatParameters to fp32 under mixed precision and gathers "
                         "them in {} (>= 0.30)",
                         accv, to_string(c.torch_dtype), to_string(*c.autocast))});
      } else if (acc < version("0.30") && trainable16) {
        out.effects.push_back({"fsdp_mixed_precision",
                               fmt::format("false: {} keeps FSDP's FlatParameters in {} (the fp32 upcast arrived in "
                                           "0.30)",
                                           accv, to_string(c.torch_dtype))});
      }
    } else if (applies && v2) {
      const bool quantized4 = c.quant.load_in_4bit || c.quant.load_in_8bit;
      if (acc < version("1.6")) {
        out.warnings.push_back(fmt::format("{} has no FSDP2 (fsdp_version 2 arrived in 1.6): memplan estimates "
                                           "fully_shard without accelerate's upcast",
                                           accv));
      } else if (acc >= version("1.13") && acc < version("1.14")) {
        out.effects.push_back({"fsdp_mixed_precision",
                               fmt::format("false: {}'s FSDP2 upcast rebinds a local variable (`param = "
                                           "param.to(torch.float32)`) and casts nothing (1.13)",
                                           accv)});
      } else if (acc >= version("1.14")) {
        if (quantized4)
          out.effects.push_back({"fsdp_mixed_precision",
                                 fmt::format("false: {} skips the FSDP2 upcast for a model holding bitsandbytes "
                                             "parameters (>= 1.14)",
                                             accv)});
        else if (trainable16) {
          c.parallel.fsdp_mixed_precision = true;
          out.effects.push_back(
              {"fsdp_mixed_precision",
               fmt::format("true: {} casts the trainable {} parameters to fp32 before fully_shard and gathers them in "
                           "{} (>= 1.14)",
                           accv, to_string(c.torch_dtype), to_string(*c.autocast))});
        }
      } else {  // 1.6-1.12: the whole model
        if (quantized4) {
          out.warnings.push_back(fmt::format(
              "{}'s FSDP2 preparation casts the whole model to fp32 after fully_shard (1.6-1.12), bitsandbytes "
              "parameters included, which memplan does not model for a quantized model",
              accv));
        } else {
          if (trainable16) {
            c.parallel.fsdp_mixed_precision = true;
            out.effects.push_back(
                {"fsdp_mixed_precision",
                 fmt::format("true: {} casts the whole sharded model to fp32 after fully_shard and gathers it in {} "
                             "(1.6-1.12)",
                             accv, to_string(*c.autocast))});
          }
          if (c.lora.enabled) {
            // The frozen base is cast too: its shards take 4 bytes a parameter, not 2; memplan's
            // fsdp_mixed_precision counts fp32 copies of trainable parameters only.
            std::string amount;
            if (model) {
              const std::int64_t frozen = count_parameters(*model).total;
              const std::int64_t shards = std::max(1, c.parallel.num_gpus * c.parallel.nodes);
              amount = fmt::format(" (+{} per GPU: 2 bytes x {} frozen parameters / {} GPUs)",
                                   format_human(Bytes::of(2 * frozen / shards)), frozen, shards);
            }
            out.warnings.push_back(fmt::format(
                "{}'s FSDP2 preparation casts the frozen {} weights to fp32 shards too (`model.to(torch.float32)`, "
                "1.6-1.12), which memplan does not count: the sharded weights are twice what is shown{}",
                accv, to_string(c.torch_dtype), amount));
          }
        }
      }
    }
  }

  // TRL GRPO's defaults (docs/formulas.md#grpo): vllm_gpu_memory_utilization 0.9 before 0.18,
  // 0.3 since; beta 0.04 before 0.19, 0.0 since (no reference model by default).
  if (c.method == Method::kGrpo && s.has(Library::kTrl)) {
    const Version& trl = s.of(Library::kTrl);
    // use_vllm without vllm_mode: a separate `trl vllm-serve` server from 0.18 to 0.29, in the
    // training process since 1.0 (TRL < 0.18 had only the colocated engine).
    if (c.grpo.vllm != VllmMode::kNone && free("vllm_mode") && trl >= version("0.18") && trl < version("1.0")) {
      c.grpo.vllm = VllmMode::kServer;
      out.effects.push_back({"vllm_mode", fmt::format("server: {}'s default vllm_mode (0.18-0.29): vLLM runs in its "
                                                      "own server process, not on the training GPUs",
                                                      lib_version(s, Library::kTrl))});
    }
    if (free("vllm_gpu_memory_utilization") && c.grpo.vllm == VllmMode::kColocate) {
      const bool old = trl < version("0.18");
      c.grpo.vllm_gpu_memory_utilization = old ? 0.9 : 0.3;
      out.effects.push_back({"vllm_gpu_memory_utilization",
                             fmt::format("{}: {}'s default ({})", old ? "0.9" : "0.3", lib_version(s, Library::kTrl),
                                         old ? "< 0.18" : ">= 0.18")});
    }
    if (free("beta")) {
      const bool old = trl < version("0.19");
      c.grpo.beta = old ? 0.04 : 0.0;
      out.effects.push_back({"beta", fmt::format("{}: {}'s default ({})", old ? "0.04" : "0.0",
                                                 lib_version(s, Library::kTrl), old ? "< 0.19" : ">= 0.19")});
    }
  }

  // Behaviours of versions memplan has read but does not model: said, with their direction.
  if (c.method == Method::kDpo && s.has(Library::kTrl) && s.of(Library::kTrl) >= version("0.19") &&
      s.of(Library::kTrl) < version("0.29"))
    out.warnings.push_back(fmt::format("{}'s DPO forwards pass output_hidden_states=True (every layer's hidden states "
                                       "alive through the reference forward and the loss; 0.19-0.28{}): memplan models "
                                       ">= 0.29, so the estimate is low for this version",
                                       lib_version(s, Library::kTrl),
                                       c.loss_kernel == LossKernel::kLiger ? ", and the Liger loss runs the reference "
                                                                             "outside no_grad"
                                                                           : ""));
  if (c.method == Method::kDpo && c.dpo.precompute_ref_log_probs && !c.lora.enabled && s.has(Library::kTrl) &&
      s.of(Library::kTrl) >= version("0.29") && s.of(Library::kTrl) < version("1.2"))
    out.warnings.push_back(fmt::format("{} loads a reference model even with precompute_ref_log_probs (0.29-1.1, fixed "
                                       "by TRL PR #5542 in 1.2): its weights stay on the GPU and are not in this "
                                       "estimate, which is low by them",
                                       lib_version(s, Library::kTrl)));
  if (c.method == Method::kGrpo && c.loss_kernel == LossKernel::kLiger && s.has(Library::kLiger) &&
      s.of(Library::kLiger) < version("0.8"))
    out.warnings.push_back(fmt::format("{}'s GRPO loss builds a completion's full (C, V) logits instead of "
                                       "vocabulary tiles (< 0.8): memplan models 0.8, so the estimate can be low",
                                       lib_version(s, Library::kLiger)));
  return out;
}

namespace {

// "expandable_segments:True,max_split_size_mb:128" -> its key:value items, in order.
std::vector<std::pair<std::string, std::string>> conf_items(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string item = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (!item.empty()) {
      const std::size_t colon = item.find(':');
      out.emplace_back(trim(item.substr(0, colon)), colon == std::string::npos ? "" : trim(item.substr(colon + 1)));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string join_items(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string out;
  for (const auto& [k, v] : items) out += (out.empty() ? "" : ",") + k + (v.empty() ? "" : ":" + v);
  return out;
}

}  // namespace

AllocatorChoice choose_allocator_conf(const Version& torch, const std::optional<std::string>& alloc_conf,
                                      const std::optional<std::string>& cuda_alloc_conf) {
  AllocatorChoice out;
  if (torch < version("2.8")) {
    // PYTORCH_ALLOC_CONF does not exist before torch 2.8.
    if (cuda_alloc_conf) {
      out.value = cuda_alloc_conf;
      out.variable = "PYTORCH_CUDA_ALLOC_CONF";
    }
    if (alloc_conf)
      out.note = fmt::format("torch {} reads only PYTORCH_CUDA_ALLOC_CONF (PYTORCH_ALLOC_CONF arrived in 2.8): "
                             "PYTORCH_ALLOC_CONF={} has no effect",
                             torch.text, *alloc_conf);
    return out;
  }
  if (!alloc_conf) {
    // The deprecated name alone still configures the allocator.
    if (cuda_alloc_conf) {
      out.value = cuda_alloc_conf;
      out.variable = "PYTORCH_CUDA_ALLOC_CONF";
    }
    return out;
  }
  out.variable = "PYTORCH_ALLOC_CONF";
  auto items = conf_items(*alloc_conf);
  if (torch < version("2.10")) {
    // torch 2.8-2.9: the shared settings come from PYTORCH_ALLOC_CONF first, but the CUDA caching
    // allocator still takes expandable_segments from PYTORCH_CUDA_ALLOC_CONF only (pytorch issue
    // #183387, fixed in 2.10-2.11 when the CUDA config moved onto the shared one).
    std::vector<std::pair<std::string, std::string>> kept;
    bool dropped = false;
    for (const auto& kv : items) {
      if (kv.first == "expandable_segments") dropped = true;
      else kept.push_back(kv);
    }
    if (cuda_alloc_conf)
      for (const auto& kv : conf_items(*cuda_alloc_conf))
        if (kv.first == "expandable_segments") kept.push_back(kv);
    if (dropped)
      out.note = fmt::format("torch {} ignores expandable_segments in PYTORCH_ALLOC_CONF on CUDA (pytorch issue "
                             "#183387, 2.8-2.9){}",
                             torch.text,
                             cuda_alloc_conf ? "; PYTORCH_CUDA_ALLOC_CONF's is used"
                                             : "; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True instead");
    else if (cuda_alloc_conf)
      out.note = fmt::format("torch {} reads PYTORCH_ALLOC_CONF before the deprecated PYTORCH_CUDA_ALLOC_CONF", torch.text);
    items = kept;
  } else if (cuda_alloc_conf) {
    out.note = fmt::format("torch {} reads PYTORCH_ALLOC_CONF and ignores the deprecated PYTORCH_CUDA_ALLOC_CONF={}",
                           torch.text, *cuda_alloc_conf);
  }
  out.value = join_items(items);
  return out;
}

}  // namespace memplan

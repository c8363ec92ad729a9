// The real-world corpus (tests/data/realworld): configs taken unchanged from public repositories
// (MANIFEST.yaml says which repository, commit and path). Next to each one, <name>.expected.yaml
// holds what a person reading the file sees, written by hand. This test loads every file with the
// config loader and compares every value it reads with the expected one; it reports the share
// read right, requires >= 95%, requires each miss to be listed with the located message memplan
// gives for it, and requires no "unknown key" warning anywhere in the corpus.
#include <algorithm>
#include <filesystem>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "io/config/config_loader.hpp"
#include "io/model/custom_model.hpp"
#include "io/config/dialects.hpp"
#include "io/fs.hpp"
#include "io/edit/yaml_edit.hpp"
#include "memplan/text.hpp"

using namespace memplan;
using namespace memplan::io;

namespace {

namespace stdfs = std::filesystem;

const stdfs::path kCorpus = stdfs::path(MEMPLAN_SOURCE_DIR) / "tests/data/realworld";

// The config an expected file describes: same stem, .yaml, .yml or .json.
std::string config_for(const stdfs::path& expected) {
  const std::string stem = expected.filename().string().substr(0, expected.filename().string().size() -
                                                                       std::string(".expected.yaml").size());
  for (const char* ext : {".yaml", ".yml", ".json", ".toml"}) {
    const stdfs::path p = expected.parent_path() / (stem + ext);
    if (stdfs::exists(p)) return p.string();
  }
  return {};
}

std::string strip_instruct(std::string s) {
  s = to_lower(s);
  for (const char* suffix : {"-instruct", "-it", "-chat"})
    if (s.size() > std::string(suffix).size() && s.compare(s.size() - std::string(suffix).size(), std::string::npos,
                                                           suffix) == 0)
      s.resize(s.size() - std::string(suffix).size());
  return s;
}

template <typename T>
T or_else(const Result<T>& r, T fallback) {
  return r ? *r : fallback;
}

struct Loaded {
  std::optional<LoadedConfig> config;
  std::string error;  // the load error, with its location
};

std::string all_messages(const Loaded& l) {
  std::string s = l.error;
  if (l.config) {
    for (const auto& d : l.config->diagnostics) {
      s += '\n';
      s += d.to_string();
    }
    s += '\n';
    s += l.config->inputs.model_hint;
  }
  return s;
}

// The value memplan read for one expected key, as text, and whether it matches.
struct Verdict {
  bool right = false;
  std::string got;
};

Verdict judge(const std::string& key, const YamlNode& want, const Loaded& l) {
  // A config memplan must refuse (PPO with a critic): refused, with the reason.
  if (key == "refused")
    return {!l.config && want.is_scalar() && l.error.find(want.value) != std::string::npos,
            l.config ? std::string("(loaded)") : l.error};
  if (!l.config) return {false, "(not loaded)"};
  const LoadedConfig& lc = *l.config;
  const TrainingConfig& c = lc.inputs.config;
  const std::string w = want.is_scalar() ? want.value : std::string();
  auto as_int = [&](std::int64_t v) { return Verdict{or_else<std::int64_t>(parse_int(w, ""), -1) == v, std::to_string(v)}; };
  auto as_bool = [&](bool v) { return Verdict{or_else<bool>(parse_bool(w, ""), !v) == v, v ? "true" : "false"}; };
  if (key == "model") return {lc.inputs.model_name == w, lc.inputs.model_name};
  if (key == "model_arch") return {strip_instruct(lc.inputs.model_name) == strip_instruct(w), lc.inputs.model_name};
  if (key == "custom_model") {
    if (!lc.inputs.custom_model) return {false, "(no custom model)"};
    std::vector<std::string> assumed;
    auto built = build_custom_model(*lc.inputs.custom_model, assumed);
    if (!built) return {false, built.error().to_string()};
    const ModelSpec& m = *built;
    auto field = [&](const char* k) -> std::int64_t {
      const YamlNode* n = want.get(k);
      return n ? or_else<std::int64_t>(parse_int(n->value, ""), -1) : -1;
    };
    const bool ok = m.num_layers == field("layers") && m.hidden_size == field("hidden") &&
                    m.num_heads == field("heads") && m.intermediate_size == field("ffn") &&
                    m.vocab_size == field("vocab");
    return {ok, fmt::format("layers {} hidden {} heads {} ffn {} vocab {}", m.num_layers, m.hidden_size, m.num_heads,
                            m.intermediate_size, m.vocab_size)};
  }
  if (key == "method") {
    std::string got = to_string(c.method);
    if (c.method == Method::kDpo && c.dpo.ref_model == RefModel::kNone) got += " (no reference)";
    if (w == "sft") return {c.method == Method::kSft, got};
    if (w == "grpo") return {c.method == Method::kGrpo, got};
    if (w == "orpo" || w == "simpo" || w == "cpo")
      return {c.method == Method::kDpo && c.dpo.ref_model == RefModel::kNone, got};
    return {c.method == Method::kDpo && c.dpo.ref_model != RefModel::kNone, got};  // dpo, kto, ipo
  }
  if (key == "batch") return as_int(c.micro_batch);
  if (key == "grad_accum") return as_int(c.grad_accum);
  if (key == "seq_len") return as_int(c.seq_len);
  if (key == "max_prompt_length") return as_int(c.grpo.max_prompt_length);
  if (key == "max_completion_length") return as_int(c.grpo.max_completion_length);
  if (key == "num_generations") return as_int(c.grpo.num_generations);
  if (key == "use_vllm") return as_bool(c.grpo.vllm != VllmMode::kNone);
  if (key == "lora") return as_bool(c.lora.enabled);
  if (key == "lora_r") return {c.lora.enabled && or_else<std::int64_t>(parse_int(w, ""), -1) == c.lora.r, std::to_string(c.lora.r)};
  if (key == "lora_alpha")
    return {c.lora.enabled && or_else<double>(parse_double(w, ""), -1) == c.lora.alpha, fmt::format("{}", c.lora.alpha)};
  if (key == "quant") {
    const std::string got = c.quant.load_in_4bit ? "4bit" : c.quant.load_in_8bit ? "8bit" : "none";
    return {got == w, got};
  }
  if (key == "optim") {
    const std::string got = to_string(c.optim.kind);
    if (w == "adamw" || w == "adam")
      return {c.optim.kind == OptimizerKind::kAdamWTorch || c.optim.kind == OptimizerKind::kAdamWTorchFused, got};
    auto parsed = parse_optimizer(w);
    if (parsed) return {*parsed == c.optim.kind, got};
    // A name the trainers accept that the engine estimates as another optimizer (with a warning):
    // read right when it was estimated as exactly that one.
    if (auto est = io::estimate_optimizer(w)) return {est->kind == c.optim.kind, got};
    return {false, got};
  }
  if (key == "gradient_checkpointing") return as_bool(c.gradient_checkpointing);
  if (key == "use_reentrant") return as_bool(c.reentrant_checkpointing());
  if (key == "checkpoint_every") return as_int(c.checkpoint_every);
  if (key == "checkpoint_policy") {
    const std::string got = c.checkpoint_policy == TrainingConfig::CheckpointPolicy::kOp ? "op" : "full";
    return {got == w, got};
  }
  if (key == "precision") {
    const std::string got = c.autocast ? to_string(*c.autocast) + " autocast" : to_string(c.torch_dtype) + " weights";
    auto dt = parse_dtype(w);
    if (!dt) return {false, got};
    if (*dt == DType::kFloat32) return {!c.autocast && c.torch_dtype == DType::kFloat32, got};
    return {c.autocast ? *c.autocast == *dt : c.torch_dtype == *dt, got};
  }
  if (key == "torch_dtype") {
    auto dt = parse_dtype(w);
    return {dt && *dt == c.torch_dtype && !lc.inputs.torch_dtype_from_model, to_string(c.torch_dtype)};
  }
  if (key == "gpus") return as_int(c.parallel.world_size());
  if (key == "zero_stage") {
    const ShardingStrategy s = c.parallel.sharding;
    const int stage = s == ShardingStrategy::kZero1 ? 1 : s == ShardingStrategy::kZero2 ? 2 : s == ShardingStrategy::kZero3 ? 3 : 0;
    return {or_else<std::int64_t>(parse_int(w, ""), -1) == stage, to_string(s)};
  }
  if (key == "fsdp") {
    const ShardingStrategy s = c.parallel.sharding;
    const bool ok = (w == "full_shard" && s == ShardingStrategy::kFsdpFullShard) ||
                    (w == "shard_grad_op" && s == ShardingStrategy::kFsdpShardGradOp) ||
                    (w == "hybrid_shard" && s == ShardingStrategy::kFsdpHybridShard) ||
                    (w == "no_shard" && s == ShardingStrategy::kFsdpNoShard);
    return {ok, to_string(s)};
  }
  if (key == "loss_kernel") return {to_string(c.loss_kernel) == w, to_string(c.loss_kernel)};
  if (key == "liger_kernels") return as_bool(c.liger_kernels);
  if (key == "offload_optimizer") return as_bool(c.parallel.offload_optimizer);
  if (key == "offload_params") return as_bool(c.parallel.offload_params);
  if (key == "fsdp_version") return as_int(c.parallel.fsdp_version);
  if (key == "tensor_parallel") return as_int(c.parallel.tensor_parallel);
  if (key == "sequence_parallel") return as_bool(c.parallel.sequence_parallel);
  if (key == "megatron_core") return as_bool(c.parallel.megatron_core);
  if (key == "loss_parallel") return as_bool(c.parallel.loss_parallel);
  if (key == "fsdp_reshard_after_forward") return as_bool(c.parallel.fsdp_reshard_after_forward);
  if (key == "pipeline_parallel") return as_int(c.parallel.pipeline_parallel);
  if (key == "virtual_stages") return as_int(c.parallel.virtual_stages);
  if (key == "pp_schedule") return {to_string(c.parallel.pp_schedule) == w, to_string(c.parallel.pp_schedule)};
  if (key == "context_parallel") return as_int(c.parallel.context_parallel);
  if (key == "expert_parallel") return as_int(c.parallel.expert_parallel);
  if (key == "moe_capacity_factor")
    return {or_else<double>(parse_double(w, ""), -1) == c.parallel.moe_capacity_factor,
            fmt::format("{}", c.parallel.moe_capacity_factor)};
  if (key == "attn_implementation") return {to_string(c.attn_impl()) == w, to_string(c.attn_impl())};
  if (key == "image_size") return as_int(c.vision.image_height);  // square: image_max_pixels
  if (key == "encoder_head") {
    const std::string got = lc.inputs.encoder_head ? to_string(*lc.inputs.encoder_head) : "(not read)";
    return {got == w, got};
  }
  if (key == "num_labels") {
    if (!lc.inputs.num_labels) return {false, "(not read)"};
    return as_int(*lc.inputs.num_labels);
  }
  if (key == "texts_per_example") return as_int(c.contrastive.texts_per_example);
  if (key == "pooling") {
    const std::string got = lc.inputs.pooling ? to_string(*lc.inputs.pooling) : "(not read)";
    return {got == w, got};
  }
  if (key == "train_vision_tower") return as_bool(c.vision.train_vision_tower);
  if (key == "train_projector") return as_bool(c.vision.train_projector);
  return {false, "(unknown expected key '" + key + "')"};
}

struct Tally {
  int files = 0, fields = 0, right = 0, explained = 0, false_unknown = 0, load_errors = 0;
  std::vector<std::string> misses;
};

}  // namespace

TEST_CASE("real-world corpus: every value read as a person reads it", "[realworld]") {
  REQUIRE(stdfs::exists(kCorpus));
  std::vector<stdfs::path> expected_files;
  for (const auto& e : stdfs::recursive_directory_iterator(kCorpus)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 14 && name.compare(name.size() - 14, 14, ".expected.yaml") == 0) expected_files.push_back(e.path());
  }
  std::sort(expected_files.begin(), expected_files.end());
  RealFileSystem fs;
  Tally t;
  for (const auto& ef : expected_files) {
    const std::string config = config_for(ef);
    INFO(ef.string());
    REQUIRE_FALSE(config.empty());
    auto text = fs.read_file(ef.string());
    REQUIRE(text.has_value());
    auto doc = parse_yaml(*text, ef.string());
    REQUIRE(doc.has_value());
    ++t.files;

    Loaded l;
    ConfigRequest req;
    req.files = {config};
    auto r = load_config(req, fs);
    if (r) l.config = std::move(*r);
    else {
      l.error = r.error().to_string();
      ++t.load_errors;
    }
    const std::string messages = all_messages(l);
    const std::string rel = stdfs::relative(config, kCorpus).string();

    // No "unknown key" on a real file: every key in it is one its framework accepts.
    if (l.config)
      for (const auto& d : l.config->diagnostics)
        if (d.message.find("unknown key") != std::string::npos) {
          ++t.false_unknown;
          FAIL_CHECK(fmt::format("false warning on {}: {}", rel, d.to_string()));
        }

    const YamlNode* known = doc->root.get("known_misses");
    for (const auto& e : doc->root.entries) {
      const std::string& key = e.key.value;
      if (key == "known_misses") continue;
      if (key == "warns") {
        // Each memory feature memplan does not model must be a located warning naming it.
        for (const auto& item : e.value.items) {
          ++t.fields;
          bool found = false;
          if (l.config)
            for (const auto& d : l.config->diagnostics)
              if (d.to_string().find(item.value) != std::string::npos && d.where && d.where->line > 0) found = true;
          if (found) {
            ++t.right;
            continue;
          }
          t.misses.push_back(fmt::format("{}: no located warning naming '{}'", rel, item.value));
          if (const YamlNode* why = known != nullptr ? known->get("warns") : nullptr) {
            ++t.explained;
            CHECK_THAT(messages, Catch::Contains(why->value));
          } else {
            FAIL_CHECK(fmt::format("{}: expected a located warning naming '{}'; got:\n{}", rel, item.value, messages));
          }
        }
        continue;
      }
      ++t.fields;
      const Verdict v = judge(key, e.value, l);
      if (v.right) {
        ++t.right;
        continue;
      }
      const std::string want = e.value.is_scalar() ? e.value.value : "{...}";
      t.misses.push_back(fmt::format("{}: {} read as '{}', the file says '{}'", rel, key, v.got, want));
      // A value not read right must be a known miss whose located message memplan gives.
      const YamlNode* why = known != nullptr ? known->get(key) : nullptr;
      if (why == nullptr) {
        FAIL_CHECK(fmt::format("{}: {} read as '{}', the file says '{}'\n{}", rel, key, v.got, want, messages));
      } else {
        ++t.explained;
        CHECK_THAT(messages, Catch::Contains(why->value));
      }
    }
  }
  const double share = t.fields > 0 ? 100.0 * t.right / t.fields : 0.0;
  std::ostringstream summary;
  summary << fmt::format("realworld corpus: {} files, {} values, {} read right ({:.1f}%), {} known misses, {} files "
                         "not loaded, {} false 'unknown key' warnings",
                         t.files, t.fields, t.right, share, t.explained, t.load_errors, t.false_unknown);
  for (const auto& m : t.misses) summary << "\n  miss: " << m;
  WARN(summary.str());
  CHECK(t.files >= 150);
  CHECK(share >= 95.0);
  CHECK(t.false_unknown == 0);
}

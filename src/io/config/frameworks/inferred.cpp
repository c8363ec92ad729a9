// Reading by meaning: a config no framework's keys claim (a framework memplan has never seen, an
// in-house trainer) is searched, key by key and section by section, for the concepts memory
// depends on. Each concept has the spellings frameworks use for it (synonym tables below); the
// sections that describe something other than the trained policy (evaluation, generation and
// rollout engines, reference/reward/critic models, tokenizers, sections switched off with
// `enabled: false`) are left out of the training concepts. Every value read gets its file:line
// and the origin "inferred"; the plan states the whole reading in one warning. Two keys of one
// concept that disagree are named and refused, never guessed; a file where neither the model nor
// the micro-batch is found is refused with what was looked for. docs/configs.md#inferred.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

struct Leaf {
  std::vector<std::string> path;  // as written
  std::string dotted;             // join_key_path(path)
  std::string key;                // last component, lowercased, '-' as '_', leading dashes dropped
  std::string parent;             // the section holding it, lowercased ("" at the top level)
  const YamlNode* node = nullptr;
  bool side = false;              // under a section about another model, evaluation or generation
};

std::string normalize(std::string k) {
  while (!k.empty() && k.front() == '-') k.erase(k.begin());
  k = to_lower(k);
  std::replace(k.begin(), k.end(), '-', '_');
  return k;
}

// Sections that describe something other than the training step of the policy.
bool side_section(const std::string& k) {
  static const std::set<std::string> kSide = {
      "eval", "evaluation", "evaluator", "val", "valid", "validation", "test", "inference", "generation", "generate",
      "generation_config", "rollout", "vllm", "vllm_cfg", "sglang", "sampling", "sampling_params", "ref", "reference",
      "ref_model", "reference_model", "reward", "reward_model", "rm", "critic", "value_model", "teacher",
      "teacher_model", "tokenizer", "draft", "draft_model", "judge", "env", "environment", "predict", "benchmark",
      "logging", "logger", "wandb", "checkpoint", "checkpointing", "scheduler", "lr_scheduler", "profiler", "data_eval",
      "eval_config", "evals", "colocated", "server", "value", "value_model_cfg", "engine_config", "engine_args",
      "engine_kwargs"};
  if (kSide.count(k)) return true;
  for (const char* part : {"eval", "rollout", "reward", "critic", "teacher", "vllm", "sglang", "generation", "valid"})
    if (k.find(part) != std::string::npos) return true;
  // ROLL's `actor_infer:` (the vLLM/SGLang worker beside `actor_train:`).
  if (k.size() > 6 && (k.compare(k.size() - 6, 6, "_infer") == 0 || k.rfind("infer_", 0) == 0)) return true;
  return false;
}

// Under a section about another model or about evaluation (a reward model's judge generation, a
// validation sampler): its generation lengths are not the policy's rollouts.
bool other_model(const std::vector<std::string>& path) {
  for (std::size_t i = 0; i + 1 < path.size(); ++i) {
    std::string k = to_lower(path[i]);
    if (k == "ref" || k == "reference" || k == "ref_model" || k == "val" || k == "valid" || k == "test") return true;
    for (const char* part : {"reward", "judge", "critic", "teacher", "eval", "validation"})
      if (k.find(part) != std::string::npos) return true;
  }
  return false;
}

bool disabled(const YamlNode& n) {
  if (!n.is_map()) return false;
  for (const char* k : {"enabled", "enable"})
    if (const YamlNode* e = n.get(k); e != nullptr && e->is_scalar()) {
      auto b = parse_bool(e->value, "");
      if (b && !*b) return true;
    }
  return false;
}

void collect(const YamlNode& n, std::vector<std::string>& path, bool side, std::vector<Leaf>& out, int depth) {
  if (!n.is_map() || depth > 12) return;
  for (const auto& e : n.entries) {
    path.push_back(e.key.value);
    const std::string key = normalize(e.key.value);
    Leaf leaf{path, join_key_path(path), key, path.size() > 1 ? normalize(path[path.size() - 2]) : std::string(),
              &e.value, side};
    out.push_back(leaf);
    if (e.value.is_map() && !disabled(e.value)) collect(e.value, path, side || side_section(key), out, depth + 1);
    path.pop_back();
  }
}

std::optional<std::int64_t> parse_int_opt(const std::string& s) {
  auto v = parse_int(s, "");
  return v ? std::optional<std::int64_t>(*v) : std::nullopt;
}
bool is_text(const YamlNode& n) { return n.is_scalar() && !n.value.empty(); }
std::optional<std::int64_t> as_int(const YamlNode& n) {
  if (!n.is_scalar()) return std::nullopt;
  auto v = parse_int(n.value, "");
  return v ? std::optional<std::int64_t>(*v) : std::nullopt;
}
std::optional<bool> as_bool(const YamlNode& n) {
  if (!n.is_scalar()) return std::nullopt;
  auto v = parse_bool(n.value, "");
  return v ? std::optional<bool>(*v) : std::nullopt;
}

bool one_of(const std::string& k, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (k == n) return true;
  return false;
}

// The spellings of each concept. A key counts only outside side sections unless said otherwise.
constexpr std::initializer_list<const char*> kModelKeys = {
    "model_name_or_path", "pretrained_model_name_or_path", "model_name", "model_id", "base_model", "model_path",
    "hf_model", "hf_model_name", "hf_checkpoint", "hf_path", "pretrain", "pretrained_model", "model_name_or_dir",
    "base_model_name_or_path", "hf_model_id", "model_repo", "init_from_hf", "policy_model", "policy_model_path",
    "actor_model", "model_dir", "base_model_path", "llm_backbone", "backbone"};
// In a `model:` / `policy:` / `actor:` section.
constexpr std::initializer_list<const char*> kModelInSection = {"name", "path", "id", "pretrained", "hf_path",
                                                                "name_or_path", "repo_id", "hf_name", "checkpoint"};
constexpr std::initializer_list<const char*> kMicroBatchKeys = {
    "micro_batch_size", "per_device_train_batch_size", "train_micro_batch_size_per_gpu", "micro_batch_size_per_gpu",
    "train_micro_batch_size", "micro_train_batch_size", "device_train_microbatch_size", "per_gpu_train_batch_size",
    "per_device_batch_size", "batch_size_per_device", "batch_size_per_gpu", "local_batch_size", "mbs", "micro_bsz",
    "micro_batch", "train_micro_batch", "ppo_micro_batch_size_per_gpu", "train_batch_size_per_device",
    "device_batch_size", "batch_per_gpu", "per_device_train_micro_batch_size", "micro_batch_size_per_device",
    "per_device_micro_batch_size", "train_batch_size_per_gpu", "device_train_batch_size",
    "micro_batch_size_per_device_for_update"};
// Micro-batches bounded by tokens rather than counted in sequences (AReaL's mb_spec.max_tokens_per_mb,
// verl's ppo_max_token_len_per_gpu): the micro-batch is the budget over the sequence length.
constexpr std::initializer_list<const char*> kTokenBudgetKeys = {
    "max_tokens_per_mb", "max_tokens_per_microbatch", "max_tokens_per_micro_batch", "micro_batch_max_tokens",
    "ppo_max_token_len_per_gpu", "max_token_len_per_gpu", "max_num_tokens_per_mb"};
constexpr std::initializer_list<const char*> kGenericBatchKeys = {"batch_size", "bsz", "train_bs", "bs"};
constexpr std::initializer_list<const char*> kGlobalBatchKeys = {
    "global_batch_size", "train_global_batch_size", "global_train_batch_size", "total_batch_size",
    "total_train_batch_size", "effective_batch_size", "gbs", "train_batch_size", "global_bsz", "global_batch"};
constexpr std::initializer_list<const char*> kAccumKeys = {
    "gradient_accumulation_steps", "grad_accum", "grad_accum_steps", "accumulate_grad_batches",
    "gradient_accumulation", "accumulation_steps", "grad_accumulation_steps", "num_grad_accum", "accum_steps",
    "accum_iter", "update_freq", "grad_acc", "ga_steps", "gradient_accumulation_iters", "grad_accumulation",
    "gradient_accumulation_step", "accum_grad", "batch_accumulation_per_replica"};
constexpr std::initializer_list<const char*> kSeqKeys = {
    "max_seq_length", "max_seq_len", "seq_len", "seq_length", "sequence_length", "sequence_len",
    "max_sequence_length", "max_total_sequence_length", "cutoff_len", "model_max_length", "max_length", "max_len",
    "context_length", "context_len", "block_size", "train_seq_len", "encoder_seq_length", "max_tokens_per_sequence",
    "max_seqlen", "seqlen", "max_source_length", "train_max_len", "max_train_seq_len"};
constexpr std::initializer_list<const char*> kPromptKeys = {"max_prompt_length", "prompt_max_len", "max_prompt_len",
                                                            "max_prompt_tokens", "prompt_length", "max_prompt_length_tokens",
                                                            "max_req_tokens"};
constexpr std::initializer_list<const char*> kCompletionKeys = {
    "max_completion_length", "generate_max_len", "max_response_length", "max_new_tokens", "max_generated_tokens",
    "response_length", "max_completion_len", "max_gen_len", "max_response_len", "max_generation_length",
    "max_completion_tokens", "max_res_tokens"};
constexpr std::initializer_list<const char*> kGenerationsKeys = {
    "num_generations", "num_generations_per_prompt", "n_samples_per_prompt", "group_size", "grpo_samples",
    "num_samples_per_prompt", "samples_per_prompt", "rollout_n", "num_rollouts_per_prompt", "generations_per_prompt",
    "num_completions", "n_samples", "num_return_sequences_in_group"};

// One candidate value of a concept.
struct Hit {
  const Leaf* leaf;
  std::string value;  // as written (for comparing and naming)
};

class Inferrer {
 public:
  explicit Inferrer(Mapper& m) : m_(m) {
    std::vector<std::string> path;
    collect(m.root(), path, false, leaves_, 0);
  }

  // Leaves whose key is one of `names`, outside side sections unless `side_ok`.
  std::vector<Hit> find(std::initializer_list<const char*> names, bool side_ok = false) const {
    std::vector<Hit> hits;
    for (const auto& l : leaves_)
      if ((side_ok || !l.side) && one_of(l.key, names) && l.node->is_scalar() && !l.node->value.empty() &&
          to_lower(l.node->value) != "null" && to_lower(l.node->value) != "none" && to_lower(l.node->value) != "auto")
        hits.push_back(Hit{&l, l.node->value});
    return hits;
  }
  const std::vector<Leaf>& leaves() const { return leaves_; }
  const YamlNode& root() const { return m_.root(); }

  // The one value of a concept, or a refusal naming the keys that disagree.
  Result<std::optional<Hit>> one(const std::vector<Hit>& hits, const std::string& what, const std::string& input) {
    if (hits.empty()) return std::optional<Hit>();
    for (const auto& h : hits)
      if (h.value != hits.front().value) {
        Error e = m_.error_at(
            *h.leaf->node, ErrorCode::kInvalidConfig,
            fmt::format("no framework memplan knows claims this config, and reading it by meaning finds two {}: {} = "
                        "{} ({}) and {} = {} ({}); memplan does not guess which the trainer uses",
                        what, hits.front().leaf->dotted, hits.front().value, m_.where_text(*hits.front().leaf->node),
                        h.leaf->dotted, h.value, m_.where_text(*h.leaf->node)),
            fmt::format("name the framework with --dialect, or say which key it is with --keys {}=KEY", input));
        return e;
      }
    return std::optional<Hit>(hits.front());
  }

  // Records an inferred origin and the reading's line.
  void took(const std::string& input, const Hit& h, const std::string& what) {
    m_.node(h.leaf->dotted);  // asked: the key is read
    m_.out().inputs.set_origin(input, Origin{OriginKind::kFile, m_.where(*h.leaf->node), "inferred from " + h.leaf->dotted});
    reading_.push_back(fmt::format("{} {} ({} {})", what, h.value, h.leaf->dotted, m_.where_text(*h.leaf->node)));
  }
  void assumed(const std::string& what) { assumed_.push_back(what); }
  void read(const std::string& what) { reading_.push_back(what); }

  const std::vector<std::string>& reading() const { return reading_; }
  const std::vector<std::string>& assumptions() const { return assumed_; }

 private:
  Mapper& m_;
  std::vector<Leaf> leaves_;
  std::vector<std::string> reading_;
  std::vector<std::string> assumed_;
};

// The section holding a leaf.
const YamlNode* m_root_at(const Inferrer& in, const Leaf& l) {
  const YamlNode* n = &in.root();
  for (std::size_t i = 0; i + 1 < l.path.size() && n != nullptr; ++i) n = n->get(l.path[i]);
  return n;
}

bool model_section(const std::string& s) {
  return one_of(s, {"model", "policy", "actor", "model_config", "model_args", "model_arguments", "base_model",
                    "pretrained", "actor_model", "policy_model", "hf_model", "student"});
}

Result<std::optional<Hit>> find_model(Inferrer& in) {
  std::vector<Hit> hits = in.find(kModelKeys);
  // torchtitan's `model: {name: qwen3, flavor: 8B, hf_assets_path: hf://Qwen/Qwen3-8B}` (torchforge):
  // `name` is the model family; the checkpoint is the hf:// path.
  const auto family = [&](const Leaf& l) {
    if (l.key != "name" || l.path.size() < 2) return false;
    const YamlNode* sec = m_root_at(in, l);
    return sec != nullptr && sec->get("flavor") != nullptr;
  };
  for (const auto& l : in.leaves())
    if (!l.side && l.node->is_scalar() && !l.node->value.empty() && model_section(l.parent) &&
        one_of(l.key, kModelInSection) && !family(l))
      hits.push_back(Hit{&l, l.node->value});
  for (const auto& l : in.leaves())
    if (!l.side && l.key == "hf_assets_path" && l.node->is_scalar() && l.node->value.rfind("hf://", 0) == 0)
      hits.push_back(Hit{&l, l.node->value.substr(5)});
  // `model: org/name` and `policy: org/name`.
  for (const auto& l : in.leaves())
    if (!l.side && l.path.size() == 1 && (l.key == "model" || l.key == "policy") && is_text(*l.node) &&
        !as_int(*l.node) && !as_bool(*l.node))
      hits.push_back(Hit{&l, l.node->value});
  // Values that are no model: numbers, booleans, interpolations left unresolved.
  hits.erase(std::remove_if(hits.begin(), hits.end(),
                            [](const Hit& h) {
                              return as_int(*h.leaf->node) || as_bool(*h.leaf->node) ||
                                     h.value.find("${") != std::string::npos;
                            }),
             hits.end());
  return in.one(hits, "models", "model");
}

Status read_model_concept(Mapper& m, Inferrer& in, bool& found) {
  MEMPLAN_TRY(auto h, find_model(in));
  if (!h) {
    // The project's own architecture written in the config (nanotron's model.model_config).
    for (const auto& l : in.leaves()) {
      if (l.side || !l.node->is_map()) continue;
      const auto has = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys)
          if (l.node->get(k) != nullptr) return true;
        return false;
      };
      if (!has({"hidden_size", "d_model", "n_embd", "hidden_dim", "dim"}) ||
          !has({"num_hidden_layers", "num_layers", "n_layers", "n_layer"}))
        continue;
      MEMPLAN_IO_CHECK(read_custom_model(m, l.dotted));
      if (m.out().inputs.custom_model) {
        m.out().inputs.origins["model"].note = "inferred from " + l.dotted;
        in.read(fmt::format("model: the architecture written in {} ({})", l.dotted, m.where_text(*l.node)));
        found = true;
      }
      return Ok{};
    }
    return Ok{};
  }
  m.out().inputs.model_name = trim(h->value);
  in.took("model", *h, "model");
  found = true;
  return Ok{};
}

Status read_accum_concepts(Mapper& m, Inferrer& in, const std::optional<Hit>& batch,
                           const std::optional<Hit>& global_hint = std::nullopt);

// `budget`: a token budget per micro-batch, when no key counts the micro-batch in sequences; the
// micro-batch is then set from it once the sequence length is known (finish_token_budget).
Status read_batch_concepts(Mapper& m, Inferrer& in, bool& found, bool rl, std::optional<Hit>& budget,
                           bool generic_is_global) {
  TrainingConfig& c = m.config();
  std::vector<Hit> micro = in.find(kMicroBatchKeys);
  std::vector<Hit> generic = in.find(kGenericBatchKeys);
  micro.erase(std::remove_if(micro.begin(), micro.end(), [](const Hit& h) { return !as_int(*h.leaf->node); }), micro.end());
  generic.erase(std::remove_if(generic.begin(), generic.end(), [](const Hit& h) { return !as_int(*h.leaf->node); }),
                generic.end());
  MEMPLAN_TRY(auto mb, in.one(micro, "per-device micro-batches", "batch"));
  std::optional<Hit> batch = mb;
  if (!batch) {
    std::vector<Hit> tokens = in.find(kTokenBudgetKeys);
    tokens.erase(std::remove_if(tokens.begin(), tokens.end(),
                                [](const Hit& h) { return !as_int(*h.leaf->node) || *as_int(*h.leaf->node) < 1; }),
                 tokens.end());
    MEMPLAN_TRY(auto tb, in.one(tokens, "token budgets per micro-batch", "batch"));
    if (tb) {
      budget = tb;
      for (const auto& g : generic)
        m.warn_at(*g.leaf->node,
                  fmt::format("{} = {} is not read as the micro-batch: micro-batches are bounded by tokens ({} = {}, "
                              "{}), so {} counts the sequences of a whole step",
                              g.leaf->dotted, g.value, tb->leaf->dotted, tb->value, m.where_text(*tb->leaf->node),
                              g.leaf->dotted));
      found = true;
      return read_accum_concepts(m, in, std::nullopt);
    }
  }
  // The framework says a plain batch size is the step's batch: the micro-batch is 1 and the
  // accumulation follows from the global batch.
  if (!batch && generic_is_global && !generic.empty()) {
    c.micro_batch = 1;
    m.from_default("batch", "1: the per-forward micro-batch is not written (its default)");
    found = true;
    return read_accum_concepts(m, in, std::nullopt, generic.front());
  }
  // In an RL config a plain `batch_size` counts the prompts (or rollouts) of a step (prime-rl's
  // orchestrator.batch_size, AReaL's train_dataset.batch_size), never the per-GPU micro-batch.
  if (!batch && rl && !generic.empty()) {
    for (const auto& g : generic)
      m.warn_at(*g.leaf->node,
                fmt::format("{} = {}: in an RL config a plain batch size counts the prompts or rollouts of a step, "
                            "not the per-GPU micro-batch; memplan plans micro-batch 1 (give --batch if the trainer "
                            "packs more sequences into one forward pass)",
                            g.leaf->dotted, g.value));
    c.micro_batch = 1;
    m.from_default("batch", "inferred reading: an RL config's batch_size counts prompts, not the micro-batch");
    in.assumed(fmt::format("micro-batch 1 ({} = {} counts the prompts or rollouts of a step)",
                           generic.front().leaf->dotted, generic.front().value));
    found = true;
    return read_accum_concepts(m, in, std::nullopt);
  }
  if (batch) {
    for (const auto& g : generic)
      if (g.value != batch->value && !generic_is_global)
        m.warn_at(*g.leaf->node,
                  fmt::format("{} = {} is not read as the micro-batch: {} = {} ({}) names the per-device micro-batch; "
                              "if {} is per device too, give --batch",
                              g.leaf->dotted, g.value, batch->leaf->dotted, batch->value,
                              m.where_text(*batch->leaf->node), g.leaf->dotted));
  } else {
    MEMPLAN_TRY(auto gb, in.one(generic, "batch sizes", "batch"));
    batch = gb;
    if (batch)
      in.assumed(fmt::format("{} = {} is the per-device micro-batch (some trainers mean the global batch by this "
                             "name: then give --batch and --grad-accum)",
                             batch->leaf->dotted, batch->value));
  }
  if (batch) {
    c.micro_batch = *as_int(*batch->leaf->node);
    if (c.micro_batch < 1) return m.error_at(*batch->leaf->node, ErrorCode::kInvalidConfig,
                                             fmt::format("{} must be >= 1, got {}", batch->leaf->dotted, batch->value));
    in.took("batch", *batch, "micro-batch");
    m.site(Knob::kBatch, batch->leaf->dotted);
    found = true;
  } else {
    c.micro_batch = 1;
    m.from_default("batch", "inferred reading: no micro-batch key");
    in.assumed("micro-batch 1 (no key names it)");
  }
  if (generic_is_global && !generic.empty()) return read_accum_concepts(m, in, batch, generic.front());
  return read_accum_concepts(m, in, batch);
}

Status read_accum_concepts(Mapper& m, Inferrer& in, const std::optional<Hit>& batch,
                           const std::optional<Hit>& global_hint) {
  TrainingConfig& c = m.config();
  std::vector<Hit> accum = in.find(kAccumKeys);
  accum.erase(std::remove_if(accum.begin(), accum.end(), [](const Hit& h) { return !as_int(*h.leaf->node); }), accum.end());
  MEMPLAN_TRY(auto ga, in.one(accum, "gradient-accumulation counts", "grad_accum"));
  std::vector<Hit> global = in.find(kGlobalBatchKeys);
  global.erase(std::remove_if(global.begin(), global.end(), [](const Hit& h) { return !as_int(*h.leaf->node); }),
               global.end());
  if (batch)  // a generic batch key read as the micro-batch is not also a global one
    global.erase(std::remove_if(global.begin(), global.end(), [&](const Hit& h) { return h.leaf == batch->leaf; }),
                 global.end());
  if (global_hint && global.empty()) global.push_back(*global_hint);
  if (ga) {
    c.grad_accum = *as_int(*ga->leaf->node);
    if (c.grad_accum < 1) return m.error_at(*ga->leaf->node, ErrorCode::kInvalidConfig,
                                            fmt::format("{} must be >= 1, got {}", ga->leaf->dotted, ga->value));
    in.took("grad_accum", *ga, "gradient accumulation");
    m.site(Knob::kGradAccum, ga->leaf->dotted);
  } else {
    MEMPLAN_TRY(auto gl, in.one(global, "global batch sizes", "grad_accum"));
    if (gl) {
      ResolvedInputs::GlobalBatch g;
      g.value = *as_int(*gl->leaf->node);
      g.key = gl->leaf->dotted;
      g.loc = m.where(*gl->leaf->node);
      m.out().inputs.global_batch = g;
      in.took("global_batch", *gl, "global batch");
      m.derived("grad_accum", fmt::format("inferred: global batch {} ({}) / (micro-batch x data-parallel GPUs)",
                                          g.value, gl->leaf->dotted));
    } else {
      c.grad_accum = 1;
      m.from_default("grad_accum", "inferred reading: no accumulation key");
      in.assumed("gradient accumulation 1 (no key names it)");
    }
  }
  return Ok{};
}

Status read_seq_concepts(Mapper& m, Inferrer& in, bool rl) {
  TrainingConfig& c = m.config();
  auto ints = [](std::vector<Hit> v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](const Hit& h) { return !as_int(*h.leaf->node) || *as_int(*h.leaf->node) < 1; }),
            v.end());
    return v;
  };
  std::vector<Hit> seq = ints(in.find(kSeqKeys));
  MEMPLAN_TRY(auto s, in.one(seq, "sequence lengths", "seq_len"));
  // RL: a length bound in a dataset section (AReaL's train_dataset.max_length) filters the prompts
  // the dataset yields; the completions are generated, so it is the prompt length.
  std::optional<Hit> dataset_prompt;
  // The tokenizer's truncation length, when no training section names one (h2o-llmstudio's
  // tokenizer.max_length: what every training sample is cut to).
  if (!s) {
    std::vector<Hit> tok = ints(in.find({"max_length", "max_seq_length", "model_max_length", "max_len"}, true));
    tok.erase(std::remove_if(tok.begin(), tok.end(), [](const Hit& h) { return h.leaf->parent != "tokenizer"; }),
              tok.end());
    MEMPLAN_TRY(auto t, in.one(tok, "tokenizer lengths", "seq_len"));
    s = t;
  }
  if (rl && s && s->leaf->parent.find("data") != std::string::npos && ints(in.find(kPromptKeys, true)).empty()) {
    dataset_prompt = s;
    s.reset();
  }
  if (s) {
    c.seq_len = *as_int(*s->leaf->node);
    in.took("seq_len", *s, "sequence length");
    m.site(Knob::kSeqLen, s->leaf->dotted);
  }
  if (!rl) {
    if (!s) {
      m.from_default("seq_len", fmt::format("inferred reading: no sequence-length key; memplan's default {}", c.seq_len));
      in.assumed(fmt::format("sequence length {} (no key names it)", c.seq_len));
    }
    return Ok{};
  }
  // RL: prompt and completion lengths, wherever they are (generation sections included, those of
  // other models and of evaluation left out).
  auto policy = [](std::vector<Hit> v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](const Hit& h) { return other_model(h.leaf->path); }), v.end());
    return v;
  };
  MEMPLAN_TRY(auto p, in.one(policy(ints(in.find(kPromptKeys, true))), "prompt lengths", "max_prompt_length"));
  if (dataset_prompt) p = dataset_prompt;
  MEMPLAN_TRY(auto q, in.one(policy(ints(in.find(kCompletionKeys, true))), "completion lengths", "max_completion_length"));
  if (p) {
    c.grpo.max_prompt_length = *as_int(*p->leaf->node);
    in.took("max_prompt_length", *p, "prompt length");
  }
  if (q) {
    c.grpo.max_completion_length = *as_int(*q->leaf->node);
    in.took("max_completion_length", *q, "completion length");
  }
  // A total sequence length bounds prompt + completion (NeMo-RL's max_total_sequence_length).
  if (s && (!p || !q || c.grpo.max_prompt_length + c.grpo.max_completion_length > c.seq_len)) {
    if (p && c.grpo.max_prompt_length < c.seq_len) {
      c.grpo.max_completion_length = c.seq_len - c.grpo.max_prompt_length;
    } else if (q && c.grpo.max_completion_length < c.seq_len) {
      c.grpo.max_prompt_length = c.seq_len - c.grpo.max_completion_length;
    } else {
      c.grpo.max_prompt_length = c.seq_len / 2;
      c.grpo.max_completion_length = c.seq_len - c.grpo.max_prompt_length;
    }
    m.derived("max_prompt_length", fmt::format("inferred: prompt + completion = {} ({})", c.seq_len, s->leaf->dotted));
    m.derived("max_completion_length", fmt::format("inferred: prompt + completion = {} ({})", c.seq_len, s->leaf->dotted));
    in.assumed(fmt::format("prompt {} + completion {} tokens fill the sequence length {}", c.grpo.max_prompt_length,
                           c.grpo.max_completion_length, c.seq_len));
  } else if (!p || !q) {
    in.assumed(fmt::format("prompt {} / completion {} tokens (TRL's defaults where no key names them)",
                           c.grpo.max_prompt_length, c.grpo.max_completion_length));
  }
  return Ok{};
}

// A micro-batch bounded by tokens: as many whole sequences as the budget holds (at least one).
void finish_token_budget(Mapper& m, Inferrer& in, const Hit& budget, bool rl) {
  TrainingConfig& c = m.config();
  const std::int64_t tokens = *as_int(*budget.leaf->node);
  // A preference pair is two sequences (chosen and rejected) that stay in one micro-batch.
  const bool pairs = c.method == Method::kDpo;
  const std::int64_t seq = rl ? c.grpo.max_prompt_length + c.grpo.max_completion_length
                              : c.seq_len * (pairs ? 2 : 1);
  c.micro_batch = static_cast<int>(std::clamp<std::int64_t>(seq > 0 ? tokens / seq : 1, 1, 1 << 20));
  in.took("batch", budget, "token budget per micro-batch");
  m.warn_at(*budget.leaf->node,
            fmt::format("{} = {}: micro-batches are packed up to {} tokens, not counted in sequences; memplan plans "
                        "{} {} of {} tokens per micro-batch (the budget over the sequence length; pass --batch to "
                        "plan another count)",
                        budget.leaf->dotted, budget.value, tokens, c.micro_batch,
                        pairs ? "pair(s)" : "sequence(s)", seq));
}

// bf16: true, precision: bf16-mixed, mixed_precision: bf16 -> autocast; dtype: bfloat16 -> weights.
Status read_precision(Mapper& m, Inferrer& in) {
  TrainingConfig& c = m.config();
  for (const auto& h : in.find({"bf16", "fp16", "use_bf16", "use_fp16", "amp_bf16", "half", "bf16_mixed"})) {
    auto b = as_bool(*h.leaf->node);
    if (!b || !*b) continue;
    const bool bf = h.leaf->key.find("bf16") != std::string::npos;
    c.autocast = bf ? DType::kBFloat16 : DType::kFloat16;
    in.took("autocast", h, "autocast");
    break;
  }
  std::vector<Hit> prec = in.find({"precision", "mixed_precision", "amp_dtype", "mixed_precision_dtype", "amp",
                                   "train_dtype", "training_precision", "autocast_dtype"});
  // h2o-llmstudio keeps them in its hardware section `environment:` (a side section name for RL's
  // task environments).
  for (const auto& h : in.find({"mixed_precision_dtype", "amp_dtype", "autocast_dtype"}, true))
    if (h.leaf->side && h.leaf->parent == "environment" && h.leaf->path.size() == 2) prec.push_back(h);
  for (const auto& h : prec) {
    const std::string v = to_lower(trim(h.value));
    std::optional<DType> autocast, weights;
    // A dtype named by a mixed-precision key is the autocast dtype (h2o-llmstudio's
    // `mixed_precision: true` with `mixed_precision_dtype: bfloat16`), unless the switch beside it is off.
    const bool amp_key = one_of(h.leaf->key, {"mixed_precision_dtype", "amp_dtype", "autocast_dtype"});
    if (amp_key) {
      const YamlNode* sec = m_root_at(in, *h.leaf);
      const YamlNode* sw = sec != nullptr ? sec->get("mixed_precision") : nullptr;
      if (sw != nullptr && !as_bool(*sw).value_or(true)) continue;
      if (v == "bfloat16" || v == "bf16") autocast = DType::kBFloat16;
      else if (v == "float16" || v == "fp16") autocast = DType::kFloat16;
    }
    if (!autocast) {
      if (v == "bf16" || v == "bf16-mixed" || v == "amp_bf16" || v == "bf16_mixed" || v == "mixed_bf16") autocast = DType::kBFloat16;
      else if (v == "fp16" || v == "16" || v == "16-mixed" || v == "amp_fp16" || v == "mixed_fp16" || v == "amp") autocast = DType::kFloat16;
      else if (v == "bfloat16" || v == "bf16-true" || v == "pure_bf16") weights = DType::kBFloat16;
      else if (v == "float16" || v == "16-true" || v == "half") weights = DType::kFloat16;
      else if (v == "32" || v == "fp32" || v == "float32" || v == "32-true" || v == "no" || v == "full") weights = DType::kFloat32;
      else continue;
    }
    if (autocast) {
      c.autocast = autocast;
      c.torch_dtype = DType::kFloat32;
      in.took("autocast", h, "autocast (fp32 weights)");
    } else {
      c.torch_dtype = *weights;
      if (*weights == DType::kFloat32) c.autocast.reset();
      in.took("torch_dtype", h, "weights in");
    }
    break;
  }
  for (const auto& h : in.find({"torch_dtype", "dtype", "model_dtype", "param_dtype", "params_dtype", "weight_dtype",
                                "torch_dtype_str", "optimization_dtype", "backbone_dtype"})) {
    auto d = parse_dtype(to_lower(trim(h.value)));
    if (!d) continue;
    c.torch_dtype = *d;
    in.took("torch_dtype", h, "weights in");
    break;
  }
  return Ok{};
}

Status read_peft(Mapper& m, Inferrer& in) {
  TrainingConfig& c = m.config();
  const auto in_peft = [](const Leaf& l) {
    return l.parent.find("lora") != std::string::npos || l.parent.find("peft") != std::string::npos ||
           l.parent == "adapter" || l.parent == "tuner";
  };
  std::optional<bool> on;
  std::optional<Hit> switch_hit;
  for (const auto& h : in.find({"use_lora", "use_peft", "enable_lora", "lora", "peft", "lora_enabled", "use_qlora",
                                "q_lora", "qlora"})) {
    if (auto b = as_bool(*h.leaf->node)) {
      if (*b || !on) {
        on = *b;
        switch_hit = h;
      }
    }
  }
  for (const auto& h : in.find({"adapter", "finetuning_type", "train_type", "tuner_type", "peft_type", "finetune_type",
                                "training_type", "tuning_type", "method"})) {
    const std::string v = to_lower(trim(h.value));
    if (v == "lora" || v == "qlora" || v == "dora" || v == "lora_plus" || v == "longlora") {
      on = true;
      switch_hit = h;
    } else if (v == "full" || v == "freeze" || v == "none") {
      if (!on) {
        on = false;
        switch_hit = h;
      }
    }
  }
  std::vector<Hit> ranks = in.find({"lora_rank", "lora_r", "lora_dim", "lora_rank_dim"});
  for (const auto& l : in.leaves())
    if (!l.side && in_peft(l) && one_of(l.key, {"r", "rank", "dim"}) && as_int(*l.node)) ranks.push_back(Hit{&l, l.node->value});
  ranks.erase(std::remove_if(ranks.begin(), ranks.end(), [](const Hit& h) { return !as_int(*h.leaf->node); }), ranks.end());
  MEMPLAN_TRY(auto r, in.one(ranks, "LoRA ranks", "lora_r"));
  if (on && !*on) return Ok{};
  if (r && *as_int(*r->leaf->node) <= 0) return Ok{};  // rank 0: LoRA off (OpenRLHF's default)
  if (!r && !on) return Ok{};
  c.lora.enabled = true;
  if (switch_hit) in.took("use_peft", *switch_hit, "LoRA on:");
  if (r) {
    c.lora.r = static_cast<int>(*as_int(*r->leaf->node));
    in.took("lora_r", *r, "LoRA rank");
  } else {
    in.assumed(fmt::format("LoRA rank {} (no key names it)", c.lora.r));
    m.from_default("lora_r", "inferred reading: no rank key");
  }
  std::vector<Hit> alphas = in.find({"lora_alpha"});
  for (const auto& l : in.leaves())
    if (!l.side && in_peft(l) && l.key == "alpha" && l.node->is_scalar()) alphas.push_back(Hit{&l, l.node->value});
  if (!alphas.empty()) {
    if (auto a = parse_double(alphas.front().value, "")) {
      c.lora.alpha = *a;
      in.took("lora_alpha", alphas.front(), "LoRA alpha");
    }
  }
  std::vector<const Leaf*> targets;
  for (const auto& l : in.leaves())
    if (!l.side && (one_of(l.key, {"lora_target_modules", "lora_target", "lora_targets"}) ||
                    (in_peft(l) && one_of(l.key, {"target_modules", "targets", "target"})) ||
                    (l.key == "target_modules" && l.path.size() == 1)))
      targets.push_back(&l);
  for (const auto& l : in.leaves())
    if (!l.side && in_peft(l) && one_of(l.key, {"match_all_linear", "all_linear", "target_all_linear"}) &&
        as_bool(*l.node).value_or(false)) {
      c.lora.all_linear = true;
      c.lora.target_modules.clear();
      in.took("lora_target_modules", Hit{&l, l.node->value}, "LoRA on every linear layer:");
      return Ok{};
    }
  if (!targets.empty()) {
    const Leaf& t = *targets.front();
    MEMPLAN_TRY(auto list, m.list(t.dotted));
    if (list && !list->empty()) {
      set_lora_targets(c, *list);
      m.from_file("lora_target_modules", *t.node, t.dotted);
      m.out().inputs.origins["lora_target_modules"].note = "inferred from " + t.dotted;
    }
  }
  return Ok{};
}

Status read_quant(Mapper& m, Inferrer& in) {
  TrainingConfig& c = m.config();
  auto set = [&](int bits, const Hit& h) {
    if (bits == 4) c.quant.load_in_4bit = true;
    else c.quant.load_in_8bit = true;
    in.took(bits == 4 ? "load_in_4bit" : "load_in_8bit", h, fmt::format("{}-bit weights:", bits));
  };
  for (const auto& h : in.find({"load_in_4bit", "use_qlora", "q_lora", "qlora", "load_in_8bit"}))
    if (as_bool(*h.leaf->node).value_or(false)) {
      set(h.leaf->key == "load_in_8bit" ? 8 : 4, h);
      return Ok{};
    }
  for (const auto& h : in.find({"quantization_bit", "quant_bits", "load_in_kbit", "quantization_bits", "bits",
                                "quantize_bits", "q_bits"})) {
    auto b = as_int(*h.leaf->node);
    if (b && (*b == 4 || *b == 8)) {
      set(static_cast<int>(*b), h);
      return Ok{};
    }
  }
  // h2o-llmstudio's `architecture.backbone_dtype: int4` loads the backbone in 4 bits.
  for (const auto& h : in.find({"quantization", "quant", "quantize", "adapter", "quant_method", "quantization_method",
                                "backbone_dtype"})) {
    const std::string v = to_lower(trim(h.value));
    if (v == "qlora" || v == "4bit" || v == "nf4" || v == "bnb_4bit" || v == "int4" || v == "bnb4" || v == "fp4") {
      set(4, h);
      return Ok{};
    }
    if (v == "8bit" || v == "int8" || v == "bnb_8bit" || v == "llm_int8") {
      set(8, h);
      return Ok{};
    }
  }
  return Ok{};
}

Status read_checkpointing(Mapper& m, Inferrer& in) {
  TrainingConfig& c = m.config();
  const std::initializer_list<const char*> kKeys = {
      "gradient_checkpointing", "activation_checkpointing", "enable_gradient_checkpointing",
      "enable_activation_checkpointing", "use_gradient_checkpointing", "use_activation_checkpointing",
      "grad_checkpoint", "gradient_checkpoint", "checkpoint_activations", "activation_checkpoint",
      "recompute_activations", "recompute", "grad_ckpt", "activations_checkpoint_method", "recompute_granularity",
      "ac_mode", "activation_checkpointing_enabled", "recompute_layer"};
  for (const auto& l : in.leaves()) {
    if (l.side || !l.node->is_scalar()) continue;
    const bool direct = one_of(l.key, kKeys);
    const bool mode = one_of(l.parent, kKeys) && one_of(l.key, {"mode", "enabled", "enable", "granularity"});
    // ROLL's and LLaMA-Factory's `disable_gradient_checkpointing`.
    const bool negated = one_of(l.key, {"disable_gradient_checkpointing", "disable_activation_checkpointing"});
    // prime-rl's `[model.ac] freq = 1`: checkpoint every freq-th layer.
    if (l.parent == "ac" && l.key == "freq" && as_int(*l.node).value_or(0) >= 1) {
      c.gradient_checkpointing = true;
      in.took("gradient_checkpointing", Hit{&l, l.node->value}, "activation checkpointing every N layers:");
      if (*as_int(*l.node) > 1)
        m.warn_at(*l.node, fmt::format("{} = {}: checkpointing every {}th layer is estimated as every layer (an "
                                       "underestimate of the activations)",
                                       l.dotted, l.node->value, l.node->value));
      return Ok{};
    }
    if (!direct && !mode && !negated) continue;
    const std::string v = to_lower(trim(l.node->value));
    std::optional<bool> gc = as_bool(*l.node);
    if (negated && gc) gc = !*gc;
    if (!gc) {
      if (v == "full" || v == "selective" || v == "uniform" || v == "block" || v == "unsloth" || v == "offload") gc = true;
      else if (v == "none" || v == "no" || v == "off" || v == "null") gc = false;
    }
    if (!gc) continue;
    c.gradient_checkpointing = *gc;
    in.took("gradient_checkpointing", Hit{&l, l.node->value}, "activation checkpointing");
    if (*gc && v == "selective")
      m.warn_at(*l.node, fmt::format("{} = selective: estimated as full activation checkpointing (selective "
                                     "recomputation keeps more: an underestimate of the activations)",
                                     l.dotted));
    return Ok{};
  }
  return Ok{};
}

Status read_attention(Mapper& m, Inferrer& in) {
  TrainingConfig& c = m.config();
  for (const auto& h : in.find({"attn_implementation", "attn_impl", "attention_implementation", "attention_impl",
                                "attention_backend", "attn_backend", "attention_type"})) {
    const std::string v = to_lower(trim(h.value));
    if (parse_attn_impl(v) || v.find("flash") != std::string::npos || v.find("flex") != std::string::npos ||
        v.find('/') != std::string::npos) {
      auto ok = m.read_attn_impl(h.leaf->dotted);
      if (ok && *ok) {
        m.out().inputs.origins["attn_implementation"].note = "inferred from " + h.leaf->dotted;
        return Ok{};
      }
    }
    m.warn_at(*h.leaf->node, fmt::format("{} = {}: an attention implementation memplan does not know; estimated as "
                                         "sdpa",
                                         h.leaf->dotted, h.value));
    return Ok{};
  }
  for (const auto& h : in.find({"use_flash_attn", "use_flash_attention", "flash_attention", "use_flash_attention_2",
                                "flash_attn", "flash_attention_2", "use_flash_attn_2"})) {
    auto b = as_bool(*h.leaf->node);
    if (!b) continue;
    c.attn = *b ? AttnImpl::kFlashAttention2 : AttnImpl::kSdpa;
    in.took("attn_implementation", h, "flash attention:");
    return Ok{};
  }
  return Ok{};
}

Status read_world(Mapper& m, Inferrer& in) {
  TrainingConfig& c = m.config();
  auto positive = [](std::vector<Hit> v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](const Hit& h) { return !as_int(*h.leaf->node) || *as_int(*h.leaf->node) < 1; }),
            v.end());
    return v;
  };
  MEMPLAN_TRY(auto per_node, in.one(positive(in.find({"n_gpus_per_node", "gpus_per_node", "nproc_per_node",
                                                        "num_gpus_per_node", "devices_per_node", "ngpus_per_node",
                                                        "gpus_per_host", "actor_num_gpus_per_node", "num_gpus_per_host",
                                                        "procs_per_node"})),
                                    "GPU-per-node counts", "num_gpus"));
  std::vector<Hit> totals = positive(in.find({"num_gpus", "n_gpus", "gpus", "world_size", "num_processes",
                                              "total_gpus", "num_devices", "devices", "ngpus", "gpu_count",
                                              "num_train_gpus", "train_gpus", "num_trainer_gpus"}));
  // torchforge's `actors: {trainer: {procs: 2, with_gpus: true}}`: the trainer's processes, one per GPU.
  for (const auto& h : positive(in.find({"procs", "num_procs"})))
    if (h.leaf->parent == "trainer") totals.push_back(h);
  MEMPLAN_TRY(auto total, in.one(totals, "GPU counts", "num_gpus"));
  MEMPLAN_TRY(auto nodes, in.one(positive(in.find({"nnodes", "num_nodes", "nodes", "num_machines", "node_count",
                                                     "n_nodes", "actor_num_nodes", "num_train_nodes"})),
                                 "node counts", "nodes"));
  if (nodes) {
    c.parallel.nodes = static_cast<int>(std::min<std::int64_t>(*as_int(*nodes->leaf->node), 65536));
    in.took("nodes", *nodes, "nodes");
  }
  if (per_node) {
    c.parallel.num_gpus = static_cast<int>(std::min<std::int64_t>(*as_int(*per_node->leaf->node), 65536));
    in.took("num_gpus", *per_node, "GPUs per node");
  } else if (total) {
    const std::int64_t t = *as_int(*total->leaf->node);
    if (c.parallel.nodes > 1 && t % c.parallel.nodes == 0 && t >= c.parallel.nodes)
      c.parallel.num_gpus = static_cast<int>(std::min<std::int64_t>(t / c.parallel.nodes, 65536));
    else c.parallel.num_gpus = static_cast<int>(std::min<std::int64_t>(t, 65536));
    in.took("num_gpus", *total, "GPUs in all");
  }
  // A list of GPU ids (h2o-llmstudio's `environment.gpus: ['0']`): one GPU each.
  if (!per_node && !total)
    for (const auto& l : in.leaves())
      if ((!l.side || (l.parent == "environment" && l.path.size() == 2)) && l.node->kind == YamlKind::kSeq &&
          !l.node->items.empty() &&
          one_of(l.key, {"gpus", "gpu_ids", "devices", "cuda_visible_devices", "device_ids"})) {
        c.parallel.num_gpus = static_cast<int>(std::min<std::size_t>(l.node->items.size(), 65536));
        in.took("num_gpus", Hit{&l, fmt::format("{} ids", l.node->items.size())}, "GPUs listed:");
        break;
      }
  // The GPUs the trained model gets, when the cluster is shared with rollout workers: ROLL's
  // `device_mapping: list(range(0,16))` and AReaL's allocation `backend: "fsdp:d4p1t1"`.
  const int per = std::max(1, per_node ? c.parallel.num_gpus : 0);
  auto place = [&](std::int64_t world, const Leaf& l, const std::string& what) {
    if (world < 1 || world > 65536) return;
    if (per_node && world > per && world % per == 0) {
      c.parallel.nodes = static_cast<int>(world / per);
      c.parallel.num_gpus = per;
    } else {
      c.parallel.nodes = 1;
      c.parallel.num_gpus = static_cast<int>(world);
    }
    in.took("num_gpus", Hit{&l, l.node->value}, what);
    m.out().inputs.set_origin("nodes", Origin{OriginKind::kFile, m.where(*l.node), "inferred from " + l.dotted});
  };
  for (const auto& l : in.leaves()) {
    if (l.side || !l.node->is_scalar()) continue;
    std::string v = to_lower(l.node->value);
    v.erase(std::remove(v.begin(), v.end(), ' '), v.end());
    if (l.key == "device_mapping" && v.rfind("list(range(", 0) == 0) {
      const std::size_t comma = v.find(',');
      const std::size_t close = v.find(')');
      auto a = comma == std::string::npos ? std::nullopt : parse_int_opt(v.substr(11, comma - 11));
      auto b = comma == std::string::npos || close == std::string::npos ? std::nullopt
                                                                        : parse_int_opt(v.substr(comma + 1, close - comma - 1));
      if (a && b && *b > *a) place(*b - *a, l, "GPUs of the trained model (device_mapping)");
      break;
    }
    const std::size_t colon = v.find(':');
    if (l.key == "backend" && colon != std::string::npos &&
        (v.rfind("fsdp", 0) == 0 || v.rfind("megatron", 0) == 0 || v.rfind("archon", 0) == 0)) {
      std::int64_t world = 1;
      bool any = false;
      std::string seen;
      for (std::size_t i = colon + 1; i < v.size();) {
        const char dim = v[i++];
        std::size_t j = i;
        while (j < v.size() && std::isdigit(static_cast<unsigned char>(v[j]))) ++j;
        if (j == i || j - i > 6) { any = false; break; }
        const std::int64_t n = std::stoll(v.substr(i, j - i));
        // Each of d, p, t, c once, each at least 1, their product a GPU count memplan can plan
        // (review finding: d0 reached the engine as a flag's range error, d999999 x 4 overflowed).
        if (std::string("dptce").find(dim) == std::string::npos || seen.find(dim) != std::string::npos || n < 1 ||
            world > (std::int64_t{1} << 20) / n)
          return m.error_at(*l.node, ErrorCode::kInvalidConfig,
                            fmt::format("{} = {} is not an allocation memplan can read: each of d, p, t, c, e once, "
                                        "each at least 1, at most {} GPUs in all",
                                        l.dotted, l.node->value, std::int64_t{1} << 20),
                            "write it as AReaL does, e.g. fsdp:d4p1t1");
        seen += dim;
        if (dim == 'd' || dim == 'p' || dim == 't' || dim == 'c') world *= n;
        if (dim == 't') c.parallel.tensor_parallel = static_cast<int>(n);
        if (dim == 'p') c.parallel.pipeline_parallel = static_cast<int>(n);
        if (dim == 'c') c.parallel.context_parallel = static_cast<int>(n);
        any = true;
        i = j;
      }
      if (any) place(world, l, "GPUs of the trained model (allocation d x p x t)");
      break;
    }
  }
  return Ok{};
}

Status read_degrees(Mapper& m, Inferrer& in) {
  TrainingConfig& c = m.config();
  struct Degree {
    std::initializer_list<const char*> keys;
    const char* input;
    int* field;
    const char* what;
  };
  const Degree degrees[] = {
      {{"tensor_model_parallel_size", "tensor_parallel_size", "tensor_parallel_degree", "tp_size", "tp_degree", "tp",
        "tensor_parallel", "tensor_model_parallel"},
       "tensor_parallel", &c.parallel.tensor_parallel, "tensor parallel"},
      {{"pipeline_model_parallel_size", "pipeline_parallel_size", "pipeline_parallel_degree", "pp_size", "pp_degree",
        "pp", "pipeline_parallel", "pipeline_model_parallel"},
       "pipeline_parallel", &c.parallel.pipeline_parallel, "pipeline parallel"},
      {{"context_parallel_size", "context_parallel_degree", "cp_size", "cp_degree", "cp", "context_parallel"},
       "context_parallel", &c.parallel.context_parallel, "context parallel"},
      {{"expert_model_parallel_size", "expert_parallel_size", "expert_parallel_degree", "ep_size", "ep_degree", "ep",
        "expert_parallel"},
       "expert_parallel", &c.parallel.expert_parallel, "expert parallel"},
      // Megatron's interleaved schedule (ROLL's strategy_config): virtual stages per pipeline rank.
      {{"virtual_pipeline_model_parallel_size", "num_virtual_stages_per_pipeline_rank", "virtual_pipeline_parallel_size"},
       "virtual_stages", &c.parallel.virtual_stages, "virtual pipeline stages"},
  };
  for (const auto& d : degrees) {
    std::vector<Hit> hits = in.find(d.keys);
    hits.erase(std::remove_if(hits.begin(), hits.end(), [](const Hit& h) { return !as_int(*h.leaf->node) || *as_int(*h.leaf->node) < 1; }),
               hits.end());
    MEMPLAN_TRY(auto h, in.one(hits, std::string(d.what) + " sizes", d.input));
    if (!h) continue;
    *d.field = static_cast<int>(std::min<std::int64_t>(*as_int(*h->leaf->node), 65536));
    if (*d.field > 1) in.took(d.input, *h, std::string(d.what));
    if (d.field == &c.parallel.virtual_stages && *d.field > 1) {
      c.parallel.pp_schedule = PipelineSchedule::kInterleaved1F1B;
      m.derived("pp_schedule", fmt::format("{} > 1: Megatron's interleaved 1F1B", h->leaf->dotted));
    }
  }
  // A data-parallel size without a GPU count (nanotron's parallelism.dp): GPUs = dp x tp x pp x cp.
  if (!m.has_origin("num_gpus")) {
    std::vector<Hit> dp = in.find({"dp", "dp_size", "data_parallel_size", "data_parallel_degree", "dp_degree",
                                   "data_parallel"});
    dp.erase(std::remove_if(dp.begin(), dp.end(), [](const Hit& h) { return !as_int(*h.leaf->node) || *as_int(*h.leaf->node) < 1; }),
             dp.end());
    MEMPLAN_TRY(auto d, in.one(dp, "data-parallel sizes", "num_gpus"));
    if (d) {
      const std::int64_t world = *as_int(*d->leaf->node) * std::max(1, c.parallel.tensor_parallel) *
                                 std::max(1, c.parallel.pipeline_parallel) * std::max(1, c.parallel.context_parallel);
      if (world <= 65536) {
        c.parallel.num_gpus = static_cast<int>(world);
        in.took("num_gpus", *d, "data-parallel size (GPUs = dp x tp x pp x cp)");
      }
    }
  }
  for (const auto& h : in.find({"sequence_parallel", "sequence_parallel_enabled"}))
    if (as_bool(*h.leaf->node).value_or(false) && c.parallel.tensor_parallel > 1) {
      c.parallel.sequence_parallel = true;
      in.took("sequence_parallel", h, "Megatron sequence parallel:");
      break;
    }
  for (const auto& h : in.find({"ulysses_sequence_parallel_size", "sequence_parallel_size", "sp_size",
                                "sequence_parallel_degree", "ulysses_size", "ulysses_degree", "sp_degree"})) {
    auto v = as_int(*h.leaf->node);
    if (v && *v > 1)
      m.warn_at(*h.leaf->node, fmt::format("{} = {}: DeepSpeed-Ulysses-style sequence parallelism is not modelled; "
                                           "memplan estimates every GPU holding whole sequences (an overestimate of "
                                           "the activations)",
                                           h.leaf->dotted, h.value));
  }
  return Ok{};
}

Status read_sharding(Mapper& m, Inferrer& in) {
  TrainingConfig& c = m.config();
  auto zero = [&](std::int64_t stage, const Hit& h) {
    c.parallel.sharding = stage == 1 ? ShardingStrategy::kZero1 : stage == 2 ? ShardingStrategy::kZero2 : ShardingStrategy::kZero3;
    in.took("sharding", h, "ZeRO stage");
  };
  bool set = false;
  for (const auto& l : in.leaves()) {
    if (l.side || set) continue;
    const bool zero_key = one_of(l.key, {"zero_stage", "zero", "deepspeed_stage", "zero_optimization_stage", "ds_stage"}) ||
                          (l.key == "stage" && (l.parent.find("zero") != std::string::npos ||
                                                l.parent.find("deepspeed") != std::string::npos));
    if (zero_key) {
      auto v = as_int(*l.node);
      if (v && *v >= 1 && *v <= 3) {
        zero(*v, Hit{&l, l.node->value});
        set = true;
      }
      continue;
    }
    // `deepspeed: zero2`, `strategy: deepspeed_stage_3`, a DeepSpeed JSON path.
    if (one_of(l.key, {"deepspeed", "strategy", "deepspeed_config", "ds_config", "distributed_strategy",
                       "parallel_strategy", "sharding", "distributed_type", "dist_strategy", "train_strategy",
                       "sharding_strategy", "fsdp", "fsdp_sharding_strategy",
                       "strategy_name", "backend", "training_backend", "parallelism"}) &&
        l.node->is_scalar()) {
      const std::string v = to_lower(trim(l.node->value));
      if (v.size() > 5 && v.compare(v.size() - 5, 5, ".json") == 0 &&
          (l.key.find("deepspeed") != std::string::npos || l.key.find("ds_") != std::string::npos)) {
        m.set_deepspeed_ref(l.node);
        m.node(l.dotted);
        set = true;
        continue;
      }
      for (int s = 3; s >= 1; --s)
        if (v.find(fmt::format("zero{}", s)) != std::string::npos || v.find(fmt::format("zero_{}", s)) != std::string::npos ||
            v.find(fmt::format("stage_{}", s)) != std::string::npos || v.find(fmt::format("stage{}", s)) != std::string::npos) {
          zero(s, Hit{&l, l.node->value});
          set = true;
          if (v.find("offload") != std::string::npos) {
            c.parallel.offload_optimizer = true;
            if (s == 3) c.parallel.offload_params = true;
            in.took("offload_optimizer", Hit{&l, l.node->value}, "CPU offload:");
          }
          break;
        }
      if (set) continue;
      // ROLL's strategy_name fsdp2_train, AReaL's backend "fsdp:d4p1t1".
      const bool fsdp_named = v.rfind("fsdp2_", 0) == 0 || v.rfind("fsdp_train", 0) == 0 || v.rfind("fsdp:", 0) == 0;
      if (v.find("full_shard") != std::string::npos || v == "fsdp" || v == "fsdp2" || v == "optim_grads_params" ||
          v == "true" || v == "fsdp_full_shard" || fsdp_named) {
        c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
        if (v.rfind("fsdp2", 0) == 0 || v.rfind("fsdp:", 0) == 0) c.parallel.fsdp_version = 2;
        in.took("sharding", Hit{&l, l.node->value}, "FSDP full shard:");
        set = true;
      } else if (v.find("shard_grad_op") != std::string::npos || v == "optim_grads") {
        c.parallel.sharding = ShardingStrategy::kFsdpShardGradOp;
        in.took("sharding", Hit{&l, l.node->value}, "FSDP shard_grad_op:");
        set = true;
      } else if (v.find("hybrid_shard") != std::string::npos) {
        c.parallel.sharding = ShardingStrategy::kFsdpHybridShard;
        in.took("sharding", Hit{&l, l.node->value}, "FSDP hybrid shard:");
        set = true;
      }
      continue;
    }
    // DTensor / FSDP sections switched on (`dtensor_cfg: {enabled: true}`, `fsdp: {enabled: true}`).
    if ((one_of(l.key, {"enabled", "enable", "enable_fsdp"}) || l.key == "enable_full_shard") &&
        (l.parent.find("fsdp") != std::string::npos || l.parent.find("dtensor") != std::string::npos) &&
        as_bool(*l.node).value_or(false)) {
      c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
      c.parallel.fsdp_version = 2;
      in.took("sharding", Hit{&l, l.node->value}, "FSDP2 full shard:");
      set = true;
    } else if (one_of(l.key, {"use_distributed_optimizer", "distributed_optimizer"}) && as_bool(*l.node).value_or(false)) {
      c.parallel.sharding = ShardingStrategy::kZero1;
      in.took("sharding", Hit{&l, l.node->value}, "distributed optimizer (ZeRO-1):");
      set = true;
    }
  }
  // Offload.
  for (const auto& l : in.leaves()) {
    if (l.side || !l.node->is_scalar()) continue;
    const std::string v = to_lower(trim(l.node->value));
    const bool on = as_bool(*l.node).value_or(false) || v == "cpu" || v == "nvme";
    if (!on) continue;
    const bool opt = one_of(l.key, {"offload_optimizer", "optimizer_offload", "adam_offload", "optimizer_cpu_offload",
                                    "offload_optimizer_device", "cpu_offload_optimizer", "offload_optimizer_state"}) ||
                     (l.key == "device" && l.parent.find("offload_optimizer") != std::string::npos);
    const bool par = one_of(l.key, {"offload_params", "param_offload", "offload_param", "offload_param_device",
                                    "offload_parameters", "cpu_offload_params"}) ||
                     (l.key == "device" && l.parent.find("offload_param") != std::string::npos);
    const bool both = one_of(l.key, {"cpu_offload", "offload", "enable_offload", "fsdp_offload_params"});
    if (opt || both) {
      c.parallel.offload_optimizer = true;
      in.took("offload_optimizer", Hit{&l, l.node->value}, "optimizer offload:");
    }
    if (par || both) {
      c.parallel.offload_params = true;
      in.took("offload_params", Hit{&l, l.node->value}, "parameter offload:");
    }
  }
  return Ok{};
}

// The reference model of an RL run (c.grpo.beta > 0 keeps one): a KL term switched on
// (`use_kl_loss: true`, EasyR1's `disable_kl: false` with a kl_coef), a KL coefficient above 0, or,
// where no key says, a reference-model section beside the policy (ROLL's `reference:`): counted,
// and said. An explicit 0 coefficient (AReaL's `kl_ctl: 0.0`) or `disable_kl: true` keeps none.
Status read_rl_reference(Mapper& m, Inferrer& in) {
  TrainingConfig& c = m.config();
  std::optional<Hit> coef, switched_on, switched_off;
  const Leaf* section = nullptr;
  for (const auto& l : in.leaves()) {
    if (l.node->is_map() && l.path.size() <= 2 && one_of(l.key, {"ref", "reference", "ref_model", "reference_model"}) &&
        !l.node->entries.empty() && !disabled(*l.node) && section == nullptr)
      section = &l;
    if (l.side || !l.node->is_scalar()) continue;
    if (one_of(l.key, {"use_kl_loss", "use_kl_in_reward", "add_token_level_kl", "use_kl", "use_kl_penalty"})) {
      if (as_bool(*l.node).value_or(false) && !switched_on) switched_on = Hit{&l, l.node->value};
    } else if (l.key == "disable_kl" && as_bool(*l.node).value_or(false)) {
      switched_off = Hit{&l, l.node->value};
    } else if (one_of(l.key, {"kl_coef", "kl_loss_coef", "init_kl_coef", "kl_ctl", "kl_beta", "kl_penalty_coef", "beta",
                              "kl_coeff"}) && !coef) {
      if (auto v = parse_double(l.node->value, ""); v && *v >= 0) coef = Hit{&l, l.node->value};
    }
  }
  const double k = coef ? *parse_double(coef->value, "") : 0.0;
  // torchforge: the reference model is a service of its own (`services: {ref_model: {procs: 1,
  // with_gpus: true}}`), on GPUs the trainer does not share.
  const YamlNode* own_service = nullptr;
  for (const char* group : {"services", "actors"}) {
    if (section == nullptr || own_service != nullptr) break;
    const YamlNode* g = m.root().get(group);
    const YamlNode* svc = g != nullptr && g->is_map() ? g->get(section->path.back()) : nullptr;
    const YamlNode* gpus = svc != nullptr && svc->is_map() ? svc->get("with_gpus") : nullptr;
    if (gpus != nullptr && as_bool(*gpus).value_or(false)) own_service = gpus;
  }
  if (switched_off) {
    c.grpo.beta = 0.0;
    in.took("beta", *switched_off, "KL term off (no reference model):");
  } else if (coef && (k > 0 || !switched_on)) {
    c.grpo.beta = k;
    in.took("beta", *coef, k > 0 ? "KL coefficient (a reference model):" : "KL coefficient 0 (no reference model):");
  } else if (switched_on) {
    c.grpo.beta = coef && k > 0 ? k : 0.001;
    in.took("beta", *switched_on, "KL term on (a reference model):");
  } else if (section != nullptr && own_service) {
    c.grpo.beta = 0.0;
    in.read(fmt::format("reference model: {} runs as its own service with GPUs ({}): not on the training GPUs",
                        section->dotted, m.where_text(*own_service)));
  } else if (section != nullptr) {
    c.grpo.beta = 0.001;
    m.out().inputs.set_origin("beta", Origin{OriginKind::kFile, m.where(*section->node),
                                             "inferred from " + section->dotted + " (a reference model section)"});
    m.warn_at(*section->node, fmt::format("{} configures a reference model and no key says whether a KL term uses it; "
                                          "memplan counts the reference model's weights (an overestimate if the "
                                          "trainer never loads it)",
                                          section->dotted));
    in.assumed(fmt::format("a reference model ({} is configured)", section->dotted));
  }
  return Ok{};
}

// The method: RL sections and keys, DPO keys, the file's path. PPO with a critic is refused.
Status read_method(Mapper& m, Inferrer& in, bool& rl) {
  TrainingConfig& c = m.config();
  // A critic (PPO with GAE) trains a second model: refused, never planned as SFT.
  std::optional<std::string> estimator;
  for (const auto& h : in.find({"adv_estimator", "advantage_estimator", "advantage", "estimator"}, true))
    estimator = to_lower(h.value);
  const bool critic_free = estimator && (estimator->find("grpo") != std::string::npos ||
                                         estimator->find("rloo") != std::string::npos ||
                                         estimator->find("reinforce") != std::string::npos ||
                                         estimator->find("remax") != std::string::npos ||
                                         estimator->find("dr_grpo") != std::string::npos);
  for (const auto& l : in.leaves()) {
    const bool critic_key = one_of(l.key, {"critic_pretrain", "critic_model", "critic_model_name_or_path",
                                           "value_model", "value_model_path", "critic_model_path"}) &&
                            is_text(*l.node);
    const bool critic_section = l.path.size() <= 2 && (l.key == "critic" || l.key == "value") && l.node->is_map() &&
                                !disabled(*l.node) && !l.node->entries.empty() &&
                                (l.key == "critic" || l.node->get("model_name") != nullptr ||
                                 l.node->get("model_name_or_path") != nullptr || l.node->get("model") != nullptr);
    if ((critic_key || critic_section) && !critic_free && !(estimator && *estimator != "gae")) {
      return m.error_at(*l.node, ErrorCode::kUnsupported,
                        fmt::format("{} configures a critic: PPO trains a value model beside the policy (its weights, "
                                    "gradients and optimizer state on the same GPUs or others), which memplan does not "
                                    "model; planning the policy alone as SFT would underestimate",
                                    l.dotted),
                        "estimate the actor alone with --method grpo and the rollout settings (a lower bound), and the "
                        "critic as a second model with --model");
    }
  }
  std::vector<Hit> gens = in.find(kGenerationsKeys, true);
  for (const auto& l : in.leaves())
    if (l.key == "n" && (l.parent == "rollout" || l.parent == "sampling_params" || l.parent == "generation") &&
        as_int(*l.node))
      gens.push_back(Hit{&l, l.node->value});
  gens.erase(std::remove_if(gens.begin(), gens.end(), [](const Hit& h) { return !as_int(*h.leaf->node) || *as_int(*h.leaf->node) < 1; }),
             gens.end());
  // `group_size`, `n_samples` and `num_completions` mean other things outside RL (a MoE or
  // quantization group, an evaluation's samples): they count as completions per prompt at the top
  // level or in a section about rollouts, never in another model's or another section's (review
  // finding: an SFT file with moe.group_size was planned as GRPO).
  const auto rl_section = [](const std::vector<std::string>& path) {
    for (std::size_t i = 0; i + 1 < path.size(); ++i) {
      const std::string k = to_lower(path[i]);
      if (k == "rl" || k == "rlhf" || k == "gconfig" || k == "policy")
        return true;
      for (const char* part : {"grpo", "ppo", "rollout", "actor", "generat", "sampling", "orchestrator", "algorithm"})
        if (k.find(part) != std::string::npos) return true;
    }
    return false;
  };
  gens.erase(std::remove_if(gens.begin(), gens.end(),
                            [&](const Hit& h) {
                              const auto& path = h.leaf->path;
                              if (other_model(path)) return true;
                              const bool ambiguous = one_of(h.leaf->key, {"group_size", "n_samples", "num_completions"});
                              return ambiguous && path.size() > 1 && !rl_section(path);
                            }),
             gens.end());
  bool grpo = false;
  std::optional<Hit> grpo_hit;
  for (const auto& l : in.leaves()) {
    if (l.path.size() <= 2 && one_of(l.key, {"grpo", "ppo", "rl", "rlhf"}) && l.node->is_map() && !disabled(*l.node)) {
      grpo = true;
      grpo_hit = Hit{&l, l.key};
    }
    if (one_of(l.key, {"rlhf_type", "algorithm", "trainer_type", "rl_algorithm", "algo", "method", "task", "stage",
                       "loss_type", "training_type"}) && l.node->is_scalar()) {
      const std::string v = to_lower(l.node->value);
      if (v.find("grpo") != std::string::npos || v.find("ppo") != std::string::npos ||
          v.find("rloo") != std::string::npos || v.find("reinforce") != std::string::npos) {
        grpo = true;
        grpo_hit = Hit{&l, l.node->value};
      }
    }
  }
  if (!gens.empty()) grpo = true;
  if (grpo) {
    MEMPLAN_TRY(auto g, in.one(gens, "completions-per-prompt counts", "num_generations"));
    c.method = Method::kGrpo;
    rl = true;
    if (grpo_hit) in.took("method", *grpo_hit, "RL (estimated as GRPO):");
    else if (g) in.took("method", *g, "RL (estimated as GRPO):");
    if (g) {
      c.grpo.num_generations = static_cast<int>(std::min<std::int64_t>(*as_int(*g->leaf->node), 1 << 20));
      in.took("num_generations", *g, "completions per prompt");
    } else {
      in.assumed(fmt::format("{} completions per prompt (no key names them)", c.grpo.num_generations));
    }
    MEMPLAN_IO_CHECK(read_rl_reference(m, in));
    // vLLM / SGLang rollout engine and its memory.
    std::vector<Hit> util = in.find({"gpu_memory_utilization", "vllm_gpu_memory_utilization", "mem_fraction_static",
                                     "vllm_gpu_memory_util", "gpu_memory_util"},
                                    true);
    bool engine = !util.empty();
    bool separate = false;
    for (const auto& l : in.leaves()) {
      if (one_of(l.key, {"use_vllm", "vllm", "use_sglang", "enable_vllm"}) && as_bool(*l.node).value_or(false)) engine = true;
      if (one_of(l.key, {"backend", "name", "engine", "rollout_engine", "inference_engine"}) && l.node->is_scalar() &&
          (to_lower(l.node->value) == "vllm" || to_lower(l.node->value) == "sglang"))
        engine = true;
      if (one_of(l.key, {"vllm_num_engines", "num_inference_engines", "rollout_num_gpus", "inference_gpus"}) &&
          as_int(*l.node).value_or(0) > 0)
        separate = true;
      if (one_of(l.key, {"colocate_all_models", "colocate", "vllm_enable_sleep", "enable_sleep_mode"}) &&
          as_bool(*l.node).value_or(false))
        separate = false;
      if (l.key == "vllm_mode" && l.node->is_scalar() && to_lower(l.node->value) == "server") separate = true;
      // AReaL's allocation `rollout.backend: "sglang:d4p1t1"` beside `actor.backend: "fsdp:d4p1t1"`:
      // the engine's GPUs are its own.
      if (l.key == "backend" && l.node->is_scalar() &&
          (to_lower(l.node->value).rfind("sglang:", 0) == 0 || to_lower(l.node->value).rfind("vllm:", 0) == 0)) {
        engine = true;
        separate = true;
      }
    }
    if (engine) {
      c.grpo.vllm = separate ? VllmMode::kServer : VllmMode::kColocate;
      if (!util.empty()) {
        if (auto f = parse_double(util.front().value, ""); f && *f > 0 && *f < 1) {
          c.grpo.vllm_gpu_memory_utilization = *f;
          in.took("vllm_gpu_memory_utilization", util.front(), "rollout engine memory fraction");
        }
      }
      m.derived("use_vllm", separate ? "inferred: the rollout engine runs on its own GPUs"
                                     : "inferred: the rollout engine shares the training GPUs");
      in.assumed(separate ? "the rollout engine on its own GPUs (not counted)"
                          : fmt::format("the rollout engine colocated, reserving {} of each GPU",
                                        c.grpo.vllm_gpu_memory_utilization));
    }
    return Ok{};
  }
  // DPO and its reference-free relatives.
  for (const auto& l : in.leaves()) {
    const bool dpo_key = one_of(l.key, {"dpo_beta", "dpo_loss_type", "dpo", "orpo_beta", "simpo_gamma", "ref_model",
                                        "reference_model_path", "ref_model_name_or_path", "chosen_key",
                                        "rejected_key"}) ||
                         (l.key == "loss_type" && l.node->is_scalar() &&
                          one_of(to_lower(l.node->value), {"sigmoid", "ipo", "hinge", "dpo", "simpo", "orpo"}));
    const bool dpo_value = (one_of(l.key, {"rlhf_type", "stage", "method", "trainer_type", "task", "algorithm"}) ||
                            (l.key == "type" && l.parent.find("dataset") != std::string::npos)) &&
                           l.node->is_scalar() &&
                           one_of(to_lower(l.node->value), {"dpo", "orpo", "simpo", "kto", "ipo", "cpo", "trl_dpo"});
    if (!dpo_key && !dpo_value) continue;
    c.method = Method::kDpo;
    const std::string v = l.node->is_scalar() ? to_lower(l.node->value) : std::string();
    if (v == "orpo" || v == "simpo" || v == "cpo" || l.key == "orpo_beta" || l.key == "simpo_gamma")
      c.dpo.ref_model = RefModel::kNone;
    in.took("method", Hit{&l, l.node->is_scalar() ? l.node->value : l.key}, "preference training (DPO):");
    return Ok{};
  }
  const std::string from_path = method_from_path(m.out().files.front().path);
  if (from_path == "dpo" || from_path == "kto") c.method = Method::kDpo;
  else if (from_path == "orpo" || from_path == "simpo") {
    c.method = Method::kDpo;
    c.dpo.ref_model = RefModel::kNone;
  } else if (from_path == "grpo") {
    c.method = Method::kGrpo;
    rl = true;
  }
  if (!from_path.empty() && from_path != "sft") {
    m.derived("method", fmt::format("inferred from the file's path ({})", from_path));
    in.assumed(fmt::format("method {} (from the file's path)", from_path));
  }
  return Ok{};
}

// Memory-relevant settings the reading does not model, each at its line with the direction.
void warn_unmodelled(Mapper& m, Inferrer& in) {
  TrainingConfig& c = m.config();
  // A section whose presence switches a feature on (prime-rl's `[trainer.model.ac_offloading]`,
  // `[trainer.model.compile]`).
  for (const auto& l : in.leaves()) {
    if (l.side || !l.node->is_map() || disabled(*l.node) || l.parent != "model") continue;
    if (one_of(l.key, {"ac_offloading", "activation_offloading"}))
      m.warn_at(*l.node, fmt::format("{}: activation offloading is not modelled; the activations it moves to the CPU "
                                     "are counted on the GPU (the estimate is high)",
                                     l.dotted));
    else if (l.key == "compile")
      m.warn_at(*l.node, fmt::format("{}: torch.compile is not modelled; it usually frees activation memory, so the "
                                     "estimate is high",
                                     l.dotted));
  }
  for (const auto& l : in.leaves()) {
    if (l.side || !l.node->is_scalar()) continue;
    const bool on = as_bool(*l.node).value_or(false);
    if ((one_of(l.key, {"packing", "sample_packing", "pack_sequences", "packed_sequences", "padding_free",
                       "use_packing", "sequence_packing", "pack", "packed", "use_padding_free", "remove_padding",
                       "use_remove_padding", "seq_packing", "pad_to_multiple_of_packing", "use_sequence_packing"}) &&
         on) ||
               (one_of(l.parent, {"sequence_packing", "packing", "sample_packing", "seq_packing"}) &&
                one_of(l.key, {"enabled", "enable"}) && on)) {
      m.warn_at(*l.node, fmt::format("{}: memplan plans every sequence at the full sequence length, which a packed or "
                                     "padding-free batch fills; the estimate holds (a padded batch of shorter texts "
                                     "uses less)",
                                     l.dotted));
    } else if ((one_of(l.key, {"use_dynamic_bsz", "dynamic_batching", "dynamic_batch_size"}) ||
                (l.parent == "dynamic_batching" && one_of(l.key, {"enabled", "enable"}))) && on) {
      m.warn_at(*l.node, fmt::format("{}: micro-batches are formed by token count, not by a fixed number of "
                                     "sequences; memplan plans the micro-batch at the full sequence length (a token "
                                     "budget above micro-batch x sequence length is an underestimate)",
                                     l.dotted));
    } else if (one_of(l.key, {"compile", "torch_compile", "use_torch_compile", "enable_compile", "compile_model"}) && on) {
      m.warn_at(*l.node, fmt::format("{}: torch.compile is not modelled; it usually frees activation memory, so the "
                                     "estimate is high",
                                     l.dotted));
    } else if ((l.key.find("fp8") != std::string::npos && on) ||
               (one_of(l.key, {"precision", "mixed_precision", "dtype"}) && to_lower(l.node->value).find("fp8") != std::string::npos)) {
      m.warn_at(*l.node, fmt::format("{}: FP8 training is not modelled; FP8 activations and weight copies change "
                                     "memory both ways (the estimate is that of 16-bit training)",
                                     l.dotted));
    } else if (one_of(l.key, {"use_liger_kernel", "use_liger", "liger_kernel", "liger"}) && on) {
      m.set_loss_kernel(*l.node, l.dotted, LossKernel::kLiger, true);
      m.out().inputs.origins["loss_kernel"].note = "inferred from " + l.dotted;
    } else if (one_of(l.key, {"activation_offloading", "offload_activations", "cpu_offload_activations",
                              "enable_activation_offload", "activation_offload"}) && on) {
      m.warn_at(*l.node, fmt::format("{}: activation offloading is not modelled; the activations it moves to the CPU "
                                     "are counted on the GPU (the estimate is high)",
                                     l.dotted));
    } else if (one_of(l.key, {"optim", "optimizer", "optimizer_name", "optimizer_type"}) ||
               (one_of(l.key, {"name", "type", "_component_", "_target_"}) && l.parent.find("optim") != std::string::npos)) {
      auto kind = parse_optimizer(to_lower(trim(l.node->value)));
      if (kind) {
        c.optim.kind = *kind;
        in.took("optim", Hit{&l, l.node->value}, "optimizer");
      } else if (auto est = estimate_optimizer(to_lower(trim(l.node->value)))) {
        c.optim.kind = est->kind;
        in.took("optim", Hit{&l, l.node->value}, "optimizer");
        m.warn_at(*l.node, est->note);
      }
    }
  }
}

}  // namespace

Status map_inferred(Mapper& m, const std::vector<std::string>& weak_evidence) {
  return read_by_meaning(m, "", weak_evidence);
}

Status read_by_meaning(Mapper& m, const std::string& framework, const std::vector<std::string>& weak_evidence,
                       const ReadingHints& hints) {
  Inferrer in(m);
  bool model = false, batch = false, rl = false;
  std::optional<Hit> budget;
  MEMPLAN_IO_CHECK(read_model_concept(m, in, model));
  MEMPLAN_IO_CHECK(read_method(m, in, rl));
  if (hints.rl && !rl) {
    m.config().method = Method::kGrpo;
    rl = true;
    m.derived("method", fmt::format("{} trains RL (estimated as GRPO)", framework));
  }
  MEMPLAN_IO_CHECK(read_batch_concepts(m, in, batch, rl, budget, hints.generic_batch_is_global));
  if (!model && !batch) {
    Error e = make_error(
        ErrorCode::kInvalidConfig,
        fmt::format("cannot tell which training framework this config is for{}, and reading it by meaning finds "
                    "neither the model (no key like model_name_or_path, model.name, base_model, pretrain) nor the "
                    "per-device batch (no key like micro_batch_size, per_device_train_batch_size, batch_size)",
                    weak_evidence.empty() ? std::string(": no key memplan recognizes")
                                          : fmt::format(" (only {} point at one)", fmt::join(weak_evidence, ", "))),
        fmt::format("name it with --dialect ({}) or say where the values are with "
                    "--keys batch=KEY,grad_accum=KEY,seq_len=KEY",
                    fmt::join(dialect_names(), ", ")));
    e.where = SourceLocation{m.out().files.front().path, 0, 0};
    return e;
  }
  MEMPLAN_IO_CHECK(read_seq_concepts(m, in, rl));
  if (budget) finish_token_budget(m, in, *budget, rl);
  MEMPLAN_IO_CHECK(read_precision(m, in));
  MEMPLAN_IO_CHECK(read_peft(m, in));
  MEMPLAN_IO_CHECK(read_quant(m, in));
  MEMPLAN_IO_CHECK(read_checkpointing(m, in));
  MEMPLAN_IO_CHECK(read_attention(m, in));
  MEMPLAN_IO_CHECK(read_world(m, in));
  MEMPLAN_IO_CHECK(read_degrees(m, in));
  MEMPLAN_IO_CHECK(read_sharding(m, in));
  warn_unmodelled(m, in);
  if (!model)
    m.out().inputs.model_hint = fmt::format(
        "{}: reading the config by meaning found no key that names the model (model_name_or_path, model.name, "
        "base_model, pretrain ...); give --model ID|PATH",
        m.out().files.front().path);
  std::string text =
      framework.empty()
          ? fmt::format("no framework memplan knows claims this config; read by meaning (origin 'inferred'): {}",
                        fmt::join(in.reading(), "; "))
          : fmt::format("a {} config, read by meaning (origin 'inferred'): {}", framework, fmt::join(in.reading(), "; "));
  if (!in.assumptions().empty()) text += fmt::format("; assumed: {}", fmt::join(in.assumptions(), "; "));
  text += framework.empty() ? "; check these against the trainer, or name the framework with --dialect"
                            : "; check these against the trainer";
  m.warn_file(0, text);
  return Ok{};
}

}  // namespace memplan::io

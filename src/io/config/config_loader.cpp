#include "io/config/config_loader.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "io/config/hydra.hpp"
#include "io/config/toml.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

void set_source(YamlNode& n, int source) {
  n.source = source;
  for (auto& e : n.entries) {
    set_source(e.key, source);
    set_source(e.value, source);
  }
  for (auto& i : n.items) set_source(i, source);
}

// Hydra/OmegaConf-style override: mappings merge key by key, anything else is replaced.
void merge_into(YamlNode& base, const YamlNode& over) {
  if (!base.is_map() || !over.is_map()) {
    base = over;
    return;
  }
  // The last entry of each key in `base`, indexed: large layers merge in n log n, not n^2.
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < base.entries.size(); ++i)
    if (base.entries[i].key.is_scalar()) index[base.entries[i].key.value] = i;
  for (const auto& e : over.entries) {
    YamlEntry* target = nullptr;
    if (e.key.is_scalar()) {
      auto it = index.find(e.key.value);
      if (it != index.end()) target = &base.entries[it->second];
    }
    if (target == nullptr) {
      base.entries.push_back(e);
      if (e.key.is_scalar()) index[e.key.value] = base.entries.size() - 1;
    } else if (target->value.is_map() && e.value.is_map()) {
      merge_into(target->value, e.value);
    } else {
      *target = e;
    }
  }
}

const char* kind_name(const YamlNode& n) {
  switch (n.kind) {
    case YamlKind::kSeq: return "a list";
    case YamlKind::kScalar: return "a single value";
    case YamlKind::kNull: return "nothing";
    case YamlKind::kMap: return "a mapping";
  }
  return "?";
}

// `# memplan: gpu=A100-80GB gpu-memory=80GiB`: comments no trainer reads, for `memplan check`.
void read_directives(const ConfigFile& f, LoadedConfig& out) {
  std::size_t pos = 0;
  int line = 0;
  const std::string& t = f.text;
  while (pos < t.size()) {
    ++line;
    std::size_t nl = t.find('\n', pos);
    if (nl == std::string::npos) nl = t.size();
    const std::string l = trim(std::string_view(t).substr(pos, nl - pos));
    pos = nl + 1;
    if (l.empty() || l[0] != '#') continue;
    const std::string body = trim(std::string_view(l).substr(1));
    if (body.rfind("memplan:", 0) != 0) continue;
    std::string rest = body.substr(8);
    std::replace(rest.begin(), rest.end(), ',', ' ');
    std::size_t p = 0;
    while (p < rest.size()) {
      while (p < rest.size() && rest[p] == ' ') ++p;
      std::size_t e = rest.find(' ', p);
      if (e == std::string::npos) e = rest.size();
      const std::string item = rest.substr(p, e - p);
      p = e;
      if (item.empty()) continue;
      const auto eq = item.find('=');
      const std::string key = to_lower(item.substr(0, eq));
      const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
      const SourceLocation where{f.path, line, 0};
      auto warn = [&](std::string msg, std::string suggestion = {}) {
        Error w = make_error(ErrorCode::kInvalidConfig, std::move(msg), std::move(suggestion));
        w.where = where;
        out.inputs.warnings.push_back(w.to_string());
        out.diagnostics.push_back(std::move(w));
      };
      if (key == "gpu" && !value.empty()) {
        out.gpu = value;
        out.gpu_where = where;
      } else if ((key == "gpu-memory" || key == "gpu_memory") && !value.empty()) {
        auto size = parse_size(value);
        if (!size) {
          warn("memplan directive gpu-memory: " + size.error().message, size.error().suggestion);
          continue;
        }
        out.gpu_memory = *size;
        out.gpu_where = where;
      } else {
        warn(fmt::format("unknown memplan directive '{}'", item), did_you_mean(key, {"gpu", "gpu-memory"}));
      }
    }
  }
}

// A `deepspeed:` path, relative to the YAML that names it, to the working directory (how the
// trainers resolve it), or to a parent of the YAML's directory (repository-relative paths in
// examples/ configs).
Result<std::string> find_deepspeed_file(const std::string& yaml_path, const std::string& ref, FileSystem& fs,
                                        std::vector<std::string>& tried) {
  namespace stdfs = std::filesystem;
  const stdfs::path r(ref);
  std::vector<stdfs::path> candidates;
  if (r.is_absolute()) {
    candidates.push_back(r);
  } else {
    stdfs::path dir = stdfs::path(yaml_path).parent_path();
    candidates.push_back(dir / r);
    candidates.push_back(r);
    for (int up = 0; up < 6 && dir.has_relative_path() && dir != dir.parent_path(); ++up) {
      dir = dir.parent_path();
      candidates.push_back(dir / r);
    }
  }
  for (const auto& c : candidates) {
    const std::string s = c.lexically_normal().string();
    if (std::find(tried.begin(), tried.end(), s) != tried.end()) continue;
    tried.push_back(s);
    MEMPLAN_TRY(auto info, fs.stat(s));
    if (info.exists) return s;
  }
  return std::string();
}

Status map_primary(Dialect d, Mapper& m) {
  switch (d) {
    case Dialect::kHfTrl: return map_hf_trl(m);
    case Dialect::kAxolotl: return map_axolotl(m);
    case Dialect::kLlamaFactory: return map_llamafactory(m);
    case Dialect::kTorchtune: return map_torchtune(m);
    case Dialect::kLightning: return map_lightning(m);
    case Dialect::kFlat: return map_flat(m);
    case Dialect::kDeepSpeed: return map_deepspeed(m, /*primary=*/true);
    case Dialect::kAccelerate: return map_accelerate(m, /*primary=*/true);
    case Dialect::kLitgpt: return map_litgpt(m);
    case Dialect::kAutomodel: return map_automodel(m);
    case Dialect::kLlmFoundry: return map_llm_foundry(m);
    case Dialect::kMegatron: return map_megatron(m);
    case Dialect::kTorchtitan: return map_torchtitan(m);
    case Dialect::kMegatronLm: return map_megatron_lm(m);
    case Dialect::kVerl: return map_verl(m);
    case Dialect::kOpenInstruct: return map_open_instruct(m);
    case Dialect::kMsSwift: return map_ms_swift(m);
    case Dialect::kOumi: return map_oumi(m);
    case Dialect::kMegatronBridge: return map_megatron_bridge(m);
    case Dialect::kNemoRl: return map_nemo_rl(m);
    case Dialect::kRoll: return map_roll(m);
    case Dialect::kPrimeRl: return map_prime_rl(m);
    case Dialect::kKeyMap: return Ok{};
    case Dialect::kInferred: return map_inferred(m, m.out().evidence);
  }
  return Ok{};
}

}  // namespace

std::string to_string(Knob k) {
  switch (k) {
    case Knob::kBatch: return "batch";
    case Knob::kGradAccum: return "grad_accum";
    case Knob::kSeqLen: return "seq_len";
    case Knob::kGlobalBatch: return "global_batch";
  }
  return "?";
}

std::string ValueSite::key() const { return join_key_path(path); }

SourceLocation LoadedConfig::batch_location() const {
  if (const ValueSite* s = primary_site(Knob::kBatch); s != nullptr && s->present && s->file < files.size())
    return SourceLocation{files[s->file].path, s->line, 0};
  return SourceLocation{files.empty() ? std::string() : files.front().path, 0, 0};
}

const ValueSite* LoadedConfig::primary_site(Knob k) const {
  for (const auto& s : sites)
    if (s.knob == k && !s.mirror) return &s;
  return nullptr;
}

const std::vector<std::string>& key_map_inputs() {
  static const std::vector<std::string> inputs = {
      "batch",     "grad_accum", "seq_len", "model", "method",    "num_gpus", "nodes", "gradient_checkpointing",
      "precision", "bf16",       "fp16",    "torch_dtype", "optim", "use_peft", "lora_r", "load_in_4bit"};
  return inputs;
}

Result<std::vector<KeyMapEntry>> parse_key_map(const std::string& spec, FileSystem& fs) {
  std::vector<std::pair<std::string, std::string>> pairs;
  std::vector<int> lines;
  std::string file;
  if (spec.find('=') != std::string::npos) {
    std::size_t start = 0;
    while (start <= spec.size()) {
      const std::size_t comma = spec.find(',', start);
      const std::string item = trim(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (!item.empty()) {
        const auto eq = item.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
          return make_error(ErrorCode::kInvalidArgument, fmt::format("--keys: expected INPUT=KEY.PATH, got \"{}\"", item),
                            "e.g. --keys batch=data_loader.batch_size,grad_accum=trainer.accumulate_grad_batches");
        pairs.emplace_back(trim(item.substr(0, eq)), trim(item.substr(eq + 1)));
        lines.push_back(0);
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else {
    file = spec;
    MEMPLAN_TRY(FileInfo info, fs.stat(spec));
    if (!info.exists)
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--keys: expected INPUT=KEY.PATH,... or a mapping file, got \"{}\"", spec),
                        "e.g. --keys batch=data_loader.batch_size,grad_accum=trainer.accumulate_grad_batches");
    MEMPLAN_TRY(auto text, fs.read_file(spec));
    MEMPLAN_TRY(auto doc, parse_yaml(std::move(text), spec));
    if (!doc.root.is_map()) {
      Error e = make_error(ErrorCode::kInvalidConfig,
                           "a key map file maps inputs to key paths (batch: data_loader.batch_size)");
      e.where = SourceLocation{spec, doc.root.line, 0};
      return e;
    }
    for (const auto& e : doc.root.entries) {
      if (!e.value.is_scalar()) {
        Error err = make_error(ErrorCode::kInvalidConfig, fmt::format("{}: expected a key path", e.key.value));
        err.where = SourceLocation{spec, e.key.line, 0};
        return err;
      }
      pairs.emplace_back(e.key.value, e.value.value);
      lines.push_back(e.key.line);
    }
  }
  std::vector<KeyMapEntry> out;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto& [input, path] = pairs[i];
    if (std::find(key_map_inputs().begin(), key_map_inputs().end(), input) == key_map_inputs().end()) {
      Error e = make_error(ErrorCode::kUnknownName, fmt::format("--keys: unknown input '{}'", input),
                           did_you_mean(input, key_map_inputs()));
      if (!file.empty()) e.where = SourceLocation{file, lines[i], 0};
      return e;
    }
    out.push_back(KeyMapEntry{input, split_key_path(path)});
  }
  if (out.empty()) return make_error(ErrorCode::kInvalidArgument, "--keys: nothing to map");
  return out;
}

Status map_key_map(Mapper& m, const std::vector<KeyMapEntry>& entries) {
  TrainingConfig& c = m.config();
  auto replace_site = [&](Knob k, const std::string& path) {
    auto& sites = m.out().sites;
    sites.erase(std::remove_if(sites.begin(), sites.end(), [&](const ValueSite& s) { return s.knob == k && !s.mirror; }),
                sites.end());
    m.site(k, path);
  };
  for (const auto& e : entries) {
    const std::string path = join_key_path(e.path);
    if (m.node(path) == nullptr) m.warn_file(0, fmt::format("--keys {}={}: no such key", e.input, path));
    const std::string& in = e.input;
    if (in == "batch") {
      MEMPLAN_IO_CHECK(m.read(path, "batch", c.micro_batch));
      replace_site(Knob::kBatch, path);
    } else if (in == "grad_accum") {
      MEMPLAN_IO_CHECK(m.read(path, "grad_accum", c.grad_accum));
      replace_site(Knob::kGradAccum, path);
    } else if (in == "seq_len") {
      MEMPLAN_IO_CHECK(m.read(path, "seq_len", c.seq_len));
      replace_site(Knob::kSeqLen, path);
    } else if (in == "model") {
      MEMPLAN_IO_CHECK(m.read_model(path));
    } else if (in == "method") {
      MEMPLAN_TRY(auto v, m.text(path));
      if (v) {
        auto meth = parse_method(*v);
        if (!meth) return m.error_at(*m.node(path), meth.error().code, meth.error().message, meth.error().suggestion);
        c.method = *meth;
        m.from_file("method", *m.node(path), path);
      }
    } else if (in == "num_gpus") {
      MEMPLAN_IO_CHECK(m.read(path, "num_gpus", c.parallel.num_gpus));
    } else if (in == "nodes") {
      MEMPLAN_IO_CHECK(m.read(path, "nodes", c.parallel.nodes));
    } else if (in == "gradient_checkpointing") {
      MEMPLAN_IO_CHECK(m.read(path, "gradient_checkpointing", c.gradient_checkpointing));
    } else if (in == "precision") {
      MEMPLAN_IO_CHECK(apply_lightning_precision(m, path));
    } else if (in == "bf16" || in == "fp16") {
      MEMPLAN_TRY(auto on, m.boolean(path));
      if (on) {
        if (*on) c.autocast = in == "bf16" ? DType::kBFloat16 : DType::kFloat16;
        else c.autocast.reset();
        m.from_file("autocast", *m.node(path), path);
      }
    } else if (in == "torch_dtype") {
      MEMPLAN_IO_CHECK(m.read_dtype(path, "torch_dtype", c.torch_dtype));
    } else if (in == "optim") {
      MEMPLAN_IO_CHECK(m.read_optimizer(path, "optim", c.optim.kind));
    } else if (in == "use_peft") {
      MEMPLAN_IO_CHECK(m.read(path, "use_peft", c.lora.enabled));
    } else if (in == "lora_r") {
      MEMPLAN_IO_CHECK(m.read(path, "lora_r", c.lora.r));
    } else if (in == "load_in_4bit") {
      MEMPLAN_IO_CHECK(m.read(path, "load_in_4bit", c.quant.load_in_4bit));
    }
  }
  return Ok{};
}

Result<LoadedConfig> load_config(const ConfigRequest& req, FileSystem& fs) {
  if (req.files.empty()) return make_error(ErrorCode::kInvalidArgument, "no config file given");
  LoadedConfig out;

  // Read and parse everything first: DeepSpeed JSON files go after the layered YAML files.
  std::vector<YamlDoc> layers, deepspeed, launchers;
  std::vector<ConfigFile> layer_files, ds_files, launcher_files;
  std::vector<std::string> value_overrides = req.overrides;
  for (const auto& path : req.files) {
    MEMPLAN_TRY(std::string text, fs.read_file(path));
    MEMPLAN_TRY(FileInfo info, fs.stat(path));
    MEMPLAN_TRY(YamlDoc doc, parse_config_text(text, path));
    if (!doc.root.is_map()) {
      Error e = make_error(ErrorCode::kInvalidConfig,
                           fmt::format("expected a mapping of keys at the top level, got {}", kind_name(doc.root)));
      e.where = SourceLocation{path, doc.root.line, 0};
      return e;
    }
    const bool ds = looks_like_deepspeed(doc.root);
    const bool launcher = !ds && looks_like_accelerate(doc.root);
    if (launcher) {
      launcher_files.push_back(ConfigFile{path, std::move(text), info, false});
      launchers.push_back(std::move(doc));
      continue;
    }
    if (ds) {
      ds_files.push_back(ConfigFile{path, std::move(text), info, true});
      deepspeed.push_back(std::move(doc));
      continue;
    }
    // A Hydra defaults list: the files it composes, in merge order. The command line's group
    // choices apply to the first (primary) config.
    const bool primary = layers.empty();
    MEMPLAN_TRY(HydraComposition composed,
                compose_hydra(path, std::move(text), info, std::move(doc), primary ? req.overrides
                                                                                  : std::vector<std::string>{},
                              fs));
    if (primary) value_overrides = std::move(composed.value_overrides);
    for (auto& w : composed.not_followed) {
      out.not_followed.push_back(w.to_string());
      out.inputs.warnings.push_back(w.to_string());
      out.diagnostics.push_back(std::move(w));
    }
    for (auto& l : composed.layers) {
      ConfigFile f{l.path, std::move(l.text), l.info, false};
      f.package = l.package;
      for (auto it = l.package.rbegin(); it != l.package.rend(); ++it) {
        YamlNode wrapper;
        wrapper.kind = YamlKind::kMap;
        wrapper.line = l.doc.root.line;
        YamlEntry e;
        e.key.kind = YamlKind::kScalar;
        e.key.value = *it;
        e.key.line = l.doc.root.line;
        e.value = std::move(l.doc.root);
        wrapper.entries.push_back(std::move(e));
        l.doc.root = std::move(wrapper);
      }
      layer_files.push_back(std::move(f));
      layers.push_back(std::move(l.doc));
    }
  }
  // Launcher configs alone: the accelerate file is the config. DeepSpeed files alone: the JSON is.
  const bool launcher_only = layers.empty() && !launchers.empty();
  if (launcher_only) {
    std::swap(layers, launchers);
    std::swap(layer_files, launcher_files);
  }
  const bool deepspeed_only = layers.empty();
  if (deepspeed_only) {
    std::swap(layers, deepspeed);
    std::swap(layer_files, ds_files);
  }
  for (auto& f : layer_files) out.files.push_back(std::move(f));
  for (auto& f : launcher_files) out.files.push_back(std::move(f));
  for (auto& f : ds_files) out.files.push_back(std::move(f));
  int source = 0;
  for (auto& d : layers) set_source(d.root, source++);
  for (auto& d : launchers) set_source(d.root, source++);
  for (auto& d : deepspeed) set_source(d.root, source++);
  for (const auto* docs : {&layers, &launchers, &deepspeed})
    for (const auto& d : *docs)
      for (const auto& w : d.warnings) {
        out.inputs.warnings.push_back(w.to_string());
        out.diagnostics.push_back(w);
      }

  YamlNode merged = layers.front().root;
  for (std::size_t i = 1; i < layers.size(); ++i) merge_into(merged, layers[i].root);
  if (!value_overrides.empty()) {
    // The command line's overrides, one per line of a file that is never written.
    ConfigFile cl{"command line", fmt::format("{}\n", fmt::join(value_overrides, "\n")), FileInfo{}, false};
    cl.command_line = true;
    MEMPLAN_IO_CHECK(apply_value_overrides(merged, value_overrides, source, cl.path));
    out.files.push_back(std::move(cl));
    ++source;
  }
  std::vector<InterpolationWarning> interpolation_warnings;
  MEMPLAN_IO_CHECK(resolve_interpolations(merged, out, interpolation_warnings));

  if (!req.dialect.empty()) {
    MEMPLAN_TRY(out.dialect, parse_dialect(req.dialect));
    out.evidence = {"named with --dialect"};
  } else if (launcher_only) {
    out.dialect = Dialect::kAccelerate;
    out.evidence = {"an accelerate launcher config (distributed_type, num_processes)"};
  } else if (deepspeed_only) {
    out.dialect = Dialect::kDeepSpeed;
    out.evidence = {"a DeepSpeed config on its own"};
  } else {
    auto detected = detect_dialect(merged, out.files.front().path);
    if (detected && !(detected->dialect == Dialect::kInferred && !req.key_map.empty())) {
      out.dialect = detected->dialect;
      out.evidence = detected->evidence;
    } else if (!req.key_map.empty()) {
      out.dialect = Dialect::kKeyMap;
      out.evidence = {"--keys"};
    } else {
      return detected.error();
    }
  }

  Mapper m(merged, out);
  MEMPLAN_IO_CHECK(map_primary(out.dialect, m));
  if (req.dialect.empty() && !launcher_only && !deepspeed_only && out.dialect != Dialect::kInferred &&
      out.dialect != Dialect::kKeyMap)
    note_other_framework(m, out.dialect);
  if (!req.key_map.empty()) MEMPLAN_IO_CHECK(map_key_map(m, req.key_map));
  for (auto& w : interpolation_warnings)
    if (w.refuses && m.asked(w.key)) return w.warning;
  for (auto& w : interpolation_warnings)
    if (m.asked(w.key)) {
      out.inputs.warnings.push_back(w.warning.to_string());
      out.diagnostics.push_back(std::move(w.warning));
    }

  // Launcher settings next to the trainer config (accelerate launch --config_file X).
  YamlNode launcher_tree;
  std::optional<Mapper> lm;
  if (!launcher_only && !launchers.empty()) {
    launcher_tree = launchers.front().root;
    for (std::size_t i = 1; i < launchers.size(); ++i) merge_into(launcher_tree, launchers[i].root);
    lm.emplace(launcher_tree, out);
    MEMPLAN_IO_CHECK(map_accelerate(*lm, /*primary=*/false));
  }

  // DeepSpeed next to the trainer config: given with --config, or named by a `deepspeed:` key
  // (or by an accelerate config's deepspeed_config_file).
  if (!deepspeed_only && !deepspeed.empty()) {
    YamlNode ds = deepspeed.front().root;
    for (std::size_t i = 1; i < deepspeed.size(); ++i) merge_into(ds, deepspeed[i].root);
    Mapper dm(ds, out);
    MEMPLAN_IO_CHECK(map_deepspeed(dm, /*primary=*/false));
  }
  const YamlNode* ref = m.deepspeed_ref();
  bool ref_from_launcher = false;
  if ((ref == nullptr || ref->is_null()) && lm) {
    ref = lm->deepspeed_ref();
    ref_from_launcher = true;
  }
  if (ref != nullptr && !ref->is_null()) {
    if (ref->is_map()) {
      Mapper dm(*ref, out);
      MEMPLAN_IO_CHECK(map_deepspeed(dm, /*primary=*/false));
    } else if (ref->is_scalar() && deepspeed.empty()) {
      const std::string& yaml = out.files[static_cast<std::size_t>(ref->source)].path;
      std::vector<std::string> tried;
      MEMPLAN_TRY(std::string path, find_deepspeed_file(yaml, ref->value, fs, tried));
      Mapper& owner = ref_from_launcher ? *lm : m;
      if (path.empty() && (ref_from_launcher || out.dialect == Dialect::kAccelerate)) {
        // accelerate resolves the file from the launch directory, which memplan does not know:
        // the ZeRO settings in it are then missing, which the user must hear about.
        owner.warn_at(*ref, fmt::format("DeepSpeed config '{}' not found (looked for {}); its ZeRO settings are not "
                                        "read",
                                        ref->value, fmt::join(tried, ", ")),
                      "pass the JSON with another --config");
        out.not_followed.push_back(fmt::format("{}: DeepSpeed config '{}' was not found", owner.where_text(*ref),
                                               ref->value));
      } else if (path.empty()) {
        Error e = make_error(ErrorCode::kIoError,
                             fmt::format("DeepSpeed config '{}' not found (looked for {})", ref->value,
                                         fmt::join(tried, ", ")),
                             "fix the path, or pass the JSON with another --config");
        e.where = owner.where(*ref);
        return e;
      }
      if (!path.empty()) {
      MEMPLAN_TRY(std::string text, fs.read_file(path));
      MEMPLAN_TRY(FileInfo info, fs.stat(path));
      MEMPLAN_TRY(YamlDoc doc, parse_yaml(text, path));
      if (!doc.root.is_map()) {
        Error e = make_error(ErrorCode::kInvalidConfig, "a DeepSpeed config must be a JSON object");
        e.where = SourceLocation{path, doc.root.line, 0};
        return e;
      }
      set_source(doc.root, static_cast<int>(out.files.size()));
      out.files.push_back(ConfigFile{path, std::move(text), info, true});
      for (const auto& w : doc.warnings) {
        out.inputs.warnings.push_back(w.to_string());
        out.diagnostics.push_back(w);
      }
      Mapper dm(doc.root, out);
      MEMPLAN_IO_CHECK(map_deepspeed(dm, /*primary=*/false));
      }
    }
  }

  // Model-parallel sizes without a GPU count (Automodel and Megatron recipes leave it to the
  // launcher): the smallest layout they describe, the fewest data-parallel ranks that make it
  // valid (whole expert-parallel groups and HSDP replicas).
  {
    auto& par = out.inputs.config.parallel;
    const std::int64_t mp = static_cast<std::int64_t>(std::max(1, par.tensor_parallel)) * std::max(1, par.pipeline_parallel) *
                            std::max(1, par.context_parallel);
    if (par.num_gpus == 1 && par.nodes == 1 && mp <= 65536 &&
        (mp > 1 || par.expert_parallel > 1 || par.dp_replicate > 1)) {
      std::optional<std::int64_t> world;
      ParallelConfig trial = par;
      for (std::int64_t dp = 1; dp <= 1024 && !world; ++dp) {
        const std::int64_t w = mp * dp;
        const bool one_node = w <= 8 || w % 8 != 0;
        if (w > 65536 || (one_node && w > 1024)) break;
        trial.num_gpus = static_cast<int>(one_node ? w : 8);
        trial.nodes = static_cast<int>(one_node ? 1 : w / 8);
        if (validate_parallel(trial)) world = w;
      }
      // No data-parallel size helps (a schedule or degree is wrong in itself): one replica, so
      // that validation reports that error rather than the GPU count.
      if (!world && mp > 1 && mp <= 1024) {
        trial.num_gpus = static_cast<int>(mp);
        trial.nodes = 1;
        world = mp;
      }
      if (world && *world > 1) {
        par.num_gpus = trial.num_gpus;
        par.nodes = trial.nodes;
        m.warn_file(0, fmt::format("the config sets model-parallel sizes (tensor {} x pipeline {} x context {}, expert "
                                   "{}) but not the number of GPUs; memplan assumes the smallest layout, {} GPU(s), "
                                   "unless --num-gpus/--nodes say otherwise",
                                   par.tensor_parallel, par.pipeline_parallel, par.context_parallel, par.expert_parallel,
                                   *world));
        out.inputs.gpu_count_warnings.push_back(out.inputs.warnings.back());
      }
    }
  }
  apply_global_batch(out.inputs);
  if (out.inputs.global_batch && !out.inputs.global_batch->warning.empty()) {
    // The located form `memplan check` annotates (the message without its "file:line: " prefix).
    const auto& g = *out.inputs.global_batch;
    Error w = make_error(ErrorCode::kInvalidConfig, g.warning.substr(g.loc.to_string().size() + 2));
    w.where = g.loc;
    out.diagnostics.push_back(std::move(w));
  }
  // Not world_size(): the product of two unvalidated file values may overflow int.
  const auto gpus_origin = out.inputs.origins.find("num_gpus");
  const bool gpus_written = gpus_origin != out.inputs.origins.end() && gpus_origin->second.kind == OriginKind::kFile;
  if (out.inputs.config.parallel.sharding != ShardingStrategy::kNone && out.inputs.config.parallel.num_gpus == 1 &&
      out.inputs.config.parallel.nodes == 1 && !gpus_written) {
    m.warn_file(0, fmt::format("{} shards across GPUs, but the config does not say how many; memplan assumes 1 "
                               "unless --num-gpus says otherwise",
                               to_string(out.inputs.config.parallel.sharding)));
    out.inputs.gpu_count_warnings.push_back(out.inputs.warnings.back());
  }
  for (const auto& f : out.files)
    if (!f.deepspeed) read_directives(f, out);
  for (const auto& f : out.files) out.inputs.config_files.push_back(f.path);
  // Whether the run goes through accelerate and PEFT: its framework says; an accelerate launcher
  // config beside it says the model is prepared by accelerate.
  out.inputs.run = out.run ? *out.run : run_context(out.dialect);
  if (!launchers.empty() && !out.inputs.run.accelerate) {
    out.inputs.run.accelerate = true;
    out.inputs.run.framework += " launched by accelerate";
  }
  return out;
}

}  // namespace memplan::io

#include "cli/plan_flags.hpp"

#include <cmath>

#include "memplan/model.hpp"
#include "memplan/stack.hpp"

#include <cstdlib>
#include <ostream>

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include "cli/calibration_hook.hpp"
#include "io/edit/shared_files.hpp"
#include "io/gpu/gpu_detect.hpp"
#include "io/gpu/gpu_profiles.hpp"
#include "memplan/plan.hpp"
#include "memplan/text.hpp"

namespace memplan::cli {

namespace {

bool given(const BudgetFlags& f, const char* name) {
  if (f.app == nullptr) return false;
  const CLI::Option* o = f.app->get_option_no_throw(name);
  return o != nullptr && o->count() > 0;
}

Error flag_error(const std::string& flag, Error e) {
  e.message = flag + ": " + e.message;
  return e;
}

bool bare_number(const std::string& t) {
  if (t.empty()) return false;
  bool digit = false;
  for (char c : t) {
    if (c >= '0' && c <= '9') digit = true;
    else if (c != '.') return false;
  }
  return digit;
}

}  // namespace

Result<Bytes> parse_gpu_memory(const std::string& text) {
  const std::string t = trim(text);
  if (bare_number(t)) {
    auto v = parse_double(t, "--gpu-memory");
    if (!v) return v.error();
    if (*v > 1e9)
      return make_error(ErrorCode::kInvalidArgument, fmt::format("GPU memory \"{}\" is out of range", t),
                        "give the GPU's memory, e.g. --gpu-memory 24 (a 24 GB card) or 24GiB");
    return card_label_memory(*v).memory;
  }
  return parse_size(t);
}

CardLabel card_label_memory(double label_gb) {
  // A card sold as "24 GB" holds 24 GiB of memory chips; nvidia-smi shows memory.total a little
  // under that (24564 MiB on an RTX 4090, 81559 MiB on an H100 80GB): the driver's reserve. The
  // label reads as the smallest memory.total among the profiled cards within 1% below the label's
  // GiB, else the GiB themselves (docs/gpus.md#gpu-memory).
  CardLabel out;
  const Bytes full = Bytes::gib(label_gb);
  out.memory = full;
  auto profiles = io::load_gpu_profiles();
  if (!profiles) return out;
  for (const GpuProfile& p : *profiles) {
    if (p.unified || p.memory > full || static_cast<double>(p.memory.count()) < 0.99 * static_cast<double>(full.count()))
      continue;
    if (out.cards.empty() || p.memory < out.memory) {
      if (p.memory < out.memory) out.cards.clear();
      out.memory = p.memory;
    }
    if (p.memory == out.memory) out.cards.push_back(p.name);
  }
  return out;
}

Result<Bytes> parse_headroom(const std::string& text, Bytes capacity) {
  const std::string t = trim(text);
  if (!t.empty() && t.back() == '%') {
    auto pct = parse_double(std::string_view(t).substr(0, t.size() - 1), "headroom");
    if (!pct || !(*pct >= 0 && *pct < 100))
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("invalid headroom: \"{}\" (a percentage must be at least 0 and below 100)", t));
    return Bytes::of(static_cast<std::int64_t>(static_cast<double>(capacity.count()) * *pct / 100.0));
  }
  if (bare_number(t)) {
    if (auto v = parse_double(t, "headroom"); v && *v == 0) return Bytes::zero();
    return make_error(ErrorCode::kInvalidArgument, fmt::format("headroom \"{}\" has no unit", t),
                      fmt::format("write {}GB or {}GiB for a size, or {}% for a share of GPU memory", t, t, t));
  }
  return parse_size(t);
}

Result<AllocatorMargin> allocator_margin(Bytes capacity, const io::ResolvedInputs* in) {
  AllocatorMargin out;
  // Each variable from the run's files (a launch script, .env or config sets it for the run),
  // else from the environment memplan runs in.
  io::AllocatorSettings set = in ? in->allocator : io::AllocatorSettings{};
  for (const char* name : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
    auto& slot = std::string(name) == "PYTORCH_ALLOC_CONF" ? set.alloc_conf : set.cuda_alloc_conf;
    if (slot) continue;
    if (const char* env = std::getenv(name); env != nullptr && *env != '\0')
      slot = io::AllocatorSetting{env, "the environment"};
  }
  const Version& torch = in ? in->stack.of(Library::kTorch) : newest_modelled(Library::kTorch);
  const auto value = [](const std::optional<io::AllocatorSetting>& s) {
    return s ? std::optional<std::string>(s->value) : std::nullopt;
  };
  const AllocatorChoice choice = choose_allocator_conf(torch, value(set.alloc_conf), value(set.cuda_alloc_conf));
  if (choice.value) {
    const auto& from = choice.variable == "PYTORCH_ALLOC_CONF" ? set.alloc_conf : set.cuda_alloc_conf;
    out.source = from->source;
    auto c = parse_allocator_conf(*choice.value);
    if (!c) {
      Error e = c.error();
      e.message = (out.source == "the environment" ? std::string("environment") : out.source) + ": " + e.message;
      return e;
    }
    out.conf = *c;
  }
  out.margin = safety_margin_for(capacity, out.conf);
  if (!choice.value) {
    out.note = choice.note;
    return out;
  }
  const std::string what = fmt::format("{}={} ({})", choice.variable, out.conf.text, out.source);
  if (out.conf.expandable_segments)
    out.note = fmt::format("safety margin 1 GiB + 2% = {:.2f} GiB: {} lets freed pages be re-mapped, so "
                           "fragmentation no longer needs the default 10%",
                           out.margin.as_gib(), what);
  else
    out.note = fmt::format("{}: the default safety margin is kept (1 GiB + 10% = {:.2f} GiB); only "
                           "expandable_segments:True lowers it",
                           what, out.margin.as_gib());
  if (!choice.note.empty()) out.note += "; " + choice.note;
  return out;
}

void add_gpu_flags(CLI::App& app, BudgetFlags& f) {
  f.app = &app;
  app.add_option("--gpu", f.gpu, "GPU by name or alias: h100-sxm, a100-80gb, rtx-4090, dgx-spark (memplan gpus)")
      ->group("Budget");
  app.add_flag("--auto", f.auto_detect, "Detect the GPU and its free memory (NVML, nvidia-smi, rocm-smi, /proc/meminfo)")
      ->group("Budget");
  app.add_option("--gpu-memory", f.gpu_memory,
                 "GPU memory: a bare number is the card's label (24: a 24 GB card, 24564 MiB as nvidia-smi shows "
                 "it); with a unit it is exact: 24GB, 24GiB, 24564MiB")
      ->group("Budget");
  app.add_option("--safety-margin", f.safety_margin,
                 "Memory kept free for the CUDA context and allocator fragmentation: a size (2GiB) or a "
                 "percentage (10%); default 1 GiB + 10% of GPU memory, 1 GiB + 2% with "
                 "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
      ->group("Budget");
  app.add_option("--headroom", f.headroom,
                 "Memory kept free for other processes or the OS: a size (4GB) or a percentage (10%); default 0, "
                 "a unified-memory device's OS reserve")
      ->group("Budget");
}

void add_budget_flags(CLI::App& app, BudgetFlags& f) {
  add_gpu_flags(app, f);
  app.add_option("--target-global-batch", f.target_global_batch,
                 "Global batch to keep (micro-batch x grad-accum x data-parallel GPUs): N, keep (the config's) or "
                 "free (none: the largest micro-batch); default keep when the config or a flag sets the batch")
      ->group("Budget");
}

GpuTarget gpu_target(const GpuProfile& p) {
  GpuTarget t;
  t.capacity = p.capacity();
  t.profile = p;
  t.description =
      p.usable > Bytes::zero()
          ? fmt::format("{} ({:.2f} GiB usable as CUDA reports it; nvidia-smi: {:.2f} GiB)",
                        p.display_name.empty() ? p.name : p.display_name, p.usable.as_gib(), p.memory.as_gib())
          : fmt::format("{} ({:.2f} GiB)", p.display_name.empty() ? p.name : p.display_name, p.memory.as_gib());
  return t;
}

GpuTarget gpu_target(Bytes capacity, const std::string& source) {
  GpuTarget t;
  t.capacity = capacity;
  t.description = fmt::format("{:.2f} GiB of GPU memory ({})", capacity.as_gib(), source);
  return t;
}

Result<std::optional<GpuTarget>> resolve_gpu(const BudgetFlags& f, bool detect_by_default) {
  const int named = (given(f, "--gpu") ? 1 : 0) + (given(f, "--gpu-memory") ? 1 : 0) + (f.auto_detect ? 1 : 0);
  if (named > 1)
    return make_error(ErrorCode::kConflict, "--gpu, --gpu-memory and --auto are alternatives", "give one of them");
  if (given(f, "--gpu")) {
    auto p = io::find_gpu(f.gpu);
    if (!p) return flag_error("--gpu", p.error());
    return std::optional<GpuTarget>(gpu_target(*p));
  }
  if (given(f, "--gpu-memory")) {
    auto c = parse_gpu_memory(f.gpu_memory);
    if (!c) return flag_error("--gpu-memory", c.error());
    const std::string t = trim(f.gpu_memory);
    std::string source = "--gpu-memory";
    if (bare_number(t)) {
      const CardLabel label = card_label_memory(*parse_double(t, "--gpu-memory"));
      source = label.cards.empty()
                   ? fmt::format("--gpu-memory {} read as a {} GB card's {:.0f} MiB; write {}GB for decimal gigabytes",
                                 t, t, label.memory.as_mib(), t)
                   : fmt::format("--gpu-memory {} read as a {} GB card: {:.0f} MiB, as nvidia-smi shows {}; write "
                                 "{}GB for decimal gigabytes, or --gpu NAME for another card",
                                 t, t, label.memory.as_mib(), fmt::join(label.cards, ", "), t);
    }
    return std::optional<GpuTarget>(gpu_target(*c, source));
  }
  if (!f.auto_detect && !detect_by_default) return std::optional<GpuTarget>();
  GpuTarget t;
  auto probe = io::SystemProbe::from_process();
  auto sys = io::detect_gpus(*probe);
  if (!sys) return sys.error();
  const io::DetectedGpu& g = sys->chosen_gpu();
  t.capacity = g.total;
  t.profile = sys->chosen_profile();
  t.detected = io::detected_budget(g, default_safety_margin(g.total));
  t.detected->unified = g.unified;
  // A unified device has no GPU memory of its own: say whose memory the figures are.
  const std::string name =
      g.profile && !g.profile->display_name.empty() && g.unified
          ? fmt::format("{} ({}, CPU and GPU share its memory)", g.name, g.profile->name)
          : g.name;
  t.description = fmt::format("{}, detected by {}: {:.2f} GiB {}free of {:.2f} GiB{}{}", name, g.source,
                              g.free.as_gib(), g.unified ? "system memory " : "", g.total.as_gib(),
                              g.unified ? " (unified memory)" : "",
                              sys->gpus.size() > 1 ? fmt::format(" (smallest of {} GPUs)", sys->gpus.size()) : "");
  return std::optional<GpuTarget>(t);
}

Result<Budget> budget_for(const GpuTarget& gpu, const BudgetFlags& f, const TrainingConfig& c,
                          io::ResolvedInputs* in) {
  // Capacity and default headroom: what detection measured (free memory, a unified GPU's OS
  // share), else the profile's (its system reserve), else the bare size.
  Bytes capacity = gpu.capacity;
  Bytes headroom;
  Bytes vllm_reserve;
  if (gpu.detected) {
    capacity = gpu.detected->capacity;
    headroom = gpu.detected->headroom;
  } else if (gpu.profile) {
    const Budget shape = io::profile_budget(*gpu.profile, Bytes::zero());
    capacity = shape.capacity;
    headroom = shape.headroom;
  }
  if (given(f, "--headroom")) {
    auto h = parse_headroom(f.headroom, gpu.capacity);
    if (!h) return flag_error("--headroom", h.error());
    headroom = *h;
  }
  if (c.method == Method::kGrpo && c.grpo.vllm == VllmMode::kColocate) {
    // vLLM reserves its share of the whole device before training allocates anything.
    const Bytes vllm = Bytes::of(static_cast<std::int64_t>(static_cast<double>(gpu.capacity.count()) *
                                                           c.grpo.vllm_gpu_memory_utilization));
    headroom += vllm;
    vllm_reserve = vllm;
    if (in) {
      in->notes.push_back(fmt::format("vLLM colocate reserves {:.2f} GiB ({:g} of the GPU) for generation",
                                      vllm.as_gib(), c.grpo.vllm_gpu_memory_utilization));
      // vLLM loads the policy's weights into its share (in the checkpoint's 16-bit dtype) before
      // its KV cache: a share that cannot hold them fails at startup (docs/formulas.md#grpo-generation).
      const std::int64_t params = count_parameters(in->model).total;
      const Bytes weights = Bytes::of(params * (c.torch_dtype == DType::kFloat32 ? 2 : dtype_size(c.torch_dtype)));
      if (params > 0 && weights >= vllm) {
        const double need = static_cast<double>(weights.count()) / static_cast<double>(gpu.capacity.count());
        const double at_least = std::ceil(need * 100.0 + 1.0) / 100.0;
        return make_error(ErrorCode::kInvalidConfig,
                          fmt::format("vLLM's colocated share, {:.2f} GiB ({:g} of {:.2f} GiB), cannot hold the "
                                      "policy's {:.2f} GiB of weights: vLLM fails at startup before any KV cache",
                                      vllm.as_gib(), c.grpo.vllm_gpu_memory_utilization, gpu.capacity.as_gib(),
                                      weights.as_gib()),
                          at_least < 1.0
                              ? fmt::format("raise --vllm-gpu-memory-utilization (vllm_gpu_memory_utilization) to "
                                            "at least {:.2f}, or use --vllm-mode server",
                                            at_least)
                              : "use --vllm-mode server: generation on another GPU");
      }
    }
  }
  if (in && gpu.profile) {
    const bool bf16 = c.torch_dtype == DType::kBFloat16 || (c.autocast && *c.autocast == DType::kBFloat16);
    if (auto w = io::bf16_warning(*gpu.profile, bf16)) in->warnings.push_back(*w);
  }
  std::optional<Bytes> margin;
  if (given(f, "--safety-margin")) {
    auto m = parse_safety_margin(f.safety_margin, gpu.capacity);
    if (!m) return flag_error("--safety-margin", m.error());
    margin = *m;
  } else {
    MEMPLAN_TRY(auto am, allocator_margin(gpu.capacity, in));
    margin = am.margin;
    if (in && !am.note.empty()) in->notes.push_back(am.note);
  }
  MEMPLAN_TRY(Budget b, make_budget(capacity, margin, headroom));
  b.unified = (gpu.profile && gpu.profile->unified) || (gpu.detected && gpu.detected->unified);
  b.vllm_reserve = vllm_reserve;
  if (in) return apply_calibration(gpu, b, *in);  // this machine's fit, when there is one
  return b;
}

Result<Budget> resolve_budget(const BudgetFlags& f, io::ResolvedInputs& in) {
  MEMPLAN_TRY(auto gpu, resolve_gpu(f));
  if (!gpu)
    return make_error(ErrorCode::kInvalidArgument, "no GPU given",
                      "use --gpu NAME (memplan gpus), --gpu-memory SIZE, or --auto to detect it");
  in.notes.push_back("GPU: " + gpu->description);
  return budget_for(*gpu, f, in.config, &in);
}

Result<TargetGlobalBatch> resolve_target_global_batch(const BudgetFlags& f, const io::ResolvedInputs& in) {
  const TrainingConfig& c = in.config;
  const int dp = c.parallel.data_parallel_size();
  const auto config_target = [&]() {
    return TargetGlobalBatch{current_global_batch(c),
                             fmt::format("the config's {} x {} x {} GPU{}", c.micro_batch, c.grad_accum, dp,
                                         dp == 1 ? "" : "s")};
  };
  if (given(f, "--target-global-batch")) {
    const std::string v = to_lower(trim(f.target_global_batch));
    if (v == "free" || v == "none") return TargetGlobalBatch{};
    if (v == "keep") return config_target();
    const bool digits = !v.empty() && v.size() <= 9 && v.find_first_not_of("0123456789") == std::string::npos;
    const std::int64_t n = digits ? std::stoll(v) : 0;
    if (n < 1)
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--target-global-batch = '{}' must be a positive integer, keep or free",
                                    escape_control(f.target_global_batch)),
                        "e.g. --target-global-batch 256; keep holds the config's global batch, free drops the target");
    return TargetGlobalBatch{n, fmt::format("--target-global-batch {}", n)};
  }
  if (!in.is_default("batch") || !in.is_default("grad_accum")) return config_target();
  return TargetGlobalBatch{};
}

void add_search_flags(CLI::App& app, SearchFlags& f) {
  app.add_option("--global-batch-tolerance", f.tolerance,
                 "How far (a percentage of the target) the global batch may miss the target to keep a larger "
                 "micro-batch; default 0%: the target exactly when a fitting micro-batch divides it")
      ->group("Budget");
  app.add_option("--max-micro-batch", f.max_micro_batch, "Largest micro-batch the search tries (default 65536)")
      ->group("Budget");
  auto* apply = app.add_flag("--apply", f.apply,
                             "Write the recommended values into the --config files (a FILE.backup is kept)");
  app.add_flag("--dry-run", f.dry_run, "Print the unified diff --apply would make, change nothing")->excludes(apply);
}

Result<PlanRequest> plan_request(const Budget& budget, const BudgetFlags& bf, const SearchFlags& sf,
                                 const io::ResolvedInputs& in) {
  PlanRequest req;
  req.budget = budget;
  MEMPLAN_TRY(TargetGlobalBatch target, resolve_target_global_batch(bf, in));
  req.target_global_batch = target.value;
  req.target_source = target.source;
  std::string tol = trim(sf.tolerance);
  if (!tol.empty() && tol.back() == '%') tol.pop_back();
  auto v = parse_double(tol, "--global-batch-tolerance");
  if (!v) return v.error();
  req.global_batch_tolerance = *v / 100.0;
  req.max_micro_batch = sf.max_micro_batch;
  return req;
}

Status refuse_partial_config(const SearchFlags& flags, const std::optional<io::LoadedConfig>& loaded) {
  if ((!flags.apply && !flags.dry_run) || !loaded || loaded->not_followed.empty()) return Ok{};
  return make_error(ErrorCode::kUnsupported,
                    fmt::format("{}: refusing to write a plan made from part of the config: {}",
                                flags.dry_run ? "--dry-run" : "--apply", fmt::join(loaded->not_followed, "; ")),
                    "give the missing files with --config, then run again");
}

Result<int> write_back(std::ostream& report, const std::optional<io::LoadedConfig>& loaded, const io::Edits& edits,
                       bool dry_run, bool fits, int exit_code) {
  if (!loaded)
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{} needs the config files to write to", dry_run ? "--dry-run" : "--apply"),
                      "give them with --config FILE");
  if (!fits)
    return make_error(ErrorCode::kInvalidArgument, "nothing fits the budget, so there is nothing to write",
                      "apply one of the suggested changes first");
  MEMPLAN_TRY(auto plan, io::plan_apply(*loaded, edits));
  // A DeepSpeed JSON other configs name too: what is written into it changes their runs.
  std::vector<std::string> own;
  for (const auto& f : loaded->files) own.push_back(f.path);
  for (const auto& change : plan.files) {
    if (change.file >= loaded->files.size() || !loaded->files[change.file].deepspeed) continue;
    for (const auto& other : io::other_configs_naming(change.path, own))
      report << fmt::format("warning: {} is also named by {}; {} the batch for that config too, and its trainer "
                            "refuses to start when its own batch differs (memplan check it; or give this config a "
                            "copy of the JSON)\n",
                            change.path, other, dry_run ? "--apply would change" : "this changes");
  }
  if (dry_run) {
    report << io::render_dry_run(plan);
    return exit_code;
  }
  MEMPLAN_TRY(auto result, io::commit_apply(plan, io::real_file_system()));
  report << io::render_apply_result(plan, result);
  return exit_code;
}

Result<std::vector<std::shared_ptr<io::FileLock>>> lock_for_apply(const SearchFlags& flags,
                                                                   const std::vector<std::string>& files) {
  std::vector<std::shared_ptr<io::FileLock>> locks;
  if (!flags.apply) return locks;
  for (const auto& f : files) {
    auto info = io::real_file_system().stat(f);
    if (!info || !info->exists || !info->regular) continue;  // reading it reports the problem
    MEMPLAN_TRY(auto lock, io::real_file_system().lock(f));
    locks.push_back(std::move(lock));
  }
  return locks;
}

}  // namespace memplan::cli

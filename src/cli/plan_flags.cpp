#include "cli/plan_flags.hpp"

#include <ostream>

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include "io/gpu_detect.hpp"
#include "io/gpu_profiles.hpp"
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

}  // namespace

void add_gpu_flags(CLI::App& app, BudgetFlags& f) {
  f.app = &app;
  app.add_option("--gpu", f.gpu, "GPU by name or alias: h100-sxm, a100-80gb, rtx-4090, dgx-spark (memplan gpus)")
      ->group("Budget");
  app.add_flag("--auto", f.auto_detect, "Detect the GPU and its free memory (NVML, nvidia-smi, rocm-smi, /proc/meminfo)")
      ->group("Budget");
  app.add_option("--gpu-memory", f.gpu_memory, "GPU memory as the driver reports it: 80GB, 81920MiB, 24GiB")
      ->group("Budget");
  app.add_option("--safety-margin", f.safety_margin,
                 "Memory kept free for the CUDA context and allocator fragmentation: a size (2GiB) or a "
                 "percentage (10%); default 1 GiB + 10% of GPU memory")
      ->group("Budget");
  app.add_option("--headroom", f.headroom, "Memory kept free for other processes or the OS (default 0)")
      ->group("Budget");
}

void add_budget_flags(CLI::App& app, BudgetFlags& f) {
  add_gpu_flags(app, f);
  app.add_option("--target-global-batch", f.target_global_batch,
                 "Global batch to keep (micro-batch x grad-accum x data-parallel GPUs); default: the config's, "
                 "when --batch or --grad-accum is given")
      ->group("Budget");
}

GpuTarget gpu_target(const GpuProfile& p) {
  GpuTarget t;
  t.capacity = p.memory;
  t.profile = p;
  t.description = fmt::format("{} ({:.2f} GiB)", p.display_name.empty() ? p.name : p.display_name, p.memory.as_gib());
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
    auto c = parse_size(f.gpu_memory);
    if (!c) return flag_error("--gpu-memory", c.error());
    return std::optional<GpuTarget>(gpu_target(*c, "--gpu-memory"));
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
  t.description = fmt::format("{}, detected by {}: {:.2f} GiB free of {:.2f} GiB{}{}", g.name, g.source,
                              g.free.as_gib(), g.total.as_gib(), g.unified ? " (unified memory)" : "",
                              sys->gpus.size() > 1 ? fmt::format(" (smallest of {} GPUs)", sys->gpus.size()) : "");
  return std::optional<GpuTarget>(t);
}

Result<Budget> budget_for(const GpuTarget& gpu, const BudgetFlags& f, const TrainingConfig& c,
                          io::ResolvedInputs* in) {
  // Capacity and default headroom: what detection measured (free memory, a unified GPU's OS
  // share), else the profile's (its system reserve), else the bare size.
  Bytes capacity = gpu.capacity;
  Bytes headroom;
  if (gpu.detected) {
    capacity = gpu.detected->capacity;
    headroom = gpu.detected->headroom;
  } else if (gpu.profile) {
    const Budget shape = io::profile_budget(*gpu.profile, Bytes::zero());
    capacity = shape.capacity;
    headroom = shape.headroom;
  }
  if (given(f, "--headroom")) {
    auto h = parse_size(f.headroom);
    if (!h) return flag_error("--headroom", h.error());
    headroom = *h;
  }
  if (c.method == Method::kGrpo && c.grpo.vllm == VllmMode::kColocate) {
    // vLLM reserves its share of the whole device before training allocates anything.
    const Bytes vllm = Bytes::of(static_cast<std::int64_t>(static_cast<double>(gpu.capacity.count()) *
                                                           c.grpo.vllm_gpu_memory_utilization));
    headroom += vllm;
    if (in)
      in->notes.push_back(fmt::format("vLLM colocate reserves {:.2f} GiB ({:g} of the GPU) for generation",
                                   vllm.as_gib(), c.grpo.vllm_gpu_memory_utilization));
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
    margin = default_safety_margin(gpu.capacity);
  }
  return make_budget(capacity, margin, headroom);
}

Result<Budget> resolve_budget(const BudgetFlags& f, io::ResolvedInputs& in) {
  MEMPLAN_TRY(auto gpu, resolve_gpu(f));
  if (!gpu)
    return make_error(ErrorCode::kInvalidArgument, "no GPU given",
                      "use --gpu NAME (memplan gpus), --gpu-memory SIZE, or --auto to detect it");
  in.notes.push_back("GPU: " + gpu->description);
  return budget_for(*gpu, f, in.config, &in);
}

std::optional<std::int64_t> resolve_target_global_batch(const BudgetFlags& f, const io::ResolvedInputs& in) {
  if (given(f, "--target-global-batch")) return f.target_global_batch;
  auto set = [&](const char* key) {
    auto it = in.origins.find(key);
    return it != in.origins.end() && it->second.kind != io::OriginKind::kDefault;
  };
  if (set("batch") || set("grad_accum")) return current_global_batch(in.config);
  return std::nullopt;
}

void add_search_flags(CLI::App& app, SearchFlags& f) {
  app.add_option("--global-batch-tolerance", f.tolerance,
                 "How far the global batch may miss the target to keep a larger micro-batch (default 5%)")
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
  req.target_global_batch = resolve_target_global_batch(bf, in);
  std::string tol = trim(sf.tolerance);
  if (!tol.empty() && tol.back() == '%') tol.pop_back();
  auto v = parse_double(tol, "--global-batch-tolerance");
  if (!v) return v.error();
  req.global_batch_tolerance = *v / 100.0;
  req.max_micro_batch = sf.max_micro_batch;
  return req;
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
  if (dry_run) {
    report << io::render_dry_run(plan);
    return exit_code;
  }
  MEMPLAN_TRY(auto result, io::commit_apply(plan, io::real_file_system()));
  report << io::render_apply_result(plan, result);
  return exit_code;
}

}  // namespace memplan::cli

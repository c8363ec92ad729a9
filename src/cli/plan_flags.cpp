#include "cli/plan_flags.hpp"

#include <CLI/CLI.hpp>

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

void add_budget_flags(CLI::App& app, BudgetFlags& f) {
  f.app = &app;
  app.add_option("--gpu-memory", f.gpu_memory, "GPU memory as the driver reports it: 80GB, 81920MiB, 24GiB")
      ->group("Budget");
  app.add_option("--safety-margin", f.safety_margin,
                 "Memory kept free for the CUDA context and allocator fragmentation: a size (2GiB) or a "
                 "percentage (10%); default 1 GiB + 5% of GPU memory")
      ->group("Budget");
  app.add_option("--headroom", f.headroom, "Memory kept free for other processes or the OS (default 0)")
      ->group("Budget");
  app.add_option("--target-global-batch", f.target_global_batch,
                 "Global batch to keep (micro-batch x grad-accum x data-parallel GPUs); default: the config's, "
                 "when --batch or --grad-accum is given")
      ->group("Budget");
}

Result<Budget> resolve_budget(const BudgetFlags& f) {
  std::optional<Bytes> capacity;
  // INTEGRATION POINT for --gpu NAME and --auto (src/io/gpu_profiles, src/io/gpu_detect): resolve
  // the capacity here, before the --gpu-memory fallback below, and on unified-memory GPUs let the
  // headroom default to the profile's system_reserve. Everything downstream only sees a Budget.
  if (given(f, "--gpu-memory")) {
    auto c = parse_size(f.gpu_memory);
    if (!c) return flag_error("--gpu-memory", c.error());
    capacity = *c;
  }
  if (!capacity)
    return make_error(ErrorCode::kInvalidArgument, "no GPU memory given", "use --gpu-memory SIZE, e.g. --gpu-memory 80GB");
  std::optional<Bytes> margin;
  if (given(f, "--safety-margin")) {
    auto m = parse_safety_margin(f.safety_margin, *capacity);
    if (!m) return flag_error("--safety-margin", m.error());
    margin = *m;
  }
  Bytes headroom;
  if (given(f, "--headroom")) {
    auto h = parse_size(f.headroom);
    if (!h) return flag_error("--headroom", h.error());
    headroom = *h;
  }
  return make_budget(*capacity, margin, headroom);
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

}  // namespace memplan::cli

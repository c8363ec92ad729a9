// memplan check FILE...: for CI. Evaluates each training config against a GPU memory budget and
// prints one line per file and a summary, as text, JSON, or GitHub Actions annotations at the
// line of the batch-size key. Exit codes (docs/configs.md#check): 0 all fit; 1 some config does
// not fit (or is above --max-utilization); 2 some config is invalid; 64 no GPU memory to check
// against; CLI11's own codes (>= 100) for malformed command lines.
#include <cmath>
#include <memory>
#include <optional>
#include <ostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "cli/training_flags.hpp"
#include "memplan/engine.hpp"
#include "memplan/gpu.hpp"
#include "memplan/text.hpp"
#include "report/format.hpp"
#include "report/json.hpp"

namespace memplan::cli {

// INTEGRATION(lead): replace with the planner's default safety margin (include/memplan/plan.hpp)
// so that `check` and `plan` agree on what "fits" means.
inline constexpr double kCheckDefaultSafetyMarginFraction = 0.05;

namespace {

// INTEGRATION(lead): the budget of a GPU named in a config (`# memplan: gpu=NAME`), and later of
// `--gpu NAME` and detection, comes from the GPU profiles (src/io/gpu_profiles). Until they are
// merged, only a size (--gpu-memory, `# memplan: gpu-memory=SIZE`) gives a budget.
Result<Bytes> gpu_capacity_by_name(const std::string& name) {
  return make_error(ErrorCode::kUnknownName, fmt::format("GPU '{}': this build has no GPU profiles", name),
                    "give the size with --gpu-memory SIZE or # memplan: gpu-memory=SIZE");
}

// The figure compared with the budget: what the process would hold on the GPU (live tensors,
// allocator reserve, CUDA context).
// INTEGRATION(lead): use the same figure as plan's recommendation.peak_bytes.
Bytes compared_figure(const Estimate& e) { return e.total; }

Budget make_budget(Bytes capacity) {
  Budget b;
  b.capacity = capacity;
  b.safety_margin = Bytes::of(
      static_cast<std::int64_t>(std::llround(static_cast<double>(capacity.count()) * kCheckDefaultSafetyMarginFraction)));
  return b;
}

enum class Status { kFits, kAboveMax, kDoesNotFit, kInvalid, kNoBudget };

const char* status_key(Status s) {
  switch (s) {
    case Status::kFits: return "fits";
    case Status::kAboveMax: return "above_max_utilization";
    case Status::kDoesNotFit: return "does_not_fit";
    case Status::kInvalid: return "invalid";
    case Status::kNoBudget: return "no_budget";
  }
  return "?";
}

struct FileResult {
  std::string file;
  Status status = Status::kInvalid;
  SourceLocation where;            // the batch-size key, or where the error is
  std::string message;             // invalid / no budget: the error; otherwise the comparison
  std::string budget_source;       // "--gpu-memory 80GiB", "x.yaml:3"
  Bytes figure, capacity, budget;
  double utilization = 0;          // figure / capacity
  std::vector<Error> warnings;
};

struct CheckOptions {
  TrainingFlags flags;
  std::vector<std::string> files;
  std::string gpu_memory;
  double max_utilization = 0;  // percent; 0: no limit
  std::string format = "text";
};

std::string gib(Bytes b) { return fmt::format("{:.2f} GiB", b.as_gib()); }

FileResult check_one(const CheckOptions& o, const std::string& file, std::optional<Bytes> flag_capacity) {
  FileResult r;
  r.file = file;
  r.where = SourceLocation{file, 0, 0};
  auto invalid = [&](const Error& e) {
    r.status = Status::kInvalid;
    r.message = e.message + (e.suggestion.empty() ? "" : "; " + e.suggestion);
    if (e.where && !e.where->file.empty()) r.where = *e.where;
    return r;
  };
  auto inputs = load_inputs(o.flags, {file});
  if (!inputs) return invalid(inputs.error());
  if (inputs->loaded) {
    r.warnings = inputs->loaded->diagnostics;
    r.where = inputs->loaded->batch_location();
  }
  std::optional<Bytes> capacity = flag_capacity;
  if (capacity) {
    r.budget_source = "--gpu-memory " + o.gpu_memory;
  } else if (inputs->loaded && inputs->loaded->gpu_memory) {
    capacity = inputs->loaded->gpu_memory;
    r.budget_source = inputs->loaded->gpu_where.to_string();
  } else if (inputs->loaded && inputs->loaded->gpu) {
    auto c = gpu_capacity_by_name(*inputs->loaded->gpu);
    if (!c) {
      Error e = c.error();
      e.where = inputs->loaded->gpu_where;
      return invalid(e);
    }
    capacity = *c;
    r.budget_source = inputs->loaded->gpu_where.to_string();
  }
  if (!capacity) {
    r.status = Status::kNoBudget;
    r.message = "no GPU memory to check against; give --gpu-memory SIZE, or name it in the config with "
                "# memplan: gpu-memory=SIZE";
    return r;
  }
  auto est = estimate(inputs->resolved.model, inputs->resolved.config);
  if (!est) return invalid(est.error());
  const Budget budget = make_budget(*capacity);
  r.capacity = *capacity;
  r.budget = budget.budget();
  r.figure = compared_figure(*est);
  r.utilization = capacity->count() > 0 ? static_cast<double>(r.figure.count()) / static_cast<double>(capacity->count())
                                        : INFINITY;
  const std::string pct = fmt::format("{:.1f}% of {}", 100 * r.utilization, gib(*capacity));
  if (r.figure > r.budget) {
    r.status = Status::kDoesNotFit;
    r.message = fmt::format("does not fit: predicted {} > budget {} ({})", gib(r.figure), gib(r.budget), pct);
  } else if (o.max_utilization > 0 && 100 * r.utilization > o.max_utilization) {
    r.status = Status::kAboveMax;
    r.message = fmt::format("fits, but above --max-utilization {:g}%: predicted {} <= budget {} ({})",
                            o.max_utilization, gib(r.figure), gib(r.budget), pct);
  } else {
    r.status = Status::kFits;
    r.message = fmt::format("fits: predicted {} <= budget {} ({})", gib(r.figure), gib(r.budget), pct);
  }
  return r;
}

int exit_code(const std::vector<FileResult>& results) {
  auto any = [&](Status s) {
    return std::any_of(results.begin(), results.end(), [&](const FileResult& r) { return r.status == s; });
  };
  if (any(Status::kNoBudget)) return kExitUsage;
  if (any(Status::kInvalid)) return kExitInvalidInput;
  if (any(Status::kDoesNotFit) || any(Status::kAboveMax)) return kExitDoesNotFit;
  return kExitOk;
}

std::string summary(const std::vector<FileResult>& results, double max_util) {
  std::size_t n[5] = {0, 0, 0, 0, 0};
  for (const auto& r : results) ++n[static_cast<int>(r.status)];
  std::string s = fmt::format("checked {} config{}: {} fit{}, {} do{} not fit", results.size(),
                              results.size() == 1 ? "" : "s", n[0], n[0] == 1 ? "s" : "", n[2], n[2] == 1 ? "es" : "");
  if (max_util > 0) s += fmt::format(", {} above {:g}%", n[1], max_util);
  s += fmt::format(", {} invalid", n[3]);
  if (n[4] > 0) s += fmt::format(", {} without a GPU to check against", n[4]);
  return s + fmt::format(" (budget: GPU memory minus a {:g}% safety margin)\n", 100 * kCheckDefaultSafetyMarginFraction);
}

std::string render_text(const std::vector<FileResult>& results, double max_util) {
  std::string out;
  for (const auto& r : results) {
    out += fmt::format("{}: {}{}\n", r.where.to_string(),
                       r.status == Status::kInvalid ? "invalid: " : r.status == Status::kNoBudget ? "error: " : "",
                       r.message);
    for (const auto& w : r.warnings) out += "  warning: " + w.to_string() + "\n";
  }
  return out + summary(results, max_util);
}

// GitHub Actions workflow commands: data escapes % CR LF; properties also : and ,.
std::string gh_data(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '%') out += "%25";
    else if (c == '\r') out += "%0D";
    else if (c == '\n') out += "%0A";
    else out += c;
  }
  return out;
}

std::string gh_prop(std::string_view s) {
  std::string out;
  for (char c : gh_data(s)) {
    if (c == ':') out += "%3A";
    else if (c == ',') out += "%2C";
    else out += c;
  }
  return out;
}

std::string gh_command(const char* kind, const SourceLocation& where, std::string_view title, std::string_view msg) {
  std::string props = "file=" + gh_prop(where.file);
  if (where.line > 0) props += fmt::format(",line={}", where.line);
  props += ",title=" + gh_prop(title);
  return fmt::format("::{} {}::{}\n", kind, props, gh_data(msg));
}

std::string render_github(const std::vector<FileResult>& results, double max_util) {
  std::string out;
  for (const auto& r : results) {
    for (const auto& w : r.warnings) {
      const SourceLocation at = w.where ? *w.where : SourceLocation{r.file, 0, 0};
      out += gh_command("warning", at, "memplan", w.message + (w.suggestion.empty() ? "" : "; " + w.suggestion));
    }
    switch (r.status) {
      case Status::kFits: out += fmt::format("{}: {}\n", r.where.to_string(), r.message); break;
      case Status::kDoesNotFit: out += gh_command("error", r.where, "memplan: does not fit", r.message); break;
      case Status::kAboveMax:
        out += gh_command("error", r.where, fmt::format("memplan: above {:g}% of GPU memory", max_util), r.message);
        break;
      case Status::kInvalid: out += gh_command("error", r.where, "memplan: invalid config", r.message); break;
      case Status::kNoBudget: out += gh_command("error", r.where, "memplan: no GPU memory", r.message); break;
    }
  }
  return out + summary(results, max_util);
}

std::string render_json(const std::vector<FileResult>& results, double max_util) {
  using json = nlohmann::ordered_json;
  json items = json::array();
  std::size_t counts[5] = {0, 0, 0, 0, 0};
  for (const auto& r : results) {
    ++counts[static_cast<int>(r.status)];
    json w = json::array();
    for (const auto& d : r.warnings) {
      json x = {{"file", d.where ? d.where->file : r.file},
                {"line", d.where ? d.where->line : 0},
                {"message", d.message}};
      if (!d.suggestion.empty()) x["suggestion"] = d.suggestion;
      w.push_back(x);
    }
    json j = {{"file", r.file}, {"line", r.where.line}, {"status", status_key(r.status)}, {"message", r.message}};
    if (r.status != Status::kInvalid && r.status != Status::kNoBudget) {
      j["location"] = r.where.to_string();
      j["peak_bytes"] = r.figure.count();
      j["budget_bytes"] = r.budget.count();
      j["capacity_bytes"] = r.capacity.count();
      j["utilization"] = r.utilization;
      j["budget_source"] = r.budget_source;
    } else {
      j["location"] = r.where.to_string();
    }
    j["warnings"] = w;
    items.push_back(j);
  }
  json j = {{"schema", report::kSchema},
            {"command", "check"},
            {"safety_margin_fraction", kCheckDefaultSafetyMarginFraction},
            {"max_utilization", max_util > 0 ? json(max_util) : json(nullptr)},
            {"results", items},
            {"summary",
             {{"total", results.size()},
              {"fits", counts[0]},
              {"above_max_utilization", counts[1]},
              {"does_not_fit", counts[2]},
              {"invalid", counts[3]},
              {"no_budget", counts[4]}}},
            {"exit_code", exit_code(results)}};
  return j.dump(2) + "\n";
}

}  // namespace

Command register_check(CLI::App& root) {
  auto opts = std::make_shared<CheckOptions>();
  CLI::App* sub = root.add_subcommand(
      "check", "CI: does each training config fit the GPU? One line per file; exit 1 when one does not fit");
  sub->add_option("files", opts->files, "Training configs to check (--config files are layered under each)")
      ->required();
  add_training_flags(*sub, opts->flags);
  sub->add_option("--gpu-memory", opts->gpu_memory, "GPU memory to check against: 24GB, 80GiB (default: named in the "
                                                    "config with # memplan: gpu-memory=SIZE)");
  sub->add_option("--max-utilization", opts->max_utilization,
                  "Also fail configs that fit but use more than PCT% of the GPU memory");
  sub->add_option("--format", opts->format, "text (default), json, github (GitHub Actions annotations)");
  return {sub, [opts](Context& ctx) -> Result<int> {
            // Bad options are usage errors (64), distinct from invalid configs (2).
            auto usage = [&](Error e) -> Result<int> {
              ctx.err << "memplan: error: " << e.to_string() << "\n";
              return kExitUsage;
            };
            auto format = report::parse_format(opts->format);
            if (!format) return usage(format.error());
            if (*format == report::Format::kMarkdown)
              return usage(make_error(ErrorCode::kInvalidArgument, "check: --format markdown is not supported",
                                      "use text, json or github"));
            if (opts->max_utilization < 0 || opts->max_utilization > 100)
              return usage(make_error(ErrorCode::kInvalidArgument,
                                      fmt::format("--max-utilization = {:g} must be a percentage between 0 and 100",
                                                  opts->max_utilization)));
            std::optional<Bytes> capacity;
            if (!opts->gpu_memory.empty()) {
              auto size = parse_size(opts->gpu_memory);
              if (!size) {
                Error e = size.error();
                e.message = "--gpu-memory: " + e.message;
                return usage(e);
              }
              if (size->count() <= 0)
                return usage(make_error(ErrorCode::kInvalidArgument, "--gpu-memory must be more than 0"));
              capacity = *size;
            }
            if (opts->flags.show_config) {
              for (const auto& f : opts->files) {
                ctx.out << "== " << f << "\n";
                MEMPLAN_TRY(int rc, show_config(ctx.out, opts->flags, *format, {f}));
                (void)rc;
              }
              return kExitOk;
            }
            std::vector<FileResult> results;
            for (const auto& f : opts->files) results.push_back(check_one(*opts, f, capacity));
            switch (*format) {
              case report::Format::kJson: ctx.out << render_json(results, opts->max_utilization); break;
              case report::Format::kGithub: ctx.out << render_github(results, opts->max_utilization); break;
              default: ctx.out << render_text(results, opts->max_utilization); break;
            }
            return exit_code(results);
          }};
}

}  // namespace memplan::cli

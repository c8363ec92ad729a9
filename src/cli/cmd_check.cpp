// memplan check FILE...: for CI. Evaluates each training config against a GPU memory budget and
// prints one line per file and a summary, as text, JSON, or GitHub Actions annotations at the
// line of the batch-size key. Exit codes (docs/configs.md#check): 0 all fit; 1 some config does
// not fit (or is above --max-utilization); 2 some config is invalid; 64 no GPU to check against,
// or a bad option; CLI11's own codes (>= 100) for malformed command lines. The budget and the
// compared figure are plan's (plan_flags.hpp), so check and plan agree on what fits.
#include <cmath>
#include <memory>
#include <optional>
#include <ostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "cli/plan_flags.hpp"
#include "cli/training_flags.hpp"
#include "io/gpu/gpu_profiles.hpp"
#include "memplan/engine.hpp"
#include "memplan/gpu.hpp"
#include "memplan/text.hpp"
#include "report/format.hpp"
#include "report/json.hpp"

namespace memplan::cli {

namespace {

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
  std::string gpu;                 // the GPU checked against, one line
  std::string budget_source;       // "--gpu h100-sxm", "x.yaml:1", "detected"
  Budget budget;
  Bytes figure;                    // predicted peak_bytes, what plan compares with the budget
  double utilization = 0;          // figure / capacity
  std::vector<Error> warnings;
  std::vector<std::string> notes;  // bf16 on a GPU without it, vLLM's share
};

struct CheckOptions {
  TrainingFlags flags;
  BudgetFlags budget;
  std::vector<std::string> files;
  double max_utilization = 0;  // percent; 0: no limit
  std::string format = "text";
};

// Where each file's GPU comes from, in order: the command line (--gpu, --gpu-memory), the
// file's `# memplan: gpu=NAME` / `gpu-memory=SIZE` comment, detection (once, on first need).
struct GpuSource {
  std::optional<GpuTarget> flag;
  std::string flag_text;
  std::optional<Result<std::optional<GpuTarget>>> detected;
};

std::string gib(Bytes b) { return fmt::format("{:.2f} GiB", b.as_gib()); }

FileResult check_one(const CheckOptions& o, const std::string& file, GpuSource& gpus) {
  FileResult r;
  r.file = file;
  r.where = SourceLocation{file, 0, 0};
  auto invalid = [&](const Error& e) {
    r.status = Status::kInvalid;
    r.message = e.message + (e.suggestion.empty() ? "" : "; " + e.suggestion);
    if (e.where && !e.where->file.empty()) r.where = *e.where;
    return r;
  };
  std::string batch_from;  // where the micro-batch was read, when not in `file`
  auto inputs = load_inputs(o.flags, {file});
  if (!inputs) return invalid(inputs.error());
  if (inputs->loaded) {
    // A contradiction the trainer refuses to start with (a DeepSpeed JSON whose batch differs from
    // the trainer's) fails the file, whatever memplan predicts (issue 34).
    for (const Error& d : inputs->loaded->diagnostics)
      if (d.code == ErrorCode::kConflict) return invalid(d);
    r.warnings = inputs->loaded->diagnostics;
    r.where = inputs->loaded->batch_location();
    // Each line names the file it checks: a stage file that leaves the micro-batch to the main
    // config is labelled with itself, and says where the micro-batch came from.
    if (r.where.file != file) {
      if (r.where.line > 0) batch_from = r.where.to_string();
      r.where = SourceLocation{file, 0, 0};
    }
  }
  std::optional<GpuTarget> gpu = gpus.flag;
  if (gpu) {
    r.budget_source = gpus.flag_text;
  } else if (inputs->loaded && (inputs->loaded->gpu_memory || inputs->loaded->gpu)) {
    const io::LoadedConfig& l = *inputs->loaded;
    r.budget_source = l.gpu_where.to_string();
    if (l.gpu_memory) {
      gpu = gpu_target(*l.gpu_memory, r.budget_source);
    } else {
      auto p = io::find_gpu(*l.gpu);
      if (!p) {
        Error e = p.error();
        e.where = l.gpu_where;
        return invalid(e);
      }
      gpu = gpu_target(*p);
    }
  } else {
    if (!gpus.detected) gpus.detected = resolve_gpu(o.budget, /*detect_by_default=*/true);
    if (!*gpus.detected) {
      r.status = Status::kNoBudget;
      r.message = "no GPU to check against: " + gpus.detected->error().message +
                  "; give --gpu NAME or --gpu-memory SIZE, or name it in the config with # memplan: gpu=NAME";
      return r;
    }
    gpu = **gpus.detected;
    r.budget_source = "detected";
  }
  r.gpu = gpu->description;
  io::ResolvedInputs& in = inputs->resolved;
  const std::size_t warnings_before = in.warnings.size();
  auto budget = budget_for(*gpu, o.budget, in.config, &in);
  if (!budget) {
    Error e = budget.error();
    if (inputs->loaded && !gpus.flag && r.budget_source != "detected") e.where = inputs->loaded->gpu_where;
    return invalid(e);
  }
  r.notes = in.notes;
  for (std::size_t i = warnings_before; i < in.warnings.size(); ++i) r.notes.push_back(in.warnings[i]);
  auto est = estimate(in.model, in.config);
  if (!est) return invalid(est.error());
  r.budget = *budget;
  r.figure = est->peak;
  const Bytes capacity = budget->capacity;
  const Bytes limit = budget->budget();
  r.utilization = capacity.count() > 0 ? static_cast<double>(r.figure.count()) / static_cast<double>(capacity.count())
                                       : INFINITY;
  const std::string pct = fmt::format("{:.1f}% of {}", 100 * r.utilization, gib(capacity));
  if (r.figure > limit) {
    r.status = Status::kDoesNotFit;
    r.message = fmt::format("does not fit: predicted {} > budget {} ({})", gib(r.figure), gib(limit), pct);
  } else if (o.max_utilization > 0 && 100 * r.utilization > o.max_utilization) {
    r.status = Status::kAboveMax;
    r.message = fmt::format("fits, but above --max-utilization {:g}%: predicted {} <= budget {} ({})",
                            o.max_utilization, gib(r.figure), gib(limit), pct);
  } else {
    r.status = Status::kFits;
    r.message = fmt::format("fits: predicted {} <= budget {} ({})", gib(r.figure), gib(limit), pct);
  }
  if (!batch_from.empty()) r.message += fmt::format("; micro-batch {} from {}", in.config.micro_batch, batch_from);
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
  return s + " (predicted peak vs. GPU memory less the safety margin and headroom)\n";
}

// One line of text output: control characters (newlines included) and invalid UTF-8 as \xNN, so
// that a file name or a value cannot forge lines or send terminal escapes (issue 34).
std::string one_line(std::string_view s) {
  std::string out;
  for (char c : escape_control(s)) {
    if (c == '\n') out += "\\x0a";
    else if (c == '\t') out += "\\x09";
    else out += c;
  }
  return out;
}

std::string render_text(const std::vector<FileResult>& results, double max_util) {
  std::string out;
  for (const auto& r : results) {
    out += fmt::format("{}: {}{}\n", one_line(r.where.to_string()),
                       r.status == Status::kInvalid ? "invalid: " : r.status == Status::kNoBudget ? "error: " : "",
                       one_line(r.message));
    for (const auto& w : r.warnings) out += "  warning: " + one_line(w.to_string()) + "\n";
    for (const auto& n : r.notes) out += "  note: " + one_line(n) + "\n";
  }
  return out + summary(results, max_util);
}

// GitHub Actions workflow commands: data escapes % CR LF; properties also : and ,. Other control
// characters and invalid UTF-8 become \xNN (escape_control), as in text mode.
std::string gh_data(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '%') out += "%25";
    else if (c == '\r') out += "%0D";
    else if (c == '\n') out += "%0A";
    else out += c;
  }
  return escape_control(out);
}

// A plain log line in a workflow's log (a fitting config): line breaks escaped as in a command's
// data ('%' kept: the runner shows a plain line as it is), and never starting with "::", which the
// runner would read as a command.
std::string gh_line(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\r') out += "%0D";
    else if (c == '\n') out += "%0A";
    else out += c;
  }
  out = escape_control(out);
  if (out.rfind("::", 0) == 0) out.replace(0, 1, "%3A");
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
      case Status::kFits: out += gh_line(r.where.to_string() + ": " + r.message) + "\n"; break;
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
      j["budget_bytes"] = r.budget.budget().count();
      j["capacity_bytes"] = r.budget.capacity.count();
      j["safety_margin_bytes"] = r.budget.safety_margin.count();
      j["headroom_bytes"] = r.budget.headroom.count();
      j["utilization"] = r.utilization;
      j["gpu"] = r.gpu;
      j["budget_source"] = r.budget_source;
      j["notes"] = r.notes;
    } else {
      j["location"] = r.where.to_string();
    }
    j["warnings"] = w;
    items.push_back(j);
  }
  json j = {{"schema", report::kSchema},
            {"command", "check"},
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
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

Command register_check(CLI::App& root) {
  auto opts = std::make_shared<CheckOptions>();
  CLI::App* sub = root.add_subcommand(
      "check", "CI: does each training config fit the GPU? One line per file; exit 1 when one does not fit");
  sub->add_option("files", opts->files, "Training configs to check (--config files are layered under each)")
      ->required();
  add_training_flags(*sub, opts->flags);
  add_gpu_flags(*sub, opts->budget);
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
            // Written so that NaN fails too (every comparison with NaN is false).
            if (!(opts->max_utilization >= 0 && opts->max_utilization <= 100))
              return usage(make_error(ErrorCode::kInvalidArgument,
                                      fmt::format("--max-utilization = {:g} must be a percentage between 0 and 100",
                                                  opts->max_utilization)));
            // --gpu / --gpu-memory / --auto: one GPU for every file. Bad values are usage errors.
            GpuSource gpus;
            if (opts->budget.auto_detect) {
              gpus.detected = resolve_gpu(opts->budget);
              if (!*gpus.detected && gpus.detected->error().code != ErrorCode::kNoGpu)
                return usage(gpus.detected->error());
              if (*gpus.detected) {
                gpus.flag = **gpus.detected;
                gpus.flag_text = "--auto";
              }
            } else {
              auto g = resolve_gpu(opts->budget);
              if (!g) return usage(g.error());
              gpus.flag = *g;
              if (*g) gpus.flag_text = opts->budget.gpu.empty() ? "--gpu-memory " + opts->budget.gpu_memory
                                                                : "--gpu " + opts->budget.gpu;
            }
            if (gpus.flag) {
              // The margin and headroom flags are checked once, not once per file.
              auto b = budget_for(*gpus.flag, opts->budget, TrainingConfig{});
              if (!b) return usage(b.error());
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
            for (const auto& f : opts->files) {
              // One file never loses the others' results, whatever happens while reading it.
              try {
                results.push_back(check_one(*opts, f, gpus));
              } catch (const std::exception& e) {
                FileResult r;
                r.file = f;
                r.where = SourceLocation{f, 0, 0};
                r.message = std::string("internal error while checking it: ") + e.what();
                results.push_back(std::move(r));
              }
            }
            switch (*format) {
              case report::Format::kJson: ctx.out << render_json(results, opts->max_utilization); break;
              case report::Format::kHtml:  // refused by parse_format
              case report::Format::kGithub: ctx.out << render_github(results, opts->max_utilization); break;
              default: ctx.out << render_text(results, opts->max_utilization); break;
            }
            return exit_code(results);
          }};
}

}  // namespace memplan::cli

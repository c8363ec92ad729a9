// memplan preflight --min-free SIZE: is enough memory free on every visible GPU right now, and
// which processes hold the rest? Seed 000's `oom_protection.sh preflight 80`, as one command.
// Exit codes: 0 enough free, 1 less free than asked, 2 bad SIZE, 4 no GPU.
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "io/gpu/gpu_detect.hpp"
#include "memplan/text.hpp"
#include "report/format.hpp"
#include "report/json.hpp"
#include "report/table.hpp"

namespace memplan::cli {

namespace {

using json = nlohmann::ordered_json;
using report::Align;

struct PreflightOptions {
  std::string min_free;
  std::string format = "text";
};

std::string gib(Bytes b) { return fmt::format("{:.2f} GiB", b.as_gib()); }
std::string gb(Bytes b) { return fmt::format("{:.2f} GB", b.as_gb()); }
std::string mib(Bytes b) { return fmt::format("{:.0f} MiB", b.as_mib()); }

// "80" alone would be 80 bytes; seed 000's `preflight 80` means 80 GB, so a unit is required.
Result<Bytes> parse_min_free(const std::string& text) {
  const std::string t = trim(text);
  const bool bare = !t.empty() && t.find_first_not_of("0123456789.") == std::string::npos;
  if (bare)
    return make_error(ErrorCode::kInvalidArgument, fmt::format("--min-free needs a unit: \"{}\"", text),
                      fmt::format("write --min-free {0}GB or --min-free {0}GiB", t));
  return parse_size(text);
}

std::string render(const io::DetectedSystem& sys, std::optional<Bytes> min_free, report::Format format) {
  auto enough = [&](const io::DetectedGpu& g) { return !min_free || g.free >= *min_free; };
  bool all_enough = true;
  for (const auto& g : sys.gpus) all_enough = all_enough && enough(g);

  if (format == report::Format::kJson) {
    json gpus = json::array();
    for (const auto& g : sys.gpus) {
      json procs = json::array();
      for (const auto& p : g.processes) procs.push_back({{"pid", p.pid}, {"name", p.name}, {"used_bytes", p.used.count()}});
      gpus.push_back({{"index", g.index},
                      {"name", g.name},
                      {"profile", g.profile ? json(g.profile->name) : json(nullptr)},
                      {"total_bytes", g.total.count()},
                      {"free_bytes", g.free.count()},
                      {"unified", g.unified},
                      {"enough", enough(g)},
                      {"processes", procs}});
    }
    return json{{"schema", report::kSchema},
                {"min_free_bytes", min_free ? json(min_free->count()) : json(nullptr)},
                {"ok", all_enough},
                {"gpus", gpus},
                {"visibility", sys.visibility},
                {"notes", sys.notes}}
               .dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
           "\n";
  }

  const bool md = format == report::Format::kMarkdown || format == report::Format::kGithub;
  report::TextTable t({"GPU", "name", "total", "free", "free (GB)", "status"},
                      {Align::kRight, Align::kLeft, Align::kRight, Align::kRight, Align::kRight, Align::kLeft});
  for (const auto& g : sys.gpus) {
    const std::string status = !min_free ? "-" : enough(g) ? "ok" : "NOT ENOUGH";
    t.add_row({std::to_string(g.index), g.name, gib(g.total), gib(g.free), gb(g.free), status});
  }
  std::string out = md ? t.render_markdown() : t.render();
  if (!sys.visibility.empty()) out += fmt::format("Visible: {}\n", sys.visibility);
  for (const auto& g : sys.gpus) {
    if (g.unified)
      out += fmt::format("GPU {} shares its memory with the OS: total and free are the system's ({}).\n", g.index,
                         g.source);
  }

  report::TextTable procs({"GPU", "pid", "process", "memory"}, {Align::kRight, Align::kRight, Align::kLeft, Align::kRight});
  bool any = false;
  for (const auto& g : sys.gpus) {
    for (const auto& p : g.processes) {
      procs.add_row({std::to_string(g.index), std::to_string(p.pid), p.name.empty() ? "?" : p.name, mib(p.used)});
      any = true;
    }
  }
  out += "\n";
  if (any) out += "Processes holding GPU memory:\n" + (md ? procs.render_markdown() : procs.render());
  else out += "No processes hold GPU memory.\n";
  for (const auto& n : sys.notes) out += "note: " + n + "\n";

  if (!min_free) return out;
  out += "\n";
  if (all_enough) {
    out += fmt::format("preflight ok: every visible GPU has at least {} ({}) free.\n", gb(*min_free), gib(*min_free));
  } else {
    for (const auto& g : sys.gpus) {
      if (enough(g)) continue;
      out += fmt::format("preflight failed: GPU {} ({}) has {} ({}) free; {} ({}) asked.\n", g.index, g.name,
                         gb(g.free), gib(g.free), gb(*min_free), gib(*min_free));
    }
  }
  return out;
}

}  // namespace

Command register_preflight(CLI::App& root) {
  auto opts = std::make_shared<PreflightOptions>();
  CLI::App* sub = root.add_subcommand(
      "preflight", "Report free GPU memory and the processes holding it; fail when less than --min-free is free");
  sub->add_option("--min-free", opts->min_free,
                  "Memory every visible GPU must have free now, with its unit: 80GB, 100GiB (exit 1 if not)");
  sub->add_option("--format", opts->format, "text (default), json, markdown");
  return {sub, [opts](Context& ctx) -> Result<int> {
            MEMPLAN_TRY(auto format, report::parse_format(opts->format));
            std::optional<Bytes> min_free;
            if (!opts->min_free.empty()) {
              MEMPLAN_TRY(min_free, parse_min_free(opts->min_free));
            }
            const auto probe = io::SystemProbe::from_process();
            io::DetectOptions options;
            options.processes = true;
            auto sys = io::detect_gpus(*probe, options);
            if (!sys) {
              // Detection's advice names --gpu and --gpu-memory, which preflight does not take:
              // preflight measures this machine, so say what it can do instead.
              Error e = sys.error();
              if (e.code == ErrorCode::kNoGpu)
                e.suggestion = "preflight checks the GPUs of this machine; to plan for another GPU run "
                               "memplan plan --gpu NAME (memplan gpus lists them) or --gpu-memory SIZE";
              return e;
            }
            ctx.out << render(*sys, min_free, format);
            for (const auto& g : sys->gpus)
              if (min_free && g.free < *min_free) return kExitDoesNotFit;
            return kExitOk;
          }};
}

}  // namespace memplan::cli

// memplan gpus: the built-in GPU profiles, or (--detect) the GPUs this machine has.
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "io/gpu/gpu_detect.hpp"
#include "io/gpu/gpu_profiles.hpp"
#include "report/format.hpp"
#include "report/json.hpp"
#include "report/table.hpp"

namespace memplan::cli {

namespace {

using json = nlohmann::ordered_json;
using report::Align;

struct GpusOptions {
  std::string format = "text";
  bool detect = false;
};

std::string gib(Bytes b) { return fmt::format("{:.2f}", b.as_gib()); }
std::string gb(Bytes b) { return fmt::format("{:.2f}", b.as_gb()); }
std::string yes_no(bool b) { return b ? "yes" : "no"; }

std::string unified_cell(const GpuProfile& g) {
  return g.unified ? fmt::format("yes, OS {} GiB", gib(g.system_reserve)) : "no";
}

std::string names_cell(const GpuProfile& g) {
  std::string s = g.display_name;
  for (const auto& a : g.aliases) s += ", " + a;
  return s;
}

std::string render_profiles(const std::vector<GpuProfile>& profiles, report::Format format) {
  if (format == report::Format::kJson) {
    json list = json::array();
    for (const auto& g : profiles) {
      list.push_back({{"name", g.name},
                      {"display_name", g.display_name},
                      {"aliases", g.aliases},
                      {"vendor", g.vendor},
                      {"memory_bytes", g.memory.count()},
                      {"bf16", g.bf16},
                      {"unified", g.unified},
                      {"system_reserve_bytes", g.system_reserve.count()}});
    }
    return json{{"schema", report::kSchema}, {"gpus", list}}.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  if (format == report::Format::kMarkdown || format == report::Format::kGithub) {
    report::TextTable t({"name", "GiB", "GB", "bf16", "unified", "driver name, aliases"},
                        {Align::kLeft, Align::kRight, Align::kRight, Align::kLeft, Align::kLeft, Align::kLeft});
    for (const auto& g : profiles)
      t.add_row({g.name, gib(g.memory), gb(g.memory), yes_no(g.bf16), unified_cell(g), names_cell(g)});
    return t.render_markdown();
  }
  // Text fits 100 columns: the driver's name only (aliases: --format json or markdown).
  report::TextTable t({"name", "GiB", "GB", "bf16", "unified", "driver name"},
                      {Align::kLeft, Align::kRight, Align::kRight, Align::kLeft, Align::kLeft, Align::kLeft});
  for (const auto& g : profiles)
    t.add_row({g.name, gib(g.memory), gb(g.memory), yes_no(g.bf16), unified_cell(g), g.display_name});
  return t.render() +
         fmt::format("{} GPU profiles. Memory as the driver reports it; GiB = 2^30 bytes, GB = 10^9 bytes.\n"
                     "--gpu accepts any name above, the driver's name or an alias (--format markdown lists them),\n"
                     "ignoring case, spaces and '-'; --gpu-memory SIZE any other GPU.\n",
                     profiles.size());
}

std::string profile_cell(const io::DetectedGpu& g) { return g.profile ? g.profile->name : "(unknown)"; }

std::string render_detected(const io::DetectedSystem& sys, report::Format format) {
  const auto& chosen = sys.chosen_gpu();
  if (format == report::Format::kJson) {
    json list = json::array();
    for (const auto& g : sys.gpus) {
      list.push_back({{"index", g.index},
                      {"uuid", g.uuid},
                      {"name", g.name},
                      {"vendor", g.vendor},
                      {"profile", g.profile ? json(g.profile->name) : json(nullptr)},
                      {"total_bytes", g.total.count()},
                      {"free_bytes", g.free.count()},
                      {"unified", g.unified},
                      {"source", g.source}});
    }
    return json{{"schema", report::kSchema},
                {"gpus", list},
                {"chosen", chosen.index},
                {"visibility", sys.visibility},
                {"notes", sys.notes}}
               .dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
           "\n";
  }
  report::TextTable t({"GPU", "name", "profile", "total GiB", "free GiB", "bf16", "memory", "source"},
                      {Align::kRight, Align::kLeft, Align::kLeft, Align::kRight, Align::kRight, Align::kLeft,
                       Align::kLeft, Align::kLeft});
  for (const auto& g : sys.gpus) {
    t.add_row({std::to_string(g.index), g.name, profile_cell(g), gib(g.total), gib(g.free),
               g.profile ? yes_no(g.profile->bf16) : "?", g.unified ? "unified" : "dedicated", g.source});
  }
  const bool md = format == report::Format::kMarkdown || format == report::Format::kGithub;
  std::string out = md ? t.render_markdown() : t.render();
  if (!sys.visibility.empty()) out += fmt::format("Visible: {}\n", sys.visibility);
  out += fmt::format("A run here is limited by GPU {} ({}): {} GiB ({} GB) free of {} GiB.\n", chosen.index,
                     chosen.name, gib(chosen.free), gb(chosen.free), gib(chosen.total));
  for (const auto& n : sys.notes) out += "note: " + n + "\n";
  return out;
}

}  // namespace

Command register_gpus(CLI::App& root) {
  auto opts = std::make_shared<GpusOptions>();
  CLI::App* sub = root.add_subcommand("gpus", "List the GPU profiles --gpu accepts, or detect this machine's GPUs");
  sub->add_flag("--detect", opts->detect, "Show the GPUs detection finds here (NVML, nvidia-smi, rocm-smi)");
  sub->add_option("--format", opts->format, "text (default), json, markdown");
  return {sub, [opts](Context& ctx) -> Result<int> {
            MEMPLAN_TRY(auto format, report::parse_format(opts->format));
            if (opts->detect) {
              const auto probe = io::SystemProbe::from_process();
              MEMPLAN_TRY(auto sys, io::detect_gpus(*probe));
              ctx.out << render_detected(sys, format);
              return kExitOk;
            }
            MEMPLAN_TRY(auto profiles, io::load_gpu_profiles());
            ctx.out << render_profiles(profiles, format);
            return kExitOk;
          }};
}

}  // namespace memplan::cli

#include "report/profile_render.hpp"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "report/json.hpp"
#include "report/table.hpp"

namespace memplan::report {

namespace {

using json = nlohmann::ordered_json;

// The memory left on the device (or machine) at the rung's peak; negative when it would not fit.
std::int64_t headroom(const io::ProfileResult& res, const io::RungResult& r) {
  return res.total.count() - res.baseline.count() - r.peak.count();
}

std::string signed_human(std::int64_t v) {
  const std::string mag = format_human(Bytes::of(v < 0 ? -v : v));
  return (v < 0 ? "-" : "+") + mag;
}

std::string rung_line(const io::Rung& r) {
  std::string s = fmt::format("micro-batch {}, grad-accum {}", r.micro_batch, r.grad_accum);
  if (r.seq_len > 0) s += fmt::format(", seq-len {}", r.seq_len);
  return s;
}

bool any_prediction(const io::ProfileResult& res) {
  for (const auto& r : res.runs)
    if (r.predicted) return true;
  return false;
}

std::string render_json(const io::ProfileResult& res) {
  json runs = json::array();
  for (const auto& r : res.runs) {
    const bool measured = r.status != io::RungStatus::kRefused;
    runs.push_back(
        {{"micro_batch", r.rung.micro_batch},
         {"grad_accum", r.rung.grad_accum},
         {"seq_len", r.rung.seq_len > 0 ? json(r.rung.seq_len) : json(nullptr)},
         {"status", io::to_string(r.status)},
         {"peak_bytes", measured ? json(r.peak.count()) : json(nullptr)},
         {"headroom_bytes", measured ? json(headroom(res, r)) : json(nullptr)},
         {"seconds", measured ? json(std::round(r.seconds * 1000.0) / 1000.0) : json(nullptr)},
         {"leader_max_rss_bytes", measured ? json(r.kernel_max_rss.count()) : json(nullptr)},
         {"max_sample_gap_ms", measured ? json(std::round(r.max_sample_gap_ms * 10.0) / 10.0) : json(nullptr)},
         {"exit_code", r.exit_code ? json(*r.exit_code) : json(nullptr)},
         {"signal", r.signal ? json(*r.signal) : json(nullptr)},
         {"predicted_bytes", r.predicted ? json(r.predicted->count()) : json(nullptr)},
         {"difference_bytes", r.predicted && measured ? json(r.peak.count() - r.predicted->count()) : json(nullptr)},
         {"command", r.argv},
         {"log_dir", r.log_dir},
         {"notes", r.notes}});
  }
  json not_run = json::array();
  for (const auto& r : res.not_run)
    not_run.push_back({{"micro_batch", r.micro_batch},
                       {"grad_accum", r.grad_accum},
                       {"seq_len", r.seq_len > 0 ? json(r.seq_len) : json(nullptr)}});
  json safe = nullptr;
  if (res.safe_maximum) {
    const auto& r = res.runs[*res.safe_maximum];
    safe = {{"micro_batch", r.rung.micro_batch},
            {"grad_accum", r.rung.grad_accum},
            {"seq_len", r.rung.seq_len > 0 ? json(r.rung.seq_len) : json(nullptr)},
            {"peak_bytes", r.peak.count()}};
  }
  json j = {{"schema", kSchema},
            {"profile",
             {{"command", res.command},
              {"watch", res.watch},
              {"watch_description", res.watch_description},
              {"stop_at_bytes", res.stop_at.count()},
              {"stop_at_source", res.stop_at_source},
              {"total_bytes", res.total.count()},
              {"baseline_bytes", res.baseline.count()},
              {"log_dir", res.log_dir},
              {"runs", runs},
              {"not_run", not_run},
              {"safe_maximum", safe},
              {"error", res.error.empty() ? json(nullptr) : json(res.error)},
              {"notes", res.notes}}}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

std::string render_profile(const io::ProfileResult& res, Format format) {
  if (format == Format::kJson) return render_json(res);
  const bool md = format == Format::kMarkdown || format == Format::kGithub;
  const bool predicted = any_prediction(res);
  std::vector<std::string> header = {"micro-batch", "grad-accum", "seq-len", "peak", "headroom"};
  std::vector<Align> align = {Align::kRight, Align::kRight, Align::kRight, Align::kRight, Align::kRight};
  if (predicted) {
    header.insert(header.end(), {"predicted", "difference"});
    align.insert(align.end(), {Align::kRight, Align::kRight});
  }
  header.insert(header.end(), {"time", "status", "notes"});
  align.insert(align.end(), {Align::kRight, Align::kLeft, Align::kLeft});
  TextTable t(header, align);
  for (const auto& r : res.runs) {
    const bool measured = r.status != io::RungStatus::kRefused;
    const std::int64_t h = headroom(res, r);
    std::vector<std::string> row = {std::to_string(r.rung.micro_batch), std::to_string(r.rung.grad_accum),
                                    r.rung.seq_len > 0 ? std::to_string(r.rung.seq_len) : "-",
                                    measured ? format_human(r.peak) : "-",
                                    measured ? (h >= 0 ? format_human(Bytes::of(h)) : "none") : "-"};
    if (predicted) {
      row.push_back(r.predicted ? format_human(*r.predicted) : "-");
      row.push_back(r.predicted && measured ? signed_human(r.peak.count() - r.predicted->count()) : "-");
    }
    row.push_back(measured ? fmt::format("{:.1f} s", r.seconds) : "-");
    row.push_back(io::to_string(r.status));
    row.push_back(r.notes);
    t.add_row(row);
  }
  for (const auto& r : res.not_run) {
    std::vector<std::string> row = {std::to_string(r.micro_batch), std::to_string(r.grad_accum),
                                    r.seq_len > 0 ? std::to_string(r.seq_len) : "-", "-", "-"};
    if (predicted) row.insert(row.end(), {"-", "-"});
    row.insert(row.end(), {"-", "not run", ""});
    t.add_row(row);
  }
  std::string out = md ? t.render_markdown() : t.render();
  out += "\n";
  if (res.safe_maximum) {
    const auto& r = res.runs[*res.safe_maximum];
    out += fmt::format("Safe maximum: {} (peak {}, {} below --stop-at).\n", rung_line(r.rung), format_human(r.peak),
                       format_human(res.stop_at - std::min(res.stop_at, r.peak)));
  } else {
    out += "No rung finished: there is no safe maximum yet.\n";
  }
  if (!res.runs.empty() && res.runs.back().status != io::RungStatus::kOk) {
    const auto& last = res.runs.back();
    out += fmt::format("The ladder ended at {}: {}{}.\n", rung_line(last.rung), io::to_string(last.status),
                       res.not_run.empty() ? ""
                                           : fmt::format("; {} rung{} not run", res.not_run.size(),
                                                         res.not_run.size() == 1 ? "" : "s"));
  }
  if (!res.error.empty()) out += "The ladder ended early: " + res.error + "\n";
  out += fmt::format("Watchdog: {}, stop at {} ({}).\n", res.watch_description, format_human(res.stop_at),
                     res.stop_at_source);
  out += fmt::format("Before the first rung: {} of {} in use. Logs: {}\n", format_human(res.baseline),
                     format_human(res.total), res.log_dir);
  for (const auto& n : res.notes) out += "note: " + n + "\n";
  return out;
}

std::string render_calibration(const std::vector<io::MachineFit>& fits, std::size_t runs, std::size_t skipped,
                               const std::string& written_to, Format format) {
  if (format == Format::kJson) {
    json arr = json::array();
    for (const auto& f : fits)
      arr.push_back({{"host", f.machine.host},
                     {"gpu", f.machine.gpu},
                     {"points", f.calibration.points},
                     {"scale", f.calibration.scale},
                     {"offset_bytes", f.calibration.offset_bytes},
                     {"rms_residual_bytes", f.calibration.rms_residual.count()},
                     {"max_residual_bytes", f.calibration.max_residual.count()}});
    return json{{"schema", kSchema},
                {"calibration",
                 {{"runs", runs}, {"without_prediction", skipped}, {"machines", arr}, {"written_to", written_to}}}}
               .dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
           "\n";
  }
  const bool md = format == Format::kMarkdown || format == Format::kGithub;
  TextTable t({"host", "GPU", "runs", "scale", "offset", "rms residual", "max residual"},
              {Align::kLeft, Align::kLeft, Align::kRight, Align::kRight, Align::kRight, Align::kRight, Align::kRight});
  for (const auto& f : fits) {
    const auto& c = f.calibration;
    t.add_row({f.machine.host, f.machine.gpu, std::to_string(c.points), fmt::format("{:.4f}", c.scale),
               signed_human(c.offset_bytes), format_human(c.rms_residual), format_human(c.max_residual)});
  }
  std::string out = md ? t.render_markdown() : t.render();
  out += fmt::format("\n{} measured run{}, {} without a prediction (not used).\n", runs, runs == 1 ? "" : "s", skipped);
  out +=
      "Corrected peak = max(predicted, offset + scale x predicted); plan, check and --auto apply it on the\n"
      "machine it was measured on.\n";
  if (!written_to.empty()) out += "Written to " + written_to + "\n";
  return out;
}

}  // namespace memplan::report

#include "io/measure/profile.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <signal.h>
#include <string.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "io/edit/apply.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    out.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (std::size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
}

std::string tail_of(const std::string& path, std::size_t max) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const std::streamoff size = in.tellg();
  const std::streamoff from = size > static_cast<std::streamoff>(max) ? size - static_cast<std::streamoff>(max) : 0;
  in.seekg(from);
  std::string out(static_cast<std::size_t>(size - from), '\0');
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  return out;
}

// Less than any CUDA context (PyTorch's alone is ~300-500 MiB): a rung that raised the GPU's used
// memory by less did not run on it.
const Bytes kMinGpuRise = Bytes::mib(64);

std::string size_text(Bytes b) { return fmt::format("{:.0f} MiB", b.as_mib()); }

std::string rung_text(const Rung& r) {
  std::string s = fmt::format("micro-batch {}, grad-accum {}", r.micro_batch, r.grad_accum);
  if (r.seq_len > 0) s += fmt::format(", seq-len {}", r.seq_len);
  return s;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

// A new file, never through a link planted in its place nor over one that exists (issue 34).
Status write_text(const fs::path& p, const std::string& text, mode_t mode = 0600) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0)
    return make_error(ErrorCode::kIoError, fmt::format("cannot create {}: {}", p.string(), std::strerror(errno)),
                      "memplan creates each rung's files itself, in a folder of its own; nothing may be there before");
  std::size_t done = 0;
  bool ok = true;
  while (ok && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<std::size_t>(n);
  }
  ::fchmod(fd, mode);  // the mode asked for, whatever the umask
  if (::close(fd) != 0 || !ok) return make_error(ErrorCode::kIoError, fmt::format("cannot write {}", p.string()));
  return Ok{};
}

}  // namespace

const char* to_string(RungStatus s) {
  switch (s) {
    case RungStatus::kOk:
      return "ok";
    case RungStatus::kStopped:
      return "stopped";
    case RungStatus::kOom:
      return "oom";
    case RungStatus::kFailed:
      return "failed";
    case RungStatus::kTimeout:
      return "timeout";
    case RungStatus::kInterrupted:
      return "interrupted";
    case RungStatus::kRefused:
      return "refused";
    case RungStatus::kNoMeasurement:
      return "no-measurement";
  }
  return "?";
}

Result<std::vector<std::int64_t>> parse_ladder(const std::string& text, const std::string& flag) {
  std::vector<std::int64_t> out;
  for (const auto& part : split_commas(text)) {
    const std::string t = trim(part);
    std::int64_t v = 0;
    const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || p != t.data() + t.size() || v < 1)
      return make_error(ErrorCode::kInvalidArgument, fmt::format("{}: \"{}\" is not a positive integer", flag, t),
                        fmt::format("write {} 1,2,4,8", flag));
    if (!out.empty() && v <= out.back())
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}: {} after {}: the ladder must increase", flag, v, out.back()),
                        "list the values smallest first; the ladder stops at the first rung that fails");
    out.push_back(v);
  }
  if (out.empty()) return make_error(ErrorCode::kInvalidArgument, fmt::format("{}: no values", flag));
  return out;
}

std::vector<std::int64_t> doubling_ladder(std::int64_t max) {
  std::vector<std::int64_t> out;
  for (std::int64_t v = 1; v <= max; v *= 2) {
    out.push_back(v);
    if (v > max / 2) break;  // the next double would pass max, or overflow near 2^63
  }
  return out;
}

std::vector<std::int64_t> around_ladder(std::int64_t m) {
  std::vector<std::int64_t> out;
  for (int quarter : {2, 3, 4, 5, 6}) {
    const std::int64_t v = std::max<std::int64_t>(1, (m * quarter + 2) / 4);
    if (out.empty() || v > out.back()) out.push_back(v);
  }
  return out;
}

bool has_placeholder(const std::vector<std::string>& argv, const std::string& name) {
  const std::string text = "{" + name + "}";
  return std::any_of(argv.begin(), argv.end(), [&](const std::string& a) { return a.find(text) != std::string::npos; });
}

Result<std::vector<std::string>> substitute(const std::vector<std::string>& argv, const Rung& rung,
                                            const std::optional<std::string>& config_path) {
  if (rung.seq_len <= 0 && has_placeholder(argv, "seq_len"))
    return make_error(ErrorCode::kInvalidArgument, "the command uses {seq_len} but no sequence length is given",
                      "give --seq-len N or --seq-lens 1024,2048");
  if (!config_path && has_placeholder(argv, "config"))
    return make_error(ErrorCode::kInvalidArgument, "the command uses {config} but no --config FILE is given",
                      "give --config FILE: each rung gets a copy with its values");
  std::vector<std::string> out = argv;
  for (auto& a : out) {
    replace_all(a, "{batch}", std::to_string(rung.micro_batch));
    replace_all(a, "{micro_batch}", std::to_string(rung.micro_batch));
    replace_all(a, "{grad_accum}", std::to_string(rung.grad_accum));
    if (rung.seq_len > 0) replace_all(a, "{seq_len}", std::to_string(rung.seq_len));
    if (config_path) replace_all(a, "{config}", *config_path);
  }
  return out;
}

bool mentions_oom(const std::string& output) {
  static const char* const kMarkers[] = {
      "CUDA out of memory",          // torch.OutOfMemoryError (c10/cuda/CUDACachingAllocator.cpp)
      "OutOfMemoryError",            // torch.cuda.OutOfMemoryError / torch.OutOfMemoryError
      "MPS backend out of memory",   // Apple
      "XPU out of memory",           // Intel
      "HIP out of memory",           // ROCm builds
      "CUBLAS_STATUS_ALLOC_FAILED",  // cuBLAS workspace
      "CUDNN_STATUS_ALLOC_FAILED",
      "cudaErrorMemoryAllocation",
      "out of memory",  // CUDA runtime: "CUDA error: out of memory"
      "MemoryError",    // Python's own
      "std::bad_alloc",
  };
  return std::any_of(std::begin(kMarkers), std::end(kMarkers),
                     [&](const char* m) { return output.find(m) != std::string::npos; });
}

Result<std::string> config_for_rung(const LoadedConfig& config, const Rung& rung) {
  if (config.files.size() != 1)
    return make_error(ErrorCode::kUnsupported,
                      fmt::format("memplan profile writes each rung's values into a copy of one config file; "
                                  "this config is {} files",
                                  config.files.size()),
                      "give a single --config FILE (its copy is what {config} names)");
  // Only what differs from the file: a value it already has needs no key written (or added).
  const TrainingConfig& now = config.inputs.config;
  Edits edits;
  if (rung.micro_batch != now.micro_batch) edits.micro_batch = rung.micro_batch;
  if (rung.grad_accum != now.grad_accum) edits.grad_accum = rung.grad_accum;
  if (rung.seq_len > 0 && rung.seq_len != now.seq_len) edits.seq_len = rung.seq_len;
  if (!edits.micro_batch && !edits.grad_accum && !edits.seq_len) return config.files[0].text;
  auto planned = plan_apply(config, edits);
  if (!planned) {
    // plan_apply speaks to --apply; profile was given none (issue 34): say what it was doing.
    Error e = planned.error();
    for (std::string* s : {&e.message, &e.suggestion}) {
      for (std::size_t at; (at = s->find("--apply")) != std::string::npos;)
        s->replace(at, 7, "the rung's copy of the config");
    }
    e.message = fmt::format("cannot write {} into the rung's copy of the config: {}", rung_text(rung), e.message);
    return e;
  }
  const ApplyPlan& plan = *planned;
  for (const auto& f : plan.files)
    if (f.file == 0) return f.after;
  return config.files[0].text;
}

Result<ProfileResult> run_ladder(const LadderOptions& o, MemoryGauge& gauge) {
  ProfileResult res;
  res.command = o.command;
  res.watch = gauge.kind();
  res.watch_description = gauge.description();
  res.stop_at = o.stop_at;
  res.log_dir = o.log_dir;
  std::error_code ec;
  fs::create_directories(o.log_dir, ec);
  if (ec)
    return make_error(ErrorCode::kIoError, fmt::format("cannot create the log folder {}: {}", o.log_dir, ec.message()),
                      "choose another with --log-dir DIR");
  MEMPLAN_TRY(auto before, gauge.device());
  res.baseline = before.used;
  res.total = before.total;
  const auto say = [&](const std::string& line) {
    if (o.progress) o.progress(line);
  };
  // An error after the ladder started (a failed memory query, a file that cannot be written)
  // ends it, and what was measured before stays in the result (issue 34: one failed nvidia-smi
  // query lost every finished rung). Before the first rung it is the command's error.
  const auto end_early = [&](const Error& e, std::size_t i) {
    res.not_run.assign(o.rungs.begin() + static_cast<std::ptrdiff_t>(i), o.rungs.end());
    res.error = e.to_string();
  };

  for (std::size_t i = 0; i < o.rungs.size(); ++i) {
    const Rung& rung = o.rungs[i];
    const std::string step = fmt::format("[{}/{}] {}", i + 1, o.rungs.size(), rung_text(rung));
    RungResult r;
    r.rung = rung;
    if (o.predict) r.predicted = o.predict(rung);

    // Preflight: the previous rung's memory must be given back before the next starts.
    if (i > 0) {
      const auto deadline = Clock::now() + o.settle;
      Bytes used;
      std::optional<Error> failed;
      while (true) {
        auto now = gauge.device();
        if (!now) {
          failed = now.error();
          break;
        }
        used = now->used;
        if (used <= res.baseline + o.settle_slack || Clock::now() >= deadline || InterruptGuard::received()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (failed) {
        end_early(*failed, i);
        break;
      }
      if (InterruptGuard::received()) {
        res.not_run.assign(o.rungs.begin() + static_cast<std::ptrdiff_t>(i), o.rungs.end());
        res.notes.push_back(
            fmt::format("interrupted ({}) before {}", signal_name(InterruptGuard::received()), rung_text(rung)));
        break;
      }
      if (used > res.baseline + o.settle_slack) {
        r.status = RungStatus::kRefused;
        r.notes = fmt::format("{} in use, {} before the ladder: not started", size_text(used), size_text(res.baseline));
        res.runs.push_back(r);
        res.not_run.assign(o.rungs.begin() + static_cast<std::ptrdiff_t>(i) + 1, o.rungs.end());
        say(fmt::format("{}: refused: {}", step, r.notes));
        break;
      }
    }

    std::string dir_name = fmt::format("rung-{:02}-b{}-ga{}", i + 1, rung.micro_batch, rung.grad_accum);
    if (rung.seq_len > 0) dir_name += fmt::format("-s{}", rung.seq_len);
    const fs::path dir = fs::path(o.log_dir) / dir_name;
    // A folder of this rung's own, private (0700). One left by an earlier run in the same --log-dir
    // is reused only when it is a real folder of this user: the files memplan writes there are
    // removed (unlink never follows a link) and created anew with O_EXCL | O_NOFOLLOW, so a link
    // planted in their place is never written through.
    if (::mkdir(dir.c_str(), 0700) != 0) {
      struct stat st {};
      if (errno != EEXIST || ::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
        const Error e = make_error(
            ErrorCode::kIoError,
            fmt::format("cannot create {}: {}", dir.string(),
                        errno == EEXIST ? "it exists and is not a folder of this user" : std::strerror(errno)),
            "choose another --log-dir");
        if (res.runs.empty()) return e;
        end_early(e, i);
        break;
      }
      for (const char* f : {"output.log", "command.txt"}) ::unlink((dir / f).c_str());
      if (o.config) ::unlink((dir / fs::path(o.config->files[0].path).filename()).c_str());
    }
    r.log_dir = dir.string();
    // The rung's files: its config copy, its command; then the run itself.
    const auto prepare = [&]() -> Status {
      std::optional<std::string> config_copy;
      if (o.config) {
        MEMPLAN_TRY(auto text, config_for_rung(*o.config, rung));
        const fs::path copy = dir / fs::path(o.config->files[0].path).filename();
        // The copy keeps the source's mode (a 0600 config with a token stays 0600).
        struct stat st {};
        const mode_t mode = ::stat(o.config->files[0].path.c_str(), &st) == 0 ? (st.st_mode & 0666) : 0600;
        MEMPLAN_TRY(auto written, write_text(copy, text, mode));
        (void)written;
        config_copy = fs::absolute(copy).string();
      }
      MEMPLAN_TRY(r.argv, substitute(o.command, rung, config_copy));
      return write_text(dir / "command.txt", shell_quote(r.argv) + "\n", 0644);
    };
    if (auto ready = prepare(); !ready) {
      if (res.runs.empty()) return ready.error();
      end_early(ready.error(), i);
      break;
    }
    say(fmt::format("{}: running", step));

    RunSpec spec;
    spec.argv = r.argv;
    spec.log_path = (dir / "output.log").string();
    spec.stop_at = o.stop_at;
    spec.timeout = o.rung_timeout;
    spec.grace = o.grace;
    spec.interval = o.interval;
    if (o.live)
      spec.on_tick = [&o, step](double seconds, Bytes current, Bytes peak) { o.live(step, seconds, current, peak); };
    auto watched = run_watched(spec, gauge);
    if (!watched) {
      if (res.runs.empty()) return watched.error();
      end_early(watched.error(), i);
      break;
    }
    const RunOutcome& out = *watched;
    r.peak = out.peak;
    r.kernel_max_rss = out.kernel_max_rss;
    r.seconds = out.seconds;
    r.max_sample_gap_ms = out.max_gap_ms;
    r.exit_code = out.exit_code;
    r.signal = out.signal;

    std::vector<std::string> notes;
    const std::string output = tail_of(spec.log_path, 64 * 1024);
    switch (out.reason) {
      case EndReason::kWatchdog:
        r.status = RungStatus::kStopped;
        notes.push_back(fmt::format("a sample of {} passed --stop-at {}", format_human(out.limit_sample),
                                    format_human(o.stop_at)));
        break;
      case EndReason::kTimeout:
        r.status = RungStatus::kTimeout;
        notes.push_back(
            fmt::format("still running after {:.0f} s", std::chrono::duration<double>(o.rung_timeout).count()));
        break;
      case EndReason::kInterrupted:
        r.status = RungStatus::kInterrupted;
        notes.push_back(fmt::format("memplan received {}", signal_name(out.interrupt_signal)));
        break;
      case EndReason::kGaugeFailed:
        break;  // below: whatever the reason, a run memplan could not watch to its end
      case EndReason::kExited:
        if (out.exit_code && *out.exit_code == 0 && out.stragglers > 0) {
          // The leader's job is not done when it exits while its children run on: a launcher
          // that backgrounds the real training (issue 34). What was measured is not the run's.
          r.status = RungStatus::kNoMeasurement;
          notes.push_back(fmt::format(
              "exited 0 while {} process{} it started ran on (ended by memplan): a launcher that backgrounds the "
              "training? run the training itself in the foreground",
              out.stragglers, out.stragglers == 1 ? "" : "es"));
        } else if (out.exit_code && *out.exit_code == 0 && gauge.kind() == "gpu" && out.peak < kMinGpuRise) {
          // Every CUDA process holds a context of a few hundred MiB: a run that never raised
          // the GPU's used memory did not train on it.
          r.status = RungStatus::kNoMeasurement;
          notes.push_back(fmt::format(
              "exited 0, but the GPU's used memory never rose {} above its level before the rung: the training did "
              "not run here (a launcher that backgrounds it? the wrong GPU?)",
              size_text(kMinGpuRise)));
        } else if (out.exit_code && *out.exit_code == 0) {
          r.status = RungStatus::kOk;
          if (mentions_oom(output)) notes.push_back("exited 0, but its output mentions out of memory");
        } else if ((out.exit_code && *out.exit_code == 137) || (out.signal && *out.signal == SIGKILL)) {
          r.status = RungStatus::kOom;
          notes.push_back(out.signal ? "killed by SIGKILL (the kernel's OOM killer?)"
                                     : "exit 137 (SIGKILL: OOM killer?)");
        } else if (mentions_oom(output)) {
          r.status = RungStatus::kOom;
          notes.push_back("out-of-memory message in its output");
        } else {
          r.status = RungStatus::kFailed;
          notes.push_back(out.signal ? fmt::format("killed by {}", signal_name(*out.signal))
                                     : fmt::format("exit {}", out.exit_code.value_or(-1)));
        }
        break;
    }
    if (out.gauge_error) {
      r.status = RungStatus::kInterrupted;
      notes.assign(1, "ended by memplan: the memory could no longer be read: " + out.gauge_error->message);
      res.error = out.gauge_error->to_string();
    }
    if (i == 0 && notes.empty()) notes.push_back("baseline");
    if (out.stragglers > 0 && r.status != RungStatus::kNoMeasurement)
      notes.push_back(fmt::format("{} process{} left running after it exited, ended", out.stragglers,
                                  out.stragglers == 1 ? "" : "es"));
    if (out.needed_sigkill) notes.push_back("SIGKILL needed after the grace period");
    if (out.unkillable > 0)
      notes.push_back(fmt::format("{} process{} still alive 30 s after SIGKILL", out.unkillable,
                                  out.unkillable == 1 ? "" : "es"));
    r.notes = fmt::format("{}", fmt::join(notes, "; "));
    res.runs.push_back(r);
    say(fmt::format("{}: {}, peak {} in {:.1f} s{}", step, to_string(r.status), size_text(r.peak), r.seconds,
                    r.notes.empty() || r.notes == "baseline" ? "" : " (" + r.notes + ")"));
    if (r.status != RungStatus::kOk || out.unkillable > 0) {
      res.not_run.assign(o.rungs.begin() + static_cast<std::ptrdiff_t>(i) + 1, o.rungs.end());
      break;
    }
    if (InterruptGuard::received()) {
      res.not_run.assign(o.rungs.begin() + static_cast<std::ptrdiff_t>(i) + 1, o.rungs.end());
      res.notes.push_back(
          fmt::format("interrupted ({}) after {}", signal_name(InterruptGuard::received()), rung_text(rung)));
      break;
    }
  }
  for (std::size_t i = 0; i < res.runs.size(); ++i)
    if (res.runs[i].status == RungStatus::kOk) res.safe_maximum = i;
  return res;
}

}  // namespace memplan::io

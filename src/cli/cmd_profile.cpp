// memplan profile [options] -- COMMAND ARGS...: seed 000's incremental profiling as one command.
// Runs the user's training command once per rung of a ladder (micro-batch 1, 2, 4, ... or
// --batches, --around the plan's recommendation, --seq-lens), with {batch}, {grad_accum},
// {seq_len} and {config} substituted, under a memory watchdog (--stop-at, --watch), and prints
// seed 000's results table with memplan's prediction beside each rung. docs/profile.md.
// Exit codes: 0 a safe maximum was found (the ladder ran out, or ended at stopped/oom); 1 no rung
// finished, or one failed / timed out / was refused; 130 memplan was interrupted (SIGINT).
#include <signal.h>
#include <sys/stat.h>
#include <cerrno>
#include <cstring>
#include <cmath>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "cli/plan_flags.hpp"
#include "cli/training_flags.hpp"
#include "io/measure/calibration_store.hpp"
#include "io/gpu/gpu_detect.hpp"
#include "io/measure/process.hpp"
#include "io/measure/profile.hpp"
#include "memplan/engine.hpp"
#include "memplan/plan.hpp"
#include "memplan/text.hpp"
#include "report/profile_render.hpp"

namespace memplan::cli {

namespace {

constexpr int kExitInterrupted = 130;  // 128 + SIGINT, as shells report it

struct ProfileOptions {
  TrainingFlags flags;
  BudgetFlags budget;
  std::string batches;
  std::int64_t max_batch = 64;
  bool around = false;
  std::string seq_lens;
  std::string stop_at;
  std::string watch = "auto";
  double rung_timeout = 3600;
  double grace = 10;
  double settle = 60;
  std::string settle_slack = "2%";
  int sample_ms = 0;
  bool allow_busy = false;
  std::string log_dir;
  bool save = false;
  std::string format = "text";
  std::vector<std::string> command;
};

bool has_model(const TrainingFlags& f) { return !f.model.empty() || !f.model_params.empty() || !f.configs.empty(); }

// memplan-profile/YYYYMMDD-HHMMSS-XXXXXX: a new private folder (0700, mkdtemp) for this run, so
// that two profiles started in one second never share one and nobody can plant links in it
// (issue 34).
Result<std::string> default_log_dir() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  if (::mkdir("memplan-profile", 0755) != 0 && errno != EEXIST)
    return make_error(ErrorCode::kIoError, fmt::format("cannot create memplan-profile: {}", std::strerror(errno)),
                      "choose another folder with --log-dir DIR");
  std::string dir = (std::filesystem::path("memplan-profile") / buf).string() + "-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr)
    return make_error(ErrorCode::kIoError, fmt::format("cannot create a folder in memplan-profile: {}",
                                                       std::strerror(errno)),
                      "choose another folder with --log-dir DIR");
  return dir;
}

// --stop-at (or --settle-slack) SIZE or PCT of the watched memory's total.
Result<Bytes> parse_size_or_percent(const std::string& text, Bytes total, const std::string& flag) {
  std::string t = trim(text);
  if (!t.empty() && t.back() == '%') {
    MEMPLAN_TRY(auto pct, parse_double(t.substr(0, t.size() - 1), flag));
    if (!(pct > 0 && pct <= 100))
      return make_error(ErrorCode::kInvalidArgument, fmt::format("{}: {} is not a percentage in (0, 100]", flag, text));
    return Bytes::of(static_cast<std::int64_t>(static_cast<double>(total.count()) * pct / 100.0));
  }
  const bool bare = !t.empty() && t.find_first_not_of("0123456789.") == std::string::npos;
  if (bare)
    return make_error(ErrorCode::kInvalidArgument, fmt::format("{} needs a unit: \"{}\"", flag, text),
                      fmt::format("write {0} {1}GB, {0} {1}GiB or a percentage like 80%", flag, t));
  auto s = parse_size(t);
  if (!s) {
    Error e = s.error();
    e.message = flag + ": " + e.message;
    return e;
  }
  if (*s <= Bytes::zero()) return make_error(ErrorCode::kInvalidArgument, flag + " must be positive");
  return *s;
}

// The bounds of the numeric flags: a rung longer than a week, a grace or settle longer than an
// hour, a sample interval over 10 s (memplan answers SIGTERM between samples) or a micro-batch over
// 2^20 is a typo, and larger values overflow the clocks or the doubling ladder.
constexpr double kMaxRungSeconds = 7 * 24 * 3600;
constexpr double kMaxGraceSeconds = 3600;
constexpr int kMaxSampleMs = 10000;
constexpr std::int64_t kMaxBatch = std::int64_t{1} << 20;

std::chrono::milliseconds seconds_flag(double s) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000.0));
}

// What the command evaluates, when --model or --config is given: the inputs and an estimator for
// the predictions, or, for a config memplan cannot predict for (a custom model, say), only the
// file: the copies need nothing more, and the table goes without predictions.
struct ProfileInputs {
  std::optional<Inputs> inputs;
  std::optional<Estimator> estimator;
  std::optional<io::LoadedConfig> config_only;
  std::string no_prediction;  // why there are no predictions

  const io::ResolvedInputs* resolved() const { return inputs ? &inputs->resolved : nullptr; }
  const io::LoadedConfig* config() const {
    return inputs && inputs->loaded ? &*inputs->loaded : config_only ? &*config_only : nullptr;
  }
  const TrainingConfig* training() const {
    return inputs ? &inputs->resolved.config : config_only ? &config_only->inputs.config : nullptr;
  }
};

Result<ProfileInputs> load_profile_inputs(const TrainingFlags& flags) {
  ProfileInputs out;
  if (!has_model(flags)) return out;
  auto in = load_inputs(flags);
  auto e = in ? Estimator::create(in->resolved.model, in->resolved.config) : Result<Estimator>(in.error());
  if (in && e) {
    out.inputs = std::move(*in);
    out.estimator = std::move(*e);
    return out;
  }
  const Error why = in ? e.error() : in.error();
  if (flags.configs.empty()) return why;
  io::ConfigRequest req;
  req.files = flags.configs;
  req.dialect = flags.dialect;
  if (!flags.keys.empty()) {
    MEMPLAN_TRY(req.key_map, io::parse_key_map(flags.keys, io::real_file_system()));
  }
  auto loaded = io::load_config(req, io::real_file_system());
  if (!loaded) return why;
  out.config_only = std::move(*loaded);
  out.no_prediction = why.to_string();
  return out;
}

// The watched memory: --watch gpu|system|auto, with what detection found (also for system: a
// unified-memory GPU's budget is the default limit).
struct Watch {
  std::string kind;
  std::optional<io::DetectedSystem> detected;
  std::unique_ptr<io::MemoryGauge> gauge;
};

Result<Watch> choose_watch(const std::string& flag, const io::SystemProbe& probe) {
  Watch w;
  w.kind = to_lower(trim(flag));
  if (w.kind != "auto" && w.kind != "gpu" && w.kind != "system")
    return make_error(ErrorCode::kUnknownName, fmt::format("--watch: unknown '{}'", flag),
                      did_you_mean(w.kind, {"gpu", "system", "auto"}));
  io::DetectOptions d;
  d.processes = true;
  auto sys = io::detect_gpus(probe, d);
  if (sys) w.detected = *sys;
  if (w.kind == "auto") w.kind = w.detected && !w.detected->chosen_gpu().unified ? "gpu" : "system";
  if (w.kind == "system") {
    w.gauge = io::system_gauge();
    return w;
  }
  if (!w.detected)
    return make_error(ErrorCode::kNoGpu, "--watch gpu: " + sys.error().message,
                      "use --watch system to watch the process tree's resident memory");
  MEMPLAN_TRY(w.gauge, io::gpu_gauge(probe, w.detected->chosen_gpu().index));
  return w;
}

struct Limit {
  Bytes bytes;
  std::string source;
};

// --stop-at, else the plan's budget on the GPU, else (no GPU) what is available now less plan's
// default margin for the machine's size.
Result<Limit> resolve_limit(const ProfileOptions& o, const std::optional<GpuTarget>& gpu, const TrainingConfig* config,
                            const io::DeviceMemory& now, bool whole_gpu) {
  Limit l;
  if (!o.stop_at.empty()) {
    MEMPLAN_TRY(l.bytes, parse_size_or_percent(o.stop_at, now.total, "--stop-at"));
    l.source = "--stop-at " + o.stop_at;
  } else if (gpu) {
    MEMPLAN_TRY(auto b, budget_for(*gpu, o.budget, config ? *config : TrainingConfig{}));
    l.bytes = b.budget();
    l.source = "the plan's budget on " + gpu->description;
    if (whole_gpu) {
      // The watchdog compares the whole GPU's used memory; the budget is the run's own, on top of
      // what is in use now.
      l.bytes += now.used;
      l.source += fmt::format(" above the {} in use before the ladder", format_human(now.used));
    }
  } else {
    const Bytes available = now.total - now.used;
    l.bytes = available - std::min(available, default_safety_margin(now.total));
    l.source = fmt::format("available memory {} less the default safety margin {}", format_human(available),
                           format_human(default_safety_margin(now.total)));
  }
  if (l.bytes <= Bytes::zero())
    return make_error(ErrorCode::kInvalidArgument, "the watchdog limit leaves no memory to run in",
                      "give --stop-at SIZE");
  return l;
}

// Seed 000's clean slate: no other process on the GPU, and no more memory in use than `slack`
// beyond what the listed processes hold (issue 34: processes in other containers are not listed,
// and 19.5 GiB held by them went unnoticed); on system memory, at least the limit free.
Status refuse_busy(const Watch& w, const io::DeviceMemory& now, Bytes limit, Bytes slack) {
  if (w.kind == "gpu") {
    const auto& g = w.detected->chosen_gpu();
    if (g.processes.empty()) {
      if (now.used <= slack) return Ok{};
      return make_error(ErrorCode::kConflict,
                        fmt::format("GPU {} is in use: {} of its memory is held, and no process is listed (processes "
                                    "in other containers or namespaces?)",
                                    g.index, format_human(now.used)),
                        fmt::format("see nvidia-smi; end them, or pass --allow-busy (the watchdog counts their "
                                    "memory: --stop-at is the whole GPU's used memory); idle is below {}",
                                    format_human(slack)));
    }
    const std::size_t n = g.processes.size();
    return make_error(ErrorCode::kConflict,
                      fmt::format("GPU {} is in use: {} process{} hold{} memory (pid {}{})", g.index, n,
                                  n == 1 ? "" : "es", n == 1 ? "s" : "", g.processes[0].pid,
                                  g.processes[0].name.empty() ? "" : ", " + g.processes[0].name),
                      "see memplan preflight; end them or pass --allow-busy");
  }
  if (now.total - now.used >= limit) return Ok{};
  return make_error(ErrorCode::kConflict,
                    fmt::format("only {} of memory is available, less than the watchdog limit {}",
                                format_human(now.total - now.used), format_human(limit)),
                    "end other processes, lower --stop-at, or pass --allow-busy");
}

// The rungs: --seq-lens at one micro-batch, or the micro-batches of --batches, --around or the
// doubling ladder; grad-accum and the other value from the flags, else the config.
Result<std::vector<io::Rung>> build_rungs(const ProfileOptions& o, const ProfileInputs& pin,
                                          const std::optional<GpuTarget>& gpu) {
  const TrainingConfig* file = pin.training();
  io::Rung base;
  base.grad_accum = o.flags.grad_accum > 0 ? o.flags.grad_accum : file ? file->grad_accum : 1;
  base.micro_batch = o.flags.batch > 0 ? o.flags.batch : file ? file->micro_batch : 1;
  base.seq_len = o.flags.seq_len > 0 ? o.flags.seq_len : file ? file->seq_len : 0;
  std::vector<std::int64_t> batches;
  std::vector<std::int64_t> seq_lens;
  if (!o.seq_lens.empty()) {
    MEMPLAN_TRY(seq_lens, io::parse_ladder(o.seq_lens, "--seq-lens"));
  }
  if (!o.batches.empty()) {
    MEMPLAN_TRY(batches, io::parse_ladder(o.batches, "--batches"));
  }
  if (o.around) {
    if (!o.batches.empty())
      return make_error(ErrorCode::kConflict, "--around and --batches are alternatives", "give one of them");
    if (!pin.resolved() || !gpu)
      return make_error(ErrorCode::kInvalidArgument, "--around needs the plan: a model and a GPU",
                        "give --model or --config, and --gpu NAME (or run on the GPU)");
    io::ResolvedInputs in = *pin.resolved();
    PlanRequest req;
    MEMPLAN_TRY(req.budget, budget_for(*gpu, o.budget, in.config, &in));
    MEMPLAN_TRY(auto p, plan(in.model, in.config, req));
    if (!p.recommendation.fits)
      return make_error(ErrorCode::kInvalidArgument, "--around: the plan says micro-batch 1 does not fit",
                        "profile from 1 with --batches 1,2 to see what really happens");
    batches = io::around_ladder(p.recommendation.batch.micro_batch);
  }
  std::vector<io::Rung> rungs;
  if (seq_lens.size() > 1) {
    if (batches.size() > 1)
      return make_error(ErrorCode::kConflict, "--seq-lens and --batches both list several values",
                        "vary one at a time (seed 000): fix the micro-batch with --batch N");
    for (auto s : seq_lens) {
      io::Rung r = base;
      if (!batches.empty()) r.micro_batch = batches[0];
      r.seq_len = s;
      rungs.push_back(r);
    }
  } else {
    if (batches.empty()) batches = io::doubling_ladder(o.max_batch);
    for (auto b : batches) {
      io::Rung r = base;
      r.micro_batch = b;
      if (!seq_lens.empty()) r.seq_len = seq_lens[0];
      rungs.push_back(r);
    }
  }
  const auto& cmd = o.command;
  if (rungs.size() > 1 && !io::has_placeholder(cmd, "batch") && !io::has_placeholder(cmd, "micro_batch") &&
      !io::has_placeholder(cmd, "seq_len") && !io::has_placeholder(cmd, "config"))
    return make_error(
        ErrorCode::kInvalidArgument,
        "the command has no {batch}, {seq_len} or {config}: every rung would run the same thing",
        "write {batch} where the command takes its micro-batch, e.g. --per_device_train_batch_size {batch}");
  if (base.seq_len <= 0 && io::has_placeholder(cmd, "seq_len") && seq_lens.empty())
    return make_error(ErrorCode::kInvalidArgument, "the command uses {seq_len} but no sequence length is given",
                      "give --seq-len N or --seq-lens 1024,2048");
  return rungs;
}

// Whether measured peaks are what memplan predicts: GPU memory watched on the GPU, or the process
// tree's memory on a unified-memory GPU. Host memory on a discrete GPU (or no GPU) is not.
bool comparable(const Watch& w, const std::optional<GpuTarget>& gpu) {
  return w.kind == "gpu" || (gpu && gpu->profile && gpu->profile->unified);
}

// --save: the ok rungs, with the machine (host, GPU profile, driver) and what was run. Without a
// comparable measurement the prediction is not stored, so calibrate does not fit it.
Result<std::string> save_runs(const io::ProfileResult& result, const ProfileInputs& pin,
                              const std::optional<GpuTarget>& gpu, const Watch& w, const io::SystemProbe& probe) {
  MEMPLAN_TRY(auto dir, io::data_dir());
  std::string driver;
  if (w.detected && w.detected->chosen_gpu().vendor == "nvidia") {
    const auto v = probe.run({probe.env("MEMPLAN_NVIDIA_SMI").value_or("nvidia-smi"), "--query-gpu=driver_version",
                              "--format=csv,noheader"});
    if (v.started && v.exit_code == 0) driver = trim(v.out.substr(0, v.out.find('\n')));
  }
  std::vector<io::MeasuredRun> saved;
  for (const auto& r : result.runs) {
    if (r.status != io::RungStatus::kOk) continue;  // a stopped rung's peak is only a lower bound
    io::MeasuredRun m;
    m.machine = {io::host_name(), gpu && gpu->profile ? gpu->profile->name : "none"};
    m.driver = driver;
    m.watch = result.watch;
    if (const auto* in = pin.resolved()) {
      m.model = in->model_name;
      m.method = to_string(in->config.method);
    }
    if (const auto* c = pin.config()) m.config = c->files[0].path;
    m.command = io::shell_quote(r.argv);
    m.micro_batch = r.rung.micro_batch;
    m.grad_accum = r.rung.grad_accum;
    m.seq_len = r.rung.seq_len;
    m.measured = r.peak;
    if (comparable(w, gpu)) m.predicted = r.predicted;
    m.time = io::utc_now();
    saved.push_back(m);
  }
  if (saved.empty())
    return std::string("Nothing saved: no rung ended ok (stopped, failed and no-measurement rungs are never stored).\n");
  MEMPLAN_TRY(auto ok, io::append_measurements(dir, saved));
  (void)ok;
  return fmt::format("Saved {} measured rung{} to {}/measurements.jsonl; run memplan calibrate.\n", saved.size(),
                     saved.size() == 1 ? "" : "s", dir);
}

// The whole command: inputs, the watched memory, the limit, the ladder, the run, the output.
Result<int> run_profile(const ProfileOptions& o, Context& ctx) {
  MEMPLAN_TRY(auto format, report::parse_format(o.format));
  // Every numeric flag bounded (issue 34): NaN, infinity and values that overflow a clock or the
  // doubling ladder are refused with the range, never taken as "no timeout" or "kill at once".
  const auto seconds_in = [](const char* flag, double v, double lo, double hi) -> Status {
    if (std::isfinite(v) && v >= lo && v <= hi) return Ok{};
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{} = {} must be a number of seconds from {:g} to {:g}", flag, v, lo, hi));
  };
  MEMPLAN_TRY(auto t_ok, seconds_in("--rung-timeout", o.rung_timeout, 0.001, kMaxRungSeconds));
  MEMPLAN_TRY(auto g_ok, seconds_in("--grace", o.grace, 0, kMaxGraceSeconds));
  MEMPLAN_TRY(auto s_ok, seconds_in("--settle", o.settle, 0, kMaxGraceSeconds));
  (void)t_ok, (void)g_ok, (void)s_ok;
  if (o.sample_ms < 0 || o.sample_ms > kMaxSampleMs)
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("--sample-ms = {} must be from 1 to {} milliseconds (0: the watch's default)",
                                  o.sample_ms, kMaxSampleMs));
  if (o.max_batch < 1 || o.max_batch > kMaxBatch)
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("--max-batch = {} must be from 1 to {}", o.max_batch, kMaxBatch));
  if (o.command.empty())
    return make_error(ErrorCode::kInvalidArgument, "no command to profile",
                      "give it after --: memplan profile -- python train.py --batch_size {batch} --max_steps 3");

  MEMPLAN_TRY(auto pin, load_profile_inputs(o.flags));
  const bool uses_config = io::has_placeholder(o.command, "config");
  if (uses_config && !pin.config())
    return make_error(ErrorCode::kInvalidArgument, "the command uses {config} but no --config FILE is given",
                      "give --config FILE: each rung gets a copy with its values, the file itself is never written");
  if (pin.config() && !uses_config && !io::has_placeholder(o.command, "batch") &&
      !io::has_placeholder(o.command, "micro_batch"))
    return make_error(ErrorCode::kInvalidArgument,
                      "--config is given but the command uses neither {config} nor {batch}",
                      "pass the rung's copy to the command with {config} (memplan never edits your file)");

  const auto probe = io::SystemProbe::from_process();
  MEMPLAN_TRY(auto watch, choose_watch(o.watch, *probe));
  MEMPLAN_TRY(auto now, watch.gauge->device());
  // The GPU a budget and a calibration record are for.
  MEMPLAN_TRY(auto gpu, resolve_gpu(o.budget, /*detect_by_default=*/watch.detected.has_value()));
  MEMPLAN_TRY(auto limit, resolve_limit(o, gpu, pin.training(), now, watch.kind == "gpu"));
  MEMPLAN_TRY(auto slack, parse_size_or_percent(o.settle_slack, now.total, "--settle-slack"));
  slack = std::max(slack, Bytes::mib(256));
  if (!o.allow_busy) {
    MEMPLAN_TRY(auto idle, refuse_busy(watch, now, limit.bytes, slack));
    (void)idle;
  }
  MEMPLAN_TRY(auto rungs, build_rungs(o, pin, gpu));

  io::LadderOptions lo;
  lo.command = o.command;
  lo.rungs = rungs;
  lo.stop_at = limit.bytes;
  lo.rung_timeout = seconds_flag(o.rung_timeout);
  lo.grace = seconds_flag(o.grace);
  lo.settle = seconds_flag(o.settle);
  lo.settle_slack = slack;
  if (o.sample_ms > 0) lo.interval = std::chrono::milliseconds(o.sample_ms);
  if (o.log_dir.empty()) {
    MEMPLAN_TRY(lo.log_dir, default_log_dir());
  } else {
    lo.log_dir = o.log_dir;
  }
  if (uses_config) lo.config = pin.config();
  if (pin.estimator) {
    const Estimator* est = &*pin.estimator;
    lo.predict = [est](const io::Rung& r) -> std::optional<Bytes> {
      auto p = est->peak_bytes(r.micro_batch, r.seq_len);
      if (!p) return std::nullopt;
      return *p;
    };
  }
  // A rung predicted above the memory the machine has: said before anything runs (issue 32; on a
  // unified-memory machine an out-of-memory can take the system down). The watchdog still ends it
  // at --stop-at.
  if (lo.predict) {
    for (const io::Rung& r : rungs) {
      const auto p = lo.predict(r);
      if (!p || *p <= now.total) continue;
      ctx.err << fmt::format("memplan profile: warning: micro-batch {} is predicted at {}, above the {} this "
                             "machine has; the watchdog stops it at {} (--max-batch {} ends the ladder before it)\n",
                             r.micro_batch, format_human(*p), format_human(now.total), format_human(limit.bytes),
                             std::max<std::int64_t>(1, r.micro_batch - 1));
      break;
    }
  }
  // On a terminal, a live line (time, memory now, peak) is redrawn while a rung runs.
  const bool live = ctx.err_is_terminal;
  lo.progress = [&ctx, live](const std::string& line) {
    ctx.err << (live ? "\r\033[K" : "") << "memplan profile: " << line << std::endl;
  };
  if (live)
    lo.live = [&ctx, stop = limit.bytes](const std::string& step, double seconds, Bytes current, Bytes peak) {
      ctx.err << fmt::format("\r\033[Kmemplan profile: {}: {:.1f} s, {} now, peak {} of {}", step, seconds,
                             format_human(current), format_human(peak), format_human(stop))
              << std::flush;
    };

  // A closed stderr (or stdout) pipe must not kill memplan between rungs with SIGPIPE: a write
  // then fails with EPIPE, the stream stops, and the table and --save still happen (issue 34).
  // The rungs' commands get SIGPIPE back (run_watched resets it in the child).
  struct IgnoreSigpipe {
    struct sigaction old {};
    IgnoreSigpipe() {
      struct sigaction sa {};
      sa.sa_handler = SIG_IGN;
      sigemptyset(&sa.sa_mask);
      ::sigaction(SIGPIPE, &sa, &old);
    }
    ~IgnoreSigpipe() { ::sigaction(SIGPIPE, &old, nullptr); }
  } no_sigpipe;
  io::InterruptGuard guard;
  MEMPLAN_TRY(auto result, io::run_ladder(lo, *watch.gauge));
  const int interrupted = io::InterruptGuard::received();
  result.stop_at_source = limit.source;
  if (o.sample_ms > 0 || watch.kind == "system")
    result.notes.push_back(
        fmt::format("sampled every {} ms", lo.interval ? lo.interval->count() : watch.gauge->interval().count()));
  if (const auto* in = pin.resolved()) result.notes.push_back("predicted by memplan for " + in->model_name);
  if (!pin.no_prediction.empty()) result.notes.push_back("no predictions: " + pin.no_prediction);
  if (pin.estimator && !comparable(watch, gpu))
    result.notes.push_back(
        "the predictions are GPU memory; the peaks are the process tree's host memory (they compare on unified "
        "memory only; --save keeps no prediction for calibration)");

  ctx.out << report::render_profile(result, format);
  if (o.save) {
    MEMPLAN_TRY(auto line, save_runs(result, pin, gpu, watch, *probe));
    (format == report::Format::kJson ? ctx.err : ctx.out) << line;  // JSON stays parseable
  }
  if (interrupted) return kExitInterrupted;
  if (!result.safe_maximum || !result.error.empty()) return kExitDoesNotFit;
  const auto last = result.runs.back().status;
  const bool expected_end =
      last == io::RungStatus::kOk || last == io::RungStatus::kStopped || last == io::RungStatus::kOom;
  return expected_end ? kExitOk : kExitDoesNotFit;
}

}  // namespace

Command register_profile(CLI::App& root) {
  auto opts = std::make_shared<ProfileOptions>();
  CLI::App* sub = root.add_subcommand(
      "profile",
      "Run your training command at micro-batch 1, 2, 4, ... under a memory watchdog and tabulate the peaks "
      "(memplan profile -- python train.py --per_device_train_batch_size {batch} --max_steps 3)");
  add_training_flags(*sub, opts->flags);
  add_gpu_flags(*sub, opts->budget);
  sub->add_option("--batches", opts->batches,
                  "Micro-batches to try, in order: 1,2,4,8 (default: 1, 2, 4, ... up to --max-batch)")
      ->group("Ladder");
  sub->add_option("--max-batch", opts->max_batch, "Largest micro-batch of the default doubling ladder (default 64)")
      ->group("Ladder");
  sub->add_flag("--around", opts->around,
                "Try micro-batches around the plan's recommendation (1/2, 3/4, 1, 5/4, 3/2 of it); needs a model "
                "and a GPU")
      ->group("Ladder");
  sub->add_option("--seq-lens", opts->seq_lens, "Sequence lengths to try at one micro-batch: 1024,2048,4096")
      ->group("Ladder");
  sub->add_option("--stop-at", opts->stop_at,
                  "Watchdog limit: a size (100GB) or a percentage of the watched memory (80%); default: the "
                  "budget memplan's plan would use")
      ->group("Watchdog");
  sub->add_option("--watch", opts->watch,
                  "What to watch: gpu (the GPU's used memory, NVML or nvidia-smi), system (resident memory of "
                  "the command's process tree: unified-memory machines), auto (default: gpu on a discrete GPU)")
      ->group("Watchdog");
  sub->add_option("--rung-timeout", opts->rung_timeout, "Seconds a rung may run before it is ended (default 3600)")
      ->group("Watchdog");
  sub->add_option("--grace", opts->grace, "Seconds between SIGTERM and SIGKILL when a rung is ended (default 10)")
      ->group("Watchdog");
  sub->add_option("--settle", opts->settle,
                  "Seconds to wait before a rung for memory to return to its level before the ladder (default 60)")
      ->group("Watchdog");
  sub->add_option("--settle-slack", opts->settle_slack,
                  "How far above its level before the ladder used memory may be when a rung starts: a size or a "
                  "percentage of the watched memory (default 2%, at least 256 MiB)")
      ->group("Watchdog");
  sub->add_option("--sample-ms", opts->sample_ms, "Sampling interval in milliseconds (default 2; nvidia-smi 100)")
      ->group("Watchdog");
  sub->add_flag("--allow-busy", opts->allow_busy,
                "Start even when other processes hold GPU memory or less memory is available than --stop-at")
      ->group("Watchdog");
  sub->add_option("--log-dir", opts->log_dir,
                  "Folder for each rung's command and output (default memplan-profile/YYYYMMDD-HHMMSS)");
  sub->add_flag("--save", opts->save, "Store the measured rungs for memplan calibrate (docs/profile.md#calibration)");
  sub->add_option("--format", opts->format, "text (default), json, markdown");
  sub->add_option("command", opts->command, "The training command, after --")->expected(-1);
  return {sub, [opts](Context& ctx) -> Result<int> { return run_profile(*opts, ctx); }};
}

}  // namespace memplan::cli

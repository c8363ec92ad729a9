#include "io/measure/process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "io/gpu/gpu_detect.hpp"

namespace memplan::io {

namespace {

using Clock = std::chrono::steady_clock;

const std::int64_t kPageSize = ::sysconf(_SC_PAGESIZE) > 0 ? ::sysconf(_SC_PAGESIZE) : 4096;

// Reads a small /proc file with one read(2): /proc/PID/stat is generated on read.
bool read_small(const std::string& path, std::string& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  out.assign(buf, static_cast<std::size_t>(n));
  return true;
}

// /proc/PID/stat: "pid (comm) state ppid pgrp ... rss(24) ...". comm may hold spaces and ')',
// so fields are counted from the last ')'.
std::optional<ProcEntry> parse_stat(const std::string& text, char* state) {
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream in(text.substr(close + 1));
  std::vector<std::string> f;
  std::string tok;
  while (f.size() < 22 && in >> tok) f.push_back(tok);
  if (f.size() < 22) return std::nullopt;
  ProcEntry e;
  try {
    e.pid = static_cast<pid_t>(std::stol(text));
    e.ppid = static_cast<pid_t>(std::stol(f[1]));
    e.pgid = static_cast<pid_t>(std::stol(f[2]));
    e.rss = Bytes::of(std::max<std::int64_t>(0, std::stoll(f[21])) * kPageSize);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (state) *state = f[0].empty() ? '?' : f[0][0];
  return e;
}

std::atomic<int> g_interrupt{0};
struct sigaction g_old[3];
constexpr int kForwarded[3] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void on_interrupt(int sig) { g_interrupt.store(sig); }

// ---- gauges ---------------------------------------------------------------------------------

class SystemGauge : public MemoryGauge {
 public:
  SystemGauge(std::string meminfo, std::chrono::milliseconds interval)
      : meminfo_(std::move(meminfo)), interval_(interval) {}
  std::string kind() const override { return "system"; }
  std::string description() const override { return "resident memory of the process tree (/proc)"; }
  Result<Bytes> sample(const std::vector<ProcEntry>& tree) override {
    Bytes sum;
    for (const auto& p : tree) sum += p.rss;
    return sum;
  }
  Result<DeviceMemory> device() override {
    std::ifstream in(meminfo_);
    if (!in) return make_error(ErrorCode::kIoError, fmt::format("cannot read {}", meminfo_));
    std::ostringstream s;
    s << in.rdbuf();
    MEMPLAN_TRY(auto m, parse_meminfo(s.str(), meminfo_));
    return DeviceMemory{m.total - m.available, m.total};
  }
  std::chrono::milliseconds interval() const override { return interval_; }

 private:
  std::string meminfo_;
  std::chrono::milliseconds interval_;
};

class NvmlGauge : public MemoryGauge {
 public:
  NvmlGauge(std::unique_ptr<Nvml> nvml, int index, std::string name, Bytes baseline)
      : nvml_(std::move(nvml)), index_(index), name_(std::move(name)), baseline_(baseline) {}
  std::string kind() const override { return "gpu"; }
  std::string description() const override { return fmt::format("GPU {} {} used memory (NVML)", index_, name_); }
  Result<Bytes> sample(const std::vector<ProcEntry>&) override {
    MEMPLAN_TRY(auto d, device());
    whole_ = d.used;
    return d.used > baseline_ ? d.used - baseline_ : Bytes::zero();
  }
  Bytes level(Bytes) const override { return whole_; }
  Result<DeviceMemory> device() override {
    MEMPLAN_TRY(auto devs, nvml_->devices());
    if (index_ < 0 || static_cast<std::size_t>(index_) >= devs.size() || !devs[index_].total || !devs[index_].free)
      return make_error(ErrorCode::kNoGpu, fmt::format("NVML reports no memory figures for GPU {}", index_));
    return DeviceMemory{*devs[index_].total - *devs[index_].free, *devs[index_].total};
  }
  std::chrono::milliseconds interval() const override { return std::chrono::milliseconds(5); }

 private:
  std::unique_ptr<Nvml> nvml_;
  int index_;
  std::string name_;
  Bytes baseline_;
  Bytes whole_;  // the device's used memory at the latest sample
};

class SmiGauge : public MemoryGauge {
 public:
  SmiGauge(const SystemProbe& probe, std::string program, int index, std::string name, Bytes baseline)
      : probe_(probe), program_(std::move(program)), index_(index), name_(std::move(name)), baseline_(baseline) {}
  std::string kind() const override { return "gpu"; }
  std::string description() const override {
    return fmt::format("GPU {} {} used memory (nvidia-smi, every 100 ms)", index_, name_);
  }
  Result<Bytes> sample(const std::vector<ProcEntry>&) override {
    MEMPLAN_TRY(auto d, device());
    whole_ = d.used;
    return d.used > baseline_ ? d.used - baseline_ : Bytes::zero();
  }
  Bytes level(Bytes) const override { return whole_; }
  Result<DeviceMemory> device() override {
    const auto r = probe_.run({program_, "--query-gpu=index,uuid,name,memory.total,memory.free,memory.used",
                               "--format=csv,noheader,nounits"});
    if (!r.started || r.exit_code != 0)
      return make_error(ErrorCode::kNoGpu, fmt::format("{} failed: {}", program_, r.err));
    MEMPLAN_TRY(auto rows, parse_nvidia_smi_gpus(r.out));
    for (const auto& row : rows) {
      if (row.index != index_ || !row.total || !row.free) continue;
      name_ = row.name;
      return DeviceMemory{*row.total - *row.free, *row.total};
    }
    return make_error(ErrorCode::kNoGpu, fmt::format("{} reports no memory figures for GPU {}", program_, index_));
  }
  std::chrono::milliseconds interval() const override { return std::chrono::milliseconds(100); }
  void set_baseline(Bytes b) { baseline_ = b; }

 private:
  const SystemProbe& probe_;
  std::string program_;
  int index_;
  std::string name_;  // the driver's, from the latest answer
  Bytes baseline_;
  Bytes whole_;  // the device's used memory at the latest sample
};

// ---- running --------------------------------------------------------------------------------

void signal_tree(pid_t pgid, const std::vector<ProcEntry>& tree, int sig) {
  ::kill(-pgid, sig);
  for (const auto& p : tree)
    if (p.pgid != pgid) ::kill(p.pid, sig);
}

// Reaps zombies among our own children in the tree (orphans re-parented to the subreaper).
void reap_orphans(const std::vector<ProcEntry>& tree, pid_t self, pid_t leader) {
  for (const auto& p : tree)
    if (p.ppid == self && p.pid != leader) ::waitpid(p.pid, nullptr, WNOHANG);
}

// While a run lasts, memplan adopts orphaned descendants (PR_SET_CHILD_SUBREAPER) so a
// daemonizing child cannot escape to init.
class SubreaperScope {
 public:
  SubreaperScope() {
    ::prctl(PR_GET_CHILD_SUBREAPER, &old_);
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  }
  ~SubreaperScope() { ::prctl(PR_SET_CHILD_SUBREAPER, old_); }
  SubreaperScope(const SubreaperScope&) = delete;
  SubreaperScope& operator=(const SubreaperScope&) = delete;

 private:
  int old_ = 0;
};

}  // namespace

std::vector<ProcEntry> scan_processes(const std::string& proc_root) {
  std::vector<ProcEntry> out;
  DIR* dir = ::opendir(proc_root.c_str());
  if (dir == nullptr) return out;
  std::string text;
  while (const dirent* d = ::readdir(dir)) {
    if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
    if (!read_small(proc_root + "/" + d->d_name + "/stat", text)) continue;
    char state = '?';
    if (auto e = parse_stat(text, &state)) {
      if (state == 'Z' || state == 'X') e->rss = Bytes::zero();
      out.push_back(*e);
    }
  }
  ::closedir(dir);
  return out;
}

std::vector<ProcEntry> tree_of(const std::vector<ProcEntry>& all, pid_t pgid, pid_t self) {
  std::map<pid_t, std::vector<std::size_t>> children;
  std::set<pid_t> in;
  std::vector<std::size_t> queue;
  for (std::size_t i = 0; i < all.size(); ++i) {
    children[all[i].ppid].push_back(i);
    if (all[i].pgid == pgid || all[i].pid == pgid || (self > 0 && all[i].ppid == self)) {
      if (in.insert(all[i].pid).second) queue.push_back(i);
    }
  }
  for (std::size_t q = 0; q < queue.size(); ++q) {
    auto it = children.find(all[queue[q]].pid);
    if (it == children.end()) continue;
    for (std::size_t c : it->second)
      if (in.insert(all[c].pid).second) queue.push_back(c);
  }
  std::vector<ProcEntry> out;
  for (std::size_t i : queue) out.push_back(all[i]);
  return out;
}

std::unique_ptr<MemoryGauge> system_gauge(std::string meminfo_path, std::chrono::milliseconds interval) {
  return std::make_unique<SystemGauge>(std::move(meminfo_path), interval);
}

Result<std::unique_ptr<MemoryGauge>> gpu_gauge(const SystemProbe& probe, int index) {
  const auto smi_override = probe.env("MEMPLAN_NVIDIA_SMI");
  const bool nvml_off = probe.env("MEMPLAN_DISABLE_NVML").value_or("") == "1" || smi_override;
  std::string why;
  if (!nvml_off) {
    auto nvml = probe.load_nvml();
    if (nvml) {
      auto devs = (*nvml)->devices();
      if (devs && index >= 0 && static_cast<std::size_t>(index) < devs->size() && (*devs)[index].total &&
          (*devs)[index].free) {
        const auto& d = (*devs)[index];
        return std::unique_ptr<MemoryGauge>(
            std::make_unique<NvmlGauge>(std::move(*nvml), index, d.name, *d.total - *d.free));
      }
      why = devs ? fmt::format("NVML has no memory figures for GPU {}", index) : devs.error().message;
    } else {
      why = nvml.error().message;
    }
  }
  auto smi = std::make_unique<SmiGauge>(probe, smi_override.value_or("nvidia-smi"), index, "", Bytes::zero());
  auto first = smi->device();
  if (!first)
    return make_error(
        ErrorCode::kNoGpu,
        fmt::format("cannot watch GPU {}: {}{}", index, why.empty() ? "" : why + "; ", first.error().message),
        "use --watch system on a unified-memory machine or without a GPU");
  smi->set_baseline(first->used);
  return std::unique_ptr<MemoryGauge>(std::move(smi));
}

InterruptGuard::InterruptGuard() {
  g_interrupt.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int i = 0; i < 3; ++i) ::sigaction(kForwarded[i], &sa, &g_old[i]);
}

InterruptGuard::~InterruptGuard() {
  for (int i = 0; i < 3; ++i) ::sigaction(kForwarded[i], &g_old[i], nullptr);
}

int InterruptGuard::received() { return g_interrupt.load(); }

std::string shell_quote(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789_-./=:,+@%") == std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

Result<RunOutcome> run_watched(const RunSpec& spec, MemoryGauge& gauge) {
  if (spec.argv.empty()) return make_error(ErrorCode::kInvalidArgument, "no command to run");
  // A new file in the rung's own folder: never through a planted link, never over a file.
  const int log = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (log < 0)
    return make_error(ErrorCode::kIoError, fmt::format("cannot write {}: {}", spec.log_path, std::strerror(errno)));
  const int null_in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int errpipe[2];
  if (::pipe2(errpipe, O_CLOEXEC) != 0) {
    ::close(log);
    if (null_in >= 0) ::close(null_in);
    return make_error(ErrorCode::kIoError, fmt::format("pipe: {}", std::strerror(errno)));
  }
  std::vector<char*> cargv;
  for (const auto& a : spec.argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);

  SubreaperScope subreaper;
  // Signals stay blocked across fork so the child never runs memplan's handler.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t self = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // memplan killed outright: the leader goes too
    if (::getppid() != self) ::_exit(127);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT}) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (null_in >= 0) ::dup2(null_in, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::execvp(cargv[0], cargv.data());
    const int e = errno;
    (void)!::write(errpipe[1], &e, sizeof e);
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(errpipe[1]);
  ::close(log);
  if (null_in >= 0) ::close(null_in);
  if (pid < 0) {
    ::close(errpipe[0]);
    return make_error(ErrorCode::kIoError, fmt::format("fork: {}", std::strerror(fork_errno)));
  }
  ::setpgid(pid, pid);  // also in the child: whichever runs first
  const auto start = Clock::now();
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(errpipe[0], &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  ::close(errpipe[0]);
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    ::waitpid(pid, nullptr, 0);
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("cannot run '{}': {}", spec.argv[0], std::strerror(exec_errno)),
                      "give the training command after --, e.g. memplan profile -- python train.py --batch {batch}");
  }

  // Whatever ends this function early (an exception from a gauge, say) takes the tree with it.
  struct KillOnUnwind {
    pid_t pid;
    pid_t self;
    bool armed = true;
    ~KillOnUnwind() {
      if (!armed) return;
      const auto tree = tree_of(scan_processes(), pid, self);
      signal_tree(pid, tree, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      for (const auto& p : tree)
        if (p.ppid == self && p.pid != pid) ::waitpid(p.pid, nullptr, 0);
    }
  } guard{pid, self};

  RunOutcome out;
  out.pid = pid;
  const auto interval = spec.interval.value_or(gauge.interval());
  bool leader_done = false;
  std::optional<Clock::time_point> leader_exit;
  // Children still exiting when the leader is gone (data-loader workers) get this long by themselves.
  constexpr auto kStragglerWait = std::chrono::milliseconds(1000);
  // A process in uninterruptible sleep ignores even SIGKILL until its I/O ends; after this long
  // the run reports it instead of waiting forever (and the ladder starts nothing more).
  constexpr auto kGiveUpAfterKill = std::chrono::seconds(30);
  std::optional<Clock::time_point> term_sent;
  auto last_sample = start;
  auto last_tick = start;
  Bytes current;
  Bytes level;  // what --stop-at is compared with (gauge.level)
  std::optional<Error> gauge_error;

  auto terminate = [&](EndReason why, const std::vector<ProcEntry>& tree) {
    if (term_sent) return;
    if (out.reason == EndReason::kExited) out.reason = why;
    term_sent = Clock::now();
    signal_tree(pid, tree, SIGTERM);
    signal_tree(pid, tree, SIGCONT);  // a stopped process cannot act on SIGTERM
  };

  while (true) {
    if (!leader_done) {
      int status = 0;
      rusage ru{};
      const pid_t w = ::wait4(pid, &status, WNOHANG, &ru);
      if (w == pid) {
        leader_done = true;
        leader_exit = Clock::now();
        if (WIFEXITED(status)) out.exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) out.signal = WTERMSIG(status);
        out.kernel_max_rss = Bytes::of(static_cast<std::int64_t>(ru.ru_maxrss) * 1024);
      }
    }
    const auto tree = tree_of(scan_processes(), pid, self);
    const auto now = Clock::now();
    std::vector<ProcEntry> alive;
    for (const auto& p : tree)
      if (p.pid != pid || !leader_done) alive.push_back(p);
    const double gap = std::chrono::duration<double, std::milli>(now - last_sample).count();
    if (out.samples > 0) out.max_gap_ms = std::max(out.max_gap_ms, gap);
    last_sample = now;
    auto s = gauge.sample(alive);
    if (s) {
      current = *s;
      level = gauge.level(current);
      out.peak = std::max(out.peak, current);
      ++out.samples;
    } else if (!gauge_error) {
      gauge_error = s.error();
    }
    reap_orphans(tree, self, pid);
    bool any_running = false;
    for (const auto& p : alive) any_running = any_running || p.rss.count() > 0 || p.ppid != self;
    if (leader_done && alive.empty()) break;
    if (term_sent && now - *term_sent >= spec.grace + kGiveUpAfterKill) {
      out.unkillable = static_cast<int>(alive.size());
      break;
    }
    if (leader_done && !any_running) {
      // Only zombies of ours remain; the reaping above collects them next round.
    } else if (leader_done && !term_sent && now - *leader_exit >= kStragglerWait) {
      out.stragglers = static_cast<int>(alive.size());
      term_sent = Clock::now();
      signal_tree(pid, alive, SIGTERM);
      signal_tree(pid, alive, SIGCONT);
    }
    if (!term_sent) {
      if (const int sig = InterruptGuard::received()) {
        out.interrupt_signal = sig;
        terminate(EndReason::kInterrupted, alive);
      } else if (gauge_error) {
        terminate(EndReason::kGaugeFailed, alive);
      } else if (spec.stop_at && level > *spec.stop_at) {
        out.limit_sample = level;
        terminate(EndReason::kWatchdog, alive);
      } else if (spec.timeout.count() > 0 && now - start >= spec.timeout) {
        terminate(EndReason::kTimeout, alive);
      }
    } else if (now - *term_sent >= spec.grace && !alive.empty()) {
      if (!out.needed_sigkill) out.needed_sigkill = true;
      signal_tree(pid, alive, SIGKILL);
    }
    if (spec.on_tick && now - last_tick >= std::chrono::milliseconds(250)) {
      last_tick = now;
      spec.on_tick(std::chrono::duration<double>(now - start).count(), current, out.peak);
    }
    std::this_thread::sleep_for(interval);
  }
  guard.armed = false;
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  out.gauge_error = gauge_error;
  return out;
}

}  // namespace memplan::io

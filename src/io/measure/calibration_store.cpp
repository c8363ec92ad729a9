#include "io/measure/calibration_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace memplan::io {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kMeasurements = "measurements.jsonl";
constexpr const char* kFits = "calibration.json";

// An exclusive flock(2) on `path` (created 0600 if missing), held for one scope: the store's
// writers (profile --save appending, calibrate replacing) take turns (issue 34).
class StoreLock {
 public:
  explicit StoreLock(const fs::path& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd_ < 0) {
      error_ = std::strerror(errno);
      return;
    }
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      error_ = std::strerror(errno);
      break;
    }
  }
  ~StoreLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;
  const std::string& error() const { return error_; }

 private:
  int fd_ = -1;
  std::string error_;
};

// Writes all of `data` to `fd`, retrying short writes.
bool write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

json to_json(const MeasuredRun& r) {
  return json{{"host", r.machine.host},
              {"gpu", r.machine.gpu},
              {"driver", r.driver},
              {"watch", r.watch},
              {"model", r.model},
              {"method", r.method},
              {"config", r.config},
              {"command", r.command},
              {"micro_batch", r.micro_batch},
              {"grad_accum", r.grad_accum},
              {"seq_len", r.seq_len},
              {"measured_bytes", r.measured.count()},
              {"predicted_bytes", r.predicted ? json(r.predicted->count()) : json(nullptr)},
              {"time", r.time}};
}

MeasuredRun run_from_json(const json& j) {
  MeasuredRun r;
  r.machine.host = j.at("host").get<std::string>();
  r.machine.gpu = j.at("gpu").get<std::string>();
  r.driver = j.value("driver", "");
  r.watch = j.value("watch", "");
  r.model = j.value("model", "");
  r.method = j.value("method", "");
  r.config = j.value("config", "");
  r.command = j.value("command", "");
  r.micro_batch = j.value("micro_batch", std::int64_t{1});
  r.grad_accum = j.value("grad_accum", std::int64_t{1});
  r.seq_len = j.value("seq_len", std::int64_t{0});
  r.measured = Bytes::of(j.at("measured_bytes").get<std::int64_t>());
  if (j.contains("predicted_bytes") && !j.at("predicted_bytes").is_null())
    r.predicted = Bytes::of(j.at("predicted_bytes").get<std::int64_t>());
  r.time = j.value("time", "");
  return r;
}

Result<std::string> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return make_error(ErrorCode::kIoError, fmt::format("cannot read {}", p.string()));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

Result<std::string> data_dir() {
  if (auto d = env("MEMPLAN_DATA_DIR")) return *d;
  if (auto x = env("XDG_DATA_HOME")) return (fs::path(*x) / "memplan").string();
  if (auto h = env("HOME")) return (fs::path(*h) / ".local" / "share" / "memplan").string();
  return make_error(ErrorCode::kIoError, "no folder for memplan's data: HOME is not set",
                    "set MEMPLAN_DATA_DIR or XDG_DATA_HOME");
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Status append_measurements(const std::string& dir, const std::vector<MeasuredRun>& runs) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(ErrorCode::kIoError, fmt::format("cannot create {}: {}", dir, ec.message()));
  const fs::path p = fs::path(dir) / kMeasurements;
  // Whole records under the store's lock, in one write(2) with O_APPEND: two profile --save runs
  // never interleave their lines, whatever their length.
  std::string data;
  for (const auto& r : runs) data += to_json(r).dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  StoreLock lock(fs::path(dir) / ".lock");
  if (!lock.error().empty())
    return make_error(ErrorCode::kIoError, fmt::format("cannot lock {}/.lock: {}", dir, lock.error()));
  const int fd = ::open(p.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return make_error(ErrorCode::kIoError, fmt::format("cannot write {}: {}", p.string(), std::strerror(errno)));
  const bool ok = write_all(fd, data);
  const int err = errno;
  if (::close(fd) != 0 || !ok)
    return make_error(ErrorCode::kIoError, fmt::format("cannot write {}: {}", p.string(), std::strerror(ok ? errno : err)));
  return Ok{};
}

Result<std::vector<MeasuredRun>> read_measurements(const std::string& dir) {
  const fs::path p = fs::path(dir) / kMeasurements;
  std::vector<MeasuredRun> out;
  std::error_code ec;
  if (!fs::exists(p, ec)) return out;
  MEMPLAN_TRY(auto text, read_all(p));
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.push_back(run_from_json(json::parse(line)));
    } catch (const std::exception& e) {
      Error err = make_error(ErrorCode::kParseError, fmt::format("not a measured run: {}", e.what()),
                             "fix or delete the line; memplan profile --save writes one JSON object per line");
      err.where = SourceLocation{p.string(), n, 0};
      return err;
    }
  }
  return out;
}

Status write_fits(const std::string& dir, const std::vector<MachineFit>& fits) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(ErrorCode::kIoError, fmt::format("cannot create {}: {}", dir, ec.message()));
  json arr = json::array();
  for (const auto& f : fits) {
    const Calibration& c = f.calibration;
    arr.push_back({{"host", f.machine.host},
                   {"gpu", f.machine.gpu},
                   {"points", c.points},
                   {"scale", c.scale},
                   {"offset_bytes", c.offset_bytes},
                   {"rms_residual_bytes", c.rms_residual.count()},
                   {"max_residual_bytes", c.max_residual.count()},
                   {"min_predicted_bytes", c.min_predicted.count()},
                   {"max_predicted_bytes", c.max_predicted.count()},
                   {"fitted", f.fitted}});
  }
  const fs::path p = fs::path(dir) / kFits;
  const std::string data =
      json{{"schema", "memplan-calibration/1"}, {"machines", arr}}.dump(2, ' ', false, json::error_handler_t::replace) +
      "\n";
  // A temp name of this run's own (mkstemp), written whole, then renamed over the store under
  // its lock: two calibrate runs never write into one temp file (issue 34).
  StoreLock lock(fs::path(dir) / ".lock");
  if (!lock.error().empty())
    return make_error(ErrorCode::kIoError, fmt::format("cannot lock {}/.lock: {}", dir, lock.error()));
  std::string tmp = (fs::path(dir) / (std::string(kFits) + ".XXXXXX")).string();
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return make_error(ErrorCode::kIoError, fmt::format("cannot create a file in {}: {}", dir, std::strerror(errno)));
  const bool ok = write_all(fd, data) && ::fsync(fd) == 0;
  const int err = errno;
  if (::close(fd) != 0 || !ok) {
    ::unlink(tmp.c_str());
    return make_error(ErrorCode::kIoError, fmt::format("cannot write {}: {}", tmp, std::strerror(ok ? errno : err)));
  }
  ::chmod(tmp.c_str(), 0644);
  fs::rename(tmp, p, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    return make_error(ErrorCode::kIoError, fmt::format("cannot replace {}: {}", p.string(), ec.message()));
  }
  return Ok{};
}

Result<std::vector<MachineFit>> read_fits(const std::string& dir) {
  const fs::path p = fs::path(dir) / kFits;
  std::vector<MachineFit> out;
  std::error_code ec;
  if (!fs::exists(p, ec)) return out;
  MEMPLAN_TRY(auto text, read_all(p));
  try {
    const json j = json::parse(text);
    for (const auto& m : j.at("machines")) {
      MachineFit f;
      f.machine = {m.at("host").get<std::string>(), m.at("gpu").get<std::string>()};
      // Byte counts are integers: a float offset (-9.0e18) is refused, not printed as TiB.
      const auto integer = [&](const char* key, bool required) -> std::int64_t {
        if (!m.contains(key) && !required) return 0;
        const json& v = m.at(key);
        if (!v.is_number_integer()) throw std::runtime_error(fmt::format("\"{}\" must be an integer", key));
        return v.get<std::int64_t>();
      };
      f.calibration.points = static_cast<int>(std::clamp<std::int64_t>(integer("points", true), -1, 1 << 30));
      if (!m.at("scale").is_number()) throw std::runtime_error("\"scale\" must be a number");
      f.calibration.scale = m.at("scale").get<double>();
      f.calibration.offset_bytes = integer("offset_bytes", true);
      f.calibration.rms_residual = Bytes::of(integer("rms_residual_bytes", false));
      f.calibration.max_residual = Bytes::of(integer("max_residual_bytes", false));
      f.calibration.min_predicted = Bytes::of(std::max<std::int64_t>(0, integer("min_predicted_bytes", false)));
      f.calibration.max_predicted = Bytes::of(std::max<std::int64_t>(0, integer("max_predicted_bytes", false)));
      f.fitted = m.value("fitted", "");
      if (auto ok = check_calibration(f.calibration); !ok)
        throw std::runtime_error(fmt::format("the fit for {} on {}: {}", f.machine.gpu, f.machine.host,
                                             ok.error().message));
      out.push_back(f);
    }
  } catch (const std::exception& e) {
    Error err = make_error(ErrorCode::kParseError, fmt::format("not a calibration file: {}", e.what()),
                           "run memplan calibrate again to rewrite it");
    err.where = SourceLocation{p.string(), 0, 0};
    return err;
  }
  return out;
}

std::vector<MachineFit> fit_machines(const std::vector<MeasuredRun>& runs, const std::string& now) {
  std::vector<MachineId> order;
  std::map<std::pair<std::string, std::string>, std::vector<CalibrationPoint>> points;
  for (const auto& r : runs) {
    if (!r.predicted) continue;
    auto key = std::make_pair(r.machine.host, r.machine.gpu);
    if (!points.count(key)) order.push_back(r.machine);
    points[key].push_back({*r.predicted, r.measured});
  }
  std::vector<MachineFit> out;
  for (const auto& m : order) {
    auto c = fit_calibration(points[{m.host, m.gpu}]);
    if (c) out.push_back({m, *c, now});
  }
  return out;
}

}  // namespace memplan::io

// Helpers for tests that run the whole CLI in process (memplan::cli::run) against a stand-in
// nvidia-smi (tests/data/detect/fake-nvidia-smi) chosen through the documented environment.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

#include "cli/app.hpp"

namespace memplan::testing {

// Sets (or unsets) an environment variable for one scope, restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value) ::setenv(name_.c_str(), value->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

inline std::string detect_data(const std::string& file) {
  return std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/detect/" + file;
}

// The machine as detection sees it: the stand-in nvidia-smi printing `gpus_csv` (and `apps_csv`),
// no rocm-smi, `meminfo` for /proc/meminfo, and no visibility masks from the environment the
// tests run in.
class StandInMachine {
 public:
  explicit StandInMachine(const std::optional<std::string>& gpus_csv, const std::string& apps_csv = "",
                          const std::string& meminfo = "")
      : smi_("MEMPLAN_NVIDIA_SMI", gpus_csv ? detect_data("fake-nvidia-smi") : "/nonexistent/nvidia-smi"),
        gpus_("FAKE_NVIDIA_SMI_GPUS", gpus_csv ? std::optional<std::string>(detect_data(*gpus_csv)) : std::nullopt),
        apps_("FAKE_NVIDIA_SMI_APPS",
              apps_csv.empty() ? std::nullopt : std::optional<std::string>(detect_data(apps_csv))),
        rocm_("MEMPLAN_ROCM_SMI", "/nonexistent/rocm-smi"),
        meminfo_("MEMPLAN_PROC_MEMINFO",
                 meminfo.empty() ? "/nonexistent/meminfo" : detect_data(meminfo)),
        nvml_("MEMPLAN_DISABLE_NVML", "1"),
        cuda_("CUDA_VISIBLE_DEVICES", std::nullopt),
        hip_("HIP_VISIBLE_DEVICES", std::nullopt),
        rocr_("ROCR_VISIBLE_DEVICES", std::nullopt) {}

 private:
  ScopedEnv smi_, gpus_, apps_, rocm_, meminfo_, nvml_, cuda_, hip_, rocr_;
};

// A fresh directory under the system's temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "memplan-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Writes `text` to path()/name (creating directories) and returns the full path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path p = std::filesystem::path(path_) / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  std::string read(const std::string& name) const {
    std::ifstream in(std::filesystem::path(path_) / name, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::string path_;
};

// Runs a scope in another working directory, restoring the old one after.
class ScopedCwd {
 public:
  explicit ScopedCwd(const std::string& dir) : old_(std::filesystem::current_path()) {
    std::filesystem::current_path(dir);
  }
  ~ScopedCwd() {
    std::error_code ec;
    std::filesystem::current_path(old_, ec);
  }
  ScopedCwd(const ScopedCwd&) = delete;
  ScopedCwd& operator=(const ScopedCwd&) = delete;

 private:
  std::filesystem::path old_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct CliRun {
  int code = -1;
  std::string out, err;
};

inline CliRun run_cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  CliRun r;
  r.code = memplan::cli::run(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// `base` followed by `more`: a command line built from shared flags.
inline std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

// The cells of a text-table row: split where two or more spaces separate them.
inline std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  std::size_t spaces = 0;
  for (char c : line) {
    if (c == ' ') {
      ++spaces;
      continue;
    }
    if (spaces >= 2 && !cur.empty()) {
      out.push_back(cur);
      cur.clear();
    } else if (spaces == 1 && !cur.empty()) {
      cur += ' ';
    }
    spaces = 0;
    cur += c;
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// The line of `text` whose first cell is `first`, split into cells; empty if none.
inline std::vector<std::string> row(const std::string& text, const std::string& first) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto c = cells(line);
    if (!c.empty() && c.front() == first) return c;
  }
  return {};
}

}  // namespace memplan::testing

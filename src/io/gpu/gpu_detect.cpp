#include "io/gpu/gpu_detect.hpp"

#include <functional>

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/gpu/gpu_profiles.hpp"
#include "memplan/text.hpp"

extern char** environ;

namespace memplan::io {

namespace {

const char* const kSmiQuery = "--query-gpu=index,uuid,name,memory.total,memory.free,memory.used";
const char* const kSmiAppsQuery = "--query-compute-apps=gpu_uuid,pid,process_name,used_memory";
const char* const kSmiFormat = "--format=csv,noheader,nounits";

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = line.find(',', start);
    fields.push_back(trim(std::string_view(line).substr(start, comma == std::string::npos ? std::string::npos
                                                                                           : comma - start)));
    if (comma == std::string::npos) return fields;
    start = comma + 1;
  }
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::string t = trim(line);
    if (!t.empty()) out.push_back(std::move(t));
  }
  return out;
}

// "81559" or "81559 MiB" -> MiB; "[N/A]", "[Not Supported]" and the like -> nothing.
std::optional<Bytes> smi_mib(const std::string& field) {
  std::string t = field;
  if (t.size() > 4 && t.compare(t.size() - 4, 4, " MiB") == 0) t.resize(t.size() - 4);
  auto v = parse_int(t, "memory");
  if (!v || *v < 0) return std::nullopt;
  return Bytes::mib(static_cast<double>(*v));
}

Error smi_error(const std::string& what, const std::string& line, const std::string& expected) {
  return make_error(ErrorCode::kParseError, fmt::format("{}: unexpected line \"{}\"", what, line),
                    fmt::format("expected {}", expected));
}

std::string first_line(const std::string& s) {
  const auto lines = lines_of(s);
  return lines.empty() ? std::string() : lines.front();
}

// Why a program gave no answer, for the notes: "not found", "exit 9: NVIDIA-SMI has failed ...".
std::string failure(const SystemProbe::CommandResult& r) {
  if (!r.started) return "not found";
  std::string why = first_line(r.err);
  if (why.empty()) why = first_line(r.out);
  return why.empty() ? fmt::format("exit {}", r.exit_code) : fmt::format("exit {}: {}", r.exit_code, why);
}

std::string env_or(const SystemProbe& probe, const char* name, const char* fallback) {
  auto v = probe.env(name);
  return v && !v->empty() ? *v : std::string(fallback);
}

// ---------------------------------------------------------------------------------- backends

struct Found {
  std::vector<DetectedGpu> gpus;
  std::vector<std::optional<Bytes>> totals;  // parallel to gpus: empty when the driver had no figure
};

void add(Found& f, DetectedGpu g, std::optional<Bytes> total, std::optional<Bytes> free) {
  g.total = total.value_or(Bytes::zero());
  g.free = free.value_or(Bytes::zero());
  f.gpus.push_back(std::move(g));
  f.totals.push_back(total);
}

Result<Found> from_nvml(Nvml& nvml, const DetectOptions& options) {
  MEMPLAN_TRY(auto devices, nvml.devices());
  Found f;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    DetectedGpu g;
    g.index = static_cast<int>(i);
    g.uuid = devices[i].uuid;
    g.name = devices[i].name;
    g.vendor = "nvidia";
    g.source = "nvml";
    if (options.processes) {
      MEMPLAN_TRY(g.processes, nvml.compute_processes(static_cast<unsigned>(i)));
    }
    add(f, std::move(g), devices[i].total, devices[i].free);
  }
  return f;
}

Result<Found> from_nvidia_smi(const SystemProbe& probe, const std::string& smi, const DetectOptions& options,
                              std::vector<std::string>& notes) {
  const auto r = probe.run({smi, kSmiQuery, kSmiFormat});
  if (!r.started || r.exit_code != 0) {
    notes.push_back(fmt::format("{}: {}", smi, failure(r)));
    return Found{};
  }
  MEMPLAN_TRY(auto rows, parse_nvidia_smi_gpus(r.out));
  std::map<std::string, std::vector<GpuProcess>> by_uuid;
  if (options.processes && !rows.empty()) {
    const auto apps = probe.run({smi, kSmiAppsQuery, kSmiFormat});
    if (apps.started && apps.exit_code == 0) {
      MEMPLAN_TRY(auto procs, parse_nvidia_smi_processes(apps.out));
      for (auto& p : procs) by_uuid[p.gpu_uuid].push_back(std::move(p.process));
    } else {
      notes.push_back(fmt::format("{} {}: {}", smi, kSmiAppsQuery, failure(apps)));
    }
  }
  Found f;
  for (auto& row : rows) {
    DetectedGpu g;
    g.index = row.index;
    g.uuid = row.uuid;
    g.name = row.name;
    g.vendor = "nvidia";
    g.source = "nvidia-smi";
    g.processes = by_uuid[row.uuid];
    add(f, std::move(g), row.total, row.free);
  }
  return f;
}

Result<Found> detect_nvidia(const SystemProbe& probe, const DetectOptions& options, std::vector<std::string>& notes) {
  const auto smi_override = probe.env("MEMPLAN_NVIDIA_SMI");
  const bool have_override = smi_override && !smi_override->empty();
  const bool nvml_disabled = probe.env("MEMPLAN_DISABLE_NVML").value_or("") == "1";
  if (have_override) {
    notes.push_back(fmt::format("NVML skipped: MEMPLAN_NVIDIA_SMI={}", *smi_override));
  } else if (nvml_disabled) {
    notes.push_back("NVML skipped: MEMPLAN_DISABLE_NVML=1");
  } else {
    auto nvml = probe.load_nvml();
    if (!nvml) {
      notes.push_back(fmt::format("NVML not loaded: {}", nvml.error().message));
    } else {
      auto found = from_nvml(**nvml, options);
      if (found) {
        if (found->gpus.empty()) notes.push_back("NVML: no NVIDIA GPU");
        return found;
      }
      notes.push_back(fmt::format("NVML failed: {}", found.error().message));
    }
  }
  return from_nvidia_smi(probe, have_override ? *smi_override : std::string("nvidia-smi"), options, notes);
}

Result<Found> detect_amd(const SystemProbe& probe, std::vector<std::string>& notes) {
  const std::string smi = env_or(probe, "MEMPLAN_ROCM_SMI", "rocm-smi");
  const auto r = probe.run({smi, "--showproductname", "--showmeminfo", "vram", "--json"});
  if (!r.started || r.exit_code != 0) {
    notes.push_back(fmt::format("{}: {}", smi, failure(r)));
    return Found{};
  }
  MEMPLAN_TRY(auto rows, parse_rocm_smi(r.out));
  Found f;
  for (auto& row : rows) {
    DetectedGpu g;
    g.index = row.index;
    g.uuid = row.unique_id;
    g.name = row.name;
    g.vendor = "amd";
    g.source = "rocm-smi";
    const Bytes free = row.used < row.total ? row.total - row.used : Bytes::zero();
    add(f, std::move(g), row.total, free);
  }
  return f;
}

// A Jetson on which nvidia-smi is missing (JetPack before 6) still names itself in the device tree.
Found detect_jetson(const SystemProbe& probe) {
  Found f;
  auto model = probe.read_file("/proc/device-tree/model");
  if (!model) return f;
  std::string name = *model;
  name.erase(std::remove(name.begin(), name.end(), '\0'), name.end());
  name = trim(name);
  if (to_lower(name).find("jetson") == std::string::npos) return f;
  DetectedGpu g;
  g.name = name;
  g.vendor = "nvidia";
  g.source = "/proc/device-tree/model";
  add(f, std::move(g), std::nullopt, std::nullopt);
  return f;
}

// ---------------------------------------------------------------------------------- visibility

// CUDA's rules for CUDA_VISIBLE_DEVICES: a comma-separated list of indices or GPU-UUIDs (a unique
// prefix is enough); the first entry that names no GPU ends the list. The result is in list order.
// Indices are the driver's (nvidia-smi, rocm-smi) unless `by_position` (HIP_VISIBLE_DEVICES after
// ROCR_VISIBLE_DEVICES counts within what ROCR left visible).
Result<std::vector<std::size_t>> apply_mask(const std::vector<DetectedGpu>& gpus, const std::string& var,
                                            const std::string& value, bool by_position,
                                            std::vector<std::string>& notes) {
  std::vector<std::size_t> picked;
  const std::string v = trim(value);
  if (v.empty()) return picked;
  for (const std::string& token : split_csv_line(v)) {
    constexpr std::size_t kNone = static_cast<std::size_t>(-1);
    std::size_t hit = kNone;
    if (to_lower(token).rfind("mig-", 0) == 0)
      return make_error(ErrorCode::kUnsupported, fmt::format("{} names a MIG instance '{}'", var, token),
                        "memplan cannot see MIG slices; give the slice's memory with --gpu-memory SIZE");
    if (auto idx = parse_int(token, var)) {
      for (std::size_t i = 0; i < gpus.size(); ++i)
        if ((by_position ? static_cast<std::int64_t>(i) : gpus[i].index) == *idx) hit = i;
    } else {
      std::size_t matches = 0;
      for (std::size_t i = 0; i < gpus.size(); ++i) {
        const std::string& id = gpus[i].uuid;
        if (!id.empty() && to_lower(id).rfind(to_lower(token), 0) == 0) {
          hit = i;
          ++matches;
        }
      }
      if (matches > 1) hit = kNone;
    }
    if (hit == kNone || std::find(picked.begin(), picked.end(), hit) != picked.end()) {
      notes.push_back(fmt::format("{} entry '{}' names no GPU (or repeats one): it and what follows are ignored, "
                                  "as CUDA does",
                                  var, token));
      break;
    }
    picked.push_back(hit);
  }
  return picked;
}

Result<Found> restrict(Found f, const std::string& var, const std::string& value, bool by_position,
                       std::vector<std::string>& notes) {
  MEMPLAN_TRY(auto picked, apply_mask(f.gpus, var, value, by_position, notes));
  Found out;
  for (std::size_t i : picked) {
    out.gpus.push_back(f.gpus[i]);
    out.totals.push_back(f.totals[i]);
  }
  return out;
}

// ---------------------------------------------------------------------------------- unified memory

// The profile a driver's name and total memory match (match_detected_gpu over some list).
using ProfileMatcher = std::function<std::optional<GpuProfile>(std::string_view, Bytes)>;

Status fill_unified(const SystemProbe& probe, Found& f, const ProfileMatcher& match) {
  const std::string path = env_or(probe, "MEMPLAN_PROC_MEMINFO", "/proc/meminfo");
  std::optional<MemInfo> mem;
  for (std::size_t i = 0; i < f.gpus.size(); ++i) {
    DetectedGpu& g = f.gpus[i];
    const auto profile = match(g.name, f.totals[i].value_or(Bytes::zero()));
    const bool unified = !f.totals[i] || (profile && profile->unified);
    if (!unified) continue;
    if (!mem) {
      auto text = probe.read_file(path);
      if (!text)
        return make_error(ErrorCode::kIoError,
                          fmt::format("{} reports no memory size and {} cannot be read", g.name, path),
                          "give --gpu NAME or --gpu-memory SIZE");
      MEMPLAN_TRY(mem, parse_meminfo(*text, path));
    }
    g.total = mem->total;
    g.free = mem->available;
    g.unified = true;
    g.source += " + " + path;
    f.totals[i] = mem->total;
  }
  return Ok{};
}

std::string slug(const std::string& name) {
  std::string s;
  for (char c : to_lower(name)) {
    if (std::isalnum(static_cast<unsigned char>(c))) s += c;
    else if (!s.empty() && s.back() != '-') s += '-';
  }
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s.empty() ? "detected-gpu" : s;
}

}  // namespace

// ---------------------------------------------------------------------------------- parsers

Result<std::vector<SmiGpuRow>> parse_nvidia_smi_gpus(const std::string& text) {
  std::vector<SmiGpuRow> rows;
  for (const auto& line : lines_of(text)) {
    const auto f = split_csv_line(line);
    const auto bad = [&] {
      return smi_error("nvidia-smi", line, "index, uuid, name, memory.total, memory.free, memory.used");
    };
    if (f.size() != 6 || f[2].empty()) return bad();
    auto index = parse_int(f[0], "index");
    if (!index || *index < 0) return bad();
    SmiGpuRow r;
    r.index = static_cast<int>(*index);
    r.uuid = f[1];
    r.name = f[2];
    r.total = smi_mib(f[3]);
    r.free = smi_mib(f[4]);
    rows.push_back(std::move(r));
  }
  return rows;
}

Result<std::vector<SmiProcessRow>> parse_nvidia_smi_processes(const std::string& text) {
  std::vector<SmiProcessRow> rows;
  for (const auto& line : lines_of(text)) {
    if (line.rfind("No running", 0) == 0) continue;
    auto f = split_csv_line(line);
    if (f.size() < 4) return smi_error("nvidia-smi", line, "gpu_uuid, pid, process_name, used_memory");
    // A process name may itself hold commas: it is everything between the pid and the last field.
    std::string name = f[2];
    for (std::size_t i = 3; i + 1 < f.size(); ++i) name += "," + f[i];
    auto pid = parse_int(f[1], "pid");
    if (!pid) return smi_error("nvidia-smi", line, "gpu_uuid, pid, process_name, used_memory");
    SmiProcessRow r;
    r.gpu_uuid = f[0];
    r.process.pid = *pid;
    r.process.name = name;
    r.process.used = smi_mib(f.back()).value_or(Bytes::zero());
    rows.push_back(std::move(r));
  }
  return rows;
}

Result<std::vector<RocmGpuRow>> parse_rocm_smi(const std::string& text) {
  // rocm-smi may print warnings ("AMD GPU device(s) is/are in a low-power state") before the JSON.
  const auto brace = text.find('{');
  if (brace == std::string::npos)
    return make_error(ErrorCode::kParseError, fmt::format("rocm-smi: no JSON in \"{}\"", first_line(text)));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.substr(brace));
  } catch (const nlohmann::json::exception& e) {
    return make_error(ErrorCode::kParseError, fmt::format("rocm-smi: invalid JSON: {}", e.what()));
  }
  if (!j.is_object()) return make_error(ErrorCode::kParseError, "rocm-smi: expected a JSON object of cards");
  auto field = [](const nlohmann::json& card, std::initializer_list<const char*> names) -> std::string {
    for (const char* n : names) {
      auto it = card.find(n);
      if (it != card.end() && it->is_string() && !it->get<std::string>().empty() && it->get<std::string>() != "N/A")
        return it->get<std::string>();
    }
    return {};
  };
  std::vector<RocmGpuRow> rows;
  for (const auto& [key, card] : j.items()) {
    if (key.rfind("card", 0) != 0 || !card.is_object()) continue;  // "system": driver version etc.
    auto index = parse_int(key.substr(4), "card");
    if (!index) continue;
    RocmGpuRow r;
    r.index = static_cast<int>(*index);
    // ROCm 6 spells it "Card Series", ROCm 5 "Card series".
    r.name = field(card, {"Card Series", "Card series", "Card SKU", "Card Model", "Card model"});
    r.unique_id = field(card, {"Unique ID"});
    const std::string total = field(card, {"VRAM Total Memory (B)"});
    const std::string used = field(card, {"VRAM Total Used Memory (B)"});
    auto t = parse_int(total, "VRAM Total Memory (B)");
    auto u = parse_int(used, "VRAM Total Used Memory (B)");
    if (!t || !u || *t <= 0 || *u < 0)
      return make_error(ErrorCode::kParseError,
                        fmt::format("rocm-smi: {} has no usable \"VRAM Total Memory (B)\" / \"VRAM Total Used Memory "
                                    "(B)\" (got \"{}\" / \"{}\")",
                                    key, total, used));
    r.total = Bytes::of(*t);
    r.used = Bytes::of(*u);
    if (r.name.empty()) r.name = "AMD GPU";
    rows.push_back(std::move(r));
  }
  std::sort(rows.begin(), rows.end(), [](const RocmGpuRow& a, const RocmGpuRow& b) { return a.index < b.index; });
  return rows;
}

Result<MemInfo> parse_meminfo(const std::string& text, const std::string& origin) {
  std::optional<Bytes> total, available;
  for (const auto& line : lines_of(text)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon);
    if (key != "MemTotal" && key != "MemAvailable") continue;
    std::string value = trim(std::string_view(line).substr(colon + 1));
    if (value.size() > 3 && value.compare(value.size() - 3, 3, " kB") == 0) value.resize(value.size() - 3);
    auto kib = parse_int(value, key);
    if (!kib || *kib < 0)
      return make_error(ErrorCode::kParseError, fmt::format("{}: unexpected line \"{}\"", origin, line),
                        "expected \"Key:   <number> kB\"");
    (key == "MemTotal" ? total : available) = Bytes::kib(static_cast<double>(*kib));
  }
  if (!total || !available)
    return make_error(ErrorCode::kParseError,
                      fmt::format("{} has no {}", origin, !total ? "MemTotal" : "MemAvailable"));
  return MemInfo{*total, *available};
}

// ---------------------------------------------------------------------------------- detection

GpuProfile DetectedSystem::chosen_profile() const {
  const DetectedGpu& g = chosen_gpu();
  GpuProfile p;
  if (g.profile) {
    p = *g.profile;
  } else {
    p.name = slug(g.name);
    p.display_name = g.name;
    p.vendor = g.vendor;
    p.bf16 = true;  // unknown: assumed, so no bf16 warning can be given
    p.unified = g.unified;
    if (g.unified) p.system_reserve = default_system_reserve(g.total);
  }
  p.memory = g.total;
  return p;
}

namespace {

Result<DetectedSystem> detect_with(const SystemProbe& probe, const ProfileMatcher& match, const DetectOptions& options) {
  DetectedSystem sys;
  MEMPLAN_TRY(Found found, detect_nvidia(probe, options, sys.notes));
  std::string mask_var = "CUDA_VISIBLE_DEVICES";
  bool by_position = false;
  if (found.gpus.empty()) {
    MEMPLAN_TRY(found, detect_amd(probe, sys.notes));
    if (!found.gpus.empty()) {
      if (options.processes) sys.notes.push_back("processes are not listed for AMD GPUs");
      // ROCR_VISIBLE_DEVICES applies first; HIP_VISIBLE_DEVICES (or CUDA_VISIBLE_DEVICES, which
      // HIP also reads) then indexes into what it left.
      if (auto rocr = probe.env("ROCR_VISIBLE_DEVICES")) {
        MEMPLAN_TRY(found, restrict(std::move(found), "ROCR_VISIBLE_DEVICES", *rocr, false, sys.notes));
        sys.visibility = "ROCR_VISIBLE_DEVICES=" + *rocr;
        by_position = true;
      }
      mask_var = probe.env("HIP_VISIBLE_DEVICES") ? "HIP_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES";
    }
  }
  if (found.gpus.empty()) {
    found = detect_jetson(probe);
    if (!found.gpus.empty()) mask_var.clear();
  }
  if (found.gpus.empty()) {
    std::string tried;
    for (const auto& n : sys.notes) tried += (tried.empty() ? "" : "; ") + n;
    return make_error(ErrorCode::kNoGpu, fmt::format("no GPU found ({})", tried),
                      "give --gpu NAME (memplan gpus lists them) or --gpu-memory SIZE");
  }

  const std::size_t before = found.gpus.size();
  if (!mask_var.empty()) {
    if (auto mask = probe.env(mask_var)) {
      MEMPLAN_TRY(found, restrict(std::move(found), mask_var, *mask, by_position, sys.notes));
      sys.visibility += (sys.visibility.empty() ? "" : " ") + mask_var + "=" + *mask;
      if (found.gpus.empty())
        return make_error(ErrorCode::kNoGpu,
                          fmt::format("no GPU visible: {}=\"{}\" hides all {} GPU{}", mask_var, *mask, before,
                                      before == 1 ? "" : "s"),
                          "unset it, or give --gpu NAME or --gpu-memory SIZE");
    }
  }

  MEMPLAN_TRY(auto ok, fill_unified(probe, found, match));
  (void)ok;
  sys.gpus = std::move(found.gpus);
  for (auto& g : sys.gpus) g.profile = match(g.name, g.total);
  for (std::size_t i = 1; i < sys.gpus.size(); ++i) {
    const auto& a = sys.gpus[i];
    const auto& b = sys.gpus[sys.chosen];
    if (a.free < b.free || (a.free == b.free && a.total < b.total)) sys.chosen = i;
  }
  return sys;
}

}  // namespace

Result<DetectedSystem> detect_gpus(const SystemProbe& probe, const std::vector<GpuProfile>& profiles,
                                   const DetectOptions& options) {
  return detect_with(
      probe, [&](std::string_view name, Bytes total) { return match_detected_gpu(profiles, name, total); }, options);
}

Result<DetectedSystem> detect_gpus(const SystemProbe& probe, const DetectOptions& options) {
  return detect_with(
      probe, [](std::string_view name, Bytes total) { return match_detected_gpu(name, total); }, options);
}

Budget detected_budget(const DetectedGpu& gpu, Bytes safety_margin) {
  Budget b;
  b.safety_margin = safety_margin;
  if (!gpu.unified) {
    b.capacity = gpu.free;
    return b;
  }
  const Bytes reserve =
      gpu.profile && gpu.profile->unified ? gpu.profile->system_reserve : default_system_reserve(gpu.total);
  b.capacity = std::min(gpu.total, gpu.free + reserve);
  b.headroom = reserve;
  return b;
}

// ---------------------------------------------------------------------------------- the real machine

namespace {

// NVML declarations, from nvml.h (NVIDIA/go-nvml gen/nvml/nvml.h, NVML API 12): only what
// detection calls. nvmlReturn_t is a C enum, passed as int.
using nvmlReturn_t = int;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlMemory_t {  // nvmlMemory_st
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlProcessInfo_t {  // nvmlProcessInfo_v2_st, used by _v2 and _v3
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlErrorNotSupported = 3;
constexpr nvmlReturn_t kNvmlErrorInsufficientSize = 7;
constexpr unsigned kNvmlNameBuffer = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr unsigned long long kNvmlValueNotAvailable = ~0ULL;  // NVML_VALUE_NOT_AVAILABLE

class DlNvml : public Nvml {
 public:
  static Result<std::unique_ptr<Nvml>> open() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* why = dlerror();
      return make_error(ErrorCode::kIoError, why ? why : "libnvidia-ml.so.1: cannot open");
    }
    std::unique_ptr<DlNvml> n(new DlNvml(lib));
    const char* missing = n->bind();
    if (missing) return make_error(ErrorCode::kIoError, fmt::format("libnvidia-ml.so.1 has no {}", missing));
    if (const nvmlReturn_t rc = n->init_(); rc != kNvmlSuccess)
      return make_error(ErrorCode::kIoError, fmt::format("nvmlInit_v2: {}", n->error_string_(rc)));
    n->initialized_ = true;
    return std::unique_ptr<Nvml>(std::move(n));
  }

  ~DlNvml() override {
    if (initialized_) shutdown_();
    dlclose(lib_);
  }

  Result<std::vector<Device>> devices() override {
    unsigned count = 0;
    if (const auto rc = count_(&count); rc != kNvmlSuccess) return fail("nvmlDeviceGetCount_v2", rc);
    std::vector<Device> out;
    for (unsigned i = 0; i < count; ++i) {
      nvmlDevice_t d = nullptr;
      if (const auto rc = handle_(i, &d); rc != kNvmlSuccess) return fail("nvmlDeviceGetHandleByIndex_v2", rc);
      Device dev;
      char buf[kNvmlNameBuffer] = {};
      if (const auto rc = name_(d, buf, sizeof buf); rc != kNvmlSuccess) return fail("nvmlDeviceGetName", rc);
      dev.name = buf;
      char ubuf[kNvmlNameBuffer] = {};
      if (uuid_(d, ubuf, sizeof ubuf) == kNvmlSuccess) dev.uuid = ubuf;
      nvmlMemory_t mem{};
      const auto rc = memory_(d, &mem);
      if (rc == kNvmlSuccess) {
        dev.total = Bytes::of(static_cast<std::int64_t>(mem.total));
        dev.free = Bytes::of(static_cast<std::int64_t>(mem.free));
      } else if (rc != kNvmlErrorNotSupported) {  // NOT_SUPPORTED: unified memory (GB10)
        return fail("nvmlDeviceGetMemoryInfo", rc);
      }
      out.push_back(std::move(dev));
    }
    return out;
  }

  Result<std::vector<GpuProcess>> compute_processes(unsigned index) override {
    nvmlDevice_t d = nullptr;
    if (const auto rc = handle_(index, &d); rc != kNvmlSuccess) return fail("nvmlDeviceGetHandleByIndex_v2", rc);
    std::vector<nvmlProcessInfo_t> infos(16);
    unsigned n = 0;
    for (int attempt = 0; attempt < 4; ++attempt) {
      n = static_cast<unsigned>(infos.size());
      const auto rc = processes_(d, &n, infos.data());
      if (rc == kNvmlSuccess) break;
      if (rc != kNvmlErrorInsufficientSize) return fail("nvmlDeviceGetComputeRunningProcesses", rc);
      infos.resize(n + 8);  // processes come and go between the calls
      n = 0;
    }
    std::vector<GpuProcess> out;
    for (unsigned i = 0; i < n && i < infos.size(); ++i) {
      GpuProcess p;
      p.pid = infos[i].pid;
      if (infos[i].usedGpuMemory != kNvmlValueNotAvailable)
        p.used = Bytes::of(static_cast<std::int64_t>(infos[i].usedGpuMemory));
      char buf[256] = {};
      if (process_name_ && process_name_(infos[i].pid, buf, sizeof buf) == kNvmlSuccess) p.name = buf;
      out.push_back(std::move(p));
    }
    return out;
  }

 private:
  explicit DlNvml(void* lib) : lib_(lib) {}

  template <class F>
  bool sym(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib_, name));
    return f != nullptr;
  }

  // Returns the name of the first missing required symbol, or nullptr.
  const char* bind() {
    if (!sym(init_, "nvmlInit_v2")) return "nvmlInit_v2";
    if (!sym(shutdown_, "nvmlShutdown")) return "nvmlShutdown";
    if (!sym(error_string_, "nvmlErrorString")) return "nvmlErrorString";
    if (!sym(count_, "nvmlDeviceGetCount_v2")) return "nvmlDeviceGetCount_v2";
    if (!sym(handle_, "nvmlDeviceGetHandleByIndex_v2")) return "nvmlDeviceGetHandleByIndex_v2";
    if (!sym(name_, "nvmlDeviceGetName")) return "nvmlDeviceGetName";
    if (!sym(uuid_, "nvmlDeviceGetUUID")) return "nvmlDeviceGetUUID";
    if (!sym(memory_, "nvmlDeviceGetMemoryInfo")) return "nvmlDeviceGetMemoryInfo";
    if (!sym(processes_, "nvmlDeviceGetComputeRunningProcesses_v3") &&
        !sym(processes_, "nvmlDeviceGetComputeRunningProcesses_v2"))
      return "nvmlDeviceGetComputeRunningProcesses_v3";
    sym(process_name_, "nvmlSystemGetProcessName");  // optional: names are a nicety
    return nullptr;
  }

  Error fail(const char* call, nvmlReturn_t rc) const {
    return make_error(ErrorCode::kIoError, fmt::format("{}: {}", call, error_string_(rc)));
  }

  void* lib_;
  bool initialized_ = false;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*count_)(unsigned*) = nullptr;
  nvmlReturn_t (*handle_)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name_)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*uuid_)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*memory_)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*processes_)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*) = nullptr;
  nvmlReturn_t (*process_name_)(unsigned, char*, unsigned) = nullptr;
};

class ProcessProbe : public SystemProbe {
 public:
  CommandResult run(const std::vector<std::string>& argv) const override {
    // A wedged driver can hang nvidia-smi; detection gives up on a program after this long.
    constexpr auto kTimeout = std::chrono::seconds(20);
    CommandResult r;
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0) return r;
    if (pipe2(err_pipe, O_CLOEXEC) != 0) {
      close(out_pipe[0]);
      close(out_pipe[1]);
      return r;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out_pipe[1]);
    close(err_pipe[1]);
    if (rc != 0) {
      close(out_pipe[0]);
      close(err_pipe[0]);
      return r;
    }
    r.started = true;
    const auto deadline = std::chrono::steady_clock::now() + kTimeout;
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    std::string* sinks[2] = {&r.out, &r.err};
    int open_fds = 2;
    bool timed_out = false;
    while (open_fds > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        timed_out = true;
        break;
      }
      const int n = poll(fds, 2, static_cast<int>(left.count()));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buf[4096];
        const ssize_t got = read(fds[i].fd, buf, sizeof buf);
        if (got > 0) {
          sinks[i]->append(buf, static_cast<std::size_t>(got));
        } else if (got == 0 || errno != EINTR) {
          close(fds[i].fd);
          fds[i].fd = -1;
          --open_fds;
        }
      }
    }
    for (auto& f : fds)
      if (f.fd >= 0) close(f.fd);
    if (timed_out) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (timed_out) {
      r.exit_code = 124;
      r.err = fmt::format("timed out after {} s", kTimeout.count());
    } else {
      r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return r;
  }

  std::optional<std::string> read_file(const std::string& path) const override {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::optional<std::string> env(const std::string& name) const override {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  }

  Result<std::unique_ptr<Nvml>> load_nvml() const override { return DlNvml::open(); }
};

}  // namespace

std::unique_ptr<SystemProbe> SystemProbe::from_process() { return std::make_unique<ProcessProbe>(); }

}  // namespace memplan::io

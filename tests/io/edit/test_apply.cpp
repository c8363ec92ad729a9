// --apply: golden files compared byte for byte (written by hand in tests/data/configs/apply/),
// refusals, the backup rule, "nothing to change", and failures and crashes in the middle of a
// write (injected errors at every step, a child process killed mid-write and at random moments).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <functional>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "io/edit/apply.hpp"
#include "io/config/config_loader.hpp"

using namespace memplan;
using namespace memplan::io;
namespace stdfs = std::filesystem;

namespace {

const std::string kData = std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/configs/apply/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string data(const std::string& name) { return read_file(kData + name); }

std::string crlf(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') out += '\r';
    out += c;
  }
  return out;
}

LoadedConfig load(FileSystem& fs, std::vector<std::string> files) {
  ConfigRequest req;
  req.files = std::move(files);
  auto c = load_config(req, fs);
  if (!c) FAIL(c.error().to_string());
  return *c;
}

ApplyPlan plan(const LoadedConfig& c, Edits e) {
  auto p = plan_apply(c, e);
  if (!p) FAIL(p.error().to_string());
  return *p;
}

Edits edits(std::optional<std::int64_t> batch, std::optional<std::int64_t> accum, std::optional<std::int64_t> seq) {
  Edits e;
  e.micro_batch = batch;
  e.grad_accum = accum;
  e.seq_len = seq;
  return e;
}

// A scratch directory on the real disk, removed at the end.
struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (stdfs::temp_directory_path() / "memplan-apply-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() { stdfs::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream out(path + "/" + name, std::ios::binary);
    out << text;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : stdfs::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

// Fails the n-th file-system operation that changes something (counting from 0).
class FailingFileSystem : public MemoryFileSystem {
 public:
  int fail_at = -1;
  int ops = 0;

  Result<std::string> write_temp(const std::string& dir, const std::string& base, std::string_view content,
                                 const FileInfo& like) override {
    if (ops++ == fail_at) return make_error(ErrorCode::kIoError, "injected write failure");
    return MemoryFileSystem::write_temp(dir, base, content, like);
  }
  Status rename(const std::string& from, const std::string& to) override {
    if (ops++ == fail_at) return make_error(ErrorCode::kIoError, "injected rename failure");
    return MemoryFileSystem::rename(from, to);
  }
  Status exchange(const std::string& a, const std::string& b) override {
    if (ops++ == fail_at) return make_error(ErrorCode::kIoError, "injected exchange failure");
    return MemoryFileSystem::exchange(a, b);
  }
  Status sync_dir(const std::string& dir) override {
    if (ops++ == fail_at) return make_error(ErrorCode::kIoError, "injected sync failure");
    return MemoryFileSystem::sync_dir(dir);
  }
};

// The real disk, killed (SIGKILL) at a chosen point: after `kill_after_bytes` of a temporary
// file are written, or just before the n-th changing operation.
class CrashingFileSystem : public RealFileSystem {
 public:
  std::size_t kill_after_bytes = static_cast<std::size_t>(-1);
  int kill_at_op = -1;
  int ops = 0;

  explicit CrashingFileSystem(std::size_t chunk) { chunk_size_ = chunk; }

  Result<std::string> write_temp(const std::string& dir, const std::string& base, std::string_view content,
                                 const FileInfo& like) override {
    step();
    return RealFileSystem::write_temp(dir, base, content, like);
  }
  Status rename(const std::string& from, const std::string& to) override {
    step();
    return RealFileSystem::rename(from, to);
  }
  Status exchange(const std::string& a, const std::string& b) override {
    step();
    return RealFileSystem::exchange(a, b);
  }
  Status sync_dir(const std::string& dir) override {
    step();
    return RealFileSystem::sync_dir(dir);
  }

 protected:
  void after_chunk(std::size_t written, std::size_t) override {
    if (written >= kill_after_bytes) ::raise(SIGKILL);
  }

 private:
  void step() {
    if (ops++ == kill_at_op) ::raise(SIGKILL);
  }
};

// Runs `body` in a child process and returns how it ended: the signal, or 1000 + exit status.
template <class F>
int in_child(F body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFSIGNALED(status) ? WTERMSIG(status) : 1000 + WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("apply: a heavily commented file changes exactly the three values") {
  MemoryFileSystem fs;
  fs.files["hf_commented.yaml"] = data("hf_commented.yaml");
  LoadedConfig c = load(fs, {"hf_commented.yaml"});
  CHECK(c.diagnostics.empty());
  ApplyPlan p = plan(c, edits(8, 8, 4096));
  CHECK(render_dry_run(p) == data("hf_commented.diff"));
  auto r = commit_apply(p, fs);
  REQUIRE(r.has_value());
  CHECK(fs.files["hf_commented.yaml"] == data("hf_commented.expected.yaml"));
  CHECK(fs.files["hf_commented.yaml.backup"] == data("hf_commented.yaml"));
  CHECK(fs.files.size() == 2);  // no temporary file left behind
  CHECK(render_apply_result(p, *r) == "wrote hf_commented.yaml (backup: hf_commented.yaml.backup)\n"
                                      "  hf_commented.yaml:9: per_device_train_batch_size: 4 -> 8\n"
                                      "  hf_commented.yaml:10: gradient_accumulation_steps: 16 -> 8\n"
                                      "  hf_commented.yaml:13: max_length: 2048 -> 4096\n");

  // A second apply with the same values: nothing to change, nothing written, no new backup.
  LoadedConfig again = load(fs, {"hf_commented.yaml"});
  ApplyPlan p2 = plan(again, edits(8, 8, 4096));
  CHECK(p2.empty());
  CHECK(p2.unchanged == std::vector<std::string>{"hf_commented.yaml:9: per_device_train_batch_size is already 8",
                                                 "hf_commented.yaml:10: gradient_accumulation_steps is already 8",
                                                 "hf_commented.yaml:13: max_length is already 4096"});
  CHECK(render_dry_run(p2) == "nothing to change\n");
  auto r2 = commit_apply(p2, fs);
  REQUIRE(r2.has_value());
  CHECK(r2->written.empty());
  CHECK(fs.files.size() == 2);
  CHECK(fs.files["hf_commented.yaml.backup"] == data("hf_commented.yaml"));
}

TEST_CASE("apply: CRLF line endings are kept") {
  MemoryFileSystem fs;
  fs.files["w.yaml"] = crlf(data("hf_commented.yaml"));
  LoadedConfig c = load(fs, {"w.yaml"});
  ApplyPlan p = plan(c, edits(8, 8, 4096));
  REQUIRE(commit_apply(p, fs).has_value());
  CHECK(fs.files["w.yaml"] == crlf(data("hf_commented.expected.yaml")));
}

TEST_CASE("apply: keys absent from the file are added where the dialect has an obvious place") {
  MemoryFileSystem fs;
  fs.files["hf_insert.yaml"] = data("hf_insert.yaml");
  LoadedConfig c = load(fs, {"hf_insert.yaml"});
  ApplyPlan p = plan(c, edits(2, 4, 2048));
  REQUIRE(p.files.size() == 1);
  CHECK(p.files[0].changes == std::vector<std::string>{
                                  "hf_insert.yaml:3: added gradient_accumulation_steps: 4 (was not set: 1)",
                                  "hf_insert.yaml:4: added max_length: 2048 (was not set: 1024)"});
  CHECK(p.unchanged == std::vector<std::string>{"hf_insert.yaml:2: per_device_train_batch_size is already 2"});
  REQUIRE(commit_apply(p, fs).has_value());
  CHECK(fs.files["hf_insert.yaml"] == data("hf_insert.expected.yaml"));
  // The default already in effect needs no line.
  ApplyPlan none = plan(load(fs, {"hf_insert.yaml"}), edits(std::nullopt, std::nullopt, std::nullopt));
  CHECK(none.empty());
}

TEST_CASE("apply: a main file and a stage file, each value written where it came from") {
  MemoryFileSystem fs;
  fs.files["lightning/config.yaml"] = data("lightning/config.yaml");
  fs.files["lightning/stages/01_stage.yaml"] = data("lightning/stages/01_stage.yaml");
  LoadedConfig c = load(fs, {"lightning/config.yaml", "lightning/stages/01_stage.yaml"});
  ApplyPlan p = plan(c, edits(40, 6, std::nullopt));
  REQUIRE(p.files.size() == 2);
  CHECK(p.files[0].changes ==
        std::vector<std::string>{"lightning/config.yaml:10: training.trainer.accumulate_grad_batches: 5 -> 6"});
  CHECK(p.files[1].changes ==
        std::vector<std::string>{"lightning/stages/01_stage.yaml:3: data_loader.batch_size: 32 -> 40"});
  auto r = commit_apply(p, fs);
  REQUIRE(r.has_value());
  CHECK(fs.files["lightning/config.yaml"] == data("lightning/config.expected.yaml"));
  CHECK(fs.files["lightning/stages/01_stage.yaml"] == data("lightning/stages/01_stage.expected.yaml"));
  CHECK(r->backups == std::vector<std::string>{"lightning/config.yaml.backup", "lightning/stages/01_stage.yaml.backup"});
  CHECK(fs.files["lightning/stages/01_stage.yaml.backup"] == data("lightning/stages/01_stage.yaml"));
}

TEST_CASE("apply: torchtune null sequence length, a key added after batch_size, a multi-line flow list") {
  MemoryFileSystem fs;
  fs.files["torchtune_null.yaml"] = data("torchtune_null.yaml");
  LoadedConfig c = load(fs, {"torchtune_null.yaml"});
  ApplyPlan p = plan(c, edits(4, 2, 2048));
  REQUIRE(p.files.size() == 1);
  CHECK(p.files[0].changes == std::vector<std::string>{
                                  "torchtune_null.yaml:14: batch_size: 2 -> 4",
                                  "torchtune_null.yaml:15: added gradient_accumulation_steps: 2 (was not set: 1)",
                                  "torchtune_null.yaml:8: tokenizer.max_seq_len: null -> 2048"});
  REQUIRE(commit_apply(p, fs).has_value());
  CHECK(fs.files["torchtune_null.yaml"] == data("torchtune_null.expected.yaml"));
}

TEST_CASE("apply: a DeepSpeed JSON next to the YAML is kept in step") {
  MemoryFileSystem fs;
  fs.files["ds_mirror/train.yaml"] = data("ds_mirror/train.yaml");
  fs.files["ds_mirror/ds.json"] = data("ds_mirror/ds.json");
  LoadedConfig c = load(fs, {"ds_mirror/train.yaml"});
  ApplyPlan p = plan(c, edits(8, 4, std::nullopt));
  REQUIRE(p.files.size() == 2);
  CHECK(p.files[1].changes == std::vector<std::string>{"ds_mirror/ds.json:3: train_micro_batch_size_per_gpu: 4 -> 8",
                                                       "ds_mirror/ds.json:2: train_batch_size: 64 -> 256"});
  REQUIRE(commit_apply(p, fs).has_value());
  CHECK(fs.files["ds_mirror/train.yaml"] == data("ds_mirror/train.expected.yaml"));
  CHECK(fs.files["ds_mirror/ds.json"] == data("ds_mirror/ds.expected.json"));
}

TEST_CASE("apply refuses what it cannot write in place, and writes nothing") {
  MemoryFileSystem fs;
  fs.files["anchored.yaml"] = data("anchored.yaml");
  CHECK(plan_apply(load(fs, {"anchored.yaml"}), edits(4, std::nullopt, std::nullopt)).error().to_string() ==
        "anchored.yaml:3: cannot set micro_batch_size: the value is anchored as &mbs and reused at line 4; changing it "
        "would change those too; edit that line yourself");

  fs.files["lightning/config.yaml"] = data("lightning/config.yaml");
  CHECK(plan_apply(load(fs, {"lightning/config.yaml"}), edits(std::nullopt, std::nullopt, 2048)).error().to_string() ==
        "lightning/config.yaml: cannot write sequence length = 2048: this layout has no standard sequence-length key; "
        "name yours with --keys seq_len=KEY");

  fs.files["flow.yaml"] = "data_loader:\n  batch_size: 8\ntraining:\n  trainer: {devices: 1}\n";
  CHECK(plan_apply(load(fs, {"flow.yaml"}), edits(std::nullopt, 4, std::nullopt)).error().to_string() ==
        "flow.yaml:4: cannot add training.trainer.accumulate_grad_batches: the parent is a flow mapping ({...}); "
        "memplan only adds lines to block mappings; add `accumulate_grad_batches: 4` under training.trainer yourself");

  fs.files["hf.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: 2\n";
  CHECK(plan_apply(load(fs, {"hf.yaml"}), edits(0, std::nullopt, std::nullopt)).error().to_string() ==
        "--apply: micro-batch = 0 is out of range");
  CHECK(fs.files.size() == 4);  // nothing written, no backup
}

TEST_CASE("apply refuses a file that changed since it was read") {
  MemoryFileSystem fs;
  fs.files["hf.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: 2\n";
  ApplyPlan p = plan(load(fs, {"hf.yaml"}), edits(4, std::nullopt, std::nullopt));
  fs.files["hf.yaml"] += "# edited meanwhile\n";
  CHECK(commit_apply(p, fs).error().to_string() ==
        "hf.yaml: the file changed since memplan read it; nothing was written; run memplan again");
  CHECK(fs.files.size() == 1);
  CHECK(fs.files["hf.yaml"] == "model_name_or_path: m\nper_device_train_batch_size: 2\n# edited meanwhile\n");
}

TEST_CASE("apply never overwrites a backup that differs; it takes the next free name") {
  const std::string before = "model_name_or_path: m\nper_device_train_batch_size: 2\n";
  MemoryFileSystem fs;
  fs.files["hf.yaml"] = before;
  fs.files["hf.yaml.backup"] = "an older backup\n";
  ApplyPlan p = plan(load(fs, {"hf.yaml"}), edits(4, std::nullopt, std::nullopt));
  auto r = commit_apply(p, fs);
  REQUIRE(r.has_value());
  CHECK(r->backups == std::vector<std::string>{"hf.yaml.backup.1"});
  CHECK(fs.files["hf.yaml.backup"] == "an older backup\n");
  CHECK(fs.files["hf.yaml.backup.1"] == before);

  // A backup that already holds the current content is reused, not duplicated.
  MemoryFileSystem same;
  same.files["hf.yaml"] = before;
  same.files["hf.yaml.backup"] = before;
  auto r2 = commit_apply(plan(load(same, {"hf.yaml"}), edits(4, std::nullopt, std::nullopt)), same);
  REQUIRE(r2.has_value());
  CHECK(r2->backups == std::vector<std::string>{"hf.yaml.backup"});
  CHECK(same.files.size() == 2);

  MemoryFileSystem none;
  none.files["hf.yaml"] = before;
  auto r3 = commit_apply(plan(load(none, {"hf.yaml"}), edits(4, std::nullopt, std::nullopt)), none,
                         ApplyOptions{/*backup=*/false});
  REQUIRE(r3.has_value());
  CHECK(none.files.size() == 1);
}

TEST_CASE("apply: a failure at any step leaves every file as it was") {
  const std::string main_before = data("lightning/config.yaml");
  const std::string stage_before = data("lightning/stages/01_stage.yaml");
  auto fresh = [&](FailingFileSystem& fs) {
    fs.files["lightning/config.yaml"] = main_before;
    fs.files["lightning/stages/01_stage.yaml"] = stage_before;
  };
  // How many changing operations a successful apply takes.
  FailingFileSystem ok;
  fresh(ok);
  ApplyPlan p = plan(load(ok, {"lightning/config.yaml", "lightning/stages/01_stage.yaml"}), edits(40, 6, std::nullopt));
  REQUIRE(commit_apply(p, ok).has_value());
  const int total = ok.ops;
  CHECK(total == 12);  // per file: backup (write, rename, sync) and the file itself (write, exchange, sync)

  for (int k = 0; k < total; ++k) {
    INFO("failing operation " << k);
    FailingFileSystem fs;
    fresh(fs);
    fs.fail_at = k;
    auto r = commit_apply(p, fs);
    REQUIRE_FALSE(r.has_value());
    CHECK(fs.files["lightning/config.yaml"] == main_before);
    CHECK(fs.files["lightning/stages/01_stage.yaml"] == stage_before);
    for (const auto& [name, text] : fs.files) {
      CHECK(name.find(".memplan-") == std::string::npos);  // no temporary file left
      if (name.size() > 7 && name.compare(name.size() - 7, 7, ".backup") == 0)
        CHECK((text == main_before || text == stage_before));
    }
  }
  // A failure writing the second file restores the first and says so.
  FailingFileSystem second;
  fresh(second);
  second.fail_at = 10;  // the exchange that puts the stage file in place
  CHECK(commit_apply(p, second).error().to_string() ==
        "lightning/stages/01_stage.yaml: injected exchange failure; restored lightning/config.yaml");
}

TEST_CASE("apply on disk: symlinks are followed, permissions kept, the backup sits next to the name given") {
  TempDir dir;
  stdfs::create_directory(dir / "real");
  const std::string before = "model_name_or_path: m\nper_device_train_batch_size: 2  # keep\n";
  dir.write("real/train.yaml", before);
  REQUIRE(::chmod((dir / "real/train.yaml").c_str(), 0640) == 0);
  stdfs::create_symlink("real/train.yaml", dir / "link.yaml");

  RealFileSystem fs;
  ApplyPlan p = plan(load(fs, {dir / "link.yaml"}), edits(4, std::nullopt, std::nullopt));
  REQUIRE(commit_apply(p, fs).has_value());
  CHECK(stdfs::is_symlink(dir / "link.yaml"));
  CHECK(read_file(dir / "real/train.yaml") == "model_name_or_path: m\nper_device_train_batch_size: 4  # keep\n");
  struct stat st {};
  REQUIRE(::stat((dir / "real/train.yaml").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
  CHECK_FALSE(stdfs::is_symlink(dir / "link.yaml.backup"));
  CHECK(read_file(dir / "link.yaml.backup") == before);
  CHECK(dir.names() == std::vector<std::string>{"link.yaml", "link.yaml.backup", "real"});
}

TEST_CASE("apply on disk: a process killed in the middle of writing leaves the original intact") {
  TempDir dir;
  // Big enough that the temporary file is written in many chunks.
  std::string before = "# a long header\n";
  for (int i = 0; i < 2000; ++i) before += "# comment line " + std::to_string(i) + " that the edit must keep\n";
  before += "model_name_or_path: m\nper_device_train_batch_size: 2\n";
  dir.write("train.yaml", before);
  RealFileSystem real;
  ApplyPlan p = plan(load(real, {dir / "train.yaml"}), edits(16, std::nullopt, std::nullopt));
  const std::string after = p.files[0].after;

  const int sig = in_child([&] {
    CrashingFileSystem fs(/*chunk=*/4096);
    fs.kill_after_bytes = after.size() / 2;
    (void)commit_apply(p, fs, ApplyOptions{/*backup=*/false});
  });
  CHECK(sig == SIGKILL);
  CHECK(read_file(dir / "train.yaml") == before);
  // The half-written temporary file is all that is left; it never replaced the config.
  const auto names = dir.names();
  REQUIRE(names.size() == 2);
  CHECK(names[0].rfind(".train.yaml.memplan-", 0) == 0);

  // Killed just before each step in turn: the file is always the old or the new one, whole.
  for (int k = 0; k < 6; ++k) {
    INFO("killed before operation " << k);
    dir.write("train.yaml", before);
    for (const auto& n : dir.names())
      if (n != "train.yaml") stdfs::remove(dir / n);
    const int s = in_child([&] {
      CrashingFileSystem fs(/*chunk=*/1 << 16);
      fs.kill_at_op = k;
      (void)commit_apply(p, fs);
    });
    const std::string now = read_file(dir / "train.yaml");
    CHECK((now == before || now == after));
    CHECK((s == SIGKILL || (s == 1000 && now == after)));
    if (stdfs::exists(dir / "train.yaml.backup")) CHECK(read_file(dir / "train.yaml.backup") == before);
  }
}

TEST_CASE("apply on disk: killed at random moments by another process, the file is never a mix") {
  TempDir dir;
  std::string a = "per_device_train_batch_size: 2\nmodel_name_or_path: m\n";
  for (int i = 0; i < 40000; ++i) a += "# padding so that a write takes a while " + std::to_string(i) + "\n";
  dir.write("train.yaml", a);
  RealFileSystem real;
  const ApplyPlan to_b = plan(load(real, {dir / "train.yaml"}), edits(3, std::nullopt, std::nullopt));
  const std::string b = to_b.files[0].after;
  MemoryFileSystem mem;
  mem.files[dir / "train.yaml"] = b;
  const ApplyPlan to_a = plan(load(mem, {dir / "train.yaml"}), edits(2, std::nullopt, std::nullopt));
  REQUIRE(to_a.files[0].after == a);

  std::mt19937 rng(12345);
  for (int round = 0; round < 8; ++round) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      RealFileSystem fs;
      for (int i = 0; i < 1000; ++i) {
        (void)commit_apply(to_b, fs, ApplyOptions{false});
        (void)commit_apply(to_a, fs, ApplyOptions{false});
      }
      ::_exit(0);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500 + rng() % 20000));
    ::kill(pid, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    const std::string now = read_file(dir / "train.yaml");
    CHECK((now == a || now == b));
    for (const auto& n : dir.names())
      if (n != "train.yaml") stdfs::remove(dir / n);
    dir.write("train.yaml", a);
  }
}

// ---- issue 11: --apply as a transaction ----

namespace {

// What the CLI does for `plan --apply`: lock, read, plan, write. Returns 0 on success, 1 on a
// refusal or conflict (the error on stderr), in a forked child.
int apply_in_child(const std::string& path, Edits e) {
  RealFileSystem fs;
  auto lock = fs.lock(path);
  if (!lock) return 2;
  ConfigRequest req;
  req.files = {path};
  auto c = load_config(req, fs);
  if (!c) return 3;
  auto p = plan_apply(*c, e);
  if (!p) return 4;
  auto r = commit_apply(*p, fs, ApplyOptions{/*backup=*/false});
  return r ? 0 : 1;
}

pid_t spawn(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A MemoryFileSystem in which "another program" acts at one chosen moment of commit_apply.
class RacingFileSystem : public MemoryFileSystem {
 public:
  std::function<void(RacingFileSystem&)> before_exchange;  // runs once, just before the first exchange
  std::function<void(RacingFileSystem&, const std::string&)> before_remove;  // runs before each remove

  // Another program saves `text` the way editors do: a new file renamed over the name.
  void save_by_rename(const std::string& path, const std::string& text) {
    files[path + ".editor-tmp"] = text;
    (void)MemoryFileSystem::rename(path + ".editor-tmp", path);
  }
  Status exchange(const std::string& a, const std::string& b) override {
    if (before_exchange) {
      auto f = std::move(before_exchange);
      before_exchange = nullptr;
      f(*this);
    }
    return MemoryFileSystem::exchange(a, b);
  }
  Status remove(const std::string& path) override {
    if (before_remove) before_remove(*this, path);
    return MemoryFileSystem::remove(path);
  }
};

const std::string kHf = "model_name_or_path: m\nper_device_train_batch_size: 2\ngradient_accumulation_steps: 1\n";

}  // namespace

TEST_CASE("apply (issue 11 item 1): hundreds of concurrent pairs of --apply on one file; neither loses the other's change") {
  TempDir dir;
  const std::string path = dir / "train.yaml";
  // One run changes the micro-batch, the other the accumulation: when both report success, the
  // file must carry both changes (the second run read the first one's result).
  const std::string both = "model_name_or_path: m\nper_device_train_batch_size: 3\ngradient_accumulation_steps: 7\n";
  int both_ok = 0;
  for (int pair = 0; pair < 200; ++pair) {
    dir.write("train.yaml", kHf);
    const pid_t a = spawn([&] { return apply_in_child(path, edits(3, std::nullopt, std::nullopt)); });
    const pid_t b = spawn([&] { return apply_in_child(path, edits(std::nullopt, 7, std::nullopt)); });
    const int ra = wait_exit(a), rb = wait_exit(b);
    INFO("pair " << pair << ": exit codes " << ra << " and " << rb);
    REQUIRE(ra == 0);
    REQUIRE(rb == 0);
    REQUIRE(read_file(path) == both);
    both_ok += 1;
  }
  CHECK(both_ok == 200);
  CHECK(dir.names() == std::vector<std::string>{"train.yaml"});  // no temporary file left
}

TEST_CASE("apply (issue 11 item 2): an editor saving while --apply runs never loses its last save") {
  TempDir dir;
  const std::string path = dir / "train.yaml";
  auto text = [](int edit) {
    return fmt::format("model_name_or_path: m\nper_device_train_batch_size: 2\n# edit {}\n", edit);
  };
  constexpr int kRounds = 60, kEdits = 12;
  int memplan_wrote = 0;
  for (int round = 0; round < kRounds; ++round) {
    dir.write("train.yaml", text(0));
    const pid_t editor = spawn([&] {
      for (int e = 1; e <= kEdits; ++e) {
        const std::string t = text(e);
        if (e % 2 == 1 && e != kEdits) {
          // In place, as `cat > train.yaml` or an editor without backups writes.
          const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
          if (fd < 0 || ::write(fd, t.data(), t.size()) != static_cast<ssize_t>(t.size())) return 1;
          ::close(fd);
        } else {
          // A new file renamed over the name, as vim, VS Code and git checkout do.
          const std::string tmp = path + ".editor";
          std::ofstream(tmp, std::ios::binary) << t;
          if (::rename(tmp.c_str(), path.c_str()) != 0) return 1;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50 * (e % 4)));
      }
      return 0;
    });
    const pid_t memplan = spawn([&] {
      int wrote = 0;
      for (int i = 0; i < kEdits; ++i) wrote += apply_in_child(path, edits(3 + i % 3, std::nullopt, std::nullopt)) == 0;
      return wrote > 0 ? 0 : 1;
    });
    REQUIRE(wait_exit(editor) == 0);
    memplan_wrote += wait_exit(memplan) == 0;
    const std::string now = read_file(path);
    INFO("round " << round << ":\n" << now);
    // The editor's last save is in the file: as it wrote it, or with memplan's change made on top.
    CHECK(now.find("# edit " + std::to_string(kEdits) + "\n") != std::string::npos);
    for (const auto& n : dir.names()) CHECK(n.find(".memplan-") == std::string::npos);
  }
  CHECK(memplan_wrote > 0);  // the race was real: memplan did write in some rounds
}

TEST_CASE("apply (issue 11 item 2): a save between the last check and the swap is swapped back") {
  RacingFileSystem fs;
  fs.files["hf.yaml"] = kHf;
  ApplyPlan p = plan(load(fs, {"hf.yaml"}), edits(4, std::nullopt, std::nullopt));
  fs.before_exchange = [](RacingFileSystem& f) { f.save_by_rename("hf.yaml", "saved by an editor\n"); };
  CHECK(commit_apply(p, fs, ApplyOptions{false}).error().to_string() ==
        "hf.yaml: another program changed the file while memplan was writing it; its change is kept and memplan's "
        "was not written; nothing was written; run memplan again");
  CHECK(fs.files["hf.yaml"] == "saved by an editor\n");
  CHECK(fs.files.size() == 1);
}

TEST_CASE("apply (issue 11 item 2): an in-place write into the replaced file is put back") {
  RacingFileSystem fs;
  fs.files["hf.yaml"] = kHf;
  ApplyPlan p = plan(load(fs, {"hf.yaml"}), edits(4, std::nullopt, std::nullopt));
  // The program had the file open and writes through its descriptor after memplan's swap: the
  // write lands in the old file, which only memplan's lock still reaches.
  fs.before_remove = [](RacingFileSystem& f, const std::string& path) {
    if (path.find(".memplan-") != std::string::npos && f.files[path] == kHf) f.files[path] = kHf + "# appended\n";
  };
  CHECK(commit_apply(p, fs, ApplyOptions{false}).error().to_string() ==
        "hf.yaml: another program changed the file while memplan was writing it; its change is kept and memplan's "
        "was not written; nothing was written; run memplan again");
  CHECK(fs.files["hf.yaml"] == kHf + "# appended\n");
}

TEST_CASE("apply: where the file system cannot exchange names, a plain rename does the swap") {
  MemoryFileSystem fs;
  fs.can_exchange = false;
  fs.files["hf.yaml"] = kHf;
  ApplyPlan p = plan(load(fs, {"hf.yaml"}), edits(4, std::nullopt, std::nullopt));
  REQUIRE(commit_apply(p, fs, ApplyOptions{false}).has_value());
  CHECK(fs.files["hf.yaml"] == "model_name_or_path: m\nper_device_train_batch_size: 4\ngradient_accumulation_steps: 1\n");
  CHECK(fs.files.size() == 1);
}

TEST_CASE("apply (issue 11 items 1 and 4): a failure puts back only what memplan wrote, and never advises losing an edit") {
  const std::string main_before = data("lightning/config.yaml");
  const std::string stage_before = data("lightning/stages/01_stage.yaml");
  auto fresh = [&](FailingFileSystem& fs) {
    fs.files["lightning/config.yaml"] = main_before;
    fs.files["lightning/stages/01_stage.yaml"] = stage_before;
  };
  FailingFileSystem probe;
  fresh(probe);
  const ApplyPlan p =
      plan(load(probe, {"lightning/config.yaml", "lightning/stages/01_stage.yaml"}), edits(40, 6, std::nullopt));

  // Another program (another memplan finishing the same change) rewrote the first file after
  // memplan did, with the very same text: it is left alone, not "restored".
  class OtherWriter : public FailingFileSystem {
   public:
    Status exchange(const std::string& a, const std::string& b) override {
      if (b == "lightning/stages/01_stage.yaml") {
        const std::string same = files["lightning/config.yaml"];
        files["other.tmp"] = same;
        (void)MemoryFileSystem::rename("other.tmp", "lightning/config.yaml");
        return make_error(ErrorCode::kIoError, "injected exchange failure");
      }
      return FailingFileSystem::exchange(a, b);
    }
  };
  OtherWriter other;
  fresh(other);
  const std::string message = commit_apply(p, other).error().to_string();
  CHECK(message == "lightning/stages/01_stage.yaml: injected exchange failure; left lightning/config.yaml as another "
                   "program wrote it after memplan did");
  CHECK(other.files["lightning/config.yaml"] == p.files[0].after);

  // Putting back the first file fails: the message says what the file holds (memplan's change)
  // and where the original is, which is true because memplan checked that it holds its change.
  class NoRestore : public FailingFileSystem {
   public:
    int exchanges = 0;
    Result<std::string> write_temp(const std::string& dir, const std::string& base, std::string_view content,
                                   const FileInfo& like) override {
      if (exchanges >= 2) return make_error(ErrorCode::kIoError, "disk full");
      return FailingFileSystem::write_temp(dir, base, content, like);
    }
    Status exchange(const std::string& a, const std::string& b) override {
      if (++exchanges == 2) return make_error(ErrorCode::kIoError, "injected exchange failure");
      return FailingFileSystem::exchange(a, b);
    }
  };
  NoRestore stuck;
  fresh(stuck);
  CHECK(commit_apply(p, stuck).error().to_string() ==
        "lightning/stages/01_stage.yaml: injected exchange failure; could not put back the original of "
        "lightning/config.yaml: it holds memplan's change, and its backup holds the original");
  CHECK(stuck.files["lightning/config.yaml"] == p.files[0].after);
  CHECK(stuck.files["lightning/config.yaml.backup"] == main_before);
}

TEST_CASE("apply (issue 11 item 3): files the user may not write are refused before anything is written") {
  SECTION("read-only (0444), even for root") {
    TempDir dir;
    dir.write("train.yaml", kHf);
    REQUIRE(::chmod((dir / "train.yaml").c_str(), 0444) == 0);
    RealFileSystem fs;
    ApplyPlan p = plan(load(fs, {dir / "train.yaml"}), edits(4, std::nullopt, std::nullopt));
    CHECK(commit_apply(p, fs).error().to_string() ==
          dir / "train.yaml" +
              ": the file is read-only for you (mode 0444); nothing was written; memplan never replaces a file you "
              "cannot write: make it writable, or make the change yourself (--dry-run shows it)");
    CHECK(read_file(dir / "train.yaml") == kHf);
    CHECK(dir.names() == std::vector<std::string>{"train.yaml"});
  }
  SECTION("owned by another user: refused for that user, kept by root") {
    TempDir dir;
    REQUIRE(::chmod(dir.path.c_str(), 0777) == 0);
    dir.write("train.yaml", kHf);
    REQUIRE(::chmod((dir / "train.yaml").c_str(), 0666) == 0);
    const std::string path = dir / "train.yaml";
    if (::geteuid() == 0) {
      // As another user (nobody), in a directory everyone may write: the file stays root's.
      const pid_t child = spawn([&] {
        if (::setgid(65534) != 0 || ::setuid(65534) != 0) return 10;
        RealFileSystem fs;
        ConfigRequest req;
        req.files = {path};
        auto c = load_config(req, fs);
        if (!c) return 11;
        auto p = plan_apply(*c, edits(4, std::nullopt, std::nullopt));
        if (!p) return 12;
        auto r = commit_apply(*p, fs);
        if (r) return 13;
        return r.error().message.rfind("the file belongs to another user or group (uid 0, gid 0)", 0) == 0 ? 0 : 14;
      });
      CHECK(wait_exit(child) == 0);
      CHECK(read_file(path) == kHf);
      CHECK(dir.names() == std::vector<std::string>{"train.yaml"});
      // Root applying to nobody's file keeps nobody as the owner.
      REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
      RealFileSystem fs;
      REQUIRE(commit_apply(plan(load(fs, {path}), edits(4, std::nullopt, std::nullopt)), fs).has_value());
      struct stat st {};
      REQUIRE(::stat(path.c_str(), &st) == 0);
      CHECK(st.st_uid == 65534u);
      CHECK(st.st_gid == 65534u);
      CHECK((st.st_mode & 07777) == 0666);
    }
    // The rule itself, whoever runs the tests.
    MemoryFileSystem mem;
    mem.files["hf.yaml"] = kHf;
    FileInfo theirs;
    theirs.uid = 1234;
    theirs.gid = 1234;
    theirs.keeps_owner = false;
    mem.info["hf.yaml"] = theirs;
    CHECK(commit_apply(plan(load(mem, {"hf.yaml"}), edits(4, std::nullopt, std::nullopt)), mem).error().to_string() ==
          "hf.yaml: the file belongs to another user or group (uid 1234, gid 1234); a replacement written by you "
          "would change that, so nothing was written; run memplan as the file's owner, or make the change yourself "
          "(--dry-run shows it)");
  }
  SECTION("hard links: replacing one name would split them") {
    TempDir dir;
    dir.write("train.yaml", kHf);
    REQUIRE(::link((dir / "train.yaml").c_str(), (dir / "other.yaml").c_str()) == 0);
    RealFileSystem fs;
    ApplyPlan p = plan(load(fs, {dir / "train.yaml"}), edits(4, std::nullopt, std::nullopt));
    CHECK(commit_apply(p, fs).error().to_string() ==
          dir / "train.yaml" +
              ": the file has 2 hard links; replacing it would leave the other names with the old content, so "
              "nothing was written; make the change yourself (--dry-run shows it)");
    CHECK(read_file(dir / "other.yaml") == kHf);
  }
}

TEST_CASE("FileSystem::lock: one holder at a time, re-entrant in a process, follows a renamed-over name") {
  TempDir dir;
  dir.write("train.yaml", kHf);
  const std::string path = dir / "train.yaml";
  RealFileSystem fs;
  auto a = fs.lock(path);
  REQUIRE(a.has_value());
  auto again = fs.lock(path);
  REQUIRE(again.has_value());
  CHECK(a->get() == again->get());
  CHECK((*a)->read_locked().value() == kHf);
  // Another process waits, and gives up after its timeout with a message naming the file.
  const pid_t child = spawn([&] {
    RealFileSystem other;
    other.lock_timeout_ms = 200;
    auto l = other.lock(path);
    return !l && l.error().message.find("has held its lock") != std::string::npos ? 0 : 1;
  });
  CHECK(wait_exit(child) == 0);
  a->reset();
  again->reset();
  // Released: the other process gets it now.
  const pid_t child2 = spawn([&] {
    RealFileSystem other;
    other.lock_timeout_ms = 2000;
    return other.lock(path) ? 0 : 1;
  });
  CHECK(wait_exit(child2) == 0);
}

TEST_CASE("unified_diff: hunks, context, a missing final newline") {
  CHECK(unified_diff("a\nb\n", "a\nb\n", "x", "x").empty());
  CHECK(unified_diff("a\nb\nc\n", "a\nB\nc\n", "x", "y") == "--- x\n+++ y\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n");
  CHECK(unified_diff("a", "b", "x", "x") ==
        "--- x\n+++ x\n@@ -1,1 +1,1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n");
  std::string before, after;
  for (int i = 1; i <= 20; ++i) {
    before += std::to_string(i) + "\n";
    after += (i == 2 || i == 18 ? "x" : std::to_string(i)) + "\n";
  }
  CHECK(unified_diff(before, after, "f", "f") ==
        "--- f\n+++ f\n@@ -1,5 +1,5 @@\n 1\n-2\n+x\n 3\n 4\n 5\n@@ -15,6 +15,6 @@\n 15\n 16\n 17\n-18\n+x\n 19\n 20\n");
  CHECK(unified_diff("a\n", "a\nb\n", "f", "f") == "--- f\n+++ f\n@@ -1,1 +1,2 @@\n a\n+b\n");
  CHECK(unified_diff("", "a\n", "f", "f") == "--- f\n+++ f\n@@ -0,0 +1,1 @@\n+a\n");
}

TEST_CASE("--apply on a standalone DeepSpeed JSON writes a number over \"auto\", and keeps a quoted number quoted") {
  MemoryFileSystem fs;
  fs.files["ds.json"] = "{\n  \"train_micro_batch_size_per_gpu\": \"auto\",\n  \"gradient_accumulation_steps\": \"2\",\n"
                        "  \"zero_optimization\": {\"stage\": 3}\n}\n";
  ApplyPlan p = plan(load(fs, {"ds.json"}), edits(4, 8, std::nullopt));
  REQUIRE(p.files.size() == 1);
  CHECK(p.files[0].after == "{\n  \"train_micro_batch_size_per_gpu\": 4,\n  \"gradient_accumulation_steps\": \"8\",\n"
                            "  \"zero_optimization\": {\"stage\": 3}\n}\n");
}

TEST_CASE("apply: a Megatron config keeps its accumulation in global_batch_size") {
  // 2 devices x 1 node, TP 1: data-parallel 2; micro_batch_size 2 x accumulation 4 x 2 = 16.
  MemoryFileSystem fs;
  fs.files["megatron.yaml"] =
      "trainer:\n  devices: 2\n  num_nodes: 1\n  precision: bf16\n"
      "model:\n  micro_batch_size: 2\n  global_batch_size: 16\n  tensor_model_parallel_size: 1\n"
      "  pipeline_model_parallel_size: 1\n  encoder_seq_length: 1024\n  num_layers: 2\n  hidden_size: 64\n"
      "  ffn_hidden_size: 128\n  num_attention_heads: 4\n";
  LoadedConfig c = load(fs, {"megatron.yaml"});
  REQUIRE(c.inputs.config.grad_accum == 4);
  // Micro-batch 4 x accumulation 2 keeps the global batch: only micro_batch_size changes.
  ApplyPlan same = plan(c, edits(4, 2, std::nullopt));
  auto r = commit_apply(same, fs);
  REQUIRE(r.has_value());
  CHECK(fs.files["megatron.yaml"].find("  micro_batch_size: 4\n  global_batch_size: 16\n") != std::string::npos);
  // Accumulation 8 at micro-batch 4: global_batch_size becomes 4 x 8 x 2 = 64.
  LoadedConfig again = load(fs, {"megatron.yaml"});
  ApplyPlan grow = plan(again, edits(4, 8, std::nullopt));
  auto r2 = commit_apply(grow, fs);
  REQUIRE(r2.has_value());
  CHECK(fs.files["megatron.yaml"].find("  micro_batch_size: 4\n  global_batch_size: 64\n") != std::string::npos);
}

#include "io/edit/apply.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "io/config/toml.hpp"
#include "io/edit/yaml_edit.hpp"

namespace memplan::io {

namespace {

struct PendingEdit {
  const ValueSite* site = nullptr;
  std::int64_t value = 0;
  std::int64_t old_value = 0;  // for messages about absent keys: the value in effect
};

std::int64_t effective(const LoadedConfig& c, Knob k) {
  switch (k) {
    case Knob::kBatch: return c.inputs.config.micro_batch;
    case Knob::kGradAccum: return c.inputs.config.grad_accum;
    case Knob::kSeqLen: return c.inputs.config.seq_len;
    case Knob::kGlobalBatch: return 0;
  }
  return 0;
}

int line_at(std::string_view text, std::size_t offset) {
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
}

Error located(ErrorCode code, const std::string& file, int line, std::string message, std::string suggestion = {}) {
  Error e = make_error(code, std::move(message), std::move(suggestion));
  e.where = SourceLocation{file, line, 0};
  return e;
}

// Edits one file's text; verifies that the result parses and reads back the new values.
Result<FileChange> edit_file(const ConfigFile& file, std::size_t index, const std::vector<PendingEdit>& edits) {
  MEMPLAN_TRY(YamlDoc doc, parse_config_text(file.text, file.path));
  std::vector<TextEdit> text_edits;
  std::vector<std::string> changes;
  std::vector<std::size_t> inserted_at;  // for messages, filled after the text is built
  for (const auto& pe : edits) {
    const ValueSite& s = *pe.site;
    const std::string key = s.key();
    const std::string value = std::to_string(pe.value);
    if (s.present) {
      const YamlNode* node = doc.root.at(s.path);
      if (node == nullptr)
        return located(ErrorCode::kConflict, file.path, s.line, fmt::format("{} is no longer in the file", key));
      auto edit = replace_scalar(doc, *node, value);
      if (!edit) {
        Error e = edit.error();
        e.message = fmt::format("cannot set {}: {}", key, e.message);
        e.suggestion = "edit that line yourself";
        return e;
      }
      text_edits.push_back(*edit);
      changes.push_back(fmt::format("{}:{}: {}: {} -> {}", file.path, s.line, key,
                                    node->is_scalar() ? node->value : "null", value));
      inserted_at.push_back(std::string::npos);
    } else {
      std::vector<std::string> parent(s.path.begin(), s.path.end() - 1);
      const std::string yourself = parent.empty() ? fmt::format("add `{}: {}` yourself", key, value)
                                                  : fmt::format("add `{}: {}` under {} yourself", s.path.back(), value,
                                                                join_key_path(parent));
      const YamlNode* map = doc.root.at(parent);
      if (map == nullptr)
        return located(ErrorCode::kUnsupported, file.path, 0,
                       fmt::format("cannot add {}: there is no mapping '{}' in the file", key, join_key_path(parent)),
                       yourself);
      auto edit = insert_entry(doc, *map, s.path.back(), value, s.insert_after);
      if (!edit) {
        Error e = edit.error();
        e.message = fmt::format("cannot add {}: {}", key, e.message);
        e.suggestion = yourself;
        return e;
      }
      text_edits.push_back(*edit);
      changes.push_back(fmt::format("added {}: {} (was not set: {})", key, value, pe.old_value));
      inserted_at.push_back(edit->begin);
    }
  }
  // Several lines added at the same place keep the order they were asked for.
  std::vector<std::size_t> order(text_edits.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return text_edits[a].begin < text_edits[b].begin; });
  std::string after;
  std::size_t pos = 0;
  std::vector<int> new_lines(text_edits.size(), 0);
  for (std::size_t i : order) {
    const TextEdit& e = text_edits[i];
    if (e.begin < pos) return make_error(ErrorCode::kConflict, fmt::format("{}: two edits overlap", file.path));
    after.append(file.text, pos, e.begin - pos);
    new_lines[i] = line_at(after, after.size());
    after += e.text;
    pos = e.end;
  }
  after.append(file.text, pos, std::string::npos);
  for (std::size_t i = 0; i < changes.size(); ++i)
    if (inserted_at[i] != std::string::npos)
      changes[i] = fmt::format("{}:{}: {}", file.path, new_lines[i] + (text_edits[i].text.front() == '\n' ||
                                                                        text_edits[i].text.front() == '\r'),
                               changes[i]);

  // Never write a file that would not read back as intended.
  auto check = parse_config_text(after, file.path);
  if (!check)
    return make_error(ErrorCode::kConflict,
                      fmt::format("{}: refusing to write: the edited file would not parse ({})", file.path,
                                  check.error().to_string()));
  for (const auto& pe : edits) {
    const YamlNode* n = check->root.at(pe.site->path);
    if (n == nullptr || !n->is_scalar() || n->value != std::to_string(pe.value))
      return make_error(ErrorCode::kConflict, fmt::format("{}: refusing to write: {} would not read back as {}",
                                                          file.path, pe.site->key(), pe.value));
  }
  return FileChange{index, file.path, file.text, std::move(after), std::move(changes)};
}

std::string parent_dir(const std::string& path) {
  const std::string p = std::filesystem::path(path).parent_path().string();
  return p.empty() ? "." : p;
}

std::string file_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

// Writes `content` over `target` through a temporary file renamed over it.
Status replace_file(FileSystem& fs, const std::string& target, std::string_view content, const FileInfo& like) {
  MEMPLAN_TRY(std::string tmp, fs.write_temp(parent_dir(target), file_name(target), content, like));
  if (auto s = fs.rename(tmp, target); !s) {
    (void)fs.remove(tmp);
    return s.error();
  }
  return fs.sync_dir(parent_dir(target));
}

// Replaces `target`, which must still be the file with identity `expected_ino` (memplan's own),
// with `content`. The swap is an exchange, so when another program saved in the meantime its file
// is swapped back and false is returned: a put-back never overwrites a newer save.
Result<bool> put_back(FileSystem& fs, const std::string& target, std::string_view content, const FileInfo& like,
                      std::uint64_t expected_ino) {
  MEMPLAN_TRY(std::string tmp, fs.write_temp(parent_dir(target), file_name(target), content, like));
  auto now = fs.stat(target);
  if (!now || now->ino != expected_ino) {
    (void)fs.remove(tmp);
    return false;
  }
  auto swapped = fs.exchange(tmp, target);
  if (!swapped && swapped.error().code == ErrorCode::kUnsupported) {
    if (auto r = fs.rename(tmp, target); !r) {
      (void)fs.remove(tmp);
      return r.error();
    }
    MEMPLAN_TRY(auto synced, fs.sync_dir(parent_dir(target)));
    (void)synced;
    return true;
  }
  if (!swapped) {
    (void)fs.remove(tmp);
    return swapped.error();
  }
  auto displaced = fs.stat(tmp);
  if (displaced && displaced->ino != expected_ino) {
    (void)fs.exchange(tmp, target);  // a newer save: it goes back in place
    (void)fs.remove(tmp);
    return false;
  }
  (void)fs.remove(tmp);
  MEMPLAN_TRY(auto synced, fs.sync_dir(parent_dir(target)));
  (void)synced;
  return true;
}

// The backup for `path`: the first of FILE.backup, FILE.backup.1, ... that is free or already
// holds `content`. Returns the name and whether it must be written.
Result<std::pair<std::string, bool>> choose_backup(FileSystem& fs, const std::string& path, const std::string& content) {
  for (int n = 0; n < 1000; ++n) {
    const std::string name = n == 0 ? path + ".backup" : fmt::format("{}.backup.{}", path, n);
    MEMPLAN_TRY(FileInfo info, fs.stat(name));
    if (!info.exists) return std::make_pair(name, true);
    if (info.regular && info.size == static_cast<std::int64_t>(content.size())) {
      MEMPLAN_TRY(std::string existing, fs.read_file(name));
      if (existing == content) return std::make_pair(name, false);
    }
  }
  return located(ErrorCode::kIoError, path, 0, "too many backups (FILE.backup.1 to .999 exist)",
                 "remove old backups");
}


// Replaces the locked file `target` with `after`, never losing another program's write:
//  - the new file is written and locked first, so the name stays locked once it is in place;
//  - right before the swap, the file must still be the one read (same identity, same content);
//  - the swap is an atomic exchange, so the file it displaced can be checked: when another
//    program saved in between, its file is swapped back and memplan's change is dropped;
//  - a program that wrote in place into the old file (through a descriptor opened earlier)
//    after the check is seen through the lock's descriptor, and its content is put back.
// `written_ino` is set once memplan's file is in place; `new_lock` keeps it locked until the
// caller is done with every file.
Status replace_verified(FileSystem& fs, const std::string& target, const std::string& shown,
                        const std::string& before, const std::string& after, const FileInfo& info, FileLock& lock,
                        std::uint64_t& written_ino, std::shared_ptr<FileLock>& new_lock) {
  const std::string dir = parent_dir(target);
  MEMPLAN_TRY(std::string tmp, fs.write_temp(dir, file_name(target), after, info));
  auto fail = [&](Error e) -> Error {
    (void)fs.remove(tmp);
    return e;
  };
  auto locked = fs.lock(tmp);
  if (!locked) return fail(locked.error());
  new_lock = *locked;
  auto mine = fs.stat(tmp);
  if (!mine) return fail(mine.error());
  const Error changed = located(ErrorCode::kConflict, shown, 0,
                                "another program changed the file while memplan was writing it; its change is kept "
                                "and memplan's was not written",
                                "run memplan again");
  {
    auto current = fs.read_file(target);
    auto now = fs.stat(target);
    if (!current || !now) return fail(!current ? current.error() : now.error());
    if (*current != before || now->ino != info.ino || now->dev != info.dev) return fail(changed);
  }
  auto swapped = fs.exchange(tmp, target);
  if (swapped) {
    // `tmp` now names whatever was at `target` at the instant of the swap.
    auto displaced = fs.read_file(tmp);
    auto dinfo = fs.stat(tmp);
    if (!displaced || !dinfo || *displaced != before || dinfo->ino != info.ino) {
      if (auto back = fs.exchange(tmp, target); !back) {
        // memplan's file stays in place; the other program's is kept, under the temporary name.
        Error e = changed;
        e.message = fmt::format("another program changed the file while memplan was writing it, and putting its "
                                "version back failed ({}); its version is in {}",
                                back.error().message, tmp);
        return e;
      }
      // `tmp` holds memplan's file again, unless yet another program saved in between: then its
      // file is the newest and goes back in place.
      auto again = fs.stat(tmp);
      if (again && again->exists && again->ino != mine->ino) {
        if (auto r = fs.rename(tmp, target); !r) return r.error();
        return changed;
      }
      return fail(changed);
    }
    (void)fs.remove(tmp);  // the old content (the backup has it too)
  } else if (swapped.error().code == ErrorCode::kUnsupported) {
    if (auto r = fs.rename(tmp, target); !r) return fail(r.error());
  } else {
    return fail(swapped.error());
  }
  written_ino = mine->ino;
  MEMPLAN_TRY(auto synced, fs.sync_dir(dir));
  (void)synced;
  // An in-place write into the old file after the check (it is no longer reachable by name).
  auto late = lock.read_locked();
  if (late && *late != before) {
    MEMPLAN_TRY(bool replaced, put_back(fs, target, *late, info, mine->ino));
    (void)replaced;  // false: an even newer save is in place, which is as good
    written_ino = 0;
    return changed;
  }
  return Ok{};
}
}  // namespace

namespace {

// What a file's mode does not say (issue 34): a read-only mount, an immutable or append-only file
// (which a rename cannot replace, so nothing, not even a .backup, may be written first). Empty
// when none applies, or when `path` is not a real file (a MemoryFileSystem's).
std::string unreplaceable(const std::string& path) {
  struct statvfs vs {};
  if (::statvfs(path.c_str(), &vs) == 0 && (vs.f_flag & ST_RDONLY) != 0) return "it is on a read-only file system";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return {};
  int flags = 0;
  std::string why;
  if (::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
    if ((flags & FS_IMMUTABLE_FL) != 0) why = "it is immutable (chattr +i)";
    else if ((flags & FS_APPEND_FL) != 0) why = "it is append-only (chattr +a), so it cannot be replaced";
  }
  ::close(fd);
  return why;
}

}  // namespace

Result<ApplyPlan> plan_apply(const LoadedConfig& config, const Edits& edits) {
  ApplyPlan plan;
  std::map<std::size_t, std::vector<PendingEdit>> per_file;
  const TrainingConfig& c = config.inputs.config;
  const std::int64_t new_batch = edits.micro_batch.value_or(c.micro_batch);
  const std::int64_t new_accum = edits.grad_accum.value_or(c.grad_accum);

  auto want = [&](Knob k, std::optional<std::int64_t> v, const char* what) -> Status {
    if (!v) return Ok{};
    if (*v < 1 || *v > (1 << 24))
      return make_error(ErrorCode::kInvalidArgument, fmt::format("--apply: {} = {} is out of range", what, *v));
    const ValueSite* primary = config.primary_site(k);
    if (primary == nullptr && effective(config, k) == *v) {
      plan.unchanged.push_back(fmt::format("{} is already {}", what, *v));
      return Ok{};
    }
    // Megatron / Automodel-style configs hold the accumulation only through the global batch:
    // the global-batch site below is rewritten to micro-batch x accumulation x data-parallel.
    const bool via_global = k == Knob::kGradAccum && std::any_of(config.sites.begin(), config.sites.end(), [](const ValueSite& s) {
                              return s.knob == Knob::kGlobalBatch && s.present && s.world_size >= 1;
                            });
    if (primary == nullptr && via_global) return Ok{};
    if (primary == nullptr)
      return make_error(ErrorCode::kUnsupported,
                        fmt::format("the {} config does not say where the {} lives", to_string(config.dialect), what),
                        fmt::format("map it with --keys {}=KEY.PATH", to_string(k)));
    for (const auto& s : config.sites) {
      if (s.knob != k) continue;
      const std::string& path = config.files[s.file].path;
      if (config.files[s.file].command_line && s.value != *v)
        return located(ErrorCode::kUnsupported, path, s.line,
                       fmt::format("cannot write {} = {}: {} is set by an override on the command line", what, *v,
                                   s.key()),
                       fmt::format("change it there: {}={}", s.key(), *v));
      if (s.present) {
        if (s.value == *v) {
          plan.unchanged.push_back(fmt::format("{}:{}: {} is already {}", path, s.line, s.key(), *v));
          continue;
        }
        per_file[s.file].push_back(PendingEdit{&s, *v, s.value.value_or(0)});
      } else if (!s.mirror) {
        if (effective(config, k) == *v) {
          plan.unchanged.push_back(fmt::format("{}: {} is not set; the value in effect is already {}", path, s.key(),
                                               *v));
          continue;
        }
        if (!s.no_insert_reason.empty())
          return located(ErrorCode::kUnsupported, path, 0,
                         fmt::format("cannot write {} = {}: {}", what, *v, s.no_insert_reason));
        per_file[s.file].push_back(PendingEdit{&s, *v, effective(config, k)});
      }
    }
    return Ok{};
  };
  MEMPLAN_TRY(auto b, want(Knob::kBatch, edits.micro_batch, "micro-batch"));
  MEMPLAN_TRY(auto g, want(Knob::kGradAccum, edits.grad_accum, "gradient accumulation"));
  MEMPLAN_TRY(auto q, want(Knob::kSeqLen, edits.seq_len, "sequence length"));
  (void)b, (void)g, (void)q;
  // DeepSpeed's train_batch_size must stay micro-batch x accumulation x GPUs.
  for (const auto& s : config.sites) {
    if (s.knob != Knob::kGlobalBatch || !s.present || s.world_size < 1) continue;
    const std::int64_t v = new_batch * new_accum * s.world_size;
    if (s.value != v) per_file[s.file].push_back(PendingEdit{&s, v, s.value.value_or(0)});
  }

  for (auto& [index, file_edits] : per_file) {
    MEMPLAN_TRY(FileChange change, edit_file(config.files[index], index, file_edits));
    if (change.after != change.before) plan.files.push_back(std::move(change));
  }
  return plan;
}

std::string unified_diff(std::string_view before, std::string_view after, const std::string& from_label,
                         const std::string& to_label, int context) {
  auto split = [](std::string_view t) {
    std::vector<std::string_view> lines;
    std::size_t start = 0;
    while (start < t.size()) {
      std::size_t nl = t.find('\n', start);
      if (nl == std::string_view::npos) nl = t.size() - 1;
      lines.push_back(t.substr(start, nl - start + 1));
      start = nl + 1;
    }
    return lines;
  };
  const auto a = split(before);
  const auto b = split(after);
  if (a == b) return {};

  // Common prefix and suffix, then an LCS over the (small) middle.
  std::size_t pre = 0;
  while (pre < a.size() && pre < b.size() && a[pre] == b[pre]) ++pre;
  std::size_t suf = 0;
  while (suf < a.size() - pre && suf < b.size() - pre && a[a.size() - 1 - suf] == b[b.size() - 1 - suf]) ++suf;
  const std::size_t n = a.size() - pre - suf, m = b.size() - pre - suf;
  enum Kind { kEq, kDel, kIns };
  struct Op {
    Kind kind;
    std::size_t ai, bi;
  };
  std::vector<Op> ops;
  for (std::size_t i = 0; i < pre; ++i) ops.push_back({kEq, i, i});
  if (n * m <= 4'000'000) {
    std::vector<std::vector<std::uint32_t>> lcs(n + 1, std::vector<std::uint32_t>(m + 1, 0));
    for (std::size_t i = n; i-- > 0;)
      for (std::size_t j = m; j-- > 0;)
        lcs[i][j] = a[pre + i] == b[pre + j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
    std::size_t i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && a[pre + i] == b[pre + j]) {
        ops.push_back({kEq, pre + i, pre + j});
        ++i, ++j;
      } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
        ops.push_back({kDel, pre + i, pre + j});  // deletions before insertions, as diff -u prints them
        ++i;
      } else {
        ops.push_back({kIns, pre + i, pre + j});
        ++j;
      }
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) ops.push_back({kDel, pre + i, pre});
    for (std::size_t j = 0; j < m; ++j) ops.push_back({kIns, pre + n, pre + j});
  }
  for (std::size_t i = 0; i < suf; ++i) ops.push_back({kEq, a.size() - suf + i, b.size() - suf + i});

  auto emit_line = [](std::string& out, char sign, std::string_view line) {
    out += sign;
    if (!line.empty() && line.back() == '\n') {
      out.append(line);
    } else {
      out.append(line);
      out += "\n\\ No newline at end of file\n";
    }
  };
  std::string out = fmt::format("--- {}\n+++ {}\n", from_label, to_label);
  const std::size_t ctx = static_cast<std::size_t>(std::max(0, context));
  std::size_t k = 0;
  while (k < ops.size()) {
    while (k < ops.size() && ops[k].kind == kEq) ++k;
    if (k == ops.size()) break;
    const std::size_t first = k;
    std::size_t last = k;
    for (std::size_t j = k; j < ops.size(); ++j) {
      if (ops[j].kind == kEq) continue;
      if (j - last > 2 * ctx) break;
      last = j;
    }
    const std::size_t hs = first >= ctx ? first - ctx : 0;
    const std::size_t he = std::min(ops.size(), last + ctx + 1);
    std::size_t alen = 0, blen = 0;
    for (std::size_t j = hs; j < he; ++j) {
      if (ops[j].kind != kIns) ++alen;
      if (ops[j].kind != kDel) ++blen;
    }
    const std::size_t astart = ops[hs].ai + (alen > 0 ? 1 : 0);
    const std::size_t bstart = ops[hs].bi + (blen > 0 ? 1 : 0);
    out += fmt::format("@@ -{},{} +{},{} @@\n", astart, alen, bstart, blen);
    for (std::size_t j = hs; j < he; ++j) {
      if (ops[j].kind == kEq) emit_line(out, ' ', a[ops[j].ai]);
      else if (ops[j].kind == kDel) emit_line(out, '-', a[ops[j].ai]);
      else emit_line(out, '+', b[ops[j].bi]);
    }
    k = he;
  }
  return out;
}

std::string render_dry_run(const ApplyPlan& plan) {
  std::string out;
  for (const auto& f : plan.files) out += unified_diff(f.before, f.after, f.path, f.path);
  if (plan.files.empty()) out = "nothing to change\n";
  return out;
}

Result<ApplyResult> commit_apply(const ApplyPlan& plan, FileSystem& fs, const ApplyOptions& options) {
  ApplyResult result;
  struct Target {
    std::string path;                  // the file that really changes (symlinks followed)
    FileInfo info;                     // as read, under the lock
    std::shared_ptr<FileLock> lock;    // held until the end: other memplan runs wait
    std::uint64_t written_ino = 0;     // our replacement, once it is in place
    std::shared_ptr<FileLock> new_lock;  // ... locked too, so the name stays locked throughout
  };
  std::vector<Target> targets;
  // 1. Under the lock (the CLI took it before reading; taking it again returns the same lock):
  //    every file may be replaced by us and still holds what was read; nothing is written otherwise.
  for (const auto& f : plan.files) {
    MEMPLAN_TRY(std::string target, fs.resolve_symlinks(f.path));
    MEMPLAN_TRY(std::shared_ptr<FileLock> lock, fs.lock(target));
    MEMPLAN_TRY(FileInfo info, fs.stat(target));
    if (const std::string why = unreplaceable(target); !why.empty())
      return located(ErrorCode::kIoError, f.path, 0,
                     fmt::format("the file cannot be replaced: {}; nothing was written", why),
                     "make the change yourself where that is allowed (--dry-run shows it)");
    if (!info.writable)
      return located(ErrorCode::kIoError, f.path, 0,
                     fmt::format("the file is read-only for you (mode {:04o}); nothing was written", info.mode),
                     "memplan never replaces a file you cannot write: make it writable, or make the change yourself "
                     "(--dry-run shows it)");
    if (!info.keeps_owner)
      return located(ErrorCode::kIoError, f.path, 0,
                     fmt::format("the file belongs to another user or group (uid {}, gid {}); a replacement written "
                                 "by you would change that, so nothing was written",
                                 info.uid, info.gid),
                     "run memplan as the file's owner, or make the change yourself (--dry-run shows it)");
    if (info.nlink > 1)
      return located(ErrorCode::kUnsupported, f.path, 0,
                     fmt::format("the file has {} hard links; replacing it would leave the other names with the old "
                                 "content, so nothing was written",
                                 info.nlink),
                     "make the change yourself (--dry-run shows it)");
    MEMPLAN_TRY(std::string current, fs.read_file(target));
    if (current != f.before)
      return located(ErrorCode::kConflict, f.path, 0, "the file changed since memplan read it; nothing was written",
                     "run memplan again");
    targets.push_back(Target{target, info, std::move(lock), 0, nullptr});
  }
  // 2. Backups of the content being replaced.
  for (std::size_t i = 0; i < plan.files.size(); ++i) {
    const auto& f = plan.files[i];
    if (!options.backup) {
      result.backups.emplace_back();
      continue;
    }
    MEMPLAN_TRY(auto choice, choose_backup(fs, f.path, f.before));
    if (choice.second) {
      FileInfo like = targets[i].info;
      if (auto s = replace_file(fs, choice.first, f.before, like); !s) {
        Error e = s.error();
        e.message = "cannot write the backup: " + e.message + "; nothing was written";
        return e;
      }
    }
    result.backups.push_back(choice.first);
  }
  // 3. The files themselves; on failure, put back the ones already written.
  for (std::size_t i = 0; i < plan.files.size(); ++i) {
    const auto& f = plan.files[i];
    Target& t = targets[i];
    Status s = replace_verified(fs, t.path, f.path, f.before, f.after, t.info, *t.lock, t.written_ino, t.new_lock);
    if (s) {
      result.written.push_back(f.path);
      continue;
    }
    Error e = s.error();
    if (!e.where) e.where = SourceLocation{f.path, 0, 0};
    // Put back every file memplan replaced (this one too, when only the final sync failed), but
    // only while it still holds memplan's own replacement: a file another program wrote since
    // keeps that program's content.
    std::vector<std::string> restored, lost, kept;
    for (std::size_t j = i + 1; j-- > 0;) {
      const Target& tj = targets[j];
      if (tj.written_ino == 0) continue;
      auto now = fs.stat(tj.path);
      auto current = fs.read_file(tj.path);
      if (!now || !current || now->ino != tj.written_ino || *current != plan.files[j].after) {
        kept.push_back(plan.files[j].path);
        continue;
      }
      auto back = put_back(fs, tj.path, plan.files[j].before, tj.info, tj.written_ino);
      if (back && *back)
        restored.push_back(plan.files[j].path);
      else if (back)
        kept.push_back(plan.files[j].path);
      else
        lost.push_back(plan.files[j].path);
    }
    if (restored.empty() && lost.empty() && kept.empty()) e.message += "; nothing was written";
    if (!restored.empty()) e.message += fmt::format("; restored {}", fmt::join(restored, ", "));
    if (!kept.empty())
      e.message += fmt::format("; left {} as another program wrote it after memplan did", fmt::join(kept, ", "));
    if (!lost.empty())
      e.message += fmt::format("; could not put back the original of {}: it holds memplan's change{}",
                               fmt::join(lost, ", "),
                               options.backup ? ", and its backup holds the original" : "");
    return e;
  }
  return result;
}

std::string render_apply_result(const ApplyPlan& plan, const ApplyResult& result) {
  std::string out;
  for (const auto& u : plan.unchanged) out += "unchanged: " + u + "\n";
  if (plan.files.empty()) return out + "nothing to change\n";
  for (std::size_t i = 0; i < plan.files.size(); ++i) {
    const auto& f = plan.files[i];
    out += fmt::format("wrote {}", f.path);
    if (i < result.backups.size() && !result.backups[i].empty()) out += fmt::format(" (backup: {})", result.backups[i]);
    out += "\n";
    for (const auto& c : f.changes) out += "  " + c + "\n";
  }
  return out;
}

}  // namespace memplan::io

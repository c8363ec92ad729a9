// --apply: writes a new micro-batch, gradient accumulation and sequence length back into the
// config files they were read from, changing only those values' characters (comments, order,
// quoting, indentation, line endings stay byte for byte). The guarantees, in docs/configs.md:
//   - nothing changes when nothing needs to (no write, no backup);
//   - every file is rewritten through a temporary file in its directory renamed over it, so a
//     crash leaves the old or the new file, never a mix; symlinks are followed to their target
//     and permissions are kept;
//   - a file that changed since it was read is not written;
//   - FILE.backup keeps the previous content; an existing backup that differs is never
//     overwritten: the next free FILE.backup.1, FILE.backup.2... is used instead;
//   - when one of several files cannot be written, the ones already written are restored.
// The planner decides the values; this library only needs them (struct Edits).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/config_loader.hpp"
#include "io/fs.hpp"
#include "memplan/result.hpp"

namespace memplan::io {

// The values to write. Unset values are left alone.
struct Edits {
  std::optional<std::int64_t> micro_batch;
  std::optional<std::int64_t> grad_accum;
  std::optional<std::int64_t> seq_len;
};

struct FileChange {
  std::size_t file = 0;               // index into LoadedConfig::files
  std::string path;                   // as given
  std::string before;                 // the text as read
  std::string after;                  // the text to write
  std::vector<std::string> changes;   // "train.yaml:12: per_device_train_batch_size: 4 -> 8"
};

struct ApplyPlan {
  std::vector<FileChange> files;       // only the files that change
  std::vector<std::string> unchanged;  // "train.yaml:12: per_device_train_batch_size is already 8"
  bool empty() const { return files.empty(); }
};

// Computes the new text of every file that changes; touches nothing. Refuses (with the reason
// and the file:line) values it cannot write in place: aliases, block scalars, a missing key in
// a dialect without an obvious place for it.
Result<ApplyPlan> plan_apply(const LoadedConfig& config, const Edits& edits);

// `diff -u` between two texts (3 lines of context), labelled with the paths.
std::string unified_diff(std::string_view before, std::string_view after, const std::string& from_label,
                         const std::string& to_label, int context = 3);
// What --dry-run prints: the diff of every file, or that nothing would change.
std::string render_dry_run(const ApplyPlan& plan);

struct ApplyOptions {
  bool backup = true;  // keep FILE.backup (see the rule above)
};

struct ApplyResult {
  std::vector<std::string> written;  // paths as given
  std::vector<std::string> backups;  // the backup of each written file, same order ("" when none)
};

// Writes the plan. Every file is checked against the text that was read before anything is
// written; on failure the files already written are restored and the error says so.
Result<ApplyResult> commit_apply(const ApplyPlan& plan, FileSystem& fs, const ApplyOptions& options = {});
// What --apply prints after writing.
std::string render_apply_result(const ApplyPlan& plan, const ApplyResult& result);

}  // namespace memplan::io

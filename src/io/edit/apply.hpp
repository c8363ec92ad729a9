// --apply: writes a new micro-batch, gradient accumulation and sequence length back into the
// config files they were read from, changing only those values' characters (comments, order,
// quoting, indentation, line endings stay byte for byte). The guarantees, in docs/configs.md:
//   - nothing changes when nothing needs to (no write, no backup);
//   - every file is rewritten through a temporary file in its directory swapped in atomically, so
//     a crash leaves the old or the new file, never a mix; symlinks are followed to their target
//     and permissions, owner and group are kept (files whose owner cannot be kept, read-only
//     files and hard-linked files are refused);
//   - no write is lost (docs/configs.md#apply-guarantees): the file is locked (flock) from before
//     it is read (the CLI takes the lock) to after it is replaced, so memplan runs take turns; it
//     is checked under the lock right before the swap; and a writer that does not lock, caught
//     by the post-swap verification, keeps its content (memplan's change is dropped);
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

#include "io/config/config_loader.hpp"
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

// Writes the plan. Every file is locked and checked against the text that was read before
// anything is written; on failure the files memplan replaced (and nobody changed since) are put
// back, and the error says what each file holds.
Result<ApplyResult> commit_apply(const ApplyPlan& plan, FileSystem& fs, const ApplyOptions& options = {});
// What --apply prints after writing.
std::string render_apply_result(const ApplyPlan& plan, const ApplyResult& result);

}  // namespace memplan::io

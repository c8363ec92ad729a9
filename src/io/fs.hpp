// The file operations config loading and --apply need. Abstract so tests can run without
// touching the disk and can make any step fail or crash (ninja's DiskInterface, bloaty's
// InputFileFactory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "memplan/result.hpp"

namespace memplan::io {

struct FileInfo {
  bool exists = false;
  bool regular = false;        // a regular file (after following symlinks)
  std::int64_t size = 0;
  std::int64_t mtime_ns = 0;
  unsigned mode = 0644;        // permission bits
  unsigned uid = 0;
  unsigned gid = 0;
  std::uint64_t dev = 0;       // identity of the file (st_dev, st_ino): a rename over it makes a new one
  std::uint64_t ino = 0;
  std::uint64_t nlink = 1;     // hard links to it: a rename over one name splits them
  bool writable = true;        // this process may write it (access(W_OK)) and it is not read-only (0444)
  bool keeps_owner = true;     // a replacement this process creates can have the same owner and group
};

// Config files memplan reads are small; anything bigger is not a config (or is /dev/zero's cousin).
inline constexpr std::int64_t kMaxConfigFileBytes = 16 << 20;

// An exclusive advisory lock (flock(2)) on one file, released when the last handle goes away.
// Only programs that lock too (every memplan) wait for it; see docs/configs.md#apply-guarantees.
class FileLock {
 public:
  virtual ~FileLock() = default;
  // The content of the file that was locked, read through the lock's descriptor: still the old
  // file after another one was renamed over its name.
  virtual Result<std::string> read_locked() = 0;
  // The identity of the locked file.
  virtual FileInfo locked_info() const = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Reads a whole regular file of at most kMaxConfigFileBytes. FIFOs, devices and directories
  // are refused without blocking (the open is non-blocking and checked with fstat).
  virtual Result<std::string> read_file(const std::string& path) = 0;
  // Follows symlinks. A missing file is not an error: exists == false.
  virtual Result<FileInfo> stat(const std::string& path) = 0;
  // The path with every symlink followed to the final target (the file that really changes).
  virtual Result<std::string> resolve_symlinks(const std::string& path) = 0;
  // Creates a new file with a unique name in `dir` (named after `base`), writes all of `content`,
  // flushes it to stable storage and gives it the permissions (and, when allowed, the owner) of
  // `like`. Returns its path. On failure nothing is left behind.
  virtual Result<std::string> write_temp(const std::string& dir, const std::string& base, std::string_view content,
                                         const FileInfo& like) = 0;
  // Atomically replaces `to` with `from` (rename(2)).
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  // Atomically swaps two names (renameat2 RENAME_EXCHANGE): afterwards `a` holds what was at `b`
  // at that instant, so a writer that replaced `b` just before is never lost. kUnsupported where
  // the file system cannot (then callers fall back to rename).
  virtual Status exchange(const std::string& a, const std::string& b) = 0;
  // Takes the exclusive lock on the file `path` names (after symlinks), waiting up to the lock
  // timeout for another holder. Locking a file this process already holds returns the same lock.
  virtual Result<std::shared_ptr<FileLock>> lock(const std::string& path) = 0;
  virtual Status remove(const std::string& path) = 0;
  // Makes a rename in `dir` durable (fsync of the directory).
  virtual Status sync_dir(const std::string& dir) = 0;
};

// The real disk, through POSIX calls.
class RealFileSystem : public FileSystem {
 public:
  Result<std::string> read_file(const std::string& path) override;
  Result<FileInfo> stat(const std::string& path) override;
  Result<std::string> resolve_symlinks(const std::string& path) override;
  Result<std::string> write_temp(const std::string& dir, const std::string& base, std::string_view content,
                                 const FileInfo& like) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status exchange(const std::string& a, const std::string& b) override;
  Result<std::shared_ptr<FileLock>> lock(const std::string& path) override;
  Status remove(const std::string& path) override;
  Status sync_dir(const std::string& dir) override;

  int lock_timeout_ms = 60'000;  // how long lock() waits for another memplan before giving up

 protected:
  // Called after each chunk write_temp writes; tests override it to crash mid-write.
  virtual void after_chunk(std::size_t /*written*/, std::size_t /*total*/) {}
  std::size_t chunk_size_ = 1 << 16;

 private:
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::weak_ptr<FileLock>> locks_;
};

// Files in memory, for tests and for reading configs without a disk. Paths are used as given.
class MemoryFileSystem : public FileSystem {
 public:
  std::map<std::string, std::string> files;
  std::map<std::string, FileInfo> info;       // optional per-file metadata (mode, mtime)
  std::map<std::string, std::string> links;   // symlink path -> target path
  std::map<std::string, std::uint64_t> inodes;  // identity of each file (assigned when first seen)
  bool can_exchange = true;                      // false: exchange() is kUnsupported, like some file systems
  std::map<std::uint64_t, std::string> removed;  // content of removed files, by identity (a lock still reads it)

  Result<std::string> read_file(const std::string& path) override;
  Result<FileInfo> stat(const std::string& path) override;
  Result<std::string> resolve_symlinks(const std::string& path) override;
  Result<std::string> write_temp(const std::string& dir, const std::string& base, std::string_view content,
                                 const FileInfo& like) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status exchange(const std::string& a, const std::string& b) override;
  Result<std::shared_ptr<FileLock>> lock(const std::string& path) override;
  Status remove(const std::string& path) override;
  Status sync_dir(const std::string& dir) override;

 private:
  std::uint64_t inode_of(const std::string& path);
  int next_temp_ = 0;
  std::uint64_t next_inode_ = 1;
};

// The process's file system.
FileSystem& real_file_system();

}  // namespace memplan::io

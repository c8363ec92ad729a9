// The file operations config loading and --apply need. Abstract so tests can run without
// touching the disk and can make any step fail or crash (ninja's DiskInterface, bloaty's
// InputFileFactory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
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
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

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
  Status remove(const std::string& path) override;
  Status sync_dir(const std::string& dir) override;

 protected:
  // Called after each chunk write_temp writes; tests override it to crash mid-write.
  virtual void after_chunk(std::size_t /*written*/, std::size_t /*total*/) {}
  std::size_t chunk_size_ = 1 << 16;
};

// Files in memory, for tests and for reading configs without a disk. Paths are used as given.
class MemoryFileSystem : public FileSystem {
 public:
  std::map<std::string, std::string> files;
  std::map<std::string, FileInfo> info;       // optional per-file metadata (mode, mtime)
  std::map<std::string, std::string> links;   // symlink path -> target path

  Result<std::string> read_file(const std::string& path) override;
  Result<FileInfo> stat(const std::string& path) override;
  Result<std::string> resolve_symlinks(const std::string& path) override;
  Result<std::string> write_temp(const std::string& dir, const std::string& base, std::string_view content,
                                 const FileInfo& like) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status remove(const std::string& path) override;
  Status sync_dir(const std::string& dir) override;

 private:
  int next_temp_ = 0;
};

// The process's file system.
FileSystem& real_file_system();

}  // namespace memplan::io

#include "io/fs.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace memplan::io {

namespace {

Error io_error(const std::string& path, const std::string& what, int err) {
  Error e = make_error(ErrorCode::kIoError, fmt::format("{}: {}", what, std::strerror(err)));
  e.where = SourceLocation{path, 0, 0};
  return e;
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

Error io_error_text(const std::string& path, std::string message) {
  Error e = make_error(ErrorCode::kIoError, std::move(message));
  e.where = SourceLocation{path, 0, 0};
  return e;
}


const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Reads all of `fd` from offset 0 (pread: the descriptor's offset is left alone), at most
// kMaxConfigFileBytes.
Result<std::string> read_all(int fd, const std::string& path) {
  std::string out;
  char buf[1 << 15];
  off_t at = 0;
  while (true) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error(path, "cannot read", errno);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    at += n;
    if (static_cast<std::int64_t>(out.size()) > kMaxConfigFileBytes)
      return io_error_text(path, fmt::format("cannot read: larger than {} MiB; memplan reads config files up to "
                                             "that size",
                                             kMaxConfigFileBytes >> 20));
  }
  return out;
}

FileInfo info_of(const struct stat& st) {
  FileInfo fi;
  fi.exists = true;
  fi.regular = S_ISREG(st.st_mode);
  fi.size = static_cast<std::int64_t>(st.st_size);
  fi.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  fi.mode = st.st_mode & 07777;
  fi.uid = st.st_uid;
  fi.gid = st.st_gid;
  fi.dev = static_cast<std::uint64_t>(st.st_dev);
  fi.ino = static_cast<std::uint64_t>(st.st_ino);
  fi.nlink = static_cast<std::uint64_t>(st.st_nlink);
  return fi;
}

// Whether a file this process creates can be given `uid` and `gid`: it is ours already, we are
// root, or (group only) we belong to the group.
bool can_give_owner(unsigned uid, unsigned gid) {
  const uid_t euid = ::geteuid();
  if (euid == 0) return true;
  if (uid != euid) return false;
  if (gid == ::getegid()) return true;
  const int n = ::getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<std::size_t>(n));
  const int got = ::getgroups(n, groups.data());
  for (int i = 0; i < got; ++i)
    if (groups[static_cast<std::size_t>(i)] == gid) return true;
  return false;
}

class RealFileLock : public FileLock {
 public:
  RealFileLock(int fd, std::string path, FileInfo info) : fd_(fd), path_(std::move(path)), info_(info) {}
  ~RealFileLock() override { ::close(fd_); }  // closing the last descriptor releases the flock
  RealFileLock(const RealFileLock&) = delete;
  RealFileLock& operator=(const RealFileLock&) = delete;

  Result<std::string> read_locked() override { return read_all(fd_, path_); }
  FileInfo locked_info() const override { return info_; }

 private:
  int fd_;
  std::string path_;
  FileInfo info_;
};

}  // namespace

Result<std::string> RealFileSystem::read_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return io_error(path, "cannot read", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error(path, "cannot read", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error_text(path, fmt::format("cannot read: {}, not a regular file", file_kind(st.st_mode)));
  }
  if (st.st_size > kMaxConfigFileBytes) {
    ::close(fd);
    return io_error_text(path, fmt::format("cannot read: {} bytes, larger than {} MiB; memplan reads config files "
                                           "up to that size",
                                           static_cast<std::int64_t>(st.st_size), kMaxConfigFileBytes >> 20));
  }
  auto out = read_all(fd, path);
  ::close(fd);
  return out;
}

Result<FileInfo> RealFileSystem::stat(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return FileInfo{};
    return io_error(path, "cannot stat", errno);
  }
  FileInfo fi = info_of(st);
  // A file nobody may write (0444) is read-only on purpose, also for root, whom access() lets write.
  fi.writable = (fi.mode & 0222) != 0 && ::access(path.c_str(), W_OK) == 0;
  fi.keeps_owner = can_give_owner(fi.uid, fi.gid);
  return fi;
}

Result<std::string> RealFileSystem::resolve_symlinks(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return io_error(path, "cannot resolve path", errno);
  return std::string(buf);
}

Result<std::string> RealFileSystem::write_temp(const std::string& dir, const std::string& base,
                                               std::string_view content, const FileInfo& like) {
  std::string tmpl = join(dir, "." + base + ".memplan-XXXXXX");
  const int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd < 0) return io_error(join(dir, base), "cannot create a temporary file next to it", errno);
  auto fail = [&](const char* what, int err) -> Error {
    ::close(fd);
    ::unlink(tmpl.c_str());
    return io_error(tmpl, what, err);
  };
  std::size_t written = 0;
  while (written < content.size()) {
    const std::size_t want = std::min(chunk_size_, content.size() - written);
    const ssize_t n = ::write(fd, content.data() + written, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("cannot write", errno);
    }
    written += static_cast<std::size_t>(n);
    after_chunk(written, content.size());
  }
  if (::fchmod(fd, static_cast<mode_t>(like.mode & 07777)) != 0) return fail("cannot set permissions", errno);
  // Keep the owner and group (root editing someone's file, a file of one of our groups). Callers
  // refuse files whose owner cannot be kept (FileInfo::keeps_owner) before writing anything.
  if (like.exists && (like.uid != ::geteuid() || like.gid != ::getegid())) {
    if (::fchown(fd, like.uid, like.gid) != 0) return fail("cannot keep the file's owner and group", errno);
  }
  // Every extended attribute of the file, its POSIX ACL (system.posix_acl_access) included, set
  // after the mode (a chmod would rewrite the ACL's mask): a replacement that dropped them would
  // widen or narrow who may read and write it. One that cannot be kept refuses the write (issue 34).
  if (like.exists) {
    const std::string source = join(dir, base);
    const ssize_t len = ::listxattr(source.c_str(), nullptr, 0);
    if (len > 0) {
      std::string names(static_cast<std::size_t>(len), '\0');
      const ssize_t got = ::listxattr(source.c_str(), names.data(), names.size());
      for (std::size_t at = 0; got > 0 && at < static_cast<std::size_t>(got);) {
        const std::string name(names.c_str() + at);
        at += name.size() + 1;
        const ssize_t vlen = ::getxattr(source.c_str(), name.c_str(), nullptr, 0);
        if (vlen < 0) continue;
        std::string value(static_cast<std::size_t>(vlen), '\0');
        const ssize_t vgot = ::getxattr(source.c_str(), name.c_str(), value.data(), value.size());
        if (vgot < 0) continue;
        if (::fsetxattr(fd, name.c_str(), value.data(), static_cast<std::size_t>(vgot), 0) != 0) {
          const int err = errno;
          ::close(fd);
          ::unlink(tmpl.c_str());
          return io_error(source,
                          fmt::format("cannot keep its extended attribute '{}'{} in a replacement, so nothing was "
                                      "written",
                                      name, name == "system.posix_acl_access" ? " (its ACL)" : ""),
                          err);
        }
      }
    }
  }
  if (::fsync(fd) != 0) return fail("cannot flush", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmpl.c_str());
    return io_error(tmpl, "cannot close", err);
  }
  return tmpl;
}

Status RealFileSystem::rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return io_error(to, "cannot replace", errno);
  return Ok{};
}

Status RealFileSystem::exchange(const std::string& a, const std::string& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0) {
    const int err = errno;
    if (err == EINVAL || err == ENOSYS || err == ENOTSUP)
      return make_error(ErrorCode::kUnsupported, "the file system cannot exchange two names atomically");
    return io_error(b, "cannot replace", err);
  }
  return Ok{};
}

Result<std::shared_ptr<FileLock>> RealFileSystem::lock(const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(lock_timeout_ms);
  while (true) {
    // A lock on the file this process already holds (the same file under another name too).
    struct stat named {};
    if (::stat(path.c_str(), &named) == 0) {
      auto it = locks_.find({static_cast<std::uint64_t>(named.st_dev), static_cast<std::uint64_t>(named.st_ino)});
      if (it != locks_.end())
        if (auto held = it->second.lock()) return held;
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return io_error(path, "cannot open to lock", errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return io_error(path, "cannot lock", err);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return io_error_text(path, fmt::format("cannot lock: {}, not a regular file", file_kind(st.st_mode)));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err != EWOULDBLOCK && err != EINTR) return io_error(path, "cannot lock", err);
      if (std::chrono::steady_clock::now() > deadline)
        return make_error(ErrorCode::kConflict,
                          fmt::format("{}: another program (another memplan --apply?) has held its lock for {} s",
                                      path, lock_timeout_ms / 1000),
                          "wait for it to finish, then run memplan again");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    // The lock belongs to the file we opened; if another writer renamed a new file over the name
    // meanwhile, that one is the file to lock.
    struct stat now {};
    if (::stat(path.c_str(), &now) != 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
      ::close(fd);
      continue;
    }
    auto lock = std::make_shared<RealFileLock>(fd, path, info_of(st));
    locks_[{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)}] = lock;
    return std::shared_ptr<FileLock>(lock);
  }
}

Status RealFileSystem::remove(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return io_error(path, "cannot remove", errno);
  return Ok{};
}

Status RealFileSystem::sync_dir(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error(dir, "cannot open directory", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems do not support fsync on directories; the rename itself already happened.
  if (rc != 0 && err != EINVAL && err != EROFS) return io_error(dir, "cannot flush directory", err);
  return Ok{};
}

FileSystem& real_file_system() {
  static RealFileSystem fs;
  return fs;
}

// ---- MemoryFileSystem ----

namespace {

// A lock in memory: one process, so it only has to remember which file it was taken on.
class MemoryFileLock : public FileLock {
 public:
  MemoryFileLock(MemoryFileSystem& fs, std::string path, FileInfo info)
      : fs_(fs), path_(std::move(path)), info_(info) {}
  Result<std::string> read_locked() override {
    // The file with the locked identity, wherever it is now; gone: its last content is unknown.
    for (const auto& [name, ino] : fs_.inodes)
      if (ino == info_.ino && fs_.files.count(name)) return fs_.files.at(name);
    auto gone = fs_.removed.find(info_.ino);
    if (gone != fs_.removed.end()) return gone->second;
    return io_error(path_, "cannot read", ENOENT);
  }
  FileInfo locked_info() const override { return info_; }

 private:
  MemoryFileSystem& fs_;
  std::string path_;
  FileInfo info_;
};

}  // namespace

std::uint64_t MemoryFileSystem::inode_of(const std::string& path) {
  auto [it, inserted] = inodes.emplace(path, 0);
  if (inserted) it->second = next_inode_++;
  return it->second;
}

Result<std::string> MemoryFileSystem::read_file(const std::string& path) {
  auto target = resolve_symlinks(path);
  if (!target) return target.error();
  auto it = files.find(*target);
  if (it == files.end()) return io_error(path, "cannot read", ENOENT);
  if (static_cast<std::int64_t>(it->second.size()) > kMaxConfigFileBytes)
    return io_error_text(path, "cannot read: larger than the config file limit");
  return it->second;
}

Result<FileInfo> MemoryFileSystem::stat(const std::string& path) {
  FileInfo fi;
  auto target = resolve_symlinks(path);
  if (!target) return fi;
  auto it = files.find(*target);
  if (it == files.end()) return fi;
  auto m = info.find(*target);
  if (m != info.end()) fi = m->second;
  fi.exists = true;
  fi.regular = true;
  fi.size = static_cast<std::int64_t>(it->second.size());
  fi.ino = inode_of(*target);
  return fi;
}

Result<std::string> MemoryFileSystem::resolve_symlinks(const std::string& path) {
  std::string p = path;
  for (int i = 0; i < 40; ++i) {
    auto it = links.find(p);
    if (it == links.end()) return p;
    p = it->second;
  }
  return io_error(path, "cannot resolve path", ELOOP);
}

Result<std::string> MemoryFileSystem::write_temp(const std::string& dir, const std::string& base,
                                                 std::string_view content, const FileInfo& like) {
  const std::string name = join(dir, fmt::format(".{}.memplan-{}", base, next_temp_++));
  files[name] = std::string(content);
  info[name] = like;
  inodes[name] = next_inode_++;
  return name;
}

Status MemoryFileSystem::rename(const std::string& from, const std::string& to) {
  auto it = files.find(from);
  if (it == files.end()) return io_error(from, "cannot replace", ENOENT);
  files[to] = std::move(it->second);
  files.erase(it);
  auto m = info.find(from);
  if (m != info.end()) {
    info[to] = m->second;
    info.erase(m);
  }
  inodes[to] = inode_of(from);
  inodes.erase(from);
  return Ok{};
}

Status MemoryFileSystem::exchange(const std::string& a, const std::string& b) {
  if (!can_exchange) return make_error(ErrorCode::kUnsupported, "the file system cannot exchange two names atomically");
  if (!files.count(a) || !files.count(b)) return io_error(b, "cannot replace", ENOENT);
  std::swap(files[a], files[b]);
  std::swap(info[a], info[b]);
  const std::uint64_t ia = inode_of(a), ib = inode_of(b);
  inodes[a] = ib;
  inodes[b] = ia;
  return Ok{};
}

Result<std::shared_ptr<FileLock>> MemoryFileSystem::lock(const std::string& path) {
  MEMPLAN_TRY(std::string target, resolve_symlinks(path));
  MEMPLAN_TRY(FileInfo fi, stat(target));
  if (!fi.exists) return io_error(path, "cannot open to lock", ENOENT);
  return std::shared_ptr<FileLock>(std::make_shared<MemoryFileLock>(*this, target, fi));
}

Status MemoryFileSystem::remove(const std::string& path) {
  if (files.count(path)) removed[inode_of(path)] = files[path];
  files.erase(path);
  info.erase(path);
  inodes.erase(path);
  return Ok{};
}

Status MemoryFileSystem::sync_dir(const std::string&) { return Ok{}; }

}  // namespace memplan::io

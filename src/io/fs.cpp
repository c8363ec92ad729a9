#include "io/fs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

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

}  // namespace

Result<std::string> RealFileSystem::read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path, "cannot read", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error(path, "cannot read", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    Error e = make_error(ErrorCode::kIoError, "cannot read: not a regular file");
    e.where = SourceLocation{path, 0, 0};
    return e;
  }
  std::string out;
  char buf[1 << 15];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return io_error(path, "cannot read", err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

Result<FileInfo> RealFileSystem::stat(const std::string& path) {
  struct stat st {};
  FileInfo fi;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return fi;
    return io_error(path, "cannot stat", errno);
  }
  fi.exists = true;
  fi.regular = S_ISREG(st.st_mode);
  fi.size = static_cast<std::int64_t>(st.st_size);
  fi.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  fi.mode = st.st_mode & 07777;
  fi.uid = st.st_uid;
  fi.gid = st.st_gid;
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
  // Keep the owner when we may (root editing someone's file); otherwise the file is ours anyway.
  if (like.exists && (like.uid != ::geteuid() || like.gid != ::getegid())) {
    if (::fchown(fd, like.uid, like.gid) != 0 && errno != EPERM) return fail("cannot set owner", errno);
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

Result<std::string> MemoryFileSystem::read_file(const std::string& path) {
  auto target = resolve_symlinks(path);
  if (!target) return target.error();
  auto it = files.find(*target);
  if (it == files.end()) return io_error(path, "cannot read", ENOENT);
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
  return Ok{};
}

Status MemoryFileSystem::remove(const std::string& path) {
  files.erase(path);
  info.erase(path);
  return Ok{};
}

Status MemoryFileSystem::sync_dir(const std::string&) { return Ok{}; }

}  // namespace memplan::io

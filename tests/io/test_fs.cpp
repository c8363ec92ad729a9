// RealFileSystem::read_file on what is not a config file (issue 11 items 7 and 8): a FIFO, a
// device, a directory and a file over the size limit are refused at once, without blocking or
// reading without end; through load_config, --keys and --model too.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "io/config/config_loader.hpp"
#include "io/fs.hpp"
#include "io/model/model_source.hpp"

using namespace memplan;
using namespace memplan::io;
namespace stdfs = std::filesystem;

namespace {

struct Scratch {
  std::string path;
  Scratch() {
    std::string tmpl = (stdfs::temp_directory_path() / "memplan-fs-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~Scratch() { stdfs::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

}  // namespace

TEST_CASE("fs (issue 11 item 8): a FIFO is refused without waiting for a writer") {
  Scratch dir;
  const std::string fifo = dir / "config.yaml";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  RealFileSystem fs;
  CHECK(fs.read_file(fifo).error().to_string() == fifo + ": cannot read: a FIFO (named pipe), not a regular file");
  ConfigRequest req;
  req.files = {fifo};
  CHECK(load_config(req, fs).error().to_string() == fifo + ": cannot read: a FIFO (named pipe), not a regular file");
  CHECK(parse_key_map(fifo, fs).error().to_string() == fifo + ": cannot read: a FIFO (named pipe), not a regular file");
  CHECK(resolve_model(fifo, ModelSearchEnv{}).error().to_string() ==
        fifo + ": cannot read: a FIFO (named pipe), not a regular file");
  CHECK(fs.lock(fifo).error().to_string() == fifo + ": cannot lock: a FIFO (named pipe), not a regular file");
  // No bound on time (issue 34): a FIFO opened for reading would block this test for ever.
}

TEST_CASE("fs (issue 11 item 7): /dev/zero, a directory and an oversized file are refused at once") {
  RealFileSystem fs;
  CHECK(fs.read_file("/dev/zero").error().to_string() == "/dev/zero: cannot read: a character device, not a regular file");
  CHECK(resolve_model("/dev/zero", ModelSearchEnv{}).error().to_string() ==
        "/dev/zero: cannot read: a character device, not a regular file");
  Scratch dir;
  CHECK(fs.read_file(dir.path).error().to_string() == dir.path + ": cannot read: a directory, not a regular file");
  // A sparse file one byte over 16 MiB: refused from its size, nothing read.
  const std::string big = dir / "big.yaml";
  { std::ofstream(big) << "a: 1\n"; }
  stdfs::resize_file(big, static_cast<std::uintmax_t>(kMaxConfigFileBytes) + 1);
  CHECK(fs.read_file(big).error().to_string() ==
        big + ": cannot read: 16777217 bytes, larger than 16 MiB; memplan reads config files up to that size");
  stdfs::resize_file(big, static_cast<std::uintmax_t>(kMaxConfigFileBytes));
  CHECK(fs.read_file(big).value().size() == static_cast<std::size_t>(kMaxConfigFileBytes));
}

TEST_CASE("fs: stat reports identity, links and whether the file may be replaced") {
  Scratch dir;
  const std::string f = dir / "a.yaml";
  { std::ofstream(f) << "a: 1\n"; }
  RealFileSystem fs;
  FileInfo i = fs.stat(f).value();
  CHECK(i.exists);
  CHECK(i.regular);
  CHECK(i.nlink == 1);
  CHECK(i.writable);
  CHECK(i.keeps_owner);
  REQUIRE(::chmod(f.c_str(), 0444) == 0);
  CHECK_FALSE(fs.stat(f).value().writable);
  REQUIRE(::link(f.c_str(), (dir / "b.yaml").c_str()) == 0);
  CHECK(fs.stat(f).value().nlink == 2);
  CHECK(fs.stat(dir / "b.yaml").value().ino == i.ino);
  // exchange swaps two names atomically.
  { std::ofstream(dir / "c.yaml") << "c\n"; }
  REQUIRE(fs.exchange(dir / "c.yaml", f).has_value());
  CHECK(fs.read_file(f).value() == "c\n");
  CHECK(fs.read_file(dir / "c.yaml").value() == "a: 1\n");
}

TEST_CASE("fs (issue 34): a replacement keeps the file's extended attributes and ACL") {
  Scratch dir;
  const std::string f = dir / "train.yaml";
  { std::ofstream(f) << "a: 1\n"; }
  if (::setxattr(f.c_str(), "user.memplan_test", "kept", 4, 0) != 0) {
    WARN("this file system takes no user extended attributes (" << std::strerror(errno) << "); not checked here");
    return;
  }
  RealFileSystem fs;
  const auto info = fs.stat(f);
  REQUIRE(info);
  const auto tmp = fs.write_temp(dir.path, "train.yaml", "a: 2\n", *info);
  REQUIRE(tmp);
  char value[16] = {};
  CHECK(::getxattr(tmp->c_str(), "user.memplan_test", value, sizeof value) == 4);
  CHECK(std::string(value) == "kept");
  ::unlink(tmp->c_str());
}

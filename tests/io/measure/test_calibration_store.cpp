// The calibration store under concurrent writers and hostile contents (issue 34): whole records
// appended under a lock, unique temp names for calibration.json, stored values validated.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "io/measure/calibration_store.hpp"
#include "cli/cli_harness.hpp"

using namespace memplan;
using namespace memplan::io;

namespace {

MeasuredRun big_run(int i) {
  MeasuredRun r;
  r.machine = {"host-" + std::string(600, 'h'), "NVIDIA H100 80GB HBM3 " + std::string(600, 'g')};  // > 1 KiB
  r.model = "m" + std::to_string(i);
  r.micro_batch = i + 1;
  r.measured = Bytes::gib(20) + Bytes::mib(i);
  r.predicted = Bytes::gib(19) + Bytes::mib(i);
  return r;
}

}  // namespace

TEST_CASE("calibration store (issue 34): two writers never interleave records, nor share a temp file") {
  memplan::testing::TempDir dir;
  const std::string d = dir.path() + "/store";
  // Four processes, each appending 50 records of over 1 KiB one at a time and rewriting the fits.
  std::vector<pid_t> kids;
  for (int k = 0; k < 4; ++k) {
    const pid_t p = ::fork();
    REQUIRE(p >= 0);
    if (p == 0) {
      bool ok = true;
      for (int i = 0; i < 50; ++i) {
        ok = ok && append_measurements(d, {big_run(k * 100 + i)}).has_value();
        MachineFit f;
        f.machine = {"h", "g"};
        f.calibration.points = 2;
        f.calibration.offset_bytes = k;
        f.fitted = std::string(4000, 'x');  // a file large enough to be written in several pieces
        ok = ok && write_fits(d, {f}).has_value();
      }
      ::_exit(ok ? 0 : 1);
    }
    kids.push_back(p);
  }
  for (pid_t p : kids) {
    int status = 0;
    REQUIRE(::waitpid(p, &status, 0) == p);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  const auto runs = read_measurements(d);
  REQUIRE(runs);
  CHECK(runs->size() == 200);
  const auto fits = read_fits(d);
  REQUIRE(fits);  // valid JSON: one writer's whole file
  REQUIRE(fits->size() == 1);
  // No temp file is left behind.
  int others = 0;
  for (const auto& e : std::filesystem::directory_iterator(d)) {
    const std::string n = e.path().filename().string();
    if (n != "measurements.jsonl" && n != "calibration.json" && n != ".lock") ++others;
  }
  CHECK(others == 0);
}

TEST_CASE("calibration store (issue 34): values that cannot be a calibration are refused where they are") {
  memplan::testing::TempDir dir;
  const std::string d = dir.path();
  const auto store = [&](const std::string& machine) {
    std::ofstream(d + "/calibration.json") << "{\"schema\": \"memplan-calibration/1\", \"machines\": [{\"host\": \"h\", "
                                              "\"gpu\": \"g\", " + machine + "}]}\n";
    return read_fits(d);
  };
  const auto scale = store("\"points\": 2, \"scale\": 1e300, \"offset_bytes\": 0");
  REQUIRE_FALSE(scale);
  CHECK(scale.error().to_string() == d + "/calibration.json: not a calibration file: the fit for g on h: scale 1e+300 "
                                         "is outside [0.5, 2]; run memplan calibrate again to rewrite it");
  const auto fl = store("\"points\": 2, \"scale\": 1.0, \"offset_bytes\": -9.0e18");
  REQUIRE_FALSE(fl);
  CHECK(fl.error().message == "not a calibration file: \"offset_bytes\" must be an integer");
  const auto off = store("\"points\": 2, \"scale\": 1.0, \"offset_bytes\": -75161927680, \"max_predicted_bytes\": "
                         "32212254720");
  REQUIRE_FALSE(off);  // -70 GiB against predictions up to 30 GiB
  CHECK(off.error().message ==
        "not a calibration file: the fit for g on h: offset -75161927680 bytes is larger than 15.00 GiB");
  const auto good = store("\"points\": 2, \"scale\": 1.05, \"offset_bytes\": 1073741824");
  REQUIRE(good);
  CHECK(good->at(0).calibration.scale == 1.05);
}

// Tests src/report/profile_render.cpp on hand-built results (plain data): seed 000's table as
// markdown, the text rows and summary, and the JSON fields, with every figure derived here.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli/cli_harness.hpp"
#include "report/profile_render.hpp"

using namespace memplan;

namespace {

// 8 GiB machine, 1 GiB in use before the ladder; micro-batch 1 ok at 50 MiB, 2 stopped at
// 301 MiB > 300 MiB, 4 not run.
io::ProfileResult sample() {
  io::ProfileResult res;
  res.command = {"python", "train.py", "--bs", "{batch}"};
  res.watch = "system";
  res.watch_description = "resident memory of the process tree (/proc)";
  res.stop_at = Bytes::mib(300);
  res.stop_at_source = "--stop-at 300MiB";
  res.total = Bytes::gib(8);
  res.baseline = Bytes::gib(1);
  res.log_dir = "logs";
  io::RungResult a;
  a.rung = {1, 1, 0};
  a.status = io::RungStatus::kOk;
  a.peak = Bytes::mib(50);
  a.seconds = 1.3;
  a.exit_code = 0;
  a.predicted = Bytes::mib(40);
  a.argv = {"python", "train.py", "--bs", "1"};
  a.notes = "baseline";
  io::RungResult b;
  b.rung = {2, 1, 0};
  b.status = io::RungStatus::kStopped;
  b.peak = Bytes::mib(301);
  b.seconds = 0.5;
  b.signal = 15;
  b.predicted = Bytes::mib(80);
  b.argv = {"python", "train.py", "--bs", "2"};
  b.notes = "a sample of 301.0 MiB passed --stop-at 300.0 MiB";
  res.runs = {a, b};
  res.not_run = {io::Rung{4, 1, 0}};
  res.safe_maximum = 0;
  return res;
}

}  // namespace

TEST_CASE("profile table as markdown: seed 000's columns with the prediction and the difference") {
  // Headroom: 8 GiB - 1 GiB - 50 MiB = 7118 MiB = 6.95 GiB; 7168 - 301 = 6867 MiB = 6.71 GiB.
  // Difference: 50 - 40 = +10 MiB; 301 - 80 = +221 MiB.
  const std::string md = report::render_profile(sample(), report::Format::kMarkdown);
  CHECK(md.rfind("| micro-batch | grad-accum | seq-len | peak | headroom | predicted | difference | time | status | notes |\n"
                 "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n"
                 "| 1 | 1 | - | 50.0 MiB | 6.95 GiB | 40.0 MiB | +10.0 MiB | 1.3 s | ok | baseline |\n"
                 "| 2 | 1 | - | 301.0 MiB | 6.71 GiB | 80.0 MiB | +221.0 MiB | 0.5 s | stopped | a sample of 301.0 MiB "
                 "passed --stop-at 300.0 MiB |\n"
                 "| 4 | 1 | - | - | - | - | - | - | not run |  |\n",
                 0) == 0);
  CHECK(md.find("\nSafe maximum: micro-batch 1, grad-accum 1 (peak 50.0 MiB, 250.0 MiB below --stop-at).\n"
                "The ladder ended at micro-batch 2, grad-accum 1: stopped; 1 rung not run.\n"
                "Watchdog: resident memory of the process tree (/proc), stop at 300.0 MiB (--stop-at 300MiB).\n"
                "Before the first rung: 1.00 GiB of 8.00 GiB in use. Logs: logs\n") != std::string::npos);
}

TEST_CASE("profile table as text: aligned rows, and no prediction columns without predictions") {
  auto res = sample();
  for (auto& r : res.runs) r.predicted.reset();
  const std::string text = report::render_profile(res, report::Format::kText);
  CHECK(testing::cells(text.substr(0, text.find('\n'))) ==
        std::vector<std::string>{"micro-batch", "grad-accum", "seq-len", "peak", "headroom", "time", "status", "notes"});
  CHECK(testing::row(text, "2") ==
        std::vector<std::string>{"2", "1", "-", "301.0 MiB", "6.71 GiB", "0.5 s", "stopped",
                                 "a sample of 301.0 MiB passed --stop-at 300.0 MiB"});
  CHECK(testing::row(text, "4") == std::vector<std::string>{"4", "1", "-", "-", "-", "-", "not run"});
}

TEST_CASE("profile JSON: profile.runs[] with the fields the issue names") {
  const auto j = nlohmann::json::parse(report::render_profile(sample(), report::Format::kJson));
  const auto& p = j["profile"];
  CHECK(j["schema"] == "memplan/1");
  CHECK(p["watch"] == "system");
  CHECK(p["stop_at_bytes"] == 300 * 1048576LL);
  CHECK(p["runs"].size() == 2);
  const auto& b = p["runs"][1];
  CHECK(b["micro_batch"] == 2);
  CHECK(b["grad_accum"] == 1);
  CHECK(b["seq_len"].is_null());
  CHECK(b["status"] == "stopped");
  CHECK(b["peak_bytes"] == 301 * 1048576LL);
  CHECK(b["headroom_bytes"] == (8LL << 30) - (1LL << 30) - 301 * 1048576LL);
  CHECK(b["seconds"] == 0.5);
  CHECK(b["signal"] == 15);
  CHECK(b["exit_code"].is_null());
  CHECK(b["predicted_bytes"] == 80 * 1048576LL);
  CHECK(b["difference_bytes"] == 221 * 1048576LL);
  CHECK(b["command"] == nlohmann::json::array({"python", "train.py", "--bs", "2"}));
  CHECK(p["not_run"] == nlohmann::json::parse(R"([{"micro_batch":4,"grad_accum":1,"seq_len":null}])"));
  CHECK(p["safe_maximum"] ==
        nlohmann::json::parse(R"({"micro_batch":1,"grad_accum":1,"seq_len":null,"peak_bytes":52428800})"));
}

TEST_CASE("calibration table: scale, signed offset and residuals per machine") {
  io::MachineFit f;
  f.machine = {"box", "h100-sxm"};
  f.calibration.points = 3;
  f.calibration.scale = 1.05;
  f.calibration.offset_bytes = -(512LL << 20);
  f.calibration.rms_residual = Bytes::mib(100);
  f.calibration.max_residual = Bytes::mib(150);
  const std::string text = report::render_calibration({f}, 4, 1, "/d/calibration.json", report::Format::kText);
  CHECK(testing::row(text, "box") ==
        std::vector<std::string>{"box", "h100-sxm", "3", "1.0500", "-512.0 MiB", "100.0 MiB", "150.0 MiB"});
  CHECK(text.find("\n4 measured runs, 1 without a prediction (not used).\n") != std::string::npos);
  CHECK(text.find("Written to /d/calibration.json\n") != std::string::npos);
}

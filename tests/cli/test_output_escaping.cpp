// Every output escaped for its format (issue 34): --format json with bytes that are not UTF-8 in a
// value, a key or a file name; JSON error objects on stdout; a full disk; GitHub workflow commands
// and text lines that a file name cannot forge.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <streambuf>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli_harness.hpp"

using memplan::testing::CliRun;
using memplan::testing::run_cli;
using json = nlohmann::json;
namespace stdfs = std::filesystem;

namespace {

struct Dir {
  std::string path;
  Dir() {
    std::string tmpl = (stdfs::temp_directory_path() / "memplan-escape-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~Dir() { stdfs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path + "/" + name, std::ios::binary) << text;
    return path + "/" + name;
  }
};

const std::string kFits =
    "# memplan: gpu-memory=1000TB\nmodel_name_or_path: meta-llama/Llama-3.1-8B\nper_device_train_batch_size: 2\n"
    "bf16: true\ngradient_checkpointing: true\n";

// A stream that refuses every byte, as stdout redirected to /dev/full does.
class FullDisk : public std::streambuf {
 protected:
  int_type overflow(int_type) override { return traits_type::eof(); }
  std::streamsize xsputn(const char*, std::streamsize) override { return 0; }
};

}  // namespace

TEST_CASE("--format json (issue 34): bytes that are not UTF-8 become U+FFFD, never exit 70 with nothing") {
  Dir d;
  // \xff cannot start a UTF-8 sequence: in a file name, an unknown key and a value.
  const std::string name = d.write("bad\xff.yaml", kFits + "lora_rnak\xff: 8\nrun_name: r\xfe\n");
  const std::string good = d.write("good.yaml", kFits);
  CliRun r = run_cli({"check", name, good, "--format", "json"});
  INFO(r.err);
  CHECK(r.code == 0);
  const json j = json::parse(r.out);
  REQUIRE(j["results"].size() == 2);
  CHECK(j["results"][0]["file"] == d.path + "/bad\xef\xbf\xbd.yaml");  // U+FFFD in UTF-8
  CHECK(j["results"][0]["status"] == "fits");
  CHECK(j["results"][1]["file"] == good);
  CHECK(j["results"][1]["status"] == "fits");
  const std::string warnings = j["results"][0]["warnings"].dump();
  CHECK(warnings.find("lora_rnak\\ufffd") == std::string::npos);  // dump() writes it as UTF-8
  CHECK(warnings.find("lora_rnak\xef\xbf\xbd") != std::string::npos);

  CliRun e = run_cli({"estimate", "--config", name, "--format", "json"});
  INFO(e.err);
  CHECK(e.code == 0);
  CHECK(json::parse(e.out).contains("estimate"));
}

TEST_CASE("--format json (issue 34): an error is a JSON object on stdout too, for every command") {
  for (const std::string cmd : {"estimate", "plan", "sweep"}) {
    CliRun r = run_cli({cmd, "--model", "no-such/model-xyz", "--format", "json", "--gpu-memory", "80GiB"});
    INFO(cmd << ": " << r.err);
    CHECK(r.code == 2);
    REQUIRE(!r.out.empty());
    const json j = json::parse(r.out);
    CHECK(j["schema"] == "memplan/1");
    CHECK(j["exit_code"] == 2);
    // The same message as on stderr.
    CHECK(r.err == "memplan: error: " + j["error"]["message"].get<std::string>() +
                       (j["error"]["suggestion"].is_null() ? "" : "; " + j["error"]["suggestion"].get<std::string>()) +
                       "\n");
  }
  // A usage error that check reports itself (exit 64) has one too; text mode keeps stdout empty.
  CliRun u = run_cli({"check", "x.yaml", "--format=json", "--max-utilization", "120"});
  CHECK(u.code == 64);
  CHECK(json::parse(u.out)["error"]["message"].get<std::string>().find("--max-utilization = 120") == 0);
  CliRun t = run_cli({"estimate", "--model", "no-such/model-xyz"});
  CHECK(t.out.empty());
}

TEST_CASE("output (issue 34): a result that cannot be written (a full disk) exits 3 with a message") {
  FullDisk full;
  std::ostream out(&full);
  std::ostringstream err;
  const int code = memplan::cli::run({"models", "--format", "json"}, out, err);
  CHECK(code == 3);
  CHECK(err.str().rfind("memplan: error: cannot write the output to stdout", 0) == 0);
}

TEST_CASE("check --format github / text (issue 34): a file name cannot inject commands or lines") {
  Dir d;
  // A fitting config whose name carries a newline and a workflow command, and one named "::x".
  const std::string evil = d.write("a\n::error file=x::pwned%.yaml", kFits);
  const std::string colons = d.write("::warning::b.yaml", kFits);
  CliRun g = run_cli({"check", evil, colons, "--format", "github"});
  CHECK(g.code == 0);
  CHECK(g.out.find("\n::error") == std::string::npos);
  CHECK(g.out.find(d.path + "/a%0A::error file=x::pwned%.yaml:3: fits: ") == 0);
  CHECK(g.out.find("\n" + d.path + "/::warning::b.yaml:3: fits: ") != std::string::npos);
  // The same name as a bare relative path: the line must not start with "::".
  const std::string cwd = stdfs::current_path().string();
  stdfs::current_path(d.path);
  CliRun rel = run_cli({"check", "::warning::b.yaml", "--format", "github"});
  stdfs::current_path(cwd);
  CHECK(rel.out.rfind("%3A:warning::b.yaml:3: fits: ", 0) == 0);

  // A config that does not fit: the name in file= is a property (: and , escaped too).
  const std::string big = d.write("big,\r\n1:x.yaml",
                                  "model_name_or_path: meta-llama/Llama-3.1-8B\nper_device_train_batch_size: 8\n"
                                  "bf16: true\ngradient_checkpointing: true\n# memplan: gpu-memory=4GiB\n");
  CliRun b = run_cli({"check", big, "--format", "github"});
  CHECK(b.code == 1);
  CHECK(b.out.rfind("::error file=", 0) == 0);
  CHECK(b.out.find("/big%2C%0D%0A1%3Ax.yaml,line=2,title=memplan%3A does not fit::") != std::string::npos);

  // Text mode: a newline and an escape sequence in the name are shown as \x0a and \x1b.
  const std::string esc = d.write("c\n\x1b[31mfake.yaml", kFits);
  CliRun t = run_cli({"check", esc});
  CHECK(t.code == 0);
  CHECK(t.out.rfind(d.path + "/c\\x0a\\x1b[31mfake.yaml:3: fits: ", 0) == 0);
  CHECK(std::count(t.out.begin(), t.out.end(), '\n') == 2);  // its line and the summary
}

// Tests src/report/html.cpp through the commands that render it (estimate, plan, sweep --format
// html): one self-contained page, every input-derived text escaped, and every number drawn equal
// to the same command's --format json output (read back from the data-bytes attributes).
#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../cli/cli_harness.hpp"
#include "cli/exit_codes.hpp"
#include "report/html.hpp"

using namespace memplan::testing;
using json = nlohmann::json;

namespace {

// The values of `attr` on elements that start with `tag_start` ("<rect class=\"component\""), in order.
std::vector<std::int64_t> attr_values(const std::string& html, const std::string& tag_start, const std::string& attr) {
  std::vector<std::int64_t> out;
  for (std::size_t at = html.find(tag_start); at != std::string::npos; at = html.find(tag_start, at + 1)) {
    const std::size_t end = html.find('>', at);
    const std::string tag = html.substr(at, end - at);
    std::smatch m;
    if (std::regex_search(tag, m, std::regex(attr + "=\"(-?[0-9]+)\""))) out.push_back(std::stoll(m[1]));
  }
  return out;
}

// What makes a page not self-contained, or run code.
void check_self_contained(const std::string& html) {
  CHECK(html.rfind("<!DOCTYPE html>\n<html lang=\"en\">", 0) == 0);
  CHECK(html.find("</html>\n") == html.size() - 8);
  CHECK(html.find("<meta charset=\"utf-8\">") != std::string::npos);
  CHECK(html.find("<style>") != std::string::npos);
  for (const char* bad : {"<script", "src=", "href=", "<link", "@import", "url(", "<iframe", "onload", "onerror"}) {
    INFO(bad);
    CHECK(html.find(bad) == std::string::npos);
  }
  // The only URL is SVG's namespace name, which nothing fetches.
  std::string rest = html;
  for (std::size_t at; (at = rest.find("xmlns=\"http://www.w3.org/2000/svg\"")) != std::string::npos;)
    rest.erase(at, 34);
  CHECK(rest.find("http") == std::string::npos);
}

}  // namespace

TEST_CASE("html_escape escapes markup, quotes and control characters") {
  using memplan::report::html_escape;
  CHECK(html_escape("a<b>&\"'c") == "a&lt;b&gt;&amp;&quot;&#39;c");
  CHECK(html_escape("</title><script>alert(1)</script>") ==
        "&lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt;");
  CHECK(html_escape(std::string("x\x1by\0z", 5)) == "x\xEF\xBF\xBDy\xEF\xBF\xBDz");
  CHECK(html_escape("tab\tnew\nline") == "tab\tnew\nline");
  CHECK(html_escape("") == "");
}

TEST_CASE("estimate --format html: the breakdown's bar holds the JSON's components; the budget line is the fit's") {
  const std::vector<std::string> args = {"estimate", "--model", "llama-3.1-8b", "--method", "lora", "--batch", "2",
                                         "--seq-len", "2048", "--gradient-checkpointing", "--gpu", "h100-sxm"};
  const auto j = run_cli(with(args, {"--format", "json"}));
  const auto h = run_cli(with(args, {"--format", "html"}));
  REQUIRE(j.code == 0);
  REQUIRE(h.code == 0);
  check_self_contained(h.out);
  const json doc = json::parse(j.out);
  std::vector<std::int64_t> components;
  for (const auto& c : doc["estimate"]["components"])
    if (c["bytes"].get<std::int64_t>() > 0) components.push_back(c["bytes"]);
  REQUIRE(!components.empty());
  CHECK(attr_values(h.out, "<rect class=\"component\"", "data-bytes") == components);
  // The verdict names the peak and the budget exactly as JSON's fit does.
  const auto spans = attr_values(h.out, "<span data-bytes", "data-bytes");
  REQUIRE(spans.size() >= 2);
  CHECK(spans[0] == doc["fit"]["peak_bytes"].get<std::int64_t>());
  CHECK(spans[1] == doc["fit"]["budget_bytes"].get<std::int64_t>());
  CHECK(h.out.find("<section class=\"verdict fits\">Fits on ") != std::string::npos);
  CHECK(h.out.find("class=\"budget\"") != std::string::npos);
}

TEST_CASE("plan --format html: verdict, breakdown at the recommendation and the curve against the budget") {
  const std::vector<std::string> args = {"plan", "--model", "llama-3.1-8b", "--method", "lora", "--seq-len", "2048",
                                         "--gpu", "h100-sxm"};
  const auto j = run_cli(with(args, {"--format", "json"}));
  const auto h = run_cli(with(args, {"--format", "html"}));
  REQUIRE(j.code == 0);
  REQUIRE(h.code == 0);
  check_self_contained(h.out);
  const json doc = json::parse(j.out);
  const auto& rec = doc["recommendation"];
  CHECK(h.out.find(fmt::format("Recommended: micro-batch {} × grad-accum {}", rec["micro_batch"].get<int>(),
                               rec["grad_accum"].get<int>())) != std::string::npos);
  const auto spans = attr_values(h.out, "<span data-bytes", "data-bytes");
  REQUIRE(spans.size() >= 2);
  CHECK(spans[0] == rec["peak_bytes"].get<std::int64_t>());
  CHECK(spans[1] == doc["budget"]["budget_bytes"].get<std::int64_t>());
  // The breakdown at the recommendation sums to its peak, which is the plan's peak.
  std::int64_t sum = 0;
  for (auto b : attr_values(h.out, "<rect class=\"component\"", "data-bytes")) sum += b;
  CHECK(sum == rec["peak_bytes"].get<std::int64_t>());
  // The curve: at the recommended micro-batch, the plan's peak; one more is over the budget.
  const auto mbs = attr_values(h.out, "<circle class=\"point\"", "data-micro-batch");
  const auto peaks = attr_values(h.out, "<circle class=\"point\"", "data-bytes");
  REQUIRE(mbs.size() == peaks.size());
  bool found = false;
  for (std::size_t i = 0; i < mbs.size(); ++i) {
    if (mbs[i] == rec["micro_batch"].get<std::int64_t>()) {
      found = true;
      CHECK(peaks[i] == rec["peak_bytes"].get<std::int64_t>());
    }
    if (mbs[i] == rec["micro_batch"].get<std::int64_t>() + 1 && rec["next_peak_bytes"].is_number())
      CHECK(peaks[i] == rec["next_peak_bytes"].get<std::int64_t>());
  }
  CHECK(found);
}

TEST_CASE("sweep --format html: one point per JSON point, peaks equal") {
  const std::vector<std::string> args = {"sweep",     "--model",   "gpt2", "--batches", "1,2,4,8",
                                         "--seq-lens", "512,1024", "--gpu", "a100-40gb"};
  const auto j = run_cli(with(args, {"--format", "json"}));
  const auto h = run_cli(with(args, {"--format", "html"}));
  INFO(h.err);
  REQUIRE(h.code == j.code);
  check_self_contained(h.out);
  std::vector<std::int64_t> peaks;
  const json doc = json::parse(j.out);
  for (const auto& p : doc["points"]) peaks.push_back(p["peak_bytes"]);
  std::vector<std::int64_t> drawn = attr_values(h.out, "<circle class=\"point\"", "data-bytes");
  std::sort(peaks.begin(), peaks.end());
  std::sort(drawn.begin(), drawn.end());
  CHECK(drawn == peaks);
  CHECK(h.out.find("<polyline") != std::string::npos);
}

TEST_CASE("--format html escapes file and model names; other commands refuse it") {
  TempDir dir;
  const std::string name = "run<b>&\"'.yaml";
  const std::string path = dir.write(name, "model_name_or_path: gpt2\nper_device_train_batch_size: 2\nmax_length: 512\n");
  const auto h = run_cli({"estimate", "--config", path, "--format", "html"});
  INFO(h.err);
  REQUIRE(h.code == 0);
  check_self_contained(h.out);
  CHECK(h.out.find("<b>") == std::string::npos);
  CHECK(h.out.find("run&lt;b&gt;&amp;&quot;&#39;.yaml") != std::string::npos);

  const auto c = run_cli({"check", path, "--format", "html"});
  CHECK(c.code == memplan::cli::kExitUsage);  // check's code for bad options
  CHECK(c.err == "memplan: error: --format html is a page for estimate, plan and sweep only; use text, json, "
                 "markdown or github here\n");
}

// Tests src/cli/mcp.cpp with a scripted client session: every response is valid JSON-RPC 2.0 with
// the request's id, notifications get none, and errors carry the specified codes.
#include <catch2/catch.hpp>

#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/mcp.hpp"
#include "cli_harness.hpp"

using namespace memplan::testing;
using json = nlohmann::json;

namespace {

const std::string kSftLora = std::string(MEMPLAN_SOURCE_DIR) + "/configs/examples/hf-trl-sft-lora.yaml";

std::vector<json> session(const std::vector<std::string>& lines) {
  std::string input;
  for (const auto& l : lines) input += l + "\n";
  std::istringstream in(input);
  std::ostringstream out;
  memplan::cli::serve_mcp(in, out);
  std::vector<json> responses;
  std::istringstream got(out.str());
  std::string line;
  while (std::getline(got, line)) {
    const json j = json::parse(line);  // one message per line, no embedded newline
    CHECK(j["jsonrpc"] == "2.0");
    CHECK(j.contains("result") != j.contains("error"));
    responses.push_back(j);
  }
  return responses;
}

}  // namespace

TEST_CASE("an MCP session: initialize, tools/list, tools/call of plan, check and models, ping") {
  const json plan_call = {{"jsonrpc", "2.0"},
                          {"id", 3},
                          {"method", "tools/call"},
                          {"params", {{"name", "plan"}, {"arguments", {{"config", kSftLora}, {"gpu", "h100-sxm"}}}}}};
  const json check_call = {
      {"jsonrpc", "2.0"},
      {"id", "c-4"},
      {"method", "tools/call"},
      {"params", {{"name", "check"}, {"arguments", {{"files", json::array({kSftLora})}, {"gpu", "t4"}}}}}};
  const auto r = session({
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}})",
      R"({"jsonrpc":"2.0","method":"notifications/initialized"})",
      R"({"jsonrpc":"2.0","id":2,"method":"tools/list"})",
      plan_call.dump(),
      check_call.dump(),
      R"({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"models","arguments":{"filter":"llama-3.1-8b"}}})",
      "",
      R"({"jsonrpc":"2.0","id":6,"method":"ping"})",
  });
  REQUIRE(r.size() == 6);  // the notification and the empty line get no answer

  CHECK(r[0]["id"] == 1);
  CHECK(r[0]["result"]["protocolVersion"] == "2025-06-18");
  CHECK(r[0]["result"]["capabilities"] == json{{"tools", {{"listChanged", false}}}});
  CHECK(r[0]["result"]["serverInfo"]["name"] == "memplan");

  CHECK(r[1]["id"] == 2);
  std::vector<std::string> names;
  for (const auto& t : r[1]["result"]["tools"]) {
    names.push_back(t["name"]);
    CHECK(t["inputSchema"]["type"] == "object");
    CHECK_FALSE(t["description"].get<std::string>().empty());
  }
  CHECK(names == std::vector<std::string>{"estimate", "plan", "check", "models", "gpus"});

  // plan: the same JSON as `memplan plan --format json`, as text and as structured content.
  const auto cli = run_cli({"plan", "--config", kSftLora, "--gpu", "h100-sxm", "--format", "json"});
  REQUIRE(cli.code == 0);
  CHECK(r[2]["id"] == 3);
  CHECK(r[2]["result"]["isError"] == false);
  CHECK(r[2]["result"]["content"][0]["type"] == "text");
  CHECK(r[2]["result"]["content"][0]["text"] == cli.out);
  CHECK(r[2]["result"]["structuredContent"] == json::parse(cli.out));

  // check on a T4 (15 GB): does not fit; the answer is still a result, not an error.
  CHECK(r[3]["id"] == "c-4");
  CHECK(r[3]["result"]["isError"] == false);
  CHECK(r[3]["result"]["structuredContent"]["results"][0]["status"] == "does_not_fit");

  CHECK(r[4]["id"] == 5);
  CHECK(r[4]["result"]["structuredContent"]["models"][0]["short_name"] == "llama-3.1-8b");
  CHECK(r[5] == json{{"jsonrpc", "2.0"}, {"id", 6}, {"result", json::object()}});
}

TEST_CASE("MCP errors: parse error, invalid request, unknown method, unknown tool, bad arguments, failed run") {
  const auto r = session({
      "{not json",
      R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])",
      R"({"id":2,"method":"ping"})",
      R"({"jsonrpc":"2.0","id":3,"method":"resources/list"})",
      R"({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"sweep"}})",
      R"({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"plan","arguments":{"gpuu":"t4"}}})",
      R"({"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"estimate","arguments":{"config":"/nonexistent/train.yaml"}}})",
      R"({"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"1999-01-01"}})",
      R"({"jsonrpc":"2.0","id":8,"result":{}})",
  });
  REQUIRE(r.size() == 8);
  CHECK(r[0] == json::parse(R"({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}})"));
  CHECK(r[1]["error"]["code"] == -32600);  // MCP sends no batches
  CHECK(r[2]["id"] == 2);
  CHECK(r[2]["error"]["code"] == -32600);
  CHECK(r[3]["error"] == json{{"code", -32601}, {"message", "Method not found: resources/list"}});
  CHECK(r[4]["error"]["code"] == -32602);
  CHECK(r[4]["error"]["message"] == "Unknown tool: sweep");
  CHECK(r[5]["error"] == json{{"code", -32602},
                              {"message", "plan: unknown argument 'gpuu'"},
                              {"data", {{"suggestion", "did you mean 'gpu'?"}}}});
  CHECK(r[6]["result"]["isError"] == true);
  CHECK(r[6]["result"]["structuredContent"]["error"]["exit_code"] == 3);
  CHECK(r[6]["result"]["structuredContent"]["error"]["file"] == "/nonexistent/train.yaml");
  CHECK(r[6]["result"]["content"][0]["text"].get<std::string>().rfind("memplan: error: /nonexistent/train.yaml", 0) == 0);
  // An unknown protocol revision is answered with the newest this server speaks.
  CHECK(r[7]["result"]["protocolVersion"] == "2025-06-18");
}

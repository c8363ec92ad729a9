#include "cli/mcp.hpp"

#include <algorithm>
#include <istream>
#include <ostream>

#include <nlohmann/json.hpp>

#include "cli/tools.hpp"
#include "cli/version.hpp"
#include "memplan/text.hpp"

namespace memplan::cli {

namespace {

using json = nlohmann::json;

// JSON-RPC 2.0's error codes (section 5.1).
constexpr int kParseError = -32700;
constexpr int kInvalidRequest = -32600;
constexpr int kMethodNotFound = -32601;
constexpr int kInvalidParams = -32602;

// The MCP revisions this server speaks; an unknown one is answered with the newest (the client
// then decides whether to go on), as the lifecycle's version negotiation says.
const std::vector<std::string> kProtocolVersions = {"2025-06-18", "2025-03-26", "2024-11-05"};

std::string error_response(const json& id, int code, const std::string& message, const json& data = nullptr) {
  json e = {{"code", code}, {"message", message}};
  if (!data.is_null()) e["data"] = data;
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"error", e}}.dump();
}

std::string result_response(const json& id, const json& result) {
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"result", result}}.dump();
}

json error_fields(const Error& e) {
  json j = {{"message", e.message}, {"suggestion", e.suggestion}};
  if (e.where) {
    j["file"] = e.where->file;
    j["line"] = e.where->line;
  }
  return j;
}

json initialize_result(const json& params) {
  std::string version = kProtocolVersions.front();
  if (params.is_object() && params.contains("protocolVersion") && params["protocolVersion"].is_string()) {
    const std::string asked = params["protocolVersion"];
    if (std::find(kProtocolVersions.begin(), kProtocolVersions.end(), asked) != kProtocolVersions.end())
      version = asked;
  }
  return {{"protocolVersion", version},
          {"capabilities", {{"tools", {{"listChanged", false}}}}},
          {"serverInfo", {{"name", "memplan"}, {"version", version_line()}}},
          {"instructions",
           "Ask memplan before launching a training run: plan gives the largest micro-batch that fits a GPU and the "
           "grad-accum that keeps the global batch; estimate gives the peak memory breakdown; check says whether "
           "training configs fit. Pass a training config path as config (YAML/JSON of HF TrainingArguments, TRL, "
           "axolotl, LLaMA-Factory, torchtune, ...) or model and flags, and gpu (see gpus) or gpu_memory."}};
}

json tools_list() {
  json tools = json::array();
  for (const auto& c : tool_commands())
    tools.push_back({{"name", c}, {"description", tool_description(c)}, {"inputSchema", tool_input_schema(c)}});
  return {{"tools", tools}};
}

// A tools/call: a protocol error for an unknown tool or arguments that do not fit its schema; a
// result with isError for a run that failed (a missing file, a config that does not parse).
std::string tools_call(const json& id, const json& params) {
  if (!params.is_object() || !params.contains("name") || !params["name"].is_string())
    return error_response(id, kInvalidParams, "tools/call needs params.name, a string");
  const std::string name = params["name"];
  const auto& names = tool_commands();
  if (std::find(names.begin(), names.end(), name) == names.end())
    return error_response(id, kInvalidParams, "Unknown tool: " + name,
                          json{{"suggestion", did_you_mean(name, names)}});
  const json arguments = params.contains("arguments") ? params["arguments"] : json::object();
  const auto r = call_tool(name, arguments);
  if (!r) return error_response(id, kInvalidParams, r.error().message, json{{"suggestion", r.error().suggestion}});
  json result;
  const json parsed = json::parse(r->out, nullptr, false);
  // Exit 0 (fits) and 1 (does not fit) both carry the answer; anything else is a failed run.
  if ((r->exit_code == 0 || r->exit_code == 1) && !parsed.is_discarded()) {
    result = {{"content", json::array({{{"type", "text"}, {"text", r->out}}})},
              {"structuredContent", parsed},
              {"isError", false}};
  } else {
    json err = r->error ? error_fields(*r->error) : json{{"message", r->err}};
    err["exit_code"] = r->exit_code;
    std::string text = r->err.empty() ? r->out : r->err;
    result = {{"content", json::array({{{"type", "text"}, {"text", text}}})},
              {"structuredContent", {{"error", err}}},
              {"isError", true}};
  }
  return result_response(id, result);
}

}  // namespace

std::string McpServer::handle(const std::string& line) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return {};
  const json msg = json::parse(line, nullptr, false);
  if (msg.is_discarded()) return error_response(nullptr, kParseError, "Parse error");
  if (!msg.is_object()) return error_response(nullptr, kInvalidRequest, "Invalid Request: expected one JSON object");
  const json id = msg.contains("id") ? msg["id"] : json(nullptr);
  if (!id.is_null() && !id.is_string() && !id.is_number_integer())
    return error_response(nullptr, kInvalidRequest, "Invalid Request: id must be a string or an integer");
  if (!msg.contains("method")) return {};  // a response to a request this server never sends
  if (msg.value("jsonrpc", "") != "2.0" || !msg["method"].is_string())
    return error_response(id, kInvalidRequest, "Invalid Request: needs \"jsonrpc\": \"2.0\" and a method");
  const std::string method = msg["method"];
  const json params = msg.contains("params") ? msg["params"] : json::object();
  const bool notification = !msg.contains("id");
  if (notification) return {};  // notifications/initialized, notifications/cancelled: nothing to answer
  if (method == "initialize") return result_response(id, initialize_result(params));
  if (method == "ping") return result_response(id, json::object());
  if (method == "tools/list") return result_response(id, tools_list());
  if (method == "tools/call") return tools_call(id, params);
  return error_response(id, kMethodNotFound, "Method not found: " + method);
}

void serve_mcp(std::istream& in, std::ostream& out) {
  McpServer server;
  std::string line;
  while (std::getline(in, line)) {
    const std::string response = server.handle(line);
    if (!response.empty()) out << response << '\n' << std::flush;
  }
}

}  // namespace memplan::cli

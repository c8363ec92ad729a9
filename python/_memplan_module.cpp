// The Python package's native part: memplan's commands called in process through cli/tools.hpp,
// the same path the MCP server takes. python/memplan/__init__.py turns the answers into Python
// objects and errors into MemplanError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/tools.hpp"
#include "cli/version.hpp"
#include "io/measure/calibration_store.hpp"

namespace py = pybind11;

namespace {

py::dict error_dict(const memplan::Error& e, const std::string& kind) {
  py::dict d;
  d["kind"] = kind;
  d["message"] = e.message;
  d["suggestion"] = e.suggestion;
  d["file"] = e.where ? py::object(py::str(e.where->file)) : py::object(py::none());
  d["line"] = e.where && e.where->line > 0 ? py::object(py::int_(e.where->line)) : py::object(py::none());
  d["text"] = e.to_string();
  return d;
}

// (exit_code, stdout, stderr, error dict or None). A bad argument is exit code 2 with kind
// "arguments"; a failed run carries the CLI's Error (kind "run"), or none for a usage error.
py::tuple call(const std::string& command, const std::string& arguments_json, const std::string& format) {
  const nlohmann::json arguments = nlohmann::json::parse(arguments_json);
  memplan::Result<memplan::cli::ToolRun> r = memplan::Error{};
  {
    py::gil_scoped_release release;
    r = memplan::cli::call_tool(command, arguments, format);
  }
  if (!r) return py::make_tuple(2, "", "memplan: error: " + r.error().to_string() + "\n", error_dict(r.error(), "arguments"));
  py::object error = r->error ? py::object(error_dict(*r->error, "run")) : py::object(py::none());
  return py::make_tuple(r->exit_code, r->out, r->err, error);
}

// One measured run (the callbacks' first steps) appended to the calibration store that
// `memplan calibrate` fits from (io/calibration_store.hpp); returns the store's folder.
std::string save_measurement(const std::string& run_json) {
  const nlohmann::json j = nlohmann::json::parse(run_json);
  memplan::io::MeasuredRun r;
  r.machine = {memplan::io::host_name(), j.at("gpu").get<std::string>()};
  r.watch = j.value("watch", "torch");
  r.model = j.value("model", "");
  r.method = j.value("method", "");
  r.config = j.value("config", "");
  r.command = j.value("command", "");
  r.micro_batch = j.value("micro_batch", std::int64_t{1});
  r.grad_accum = j.value("grad_accum", std::int64_t{1});
  r.seq_len = j.value("seq_len", std::int64_t{0});
  r.measured = memplan::Bytes::of(j.at("measured_bytes").get<std::int64_t>());
  if (j.contains("predicted_bytes") && !j["predicted_bytes"].is_null())
    r.predicted = memplan::Bytes::of(j["predicted_bytes"].get<std::int64_t>());
  r.time = memplan::io::utc_now();
  const auto dir = memplan::io::data_dir();
  if (!dir) throw std::runtime_error(dir.error().to_string());
  const auto ok = memplan::io::append_measurements(*dir, {r});
  if (!ok) throw std::runtime_error(ok.error().to_string());
  return *dir;
}

}  // namespace

PYBIND11_MODULE(_memplan, m) {
  m.doc() = "memplan's engine, in process (use the memplan package's functions)";
  m.def("call", &call, py::arg("command"), py::arg("arguments_json"), py::arg("format") = "json");
  m.def("tool_input_schema", [](const std::string& command) { return memplan::cli::tool_input_schema(command).dump(); });
  m.def("version", &memplan::cli::version_text);
  m.def("save_measurement", &save_measurement, py::arg("run_json"));
}

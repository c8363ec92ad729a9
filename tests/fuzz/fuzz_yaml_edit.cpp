// Fuzzes the YAML layer --apply edits through: parse_yaml on any bytes (bounded: aliases, merge
// keys, nesting), then every in-place replacement and insertion it offers, and the number
// grammar on every scalar. An accepted replacement must apply to the text cleanly.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "io/config/numbers.hpp"
#include "io/edit/yaml_edit.hpp"

using namespace memplan::io;

namespace {

void visit(const YamlDoc& doc, const YamlNode& n, std::vector<std::string>& path, int& budget) {
  if (--budget < 0) return;
  if (n.is_scalar()) {
    (void)resolve_number(n.value, NumberGrammar::kYaml11);
    (void)resolve_number(n.value, NumberGrammar::kJson);
    (void)convert_quoted(n.value);
  }
  if ((n.is_scalar() || n.is_null()) && !path.empty()) {
    auto edit = replace_scalar(doc, n, "12345");
    if (edit) {
      auto text = apply_text_edits(doc.text, {*edit});
      if (!text) __builtin_trap();
      (void)parse_yaml(*text, doc.file);
    }
  }
  if (n.is_map()) {
    (void)insert_entry(doc, n, "memplan_fuzz_key", "7");
    for (const auto& e : n.entries) {
      if (!e.key.is_scalar()) continue;
      path.push_back(e.key.value);
      visit(doc, e.value, path, budget);
      path.pop_back();
    }
  }
  for (const auto& i : n.items) visit(doc, i, path, budget);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto doc = parse_yaml(std::string(reinterpret_cast<const char*>(data), size), "f.yaml");
  if (!doc) return 0;
  std::vector<std::string> path;
  int budget = 2000;  // nodes edited per input: keeps one input's work small
  visit(*doc, doc->root, path, budget);
  return 0;
}

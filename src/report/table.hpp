// A plain-text table with aligned columns, and horizontal bars, for terminal output.
#pragma once

#include <string>
#include <vector>

namespace memplan::report {

enum class Align { kLeft, kRight };

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header, std::vector<Align> align = {});
  void add_row(std::vector<std::string> row);
  void add_separator();
  std::string render() const;           // aligned text, two spaces between columns
  std::string render_markdown() const;  // GitHub-flavoured markdown table

 private:
  std::vector<std::string> header_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;  // an empty row is a separator
};

// A bar of `width` cells filled in proportion to fraction (clamped to [0,1]), using
// eighth-block characters for resolution.
std::string bar(double fraction, int width);

}  // namespace memplan::report

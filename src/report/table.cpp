#include "report/table.hpp"

#include <algorithm>
#include <cmath>

namespace memplan::report {

namespace {

// Display width: count UTF-8 code points (bars use multi-byte block characters).
std::size_t display_width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

std::string pad(const std::string& s, std::size_t width, Align a) {
  const std::size_t w = display_width(s);
  if (w >= width) return s;
  const std::string fill(width - w, ' ');
  return a == Align::kLeft ? s + fill : fill + s;
}

}  // namespace

TextTable::TextTable(std::vector<std::string> header, std::vector<Align> align)
    : header_(std::move(header)), align_(std::move(align)) {
  align_.resize(header_.size(), Align::kLeft);
}

void TextTable::add_row(std::vector<std::string> row) {
  row.resize(header_.size());
  rows_.push_back(std::move(row));
}

void TextTable::add_separator() { rows_.emplace_back(); }

std::string TextTable::render() const {
  std::vector<std::size_t> widths(header_.size());
  for (std::size_t i = 0; i < header_.size(); ++i) widths[i] = display_width(header_[i]);
  for (const auto& r : rows_)
    for (std::size_t i = 0; i < r.size(); ++i) widths[i] = std::max(widths[i], display_width(r[i]));
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (std::size_t i = 0; i < r.size(); ++i) {
      const bool last = i + 1 == r.size();
      std::string cell = last && align_[i] == Align::kLeft ? r[i] : pad(r[i], widths[i], align_[i]);
      s += cell;
      if (!last) s += "  ";
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::size_t total = 0;
  for (auto w : widths) total += w + 2;
  const std::string rule(total > 2 ? total - 2 : 0, '-');
  std::string out = line(header_) + rule + "\n";
  for (const auto& r : rows_) out += r.empty() ? rule + "\n" : line(r);
  return out;
}

std::string TextTable::render_markdown() const {
  auto line = [](const std::vector<std::string>& r) {
    std::string s = "|";
    for (const auto& c : r) s += " " + c + " |";
    return s + "\n";
  };
  std::string out = line(header_);
  std::string sep = "|";
  for (auto a : align_) sep += a == Align::kRight ? "---:|" : "---|";
  out += sep + "\n";
  for (const auto& r : rows_)
    if (!r.empty()) out += line(r);
  return out;
}

std::string bar(double fraction, int width) {
  static const char* kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  if (!(fraction > 0)) fraction = 0;
  if (fraction > 1) fraction = 1;
  const int eighths = static_cast<int>(std::lround(fraction * width * 8));
  std::string s;
  for (int i = 0; i < eighths / 8; ++i) s += "█";
  s += kEighths[eighths % 8];
  return s;
}

}  // namespace memplan::report

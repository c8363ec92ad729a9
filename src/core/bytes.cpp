#include "memplan/bytes.hpp"

#include <cmath>

#include <fmt/format.h>

namespace memplan {

void throw_size_overflow(const char* what) { throw SizeOverflow(what); }

namespace {
Bytes from_units(double n, double unit) {
  const double v = n * unit;
  if (!std::isfinite(v) || v > 9.0e18 || v < -9.0e18) throw SizeOverflow("size out of range");
  return Bytes::of(static_cast<std::int64_t>(std::llround(v)));
}
}  // namespace

Bytes Bytes::kib(double n) { return from_units(n, 1024.0); }
Bytes Bytes::mib(double n) { return from_units(n, 1024.0 * 1024.0); }
Bytes Bytes::gib(double n) { return from_units(n, 1024.0 * 1024.0 * 1024.0); }
Bytes Bytes::kb(double n) { return from_units(n, 1e3); }
Bytes Bytes::mb(double n) { return from_units(n, 1e6); }
Bytes Bytes::gb(double n) { return from_units(n, 1e9); }

Bytes Bytes::operator/(std::int64_t k) const {
  if (k <= 0) throw SizeOverflow("size divided by a non-positive number");
  return Bytes(n_ / k);
}

Bytes Bytes::ceil_div(std::int64_t k) const {
  if (k <= 0) throw SizeOverflow("size divided by a non-positive number");
  const std::int64_t q = n_ / k;
  return Bytes(q * k == n_ ? q : (n_ > 0 ? q + 1 : q));
}

std::string format_gib(Bytes b) { return fmt::format("{:.2f} GiB", b.as_gib()); }

std::string format_human(Bytes b) {
  const double v = static_cast<double>(b.count());
  const double a = std::fabs(v);
  if (a < 1024.0) return fmt::format("{} B", b.count());
  if (a < 1024.0 * 1024.0) return fmt::format("{:.1f} KiB", v / 1024.0);
  if (a < 1024.0 * 1024.0 * 1024.0) return fmt::format("{:.1f} MiB", v / (1024.0 * 1024.0));
  if (a < 1024.0 * 1024.0 * 1024.0 * 1024.0) return fmt::format("{:.2f} GiB", v / (1024.0 * 1024.0 * 1024.0));
  return fmt::format("{:.2f} TiB", v / (1024.0 * 1024.0 * 1024.0 * 1024.0));
}

}  // namespace memplan

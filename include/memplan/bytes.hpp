// Bytes: a strong type for memory sizes. Every size in memplan is an exact integer count of
// bytes; arithmetic on it is checked and throws SizeOverflow rather than wrapping silently.
// Binary units (KiB, MiB, GiB) and decimal units (KB, MB, GB) are distinct named constructors
// because GPU vendors quote GB while PyTorch reports GiB, and a 7% gap is exactly the kind of
// error memplan exists to remove.
#pragma once

#include <compare>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace memplan {

// Thrown by checked size arithmetic. The engine converts it into an Error value at its boundary.
class SizeOverflow : public std::overflow_error {
 public:
  using std::overflow_error::overflow_error;
};

// Checked 64-bit integer helpers (bloaty's CheckedAdd/CheckedMul). Inline: the engine's
// polynomial arithmetic calls them millions of times per plan; the throw stays out of line.
[[noreturn]] void throw_size_overflow(const char* what);

inline std::int64_t checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) [[unlikely]] throw_size_overflow("size arithmetic overflow (add)");
  return r;
}

inline std::int64_t checked_sub(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) [[unlikely]] throw_size_overflow("size arithmetic overflow (subtract)");
  return r;
}

inline std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) [[unlikely]] throw_size_overflow("size arithmetic overflow (multiply)");
  return r;
}

class Bytes {
 public:
  constexpr Bytes() = default;
  static constexpr Bytes of(std::int64_t n) { return Bytes(n); }
  static constexpr Bytes zero() { return Bytes(0); }

  // Named units. Fractional inputs are rounded to the nearest byte.
  static Bytes kib(double n);
  static Bytes mib(double n);
  static Bytes gib(double n);
  static Bytes kb(double n);
  static Bytes mb(double n);
  static Bytes gb(double n);

  constexpr std::int64_t count() const { return n_; }
  double as_kib() const { return static_cast<double>(n_) / 1024.0; }
  double as_mib() const { return static_cast<double>(n_) / (1024.0 * 1024.0); }
  double as_gib() const { return static_cast<double>(n_) / (1024.0 * 1024.0 * 1024.0); }
  double as_gb() const { return static_cast<double>(n_) / 1e9; }

  Bytes operator+(Bytes o) const { return Bytes(checked_add(n_, o.n_)); }
  Bytes operator-(Bytes o) const { return Bytes(checked_sub(n_, o.n_)); }
  Bytes operator*(std::int64_t k) const { return Bytes(checked_mul(n_, k)); }
  Bytes& operator+=(Bytes o) { return *this = *this + o; }
  Bytes& operator-=(Bytes o) { return *this = *this - o; }
  // Integer division rounding down; for shards ceil_div is usually what you want.
  Bytes operator/(std::int64_t k) const;
  Bytes ceil_div(std::int64_t k) const;

  constexpr auto operator<=>(const Bytes&) const = default;

 private:
  constexpr explicit Bytes(std::int64_t n) : n_(n) {}
  std::int64_t n_ = 0;
};

inline Bytes operator*(std::int64_t k, Bytes b) { return b * k; }

// "12.34 GiB": binary units, two decimals, the unit always named.
std::string format_gib(Bytes b);
// Human form choosing B/KiB/MiB/GiB/TiB.
std::string format_human(Bytes b);

}  // namespace memplan

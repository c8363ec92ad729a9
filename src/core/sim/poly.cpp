#include "core/sim/poly.hpp"

#include "memplan/bytes.hpp"

namespace memplan::sim {

namespace {
__extension__ typedef __int128 i128;  // exact products of b, s and coefficients
}

bool Poly::is_zero() const {
  for (auto v : c)
    if (v != 0) return false;
  return true;
}

std::int64_t padded_seq(std::int64_t s, std::int64_t chunk) {
  if (chunk <= 1 || s <= 0) return s;
  return checked_mul(s / chunk + (s % chunk != 0 ? 1 : 0), chunk);  // no s + chunk - 1: s may be near INT64_MAX
}

std::int64_t Poly::eval(const Point& at) const {
  const i128 B = at.b, S = at.s, P = at.p;
  const i128 v = static_cast<i128>(c[kOne]) + c[kB] * B + c[kS] * S + c[kBS] * B * S + c[kBSS] * B * S * S +
                 c[kSS] * S * S + c[kBB] * B * B + c[kBP] * B * P + c[kBPP] * B * P * P;
  if (v > static_cast<i128>(INT64_MAX) || v < static_cast<i128>(INT64_MIN))
    throw SizeOverflow("memory size does not fit in 64 bits");
  return static_cast<std::int64_t>(v);
}

}  // namespace memplan::sim

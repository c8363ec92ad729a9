// Poly: a byte count as a polynomial in the micro-batch b and the sequence length s.
// Every tensor of a training step has a size that is a sum of these monomials, so the engine
// simulates a step once symbolically and evaluates the result for any (b, s) in a few
// multiplications (docs/formulas.md#the-step-simulator).
#pragma once

#include <array>
#include <cstdint>

#include "memplan/bytes.hpp"

namespace memplan::sim {

// kBB: b x b terms (an encoder's contrastive similarity matrix, b anchors x b candidates).
// kBP, kBPP: b x p and b x p x p, where p is s rounded up to a whole number of chunks: the
// tensors of a chunked scan (Gated DeltaNet, Mamba-2's SSD) that pad the sequence first
// (docs/formulas.md#chunked-scans). p == s for a model without one.
enum Mono : int { kOne = 0, kB, kS, kBS, kBSS, kSS, kBB, kBP, kBPP, kNumMono };

// Where a Poly is evaluated: micro-batch b, (local) sequence length s, and p, s padded to the
// chunked scans' chunk.
struct Point {
  std::int64_t b = 1, s = 1, p = 1;
};
// s rounded up to a multiple of chunk (chunk <= 1: s itself).
std::int64_t padded_seq(std::int64_t s, std::int64_t chunk);
inline Point point(std::int64_t b, std::int64_t s, std::int64_t chunk) { return {b, s, padded_seq(s, chunk)}; }

struct Poly {
  std::array<std::int64_t, kNumMono> c{};

  static Poly constant(std::int64_t v) { return mono(kOne, v); }
  static Poly mono(Mono m, std::int64_t v) {
    Poly p;
    p.c[m] = v;
    return p;
  }
  Poly operator+(const Poly& o) const {
    Poly r = *this;
    return r += o;
  }
  Poly operator-(const Poly& o) const {
    Poly r = *this;
    return r -= o;
  }
  Poly operator*(std::int64_t k) const {
    Poly r;
    for (int i = 0; i < kNumMono; ++i) r.c[i] = checked_mul(c[i], k);
    return r;
  }
  Poly& operator+=(const Poly& o) {
    for (int i = 0; i < kNumMono; ++i) c[i] = checked_add(c[i], o.c[i]);
    return *this;
  }
  Poly& operator-=(const Poly& o) {
    for (int i = 0; i < kNumMono; ++i) c[i] = checked_sub(c[i], o.c[i]);
    return *this;
  }
  bool operator==(const Poly& o) const { return c == o.c; }
  bool is_zero() const;
  // Coefficient-wise >=: then a >= b for every b, s >= 1.
  bool dominates(const Poly& o) const {
    for (int i = 0; i < kNumMono; ++i)
      if (c[i] < o.c[i]) return false;
    return true;
  }
  // Exact value at a point; throws SizeOverflow if it does not fit in int64.
  std::int64_t eval(const Point& at) const;
  // At (b, s) of a model without a chunked scan (p = s).
  std::int64_t eval(std::int64_t b, std::int64_t s) const { return eval(Point{b, s, s}); }
};

}  // namespace memplan::sim

// sim::Poly evaluated at (b, s, p): p is s padded to the chunked scans' chunk
// (docs/formulas.md#chunked-scans).
#include <catch2/catch.hpp>

#include <cstdint>

#include "core/sim/poly.hpp"
#include "memplan/bytes.hpp"
#include "core/sim/program.hpp"

using namespace memplan;
using namespace memplan::sim;

TEST_CASE("padded_seq rounds up to whole chunks", "[sim][poly]") {
  CHECK(padded_seq(200, 64) == 256);  // pad_size = (64 - 200 % 64) % 64 = 56
  CHECK(padded_seq(256, 64) == 256);  // pad_size 0
  CHECK(padded_seq(1, 64) == 64);
  CHECK(padded_seq(257, 128) == 384);
  CHECK(padded_seq(200, 1) == 200);  // no scan
  CHECK(padded_seq(200, 0) == 200);
  // Near INT64_MAX the padded length does not fit: a SizeOverflow, not a wrapped sum.
  CHECK(padded_seq(INT64_MAX - 3, 1) == INT64_MAX - 3);
  CHECK_THROWS_AS(padded_seq(INT64_MAX - 3, 64), SizeOverflow);
}

TEST_CASE("the padded monomials use p, the others s", "[sim][poly]") {
  // 3 b s + 5 b p + 7 b p^2 + 11 b s^2 at b = 2, s = 200, p = 256:
  // 1,200 + 2,560 + 917,504 + 880,000.
  const Poly x = Poly::mono(kBS, 3) + Poly::mono(kBP, 5) + Poly::mono(kBPP, 7) + Poly::mono(kBSS, 11);
  CHECK(x.eval(Point{2, 200, 256}) == 1200 + 2560 + 917504 + 880000);
  CHECK(x.eval(point(2, 200, 64)) == 1200 + 2560 + 917504 + 880000);
  // Without a scan p = s: the padded monomials are the b s and b s^2 ones.
  CHECK(x.eval(2, 200) == (3 + 5) * 400 + (7 + 11) * 2 * 40000);
  CHECK(x.eval(point(2, 200, 1)) == x.eval(2, 200));
}

TEST_CASE("scan_chunk is the model's scan chunk", "[sim][poly]") {
  ModelSpec m;
  CHECK(scan_chunk(m) == 1);  // a Llama: no scan
  m.hybrid.mixers = {MixerKind::kGatedDeltaNet, MixerKind::kAttention};
  CHECK(scan_chunk(m) == 64);  // torch_chunk_gated_delta_rule(chunk_size=64)
  m.hybrid.mixers = {MixerKind::kMamba2, MixerKind::kAttention, MixerKind::kNone};
  m.hybrid.mamba_chunk = 128;  // NemotronHConfig chunk_size
  CHECK(scan_chunk(m) == 128);
  m.hybrid.mixers = {MixerKind::kShortConv, MixerKind::kAttention};
  CHECK(scan_chunk(m) == 1);  // LFM2's convolution does not chunk
}

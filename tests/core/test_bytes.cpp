#include <catch2/catch.hpp>
#include <limits>

#include "memplan/bytes.hpp"

using memplan::Bytes;

TEST_CASE("named units are exact and distinct") {
  CHECK(Bytes::kib(1).count() == 1024);
  CHECK(Bytes::mib(1).count() == 1048576);
  CHECK(Bytes::gib(1).count() == 1073741824);
  CHECK(Bytes::kb(1).count() == 1000);
  CHECK(Bytes::gb(80).count() == 80'000'000'000);
  CHECK(Bytes::gib(0.5).count() == 536870912);
  CHECK(Bytes::gb(1) < Bytes::gib(1));
}

TEST_CASE("checked arithmetic throws instead of wrapping") {
  const auto max = Bytes::of(std::numeric_limits<std::int64_t>::max());
  CHECK_THROWS_AS(max + Bytes::of(1), memplan::SizeOverflow);
  CHECK_THROWS_AS(max * 2, memplan::SizeOverflow);
  CHECK_THROWS_AS(Bytes::of(std::numeric_limits<std::int64_t>::min()) - Bytes::of(1), memplan::SizeOverflow);
  CHECK((max - Bytes::of(1)).count() == std::numeric_limits<std::int64_t>::max() - 1);
  CHECK((Bytes::of(3) * 0).count() == 0);
  CHECK_THROWS_AS(Bytes::of(3) / 0, memplan::SizeOverflow);
}

TEST_CASE("ceil_div rounds up at boundaries") {
  CHECK(Bytes::of(0).ceil_div(8).count() == 0);
  CHECK(Bytes::of(1).ceil_div(8).count() == 1);
  CHECK(Bytes::of(8).ceil_div(8).count() == 1);
  CHECK(Bytes::of(9).ceil_div(8).count() == 2);
  CHECK(Bytes::of(15).ceil_div(8).count() == 2);
  CHECK((Bytes::of(15) / 8).count() == 1);
}

TEST_CASE("formatting names the binary unit") {
  CHECK(memplan::format_gib(Bytes::gib(1.5)) == "1.50 GiB");
  CHECK(memplan::format_human(Bytes::of(512)) == "512 B");
  CHECK(memplan::format_human(Bytes::kib(2)) == "2.0 KiB");
  CHECK(memplan::format_human(Bytes::mib(3)) == "3.0 MiB");
  CHECK(memplan::format_human(Bytes::gib(80)) == "80.00 GiB");
}

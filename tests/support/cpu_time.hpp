// Timing bounds in tests are in CPU seconds (std::clock), not wall seconds: a shared CI machine's
// wall clock measures its neighbours. kBuildSlowdown scales a bound set for a Release build to the
// -O0 AddressSanitizer build tools/test.sh also runs (about ten times slower).
#pragma once

#include <ctime>

namespace memplan::testing {

#if defined(__has_feature)
#if __has_feature(address_sanitizer)  // clang spells it this way
#define MEMPLAN_TESTING_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(MEMPLAN_TESTING_ASAN) || !defined(NDEBUG)
inline constexpr double kBuildSlowdown = 10.0;
#else
inline constexpr double kBuildSlowdown = 1.0;
#endif

inline double cpu_seconds_since(std::clock_t start) {
  return static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
}

}  // namespace memplan::testing

#!/usr/bin/env bash
# Fuzzing: builds the libFuzzer targets of tests/fuzz/ with clang under ASan + UBSan (build-fuzz/)
# and runs each for a bounded time on a scratch copy of its committed seed corpus
# (tests/fuzz/corpus/<target>/). A crash, sanitizer report, timeout or memory blow-up fails.
#   MEMPLAN_FUZZ_SECONDS  seconds per target (default 25; eight targets)
#   MEMPLAN_FUZZ_CXX      the clang++ to use (default clang++-14, else clang++)
#   MEMPLAN_FUZZ_BUILD    build directory (default build-fuzz); tools/test.sh passes its sanitizer
#                         build (build-asan, configured with MEMPLAN_BUILD_FUZZ=ON), so the
#                         libraries are compiled once for the unit tests and the fuzzers
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/deps.sh
# clang-14 and its libFuzzer runtime (libclang_rt.fuzzer-x86_64.a is in libclang-rt-14-dev).
if [[ -z "${MEMPLAN_FUZZ_CXX:-}" ]]; then memplan_install_deps clang-14 libclang-rt-14-dev; fi
seconds="${MEMPLAN_FUZZ_SECONDS:-25}"
cxx="${MEMPLAN_FUZZ_CXX:-$(command -v clang++-14 || command -v clang++ || true)}"
if [[ -z "$cxx" ]]; then
  echo "fuzz.sh: clang++ not found (apt-get install clang-14)" >&2
  exit 2
fi
jobs="$(nproc)"
targets=(config_loader model_config key_map yaml_edit toml interpolation calibration_store command_template)
build="${MEMPLAN_FUZZ_BUILD:-build-fuzz}"
if ! grep -q "^MEMPLAN_BUILD_FUZZ:BOOL=ON" "$build/CMakeCache.txt" 2>/dev/null; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" -DMEMPLAN_BUILD_FUZZ=ON \
    -DMEMPLAN_STATIC_RUNTIME=OFF -DBUILD_TESTING=OFF >/dev/null
fi
cmake --build "$build" -j"$jobs" --target "${targets[@]/#/fuzz_}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
status=0
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t" "$scratch/artifacts-$t"
  echo "== fuzz_$t (${seconds}s)"
  # New inputs go to the scratch directory; the committed corpus is only read.
  if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$scratch/artifacts-$t/" "$scratch/$t" "tests/fuzz/corpus/$t" \
      > "$scratch/$t.log" 2>&1; then
    tail -60 "$scratch/$t.log" >&2
    mkdir -p "$build/crashes"
    cp -r "$scratch/artifacts-$t" "$build/crashes/" 2>/dev/null || true
    echo "fuzz.sh: fuzz_$t failed; reproducer(s) in $build/crashes/artifacts-$t/" >&2
    status=1
  else
    grep -E "^stat::number_of_executed_units|^Done" "$scratch/$t.log" || true
  fi
done
exit "$status"

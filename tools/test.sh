#!/usr/bin/env bash
# Second command of the README (and what .ci/run calls): the whole test suite (unit tests, the
# accuracy checks), then again under AddressSanitizer + UndefinedBehaviorSanitizer built with clang,
# whose build also holds the libFuzzer targets: each runs for MEMPLAN_FUZZ_SECONDS (default 10) on
# its committed seed corpus, and a crash fails the suite (tools/fuzz.sh). Longer fuzzing runs are
# MEMPLAN_FUZZ_SECONDS=600 bash tools/fuzz.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/deps.sh
# python3 runs the stand-in training commands of memplan profile's tests; clang-14 and its
# libFuzzer runtime build the sanitizer and fuzzing targets; pybind11-dev and python3-dev the Python
# package (tests/python), python3-torch its callbacks on the CPU, pre-commit and groff-base the
# pre-commit hook and man page tests.
# ccache keeps the two builds' objects between runs of the suite, for a clone at any path: paths below
# the repository are hashed relative to it (CCACHE_BASEDIR), the working directory that debug info
# records is not hashed (CCACHE_NOHASHDIR), and GCC's precompiled headers need pch_defines,time_macros.
# clang's .pch records the absolute path of the tree that built it, so with ccache the clang tree is
# built without precompiled headers: each of its objects then hits in a clone elsewhere.
memplan_install_deps python3 clang-14 libclang-rt-14-dev pybind11-dev python3-dev python3-torch pre-commit groff-base ccache
jobs="$(nproc)"
launcher=()
asan_pch=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=pch_defines,time_macros
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  asan_pch=(-DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMEMPLAN_PYTHON=ON "${launcher[@]}" >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"
# A build-asan left by an older gcc configuration cannot switch compilers in place.
if [ -f build-asan/CMakeCache.txt ] && ! grep -q "^MEMPLAN_BUILD_FUZZ:BOOL=ON" build-asan/CMakeCache.txt; then
  rm -rf build-asan
fi
# No build type: MEMPLAN_SANITIZE's -O1 and line tables only (file:line in sanitizer reports) build
# about 20% faster than Debug's full debug info, which the suite never reads.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE= -DCMAKE_CXX_FLAGS=-gline-tables-only -DMEMPLAN_SANITIZE=ON \
  -DMEMPLAN_BUILD_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-14 "${launcher[@]}" "${asan_pch[@]}" >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure -j"$jobs"
MEMPLAN_FUZZ_BUILD=build-asan MEMPLAN_FUZZ_SECONDS="${MEMPLAN_FUZZ_SECONDS:-10}" MEMPLAN_FUZZ_CXX=clang++-14 \
  bash tools/fuzz.sh

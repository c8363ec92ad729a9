#!/usr/bin/env bash
# Reruns the accuracy report: every committed measurement against the engine.
#   tools/accuracy/report.sh [BUILD_DIR]     (prints the table and the median/max errors)
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build}"
cmake --build "$build" --target memplan-accuracy >/dev/null
"$build/tools/accuracy/memplan-accuracy" --max-median 2 --max-error 6 tests/data/measurements/*.json \
  --capacity tests/data/capacity/h100.json

#!/usr/bin/env bash
# Reruns the accuracy report: every committed measurement against the engine.
#   tools/accuracy/report.sh [BUILD_DIR]     (prints the table and the median/max errors)
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build}"
cmake --build "$build" --target memplan-accuracy >/dev/null
"$build/tools/accuracy/memplan-accuracy" --max-median 2 --max-error 6 tests/data/measurements/*.json \
  --capacity tests/data/capacity/h100.json
# Published peak-memory tables (tests/data/published/, docs/accuracy.md#published).
"$build/tools/accuracy/memplan-accuracy" --max-median 5 --max-error 8 --max-low 8 \
  tests/data/published/fms_acceleration_a100.json tests/data/published/fms_acceleration_a100_2024-11.json \
  tests/data/published/fsdp_qlora_3090.json tests/data/published/torchtune_readme.json
# Rows that publish only max_memory_reserved, against the allocator replay (docs/accuracy.md#published-reserved).
"$build/tools/accuracy/memplan-accuracy" tests/data/published/torchtune_lora_tutorial.json \
  tests/data/published/ms_swift_benchmark.json
# Held-out sources collected for issue 30 (docs/accuracy.md#published-held-out), at the issue's limits.
"$build/tools/accuracy/memplan-accuracy" --max-median 5 --max-low 10 \
  tests/data/published/fms_acceleration_a100_granite.json tests/data/published/fms_acceleration_a100_2024-07.json || true
"$build/tools/accuracy/memplan-accuracy" --max-published-reserved-median 5 --max-published-reserved-low 10 \
  tests/data/published/hf_docs_single_gpu_v100.json || true

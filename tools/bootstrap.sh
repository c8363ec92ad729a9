#!/usr/bin/env bash
# First command of the README: install what is missing, build, and run memplan on a shipped example.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/deps.sh
memplan_install_deps
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target memplan
./build/src/memplan estimate --model meta-llama/Llama-3.1-8B --torch-dtype bfloat16 --batch 2 --seq-len 2048 \
  --gradient-checkpointing --use-peft --lora-target-modules all-linear

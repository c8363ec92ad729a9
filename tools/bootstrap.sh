#!/usr/bin/env bash
# First command of the README: install what is missing, build, and run memplan on a shipped example.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/deps.sh
# pybind11-dev, python3-dev and python3-venv: the Python package installs offline after this (README).
memplan_install_deps pybind11-dev python3-dev python3-venv
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target memplan
# The main job, as users run it before training: the breakdown and the recommended micro-batch /
# grad-accum for a shipped TRL config. --gpu names the GPU so that this works on a machine
# without one; on a GPU machine, `memplan --auto` alone detects it.
./build/src/memplan --auto --config configs/examples/hf-trl-sft-lora.yaml --gpu h100-sxm

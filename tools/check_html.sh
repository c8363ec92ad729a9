#!/bin/sh
# Renders memplan's --format html pages in headless Chromium when it is installed (Debian:
# apt-get install chromium), so a person can look at the pictures. Not part of CI: the Catch2
# tests (tests/report/test_html.cpp) check the pages' structure, escaping and numbers.
# Usage: tools/check_html.sh [path/to/memplan] [output folder]
set -eu
memplan=${1:-build/src/memplan}
out=${2:-${TMPDIR:-/tmp}/memplan-html}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "check_html: no chromium on PATH; nothing rendered" >&2
  exit 0
fi
mkdir -p "$out"
"$memplan" plan --config configs/examples/hf-trl-sft-lora.yaml --gpu a100-40gb --format html >"$out/plan.html" || true
"$memplan" estimate --model llama-3.1-8b --method lora --batch 2 --seq-len 2048 --gradient-checkpointing \
  --gpu h100-sxm --format html >"$out/estimate.html" || true
"$memplan" sweep --model gpt2 --batches 1-64:x2 --seq-lens 512,1024,2048 --gpu a100-40gb --format html \
  >"$out/sweep.html" || true
for page in plan estimate sweep; do
  "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --screenshot="$out/$page.png" \
    --window-size=1200,1600 "file://$(cd "$out" && pwd)/$page.html" >/dev/null 2>&1
  echo "check_html: $out/$page.png"
done

#!/usr/bin/env bash
# Times `memplan plan` as a whole process (exec, dynamic linking, argument parsing, catalog
# lookup, plan, render): the median wall time of N runs, in milliseconds, next to the same
# measurement of /bin/true, which is what merely starting a process costs on this machine.
# Uses bash's $EPOCHREALTIME, so no helper process is timed along with memplan.
#
#   bench/process_time.sh [path/to/memplan] [runs] [-- plan flags replacing the defaults]
#   bench/process_time.sh build-bench/src/memplan 101
#   bench/process_time.sh build-bench/src/memplan 51 -- --model-params 70B --gpu-memory 80GB
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build/src/memplan}"
runs="${2:-51}"
shift $(($# > 2 ? 2 : $#))
[[ "${1:-}" == "--" ]] && shift
if (($# > 0)); then
  args=(plan "$@")
else
  args=(plan --model meta-llama/Llama-3.1-8B --gpu-memory 141GB --bf16 --torch-dtype bfloat16 --seq-len 2048
        --batch 4 --grad-accum 8)
fi

if [[ ! -x "$bin" ]]; then
  echo "process_time.sh: no memplan binary at '$bin'; build it first (cmake --build build)" >&2
  exit 3
fi
# plan exits 0 (fits) or 1 (nothing fits); both are a complete run worth timing.
rc=0
"$bin" "${args[@]}" >/dev/null || rc=$?
if ((rc > 1)); then
  echo "process_time.sh: '$bin ${args[*]}' failed with exit code $rc" >&2
  exit 1
fi

# Prints "median min max" in milliseconds for running "$@" $runs times.
measure() {
  local times=() t0 t1
  for ((i = 0; i < runs; i++)); do
    t0=$EPOCHREALTIME
    "$@" >/dev/null || true
    t1=$EPOCHREALTIME
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) * 1000 }')")
  done
  local sorted
  mapfile -t sorted < <(printf '%s\n' "${times[@]}" | sort -n)
  echo "${sorted[$((runs / 2))]} ${sorted[0]} ${sorted[$((runs - 1))]}"
}

read -r med lo hi < <(measure "$bin" "${args[@]}")
read -r base_med _ _ < <(measure /bin/true)
echo "memplan ${args[*]}"
echo "runs: $runs  median: ${med} ms  min: ${lo} ms  max: ${hi} ms  (/bin/true median: ${base_med} ms)"

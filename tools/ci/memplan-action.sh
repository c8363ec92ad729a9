#!/usr/bin/env bash
# The check step of the GitHub Action (action.yml), runnable anywhere: memplan check on the
# training configs, as GitHub annotations at each file's batch-size line, plus the text report in
# the job summary. Inputs come as the Action passes them:
#   INPUT_CONFIGS  paths or globs, space-separated (** matches folders)
#   INPUT_GPU      a GPU profile (memplan gpus), or empty for --gpu-memory in INPUT_ARGS
#   INPUT_ARGS     more flags for memplan check (--max-utilization 95, --gpu-memory 24GB ...)
#   MEMPLAN        the memplan binary (default: memplan on PATH)
# Exit status: memplan check's (0 all fit, 1 one does not fit, 2 an invalid config).
set -uo pipefail
memplan="${MEMPLAN:-memplan}"
shopt -s globstar nullglob
files=()
for pattern in ${INPUT_CONFIGS:-}; do
  for f in $pattern; do files+=("$f"); done
done
if [ ${#files[@]} -eq 0 ]; then
  echo "::error title=memplan::no training config matches '${INPUT_CONFIGS:-}'"
  exit 2
fi
args=()
[ -n "${INPUT_GPU:-}" ] && args+=(--gpu "$INPUT_GPU")
read -r -a extra <<<"${INPUT_ARGS:-}"
args+=("${extra[@]}")
"$memplan" check --format github "${args[@]}" "${files[@]}"
code=$?
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  {
    echo "### memplan check"
    echo '```'
    "$memplan" check "${args[@]}" "${files[@]}" 2>&1
    echo '```'
  } >>"$GITHUB_STEP_SUMMARY"
fi
exit $code

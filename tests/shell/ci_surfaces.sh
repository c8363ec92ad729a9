#!/usr/bin/env bash
# The CI surfaces: the GitHub Action's check script (tools/ci/memplan-action.sh, run as action.yml
# runs it) and the pre-commit hook through `pre-commit try-repo` (skipped, exit 77, where Debian's
# pre-commit is not installed; the Action part still runs first and must pass).
set -uo pipefail
memplan="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
expect() { if [ "$1" != "$2" ]; then echo "FAIL: $3: got '$1', want '$2'"; fail=1; else echo "ok: $3"; fi; }

# The Action on a T4 (15 GB): both example configs are over its 12.50 GiB budget.
out="$(MEMPLAN="$memplan" INPUT_CONFIGS="configs/examples/hf-trl-sft-lora.yaml configs/examples/axolotl-*.yaml" \
  INPUT_GPU=t4 INPUT_ARGS="" GITHUB_STEP_SUMMARY="$tmp/summary.md" bash tools/ci/memplan-action.sh)"
expect "$?" "1" "action: exit 1 when a config does not fit"
expect "$(grep -c '^::error file=configs/examples/' <<<"$out")" "2" "action: one annotation per config"
grep -q '^::error file=configs/examples/hf-trl-sft-lora.yaml,line=28,title=memplan%3A does not fit::' <<<"$out" ||
  { echo "FAIL: action: no annotation at hf-trl-sft-lora.yaml:28"; fail=1; }
expect "$(head -1 "$tmp/summary.md")" "### memplan check" "action: job summary written"
grep -q '^checked 2 configs: 0 fit, 2 do not fit' "$tmp/summary.md" || { echo "FAIL: action: summary"; fail=1; }
# On an H100 they fit; a glob that matches nothing is an error that names it.
MEMPLAN="$memplan" INPUT_CONFIGS="configs/examples/hf-trl-sft-lora.yaml" INPUT_GPU=h100-sxm INPUT_ARGS="--max-utilization 95" \
  bash tools/ci/memplan-action.sh >/dev/null
expect "$?" "0" "action: exit 0 when all fit"
out="$(MEMPLAN="$memplan" INPUT_CONFIGS="nothing/*.yaml" bash tools/ci/memplan-action.sh)"
expect "$?" "2" "action: exit 2 when no config matches"
expect "$out" "::error title=memplan::no training config matches 'nothing/*.yaml'" "action: says what matched nothing"

if ! command -v pre-commit >/dev/null; then
  echo "SKIPPED: pre-commit try-repo: pre-commit is not installed (apt-get install pre-commit)"
  [ $fail -eq 0 ] && exit 77 || exit 1
fi
# pre-commit try-repo on a project with two training configs; each names its GPU in a comment.
repo="$tmp/project"
mkdir -p "$repo"
git -C "$repo" init -q
sed '1i # memplan: gpu=h100-sxm' configs/examples/hf-trl-sft-lora.yaml >"$repo/train.yaml"
sed '1i # memplan: gpu=t4' configs/examples/hf-trl-sft-lora.yaml >"$repo/sft-t4.yaml"
git -C "$repo" add . && git -C "$repo" -c user.email=t@t -c user.name=t commit -q -m configs
export PATH="$(dirname "$memplan"):$PATH" PRE_COMMIT_HOME="$tmp/pre-commit-home"
out="$(cd "$repo" && pre-commit try-repo "$root" memplan-check-system --verbose --files train.yaml 2>&1)"
expect "$?" "0" "pre-commit: the hook passes a config that fits"
grep -q "train.yaml:29: fits" <<<"$out" || { echo "FAIL: pre-commit: no fits line"; echo "$out"; fail=1; }
out="$(cd "$repo" && pre-commit try-repo "$root" memplan-check-system --all-files 2>&1)"
expect "$?" "1" "pre-commit: the hook fails a config that does not fit"
grep -q "sft-t4.yaml:29: does not fit" <<<"$out" || { echo "FAIL: pre-commit: no does-not-fit line"; echo "$out"; fail=1; }
exit $fail

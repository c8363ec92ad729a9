#!/usr/bin/env bash
# Loads `memplan completion bash` into bash and completes three command lines as bash would
# (COMP_WORDS/COMP_CWORD, then the registered function): a command, a flag, a command's own flag.
set -euo pipefail
memplan="$1"
source <("$memplan" completion bash)
complete -p memplan | grep -q -- "-F _memplan" || { echo "FAIL: _memplan not registered"; exit 1; }
complete_line() {
  COMP_WORDS=("$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _memplan
  echo "${COMPREPLY[*]}"
}
fail=0
expect() {
  local got="$1" want="$2" what="$3"
  if [ "$got" != "$want" ]; then echo "FAIL: $what: got '$got', want '$want'"; fail=1; else echo "ok: $what -> $got"; fi
}
expect "$(complete_line memplan pl)" "plan" "memplan pl<TAB>"
expect "$(complete_line memplan c)" "check calibrate completion" "memplan c<TAB>"
expect "$(complete_line memplan plan --target-g)" "--target-global-batch" "memplan plan --target-g<TAB>"
expect "$(complete_line memplan check --max-u)" "--max-utilization" "memplan check --max-u<TAB>"
# check has no --apply; a file name after a flag is left to bash's default completion.
expect "$(complete_line memplan check --app)" "" "memplan check --app<TAB>"
expect "$(complete_line memplan plan --config conf)" "" "memplan plan --config conf<TAB>"
# Every flag plan --help prints is offered.
for flag in $("$memplan" plan --help | grep -oE -- '--[a-z0-9-]+' | sort -u); do
  got="$(complete_line memplan plan "$flag")"
  case " $got " in *" $flag "*) ;; *) echo "FAIL: plan $flag not completed (got '$got')"; fail=1 ;; esac
done
exit $fail

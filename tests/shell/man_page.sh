#!/usr/bin/env bash
# `memplan man` through groff with every warning on: the roff must format without a warning and
# show each command's section. Skipped (exit 77) where groff is not installed.
set -euo pipefail
memplan="$1"
if ! command -v groff >/dev/null; then echo "SKIPPED: groff is not installed"; exit 77; fi
page="$("$memplan" man)"
warnings="$(printf '%s\n' "$page" | groff -man -Tutf8 -ww -z 2>&1)"
if [ -n "$warnings" ]; then echo "FAIL: groff warns:"; echo "$warnings"; exit 1; fi
text="$(printf '%s\n' "$page" | groff -man -Tascii -P-c -P-b -P-u 2>/dev/null)"
for section in NAME SYNOPSIS COMMANDS "MEMPLAN PLAN" "MEMPLAN CHECK" "MEMPLAN MCP" "EXIT STATUS"; do
  grep -q "^$section" <<<"$text" || { echo "FAIL: no section '$section'"; exit 1; }
done
grep -q -- "--target-global-batch TEXT" <<<"$text" || { echo "FAIL: plan's --target-global-batch missing"; exit 1; }
echo "ok: memplan man formats without warnings"

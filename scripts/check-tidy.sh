#!/usr/bin/env bash
# Fails on any clang-tidy finding (.clang-tidy: bugprone and performance) in src/,
# and names each one. Needs build/compile_commands.json (scripts/build.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
log=$(mktemp "${TMPDIR:-/tmp}/idemproxy-tidy.XXXXXX")
# -Wno-unknown-warning-option: the compile commands carry GCC's own warning flags.
run-clang-tidy -p "$BUILD_DIR" -j 2 -quiet -extra-arg=-Wno-unknown-warning-option \
  "$PWD/src/" >"$log" 2>&1 || true
findings=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E ': (error|warning): ' | sort -u || true)
if [ -n "$findings" ]; then
  echo "$findings"
  echo "tidy: 0 passed, 1 failed ($(echo "$findings" | wc -l) findings; full log $log)"
  exit 1
fi
files=$(grep -c '^clang-tidy' "$log" || true)
if [ "${files:-0}" = 0 ]; then
  echo "tidy: no file was checked; see $log"
  exit 1
fi
echo "tidy: $files files, no findings"
rm -f "$log"

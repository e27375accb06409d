#!/usr/bin/env bash
# Fails on any clang-tidy finding (.clang-tidy: bugprone and performance) in src/,
# and names each one. It reads the compile commands of build-tidy/, a tree it only
# configures (a few seconds, nothing is compiled): without unity batches or a PCH, so
# that each source has a command of its own (cmake/build_speed.cmake).
set -euo pipefail
cd "$(dirname "$0")/.."
TIDY_DIR=${TIDY_DIR:-build-tidy}
cmake -S . -B "$TIDY_DIR" -DCMAKE_BUILD_TYPE=Release -DIDEMPROXY_BENCH=ON \
  -DIDEMPROXY_UNITY=OFF -DIDEMPROXY_PCH=OFF >/dev/null
log=$(mktemp "${TMPDIR:-/tmp}/idemproxy-tidy.XXXXXX")
# -Wno-unknown-warning-option: the compile commands carry GCC's own warning flags.
run-clang-tidy -p "$TIDY_DIR" -j 2 -quiet -extra-arg=-Wno-unknown-warning-option \
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

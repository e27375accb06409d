#!/usr/bin/env bash
# Fails on any clang-tidy finding (.clang-tidy: bugprone and performance) in src/,
# and names each one. It reads the compile commands of build-tidy/, a tree it only
# configures (a few seconds, nothing is compiled), without a PCH: clang-tidy checks
# each unity batch of sources as one (scripts/tidy_cached.py, cmake/build_speed.cmake).
set -euo pipefail
cd "$(dirname "$0")/.."
TIDY_DIR=${TIDY_DIR:-build-tidy}
cmake -S . -B "$TIDY_DIR" -DCMAKE_BUILD_TYPE=Release -DIDEMPROXY_BENCH=ON \
  -DIDEMPROXY_UNITY=ON -DIDEMPROXY_PCH=OFF >/dev/null
log=$(mktemp "${TMPDIR:-/tmp}/idemproxy-tidy.XXXXXX")
# A file checked clean before, with the same project files reached, flags, system
# packages and checker, is not checked again (scripts/tidy_cached.py;
# IDEMPROXY_TIDY_CACHE names another cache directory, an empty one to check
# everything). An argument checks only the sources it matches (a regex).
summary=$(/usr/bin/python3 scripts/tidy_cached.py "$TIDY_DIR" "$PWD/src/" "$log" "$@")
findings=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E ': (error|warning): ' | sort -u || true)
if [ -n "$findings" ]; then
  echo "$findings"
  echo "tidy: 0 passed, 1 failed ($(echo "$findings" | wc -l) findings; full log $log)"
  exit 1
fi
checked=$(echo "$summary" | sed -n 's/^checked \([0-9]*\), .*/\1/p')
cached=$(echo "$summary" | sed -n 's/.*clean from the cache \([0-9]*\)$/\1/p')
files=$((${checked:-0} + ${cached:-0}))
if [ "$files" = 0 ]; then
  echo "tidy: no file was checked; see $log"
  exit 1
fi
echo "tidy: $files files, no findings ($checked checked, $cached clean from an earlier run)"
rm -f "$log"

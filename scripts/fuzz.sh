#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) and runs each for FUZZ_SECONDS on a
# scratch copy of its committed seed corpus plus the committed regression inputs.
# A crash, hang or sanitizer report fails the run; the input is left in
# $FUZZ_OUT/<target>/ to be kept under fuzz/regressions/ once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
FUZZ_OUT=${FUZZ_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/idemproxy-fuzz.XXXXXX")}
# The fuzz preset (CMakePresets.json), or FUZZ_BUILD_DIR: a clang tree configured with
# IDEMPROXY_SANITIZE and IDEMPROXY_FUZZ (the test command's build-asan/), where only the
# targets are built. A build-fuzz/ from before the targets linked the project's
# libraries (configured from fuzz/, or without the sanitizers) is started afresh.
targets=(key fingerprint config head session forward h2 answer)
if [ -n "${FUZZ_BUILD_DIR:-}" ]; then
  cmake --build "$FUZZ_BUILD_DIR" -j2 --target "${targets[@]/#/fuzz_}" >/dev/null
  BIN=$FUZZ_BUILD_DIR/fuzz
else
  if [ -f build-fuzz/CMakeCache.txt ] && ! grep -q '^IDEMPROXY_SANITIZE:BOOL=ON' build-fuzz/CMakeCache.txt; then
    rm -rf build-fuzz
  fi
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz >/dev/null
  BIN=build-fuzz/fuzz
fi
# What UBSan finds stops the input, so that libFuzzer reports it (the project's
# objects are built to recover, for the tests' reports).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# FUZZ_BUILD_ONLY=1: stop here (the test command builds them in the background).
if [ "${FUZZ_BUILD_ONLY:-0}" = 1 ]; then
  echo "fuzz: built $(ls "$BIN"/fuzz_* | wc -l) targets"
  exit 0
fi

# One target: its regression inputs first, each on its own, then the timed run.
# Prints its report line (and on failure the cause) to $FUZZ_OUT/<target>/report.
# -entropic=0: with every library instrumented, an input reaches tens of thousands of
# features, and libFuzzer's entropic schedule, which weighs each against its rarest,
# took 85 % of the time (114 inputs in 10 s through a session, 11,036 in 20 s without).
fuzz_one() {  # TARGET
  local target=$1 work="$FUZZ_OUT/$1" regressions=()
  mkdir -p "$work/corpus"
  rm -f "$work/report"
  cp fuzz/corpus/"$target"/* "$work/corpus/"
  if [ -d "fuzz/regressions/$target" ]; then regressions=(fuzz/regressions/"$target"/*); fi
  if { [ ${#regressions[@]} -eq 0 ] ||
       "$BIN/fuzz_$target" -timeout=10 "${regressions[@]}" >"$work/regressions.log" 2>&1; } &&
     (cd "$work" && "$OLDPWD/$BIN/fuzz_$target" -max_total_time="$FUZZ_SECONDS" -timeout=10 -entropic=0 \
        -rss_limit_mb=2048 corpus >"$work/fuzz.log" 2>&1); then
    echo "fuzz: $target ok ($(grep -oE 'Done [0-9]+ runs' "$work/fuzz.log" | head -1))" >"$work/report"
  else
    {
      echo "fuzz: $target FAILED; see $work"
      # The cause first (sanitizer report or uncaught exception), then the tail.
      grep -h -m5 -E 'ERROR|what\(\)|terminate|deadly signal' "$work"/*.log || true
      tail -n 20 "$work"/*.log
    } >"$work/report"
  fi
}

# FUZZ_JOBS targets at a time (default: one per CPU), each for its full FUZZ_SECONDS.
FUZZ_JOBS=${FUZZ_JOBS:-$(nproc)}
for target in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$FUZZ_JOBS" ]; do wait -n || true; done
  fuzz_one "$target" &
done
wait
passed=0
failed=0
for target in "${targets[@]}"; do
  cat "$FUZZ_OUT/$target/report" 2>/dev/null || echo "fuzz: $target FAILED; it left no report"
  if grep -q "^fuzz: $target ok" "$FUZZ_OUT/$target/report" 2>/dev/null; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

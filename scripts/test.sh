#!/usr/bin/env bash
# The second README command: installs what is missing, builds, starts a throwaway
# PostgreSQL, and runs every test:
#   1. unit and store tests (ctest) on the Release build (profile-guided: scripts/pgo.sh),
#   2. end-to-end tests (pytest: the real binary, real PostgreSQL, a fake upstream;
#      test_failover.py starts a pg_auto_failover pair with scripts/failover.sh),
#   3. the run-local smoke test (the first README command), and the benchmark's
#      smoke run (bench/run.sh --smoke: every scenario runs, idemproxy without errors),
#   4. stage 1 again, and of stage 2 the files where memory goes wrong if anywhere,
#      on an ASan+UBSan build (clang; skip with SANITIZE=0),
#   5. the store tests and the concurrency end-to-end tests (with the real-peer
#      ledger) on a TSan build, with 4 I/O threads per proxy (skip with SANITIZE=0),
#   6. the container image (scripts/image.sh, podman, offline) run against the test
#      PostgreSQL, and its .deb installed into the bare Debian base (skip with IMAGE=0):
#      first the image that installs the Release build's package, then, at the end,
#      the same tests on the image the Dockerfile compiles from source,
#   7. the libFuzzer targets, FUZZ_SECONDS each (default 20; 0 skips them),
#   8. after stage 3, the store tests and the behaviour table, storm, fault and ledger
#      end-to-end tests again on a Citus cluster: a coordinator and two workers
#      (scripts/citus.sh, built once from ../shared/vendor/citus; skip with CITUS=0),
#      then the rebalance test and the shard-move stress ledger (16 moves and 2
#      add-worker/rebalance/drain cycles under load, at most 200 s of moving).
# The Kubernetes manifests are rendered and validated in stage 2 (test_kubernetes.py).
# Before building, every C++ file is checked against .clang-format, and the sources
# against the layout rules (scripts/check-layout.sh: 400 lines, no folder cycle); after it,
# clang-tidy (.clang-tidy) must find nothing in src/. clang-tidy, the ASan, TSan
# and fuzz builds and the from-source image run in the background at nice 19 while
# the Release build's tests run. The TSan stage also runs the coordinator, lease
# schedule and replay cache unit tests, and the span exporter's.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SANITIZE=${SANITIZE:-1}
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
IMAGE=${IMAGE:-1}
CITUS=${CITUS:-1}

# stage TITLE: prints it and notes how long the stage before it took; the times are
# printed at the end, so a run shows where its minutes went.
STAGE_NAME="install what is missing" STAGE_T0=$SECONDS TIMES=()
stage() {
  TIMES+=("$(printf '%5d s  %s' $((SECONDS - STAGE_T0)) "$STAGE_NAME")")
  STAGE_NAME=$1 STAGE_T0=$SECONDS
  echo "== $1"
}

bash scripts/install-deps.sh image
# ccache (CMakeLists.txt) keys objects by paths relative to the checkout, so a fresh
# clone elsewhere reuses what an earlier run compiled (~/.cache/ccache).
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=true
# New build trees use Ninja, as scripts/build.sh makes them (docs/BUILD.md).
if [ -z "${CMAKE_GENERATOR:-}" ] && command -v ninja >/dev/null; then
  export CMAKE_GENERATOR=Ninja
fi
# The Kubernetes schema validator (tests/kubernetes), the browser driver for the
# admin page (tests/browser: puppeteer-core, which downloads no browser), and the OTLP
# receiver's message definitions (tests/otlp: @opentelemetry/otlp-transformer), pinned
# by their package-lock.json files.
if [ ! -d tests/kubernetes/node_modules/kubernetes-models ]; then
  (cd tests/kubernetes && npm ci --no-audit --no-fund --loglevel=error)
fi
if [ ! -d tests/browser/node_modules/puppeteer-core ]; then
  (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
fi
if [ ! -d tests/otlp/node_modules/@opentelemetry/otlp-transformer ]; then
  (cd tests/otlp && npm ci --no-audit --no-fund --loglevel=error)
fi
format_status=0
bash scripts/check-format.sh || format_status=1
# The layout rules (scripts/check-layout.sh): no source file over 400 lines, no
# include cycle between folders; the script's own self-test first.
layout_status=0
bash scripts/check-layout.sh --self-test && bash scripts/check-layout.sh || layout_status=1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/idemproxy-test.XXXXXX")
chmod 755 "$WORK"
background_pid=""
cleanup() {
  if [ -n "$background_pid" ]; then kill "$background_pid" 2>/dev/null || true; fi
  bash "$ROOT/scripts/pg.sh" stop "$WORK/pg" || true
  bash "$ROOT/scripts/citus.sh" stop "$WORK/citus" || true
  rm -rf "$WORK"
}
trap cleanup EXIT
# With the bench tools too: the benchmark's smoke run below uses this build. The proxy
# is optimised by a profile of a training load (scripts/pgo.sh; PGO=0 skips it), so
# every test below, the package and the image that installs it run what ships.
stage "build: Release (build/), profile-guided"
PGO=${PGO:-1} bash scripts/build.sh -DIDEMPROXY_BENCH=ON

# The images' Debian base (mmdebstrap, once), before the background and the
# foreground both build on it.
if [ "$IMAGE" = 1 ]; then bash scripts/image.sh --base || true; fi

# clang-tidy, the sanitizer builds and the fuzz targets' build run in the background,
# at the lowest CPU priority, while the Release build's tests run: those mostly wait
# on sockets, timers and PostgreSQL, and at nice 19 the builds take only the CPU the
# tests leave idle. Each step's log, status and time land in $WORK/background/.
BACKGROUND=$WORK/background
mkdir -p "$BACKGROUND"
# The sanitizer builds compile with clang: ASan with line tables only (-g1: a report's
# file and line), from nothing cached 255 s on two CPUs against GCC's 361 with full
# debug information; TSan 136 s against GCC's 164. A tree an earlier run configured
# with GCC is started afresh.
for tree in build-asan build-tsan; do
  if [ -f $tree/CMakeCache.txt ] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang++' $tree/CMakeCache.txt; then
    rm -rf $tree
  fi
done
background_step() {  # NAME TITLE COMMAND...: runs it, keeping its output, status and time
  local name=$1 title=$2 t0=$SECONDS rc=0
  shift 2
  "$@" >"$BACKGROUND/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$BACKGROUND/$name.status"
  printf '%5d s  %s (in the background)\n' $((SECONDS - t0)) "$title" >>"$BACKGROUND/times"
}
build_tsan() {
  echo "build: build-tsan (clang, -O1, ThreadSanitizer; idemproxy and tsan_tests, the tests run under TSan)"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 \
    -DCMAKE_CXX_COMPILER=clang++ -DIDEMPROXY_TSAN=ON >/dev/null
  cmake --build build-tsan -j2 --target idemproxy tsan_tests
}
# The fuzz targets are built in the ASan tree (IDEMPROXY_FUZZ: its objects carry
# libFuzzer's coverage instrumentation too), or, without the sanitizer builds, in
# build-fuzz/ (the fuzz preset).
fuzz_in_asan=OFF
if [ "$SANITIZE" = 1 ] && [ "$FUZZ_SECONDS" != 0 ]; then fuzz_in_asan=ON; fi
(
  renice -n 19 -p $BASHPID >/dev/null || true
  if [ "$SANITIZE" = 1 ]; then
    background_step asan "build: ASan+UBSan and the fuzz targets (build-asan/, clang)" \
      env BUILD_DIR=build-asan BUILD_TYPE=Debug bash scripts/build.sh -DIDEMPROXY_SANITIZE=ON \
      -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DIDEMPROXY_FUZZ=$fuzz_in_asan
    background_step tsan "build: TSan (build-tsan/, clang)" build_tsan
  fi
  background_step tidy "clang-tidy" bash scripts/check-tidy.sh
  if [ "$FUZZ_SECONDS" != 0 ] && [ "$fuzz_in_asan" = OFF ]; then
    background_step fuzz "build: the fuzz targets (build-fuzz/)" \
      env FUZZ_BUILD_ONLY=1 bash scripts/fuzz.sh
  fi
  # The documented from-source image build: podman build -f docker/Dockerfile, its
  # compile cached by ccache in the host's own cache (IDEMPROXY_IMAGE_CCACHE), where
  # the Release build left its objects: those the image compiles the same way, with
  # the same system headers, are not compiled again.
  if [ "$IMAGE" = 1 ]; then
    background_step image_source "build: the container image from source (scripts/image.sh source)" \
      env IDEMPROXY_DEB_DIR="$WORK/source-deb" \
      IDEMPROXY_IMAGE_CCACHE="$(ccache -k cache_dir 2>/dev/null || true)" bash scripts/image.sh source
  fi
) &
background_pid=$!
# Waits until the background step NAME has finished (or the background is gone).
await_step() {  # NAME
  while [ ! -f "$BACKGROUND/$1.status" ] && kill -0 "$background_pid" 2>/dev/null; do sleep 2; done
}
# The background step's result: its log's tail when it failed.
background_ok() {  # NAME
  if [ "$(cat "$BACKGROUND/$1.status" 2>/dev/null)" = 0 ]; then return 0; fi
  echo "== background step $1 failed:"
  tail -60 "$BACKGROUND/$1.log" 2>/dev/null || echo "(it did not run)"
  return 1
}

citus_status=0
if [ "$CITUS" = 1 ]; then
  stage "build: Citus (scripts/citus.sh build)"
  bash scripts/citus.sh build || citus_status=1
fi
image_status=0
if [ "$IMAGE" = 1 ]; then
  stage "build: the container image from the Release build (scripts/image.sh test)"
  IDEMPROXY_IMAGE_FROM=build bash scripts/image.sh test || image_status=1
fi


# fsync off: the tests restart PostgreSQL cleanly but never crash the machine.
IDEMPROXY_TEST_DSN=$(bash scripts/pg.sh start "$WORK/pg" "" -c fsync=off)
export IDEMPROXY_TEST_DSN IDEMPROXY_TEST_PGDIR="$WORK/pg" IDEMPROXY_REQUIRE_PG=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
echo "test: PostgreSQL at $IDEMPROXY_TEST_DSN"

passed=0
failed=0
status=0
# The formatting check ran before the build (scripts/check-format.sh).
if [ "$format_status" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); status=1; fi
# So did the layout check (scripts/check-layout.sh).
if [ "$layout_status" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); status=1; fi

run_ctest() {  # BUILD_DIR
  local log="$WORK/ctest-$1.log"
  stage "unit and store tests (ctest, $1)"
  if ctest --test-dir "$1" --output-on-failure -j2 2>&1 | tee "$log"; then :; else status=1; fi
  local total bad
  total=$(grep -oE 'tests failed out of [0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
  bad=$(grep -oE '[0-9]+ tests failed' "$log" | grep -oE '^[0-9]+' || echo 0)
  passed=$((passed + total - bad))
  failed=$((failed + bad))
}

run_gtest() {  # BINARY GTEST_FILTER: one GoogleTest binary on its own
  local log="$WORK/gtest-$RANDOM.log" p n
  stage "$1 ($2)"
  if "$1" --gtest_filter="$2" >"$log" 2>&1; then
    grep -E '^\[==========\] [0-9]+ tests|^\[  PASSED  \]' "$log" || true
  else
    status=1
    tail -80 "$log"  # the failures, or what a sanitizer reported
  fi
  p=$(grep -oE 'PASSED  \] [0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
  n=$(grep -oE 'FAILED  \] [0-9]+ test' "$log" | grep -oE '[0-9]+' || echo 0)
  if [ "$p" = 0 ] && [ "$n" = 0 ]; then n=1; fi  # it did not run: count a failure
  passed=$((passed + p))
  failed=$((failed + n))
}

summary_counts() {  # LOG PREFIX: adds LOG's last "PREFIX: N passed, M failed" line; without one, a failure
  local line p f
  line=$(grep -E "^$2: [0-9]+ passed" "$1" | tail -1 || true)
  p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)
  f=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+' || echo 1)
  passed=$((passed + p))
  failed=$((failed + f))
  [ "$f" = 0 ]
}

# End-to-end tests mostly wait (a serial run keeps a third of one CPU busy), so they
# run in PYTEST_WORKERS processes (pytest-xdist), each with a PostgreSQL of its own
# (tests/e2e/conftest.py). PYTEST_WORKERS=0 runs a stage in one process.
PYTEST_WORKERS=${PYTEST_WORKERS:-4}
run_pytest() {  # BUILD_DIR [pytest arguments; default: the whole suite]
  local build=$1 log="$WORK/pytest-$1.log" line p n rc=0 counted=0
  shift
  stage "end-to-end tests (pytest, $PYTEST_WORKERS workers, $build/idemproxy${*:+, $*})"
  # --durations: the slowest tests of each stage are named, so a run shows where
  # its minutes went test by test.
  # The Release build is profile-guided unless PGO=0 (test_operations.py checks it).
  local expect_pgo=0
  [ "$build" = build ] && [ "${PGO:-1}" = 1 ] && expect_pgo=1
  if IDEMPROXY_BIN="$ROOT/$build/idemproxy" IDEMPROXY_EXPECT_PGO=$expect_pgo \
      /usr/bin/python3 -m pytest -q -p no:cacheprovider \
      -n "$PYTEST_WORKERS" --durations=12 "${@:-tests/e2e}" 2>&1 | tee "$log"; then :; else
    rc=${PIPESTATUS[0]}
    status=1
  fi
  line=$(grep -E '(passed|failed|error)' "$log" | tail -1 || true)
  p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)
  passed=$((passed + p))
  for n in $(echo "$line" | grep -oE '[0-9]+ (failed|errors?)' | grep -oE '^[0-9]+'); do
    failed=$((failed + n))
    counted=$((counted + n))
  done
  # A run that failed with no test failed (pytest interrupted, an internal error, a
  # worker lost) is said, and counted, where it happened.
  if [ "$rc" -ne 0 ] && [ "$counted" -eq 0 ]; then
    echo "pytest exited $rc with no test failed (2: interrupted, 3: internal error, 4: usage, 5: no tests)"
    failed=$((failed + 1))
  fi
}

run_ctest build
run_pytest build tests/e2e --ignore=tests/e2e/test_image.py
# TLS (h2 by ALPN), tracing and the replay cache again, every request on an HTTP/2
# stream (harness.py): what differs there from HTTP/1.1 beyond the codec. The
# behaviour table runs over both codecs in process (tests/proxy/behaviour_test.cpp).
stage "the next run sends every test request over HTTP/2 (IDEMPROXY_TEST_HTTP2=1)"
IDEMPROXY_TEST_HTTP2=1 run_pytest build tests/e2e/test_tls.py tests/e2e/test_tracing.py \
  tests/e2e/test_replay_cache.py
# The contract's round two from an outside HTTP/2 peer too: a fingerprint rule changed
# by reload and on a second instance, and the upstream's max-age (quotas and the key
# lookup take both protocols in their own tests).
IDEMPROXY_TEST_HTTP2=1 run_pytest build tests/e2e/test_contract.py \
  -k "fingerprint_rule_change or max_age"

# In a copy of the checkout without build trees, as a new clone would be, it must
# build the binary it runs and nothing else (no test binary); ccache, keyed by paths
# relative to the copy, reuses the Release build's objects.
stage "run-local smoke test (the first README command, in a fresh copy of the checkout)"
first_run=$WORK/first-run
mkdir -p "$first_run"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$first_run"
read -r proxy_port admin_port upstream_port <<<"$(python3 scripts/free_port.py 3)"
if (cd "$first_run" && CCACHE_BASEDIR=$first_run PROXY_PORT=$proxy_port ADMIN_PORT=$admin_port \
      UPSTREAM_PORT=$upstream_port RUN_DIR="$WORK/local" bash scripts/run-local.sh --smoke) \
      >"$WORK/smoke.log" 2>&1 &&
   [ -x "$first_run/build/idemproxy" ] && [ ! -e "$first_run/build/tests/unit_tests" ] &&
   [ ! -e "$first_run/build/tests/http_tests" ]; then
  grep -E '^run-local: installed and built|^run-local smoke: ' "$WORK/smoke.log"
  passed=$((passed + 1))
else
  cat "$WORK/smoke.log"
  ls "$first_run/build" "$first_run/build/tests" 2>/dev/null || true
  echo "run-local smoke: failed, or it built more than build/idemproxy"
  failed=$((failed + 1))
  status=1
fi
rm -rf "$first_run"

stage "benchmark harness smoke (bench/run.sh --smoke: nginx, pgbench and idemproxy, 1 s each)"
bench_rc=0
BENCH_BUILD=build bash bench/run.sh --smoke >"$WORK/bench.log" 2>&1 || bench_rc=$?
grep -E '^bench smoke: ' "$WORK/bench.log" | tail -1 || true
if ! summary_counts "$WORK/bench.log" "bench smoke"; then
  tail -40 "$WORK/bench.log"
  status=1
elif [ "$bench_rc" -ne 0 ]; then
  tail -40 "$WORK/bench.log"
  echo "bench smoke: bench/run.sh exited $bench_rc after its checks passed"
  failed=$((failed + 1))
  status=1
fi

if [ "$CITUS" = 1 ]; then
  stage "the store on Citus (a coordinator and two workers)"
  if [ "$citus_status" = 0 ] && citus_dsn=$(bash scripts/citus.sh start "$WORK/citus"); then
    IDEMPROXY_TEST_DSN=$citus_dsn IDEMPROXY_TEST_PGDIR="$WORK/citus/coordinator" \
      IDEMPROXY_TEST_CITUS=1 run_gtest build/tests/store_tests 'Stores/StoreContract.*:Stores/QuotaContract.*:Stores/StreamContract.*:PgStore*:PgWatch*:PgCitus*'
    bash scripts/citus.sh stop "$WORK/citus" || true
    # Two workers, each on a cluster of its own (tests/e2e/conftest.py: tests stop the
    # coordinator, add and drain workers): the shard-move ledger alone takes two
    # minutes, which the other worker spends on the rest (it goes first, so it starts
    # at once).
    IDEMPROXY_TEST_CITUS=1 PYTEST_WORKERS=${CITUS_WORKERS:-2} run_pytest build \
      tests/e2e/test_citus_moves.py tests/e2e/test_behaviour_table.py \
      tests/e2e/test_concurrency.py tests/e2e/test_faults.py tests/e2e/test_ledger_real_peers.py \
      tests/e2e/test_citus.py tests/e2e/test_contract.py \
      tests/e2e/test_quota.py tests/e2e/test_oversized.py tests/e2e/test_stream_attach_remote.py
  else
    stage "Citus: the build or the cluster failed (above)"
    failed=$((failed + 1))
    status=1
  fi
fi

if [ "$IMAGE" = 1 ]; then
  if [ "$image_status" = 0 ]; then
    PYTEST_WORKERS=0 run_pytest build tests/e2e/test_image.py
  else
    stage "container image: the build failed (above)"
    failed=$((failed + 1))
    status=1
  fi
fi

# The background steps, each awaited just before what needs it: the ASan tests run
# while the TSan and fuzz builds and clang-tidy go on behind them.
step_result() {  # NAME: counts a background step that failed
  if ! background_ok "$1"; then
    failed=$((failed + 1))
    status=1
    return 1
  fi
}
if [ "$SANITIZE" = 1 ]; then
  stage "waiting for the background ASan+UBSan build"
  await_step asan
fi
if [ "$SANITIZE" = 1 ] && step_result asan; then
  run_ctest build-asan
  # The end-to-end files where memory goes wrong if anywhere: codecs, hostile input,
  # streams, TLS, faults, reloads, the store's reconnects. Left out, as the Release
  # run and the ASan ctest run already cover them: the behaviour table (in process
  # under ASan), configuration, metrics, tracing, dashboards, manifests, the harness,
  # and what runs on other servers (failover, Citus, the image).
  asan_skip=(behaviour_table scopes shadow_mode metrics observability tracing admin_page
    operators_view kubernetes containers free_port failover citus citus_moves image)
  asan_skip=("${asan_skip[@]/#/--ignore=tests/e2e/test_}")
  run_pytest build-asan tests/e2e "${asan_skip[@]/%/.py}"
fi

if [ "$SANITIZE" = 1 ]; then
  stage "waiting for the background TSan build"
  await_step tsan
fi
if [ "$SANITIZE" = 1 ] && step_result tsan; then
  stage "ThreadSanitizer: tsan_tests (the store tests; the coordinator, lease schedule, replay cache and digest unit tests; the runtime's queued calls; the deadline socket; the span exporter; the rest of their files)"
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$ROOT/tests/tsan.supp"
  run_gtest build-tsan/tests/tsan_tests '*'
  IDEMPROXY_TEST_THREADS=4 run_pytest build-tsan tests/e2e/test_concurrency.py \
    tests/e2e/test_scopes.py tests/e2e/test_tls.py tests/e2e/test_faults.py \
    tests/e2e/test_operations.py tests/e2e/test_oversized.py tests/e2e/test_ledger_real_peers.py \
    tests/e2e/test_startup.py tests/e2e/test_http2.py tests/e2e/test_http2_hostile.py \
    tests/e2e/test_http2_upstream.py tests/e2e/test_http2_upstream_hostile.py tests/e2e/test_grpc.py
  unset TSAN_OPTIONS
fi

stage "waiting for the rest of the background (clang-tidy, the fuzz build, the from-source image)"
wait "$background_pid" || true
if step_result tidy; then
  grep -E '^tidy: ' "$BACKGROUND/tidy.log" || true
  passed=$((passed + 1))
fi
fuzz_dir=""
if [ "$fuzz_in_asan" = ON ]; then fuzz_dir=build-asan; fi
# Whether the fuzz targets were built: in the ASan tree (whose failed build was
# counted above), or in build-fuzz/ (counted here when it failed).
fuzz_targets_built() {
  if [ "$fuzz_in_asan" = ON ]; then
    [ "$(cat "$BACKGROUND/asan.status" 2>/dev/null)" = 0 ]
  else
    step_result fuzz
  fi
}
if [ "$FUZZ_SECONDS" != 0 ] && fuzz_targets_built; then
  stage "fuzzing (libFuzzer, ${FUZZ_SECONDS}s per target, committed corpus and regressions)"
  fuzz_rc=0
  FUZZ_SECONDS="$FUZZ_SECONDS" FUZZ_OUT="$WORK/fuzz" FUZZ_BUILD_DIR="$fuzz_dir" \
    bash scripts/fuzz.sh 2>&1 | tee "$WORK/fuzz.log" || fuzz_rc=${PIPESTATUS[0]}
  if ! summary_counts "$WORK/fuzz.log" fuzz; then
    status=1
  elif [ "$fuzz_rc" -ne 0 ]; then
    echo "fuzz: scripts/fuzz.sh exited $fuzz_rc after its targets passed"
    failed=$((failed + 1))
    status=1
  fi
fi
if [ "$IMAGE" = 1 ] && step_result image_source; then
  tail -1 "$BACKGROUND/image_source.log"
  IDEMPROXY_IMAGE=idemproxy:source IDEMPROXY_DEB_DIR="$WORK/source-deb" \
    PYTEST_WORKERS=0 run_pytest build tests/e2e/test_image.py
fi

stage "the times"
printf '%s\n' "${TIMES[@]}"
cat "$BACKGROUND/times" 2>/dev/null || true
printf '%5d s  in all (%d min)\n' "$SECONDS" $((SECONDS / 60))
if command -v ccache >/dev/null; then ccache --show-stats 2>/dev/null | grep -iE 'hits|misses' | head -4 || true; fi
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo "test: $passed passed, $failed failed"
exit "$status"

#!/usr/bin/env bash
# Profiles idemproxy under one scenario of bench/run.sh, with the same setup (SUT
# pinned to CPU 1, load on CPU 0, private PostgreSQL, bench upstream):
#   bench/profile.sh pass|pass1m|fresh|replay|h2pass|h2replay [SECONDS]
# (h2pass and h2replay: h2load -c 8 -m 32 over h2c, as bench/run.sh's HTTP/2 rows)
# Prints the CPU time per request, `perf report` (self time, top entries, by symbol
# and by shared object) and `strace -c` over a second window of the same load.
set -euo pipefail
cd "$(dirname "$0")/.."
SCENARIO=${1:?pass, pass1m, fresh, replay, h2pass or h2replay}
SECS=${2:-8}
WORK_NAME=profile
. bench/common.sh

DSN=$(start_pg "$WORK/pg")
start_upstream
start_proxy idemproxy "$DSN" 8

printf '%s' '{"amount":1000,"currency":"eur"}' >"$WORK/post.json"
# Prints the count of requests answered in $1 seconds of the scenario's load.
load() {
  case $SCENARIO in
    h2pass | h2replay)
      local path=/pass extra=()
      if [ "$SCENARIO" = h2replay ]; then path=/v1/orders extra=(-H "idempotency-key: h2prof-$$"); fi
      taskset -c "$LOAD_CPU" h2load -c 8 -m 32 -D "$1" -d "$WORK/post.json" \
        -H 'content-type: application/json' "${extra[@]}" "http://127.0.0.1:$PROXY_PORT$path" \
        | awk '/^requests:/ {print $8}' ;;
    *) scenario_wrk "$SCENARIO" "$1" | awk '/requests in/ {print $1}' ;;
  esac
}
load 2 >/dev/null  # warm: pool connections, prepared statements, WAL
HZ=$(getconf CLK_TCK)
# Context switches of all the proxy's threads, voluntary and not (common.sh).
all_switches() { switches "$PROXY_PID" | awk '{print $1 + $2}'; }
s0=$(all_switches)
c0=$(ticks "$PROXY_PID")
perf record -q ${PERF_CALL_GRAPH:--g} -F 999 -p "$PROXY_PID" -o "$WORK/perf.data" -- sleep "$SECS" 2>/dev/null &
PERF=$!
n=$(load "$SECS")
wait "$PERF" || true
c1=$(ticks "$PROXY_PID")
s1=$(all_switches)
echo "== $SCENARIO: $n requests in ${SECS}s, $(awk -v t=$((c1 - c0)) -v hz="$HZ" -v n="$n" \
  'BEGIN {printf "%.1f", t / hz * 1e6 / n}') us of CPU and $(awk -v s=$((s1 - s0)) -v n="$n" \
  'BEGIN {printf "%.1f", s / n}') context switches per request (perf running)"
# KEEP_PERF=FILE keeps the recording for further `perf report -i FILE`; PERF_CALL_GRAPH
# (e.g. "--call-graph dwarf") replaces -g, frame pointers, which skip a leaf's caller.
if [ -n "${KEEP_PERF:-}" ]; then cp "$WORK/perf.data" "$KEEP_PERF"; fi
echo "== perf: by shared object"
perf report -i "$WORK/perf.data" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]' | sed -E 's/ +$//' | head -8 || true
echo "== perf: top symbols, self time"
perf report -i "$WORK/perf.data" --no-children --sort dso,symbol --stdio -g none 2>/dev/null \
  | grep -E '^ +[0-9]' | sed -E 's/ +- +- *$//; s/ +$//' | cut -c1-150 | head -40 || true
if [ -n "${CALLERS:-}" ]; then
  echo "== callers of $CALLERS"
  perf report -i "$WORK/perf.data" --no-children -S "$CALLERS" -G --stdio 2>/dev/null \
    | grep -vE '^$|^#' | cut -c1-160 | head -60 || true
fi
echo "== strace -c, 4 s of the same load (system calls per request: divide by the count)"
tids=$(ls /proc/"$PROXY_PID"/task | sed 's/^/-p /')
# shellcheck disable=SC2086  # one -p per thread
strace -c -o "$WORK/strace.txt" $tids 2>"$WORK/strace.err" & ST=$!
sleep 0.5
n=$(load 4)
kill -INT "$ST" 2>/dev/null || true
wait "$ST" 2>/dev/null || true
echo "requests: $n"
head -20 "$WORK/strace.txt" 2>/dev/null || cat "$WORK/strace.err"

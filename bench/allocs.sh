#!/usr/bin/env bash
# Counts the proxy's heap allocations per request in one scenario of bench/run.sh,
# with its setup (SUT pinned to CPU 1, load on CPU 0, private PostgreSQL, bench
# upstream): perf uprobes on tcmalloc's entry points, counted over a window of load.
#   bench/allocs.sh pass|pass1m|fresh|replay [SECONDS]
# Prints the calls per request of each entry point. operator new (tc_new; new[] is
# the same code) is what the proxy's own code and its libraries ask for; tc_memalign
# is Asio's recycler taking coroutine frames and operations it has no cached block
# for. STACKS=1 also prints their callers (KEEP_PERF=FILE keeps that recording). The probes slow the proxy several times
# over: the counts are exact, the rate is not. Needs perf and root.
set -euo pipefail
cd "$(dirname "$0")/.."
SCENARIO=${1:?pass, pass1m, fresh or replay}
SECS=${2:-4}
WORK_NAME=allocs
. bench/common.sh

LIB=$(ldd "${PROXY_BIN:-$BENCH_BUILD/idemproxy}" | awk '/tcmalloc/ {print $3}')
[ -n "$LIB" ] || { echo "the proxy is not linked with tcmalloc (IDEMPROXY_TCMALLOC)" >&2; exit 1; }
ENTRIES=(tc_new tc_malloc tc_calloc tc_realloc tc_memalign tc_posix_memalign tc_new_aligned)
GROUP=idemproxy_allocs
for e in "${ENTRIES[@]}"; do perf probe -q -x "$LIB" --add "$GROUP:$e=$e" >/dev/null 2>&1 || true; done
CLEANUP+=("perf probe -q --del $GROUP:*")

DSN=$(start_pg "$WORK/pg")
start_upstream
start_proxy idemproxy "$DSN" 8
scenario_wrk "$SCENARIO" 2 >/dev/null  # warm: pool connections, arenas, caches
perf stat -x, -e "$GROUP:*" -p "$PROXY_PID" -o "$WORK/stat" -- sleep "$SECS" &
STAT=$!
n=$(scenario_wrk "$SCENARIO" "$SECS" | awk '/requests in/ {print $1}')
wait "$STAT" || true
echo "== $SCENARIO: $n requests in ${SECS}s (probed); heap calls per request:"
awk -F, -v n="$n" '$3 ~ /:/ {sub(/.*:/, "", $3); printf "%-18s %8.2f\n", $3, $1 / n}' "$WORK/stat"
# STACKS=1: then records where the calls come from (perf record on the probes, with
# DWARF call graphs, over a further window) and prints the callers, heaviest first.
if [ "${STACKS:-0}" = 1 ]; then
  perf record -q -e "$GROUP:*" --call-graph dwarf,16384 -p "$PROXY_PID" -o "$WORK/stacks.data" \
    -- sleep "$SECS" 2>/dev/null &
  REC=$!
  scenario_wrk "$SCENARIO" "$SECS" >/dev/null
  wait "$REC" || true
  if [ -n "${KEEP_PERF:-}" ]; then cp "$WORK/stacks.data" "$KEEP_PERF"; fi
  perf report -i "$WORK/stacks.data" --no-children --stdio -G --percent-limit 2 2>/dev/null \
    | grep -v '^$' | head -${STACK_LINES:-150}
fi

#!/usr/bin/env bash
# Where the two CPUs go under one scenario of bench/run.sh, with its setup (SUT on
# CPU 1; PostgreSQL, the upstream and wrk on CPU 0):
#   bench/cpu_split.sh pass|pass1m|fresh|replay [SECONDS]
# EXPERIMENT_SQL, when set, runs against the store once the proxy has migrated it (a
# schema experiment, e.g. one index dropped, to see what it costs PostgreSQL).
# CONNS sets wrk's connections (the scenario's own by default: 64, pass1m 256).
# PG_PROFILE=1 also records PostgreSQL's processes with perf over the window and
# prints where their CPU goes, by symbol (self time, as a share of their samples).
# Prints each CPU's busy share and the CPU time per request of each process group
# (idemproxy, PostgreSQL's processes, the upstream, wrk), from /proc, then the
# records table's inserts, updates and HOT updates (pg_stat_user_tables, the whole run).
set -euo pipefail
cd "$(dirname "$0")/.."
SCENARIO=${1:?pass, pass1m, fresh or replay}
SECS=${2:-8}
WORK_NAME=cpu_split
. bench/common.sh

DSN=$(start_pg "$WORK/pg")
start_upstream
UP_PID=${PIDS[-1]}
start_proxy idemproxy "$DSN" "${POOL:-8}"
if [ -n "${EXPERIMENT_SQL:-}" ]; then psql -q "$DSN" -c "$EXPERIMENT_SQL"; fi

HZ=$(getconf CLK_TCK)
load() { scenario_wrk "$SCENARIO" "$1" >"$WORK/wrk.out"; }
load 2  # warm
l0=$(cpu_ticks "$LOAD_CPU") s0=$(cpu_ticks "$SUT_CPU")
p0=$(ticks "$PROXY_PID") g0=$(server_ticks "$WORK/pg") u0=$(ticks "$UP_PID")
load "$SECS" & W=$!
if [ "${PG_PROFILE:-0}" = 1 ]; then
  perf record -q -g -F 1999 -C "$LOAD_CPU" -o "$WORK/pg.perf" -- sleep $((SECS - 1)) 2>/dev/null & PERF=$!
fi
sleep 0.2; WRK_PID=$(pgrep -n wrk); w0=$(ticks "$WRK_PID")
sleep $((SECS - 1)); w1=$(ticks "$WRK_PID")
wait "$W"
l1=$(cpu_ticks "$LOAD_CPU") s1=$(cpu_ticks "$SUT_CPU")
p1=$(ticks "$PROXY_PID") g1=$(server_ticks "$WORK/pg") u1=$(ticks "$UP_PID")
n=$(awk '/requests in/ {print $1}' "$WORK/wrk.out")
per() { awk -v t="$1" -v hz="$HZ" -v n="$n" -v s="${2:-1}" 'BEGIN {printf "%.1f", t / hz * 1e6 / n * s}'; }
echo "== $SCENARIO: $n requests in ${SECS}s ($((n / SECS)) req/s)"
echo "busy: the load's CPU $LOAD_CPU $(busy_share "$l0" "$l1") %, the SUT's CPU $SUT_CPU $(busy_share "$s0" "$s1") %"
echo "CPU µs per request: idemproxy $(per $((p1 - p0))), PostgreSQL $(per $((g1 - g0))) (all its processes)," \
  "the upstream $(per $((u1 - u0))), wrk $(per $((w1 - w0)) "$(awk -v s="$SECS" 'BEGIN {print s / (s - 1)}')") (scaled from its sampled window)"
if [ "${PG_PROFILE:-0}" = 1 ]; then
  wait "$PERF" || true
  echo "== PostgreSQL's processes: self time by symbol (share of their samples)"
  perf report -i "$WORK/pg.perf" --comms postgres --no-children --percentage relative \
    --sort symbol --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -${PG_LINES:-40}
fi
sleep 1.5  # the backends report their counts when idle
psql "$DSN" -qAt -F ' ' -c "SELECT 'records:', n_tup_ins, 'inserts,', n_tup_upd, 'updates,',
  n_tup_hot_upd, 'HOT' FROM pg_stat_user_tables WHERE relname = 'idempotency_records'"

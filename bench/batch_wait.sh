#!/usr/bin/env bash
# The curve behind store.postgres.batch_wait's default: fresh keys through idemproxy
# at several connection counts, for each wait, with bench/run.sh's setup (SUT on CPU 1;
# PostgreSQL at its defaults, fsync on, the upstream and wrk on CPU 0).
#   bench/batch_wait.sh [SECONDS] [WAITS] [CONNECTIONS]
# WAITS and CONNECTIONS are space-separated lists (default "0us 100us 250us 500us 1ms"
# and "1 8 32 64"). For each wait, one proxy; for each connection count, one wrk run
# after a CHECKPOINT. Prints one line per point: keys/s, p50 and p99 in ms, the
# database's and the proxy's CPU µs per key, and members per batch (from the proxy's
# idemproxy_db_batch* metrics), then the minimal pgbench reference's keys/s and
# database CPU µs per key in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-6}
WAITS=${2:-"0us 100us 250us 500us 1ms"}
CONNS_LIST=${3:-"1 8 32 64"}
WORK_NAME=batch_wait
. bench/common.sh
DSN=$(start_pg "$WORK/pg")
start_upstream
HZ=$(getconf CLK_TCK)
metric() { curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
printf '%-7s %5s %8s %7s %7s %9s %9s %8s\n' wait conns keys/s p50 p99 db_us/key px_us/key per_batch
for wait in $WAITS; do
  PROXY_STORE_EXTRA="batch_wait: $wait" start_proxy "bw-$wait" "$DSN" 8
  ADMIN_PORT=$(awk '/^admin_listen/ {split($2, a, ":"); print a[2]}' "$WORK/bw-$wait.yaml")
  CONNS=16 scenario_wrk fresh 2 >/dev/null  # warm
  for c in $CONNS_LIST; do
    psql "$DSN" -qAt -c CHECKPOINT
    sleep 1
    g0=$(server_ticks "$WORK/pg") p0=$(ticks "$PROXY_PID")
    b0=$(metric idemproxy_db_batches_total) o0=$(metric idemproxy_db_batched_operations_total)
    out=$(KEY_PREFIX="bw-$wait-$c-$$" taskset -c "$LOAD_CPU" wrk -t1 -c"$c" -d"${SECS}s" \
      --timeout 10s --latency -s bench/lua/keys.lua "http://127.0.0.1:$PROXY_PORT/v1/orders")
    g1=$(server_ticks "$WORK/pg") p1=$(ticks "$PROXY_PID")
    b1=$(metric idemproxy_db_batches_total) o1=$(metric idemproxy_db_batched_operations_total)
    n=$(echo "$out" | awk '/requests in/ {print $1}')
    p50=$(to_ms "$(echo "$out" | awk '$1 == "50%" {print $2}')")
    p99=$(to_ms "$(echo "$out" | awk '$1 == "99%" {print $2}')")
    awk -v w="$wait" -v c="$c" -v n="$n" -v s="$SECS" -v p50="$p50" -v p99="$p99" \
      -v g=$((g1 - g0)) -v p=$((p1 - p0)) -v hz="$HZ" -v b="$(awk -v a="$b0" -v z="$b1" 'BEGIN {print z - a}')" \
      -v o="$(awk -v a="$o0" -v z="$o1" 'BEGIN {print z - a}')" 'BEGIN {
      printf "%-7s %5d %8.0f %7.2f %7.2f %9.1f %9.1f %8s\n", w, c, n / s, p50, p99,
        g / hz * 1e6 / n, p / hz * 1e6 / n, (b > 0 ? sprintf("%.1f", o / b) : "n/a") }'
  done
  kill "$PROXY_PID"; wait "$PROXY_PID" 2>/dev/null || true
done
minimal_reference "$DSN"
psql "$DSN" -qAt -c CHECKPOINT
sleep 1
g0=$(server_ticks "$WORK/pg")
t=$(minimal_tps "$DSN" "$SECS")
sleep 1
g1=$(server_ticks "$WORK/pg")
awk -v t="$t" -v g=$((g1 - g0)) -v hz="$HZ" -v s="$SECS" 'BEGIN {
  printf "minimal pgbench (8 connections): %d keys/s, database %.1f CPU us per key\n", t, g / hz * 1e6 / (t * s) }'

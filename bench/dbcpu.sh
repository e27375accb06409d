#!/usr/bin/env bash
# Where the database's CPU goes: fresh keys through idemproxy against the minimal
# pgbench reference of bench/run.sh, in alternating rounds (run.sh's setup: the proxy
# on CPU 1; PostgreSQL, wrk and the upstream on CPU 0; pgbench's client on CPU 1).
#   bench/dbcpu.sh [ROUNDS] [SECONDS]
# Prints per round: the database's CPU per fresh key and per keyed request of the
# reference (the postmaster's processes, with the exited backends it reaped), the
# proxy's and the upstream's per key, and how busy CPU 0 was (iowait counted idle).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3} SECS=${2:-8}
WORK_NAME=dbcpu
. bench/common.sh
DSN=$(start_pg "$WORK/pg")
start_upstream
start_proxy idemproxy "$DSN" 8
HZ=$(getconf CLK_TCK)
# The load's CPU's busy and idle ticks (iowait counted idle).
cpu0() { cpu_ticks "$LOAD_CPU" | awk '{print $1, $2 - $1}'; }
minimal_reference "$DSN"
# warm
KEY_PREFIX=warm-$$ taskset -c $LOAD_CPU wrk -t1 -c64 -d"${SECS}s" -s bench/lua/keys.lua "http://127.0.0.1:$PROXY_PORT/v1/orders" >/dev/null
minimal_tps "$DSN" "$SECS" >/dev/null
for round in $(seq "$ROUNDS"); do
  psql "$DSN" -qAt -c CHECKPOINT
  sleep 1
  g0=$(server_ticks "$WORK/pg"); x0=$(ticks "$PROXY_PID"); u0=$(ticks "${PIDS[0]}"); read b0 i0 < <(cpu0)
  out=$(KEY_PREFIX=f$round-$$ taskset -c $LOAD_CPU wrk -t1 -c64 -d"${SECS}s" -s bench/lua/keys.lua "http://127.0.0.1:$PROXY_PORT/v1/orders")
  g1=$(server_ticks "$WORK/pg"); x1=$(ticks "$PROXY_PID"); u1=$(ticks "${PIDS[0]}"); read b1 i1 < <(cpu0)
  n=$(echo "$out" | awk '/requests in/ {print $1}')
  awk -v n=$n -v g=$((g1-g0)) -v x=$((x1-x0)) -v u=$((u1-u0)) -v b=$((b1-b0)) -v i=$((i1-i0)) -v hz=$HZ -v secs=$SECS 'BEGIN {
    printf "fresh: %d keys/s; per key: database %.1f us, proxy %.1f us, upstream %.1f us; CPU 0 busy %.0f%%, of it database %.0f%%, upstream %.0f%%, rest (wrk, system) %.0f%%\n",
      n/secs, g/hz*1e6/n, x/hz*1e6/n, u/hz*1e6/n, 100*b/(b+i), 100*g/b, 100*u/b, 100*(b-g-u)/b }'
  psql "$DSN" -qAt -c CHECKPOINT
  sleep 1  # earlier sessions' backends reaped: their CPU is in the postmaster's cutime
  g0=$(server_ticks "$WORK/pg"); read b0 i0 < <(cpu0)
  t=$(minimal_tps "$DSN" "$SECS")
  read b1 i1 < <(cpu0)
  sleep 1  # pgbench's backends exit with it; wait until they are reaped
  g1=$(server_ticks "$WORK/pg")
  awk -v t=$t -v g=$((g1-g0)) -v b=$((b1-b0)) -v i=$((i1-i0)) -v hz=$HZ -v secs=$SECS 'BEGIN {
    printf "minimal pgbench: %d keyed requests/s; database %.1f us per keyed request; CPU 0 busy %.0f%% (iowait counted idle), of it database %.0f%%\n",
      t, g/hz*1e6/(t*secs), 100*b/(b+i), 100*g/b }'
done

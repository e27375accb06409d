#!/usr/bin/env bash
# Fresh-key throughput of idemproxy on one PostgreSQL node and on a Citus cluster (a
# coordinator and two workers, scripts/citus.sh), on this machine, in one run; and
# the database CPU each fresh key costs on each node, which feeds the N-worker model
# in docs/SCALING.md.
#   bench/scaling.sh           ROUNDS (3) rounds of BENCH_SECONDS (10) per store
#   bench/scaling.sh --smoke   one round of 2 s: checks the harness works
# Pinning, as bench/run.sh: idemproxy on CPU 1; wrk, the upstream and every
# PostgreSQL server on CPU 0. So both stores get one core, and the comparison is
# what Citus's routing costs on the same hardware, not what more machines buy.
# Every server keeps PostgreSQL's durable defaults (fsync, synchronous_commit on).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_=${BENCH_SECONDS:-10}
ROUNDS=${ROUNDS:-3}
if [ "${1:-}" = "--smoke" ]; then SECONDS_=2; ROUNDS=1; fi

bash scripts/citus.sh build
WORK_NAME=scaling
. bench/common.sh
CLEANUP+=("bash scripts/citus.sh stop $WORK/citus")

PLAIN_DSN=$(start_pg "$WORK/pg")
CITUS_DSN=$(CITUS_DURABLE=1 taskset -c "$LOAD_CPU" bash scripts/citus.sh start "$WORK/citus")
start_upstream

# proxy NAME DSN POOL: starts idemproxy on the store; sets PORT[NAME] and PID[NAME].
declare -A PORT PID
proxy() {
  start_proxy "$1" "$2" "$3"
  PID[$1]=$PROXY_PID
  PORT[$1]=$PROXY_PORT
  taskset -c "$LOAD_CPU" wrk -t1 -c16 -d1s -s bench/lua/keys.lua "http://127.0.0.1:$PROXY_PORT/v1/warm" >/dev/null
}
proxy plain "$PLAIN_DSN" 8
proxy citus8 "$CITUS_DSN" 8
proxy citus16 "$CITUS_DSN" 16

HZ=$(getconf CLK_TCK)
# ticks and server_ticks (common.sh) measure the proxies and the database nodes.
NODES=(pg citus/coordinator citus/worker1 citus/worker2)

# measure NAME ROUND: fresh keys for SECONDS_ through proxy NAME.
declare -A R
measure() {
  local name=$1 round=$2 out n p0 p1 node
  declare -A n0
  for node in "${NODES[@]}"; do n0[$node]=$(server_ticks "$WORK/$node"); done
  p0=$(ticks "${PID[$name]}")
  out=$(KEY_PREFIX="$name-$round-$$" taskset -c "$LOAD_CPU" wrk -t1 -c64 -d"${SECONDS_}s" \
          --timeout 10s -s bench/lua/keys.lua "http://127.0.0.1:${PORT[$name]}/v1/orders")
  p1=$(ticks "${PID[$name]}")
  n=$(echo "$out" | awk '/requests in/ {print $1}')
  if echo "$out" | grep -qE 'Non-2xx|Socket errors'; then
    echo "$out" >&2
    echo "scaling: $name had errors" >&2
    exit 1
  fi
  R[$name.$round.rps]=$(echo "$out" | awk '/^Requests\/sec/ {printf "%.0f", $2}')
  R[$name.$round.proxy]=$(awk -v t=$((p1 - p0)) -v hz="$HZ" -v n="$n" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}')
  for node in "${NODES[@]}"; do
    R[$name.$round.$node]=$(awk -v t=$(($(server_ticks "$WORK/$node") - n0[$node])) -v hz="$HZ" -v n="$n" \
      'BEGIN {printf "%.1f", t / hz * 1e6 / n}')
  done
  echo "scaling: $name round $round: ${R[$name.$round.rps]} fresh keys/s" >&2
}

for round in $(seq 1 "$ROUNDS"); do
  for name in plain citus8 citus16; do measure "$name" "$round"; done
done

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
col() {  # NAME FIELD: the median over the rounds
  local v=() round
  for round in $(seq 1 "$ROUNDS"); do v+=("${R[$1.$round.$2]}"); done
  median "${v[@]}"
}
{
  echo "## Fresh keys, one node against Citus ($(date -u +%Y-%m-%d), $ROUNDS × ${SECONDS_}s, medians)"
  echo
  echo "| store | fresh keys/s | rounds | proxy CPU µs/key | single node µs/key | coordinator µs/key | worker 1 µs/key | worker 2 µs/key |"
  echo "|---|---|---|---|---|---|---|---|"
  for name in plain citus8 citus16; do
    rounds=()
    for round in $(seq 1 "$ROUNDS"); do rounds+=("${R[$name.$round.rps]}"); done
    echo "| $name | $(col "$name" rps) | ${rounds[*]} | $(col "$name" proxy) | $(col "$name" pg) |" \
      "$(col "$name" citus/coordinator) | $(col "$name" citus/worker1) | $(col "$name" citus/worker2) |"
  done
  echo
  echo "plain: one PostgreSQL 15, pool 8 (group commit). citusN: coordinator and 2 workers,"
  echo "pool N, group commit per worker. Database CPU counts every"
  echo "backend of each server, per fresh key (claim + completion + background work)."
} | tee bench/results/scaling-latest.md

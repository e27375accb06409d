#!/usr/bin/env bash
# A/B of two idemproxy binaries on one scenario, measured alternately so that the
# machine's drift hits both alike (bench/run.sh's setup: SUT pinned to CPU 1):
#   bench/ab.sh OLD_BINARY NEW_BINARY pass|pass64k|pass1m|fresh|replay|h2pass|h2replay|grpcfresh [ROUNDS] [SECONDS]
# (h2pass, h2replay: h2load -c 8 -m 32 over h2c, as bench/run.sh's HTTP/2 rows;
# grpcfresh: bench/grpc_fresh.js's unary calls, a new key each, through both proxies
# to bench/run.sh's gRPC nginx over h2c, as its idem.grpcfresh row; req/s counts the
# calls that ended grpc-status 0)
# Prints req/s and CPU µs per request of each round (and its user-space part: a change
# in the proxy's own code shows there first, the kernel's share being most of a
# request's), then the medians and ratios; on
# one PostgreSQL node, also the database's CPU µs per request (all its processes, the
# two proxies' rounds taking turns on it).
# AB_STORE=citus runs both on a Citus cluster (scripts/citus.sh, durable settings, its
# servers on the load CPU) instead of one PostgreSQL node.
# AB_RATE=N (pass, fresh): an open loop of N requests a second over 64
# connections (bench_openloop) instead of wrk's closed loop, so that both proxies
# carry the same load: CPU per request compared at equal rates, and for fresh keys
# at equal batch sizes, where a closed loop lets the faster one form larger batches.
# req/s then reads the rate served.
# AB_CONNS=N: wrk's connections (64), as bench/run.sh's fresh32 row runs 32.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$(realpath "$1") NEW=$(realpath "$2") SCENARIO=$3 ROUNDS=${4:-5} SECS=${5:-5}
WORK_NAME=ab
. bench/common.sh

if [ "${AB_STORE:-pg}" = citus ]; then
  bash scripts/citus.sh build
  CLEANUP+=("bash scripts/citus.sh stop $WORK/citus")
  DSN=$(CITUS_DURABLE=1 taskset -c "$LOAD_CPU" bash scripts/citus.sh start "$WORK/citus")
else
  DSN=$(start_pg "$WORK/pg")
fi
start_upstream
if [ "$SCENARIO" = grpcfresh ]; then
  start_grpc_upstream
  export PROXY_UPSTREAM="{url: \"http://127.0.0.1:$GRPC_UP_PORT\", protocol: h2c}"
  export PROXY_ROUTE="{name: grpc, path_prefix: /bench.Orders/, key_required: true}"
fi
PROXY_BIN=$OLD start_proxy old "$DSN" 8
OLD_PORT=$PROXY_PORT OLD_PID=$PROXY_PID
PROXY_BIN=$NEW start_proxy new "$DSN" 8
NEW_PORT=$PROXY_PORT NEW_PID=$PROXY_PID
# 100,000 records before either proxy runs a statement on the table: builds before
# 6b94059 kept the generic plans they made on an empty table, sequential scans
# included, so whichever proxy ran first measured slow (docs/PERFORMANCE.md).
psql "$DSN" -qAt -v ON_ERROR_STOP=1 -c "INSERT INTO idempotency_records
  (scope, key, fingerprint, state, token, expires_at)
  SELECT 'prefill', 'k' || i, 'f', 'completed', -i, now() + interval '1 day'
  FROM generate_series(1, 100000) AS i" -c "ANALYZE idempotency_records"

case $SCENARIO in
  pass) path=/pass lua=post.lua ;;
  pass64k | pass1m) path=/pass/${SCENARIO#pass} lua=post.lua ;;
  fresh | replay) path=/v1/orders lua=keys.lua ;;
  h2pass) path=/pass ;;
  h2replay) path=/v1/orders ;;
  grpcfresh) path=/bench.Orders/Create ;;
  *) echo "unknown scenario $SCENARIO" >&2; exit 2 ;;
esac
case ${AB_RATE:+$SCENARIO} in
  '' | pass* | fresh | h2*) ;;
  *) echo "AB_RATE: pass, pass64k, pass1m or fresh (an open loop sends fresh keys only)" >&2; exit 2 ;;
esac
HZ=$(getconf CLK_TCK)
printf '%s' '{"amount":1000,"currency":"eur"}' >"$WORK/post.json"
# The database's CPU ticks so far (0 on Citus: its servers are not measured).
db_ticks() { if [ -d "$WORK/pg" ]; then server_ticks "$WORK/pg"; else echo 0; fi; }
# The user-space share of ticks() (utime alone).
user_ticks() { awk '{print $14}' "/proc/$1/stat"; }
# measure PORT PID TAG: prints "req/s cpu_us db_us user_us"
measure() {
  local env=() c0 c1 g0 g1 u0 u1 out n
  case $SCENARIO in
    fresh) env=(KEY_PREFIX="$3-$RANDOM$RANDOM") ;;
    replay) env=(KEY_PREFIX="$3-replay" KEY_SPACE=64) ;;
    h2replay) env=(-H "idempotency-key: $3-h2replay") ;;  # h2load's options here
  esac
  c0=$(ticks "$2") g0=$(db_ticks) u0=$(user_ticks "$2")
  if [ -n "${AB_RATE:-}" ] && [[ $SCENARIO != h2* ]]; then
    local prefix=""
    [ "$SCENARIO" = fresh ] && prefix="$3-$RANDOM$RANDOM"
    out=$(taskset -c "$LOAD_CPU" "$BENCH_BUILD/bench_openloop" "$1" "$path" "$AB_RATE" "$SECS" 64 \
          ${prefix:+"$prefix"} || true)
    c1=$(ticks "$2") g1=$(db_ticks) u1=$(user_ticks "$2")
    n=$(echo "$out" | sed -n 's/.*"ok": \([0-9]*\).*/\1/p')
  elif [ "$SCENARIO" = grpcfresh ]; then
    out=$(PROXY_PORT=$1 grpc_fresh_load "$SECS" "$3-$RANDOM$RANDOM")
    c1=$(ticks "$2") g1=$(db_ticks) u1=$(user_ticks "$2")
    n=$(echo "$out" | python3 -c 'import json, sys; print(json.load(sys.stdin)["ok"])')
  elif [[ $SCENARIO == h2* ]]; then
    out=$(taskset -c "$LOAD_CPU" h2load -c 8 -m 32 -D "$SECS" -d "$WORK/post.json" \
          -H 'content-type: application/json' "${env[@]}" "http://127.0.0.1:$1$path")
    c1=$(ticks "$2") g1=$(db_ticks) u1=$(user_ticks "$2")
    n=$(echo "$out" | awk '/^requests:/ {print $8}')
  else
    out=$(env "${env[@]}" taskset -c "$LOAD_CPU" wrk -t1 -c"${AB_CONNS:-64}" -d"${SECS}s" --timeout 10s \
          -s "bench/lua/$lua" "http://127.0.0.1:$1$path")
    c1=$(ticks "$2") g1=$(db_ticks) u1=$(user_ticks "$2")
    n=$(echo "$out" | awk '/requests in/ {print $1}')
  fi
  awk -v n="$n" -v s="$SECS" -v t=$((c1 - c0)) -v g=$((g1 - g0)) -v u=$((u1 - u0)) -v hz="$HZ" \
    'BEGIN {printf "%.0f %.1f %.1f %.2f\n", n / s, t / hz * 1e6 / n, g / hz * 1e6 / n, u / hz * 1e6 / n}'
}
measure "$OLD_PORT" "$OLD_PID" old >/dev/null  # warm both
measure "$NEW_PORT" "$NEW_PID" new >/dev/null
: >"$WORK/ab.txt"
for r in $(seq "$ROUNDS"); do
  # Alternate which goes first.
  if [ $((r % 2)) = 1 ]; then
    a=$(measure "$OLD_PORT" "$OLD_PID" old); b=$(measure "$NEW_PORT" "$NEW_PID" new)
  else
    b=$(measure "$NEW_PORT" "$NEW_PID" new); a=$(measure "$OLD_PORT" "$OLD_PID" old)
  fi
  echo "$a $b" | tee -a "$WORK/ab.txt" |
    awk '{printf "round: old %s req/s %s us (user %s, database %s us), new %s req/s %s us (user %s, database %s us)\n", $1, $2, $4, $3, $5, $6, $8, $7}'
done
med() { awk "{print \$$1}" "$WORK/ab.txt" | sort -g | awk '{v[NR] = $1} END {m = (NR + 1) / 2; printf "%.2f", (v[int(m)] + v[int(m + 0.5)]) / 2}'; }
echo "median: old $(med 1) req/s $(med 2) us/req (user $(med 4), database $(med 3)); new $(med 5) req/s $(med 6) us/req (user $(med 8), database $(med 7))"
awk -v a="$(med 1)" -v b="$(med 5)" -v c="$(med 2)" -v d="$(med 6)" -v e="$(med 3)" -v f="$(med 7)" \
  -v g="$(med 4)" -v h="$(med 8)" \
  'BEGIN {printf "new/old: req/s %.3f, CPU per request %.3f (user %.3f)", b / a, d / c, h / g
          if (e > 0) printf ", database CPU per request %.3f", f / e; print ""}'

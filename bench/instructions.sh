#!/usr/bin/env bash
# The proxy's own instructions per request, counted exactly: each binary runs under
# Valgrind's callgrind in turn (bench/run.sh's route, upstream and private PostgreSQL),
# the count is zeroed after a warm-up and read after SECONDS of wrk's load at 8
# connections. A user-space cost change of a few per cent, which CPU time on a shared
# machine cannot resolve (bench/ab.sh's rounds of one binary against itself spread by
# ±6 %), shows here as a stable count. Kernel time is not counted.
#   bench/instructions.sh OLD_BINARY NEW_BINARY pass|replay|fresh|h2pass|h2replay|grpcfresh [SECONDS] [TOP]
# h2pass, h2replay: h2load -c 8 -m 32 over h2c, as bench/ab.sh loads them.
# grpcfresh: bench/grpc_fresh.js's unary calls, a new key each, through a proxy whose
# upstream is bench/run.sh's gRPC nginx (h2c); "requests" are the calls that ended
# grpc-status 0.
# Prints each binary's instructions per request and their ratio; TOP > 0 also prints
# the TOP functions of each by their own instructions per request (callgrind_annotate);
# KEEP=DIR keeps each dump (DIR/old.callgrind, DIR/new.callgrind) and its request count.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?old binary} NEW=${2:?new binary} SCENARIO=${3:?pass, replay, fresh, h2pass, h2replay or grpcfresh}
SECS=${4:-5} TOP=${5:-0}
WORK_NAME=instructions
. bench/common.sh

DSN=$(start_pg "$WORK/pg")
start_upstream
if [ "$SCENARIO" = grpcfresh ]; then
  start_grpc_upstream
  export PROXY_UPSTREAM="{url: \"http://127.0.0.1:$GRPC_UP_PORT\", protocol: h2c}"
  export PROXY_ROUTE="{name: grpc, path_prefix: /bench.Orders/, key_required: true}"
fi
# The proxy under callgrind, by the path start_proxy runs.
for which in old new; do
  bin=$OLD
  [ "$which" = new ] && bin=$NEW
  cat >"$WORK/$which.sh" <<EOS
#!/bin/sh
exec valgrind --tool=callgrind --callgrind-out-file=$WORK/$which.out.%p \
  --dump-instr=no --compress-strings=no -q "$bin" "\$@"
EOS
  chmod +x "$WORK/$which.sh"
done

printf '%s' '{"amount":1000,"currency":"eur"}' >"$WORK/post.json"
# load SECONDS: the scenario's load at 8 connections; prints the requests it made.
load() {
  if [[ $SCENARIO == h2* ]]; then
    local path=/pass key=()
    [ "$SCENARIO" = h2replay ] && path=/v1/orders key=(-H "idempotency-key: h2replay-$$")
    taskset -c "$LOAD_CPU" h2load -c 8 -m 32 -D "$1" -d "$WORK/post.json" \
      -H 'content-type: application/json' "${key[@]}" "http://127.0.0.1:$PROXY_PORT$path" |
      awk '/^requests:/ {print $8}'
  elif [ "$SCENARIO" = grpcfresh ]; then
    grpc_fresh_load "$1" "grpcfresh-$$-$(date +%s%N)" | python3 -c 'import json, sys; print(json.load(sys.stdin)["ok"])'
  else
    CONNS=8 scenario_wrk "$SCENARIO" "$1" | awk '/requests in/ {print $1}'
  fi
}

# count NAME: prints "requests instructions" of SECONDS of load after a warm-up.
count() {
  PROXY_BIN=$WORK/$1.sh start_proxy "$1" "$DSN" 8
  local pid=$PROXY_PID n
  load 2 >/dev/null  # warm: pool, statements, the replay cache
  callgrind_control -z "$pid" >/dev/null
  n=$(load "$SECS")
  callgrind_control -d "$pid" >/dev/null
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  # The one dump asked for (callgrind_control -d): NAME.out.PID.1.
  local dump="" f
  for f in "$WORK/$1".out.*.*; do dump=$f; done
  echo "$n $(awk '/^summary:|^totals:/ {print $2; exit}' "$dump")"
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$dump" "$KEEP/$1.callgrind" && echo "$n" >"$KEEP/$1.requests"; fi
  if [ "$TOP" -gt 0 ]; then
    callgrind_annotate --inclusive=no --threshold=100 "$dump" 2>/dev/null |
      grep -E '^ *[0-9,]+ ' | grep -vE 'PROGRAM TOTALS|\((100\.0|99\.[0-9]+)%\)' | head -"$TOP" |
      awk -v n="$n" '{gsub(",", "", $1); c = $1; $1 = ""; printf "%10.0f %s\n", c / n, substr($0, 1, 140)}' >&2
  fi
}
read -r n_old i_old <<<"$(count old)"
read -r n_new i_new <<<"$(count new)"
awk -v a="$n_old" -v b="$i_old" -v c="$n_new" -v d="$i_new" 'BEGIN {
  printf "old: %d requests, %.0f instructions a request\n", a, b / a
  printf "new: %d requests, %.0f instructions a request\n", c, d / c
  printf "new/old: %.3f\n", (d / c) / (b / a) }'

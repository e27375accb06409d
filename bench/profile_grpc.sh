#!/usr/bin/env bash
# Profiles idemproxy's gRPC fresh keys (bench/run.sh's idem.grpcfresh): Node's http2
# client (bench/grpc_fresh.js, a new idempotency-key per call, 8 connections of 8
# streams) through the proxy to an nginx answering every call with a framed message
# and a grpc-status trailer, over h2c, with a private PostgreSQL; SUT on CPU 1.
#   bench/profile_grpc.sh [SECONDS]
# Prints the proxy's CPU per call and `perf report` (self time by shared object and
# by symbol). KEEP_PERF=FILE keeps the recording.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-8}
WORK_NAME=profile-grpc
. bench/common.sh

DSN=$(start_pg "$WORK/pg")
start_grpc_upstream
PROXY_UPSTREAM="{url: \"http://127.0.0.1:$GRPC_UP_PORT\", protocol: h2c}" \
PROXY_ROUTE="{name: grpc, path_prefix: /bench.Orders/, key_required: true}" \
  start_proxy idemgrpc "$DSN" 8
load() {  # prints the calls that ended grpc-status 0
  grpc_fresh_load "$1" "prof-$2-$$" | python3 -c 'import json, sys; print(json.load(sys.stdin)["ok"])'
}
load 2 warm >/dev/null
HZ=$(getconf CLK_TCK)
c0=$(ticks "$PROXY_PID")
perf record -q ${PERF_CALL_GRAPH:--g} -F 999 -p "$PROXY_PID" -o "$WORK/perf.data" -- sleep "$SECS" 2>/dev/null &
PERF=$!
n=$(load "$SECS" measured)
wait "$PERF" || true
c1=$(ticks "$PROXY_PID")
echo "== grpcfresh: $n calls in ${SECS}s, $(awk -v t=$((c1 - c0)) -v hz="$HZ" -v n="$n" \
  'BEGIN {printf "%.1f", t / hz * 1e6 / n}') us of proxy CPU per call (perf running)"
if [ -n "${KEEP_PERF:-}" ]; then cp "$WORK/perf.data" "$KEEP_PERF"; fi
echo "== perf: by shared object"
perf report -i "$WORK/perf.data" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]' | sed -E 's/ +$//' | head -10 || true
echo "== perf: top symbols, self time"
perf report -i "$WORK/perf.data" --no-children --sort dso,symbol --stdio -g none 2>/dev/null \
  | grep -E '^ +[0-9]' | sed -E 's/ +- +- *$//; s/ +$//' | cut -c1-150 | head -45 || true

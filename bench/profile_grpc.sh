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
read -r GRPC_UP_PORT <<<"$(free_port 1)"
mkdir -p "$WORK/grpc/root/bench.Orders"
python3 - "$WORK/grpc" <<'EOP'
import struct, sys
framed = lambda m: b"\x00" + struct.pack(">I", len(m)) + m  # gRPC's length prefix
open("%s/root/bench.Orders/Create" % sys.argv[1], "wb").write(framed(b"created:ord_1"))
open(sys.argv[1] + "/call.bin", "wb").write(framed(b'{"amount":1000,"currency":"eur"}'))
EOP
{ nginx_head "$WORK/grpc"; cat <<EOC; } >"$WORK/grpc/nginx.conf"
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$GRPC_UP_PORT http2;
    location / {
      mirror /read-body;  # the message is read whole first, as a gRPC server does
      mirror_request_body on;
      root $WORK/grpc/root;
      default_type application/grpc;
      add_trailer grpc-status 0 always;
      error_page 405 =200 \$uri;
    }
    location = /read-body { internal; return 204; }
  }
}
EOC
taskset -c "$LOAD_CPU" nginx -c "$WORK/grpc/nginx.conf" -p "$WORK/grpc" 2>/dev/null & PIDS+=($!)
wait_port "$GRPC_UP_PORT"
PROXY_UPSTREAM="{url: \"http://127.0.0.1:$GRPC_UP_PORT\", protocol: h2c}" \
PROXY_ROUTE="{name: grpc, path_prefix: /bench.Orders/, key_required: true}" \
  start_proxy idemgrpc "$DSN" 8
load() {  # prints the calls that ended grpc-status 0
  taskset -c "$LOAD_CPU" node bench/grpc_fresh.js "http://127.0.0.1:$PROXY_PORT/bench.Orders/Create" \
    "$1" 8 8 "prof-$2-$$" "$WORK/grpc/call.bin" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["ok"])'
}
load 2 warm >/dev/null
HZ=$(getconf CLK_TCK)
c0=$(ticks "$PROXY_PID")
perf record -q -g -F 999 -p "$PROXY_PID" -o "$WORK/perf.data" -- sleep "$SECS" 2>/dev/null &
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

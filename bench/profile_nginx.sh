#!/usr/bin/env bash
# Profiles nginx answering by itself (return 201, the body the bench upstream sends:
# bench/run.sh's nginx.direct, the reference for a replay) the way bench/profile.sh
# profiles idemproxy: its worker pinned to the SUT's CPU, the load on the load's CPU,
# perf at 999 Hz over 8 s. Prints the CPU per request, the split by shared object
# (kernel against user time) and the top symbols.
#   bench/profile_nginx.sh        wrk at 64 connections (HTTP/1.1): the replay's reference
#   bench/profile_nginx.sh h2     h2load -c 8 -m 32 over h2c: the HTTP/2 replay's
#                                 reference (bench/profile.sh h2replay loads it the same)
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-http1}
WORK_NAME=nginxprof
. bench/common.sh
P=$(free_port)
LISTEN=$P
if [ "$MODE" = h2 ]; then LISTEN="$P http2"; fi
mkdir -p "$WORK/nginx"
{ nginx_head "$WORK/nginx"; cat <<EOC; } >"$WORK/nginx/nginx.conf"
  access_log off;
  # As bench/run.sh's: 1,000 requests a connection (the default) would end h2load's
  # connections, which it does not open again, within the first second.
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$LISTEN;
    location = /direct {
      default_type application/json;
      return 201 '{"id":"ord_1","status":"created","amount":1000}';
    }
  }
}
EOC
taskset -c "$SUT_CPU" nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" 2>/dev/null & PIDS+=($!)
wait_port "$P"
sleep 0.5
W=$(pgrep -P "$(cat $WORK/nginx/nginx.pid)" | head -1)
HZ=$(getconf CLK_TCK)
printf '%s' '{"amount":1000,"currency":"eur"}' >"$WORK/post.json"
load() {  # SECONDS: prints the requests answered
  if [ "$MODE" = h2 ]; then
    taskset -c "$LOAD_CPU" h2load -c 8 -m 32 -D "$1" -d "$WORK/post.json" \
      -H 'content-type: application/json' "http://127.0.0.1:$P/direct" | awk '/^requests:/ {print $8}'
  else
    KEY_PREFIX=direct-$$ KEY_SPACE=64 taskset -c "$LOAD_CPU" wrk -t1 -c64 -d"$1"s \
      -s bench/lua/keys.lua "http://127.0.0.1:$P/direct" | awk '/requests in/ {print $1}'
  fi
}
load 2 >/dev/null
c0=$(ticks "$W")
perf record -q -g -F 999 -p "$W" -o "$WORK/perf.data" -- sleep 8 2>/dev/null &
PERF=$!
n=$(load 8)
wait $PERF || true
c1=$(ticks "$W")
echo "== nginx direct ($MODE): $n requests in 8s, $(awk -v t=$((c1 - c0)) -v hz="$HZ" -v n="$n" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}') us of CPU per request (perf running)"
perf report -i "$WORK/perf.data" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -6
perf report -i "$WORK/perf.data" --no-children --sort dso,symbol --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -${TOP:-14}

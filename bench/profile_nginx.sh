#!/usr/bin/env bash
# Profiles nginx answering by itself (return 201, the body the bench upstream sends:
# bench/run.sh's nginx.direct, the reference for a replay) the way bench/profile.sh
# profiles idemproxy: its worker pinned to the SUT's CPU, wrk at 64 connections on the
# load's CPU, perf at 999 Hz over 8 s. Prints the CPU per request, the split by shared
# object (kernel against user time) and the top symbols.
#   bench/profile_nginx.sh
set -euo pipefail
cd /work/main
WORK_NAME=nginxprof
. bench/common.sh
P=$(free_port)
mkdir -p "$WORK/nginx"
{ nginx_head "$WORK/nginx"; cat <<EOC; } >"$WORK/nginx/nginx.conf"
  access_log off;
  server {
    listen 127.0.0.1:$P;
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
taskset -c "$LOAD_CPU" wrk -t1 -c64 -d2s -s bench/lua/keys.lua "http://127.0.0.1:$P/direct" >/dev/null
c0=$(ticks "$W")
perf record -q -g -F 999 -p "$W" -o "$WORK/perf.data" -- sleep 8 2>/dev/null &
PERF=$!
n=$(KEY_PREFIX=direct-$$ KEY_SPACE=64 taskset -c "$LOAD_CPU" wrk -t1 -c64 -d8s -s bench/lua/keys.lua "http://127.0.0.1:$P/direct" | awk '/requests in/ {print $1}')
wait $PERF || true
c1=$(ticks "$W")
echo "== nginx direct: $n requests in 8s, $(awk -v t=$((c1 - c0)) -v hz="$HZ" -v n="$n" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}') us of CPU per request (perf running)"
perf report -i "$WORK/perf.data" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -6
perf report -i "$WORK/perf.data" --no-children --sort dso,symbol --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -14

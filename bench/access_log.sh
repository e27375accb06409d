#!/usr/bin/env bash
# Pass-through CPU with the access log on, idemproxy against nginx (round four: the
# access log at info must not cost more than nginx's does). run.sh's setup (SUT on
# CPU 1; the upstream and wrk on CPU 0), 64 connections, alternating rounds:
#   bench/access_log.sh [ROUNDS] [SECONDS]
# nginx: one worker, upstream keep-alive, its default `combined` access log written
# to a file; idemproxy: log.level info, its access lines (text) to a file, buffered
# (the default log.access_buffer) and each written as it ends (access_buffer: 0). Each
# is also measured with its log off, so the log's own cost per request shows.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3} SECS=${2:-8}
WORK_NAME=access_log
. bench/common.sh
DSN=$(start_pg "$WORK/pg")
start_upstream
HZ=$(getconf CLK_TCK)
NGINX_PORT=$(free_port)
nginx_conf() {  # nginx_conf NAME ACCESS_LOG_DIRECTIVE
  mkdir -p "$WORK/$1"
  { nginx_head "$WORK/$1"; cat <<EOC; } >"$WORK/$1/nginx.conf"
  $2
  keepalive_requests 1000000;
  upstream bench { server 127.0.0.1:$UP_PORT; keepalive 256; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / { proxy_pass http://bench; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
EOC
}
nginx_conf nginx_on "access_log $WORK/nginx_on/access.log combined;"
nginx_conf nginx_off "access_log off;"
measure() {  # measure PID PORT: CPU µs per request of PID under wrk on /pass
  local c0 c1 n
  c0=$(ticks "$1")
  n=$(taskset -c "$LOAD_CPU" wrk -t1 -c64 -d"${SECS}s" -s bench/lua/post.lua \
    "http://127.0.0.1:$2/pass" | awk '/requests in/ {print $1}')
  c1=$(ticks "$1")
  awk -v t=$((c1 - c0)) -v hz="$HZ" -v n="$n" 'BEGIN {printf "%.2f", t / hz * 1e6 / n}'
}
run_nginx() {  # run_nginx NAME: prints its CPU µs per request
  taskset -c "$SUT_CPU" nginx -c "$WORK/$1/nginx.conf" -p "$WORK/$1" 2>/dev/null &
  local pid=$!
  wait_port "$NGINX_PORT"
  measure "$(pgrep -P "$pid" | head -1)" "$NGINX_PORT"  # its one worker does the work
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
run_idem() {  # run_idem LEVEL [LOG_EXTRA]: prints its CPU µs per request
  PROXY_LOG_LEVEL=$1 PROXY_LOG_EXTRA=${2:-} start_proxy "idem-$1${2:+-unbuffered}" "$DSN" 8
  measure "$PROXY_PID" "$PROXY_PORT"
  kill "$PROXY_PID"; wait "$PROXY_PID" 2>/dev/null || true
}
printf '%-6s %10s %10s %10s %10s %12s\n' round nginx_off nginx_on idem_warn idem_info \
  info_unbuf
for r in $(seq "$ROUNDS"); do
  printf '%-6s %10s %10s %10s %10s %12s\n' "$r" "$(run_nginx nginx_off)" "$(run_nginx nginx_on)" \
    "$(run_idem warn)" "$(run_idem info)" "$(run_idem info ', access_buffer: 0')"
done
echo "access lines written: nginx $(wc -l <"$WORK/nginx_on/access.log"), idemproxy $(wc -l <"$WORK/idem-info.log")"

#!/usr/bin/env bash
# Where a closed loop's idle time comes from, unpinned: nginx and idemproxy
# pass-through at CONNS (32) connections, alternately, with wrk, the upstream and the
# proxy sharing every CPU as bench/run.sh's unpinned layout does. For each round and
# each process (wrk, the upstream, the proxy): CPU µs, voluntary and involuntary
# context switches per request; and the machine's busy %.
# Three proxies take turns: nginx as bench/run.sh runs it; "nginx+5", the same nginx
# forwarding the five fields idemproxy adds to each request (X-Forwarded-For, -Proto
# and -Host, X-Request-Id, traceparent; docs/BEHAVIOUR.md), so that the upstream
# parses the same head behind both; and idemproxy.
#   bench/sched.sh [ROUNDS] [SECONDS]
# PROXY_BIN picks the idemproxy binary; SCHED_THREADS its server.threads (1).
# BENCH_LAYOUT=pinned runs bench/run.sh's pinned layout instead (each proxy alone on
# CPU 1; wrk and the upstream on CPU 0; CONNS 64 by default), where both CPUs' busy
# shares tell which side limits the rate.
set -euo pipefail
cd "$(dirname "$0")/.."
export BENCH_LAYOUT=${BENCH_LAYOUT:-unpinned}
ROUNDS=${1:-3} SECS=${2:-5}
if [ "$BENCH_LAYOUT" = pinned ]; then CONNS=${CONNS:-64}; else CONNS=${CONNS:-32}; fi
WORK_NAME=sched
. bench/common.sh
DSN=$(start_pg "$WORK/pg")
start_upstream
UP_PID=${PIDS[-1]}
read -r NGINX_PORT NGINX5_PORT <<<"$(free_port 2)"
mkdir -p "$WORK/nginx/logs"
cat >"$WORK/nginx/nginx.conf" <<NGX
worker_processes 1;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  upstream bench { server 127.0.0.1:$UP_PORT; keepalive 256; }
  # A traceparent as idemproxy starts one: 00-<32 hex>-<16 hex>-01.
  map \$request_id \$traceparent_new { "~^(?<first16>.{16})" "00-\$request_id-\$first16-01"; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / { proxy_pass http://bench; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
  server {
    listen 127.0.0.1:$NGINX5_PORT;
    location / {
      proxy_pass http://bench;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$http_host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
      proxy_set_header X-Forwarded-Host \$http_host;
      proxy_set_header X-Request-Id \$request_id;
      proxy_set_header traceparent \$traceparent_new;
    }
  }
}
NGX
taskset -c "$SUT_CPU" nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" 2>/dev/null & PIDS+=($!)
wait_port "$NGINX_PORT"
sleep 0.2
NGINX_PID=$(pgrep -P "${PIDS[-1]}" | head -1)
start_proxy idemproxy "$DSN" 8 "${SCHED_THREADS:-1}"
printf '%s' '{"amount":1000,"currency":"eur"}' >"$WORK/post.json"
HZ=$(getconf CLK_TCK)

# round NAME PORT PID: one wrk run; prints one row.
round() {
  local name=$1 port=$2 pid=$3 b0 b1 l0 l1 t0 t1 u0 u1 s0 s1 us0 us1 w0 w1 ws ws1 rps n
  b0=$(cpu_ticks "$SUT_CPU") l0=$(cpu_ticks "$LOAD_CPU") t0=$(ticks "$pid") u0=$(ticks "$UP_PID")
  s0=$(switches "$pid") us0=$(switches "$UP_PID")
  taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${SECS}s" --timeout 10s -s bench/lua/post.lua \
    "http://127.0.0.1:$port/pass" >"$WORK/wrk.out" 2>&1 &
  local wpid=$!
  sleep 0.05
  w0=$(ticks "$wpid" 2>/dev/null || echo 0) ws=$(switches "$wpid" 2>/dev/null || echo "0 0")
  sleep "$(awk -v s="$SECS" 'BEGIN {print s - 0.55}')"
  # wrk's own counters just before it exits (read over SECS - 0.5 s of the window).
  w1=$(ticks "$wpid" 2>/dev/null || echo "$w0") ws1=$(switches "$wpid" 2>/dev/null || echo "$ws")
  wait "$wpid" || true
  b1=$(cpu_ticks "$SUT_CPU") l1=$(cpu_ticks "$LOAD_CPU") t1=$(ticks "$pid") u1=$(ticks "$UP_PID")
  s1=$(switches "$pid") us1=$(switches "$UP_PID")
  rps=$(awk '/^Requests\/sec/ {printf "%.0f", $2}' "$WORK/wrk.out")
  n=$((rps * SECS))
  awk -v name="$name" -v rps="$rps" -v n="$n" -v hz="$HZ" -v busy="$(busy_share "$l0" "$l1") / $(busy_share "$b0" "$b1")" \
    -v p="$((t1 - t0))" -v u="$((u1 - u0))" -v w="$((w1 - w0))" \
    -v wf="$(awk -v s="$SECS" 'BEGIN {print (s - 0.5) / s}')" -v s0="$s0" -v s1="$s1" -v us0="$us0" -v us1="$us1" -v ws0="$ws" -v ws1="$ws1" 'BEGIN {
      split(s0, a, " "); split(s1, b, " "); split(us0, c, " "); split(us1, d, " ")
      split(ws0, e, " "); split(ws1, f, " ")
      printf "| %s | %d | %s | %.1f | %.1f | %.1f | %.3f / %.3f | %.3f / %.3f | %.3f / %.3f |\n",
        name, rps, busy, 1e6 * p / hz / n, 1e6 * u / hz / n, 1e6 * w / hz / n / wf,
        (b[1] - a[1]) / n, (b[2] - a[2]) / n, (d[1] - c[1]) / n, (d[2] - c[2]) / n,
        (f[1] - e[1]) / n / wf, (f[2] - e[2]) / n / wf }'
}

echo "| proxy | req/s | busy % load / SUT | proxy µs/req | upstream µs/req | wrk µs/req | proxy vol / invol switches per req | upstream | wrk |"
echo "|---|---|---|---|---|---|---|---|---|"
taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d1s -s bench/lua/post.lua "http://127.0.0.1:$PROXY_PORT/pass" >/dev/null
for port in "$NGINX_PORT" "$NGINX5_PORT"; do
  taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d1s -s bench/lua/post.lua "http://127.0.0.1:$port/pass" >/dev/null
done
for _ in $(seq "$ROUNDS"); do
  round nginx "$NGINX_PORT" "$NGINX_PID"
  round nginx+5 "$NGINX5_PORT" "$NGINX_PID"
  round idemproxy "$PROXY_PORT" "$PROXY_PID"
done

#!/usr/bin/env bash
# 1 MiB pass-through of one idemproxy binary, with the counters that explain its CPU
# per request (bench/results/HISTORY.md, "Round five: the old 1 MiB second mode
# explained"):
#   bench/stream.sh BINARY [ROUNDS] [CONNECTIONS]
# Each round starts the binary afresh, warms it as bench/run.sh does, then measures
# twice for 10 s with wrk at CONNECTIONS (256, run.sh's figure). Each measurement
# prints req/s, the proxy's CPU µs, minor faults and context switches per request,
# wrk's p50 and p99, wrk's own CPU and sleeps (voluntary context switches) per
# request, and the proxy's socket system calls per request (perf stat tracepoints;
# "EAGAIN" counts the reads that found nothing). PERF_RECORD=PREFIX records a call
# graph of the proxy during each measurement instead, into PREFIX.ROUND.N.data.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "$1") ROUNDS=${2:-3} CONNS=${3:-256}
WORK_NAME=stream
. bench/common.sh
for tool in perf:linux-perf /usr/bin/time:time; do
  command -v "${tool%%:*}" >/dev/null || { echo "stream.sh needs ${tool%%:*} (apt-get install ${tool#*:})" >&2; exit 2; }
done
DSN=$(start_pg "$WORK/pg")
start_upstream
HZ=$(getconf CLK_TCK)
# counters PID: "cpu_ticks minor_faults voluntary_switches involuntary_switches".
counters() { echo "$(ticks "$1") $(awk '{print $10}' "/proc/$1/stat") $(switches "$1")"; }
SYSCALLS=syscalls:sys_enter_recvmsg,syscalls:sys_enter_sendmsg,syscalls:sys_enter_epoll_wait
for r in $(seq "$ROUNDS"); do
  PROXY_BIN=$BIN start_proxy "p$r" "$DSN" 8
  taskset -c "$LOAD_CPU" wrk -t1 -c16 -d1s -s bench/lua/post.lua "http://127.0.0.1:$PROXY_PORT/warm" >/dev/null
  for m in 1 2; do
    if [ -n "${PERF_RECORD:-}" ]; then
      perf record -q -g -o "$PERF_RECORD.$r.$m.data" -p "$PROXY_PID" -- sleep 10 2>/dev/null &
    else
      perf stat -x, -o "$WORK/perf.txt" -p "$PROXY_PID" -e "$SYSCALLS" \
        -e syscalls:sys_exit_recvmsg --filter 'ret == -11' -- sleep 10 &
    fi
    perf_pid=$!
    before=$(counters "$PROXY_PID")
    out=$(taskset -c "$LOAD_CPU" /usr/bin/time -f "%w %U %S" -o "$WORK/time.txt" \
      wrk -t1 -c"$CONNS" -d10s --timeout 10s --latency -s bench/lua/post.lua \
      "http://127.0.0.1:$PROXY_PORT/pass/1m")
    after=$(counters "$PROXY_PID")
    wait "$perf_pid" || true
    n=$(echo "$out" | awk '/requests in/ {print $1}')
    echo "$before $after" | awk -v n="$n" -v hz="$HZ" -v r="$r" -v m="$m" -v c="$CONNS" '{
      printf "round %d.%d, %d conns: %.0f req/s, proxy %.1f us/request, minor faults %.1f, switches %.1f + %.1f;",
        r, m, c, n / 10, ($5 - $1) / hz * 1e6 / n, ($6 - $2) / n, ($7 - $3) / n, ($8 - $4) / n }'
    echo "$out" | awk '$1 == "50%" || $1 == "99%" {printf " p%s %s", substr($1, 1, 2), $2}'
    awk -v n="$n" '{printf "; wrk %.0f us/request, sleeps %.1f", ($2 + $3) * 1e6 / n, $1 / n}' "$WORK/time.txt"
    if [ -z "${PERF_RECORD:-}" ]; then
      awk -F, -v n="$n" '$3 ~ /syscalls/ {
          name = $3; sub("syscalls:sys_(enter|exit)_", "", name)
          if ($3 ~ /exit/) name = name " EAGAIN"
          printf "; %s %.1f", name, $1 / n }' "$WORK/perf.txt"
    fi
    echo
  done
  kill "$PROXY_PID"
  wait "$PROXY_PID" 2>/dev/null || true
done

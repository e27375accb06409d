#!/usr/bin/env bash
# Issue 26, item 3: the store's group commit on database threads (GroupCommit's
# design) against libpq's pipeline mode on one connection, with the store's own
# multi-row statements, on run.sh's PostgreSQL (durable settings, on the load CPU);
# the driver (bench/store_pipeline.cpp) on the SUT's CPU, as the proxy would be.
#   bench/store_pipeline.sh [ROUNDS] [SECONDS] [CLIENTS] [THINK_US] [CONFIGS...]
# CONFIGS are "MODE N" pairs (default: "threads 2" "pipeline 2" "pipeline 4"), run in
# turn each round; prints each round, then the medians: keys/s, and CPU µs per key of
# PostgreSQL (all its processes) and of the driver.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3} SECS=${2:-5} CLIENTS=${3:-64} THINK_US=${4:-200}
shift $(($# < 4 ? $# : 4))
CONFIGS=("$@")
[ ${#CONFIGS[@]} -gt 0 ] || CONFIGS=("threads 2" "pipeline 2" "pipeline 4")
WORK_NAME=pipeline
. bench/common.sh
cmake --build "$BENCH_BUILD" -j2 --target bench_store_pipeline >/dev/null

DSN=$(start_pg "$WORK/pg")
start_upstream
start_proxy migrate "$DSN" 1  # its start applies the schema's migrations
kill "$PROXY_PID"
HZ=$(getconf CLK_TCK)
# measure MODE N: prints "keys/s pg_us driver_us batch_size"
measure() {
  local p0 p1 out pid d0
  p0=$(server_ticks "$WORK/pg")
  taskset -c "$SUT_CPU" "$BENCH_BUILD/bench_store_pipeline" "$DSN" "$1" "$2" "$CLIENTS" "$SECS" 64 \
    "$THINK_US" >"$WORK/out" & pid=$!
  d0=0
  # The driver's CPU, read from its /proc entry just before it exits.
  while kill -0 "$pid" 2>/dev/null; do d0=$(ticks "$pid" 2>/dev/null || echo "$d0"); sleep 0.2; done
  wait "$pid"
  p1=$(server_ticks "$WORK/pg")
  out=$(cat "$WORK/out")
  awk -v o="$out" -v pg=$((p1 - p0)) -v d="$d0" -v hz="$HZ" 'BEGIN {
    split(o, f, " "); k = f[2]; b = f[4]; s = f[6]
    printf "%.0f %.1f %.1f %.1f\n", k / s, pg / hz * 1e6 / k, d / hz * 1e6 / k, 2 * k / b }'
}
for c in "${CONFIGS[@]}"; do measure $c >/dev/null; done  # warm: WAL, plans, the table
: >"$WORK/rounds"
for r in $(seq "$ROUNDS"); do
  for c in "${CONFIGS[@]}"; do
    psql "$DSN" -qAt -c CHECKPOINT
    line=$(measure $c)
    echo "round $r: $c: $line (keys/s, PostgreSQL µs/key, driver µs/key, operations/batch)"
    echo "$c|$line" >>"$WORK/rounds"
  done
done
echo "medians over $ROUNDS rounds, $CLIENTS clients, think $THINK_US µs, ${SECS}s each:"
python3 - "$WORK/rounds" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, values = line.strip().split("|")
    rows.setdefault(name, []).append([float(v) for v in values.split()])
for name, runs in rows.items():
    med = [statistics.median(col) for col in zip(*runs)]
    print("  %-12s %8.0f keys/s  PostgreSQL %5.1f µs/key  driver %5.1f µs/key  %4.1f per batch"
          % (name, *med))
EOF

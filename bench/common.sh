# Sourced by bench/run.sh, scaling.sh, ab.sh, profile.sh, dbcpu.sh, hot_completion.sh, cpu_split.sh, stream.sh, store_pipeline.sh, allocs.sh and sched.sh: installs what the benchmarks need,
# builds build-bench/, pins CPUs, makes the work folder and cleans it up on exit.
# The caller sets WORK_NAME; it may add to CLEANUP (commands run at exit) and PIDS.
# BENCH_BUILD names another build directory, already configured with
# -DIDEMPROXY_BENCH=ON (scripts/test.sh's build/, for the smoke run): only the proxy
# and the bench tools are built there, and its configuration is left as it is.
bash scripts/install-deps.sh bench >/dev/null
BENCH_BUILD=${BENCH_BUILD:-build-bench}
if [ "$BENCH_BUILD" = build-bench ]; then
  # Profile-guided, as scripts/test.sh builds what ships (scripts/pgo.sh; PGO=0: not).
  PGO=${PGO:-1} BUILD_DIR=build-bench bash scripts/build.sh -DIDEMPROXY_BENCH=ON \
    -DIDEMPROXY_TESTS=OFF >/dev/null
else
  cmake --build "$BENCH_BUILD" -j2 --target idemproxy bench_upstream bench_openloop \
    bench_pgbench_script >/dev/null
fi

# BENCH_LAYOUT=pinned (the default here): the system under test on CPU 1; load,
# upstream and databases on CPU 0. unpinned: everything shares every CPU, as on a
# user's box, beside their database and their app.
if [ "${BENCH_LAYOUT:-pinned}" = unpinned ]; then
  SUT_CPU=0-$(($(nproc) - 1)) LOAD_CPU=0-$(($(nproc) - 1))
elif [ "$(nproc)" -ge 2 ]; then SUT_CPU=1 LOAD_CPU=0; else SUT_CPU=0 LOAD_CPU=0; fi
WORK=$(mktemp -d "/tmp/idemproxy-$WORK_NAME.XXXXXX")
chmod 755 "$WORK"
PIDS=()
CLEANUP=("bash scripts/pg.sh stop $WORK/pg")
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for c in "${CLEANUP[@]}"; do $c >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
# free_port, wait_port
. scripts/ports.sh
# nginx_head, grpc_upstream_files
. bench/nginx_conf.sh

# CPU ticks of one process, and of a PostgreSQL server in DIR: the postmaster, its live
# backends, and the backends that have exited (the postmaster's children's time).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# switches PID: the voluntary and the involuntary context switches of all its threads.
switches() {
  cat /proc/"$1"/task/*/status |
    awk '/^voluntary_ctxt_switches/ {v += $2} /^nonvoluntary_ctxt_switches/ {n += $2} END {print v, n}'
}
# to_ms LATENCY: one of wrk's latencies (850.00us, 1.20ms, 2.00s) in milliseconds.
to_ms() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /[0-9]s$/ && v !~ /ms$/) n *= 1000; printf "%.2f", n }'; }
# cpu_ticks CPU: that CPU's busy and total ticks since boot (/proc/stat: user, nice,
# system, irq, softirq and steal are busy; idle and iowait are not); for a range of
# CPUs (unpinned), all of them together.
cpu_ticks() {
  local c="cpu$1"
  case $1 in *-* | *,*) c=cpu ;; esac
  awk -v c="$c" '$1 == c {b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6}' /proc/stat
}
# busy_share "B0 T0" "B1 T1": the busy percentage between two cpu_ticks readings.
busy_share() {
  awk -v a="$1" -v b="$2" 'BEGIN {split(a, x, " "); split(b, y, " ");
    t = y[2] - x[2]; if (t <= 0) print "n/a"; else printf "%.0f", 100 * (y[1] - x[1]) / t}'
}
server_ticks() {
  local pm total=0 c
  pm=$(head -1 "$1/data/postmaster.pid")
  total=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
  for c in $(pgrep -P "$pm"); do total=$((total + $(ticks "$c" 2>/dev/null || echo 0))); done
  echo "$total"
}

# The minimal reference (issue 14): what any keyed write needs at the least, two
# single-row autocommit statements (an INSERT ... ON CONFLICT DO NOTHING and an
# UPDATE) on a two-column table, 8 connections, pgbench's client on SUT_CPU.
# minimal_reference DSN: makes its table and $WORK/minimal.sql.
minimal_reference() {
  psql "$1" -qAt -v ON_ERROR_STOP=1 \
    -c "CREATE TABLE IF NOT EXISTS bench_minimal (k text PRIMARY KEY, v text NOT NULL)"
  cat >"$WORK/minimal.sql" <<'EOS'
\set n random(1, 1000000000000)
INSERT INTO bench_minimal (k, v) VALUES (:client_id::text || '-' || :n::text, 'in_flight') ON CONFLICT DO NOTHING;
UPDATE bench_minimal SET v = 'completed' WHERE k = :client_id::text || '-' || :n::text;
EOS
}
# minimal_tps DSN SECONDS: runs the minimal reference; prints its keyed requests/s.
minimal_tps() {
  taskset -c "$SUT_CPU" pgbench -n -M prepared -c 8 -j 1 -T "$2" -f "$WORK/minimal.sql" "$1" 2>&1 \
    | awk '/^tps/ {printf "%.0f", $3}'
}

# start_pg DIR: a private PostgreSQL on LOAD_CPU; prints its DSN. min_wal_size keeps
# recycled WAL segments, so no measurement pays for new ones.
start_pg() { taskset -c "$LOAD_CPU" bash scripts/pg.sh start "$1" "" -c min_wal_size=1GB; }
# start_upstream: the bench upstream on LOAD_CPU; sets UP_PORT.
start_upstream() {
  UP_PORT=$(free_port)
  taskset -c "$LOAD_CPU" "$BENCH_BUILD/bench_upstream" "$UP_PORT" & PIDS+=($!)
  wait_port "$UP_PORT"
}

# scenario_wrk pass|pass1m|fresh|replay SECONDS: wrk at 64 connections (pass1m: 256; CONNS overrides)
# on the proxy at PROXY_PORT as bench/run.sh loads it in that scenario; prints wrk's output.
scenario_wrk() {
  local path lua env conns=64
  case $1 in
    pass) path=/pass lua=post.lua env=() ;;
    pass1m) path=/pass/1m lua=post.lua env=() conns=256 ;;
    # A prefix of its own per call: a warm-up before the measured window would
    # otherwise have used the window's keys, which it then replays.
    fresh) path=/v1/orders lua=keys.lua env=(KEY_PREFIX="fresh-$$-$(date +%s%N)") ;;
    replay) path=/v1/orders lua=keys.lua env=(KEY_PREFIX="replay-$$" KEY_SPACE=64) ;;
    *) echo "unknown scenario $1" >&2; exit 2 ;;
  esac
  env "${env[@]}" taskset -c "$LOAD_CPU" wrk -t1 -c"${CONNS:-$conns}" -d"$2s" --timeout 10s \
    -s "bench/lua/$lua" "http://127.0.0.1:$PROXY_PORT$path"
}

# start_grpc_upstream: the gRPC upstream (grpc_upstream_files), a second nginx, on
# LOAD_CPU like the HTTP/1.1 one. Sets GRPC_UP_PORT (h2c) and GRPC_UP_H1_PORT (the
# same answers over HTTP/1.1, to compare the proxy's cost toward an h2c upstream with
# its cost toward an HTTP/1.1 one); the framed call is $WORK/grpc/call.bin.
start_grpc_upstream() {
  read -r GRPC_UP_PORT GRPC_UP_H1_PORT <<<"$(free_port 2)"
  grpc_upstream_files "$WORK/grpc" "$GRPC_UP_PORT" "$GRPC_UP_H1_PORT"
  taskset -c "$LOAD_CPU" nginx -c "$WORK/grpc/nginx.conf" -p "$WORK/grpc" 2>/dev/null & PIDS+=($!)
  wait_port "$GRPC_UP_PORT"
}

# grpc_fresh_load SECONDS PREFIX: bench/grpc_fresh.js's unary calls, each with a new
# key, 8 connections of 8 streams, on the proxy's bench.Orders route; prints its JSON.
grpc_fresh_load() {
  taskset -c "$LOAD_CPU" node bench/grpc_fresh.js "http://127.0.0.1:$PROXY_PORT/bench.Orders/Create" \
    "$1" 8 8 "$2" "$WORK/grpc/call.bin"
}

# start_proxy NAME DSN POOL [THREADS [CPUS]]: idemproxy with THREADS I/O threads (1)
# on CPUS (SUT_CPU) in front of the upstream on UP_PORT, with the benchmarks' one
# route; sets PROXY_PORT and PROXY_PID. PROXY_BIN picks another binary;
# PROXY_UPSTREAM and PROXY_ROUTE (YAML flow mappings) another upstream and route;
# PROXY_STORE_EXTRA more store.postgres keys ("batch_wait: 250us"); PROXY_STORE another
# store altogether ("{memory: {}}": a fresh key's cost with no database, a bound).
start_proxy() {
  local admin
  read -r PROXY_PORT admin <<<"$(free_port 2)"
  PROXY_ADMIN=$admin  # its /metrics
  cat >"$WORK/$1.yaml" <<EOC
listen: 127.0.0.1:$PROXY_PORT
admin_listen: 127.0.0.1:$admin
upstream: ${PROXY_UPSTREAM:-"{url: \"http://127.0.0.1:$UP_PORT\", max_idle_connections: 256}"}
store: ${PROXY_STORE:-"{postgres: {dsn: \"$2\", pool_size: $3${PROXY_STORE_EXTRA:+, $PROXY_STORE_EXTRA}}}"}
server: {threads: ${4:-1}, max_connections: 100000}
log: {level: ${PROXY_LOG_LEVEL:-warn}${PROXY_LOG_EXTRA:-}}
routes:
  - ${PROXY_ROUTE:-"{name: orders, path_prefix: /v1, on_concurrent: wait}"}
EOC
  taskset -c "${5:-$SUT_CPU}" "${PROXY_BIN:-$BENCH_BUILD/idemproxy}" serve --config "$WORK/$1.yaml" \
    >"$WORK/$1.log" 2>&1 & PIDS+=($!)
  PROXY_PID=${PIDS[-1]}
  wait_port "$PROXY_PORT"
}

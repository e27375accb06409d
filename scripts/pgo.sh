#!/usr/bin/env bash
# Records a profile of the proxy under a training load, for a profile-guided build
# (cmake/pgo.cmake). scripts/build.sh runs it when PGO=1; on its own:
#   scripts/pgo.sh [CMAKE_ARGS...]   prints the cmake arguments that build with the
#                                    profile (CMAKE_ARGS: the tree's others, if any)
# 1. BUILD_DIR (build/): the proxy instrumented (IDEMPROXY_PGO=generate), and the
#    bench's upstream and open-loop load generator, which are not. The same tree then
#    builds with the profile: GCC checks each file-local function's profile against
#    its file's path as compiled, which names the tree (a unity batch includes
#    build/unity/../../src/...), so a profile recorded in another tree misses them.
# 2. The training load, a few seconds each, from one open-loop generator at fixed
#    rates (so the profile does not depend on how fast this machine is): pass-through,
#    fresh keys, replays of completed keys and 64 KiB answers over HTTP/1.1; then
#    pass-through and replays over HTTP/2 (curl, prior knowledge). The proxy runs in
#    front of a private PostgreSQL (scripts/pg.sh) and bench/upstream.cpp, with the
#    bench's route (its config as bench/common.sh's start_proxy writes it). Then, when
#    nginx and Node are here, gRPC unary calls with fresh keys through a second proxy
#    in front of the bench's gRPC nginx (bench/run.sh's grpcfresh row).
# 3. The proxy stops cleanly (its counters are written at exit); the profile's digest
#    names it, so a new profile recompiles the proxy and an unchanged one is reused
#    from ccache.
# Everything it needs is in `install-deps.sh build` plus PostgreSQL, python3 and curl;
# the gRPC calls also need nginx and Node.
set -euo pipefail
cd "$(dirname "$0")/.."
GEN=${BUILD_DIR:-build}
PROFILE=$PWD/$GEN/pgo-profile
WORK=$(mktemp -d "${TMPDIR:-/tmp}/idemproxy-pgo.XXXXXX")
chmod 755 "$WORK"  # PostgreSQL runs as the postgres user (scripts/pg.sh)
pids=()
cleanup() {
  local status=$?
  if [ "$status" -ne 0 ]; then
    for log in "$WORK"/proxy-*.log; do
      [ -s "$log" ] || continue
      echo "pgo: the trained proxy's log ($(basename "$log")):" >&2
      tail -20 "$log" >&2
    done
  fi
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  bash scripts/pg.sh stop "$WORK/pg" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "pgo: the instrumented build ($GEN/)" >&2
PGO='' BUILD_DIR=$GEN BUILD_TARGETS="idemproxy bench_upstream bench_openloop" \
  bash scripts/build.sh -DIDEMPROXY_BENCH=ON -DIDEMPROXY_PGO=generate \
  -DIDEMPROXY_PGO_DIR="$PROFILE" "$@" >&2
rm -rf "$PROFILE"

. scripts/ports.sh  # free_port, wait_port
UP=$(free_port)
DSN=$(bash scripts/pg.sh start "$WORK/pg" "" -c fsync=off 2>"$WORK/pg.log") || {
  cat "$WORK/pg.log" >&2
  exit 1
}
"$GEN/bench_upstream" "$UP" & pids+=($!)
wait_port "$UP"
# trained NAME UPSTREAM ROUTE: a proxy of the tree in front of UPSTREAM with one ROUTE
# (YAML flow mappings, as bench/common.sh's start_proxy writes them); sets PORT and
# PROXY (its pid). Its counters are written when it stops cleanly (stop_trained).
trained() {
  local admin
  read -r PORT admin <<<"$(free_port 2)"
  cat >"$WORK/proxy-$1.yaml" <<EOF
listen: 127.0.0.1:$PORT
admin_listen: 127.0.0.1:$admin
upstream: $2
store: {postgres: {dsn: "$DSN", pool_size: 8}}
server: {threads: 1}
log: {level: warn}
routes:
  - $3
EOF
  "$GEN/idemproxy" serve --config "$WORK/proxy-$1.yaml" >"$WORK/proxy-$1.log" 2>&1 &
  PROXY=$!
  pids+=("$PROXY")
  wait_port "$PORT"
}
stop_trained() {
  kill -TERM "$PROXY"
  # A proxy that did not stop cleanly wrote no profile (cleanup shows its log).
  wait "$PROXY" || { echo "pgo: the proxy did not stop cleanly" >&2; exit 1; }
}
trained http "{url: \"http://127.0.0.1:$UP\", max_idle_connections: 256}" \
  "{name: orders, path_prefix: /v1, on_concurrent: wait}"

echo "pgo: the training load" >&2
load() { "$GEN/bench_openloop" "$PORT" "$@" >/dev/null; }
run=pgo-$$-$(date +%s%N)
load /pass 8000 3 32
load /v1/orders 2000 3 32 "$run-fresh"
load /v1/orders 8000 3 32 "$run-replay" 64
load /pass/64k 1000 2 16
# HTTP/2: 400 requests a scenario, a connection each, 4 at a time (curl 7.88 fails a
# second request on an h2c connection with prior knowledge, against nginx too); each
# must be answered 201 over HTTP/2.
h2() {
  local key=()
  [ "$1" = /v1/orders ] && key=(-H "Idempotency-Key: $run-h2-$(($2 % 64))")
  curl -s --http2-prior-knowledge -o /dev/null -w '%{http_code} %{http_version}\n' \
    -H 'Content-Type: application/json' -d '{"amount":1000,"currency":"eur"}' "${key[@]}" \
    "http://127.0.0.1:$PORT$1"
}
export -f h2
export PORT run
for path in /pass /v1/orders; do
  seq 400 | xargs -P 4 -I{} bash -c "h2 $path {}" >"$WORK/h2.out" || true
  answered=$(grep -c '^201 2$' "$WORK/h2.out" || true)
  if [ "$answered" -ne 400 ]; then
    echo "pgo: HTTP/2 $path: $answered of 400 answered 201 over HTTP/2" >&2
    sort "$WORK/h2.out" | uniq -c >&2
    exit 1
  fi
done

stop_trained

# gRPC: unary calls, a new key each (bench/grpc_fresh.js), through a second proxy whose
# upstream is the bench's h2c nginx (bench/nginx_conf.sh); every call must end with
# grpc-status 0. scripts/test.sh installs nginx and Node; without them this is skipped.
if command -v nginx >/dev/null && command -v node >/dev/null; then
  . bench/nginx_conf.sh  # grpc_upstream_files
  read -r GRPC GRPC_H1 <<<"$(free_port 2)"
  grpc_upstream_files "$WORK/grpc" "$GRPC" "$GRPC_H1"
  nginx -c "$WORK/grpc/nginx.conf" -p "$WORK/grpc" 2>"$WORK/grpc/nginx.err" & pids+=($!)
  wait_port "$GRPC"
  trained grpc "{url: \"http://127.0.0.1:$GRPC\", protocol: h2c}" \
    "{name: grpc, path_prefix: /bench.Orders/, key_required: true}"
  calls=$(node bench/grpc_fresh.js "http://127.0.0.1:$PORT/bench.Orders/Create" 3 4 8 \
    "$run-grpc" "$WORK/grpc/call.bin")
  if ! python3 -c 'import json, sys; r = json.loads(sys.argv[1]); sys.exit(not (r["ok"] > 0 and r["failed"] == 0))' "$calls"; then
    echo "pgo: gRPC calls did not all end with grpc-status 0: $calls" >&2
    exit 1
  fi
  stop_trained
else
  echo "pgo: no nginx or Node here, so the profile trains no gRPC call" >&2
fi

files=$(find "$PROFILE" -name '*.gcda' | wc -l)
if [ "$files" -eq 0 ]; then
  echo "pgo: the training load left no profile in $PROFILE" >&2
  exit 1
fi
id=$(find "$PROFILE" -name '*.gcda' -print0 | sort -z | xargs -0 cat | sha256sum | cut -c1-16)
echo "pgo: profile $id ($files files) in $PROFILE" >&2
echo "-DIDEMPROXY_PGO=use -DIDEMPROXY_PGO_DIR=$PROFILE -DIDEMPROXY_PGO_ID=$id"

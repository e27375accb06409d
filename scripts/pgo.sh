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
#    bench's route (its config as bench/common.sh's start_proxy writes it).
# 3. The proxy stops cleanly (its counters are written at exit); the profile's digest
#    names it, so a new profile recompiles the proxy and an unchanged one is reused
#    from ccache.
# Everything it needs is in `install-deps.sh build` plus PostgreSQL, python3 and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
GEN=${BUILD_DIR:-build}
PROFILE=$PWD/$GEN/pgo-profile
WORK=$(mktemp -d "${TMPDIR:-/tmp}/idemproxy-pgo.XXXXXX")
chmod 755 "$WORK"  # PostgreSQL runs as the postgres user (scripts/pg.sh)
pids=()
cleanup() {
  local status=$?
  if [ "$status" -ne 0 ] && [ -s "$WORK/idemproxy.log" ]; then
    echo "pgo: the trained proxy's log:" >&2
    tail -20 "$WORK/idemproxy.log" >&2
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
read -r PORT ADMIN UP <<<"$(free_port 3)"
DSN=$(bash scripts/pg.sh start "$WORK/pg" "" -c fsync=off 2>"$WORK/pg.log") || {
  cat "$WORK/pg.log" >&2
  exit 1
}
"$GEN/bench_upstream" "$UP" & pids+=($!)
wait_port "$UP"
cat >"$WORK/idemproxy.yaml" <<EOF
listen: 127.0.0.1:$PORT
admin_listen: 127.0.0.1:$ADMIN
upstream: {url: "http://127.0.0.1:$UP", max_idle_connections: 256}
store: {postgres: {dsn: "$DSN", pool_size: 8}}
server: {threads: 1}
log: {level: warn}
routes:
  - {name: orders, path_prefix: /v1, on_concurrent: wait}
EOF
"$GEN/idemproxy" serve --config "$WORK/idemproxy.yaml" >"$WORK/idemproxy.log" 2>&1 &
PROXY=$!
pids+=("$PROXY")
wait_port "$PORT"

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

kill -TERM "$PROXY"
# A proxy that did not stop cleanly wrote no profile (cleanup shows its log).
wait "$PROXY" || { echo "pgo: the proxy did not stop cleanly" >&2; exit 1; }
files=$(find "$PROFILE" -name '*.gcda' | wc -l)
if [ "$files" -eq 0 ]; then
  echo "pgo: the training load left no profile in $PROFILE" >&2
  exit 1
fi
id=$(find "$PROFILE" -name '*.gcda' -print0 | sort -z | xargs -0 cat | sha256sum | cut -c1-16)
echo "pgo: profile $id ($files files) in $PROFILE" >&2
echo "-DIDEMPROXY_PGO=use -DIDEMPROXY_PGO_DIR=$PROFILE -DIDEMPROXY_PGO_ID=$id"

#!/usr/bin/env bash
# A private Citus cluster for tests and measurements: one coordinator and two workers
# on this machine, each a scripts/pg.sh server on its own port.
#   scripts/citus.sh build            builds and installs Citus (cached between runs)
#   scripts/citus.sh start DIR [N]    starts a coordinator and N workers (default 2);
#                                     prints the coordinator's DSN on stdout
#   scripts/citus.sh add-worker DIR   starts one more worker and adds it to the cluster;
#                                     prints its port
#   scripts/citus.sh remove-worker DIR PORT
#                                     drains the worker on PORT (its shards move away
#                                     by logical replication), drops what the moves
#                                     left there, removes it, stops it
#   scripts/citus.sh stop DIR
# No registry these machines reach carries Citus: it builds from the source in
# ../shared/vendor/citus (README there), about 75 s on 2 cores, once per machine.
# CITUS_CATCHUP_FIX=1 builds and installs it with scripts/citus-catchup-insert-lsn.patch
# (a shard move's catch-up waits for the WAL insert position; docs/SCALING.md, "Shard
# moves"); without it the stock build is (re)installed. Tests run the stock build: the
# proxy must be safe on the Citus its users run.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
CITUS_VERSION=13.2.2
cmd=${1:?usage: citus.sh build|start|add-worker|remove-worker|stop [DIR]}

as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

vendor_dir() {
  local d
  for d in "${CITUS_SRC:-}" "$here/../../shared/vendor/citus" /work/shared/vendor/citus; do
    if [ -n "$d" ] && [ -f "$d/citus-$CITUS_VERSION-src.tar.gz" ]; then
      echo "$d"
      return
    fi
  done
  echo "citus.sh: no citus-$CITUS_VERSION-src.tar.gz (set CITUS_SRC to its folder)" >&2
  exit 1
}

variant() { if [ "${CITUS_CATCHUP_FIX:-0}" = 1 ]; then echo catchup-fix; else echo stock; fi; }

installed() {
  local lib
  lib=$("$PGBIN/pg_config" --pkglibdir)/citus.so
  [ -f "$lib" ] && grep -q "default_version = '${CITUS_VERSION%.*}" \
    "$("$PGBIN/pg_config" --sharedir)/extension/citus.control" 2>/dev/null &&
    [ "$(cat "$lib.variant" 2>/dev/null || echo stock)" = "$(variant)" ]
}

build() {
  if installed; then
    return
  fi
  bash "$here/install-deps.sh" citus >&2
  local cache=${IDEMPROXY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/idemproxy}/citus-$CITUS_VERSION
  if [ "$(variant)" != stock ]; then cache=$cache-$(variant); fi
  if [ ! -f "$cache/src/backend/distributed/citus.so" ]; then
    local vendor
    vendor=$(vendor_dir)
    rm -rf "$cache" && mkdir -p "$cache"
    tar -xzf "$vendor/citus-$CITUS_VERSION-src.tar.gz" -C "$cache" --strip-components=1
    (cd "$cache" && patch -p1 -s <"$vendor/pg15.20-compat.patch" &&
      if [ "$(variant)" != stock ]; then patch -p1 -s <"$here/citus-catchup-insert-lsn.patch"; fi &&
      ./configure -q --without-libcurl PG_CONFIG="$PGBIN/pg_config" >configure.log &&
      make -s -j"$(nproc)" >make.log 2>&1) ||
      {
        tail -30 "$cache/make.log" "$cache/configure.log" 2>/dev/null >&2
        exit 1
      }
  fi
  (cd "$cache" && make -s install >install.log 2>&1) || {
    tail -30 "$cache/install.log" >&2
    exit 1
  }
  variant >"$("$PGBIN/pg_config" --pkglibdir)/citus.so.variant"
  echo "citus.sh: Citus $CITUS_VERSION ($(variant)) installed" >&2
}

# Every node: Citus preloaded; prepared transactions for its two-phase commits;
# logical WAL so shards can move (citus_rebalance_start) while the proxies write.
# Tests run without fsync; CITUS_DURABLE=1 (bench/scaling.sh) keeps PostgreSQL's
# durable defaults, as bench/run.sh's single node does.
NODE_OPTIONS=(-c shared_preload_libraries=citus -c max_prepared_transactions=200
  -c wal_level=logical -c max_wal_senders=20 -c max_replication_slots=20)
if [ "${CITUS_DURABLE:-0}" = 1 ]; then
  NODE_OPTIONS+=(-c min_wal_size=1GB)
else
  # 8 shards rather than 32: test_citus.py's rebalance moves a few in seconds.
  # synchronous_commit=off stays on purpose: the proxy must commit its own writes
  # durably whatever the server's default is (docs/SCALING.md, "Shard moves").
  NODE_OPTIONS+=(-c fsync=off -c synchronous_commit=off -c citus.shard_count=8)
fi
# CITUS_NODE_OPTIONS adds settings to every node, e.g. for an investigation:
#   "-c citus.log_remote_commands=on -c track_commit_timestamp=on"
# shellcheck disable=SC2206
NODE_OPTIONS+=(${CITUS_NODE_OPTIONS:-})

psql_on() {
  local port=$1
  shift
  as_postgres "$PGBIN/psql" -h 127.0.0.1 -p "$port" -U postgres -d idemproxy -qAt \
    -v ON_ERROR_STOP=1 "$@"
}

start_node() {
  local dir=$1
  bash "$here/pg.sh" start "$dir" "$(cat "$dir/port" 2>/dev/null || true)" "${NODE_OPTIONS[@]}" >/dev/null
  psql_on "$(cat "$dir/port")" -c "CREATE EXTENSION IF NOT EXISTS citus" >/dev/null
}

add_worker() {
  local dir=$1 worker=$2
  start_node "$dir/$worker"
  psql_on "$(cat "$dir/coordinator/port")" \
    -c "SELECT citus_add_node('127.0.0.1', $(cat "$dir/$worker/port"))" >/dev/null
}

case "$cmd" in
  build) build ;;
  start)
    dir=${2:?usage: citus.sh start DIR [WORKERS]}
    workers=${3:-2}
    build
    mkdir -p "$dir"
    start_node "$dir/coordinator"
    coordinator=$(cat "$dir/coordinator/port")
    psql_on "$coordinator" -c "SELECT citus_set_coordinator_host('127.0.0.1', $coordinator)" >/dev/null
    for i in $(seq 1 "$workers"); do add_worker "$dir" "worker$i"; done
    echo "postgresql://postgres@127.0.0.1:$coordinator/idemproxy"
    ;;
  add-worker)
    dir=${2:?usage: citus.sh add-worker DIR}
    n=1
    while [ -d "$dir/worker$n" ]; do n=$((n + 1)); done
    add_worker "$dir" "worker$n"
    cat "$dir/worker$n/port"
    ;;
  remove-worker)
    dir=${2:?usage: citus.sh remove-worker DIR PORT}
    port=${3:?usage: citus.sh remove-worker DIR PORT}
    coordinator=$(cat "$dir/coordinator/port")
    group=$(psql_on "$coordinator" -c "SELECT groupid FROM pg_dist_node WHERE nodeport = $port")
    psql_on "$coordinator" -c "SELECT citus_drain_node('127.0.0.1', $port, shard_transfer_mode := 'force_logical')" >/dev/null
    # The drained placements stay on the worker until a deferred cleanup drops them.
    # Removed with those still recorded (pg_dist_cleanup), the node is gone but its
    # records stay, and every later move of those shards fails for good ("the
    # orphaned shard ... could not be cleaned up"). So drop them first.
    left=1
    for _ in $(seq 30); do
      psql_on "$coordinator" -c "CALL citus_cleanup_orphaned_resources()" >/dev/null 2>&1 || true
      left=$(psql_on "$coordinator" -c "SELECT count(*) FROM pg_dist_cleanup WHERE node_group_id = $group")
      [ "$left" = 0 ] && break
      sleep 1
    done
    if [ "$left" != 0 ]; then
      echo "citus.sh: $left orphaned resources on the worker at $port could not be dropped; not removing it" >&2
      exit 1
    fi
    psql_on "$coordinator" -c "SELECT citus_remove_node('127.0.0.1', $port)" >/dev/null
    for node in "$dir"/worker*; do
      if [ "$(cat "$node/port" 2>/dev/null)" = "$port" ]; then
        bash "$here/pg.sh" stop "$node"
        rm -rf "$node"
      fi
    done
    ;;
  stop)
    dir=${2:?usage: citus.sh stop DIR}
    for node in "$dir"/worker* "$dir/coordinator"; do
      [ -d "$node" ] && bash "$here/pg.sh" stop "$node"
    done
    ;;
  *)
    echo "usage: citus.sh build|start|add-worker|remove-worker|stop [DIR]" >&2
    exit 2
    ;;
esac

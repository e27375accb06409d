#!/usr/bin/env bash
# A private, throwaway PostgreSQL 15 for local runs and tests.
#   scripts/pg.sh start DIR [PORT] [-c setting=value ...]   prints the DSN on stdout
#   scripts/pg.sh stop DIR
# initdb refuses to run as root, so the server runs as the postgres user.
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
cmd=${1:?usage: pg.sh start|stop DIR [PORT]}
dir=${2:?usage: pg.sh start|stop DIR [PORT]}

# As root, the server runs as postgres; as anyone else, as that user.
as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# Outside the kernel's ephemeral range, so no outgoing connection takes it: see free_port.py.
free_port() { python3 "$(dirname "$0")/free_port.py"; }

case "$cmd" in
  start)
    port=${3:-$(free_port)}
    shift 3 2>/dev/null || shift $#
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$dir"; fi
    chmod 700 "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
      as_postgres "$PGBIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
    fi
    # Server options given once are remembered, so a restart keeps them.
    if [ $# -gt 0 ]; then echo "$*" >"$dir/options"; fi
    options=$(cat "$dir/options" 2>/dev/null || true)
    as_postgres "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200 $options" start >/dev/null \
      || { cat "$dir/server.log" >&2; exit 1; }
    echo "$port" >"$dir/port"
    as_postgres "$PGBIN/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qAt \
      -c "SELECT 1 FROM pg_database WHERE datname = 'idemproxy'" | grep -q 1 \
      || as_postgres "$PGBIN/createdb" -h 127.0.0.1 -p "$port" -U postgres idemproxy
    echo "postgresql://postgres@127.0.0.1:$port/idemproxy"
    ;;
  stop)
    if [ -f "$dir/data/postmaster.pid" ]; then
      as_postgres "$PGBIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    fi
    ;;
  *)
    echo "usage: pg.sh start|stop DIR [PORT]" >&2
    exit 2
    ;;
esac

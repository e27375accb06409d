#!/usr/bin/env bash
# A private high-availability PostgreSQL under pg_auto_failover (Debian's
# postgresql-15-auto-failover): a monitor, a primary and a secondary with synchronous
# replication, on this machine, each on its own port.
#   scripts/failover.sh start DIR    starts the three; prints the multi-host DSN
#                                    (target_session_attrs=read-write) on stdout
#   scripts/failover.sh primary DIR  prints the port of the current primary
#   scripts/failover.sh fail DIR     kills the current primary (its keeper, then its
#                                    server, -9), as a lost host would; prints its port
#   scripts/failover.sh revive DIR PORT  starts that node's keeper again: it rejoins
#                                    as a secondary
#   scripts/failover.sh wait DIR     waits until one primary and one secondary
#   scripts/failover.sh stop DIR
# The monitor's health checks are tightened (1 s period, unhealthy after 3 s) so a
# failover completes in seconds; the defaults take about 30 s.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
cmd=${1:?usage: failover.sh start|primary|fail|revive|wait|stop DIR}
dir=${2:?usage: failover.sh start|primary|fail|revive|wait|stop DIR}

as_postgres() {
  local envs=(XDG_CONFIG_HOME="$dir/xdg/config" XDG_DATA_HOME="$dir/xdg/data"
    XDG_RUNTIME_DIR="$dir/xdg/run" PATH="$PGBIN:$PATH")
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- env "${envs[@]}" "$@"
  else
    env "${envs[@]}" "$@"
  fi
}

# Outside the kernel's ephemeral range, so no outgoing connection takes it: see free_port.py.
free_port() { python3 "$here/free_port.py"; }

monitor_uri() { echo "postgres://autoctl_node@127.0.0.1:$(cat "$dir/monitor.port")/pg_auto_failover?sslmode=disable"; }

# keeper NODE: runs `pg_autoctl run` for NODE in the background, in a session of its
# own (keeper.sid), so `fail` can kill the keeper, its supervisor and the server at once.
keeper() {
  setsid bash -c "$(declare -f as_postgres); dir='$dir' PGBIN='$PGBIN' as_postgres pg_autoctl run --pgdata '$dir/$1/data'" \
    >>"$dir/$1/keeper.log" 2>&1 </dev/null &
  echo $! >"$dir/$1/keeper.sid"
}

# The monitor's view: one line "PORT REPORTED GOAL" per data node. A node has settled
# when it reports the state the monitor assigned it; a dead one never does.
states() {
  as_postgres "$PGBIN/psql" -h 127.0.0.1 -p "$(cat "$dir/monitor.port")" -U autoctl_node \
    -d pg_auto_failover -qAt -F ' ' \
    -c "SELECT nodeport, reportedstate, goalstate FROM pgautofailover.node ORDER BY nodeid"
}

# The port of the node that takes writes now.
primary() {
  states | awk '$2 == $3 && $2 ~ /^(single|wait_primary|primary)$/ {print $1; exit}'
}

wait_for() {  # SECONDS STATE...: until the data nodes report exactly these states
  local deadline=$((SECONDS + $1)) want now
  shift
  want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
  while [ $SECONDS -lt $deadline ]; do
    now=$(states 2>/dev/null | awk '{print ($2 == $3 ? $2 : $2 "->" $3)}' | sort | tr '\n' ' ' || true)
    if [ "$now" = "$want" ]; then return 0; fi
    sleep 0.5
  done
  echo "failover.sh: timed out waiting for: $want(now: $now)" >&2
  return 1
}

create_node() {  # NODE
  local node=$1 port
  port=$(free_port)
  mkdir -p "$dir/$node"
  chown postgres:postgres "$dir/$node" 2>/dev/null || true
  echo "$port" >"$dir/$node/port"
  as_postgres pg_autoctl create postgres --pgdata "$dir/$node/data" --pgport "$port" \
    --pgctl "$PGBIN/pg_ctl" --hostname 127.0.0.1 --listen 127.0.0.1 --name "$node" \
    --dbname idemproxy --auth trust --no-ssl --monitor "$(monitor_uri)" \
    >>"$dir/$node/keeper.log" 2>&1
  keeper "$node"
}

case "$cmd" in
  start)
    mkdir -p "$dir/xdg/config" "$dir/xdg/data" "$dir/xdg/run" "$dir/monitor"
    chmod 755 "$dir"
    if [ "$(id -u)" -eq 0 ]; then chown -R postgres:postgres "$dir"; fi
    chmod 700 "$dir/xdg/run"
    free_port >"$dir/monitor.port"
    as_postgres pg_autoctl create monitor --pgdata "$dir/monitor/data" \
      --pgport "$(cat "$dir/monitor.port")" --pgctl "$PGBIN/pg_ctl" --hostname 127.0.0.1 \
      --auth trust --no-ssl >"$dir/monitor/keeper.log" 2>&1
    # Health checks: every second, unhealthy after 3 s without an answer.
    cat >>"$dir/monitor/data/postgresql.conf" <<EOF
pgautofailover.health_check_period = 1000
pgautofailover.health_check_timeout = 1000
pgautofailover.health_check_max_retries = 1
pgautofailover.health_check_retry_delay = 500
pgautofailover.node_considered_unhealthy_timeout = 3000
pgautofailover.primary_demote_timeout = 5000
EOF
    keeper monitor
    for _ in $(seq 100); do
      as_postgres "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$(cat "$dir/monitor.port")" && break
      sleep 0.2
    done
    create_node node1
    wait_for 60 single
    create_node node2
    wait_for 120 primary secondary
    echo "postgresql://postgres@127.0.0.1:$(cat "$dir/node1/port"),127.0.0.1:$(cat "$dir/node2/port")/idemproxy?target_session_attrs=read-write&connect_timeout=2"
    ;;
  primary) primary ;;
  wait)
    wait_for 120 primary secondary
    ;;
  fail)
    port=""
    for _ in $(seq 120); do  # a primary the monitor has settled (slower under ASan)
      port=$(primary 2>/dev/null || true)
      [ -n "$port" ] && break
      sleep 0.5
    done
    [ -n "$port" ] || { echo "failover.sh: no settled primary to fail" >&2; exit 1; }
    for node in node1 node2; do
      if [ "$(cat "$dir/$node/port")" = "$port" ]; then
        # The host is lost: the keeper, its supervisor, the postmaster and every
        # backend at once. PostgreSQL's children call setsid(), so they are not in the
        # keeper's session: killing the session alone leaves the backends (and the
        # walsender) running until they notice the postmaster gone, and a claim sent
        # after this returned could still commit and be answered.
        sid=$(cat "$dir/$node/keeper.sid")
        pids=$(pgrep -s "$sid" || true)
        kill -STOP $pids 2>/dev/null || true # no new backend forks while they are listed
        kids=$(for p in $pids; do pgrep -P "$p" || true; done)
        kill -9 $pids $kids 2>/dev/null || true
        # Until every one is gone: SIGKILL takes effect when a process next runs.
        for _ in $(seq 200); do
          alive=0
          for p in $pids $kids; do
            if [ -e "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null; then
              alive=1
            fi
          done
          [ "$alive" = 0 ] && break
          sleep 0.05
        done
      fi
    done
    echo "$port"
    ;;
  revive)
    port=${3:?usage: failover.sh revive DIR PORT}
    for node in node1 node2; do
      if [ "$(cat "$dir/$node/port")" = "$port" ]; then keeper "$node"; fi
    done
    ;;
  stop)
    for node in node2 node1 monitor; do
      [ -d "$dir/$node/data" ] || continue
      as_postgres pg_autoctl stop --pgdata "$dir/$node/data" --immediate >/dev/null 2>&1 || true
      pkill -9 -s "$(cat "$dir/$node/keeper.sid" 2>/dev/null || echo 0)" 2>/dev/null || true
      as_postgres "$PGBIN/pg_ctl" -D "$dir/$node/data" -m immediate -w stop >/dev/null 2>&1 || true
    done
    ;;
  *)
    echo "usage: failover.sh start|primary|fail|revive|wait|stop DIR" >&2
    exit 2
    ;;
esac

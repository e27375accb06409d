# shellcheck shell=bash
# Sourced by scripts/pgo.sh and bench/common.sh: ports for the servers they start.
# free_port [COUNT]: COUNT distinct ports on one line, outside the ephemeral range (see the script).
free_port() { python3 scripts/free_port.py "$@"; }
# wait_port PORT: returns once something listens on 127.0.0.1:PORT; exits after 10 s.
wait_port() {
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done
  echo "port $1 never opened" >&2
  exit 1
}

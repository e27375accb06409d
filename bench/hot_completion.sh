#!/usr/bin/env bash
# What a completion that is a HOT update would save PostgreSQL per key: pgbench on two
# copies of the records table, the claim (INSERT ... ON CONFLICT DO NOTHING) and the
# completion (the UPDATE of state, status, headers, body and the times) as single-row
# prepared statements, 8 clients at an equal RATE, the copies in alternating rounds.
#   bench/hot_completion.sh [ROUNDS] [SECONDS] [RATE]
# a: the table as the proxy's migrations make it, with its indexes (the primary key,
# expires_at, the indeterminate sweep's partial index on state), so no completion is
# HOT. b: the same columns with the primary key alone and the sweeps on a column set at
# the claim (gc_at), expires_at left alone, so completions can be HOT. Prints each round's
# CPU of PostgreSQL per key (its processes and the exited backends it reaped) and the
# share of HOT updates of each copy.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3} SECS=${2:-20} RATE=${3:-2500}
WORK_NAME=hot-completion
. bench/common.sh
DSN=$(start_pg "$WORK/pg")
# The records table as the proxy's migrations make it, copied twice.
cat >"$WORK/migrate.yaml" <<EOC
upstream: {url: "http://127.0.0.1:1"}
store: {postgres: {dsn: "$DSN"}}
routes: [{name: orders, path_prefix: /v1}]
EOC
"$BENCH_BUILD/idemproxy" migrate --config "$WORK/migrate.yaml" >/dev/null
psql "$DSN" -qAt -v ON_ERROR_STOP=1 \
  -c "CREATE TABLE rec_a (LIKE idempotency_records INCLUDING ALL)" \
  -c "CREATE TABLE rec_b (LIKE idempotency_records INCLUDING DEFAULTS INCLUDING CONSTRAINTS)" \
  -c "ALTER TABLE rec_b ADD PRIMARY KEY (scope, key)" \
  -c "ALTER TABLE rec_a ADD COLUMN gc_at timestamptz" -c "ALTER TABLE rec_b ADD COLUMN gc_at timestamptz" \
  -c "CREATE INDEX ON rec_b (gc_at)"
hex() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n'; }
H=$(hex 'content-type: application/json, date: Thu, 04 Dec 2026 01:00:00 GMT')
B=$(hex '{"id":"ord_123","amount":1000,"currency":"eur","status":"created"}')
for t in a b; do
  expiry="expires_at = now() + interval '1 day',"
  [ "$t" = b ] && expiry=""
  cat >"$WORK/$t.sql" <<EOS
\set n random(1, 1000000000000)
INSERT INTO rec_$t (scope, key, fingerprint, state, token, route, method, target, locked_until, expires_at, gc_at, claim_nonce) VALUES ('s', :client_id || '-' || :n, 'a3f1c2d4e5f60718293a4b5c6d7e8f90a3f1c2d4e5f60718293a4b5c6d7e8f90', 'in_flight', :n, 'orders', 'POST', '/v1/orders', now() + interval '30 s', now() + interval '1 day', now() + interval '2 days', :n) ON CONFLICT DO NOTHING;
UPDATE rec_$t SET state = 'completed', status = 201, headers = '\\x$H', body = '\\x$B', completed_at = now(), locked_until = NULL, $expiry replay_until = now() + interval '1 day' WHERE scope = 's' AND key = :client_id || '-' || :n AND token = :n AND state = 'in_flight';
EOS
done
HZ=$(getconf CLK_TCK)
for r in $(seq "$ROUNDS"); do
  for t in a b; do
    g0=$(server_ticks "$WORK/pg")
    tps=$(taskset -c "$SUT_CPU" pgbench -n -M prepared -c 8 -j 1 -R "$RATE" -T "$SECS" \
      -f "$WORK/$t.sql" "$DSN" 2>&1 | awk '/^tps/ {printf "%.0f", $3}')
    sleep 2  # the backends exit and are reaped
    g1=$(server_ticks "$WORK/pg")
    awk -v r="$r" -v t="$t" -v n="$tps" -v s="$SECS" -v g=$((g1 - g0)) -v hz="$HZ" \
      'BEGIN {printf "round %s, %s: %s keys/s, %.1f us of PostgreSQL a key\n", r, t, n, g / hz * 1e6 / (n * s)}'
  done
done
psql "$DSN" -qAt -F ' ' -c "SELECT relname || ':', n_tup_hot_upd, 'of', n_tup_upd, 'updates HOT'
  FROM pg_stat_user_tables WHERE relname LIKE 'rec_%' ORDER BY relname"

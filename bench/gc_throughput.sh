#!/usr/bin/env bash
# Does batched GC keep up with the insert rate? Loads ROWS expired records into a
# private PostgreSQL, times `idemproxy gc` deleting them (batches of 1000 under the
# GC advisory lock), and measures the claim insert rate with pgbench at CLIENTS
# connections on the same server. Prints both rates and their ratio.
#   bench/gc_throughput.sh [ROWS=3000000] [CLIENTS=8] [SECONDS=15]
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-3000000}
CLIENTS=${2:-8}
SECONDS_=${3:-15}
bash scripts/install-deps.sh >/dev/null
[ -x build/idemproxy ] || bash scripts/build.sh >/dev/null

GC_WORK_NAME=gcbench GC_BIN=build/idemproxy
. bench/gc_setup.sh

echo "loading $ROWS expired records..."
"${PSQL[@]}" -c "INSERT INTO idempotency_records
  (scope, key, fingerprint, state, token, route, method, target, created_at, expires_at, completed_at,
   status, headers, body)
  SELECT 'bench', 'expired-' || g, md5(g::text), 'completed', g, 'orders', 'POST', '/v1/orders',
         now() - interval '2 days', now() - interval '1 hour', now() - interval '2 days', 201,
         convert_to('Content-Type: application/json' || chr(13) || chr(10), 'UTF8'),
         convert_to(repeat('x', 200), 'UTF8')
  FROM generate_series(1, $ROWS) g" >/dev/null
"${PSQL[@]}" -c "VACUUM ANALYZE idempotency_records" >/dev/null

start=$(date +%s.%N)
deleted=$(build/idemproxy gc --config "$WORK/config.yaml" | awk '{print $2}')
end=$(date +%s.%N)
gc_rate=$(awk -v n="$deleted" -v s="$start" -v e="$end" 'BEGIN {printf "%.0f", n / (e - s)}')

cat >"$WORK/claim.sql" <<'EOC'
\set k random(1, 2000000000)
INSERT INTO idempotency_records (scope, key, fingerprint, state, token, route, method, target, created_at, locked_until, expires_at)
VALUES ('bench', 'live-' || :k || '-' || :client_id, 'fp', 'in_flight', nextval('idempotency_fencing_token_seq'), 'orders', 'POST', '/v1/orders', now(), now() + interval '30 seconds', now() + interval '24 hours')
ON CONFLICT (scope, key) DO NOTHING;
EOC
claim_rate=$(pgbench -n -M prepared -c "$CLIENTS" -j 2 -T "$SECONDS_" -f "$WORK/claim.sql" "$DSN" 2>/dev/null |
  awk '/^tps/ {printf "%.0f", $3}')

echo
echo "| measure | value |"
echo "|---|---|"
echo "| expired records deleted by one \`idemproxy gc\` | $deleted |"
echo "| GC delete rate (rows/s, batches of 1000) | $gc_rate |"
echo "| claim insert rate (rows/s, pgbench, $CLIENTS clients, one row per transaction) | $claim_rate |"
echo "| GC rate / insert rate | $(awk -v g="$gc_rate" -v c="$claim_rate" 'BEGIN {printf "%.2f", g / c}') |"

#!/usr/bin/env bash
# Garbage collection beside a large chunk table: loads STREAMS completed streamed
# answers of CHUNKS chunks each (kept: far from expiry) into a private PostgreSQL,
# then, for each binary in turn, ROUNDS times: loads EXPIRED expired records and times
# `idemproxy gc` deleting them (batches of 1000). Prints each run's seconds and rows/s,
# then the medians. Until the sweep went by pages, every batch read the whole chunk
# table, so GC slowed with the chunks stored, not with the records it deleted.
#   bench/gc_chunks.sh OLD_BINARY NEW_BINARY [EXPIRED=100000] [STREAMS=20000] [CHUNKS=50] [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$(realpath "$1") NEW=$(realpath "$2")
EXPIRED=${3:-100000} STREAMS=${4:-20000} CHUNKS=${5:-50} ROUNDS=${6:-3}
bash scripts/install-deps.sh >/dev/null

GC_WORK_NAME=gcchunks GC_BIN=$NEW
. bench/gc_setup.sh

echo "loading $STREAMS streamed answers of $CHUNKS chunks..."
"${PSQL[@]}" -c "INSERT INTO idempotency_records
  (scope, key, fingerprint, state, token, route, method, target, expires_at, completed_at,
   status, chunks, body_length)
  SELECT 'bench', 'stream-' || g, md5(g::text), 'completed', g, 'export', 'POST', '/v1/export',
         now() + interval '1 day', now(), 200, $CHUNKS, $CHUNKS * 1024
  FROM generate_series(1, $STREAMS) g" >/dev/null
"${PSQL[@]}" -c "INSERT INTO idempotency_chunks (scope, key, token, seq, bytes)
  SELECT 'bench', 'stream-' || g, g, s, convert_to(repeat('x', 1024), 'UTF8')
  FROM generate_series(1, $STREAMS) g, generate_series(1, $CHUNKS) s" >/dev/null
"${PSQL[@]}" -c "VACUUM ANALYZE idempotency_chunks" >/dev/null

: >"$WORK/runs"
for r in $(seq "$ROUNDS"); do
  for which in old new; do
    bin=$OLD
    [ "$which" = new ] && bin=$NEW
    "${PSQL[@]}" -c "INSERT INTO idempotency_records
      (scope, key, fingerprint, state, token, route, method, target, created_at, expires_at,
       completed_at, status, headers, body)
      SELECT 'bench', 'expired-$r-$which-' || g, md5(g::text), 'completed', 10000000 + g,
             'orders', 'POST', '/v1/orders', now() - interval '2 days', now() - interval '1 hour',
             now() - interval '2 days', 201, NULL, convert_to(repeat('x', 200), 'UTF8')
      FROM generate_series(1, $EXPIRED) g" >/dev/null
    "${PSQL[@]}" -c "VACUUM ANALYZE idempotency_records" >/dev/null
    start=$(date +%s.%N)
    deleted=$("$bin" gc --config "$WORK/config.yaml" | awk '{print $2}')
    end=$(date +%s.%N)
    line=$(awk -v n="$deleted" -v s="$start" -v e="$end" 'BEGIN {printf "%.2f %.0f", e - s, n / (e - s)}')
    echo "round $r: $which: deleted $deleted in ${line% *} s, ${line#* } rows/s"
    echo "$which $line" >>"$WORK/runs"
  done
done
left=$("${PSQL[@]}" -c "SELECT count(*) FROM idempotency_chunks")
echo "chunks left: $left of $((STREAMS * CHUNKS)) (every one is read by its record)"
python3 - "$WORK/runs" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    which, secs, rate = line.split()
    runs.setdefault(which, []).append((float(secs), float(rate)))
med = {w: (statistics.median(s for s, _ in v), statistics.median(r for _, r in v)) for w, v in runs.items()}
for w in ("old", "new"):
    print("median %s: %.2f s, %.0f rows/s" % (w, *med[w]))
print("new/old: rows/s %.2f" % (med["new"][1] / med["old"][1]))
EOF

#!/usr/bin/env bash
# The long version of the shard-move stress ledger (tests/e2e/test_citus_moves.py):
# a private Citus cluster at synchronous_commit=off, two proxies under keyed load,
# MOVES single-shard moves by logical replication and CYCLES add-worker -> rebalance
# -> drain -> remove-worker cycles. Prints the ledger (executed twice, lost, stuck in
# flight: all must be 0) and exits non-zero otherwise.
#   scripts/citus-soak.sh                 200 moves and 10 cycles (about 20 minutes)
#   MOVES=40 CYCLES=3 scripts/citus-soak.sh
# Uses build/idemproxy (scripts/build.sh first). CITUS_NODE_OPTIONS adds node settings.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MOVES=${MOVES:-200}
CYCLES=${CYCLES:-10}
bash scripts/citus.sh build
WORK=$(mktemp -d "${TMPDIR:-/tmp}/idemproxy-soak.XXXXXX")
chmod 755 "$WORK"
trap 'bash "$ROOT/scripts/citus.sh" stop "$WORK/citus" || true' EXIT
dsn=$(bash scripts/citus.sh start "$WORK/citus")
echo "citus-soak: cluster at $dsn (logs in $WORK/citus/*/server.log)"
IDEMPROXY_TEST_DSN=$dsn IDEMPROXY_TEST_PGDIR="$WORK/citus/coordinator" IDEMPROXY_TEST_CITUS=1 \
  IDEMPROXY_REQUIRE_PG=1 IDEMPROXY_BIN="$ROOT/${BUILD_DIR:-build}/idemproxy" \
  IDEMPROXY_CITUS_MOVES=$MOVES IDEMPROXY_CITUS_CYCLES=$CYCLES \
  IDEMPROXY_CITUS_BUDGET=${BUDGET:-7200} \
  /usr/bin/python3 -m pytest -q -s -p no:cacheprovider tests/e2e/test_citus_moves.py

#!/usr/bin/env bash
# The second README command: installs what is missing, builds, starts a throwaway
# PostgreSQL, and runs every test: unit and store tests (ctest), end-to-end tests
# (pytest, the real binary against real PostgreSQL), and the run-local smoke test.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

bash scripts/install-deps.sh
bash scripts/build.sh

WORK=$(mktemp -d "${TMPDIR:-/tmp}/idemproxy-test.XXXXXX")
chmod 755 "$WORK"
cleanup() {
  bash "$ROOT/scripts/pg.sh" stop "$WORK/pg" || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# fsync off: the tests restart PostgreSQL cleanly but never crash the machine.
IDEMPROXY_TEST_DSN=$(bash scripts/pg.sh start "$WORK/pg" "" -c fsync=off)
export IDEMPROXY_TEST_DSN IDEMPROXY_TEST_PGDIR="$WORK/pg" IDEMPROXY_REQUIRE_PG=1
echo "test: PostgreSQL at $IDEMPROXY_TEST_DSN"

passed=0
failed=0
status=0

echo "== unit and store tests (ctest)"
if ctest --test-dir build --output-on-failure -j2 2>&1 | tee "$WORK/ctest.log"; then :; else status=1; fi
total=$(grep -oE 'tests failed out of [0-9]+' "$WORK/ctest.log" | grep -oE '[0-9]+$' || echo 0)
bad=$(grep -oE '[0-9]+ tests failed' "$WORK/ctest.log" | grep -oE '^[0-9]+' || echo 0)
passed=$((passed + total - bad))
failed=$((failed + bad))

echo "== end-to-end tests (pytest)"
if /usr/bin/python3 -m pytest tests/e2e -q -p no:cacheprovider 2>&1 | tee "$WORK/pytest.log"; then :; else status=1; fi
line=$(grep -E '(passed|failed|error)' "$WORK/pytest.log" | tail -1)
p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)
for n in $(echo "$line" | grep -oE '[0-9]+ (failed|errors?)' | grep -oE '^[0-9]+'); do
  failed=$((failed + n))
done
passed=$((passed + p))

echo "== run-local smoke test (the first README command)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
if PROXY_PORT=$(free_port) ADMIN_PORT=$(free_port) UPSTREAM_PORT=$(free_port) RUN_DIR="$WORK/local" \
   bash scripts/run-local.sh --smoke >"$WORK/smoke.log" 2>&1; then
  tail -1 "$WORK/smoke.log"
  passed=$((passed + 1))
else
  cat "$WORK/smoke.log"
  failed=$((failed + 1))
  status=1
fi

if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo "test: $passed passed, $failed failed"
exit "$status"

#!/usr/bin/env bash
# The first README command. Installs what is missing, builds idemproxy (the binary
# alone, not the tests), starts a private PostgreSQL, a demo upstream and idemproxy in
# front of it, and prints curl lines to try. Ctrl-C stops everything.
#
#   scripts/run-local.sh            run until Ctrl-C
#   scripts/run-local.sh --smoke    run the curl lines itself, check them, and stop
#
# Ports: PROXY_PORT (8080), ADMIN_PORT (9090), UPSTREAM_PORT (3000).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SMOKE=false
[ "${1:-}" = "--smoke" ] && SMOKE=true

PROXY_PORT=${PROXY_PORT:-8080}
ADMIN_PORT=${ADMIN_PORT:-9090}
UPSTREAM_PORT=${UPSTREAM_PORT:-3000}
RUN_DIR=${RUN_DIR:-${TMPDIR:-/tmp}/idemproxy-local-$(id -u)}

bash scripts/install-deps.sh run
BUILD_TARGETS=idemproxy bash scripts/build.sh
echo "run-local: installed and built in $SECONDS s"

for port in "$PROXY_PORT" "$ADMIN_PORT" "$UPSTREAM_PORT"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "run-local: port $port is in use; choose others with PROXY_PORT, ADMIN_PORT, UPSTREAM_PORT" >&2
    exit 1
  fi
done

mkdir -p "$RUN_DIR"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  bash "$ROOT/scripts/pg.sh" stop "$RUN_DIR/pg" || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "run-local: starting PostgreSQL in $RUN_DIR/pg"
IDEMPROXY_PG_DSN=$(bash scripts/pg.sh start "$RUN_DIR/pg")
export IDEMPROXY_PG_DSN
export IDEMPROXY_LISTEN="127.0.0.1:$PROXY_PORT"
export IDEMPROXY_ADMIN_LISTEN="127.0.0.1:$ADMIN_PORT"
export IDEMPROXY_UPSTREAM="http://127.0.0.1:$UPSTREAM_PORT"

python3 scripts/demo_upstream.py "$UPSTREAM_PORT" 2>"$RUN_DIR/upstream.log" &
pids+=($!)
# Process substitution, not a pipe: $! must be idemproxy itself, not tee.
build/idemproxy serve --config config/idemproxy.yaml > >(tee "$RUN_DIR/idemproxy.log") 2>&1 &
pids+=($!)

for _ in $(seq 1 100); do
  if curl -fs "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1 &&
     curl -fs "http://127.0.0.1:$UPSTREAM_PORT/status" >/dev/null 2>&1; then
    break
  fi
  sleep 0.1
done
curl -fs "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null || { echo "run-local: idemproxy did not start" >&2; exit 1; }

P="http://127.0.0.1:$PROXY_PORT"
KEY="order-$(date +%s)"
cat <<EOT

idemproxy is running on $P in front of the demo API on $IDEMPROXY_UPSTREAM
(PostgreSQL: $IDEMPROXY_PG_DSN). Try:

  # 1. Create an order. The upstream executes it.
  curl -i -X POST $P/v1/orders -H 'Idempotency-Key: $KEY' -H 'Content-Type: application/json' -d '{"amount": 42}'

  # 2. Retry it. Same answer, replayed: "Idempotent-Replayed: true", no second order.
  curl -i -X POST $P/v1/orders -H 'Idempotency-Key: $KEY' -H 'Content-Type: application/json' -d '{ "amount" : 42 }'

  # 3. Reuse the key for another body: 422 problem+json.
  curl -i -X POST $P/v1/orders -H 'Idempotency-Key: $KEY' -H 'Content-Type: application/json' -d '{"amount": 99}'

  # 4. Forget the key on this route: 400 problem+json.
  curl -i -X POST $P/v1/orders -H 'Content-Type: application/json' -d '{"amount": 42}'

  # 5. The same retry over HTTP/2 (h2c, prior knowledge): replayed too.
  curl -i --http2-prior-knowledge -X POST $P/v1/orders -H 'Idempotency-Key: $KEY' -H 'Content-Type: application/json' -d '{"amount": 42}'

  # The upstream's own view: only one order was created.
  curl -s $IDEMPROXY_UPSTREAM/v1/orders
  # Metrics and the stored record:
  curl -s http://127.0.0.1:$ADMIN_PORT/metrics
  IDEMPROXY_PG_DSN='$IDEMPROXY_PG_DSN' build/idemproxy keys show --config config/idemproxy.yaml --key $KEY

EOT

if ! $SMOKE; then
  echo "Press Ctrl-C to stop."
  wait
  exit 0
fi

# --smoke: run the lines above and check what a user would see.
post() { curl -s -D "$RUN_DIR/headers" -o "$RUN_DIR/body" -w '%{http_code}' -X POST "$P/v1/orders" \
  -H 'Content-Type: application/json' "$@"; }
fail() { echo "run-local smoke: $*" >&2; exit 1; }
[ "$(post -H "Idempotency-Key: $KEY" -d '{"amount": 42}')" = 201 ] || fail "first POST was not 201"
first=$(cat "$RUN_DIR/body")
[ "$(post -H "Idempotency-Key: $KEY" -d '{ "amount" : 42 }')" = 201 ] || fail "retry was not 201"
grep -qi '^Idempotent-Replayed: true' "$RUN_DIR/headers" || fail "retry was not marked replayed"
[ "$(cat "$RUN_DIR/body")" = "$first" ] || fail "replayed body differs"
[ "$(post -H "Idempotency-Key: $KEY" -d '{"amount": 99}')" = 422 ] || fail "key reuse was not 422"
[ "$(post -d '{"amount": 42}')" = 400 ] || fail "missing key was not 400"
[ "$(post --http2-prior-knowledge -H "Idempotency-Key: $KEY" -d '{"amount": 42}')" = 201 ] ||
  fail "the HTTP/2 retry was not 201"
grep -q '^HTTP/2 ' "$RUN_DIR/headers" || fail "the HTTP/2 retry was not answered over HTTP/2"
grep -qi '^idempotent-replayed: true' "$RUN_DIR/headers" || fail "the HTTP/2 retry was not replayed"
orders=$(curl -s "$IDEMPROXY_UPSTREAM/v1/orders" | grep -c '"id"')
[ "$orders" = 1 ] || fail "the upstream created $orders orders, expected 1"
echo "run-local smoke: ok in $SECONDS s (1 execution, replay identical over HTTP/1.1 and HTTP/2, 422 and 400 as documented)"

# shellcheck shell=bash disable=SC2034
# Sourced by bench/gc_throughput.sh and bench/gc_chunks.sh: a private PostgreSQL in
# a work directory removed on exit, a config naming it ($WORK/config.yaml), the
# schema applied by the binary $GC_BIN, and PSQL to run statements on it.
WORK=$(mktemp -d "/tmp/idemproxy-${GC_WORK_NAME:-gc}.XXXXXX")
chmod 755 "$WORK"
trap 'bash scripts/pg.sh stop "$WORK/pg"; rm -rf "$WORK"' EXIT
DSN=$(bash scripts/pg.sh start "$WORK/pg")
cat >"$WORK/config.yaml" <<EOC
upstream: {url: "http://127.0.0.1:9"}
store: {postgres: {dsn: "$DSN"}}
routes: [{name: orders, path_prefix: /v1/orders}]
EOC
"$GC_BIN" migrate --config "$WORK/config.yaml" >/dev/null
PSQL=(psql "$DSN" -qAt -v ON_ERROR_STOP=1)

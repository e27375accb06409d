"""The fault ledgers with streamed answers (issue 44): idemproxy killed with kill -9,
PostgreSQL stopped and started, and PostgreSQL frozen, each while clients read
answers of 600,000 bytes that the upstream streams in 64 KiB pieces (stored in three
chunks). The ledger (conftest.py) counts a key executed more than once, and a
response lost or mismatched: a client given a whole 2xx that is not its key's bytes,
or a retry afterwards that does not replay exactly the bytes a client was given. A
client whose stream was cut gets an error (HTTP/1.1 closed short, HTTP/2
RST_STREAM), never a short body taken as whole."""
import signal
import time

from harness import SHORT_STATEMENTS, Load, big_body, restarted_under, settle

SIZE = 600_000
PATH = "/v1/big?bytes=%d&chunked=1&gap_ms=40" % SIZE  # ten 64 KiB pieces, 40 ms apart
ROUTE = {"name": "orders", "path_prefix": "/v1", "key_required": True, "lease": "2s"}


def whole(r):
    return r is not None and 200 <= r.status < 300 and r.reset is None


def check(ledger, upstream, key, delivered, final):
    """The ledger's two figures for one key of a streamed answer."""
    ledger.keys += 1
    executions = upstream.executions.count(key=key)
    if executions > 1:
        ledger.executed_twice.append(key)
    given = [r for r in delivered if whole(r)]
    problems = []
    if any(r.body != big_body(key, 1, SIZE) for r in given):
        problems.append("a 2xx that is not the key's first execution's bytes, whole")
    if given and executions == 0:
        problems.append("a 2xx without an execution")
    if given and not (whole(final) and final.body == given[0].body
                      and final.header("Idempotent-Replayed") == "true"):
        problems.append("the retry got %s, not the streamed answer replayed"
                        % (final.status if final is not None else None))
    if whole(final) and final.body != big_body(key, max(executions, 1), SIZE):
        problems.append("the retry's 2xx is not the key's bytes, whole")
    if problems:
        ledger.lost_or_mismatched.append((key, problems))


def settle_all(ledger, upstream, p, delivered):
    assert delivered, "the load never ran"
    for k, r in delivered.items():
        check(ledger, upstream, k, [r], settle(p, k, PATH, timeout=20))


def test_kill_9_mid_stream_under_load(make_proxy, upstream, key, ledger):
    p = make_proxy(store=SHORT_STATEMENTS, routes=[ROUTE])
    load = Load(p, key, PATH, clients=4)
    time.sleep(1.2)
    p.kill()
    delivered = load.stop()
    p.start()
    time.sleep(2.1)  # the leases of the streams the kill cut run out
    assert any(r is None for r in delivered.values())  # the kill cut streams
    assert any(whole(r) for r in delivered.values())
    settle_all(ledger, upstream, p, delivered)


def test_postgres_stopped_and_restarted_mid_stream_under_load(make_proxy, upstream, pg, key,
                                                              ledger):
    p = make_proxy(store=SHORT_STATEMENTS, routes=[ROUTE])
    delivered = restarted_under(pg, Load(p, key, PATH, clients=4, backoff=0.1))
    statuses = [r.status for r in delivered.values() if r is not None]
    assert 503 in statuses and 200 in statuses  # the outage was real, and so was recovery
    for k, r in delivered.items():
        if r is not None and r.status == 503:
            assert upstream.executions.count(key=k) == 0  # fail_closed never forwards
    settle_all(ledger, upstream, p, delivered)
    # Streams the outage caught went on, their chunks held, and were stored afterwards.
    log = p.read_log()
    assert "its chunks are held until the store takes them" in log
    assert "a delayed completion was written (ok)" in log


def test_postgres_frozen_mid_stream_under_load(make_proxy, upstream, pg, key, ledger):
    # SIGSTOP on every PostgreSQL process: statements hang instead of failing at once,
    # as on a database host that stalls. The streams caught in it stall with it (their
    # appends wait), then go on.
    p = make_proxy(store=SHORT_STATEMENTS, routes=[ROUTE])
    load = Load(p, key, PATH, clients=4, backoff=0.1)
    time.sleep(1.0)
    pg.signal_all(signal.SIGSTOP)
    try:
        time.sleep(1.5)
    finally:
        pg.signal_all(signal.SIGCONT)
    time.sleep(1.5)
    delivered = load.stop()
    assert any(whole(r) for r in delivered.values())
    settle_all(ledger, upstream, p, delivered)

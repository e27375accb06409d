"""Fault injection against real processes: idemproxy killed mid-request, PostgreSQL
stopped under load, upstreams that hang or reset, several instances, PgBouncer,
expiry and GC, SIGTERM under load. Every case feeds the ledger (conftest.py), which
reports requests executed more than once and responses lost or mismatched."""
import json
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from harness import (CuttingRelay, Load, post_in_background, problem, restarted_under, settle,
                     wait_for, wait_for_execution, SHORT_STATEMENTS)


def test_kill_9_mid_request_then_retry_is_told_the_outcome_is_unknown(make_proxy, upstream, key,
                                                                      ledger):
    # The lease outlives a restart under a sanitizer (which can take over a second),
    # so the first retry still finds it running.
    p = make_proxy(defaults={"lease": "3s"}, store=SHORT_STATEMENTS)
    results = {}
    t = post_in_background(p, "/v1/orders?delay_ms=1500", key, results)
    wait_for_execution(upstream, key)
    p.kill()
    t.join()
    assert isinstance(results[key], Exception)  # the client lost its connection
    p.start()
    during = p.post("/v1/orders?delay_ms=1500", "{}", key=key)
    assert during.status == 409 and problem(during)["type"].endswith("/request-in-flight")
    time.sleep(3.1)
    after = p.post("/v1/orders?delay_ms=1500", "{}", key=key)
    assert after.status == 409 and problem(after)["type"].endswith("/outcome-unknown")
    assert json.loads(p.cli("keys", "show", "--key", key).stdout)["stale"] is True
    ledger.check(upstream, key, [during, after], after)
    # An operator who checked the order decides it may run again.
    assert p.cli("keys", "resolve", "--key", key).returncode == 0
    assert p.post("/v1/orders", "{}", key=key + "-x").status == 201
    assert p.post("/v1/orders?delay_ms=1", "{}", key=key).status == 201


def test_kill_9_with_retake_executes_again_under_a_new_token(make_proxy, upstream, key):
    p = make_proxy(defaults={"lease": "1s", "on_stale": "retake"}, store=SHORT_STATEMENTS)
    results = {}
    t = post_in_background(p, "/v1/orders?delay_ms=1500", key, results)
    wait_for_execution(upstream, key)
    token = json.loads(p.cli("keys", "show", "--key", key).stdout)["fencing_token"]
    p.kill()
    t.join()
    p.start()
    time.sleep(1.1)
    retry = p.post("/v1/orders?delay_ms=1500", "{}", key=key)
    assert retry.status == 201 and retry.header("Idempotent-Replayed") is None
    record = json.loads(p.cli("keys", "show", "--key", key).stdout)
    assert record["state"] == "completed" and record["fencing_token"] != token
    assert upstream.executions.count(key=key) == 2  # retake: the upstream dedupes on the key
    assert p.post("/v1/orders?delay_ms=1500", "{}", key=key).body == retry.body


def test_late_completion_from_the_old_holder_never_overwrites_the_new_one(make_proxy, upstream,
                                                                         key, pg):
    config = {"defaults": {"lease": "1s", "on_stale": "retake"}, "store": SHORT_STATEMENTS}
    slow, fast = make_proxy(**config), make_proxy(**config)
    results = {}
    t = post_in_background(slow, "/v1/orders?delay_ms=2500", key, results)
    wait_for_execution(upstream, key)
    # A live holder renews its lease while it waits; one that is frozen (a long GC
    # pause, a stopped VM) cannot, and its lease runs out while it still holds a
    # request in flight.
    slow.signal(signal.SIGSTOP)
    time.sleep(1.2)
    taken_over = fast.post("/v1/orders?delay_ms=2500", "{}", key=key)
    assert taken_over.status == 201
    slow.signal(signal.SIGCONT)
    t.join()
    assert results[key].status == 201  # the old holder's client still gets its answer...
    replay = fast.post("/v1/orders?delay_ms=2500", "{}", key=key)
    assert replay.body == taken_over.body  # ...but the record keeps the new holder's
    assert "fenced" in slow.read_log() or "taken over" in slow.read_log()


def test_upstream_that_hangs_leaves_an_indeterminate_record(make_proxy, upstream, key, ledger):
    p = make_proxy()
    text = open(p.config_path).read().replace('"timeout": "10s"', '"timeout": "1s"')
    p.write_config(text)
    p.stop()
    p.start()
    first = p.post("/v1/orders?delay_ms=2500", "{}", key=key)
    assert first.status == 504 and problem(first)["type"].endswith("/upstream-timeout")
    assert json.loads(p.cli("keys", "show", "--key", key).stdout)["state"] == "indeterminate"
    retry = p.post("/v1/orders?delay_ms=2500", "{}", key=key)
    assert retry.status == 409 and problem(retry)["type"].endswith("/outcome-indeterminate")
    ledger.check(upstream, key, [first, retry], retry)


def test_upstream_reset_after_reading_leaves_an_indeterminate_record(proxy, upstream, key, ledger):
    first = proxy.post("/v1/reset-after-read", "{}", key=key)
    assert first.status == 502 and problem(first)["type"].endswith("/upstream-failed")
    retry = proxy.post("/v1/reset-after-read", "{}", key=key)
    assert retry.status == 409 and problem(retry)["type"].endswith("/outcome-indeterminate")
    ledger.check(upstream, key, [first, retry], retry)


def test_completion_is_retried_until_the_store_returns(make_proxy, upstream, pg, key, ledger):
    p = make_proxy()
    results = {}
    t = post_in_background(p, "/v1/orders?delay_ms=1000", key, results)
    wait_for_execution(upstream, key)
    pg.stop()
    try:
        t.join()
        assert results[key].status == 201  # the client gets its answer while the store is down
    finally:
        pg.start()
    final = settle(p, key, "/v1/orders?delay_ms=1000")
    assert final.header("Idempotent-Replayed") == "true"
    ledger.check(upstream, key, [results[key]], final)


def claim_statement(pg):
    # On plain PostgreSQL a request's claim goes in a batch sent on the I/O thread's
    # event loop (src/store/pg/group_commit_reactor.cpp), prepared under a name of its
    # own, or, when the pool has no idle connection for the loop, on a runner as the
    # single claim. A lost answer is sent again as the single claim, which finds the
    # row by its nonce.
    if pg.citus:
        return "idemproxy_claim_routed"
    return ["idemproxy_claim_many_reactor", "idemproxy_claim"]


def test_a_claim_whose_answer_is_lost_is_sent_again_and_found_by_its_nonce(make_proxy, upstream,
                                                                           pg, key, ledger):
    """The claim commits and its connection breaks before the answer arrives (a
    network cut, a primary that dies just after its standby confirmed). The store sends
    the claim again on a new connection, which finds the row by the claim's nonce and
    takes it: the request executes now, instead of meeting its own claim as a
    concurrent request (409) until the lease runs out."""
    relay = CuttingRelay(pg.port)
    try:
        p = make_proxy(store={"postgres": {"dsn": relay.dsn(), "pool_size": 1}})
        relay.cut(claim_statement(pg))
        first = p.post("/v1/orders", "{}", key=key)
        assert relay.cuts == 1  # the claim committed, and its answer was lost
        assert first.status == 201, first.body
        assert upstream.executions.count(key=key) == 1
        final = p.post("/v1/orders", "{}", key=key)
        assert final.header("Idempotent-Replayed") == "true"
        ledger.check(upstream, key, [first], final)
    finally:
        relay.close()


def test_a_claim_that_stays_unanswered_is_withdrawn_so_its_retry_executes(make_proxy, upstream, pg,
                                                                         key, ledger):
    """As above, and the database stays away long enough that sending the claim again
    fails too: the request gets 503 and never reaches the upstream, while its claim sits
    committed in the table. Once the database answers, the store withdraws that claim
    by its nonce before anything else, so the client's retry executes, once."""
    relay = CuttingRelay(pg.port)
    try:
        p = make_proxy(store={"postgres": {"dsn": relay.dsn(), "pool_size": 1}})
        relay.cut(claim_statement(pg), refuse=True)
        first = p.post("/v1/orders", "{}", key=key)
        assert relay.cuts == 1
        assert first.status == 503, first.body
        assert upstream.executions.count(key=key) == 0
        state = pg.sql("SELECT state FROM idempotency_records WHERE key = '%s'" % key)
        if pg.citus:
            # On Citus a claim is a transaction (BEGIN, SET LOCAL synchronous_commit, the
            # INSERT, COMMIT: docs/SCALING.md, "Shard moves"), and the cut answer was the
            # INSERT's: COMMIT was never sent, so nothing committed. The withdrawal stays
            # owed (the proxy cannot know) and finds nothing to withdraw.
            assert state == ""
        else:
            # The claim did commit: without its withdrawal, the retry meets it for 30 s.
            assert state == "in_flight"
        assert p.metric("idemproxy_db_withdrawals_pending") == 1
        relay.admit()
        retry = p.post("/v1/orders", "{}", key=key)
        assert retry.status == 201, retry.body
        assert upstream.executions.count(key=key) == 1
        if not pg.citus:
            assert p.metric("idemproxy_db_withdrawals_total") == 1
            assert p.metric("idemproxy_db_withdrawals_pending") == 0
        final = p.post("/v1/orders", "{}", key=key)
        assert final.header("Idempotent-Replayed") == "true"
        ledger.check(upstream, key, [first, retry], final)
    finally:
        relay.close()


def test_postgres_stopped_and_restarted_under_load(make_proxy, upstream, pg, key, ledger):
    p = make_proxy()
    delivered = restarted_under(pg, Load(p, key, "/v1/orders?delay_ms=50", clients=6))
    statuses = [r.status for r in delivered.values() if r is not None]
    assert 503 in statuses and 201 in statuses  # the outage was real, and so was recovery
    assert set(statuses) <= {201, 503}
    for k, r in delivered.items():
        if r is not None and r.status == 503:
            assert upstream.executions.count(key=k) == 0  # fail_closed never forwards
        final = settle(p, k, "/v1/orders?delay_ms=50") if r is not None and r.status == 201 else None
        ledger.check(upstream, k, [r], final)


def test_three_instances_with_a_64_way_storm(make_proxy, upstream, key, ledger):
    proxies = [make_proxy(defaults={"on_concurrent": "wait"}) for _ in range(3)]
    barrier = threading.Barrier(64)

    def one(i):
        barrier.wait()
        return proxies[i % 3].post("/v1/orders?delay_ms=300", "{}", key=key)

    with ThreadPoolExecutor(max_workers=64) as pool:
        responses = list(pool.map(one, range(64)))
    assert [r.status for r in responses] == [201] * 64
    ledger.check(upstream, key, responses,
                 proxies[0].post("/v1/orders?delay_ms=300", "{}", key=key))


def test_many_instances_through_pgbouncer_transaction_pooling(make_proxy, pgbouncer, upstream,
                                                            key, ledger):
    store = {"postgres": {"dsn": pgbouncer.dsn, "pool_size": 4, "transaction_pooling": True}}
    proxies = [make_proxy(store=store) for _ in range(2)]
    barrier = threading.Barrier(64)

    def one(i):
        barrier.wait()
        return proxies[i % 2].post("/v1/orders?delay_ms=300", "{}", key=key)

    with ThreadPoolExecutor(max_workers=64) as pool:
        responses = list(pool.map(one, range(64)))
    assert set(r.status for r in responses) <= {201, 409}
    final = proxies[1].post("/v1/orders?delay_ms=300", "{}", key=key)
    assert final.header("Idempotent-Replayed") == "true"
    ledger.check(upstream, key, responses, final)
    # distinct keys keep flowing through the pooler, on both instances
    for i in range(20):
        k = "%s-%d" % (key, i)
        first = proxies[i % 2].post("/v1/orders", "{}", key=k)
        again = proxies[(i + 1) % 2].post("/v1/orders", "{}", key=k)
        ledger.check(upstream, k, [first], again)


def test_a_streamed_answer_in_chunks_is_replayed_through_pgbouncer_transaction_pooling(
        make_proxy, pgbouncer, upstream, pg, key):
    # The chunks are read back in binary through libpq itself (store/pg/binary_rows.hpp),
    # as unnamed statements: through a transaction-pooling PgBouncer too, on another
    # instance than the one that stored them.
    store = {"postgres": {"dsn": pgbouncer.dsn, "pool_size": 4, "transaction_pooling": True}}
    stored_by, replayed_by = make_proxy(store=store), make_proxy(store=store)
    size = 3 << 20
    first = stored_by.post("/v1/big?bytes=%d&chunked=1" % size, "{}", key=key, timeout=60)
    assert first.status == 200 and len(first.body) == size
    assert pg.sql("SELECT chunks FROM idempotency_records WHERE key = '%s'" % key) == "12"
    for proxy in (replayed_by, stored_by):
        again = proxy.post("/v1/big?bytes=%d&chunked=1" % size, "{}", key=key, timeout=60)
        assert again.status == 200
        assert again.header("Idempotent-Replayed") == "true"
        assert again.body == first.body
    assert upstream.executions.count(key=key) == 1


def test_expired_records_are_deleted_by_in_process_gc(make_proxy, pg, key):
    p = make_proxy(defaults={"ttl": "1s"}, gc={"interval": "300ms", "batch_size": 2})
    for i in range(5):
        p.post("/v1/orders", "{}", key="%s-%d" % (key, i))
    deadline = time.time() + 10
    while time.time() < deadline and pg.sql(
            "SELECT count(*) FROM idempotency_records WHERE key LIKE '%s-%%'" % key) != "0":
        time.sleep(0.2)
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE key LIKE '%s-%%'" % key) == "0"
    # GC counts its deletions after the rows are gone (src/server/store_upkeep.cpp).
    assert wait_for(lambda: p.metric("idemproxy_gc_deleted_total") >= 5)


def test_gc_runs_on_one_instance_at_a_time(make_proxy, pg, key):
    p = make_proxy(defaults={"ttl": "1s"})
    p.post("/v1/orders", "{}", key=key)
    time.sleep(1.1)
    # Another instance's GC holds the lock: this one deletes nothing meanwhile.
    holder = subprocess.Popen(["psql", pg.dsn, "-qAt", "-c",
                               "BEGIN; SELECT pg_advisory_xact_lock(484558602); "
                               "SELECT pg_sleep(2); COMMIT;"], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    blocked = p.cli("gc")
    assert blocked.returncode == 0 and blocked.stdout.startswith("deleted 0 ")
    holder.wait()
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE key = '%s'" % key) == "1"
    assert int(p.cli("gc").stdout.split()[1]) >= 1
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE key = '%s'" % key) == "0"


def test_sigterm_during_load_completes_in_flight_requests(make_proxy, upstream, key, ledger):
    p = make_proxy()
    load = Load(p, key, "/v1/orders?delay_ms=200", clients=12)
    time.sleep(1.0)
    p.signal(signal.SIGTERM)
    assert p.proc.wait(timeout=10) == 0
    delivered = load.stop()
    assert "received SIGTERM" in p.read_log()
    p.start()  # a fresh instance replays what the drained one completed
    for k, r in delivered.items():
        if r is None:
            assert upstream.executions.count(key=k) == 0  # dropped before it was forwarded
            continue
        assert r.status == 201, (k, r.status, r.body)
        ledger.check(upstream, k, [r], p.post("/v1/orders?delay_ms=200", "{}", key=k))


def test_requests_still_running_at_the_drain_timeout_are_left_to_their_lease(make_proxy, upstream,
                                                                             key, ledger):
    p = make_proxy(server={"drain_timeout": "1s"}, defaults={"lease": "2s"},
                   store=SHORT_STATEMENTS)
    results = {}
    t = post_in_background(p, "/v1/orders?delay_ms=4000", key, results)
    wait_for_execution(upstream, key)
    started = time.time()
    p.signal(signal.SIGTERM)
    assert p.proc.wait(timeout=10) == 0
    assert time.time() - started < 3  # bounded by the drain timeout, not by the request
    t.join()
    assert isinstance(results[key], Exception)
    assert "drain timeout" in p.read_log()
    p.start()
    record = json.loads(p.cli("keys", "show", "--key", key).stdout)
    assert record["state"] == "in_flight"
    time.sleep(2.1)
    retry = p.post("/v1/orders?delay_ms=4000", "{}", key=key)
    assert retry.status == 409 and problem(retry)["type"].endswith("/outcome-unknown")
    ledger.check(upstream, key, [retry], retry)

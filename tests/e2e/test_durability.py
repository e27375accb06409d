"""Records survive restarts of idemproxy and of PostgreSQL; expired ones are not replayed."""
import json
import time


def test_replay_after_idemproxy_restart(make_proxy, upstream, key):
    p = make_proxy()
    first = p.post("/v1/orders", '{"amount": 7}', key=key)
    assert p.stop() == 0
    p.start()
    again = p.post("/v1/orders", '{"amount": 7}', key=key)
    assert again.header("Idempotent-Replayed") == "true"
    assert again.body == first.body
    assert upstream.executions.count(key=key) == 1


def test_replay_is_served_by_another_instance_on_the_same_database(make_proxy, upstream, key):
    a, b = make_proxy(), make_proxy()
    first = a.post("/v1/orders", '{"amount": 7}', key=key)
    again = b.post("/v1/orders", '{"amount": 7}', key=key)
    assert again.header("Idempotent-Replayed") == "true" and again.body == first.body
    assert upstream.executions.count(key=key) == 1


def test_large_response_is_replayed_byte_for_byte(proxy, upstream, key):
    size = 512 * 1024
    first = proxy.post("/v1/big?bytes=%d" % size, "{}", key=key)
    assert first.status == 200 and len(first.body) == size
    again = proxy.post("/v1/big?bytes=%d" % size, "{}", key=key)
    assert again.header("Idempotent-Replayed") == "true"
    assert again.body == first.body
    assert int(again.header("Content-Length")) == size
    assert upstream.executions.count(key=key) == 1


def test_set_cookie_is_not_replayed(proxy, key):
    first = proxy.post("/v1/orders", "{}", key=key)
    assert first.header("Set-Cookie", ) is not None  # the first caller gets it
    again = proxy.post("/v1/orders", "{}", key=key)
    assert "set-cookie" not in again.header_names()
    assert again.header("X-Upstream-Execution") == first.header("X-Upstream-Execution")


def test_expired_record_is_never_replayed(make_proxy, upstream, key):
    p = make_proxy(defaults={"ttl": "1s"})
    first = p.post("/v1/orders", "{}", key=key)
    assert p.post("/v1/orders", "{}", key=key).header("Idempotent-Replayed") == "true"
    time.sleep(1.2)
    fresh = p.post("/v1/orders", '{"other": "body is fine once expired"}', key=key)
    assert fresh.status == 201 and fresh.header("Idempotent-Replayed") is None
    assert fresh.body != first.body
    assert upstream.executions.count(key=key) == 2


def test_gc_deletes_expired_records(make_proxy, pg, key):
    p = make_proxy(defaults={"ttl": "1s"})
    p.post("/v1/orders", "{}", key=key)
    time.sleep(1.2)
    out = p.cli("gc")
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[1]) >= 1
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE key = '%s'" % key) == "0"


def test_postgres_restart_fails_closed_then_recovers_without_restart(make_proxy, upstream, pg, key):
    p = make_proxy()
    assert p.post("/v1/orders", "{}", key=key + "-before").status == 201
    pg.stop()
    try:
        down = p.post("/v1/orders", "{}", key=key)
        assert down.status == 503 and down.header("Retry-After")
        assert p.admin("/readyz").status == 503
    finally:
        pg.start()
    deadline = time.time() + 10
    while p.admin("/readyz").status != 200 and time.time() < deadline:
        time.sleep(0.1)
    assert p.admin("/readyz").status == 200
    up = p.post("/v1/orders", "{}", key=key)
    assert up.status == 201 and up.header("Idempotent-Replayed") is None
    # The record written before the restart still replays.
    before = p.post("/v1/orders", "{}", key=key + "-before")
    assert before.header("Idempotent-Replayed") == "true"
    assert upstream.executions.count(key=key) == 1
    assert upstream.executions.count(key=key + "-before") == 1


def test_scopes_never_see_each_others_records(make_proxy, upstream, key):
    p = make_proxy(defaults={"scope_header": "X-Tenant-Id"})
    a = p.post("/v1/orders", '{"amount": 1}', key=key, headers={"X-Tenant-Id": "tenant-a"})
    b = p.post("/v1/orders", '{"amount": 2}', key=key, headers={"X-Tenant-Id": "tenant-b"})
    assert a.status == b.status == 201 and b.header("Idempotent-Replayed") is None
    a2 = p.post("/v1/orders", '{"amount": 1}', key=key, headers={"X-Tenant-Id": "tenant-a"})
    b2 = p.post("/v1/orders", '{"amount": 2}', key=key, headers={"X-Tenant-Id": "tenant-b"})
    assert a2.body == a.body and b2.body == b.body and a.body != b.body
    assert upstream.executions.count(key=key) == 2
    shown = json.loads(p.cli("keys", "show", "--key", key, "--scope", "tenant-b").stdout)
    assert shown["scope"] == "tenant-b"


def test_quoted_and_bare_key_are_the_same_key(proxy, upstream, key):
    first = proxy.post("/v1/orders", "{}", key=key)
    again = proxy.post("/v1/orders", "{}", key='"%s"' % key)
    assert again.header("Idempotent-Replayed") == "true" and again.body == first.body
    assert upstream.executions.count(key=key) == 1

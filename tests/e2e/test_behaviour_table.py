"""One test per row of the behaviour table in SPEC.md, against the real binary,
real PostgreSQL and a fake upstream that counts executions."""
import json

from harness import free_port, post_in_background, problem, wait_for_execution


def test_route_or_method_not_covered_is_forwarded_unchanged(proxy, upstream, key):
    for _ in range(2):
        r = proxy.request("GET", "/v1/things?x=1", headers={"Idempotency-Key": key})
        assert r.status == 201 and r.header("Idempotent-Replayed") is None
    assert upstream.executions.count(path="/v1/things", key=key) == 2
    for _ in range(2):  # a path no route covers
        r = proxy.post("/elsewhere", key=key)
        assert r.status == 201 and r.header("Idempotent-Replayed") is None
    assert upstream.executions.count(path="/elsewhere", key=key) == 2


def test_no_key_without_key_required_is_forwarded_and_nothing_is_stored(make_proxy, upstream, pg):
    p = make_proxy(routes=[{"name": "optional", "path_prefix": "/v1/optional"}])
    before = pg.sql("SELECT count(*) FROM idempotency_records WHERE route = 'optional'")
    for _ in range(2):
        r = p.post("/v1/optional", '{"a": 1}')
        assert r.status == 201 and r.header("Idempotent-Replayed") is None
    assert upstream.executions.count(path="/v1/optional", key=None) == 2
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE route = 'optional'") == before


def test_no_key_with_key_required_is_400_and_not_forwarded(proxy, upstream):
    before = upstream.executions.count(path="/v1/required")
    r = proxy.post("/v1/required", '{"a": 1}')
    assert r.status == 400
    assert problem(r)["type"].endswith("/missing-key")
    assert upstream.executions.count(path="/v1/required") == before


def test_bad_keys_are_400_and_not_forwarded(proxy, upstream, pg):
    bad = ["", "k" * 256, '"unterminated', "caf\u00e9".encode().decode("latin-1"), '"a\\nb"']
    for value in bad:
        r = proxy.post("/v1/badkey", key=value)
        assert r.status == 400, value
        assert problem(r)["type"].endswith("/bad-key")
    assert upstream.executions.count(path="/v1/badkey") == 0
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE target = '/v1/badkey'") == "0"


def test_first_request_is_forwarded_once_and_stored(proxy, upstream, key):
    r = proxy.post("/v1/orders", '{"amount": 10}', key=key)
    assert r.status == 201
    assert r.header("Idempotent-Replayed") is None
    assert upstream.executions.count(key=key) == 1
    shown = proxy.cli("keys", "show", "--key", key)
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert record["state"] == "completed"
    assert record["response"]["status"] == 201


def test_completed_key_replays_status_headers_and_body(proxy, upstream, key):
    first = proxy.post("/v1/orders", '{"amount": 10, "currency": "EUR"}', key=key)
    again = proxy.post("/v1/orders", '{ "currency" : "EUR",\n "amount": 10 }', key=key)
    assert upstream.executions.count(key=key) == 1
    assert again.status == first.status == 201
    assert again.body == first.body
    assert again.header("Idempotent-Replayed") == "true"
    for name in ("Content-Type", "X-Upstream-Execution", "Cache-Control", "Date", "Server"):
        assert again.header(name) == first.header(name), name


def test_same_key_other_request_is_422_and_not_forwarded(proxy, upstream, key):
    assert proxy.post("/v1/orders", '{"amount": 10}', key=key).status == 201
    for other in [lambda: proxy.post("/v1/orders", '{"amount": 11}', key=key),
                  lambda: proxy.post("/v1/orders?dry_run=1", '{"amount": 10}', key=key),
                  lambda: proxy.post("/v1/refunds", '{"amount": 10}', key=key),
                  lambda: proxy.request("PATCH", "/v1/orders", '{"amount": 10}',
                                        {"Idempotency-Key": key})]:
        r = other()
        assert r.status == 422
        assert problem(r)["type"].endswith("/key-mismatch")
    assert upstream.executions.count(key=key) == 1


def test_same_key_in_flight_is_409_with_retry_after(proxy, upstream, key):
    slow = post_in_background(proxy, "/v1/orders?delay_ms=800", key, {})
    wait_for_execution(upstream, key)
    r = proxy.post("/v1/orders?delay_ms=800", "{}", key=key)
    slow.join()
    assert r.status == 409
    assert problem(r)["type"].endswith("/request-in-flight")
    assert r.header("Retry-After") == "1"
    assert upstream.executions.count(key=key) == 1


def test_same_key_in_flight_with_wait_gets_the_first_response(make_proxy, upstream, key):
    p = make_proxy(defaults={"on_concurrent": "wait"})
    results = {}
    first = post_in_background(p, "/v1/orders?delay_ms=500", key, results)
    wait_for_execution(upstream, key)
    second = p.post("/v1/orders?delay_ms=500", "{}", key=key)
    first.join()
    assert results[key].status == second.status == 201
    assert second.body == results[key].body
    assert second.header("Idempotent-Replayed") == "true"
    assert upstream.executions.count(key=key) == 1


def test_unstorable_status_is_passed_through_and_the_retry_executes(proxy, upstream, key):
    for status, path in [(500, "/v1/flaky"), (503, "/v1/flaky"), (429, "/v1/limited"),
                         (409, "/v1/conflicted")]:
        k = "%s-%d" % (key, status)
        first = proxy.post(path + "?status=%d" % status, "{}", key=k)
        assert first.status == status and first.header("Idempotent-Replayed") is None
        second = proxy.post(path + "?status=%d" % status, "{}", key=k)
        assert second.status == status and second.header("Idempotent-Replayed") is None
        assert upstream.executions.count(key=k) == 2, status
        assert json.loads(proxy.cli("keys", "show", "--key", k).stdout)["state"] == "released"


def test_client_errors_are_stored_by_default(proxy, upstream, key):
    assert proxy.post("/v1/orders?status=400", "{}", key=key).status == 400
    again = proxy.post("/v1/orders?status=400", "{}", key=key)
    assert again.status == 400 and again.header("Idempotent-Replayed") == "true"
    assert upstream.executions.count(key=key) == 1


def test_upstream_unreachable_is_502_and_the_claim_is_released(make_proxy, key):
    dead = "http://127.0.0.1:%d" % free_port()
    p = make_proxy(upstream_url=dead)
    for _ in range(2):  # released: the retry is not told "in flight"
        r = p.post("/v1/orders", "{}", key=key)
        assert r.status == 502
        assert problem(r)["type"].endswith("/upstream-unreachable")
    assert json.loads(p.cli("keys", "show", "--key", key).stdout)["state"] == "released"


def test_store_unreachable_fail_closed_is_503_and_not_forwarded(make_proxy, upstream, key):
    dead_dsn = "postgresql://postgres@127.0.0.1:%d/idemproxy" % free_port()
    p = make_proxy(dsn=dead_dsn, args=("--no-migrate",))
    r = p.post("/v1/orders", "{}", key=key)
    assert r.status == 503
    assert problem(r)["type"].endswith("/store-unavailable")
    assert int(r.header("Retry-After")) >= 1
    assert upstream.executions.count(key=key) == 0
    assert p.admin("/readyz").status == 503
    assert p.admin("/healthz").status == 200


def test_store_unreachable_fail_open_forwards_and_counts(make_proxy, upstream, key):
    dead_dsn = "postgresql://postgres@127.0.0.1:%d/idemproxy" % free_port()
    p = make_proxy(dsn=dead_dsn, args=("--no-migrate",),
                   defaults={"store_unavailable": "fail_open"})
    r = p.post("/v1/orders", "{}", key=key)
    assert r.status == 201 and r.header("Idempotent-Replayed") is None
    assert upstream.executions.count(key=key) == 1
    assert p.wait_metric("idemproxy_requests_total", 1, route="orders", outcome="fail_open") == 1
    assert "WITHOUT idempotency protection" in p.read_log()


def test_body_over_max_body_is_413_and_not_forwarded(make_proxy, upstream, key, pg):
    p = make_proxy(defaults={"max_body": "1KiB"})
    assert p.post("/v1/orders", "x" * 1024, key=key + "-fits").status == 201
    r = p.post("/v1/orders", "x" * 1025, key=key)
    assert r.status == 413
    assert problem(r)["type"].endswith("/body-too-large")
    assert upstream.executions.count(key=key) == 0
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE key = '%s'" % key) == "0"

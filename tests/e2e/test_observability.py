"""What operators and clients see besides the response: expiry, request ids, logs."""
import hashlib
import json
import time
from email.utils import parsedate_to_datetime


def test_expiry_header_on_first_and_replayed_responses(make_proxy, key):
    p = make_proxy(defaults={"ttl": "2h"})
    first = p.post("/v1/orders", "{}", key=key)
    again = p.post("/v1/orders", "{}", key=key)
    expires = first.header("Idempotency-Key-Expires")
    assert expires and again.header("Idempotency-Key-Expires") == expires
    left = parsedate_to_datetime(expires).timestamp() - time.time()
    assert 2 * 3600 - 60 < left <= 2 * 3600 + 1
    assert expires.endswith(" GMT")


def test_no_expiry_header_when_nothing_is_stored(proxy, key):
    r = proxy.post("/v1/orders?status=503", "{}", key=key)
    assert r.status == 503 and r.header("Idempotency-Key-Expires") is None
    assert proxy.request("GET", "/status").header("Idempotency-Key-Expires") is None


def test_request_id_is_honoured_forwarded_and_echoed(proxy, upstream, key):
    r = proxy.post("/v1/echo", "{}", key=key, headers={"X-Request-Id": "req-123"})
    assert r.header("X-Request-Id") == "req-123"
    assert r.json()["headers"]["x-request-id"] == "req-123"
    replay = proxy.post("/v1/echo", "{}", key=key, headers={"X-Request-Id": "req-456"})
    assert replay.header("Idempotent-Replayed") == "true"
    assert replay.header("X-Request-Id") == "req-456"  # this request's id, not the stored one


def test_request_id_is_generated_when_missing(proxy):
    a = proxy.request("GET", "/echo")
    b = proxy.request("GET", "/echo")
    assert len(a.header("X-Request-Id")) == 32 and a.header("X-Request-Id") != b.header("X-Request-Id")
    assert a.json()["headers"]["x-request-id"] == a.header("X-Request-Id")
    bad = proxy.post("/v1/orders", "{}")  # a problem response carries one too
    assert bad.status == 400 and bad.header("X-Request-Id")


def test_json_access_log_has_one_line_per_request_and_never_the_key(make_proxy, key):
    p = make_proxy(extra_top={"log": {"format": "json"}})
    p.post("/v1/orders", '{"card": "4242424242424242"}', key=key, headers={"X-Request-Id": "rid-1"})
    p.post("/v1/orders", '{"card": "4242424242424242"}', key=key, headers={"X-Request-Id": "rid-2"})
    p.stop()
    log = p.read_log()
    lines = [json.loads(l) for l in log.splitlines() if l.strip()]  # every line is JSON
    access = [l for l in lines if l.get("msg") == "request"]
    assert [a["request_id"] for a in access] == ["rid-1", "rid-2"]
    assert [a["outcome"] for a in access] == ["executed", "replayed"]
    assert access[0]["upstream_status"] == 201 and access[1]["upstream_status"] == 0
    assert access[0]["route"] == "orders"
    # The key's own hash (SHA-256's first 16 hex digits), on both lines: made late for
    # the log, it must still be of the key, not of what the key's string became.
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    assert [a["key_hash"] for a in access] == [digest, digest]
    assert access[0]["upstream_ms"] > 0 and access[0]["duration_ms"] >= access[0]["upstream_ms"]
    assert key not in log and "4242424242424242" not in log
    assert any(l.get("level") == "info" and "listening" in l.get("msg", "") for l in lines)


def test_access_lines_are_written_within_the_flush_and_none_is_lost_at_exit(make_proxy, key):
    def access(p):
        return [l for l in p.read_log().splitlines() if "[access]" in l]

    quick = make_proxy(extra_top={"log": {"access_flush": "100ms"}})
    quick.post("/v1/orders", "{}", key=key)
    deadline = time.time() + 5
    while not access(quick) and time.time() < deadline:
        time.sleep(0.05)
    assert len(access(quick)) == 1  # written by the flusher, with the proxy still running
    quick.stop()

    held = make_proxy(extra_top={"log": {"access_flush": "1m"}})
    for i in range(50):
        held.post("/v1/orders", "{}", key="%s-%d" % (key, i))
    time.sleep(0.5)
    assert access(held) == []  # held: under 64 KiB, and the minute is not over
    assert held.stop() == 0
    lines = access(held)
    assert len(lines) == 50 and all(" outcome=executed status=201 " in l for l in lines)


def test_text_access_log_never_shows_the_key(proxy, key):
    proxy.post("/v1/orders", "{}", key=key)
    proxy.stop()
    log = proxy.read_log()
    assert "[access] POST /v1/orders route=orders outcome=executed status=201" in log
    assert key not in log

"""A caller looks up what became of its own key (GET <policy.path>/outcome?path=...,
with the key and the credentials of the request it asks about): the state, the
status and times, whether a retry would replay, never the answer itself; and a
tenant finds nothing of another tenant's key. Over HTTP/1.1 and HTTP/2."""
import json
import threading
import time
import urllib.parse

import pytest

from harness import problem, request
from peers import curl

SCOPE_KEY = "an-hmac-key-for-lookups-0123456789abcdef"
LOOKUP = "/.well-known/idempotency/outcome?path="


def lookup(p, path, key, headers=None, http2=False):
    h = {"Idempotency-Key": key}
    h.update(headers or {})
    return request(p.port, "GET", LOOKUP + urllib.parse.quote(path, safe=""), headers=h,
                   http2=http2)


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "http2"])
def test_a_tenant_sees_its_own_keys_outcome_and_nothing_of_anothers(make_proxy, upstream, key,
                                                                     http2):
    p = make_proxy(extra_top={"scope_key": SCOPE_KEY},
                   routes=[{"name": "orders", "path_prefix": "/v1", "key_required": True,
                            "scope": {"from": "authorization"}}])
    alice, bob = {"Authorization": "Bearer alice"}, {"Authorization": "Bearer bob"}
    assert lookup(p, "/v1/orders", key, alice, http2).json() == {
        "key": key, "route": "orders", "state": "unknown", "replays": False}
    # In flight while the upstream takes its time.
    done = []
    t = threading.Thread(target=lambda: done.append(
        p.post("/v1/orders?delay_ms=1500", "{}", key=key, headers=alice)))
    t.start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        seen = lookup(p, "/v1/orders", key, alice, http2).json()
        if seen["state"] != "unknown":
            break
        time.sleep(0.05)
    assert seen["state"] == "in_flight" and seen["replays"] is False and "created_at" in seen
    t.join()
    assert done[0].status == 201
    r = lookup(p, "/v1/orders", key, alice, http2)
    assert r.status == 200 and r.header("Content-Type") == "application/json"
    assert r.header("Cache-Control") == "no-store"
    got = r.json()
    assert got["state"] == "completed" and got["status"] == 201 and got["replays"] is True
    assert got["completed_at"] >= got["created_at"] and got["expires_at"] > got["completed_at"]
    assert "body" not in got and done[0].body.decode() not in r.body.decode()
    # curl, a peer of its own, reads the same over HTTP/1.1 and HTTP/2 (h2c).
    url = "http://127.0.0.1:%d%s%%2Fv1%%2Forders" % (p.port, LOOKUP)
    for flag in ("--http1.1", "--http2-prior-knowledge"):
        status, headers, body, _ = curl(flag, url, "-H", "Idempotency-Key: " + key,
                                        "-H", "Authorization: Bearer alice")
        assert status == 200 and headers["cache-control"] == "no-store", flag
        assert json.loads(body) == got, flag
    # Bob, with the same key, has no record of it; nor has a caller without credentials.
    assert lookup(p, "/v1/orders", key, bob, http2).json()["state"] == "unknown"
    assert lookup(p, "/v1/orders", key, None, http2).json()["state"] == "unknown"
    assert upstream.executions.count(key=key) == 1


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "http2"])
def test_a_scope_header_scopes_the_lookup_and_an_indeterminate_outcome_is_told(
        make_proxy, upstream, key, http2):
    p = make_proxy(extra_top={"upstream": {"url": upstream.url, "timeout": "300ms"}},
                   routes=[{"name": "orders", "path_prefix": "/v1", "key_required": True,
                            "scope_header": "X-Tenant"}])
    first = p.post("/v1/orders?delay_ms=1000", "{}", key=key, headers={"X-Tenant": "acme"})
    assert first.status == 504  # sent, no answer in time: the outcome is unknown
    got = lookup(p, "/v1/orders", key, {"X-Tenant": "acme"}, http2).json()
    assert got["state"] == "indeterminate" and got["replays"] is False
    assert lookup(p, "/v1/orders", key, {"X-Tenant": "globex"}, http2).json()["state"] == "unknown"


def test_a_lookup_without_a_usable_route_or_key_is_a_clear_400(make_proxy, upstream, key):
    p = make_proxy(routes=[{"name": "orders", "path_prefix": "/v1", "key_required": True}])
    before = upstream.executions.count()
    no_path = request(p.port, "GET", "/.well-known/idempotency/outcome",
                      headers={"Idempotency-Key": key})
    assert no_path.status == 400 and "?path=" in problem(no_path)["detail"]
    nowhere = lookup(p, "/elsewhere", key)
    assert nowhere.status == 400 and "no route protects /elsewhere" in problem(nowhere)["detail"]
    keyless = request(p.port, "GET", LOOKUP + "/v1/orders")
    assert keyless.status == 400 and problem(keyless)["type"].endswith("/missing-key")
    bad = lookup(p, "/v1/orders", '"unterminated')
    assert bad.status == 400 and problem(bad)["type"].endswith("/bad-key")
    # The published policy says where the lookup is.
    doc = request(p.port, "GET", "/.well-known/idempotency").json()
    assert doc["lookup"]["target"] == "/.well-known/idempotency/outcome?path={path}"
    assert upstream.executions.count() == before  # a lookup never reaches the upstream

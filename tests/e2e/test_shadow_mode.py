"""mode: shadow records and fingerprints, never blocks or replays, and counts what
enforce mode would have done."""
import json

from harness import post_in_background, wait_for_execution


def test_shadow_mode_forwards_everything_and_counts_what_it_would_have_done(make_proxy, upstream,
                                                                           key):
    p = make_proxy(routes=[{"name": "orders", "path_prefix": "/v1", "key_required": True,
                            "mode": "shadow"}])
    first = p.post("/v1/orders", '{"amount": 1}', key=key)
    assert first.status == 201
    assert json.loads(p.cli("keys", "show", "--key", key).stdout)["state"] == "completed"

    again = p.post("/v1/orders", '{"amount": 1}', key=key)  # enforce: a replay
    assert again.status == 201 and again.header("Idempotent-Replayed") is None
    assert again.body != first.body  # really executed again

    other = p.post("/v1/orders", '{"amount": 2}', key=key)  # enforce: 422
    assert other.status == 201

    slow_key = key + "-slow"
    t = post_in_background(p, "/v1/orders?delay_ms=800", slow_key, {})
    wait_for_execution(upstream, slow_key)
    concurrent = p.post("/v1/orders?delay_ms=800", "{}", key=slow_key)  # enforce: 409
    t.join()
    assert concurrent.status == 201

    assert p.post("/v1/orders", "{}").status == 201  # enforce: 400, key required
    assert p.post("/v1/orders", "{}", key="k" * 300).status == 201  # enforce: 400, bad key

    assert upstream.executions.count(key=key) == 3
    assert upstream.executions.count(key=slow_key) == 2
    m = lambda o, n: p.wait_metric("idemproxy_requests_total", n, route="orders", outcome=o)
    assert m("shadow_would_replay", 1) == 1
    assert m("shadow_would_mismatch", 1) == 1
    assert m("shadow_would_conflict", 1) == 1
    assert m("shadow_would_reject", 2) == 2
    assert m("executed", 2) == 2
    p.stop()
    assert "outcome=shadow_would_replay" in p.read_log()

"""Scopes from verified identity: two callers reusing one key never see each other's
records, even in a concurrent storm, and no credential is stored."""
import threading
from concurrent.futures import ThreadPoolExecutor

SCOPE_KEY = "an-hmac-key-for-tests-0123456789abcdef"


def test_two_identities_reusing_one_key_never_share_records(make_proxy, upstream, pg, key):
    p = make_proxy(extra_top={"scope_key": SCOPE_KEY},
                   routes=[{"name": "orders", "path_prefix": "/v1", "key_required": True,
                            "on_concurrent": "wait", "scope": {"from": "authorization"}}])
    alice, bob = "Bearer alice-secret-token", "Bearer bob-secret-token"
    barrier = threading.Barrier(64)

    def one(i):
        who = alice if i % 2 else bob
        barrier.wait()
        r = p.post("/v1/orders?delay_ms=300", '{"amount": %d}' % (i % 2), key=key,
                   headers={"Authorization": who})
        return who, r

    with ThreadPoolExecutor(max_workers=64) as pool:
        results = list(pool.map(one, range(64)))
    assert upstream.executions.count(key=key) == 2  # once per identity
    bodies = {who: {r.body for w, r in results if w == who} for who in (alice, bob)}
    assert all(r.status == 201 for _, r in results)
    assert len(bodies[alice]) == 1 and len(bodies[bob]) == 1
    assert bodies[alice] != bodies[bob]  # never the other caller's answer

    # Different bodies per identity are not a mismatch: they are different records.
    rows = pg.sql("SELECT scope FROM idempotency_records WHERE key = '%s' ORDER BY scope" % key)
    scopes = rows.splitlines()
    assert len(scopes) == 2 and all(s.startswith("hmac:") and len(s) == 5 + 64 for s in scopes)
    dump = pg.sql("SELECT string_agg(scope || fingerprint || encode(coalesce(headers, ''), 'escape')"
                  " || encode(coalesce(body, ''), 'escape'), '') FROM idempotency_records"
                  " WHERE key = '%s'" % key)
    assert "secret-token" not in dump and "Bearer" not in dump


def test_anonymous_requests_share_the_empty_scope(make_proxy, upstream, key):
    p = make_proxy(extra_top={"scope_key": SCOPE_KEY},
                   routes=[{"name": "orders", "path_prefix": "/v1", "key_required": True,
                            "scope": {"from": "authorization"}}])
    first = p.post("/v1/orders", "{}", key=key)
    again = p.post("/v1/orders", "{}", key=key)
    assert again.header("Idempotent-Replayed") == "true" and again.body == first.body
    other = p.post("/v1/orders", "{}", key=key, headers={"Authorization": "Bearer someone"})
    assert other.header("Idempotent-Replayed") is None
    assert upstream.executions.count(key=key) == 2

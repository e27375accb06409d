"""Per-tenant quotas (a route's `quota`) through the real binary and a real PostgreSQL,
over HTTP/1.1 and HTTP/2: a tenant's cap is exact under 200 concurrent fresh keys,
another tenant is not touched, GC gives the space back; on Citus a tenant is counted
before each claim, so claims made at once may pass the cap, by fewer than they are."""
import json
import os
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import problem, request, wait_for

CITUS = os.environ.get("IDEMPROXY_TEST_CITUS") == "1"
TOKEN = "quota-admin-token-0123456789"


def tenant_post(p, key, tenant, http2, path="/v1/orders"):
    return request(p.port, "POST", path, "{}",
                   {"Content-Type": "application/json", "Idempotency-Key": key,
                    "X-Tenant": tenant}, http2=http2)


# Long enough that a stored key still replays after 200 fresh keys under a sanitizer
# with other tests beside it (at 2 s one once expired first); the GC check waits for it.
TTL_S = 6


def quota_route(name, **quota):
    return {"name": name, "path_prefix": "/v1/orders", "scope_header": "X-Tenant",
            "ttl": "%ds" % TTL_S, "quota": quota}


@pytest.mark.skipif(CITUS, reason="exact on plain PostgreSQL only (the Citus test below)")
@pytest.mark.parametrize("http2", [False, True], ids=["http1", "h2"])
def test_a_tenant_stores_exactly_its_quota_under_200_concurrent_fresh_keys(
        make_proxy, upstream, pg, http2):
    name = "quota-" + uuid.uuid4().hex[:8]
    p = make_proxy(routes=[quota_route(name, records=100)], gc={"interval": "0s"},
                   extra_top={"admin_token": TOKEN})
    acme = "acme-" + uuid.uuid4().hex[:8]
    keys = ["k%03d-%s" % (i, uuid.uuid4().hex[:6]) for i in range(200)]
    with ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(lambda k: tenant_post(p, k, acme, http2), keys))
    stored_by = time.monotonic()  # every record completed before its answer
    assert Counter(a.status for a in answers) == {201: 100, 429: 100}
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE scope = '%s'" % acme) == "100"
    refused = [k for k, a in zip(keys, answers) if a.status == 429]
    stored = [k for k, a in zip(keys, answers) if a.status == 201]
    over = next(a for a in answers if a.status == 429)
    assert problem(over)["type"].endswith("/quota-exceeded")
    assert "quota.records: 100" in problem(over)["detail"]
    assert over.header("Retry-After") is None
    assert sum(upstream.executions.count(key=k) for k in refused) == 0  # never forwarded
    # A stored key replays; another tenant stores at once.
    again = tenant_post(p, stored[0], acme, http2)
    assert again.status == 201 and again.header("Idempotent-Replayed") == "true"
    assert tenant_post(p, refused[0], "globex-" + uuid.uuid4().hex[:8], http2).status == 201
    assert p.wait_metric("idemproxy_requests_total", 100, route=name,
                         outcome="quota_exceeded") == 100
    # The admin API names the fullest tenant first, with its usage and caps.
    listed = json.loads(request(p.admin_port, "GET", "/admin/quotas?limit=5",
                                headers={"Authorization": "Bearer " + TOKEN},
                                http2=False).body)
    mine = next(s for s in listed["scopes"] if s["scope"] == acme)
    assert (mine["records"], mine["in_flight"], mine["quota"]["records"]) == (100, 0, 100)
    assert mine["quota"]["bytes"] is None and mine["bytes"] > 0
    # Past ttl, GC deletes the tenant's records and gives their places back.
    time.sleep(max(0.0, stored_by + TTL_S + 0.2 - time.monotonic()))
    assert "deleted" in p.cli("gc").stdout
    assert wait_for(lambda: pg.sql("SELECT records FROM idempotency_usage WHERE scope = '%s'"
                                   % acme) == "0", timeout=10)
    assert tenant_post(p, refused[1], acme, http2).status == 201


@pytest.mark.skipif(CITUS, reason="exact on plain PostgreSQL only (the Citus test below)")
def test_the_in_flight_cap_answers_with_retry_after_and_the_policy_publishes_the_quota(
        make_proxy, upstream, pg):
    name = "running-" + uuid.uuid4().hex[:8]
    route = dict(quota_route(name, in_flight=2), path_prefix="/v1/slow")
    p = make_proxy(routes=[route])
    acme = "acme-" + uuid.uuid4().hex[:8]
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(
            lambda i: tenant_post(p, "slow-%d-%s" % (i, acme), acme, False,
                                  path="/v1/slow?delay_ms=600"), range(3)))
    statuses = sorted(a.status for a in answers)
    assert statuses == [201, 201, 429]
    over = next(a for a in answers if a.status == 429)
    assert over.header("Retry-After") == "1"
    assert "quota.in_flight: 2" in problem(over)["detail"]
    assert tenant_post(p, "slow-next-" + acme, acme, False, path="/v1/slow").status == 201
    doc = p.request("GET", "/.well-known/idempotency").json()
    assert doc["routes"][0]["quota"]["in_flight"] == 2
    assert "records" not in doc["routes"][0]["quota"]


@pytest.mark.skipif(not CITUS, reason="plain PostgreSQL counts exactly (the tests above)")
def test_on_citus_a_tenant_is_counted_before_each_claim_and_overshoots_by_fewer_than_at_once(
        make_proxy, upstream, pg):
    name = "citus-quota-" + uuid.uuid4().hex[:8]
    p = make_proxy(routes=[quota_route(name, records=20)], extra_top={"admin_token": TOKEN})
    assert wait_for(lambda: request(p.admin_port, "GET", "/readyz", http2=False).status == 200,
                    timeout=15), p.read_log()
    acme = "acme-" + uuid.uuid4().hex[:8]
    # One at a time: exact, and a stored key replays at the cap.
    keys = ["one-%02d-%s" % (i, uuid.uuid4().hex[:6]) for i in range(25)]
    statuses = [tenant_post(p, k, acme, False).status for k in keys]
    assert statuses == [201] * 20 + [429] * 5
    again = tenant_post(p, keys[0], acme, False)
    assert again.status == 201 and again.header("Idempotent-Replayed") == "true"
    # 100 fresh keys of another tenant, 10 at once over HTTP/2, against a cap of 20.
    globex = "globex-" + uuid.uuid4().hex[:8]
    fresh = ["k%03d-%s" % (i, uuid.uuid4().hex[:6]) for i in range(100)]
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda k: tenant_post(p, k, globex, True), fresh))
    stored = sum(1 for a in answers if a.status == 201)
    assert 20 <= stored < 20 + 10 and stored + sum(1 for a in answers if a.status == 429) == 100
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE scope = '%s'" % globex) \
        == str(stored)
    refused = [k for k, a in zip(fresh, answers) if a.status == 429]
    assert sum(upstream.executions.count(key=k) for k in refused) == 0  # never forwarded
    listed = json.loads(request(p.admin_port, "GET", "/admin/quotas?limit=50",
                                headers={"Authorization": "Bearer " + TOKEN},
                                http2=False).body)
    mine = next(s for s in listed["scopes"] if s["scope"] == acme)
    assert (mine["records"], mine["in_flight"], mine["quota"]["records"]) == (20, 0, 20)

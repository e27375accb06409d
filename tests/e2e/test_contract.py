"""The whole idempotency contract (issue 24), through the real binary, a real
PostgreSQL and Node's http module as the upstream: the upstream's opt-out of
storage (Idempotency-Policy: no-store) and key namespaces."""
import json
import re
import uuid

from conformance_peers import ORDERS, node  # noqa: F401  (fixture)
from harness import post_in_background, problem, wait_for
from peers import curl


def post(proxy, path, key, body="{}", headers=()):
    args = ["-X", "POST", "-H", "Content-Type: application/json", "-H", "Idempotency-Key: " + key]
    for h in headers:
        args += ["-H", h]
    status, fields, answer, _ = curl(*args, "-d", body, "http://127.0.0.1:%d%s" % (proxy.port, path))
    return status, fields, answer


# julik/idempo's X-Idempo-Policy idea: the upstream decides an answer must not be
# replayed (a result that depends on the moment, say). The answer is passed on, the
# claim released as for a 5xx, so a retry executes again; the field speaks to the
# proxy and never reaches the client, the first time or on a replay.
def test_an_upstream_opts_an_answer_out_of_storage(make_proxy, node):
    p = make_proxy(upstream_url=node.url, routes=ORDERS)
    key = "nostore-" + uuid.uuid4().hex
    for _ in range(2):
        status, fields, _ = post(p, "/v1/orders?policy=no-store", key)
        assert status == 201 and "idempotency-policy" not in fields
        assert "idempotent-replayed" not in fields
    assert node.executions(key) == 2
    assert p.metric("idemproxy_requests_total", route="orders", outcome="released") == 2
    # Directives are a comma-separated list, case-insensitive; anything else stores.
    listed = "nostore-" + uuid.uuid4().hex
    post(p, "/v1/orders?policy=x-other,%20NO-STORE", listed)
    post(p, "/v1/orders?policy=x-other,%20NO-STORE", listed)
    assert node.executions(listed) == 2
    kept = "store-" + uuid.uuid4().hex
    answers = [post(p, "/v1/orders?policy=cache", kept) for _ in range(2)]
    assert node.executions(kept) == 1
    assert answers[1][1].get("idempotent-replayed") == "true"
    assert all("idempotency-policy" not in fields for _, fields, _ in answers)
    assert json.loads(answers[1][2]) == json.loads(answers[0][2])


# Seed 003: "version the key namespace" when a deploy changes the body schema. The
# namespace is part of the record's identity: a client retrying under v2 with a key
# it used under v1 executes fresh (no replay of the old shape, no 422 for the new
# body), while v1's records still replay to v1. Two instances, one database, as in
# a rolling deploy.
def test_a_namespace_is_part_of_the_records_identity(make_proxy, node, pg):
    route = dict(ORDERS[0], scope_header="X-Tenant")
    v1 = make_proxy(upstream_url=node.url, routes=[dict(route, namespace="v1")])
    v2 = make_proxy(upstream_url=node.url, routes=[dict(route, namespace="v2")])
    key = "ns-" + uuid.uuid4().hex
    tenant = ("X-Tenant: acme",)
    status, _, old = post(v1, "/v1/orders", key, '{"amount": 1}', tenant)
    assert status == 201
    status, fields, new = post(v2, "/v1/orders", key, '{"amount": 1, "currency": "eur"}', tenant)
    assert status == 201 and "idempotent-replayed" not in fields  # not a 422, not a replay
    assert node.executions(key) == 2
    _, fields, again = post(v1, "/v1/orders", key, '{"amount": 1}', tenant)
    assert fields.get("idempotent-replayed") == "true" and again == old
    _, fields, again = post(v2, "/v1/orders", key, '{"amount": 1, "currency": "eur"}', tenant)
    assert fields.get("idempotent-replayed") == "true" and again == new
    assert node.executions(key) == 2
    scopes = pg.sql("SELECT scope FROM idempotency_records WHERE key = '%s' ORDER BY scope" % key)
    assert scopes.splitlines() == ["ns:v1:acme", "ns:v2:acme"]
    # A tenant header cannot name a namespace's scope.
    forged = ("X-Tenant: ns:v2:acme",)
    _, fields, _ = post(make_proxy(upstream_url=node.url, routes=[route]), "/v1/orders", key,
                        '{"amount": 1, "currency": "eur"}', forged)
    assert "idempotent-replayed" not in fields and node.executions(key) == 3
    # The operator finds a namespaced record by its scope.
    shown = json.loads(v2.cli("keys", "show", "--key", key, "--scope", "ns:v2:acme").stdout)
    assert shown["state"] == "completed"


def test_a_bad_namespace_is_a_config_error_with_its_position(make_proxy, node):
    for bad in ("", "v 2", "v2:x", "x" * 65):
        p = make_proxy(start=False, upstream_url=node.url, routes=[dict(ORDERS[0], namespace=bad)])
        out = p.cli("check-config")
        assert out.returncode != 0
        assert re.search(re.escape(p.config_path) + r":\d+:\d+: .*namespace must be 1 to 64",
                         out.stderr), out.stderr


# The IETF httpapi working group's issue #42: 422 collides with an application's own
# validation errors. A route's statuses change the code; the problem type stays.
def test_a_route_chooses_its_refusal_statuses(make_proxy, node):
    route = dict(ORDERS[0], statuses={"missing_key": 428, "mismatch": 409, "in_flight": 425,
                                      "store_unavailable": 500})
    p = make_proxy(upstream_url=node.url, routes=[route])
    missing = p.post("/v1/orders", "{}")
    assert missing.status == 428 and problem(missing)["type"].endswith("/missing-key")
    key = "statuses-" + uuid.uuid4().hex
    assert p.post("/v1/orders", '{"a": 1}', key=key).status == 201
    other = p.post("/v1/orders", '{"a": 2}', key=key)
    assert other.status == 409 and problem(other)["type"].endswith("/key-mismatch")
    slow_key = key + "-slow"
    results = {}
    slow = post_in_background(p, "/v1/orders?delay_ms=800", slow_key, results)
    assert wait_for(lambda: node.executions(slow_key) == 1)
    busy = p.post("/v1/orders?delay_ms=800", "{}", key=slow_key)
    slow.join()
    assert busy.status == 425 and problem(busy)["type"].endswith("/request-in-flight")
    assert busy.header("Retry-After") == "1"
    assert results[slow_key].status == 201 and node.executions(slow_key) == 1
    down = make_proxy(upstream_url=node.url, routes=[route],
                      store={"postgres": {"dsn": "postgresql://127.0.0.1:1/none", "pool_size": 1,
                                          "statement_timeout": "1s"}})
    refused = down.post("/v1/orders", "{}", key=key)
    assert refused.status == 500 and problem(refused)["type"].endswith("/store-unavailable")
    # The other refusals keep their statuses.
    assert p.post("/v1/orders", "{}", key="").status == 400


def test_refusal_statuses_are_checked_with_their_position(make_proxy, node):
    for statuses, says in (({"mismatch": 200}, "statuses.mismatch must be an integer from 400"),
                           ({"in_flight": "soon"}, "statuses.in_flight must be an integer"),
                           ({"expired": 409}, 'unknown key "expired"')):
        p = make_proxy(start=False, upstream_url=node.url,
                       routes=[dict(ORDERS[0], statuses=statuses)])
        out = p.cli("check-config")
        assert out.returncode != 0
        assert re.search(re.escape(p.config_path) + r":\d+:\d+: .*" + re.escape(says),
                         out.stderr), out.stderr

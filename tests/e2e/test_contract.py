"""The whole idempotency contract (issue 24), through the real binary, a real
PostgreSQL and Node's http module as the upstream: the upstream's opt-out of
storage (Idempotency-Policy: no-store), key namespaces, refusal statuses and keys
from the body (key_json_pointer)."""
import email.utils
import json
import re
import signal
import time
import uuid

import pytest

from conformance_peers import ORDERS, node  # noqa: F401  (fixture)
from harness import post_in_background, problem, wait_for
from peers import curl, node_fetch


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
    assert p.wait_metric("idemproxy_requests_total", 2, route="orders", outcome="released") == 2
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


# The field is addressed to the proxy, as a Connection-listed field is to the next hop
# (RFC 9110 section 7.6.1: such fields are consumed, not forwarded): a covered route's
# client never sees it, with a key or without one (an optional key absent: the request
# passes through). An uncovered method's answer keeps it: there it is the upstream's
# business. Over HTTP/1.1 and HTTP/2 (curl with prior knowledge) alike.
@pytest.mark.parametrize("version", [[], ["--http2-prior-knowledge"]], ids=["http1", "h2"])
def test_the_policy_field_never_reaches_a_client_of_a_covered_route_even_without_a_key(
        make_proxy, node, version):
    p = make_proxy(upstream_url=node.url, routes=[dict(ORDERS[0], key_required=False)])
    url = "http://127.0.0.1:%d/v1/orders?policy=no-store" % p.port
    status, fields, _, _ = curl(*version, "-X", "POST", "-H", "Content-Type: application/json",
                                "-d", "{}", url)
    assert status == 201 and "idempotency-policy" not in fields
    assert wait_for(lambda: p.metric("idemproxy_requests_total", route="orders",
                                     outcome="passthrough") == 1)
    status, fields, _, _ = curl(*version, url)
    assert status == 201 and fields.get("idempotency-policy") == "no-store"


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
                           ({"expired": 200}, "statuses.expired must be an integer from 400"),
                           ({"gone": 410}, 'unknown key "gone"')):
        p = make_proxy(start=False, upstream_url=node.url,
                       routes=[dict(ORDERS[0], statuses=statuses)])
        out = p.cli("check-config")
        assert out.returncode != 0
        assert re.search(re.escape(p.config_path) + r":\d+:\d+: .*" + re.escape(says),
                         out.stderr), out.stderr


# --- Keys from the body (key_json_pointer) -------------------------------------------

STRIPE = {"name": "stripe", "path_prefix": "/webhooks/stripe", "key_required": True,
          "key_json_pointer": "/id"}


def stripe_event(event_id):
    """A Stripe `event` object as Stripe delivers it (API version 2024-06-20)."""
    return json.dumps({
        "id": event_id, "object": "event", "api_version": "2024-06-20", "created": 1732550400,
        "livemode": False, "pending_webhooks": 1, "type": "payment_intent.succeeded",
        "request": {"id": "req_" + uuid.uuid4().hex[:14], "idempotency_key": None},
        "data": {"object": {"id": "pi_3QOq2vLkdIwHu7ix0abcdEFG", "object": "payment_intent",
                            "amount": 2000, "currency": "eur", "status": "succeeded",
                            "metadata": {"order_id": "6735"}}},
    })


# Stripe delivers an event at least once and retries it, each time with a fresh
# Stripe-Signature timestamp, so no header identifies a delivery: the event's own id
# does. Node's fetch delivers the same event three times (two at once, as Stripe's
# retry and a manual resend can race): the receiver runs once and the other two get
# the stored answer. Over HTTP/2 too.
def test_a_webhook_is_deduplicated_by_the_event_id_in_its_body(make_proxy, node, pg):
    p = make_proxy(upstream_url=node.url, routes=[STRIPE])
    event_id = "evt_" + uuid.uuid4().hex[:24]
    event = stripe_event(event_id)

    def delivery(t):
        return {"method": "POST", "url": "http://127.0.0.1:%d/webhooks/stripe" % p.port,
                "body": event, "headers": {
                    "Content-Type": "application/json; charset=utf-8",
                    "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
                    "Stripe-Signature": "t=%d,v1=%s" % (t, uuid.uuid4().hex * 2)}}
    answers = node_fetch([delivery(1732550400 + i) for i in range(3)], parallel=2)
    # One delivery executes. Each other one is the stored answer replayed, or, when it
    # arrived while the first still ran (on_concurrent: reject), 409 request-in-flight:
    # the third starts once either of the first two is answered, so it can overlap the
    # first too (the fresh-clone CI saw 201, 409, 409 once).
    executed = [a for a in answers if a["status"] == 201 and "idempotent-replayed" not in a["headers"]]
    assert len(executed) == 1, answers
    for a in answers:
        if a is not executed[0]:
            replayed = a["status"] == 201 and a["headers"].get("idempotent-replayed") == "true"
            in_flight = a["status"] == 409 and \
                json.loads(a["body"])["type"].endswith("/request-in-flight")
            assert replayed or in_flight, answers
    assert node.executions(event_id) == 1
    again = node_fetch([delivery(1732550500)])[0]
    assert again["status"] == 201 and again["headers"].get("idempotent-replayed") == "true"
    assert again["body"] == executed[0]["body"]
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE key = '%s'" % event_id) == "1"
    status, fields, _, _ = curl("--http2-prior-knowledge", "-X", "POST", "-H",
                                "Content-Type: application/json", "-d", event,
                                "http://127.0.0.1:%d/webhooks/stripe" % p.port)
    assert status == 201 and fields.get("idempotent-replayed") == "true"
    assert node.executions(event_id) == 1
    # An integer id is its decimal text; the key's rules apply as to a header's.
    num = make_proxy(upstream_url=node.url, routes=[dict(STRIPE, key_json_pointer="/delivery/n")])
    n = uuid.uuid4().int % 10**15
    for _ in range(2):
        r = num.post("/webhooks/stripe", json.dumps({"delivery": {"n": n}, "id": str(n)}))
        assert r.status == 201
    assert node.executions(str(n)) == 1
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE key = '%d'" % n) == "1"


# GitHub names each delivery in X-GitHub-Delivery and repeats it on a redelivery; the
# body's own fields (a push's "after") are not unique per delivery. A header key
# route with the body pointer as a fallback: the header wins when present.
def test_a_github_delivery_is_keyed_by_its_header_which_wins_over_the_body(make_proxy, node, pg):
    route = {"name": "github", "path_prefix": "/webhooks/github", "key_required": True,
             "header": "X-GitHub-Delivery", "key_json_pointer": "/id"}
    p = make_proxy(upstream_url=node.url, routes=[route])
    delivery = str(uuid.uuid4())
    body_id = "body-" + uuid.uuid4().hex
    push = json.dumps({"id": body_id, "ref": "refs/heads/main", "before": "0" * 40,
                       "after": "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
                       "repository": {"id": 1296269, "full_name": "octocat/Hello-World"},
                       "pusher": {"name": "octocat"}})
    fields = ("X-GitHub-Event: push", "X-GitHub-Delivery: " + delivery,
              "X-Hub-Signature-256: sha256=" + uuid.uuid4().hex * 2,
              "User-Agent: GitHub-Hookshot/044aadd")
    args = ["-X", "POST", "-H", "Content-Type: application/json"]
    for f in fields:
        args += ["-H", f]
    url = "http://127.0.0.1:%d/webhooks/github" % p.port
    first = curl(*args, "-d", push, url)
    redelivered = curl(*args, "-d", push, url)
    assert first[0] == redelivered[0] == 201
    assert redelivered[1].get("idempotent-replayed") == "true" and redelivered[2] == first[2]
    assert node.executions(delivery) == 1
    keys = pg.sql("SELECT key FROM idempotency_records WHERE key IN ('%s', '%s')"
                  % (delivery, body_id))
    assert keys.splitlines() == [delivery]  # the header's, not the body's


# What the pointer finds must be a usable key, or the request is refused with the
# pointer named (400 invalid-key), never forwarded unprotected; nothing there is a
# missing key, or a pass-through where the key is optional.
def test_a_body_without_a_usable_key_is_refused_naming_the_pointer(make_proxy, node, pg):
    p = make_proxy(upstream_url=node.url, routes=[dict(STRIPE, key_json_pointer="/data/id")])
    for body, says in (('{"data": ', "the body is not valid JSON"),
                       ("not json", "the body is not valid JSON"),
                       ('{"data": {"id": {"x": 1}}}', "the value is object"),
                       ('{"data": {"id": 1.5}}', "the value is number"),
                       ('{"data": {"id": true}}', "the value is boolean"),
                       ('{"data": {"id": null}}', "the value is null"),
                       ('{"data": {"id": ""}}', "the key is empty"),
                       ('{"data": {"id": "%s"}}' % ("k" * 256), "longer than 255"),
                       ('{"data": {"id": "a\\u0001b"}}', "printable ASCII")):
        r = p.post("/webhooks/stripe", body)
        assert r.status == 400, (body, r.status)
        doc = problem(r)
        assert doc["type"].endswith("/invalid-key"), doc
        assert "key_json_pointer /data/id" in doc["detail"] and says in doc["detail"], doc
        assert r.header("Connection") != "close"  # the body was read whole
    missing = p.post("/webhooks/stripe", '{"data": [1, 2]}')
    assert missing.status == 400 and problem(missing)["type"].endswith("/missing-key")
    assert "/data/id in the JSON body" in problem(missing)["detail"]
    assert p.wait_metric("idemproxy_requests_total", 9, route="stripe", outcome="bad_key") == 9
    # Where the key is optional, a body without one passes through unprotected...
    # (forwarded as any request is: to the upstream's base path, with its Host)
    optional = make_proxy(upstream_url=node.url + "/base",
                          routes=[dict(STRIPE, key_required=False)])
    plain = json.dumps({"object": "event"})
    answers = [optional.post("/webhooks/stripe", plain) for _ in range(2)]
    assert [a.status for a in answers] == [201, 201]
    assert answers[0].json()["url"] == "/base/webhooks/stripe", answers[0].body
    # (A request is counted once its answer is out: with several I/O threads the
    # client can read the metric first.)
    assert wait_for(lambda: optional.metric("idemproxy_requests_total", route="stripe",
                                            outcome="passthrough") == 2)
    # ...and in shadow mode a refusal is only counted, and the request forwarded.
    shadow = make_proxy(upstream_url=node.url, routes=[dict(STRIPE, mode="shadow")])
    assert shadow.post("/webhooks/stripe", "not json").status == 201
    assert shadow.wait_metric("idemproxy_requests_total", 1, route="stripe",
                              outcome="shadow_would_reject") == 1


def test_a_bad_json_pointer_is_a_config_error_with_its_position(make_proxy, node):
    for bad, says in (("id", "must be a JSON pointer starting with /"),
                      ("", "must be a JSON pointer starting with /"),
                      ("/a~2b", "'~' must be followed by 0 or 1")):
        p = make_proxy(start=False, upstream_url=node.url,
                       routes=[dict(STRIPE, key_json_pointer=bad)])
        out = p.cli("check-config")
        assert out.returncode != 0
        assert re.search(re.escape(p.config_path) + r":\d+:\d+: .*key_json_pointer .*" +
                         re.escape(says), out.stderr), out.stderr


# --- The published policy (policy.path, policy.url, Link rel=describedby) -------------

WELL_KNOWN = "/.well-known/idempotency"
DESCRIBEDBY = '<%s>; rel="describedby"' % WELL_KNOWN


# The draft's MUST: the resource publishes its policy, expiry included; and its
# SHOULD: errors point to it. Generated from the YAML, so what it says is what the
# proxy does: the routes' TTLs and the statuses they answer with.
def test_the_policy_is_published_from_the_config_and_linked_from_answers(make_proxy, node, pg):
    routes = [dict(ORDERS[0], ttl="1h", max_ttl="3h", lease="10s", statuses={"mismatch": 409},
                   fingerprint={"json_exclude": ["/trace_id"], "query": ["account"],
                                "headers": ["X-Account"]}),
              dict(STRIPE, on_concurrent="wait"),
              {"name": "off", "path_prefix": "/v1/off", "enabled": False}]
    p = make_proxy(upstream_url=node.url, routes=routes)
    served = p.request("GET", WELL_KNOWN)
    assert served.status == 200 and served.header("Content-Type") == "application/json"
    assert served.header("Vary") == "Accept"
    doc = served.json()
    assert [r["name"] for r in doc["routes"]] == ["orders", "stripe"]  # enabled routes only
    orders, stripe = doc["routes"]
    assert orders["path_prefix"] == "/v1/orders" and orders["methods"] == ["POST", "PATCH"]
    assert orders["expiry"]["ttl"] == "1h" and orders["expiry"]["ttl_seconds"] == 3600
    assert orders["expiry"]["max_ttl"] == "3h" and orders["expiry"]["max_ttl_seconds"] == 10800
    assert "max-age=N" in orders["expiry"]["upstream_sets"]
    assert stripe["expiry"]["max_ttl"] == stripe["expiry"]["ttl"]  # by default, ttl
    assert orders["fingerprint"]["body"] == {"exclude": ["/trace_id"]}
    assert orders["fingerprint"]["query"] == ["account"]
    assert orders["fingerprint"]["headers"] == ["x-account"]
    assert stripe["fingerprint"]["query"] == "all" and stripe["fingerprint"]["headers"] == []
    assert stripe["fingerprint"]["body"].startswith("the whole body")
    assert orders["lease"]["seconds"] == 10 and orders["on_concurrent"].startswith("reject")
    assert orders["key"]["header"] == "Idempotency-Key" and orders["key"]["required"] is True
    assert orders["stored_statuses"]["http"] == ["200-299", "400-499"]
    assert stripe["key"]["json_pointer"] == "/id" and stripe["on_concurrent"].startswith("wait")
    errors = {e["type"].rsplit("/", 1)[1]: e for e in orders["errors"]}
    assert errors["key-mismatch"]["status"] == 409  # this route's statuses
    assert errors["key-mismatch"]["grpc_status"] == "FAILED_PRECONDITION"
    assert {e["type"].rsplit("/", 1)[1]: e for e in stripe["errors"]}["key-mismatch"]["status"] \
        == 422
    for slug, status in (("missing-key", 400), ("bad-key", 400), ("invalid-key", 400),
                         ("request-in-flight", 409), ("store-unavailable", 503),
                         ("body-too-large", 413), ("outcome-indeterminate", 409)):
        assert errors[slug]["status"] == status and errors[slug]["title"], slug
    # The CLI prints the very same document.
    printed = p.cli("policy")
    assert printed.returncode == 0 and printed.stdout.encode() == served.body
    # A browser gets a page.
    page = p.request("GET", WELL_KNOWN, headers={"Accept": "text/html,application/xhtml+xml"})
    assert page.status == 200 and page.header("Content-Type").startswith("text/html")
    # The admin page's rules: nothing loads or runs, no one frames it, no sniffing.
    assert page.header("Content-Security-Policy") == (
        "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    assert page.header("X-Content-Type-Options") == "nosniff"
    assert page.header("X-Frame-Options") == "DENY"
    assert served.header("X-Content-Type-Options") == "nosniff"
    text = page.body.decode()
    assert "<h2>orders: /v1/orders</h2>" in text and "ttl: 1h" in text
    assert "https://idemproxy.dev/problems/key-mismatch" in text
    assert p.cli("policy", "--html").stdout == text

    # Link: on a covered route's problems, its stored answers and their replays.
    missing = p.post("/v1/orders", "{}")
    assert missing.status == 400 and missing.header("Link") == DESCRIBEDBY
    key = "policy-" + uuid.uuid4().hex
    first = p.post("/v1/orders", '{"a": 1}', key=key)
    assert first.status == 201 and first.header("Link") == DESCRIBEDBY
    replay = p.post("/v1/orders", '{"a": 1}', key=key)  # from the replay cache
    assert replay.header("Idempotent-Replayed") == "true"
    assert [v for k, v in replay.headers if k.lower() == "link"] == [DESCRIBEDBY]
    other = make_proxy(upstream_url=node.url, routes=routes)  # from PostgreSQL
    replay = other.post("/v1/orders", '{"a": 1}', key=key)
    assert replay.header("Idempotent-Replayed") == "true" and replay.header("Link") == DESCRIBEDBY
    mismatch = p.post("/v1/orders", '{"a": 2}', key=key)
    assert mismatch.status == 409 and mismatch.header("Link") == DESCRIBEDBY
    status, fields, _, _ = curl("--http2-prior-knowledge", "-X", "POST", "-H",
                                "Idempotency-Key: " + key, "-H", "Content-Type: application/json",
                                "-d", '{"a": 1}', "http://127.0.0.1:%d/v1/orders" % p.port)
    assert status == 201 and fields.get("link") == DESCRIBEDBY
    assert fields.get("idempotent-replayed") == "true"
    # Nothing a route does not cover says it: a GET, an uncovered path.
    assert p.request("GET", "/v1/orders").header("Link") is None
    assert p.post("/elsewhere", "{}").header("Link") is None
    assert node.executions(key) == 1


# policy.url: the operator publishes the document elsewhere (a developer portal); the
# links name it and the proxy serves nothing at the well-known path. A reload
# republishes: the served document follows the config in force.
def test_an_external_policy_is_linked_and_a_reload_republishes(make_proxy, node):
    url = "https://developer.example.com/idempotency"
    p = make_proxy(upstream_url=node.url, routes=ORDERS, extra_top={"policy": {"url": url}})
    missing = p.post("/v1/orders", "{}")
    assert missing.header("Link") == '<%s>; rel="describedby"' % url
    upstream = p.request("GET", WELL_KNOWN)
    assert upstream.status == 201 and upstream.json()["url"] == WELL_KNOWN  # the upstream's
    p = make_proxy(upstream_url=node.url, routes=ORDERS, extra_top={"policy": {"path": "/policy"}})
    assert p.request("GET", "/policy").json()["routes"][0]["expiry"]["ttl"] == "24h"
    assert p.post("/v1/orders", "{}").header("Link") == '</policy>; rel="describedby"'
    doc = json.loads(open(p.config_path).read())
    doc["routes"][0]["ttl"] = "7d"
    p.write_config(json.dumps(doc))
    p.signal(signal.SIGHUP)
    assert wait_for(lambda: p.request("GET", "/policy").json()["routes"][0]["expiry"]["ttl"]
                    == "168h")
    off = make_proxy(upstream_url=node.url, routes=ORDERS, extra_top={"policy": {"path": ""}})
    assert off.post("/v1/orders", "{}").header("Link") is None
    assert off.request("GET", WELL_KNOWN).status == 201  # forwarded


def test_a_bad_policy_location_is_a_config_error_with_its_position(make_proxy, node):
    for policy, says in (({"path": "well-known"}, "policy.path must be an absolute path"),
                         ({"path": "/p?x=1"}, "policy.path must be an absolute path"),
                         ({"url": "/relative"}, "policy.url must be an absolute http or https"),
                         ({"url": "https://a.example/<x>"}, "policy.url must be an absolute"),
                         ({"where": "/x"}, 'unknown key "where"')):
        p = make_proxy(start=False, upstream_url=node.url, routes=ORDERS,
                       extra_top={"policy": policy})
        out = p.cli("check-config")
        assert out.returncode == 2
        assert re.search(re.escape(p.config_path) + r":\d+:\d+: .*" + re.escape(says),
                         out.stderr), out.stderr


# --- No re-execution after expiry (after_expiry, tombstone_ttl, max_key_age) ---------

def uuid7(ms):
    """A UUIDv7 (RFC 9562 5.7) minted at Unix time `ms`."""
    rand = uuid.uuid4().hex
    h = "%012x" % ms + "7" + rand[:3] + "8" + rand[3:18]
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:32])


def record_row(pg, key):
    return pg.sql("SELECT state, status, fingerprint <> '', headers IS NULL, body IS NULL,"
                  " pg_column_size(r.*) FROM idempotency_records r WHERE key = '%s'" % key
                  ).split("|")


# Seed 003's "key expired while the client is still retrying": past ttl, every peer
# (Stripe included) executes the retry a second time. With after_expiry: reject, the
# answer is dropped after ttl but a tombstone stays until tombstone_ttl, and a retry
# is told when the original completed instead of being executed. GC turns records
# into tombstones and deletes them after tombstone_ttl; then the key is free.
def test_a_retry_after_ttl_is_refused_while_the_tombstone_lasts(make_proxy, node, pg):
    # A route name of its own: GC finds a route's records by the name they were stored
    # under, and this test's database holds other tests' "orders" records.
    route = dict(ORDERS[0], name="tombs", ttl="1s", after_expiry="reject", tombstone_ttl="4s")
    p = make_proxy(upstream_url=node.url, routes=[route], gc={"interval": "0s"})
    key = "tomb-" + uuid.uuid4().hex
    body = json.dumps({"amount": 1200, "currency": "eur"})  # a 1.5 KB answer (pad)
    assert p.post("/v1/orders?pad=1500", body, key=key).status == 201
    assert p.post("/v1/orders?pad=1500", body, key=key).header("Idempotent-Replayed") == "true"
    state, status, fingerprinted, no_headers, no_body, full_size = record_row(pg, key)
    assert (state, status, no_body) == ("completed", "201", "f")
    time.sleep(1.3)
    for proxy in (p, make_proxy(upstream_url=node.url, routes=[route], gc={"interval": "0s"})):
        gone = proxy.post("/v1/orders?pad=1500", body, key=key)  # from the cache's instance and another
        assert gone.status == 409, gone.body
        doc = problem(gone)
        assert doc["type"].endswith("/expired") and "completed at 20" in doc["detail"], doc
        assert "after_expiry: reject" in doc["detail"]
        assert gone.header("Link") == DESCRIBEDBY and gone.header("Idempotent-Replayed") is None
    assert problem(p.post("/v1/orders?pad=1500", '{"other": 1}', key=key))["type"].endswith("/key-mismatch")
    assert node.executions(key) == 1
    assert p.wait_metric("idemproxy_requests_total", 1, route="tombs", outcome="expired") == 1
    # GC keeps a tombstone: the answer goes, the fingerprint and status stay.
    out = p.cli("gc")
    assert out.returncode == 0 and "kept 1 tombstone" in out.stdout, out.stdout
    state, status, fingerprinted, no_headers, no_body, size = record_row(pg, key)
    assert (state, status, fingerprinted, no_headers, no_body) == ("completed", "201", "t", "t", "t")
    # A tombstone is a small fixed cost per key next to the record it replaces
    # (docs/SCALING.md, "Storage per key").
    print("storage per key: record %s bytes, tombstone %s bytes" % (full_size, size))
    assert int(size) <= 300 and int(size) * 4 < int(full_size), (size, full_size)
    assert p.post("/v1/orders?pad=1500", body, key=key).status == 409
    # After tombstone_ttl the key is free again, and GC deletes what is left.
    time.sleep(3)
    assert "deleted" in p.cli("gc").stdout
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE key = '%s'" % key) == "0"
    assert p.post("/v1/orders?pad=1500", body, key=key).status == 201
    assert node.executions(key) == 2


# The in-process GC does the same on its own, and counts it.
def test_the_in_process_gc_keeps_tombstones_and_counts_them(make_proxy, node, pg):
    name = "tombs-" + uuid.uuid4().hex[:8]  # GC finds a route's records by name
    route = dict(ORDERS[0], name=name, ttl="1s", after_expiry="reject", tombstone_ttl="1h")
    p = make_proxy(upstream_url=node.url, routes=[route], gc={"interval": "300ms"})
    keys = ["tombgc-%d-%s" % (i, uuid.uuid4().hex) for i in range(3)]
    for k in keys:
        assert p.post("/v1/orders?pad=1500", "{}", key=k).status == 201
    assert wait_for(lambda: p.metric("idemproxy_gc_tombstoned_total") == 3, timeout=10)
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE route = '%s'"
                  " AND body IS NULL AND headers IS NULL AND status = 201" % name) == "3"
    assert all(p.post("/v1/orders?pad=1500", "{}", key=k).status == 409 for k in keys)
    assert sum(node.executions(k) for k in keys) == 3


# What the fingerprint covers is the route's choice (fingerprint: include/exclude,
# query, headers), and changing it never turns an honest retry into 422: a record is
# judged under the rule it was stored with, after a SIGHUP reload and on another
# instance that still runs the old config, over the real PostgreSQL.
def test_a_fingerprint_rule_change_keeps_honest_retries_replaying(make_proxy, node, pg):
    p = make_proxy(upstream_url=node.url, routes=ORDERS)
    before = "rule-before-" + uuid.uuid4().hex
    body = json.dumps({"amount": 100, "trace_id": "t-1"})
    assert p.post("/v1/orders", body, key=before).status == 201
    doc = json.loads(open(p.config_path).read())
    doc["routes"][0]["fingerprint"] = {"json_exclude": ["/trace_id"], "query": "none"}
    p.write_config(json.dumps(doc))
    p.signal(signal.SIGHUP)
    assert wait_for(lambda: p.request("GET", WELL_KNOWN).json()["routes"][0]["fingerprint"]
                    ["body"] == {"exclude": ["/trace_id"]})
    # The record of before the reload: the whole body still counts for it.
    assert p.post("/v1/orders", body, key=before).header("Idempotent-Replayed") == "true"
    stale = p.post("/v1/orders", json.dumps({"amount": 100, "trace_id": "t-2"}), key=before)
    assert stale.status == 422, stale.body
    # A record made under the new rule keeps it in the store, ahead of its digest.
    after = "rule-after-" + uuid.uuid4().hex
    assert p.post("/v1/orders?sig=a", body, key=after).status == 201
    assert pg.sql("SELECT fingerprint LIKE '{\"exclude\":[\"/trace_id\"],\"query\":\"none\"}%%'"
                  " FROM idempotency_records WHERE key = '%s'" % after) == "t"
    rotated = json.dumps({"trace_id": "t-3", "amount": 100})
    assert p.post("/v1/orders?sig=b", rotated, key=after).header("Idempotent-Replayed") == "true"
    # An instance still on the old config judges it under the new rule it was made with.
    old = make_proxy(upstream_url=node.url, routes=ORDERS)
    assert old.post("/v1/orders?sig=c", rotated, key=after).header("Idempotent-Replayed") == "true"
    other = old.post("/v1/orders", json.dumps({"amount": 200, "trace_id": "t-1"}), key=after)
    assert other.status == 422, other.body
    assert node.executions(before) == 1 and node.executions(after) == 1


# The upstream sets one answer's retention (Idempotency-Policy: max-age=N): shorter
# than ttl, or longer up to max_ttl. The record keeps its own window in the real
# PostgreSQL, so another instance, GC and a tombstone route all read it from there.
def test_the_upstream_sets_one_answers_retention_with_max_age(make_proxy, node, pg):
    name = "maxage-" + uuid.uuid4().hex[:8]  # GC finds a route's records by name
    route = dict(ORDERS[0], name=name, ttl="1h", max_ttl="2h", after_expiry="reject",
                 tombstone_ttl="1d")
    p = make_proxy(upstream_url=node.url, routes=[route], gc={"interval": "0s"})
    short = "maxage-short-" + uuid.uuid4().hex
    first = p.post("/v1/orders?policy=max-age%3D1", "{}", key=short)
    assert first.status == 201 and first.header("Idempotency-Policy") is None
    expires = email.utils.parsedate_to_datetime(first.header("Idempotency-Key-Expires"))
    assert abs(expires.timestamp() - time.time() - 1) < 2, first.header("Idempotency-Key-Expires")
    assert pg.sql("SELECT round(extract(epoch from replay_until - completed_at)),"
                  " round(extract(epoch from expires_at - completed_at))"
                  " FROM idempotency_records WHERE key = '%s'" % short) == "1|86400"
    again = p.post("/v1/orders?policy=max-age%3D1", "{}", key=short)
    assert again.header("Idempotent-Replayed") == "true"
    assert again.header("Idempotency-Policy") is None
    longer = "maxage-long-" + uuid.uuid4().hex
    assert p.post("/v1/orders?policy=max-age%3D999999", "{}", key=longer).status == 201
    assert pg.sql("SELECT round(extract(epoch from replay_until - completed_at))"
                  " FROM idempotency_records WHERE key = '%s'" % longer) == "7200"
    time.sleep(1.3)
    # Past its own second, from this instance (its cache too) and another: refused as
    # expired, never executed again; the longer one still replays.
    other = make_proxy(upstream_url=node.url, routes=[route], gc={"interval": "0s"})
    for proxy in (p, other):
        gone = proxy.post("/v1/orders?policy=max-age%3D1", "{}", key=short)
        assert gone.status == 409 and problem(gone)["type"].endswith("/expired"), gone.body
        kept = proxy.post("/v1/orders?policy=max-age%3D999999", "{}", key=longer)
        assert kept.header("Idempotent-Replayed") == "true", kept.body
    assert node.executions(short) == 1 and node.executions(longer) == 1
    # GC drops the short answer at its own expiry and keeps the longer one's.
    assert "kept 1 tombstone" in p.cli("gc").stdout
    assert pg.sql("SELECT key LIKE 'maxage-short-%%', body IS NULL FROM idempotency_records"
                  " WHERE route = '%s' ORDER BY key" % name).split("\n") == ["f|f", "t|t"]


# A value the proxy cannot read is logged and ignored: the route's ttl holds.
def test_a_malformed_max_age_is_logged_and_ignored(make_proxy, node, pg):
    p = make_proxy(upstream_url=node.url, routes=ORDERS)
    key = "maxage-bad-" + uuid.uuid4().hex
    first = p.post("/v1/orders?policy=max-age%3Dsoon", "{}", key=key)
    assert first.status == 201 and first.header("Idempotency-Policy") is None
    assert pg.sql("SELECT replay_until = expires_at AND expires_at - completed_at = interval '24h'"
                  " FROM idempotency_records WHERE key = '%s'" % key) == "t"
    again = p.post("/v1/orders?policy=max-age%3Dsoon", "{}", key=key)
    assert again.header("Idempotent-Replayed") == "true", again.body
    assert wait_for(lambda: 'cannot read, ignored: "max-age=soon"' in p.read_log(), timeout=5), \
        p.read_log()


def test_after_expiry_execute_runs_a_late_retry_again(make_proxy, node):
    p = make_proxy(upstream_url=node.url, routes=[dict(ORDERS[0], ttl="1s")],
                   gc={"interval": "0s"})
    key = "late-" + uuid.uuid4().hex
    assert p.post("/v1/orders", "{}", key=key).status == 201
    time.sleep(1.3)
    again = p.post("/v1/orders", "{}", key=key)
    assert again.status == 201 and again.header("Idempotent-Replayed") is None
    assert node.executions(key) == 2


# A UUIDv7 key carries its minting time: a retry minted longer ago than max_key_age
# outlived any record of its first try, so it is refused, not executed again.
def test_a_uuid7_key_older_than_max_key_age_is_refused(make_proxy, node):
    route = dict(ORDERS[0], max_key_age="30d", statuses={"expired": 410})
    p = make_proxy(upstream_url=node.url, routes=[route])
    now_ms = int(time.time() * 1000)
    old = uuid7(now_ms - 40 * 86400 * 1000)
    refused = p.post("/v1/orders", "{}", key=old)
    assert refused.status == 410, refused.body
    doc = problem(refused)
    assert doc["type"].endswith("/expired") and "UUIDv7 minted at" in doc["detail"]
    assert "max_key_age (30 days)" in doc["detail"]
    assert node.executions(old) == 0
    fresh = uuid7(now_ms - 29 * 86400 * 1000)
    assert p.post("/v1/orders", "{}", key=fresh).status == 201
    for other in (str(uuid.uuid4()), "order-1234-" + uuid.uuid4().hex, old[:14] + "4" + old[15:]):
        assert p.post("/v1/orders", "{}", key=other).status == 201, other  # not judged
    shadow = make_proxy(upstream_url=node.url, routes=[dict(route, mode="shadow")])
    assert shadow.post("/v1/orders", "{}", key=old).status == 201
    assert shadow.wait_metric("idemproxy_requests_total", 1, route="orders",
                              outcome="shadow_would_reject") == 1


def test_expiry_settings_are_checked_with_their_position(make_proxy, node):
    for settings, says in (
            ({"after_expiry": "reject"}, "after_expiry: reject needs a tombstone_ttl longer"),
            ({"after_expiry": "reject", "ttl": "1h", "tombstone_ttl": "1h"},
             "needs a tombstone_ttl longer than ttl"),
            ({"tombstone_ttl": "30d"}, "tombstone_ttl applies with after_expiry: reject"),
            ({"after_expiry": "later"}, "after_expiry must be"),
            ({"max_key_age": "0s"}, "max_key_age must be positive"),
            ({"max_ttl": "0s"}, "max_ttl must be positive"),
            ({"ttl": "1h", "max_ttl": "30m"}, "max_ttl must be at least ttl"),
            ({"fingerprint": {"json_include": ["/a"], "json_exclude": ["/b"]}},
             "json_include and json_exclude do not go together"),
            ({"fingerprint": {"json_include": ["a"]}}, "fingerprint.json_include"),
            ({"fingerprint": {"query": "some"}}, "fingerprint.query must be"),
            ({"fingerprint": {"headers": ["X Bad"]}}, "fingerprint.headers"),
            ({"fingerprint": {"body": ["/a"]}}, "fingerprint")):
        p = make_proxy(start=False, upstream_url=node.url, routes=[dict(ORDERS[0], **settings)])
        out = p.cli("check-config")
        assert out.returncode == 2
        assert re.search(re.escape(p.config_path) + r":\d+:\d+: .*" + re.escape(says),
                         out.stderr), out.stderr

"""The whole idempotency contract (issue 24), through the real binary, a real
PostgreSQL and Node's http module as the upstream: the upstream's opt-out of
storage (Idempotency-Policy: no-store) and key namespaces."""
import json
import uuid

from conformance_peers import ORDERS, node  # noqa: F401  (fixture)
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

"""OpenTelemetry spans from the running proxy (tracing: in the config), exported over
OTLP/HTTP to tests/otlp/receiver.js, which decodes each export with the OpenTelemetry
JS project's own message definitions (@opentelemetry/otlp-transformer 0.52).

One server span per request, named by its method and route, with the HTTP semantic
conventions' attributes and idempotency.outcome; children for the claim, the upstream
exchange and the completion; the upstream receives a traceparent whose parent is the
upstream span; and a replay's span links to the span of the request that executed."""
import hashlib
import json
import os
import socket
import subprocess
import time
import urllib.request
import uuid

import pytest

from h2_peer import Client

HERE = os.path.dirname(os.path.abspath(__file__))
OTLP = os.path.join(HERE, "..", "otlp")
ROUTES = [{"name": "orders", "path_prefix": "/v1/orders"}]
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_PARENT = "00f067aa0ba902b7"


class Receiver:
    def __init__(self):
        if not os.path.isdir(os.path.join(OTLP, "node_modules", "@opentelemetry",
                                          "otlp-transformer")):
            subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                           cwd=OTLP, check=True)
        self.proc = subprocess.Popen(["node", os.path.join(OTLP, "receiver.js"), "0"],
                                     stdout=subprocess.PIPE, text=True)
        self.port = json.loads(self.proc.stdout.readline())["port"]
        self.endpoint = "http://127.0.0.1:%d/v1/traces" % self.port

    def received(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/received" % self.port, timeout=5) as r:
            return json.loads(r.read())

    def spans_until(self, ready, timeout=10):
        deadline = time.time() + timeout
        while True:
            got = self.received()
            if ready(got["spans"]) or time.time() > deadline:
                assert not got["errors"], got["errors"]
                return got
            time.sleep(0.05)

    def close(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def traced(make_proxy, receiver):
    return make_proxy(routes=ROUTES, extra_top={"tracing": {
        "otlp_endpoint": receiver.endpoint, "sample_ratio": 1.0,
        "service_name": "orders-sidecar", "batch_delay": "100ms"}})


def server_spans(spans):
    return [s for s in spans if s["kind"] == 2]


def children(spans, parent):
    return {s["name"]: s for s in spans if s["parentSpanId"] == parent["spanId"]}


def test_an_http10_request_is_labelled_with_the_version_it_spoke(traced, receiver, upstream):
    trace = "%032x" % uuid.uuid4().int
    with socket.create_connection(("127.0.0.1", traced.port), timeout=10) as s:
        s.sendall(("GET /status HTTP/1.0\r\ntraceparent: 00-%s-%s-01\r\n\r\n"
                   % (trace, CLIENT_PARENT)).encode())
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 ")
    got = receiver.spans_until(
        lambda spans: any(x["traceId"] == trace and x["kind"] == 2 for x in spans))
    (server,) = server_spans([x for x in got["spans"] if x["traceId"] == trace])
    assert server["attributes"]["network.protocol.version"] == "1.0"


def test_an_executed_request_has_a_server_span_with_its_claim_upstream_and_completion(
        traced, receiver, upstream):
    key = "span-" + uuid.uuid4().hex
    traceparent = "00-%s-%s-01" % (CLIENT_TRACE, CLIENT_PARENT)
    r = traced.post("/v1/orders?n=1", '{"amount": 5}', key=key,
                    headers={"traceparent": traceparent})
    assert r.status == 201
    got = receiver.spans_until(lambda spans: len(spans) >= 4)
    spans = [s for s in got["spans"] if s["traceId"] == CLIENT_TRACE]
    (server,) = server_spans(spans)
    # The client's span is its parent (a sampled traceparent is always followed).
    assert server["parentSpanId"] == CLIENT_PARENT
    assert server["name"] == "POST /v1/orders"
    a = server["attributes"]
    assert a["http.request.method"] == "POST"
    assert a["http.route"] == "/v1/orders"
    assert a["http.response.status_code"] == 201
    assert a["network.protocol.name"] == "http" and a["network.protocol.version"] == "1.1"
    assert a["server.address"] == "127.0.0.1" and a["server.port"] == traced.port
    assert a["client.address"] == "127.0.0.1"
    assert a["idempotency.outcome"] == "executed"
    # The key's hash, never the key.
    assert a["idempotency.key_hash"] == hashlib.sha256(key.encode()).hexdigest()[:16]
    assert key not in json.dumps(got)
    kids = children(spans, server)
    assert set(kids) == {"idempotency claim", "upstream", "idempotency complete"}
    up = kids["upstream"]
    assert up["kind"] == 3 and up["attributes"]["http.response.status_code"] == 201
    for child in kids.values():
        assert server["startTimeUnixNano"] <= child["startTimeUnixNano"]
        assert child["endTimeUnixNano"] <= server["endTimeUnixNano"]
    # The upstream's parent is the upstream span, in the client's trace.
    (seen,) = upstream.executions.headers_of(key)
    assert seen.get("traceparent") == "00-%s-%s-01" % (CLIENT_TRACE, up["spanId"])
    assert {"service.name": "orders-sidecar"}.items() <= got["resources"][0].items()


def test_a_streamed_answer_has_a_stream_span_with_its_bytes_and_chunks(make_proxy, receiver):
    p = make_proxy(routes=[{"name": "big", "path_prefix": "/v1/big"}], extra_top={"tracing": {
        "otlp_endpoint": receiver.endpoint, "sample_ratio": 1.0, "batch_delay": "100ms"}})
    r = p.post("/v1/big?bytes=600000&chunked=1", "{}", key="stream-" + uuid.uuid4().hex)
    assert r.status == 200 and len(r.body) == 600000
    got = receiver.spans_until(lambda spans: len(spans) >= 5)
    (server,) = server_spans(got["spans"])
    kids = children(got["spans"], server)
    assert set(kids) == {"idempotency claim", "upstream", "idempotency stream",
                         "idempotency complete"}
    stream = kids["idempotency stream"]
    # 600,000 bytes: two chunks of 256 KiB and the rest, stored as they flowed.
    assert stream["attributes"]["idempotency.stream.bytes"] == 600000
    assert stream["attributes"]["idempotency.stream.chunks"] == 3
    assert kids["upstream"]["endTimeUnixNano"] <= stream["startTimeUnixNano"]
    assert stream["endTimeUnixNano"] <= kids["idempotency complete"]["startTimeUnixNano"]
    assert p.metric("idemproxy_stream_duration_seconds_count") == 1


def test_a_replay_links_to_the_span_of_the_request_that_executed(traced, receiver):
    key = "link-" + uuid.uuid4().hex
    first = traced.post("/v1/orders", '{"amount": 7}', key=key)
    assert first.status == 201
    # The retry comes over HTTP/2, in a trace of its own.
    c = Client(traced.port)
    sid = c.request("POST", "/v1/orders", b'{"amount": 7}',
                    [("idempotency-key", key), ("content-type", "application/json")])
    (again,) = c.wait(sid)
    c.close()
    assert again.status == 201 and again.header("idempotent-replayed") == "true"
    got = receiver.spans_until(lambda spans: len(server_spans(spans)) >= 2)
    executed, replayed = sorted(server_spans(got["spans"]),
                                key=lambda s: int(s["startTimeUnixNano"]))
    assert executed["attributes"]["idempotency.outcome"] == "executed"
    assert replayed["attributes"]["idempotency.outcome"] == "replayed"
    assert replayed["attributes"]["network.protocol.version"] == "2"
    assert replayed["traceId"] != executed["traceId"]
    assert replayed["links"] == [{"traceId": executed["traceId"], "spanId": executed["spanId"]}]
    # A replay neither claims, forwards nor completes anything.
    assert children(got["spans"], replayed) == {}
    assert executed["attributes"]["idempotency.key_hash"] == \
        replayed["attributes"]["idempotency.key_hash"]


def test_an_unsampled_traceparent_records_nothing_and_still_propagates(traced, receiver,
                                                                        upstream):
    key = "unsampled-" + uuid.uuid4().hex
    r = traced.post("/v1/orders", "{}", key=key,
                    headers={"traceparent": "00-%s-%s-00" % (CLIENT_TRACE, CLIENT_PARENT)})
    assert r.status == 201
    # A sampled request after it: once its spans are in, the first's would be too.
    marker = traced.post("/v1/orders", "{}", key="marker-" + uuid.uuid4().hex)
    assert marker.status == 201
    got = receiver.spans_until(lambda spans: len(server_spans(spans)) >= 1)
    time.sleep(0.3)
    got = receiver.received()
    assert all(s["traceId"] != CLIENT_TRACE for s in got["spans"])
    (seen,) = upstream.executions.headers_of(key)
    tp = seen.get("traceparent")
    assert tp.startswith("00-%s-" % CLIENT_TRACE) and tp.endswith("-00")
    assert tp != "00-%s-%s-00" % (CLIENT_TRACE, CLIENT_PARENT)


def test_a_pass_through_request_and_a_refusal_have_spans_too(traced, receiver):
    r = traced.request("GET", "/elsewhere")
    assert r.status == 201  # the fake upstream's answer
    r = traced.request("POST", "/v1/orders", "{}", {"Content-Type": "application/json",
                                                    "Idempotency-Key": ""})
    assert r.status == 400
    got = receiver.spans_until(lambda spans: len(server_spans(spans)) >= 2)
    by_outcome = {s["attributes"]["idempotency.outcome"]: s for s in server_spans(got["spans"])}
    passed = by_outcome["passthrough"]
    assert passed["name"] == "GET" and "http.route" not in passed["attributes"]
    assert set(children(got["spans"], passed)) == {"upstream"}
    refused = by_outcome["bad_key"]
    assert refused["name"] == "POST /v1/orders"
    assert refused["attributes"]["http.response.status_code"] == 400
    assert children(got["spans"], refused) == {}


@pytest.mark.parametrize("mode", [{"answer": "hang"}, {"answer": "status", "status": 503},
                                  {"answer": "slow", "delay_ms": 3000}])
def test_a_receiver_that_hangs_fails_or_crawls_never_delays_a_request(traced, receiver, mode):
    req = urllib.request.Request("http://127.0.0.1:%d/mode" % receiver.port,
                                 data=json.dumps(mode).encode(), method="POST")
    urllib.request.urlopen(req, timeout=5).read()
    slowest = 0.0
    for i in range(30):
        started = time.time()
        r = traced.post("/v1/orders", "{}", key="calm-%d-%s" % (i, uuid.uuid4().hex))
        slowest = max(slowest, time.time() - started)
        assert r.status == 201
        time.sleep(0.01)  # across several batch delays (100 ms)
    assert slowest < 1.0, slowest

"""HTTP conformance on both hops, against real peers (issue 10): nginx, Node's http
and Python's http.server upstreams, curl, Node's fetch and urllib clients. Each case
names the RFC section that decides it. Leases, caches and limits are in
test_conformance_state.py."""
import json
import socket
import subprocess
import time
import uuid

import pytest

from conformance_peers import (ORDERS, dechunk, final_answer, keyed_post, nginx, node,  # noqa: F401
                               pyserver, status_of)
from harness import assert_forwarding_fields, fields_by_name, raw_exchange
from peers import curl, node_fetch, urllib_post


# RFC 9112 7.1: a chunked body ends with exactly one last-chunk. The proxy writes the
# framing itself, so the pooled connection stays in step and the next keyed request
# gets its own answer (defect 1: nginx answered a stray "0\r\n\r\n" with 400, and the
# next keyed request stored that 400 as its own).
def test_chunked_pass_through_keeps_the_pooled_connection_in_step(make_proxy, nginx):
    proxy = make_proxy(upstream_url=nginx.url, routes=ORDERS)
    for i in range(40):
        chunked = (b"POST /plain HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                   b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                   b"2\r\n{}\r\n0\r\n\r\n")
        assert status_of(raw_exchange(proxy.port, chunked)) == 201
        ledger = "L%d" % i
        r = keyed_post(proxy, "/v1/orders", "chunk-%s-%d" % (uuid.uuid4().hex, i), ledger)
        assert r.status == 201, r.body
        assert r.json()["id"] == ledger
    assert "400" not in nginx.statuses()


# RFC 9110 6.5: trailer fields are not merged into the header section; the proxy
# never forwards them (RFC 9110 6.5.1 lets it discard them).
def test_chunked_trailers_never_reach_the_upstream_as_header_fields(make_proxy, node):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    for path, key in (("/v1/orders", "trailer-%s" % uuid.uuid4().hex), ("/plain", None)):
        head = b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" % path.encode()
        if key:
            head += b"Idempotency-Key: %s\r\n" % key.encode()
        raw = (head + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
               b"2\r\n{}\r\n0\r\nIdempotency-Key: smuggled\r\nX-Extra: 1\r\n\r\n")
        status, _, body = final_answer(raw_exchange(proxy.port, raw))
        assert status == 201
        seen = json.loads(body)
        assert seen["key_fields"] == ([key] if key else [])
        assert seen["trailers"] == {}
        assert seen["bytes"] == 2


# RFC 9112 7.1.2 and RFC 9110 6.5.1, the answer's side: passed through, an answer's
# trailer fields reach the client as trailers, after the last chunk, never in the
# header section; on a covered route the stored answer discards them (6.5.1 lets a
# recipient), so neither the first answer nor a replay turns them into header fields.
# Node's res.addTrailers writes them; curl and raw bytes read them.
def test_an_answers_trailers_stay_trailers(make_proxy, node):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    raw = raw_exchange(proxy.port, b"POST /plain?trailers=1 HTTP/1.1\r\nHost: t\r\n"
                       b"TE: trailers\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
    head, _, framed = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower() and b"x-checksum" not in head.lower()
    body = dechunk(framed)
    assert framed.lower().endswith(b"\r\n0\r\nx-checksum: %d\r\n\r\n" % len(body))
    def curl_head_and_trailers(*extra):
        return subprocess.run(["curl", "-sS", "-D", "-", "-o", "/dev/null", "-X", "POST", "-d", "{}",
                               *extra, "http://127.0.0.1:%d/plain?trailers=1" % proxy.port],
                              capture_output=True, timeout=30, check=True).stdout.decode().lower()
    # curl passes trailers on after the head's blank line; a header field is before it.
    head, _, after = curl_head_and_trailers("-H", "TE: trailers").partition("\r\n\r\n")
    assert "x-checksum" not in head and after.startswith("x-checksum: ")
    # A client that did not say it takes trailers (RFC 9110 10.1.4) gets none: they are
    # dropped (RFC 9110 6.5.1), never turned into header fields.
    head, _, after = curl_head_and_trailers().partition("\r\n\r\n")
    assert "x-checksum" not in head and "x-checksum" not in after
    key = "trailers-" + uuid.uuid4().hex
    for _ in range(2):
        status, fields, _ = curl("-X", "POST", "-H", "Content-Type: application/json",
                                 "-H", "Idempotency-Key: " + key, "-d", "{}",
                                 "http://127.0.0.1:%d/v1/orders?trailers=1" % proxy.port)[:3]
        assert status == 201 and "x-checksum" not in fields
        assert "idemproxy-trailers" not in fields
    assert fields.get("idempotent-replayed") == "true" and node.executions(key) == 1


# RFC 9110 15.2: a 1xx is interim; the final answer follows on the same connection.
# Forwarded to an HTTP/1.1 client (103 Early Hints, 102), never stored, never taken
# for the answer (defect 2: the 201 was left on the pooled connection for the next
# request).
@pytest.mark.parametrize("interim", ["hints", "processing", "continue"])
def test_interim_responses_are_read_past_on_the_idempotent_path(make_proxy, node, interim):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    key = "interim-%s-%s" % (interim, uuid.uuid4().hex)
    url = "http://127.0.0.1:%d/v1/orders?%s=1" % (proxy.port, interim)
    args = ["-X", "POST", "-H", "Content-Type: application/json", "-H", "Idempotency-Key: " + key,
            "-d", "{}", url]
    status, headers, body, interims = curl("-H", "X-Ledger-Id: first", *args)
    assert status == 201 and json.loads(body)["id"] == "first"
    assert interims == {"hints": [103], "processing": [102], "continue": []}[interim]
    # The next request on a pooled connection gets its own answer, not the 201 above.
    other = keyed_post(proxy, "/v1/orders", key + "-b", "second")
    assert other.status == 201 and other.json()["id"] == "second"
    status, headers, body, _ = curl("-H", "X-Ledger-Id: retry", *args)
    assert status == 201 and headers.get("idempotent-replayed") == "true"
    assert json.loads(body)["id"] == "first"
    assert node.executions(key) == 1


def test_interim_responses_on_pass_through_over_keep_alive(make_proxy, node):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    base = "http://127.0.0.1:%d" % proxy.port
    reqs = [{"method": "GET", "url": base + "/page?hints=1&n=%d" % i,
             "headers": {"X-Ledger-Id": "g%d" % i}} for i in range(30)]
    answers = node_fetch(reqs, parallel=3)
    for i, a in enumerate(answers):
        assert a["status"] == 201, a
        assert json.loads(a["body"])["id"] == "g%d" % i


def test_an_http10_client_never_gets_a_1xx(make_proxy, node):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    raw = raw_exchange(proxy.port, b"GET /page?hints=1 HTTP/1.0\r\nX-Ledger-Id: old\r\n\r\n")
    assert raw.startswith(b"HTTP/1.0 201"), raw[:80]
    assert b"103" not in raw.split(b"\r\n")[0]


# RFC 9110 8.6 / RFC 9112 6.3: a request with Content-Length over 1 MiB is
# streamed (pass-through) or answered 413 by the route's max_body, never 400
# (defect 3: Beast's default body limit on the head parser).
def test_large_content_length_streams_on_pass_through_and_gets_413_on_a_route(make_proxy, node):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    big = b"x" * (12 * 1024 * 1024)
    status, _, body = urllib_post("http://127.0.0.1:%d/upload" % proxy.port, big,
                                  {"Content-Type": "application/octet-stream"})
    assert status == 201 and json.loads(body)["bytes"] == len(big)
    key = "big-%s" % uuid.uuid4().hex
    status, _, body = urllib_post("http://127.0.0.1:%d/v1/orders" % proxy.port, big,
                                  {"Content-Type": "application/octet-stream",
                                   "Idempotency-Key": key})
    assert status == 413 and json.loads(body)["type"].endswith("/body-too-large")
    assert node.executions(key) == 0


# The same with curl as the client, told not to wait for 100-continue. curl stops
# uploading once the early 413 arrives, so this passed with the 1 MiB cap too; the
# urllib test above is the one that needs the lingering close (RFC 9112 9.6).
def test_curl_sending_a_large_body_to_a_413_route_reads_the_answer(make_proxy, node, tmp_path):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    body = tmp_path / "big"
    body.write_bytes(b"x" * (12 * 1024 * 1024))
    key = "big-curl-%s" % uuid.uuid4().hex
    status, _, answer, _ = curl("-X", "POST", "-H", "Expect:", "-H", "Idempotency-Key: " + key,
                                "-H", "Content-Type: application/octet-stream",
                                "--data-binary", "@%s" % body,
                                "http://127.0.0.1:%d/v1/orders" % proxy.port)
    assert status == 413 and json.loads(answer)["type"].endswith("/body-too-large")
    assert node.executions(key) == 0


# RFC 9112 9.6: after a final answer to a request it did not read to the end, the
# proxy half-closes and reads on, so a client still sending (the 12 MiB above) gets
# the 413 and not a reset. It reads for a bounded time: a client that goes quiet is
# closed after 2 s without data.
def test_a_client_that_stops_sending_after_a_413_is_closed_within_seconds(make_proxy, node):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(b"POST /v1/orders HTTP/1.1\r\nHost: t\r\nIdempotency-Key: quiet\r\n"
                  b"Content-Length: 104857600\r\n\r\n" + b"x" * 1024)
        started = time.time()
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        closed_after = time.time() - started
    assert data.startswith(b"HTTP/1.1 413 ")
    assert closed_after < 5


# RFC 9110 8.6: "Content-Length: 2, 2" may be taken as 2; the proxy then sends the
# one value it framed the body with, never the client's text.
def test_content_length_list_is_forwarded_as_one_value(make_proxy, node):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    raw = raw_exchange(proxy.port, b"POST /plain HTTP/1.1\r\nHost: t\r\n"
                                   b"Content-Length: 2, 2\r\nConnection: close\r\n\r\n{}")
    status, _, body = final_answer(raw)
    assert status == 201
    assert json.loads(body)["content_length"] == "2"


@pytest.mark.parametrize("head", [
    # RFC 9112 5.2: obsolete line folding; the proxy rejects it with 400.
    b"POST /v1/orders HTTP/1.1\r\nHost: t\r\nIdempotency-Key: a\r\nX-Folded: one\r\n two\r\n",
    # RFC 9112 3.2: an HTTP/1.1 request without Host, or with two.
    b"POST /v1/orders HTTP/1.1\r\nIdempotency-Key: a\r\n",
    b"POST /v1/orders HTTP/1.1\r\nHost: a\r\nHost: b\r\nIdempotency-Key: a\r\n",
    b"POST /v1/orders HTTP/1.1\r\nHost: a b\r\nIdempotency-Key: a\r\n",
])
def test_malformed_heads_get_400(make_proxy, node, head):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    raw = raw_exchange(proxy.port, head + b"Content-Length: 2\r\n\r\n{}")
    assert status_of(raw) == 400, raw[:200]
    assert b"malformed-request" in raw
    assert node.executions("a") == 0


def test_too_many_header_fields_get_431(make_proxy, node):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS, server={"max_header_fields": 50})
    fields = b"".join(b"X-F%d: v\r\n" % i for i in range(60))
    raw = raw_exchange(proxy.port, b"GET /plain HTTP/1.1\r\nHost: t\r\n" + fields + b"\r\n")
    assert status_of(raw) == 431, raw[:200]
    ok = raw_exchange(proxy.port, b"GET /plain HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" +
                      fields[:40 * 9] + b"\r\n")
    assert status_of(ok) == 201


# RFC 9112 3.2.2 (absolute-form must be accepted) and RFC 3986 6.2.2 (dot segments,
# unreserved escapes): every spelling of a protected path is protected (defect 6).
@pytest.mark.parametrize("target", [
    b"http://t/v1/orders", b"//v1/orders", b"/v1/./orders", b"/v1/%6frders",
    b"/v1/orders;x=1", b"/v1/x/../orders", b"/v1/%2e%2e/v1/orders", b"/v1//orders/",
    b"HTTP://t/v1/orders?a=1",
])
def test_every_spelling_of_a_protected_path_is_protected(make_proxy, node, target):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    raw = raw_exchange(proxy.port, b"POST " + target + b" HTTP/1.1\r\nHost: t\r\n"
                       b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
    assert status_of(raw) == 400 and b"missing-key" in raw, raw[:300]


def test_absolute_form_keyed_twice_executes_once(make_proxy, node):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    key = "abs-%s" % uuid.uuid4().hex
    answers = []
    for target in (b"http://api.example/v1/orders", b"/v1/orders", b"http://api.example/v1/orders"):
        raw = raw_exchange(proxy.port, b"POST " + target + b" HTTP/1.1\r\nHost: other\r\n"
                           b"Idempotency-Key: " + key.encode() + b"\r\nConnection: close\r\n"
                           b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        answers.append(final_answer(raw))
    assert [a[0] for a in answers] == [201, 201, 201]
    seen = json.loads(answers[0][2])
    assert seen["url"] == "/v1/orders" and seen["host"] == "api.example"
    assert node.executions(key) == 1


@pytest.mark.parametrize("target", [b"/v1/a%2Forders", b"/v1/a%5corders", b"/v1/a%00",
                                    b"/v1\\orders", b"/v1/%zz", b"v1/orders"])
def test_ambiguous_paths_get_400(make_proxy, node, target):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    raw = raw_exchange(proxy.port, b"POST " + target + b" HTTP/1.1\r\nHost: t\r\n"
                       b"Content-Length: 2\r\n\r\n{}")
    assert status_of(raw) == 400, raw[:300]


def test_case_insensitive_route(make_proxy, node):
    routes = [dict(ORDERS[0], case_sensitive=False)]
    proxy = make_proxy(upstream_url=node.url, routes=routes)
    r = proxy.request("POST", "/V1/Orders", "{}", {"Content-Type": "application/json"})
    assert r.status == 400 and r.json()["type"].endswith("/missing-key")
    strict = make_proxy(upstream_url=node.url, routes=ORDERS)
    r = strict.request("POST", "/V1/Orders", "{}", {"Content-Type": "application/json"})
    assert r.status == 201


# Defect 4: a JSON body nested 75,000 deep (146 KiB) killed the process
# (canonicalisation recursed on the I/O thread). Past server.max_json_depth the body
# is fingerprinted by its bytes: the same bytes replay, other bytes get 422.
def test_deeply_nested_json_is_fingerprinted_by_its_bytes(make_proxy, node):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    deep = "[" * 75000 + "]" * 75000
    key = "deep-%s" % uuid.uuid4().hex
    first = keyed_post(proxy, "/v1/orders", key, "d1", body=deep)
    assert first.status == 201 and first.json()["bytes"] == len(deep)
    again = keyed_post(proxy, "/v1/orders", key, "d2", body=deep)
    assert again.status == 201 and again.header("Idempotent-Replayed") == "true"
    spaced = keyed_post(proxy, "/v1/orders", key, "d3", body=deep[:10] + " " + deep[10:])
    assert spaced.status == 422
    assert node.executions(key) == 1
    assert proxy.admin("/healthz").status == 200


# Defect 7: numbers are compared by their text's exact value, and duplicate members
# by all their values: a different request gets 422, never another's replay.
@pytest.mark.parametrize("first,second", [
    ('{"amount": 100.1}', '{"amount": 100.10000000000000001}'),
    ('{"n": 18446744073709551616}', '{"n": 18446744073709551617}'),
    ('{"amount": 1000}', '{"amount": 1, "amount": 1000}'),
])
def test_bodies_that_differ_in_meaning_get_422(make_proxy, node, first, second):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    key = "exact-%s" % uuid.uuid4().hex
    assert keyed_post(proxy, "/v1/orders", key, "e1", body=first).status == 201
    r = keyed_post(proxy, "/v1/orders", key, "e2", body=second)
    assert r.status == 422 and r.json()["type"].endswith("/key-mismatch")
    same = keyed_post(proxy, "/v1/orders", key, "e3", body=" %s " % first.replace(": ", ":"))
    assert same.status == 201 and same.header("Idempotent-Replayed") == "true"
    assert node.executions(key) == 1


# RFC 9112 6.2 and 6.3: an answer framed by Content-Length ends after that many octets,
# and the next answer on the connection starts right after them. Pass-through reads
# such a body straight into its relay chunk, and no further (relay.hpp): a real Node
# upstream's 3 MB answers, then a small one, over the pooled upstream connection,
# reach curl whole, over HTTP/1.1 and HTTP/2 (RFC 9113 8.1: the length is the DATA).
# Over HTTP/2 each URL has a curl of its own: curl 7.88.1 fails a second request on a
# reused prior-knowledge connection before sending it ("Error in the HTTP2 framing
# layer"), against nginx's HTTP/2 as well.
@pytest.mark.parametrize("version", ["--http1.1", "--http2-prior-knowledge"])
def test_large_length_framed_answers_stream_whole_and_keep_the_connections_in_step(
        make_proxy, node, tmp_path, version):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    paths = ["/big?pad=3000000", "/big?pad=3000001", "/small"]
    urls = [("http://127.0.0.1:%d%s" % (proxy.port, path), str(tmp_path / str(i)))
            for i, path in enumerate(paths)]
    h2 = "http2" in version
    lines = []
    for batch in ([[u] for u in urls] if h2 else [urls]):
        args = ["curl", "-sS", "--max-time", "30", version,
                "-w", "%{http_version} %{http_code} %{num_connects}\n"]
        for url, out in batch:
            args += [url, "-o", out]
        done = subprocess.run(args, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        lines += done.stdout.decode().split()
    if h2:
        assert lines == ["2", "201", "1"] * 3, lines
    else:  # one client connection for all three (num_connects 1, then 0, 0)
        assert lines == ["1.1", "201", "1", "1.1", "201", "0", "1.1", "201", "0"], lines
    for i, path in enumerate(paths):
        answer = json.loads((tmp_path / str(i)).read_bytes())  # whole, or not JSON
        assert answer["url"] == path
        if "pad=" in path:  # Node pads with whole bytes in hex: an even count
            assert len(answer["pad"]) == int(path.split("=")[1]) + int(path.endswith("1"))


# RFC 9110 7.6.1: a proxy removes the connection options, and every field Connection
# names, before it forwards; RFC 7239's de facto X-Forwarded-* are extended or added;
# Proxy-Authorization (11.7.2) was for this hop. Node's http server reads the
# forwarded head as an upstream would, line by line (rawHeaders), on pass-through and
# on a keyed route. The ids: the first of two X-Request-Id lines goes upstream as the
# only one, and a trace is started (W3C Trace Context 3.2: one traceparent).
@pytest.mark.parametrize("path", ["/plain", "/v1/orders"])
def test_hop_by_hop_fields_stay_on_this_hop_and_forwarding_fields_are_added(
        make_proxy, node, path):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    key = "hop-%s" % uuid.uuid4().hex
    raw = (b"POST %s?echo=1 HTTP/1.1\r\nHost: shop.example:8443\r\n"
           b"Content-Type: application/json\r\nConnection: close, X-Secret-Hop\r\n"
           b"X-Secret-Hop: must-not-pass\r\nKeep-Alive: timeout=5\r\n"
           b"Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic cHJveHk6c2VjcmV0\r\n"
           b"X-Forwarded-For: 203.0.113.7\r\nX-Request-Id: first-id\r\n"
           b"X-Request-Id: second-id\r\nIdempotency-Key: %s\r\nContent-Length: 2\r\n\r\n{}"
           % (path.encode(), key.encode()))
    status, head, body = final_answer(raw_exchange(proxy.port, raw))
    assert status == 201, body
    assert "x-request-id: first-id" in head.lower()
    seen = fields_by_name(json.loads(body)["raw_headers"])
    for gone in ("connection", "x-secret-hop", "keep-alive", "proxy-connection",
                 "proxy-authorization"):
        assert gone not in seen, (gone, seen)
    assert_forwarding_fields(seen)
    assert seen["host"] == ["shop.example:8443"]
    assert seen["idempotency-key"] == [key]

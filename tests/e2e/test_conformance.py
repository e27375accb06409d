"""HTTP conformance on both hops, against real peers (issue 10): nginx, Node's http
and Python's http.server upstreams, curl, Node's fetch and urllib clients. Each case
names the RFC section that decides it."""
import json
import socket
import os
import time
import uuid

import pytest

from harness import SHORT_STATEMENTS, post_in_background, raw_exchange, wait_for
from peers import NginxUpstream, NodeUpstream, PythonUpstream, curl, node_fetch, urllib_post

ORDERS = [{"name": "orders", "path_prefix": "/v1/orders", "key_required": True}]


@pytest.fixture(scope="module")
def node():
    u = NodeUpstream()
    yield u
    u.close()


@pytest.fixture(scope="module")
def nginx():
    u = NginxUpstream()
    yield u
    u.close()


@pytest.fixture(scope="module")
def pyserver():
    u = PythonUpstream()
    yield u
    u.close()


def status_of(raw):
    return int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/") else 0


def dechunk(body):
    out = b""
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return out
        out, body = out + body[:size], body[size + 2:]


def final_answer(raw):
    """The last (final) response in `raw`, after any 1xx: (status, head, body)."""
    while True:
        head, _, rest = raw.partition(b"\r\n\r\n")
        if not head.split(b" ", 2)[1].startswith(b"1"):
            if b"transfer-encoding: chunked" in head.lower():
                rest = dechunk(rest)
            return int(head.split(b" ", 2)[1]), head.decode("latin-1"), rest
        raw = rest


def keyed_post(proxy, path, key, ledger, body="{}", headers=None):
    h = {"Idempotency-Key": key, "X-Ledger-Id": ledger, "Content-Type": "application/json"}
    h.update(headers or {})
    return proxy.request("POST", path, body, h)


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
    big = b"x" * (3 * 1024 * 1024)
    status, _, body = urllib_post("http://127.0.0.1:%d/upload" % proxy.port, big,
                                  {"Content-Type": "application/octet-stream"})
    assert status == 201 and json.loads(body)["bytes"] == len(big)
    key = "big-%s" % uuid.uuid4().hex
    status, _, body = urllib_post("http://127.0.0.1:%d/v1/orders" % proxy.port, big,
                                  {"Content-Type": "application/octet-stream",
                                   "Idempotency-Key": key})
    assert status == 413 and json.loads(body)["type"].endswith("/body-too-large")
    assert node.executions(key) == 0


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


# Defect 5: a live claim is never taken over. ttl 2s with a 4 s upstream: a retry at
# 2.8 s was executed a second time; a lease shorter than the upstream's time told a
# retry outcome-unknown while the holder was alive (retake: executed twice). The
# holder now renews its lease every lease/3 while the upstream works.
@pytest.mark.parametrize("defaults", [
    {"ttl": "2s"},
    {"lease": "1s"},
    {"lease": "1s", "on_stale": "retake"},
])
def test_a_live_claim_is_never_taken_over(make_proxy, node, defaults):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS, defaults=defaults,
                       store=SHORT_STATEMENTS)
    key = "live-%s" % uuid.uuid4().hex
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    results = {}
    first = post_in_background(proxy, "/v1/orders?delay_ms=3500", key, results)
    time.sleep(2.8)
    retry = proxy.request("POST", "/v1/orders?delay_ms=3500", "{}", headers)
    assert retry.status == 409 and retry.json()["type"].endswith("/request-in-flight"), retry.body
    first.join(timeout=30)
    assert results[key].status == 201
    replay = proxy.request("POST", "/v1/orders?delay_ms=3500", "{}", headers)
    assert replay.status == 201 and replay.header("Idempotent-Replayed") == "true"
    assert node.executions(key) == 1
    if "lease" in defaults:
        assert proxy.metric("idemproxy_lease_renewals_total") >= 2


LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


# Defect 8: the replay cache judged expiry by the proxy host's clock; the docs promise
# that only the database's counts. A proxy whose clock is an hour behind must not
# replay a record the database has expired.
@pytest.mark.skipif(not os.path.exists(LIBFAKETIME), reason="needs Debian's faketime")
def test_replay_cache_expiry_follows_the_database_clock(make_proxy, node):
    proxy = make_proxy(start=False, upstream_url=node.url, routes=ORDERS,
                       defaults={"ttl": "2s"})
    # Under ASan, libfaketime is preloaded ahead of the sanitizer's runtime; the
    # order does not matter to what this test checks.
    asan = ":".join(filter(None, [os.environ.get("ASAN_OPTIONS"), "verify_asan_link_order=0"]))
    proxy.start(env={"LD_PRELOAD": LIBFAKETIME, "FAKETIME": "-1h",
                     "FAKETIME_DONT_FAKE_MONOTONIC": "1", "ASAN_OPTIONS": asan})
    key = "clock-%s" % uuid.uuid4().hex
    assert keyed_post(proxy, "/v1/orders", key, "c1").status == 201
    again = keyed_post(proxy, "/v1/orders", key, "c2")
    assert again.header("Idempotent-Replayed") == "true"
    time.sleep(2.5)
    after = keyed_post(proxy, "/v1/orders", key, "c3")
    assert after.status == 201 and after.header("Idempotent-Replayed") is None
    assert after.json()["id"] == "c3"
    assert node.executions(key) == 2


# Defect 8: waiters on a key held by another instance left an entry behind forever.
def test_waiters_on_a_key_held_elsewhere_leave_nothing_behind(make_proxy, node):
    config = dict(upstream_url=node.url, routes=ORDERS, defaults={"on_concurrent": "wait"})
    holder, other = make_proxy(**config), make_proxy(**config)
    key = "wait-%s" % uuid.uuid4().hex
    results = {}
    threads = [post_in_background(holder, "/v1/orders?delay_ms=800", key, results)]
    time.sleep(0.2)
    for i in range(5):
        threads.append(post_in_background(other, "/v1/orders?delay_ms=800", key,
                                          results.setdefault("others", {})))
    for t in threads:
        t.join(timeout=30)
    assert results[key].status == 201
    assert results["others"][key].status == 201
    assert results["others"][key].header("Idempotent-Replayed") == "true"
    assert node.executions(key) == 1
    assert other.metric("idemproxy_waiting_keys") == 0
    assert holder.metric("idemproxy_waiting_keys") == 0


# Issue 10, 9: a pass-through body trickled a byte at a time (each byte within
# read_timeout) held the client and an upstream connection for over 30 s. The whole
# body must now arrive within server.body_timeout.
def test_a_trickled_pass_through_body_is_cut_off(make_proxy, node):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS,
                       server={"read_timeout": "3s", "body_timeout": "3s"})
    started = time.time()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=15) as s:
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n")
        closed = False
        for _ in range(20):
            try:
                s.sendall(b"x")
                s.settimeout(1)
                if s.recv(1024) == b"":
                    closed = True
                    break
            except socket.timeout:
                continue
            except OSError:
                closed = True
                break
    assert closed
    assert time.time() - started < 6
    assert wait_for(lambda: "server.body_timeout" in proxy.read_log(), timeout=5)


# Issue 10, 9: under `ulimit -n 1024`, 2,000 idle connections starved new clients
# (181 "Too many open files"). The limit is raised to the hard one, max_connections
# sized to it with a reserve, and a new client is still served.
def test_idle_connections_cannot_exhaust_the_open_files_limit(make_proxy, node):
    import resource
    proxy = make_proxy(start=False, upstream_url=node.url, routes=ORDERS)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    proxy.proc = None
    proxy.log = open(proxy.log_path, "ab")
    import subprocess
    from harness import BINARY
    proxy.proc = subprocess.Popen(
        ["prlimit", "--nofile=1024:1024", BINARY, "serve", "--config", proxy.config_path],
        stdout=proxy.log, stderr=subprocess.STDOUT)
    proxy.wait_healthy()
    assert "the open-files limit carries" in proxy.read_log()
    idle = []
    try:
        for _ in range(1100):
            try:
                idle.append(socket.create_connection(("127.0.0.1", proxy.port), timeout=2))
            except OSError:
                break
        started = time.time()
        r = proxy.request("GET", "/fresh", timeout=5)
        assert r.status == 201 and time.time() - started < 2
    finally:
        for s in idle:
            s.close()
    log = proxy.read_log()
    assert "Too many open files" not in log
    assert log.count("connection refused") < 10  # one line a second, not one per refusal


# RFC 9110 10.1.1 and 15.2: an HTTP/1.0 request's Expect: 100-continue is ignored, and
# no 1xx is sent to an HTTP/1.0 client; an HTTP/1.1 client gets its 100 first.
@pytest.mark.parametrize("version,interim", [(b"1.0", False), (b"1.1", True)])
def test_expect_100_continue_by_client_version(make_proxy, node, version, interim):
    proxy = make_proxy(upstream_url=node.url, routes=ORDERS)
    key = "expect-%s" % uuid.uuid4().hex
    raw = raw_exchange(proxy.port, b"POST /v1/orders HTTP/" + version + b"\r\nHost: t\r\n"
                       b"Idempotency-Key: " + key.encode() + b"\r\nExpect: 100-continue\r\n"
                       b"Connection: close\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 2\r\n\r\n{}")
    assert raw.startswith(b"HTTP/1.1 100 Continue\r\n\r\n") == interim, raw[:80]
    assert final_answer(raw)[0] == 201
    assert node.executions(key) == 1

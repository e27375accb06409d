"""TLS on both sides, with certificates made at test time (pki.py): downstream
termination, mandatory client certificates (mTLS), scopes from the verified
certificate subject, and https upstreams verified by default."""
import hashlib
import json
import socket
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import problem, wait_for
from peers import NginxUpstream


def client_tls(pki, cert=None):
    """A client context that trusts the test CA, optionally presenting `cert`."""
    context = ssl.create_default_context(cafile=pki.ca)
    context.check_hostname = False  # the proxy is reached as 127.0.0.1; the CA is what counts
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


def tls_proxy(make_proxy, pki, mtls=False, **config):
    tls = {"cert_file": pki.server[0], "key_file": pki.server[1]}
    if mtls:
        tls["client_ca_file"] = pki.ca
    extra = dict(config.pop("extra_top", {}), tls=tls)
    return make_proxy(extra_top=extra, **config)


def refused(pki, proxy, cert=None):
    """True when the TLS handshake (or the first exchange) is refused."""
    try:
        proxy.post("/v1/orders", "{}", key="k-refused", tls=client_tls(pki, cert), timeout=5)
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return True
    return False


def test_downstream_tls_serves_and_replays_over_https(make_proxy, upstream, pki, key):
    p = tls_proxy(make_proxy, pki)
    tls = client_tls(pki)
    first = p.post("/v1/orders", '{"n": 1}', key=key, tls=tls)
    again = p.post("/v1/orders", '{"n": 1}', key=key, tls=tls)
    assert first.status == 201
    assert again.header("Idempotent-Replayed") == "true" and again.body == first.body
    assert upstream.executions.count(key=key) == 1
    forwarded = upstream.executions.last()[4]
    assert forwarded["x-forwarded-proto"] == "https"


def test_plaintext_or_garbage_on_the_tls_port_is_refused_and_serving_goes_on(
        make_proxy, upstream, pki, key):
    p = tls_proxy(make_proxy, pki)
    before = upstream.executions.count()
    with socket.create_connection(("127.0.0.1", p.port), timeout=5) as s:
        s.sendall(b"POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        try:
            answer = s.recv(4096)
        except ConnectionResetError:
            answer = b""
        assert b"HTTP/1.1" not in answer  # never processed as a request
    assert upstream.executions.count() == before
    assert p.post("/v1/orders", "{}", key=key, tls=client_tls(pki)).status == 201
    assert wait_for(lambda: p.metric("idemproxy_tls_handshake_failures_total") >= 1)


def test_mtls_refuses_clients_without_a_certificate_or_with_an_untrusted_one(
        make_proxy, upstream, pki, key):
    p = tls_proxy(make_proxy, pki, mtls=True)
    before = upstream.executions.count()
    assert refused(pki, p)                     # no certificate
    assert refused(pki, p, cert=pki.mallory)   # "CN=alice" from a rogue CA
    assert upstream.executions.count() == before
    # With TLS 1.3 the client can see the refusal before the proxy has counted it.
    assert wait_for(lambda: p.metric("idemproxy_tls_handshake_failures_total") >= 2)
    ok = p.post("/v1/orders", "{}", key=key, tls=client_tls(pki, pki.alice))
    assert ok.status == 201


def test_client_cert_scopes_keep_two_identities_apart_under_a_storm(make_proxy, upstream, pg,
                                                                    pki, key):
    p = tls_proxy(make_proxy, pki, mtls=True,
                  routes=[{"name": "orders", "path_prefix": "/v1", "key_required": True,
                           "on_concurrent": "wait", "scope": {"from": "client_cert"}}])
    contexts = {"alice": client_tls(pki, pki.alice), "bob": client_tls(pki, pki.bob)}
    barrier = threading.Barrier(64)

    def one(i):
        who = "alice" if i % 2 else "bob"
        barrier.wait()
        return who, p.post("/v1/orders?delay_ms=300", '{"same": "body"}', key=key,
                           tls=contexts[who])

    with ThreadPoolExecutor(max_workers=64) as pool:
        results = list(pool.map(one, range(64)))
    assert all(r.status == 201 for _, r in results)
    assert upstream.executions.count(key=key) == 2  # once per identity
    bodies = {who: {r.body for w, r in results if w == who} for who in contexts}
    assert len(bodies["alice"]) == 1 and len(bodies["bob"]) == 1
    assert bodies["alice"] != bodies["bob"]
    scopes = pg.sql("SELECT scope FROM idempotency_records WHERE key = '%s' ORDER BY scope"
                    % key).splitlines()
    assert scopes == ["cert:CN=alice,O=Acme", "cert:CN=bob,O=Acme"]


def test_https_upstream_is_verified_against_the_configured_ca(make_proxy, tls_upstream, pki, key):
    p = make_proxy(extra_top={"upstream": {"url": tls_upstream.url, "tls": {"ca_file": pki.ca}}})
    first = p.post("/v1/orders", '{"n": 1}', key=key)
    assert first.status == 201
    assert p.post("/v1/orders", '{"n": 1}', key=key).header("Idempotent-Replayed") == "true"
    assert p.request("GET", "/health-check").status == 201  # pass-through over TLS too
    assert tls_upstream.executions.count(key=key) == 1


BIG_ROUTES = [{"name": "orders", "path_prefix": "/v1", "key_required": True, "max_body": "4MiB"}]


def post_big(p, key, n):
    """A keyed request of 2 MiB and more; its body and the answer."""
    body = json.dumps({"n": n, "pad": "x" * (2 << 20)})
    got = p.post("/v1/orders", body, key="%s-%d" % (key, n))
    assert got.status == 201, got.body
    return body, got


# A TLS write of 64 KiB or more runs beside a read that watches for an early answer
# (upstream/http1_early_answer.cpp, RFC 9112 9.6); the read the write's end cancels
# must leave the connection's TLS stream whole: the next request goes on the same
# connection.
def test_big_requests_to_an_https_upstream_go_whole_on_one_kept_connection(make_proxy, tls_upstream,
                                                                         pki, key):
    p = make_proxy(routes=BIG_ROUTES,
                   extra_top={"upstream": {"url": tls_upstream.url, "tls": {"ca_file": pki.ca}}})
    assert p.request("GET", "/warm").status == 201  # the pool's connection
    before = tls_upstream.accepted
    for n in range(3):
        body, got = post_big(p, key, n)
        assert json.loads(got.body)["body_sha256"] == hashlib.sha256(body.encode()).hexdigest()
    assert p.request("GET", "/after").status == 201
    assert tls_upstream.accepted == before


def test_big_requests_to_nginx_over_https_get_its_answers(make_proxy, pki, key):
    # Against nginx's TLS (OpenSSL on the other side too). Its `return 201` answers
    # before it has read the body, then reads the rest and drops it: an early answer
    # from a real server, which the watch sees and relays (the write then stops, and
    # the connection is not kept).
    nginx = NginxUpstream(tls=pki.server)
    try:
        p = make_proxy(routes=BIG_ROUTES,
                       extra_top={"upstream": {"url": nginx.url, "tls": {"ca_file": pki.ca}}})
        for n in range(3):
            _, got = post_big(p, key, n)
            assert json.loads(got.body)["uri"] == "/v1/orders"
            assert p.post("/v1/orders", "{}", key="%s-%d" % (key, n)).status == 422  # another body
        assert wait_for(lambda: len(nginx.log_lines()) >= 3)
        assert sorted(nginx.executions("%s-%d" % (key, n)) for n in range(3)) == [1, 1, 1]
    finally:
        nginx.close()


def test_an_unverifiable_https_upstream_gets_nothing(make_proxy, tls_upstream, pki, key):
    # The system trust store does not know the test CA: nothing may be sent.
    p = make_proxy(upstream_url=tls_upstream.url)
    r = p.post("/v1/orders", "{}", key=key)
    doc = problem(r)
    assert r.status == 502 and doc["type"].endswith("/upstream-unreachable")
    assert "certificate verify failed" in doc["detail"]
    # The right CA but the wrong name: the host name check refuses it.
    wrong = make_proxy(extra_top={"upstream": {"url": tls_upstream.url, "tls": {
        "ca_file": pki.ca, "server_name": "payments.example"}}})
    r = wrong.post("/v1/orders", "{}", key=key + "-name")
    assert r.status == 502 and "certificate verify failed" in problem(r)["detail"]
    assert tls_upstream.executions.count(key=key) == 0
    assert tls_upstream.executions.count(key=key + "-name") == 0
    # A retry after fixing nothing is still refused, not replayed from a record.
    assert make_proxy(upstream_url=tls_upstream.url).post("/v1/orders", "{}", key=key).status == 502


def test_insecure_skip_verify_must_be_asked_for_and_is_logged(make_proxy, tls_upstream, key):
    p = make_proxy(extra_top={"upstream": {"url": tls_upstream.url,
                                           "tls": {"insecure_skip_verify": True}}})
    assert p.post("/v1/orders", "{}", key=key).status == 201
    assert "NOT verified" in p.read_log()


@pytest.mark.parametrize("top, message", [
    (lambda pki: {"tls": {"cert_file": "/nonexistent.pem", "key_file": "/nonexistent.key"}},
     "tls.cert_file: cannot read /nonexistent.pem"),
    (lambda pki: {"tls": {"cert_file": pki.server[0]}}, "tls needs both cert_file and key_file"),
    (lambda pki: {"upstream": {"url": "http://127.0.0.1:1", "tls": {"ca_file": pki.ca}}},
     "upstream.tls applies to an https:// upstream.url"),
    (lambda pki: {"upstream": {"url": "https://127.0.0.1:1",
                               "tls": {"ca_file": pki.ca, "insecure_skip_verify": True}}},
     "contradict"),
])
def test_tls_config_errors_name_their_position(make_proxy, pki, top, message):
    p = make_proxy(start=False, extra_top=top(pki))
    run = p.cli("check-config")
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith(p.config_path + ":") and message in run.stderr, run.stderr


def test_client_cert_scope_needs_mtls(make_proxy):
    p = make_proxy(start=False, routes=[{"name": "orders", "path_prefix": "/v1",
                                         "scope": {"from": "client_cert"}}])
    run = p.cli("check-config")
    assert run.returncode == 2 and "needs tls.client_ca_file" in run.stderr


# Issue 10, 9: scopes from different sources never share a namespace. Bob, on a
# header-scoped route, names Alice's certificate scope in the header; Alice's own
# first request with that key must still execute (it got 422 and never ran).
def test_a_header_scope_cannot_reach_a_certificate_scope(make_proxy, upstream, pki, pg, key):
    routes = [{"name": "mine", "path_prefix": "/v1/mine", "key_required": True,
               "scope": {"from": "client_cert"}},
              {"name": "tenants", "path_prefix": "/v1/tenants", "key_required": True,
               "scope_header": "X-Tenant-Id"}]
    p = tls_proxy(make_proxy, pki, mtls=True, routes=routes)
    bob = client_tls(pki, pki.bob)
    alice = client_tls(pki, pki.alice)
    planted = p.post("/v1/tenants", '{"n": 1}', key=key, tls=bob,
                     headers={"X-Tenant-Id": "cert:CN=alice,O=Acme"})
    assert planted.status == 201
    mine = p.post("/v1/mine", '{"n": 2}', key=key, tls=alice)
    assert mine.status == 201 and mine.header("Idempotent-Replayed") is None
    assert upstream.executions.count(key=key) == 2
    scopes = pg.sql("SELECT scope FROM idempotency_records WHERE key = '%s' ORDER BY scope"
                    % key).splitlines()
    assert scopes == ["cert:CN=alice,O=Acme", "header:cert:CN=alice,O=Acme"]

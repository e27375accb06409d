"""Reverse-proxy behaviour: headers, streaming, keep-alive, framing."""
import hashlib
import http.client
import json
import os

from harness import raw_exchange


def test_forwarding_headers_and_hop_by_hop_removal(proxy, upstream, key):
    r = proxy.post("/v1/echo", "{}", key=key, headers={
        "Host": "api.example.com",
        "X-Forwarded-For": "203.0.113.9",
        "Connection": "keep-alive, X-Hop",
        "X-Hop": "secret",
        "Keep-Alive": "timeout=5",
        "X-End-To-End": "kept",
    })
    seen = r.json()["headers"]
    assert seen["idempotency-key"] == key  # forwarded unchanged so the upstream can dedupe
    assert seen["host"] == "api.example.com"
    assert seen["x-forwarded-for"] == "203.0.113.9, 127.0.0.1"
    assert seen["x-forwarded-proto"] == "http"
    assert seen["x-forwarded-host"] == "api.example.com"
    assert seen["x-end-to-end"] == "kept"
    assert "x-hop" not in seen and "keep-alive" not in seen


def test_pass_through_streams_a_chunked_upload(proxy, upstream):
    body = os.urandom(3 * 1024 * 1024)

    def chunks():
        for i in range(0, len(body), 65536):
            yield body[i:i + 65536]

    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    conn.request("POST", "/upload/echo", body=chunks(), encode_chunked=True,
                 headers={"Transfer-Encoding": "chunked"})
    r = conn.getresponse()
    seen = json.loads(r.read())
    assert r.status == 200
    assert seen["body_len"] == len(body)
    assert seen["body_sha256"] == hashlib.sha256(body).hexdigest()


def test_keep_alive_serves_many_requests_on_one_connection(proxy, key):
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    bodies = []
    for i in range(5):
        conn.request("POST", "/v1/orders", body="{}",
                     headers={"Idempotency-Key": "%s-%d" % (key, i % 2)})
        r = conn.getresponse()
        bodies.append(r.read())
        assert r.status == 201
    conn.request("GET", "/status")
    assert conn.getresponse().status == 201
    conn.close()
    assert bodies[0] == bodies[2] == bodies[4] and bodies[1] == bodies[3]


def test_expect_100_continue_is_answered(proxy, key):
    raw = raw_exchange(proxy.port, (
        "POST /v1/orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\n"
        "Expect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}" % key).encode())
    assert raw.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201")


def test_head_and_get_pass_through(proxy):
    assert proxy.request("HEAD", "/status").status == 201
    assert proxy.request("GET", "/status?x=1").status == 201


def test_upstream_base_path_is_prefixed(make_proxy, upstream, key):
    p = make_proxy(upstream_url=upstream.url + "/base/")
    r = p.post("/v1/orders?x=1", "{}", key=key)
    assert r.status == 201 and r.json()["path"] == "/base/v1/orders"
    assert upstream.executions.count(path="/base/v1/orders", key=key) == 1

"""HTTP/2 from clients (RFC 9113), against real peers: curl (h2c with prior knowledge,
h2 over TLS by ALPN), python3-h2 (many streams on one connection), Node's http2 and
h2load. Every stream goes through the phases an HTTP/1.1 request does; these tests
count the upstream's executions to show the promise holds per stream."""
import json
import os
import shutil
import subprocess
import uuid

import pytest

from h2_peer import Client, RawClient
from harness import wait_for
from test_tls import tls_proxy


def curl(*args, timeout=30):
    """curl -i; returns (exit code, status, {lowercase name: value}, body, http version)."""
    out = subprocess.run(["curl", "-sS", "-i", "--max-time", "20", *args],
                         capture_output=True, timeout=timeout)
    if out.returncode != 0:
        return out.returncode, None, {}, out.stderr, None
    head, _, body = out.stdout.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    version, status = lines[0].split(" ")[:2]
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return 0, int(status), headers, body, version


def h2c(port, path, *args):
    return curl("--http2-prior-knowledge", "http://127.0.0.1:%d%s" % (port, path), *args)


def post_args(key, body):
    args = ["-X", "POST", "-H", "content-type: application/json", "--data-binary", body]
    return args + (["-H", "Idempotency-Key: " + key] if key else [])


def test_curl_h2c_prior_knowledge_gets_the_promise(proxy, upstream, key):
    rc, status, headers, body, version = h2c(proxy.port, "/v1/orders", *post_args(key, '{"n":1}'))
    assert (rc, version, status) == (0, "HTTP/2", 201), body
    assert "idempotent-replayed" not in headers
    rc, again, again_headers, again_body, version = h2c(proxy.port, "/v1/orders",
                                                        *post_args(key, '{"n":1}'))
    assert (version, again) == ("HTTP/2", 201)
    assert again_headers["idempotent-replayed"] == "true" and again_body == body
    assert upstream.executions.count(key=key) == 1
    # The behaviour table's refusals, as problem+json on the stream.
    _, mismatch, h, b, _ = h2c(proxy.port, "/v1/orders", *post_args(key, '{"n":2}'))
    assert mismatch == 422 and h["content-type"] == "application/problem+json"
    assert json.loads(b)["type"].endswith("/key-mismatch")
    _, missing, h, b, _ = h2c(proxy.port, "/v1/orders", *post_args(None, '{"n":2}'))
    assert missing == 400 and json.loads(b)["type"].endswith("/missing-key")
    assert upstream.executions.count(key=key) == 1
    # The upstream got an HTTP/1.1 request with the client's fields, and no HTTP/2-only ones.
    forwarded = upstream.executions.last(path="/v1/orders")[4]
    assert forwarded["host"] == "127.0.0.1:%d" % proxy.port
    assert forwarded["idempotency-key"] == key
    assert not any(name.startswith(":") for name in forwarded)
    # Four connections, a stream each, and no errors, in /metrics.
    assert proxy.metric("idemproxy_http2_connections_total") == 4
    assert proxy.metric("idemproxy_http2_streams_total") == 4
    assert proxy.metric("idemproxy_http2_goaway_errors_total", code="PROTOCOL_ERROR") == 0


def test_curl_h2_over_tls_is_chosen_by_alpn(make_proxy, upstream, pki, key):
    p = tls_proxy(make_proxy, pki)
    url = "https://127.0.0.1:%d/v1/orders" % p.port
    tls = ["--cacert", pki.ca, "--resolve", "localhost:%d:127.0.0.1" % p.port]
    url = "https://localhost:%d/v1/orders" % p.port
    rc, status, headers, body, version = curl("--http2", *tls, url, *post_args(key, "{}"))
    assert (rc, version, status) == (0, "HTTP/2", 201), body
    rc, again, again_headers, again_body, version = curl("--http2", *tls, url,
                                                         *post_args(key, "{}"))
    assert version == "HTTP/2" and again_headers["idempotent-replayed"] == "true"
    assert again_body == body and upstream.executions.count(key=key) == 1
    assert upstream.executions.last(path="/v1/orders")[4]["x-forwarded-proto"] == "https"
    # A client that offers only http/1.1 gets it on the same port.
    rc, status, headers, body, version = curl("--http1.1", *tls, url, *post_args(key, "{}"))
    assert version == "HTTP/1.1" and headers["idempotent-replayed"] == "true"


def test_http2_off_serves_only_http1(make_proxy, upstream, pki, key):
    p = make_proxy(server={"http2": False})
    rc, status, headers, body, version = h2c(p.port, "/v1/orders", *post_args(key, "{}"))
    # The preface is not an HTTP/1.1 request: a 400, or a closed connection; never served.
    assert rc != 0 or status == 400
    assert upstream.executions.count(key=key) == 0
    rc, status, headers, body, version = curl("http://127.0.0.1:%d/v1/orders" % p.port,
                                              *post_args(key, "{}"))
    assert (version, status) == ("HTTP/1.1", 201)
    t = tls_proxy(make_proxy, pki, server={"http2": False})
    url = "https://localhost:%d/v1/orders" % t.port
    rc, status, headers, body, version = curl(
        "--http2", "--cacert", pki.ca, "--resolve", "localhost:%d:127.0.0.1" % t.port, url,
        *post_args(key, "{}"))
    assert (rc, version) == (0, "HTTP/1.1") and headers["idempotent-replayed"] == "true"


def test_streams_on_one_connection_are_independent_and_never_mixed(proxy, upstream):
    shared = "shared-" + uuid.uuid4().hex
    fresh = ["fresh-%d-%s" % (i, uuid.uuid4().hex) for i in range(30)]
    c = Client(proxy.port)
    # Slow executions, so the streams overlap: the shared key's first holder is still
    # executing when the others arrive.
    path = "/v1/orders?delay_ms=300"
    shared_ids = [c.request("POST", path, b'{"s":1}', [("idempotency-key", shared)])
                  for _ in range(10)]
    fresh_ids = {c.request("POST", path, b'{"f":1}', [("idempotency-key", k)]): k for k in fresh}
    results = c.wait(*shared_ids, *fresh_ids, timeout=30)
    assert all(r.ended for r in results)
    for sid, k in fresh_ids.items():
        r = c.streams[sid]
        assert r.status == 201, (r.status, r.body)
        assert json.loads(r.body)["key"] == k  # each answer on its own stream
        assert upstream.executions.count(key=k) == 1
    statuses = sorted(c.streams[s].status for s in shared_ids)
    assert upstream.executions.count(key=shared) == 1
    assert statuses.count(201) >= 1 and set(statuses) <= {201, 409}, statuses
    winners = {c.streams[s].body for s in shared_ids if c.streams[s].status == 201}
    assert len(winners) == 1
    # Once it is done, every retry on the connection replays it.
    again = c.wait(c.request("POST", path, b'{"s":1}', [("idempotency-key", shared)]))[0]
    assert again.header("idempotent-replayed") == "true" and again.body in winners
    c.close()


def test_a_slow_stream_never_holds_up_the_others(proxy, upstream):
    c = Client(proxy.port)
    slow = c.request("POST", "/v1/orders?delay_ms=3000", b"{}",
                     [("idempotency-key", "slow-" + uuid.uuid4().hex)])
    quick = [c.request("POST", "/v1/orders", b"{}", [("idempotency-key", "q-%d-%s" % (
        i, uuid.uuid4().hex))]) for i in range(5)]
    assert c.pump(lambda: all(c.streams[s].done for s in quick), timeout=2.5)
    assert not c.streams[slow].done
    assert all(c.streams[s].status == 201 for s in quick)
    assert c.wait(slow)[0].status == 201
    c.close()


# 2 KiB comes whole with its HEADERS, within the stream's window, and is refused as it
# is taken at once; 64 KiB passes the client's first window, so it is read on.
@pytest.mark.parametrize("size", [2 * 1024, 64 * 1024])
def test_a_body_over_max_body_gets_413_on_its_stream_alone(make_proxy, upstream, size):
    p = make_proxy(routes=[{"name": "orders", "path_prefix": "/v1", "key_required": True,
                            "max_body": "1KiB"}])
    c = Client(p.port)
    big_key, ok_key = "big-" + uuid.uuid4().hex, "ok-" + uuid.uuid4().hex
    big = c.request("POST", "/v1/orders", b"x" * size, [("idempotency-key", big_key)])
    ok = c.request("POST", "/v1/orders", b"{}", [("idempotency-key", ok_key)])
    big_r, ok_r = c.wait(big, ok)
    assert big_r.status == 413 and json.loads(big_r.body)["type"].endswith("/body-too-large")
    assert ok_r.status == 201
    assert upstream.executions.count(key=big_key) == 0
    assert upstream.executions.count(key=ok_key) == 1
    # The connection serves on.
    assert c.wait(c.request("POST", "/v1/orders", b"{}", [("idempotency-key", ok_key)]))[0] \
        .header("idempotent-replayed") == "true"
    c.close()


def test_bodies_without_content_length_and_large_answers_cross_intact(proxy, upstream, key):
    c = Client(proxy.port)
    body = os.urandom(300 * 1024)
    # A body of unknown length (no content-length) goes to the upstream chunked.
    sid = c.request("POST", "/v1/orders", b"", [("idempotency-key", key)], end=False)
    c.send_body(sid, body)
    r = c.wait(sid)[0]
    assert r.status == 201
    import hashlib
    assert json.loads(r.body)["body_sha256"] == hashlib.sha256(body).hexdigest()
    # A 2 MB answer, larger than every window, arrives whole, and is replayed whole.
    big = c.request("POST", "/v1/big?bytes=2000000", b"{}", [("idempotency-key", key + "-big")])
    first = c.wait(big, timeout=30)[0]
    assert first.status == 200 and len(first.body) == 2000000
    again = c.wait(c.request("POST", "/v1/big?bytes=2000000", b"{}",
                             [("idempotency-key", key + "-big")]), timeout=30)[0]
    assert again.header("idempotent-replayed") == "true" and again.body == first.body
    # HEAD has no body; cookies sent as crumbs reach HTTP/1.1 joined (RFC 9113 §8.2.3).
    echo = c.wait(c.request("GET", "/echo", b"", [("cookie", "a=1"), ("cookie", "b=2")]))[0]
    assert json.loads(echo.body)["headers"]["cookie"] == "a=1; b=2"
    head = c.wait(c.request("HEAD", "/other"))[0]
    assert head.status == 201 and head.body == b""
    c.close()


def test_host_differing_from_authority_is_malformed(proxy, upstream):
    # python3-h2 refuses to send it; a raw client does (RFC 9113 §8.3.1).
    c = RawClient(proxy.port)
    c.send(c.headers(1, [(":method", "GET"), (":path", "/other"), (":scheme", "http"),
                         (":authority", "127.0.0.1"), ("host", "elsewhere.example")]),
           c.headers(3, [(":method", "GET"), (":path", "/other"), (":scheme", "http"),
                         (":authority", "127.0.0.1")]))
    c.read_frames(until=lambda _: len(c.statuses) == 2)
    assert c.statuses == {1: 400, 3: 201}
    c.close()


NODE_CLIENT = r"""
const http2 = require('http2');
const [port, streams, shared] = process.argv.slice(2);
const session = http2.connect('http://127.0.0.1:' + port);
let pending = Number(streams);
const out = [];
for (let i = 0; i < Number(streams); i++) {
  const key = i % 10 === 0 ? shared : 'node-' + i + '-' + process.pid;
  const req = session.request({':method': 'POST', ':path': '/v1/orders',
                               'idempotency-key': key, 'content-type': 'application/json'});
  let body = '';
  let status = 0;
  let replayed = null;
  req.on('response', (h) => { status = h[':status']; replayed = h['idempotent-replayed'] || null; });
  req.setEncoding('utf8');
  req.on('data', (d) => { body += d; });
  req.on('end', () => {
    out.push({key, status, replayed, body});
    if (--pending === 0) { session.close(); console.log(JSON.stringify(out)); }
  });
  req.on('error', (e) => { out.push({key, error: String(e)}); if (--pending === 0) { session.close(); console.log(JSON.stringify(out)); } });
  req.end(JSON.stringify({i}));
}
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="Node is installed by install-deps.sh")
def test_node_http2_hundreds_of_streams_on_one_connection(proxy, upstream, tmp_path):
    script = tmp_path / "client.js"
    script.write_text(NODE_CLIENT)
    shared = "node-shared-" + uuid.uuid4().hex
    out = subprocess.run(["node", str(script), str(proxy.port), "300", shared],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout)
    assert len(results) == 300 and not [r for r in results if "error" in r]
    for r in results:
        if r["key"] != shared:
            assert r["status"] == 201 and json.loads(r["body"])["key"] == r["key"]
            assert upstream.executions.count(key=r["key"]) == 1
    shared_results = [r for r in results if r["key"] == shared]
    # The first body for the shared key wins; the others replay it, or are told it
    # is in flight (409) or was sent with another body (422).
    assert upstream.executions.count(key=shared) == 1
    assert {r["status"] for r in shared_results} <= {201, 409, 422}


def test_h2load_many_streams_per_connection(proxy, upstream):
    out = subprocess.run(["h2load", "-n", "2000", "-c", "4", "-m", "50",
                          "http://127.0.0.1:%d/other" % proxy.port],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "2000 succeeded, 0 failed, 0 errored" in out.stdout, out.stdout
    assert "status codes: 2000 2xx" in out.stdout, out.stdout


def test_an_answer_before_the_whole_request_reaches_curl(proxy, upstream):
    # The 400 goes out before curl's DATA arrives. A RST_STREAM at that moment, even
    # NO_ERROR, made curl 7.88 fail the exchange ("Stream error in the HTTP/2 framing
    # layer") 86 times in 100: the rest of the body is taken first (RFC 9113 §8.1).
    for _ in range(30):
        rc, status, headers, body, version = h2c(proxy.port, "/v1/orders",
                                                 *post_args(None, '{"n":2}'))
        assert (rc, status) == (0, 400), body


def test_drain_finishes_streams_in_flight_and_says_goaway(proxy, upstream, key, tmp_path):
    # nghttp (nghttp2-client) as the client: python3-h2 4.1 drops a connection's
    # streams on GOAWAY, which RFC 9113 §6.8 lets complete.
    import signal
    body = tmp_path / "body.json"
    body.write_text("{}")
    running = subprocess.Popen(
        ["nghttp", "-v", "-d", str(body), "-H", "idempotency-key: " + key,
         "http://127.0.0.1:%d/v1/orders?delay_ms=1500" % proxy.port],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    idle = Client(proxy.port)  # a connection with no stream is closed at once
    assert idle.pump(lambda: idle.conn.remote_settings.max_concurrent_streams == 128, timeout=5)
    assert wait_for(lambda: upstream.executions.count(key=key) == 1, timeout=5)
    proxy.signal(signal.SIGTERM)
    out, _ = running.communicate(timeout=15)
    # The stream that was running completes: its answer reaches the client whole,
    # and the GOAWAY (NO_ERROR) names it as processed.
    assert running.returncode == 0, out
    assert ":status: 201" in out and '"key": "%s"' % key in out, out
    goaway = [line for line in out.splitlines() if "recv GOAWAY" in line]
    assert goaway, out
    after = out[out.index("recv GOAWAY"):]
    assert "error_code=NO_ERROR(0x00)" in after, after
    assert idle.pump(lambda: idle.terminated is not None or idle.eof, timeout=5)
    assert proxy.proc.wait(timeout=10) == 0
    assert upstream.executions.count(key=key) == 1


def test_idle_http2_connections_make_room_at_max_connections(make_proxy, upstream, key):
    # An HTTP/2 connection with no stream is idle, as a keep-alive HTTP/1.1 one
    # between requests: at server.max_connections it is closed for a new client.
    p = make_proxy(server={"max_connections": 3})
    idle = [Client(p.port) for _ in range(3)]
    for c in idle:
        assert c.pump(lambda c=c: c.conn.remote_settings.max_concurrent_streams == 128, timeout=5)
    rc, status, headers, body, version = h2c(p.port, "/v1/orders", *post_args(key, "{}"))
    assert (rc, status) == (0, 201), body
    assert p.metric("idemproxy_connections_refused_total") == 0
    closed = sum(c.pump(lambda: False, timeout=2) or c.eof for c in idle)
    assert closed >= 1


def test_expect_100_continue_is_answered_on_the_stream(proxy, upstream, key):
    # RFC 9110 §10.1.1 over HTTP/2: the interim 100 is a HEADERS frame of its own,
    # before the final answer on the same stream.
    c = Client(proxy.port)
    sid = c.request("POST", "/v1/orders", b"", [("idempotency-key", key), ("expect", "100-continue"),
                                                ("content-length", "2")], end=False)
    assert c.pump(lambda: c.streams[sid].informational, timeout=5)
    assert c.streams[sid].informational == ["100"] and c.streams[sid].status is None
    c.send_body(sid, b"{}")
    r = c.wait(sid)[0]
    assert r.status == 201 and upstream.executions.count(key=key) == 1
    c.close()


def test_a_reload_storm_under_http2_load_fails_no_stream(proxy, upstream, tmp_path):
    """Each connection and each stream keeps the settings snapshot it started with
    (nothing holds a reference into a temporary): a reload every 100 ms, alternately
    by SIGHUP and changing what the routes say, while h2load drives replays, fresh
    keys' executions and pass-through streams on multiplexed connections. Run in the
    ASan build too, where a use after free fails the test through the proxy's log."""
    import signal
    import time
    body = tmp_path / "body.json"
    body.write_text("{}")
    key = "storm-" + uuid.uuid4().hex
    # Executed once first: the load's streams are replays (not 409s while it runs).
    assert proxy.post("/v1/orders", "{}", key=key).status == 201
    loads = [["h2load", "-D", "4", "-c", "4", "-m", "16", "-d", str(body),
              "-H", "content-type: application/json", "-H", "idempotency-key: " + key,
              "http://127.0.0.1:%d/v1/orders" % proxy.port],
             ["h2load", "-D", "4", "-c", "2", "-m", "16",
              "http://127.0.0.1:%d/other" % proxy.port]]
    running = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for cmd in loads]
    text = open(proxy.config_path).read()
    reloads = 0
    deadline = time.time() + 3.5
    while time.time() < deadline:
        ttl = "%dh" % (reloads % 5 + 1)
        proxy.write_config(text.replace('"defaults": {}', '"defaults": {"ttl": "%s"}' % ttl))
        proxy.signal(signal.SIGHUP)
        reloads += 1
        # Signals of one kind coalesce while one waits (POSIX), so each reload is seen
        # to land before the next: under ASan beside three other workers, 34 signals
        # 100 ms apart once made 32 reloads.
        assert proxy.wait_metric("idemproxy_config_reloads_total", reloads, result="ok") == reloads
        time.sleep(0.1)
    for p in running:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        done = [l for l in out.splitlines() if l.startswith("requests:")][0]
        total = int(done.split()[1])
        assert total > 0 and " 0 failed, 0 errored" in done, out
        # (Timed runs count statuses of streams still open at the end too.)
        assert " 0 3xx, 0 4xx, 0 5xx" in out, out
    assert proxy.proc.poll() is None
    assert reloads >= 5
    assert proxy.metric("idemproxy_config_reloads_total", result="ok") == reloads
    assert proxy.metric("idemproxy_config_reloads_total", result="rejected") == 0

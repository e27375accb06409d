"""forward_fencing_token: each forwarded request carries Idempotency-Fencing-Token,
the claim's fencing token, and the upstream guards its business write with it
(docs/RELIABILITY.md, "Fencing the upstream"). A holder that lost its lease while
the upstream worked for it cannot overwrite what the newer holder wrote, because
its token is older.

The upstream here is a small HTTP server whose business write is the SQL the docs
show, run against the test PostgreSQL."""
import json
import re
import signal
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness import SHORT_STATEMENTS, post_in_background

TABLE = "fenced_orders"
GUARDED_WRITE = (
    "INSERT INTO " + TABLE + " (id, attempt, fencing_token) VALUES ('{id}', {attempt}, {token})"
    " ON CONFLICT (id) DO UPDATE SET attempt = EXCLUDED.attempt,"
    " fencing_token = EXCLUDED.fencing_token"
    " WHERE " + TABLE + ".fencing_token < EXCLUDED.fencing_token"
    " RETURNING attempt")


class BusinessUpstream:
    """Writes one row per key, guarded by the fencing token. The first request it
    receives waits for `release` before it writes: the stalled holder."""

    def __init__(self, pg):
        self.seen = []  # (attempt, key, token as received)
        self.written = {}  # attempt -> whether its write took effect
        self.lock = threading.Lock()
        self.release = threading.Event()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                token = self.headers.get("Idempotency-Fencing-Token")
                key = self.headers.get("Idempotency-Key")
                with upstream.lock:
                    attempt = len(upstream.seen) + 1
                    upstream.seen.append((attempt, key, token))
                if attempt == 1:
                    upstream.release.wait(20)
                done = False
                if token is not None and token.isdigit():
                    done = pg.sql(GUARDED_WRITE.format(id=key, attempt=attempt, token=token)) != ""
                with upstream.lock:
                    upstream.written[attempt] = done
                body = json.dumps({"attempt": attempt, "written": done}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()


@pytest.fixture
def business(pg):
    pg.sql("CREATE TABLE IF NOT EXISTS %s (id text PRIMARY KEY, attempt int NOT NULL,"
           " fencing_token bigint NOT NULL)" % TABLE)
    u = BusinessUpstream(pg)
    yield u
    u.close()


ROUTE = {"name": "orders", "path_prefix": "/v1", "key_required": True, "lease": "1s",
         "on_stale": "retake", "forward_fencing_token": True}


def test_a_holder_that_lost_its_lease_cannot_overwrite_the_newer_holders_row(make_proxy, business,
                                                                             pg):
    old = make_proxy(upstream_url=business.url, routes=[ROUTE], store=SHORT_STATEMENTS)
    new = make_proxy(upstream_url=business.url, routes=[ROUTE], store=SHORT_STATEMENTS)
    key = "fence-" + uuid.uuid4().hex
    results = {}
    first = post_in_background(old, "/v1/orders", key, results)
    deadline = time.time() + 5
    while not business.seen and time.time() < deadline:
        time.sleep(0.01)
    assert len(business.seen) == 1
    # The holder stops (a GC pause, a frozen VM): it cannot renew its lease, which
    # runs out while the upstream still works for it.
    old.signal(signal.SIGSTOP)
    try:
        time.sleep(1.5)
        # A retry reaches the other instance, which takes the key over under a new,
        # larger token. It also sends its own Idempotency-Fencing-Token, which the
        # proxy removes: only the proxy's reaches the upstream.
        taken = new.post("/v1/orders", "{}", key=key,
                         headers={"Idempotency-Fencing-Token": "99999999999"})
        assert taken.status == 201 and json.loads(taken.body) == {"attempt": 2, "written": True}
        # Now the stalled holder's upstream work finishes: its write comes late.
        business.release.set()
        deadline = time.time() + 5
        while 1 not in business.written and time.time() < deadline:
            time.sleep(0.01)
    finally:
        old.signal(signal.SIGCONT)
    first.join(10)
    (a1, k1, t1), (a2, k2, t2) = business.seen
    assert k1 == k2 == key and t1.isdigit() and t2.isdigit()
    assert int(t2) > int(t1) and t2 != "99999999999"
    assert business.written == {1: False, 2: True}  # the late write changed nothing
    row = pg.sql("SELECT attempt || ' ' || fencing_token FROM %s WHERE id = '%s'" % (TABLE, key))
    assert row == "2 %s" % t2
    # The record holds the newer holder's answer; the late holder's was fenced off.
    again = new.post("/v1/orders", "{}", key=key)
    assert again.header("Idempotent-Replayed") == "true"
    assert json.loads(again.body) == {"attempt": 2, "written": True}


def test_tokens_strictly_increase_for_a_key_and_are_absent_unless_asked(make_proxy, business):
    business.release.set()
    route = dict(ROUTE, store_status=["4xx"])  # 201 is not stored: every retry executes
    p = make_proxy(upstream_url=business.url, routes=[route], store=SHORT_STATEMENTS)
    key = "fence-" + uuid.uuid4().hex
    for _ in range(3):
        assert p.post("/v1/orders", "{}", key=key).status == 201
    tokens = [int(t) for _, k, t in business.seen if k == key]
    assert len(tokens) == 3 and tokens == sorted(set(tokens))
    plain = make_proxy(upstream_url=business.url, routes=[dict(ROUTE, forward_fencing_token=False)],
                       store=SHORT_STATEMENTS)
    other = "plain-" + uuid.uuid4().hex
    plain.post("/v1/orders", "{}", key=other, headers={"Idempotency-Fencing-Token": "7"})
    assert [t for _, k, t in business.seen if k == other] == [None]


def test_forward_fencing_token_must_be_a_boolean(make_proxy, business):
    p = make_proxy(start=False, upstream_url=business.url,
                   routes=[dict(ROUTE, forward_fencing_token="sometimes")])
    out = p.cli("check-config")
    assert out.returncode != 0
    assert re.search(re.escape(p.config_path) +
                     r":\d+:\d+: .*forward_fencing_token must be true or false", out.stderr)


@pytest.mark.parametrize("http2", [False, True])
def test_a_clients_fencing_token_never_reaches_the_upstream(make_proxy, upstream, http2):
    """Only the proxy writes Idempotency-Fencing-Token: a client's own is removed on a
    covered route's covered method (where the proxy writes the claim's), on a method the
    route does not cover, and on a route that covers nothing, over HTTP/1.1 and HTTP/2."""
    from h2_peer import Client
    p = make_proxy(routes=[dict(ROUTE, methods=["POST"], lease="10s")])
    forged = "999999999"
    sent = []
    for method, path in (("POST", "/v1/orders"), ("PUT", "/v1/orders/1"),
                         ("DELETE", "/v1/orders/1"), ("POST", "/elsewhere")):
        key = "forged-" + uuid.uuid4().hex
        headers = {"Idempotency-Key": key, "Idempotency-Fencing-Token": forged,
                   "Content-Type": "application/json"}
        if http2:
            c = Client(p.port)
            (r,) = c.wait(c.request(method, path, b"{}", [(k.lower(), v) for k, v in headers.items()]))
            c.close()
        else:
            r = p.request(method, path, "{}", headers)
        assert r.status == 201, (method, path, r.status)
        sent.append((method, path, key))
    for method, path, key in sent:
        (seen,) = upstream.executions.headers_of(key)
        token = seen.get("idempotency-fencing-token")
        if (method, path) == ("POST", "/v1/orders"):
            assert token is not None and token != forged  # the claim's own
        else:
            assert token is None, (method, path, token)


@pytest.mark.parametrize("http2", [False, True])
def test_a_fencing_token_in_a_clients_trailers_never_reaches_the_upstream(make_proxy, upstream, http2):
    """A request's trailer section is not forwarded (RFC 9110 6.5.1 lets a recipient
    discard trailer fields; the proxy never merges them into the head), so a fencing token
    sent there reaches no upstream either, whether as chunked trailers over HTTP/1.1 or
    as a trailing HEADERS frame over HTTP/2."""
    import socket
    from h2_peer import Client
    p = make_proxy(routes=[dict(ROUTE, methods=["POST"], lease="10s")])
    forged = "999999999"
    for path in ("/v1/orders", "/elsewhere"):
        key = "trailer-" + uuid.uuid4().hex
        if http2:
            c = Client(p.port)
            sid = c.request("POST", path, b"{}", [("idempotency-key", key),
                                                  ("content-type", "application/json")], end=False)
            c.conn.send_headers(sid, [("idempotency-fencing-token", forged)], end_stream=True)
            c.flush()
            (r,) = c.wait(sid)
            c.close()
            status = r.status
        else:
            s = socket.create_connection(("127.0.0.1", p.port), timeout=10)
            s.sendall(("POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: " + key +
                       "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                       "Trailer: Idempotency-Fencing-Token\r\nConnection: close\r\n\r\n"
                       "2\r\n{}\r\n0\r\nIdempotency-Fencing-Token: " + forged + "\r\n\r\n").encode())
            answer = b""
            while True:
                piece = s.recv(65536)
                if not piece:
                    break
                answer += piece
            s.close()
            status = int(answer.split(b" ", 2)[1])
        assert status == 201, (path, status)
        (seen,) = upstream.executions.headers_of(key)
        token = seen.get("idempotency-fencing-token")
        if path == "/v1/orders":
            assert token is not None and token != forged
        else:
            assert token is None, token

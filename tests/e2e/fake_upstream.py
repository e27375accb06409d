"""A fake upstream for end-to-end tests: it counts how often each request really
executed, and its behaviour is chosen per request through the path and query.

  /v1/...?status=N&delay_ms=M   JSON answer with status N after M ms (default 201)
  /big?bytes=N                  N pseudo-random bytes, different on every execution
                                (&chunked=1: sent chunked, in 8 KiB chunks;
                                &gap_ms=G: a pause of G ms after every 64 KiB,
                                chunked or framed by its length)
  .../events?n=5&gap_ms=100&cut=0&pad=0 server-sent events, one chunk each, gap_ms
                                apart (pad=B: each event's data padded with B bytes)
  /reset-after-read             reads the request, then drops the connection
  /echo                         echoes the body and the headers it received
"""
import collections
import hashlib
import json
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class Executions:
    """Every request the upstream executed. Counted through indexes by key and by
    (method, path, key), so a ledger of tens of thousands of keys (the Citus soak)
    costs one look-up per key, not a scan of the whole log."""

    def __init__(self):
        self._lock = threading.Lock()
        self._log = []  # (method, path, key, body_sha256, headers)
        self._by_key = collections.Counter()
        self._by_request = collections.Counter()  # (method, path, key)

    def record(self, entry):
        with self._lock:
            self._log.append(entry)
            self._by_key[entry[2]] += 1
            self._by_request[entry[:3]] += 1
            return self._by_request[entry[:3]]

    def count(self, path=None, key=None, method=None):
        with self._lock:
            if key is not None and path is None and method is None:
                return self._by_key[key]
            if key is not None and path is not None and method is not None:
                return self._by_request[(method, path, key)]
            return sum(
                1
                for m, p, k, _, _ in self._log
                if (path is None or p == path) and (key is None or k == key)
                and (method is None or m == method)
            )

    def headers_of(self, key):
        """The fields of each execution of `key`, lowercased names, in order."""
        with self._lock:
            return [entry[4] for entry in self._log if entry[2] == key]

    def last(self, path=None):
        with self._lock:
            for entry in reversed(self._log):
                if path is None or entry[1] == path:
                    return entry
        return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def read_body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def answer(self, status, body, content_type="application/json", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        body = self.read_body()
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        key = self.headers.get("Idempotency-Key")
        headers = {k.lower(): v for k, v in self.headers.items()}
        n = self.server.executions.record(
            (self.command, url.path, key, hashlib.sha256(body).hexdigest(), headers))
        if "delay_ms" in query:
            time.sleep(int(query["delay_ms"]) / 1000.0)

        if url.path.endswith("/reset-after-read"):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.connection.close()
            self.close_connection = True
            return
        if url.path.endswith("/big"):
            rng = random.Random("%s-%s-%d" % (key, url.path, n))
            payload = rng.randbytes(int(query.get("bytes", "1024")))
            if query.get("chunked") == "1":
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                gap = int(query.get("gap_ms", "0")) / 1000.0
                for i in range(0, len(payload), 8192):
                    piece = payload[i:i + 8192]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    if gap and i % 65536 == 65536 - 8192:  # paced: 64 KiB, then a pause
                        self.wfile.flush()
                        time.sleep(gap)
                self.wfile.write(b"0\r\n\r\n")
                return
            gap = int(query.get("gap_ms", "0")) / 1000.0
            if gap:  # framed by its length, paced as above
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                for i in range(0, len(payload), 65536):
                    self.wfile.write(payload[i:i + 65536])
                    self.wfile.flush()
                    time.sleep(gap)
                return
            self.answer(200, payload, "application/octet-stream")
            return
        if url.path.endswith("/events"):
            # Server-sent events, as an LLM API streams tokens: n events, gap_ms apart,
            # chunked. cut=K: the connection is cut after the K-th event, with no last
            # chunk (a stream broken off).
            count = int(query.get("n", "5"))
            gap = int(query.get("gap_ms", "100")) / 1000.0
            cut = int(query.get("cut", "0"))
            pad = b"x" * int(query.get("pad", "0"))
            self.send_response(int(query.get("status", "200")))
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(count):
                if i:
                    time.sleep(gap)
                event = b"id: %d\ndata: token %d of execution %d%s\n\n" % (i, i, n, pad)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
                if cut and i + 1 == cut:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
            self.wfile.write(b"0\r\n\r\n")
            return
        if url.path.endswith("/echo"):
            payload = json.dumps({"headers": headers, "body_sha256": hashlib.sha256(body).hexdigest(),
                                  "body_len": len(body)}).encode()
            self.answer(200, payload)
            return
        status = int(query.get("status", "201"))
        payload = json.dumps({
            "execution": n,
            "key": key,
            "method": self.command,
            "path": url.path,
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "nonce": random.random(),
        }).encode()
        self.answer(status, payload, extra=[
            ("Set-Cookie", "session=secret-%d; HttpOnly" % n),
            ("X-Upstream-Execution", str(n)),
            ("Cache-Control", "no-cache"),
        ])

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = handle_any


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # listen() backlog; must be set before the socket listens
    accepted = 0  # connections taken

    def get_request(self):
        got = super().get_request()
        self.accepted += 1
        return got


class FakeUpstream:
    """With `tls` (an ssl.SSLContext for the server side) it speaks HTTPS."""

    def __init__(self, tls=None):
        self.server = Server(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.server.executions = Executions()
        self.port = self.server.server_address[1]
        self.url = "%s://127.0.0.1:%d" % ("https" if tls else "http", self.port)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def executions(self):
        return self.server.executions

    @property
    def accepted(self):
        """The connections it has taken so far."""
        return self.server.accepted

    def close(self):
        self.server.shutdown()
        self.server.server_close()

"""Starts the real idemproxy binary and talks HTTP to it."""
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("IDEMPROXY_BIN", os.path.join(ROOT, "build", "idemproxy"))

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from free_port import free_port  # noqa: E402  (ports outside the ephemeral range; see there)


class Response:
    def __init__(self, status, headers, body, reset=None):
        self.status = status
        self.headers = headers  # list of (name, value) in wire order
        self.body = body
        self.reset = reset  # HTTP/2: the RST_STREAM error code that ended a stream begun

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def header_names(self):
        return [k.lower() for k, _ in self.headers]

    def json(self):
        return json.loads(self.body)


# IDEMPROXY_TEST_HTTP2=1 sends every test request over HTTP/2 (python3-h2, h2c with
# prior knowledge, or h2 by ALPN over TLS), so a whole test file shows that its
# behaviour holds for HTTP/2 streams word for word (scripts/test.sh runs the
# behaviour table so).
OVER_HTTP2 = os.environ.get("IDEMPROXY_TEST_HTTP2") == "1"
# Connection-specific fields have no place in HTTP/2 (RFC 9113 §8.2.2).
H1_ONLY_FIELDS = {"connection", "keep-alive", "transfer-encoding", "upgrade", "host"}


def request_h2(port, method, path, body, headers, timeout, tls):
    from h2_peer import Client  # python3-h2 imports under /usr/bin/python3 only
    c = Client(port, tls=tls, timeout=timeout)
    try:
        data = body.encode() if isinstance(body, str) else (body or b"")
        fields = [(k.lower(), str(v)) for k, v in (headers or {}).items()
                  if k.lower() not in H1_ONLY_FIELDS]
        sid = c.request(method, path, data, fields)
        c.pump(lambda: c.streams[sid].done, timeout=timeout)
        r = c.streams[sid]
        # What http.client raises for an HTTP/1.1 connection that ends without an
        # answer (a TLS 1.3 server refusing the client's certificate after the
        # handshake, say), so tests catch one error for both protocols.
        if not r.done and c.eof:
            raise ConnectionResetError("the connection closed before the answer")
        if not r.done:
            raise TimeoutError("no answer on stream %d in %s s" % (sid, timeout))
        if r.reset is not None and r.status is None:
            raise ConnectionResetError("stream reset with HTTP/2 error %d" % r.reset)
        return Response(r.status, [(k, v) for k, v in r.headers if not k.startswith(":")],
                        r.body, r.reset)
    finally:
        c.close()


def request(port, method, path, body=None, headers=None, timeout=30, tls=None, http2=None):
    """One request on a new connection; HTTPS when `tls` is an ssl.SSLContext."""
    if OVER_HTTP2 if http2 is None else http2:
        return request_h2(port, method, path, body, headers, timeout, tls)
    if tls is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=tls)
    try:
        data = body.encode() if isinstance(body, str) else body
        conn.request(method, path, body=data, headers=headers or {})
        r = conn.getresponse()
        return Response(r.status, r.getheaders(), r.read())
    finally:
        conn.close()


def raw_exchange(port, payload, timeout=5):
    """Sends raw bytes and returns everything the proxy answers before closing."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        chunks = []
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except socket.timeout:
            pass
        return b"".join(chunks)


# Leases must be longer than store.postgres.statement_timeout (each renewal is one
# statement); tests with 1 s leases use this store.
SHORT_STATEMENTS = {"postgres": {"dsn": None, "pool_size": 4, "statement_timeout": "500ms"}}


def default_server():
    """IDEMPROXY_TEST_THREADS runs every proxy with that many I/O threads (the TSan
    stage uses 4, so races between I/O threads can show)."""
    server = {"drain_timeout": "5s"}
    if os.environ.get("IDEMPROXY_TEST_THREADS"):
        server["threads"] = int(os.environ["IDEMPROXY_TEST_THREADS"])
    return server


def config_text(upstream_url, dsn, listen_port, admin_port, defaults=None, routes=None,
                store=None, server=None, gc=None, extra_top=None):
    defaults = defaults or {}
    if routes is None:
        routes = [{"name": "orders", "path_prefix": "/v1", "key_required": True}]
    if store is None:
        store = {"postgres": {"dsn": dsn, "pool_size": 4}}
    elif "postgres" in store and store["postgres"].get("dsn") is None:
        store = dict(store, postgres=dict(store["postgres"], dsn=dsn))
    doc = {
        "listen": "127.0.0.1:%d" % listen_port,
        "admin_listen": "127.0.0.1:%d" % admin_port,
        "upstream": {"url": upstream_url, "connect_timeout": "1s", "timeout": "10s"},
        "store": store,
        "defaults": defaults,
        "routes": routes,
        "server": dict(default_server(), **(server or {})),
    }
    if gc is not None:
        doc["gc"] = gc
    doc.update(extra_top or {})
    # JSON is valid YAML.
    return json.dumps(doc, indent=2) + "\n"


class Proxy:
    """One idemproxy process with its own config file and ports."""

    def __init__(self, upstream_url, dsn, **config):
        self.port = free_port()
        self.admin_port = free_port()
        self.dir = tempfile.mkdtemp(prefix="idemproxy-e2e-")
        self.config_path = os.path.join(self.dir, "idemproxy.yaml")
        self.write_config(config_text(upstream_url, dsn, self.port, self.admin_port, **config))
        self.log_path = os.path.join(self.dir, "proxy.log")
        self.proc = None

    def write_config(self, text):
        with open(self.config_path, "w") as f:
            f.write(text)

    def start(self, *args, wait=True, env=None):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([BINARY, "serve", "--config", self.config_path, *args],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, **env) if env else None)
        if wait:
            self.wait_healthy()
        return self

    def wait_healthy(self, timeout=15):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("idemproxy exited with %s:\n%s" % (self.proc.returncode,
                                                                    self.read_log()))
            try:
                if request(self.admin_port, "GET", "/healthz", timeout=1, http2=False).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("idemproxy did not become healthy:\n" + self.read_log())

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def request(self, method, path, body=None, headers=None, timeout=30, tls=None):
        return request(self.port, method, path, body, headers, timeout, tls)

    def post(self, path, body=None, key=None, headers=None, **kw):
        h = {"Content-Type": "application/json"}
        if key is not None:
            h["Idempotency-Key"] = key
        h.update(headers or {})
        return self.request("POST", path, body if body is not None else "{}", h, **kw)

    def admin(self, path):
        return request(self.admin_port, "GET", path, http2=False)

    def metric(self, name, **labels):
        text = self.admin("/metrics").body.decode()
        want = name + ("{" + ",".join('%s="%s"' % kv for kv in sorted(labels.items())) + "}"
                       if labels else "")
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            series, _, value = line.rpartition(" ")
            if series == want or (labels and series.startswith(name + "{") and
                                  all('%s="%s"' % kv in series for kv in labels.items())):
                return float(value)
        return 0.0

    def wait_metric(self, name, expected, timeout=5, **labels):
        """metric(name, **labels) once it equals `expected` (polled every 20 ms), else its
        last value after `timeout`. A request is counted, access-logged and its span
        ended after its answer is sent (src/proxy/serve.cpp, Proxy::serve), so a client
        can read /metrics before its own request is counted."""
        deadline = time.time() + timeout
        while True:
            value = self.metric(name, **labels)
            if value == expected or time.time() >= deadline:
                return value
            time.sleep(0.02)

    def cli(self, *args):
        return subprocess.run([BINARY, *args, "--config", self.config_path],
                              capture_output=True, text=True, timeout=30)

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout=10):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_for(predicate, timeout=5):
    """True once predicate() holds, polling every 20 ms; False after `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def run_node(script, *args):
    """Runs `script`, an ES module's text, with Node and `args`; returns the JSON it
    printed."""
    out = subprocess.run(["node", "--input-type=module", "-e", script, *args],
                         capture_output=True, timeout=30, check=True)
    return json.loads(out.stdout)


def fields_by_name(raw_headers):
    """Node's rawHeaders (name, value, name, value, ...: every field line as it came) as
    each lower-cased name's values, in order."""
    seen = {}
    for name, value in zip(raw_headers[0::2], raw_headers[1::2]):
        seen.setdefault(name.lower(), []).append(value)
    return seen


def assert_forwarding_fields(seen):
    """What the proxy adds to a request from 127.0.0.1 that came with Host:
    shop.example:8443, X-Forwarded-For: 203.0.113.7 and X-Request-Id: first-id, then
    second-id, as an upstream saw it (fields_by_name): X-Forwarded-For extended, -Proto
    and -Host added, the first request id as the only one, and a trace started (W3C
    Trace Context 3.2: one traceparent), each once."""
    assert seen["x-forwarded-for"] == ["203.0.113.7, 127.0.0.1"]
    assert seen["x-forwarded-proto"] == ["http"]
    assert seen["x-forwarded-host"] == ["shop.example:8443"]
    assert seen["x-request-id"] == ["first-id"]
    assert len(seen["traceparent"]) == 1
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]", seen["traceparent"][0])


def problem(response):
    """Asserts an RFC 9457 problem response and returns its JSON."""
    assert response.header("Content-Type") == "application/problem+json", response.headers
    doc = response.json()
    assert doc["status"] == response.status
    assert doc["type"].startswith("https://idemproxy.dev/problems/")
    assert doc["title"] and doc["detail"]
    return doc


def post_in_background(proxy, path, key, results):
    """POSTs on a thread; results[key] gets the response, or the exception."""

    def send():
        try:
            results[key] = proxy.post(path, "{}", key=key)
        except (OSError, http.client.HTTPException) as e:
            results[key] = e
    t = threading.Thread(target=send)
    t.start()
    return t


def wait_for_execution(upstream, key, timeout=5):
    """Waits until the upstream has started executing the request with this key."""
    deadline = time.time() + timeout
    while upstream.executions.count(key=key) == 0 and time.time() < deadline:
        time.sleep(0.01)
    assert upstream.executions.count(key=key) == 1


def big_body(key, n, size):
    """The bytes the fake upstream sends for /v1/big on the n-th execution of a key."""
    return random.Random("%s-/v1/big-%d" % (key, n)).randbytes(size)


def settle(proxy, key, path="/v1/orders", timeout=15):
    """Retries until the key is no longer in flight; returns the last response."""
    deadline = time.time() + timeout
    while True:
        r = proxy.post(path, "{}", key=key)
        if r.status != 409 or problem(r)["type"].endswith("/outcome-unknown") or \
                problem(r)["type"].endswith("/outcome-indeterminate") or time.time() > deadline:
            return r
        time.sleep(0.2)


class Load:
    """Clients posting fresh keys in a loop until stopped, or until the proxy refuses
    connections. delivered[key] is the response, or None when the exchange failed.
    With backoff, a client pauses that long after a 5xx."""

    def __init__(self, proxy, key, path, clients, backoff=0.0):
        self.delivered = {}
        self.stopped = threading.Event()

        def client(n):
            i = 0
            while not self.stopped.is_set():
                k = "%s-%d-%d" % (key, n, i)
                i += 1
                try:
                    self.delivered[k] = proxy.post(path, "{}", key=k)
                    if backoff and self.delivered[k].status >= 500:
                        time.sleep(backoff)  # as a client backs off while the store is down
                except ConnectionRefusedError:
                    self.stopped.set()
                except (OSError, http.client.HTTPException):
                    self.delivered[k] = None

        self.threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
        for t in self.threads:
            t.start()

    def stop(self):
        self.stopped.set()
        for t in self.threads:
            t.join()
        return self.delivered


def restarted_under(pg, load):
    """PostgreSQL stopped for a second, then started, while `load` runs; what the load
    delivered once it ran 1.5 s more."""
    time.sleep(1.0)
    pg.stop()
    time.sleep(1.0)
    pg.start()
    time.sleep(1.5)
    return load.stop()


class CuttingRelay:
    """A TCP relay in front of PostgreSQL that loses an answer as a failing network or
    a crashing primary does. Armed with cut(statement), it forwards the next execution
    of that prepared statement (its Bind message) and the server's whole answer up to
    ReadyForQuery, after the commit, then drops that answer and closes both sides: the
    statement committed and the client never learns it. While refusing, it closes each
    new connection at once, as a database that is not back yet."""

    def __init__(self, port):
        self.target = port
        self.armed = None
        self.refusing = False
        self.cuts = 0
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def dsn(self):
        # In the clear, so the relay can read the protocol: Citus turns on TLS.
        return "postgresql://postgres@127.0.0.1:%d/idemproxy?sslmode=disable" % self.port

    def cut(self, statements, refuse=False):
        """Arms the cut for the next execution of `statements` (one name, or a list of
        names: the first of them executed)."""
        names = [statements] if isinstance(statements, str) else statements
        with self.lock:
            self.armed = [b"\x00" + name.encode() + b"\x00" for name in names]
            self.refuse_after = refuse

    def admit(self):
        self.refusing = False

    def close(self):
        self.closed = True
        self.listener.close()

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            server = socket.create_connection(("127.0.0.1", self.target))
            cut = threading.Event()
            threading.Thread(target=self._up, args=(client, server, cut), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, cut), daemon=True).start()

    def _is_bind(self, data):
        with self.lock:
            if self.armed is None:
                return False
            if not any(at >= 5 and data[at - 5:at - 4] == b"B"
                       for at in (data.find(name) for name in self.armed)):
                return False
            self.armed = None
            if self.refuse_after:
                self.refusing = True
            return True

    def _up(self, client, server, cut):
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                if self._is_bind(data):
                    cut.set()
                server.sendall(data)
        except OSError:
            pass
        finally:
            try:
                server.shutdown(socket.SHUT_RDWR)  # the client left: so does the server side
            except OSError:
                pass

    def _down(self, server, client, cut):
        seen = b""
        try:
            while True:
                data = server.recv(65536)
                if not data:
                    break
                if cut.is_set():
                    seen += data
                    if b"Z\x00\x00\x00\x05" in seen:  # ReadyForQuery: it has committed
                        self.cuts += 1
                        break
                    continue
                client.sendall(data)
        except OSError:
            pass
        finally:
            for s in (client, server):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

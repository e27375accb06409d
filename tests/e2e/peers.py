"""Real HTTP peers for the outside-in tests: upstream servers that idemproxy did not
write (nginx, Node's http, Python's http.server) and real clients (curl, Node's
fetch, Python's urllib). Each upstream answer echoes the request's X-Ledger-Id, so
a client can check that the answer it got is its own."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import free_port

HERE = os.path.dirname(os.path.abspath(__file__))


def _wait_port(port, proc, what, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("%s exited with %s" % (what, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen on %d" % (what, port))


class NodeUpstream:
    """tests/e2e/peers/node_upstream.js under the machine's Node."""

    def __init__(self, keep_alive_ms=None):
        env = dict(os.environ)
        if keep_alive_ms is not None:
            env["KEEP_ALIVE_MS"] = str(keep_alive_ms)
        self.proc = subprocess.Popen(["node", os.path.join(HERE, "peers", "node_upstream.js")],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=env)
        line = self.proc.stdout.readline()
        if not line.startswith("listening "):
            raise RuntimeError("node upstream did not start: %r" % line)
        self.port = int(line.split()[1])
        self.url = "http://127.0.0.1:%d" % self.port

    def executions(self, key):
        with urllib.request.urlopen(self.url + "/executions?key=" + key, timeout=5) as r:
            return json.loads(r.read())["count"]

    def close(self):
        self.proc.kill()
        self.proc.wait()


class H2NodeUpstream:
    """tests/e2e/h2_upstream.js: Node's http2 module (nghttp2 inside) in cleartext or,
    with "--tls CERT KEY", over TLS; its control port reports what it executed."""

    def __init__(self, *options):
        self.port, self.control = free_port(), free_port()
        self.proc = subprocess.Popen(["node", os.path.join(HERE, "h2_upstream.js"), str(self.port),
                                      str(self.control), *options],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert self.proc.stdout.readline().strip() == b"ready"

    def _get(self, path):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.control, path)) as r:
            return json.loads(r.read())

    def executions(self, key=None):
        return [e for e in self._get("/executions") if key is None or e["key"] == key]

    def sessions(self):
        return self._get("/sessions")

    def goaway(self):
        self._get("/goaway")

    def close_sessions(self):
        self._get("/close-sessions")

    def close(self):
        self.proc.kill()
        self.proc.wait()


class NginxUpstream:
    """nginx (Debian's nginx-light) answering every request itself. Its access log
    records each request's key and ledger id, so executions can be counted; it
    answers a stray byte sequence on a kept-alive connection with 400, as real
    servers do."""

    # What the server answers unless told otherwise: every request, itself.
    ANSWER = """    location / {
      default_type application/json;
      return 201 '{"id":"$http_x_ledger_id","uri":"$request_uri","host":"$host","protocol":"$server_protocol"}';
    }"""

    def __init__(self, locations=ANSWER, http2=False, tls=None):
        """`http2`: the port speaks HTTP/2 in cleartext (h2c with prior knowledge)
        instead of HTTP/1.1; `locations`: the server's location blocks; `tls`: a
        (certificate, key) pair, and the port speaks HTTPS."""
        self.dir = tempfile.mkdtemp(prefix="idemproxy-nginx-")
        self.port = free_port()
        self.access_log = os.path.join(self.dir, "access.log")
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write("""
daemon off;
master_process off;
worker_processes 1;
error_log %(d)s/error.log warn;
pid %(d)s/nginx.pid;
events { worker_connections 1024; }
http {
  client_body_temp_path %(d)s/body;
  proxy_temp_path %(d)s/proxy;
  fastcgi_temp_path %(d)s/fastcgi;
  uwsgi_temp_path %(d)s/uwsgi;
  scgi_temp_path %(d)s/scgi;
  log_format ledger '$status $request_method $request_uri key=$http_idempotency_key id=$http_x_ledger_id tp=$http_traceparent ts=$http_tracestate conn=$connection';
  access_log %(d)s/access.log ledger;
  keepalive_requests 100000;
  client_max_body_size 4m;
  server {
    listen 127.0.0.1:%(port)d%(http2)s%(ssl)s;
%(tls)s%(locations)s
  }
}
""" % {"d": self.dir, "port": self.port, "http2": " http2" if http2 else "",
       "ssl": " ssl" if tls else "", "locations": locations,
       "tls": "    ssl_certificate %s;\n    ssl_certificate_key %s;\n" % tls if tls else ""})
        self.proc = subprocess.Popen(["nginx", "-c", conf, "-p", self.dir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        _wait_port(self.port, self.proc, "nginx")
        self.url = "%s://127.0.0.1:%d" % ("https" if tls else "http", self.port)

    def log_lines(self):
        with open(self.access_log) as f:
            return f.read().splitlines()

    def executions(self, key):
        return sum(1 for line in self.log_lines() if " key=%s " % key in line + " ")

    def statuses(self):
        return [line.split()[0] for line in self.log_lines()]

    def close(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class _StdlibHandler(BaseHTTPRequestHandler):
    """Python's http.server as applications use it: HTTP/1.1, Content-Length bodies."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        key = self.headers.get("Idempotency-Key")
        if key is not None:
            with self.server.lock:
                self.server.executions[key] = self.server.executions.get(key, 0) + 1
        data = json.dumps({"id": self.headers.get("X-Ledger-Id"), "bytes": len(body),
                           "path": self.path}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_PUT = _answer


class _WideBacklogServer(ThreadingHTTPServer):
    # socketserver's listen backlog is 5: under a burst of new connections the kernel
    # drops SYNs past it, and the proxy's connect times out (a one-off 502 seen in
    # test_node_fetch_clients_each_get_their_own_answer[python]). A deployed Python
    # server sits behind a wider backlog.
    request_queue_size = 128


class PythonUpstream:
    def __init__(self):
        self.server = _WideBacklogServer(("127.0.0.1", 0), _StdlibHandler)
        self.server.daemon_threads = True
        self.server.lock = threading.Lock()
        self.server.executions = {}
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def executions(self, key):
        with self.server.lock:
            return self.server.executions.get(key, 0)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def curl(*args, timeout=30):
    """Runs the curl command line; returns (status, headers dict lower-case, body)."""
    out = subprocess.run(["curl", "-sS", "-i", "--max-time", str(timeout), *args],
                         capture_output=True, timeout=timeout + 5)
    if out.returncode != 0:
        raise RuntimeError("curl failed: %s" % out.stderr.decode(errors="replace"))
    raw = out.stdout
    # Interim answers (1xx) come first, each with its own blank line.
    heads = []
    while True:
        head, _, raw = raw.partition(b"\r\n\r\n")
        heads.append(head.decode("latin-1"))
        if not heads[-1].split(" ", 2)[1].startswith("1"):
            break
    lines = heads[-1].split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, raw, [int(h.split()[1]) for h in heads[:-1]]


def node_fetch(requests, parallel=1, timeout=120):
    """Sends requests ({method, url, headers, body}) with Node's fetch, keep-alive."""
    out = subprocess.run(["node", os.path.join(HERE, "peers", "node_client.js"), str(parallel)],
                         input=json.dumps(requests), capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError("node client failed: %s" % out.stderr)
    return json.loads(out.stdout)


def urllib_post(url, body, headers, timeout=30):
    """One request with Python's urllib; returns (status, headers, body)."""
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()

#!/usr/bin/env python3
"""A small demo API to put idemproxy in front of.

POST /v1/orders   creates an order (201) and counts how often it really executed
GET  /v1/orders   lists the orders created so far
GET  /status      200, for health checks
anything else     404

Usage: demo_upstream.py PORT
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
ORDERS = []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # one short line per request
        sys.stderr.write("demo-upstream: %s\n" % (fmt % args))

    def send_json(self, status, payload, extra=None):
        body = (json.dumps(payload, indent=2) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/status":
            self.send_json(200, {"status": "ok"})
        elif self.path == "/v1/orders":
            with LOCK:
                self.send_json(200, {"orders": ORDERS})
        else:
            self.send_json(404, {"error": "not found"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path != "/v1/orders":
            self.send_json(404, {"error": "not found"})
            return
        try:
            request = json.loads(raw or b"{}")
        except ValueError:
            self.send_json(400, {"error": "body must be JSON"})
            return
        time.sleep(0.2)  # a side effect that takes a moment, like charging a card
        with LOCK:
            order = {
                "id": "ord_%d" % (len(ORDERS) + 1),
                "amount": request.get("amount"),
                "idempotency_key": self.headers.get("Idempotency-Key"),
                "executions_so_far": len(ORDERS) + 1,
            }
            ORDERS.append(order)
        self.send_json(201, order, {"Set-Cookie": "session=demo; HttpOnly"})


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    sys.stderr.write("demo-upstream: listening on 127.0.0.1:%d\n" % port)
    server.serve_forever()


if __name__ == "__main__":
    main()

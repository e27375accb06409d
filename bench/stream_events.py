"""The events client of bench/streamed.sh.

    python3 bench/stream_events.py PORT PATH [KEY [ATTACH_MS [ATTACH_PORT]]]

POSTs to 127.0.0.1:PORT/PATH (with Idempotency-Key: KEY when given) and reads the
answer's server-sent events, "data: T" with T the upstream's CLOCK_MONOTONIC
nanoseconds at sending, noting the CLOCK_MONOTONIC time each event is received.
With ATTACH_MS a second client sends the same request ATTACH_MS ms after the first
(it attaches to the first's stream), to ATTACH_PORT when given (another instance,
which follows the stream from the store), and both are read together. Prints one JSON
object: per client (a, b) the status, whether Idempotent-Replayed was true, how many
events, and the p50 and p99 in ms of receive minus send; with a second client, "lag":
b's receive time minus a's, event by event, over the events sent after b's head
arrived (the earlier ones b gets at once as catch-up, so their lag is its lateness):
how many, and the p50, p99 and max in ms.
"""
import json
import re
import selectors
import socket
import sys
import time

EVENT = re.compile(rb"data: (\d+)\n\n")


class Reader:
    """One request and its answer: the head, then the body de-chunked, then events."""

    def __init__(self, port, path, key):
        self.sock = socket.create_connection(("127.0.0.1", port))
        head = f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        head += f"Idempotency-Key: {key}\r\n" if key else ""
        self.sock.sendall((head + "Content-Length: 2\r\nConnection: close\r\n\r\n{}").encode())
        self.raw = b""     # bytes not parsed yet
        self.body = b""    # de-chunked body not yet cut into events
        self.headers = None
        self.status = None
        self.head_ns = None
        self.left = None   # Content-Length framing: bytes still to come
        self.chunked = False
        self.done = False
        self.events = []   # (sent ns, received ns)

    def feed(self, data, now):
        if not data:
            self.done = True
            return
        self.raw += data
        if self.headers is None:
            end = self.raw.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = self.raw[:end].decode("latin-1").split("\r\n")
            self.raw = self.raw[end + 4:]
            self.status = int(lines[0].split()[1])
            self.head_ns = now
            self.headers = {k.strip().lower(): v.strip()
                            for k, v in (line.split(":", 1) for line in lines[1:])}
            self.chunked = "chunked" in self.headers.get("transfer-encoding", "")
            if not self.chunked:
                self.left = int(self.headers.get("content-length", "-1"))
        self.body += self.dechunk() if self.chunked else self.counted()
        for m in EVENT.finditer(self.body):
            self.events.append((int(m.group(1)), now))
        self.body = self.body[self.body.rfind(b"\n\n") + 2:] if b"\n\n" in self.body else self.body

    def counted(self):
        data, self.raw = self.raw, b""
        if self.left >= 0:
            self.left -= len(data)
            self.done = self.left <= 0
        return data

    def dechunk(self):
        out = b""
        while True:
            line_end = self.raw.find(b"\r\n")
            if line_end < 0:
                return out
            size = int(self.raw[:line_end].split(b";")[0], 16)
            if size == 0:
                self.done = True
                return out
            if len(self.raw) < line_end + 2 + size + 2:
                return out
            out += self.raw[line_end + 2:line_end + 2 + size]
            self.raw = self.raw[line_end + 2 + size + 2:]

    def summary(self):
        lat = sorted((r - s) / 1e6 for s, r in self.events)
        return {"status": self.status,
                "replayed": (self.headers or {}).get("idempotent-replayed") == "true",
                "events": len(lat), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99)}


def pct(values, p):
    """The nearest-rank percentile of sorted values (None when empty)."""
    if not values:
        return None
    return round(values[max(0, -(-len(values) * p // 100) - 1)], 3)


def main():
    port, path = int(sys.argv[1]), sys.argv[2]
    key = sys.argv[3] if len(sys.argv) > 3 else None
    attach_ms = float(sys.argv[4]) if len(sys.argv) > 4 else None
    attach_port = int(sys.argv[5]) if len(sys.argv) > 5 else port
    sel = selectors.DefaultSelector()
    readers = [Reader(port, path, key)]
    sel.register(readers[0].sock, selectors.EVENT_READ, readers[0])
    attach_at = time.monotonic() + attach_ms / 1000 if attach_ms is not None else None
    deadline = time.monotonic() + 60
    while not all(r.done for r in readers) and time.monotonic() < deadline:
        if attach_at is not None and time.monotonic() >= attach_at:
            readers.append(Reader(attach_port, path, key))
            sel.register(readers[1].sock, selectors.EVENT_READ, readers[1])
            attach_at = None
        wait = 1.0 if attach_at is None else max(0.0, attach_at - time.monotonic())
        for item, _ in sel.select(wait):
            reader = item.data
            data = reader.sock.recv(65536)
            reader.feed(data, time.monotonic_ns())
            if reader.done:
                sel.unregister(reader.sock)
                reader.sock.close()
    out = {"a": readers[0].summary()}
    if len(readers) > 1:
        a, b = readers
        out["b"] = b.summary()
        sent_a = {s: r for s, r in a.events}
        lag = sorted((r - sent_a[s]) / 1e6 for s, r in b.events
                     if s in sent_a and b.head_ns is not None and s > b.head_ns)
        out["lag"] = {"events": len(lag), "p50_ms": pct(lag, 50), "p99_ms": pct(lag, 99),
                      "max_ms": round(lag[-1], 3) if lag else None}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

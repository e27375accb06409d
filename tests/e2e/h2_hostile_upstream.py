"""A hostile HTTP/2 upstream (h2c, prior knowledge) for tests/e2e/test_http2_upstream_hostile.py.

Each connection is a server-side python3-h2 H2Connection on its own thread. What the
server does with each complete request is its `behaviour` (settable per test); the
answers a conforming server never sends are written as raw frames (hyperframe, with
header blocks from the connection's own HPACK encoder so the peer's decoder stays in
step). Every request is recorded (method, path, headers, body, connection number,
stream id, whether the server processed it), and per connection the most streams
that were open at once after the peer acknowledged the server's SETTINGS.

Settings the server advertises beyond h2's defaults (`settings`) go in a SETTINGS
frame of their own right after h2's; h2 itself keeps its permissive defaults, and
the server enforces and measures the advertised limits itself, as a real server
does: before the peer acknowledges them it refuses extra streams with REFUSED_STREAM
(as nghttp2 does with its pending settings), after that an extra stream or a DATA
frame beyond a zero window is a violation, counted and answered with the error that
RFC 9113 names."""
import json
import select
import socket
import threading
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
from hyperframe import frame as hf

from harness import free_port

MAX_CONCURRENT_STREAMS = hf.SettingsFrame.MAX_CONCURRENT_STREAMS
INITIAL_WINDOW_SIZE = hf.SettingsFrame.INITIAL_WINDOW_SIZE

# RFC 9113 §7 error codes.
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
REFUSED_STREAM = 0x7


class HostileH2Upstream:
    """behaviour is one of:
    normal                 201 (covered /v1 paths) or 200, a JSON body naming the key
    slow                   as normal, `delay` seconds after the request ends
    reset_mid_answer       HEADERS (content-length 100), 10 bytes of DATA, then 0.1 s
                           later RST_STREAM INTERNAL_ERROR
    data_beyond_length     HEADERS (content-length 5), then 20 bytes of DATA with END_STREAM
    headers_after_trailers HEADERS, DATA, trailing HEADERS without END_STREAM, then
                           another HEADERS with END_STREAM
    pseudo_in_trailers     HEADERS, DATA, trailing HEADERS with :status 200 and END_STREAM
    status_no_class        HEADERS with :status 053 (three digits, no class), then 5
                           bytes of DATA with END_STREAM (both raw frames)
    answers_early          as normal, once the request's HEADERS came, without reading its
                           body: no RST_STREAM follows, and with window_updates False its
                           window stays shut (RFC 9113 §8.1 allows the answer; a server
                           that wants the rest of the body no more need not say so)
    head_first             HEADERS (:status 200) once the request's HEADERS came, then,
                           once its body ended, DATA with the body's length and END_STREAM
                           (a server that starts its answer before it reads the upload)
    goaway_in_flight       holds requests until `goaway_after` are open on the connection
                           (or 1 s after the first), then GOAWAY with last_stream_id the
                           lowest held stream, answers that stream normally and closes the
                           connection; the server is `normal` afterwards (one-shot)
    """

    def __init__(self):
        self.behaviour = "normal"
        self.settings = {}          # advertised in a SETTINGS frame of its own
        self.late_settings = 0.0    # seconds that frame waits, on every connection but the first
        self.window_updates = True  # False: never a WINDOW_UPDATE
        self.delay = 0.2
        self.goaway_after = 4
        self.lock = threading.Lock()
        self.requests = []          # one dict per request stream the server received
        self.connections = []       # one dict of figures per connection
        self.goaways = []           # (connection, last_stream_id, held stream ids)
        self.errors = []            # protocol errors the peer committed
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.url = "http://127.0.0.1:%d" % self.port
        self.closed = False
        self.threads = []
        threading.Thread(target=self._accept, daemon=True).start()

    # What tests read.

    def received(self, key=None):
        with self.lock:
            return [r for r in self.requests if key is None or r["key"] == key]

    def executions(self, key=None):
        """Requests the server processed (answered, well or badly): not those it refused
        or left unanswered beyond a GOAWAY's last_stream_id."""
        return [r for r in self.received(key) if r["processed"]]

    def connection(self, number):
        with self.lock:
            return dict(self.connections[number - 1])

    def close(self):
        self.closed = True
        self.listener.close()
        for t in self.threads:
            t.join(timeout=5)

    # The server.

    def _accept(self):
        while not self.closed:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                figures = {"number": len(self.connections) + 1, "max_open": 0,
                           "refused_before_ack": 0, "stream_violations": 0,
                           "flow_violations": 0, "acked": False}
                self.connections.append(figures)
            t = threading.Thread(target=_Connection(self, sock, figures).run, daemon=True)
            self.threads.append(t)
            t.start()


class _Connection:
    def __init__(self, server, sock, figures):
        self.server = server
        self.sock = sock
        self.figures = figures
        self.number = figures["number"]
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding="utf-8", validate_outbound_headers=False,
            normalize_outbound_headers=False, validate_inbound_headers=True))
        self.settings = dict(server.settings)  # fixed for the connection's life
        self.window_updates = server.window_updates
        self.acks = 0
        self.open = set()      # stream ids counted as open (not refused, not yet closed)
        self.streams = {}      # stream id -> request record
        self.held = []         # goaway_in_flight: request records waiting
        self.timers = []       # (when, action)
        self.done = False

    # Output: h2's pending bytes always go first, so raw frames stay in order.

    def flush(self):
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def raw(self, *frames):
        self.flush()
        self.sock.sendall(b"".join(f.serialize() for f in frames))

    def block(self, fields):
        """A header block from the connection's own encoder (its dynamic table)."""
        return self.h2.encoder.encode([(k.encode(), v.encode()) for k, v in fields])

    @property
    def acked(self):
        # h2's SETTINGS is acknowledged first, the server's own second (in order).
        return self.acks >= (2 if self.settings else 1)

    def run(self):
        try:
            self.h2.initiate_connection()
            self.flush()
            if self.settings:
                frame = hf.SettingsFrame(0, settings=self.settings)
                late = self.server.late_settings if self.number > 1 else 0.0
                if late > 0:
                    self.timers.append((time.monotonic() + late, lambda: self.raw(frame)))
                else:
                    self.raw(frame)
            while not self.done and not self.server.closed:
                now = time.monotonic()
                due = [t for t in self.timers if t[0] <= now]
                self.timers = [t for t in self.timers if t[0] > now]
                for _, action in due:
                    action()
                self.flush()
                if self.done:
                    break
                wait = min([t[0] for t in self.timers], default=now + 0.2) - now
                readable, _, _ = select.select([self.sock], [], [], max(0.0, min(wait, 0.2)))
                if not readable:
                    continue
                data = self.sock.recv(65536)
                if not data:
                    break
                try:
                    events = self.h2.receive_data(data)
                except h2.exceptions.ProtocolError as e:
                    with self.server.lock:
                        self.server.errors.append((self.number, repr(e)))
                    self.flush()  # h2's GOAWAY
                    break
                for event in events:
                    self.handle(event)
                    if self.done:
                        break
                self.flush()
        except OSError:
            pass
        except h2.exceptions.H2Error as e:  # the server's own state machine refused
            with self.server.lock:
                self.server.errors.append((self.number, repr(e)))
        finally:
            self.sock.close()

    def handle(self, event):
        if isinstance(event, h2.events.SettingsAcknowledged):
            self.acks += 1
            self.figures["acked"] = self.acked
        elif isinstance(event, h2.events.RequestReceived):
            self.on_request(event)
        elif isinstance(event, h2.events.DataReceived):
            self.on_data(event)
        elif isinstance(event, h2.events.StreamEnded):
            record = self.streams.get(event.stream_id)
            if record is not None and not record["refused"]:
                record["ended"] = True
                if not record["answered"]:
                    getattr(self, "b_" + self.server.behaviour)(record)
        elif isinstance(event, h2.events.StreamReset):
            self.open.discard(event.stream_id)
            if event.stream_id in self.streams:
                self.streams[event.stream_id]["reset_by_peer"] = event.error_code
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.done = True

    def on_request(self, event):
        fields = list(event.headers)
        head = dict(fields)
        record = {"method": head.get(":method"), "path": head.get(":path"),
                  "headers": fields, "key": head.get("idempotency-key"), "body": b"",
                  "connection": self.number, "stream": event.stream_id,
                  "after_ack": self.acked, "ended": False, "refused": False,
                  "processed": False, "answered": False, "reset_by_peer": None}
        with self.server.lock:
            self.server.requests.append(record)
        self.streams[event.stream_id] = record
        limit = self.settings.get(MAX_CONCURRENT_STREAMS)
        if limit is not None and len(self.open) >= limit:
            # RFC 9113 §5.1.2: a stream beyond the limit is PROTOCOL_ERROR or
            # REFUSED_STREAM; before the peer has the limit, only refused.
            if self.acked:
                self.figures["stream_violations"] += 1
                self.figures["max_open"] = max(self.figures["max_open"], len(self.open) + 1)
            else:
                self.figures["refused_before_ack"] += 1
            record["refused"] = True
            self.h2.reset_stream(event.stream_id, REFUSED_STREAM)
            return
        self.open.add(event.stream_id)
        if self.acked:
            self.figures["max_open"] = max(self.figures["max_open"], len(self.open))
        if self.server.behaviour == "answers_early":
            self.answer(record)
        elif self.server.behaviour == "head_first":
            record["processed"] = True
            self.h2.send_headers(event.stream_id, [(":status", "200"),
                                                   ("content-type", "application/json")])

    def on_data(self, event):
        record = self.streams.get(event.stream_id)
        if record is not None:
            record["body"] += event.data
        if (self.settings.get(INITIAL_WINDOW_SIZE) == 0 and not self.window_updates
                and self.acked and event.flow_controlled_length > 0):
            # The window is 0 and never opened: this DATA exceeds it (RFC 9113 §6.9.1).
            self.figures["flow_violations"] += 1
            self.h2.close_connection(error_code=FLOW_CONTROL_ERROR)
            self.done = True
            return
        if self.window_updates:
            try:
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            except h2.exceptions.StreamClosedError:
                pass

    # Answers.

    def body_for(self, record):
        return json.dumps({"key": record["key"], "path": record["path"],
                           "connection": self.number, "stream": record["stream"]}).encode()

    def closed_by_server(self, record):
        self.open.discard(record["stream"])

    def answer(self, record):
        if record["stream"] not in self.open:
            return  # the peer reset it meanwhile
        # Marked before a byte goes out, so a test that saw the answer sees the mark.
        record["processed"] = record["answered"] = True
        body = self.body_for(record)
        status = "201" if (record["path"] or "").startswith("/v1") else "200"
        self.h2.send_headers(record["stream"], [(":status", status),
                                                ("content-type", "application/json"),
                                                ("content-length", str(len(body)))])
        self.h2.send_data(record["stream"], body, end_stream=True)
        self.closed_by_server(record)

    def b_normal(self, record):
        self.answer(record)

    def b_head_first(self, record):
        record["answered"] = True
        body = json.dumps({"body_bytes": len(record["body"])}).encode()
        self.h2.send_data(record["stream"], body, end_stream=True)
        self.closed_by_server(record)

    def b_answers_early(self, record):
        self.answer(record)

    def b_slow(self, record):
        self.timers.append((time.monotonic() + self.server.delay, lambda: self.answer(record)))

    def b_reset_mid_answer(self, record):
        sid = record["stream"]
        record["processed"] = True
        self.h2.send_headers(sid, [(":status", "201"), ("content-type", "application/json"),
                                   ("content-length", "100")])
        self.h2.send_data(sid, b"x" * 10)

        def reset():
            if sid in self.open:
                self.h2.reset_stream(sid, INTERNAL_ERROR)
                self.closed_by_server(record)
        self.timers.append((time.monotonic() + 0.1, reset))

    def b_data_beyond_length(self, record):
        sid = record["stream"]
        record["processed"] = True
        self.h2.send_headers(sid, [(":status", "201"), ("content-type", "text/plain"),
                                   ("content-length", "5")])
        self.h2.send_data(sid, b"y" * 20, end_stream=True)
        self.closed_by_server(record)

    def b_headers_after_trailers(self, record):
        sid = record["stream"]
        record["processed"] = True
        self.h2.send_headers(sid, [(":status", "201"), ("content-type", "application/json")])
        self.h2.send_data(sid, b'{"partial":true}')
        self.raw(hf.HeadersFrame(sid, data=self.block([("x-trailer-one", "1")]),
                                 flags=["END_HEADERS"]),
                 hf.HeadersFrame(sid, data=self.block([("x-trailer-two", "2")]),
                                 flags=["END_HEADERS", "END_STREAM"]))
        self.closed_by_server(record)

    def b_pseudo_in_trailers(self, record):
        sid = record["stream"]
        record["processed"] = True
        self.h2.send_headers(sid, [(":status", "201"), ("content-type", "application/json")])
        self.h2.send_data(sid, b'{"partial":true}')
        self.h2.send_headers(sid, [(":status", "200"), ("x-trailer", "1")], end_stream=True)
        self.closed_by_server(record)

    def b_status_no_class(self, record):
        sid = record["stream"]
        record["processed"] = True
        # h2 refuses to send it: the block comes from the connection's own encoder.
        self.raw(hf.HeadersFrame(sid, data=self.block([(":status", "053"),
                                                       ("content-length", "5")]),
                                 flags=["END_HEADERS"]),
                 hf.DataFrame(sid, data=b"hello", flags=["END_STREAM"]))
        self.closed_by_server(record)

    def b_goaway_in_flight(self, record):
        self.held.append(record)
        if len(self.held) >= self.server.goaway_after:
            self.goaway()
        elif len(self.held) == 1:
            self.timers.append((time.monotonic() + 1.0, self.goaway))

    def goaway(self):
        if self.done or not self.held:
            return
        held = sorted(self.held, key=lambda r: r["stream"])
        last = held[0]
        with self.server.lock:
            self.server.goaways.append((self.number, last["stream"],
                                        [r["stream"] for r in held]))
            self.server.behaviour = "normal"  # one-shot: later connections are served
        # h2 does not know of this GOAWAY, so it still lets the server answer `last`.
        self.raw(hf.GoAwayFrame(0, last_stream_id=last["stream"], error_code=NO_ERROR))
        self.answer(last)
        self.flush()
        # Closes gracefully: the answer is delivered, then what the peer still sends is
        # read and dropped until it closes too (a close with unread input would be a
        # TCP reset, which may destroy the answer in flight).
        self.sock.shutdown(socket.SHUT_WR)
        self.sock.settimeout(2)
        try:
            while self.sock.recv(65536):
                pass
        except OSError:
            pass
        self.done = True

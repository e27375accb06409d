"""HTTP/2 clients for the tests, from python3-h2 (a real HTTP/2 implementation) and,
for hostile input, raw frames from hyperframe and hpack (its dependencies), which
let a test send what a conforming client never would."""
import socket
import ssl
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import hpack
from hyperframe import frame as hf

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class StreamResult:
    def __init__(self):
        self.status = None
        self.headers = []
        self.informational = []
        self.body = b""
        self.ended = False
        self.reset = None  # the RST_STREAM error code, when the server reset it
        self.head_ended = False  # the response HEADERS frame carried END_STREAM
        self.data_frames = 0
        self.trailers = None  # the trailing HEADERS frame's fields

    def header(self, name):
        for k, v in self.headers:
            if k == name.lower():
                return v
        return None

    @property
    def done(self):
        return self.ended or self.reset is not None


class Client:
    """One HTTP/2 connection (h2c, or h2 over TLS when `tls` is an SSLContext)."""

    def __init__(self, port, tls=None, timeout=15, settings=None):
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if tls is not None:
            tls.set_alpn_protocols(["h2"])
            sock = tls.wrap_socket(sock, server_hostname="localhost")
            assert sock.selected_alpn_protocol() == "h2", sock.selected_alpn_protocol()
        self.sock = sock
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.streams = {}
        self.terminated = None  # the ConnectionTerminated event (GOAWAY)
        self.eof = False
        self.flush()

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, method, path, body=b"", headers=(), end=True, authority="127.0.0.1"):
        sid = self.conn.get_next_available_stream_id()
        fields = [(":method", method), (":path", path), (":scheme", "http"),
                  (":authority", authority)]
        fields += list(headers)
        if body and not any(k == "content-length" for k, _ in headers):
            fields.append(("content-length", str(len(body))))
        self.streams[sid] = StreamResult()
        self.conn.send_headers(sid, fields, end_stream=(not body and end))
        self.flush()
        if body:
            self.send_body(sid, body, end)
        return sid

    def send_body(self, sid, body, end=True):
        """Sends as the flow-control windows allow, reading the server meanwhile."""
        at = 0
        while at < len(body) or (end and at == len(body) and body):
            room = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if room == 0:
                self.pump(lambda: self.conn.local_flow_control_window(sid) > 0
                          or self.streams[sid].done, timeout=10)
                if self.streams[sid].done:
                    return
                continue
            piece = body[at:at + room]
            at += len(piece)
            self.conn.send_data(sid, piece, end_stream=(end and at == len(body)))
            self.flush()
            if at == len(body):
                return

    def _handle(self, event):
        if isinstance(event, h2.events.ResponseReceived):
            r = self.streams.setdefault(event.stream_id, StreamResult())
            r.headers = list(event.headers)
            r.status = int(r.header(":status"))
            r.head_ended = event.stream_ended is not None
        elif isinstance(event, h2.events.TrailersReceived):
            self.streams[event.stream_id].trailers = list(event.headers)
        elif isinstance(event, h2.events.InformationalResponseReceived):
            self.streams[event.stream_id].informational.append(dict(event.headers)[":status"])
        elif isinstance(event, h2.events.DataReceived):
            self.streams[event.stream_id].body += event.data
            self.streams[event.stream_id].data_frames += 1
            try:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            except h2.exceptions.StreamClosedError:
                pass
        elif isinstance(event, h2.events.StreamEnded):
            self.streams[event.stream_id].ended = True
        elif isinstance(event, h2.events.StreamReset):
            self.streams.setdefault(event.stream_id, StreamResult()).reset = event.error_code
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.terminated = event

    def pump(self, until, timeout=15):
        deadline = time.monotonic() + timeout
        while not until():
            if self.eof or time.monotonic() > deadline:
                return False
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return False
            except (ConnectionResetError, ssl.SSLError):
                self.eof = True
                return False
            if not data:
                self.eof = True
                return until()
            for event in self.conn.receive_data(data):
                self._handle(event)
            self.flush()
        return True

    def wait(self, *sids, timeout=15):
        assert self.pump(lambda: all(self.streams[s].done for s in sids), timeout), \
            {s: vars(self.streams[s]) for s in sids if not self.streams[s].done}
        return [self.streams[s] for s in sids]

    def close(self):
        try:
            self.conn.close_connection()
            self.flush()
        except Exception:
            pass
        self.sock.close()


class RawClient:
    """Writes frames as given, with no state machine to stop a hostile sequence."""

    def __init__(self, port, timeout=10, rcvbuf=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:  # a slow reader: the proxy's answers back up sooner
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.sock.sendall(PREFACE + hf.SettingsFrame(0).serialize())
        self.buffer = b""
        self.frames = []
        self.statuses = {}  # stream id -> the :status of its first HEADERS
        self.eof = False

    def send(self, *frames):
        try:
            self.sock.sendall(b"".join(f.serialize() for f in frames))
            return True
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            return False

    def block(self, fields):
        return self.encoder.encode(fields)

    def headers(self, sid, fields, end_stream=True, end_headers=True):
        flags = (["END_STREAM"] if end_stream else []) + (["END_HEADERS"] if end_headers else [])
        return hf.HeadersFrame(sid, data=self.block(fields), flags=flags)

    def header_block(self, sid, fields, end_stream=True, size=16384):
        """HEADERS and as many CONTINUATION frames as the block needs at `size` bytes each."""
        block = self.block(fields)
        pieces = [block[i:i + size] for i in range(0, len(block), size)] or [b""]
        first = ["END_STREAM"] if end_stream else []
        frames = [hf.HeadersFrame(sid, data=pieces[0],
                                  flags=first + (["END_HEADERS"] if len(pieces) == 1 else []))]
        for i, piece in enumerate(pieces[1:], start=2):
            frames.append(hf.ContinuationFrame(
                sid, data=piece, flags=["END_HEADERS"] if i == len(pieces) else []))
        return frames

    def read_frames(self, timeout=5, until=None):
        """Reads frames until the connection closes, `until(frames)` holds, or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if until is not None and until(self.frames):
                break
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                self.eof = True
                break
            if not data:
                self.eof = True
                break
            self.buffer += data
            while len(self.buffer) >= 9:
                f, length = hf.Frame.parse_frame_header(memoryview(self.buffer[:9]))
                if len(self.buffer) < 9 + length:
                    break
                f.parse_body(memoryview(self.buffer[9:9 + length]))
                self.buffer = self.buffer[9 + length:]
                self.frames.append(f)
                if isinstance(f, hf.HeadersFrame):
                    fields = dict(self.decoder.decode(bytes(f.data), raw=True))
                    self.statuses.setdefault(f.stream_id, int(fields[b":status"]))
                if isinstance(f, hf.SettingsFrame) and "ACK" not in f.flags:
                    self.send(hf.SettingsFrame(0, flags=["ACK"]))
        return self.frames

    def goaway(self):
        for f in self.frames:
            if isinstance(f, hf.GoAwayFrame):
                return f
        return None

    def resets(self):
        return {f.stream_id: f.error_code for f in self.frames if isinstance(f, hf.RstStreamFrame)}

    def close(self):
        self.sock.close()


# RFC 9113 §7 error codes.
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
REFUSED_STREAM, CANCEL, ENHANCE_YOUR_CALM = 0x7, 0x8, 0xB

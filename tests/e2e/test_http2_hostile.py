"""Hostile HTTP/2 input, written frame by frame with hyperframe and hpack (python3-h2's
own layers): each attack gets a clear error on its stream or connection, never a
crash, and never a stall of other clients. The ASan stage runs these too."""
import socket
import time
import uuid

from hyperframe import frame as hf

from h2_peer import (CANCEL, ENHANCE_YOUR_CALM, NO_ERROR, PROTOCOL_ERROR, REFUSED_STREAM,
                     Client, RawClient)

GET_OTHER = [(":method", "GET"), (":path", "/other"), (":scheme", "http"),
             (":authority", "127.0.0.1")]


def post_fields(key, extra=()):
    return [(":method", "POST"), (":path", "/v1/orders"), (":scheme", "http"),
            (":authority", "127.0.0.1"), ("idempotency-key", key)] + list(extra)


def others_are_served(proxy, within=5.0):
    """A fresh client, on its own connection, gets its answer in time."""
    started = time.monotonic()
    c = Client(proxy.port, timeout=within)
    key = "bystander-" + uuid.uuid4().hex
    r = c.wait(c.request("POST", "/v1/orders", b"{}", [("idempotency-key", key)]),
               timeout=within)[0]
    c.close()
    assert r.status == 201 and time.monotonic() - started < within
    return True


def alive(proxy):
    assert proxy.proc.poll() is None, proxy.read_log()[-3000:]


def test_rapid_reset_is_cut_off_and_runs_nothing(proxy, upstream):
    # CVE-2023-44487: open and cancel streams as fast as the socket takes them.
    before = upstream.executions.count()
    c = RawClient(proxy.port)
    key = "reset-" + uuid.uuid4().hex
    sent = 0
    for batch in range(40):
        frames = []
        for i in range(100):
            sid = 1 + 2 * (batch * 100 + i)
            frames += [c.headers(sid, post_fields(key), end_stream=False),
                       hf.RstStreamFrame(sid, error_code=CANCEL)]
        if not c.send(*frames):
            break
        sent += 100
    c.read_frames(timeout=5, until=lambda _: c.goaway() is not None)
    goaway = c.goaway()
    # nghttp2's reset rate limit (a burst of 1000, then 33 a second) ends the
    # connection (its GOAWAY says INTERNAL_ERROR).
    assert goaway is not None and goaway.error_code != NO_ERROR, (sent, c.frames[-5:])
    c.close()
    alive(proxy)
    # Streams reset before they were served run nothing upstream.
    assert upstream.executions.count(key=key) <= 1
    assert others_are_served(proxy)
    assert upstream.executions.count() - before <= 2


def test_continuation_flood_is_refused(proxy, upstream):
    # CVE-2024-27316 class: one header block in endless CONTINUATION frames.
    c = RawClient(proxy.port)
    first = hf.HeadersFrame(1, data=c.block(GET_OTHER), flags=["END_STREAM"])
    frames = [first]
    for i in range(5000):
        frames.append(hf.ContinuationFrame(1, data=c.block([("x-flood-%d" % i, "v" * 100)])))
    c.send(*frames[:200])
    c.send(*frames[200:])
    c.read_frames(timeout=5, until=lambda _: c.goaway() is not None)
    goaway = c.goaway()
    assert goaway is not None and goaway.error_code != NO_ERROR
    c.close()
    alive(proxy)
    assert others_are_served(proxy)


def test_oversized_header_lists_get_431_on_their_stream(make_proxy, upstream):
    p = make_proxy(server={"max_header_size": "8KiB", "max_header_fields": 50})
    c = RawClient(p.port)
    big = c.header_block(1, GET_OTHER + [("x-big-%d" % i, "v" * 500) for i in range(40)])
    many = c.header_block(3, GET_OTHER + [("x-n-%d" % i, "v") for i in range(80)])
    fine = c.header_block(5, GET_OTHER)
    assert len(big) == 2  # a HEADERS and a CONTINUATION
    c.send(*big, *many, *fine)
    c.read_frames(until=lambda _: len(c.statuses) == 3)
    assert c.statuses == {1: 431, 3: 431, 5: 201}
    c.close()
    alive(p)


def test_hpack_bomb_gets_431_and_costs_nothing_more(make_proxy, upstream):
    # One 4 KiB field enters the HPACK table, then each 1-byte reference to it expands
    # to 4 KiB: a few KiB on the wire become megabytes of header list.
    p = make_proxy(server={"max_header_size": "16KiB"})
    c = RawClient(p.port)
    bomb = GET_OTHER + [("x-bomb", "b" * 4000)] * 2000
    frame = c.headers(1, bomb)
    assert len(frame.data) < 4 * 4096  # it fits in a frame or two on the wire
    c.send(frame, c.headers(3, GET_OTHER))
    c.read_frames(until=lambda _: len(c.statuses) == 2 or c.goaway() is not None)
    assert c.statuses.get(1) == 431 and c.statuses.get(3) == 201, (c.statuses, c.goaway())
    c.close()
    alive(p)
    assert others_are_served(p)


def test_settings_and_ping_floods_end_the_connection(proxy, upstream):
    floods = 0
    for flood in (lambda: hf.SettingsFrame(0, settings={hf.SettingsFrame.INITIAL_WINDOW_SIZE:
                                                        65535}),
                  lambda: hf.PingFrame(0, opaque_data=b"12345678")):
        # A client that sends without reading: the ACKs pile up in the proxy, and
        # nghttp2 stops at 1000 queued (max_outbound_ack). Until the kernel's buffers
        # are full (the proxy's send buffer grows to 4 MiB on loopback), the ACKs go
        # out and nothing piles up, so the flood sends 32 MiB: 3.4 MiB once passed
        # into the kernel whole, under ASan beside three other workers.
        c = RawClient(proxy.port, timeout=3, rcvbuf=4096)
        batch = b"".join(flood().serialize() for _ in range(2000))
        for _ in range(32 * 1024 * 1024 // len(batch)):
            try:
                c.sock.sendall(batch)
            except (BrokenPipeError, ConnectionResetError, socket.timeout):
                break
        c.read_frames(timeout=15, until=lambda _: c.goaway() is not None)
        assert c.goaway() is not None and c.goaway().error_code == ENHANCE_YOUR_CALM, \
            (c.eof, c.frames[-3:])
        c.close()
        floods += 1
        # Operators see each in /metrics.
        assert proxy.metric("idemproxy_http2_goaway_errors_total",
                            code="ENHANCE_YOUR_CALM") == floods
        alive(proxy)
        assert others_are_served(proxy)


def test_window_update_flood_and_overflow(proxy, upstream):
    # Envoy's limit (protocol_constraints.cc): at most 1 + 2 * (streams + 10 * DATA
    # frames sent) WINDOW_UPDATE frames. 20,000 with nothing sent is a flood.
    c = RawClient(proxy.port)
    c.send(*[hf.WindowUpdateFrame(0, window_increment=1) for _ in range(20000)])
    c.read_frames(timeout=5, until=lambda _: c.goaway() is not None)
    assert c.goaway() is not None and c.goaway().error_code == ENHANCE_YOUR_CALM
    c.close()
    # RFC 9113 §6.9.1: a window past 2^31-1 is a connection error FLOW_CONTROL_ERROR.
    c = RawClient(proxy.port)
    c.send(hf.WindowUpdateFrame(0, window_increment=2 ** 31 - 1))
    c.read_frames(timeout=5, until=lambda _: c.goaway() is not None)
    assert c.goaway() is not None and c.goaway().error_code == 0x3
    c.close()
    alive(proxy)
    assert others_are_served(proxy)


def test_a_zero_window_reader_stalls_nobody_else(make_proxy, upstream):
    # A client that opens no window for answers (SETTINGS_INITIAL_WINDOW_SIZE 0) and
    # asks for a large one: its stream waits; other streams and clients do not. After
    # server.read_timeout without progress the stream is reset (CANCEL).
    proxy = make_proxy(server={"read_timeout": "2s"})
    slow = Client(proxy.port, settings={hf.SettingsFrame.INITIAL_WINDOW_SIZE: 0})
    stuck = slow.request("GET", "/big?bytes=4000000")
    slow.pump(lambda: slow.streams[stuck].status is not None, timeout=5)
    assert slow.streams[stuck].status == 200 and slow.streams[stuck].body == b""
    assert others_are_served(proxy)
    c = Client(proxy.port)
    assert c.wait(c.request("GET", "/other"))[0].status == 201
    c.close()
    started = time.monotonic()
    assert slow.pump(lambda: slow.streams[stuck].reset is not None, timeout=10)
    assert slow.streams[stuck].reset == CANCEL and time.monotonic() - started < 8
    slow.close()
    alive(proxy)


def test_small_answers_handed_over_past_the_connection_window_are_reset_in_time(make_proxy):
    # A small last piece is copied and handed to the session without waiting for its
    # write, when the windows take it (Stream::send_last_now). Five replays of 15,000
    # bytes started in one read each find the connection's first window (65,535)
    # whole, and together pass it: the first four arrive whole, and the fifth, which a
    # client that opens no window holds back, is reset (CANCEL) after
    # server.read_timeout, as an answer that waits for its write is.
    proxy = make_proxy(server={"read_timeout": "1s"})
    key = "handed-" + uuid.uuid4().hex
    path = "/v1/big?bytes=15000"
    assert proxy.post(path, "{}", key=key).status == 200
    c = RawClient(proxy.port)
    c.read_frames(timeout=2, until=lambda f: any(isinstance(x, hf.SettingsFrame) for x in f))
    time.sleep(0.2)  # our ACK of the server's SETTINGS arrives first
    fields = [(":method", "POST"), (":path", path), (":scheme", "http"),
              (":authority", "127.0.0.1"), ("idempotency-key", key),
              ("content-type", "application/json"), ("content-length", "2")]
    frames = []
    for sid in (1, 3, 5, 7, 9):
        frames += [c.headers(sid, fields, end_stream=False),
                   hf.DataFrame(sid, data=b"{}", flags=["END_STREAM"])]
    started = time.monotonic()
    c.send(*frames)  # one write: the proxy reads them in one turn
    c.read_frames(timeout=8, until=lambda _: 9 in c.resets())
    assert c.resets() == {9: CANCEL}, (c.resets(), c.goaway())
    assert time.monotonic() - started < 6
    data = {}
    for f in c.frames:
        if isinstance(f, hf.DataFrame):
            data[f.stream_id] = data.get(f.stream_id, 0) + len(f.data)
    assert [data.get(sid) for sid in (1, 3, 5, 7)] == [15000] * 4
    assert 0 < data.get(9, 0) < 15000
    assert all(c.statuses[sid] == 200 for sid in (1, 3, 5, 7, 9))
    c.close()
    alive(proxy)
    assert others_are_served(proxy)


def test_more_streams_than_max_concurrent_streams_are_refused(proxy, upstream):
    c = RawClient(proxy.port)
    c.read_frames(timeout=2, until=lambda f: any(isinstance(x, hf.SettingsFrame) for x in f))
    settings = next(f for f in c.frames if isinstance(f, hf.SettingsFrame))
    limit = settings.settings[hf.SettingsFrame.MAX_CONCURRENT_STREAMS]
    assert limit == 128
    time.sleep(0.2)  # our ACK of the server's SETTINGS arrives first
    # Streams left open (no END_STREAM), on a route that answers them without a body.
    frames = [c.headers(1 + 2 * i, [(":method", "GET"), (":path", "/v1/orders?delay_ms=1000"),
                                    (":scheme", "http"), (":authority", "127.0.0.1"),
                                    ("idempotency-key", "k-%d" % i)], end_stream=False)
              for i in range(limit + 20)]
    c.send(*frames)
    c.read_frames(timeout=5, until=lambda _: c.goaway() is not None or len(c.resets()) >= 20)
    # RFC 9113 §5.1.2: a stream error (REFUSED_STREAM) or, as nghttp2 chooses, a
    # connection error PROTOCOL_ERROR whose GOAWAY shows no stream past the limit was
    # processed.
    goaway = c.goaway()
    if goaway is not None:
        assert goaway.error_code == PROTOCOL_ERROR
        assert goaway.last_stream_id == 2 * limit - 1
        assert proxy.metric("idemproxy_http2_goaway_errors_total", code="PROTOCOL_ERROR") == 1
    else:
        refused = {sid for sid, code in c.resets().items() if code == REFUSED_STREAM}
        assert refused and min(refused) > 2 * limit - 1
    c.close()
    alive(proxy)
    assert others_are_served(proxy)


def test_streams_past_max_connections_are_refused_unprocessed(make_proxy, upstream):
    # Each open stream beyond a connection's first may hold an upstream connection,
    # so it takes a slot of server.max_connections: with 3, one connection serves 3
    # streams at once at most (itself and two slots; fewer when another connection is
    # open) and refuses the rest with REFUSED_STREAM (RFC 9113 §8.7: never processed,
    # the client may send them again).
    p = make_proxy(server={"max_connections": 3})
    c = RawClient(p.port)
    c.read_frames(timeout=2, until=lambda f: any(isinstance(x, hf.SettingsFrame) for x in f))
    time.sleep(0.2)  # our ACK of the server's SETTINGS arrives first
    keys = ["slot-%d-%s" % (i, uuid.uuid4().hex) for i in range(5)]
    c.send(*[c.headers(1 + 2 * i, [(":method", "POST"), (":path", "/v1/orders?delay_ms=800"),
                                   (":scheme", "http"), (":authority", "127.0.0.1"),
                                   ("idempotency-key", k), ("content-length", "0")],
                       end_stream=True)
             for i, k in enumerate(keys)])
    c.read_frames(timeout=5, until=lambda _: len(c.statuses) + len(c.resets()) >= 5)
    served = {sid for sid, status in c.statuses.items() if status == 201}
    refused = {sid for sid, code in c.resets().items() if code == REFUSED_STREAM}
    # The first streams are served; at most 3 at once; the others refused, whole.
    assert {1, 3} <= served and len(served) <= 3 and served | refused == {1, 3, 5, 7, 9}
    assert {7, 9} <= refused and not served & refused
    assert [upstream.executions.count(key=k) for k in keys] == \
        [1 if 1 + 2 * i in served else 0 for i in range(5)]
    c.close()
    alive(p)


def test_data_beyond_content_length_is_a_stream_error(proxy, upstream):
    c = RawClient(proxy.port)
    key = "cl-" + uuid.uuid4().hex
    c.send(c.headers(1, post_fields(key, [("content-length", "5")]), end_stream=False),
           hf.DataFrame(1, data=b"0123456789", flags=["END_STREAM"]),
           c.headers(3, GET_OTHER))
    c.read_frames(until=lambda _: 1 in c.resets() and 3 in c.statuses)
    # RFC 9113 §8.1.1: a malformed request, a stream error of type PROTOCOL_ERROR.
    assert c.resets()[1] == PROTOCOL_ERROR and c.statuses[3] == 201
    c.close()
    time.sleep(0.3)
    assert upstream.executions.count(key=key) == 0
    alive(proxy)


def test_garbage_after_the_preface_gets_goaway(proxy, upstream):
    c = RawClient(proxy.port)
    c.sock.sendall(b"\x00\x00\x04\xff\x00\x00\x00\x00\x00junk" + b"\xff" * 64)
    c.read_frames(timeout=3, until=lambda _: c.goaway() is not None)
    c.close()
    alive(proxy)
    assert others_are_served(proxy)


def test_a_client_still_sending_after_the_goaway_can_read_it(proxy, upstream):
    # A lingering close, as nginx's: after its GOAWAY the proxy reads and drops what the
    # client sends until 2 s pass with nothing read. Closing with unread bytes sends a
    # reset, which can destroy the GOAWAY before the client reads it; the proxy once
    # closed 2 s after the GOAWAY whatever the client did.
    c = RawClient(proxy.port, timeout=5)
    c.sock.sendall(b"\x00\x00\x04\x06\x00\x00\x00\x00\x00abcd")  # a PING of 4 bytes
    ping = hf.PingFrame(0, opaque_data=b"12345678").serialize()
    started = time.monotonic()
    while time.monotonic() - started < 3.5:  # past the old 2 s, never 2 s quiet
        c.sock.sendall(ping)  # raises once the proxy has closed (a reset comes back)
        time.sleep(0.2)
    c.read_frames(timeout=5, until=lambda _: c.goaway() is not None)
    assert c.goaway() is not None and c.goaway().error_code != NO_ERROR, (c.eof, c.frames[-3:])
    # Its send side was shut after the GOAWAY: an end of stream, never a reset.
    c.read_frames(timeout=5)
    assert c.eof
    c.close()
    alive(proxy)


# Envoy's protocol constraints (source/common/http/http2/protocol_constraints.cc), each
# passed by a peer writing frames as it likes: the connection ends with
# ENHANCE_YOUR_CALM, nothing runs, and other clients are served.

def test_frames_with_empty_payloads_back_to_back_are_a_flood(proxy, upstream):
    c = RawClient(proxy.port)
    key = "empty-" + uuid.uuid4().hex
    c.send(c.headers(1, post_fields(key), end_stream=False),
           *[hf.DataFrame(1, data=b"") for _ in range(3)])
    c.read_frames(timeout=5, until=lambda _: c.goaway() is not None)
    assert c.goaway() is not None and c.goaway().error_code == ENHANCE_YOUR_CALM
    c.close()
    assert upstream.executions.count(key=key) == 0
    alive(proxy)
    assert others_are_served(proxy)


def test_more_than_100_priority_frames_per_stream_are_a_flood(proxy, upstream):
    c = RawClient(proxy.port)
    c.send(*[hf.PriorityFrame(2 * i + 1, depends_on=0, stream_weight=16) for i in range(150)])
    c.read_frames(timeout=5, until=lambda _: c.goaway() is not None)
    assert c.goaway() is not None and c.goaway().error_code == ENHANCE_YOUR_CALM
    c.close()
    alive(proxy)
    assert others_are_served(proxy)


def test_a_peer_that_reads_nothing_cannot_queue_unbounded_control_frames(proxy, upstream):
    # Each HEADERS carries a field HTTP/2 forbids (RFC 9113 §8.2.2), so each draws a
    # RST_STREAM; the client never reads, and the frames pile up for it. Past 1,000
    # queued the connection ends instead of holding more.
    c = RawClient(proxy.port, rcvbuf=4096)
    sent = 0
    for batch in range(30):
        frames = [c.headers(1 + 2 * (batch * 100 + i),
                            GET_OTHER + [("connection", "keep-alive")]) for i in range(100)]
        if not c.send(*frames):
            break
        sent += 100
    c.read_frames(timeout=10, until=lambda _: c.goaway() is not None or c.eof)
    assert c.goaway() is None or c.goaway().error_code != NO_ERROR, sent
    c.close()
    alive(proxy)
    assert others_are_served(proxy)


# RFC 9113 §8.3.1 and §8.1.1, before any phase, against python3-h2's frames: each was a
# way past the proxy when a stream was bridged into HTTP/1.1 text.

def test_an_absolute_path_never_overrides_the_authority(proxy, upstream):
    before = upstream.executions.count()
    for path in ("http://evil.example/v1/orders", "http://evil.example/pt/x"):
        key = "abs-" + uuid.uuid4().hex
        c = RawClient(proxy.port)
        fields = [(":method", "POST"), (":path", path), (":scheme", "foo"),
                  (":authority", "127.0.0.1"), ("idempotency-key", key),
                  ("content-type", "application/json")]
        c.send(c.headers(1, fields, end_stream=False), hf.DataFrame(1, data=b"{}",
                                                                    flags=["END_STREAM"]))
        c.read_frames(timeout=5, until=lambda _: 1 in c.statuses or 1 in c.resets())
        assert c.statuses.get(1) == 400 or 1 in c.resets(), path
        c.close()
        assert upstream.executions.count(key=key) == 0
    assert upstream.executions.count() == before  # nothing reached it, under any Host
    alive(proxy)


def test_a_body_past_its_content_length_is_never_executed_nor_stored(proxy, upstream):
    key = "cl-" + uuid.uuid4().hex
    c = RawClient(proxy.port)
    fields = post_fields(key, [("content-type", "application/json"), ("content-length", "7")])
    c.send(c.headers(1, fields, end_stream=False), hf.DataFrame(1, data=b'{"a":1}'))
    time.sleep(0.3)  # the first 7 bytes are all the declared length
    c.send(hf.DataFrame(1, data=b" " * 52, flags=["END_STREAM"]))
    c.read_frames(timeout=5, until=lambda _: 1 in c.resets())
    assert c.resets().get(1) == PROTOCOL_ERROR and 1 not in c.statuses
    c.close()
    assert upstream.executions.count(key=key) == 0
    # Nothing was stored: the key executes when its request comes whole.
    again = Client(proxy.port)
    r = again.wait(again.request("POST", "/v1/orders", b'{"a":1}', [("idempotency-key", key)]))[0]
    again.close()
    assert r.status == 201 and r.header("idempotent-replayed") is None
    assert upstream.executions.count(key=key) == 1

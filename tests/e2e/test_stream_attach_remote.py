"""A concurrent retry on another instance follows a streamed answer live (issue 44):
two instances, A and B, on one PostgreSQL database and in front of one upstream. A
client streams an answer through A; a retry with its key on B (on_concurrent: wait)
gets the same head, replayed, and reads the chunks A has stored so far from the
store, then each new piece as A stores it, woken by LISTEN/NOTIFY, not at the end.
The upstream executes once; a stream the upstream cuts ends as an error on B too;
with on_concurrent: reject, B answers 409 request-in-flight as before. Retries on
the same instance attach in memory (test_streaming.py)."""
import re
import socket
import threading
import time

from harness import SHORT_STATEMENTS, big_body, problem
from test_streaming import curl_first_then_http2, events_of, events_of_partial

EVENTS = "/v1/events?n=8&gap_ms=300"  # eight events over 2.1 s
WAITING = [{"name": "orders", "path_prefix": "/v1", "key_required": True,
            "on_concurrent": "wait"}]
REJECTING = [{"name": "orders", "path_prefix": "/v1", "key_required": True,
              "on_concurrent": "reject"}]


def read_timed(port, path, key):
    """POSTs over a raw HTTP/1.1 socket; returns (head, [(time.monotonic(), bytes)...],
    ended): when each read of the body came, on one clock for both instances, and
    whether the body ended whole (its last chunk, or its Content-Length, came). A
    replay from the store may carry a length, a stream followed live cannot."""
    s = socket.create_connection(("127.0.0.1", port), timeout=15)
    s.sendall(("POST %s HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\nContent-Type: "
               "application/json\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
               % (path, key)).encode())
    data = b""
    while b"\r\n\r\n" not in data:
        piece = s.recv(65536)
        if not piece:
            s.close()
            return data.decode(errors="replace"), [], False
        data += piece
    head, body = data.split(b"\r\n\r\n", 1)
    head = head.decode()
    length = re.search(r"(?im)^content-length: *(\d+)", head)

    def whole():
        return len(body) >= int(length.group(1)) if length else body.endswith(b"0\r\n\r\n")

    reads = [(time.monotonic(), body)] if body else []
    while not whole():
        try:
            piece = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            piece = b""
        if not piece:
            break
        reads.append((time.monotonic(), piece))
        body += piece
    s.close()
    return head, reads, whole()


def payload(head, reads, cut=False):
    """The body's bytes, out of its chunks when it was chunked."""
    body = b"".join(piece for _, piece in reads)
    if "transfer-encoding: chunked" not in head.lower():
        return body
    return events_of_partial(body) if cut else events_of(body)


def on_a_then_b(a, b, path, key, delay):
    """read_timed() on A, and `delay` seconds later with the same key on B; returns
    both results."""
    results = [None, None]

    def run(i, p, pause):
        time.sleep(pause)
        results[i] = read_timed(p.port, path, key)

    threads = [threading.Thread(target=run, args=(0, a, 0)),
               threading.Thread(target=run, args=(1, b, delay))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def received_by(reads, when):
    """How many bytes of the body had come by `when`."""
    return sum(len(piece) for at, piece in reads if at <= when)


def two_instances(make_proxy, routes):
    return make_proxy(routes=routes), make_proxy(routes=routes)


def test_a_retry_on_another_instance_attaches_to_the_stream_and_sees_each_event_live(
        make_proxy, upstream, key):
    a, b = two_instances(make_proxy, WAITING)
    (head, reads, ended), (b_head, b_reads, b_ended) = on_a_then_b(a, b, EVENTS, key, 0.4)
    assert ended and b_ended, (head, b_head)
    assert head.startswith("HTTP/1.1 200") and "Idempotent-Replayed" not in head
    assert b_head.startswith("HTTP/1.1 200"), b_head
    assert "Idempotent-Replayed: true" in b_head and "text/event-stream" in b_head
    original = payload(head, reads)
    assert original.count(b"data: token") == 8
    assert payload(b_head, b_reads) == original
    # B's client, 0.4 s into a 2.1 s stream, has its first bytes long before the end,
    # and the rest in separate reads as they are sent, not all at once at the end.
    end = reads[-1][0]
    assert end - b_reads[0][0] > 0.7, "B's first read came %.2f s before the end" % (
        end - b_reads[0][0])
    assert b_reads[-1][0] - b_reads[0][0] > 0.7, [round(at - end, 2) for at, _ in b_reads]
    assert len(b_reads) >= 4, len(b_reads)
    assert upstream.executions.count(key=key) == 1
    assert b.wait_metric("idemproxy_attached_total", 1) == 1
    again = b.post(EVENTS, "{}", key=key)
    assert again.status == 200 and again.header("Idempotent-Replayed") == "true"
    assert again.body == original


def test_curl_over_http2_on_another_instance_sees_the_events_as_they_come(
        make_proxy, upstream, key):
    a, b = two_instances(make_proxy, WAITING)
    first_lines, attached = curl_first_then_http2(a.port, b.port, EVENTS, key)
    data = [(at, line) for at, line in attached if line.startswith(b"data: ")]
    assert len(data) == 8
    # The stream ends about 1.7 s after this curl started: its first events come at
    # once, the rest spread out as they are sent.
    assert data[0][0] < 1.0 and data[-1][0] - data[0][0] > 0.7, data
    assert [line for _, line in attached] == [line for _, line in first_lines]
    assert upstream.executions.count(key=key) == 1
    assert b.wait_metric("idemproxy_attached_total", 1) == 1


def test_a_retry_on_another_instance_reads_the_stored_chunks_of_a_large_stream_then_the_rest(
        make_proxy, upstream, pg, key):
    """2 MiB paced 80 ms every 64 KiB (2.6 s, eight 256 KiB chunks); B's retry 0.9 s in
    gets the two chunks already stored at once, then the rest as it is stored: byte
    for byte what the upstream sent."""
    a, b = two_instances(make_proxy, WAITING)
    size = 2 << 20
    path = "/v1/big?bytes=%d&chunked=1&gap_ms=80" % size
    (head, reads, ended), (b_head, b_reads, b_ended) = on_a_then_b(a, b, path, key, 0.9)
    assert ended and b_ended, (head, b_head)
    assert "Idempotent-Replayed: true" in b_head
    body = payload(head, reads)
    assert body == big_body(key, 1, size)
    assert payload(b_head, b_reads) == body
    end = reads[-1][0]
    assert received_by(b_reads, end - 0.6) >= 512 << 10, (
        "B's client had %d bytes 0.6 s before the end" % received_by(b_reads, end - 0.6))
    assert b_reads[-1][0] - b_reads[0][0] > 0.6, [round(at - end, 2) for at, _ in b_reads]
    assert pg.sql("SELECT chunks, body_length FROM idempotency_records WHERE key = '%s'"
                  % key) == "8|%d" % size
    assert upstream.executions.count(key=key) == 1
    assert b.wait_metric("idemproxy_attached_total", 1) == 1


def test_a_stream_cut_by_the_upstream_ends_as_an_error_on_the_other_instance_too(
        make_proxy, upstream, key):
    # As test_streaming's cut stream, paced so B attaches before the cut (at 0.9 s).
    a, b = two_instances(make_proxy, WAITING)
    path = "/v1/events?n=6&gap_ms=300&cut=4"
    (head, reads, ended), (b_head, b_reads, b_ended) = on_a_then_b(a, b, path, key, 0.4)
    assert head.startswith("HTTP/1.1 200") and not ended
    original = payload(head, reads, cut=True)
    assert original.count(b"data: token") == 4
    # B's client gets the head and the events it could, then the connection closes
    # without the last chunk: never a clean end.
    assert b_head.startswith("HTTP/1.1 200"), (b_head, payload(b_head, b_reads))
    assert "Idempotent-Replayed: true" in b_head
    assert not b_ended
    followed = payload(b_head, b_reads, cut=True)
    assert original.startswith(followed) and followed.count(b"data: token") >= 2, followed
    for p in (b, a):
        retry = p.post(path, "{}", key=key)
        assert retry.status == 409 and problem(retry)["type"].endswith("/outcome-indeterminate")
    assert upstream.executions.count(key=key) == 1


def test_with_reject_a_retry_on_another_instance_is_told_the_stream_is_in_flight(
        make_proxy, upstream, key):
    a, b = two_instances(make_proxy, REJECTING)
    first = {}
    t = threading.Thread(target=lambda: first.update(result=read_timed(a.port, EVENTS, key)))
    t.start()
    time.sleep(0.4)
    busy = b.post(EVENTS, "{}", key=key)
    t.join(timeout=30)
    assert busy.status == 409 and problem(busy)["type"].endswith("/request-in-flight")
    assert busy.header("Retry-After")
    head, reads, ended = first["result"]
    assert head.startswith("HTTP/1.1 200") and ended
    original = payload(head, reads)
    assert original.count(b"data: token") == 8
    # Once it has ended, B replays it.
    again = b.post(EVENTS, "{}", key=key)
    assert again.status == 200 and again.header("Idempotent-Replayed") == "true"
    assert again.body == original
    assert upstream.executions.count(key=key) == 1
    assert b.metric("idemproxy_attached_total") == 0


def test_a_follower_whose_holder_is_killed_ends_short_once_the_lease_runs_out(
        make_proxy, upstream, key):
    """A streams with a 2 s lease and is killed with kill -9 mid-stream: B's follower,
    which hears nothing more, looks at the record when the lease would have run out,
    sees it was not renewed, and ends short, long before its patience (read_timeout
    plus the lease, 32 s) would."""
    routes = [dict(WAITING[0], lease="2s")]
    a, b = (make_proxy(routes=routes, store=SHORT_STATEMENTS) for _ in range(2))
    path = "/v1/events?n=20&gap_ms=300"  # six seconds of events
    result = {}
    t = threading.Thread(target=lambda: result.update(a=read_timed(a.port, path, key)))
    t.start()
    time.sleep(0.4)
    follower = {}
    f = threading.Thread(target=lambda: follower.update(b=read_timed(b.port, path, key),
                                                        done=time.monotonic()))
    f.start()
    time.sleep(0.6)
    a.kill()
    killed = time.monotonic()
    f.join(timeout=20)
    t.join(timeout=20)
    b_head, b_reads, b_ended = follower["b"]
    assert "Idempotent-Replayed: true" in b_head and not b_ended
    assert payload(b_head, b_reads, cut=True).count(b"data: token") >= 2
    # It ended within the lease and a re-check of the kill.
    assert follower["done"] - killed < 4.5, follower["done"] - killed
    assert upstream.executions.count(key=key) == 1


def test_an_answer_framed_by_its_length_is_followed_whole_from_another_instance(
        make_proxy, upstream, key):
    """The same 2 MiB with a Content-Length: B gets it whole, byte for byte, its last
    byte only once A's record completed and matched what B was sent."""
    a, b = two_instances(make_proxy, WAITING)
    size = 2 << 20
    path = "/v1/big?bytes=%d&gap_ms=80" % size
    (head, reads, ended), (b_head, b_reads, b_ended) = on_a_then_b(a, b, path, key, 0.9)
    assert ended and b_ended, (head, b_head)
    assert "content-length: %d" % size in b_head.lower()
    assert "Idempotent-Replayed: true" in b_head
    assert payload(b_head, b_reads) == payload(head, reads) == big_body(key, 1, size)
    end = reads[-1][0]
    assert received_by(b_reads, end - 0.6) >= 512 << 10, received_by(b_reads, end - 0.6)
    assert upstream.executions.count(key=key) == 1

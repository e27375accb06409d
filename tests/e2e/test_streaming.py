"""Streamed answers on a covered route: each piece reaches the client as the upstream
sends it (server-sent events, as an LLM API streams tokens), the answer is recorded
once it has ended and replayed whole, and a stream broken off is never passed off as
whole. How upstream.timeout and upstream.read_timeout bound a stream is tested in
process, over both codecs (tests/proxy/streaming_test.cpp)."""
import socket
import subprocess
import threading
import time

import pytest
from h2_peer import Client
from harness import problem, run_node

EVENTS = "/v1/events?n=5&gap_ms=300"


def read_stream(port, path, key, stop_after=None):
    """POSTs over a raw HTTP/1.1 socket; returns (head, [(seconds, bytes)...], ended):
    when each read came, and whether the last chunk did. `stop_after`: close once
    that many bytes of body came."""
    s = socket.create_connection(("127.0.0.1", port), timeout=15)
    t0 = time.monotonic()
    s.sendall(("POST %s HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\nContent-Type: "
               "application/json\r\nContent-Length: 2\r\n\r\n{}" % (path, key)).encode())
    data, reads = b"", []
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, rest = data.split(b"\r\n\r\n", 1)
    if rest:
        reads.append((time.monotonic() - t0, rest))
    body = rest
    while not body.endswith(b"0\r\n\r\n"):
        if stop_after is not None and len(body) >= stop_after:
            s.close()
            return head.decode(), reads, False
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            chunk = b""
        if not chunk:
            break
        reads.append((time.monotonic() - t0, chunk))
        body += chunk
    s.close()
    return head.decode(), reads, body.endswith(b"0\r\n\r\n")


def events_of(chunked):
    """The event bytes of a chunked body."""
    out, at = b"", 0
    while True:
        line_end = chunked.index(b"\r\n", at)
        size = int(chunked[at:line_end], 16)
        if size == 0:
            return out
        out += chunked[line_end + 2:line_end + 2 + size]
        at = line_end + 2 + size + 2


def test_each_event_reaches_the_client_as_it_is_sent_and_a_retry_replays_them_all(
        make_proxy, upstream, key):
    p = make_proxy()
    head, reads, ended = read_stream(p.port, EVENTS, key)
    assert head.startswith("HTTP/1.1 200") and ended
    assert "text/event-stream" in head
    # Five events 300 ms apart: the first arrives long before the last was sent, and
    # they come in separate reads, not in one at the end.
    assert reads[0][0] < 0.9, reads
    assert reads[-1][0] - reads[0][0] > 0.9, reads
    assert len(reads) >= 4, reads
    original = events_of(b"".join(r for _, r in reads))
    assert original.count(b"data: token") == 5
    retry = p.post(EVENTS, "{}", key=key)
    assert retry.status == 200 and retry.header("Idempotent-Replayed") == "true"
    assert retry.body == original
    assert upstream.executions.count(key=key) == 1


def test_over_http2_each_event_is_a_data_frame_as_it_comes(make_proxy, upstream, key):
    p = make_proxy()
    c = Client(p.port)
    sid = c.request("POST", EVENTS, b"{}", [("idempotency-key", key),
                                            ("content-type", "application/json")])
    t0 = time.monotonic()
    assert c.pump(lambda: b"token 0" in c.streams[sid].body, timeout=10)
    first = time.monotonic() - t0
    (r,) = c.wait(sid)
    total = time.monotonic() - t0
    c.close()
    assert r.status == 200 and r.ended
    assert first < 0.9 and total - first > 0.9, (first, total)
    assert r.data_frames >= 5
    assert p.post(EVENTS, "{}", key=key).body == r.body
    assert upstream.executions.count(key=key) == 1


def test_a_stream_cut_by_the_upstream_ends_as_an_error_and_is_never_replayed(
        make_proxy, upstream, key):
    p = make_proxy()
    path = "/v1/events?n=5&gap_ms=100&cut=2"
    head, reads, ended = read_stream(p.port, path, key)
    assert head.startswith("HTTP/1.1 200")
    assert not ended
    assert events_of_partial(b"".join(r for _, r in reads)).count(b"data: token") == 2
    retry = p.post(path, "{}", key=key)
    assert retry.status == 409 and problem(retry)["type"].endswith("/outcome-indeterminate")
    assert upstream.executions.count(key=key) == 1
    # Over HTTP/2 the stream is reset.
    other = key + "-h2"
    c = Client(p.port)
    sid = c.request("POST", path, b"{}", [("idempotency-key", other),
                                          ("content-type", "application/json")])
    (r,) = c.wait(sid)
    c.close()
    assert r.reset is not None and not r.ended
    assert b"token 1" in r.body


def events_of_partial(chunked):
    """The event bytes of a chunked body that may have been cut short."""
    out, at = b"", 0
    while True:
        line_end = chunked.find(b"\r\n", at)
        if line_end < 0:
            return out
        size = int(chunked[at:line_end], 16)
        out += chunked[line_end + 2:line_end + 2 + size]
        if size == 0 or line_end + 2 + size + 2 > len(chunked):
            return out
        at = line_end + 2 + size + 2


def test_a_client_that_leaves_mid_stream_still_gets_the_whole_answer_on_retry(
        make_proxy, upstream, key):
    p = make_proxy()
    head, reads, ended = read_stream(p.port, EVENTS, key, stop_after=1)
    assert head.startswith("HTTP/1.1 200") and not ended
    # The upstream was read to its end and the answer recorded, since it executed.
    retry = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        retry = p.post(EVENTS, "{}", key=key)
        if retry.status != 409:
            break
        time.sleep(0.2)
    assert retry.status == 200 and retry.header("Idempotent-Replayed") == "true"
    assert retry.body.count(b"data: token") == 5
    assert upstream.executions.count(key=key) == 1


def curl_events(port, path, key, http2):
    """Runs curl -N, as a person watching a stream would; returns [(seconds, line)]
    for each line of the body as curl printed it."""
    args = ["curl", "-sS", "-N", "-X", "POST", "-H", "Idempotency-Key: " + key,
            "-H", "Content-Type: application/json", "--data", "{}"]
    if http2:
        args.append("--http2-prior-knowledge")
    proc = subprocess.Popen(args + ["http://127.0.0.1:%d%s" % (port, path)],
                            stdout=subprocess.PIPE)
    t0, lines = time.monotonic(), []
    for line in proc.stdout:
        lines.append((time.monotonic() - t0, line))
    assert proc.wait(timeout=15) == 0
    return lines


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "http2"])
def test_curl_sees_each_event_as_it_is_sent(make_proxy, upstream, key, http2):
    p = make_proxy()
    lines = curl_events(p.port, EVENTS, key, http2)
    data = [(t, line) for t, line in lines if line.startswith(b"data: ")]
    assert len(data) == 5
    assert data[0][0] < 0.9 and data[-1][0] - data[0][0] > 0.9, data
    replayed = curl_events(p.port, EVENTS, key, http2)
    assert [line for _, line in replayed] == [line for _, line in lines]
    assert upstream.executions.count(key=key) == 1


NODE_READER = r"""
const [url, key] = process.argv.slice(1);
const t0 = performance.now();
const res = await fetch(url, {method: "POST", body: "{}",
  headers: {"Idempotency-Key": key, "Content-Type": "application/json"}});
const reader = res.body.getReader();
const reads = [];
for (;;) {
  const {done, value} = await reader.read();
  if (done) break;
  reads.push([(performance.now() - t0) / 1000, Buffer.from(value).toString()]);
}
console.log(JSON.stringify({status: res.status,
  replayed: res.headers.get("idempotent-replayed"), reads}));
"""


def test_nodes_fetch_reads_the_events_as_they_come(make_proxy, upstream, key):
    p = make_proxy()
    url = "http://127.0.0.1:%d%s" % (p.port, EVENTS)
    first = run_node(NODE_READER, url, key)
    assert first["status"] == 200 and first["replayed"] is None
    times = [t for t, _ in first["reads"]]
    assert times[0] < 0.9 and times[-1] - times[0] > 0.9, first["reads"]
    again = run_node(NODE_READER, url, key)
    assert again["replayed"] == "true"
    assert "".join(c for _, c in again["reads"]) == "".join(c for _, c in first["reads"])
    assert upstream.executions.count(key=key) == 1


WAITING = [{"name": "orders", "path_prefix": "/v1", "key_required": True,
            "on_concurrent": "wait"}]


def first_and_attached(port, path, key, delay):
    """read_stream() twice with one key, the second `delay` seconds after the first;
    returns both results."""
    results = [None, None]

    def run(i, pause):
        time.sleep(pause)
        results[i] = read_stream(port, path, key)

    threads = [threading.Thread(target=run, args=(0, 0)),
               threading.Thread(target=run, args=(1, delay))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def test_a_concurrent_retry_attaches_to_the_stream_and_sees_each_event_live(
        make_proxy, upstream, key):
    """Two clients with one key, the second 0.4 s into the first's stream (on_concurrent:
    wait, PostgreSQL as the store): one execution, and the second gets the events so
    far at once, then each as it is sent, not all at the end."""
    p = make_proxy(routes=WAITING)
    (head, reads, ended), (a_head, a_reads, a_ended) = first_and_attached(
        p.port, "/v1/events?n=6&gap_ms=300", key, 0.4)
    assert ended and a_ended, (reads, a_reads)
    assert "Idempotent-Replayed" not in head
    assert "Idempotent-Replayed: true" in a_head and "text/event-stream" in a_head
    first_body = events_of(b"".join(r for _, r in reads))
    attached_body = events_of(b"".join(r for _, r in a_reads))
    assert attached_body == first_body and first_body.count(b"data: token") == 6
    # The stream lasts 1.5 s from the first event; the attached client, 0.4 s in, has
    # its first bytes long before the end, and the rest in separate reads as they come.
    assert a_reads[0][0] < 0.8, a_reads
    assert a_reads[-1][0] - a_reads[0][0] > 0.6, a_reads
    assert len(a_reads) >= 3, a_reads
    assert upstream.executions.count(key=key) == 1
    assert p.metric("idemproxy_attached_total") == 1


def curl_first_then_http2(first_port, second_port, path, key):
    """curl over HTTP/1.1 to first_port and, 0.4 s later, with the same key over HTTP/2
    to second_port: the first's lines, and the second's with when each came."""
    first = {}
    t = threading.Thread(target=lambda: first.update(
        lines=curl_events(first_port, path, key, False)))
    t.start()
    time.sleep(0.4)
    attached = curl_events(second_port, path, key, True)
    t.join(timeout=30)
    return first["lines"], attached


def test_curl_attached_over_http2_sees_the_events_as_they_come(make_proxy, upstream, key):
    p = make_proxy(routes=WAITING)
    path = "/v1/events?n=6&gap_ms=300"
    first_lines, attached = curl_first_then_http2(p.port, p.port, path, key)
    data = [(at, line) for at, line in attached if line.startswith(b"data: ")]
    assert len(data) == 6
    assert data[-1][0] - data[0][0] > 0.6, data
    assert [line for _, line in attached] == [line for _, line in first_lines]
    assert upstream.executions.count(key=key) == 1


def test_a_retry_attached_late_to_a_large_stream_reads_its_stored_chunks_first(
        make_proxy, upstream, key):
    """A 3 MiB stream in 1 MiB events (twelve 256 KiB chunks stored as it flows); a
    retry that attaches after the second event reads the chunks already stored from
    PostgreSQL, then follows the stream: byte for byte the first client's body."""
    p = make_proxy(routes=WAITING)
    (_, reads, ended), (a_head, a_reads, a_ended) = first_and_attached(
        p.port, "/v1/events?n=3&gap_ms=700&pad=1048576", key, 1.0)
    assert ended and a_ended
    assert "Idempotent-Replayed: true" in a_head
    body = events_of(b"".join(r for _, r in reads))
    assert len(body) > 3 * 1048576
    assert events_of(b"".join(r for _, r in a_reads)) == body
    assert upstream.executions.count(key=key) == 1
    assert p.metric("idemproxy_attached_total") == 1

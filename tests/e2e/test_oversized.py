"""Large answers. An answer that streams (one that does not end in its first read) is
stored as it flows: whole in its record while small, in chunks of 256 KiB past that,
up to the route's max_stored_answer, and a retry is replayed every byte from the
chunks. Past max_stored_answer it is still streamed whole to the client that caused
it; its record keeps only the status, and a retry is told the request executed (409
response-not-stored) instead of being replayed part of a body or executed again."""
import hashlib
import subprocess
import threading
import time

import pytest

from harness import SHORT_STATEMENTS, problem, wait_for
from harness import big_body as expected


def sha(data):
    return hashlib.sha256(data).hexdigest()


def alter_chunk(pg, key, seq):
    """Flips every bit of the 9th byte of a stored chunk: always a change (writing a
    fixed byte over random ones leaves the chunk as it was once in 256 runs)."""
    pg.sql("UPDATE idempotency_chunks SET bytes = set_byte(bytes, 8, get_byte(bytes, 8) # 255)"
           " WHERE key = '%s' AND seq = %d" % (key, seq))


def capped_route(cap):
    return [{"name": "orders", "path_prefix": "/v1", "key_required": True,
             "max_stored_answer": cap}]


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_an_answer_over_max_stored_answer_is_streamed_whole_and_never_replayed(
        make_proxy, upstream, pg, key, framing):
    p = make_proxy(routes=capped_route("64KiB"))
    size = 300_000
    query = "?bytes=%d%s" % (size, "&chunked=1" if framing == "chunked" else "")
    first = p.post("/v1/big" + query, "{}", key=key)
    assert first.status == 200
    assert sha(first.body) == sha(expected(key, 1, size))  # every byte, in order
    assert first.header("Idempotency-Key-Expires") is not None

    retry = p.post("/v1/big" + query, "{}", key=key)
    doc = problem(retry)
    assert retry.status == 409 and doc["type"].endswith("/response-not-stored")
    assert "upstream status 200" in doc["detail"]
    assert upstream.executions.count(key=key) == 1
    row = pg.sql("SELECT state, status, body IS NULL, headers IS NULL, chunks IS NULL"
                 " FROM idempotency_records WHERE key = '%s'" % key)
    assert row == "completed|200|t|t|t"
    # What was appended before the cap was passed is never read, and GC deletes it.
    assert p.wait_metric("idemproxy_requests_total", 1, outcome="executed_not_stored") == 1
    assert p.wait_metric("idemproxy_requests_total", 1, outcome="not_replayable") == 1


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_large_answer_is_stored_in_chunks_as_it_streams_and_replayed_whole(
        make_proxy, upstream, pg, key, framing):
    # With its length: 20 MiB, past the 16 MiB upstream.max_response_size that capped
    # stored answers before, in 80 chunks of 256 KiB. Chunked: 3 MiB, 12 chunks.
    p = make_proxy()
    size = (20 << 20) if framing == "content-length" else (3 << 20)
    chunks = size // (256 << 10)
    query = "?bytes=%d%s" % (size, "&chunked=1" if framing == "chunked" else "")
    first = p.post("/v1/big" + query, "{}", key=key, timeout=60)
    assert first.status == 200
    assert sha(first.body) == sha(expected(key, 1, size))
    row = pg.sql("SELECT body IS NULL, chunks, body_length, octet_length(body_digest)"
                 " FROM idempotency_records WHERE key = '%s'" % key)
    assert row == "t|%d|%d|32" % (chunks, size)
    assert pg.sql("SELECT count(*), sum(octet_length(bytes)) FROM idempotency_chunks"
                  " WHERE key = '%s'" % key) == "%d|%d" % (chunks, size)

    again = p.post("/v1/big" + query, "{}", key=key, timeout=60)
    assert again.status == 200
    assert again.header("Idempotent-Replayed") == "true"
    assert sha(again.body) == sha(first.body)
    if framing == "content-length":
        assert again.header("Content-Length") == str(size)
    assert upstream.executions.count(key=key) == 1
    assert p.wait_metric("idemproxy_db_chunks_stored_total", chunks) >= chunks


def test_a_chunk_altered_in_the_store_resets_the_replay_instead_of_completing_it(
        make_proxy, upstream, pg, key):
    p = make_proxy()
    size = 1 << 20
    first = p.post("/v1/big?bytes=%d&chunked=1" % size, "{}", key=key)
    assert sha(first.body) == sha(expected(key, 1, size))
    alter_chunk(pg, key, 2)
    try:
        again = p.post("/v1/big?bytes=%d&chunked=1" % size, "{}", key=key)
    except Exception:  # HTTP/1.1: closed before the last chunk, an error, as it must be
        again = None
    # HTTP/2: the stream that began is reset (RST_STREAM), never ended as whole.
    assert again is None or again.reset is not None, \
        "an altered body was replayed as whole (%d bytes)" % len(again.body)
    assert upstream.executions.count(key=key) == 1
    assert "cannot be replayed whole" in p.read_log()


def test_a_small_streamed_answer_keeps_the_one_row_path(make_proxy, upstream, pg, key):
    p = make_proxy(extra_top={"upstream": {"url": upstream.url, "max_response_size": "64KiB"}})
    first = p.post("/v1/big?bytes=65536&chunked=1", "{}", key=key)
    again = p.post("/v1/big?bytes=65536&chunked=1", "{}", key=key)
    assert len(first.body) == 65536
    assert again.header("Idempotent-Replayed") == "true" and again.body == first.body
    assert upstream.executions.count(key=key) == 1
    assert pg.sql("SELECT chunks IS NULL, octet_length(body) FROM idempotency_records"
                  " WHERE key = '%s'" % key) == "t|65536"
    assert pg.sql("SELECT count(*) FROM idempotency_chunks WHERE key = '%s'" % key) == "0"


def test_the_memory_store_follows_the_same_rules(make_proxy, upstream, key):
    p = make_proxy(store={"memory": {}}, routes=capped_route("64KiB"))
    assert len(p.post("/v1/big?bytes=100000", "{}", key=key).body) == 100000
    assert p.post("/v1/big?bytes=100000", "{}", key=key).status == 409
    assert upstream.executions.count(key=key) == 1
    other = key + "-large"
    q = make_proxy(store={"memory": {}})
    first = q.post("/v1/big?bytes=1000000&chunked=1", "{}", key=other)
    again = q.post("/v1/big?bytes=1000000&chunked=1", "{}", key=other)
    assert again.header("Idempotent-Replayed") == "true"
    assert sha(again.body) == sha(first.body) == sha(expected(other, 1, 1000000))


@pytest.mark.parametrize("on_stale", ["fail", "retake"])
def test_a_proxy_killed_mid_stream_never_hands_a_retry_part_of_it(make_proxy, upstream, pg, key,
                                                                   on_stale):
    # kill -9 once the stream's first chunk is stored (eight 100 KB events, 250 ms
    # apart): the record stays in flight, its lease runs out, and on_stale decides. Its
    # chunks are never read: `fail` tells the retry the outcome is unknown, `retake`
    # executes again and stores and replays the second execution's stream alone; the
    # first execution's chunks, which no record reads, are swept by the in-process GC.
    p = make_proxy(store=SHORT_STATEMENTS, gc={"interval": "300ms"},
                   routes=[{"name": "orders", "path_prefix": "/v1", "key_required": True,
                            "lease": "1s", "on_stale": on_stale}])
    path = "/v1/events?n=8&gap_ms=250&pad=100000"
    reader = threading.Thread(target=lambda: _swallow(lambda: p.post(path, key=key, timeout=30)))
    reader.start()
    assert wait_for(lambda: pg.sql("SELECT count(*) FROM idempotency_chunks WHERE key = '%s'"
                                   % key) not in ("", "0"), timeout=15)
    p.kill()
    reader.join()
    assert pg.sql("SELECT state, chunks IS NULL FROM idempotency_records WHERE key = '%s'"
                  % key) == "in_flight|t"
    p.start()
    time.sleep(1.5)  # the lease, renewed while it streamed, runs out
    retry = p.post(path, key=key, timeout=30)
    if on_stale == "fail":
        assert retry.status == 409
        assert problem(retry)["type"].endswith("/outcome-unknown")
        assert upstream.executions.count(key=key) == 1
        return
    assert retry.status == 200
    assert retry.body.count(b"of execution 2") == 8 and b"of execution 1" not in retry.body
    again = p.post(path, key=key, timeout=30)
    assert again.header("Idempotent-Replayed") == "true"
    assert again.body == retry.body
    assert upstream.executions.count(key=key) == 2
    assert wait_for(lambda: p.metric("idemproxy_gc_chunks_swept_total") >= 1, timeout=10)
    assert pg.sql("SELECT count(*) FROM idempotency_chunks c JOIN idempotency_records r "
                  "USING (scope, key) WHERE key = '%s' AND c.token <> r.token" % key) == "0"


def _swallow(call):
    try:
        call()
    except Exception:  # the proxy was killed under it
        pass


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "http2"])
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_curl_reads_a_replay_from_chunks_whole_and_sees_an_altered_one_fail(
        make_proxy, upstream, pg, key, http2, framing):
    # A real client reads the replay of a 1 MiB answer stored in 4 chunks: every byte,
    # framed by its Content-Length (RFC 9112 6.3) or chunked. A replay cut short for a
    # chunk altered in the store is an error to it (HTTP/1.1: the connection closes
    # before the length or the last chunk; HTTP/2: RST_STREAM, RFC 9113 8.1), never
    # a whole answer: curl exits non-zero.
    p = make_proxy()
    size = 1 << 20
    url = "http://127.0.0.1:%d/v1/big?bytes=%d%s" % (p.port, size,
                                                    "&chunked=1" if framing == "chunked" else "")
    args = ["curl", "-sS", "-N", "-X", "POST", "-H", "Idempotency-Key: " + key,
            "-H", "Content-Type: application/json", "--data", "{}", "-D", "-", "-o", "-"]
    if http2:
        args.append("--http2-prior-knowledge")
    first = subprocess.run(args + [url], capture_output=True, timeout=30)
    assert first.returncode == 0, first.stderr
    again = subprocess.run(args + [url], capture_output=True, timeout=30)
    assert again.returncode == 0, again.stderr
    head, body = again.stdout.split(b"\r\n\r\n", 1)
    assert b"idempotent-replayed: true" in head.lower()
    assert sha(body) == sha(expected(key, 1, size))
    assert pg.sql("SELECT chunks FROM idempotency_records WHERE key = '%s'" % key) == "4"
    alter_chunk(pg, key, 2)
    broken = subprocess.run(args + [url], capture_output=True, timeout=30)
    assert broken.returncode != 0, "curl took an altered replay as whole"
    assert upstream.executions.count(key=key) == 1

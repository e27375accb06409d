"""An HTTP/1.1 upstream that closes each connection after its answer, though the
answer kept it alive (no `Connection: close`), as a server whose keep-alive timeout
is short does. Its FIN may still be in flight, or not yet seen by the pool's idle
read, when the next request takes the connection: pipelined requests on one client
connection take it within a turn of the proxy's loop. Seen before the fix: every
second of five pipelined GETs got a 502 "end of stream" (400 of 800 requests).

Two things keep such answers: a connection whose last read said the upstream's end
came with the answer (TCP_INQ) does not go back to the pool; and a request with no
body, of a method a repeat cannot harm, under no key, goes once more on a new
connection when a kept-alive one ends before a byte of its answer (nginx does as much
on a cached connection). Any other request is never sent twice: a POST under no key
can still meet an end that was in flight as it was sent, a 502 (nginx 1.22 gave 302
of 800 pipelined POSTs here one; the proxy 66 to 113), which the in-process tests
show is never sent again."""
import re

import pytest

from harness import raw_exchange
from raw_upstream import RawUpstream


@pytest.fixture
def raw_upstream():
    u = RawUpstream()
    yield u
    u.close()


def pipelined(port, requests):
    """The statuses of the answers to `requests`, sent at once on one connection (the
    last closes it)."""
    out = raw_exchange(port, b"".join(requests), timeout=10)
    return [int(s) for s in re.findall(rb"HTTP/1\.1 (\d{3}) ", out)]


def get(path, last=False):
    close = b"Connection: close\r\n" if last else b""
    return b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n" + close + b"\r\n"


def post(key, last=False, path=b"/v1/orders"):
    close = b"Connection: close\r\n" if last else b""
    keyed = b"Idempotency-Key: " + key.encode() + b"\r\n" if key else b""
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
            keyed + close + b"Content-Length: 2\r\n\r\n{}")


def test_pipelined_gets_on_an_upstream_that_closes_after_each_answer_are_all_answered(
        make_proxy, raw_upstream):
    p = make_proxy(upstream_url=raw_upstream.url)
    for _ in range(20):
        statuses = pipelined(p.port, [get(b"/items/%d" % i, last=i == 4) for i in range(5)])
        assert statuses == [201] * 5, statuses


def test_pipelined_keyed_posts_on_an_upstream_that_closes_after_each_answer_never_run_twice(
        make_proxy, raw_upstream, pg, key):
    # A keyed request is never sent again: one that meets an end in flight (more often
    # on a loaded machine, where the upstream closes later) is a 502 and its key
    # `indeterminate`; every other runs once and is kept.
    p = make_proxy(upstream_url=raw_upstream.url)
    keys = ["%s-%d" % (key, i) for i in range(40)]
    answered = {}
    for at in range(0, len(keys), 4):
        batch = keys[at:at + 4]
        statuses = pipelined(p.port, [post(k, last=k == batch[-1]) for k in batch])
        assert len(statuses) == 4 and set(statuses) <= {201, 502}, (batch, statuses)
        answered.update(zip(batch, statuses))
    assert len(raw_upstream.keys) == len(set(raw_upstream.keys))  # none ran twice
    for k, status in answered.items():
        state = pg.sql("SELECT state FROM idempotency_records WHERE key = '%s'" % k)
        assert state == ("completed" if status == 201 else "indeterminate"), (k, status, state)
        if status == 201:
            assert k in raw_upstream.keys
    assert list(answered.values()).count(201) >= len(keys) // 2, answered

"""The never-truncating rule: an answer larger than upstream.max_response_size is
streamed whole to the client that caused it; its record keeps only the status, and
a retry is told the request executed (409 response-not-stored) instead of being
replayed part of a body or executed again."""
import hashlib
import random

import pytest

from harness import problem


def expected(key, n, size):
    """The bytes the fake upstream sends for /v1/big on the n-th execution of a key."""
    return random.Random("%s-/v1/big-%d" % (key, n)).randbytes(size)


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_an_oversized_answer_is_streamed_whole_and_never_replayed(make_proxy, upstream, pg, key,
                                                                  framing):
    p = make_proxy(extra_top={"upstream": {"url": upstream.url, "max_response_size": "64KiB"}})
    size = 300_000
    query = "?bytes=%d%s" % (size, "&chunked=1" if framing == "chunked" else "")
    first = p.post("/v1/big" + query, "{}", key=key)
    assert first.status == 200
    assert hashlib.sha256(first.body).hexdigest() == \
        hashlib.sha256(expected(key, 1, size)).hexdigest()  # every byte, in order
    assert first.header("Idempotency-Key-Expires") is not None

    retry = p.post("/v1/big" + query, "{}", key=key)
    doc = problem(retry)
    assert retry.status == 409 and doc["type"].endswith("/response-not-stored")
    assert "upstream status 200" in doc["detail"]
    assert upstream.executions.count(key=key) == 1
    row = pg.sql("SELECT state, status, body IS NULL, headers IS NULL FROM idempotency_records"
                 " WHERE key = '%s'" % key)
    assert row == "completed|200|t|t"
    assert p.wait_metric("idemproxy_requests_total", 1, outcome="executed_not_stored") == 1
    assert p.wait_metric("idemproxy_requests_total", 1, outcome="not_replayable") == 1


def test_answers_within_the_limit_are_still_stored_and_replayed(make_proxy, upstream, key):
    p = make_proxy(extra_top={"upstream": {"url": upstream.url, "max_response_size": "64KiB"}})
    first = p.post("/v1/big?bytes=65536&chunked=1", "{}", key=key)  # exactly the limit
    again = p.post("/v1/big?bytes=65536&chunked=1", "{}", key=key)
    assert len(first.body) == 65536
    assert again.header("Idempotent-Replayed") == "true" and again.body == first.body
    assert upstream.executions.count(key=key) == 1


def test_the_memory_store_follows_the_same_rule(make_proxy, upstream, key):
    p = make_proxy(store={"memory": {}},
                   extra_top={"upstream": {"url": upstream.url, "max_response_size": "16KiB"}})
    assert len(p.post("/v1/big?bytes=100000", "{}", key=key).body) == 100000
    assert p.post("/v1/big?bytes=100000", "{}", key=key).status == 409
    assert upstream.executions.count(key=key) == 1

"""An HTTP/1.1 upstream whose answer's framing can be read two ways (RFC 9112 6.3).

A raw socket server answers each request with bytes the test chooses. An answer with
a Transfer-Encoding that is not `chunked` alone (a coding list with a parameter, a
coding besides chunked, one beside a Content-Length) is refused with a 502
problem+json, on covered and pass-through routes alike (nginx 1.22 relays `gzip,
chunked` as chunked, its gzip dropped). Read Beast's way, `gzip;level=1, chunked`
was gzip alone and the chunks went to the
client as body bytes; `gzip` beside a length was read by the length; and a body in a
transfer coding was stored without it, so its replay was gzip bytes with nothing to
say so; `chunked, chunked` was read to the close, its chunks relayed as body bytes.
A status with no class (`053`) is refused the same way, and so is a folded field,
which Beast's parser folded.
Nothing such an answer carried is ever stored or replayed (its record is left
`indeterminate`, as after a reset), and the proxy goes on serving."""
import pytest

from harness import problem
from raw_upstream import GOOD, RawUpstream


@pytest.fixture
def raw_upstream():
    u = RawUpstream()
    yield u
    u.close()


# Each answer's body is "hello" as its upstream framed it.
TWO_WAYS = {
    "a parameter on a coding": b"HTTP/1.1 201 Created\r\nTransfer-Encoding: gzip;level=1, chunked"
                               b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "chunked with a parameter": b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked;q=1"
                                b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "two tokens with no comma": b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunke k1\r\n"
                                b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "a coding beside a length": b"HTTP/1.1 201 Created\r\nTransfer-Encoding: gzip\r\n"
                                b"Content-Length: 5\r\n\r\nhello",
    "gzip before chunked": b"HTTP/1.1 201 Created\r\nTransfer-Encoding: gzip, chunked"
                           b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "gzip alone, to the close": b"HTTP/1.1 201 Created\r\nTransfer-Encoding: gzip\r\n\r\nhello",
    "chunked twice": b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked, chunked"
                     b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    # Not framing, but read one way only too: a status with no class (RFC 9110 15),
    # which Beast read as 53, nginx relays, and curl refuses.
    "a status with no class": b"HTTP/1.1 053 Odd\r\nContent-Length: 5\r\n\r\nhello",
    # And a folded field (RFC 9112 5.2 lets a proxy answer 502 for one, or unfold it):
    # Beast's parser unfolded it.
    "a folded field": b"HTTP/1.1 201 Created\r\nX-Note: one\r\n two\r\nContent-Length: 5"
                      b"\r\n\r\nhello",
}


@pytest.mark.parametrize("case", sorted(TWO_WAYS))
def test_an_answer_framed_two_ways_is_a_502_and_never_replayed(make_proxy, raw_upstream, pg, key,
                                                               case):
    p = make_proxy(upstream_url=raw_upstream.url)
    raw_upstream.answer = TWO_WAYS[case]
    first = p.post("/v1/orders", "{}", key=key, timeout=10)
    assert first.status == 502, (case, first.status, first.headers, first.body)
    assert problem(first)["type"].endswith("/upstream-failed"), first.body
    assert any(why in first.body for why in (b"bad Transfer-Encoding", b"bad status",
                                             b"bad field")), first.body
    assert raw_upstream.keys == [key]  # it was sent, and answered badly
    # Nothing of that answer is kept: the retry is no replay of it, and never runs
    # again blindly (the upstream did execute it: docs/RELIABILITY.md, as a reset
    # after the request was read).
    raw_upstream.answer = GOOD
    retry = p.post("/v1/orders", "{}", key=key, timeout=10)
    assert retry.status == 409, (retry.status, retry.body)
    assert problem(retry)["type"].endswith("/outcome-indeterminate")
    assert retry.header("Idempotent-Replayed") is None
    assert raw_upstream.keys == [key]
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE key = '%s' AND "
                  "position('hello'::bytea in coalesce(body, '')) > 0" % key) == "0"
    # And the proxy serves on.
    after = p.post("/v1/orders", "{}", key=key + "-after", timeout=10)
    assert after.status == 201, after.body
    assert p.proc.poll() is None


@pytest.mark.parametrize("case", sorted(TWO_WAYS))
def test_a_pass_through_answer_framed_two_ways_is_a_502(make_proxy, raw_upstream, case):
    p = make_proxy(upstream_url=raw_upstream.url)
    raw_upstream.answer = TWO_WAYS[case]
    r = p.request("GET", "/health", timeout=10)
    assert r.status == 502, (case, r.status, r.headers, r.body)
    problem(r)
    assert b"hello" not in r.body


def test_a_chunked_answer_with_a_comma_list_is_read_and_replayed(make_proxy, raw_upstream, key):
    # `, chunked` and `CHUNKED` are chunked alone (RFC 9110 5.6.1: empty elements).
    p = make_proxy(upstream_url=raw_upstream.url)
    raw_upstream.answer = (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: , CHUNKED\r\n"
                           b"Content-Type: text/plain\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    first = p.post("/v1/orders", "{}", key=key, timeout=10)
    assert (first.status, first.body) == (201, b"hello")
    again = p.post("/v1/orders", "{}", key=key, timeout=10)
    assert (again.status, again.body) == (201, b"hello")
    assert again.header("Idempotent-Replayed") == "true"
    assert raw_upstream.keys == [key]


@pytest.mark.parametrize("framing", [b"Content-Length: 5\r\n\r\nhello",
                                     b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"])
@pytest.mark.parametrize("protocol", ["--http2-prior-knowledge", "--http1.1"])
def test_a_204_reaches_curl_without_the_framing_the_upstream_gave_it(make_proxy, raw_upstream,
                                                                     key, framing, protocol):
    # RFC 9110 8.6, RFC 9112 6.1: a 204 has no Content-Length or Transfer-Encoding.
    # curl over HTTP/2 failed (exit 92: nghttp2 resets a 204 whose content-length is
    # not 0), and over HTTP/1.1 it got the fields as sent.
    from peers import curl
    p = make_proxy(upstream_url=raw_upstream.url)
    raw_upstream.answer = b"HTTP/1.1 204 No Content\r\nETag: \"v1\"\r\n" + framing
    url = "http://127.0.0.1:%d" % p.port
    for args in (["-X", "DELETE", url + "/items/1"],  # on no route: relayed
                 ["-H", "Idempotency-Key: " + key, "-d", "{}", url + "/v1/orders"],
                 ["-H", "Idempotency-Key: " + key, "-d", "{}", url + "/v1/orders"]):
        status, headers, body, _ = curl(protocol, *args, timeout=10)
        assert status == 204, (status, headers)
        assert "content-length" not in headers and "transfer-encoding" not in headers, headers
        assert headers["etag"] == '"v1"'
        assert body == b""
    assert headers.get("idempotent-replayed") == "true"
    assert raw_upstream.keys == [key]  # the DELETE carries none


@pytest.mark.parametrize("lengths", [b"Content-Length: 5, 5\r\n",
                                     b"Content-Length: 5\r\nContent-Length: 5\r\n"])
@pytest.mark.parametrize("protocol", ["--http2-prior-knowledge", "--http1.1"])
def test_a_kept_length_reaches_curl_once_as_one_number(make_proxy, raw_upstream, lengths,
                                                       protocol):
    # A 304's length, and a HEAD answer's, go on with no body to frame. Beast's parser
    # lets a list of equal values, or a second equal field, through (RFC 9110 8.6);
    # nghttp2 refuses either (curl over HTTP/2: exit 92).
    from peers import curl
    p = make_proxy(upstream_url=raw_upstream.url)
    url = "http://127.0.0.1:%d/items/1" % p.port
    for status, args in ((b"304 Not Modified", [url]), (b"200 OK", ["-I", url])):
        raw_upstream.answer = b"HTTP/1.1 " + status + b"\r\nETag: \"v1\"\r\n" + lengths + b"\r\n"
        got, headers, body, _ = curl(protocol, *args, timeout=10)
        assert got == int(status[:3]), (got, headers)
        assert headers["content-length"] == "5", headers
        assert body == b""


@pytest.mark.parametrize("framing", [b"Content-Length: 5", b"Transfer-Encoding: chunked"])
def test_a_trailer_that_would_frame_the_answer_is_read_past_and_the_answer_kept(
        make_proxy, raw_upstream, pg, key, framing):
    # RFC 9110 6.5.1: a trailer cannot frame a message. Beast's parser read the trailer
    # section with a head's rules: the answer broke off after its last chunk (curl over
    # HTTP/2: exit 92, INTERNAL_ERROR) and the key was left indeterminate (a 409 to
    # every retry). Now the field is dropped and the rest kept, relayed and replayed.
    import subprocess
    p = make_proxy(upstream_url=raw_upstream.url)
    raw_upstream.answer = (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n"
                           b"Content-Type: text/plain\r\n\r\n5\r\nhello\r\n0\r\n" + framing +
                           b"\r\nX-Sum: 7\r\n\r\n")
    for protocol in ("--http2-prior-knowledge", "--http1.1"):
        out = subprocess.run(["curl", "-sS", "-i", protocol, "-H", "te: trailers",
                              "-H", "Idempotency-Key: " + key, "-H", "Content-Type: application/json",
                              "-d", "{}", "http://127.0.0.1:%d/v1/orders" % p.port],
                             capture_output=True, timeout=20)
        assert out.returncode == 0, out.stderr
        head, _, rest = out.stdout.partition(b"\r\n\r\n")
        assert b" 201" in head.split(b"\r\n")[0], head
        assert rest.startswith(b"hello"), rest
        trailers = rest[len(b"hello"):].lower()
        assert b"x-sum: 7" in trailers and framing.split(b":")[0].lower() not in trailers, rest
    assert b"idempotent-replayed: true" in head.lower()  # the second was the replay
    assert raw_upstream.keys == [key]
    assert pg.sql("SELECT state FROM idempotency_records WHERE key = '%s'" % key) == "completed"

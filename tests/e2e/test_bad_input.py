"""Hostile or broken input gets a clear 4xx, leaves no record, and never stops the proxy."""
from harness import problem, raw_exchange


def status_of(raw):
    return int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else None


def still_serving(proxy, key):
    r = proxy.post("/v1/orders", "{}", key=key + "-after")
    return r.status == 201


def test_malformed_http_is_400_and_the_proxy_keeps_serving(proxy, key):
    for payload in [b"GARBAGE\r\n\r\n",
                    b"POST /v1/orders HTTP/9.9\r\n\r\n",
                    b"POST /v1/orders HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
                    b"POST /v1/orders HTTP/1.1\r\nHost: x\r\n folded: line\r\n\r\n",
                    b"\x00\x01\x02\x03\r\n\r\n"]:
        raw = raw_exchange(proxy.port, payload)
        assert status_of(raw) == 400, (payload, raw[:200])
        assert b"application/problem+json" in raw
    assert still_serving(proxy, key)
    assert proxy.proc.poll() is None


def test_every_connection_field_counts_and_close_in_any_closes(proxy, key):
    # RFC 9110 7.6.1: Connection is a list, and two fields are one list. Reading only
    # the first would keep this connection open and answer the second request too.
    first = ("GET /v1/orders/1 HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n"
             "Connection: close\r\n\r\n")
    raw = raw_exchange(proxy.port, (first + "GET /v1/orders/2 HTTP/1.1\r\nHost: x\r\n\r\n").encode())
    assert raw.count(b"HTTP/1.1 ") == 1, raw[:400]
    assert b"\r\nConnection: close\r\n" in raw
    # Keep-alive alone keeps it open: both are answered.
    raw = raw_exchange(proxy.port, ("GET /v1/orders/1 HTTP/1.1\r\nHost: x\r\n"
                                    "Connection: keep-alive\r\n\r\n"
                                    "GET /v1/orders/2 HTTP/1.1\r\nHost: x\r\n"
                                    "Connection: close\r\n\r\n").encode())
    assert raw.count(b"HTTP/1.1 ") == 2, raw[:400]


def test_content_length_with_transfer_encoding_is_rejected(proxy, upstream, pg, key):
    raw = raw_exchange(proxy.port, (
        "POST /v1/orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\n"
        "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
        "0\r\n\r\n" % key).encode())
    assert status_of(raw) == 400
    assert upstream.executions.count(key=key) == 0
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE key = '%s'" % key) == "0"
    assert still_serving(proxy, key)


def test_a_transfer_encoding_that_is_not_a_list_of_codings_is_rejected(proxy, upstream, pg, key):
    # RFC 9112 6.1. Read as far as its first bad element, "chunke k1" was "chunke", and
    # the second field made the body chunked: the request went on, half read.
    for n, value in enumerate(["chunke k1", "chunked;q=1"]):
        k = "%s-%d" % (key, n)
        raw = raw_exchange(proxy.port, (
            "POST /v1/orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\n"
            "Transfer-Encoding: %s\r\nTransfer-Encoding: chunked\r\n\r\n"
            "2\r\n{}\r\n0\r\n\r\n" % (k, value)).encode())
        assert status_of(raw) == 400, (value, raw[:300])
        assert b"application/problem+json" in raw
        assert b"malformed-request" in raw  # README's bad-input table
        assert upstream.executions.count(key=k) == 0
        assert pg.sql("SELECT count(*) FROM idempotency_records WHERE key = '%s'" % k) == "0"
    assert still_serving(proxy, key)


def test_duplicate_content_length_is_rejected(proxy, upstream, key):
    raw = raw_exchange(proxy.port, (
        "POST /v1/orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\n"
        "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}" % key).encode())
    assert status_of(raw) == 400
    assert upstream.executions.count(key=key) == 0


def test_bad_chunk_size_is_rejected_without_a_record(proxy, upstream, pg, key):
    raw = raw_exchange(proxy.port, (
        "POST /v1/orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\n"
        "Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n" % key).encode())
    assert status_of(raw) == 400
    assert upstream.executions.count(key=key) == 0
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE key = '%s'" % key) == "0"


def test_oversized_headers_are_431(proxy, upstream, key):
    r = proxy.post("/v1/orders", "{}", key=key, headers={"X-Huge": "h" * 40000})
    assert r.status == 431
    assert problem(r)["type"].endswith("/header-too-large")
    assert upstream.executions.count(key=key) == 0
    assert still_serving(proxy, key)


def test_oversized_chunked_body_is_413(make_proxy, upstream, pg, key):
    p = make_proxy(defaults={"max_body": "1KiB"})
    chunks = "".join("100\r\n%s\r\n" % ("x" * 256) for _ in range(8)) + "0\r\n\r\n"
    raw = raw_exchange(p.port, (
        "POST /v1/orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\n"
        "Transfer-Encoding: chunked\r\n\r\n%s" % (key, chunks)).encode())
    assert status_of(raw) == 413
    assert upstream.executions.count(key=key) == 0
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE key = '%s'" % key) == "0"


def test_two_key_headers_are_rejected(proxy, upstream, key):
    raw = raw_exchange(proxy.port, (
        "POST /v1/orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\n"
        "Idempotency-Key: other\r\nContent-Length: 2\r\n\r\n{}" % key).encode())
    assert status_of(raw) == 400
    assert upstream.executions.count(key=key) == 0


def test_a_key_field_that_is_a_list_is_400_bad_key_and_executes_nothing(proxy, upstream, pg,
                                                                       key):
    # RFC 8941 section 3.3: the field is an Item; a List, Inner List or Dictionary is not.
    for value in ("%s, %s-b" % (key, key), '"%s", "x"' % key, "(%s x)" % key, 'k="%s"' % key):
        r = proxy.post("/v1/orders", "{}", headers={"Idempotency-Key": value})
        assert r.status == 400, value
        assert problem(r)["type"].endswith("/bad-key")  # README: a bad key's stable type
        assert "RFC 8941 section 3.3" in problem(r)["detail"]
    assert upstream.executions.count(key=key) == 0
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE key LIKE '%%%s%%'" % key) == "0"
    assert still_serving(proxy, key)


def test_client_disconnect_mid_body_leaves_no_record(proxy, upstream, pg, key):
    import socket
    with socket.create_connection(("127.0.0.1", proxy.port)) as s:
        s.sendall(("POST /v1/orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\n"
                   "Content-Length: 100\r\n\r\n{\"half" % key).encode())
    assert still_serving(proxy, key)
    assert upstream.executions.count(key=key) == 0
    assert pg.sql("SELECT count(*) FROM idempotency_records WHERE key = '%s'" % key) == "0"


def test_slowloris_client_is_cut_off_while_others_are_served(make_proxy, key):
    import socket
    import time
    p = make_proxy(server={"header_timeout": "1s"})
    slow = socket.create_connection(("127.0.0.1", p.port))
    slow.settimeout(0.1)
    slow.sendall(b"POST /v1/orders HTTP/1.1\r\n")
    started = time.time()
    closed_after = None
    served = 0
    while closed_after is None and time.time() - started < 4:
        # Others are served while one client trickles a header byte every 100 ms.
        assert p.post("/v1/orders", "{}", key="%s-%d" % (key, served)).status == 201
        served += 1
        try:
            slow.sendall(b"X")
            if slow.recv(4096) == b"":
                closed_after = time.time() - started
        except socket.timeout:
            pass
        except OSError:
            closed_after = time.time() - started
    slow.close()
    assert closed_after is not None and closed_after < 2.5, closed_after
    assert served >= 5


def test_connections_over_max_connections_are_refused_and_counted(make_proxy, key):
    import socket
    import time
    p = make_proxy(server={"max_connections": 3})
    held = [socket.create_connection(("127.0.0.1", p.port)) for _ in range(3)]
    for s in held:  # busy: each has begun a request (idle ones make room instead)
        s.sendall(b"POST /v1/orders HTTP/1.1\r\n")
    time.sleep(0.2)
    extra = socket.create_connection(("127.0.0.1", p.port))
    extra.settimeout(2)
    assert extra.recv(1) == b""  # closed at once
    extra.close()
    assert p.metric("idemproxy_connections_refused_total") == 1
    for s in held:
        s.close()
    time.sleep(0.2)
    assert p.post("/v1/orders", "{}", key=key).status == 201


def test_at_max_connections_idle_connections_make_room_for_a_new_client(make_proxy, key):
    import socket
    import time
    p = make_proxy(server={"max_connections": 3})
    idle = [socket.create_connection(("127.0.0.1", p.port)) for _ in range(3)]
    time.sleep(0.2)
    assert p.post("/v1/orders", "{}", key=key).status == 201
    assert p.metric("idemproxy_connections_refused_total") == 0
    closed = 0
    for s in idle:
        s.settimeout(2)
        try:
            closed += s.recv(1) == b""
        except (socket.timeout, ConnectionResetError):
            pass
        s.close()
    assert closed >= 1

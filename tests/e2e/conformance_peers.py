"""Peers and helpers shared by the conformance tests (test_conformance*.py)."""
import pytest

from peers import NginxUpstream, NodeUpstream, PythonUpstream

ORDERS = [{"name": "orders", "path_prefix": "/v1/orders", "key_required": True}]


@pytest.fixture(scope="module")
def node():
    u = NodeUpstream()
    yield u
    u.close()


@pytest.fixture(scope="module")
def nginx():
    u = NginxUpstream()
    yield u
    u.close()


@pytest.fixture(scope="module")
def pyserver():
    u = PythonUpstream()
    yield u
    u.close()


def status_of(raw):
    return int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/") else 0


def dechunk(body):
    out = b""
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return out
        out, body = out + body[:size], body[size + 2:]


def final_answer(raw):
    """The last (final) response in `raw`, after any 1xx: (status, head, body)."""
    while True:
        head, _, rest = raw.partition(b"\r\n\r\n")
        if not head.split(b" ", 2)[1].startswith(b"1"):
            if b"transfer-encoding: chunked" in head.lower():
                rest = dechunk(rest)
            return int(head.split(b" ", 2)[1]), head.decode("latin-1"), rest
        raw = rest


def keyed_post(proxy, path, key, ledger, body="{}", headers=None):
    h = {"Idempotency-Key": key, "X-Ledger-Id": ledger, "Content-Type": "application/json"}
    h.update(headers or {})
    return proxy.request("POST", path, body, h)

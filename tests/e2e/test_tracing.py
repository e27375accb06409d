"""W3C Trace Context (https://www.w3.org/TR/trace-context/) through the proxy, with
curl as the client and nginx as the upstream: what nginx received is read from its
access log. A valid traceparent is forwarded as sent; an absent or invalid one is
replaced by a new trace (and its tracestate dropped); the trace id is in the proxy's
log lines, and a replay's line names the trace that executed."""
import json
import re
import time
import uuid

import pytest

from conformance_peers import nginx  # noqa: F401  (fixture)
from peers import curl

ROUTES = [{"name": "orders", "path_prefix": "/v1/orders"}]
VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
GENERATED = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-01$")


def received(nginx, marker):
    """What nginx logged for the request whose X-Ledger-Id was `marker`. nginx writes
    its access line once the answer is sent, which can be a moment after the client
    has it (the CI's HTTP/2 rerun once read the log first): wait for the line."""
    deadline = time.time() + 5
    while True:
        lines = [l for l in nginx.log_lines() if " id=%s " % marker in l]
        if lines or time.time() > deadline:
            break
        time.sleep(0.02)
    assert len(lines) == 1, nginx.log_lines()[-5:]
    fields = dict(f.split("=", 1) for f in lines[0].split() if "=" in f)
    return fields["tp"], fields["ts"]


def send(p, marker, *headers, key=None):
    args = ["-H", "X-Ledger-Id: " + marker]
    for h in headers:
        args += ["-H", h]
    if key:
        args += ["-H", "Idempotency-Key: " + key, "-H", "Content-Type: application/json",
                 "--data", "{}"]
    return curl(*args, "http://127.0.0.1:%d/v1/orders" % p.port)


def access_line(p, marker_request_id):
    """The proxy writes the access line after the answer: wait for it."""
    deadline = time.time() + 5
    while True:
        lines = [l for l in p.read_log().splitlines()
                 if "[access]" in l and "request_id=%s " % marker_request_id in l]
        if lines or time.time() > deadline:
            break
        time.sleep(0.02)
    assert len(lines) == 1, p.read_log()[-3000:]
    return dict(f.split("=", 1) for f in lines[0].split() if "=" in f)


@pytest.fixture
def traced(make_proxy, nginx):
    return make_proxy(upstream_url=nginx.url, routes=ROUTES)


def test_a_valid_traceparent_and_its_tracestate_reach_the_upstream_unchanged(traced, nginx):
    m = uuid.uuid4().hex
    status, _, _, _ = send(traced, m, "traceparent: " + VALID, "tracestate: congo=t61rcWkgMzE",
                           "X-Request-Id: " + m)
    assert status == 201
    assert received(nginx, m) == (VALID, "congo=t61rcWkgMzE")
    assert access_line(traced, m)["trace_id"] == VALID.split("-")[1]


def test_a_trace_is_started_when_absent_and_logged(traced, nginx):
    m = uuid.uuid4().hex
    send(traced, m, "X-Request-Id: " + m)
    tp, ts = received(nginx, m)
    assert GENERATED.match(tp) and ts == "-"
    assert access_line(traced, m)["trace_id"] == tp.split("-")[1]


@pytest.mark.parametrize("bad", [
    VALID.upper().replace("X", "x"),                                  # upper-case hex (3.2.2)
    "ff" + VALID[2:],                                                 # version ff is invalid
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",        # all-zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",        # all-zero parent id
    VALID + "-extra",                                                 # version 00 is 55 long
    VALID.replace("-", "_", 1),                                       # no dash
    "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",         # short trace id
])
def test_an_invalid_traceparent_restarts_the_trace_and_drops_tracestate(traced, nginx, bad):
    m = uuid.uuid4().hex
    send(traced, m, "traceparent: " + bad, "tracestate: congo=t61rcWkgMzE")
    tp, ts = received(nginx, m)
    assert GENERATED.match(tp) and tp.split("-")[1] != VALID.split("-")[1]
    assert ts == "-"


def test_two_traceparent_fields_restart_the_trace(traced, nginx):
    m = uuid.uuid4().hex
    other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    send(traced, m, "traceparent: " + VALID, "traceparent: " + other)
    tp, _ = received(nginx, m)
    assert GENERATED.match(tp) and tp not in (VALID, other)


def test_a_later_version_with_more_fields_is_forwarded_as_sent(traced, nginx):
    m = uuid.uuid4().hex
    future = "cc" + VALID[2:] + "-what-the-future-holds"
    send(traced, m, "traceparent: " + future)
    assert received(nginx, m)[0] == future


def test_a_replay_logs_its_own_trace_and_the_one_that_executed(make_proxy, nginx, key):
    first = make_proxy(upstream_url=nginx.url, routes=ROUTES)
    a = "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-00f067aa0ba902b7-01"
    b = "00-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-00f067aa0ba902b7-01"
    m1, m2, m3 = (uuid.uuid4().hex for _ in range(3))
    s1, h1, body1, _ = send(first, m1, "traceparent: " + a, "X-Request-Id: " + m1, key=key)
    s2, h2, body2, _ = send(first, m2, "traceparent: " + b, "X-Request-Id: " + m2, key=key)
    assert (s1, s2) == (201, 201) and h2.get("idempotent-replayed") == "true"
    assert body1 == body2 and not any(name.startswith(":") for name in h2)
    assert access_line(first, m2)["trace_id"] == "b" * 32
    assert access_line(first, m2)["original_trace_id"] == "a" * 32
    assert "original_trace_id" not in access_line(first, m1)
    # From the database, not the cache: another instance replays it the same way.
    second = make_proxy(upstream_url=nginx.url, routes=ROUTES)
    s3, h3, body3, _ = send(second, m3, "X-Request-Id: " + m3, key=key)
    assert s3 == 201 and h3.get("idempotent-replayed") == "true" and body3 == body1
    assert access_line(second, m3)["original_trace_id"] == "a" * 32
    assert nginx.executions(key) == 1
    shown = json.loads(second.cli("keys", "show", "--key", key).stdout)["response"]
    assert shown["trace_id"] == "a" * 32
    assert all(not name.startswith(":") for name, _ in shown["headers"])


def test_event_lines_carry_the_trace_id_and_json_lines_are_consistent(make_proxy, nginx, key):
    from harness import free_port
    dead = "postgresql://postgres@127.0.0.1:%d/idemproxy" % free_port()
    p = make_proxy(upstream_url=nginx.url, routes=ROUTES, dsn=dead, args=("--no-migrate",),
                   defaults={"store_unavailable": "fail_open"},
                   extra_top={"log": {"format": "json"}})
    m = uuid.uuid4().hex
    send(p, m, "traceparent: " + VALID, "X-Request-Id: " + m, key=key)
    deadline = time.time() + 5
    while '"request_id":"%s"' % m not in p.read_log() and time.time() < deadline:
        time.sleep(0.02)
    lines = [json.loads(l) for l in p.read_log().splitlines() if l.strip()]
    trace = VALID.split("-")[1]
    unprotected = [l for l in lines if "WITHOUT idempotency protection" in l["msg"]]
    assert unprotected and all(l["trace_id"] == trace for l in unprotected)
    assert all(l["level"] == "warn" for l in unprotected)
    access = [l for l in lines if l.get("request_id") == m]
    assert len(access) == 1 and access[0]["trace_id"] == trace
    for field in ("duration_ms", "upstream_ms"):  # microseconds at most: no float noise
        assert len(repr(access[0][field]).partition(".")[2]) <= 3, access[0]
    assert {l["level"] for l in lines} <= {"trace", "debug", "info", "warn", "error", "critical"}
    assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", l["ts"]) for l in lines)


def test_text_lines_share_one_format(traced):
    m = uuid.uuid4().hex
    send(traced, m, "X-Request-Id: " + m)
    access_line(traced, m)
    shape = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (trace|debug|info|warn|error|"
                       r"critical) \S")
    lines = [l for l in traced.read_log().splitlines() if l.strip()]
    assert any("[access]" in l for l in lines) and any("listening on" in l for l in lines)
    assert all(shape.match(l) for l in lines), [l for l in lines if not shape.match(l)]

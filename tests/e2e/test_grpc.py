"""gRPC through idemproxy, with real peers on both sides: a grpcio client and a
grpcio server (the C core), HTTP/2 end to end (listen takes h2c; upstream.protocol
h2c). Messages are raw bytes (generic handlers), so no protobuf code is generated.

On a route no rule covers, calls pass through: gRPC's framing survives the proxy
(the length-prefixed messages, the initial metadata, and the status in the trailers:
grpc-status, grpc-message, grpc-status-details-bin, custom trailing metadata),
including trailers-only answers (gRPC's HTTP/2 protocol; RFC 9113 §8.1).

On a covered route, a unary call is an idempotent request: the key is the metadata
the route's header names, the answer (messages, initial metadata, trailers) is
stored by its grpc-status and replayed with idempotent-replayed: true, and every
refusal is a gRPC status."""
import concurrent.futures
import contextlib
import json
import queue
import shutil
import threading
import time
import uuid

import pytest

from harness import request
from peers import H2NodeUpstream, NginxUpstream

grpc = pytest.importorskip("grpc")

SERVICE = "test.Orders"


class Backend:
    """A grpcio server; records what each call received."""

    def __init__(self):
        self.seen = []
        self.lock = threading.Lock()
        handlers = {
            "Create": grpc.unary_unary_rpc_method_handler(self.create),
            "Fail": grpc.unary_unary_rpc_method_handler(self.fail),
            "Watch": grpc.unary_stream_rpc_method_handler(self.watch),
            "Flaky": grpc.unary_unary_rpc_method_handler(self.flaky),
            "Slow": grpc.unary_unary_rpc_method_handler(self.slow),
            "Batch": grpc.stream_unary_rpc_method_handler(self.batch),
            "Chat": grpc.stream_stream_rpc_method_handler(self.chat),
        }
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=16))
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, handlers),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _record(self, request, context):
        with self.lock:
            self.seen.append((request, dict(context.invocation_metadata())))

    def create(self, request, context):
        self._record(request, context)
        context.send_initial_metadata((("x-initial", "yes"),))
        context.set_trailing_metadata((("x-trailing", "done"), ("x-count-bin", b"\x00\x01")))
        return b"created:" + request

    def fail(self, request, context):
        self._record(request, context)
        context.set_trailing_metadata((("x-why", "no such order"),
                                       ("grpc-status-details-bin", b"\x08\x05\x12\x03abc")))
        context.abort(grpc.StatusCode.NOT_FOUND, "order %s not found" % request.decode())

    def flaky(self, request, context):
        self._record(request, context)
        context.abort(grpc.StatusCode.UNAVAILABLE, "try again")

    def slow(self, request, context):
        self._record(request, context)
        time.sleep(1.5)
        return b"slow:" + request

    def batch(self, requests, context):
        parts = list(requests)
        self._record(b"|".join(parts), context)
        return b"batch:" + b"+".join(parts)

    def chat(self, requests, context):
        # Each message is answered before the next is read: a conversation.
        for m in requests:
            yield b"echo:" + m

    def executions(self, key):
        with self.lock:
            return sum(1 for _, metadata in self.seen if metadata.get("idempotency-key") == key)

    def watch(self, request, context):
        self._record(request, context)
        for i in range(3):
            yield b"event-%d" % i
            time.sleep(0.2)

    def close(self):
        self.server.stop(0)


@pytest.fixture(scope="module")
def backend():
    b = Backend()
    yield b
    b.close()


@pytest.fixture
def channel(make_proxy, backend):
    p = make_proxy(extra_top={"upstream": {"url": "http://127.0.0.1:%d" % backend.port,
                                           "protocol": "h2c", "connect_timeout": "1s",
                                           "timeout": "10s"}})
    ch = grpc.insecure_channel("127.0.0.1:%d" % p.port)
    yield ch
    ch.close()


def method(channel, name, stream=False):
    make = channel.unary_stream if stream else channel.unary_unary
    return make("/%s/%s" % (SERVICE, name))


def test_a_unary_call_passes_with_its_metadata_and_trailers(channel, backend):
    answer, call = method(channel, "Create").with_call(
        b"order-1", metadata=(("x-tenant", "acme"),), timeout=10)
    assert answer == b"created:order-1"
    assert ("x-initial", "yes") in call.initial_metadata()
    trailing = dict(call.trailing_metadata())
    assert trailing["x-trailing"] == "done" and trailing["x-count-bin"] == b"\x00\x01"
    assert call.code() == grpc.StatusCode.OK
    request, metadata = backend.seen[-1]
    assert request == b"order-1" and metadata["x-tenant"] == "acme"


def test_an_error_status_arrives_whole(channel):
    with pytest.raises(grpc.RpcError) as raised:
        method(channel, "Fail")(b"42", timeout=10)
    error = raised.value
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details() == "order 42 not found"
    trailing = dict(error.trailing_metadata())
    assert trailing["x-why"] == "no such order"
    assert trailing["grpc-status-details-bin"] == b"\x08\x05\x12\x03abc"


def test_server_streaming_messages_arrive_as_they_are_sent(channel):
    started = time.monotonic()
    arrivals = []
    for message in method(channel, "Watch", stream=True)(b"w", timeout=10):
        arrivals.append((message, time.monotonic() - started))
    assert [m for m, _ in arrivals] == [b"event-0", b"event-1", b"event-2"]
    assert arrivals[0][1] < 0.3  # the first event is not held until the last


def test_large_messages_and_many_concurrent_calls(channel):
    big = b"m" * (1 << 20)
    assert method(channel, "Create")(big, timeout=20) == b"created:" + big
    create = method(channel, "Create")
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda i: create(b"n%d" % i, timeout=20), range(64)))
    assert answers == [b"created:n%d" % i for i in range(64)]


def converse(channel, messages, timeout=10):
    """A bidirectional Chat call that sends each message only once the answer to the
    one before came, as a client in a conversation does: the answers, in order."""
    outbox = queue.Queue()

    def requests():
        while True:
            m = outbox.get()
            if m is None:
                return
            yield m

    call = channel.stream_stream("/%s/Chat" % SERVICE)(requests(), timeout=timeout)
    answers = []
    for m in messages:
        outbox.put(m)
        answers.append(next(call))
    outbox.put(None)
    assert list(call) == []
    assert call.code() == grpc.StatusCode.OK
    return answers


def test_a_bidirectional_call_passes_through_as_a_conversation(channel):
    # Each side waits for the other's message: a proxy that sends the whole request
    # before it reads the answer holds both until the deadline.
    t0 = time.monotonic()
    assert converse(channel, [b"a", b"b", b"c"]) == [b"echo:a", b"echo:b", b"echo:c"]
    assert time.monotonic() - t0 < 3


def test_a_bidirectional_call_on_a_route_not_enabled_passes_through(covered):
    # docs/HTTP2.md: bidirectional methods go on a route with enabled: false.
    _, ch = covered(routes=[{"name": "chat", "path_prefix": "/%s/Chat" % SERVICE,
                             "enabled": False}] + COVERED)
    assert converse(ch, [b"x", b"y"]) == [b"echo:x", b"echo:y"]


COVERED = [{"name": "orders", "path_prefix": "/test.Orders", "key_required": True,
            "methods": ["POST"], "header": "Idempotency-Key", "max_body": "64KiB"}]


@pytest.fixture
def covered(make_proxy, backend):
    def make(routes=COVERED, store=None):
        p = make_proxy(routes=routes, store=store,
                       extra_top={"upstream": {"url": "http://127.0.0.1:%d" % backend.port,
                                               "protocol": "h2c", "connect_timeout": "1s",
                                               "timeout": "10s"}})
        return p, grpc.insecure_channel("127.0.0.1:%d" % p.port)
    return make


def keyed(key):
    return (("idempotency-key", key),)  # gRPC metadata names are lower case


def test_a_retried_call_is_replayed_with_its_messages_and_trailers(covered, backend):
    _, ch = covered()
    key = "grpc-" + uuid.uuid4().hex
    first, call1 = method(ch, "Create").with_call(b"o-1", metadata=keyed(key), timeout=10)
    again, call2 = method(ch, "Create").with_call(b"o-1", metadata=keyed(key), timeout=10)
    assert first == again == b"created:o-1"
    assert backend.executions(key) == 1
    initial = dict(call2.initial_metadata())
    assert initial.get("idempotent-replayed") == "true" and initial.get("x-initial") == "yes"
    assert "idempotent-replayed" not in dict(call1.initial_metadata())
    assert dict(call2.trailing_metadata()) == dict(call1.trailing_metadata())
    assert dict(call2.trailing_metadata())["x-count-bin"] == b"\x00\x01"
    # Another message under the same key: FAILED_PRECONDITION, never executed.
    with pytest.raises(grpc.RpcError) as other:
        method(ch, "Create")(b"o-2", metadata=keyed(key), timeout=10)
    assert other.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert backend.executions(key) == 1


def test_a_stored_error_status_is_replayed_whole(covered, backend):
    _, ch = covered()
    key = "grpc-" + uuid.uuid4().hex
    errors = []
    for _ in range(2):
        with pytest.raises(grpc.RpcError) as raised:
            method(ch, "Fail")(b"7", metadata=keyed(key), timeout=10)
        errors.append(raised.value)
    assert backend.executions(key) == 1  # NOT_FOUND is stored by default
    for e in errors:
        assert e.code() == grpc.StatusCode.NOT_FOUND and e.details() == "order 7 not found"
        trailing = dict(e.trailing_metadata())
        assert trailing["x-why"] == "no such order"
        assert trailing["grpc-status-details-bin"] == b"\x08\x05\x12\x03abc"
    # Trailers-only, as the original was: one HEADERS frame, so the replay's fields
    # reach grpcio as trailing metadata, with the same fields the original carried.
    first, replay = (dict(e.trailing_metadata()) for e in errors)
    assert replay.get("idempotent-replayed") == "true"
    assert "idempotent-replayed" not in first
    for name in ("idempotency-key-expires", "x-request-id", "grpc-status-details-bin", "x-why"):
        assert name in first and name in replay, name
    assert not errors[1].initial_metadata()


def test_statuses_that_say_try_again_are_never_stored(covered, backend):
    _, ch = covered()
    key = "grpc-" + uuid.uuid4().hex
    for _ in range(2):
        with pytest.raises(grpc.RpcError) as raised:
            method(ch, "Flaky")(b"x", metadata=keyed(key), timeout=10)
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert backend.executions(key) == 2  # released: the retry ran the call again


def test_store_grpc_status_decides_what_is_stored(covered, backend):
    routes = [dict(COVERED[0], store_grpc_status=["OK"])]
    _, ch = covered(routes=routes)
    key = "grpc-" + uuid.uuid4().hex
    for _ in range(2):
        with pytest.raises(grpc.RpcError):
            method(ch, "Fail")(b"8", metadata=keyed(key), timeout=10)
    assert backend.executions(key) == 2  # NOT_FOUND is not in the list


def test_refusals_are_grpc_statuses(covered, backend):
    _, ch = covered()
    with pytest.raises(grpc.RpcError) as missing:
        method(ch, "Create")(b"no key", timeout=10)
    assert missing.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "missing-key" in missing.value.details() or "key" in missing.value.details()
    with pytest.raises(grpc.RpcError) as large:
        method(ch, "Create")(b"x" * (128 << 10), metadata=keyed("big-" + uuid.uuid4().hex),
                             timeout=10)
    assert large.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    key = "grpc-" + uuid.uuid4().hex
    slow = method(ch, "Slow").future(b"s", metadata=keyed(key), timeout=10)
    deadline = time.monotonic() + 5
    while backend.executions(key) == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(grpc.RpcError) as in_flight:
        method(ch, "Slow")(b"s", metadata=keyed(key), timeout=10)
    assert in_flight.value.code() == grpc.StatusCode.ABORTED
    assert "request-in-flight" in in_flight.value.details()
    assert slow.result() == b"slow:s" and backend.executions(key) == 1


def test_the_store_down_is_unavailable(covered, backend):
    _, ch = covered(store={"postgres": {"dsn": "postgresql://127.0.0.1:1/none",
                                        "pool_size": 1, "statement_timeout": "1s"}})
    with pytest.raises(grpc.RpcError) as down:
        method(ch, "Create")(b"x", metadata=keyed("grpc-" + uuid.uuid4().hex), timeout=10)
    assert down.value.code() == grpc.StatusCode.UNAVAILABLE


@contextlib.contextmanager
def through_node(make_proxy):
    """A proxy on COVERED in front of Node's http2 server (h2c); yields (node, channel)."""
    node = H2NodeUpstream()
    try:
        p = make_proxy(routes=COVERED, extra_top={"upstream": {
            "url": "http://127.0.0.1:%d" % node.port, "protocol": "h2c", "timeout": "10s"}})
        ch = grpc.insecure_channel("127.0.0.1:%d" % p.port)
        yield node, ch
        ch.close()
    finally:
        node.close()


def test_grpc_timeout_bounds_the_upstream_exchange(make_proxy):
    # The upstream is Node's http2 server, which knows nothing of gRPC deadlines, so
    # only the proxy's bound can end the call (a grpcio server ends it too, with its
    # own DEADLINE_EXCEEDED, which is never stored: the claim would be released, and
    # which of the two came first would be a race).
    with through_node(make_proxy) as (node, ch):
        key = "grpc-" + uuid.uuid4().hex
        slow = keyed(key) + (("x-delay-ms", "1500"),)
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as late:  # upstream.timeout 10 s; deadline 0.5 s
            method(ch, "Slow")(b"t", metadata=slow, timeout=0.5)
        assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        time.sleep(1.6)  # the upstream has answered by now; the proxy stopped waiting at 0.5 s
        with pytest.raises(grpc.RpcError) as retry:
            method(ch, "Slow")(b"t", metadata=slow, timeout=10)
        assert retry.value.code() == grpc.StatusCode.ABORTED
        assert "outcome-indeterminate" in retry.value.details()
        assert len(node.executions(key)) == 1
        assert time.monotonic() - started < 2.6  # the retry was refused, not run for 1.5 s


def test_a_server_stream_the_upstream_breaks_off_ends_unavailable_never_ok(make_proxy):
    """Node's http2 server sends one message, then resets the stream: the client gets
    the message, then UNAVAILABLE (a reset would read as INTERNAL), and a retry is told
    the outcome is unknown (the record is indeterminate)."""
    with through_node(make_proxy) as (node, ch):
        key = "grpc-" + uuid.uuid4().hex
        cut = keyed(key) + (("x-reset-after", "7"),)
        call = method(ch, "Watch", stream=True)(b"w", metadata=cut, timeout=10)
        got = []
        with pytest.raises(grpc.RpcError) as broken:
            for message in call:
                got.append(message)
        assert got == [b"x" * 7]
        assert broken.value.code() == grpc.StatusCode.UNAVAILABLE, broken.value
        with pytest.raises(grpc.RpcError) as retry:
            list(method(ch, "Watch", stream=True)(b"w", metadata=cut, timeout=10))
        assert retry.value.code() == grpc.StatusCode.ABORTED
        assert "outcome-indeterminate" in retry.value.details()
        assert len(node.executions(key)) == 1


def test_a_grpc_answer_replayed_from_an_altered_chunk_ends_data_loss(make_proxy, pg):
    """A 600,000-byte message is stored in three chunks and replayed whole; once a
    chunk is altered in the store, the replay ends DATA_LOSS, never OK."""
    with through_node(make_proxy) as (node, ch):
        key = "grpc-" + uuid.uuid4().hex
        big = keyed(key) + (("x-size", "600000"),)
        first = list(method(ch, "Watch", stream=True)(b"w", metadata=big, timeout=10))
        assert first == [b"x" * 600000]
        assert pg.sql("SELECT chunks FROM idempotency_records WHERE key = '%s'" % key) == "3"
        again = method(ch, "Watch", stream=True)(b"w", metadata=big, timeout=10)
        assert list(again) == first
        assert dict(again.initial_metadata()).get("idempotent-replayed") == "true"
        pg.sql("UPDATE idempotency_chunks SET bytes = set_byte(bytes, 8, get_byte(bytes, 8) # 255)"
               " WHERE key = '%s' AND seq = 2" % key)
        with pytest.raises(grpc.RpcError) as broken:
            list(method(ch, "Watch", stream=True)(b"w", metadata=big, timeout=10))
        assert broken.value.code() == grpc.StatusCode.DATA_LOSS, broken.value
        assert len(node.executions(key)) == 1


def test_streaming_calls_on_a_covered_route(covered, backend):
    _, ch = covered()
    key = "grpc-" + uuid.uuid4().hex
    watch = method(ch, "Watch", stream=True)
    first = list(watch(b"w", metadata=keyed(key), timeout=10))
    again = watch(b"w", metadata=keyed(key), timeout=10)
    assert list(again) == first == [b"event-0", b"event-1", b"event-2"]
    assert dict(again.initial_metadata()).get("idempotent-replayed") == "true"
    assert backend.executions(key) == 1  # the server-streaming answer was stored whole
    # A client-streaming request is buffered whole, then fingerprinted.
    key = "grpc-" + uuid.uuid4().hex
    batch = ch.stream_unary("/%s/Batch" % SERVICE)
    answers = [batch(iter([b"a", b"b", b"c"]), metadata=keyed(key), timeout=10) for _ in range(2)]
    assert answers == [b"batch:a+b+c"] * 2 and backend.executions(key) == 1
    with pytest.raises(grpc.RpcError) as other:
        batch(iter([b"a", b"b"]), metadata=keyed(key), timeout=10)
    assert other.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def watched_twice(first_channel, second_channel, key):
    """A Watch call with `key` on first_channel and, 0.1 s into its stream, the same
    call on second_channel: the first's messages and when it ended, the second's
    messages with when each arrived, and the second call."""
    first = {}

    def run_first():
        first["messages"] = list(method(first_channel, "Watch", stream=True)(
            b"w", metadata=keyed(key), timeout=10))
        first["ended"] = time.monotonic()

    t = threading.Thread(target=run_first)
    t.start()
    time.sleep(0.1)
    call = method(second_channel, "Watch", stream=True)(b"w", metadata=keyed(key), timeout=10)
    arrived = [(time.monotonic(), m) for m in call]
    t.join(timeout=10)
    return first, arrived, call


def assert_followed_live(backend, key, first, arrived, call):
    """The second call got the first's messages, the first of them before the first's
    stream ended, marked replayed, then status OK; the backend ran the call once."""
    assert [m for _, m in arrived] == first["messages"] == [b"event-0", b"event-1", b"event-2"]
    # The first's stream lasts 0.6 s; the second call's first messages are not held
    # until it ends (a wait for the end would have them all after it).
    assert arrived[0][0] < first["ended"] - 0.2, (arrived, first["ended"])
    assert dict(call.initial_metadata()).get("idempotent-replayed") == "true"
    assert call.code() == grpc.StatusCode.OK
    assert backend.executions(key) == 1


def test_a_concurrent_server_streaming_call_attaches_to_the_first(covered, backend):
    """on_concurrent: wait: a second call with the key, 0.1 s into the first's stream,
    gets the messages so far at once, then each as it is sent, then the status."""
    _, ch = covered(routes=[dict(COVERED[0], on_concurrent="wait")])
    key = "grpc-" + uuid.uuid4().hex
    assert_followed_live(backend, key, *watched_twice(ch, ch, key))


def test_a_server_streaming_call_on_another_instance_follows_the_first(covered, backend):
    """As above, the second call on a second instance (one database): it follows the
    first's stream from the store, each message as the first instance stores it, then
    the status from the completed record."""
    routes = [dict(COVERED[0], on_concurrent="wait")]
    _, ch = covered(routes=routes)
    _, other = covered(routes=routes)
    key = "grpc-" + uuid.uuid4().hex
    assert_followed_live(backend, key, *watched_twice(ch, other, key))


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx comes from install-deps.sh")
def test_nginx_as_the_http2_upstream_with_grpc_pass_behind_it(make_proxy, backend):
    # nginx speaks HTTP/2 in cleartext: gRPC calls go on to the grpcio backend by
    # grpc_pass, anything else nginx answers itself.
    nginx = NginxUpstream(http2=True, locations="""
    location /test.Orders/ { grpc_pass grpc://127.0.0.1:%d; }
%s""" % (backend.port, NginxUpstream.ANSWER))
    try:
        p = make_proxy(routes=COVERED,
                       extra_top={"upstream": {"url": "http://127.0.0.1:%d" % nginx.port,
                                               "protocol": "h2c", "timeout": "10s"}})
        plain = request(p.port, "POST", "/v1/x", body=b"{}")
        assert plain.status == 201 and json.loads(plain.body)["protocol"] == "HTTP/2.0"
        ch = grpc.insecure_channel("127.0.0.1:%d" % p.port)
        key = "nginx-" + uuid.uuid4().hex
        answers = [method(ch, "Create").with_call(b"n", metadata=keyed(key), timeout=10)
                   for _ in range(2)]
        assert [a for a, _ in answers] == [b"created:n"] * 2 and backend.executions(key) == 1
        assert dict(answers[1][1].initial_metadata()).get("idempotent-replayed") == "true"
        assert dict(answers[1][1].trailing_metadata())["x-trailing"] == "done"
        with pytest.raises(grpc.RpcError) as failed:
            method(ch, "Fail")(b"9", metadata=keyed("nginx-" + uuid.uuid4().hex), timeout=10)
        assert failed.value.code() == grpc.StatusCode.NOT_FOUND
        assert dict(failed.value.trailing_metadata())["x-why"] == "no such order"
        ch.close()
    finally:
        nginx.close()


def test_a_head_refused_before_any_route_is_a_grpc_status_too(channel):
    # More metadata entries than server.max_header_fields (100): over HTTP that is a
    # 431; a gRPC client gets RESOURCE_EXHAUSTED.
    metadata = tuple(("x-m%d" % i, "v") for i in range(120))
    with pytest.raises(grpc.RpcError) as refused:
        method(channel, "Create")(b"x", metadata=metadata, timeout=10)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "header-too-large" in refused.value.details()


# The behaviour table's other rows for gRPC calls: scopes, shadow mode, encryption at
# rest, metrics, logs and traces hold as they do for HTTP requests.

SCOPE_KEY = "an-hmac-key-for-tests-0123456789abcdef"


def test_two_identities_reusing_one_key_never_share_a_grpc_answer(make_proxy, backend, pg):
    routes = [dict(COVERED[0], scope={"from": "authorization"})]
    p = make_proxy(routes=routes, extra_top={
        "scope_key": SCOPE_KEY,
        "upstream": {"url": "http://127.0.0.1:%d" % backend.port, "protocol": "h2c",
                     "timeout": "10s"}})
    ch = grpc.insecure_channel("127.0.0.1:%d" % p.port)
    key = "grpc-" + uuid.uuid4().hex
    create = method(ch, "Create")
    calls = [(who, body) for who, body in (("Bearer alice-token", b"a"), ("Bearer bob-token", b"b"))
             for _ in range(2)]
    answers = [create.with_call(body, metadata=keyed(key) + (("authorization", who),),
                                timeout=10) for who, body in calls]
    # Each identity's call ran once and its retry got its own answer, never the
    # other's: different messages under one key are different records, not a mismatch.
    assert [a for a, _ in answers] == [b"created:a", b"created:a", b"created:b", b"created:b"]
    assert [dict(c.initial_metadata()).get("idempotent-replayed") for _, c in answers] == \
        [None, "true", None, "true"]
    assert backend.executions(key) == 2
    scopes = pg.sql("SELECT scope FROM idempotency_records WHERE key = '%s'" % key).splitlines()
    assert len(scopes) == 2 and all(s.startswith("hmac:") for s in scopes)
    assert "token" not in pg.sql("SELECT string_agg(scope, '') FROM idempotency_records"
                                 " WHERE key = '%s'" % key)
    ch.close()


def test_shadow_mode_forwards_every_call_and_counts_what_it_would_have_done(covered, backend):
    p, ch = covered(routes=[dict(COVERED[0], mode="shadow")])
    key = "grpc-" + uuid.uuid4().hex
    create = method(ch, "Create")
    first, _ = create.with_call(b"s", metadata=keyed(key), timeout=10)
    again, call = create.with_call(b"s", metadata=keyed(key), timeout=10)  # enforce: replay
    other = create(b"t", metadata=keyed(key), timeout=10)                # enforce: mismatch
    unkeyed = create(b"u", timeout=10)                                   # enforce: missing key
    assert (first, again, other, unkeyed) == (b"created:s", b"created:s", b"created:t",
                                              b"created:u")
    assert "idempotent-replayed" not in dict(call.initial_metadata())
    assert backend.executions(key) == 3  # nothing blocked, nothing replayed
    m = lambda o, n=1: p.wait_metric("idemproxy_requests_total", n, route="orders", outcome=o)
    assert (m("shadow_would_replay"), m("shadow_would_mismatch"), m("shadow_would_reject")) == \
        (1, 1, 1)
    ch.close()


def test_sealed_records_hold_no_message_or_metadata_and_still_replay(covered, backend, pg,
                                                                    tmp_path):
    import os
    import secrets
    path = tmp_path / "keys"
    path.write_text("k1:%s\n" % secrets.token_hex(32))
    os.chmod(path, 0o600)
    _, ch = covered(store={"postgres": {"dsn": None, "pool_size": 4},
                           "encryption": {"key_file": str(path)}})
    key = "grpc-" + uuid.uuid4().hex
    card = b"card-4242424242424242"
    answers = [method(ch, "Create").with_call(card, metadata=keyed(key), timeout=10)
               for _ in range(2)]
    assert [a for a, _ in answers] == [b"created:" + card] * 2 and backend.executions(key) == 1
    assert dict(answers[1][1].initial_metadata()).get("idempotent-replayed") == "true"
    assert dict(answers[1][1].trailing_metadata())["x-trailing"] == "done"
    row = pg.sql("SELECT key_id || ' ' || encode(coalesce(headers, ''), 'escape')"
                 " || encode(coalesce(body, ''), 'escape') FROM idempotency_records"
                 " WHERE key = '%s'" % key)
    assert row.startswith("k1 ")
    for plaintext in ("4242424242424242", "x-trailing", "x-initial", "grpc-status",
                      "application/grpc"):
        assert plaintext not in row.lower(), plaintext
    ch.close()


def test_metrics_logs_and_traces_for_grpc_calls(covered, backend):
    p, ch = covered()
    key = "grpc-" + uuid.uuid4().hex
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    create = method(ch, "Create")
    create(b"m", metadata=keyed(key) + (("traceparent", trace),), timeout=10)   # executed
    create(b"m", metadata=keyed(key), timeout=10)                               # replayed
    with pytest.raises(grpc.RpcError):
        create(b"n", metadata=keyed(key), timeout=10)                           # mismatch
    with pytest.raises(grpc.RpcError):
        create(b"m", timeout=10)                                                # missing_key
    with pytest.raises(grpc.RpcError):
        method(ch, "Flaky")(b"f", metadata=keyed(key + "-f"), timeout=10)       # released
    m = lambda o, n=1: p.wait_metric("idemproxy_requests_total", n, route="orders", outcome=o)
    assert [m(o) for o in ("executed", "replayed", "mismatch", "missing_key", "released")] == \
        [1, 1, 1, 1, 1]
    # The upstream got the caller's trace; the log names it and the outcomes, never the key.
    assert [md.get("traceparent") for r, md in backend.seen if r == b"m"][0] == trace
    p.stop()
    log = p.read_log()
    assert "4bf92f3577b34da6a3ce929d0e0e4736" in log
    for outcome in ("executed", "replayed", "mismatch"):
        assert "outcome=" + outcome in log
    assert key not in log
    ch.close()


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx comes from install-deps.sh")
def test_an_answer_with_a_content_length_keeps_its_trailers(make_proxy, tmp_path):
    # nginx answering gRPC calls itself from a file: the answer has a content-length
    # and its grpc-status comes in trailers (add_trailer). Over the HTTP/1.1 hop
    # inside the proxy only chunked coding carries trailers, so the content-length
    # must give way (RFC 9112 §6.1, §7.1.2); with it, grpcio saw "Stream removed".
    import struct
    message = b"created:from-a-file"
    for service in ("test.Orders", "test.Plain"):
        (tmp_path / service).mkdir()
        (tmp_path / service / "Create").write_bytes(b"\x00" + struct.pack(">I", len(message)) +
                                                    message)
    nginx = NginxUpstream(http2=True, locations="""
    location / {
      root %s;
      default_type application/grpc;
      add_trailer grpc-status 0 always;
      add_trailer x-served-by file always;
      error_page 405 =200 $uri;
    }""" % tmp_path)
    try:
        p = make_proxy(routes=COVERED,
                       extra_top={"upstream": {"url": nginx.url, "protocol": "h2c",
                                               "timeout": "10s"}})
        ch = grpc.insecure_channel("127.0.0.1:%d" % p.port)
        plain, call = ch.unary_unary("/test.Plain/Create").with_call(b"p", timeout=10)
        assert plain == message and dict(call.trailing_metadata())["x-served-by"] == "file"
        key = "file-" + uuid.uuid4().hex
        answers = [method(ch, "Create").with_call(b"c", metadata=keyed(key), timeout=10)
                   for _ in range(2)]
        assert [a for a, _ in answers] == [message] * 2
        assert dict(answers[1][1].initial_metadata()).get("idempotent-replayed") == "true"
        assert dict(answers[1][1].trailing_metadata())["x-served-by"] == "file"
        assert sum(1 for line in nginx.log_lines() if "key=" + key in line) == 1
        ch.close()
    finally:
        nginx.close()


def grpc_frame(message):
    return b"\x00" + len(message).to_bytes(4, "big") + message


def test_trailers_only_answers_are_one_headers_frame(make_proxy, backend):
    """gRPC's Trailers-Only answer is one HEADERS frame with END_STREAM: an upstream's
    passes through as one, and so is every refusal of the proxy's own; never HEADERS
    plus an empty DATA frame, nor a head with separate trailers."""
    from h2_peer import Client
    p = make_proxy(routes=[{"name": "orders", "path_prefix": "/%s/Create" % SERVICE,
                            "methods": ["POST"], "header": "idempotency-key",
                            "key_required": True}],
                   extra_top={"upstream": {"url": "http://127.0.0.1:%d" % backend.port,
                                           "protocol": "h2c", "timeout": "10s"}})
    c = Client(p.port)
    grpc_fields = [("content-type", "application/grpc"), ("te", "trailers")]
    upstream_status = c.request("POST", "/%s/Fail" % SERVICE, grpc_frame(b"42"), grpc_fields)
    refused = c.request("POST", "/%s/Create" % SERVICE, grpc_frame(b"no key"), grpc_fields)
    failed, refusal = c.wait(upstream_status, refused)
    c.close()
    for r in (failed, refusal):
        assert r.status == 200 and r.head_ended, (r.headers, r.trailers)
        assert r.data_frames == 0 and r.trailers is None
    assert failed.header("grpc-status") == "5"  # NOT_FOUND, from the grpcio server
    assert failed.header("x-why") == "no such order"
    assert refusal.header("grpc-status") == "3"  # INVALID_ARGUMENT: the key is missing

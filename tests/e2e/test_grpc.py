"""gRPC through idemproxy, with real peers on both sides: a grpcio client and a
grpcio server (the C core), HTTP/2 end to end (listen takes h2c; upstream.protocol
h2c). Messages are raw bytes (generic handlers), so no protobuf code is generated.

These calls are on a route no idempotency rule covers: they pass through. What they
show is that gRPC's framing survives the proxy: the length-prefixed messages, the
initial metadata, and the status in the trailers (grpc-status, grpc-message,
grpc-status-details-bin, custom trailing metadata), including trailers-only answers
(gRPC's HTTP/2 protocol; RFC 9113 §8.1)."""
import concurrent.futures
import threading
import time

import pytest

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

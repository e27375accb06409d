// The pump between the two hops (proxy/pump.hpp) and the whole answer read on top of
// it (proxy/buffered.hpp), with fakes at both seams and no sockets: what crosses, in
// what order, and where each side stops when the other fails.
#include "proxy/pump.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>

#include "fakes.hpp"
#include "proxy/buffered.hpp"

namespace idemproxy::testing::pump_test {
namespace {

using namespace std::chrono_literals;

template <class Body>
void run(Body body) {
  asio::io_context io;
  asio::co_spawn(io, std::move(body), [](const std::exception_ptr& e) {
    if (e) std::rethrow_exception(e);
  });
  io.run();
}

// Heads (interim answers first), then the body piece by piece, then trailers.
struct Relayed {
  proxy::RelayError result = proxy::RelayError::write;
  beast::error_code read_error;
};
Relayed relay(FakeCall& call, FakeExchange& client, bool expect_trailers = false,
              std::string prefix = {}) {
  Relayed r;
  run([&]() -> asio::awaitable<void> {
    const std::optional<std::uint64_t> unbounded;
    const FieldsAllocator heap;
    const auto by = std::chrono::steady_clock::now() + 5s;
    const auto ec = co_await proxy::read_final_head(call, &client, false, unbounded, heap, by);
    EXPECT_FALSE(ec) << ec.message();
    r.result =
        co_await proxy::relay_answer(call, client, prefix, expect_trailers, 5s, r.read_error);
  });
  return r;
}

TEST(Pump, EachPieceReachesTheClientBeforeTheNextIsRead) {
  Log log;
  Script s;
  s.heads = {{103, {{"Link", "</a.css>; rel=preload"}}},
             {200, {{"Content-Type", "text/event-stream"}}}};
  s.pieces = {"data: 1\n\n", "data: 2\n\n", "data: 3\n\n"};
  s.trailers = {{"x-sum", "6"}};
  auto* call = new FakeCall(log, s);
  upstream::UpstreamCallPtr owned(call);
  FakeExchange client(log);
  const auto r = relay(*call, client);
  EXPECT_EQ(r.result, proxy::RelayError::none);
  EXPECT_EQ(client.status, 200);
  EXPECT_EQ(client.body, "data: 1\n\ndata: 2\n\ndata: 3\n\n");
  ASSERT_EQ(client.trailers.size(), 1U);
  EXPECT_EQ(client.trailers[0].value, "6");
  // Relayed as it arrives: the proxy reads a piece only once the client has the one
  // before (backpressure), and the interim answer goes on before the final head.
  const Log expected{"upstream sent head 103",
                     "client got 103",
                     "upstream sent head 200",
                     "client got head 200",
                     "upstream sent data: 1\n\n",
                     "client got data: 1\n\n",
                     "upstream sent data: 2\n\n",
                     "client got data: 2\n\n",
                     "upstream sent data: 3\n\n",
                     "client got data: 3\n\n",
                     "client got end"};
  EXPECT_EQ(log, expected);
}

TEST(Pump, AnInterimAnswerWithNowhereToGoIsDropped) {
  Log log;
  Script s;
  s.heads = {{102, {}}, {201, {}}};
  s.framing = Framing::of(2);
  s.pieces = {"ok"};
  auto* call = new FakeCall(log, s);
  upstream::UpstreamCallPtr owned(call);
  run([&]() -> asio::awaitable<void> {
    const std::optional<std::uint64_t> unbounded;
    const FieldsAllocator heap;
    const auto by = std::chrono::steady_clock::now() + 5s;
    const auto ec = co_await proxy::read_final_head(*call, nullptr, false, unbounded, heap, by);
    EXPECT_FALSE(ec);
  });
  EXPECT_EQ(call->head().result_int(), 201U);
  EXPECT_EQ(log, (Log{"upstream sent head 102", "upstream sent head 201"}));
}

TEST(Pump, AnUpstreamCutMidBodyIsAReadErrorAndTheClientNeverGetsAnEnd) {
  Log log;
  Script s;
  s.pieces = {"part"};
  s.cut = bhttp::error::partial_message;
  auto* call = new FakeCall(log, s);
  upstream::UpstreamCallPtr owned(call);
  FakeExchange client(log);
  const auto r = relay(*call, client);
  EXPECT_EQ(r.result, proxy::RelayError::read);
  EXPECT_EQ(r.read_error, bhttp::error::partial_message);
  EXPECT_EQ(client.body, "part");
  EXPECT_FALSE(client.ended);
}

TEST(Pump, AClientGoneMidAnswerStopsTheReading) {
  Log log;
  Script s;
  s.pieces = {"a", "b", "c", "d"};
  auto* call = new FakeCall(log, s);
  upstream::UpstreamCallPtr owned(call);
  FakeExchange client(log);
  client.gone_after_sends = 1;
  const auto r = relay(*call, client);
  EXPECT_EQ(r.result, proxy::RelayError::write);
  EXPECT_EQ(client.body, "a");
  // The second piece was read and could not be sent; nothing after it was read.
  EXPECT_EQ(std::count(log.begin(), log.end(), "upstream sent c"), 0);
}

TEST(Pump, AnAnswerWithoutABodyFreesTheCallBeforeItsHeadGoesOut) {
  Log log;
  Script s;
  s.heads = {{204, {}}};
  s.framing = Framing::none();
  auto* call = new FakeCall(log, s);
  upstream::UpstreamCallPtr owned(call);
  FakeExchange client(log);
  const auto r = relay(*call, client);
  EXPECT_EQ(r.result, proxy::RelayError::none);
  EXPECT_EQ(client.framing.kind, Framing::Kind::none);
  EXPECT_EQ(log, (Log{"upstream sent head 204", "upstream sent end", "client got head 204"}));
}

TEST(Pump, AGrpcAnswerIsFramedForTrailersWhateverItsLength) {
  Log log;
  Script s;
  s.framing = Framing::of(5);
  s.pieces = {std::string("\0\0\0\0\0", 5)};
  s.trailers = {{"grpc-status", "0"}};
  auto* call = new FakeCall(log, s);
  upstream::UpstreamCallPtr owned(call);
  FakeExchange client(log);
  relay(*call, client, /*expect_trailers=*/true);
  EXPECT_TRUE(client.framing.trailers);
  EXPECT_EQ(client.framing.length, 5U);
  ASSERT_EQ(client.trailers.size(), 1U);
  EXPECT_EQ(client.trailers[0].name, "grpc-status");
}

// The client's request body pumped up to `call`.
struct Sent {
  proxy::RelayError result = proxy::RelayError::write;
  BodyPiece::Error read_error = BodyPiece::Error::none;
};
Sent send_up(FakeCall& call, FakeExchange& client, bool te_trailers = false) {
  Sent out;
  run([&]() -> asio::awaitable<void> {
    beast::error_code write_error;
    const std::optional<Exchange::TimePoint> no_deadline;
    const http::ExtraFields none;
    out.result = co_await proxy::send_request(call, client.head(), none, client, te_trailers, 5s,
                                              no_deadline, out.read_error, write_error);
  });
  return out;
}

TEST(Pump, ARequestBodyGoesUpAsTheClientSendsIt) {
  Log log;
  FakeExchange client(log, {"x", "y"});
  auto* call = new FakeCall(log, Script{});
  upstream::UpstreamCallPtr owned(call);
  EXPECT_EQ(send_up(*call, client, true).result, proxy::RelayError::none);
  EXPECT_EQ(call->request_body, "xy");
  EXPECT_TRUE(call->request_ended);
  EXPECT_TRUE(call->te_trailers);
  EXPECT_EQ(log, (Log{"upstream got head", "client sent x", "upstream got x", "client sent y",
                      "upstream got y (last)"}));
}

TEST(Pump, AnUpstreamThatAnswersEarlyTakesNoMoreOfTheBody) {
  Log log;
  FakeExchange client(log, {"x", "y", "z"});
  Script s;
  s.answers_early = true;
  auto* call = new FakeCall(log, s);
  upstream::UpstreamCallPtr owned(call);
  EXPECT_EQ(send_up(*call, client).result, proxy::RelayError::none);
  EXPECT_EQ(client.pieces_read, 1);
  EXPECT_EQ(call->request_body, "x");
}

TEST(Pump, AClientThatStopsSendingIsAReadErrorWithItsCause) {
  Log log;
  FakeExchange client(log, {"x"});
  client.fails_with = BodyPiece::Error::gone;
  auto* call = new FakeCall(log, Script{});
  upstream::UpstreamCallPtr owned(call);
  const Sent sent = send_up(*call, client);
  EXPECT_EQ(sent.result, proxy::RelayError::read);
  EXPECT_EQ(sent.read_error, BodyPiece::Error::gone);
  EXPECT_FALSE(call->request_ended);  // the upstream never takes part of a body for all
}

// ---- The whole answer (buffered.hpp).

proxy::UpstreamAnswer buffered(FakeUpstream& upstream, std::uint64_t max_answer,
                               Exchange* interim_to = nullptr) {
  proxy::UpstreamAnswer out;
  run([&]() -> asio::awaitable<void> {
    StringRequest request;
    request.method(bhttp::verb::post);
    request.body() = "{}";
    const http::ExtraFields none;
    out = co_await proxy::round_trip(upstream, request, none, false, interim_to, 5s, max_answer);
  });
  return out;
}

TEST(Buffered, AWholeAnswerKeepsItsTrailersApartFromItsHead) {
  Log log;
  FakeUpstream upstream(log);
  Script s;
  s.heads = {{100, {}}, {201, {{"Content-Type", "application/json"}}}};
  s.pieces = {R"({"id")", R"(:1})"};
  s.trailers = {{"x-sum", "1"}};
  upstream.scripts = {s};
  FakeExchange client(log);
  const auto a = buffered(upstream, 1024, &client);
  ASSERT_FALSE(a.error);
  EXPECT_TRUE(a.sent);
  EXPECT_EQ(a.response.result_int(), 201U);
  EXPECT_EQ(a.response.body(), R"({"id":1})");
  ASSERT_EQ(a.trailers.size(), 1U);
  EXPECT_EQ(upstream.last.body, "{}");
  EXPECT_TRUE(upstream.last.ended);
}

TEST(Buffered, AnAnswerOverTheLimitIsHandedOnToStreamWithWhatWasRead) {
  Log log;
  FakeUpstream upstream(log);
  Script s;
  s.pieces = {"0123456789", "abcdefghij", "end"};
  upstream.scripts = {s};
  const auto a = buffered(upstream, 15);
  ASSERT_FALSE(a.error);
  ASSERT_TRUE(a.oversized);
  EXPECT_EQ(a.oversized->prefix, "0123456789abcdefghij");
  // The rest is still the call's, never dropped: the pump relays it on.
  EXPECT_EQ(std::count(log.begin(), log.end(), "upstream sent end"), 0);
}

TEST(Buffered, ADeclaredLengthOverTheLimitIsHandedOnBeforeAnyBodyIsRead) {
  Log log;
  FakeUpstream upstream(log);
  Script s;
  s.framing = Framing::of(100);
  s.pieces = {std::string(100, 'x')};
  upstream.scripts = {s};
  const auto a = buffered(upstream, 15);
  ASSERT_TRUE(a.oversized);
  EXPECT_EQ(a.oversized->prefix, "");
}

TEST(Buffered, ARequestRefusedUnprocessedWasNotSent) {
  Log log;
  FakeUpstream upstream(log);
  Script s;
  s.head_error = asio::error::connection_refused;
  s.refused = true;
  upstream.scripts = {s};
  const auto a = buffered(upstream, 1024);
  ASSERT_TRUE(a.error);
  EXPECT_FALSE(a.sent);  // a retry may execute it: nothing reached the upstream
  EXPECT_EQ(a.error->kind, ProblemKind::upstream_unreachable);
}

TEST(Buffered, AnUpstreamCutAfterTheRequestWentMayHaveActed) {
  Log log;
  FakeUpstream upstream(log);
  Script s;
  s.pieces = {"half"};
  s.cut = bhttp::error::partial_message;
  upstream.scripts = {s};
  const auto a = buffered(upstream, 1024);
  ASSERT_TRUE(a.error);
  EXPECT_TRUE(a.sent);
  EXPECT_EQ(a.error->kind, ProblemKind::upstream_failed);
}

TEST(Buffered, ATimeoutIsTheUpstreamsTimeout) {
  Log log;
  FakeUpstream upstream(log);
  Script s;
  s.head_error = beast::error::timeout;
  upstream.scripts = {s};
  const auto a = buffered(upstream, 1024);
  ASSERT_TRUE(a.error);
  EXPECT_EQ(a.error->kind, ProblemKind::upstream_timeout);
}

TEST(Buffered, NoConnectionIsUnreachableAndNothingWasSent) {
  Log log;
  FakeUpstream upstream(log);  // no script: connection refused
  const auto a = buffered(upstream, 1024);
  ASSERT_TRUE(a.error);
  EXPECT_FALSE(a.sent);
  EXPECT_EQ(a.error->kind, ProblemKind::upstream_unreachable);
}

}  // namespace
}  // namespace idemproxy::testing::pump_test

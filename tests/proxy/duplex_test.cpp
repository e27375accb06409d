// A full-duplex exchange (proxy/duplex.hpp) with fakes at both seams and no sockets:
// the request goes up while the answer comes down, as a bidirectional gRPC call
// needs; the answer's end stops the request; the request's failure stops the answer;
// and the wait for a head counts from the request's end.
#include "proxy/duplex.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>

#include "fakes.hpp"

namespace idemproxy::testing::duplex_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Duplexed {
  proxy::RequestSide::Outcome sent;
  beast::error_code head_error;
  proxy::RelayError relayed = proxy::RelayError::write;
  beast::error_code read_error;
  Clock::duration took{};
};

// The request's side runs beside the answer's, as pass-through runs them.
Duplexed duplex(FakeCall& call, FakeExchange& client, Duration timeout = 5s) {
  Duplexed r;
  asio::io_context io;
  const auto t0 = Clock::now();
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const http::ExtraFields none;
        const auto hec =
            co_await proxy::send_request_head(call, client.head(), none, client, false, timeout);
        EXPECT_FALSE(hec) << hec.message();
        proxy::RequestSide request(co_await asio::this_coro::executor, call, client.head(), none,
                                   client, false, timeout, std::nullopt);
        request.start();
        const std::optional<std::uint64_t> unbounded;
        const FieldsAllocator heap;
        r.head_error = co_await proxy::read_final_head(call, &client, false, unbounded, heap,
                                                       Clock::time_point::max());
        request.head_read();
        if (!r.head_error) {
          r.relayed = co_await proxy::relay_answer(call, client, {}, false, 5s, r.read_error);
        }
        r.sent = co_await request.finish();
      },
      [](const std::exception_ptr& e) {
        if (e) std::rethrow_exception(e);
      });
  io.run();
  r.took = Clock::now() - t0;
  return r;
}

Script conversation(std::vector<std::string> pieces) {
  Script s;
  s.duplex = true;
  s.pieces = std::move(pieces);
  return s;
}

TEST(Duplex, EachSideAnswersTheOthersPieceBeforeItsNextIsRead) {
  Log log;
  FakeExchange client(log, {"a", "b", "c"});
  client.duplex = true;
  auto* call = new FakeCall(log, conversation({"A", "B", "C"}));
  upstream::UpstreamCallPtr owned(call);
  const Duplexed r = duplex(*call, client);
  EXPECT_FALSE(r.head_error) << r.head_error.message();
  EXPECT_EQ(r.relayed, proxy::RelayError::none);
  EXPECT_EQ(r.sent.sent, proxy::RelayError::none);
  EXPECT_EQ(client.body, "ABC");
  EXPECT_TRUE(client.ended);
  EXPECT_EQ(call->request_body, "abc");
  EXPECT_TRUE(call->request_ended);
  // A relay that sent the request first would wait for "b" before any answer came.
  const auto at = [&](const std::string& event) {
    return std::find(log.begin(), log.end(), event) - log.begin();
  };
  EXPECT_LT(at("client got A"), at("client sent b"));
  EXPECT_LT(at("upstream got b"), at("client got B"));
  EXPECT_LT(at("client got B"), at("client sent c"));
  EXPECT_LT(r.took, 1s);
}

TEST(Duplex, TheAnswersEndStopsARequestWhoseClientKeepsSending) {
  Log log;
  FakeExchange client(log, {"a"});
  client.duplex = true;
  client.stays_open = true;  // a client still sending when the answer is whole
  Script s;                  // answers whole at once
  s.pieces = {"done"};
  auto* call = new FakeCall(log, s);
  upstream::UpstreamCallPtr owned(call);
  const Duplexed r = duplex(*call, client);
  EXPECT_EQ(r.relayed, proxy::RelayError::none);
  EXPECT_EQ(client.body, "done");
  EXPECT_TRUE(client.ended);
  EXPECT_NE(std::find(log.begin(), log.end(), "client body dropped"), log.end());
  EXPECT_FALSE(call->request_ended);  // the upstream never takes part of a body for all
  EXPECT_LT(r.took, 1s);              // not the client's 2 s
}

TEST(Duplex, AnAnswerThatFailsFirstIsNotBlamedOnTheBodyItsEndStopped) {
  Log log;
  FakeExchange client(log, {"a"});
  client.duplex = true;
  client.stays_open = true;
  Script s = conversation({"A"});
  s.head_error = asio::error::connection_reset;  // the upstream reset the stream
  auto* call = new FakeCall(log, s);
  upstream::UpstreamCallPtr owned(call);
  const Duplexed r = duplex(*call, client);
  EXPECT_EQ(r.head_error, asio::error::connection_reset);
  EXPECT_NE(std::find(log.begin(), log.end(), "client body dropped"), log.end());
  // The body was dropped because the answer failed: the answer's failure is the story.
  EXPECT_EQ(r.sent.sent, proxy::RelayError::none);
  EXPECT_LT(r.took, 1s);
}

TEST(Duplex, AClientBodyThatBreaksOffEndsTheAnswersReadAndSaysWhy) {
  Log log;
  FakeExchange client(log, {"a"});
  client.duplex = true;
  client.fails_with = BodyPiece::Error::gone;
  auto* call = new FakeCall(log, conversation({"A", "B"}));
  upstream::UpstreamCallPtr owned(call);
  const Duplexed r = duplex(*call, client);
  EXPECT_EQ(r.sent.sent, proxy::RelayError::read);
  EXPECT_EQ(r.sent.read_error, BodyPiece::Error::gone);
  EXPECT_NE(std::find(log.begin(), log.end(), "upstream interrupted"), log.end());
  EXPECT_EQ(r.relayed, proxy::RelayError::read);  // B never came: no end for the client
  EXPECT_EQ(client.body, "A");
  EXPECT_FALSE(client.ended);
  EXPECT_LT(r.took, 1s);
}

TEST(Duplex, TheWaitForAHeadCountsFromTheRequestsEnd) {
  Log log;
  FakeExchange client(log, {"a"});
  client.duplex = true;
  Script s = conversation({"late"});
  s.delay = 1500ms;  // the upstream would answer, but after the timeout
  auto* call = new FakeCall(log, s);
  upstream::UpstreamCallPtr owned(call);
  const Duplexed r = duplex(*call, client, 100ms);
  EXPECT_EQ(r.sent.sent, proxy::RelayError::none);
  EXPECT_TRUE(call->request_ended);
  EXPECT_TRUE(r.sent.head_late);
  EXPECT_TRUE(r.head_error);
  EXPECT_NE(std::find(log.begin(), log.end(), "upstream interrupted"), log.end());
  EXPECT_LT(r.took, 1s);
}

}  // namespace
}  // namespace idemproxy::testing::duplex_test

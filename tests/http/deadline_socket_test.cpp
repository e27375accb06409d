// DeadlineSocket (issue 26): one deadline per socket, armed lazily, with what
// beast::tcp_stream promised kept. Each test runs a real socket pair on loopback.
#include "http/deadline_socket.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <optional>

using namespace idemproxy::http;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

struct Pair {
  asio::io_context io;
  std::optional<DeadlineSocket> ours;  // the socket under test
  std::optional<tcp::socket> peer;     // the other end, a plain socket

  Pair() {
    tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    tcp::socket client(io);
    client.connect(acceptor.local_endpoint());
    peer.emplace(acceptor.accept());
    ours.emplace(std::move(client));
  }
};

struct ReadResult {
  beast::error_code ec;
  std::size_t bytes = 0;
  Clock::duration took{};
};

// Starts one read on `s` and runs the context until it completes.
ReadResult read_once(Pair& p) {
  ReadResult r;
  char buf[16];
  const auto started = Clock::now();
  bool done = false;
  p.ours->async_read_some(asio::buffer(buf), [&](beast::error_code ec, std::size_t n) {
    r = {ec, n, Clock::now() - started};
    done = true;
  });
  p.io.restart();
  while (!done && p.io.run_one() > 0) {
  }
  return r;
}

// Sends `bytes` from the peer after `delay`, on the same context.
void send_later(Pair& p, Clock::duration delay, std::string_view bytes) {
  auto timer = std::make_shared<asio::steady_timer>(p.io, delay);
  timer->async_wait(
      [&p, timer, bytes](beast::error_code) { asio::write(*p.peer, asio::buffer(bytes)); });
}

// Sets the deadline `d` from now and reads one byte the peer sends at once: the
// timer is then armed for that deadline, and nothing is pending.
void arm_with_a_read(Pair& p, Clock::duration d) {
  p.ours->expires_after(d);
  send_later(p, 1ms, "a");
  ASSERT_FALSE(read_once(p).ec);
}

}  // namespace

TEST(DeadlineSocket, AReadPendingPastTheDeadlineTimesOutAndClosesTheSocket) {
  Pair p;
  p.ours->expires_after(50ms);
  const auto r = read_once(p);
  EXPECT_EQ(r.ec, beast::error::timeout);
  EXPECT_GE(r.took, 45ms);
  EXPECT_LT(r.took, 1s);
  EXPECT_FALSE(p.ours->socket().is_open());  // as beast::tcp_stream closes it
}

TEST(DeadlineSocket, DataBeforeTheDeadlineIsRead) {
  Pair p;
  p.ours->expires_after(1s);
  send_later(p, 20ms, "hello");
  const auto r = read_once(p);
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.bytes, 5U);
}

TEST(DeadlineSocket, ADeadlineMovedLaterIsKeptWhenTheEarlierOneWasArmed) {
  // The first read arms the timer for 60 ms; the second read's deadline is 400 ms
  // out. The timer fires at 60 ms, finds the deadline moved, and waits again: data
  // at 200 ms is read, not refused.
  Pair p;
  ASSERT_NO_FATAL_FAILURE(arm_with_a_read(p, 60ms));
  p.ours->expires_after(400ms);
  send_later(p, 200ms, "b");
  const auto r = read_once(p);
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_GE(r.took, 150ms);
  // And the moved deadline still holds: nothing more arrives, the read times out.
  const auto late = read_once(p);
  EXPECT_EQ(late.ec, beast::error::timeout);
}

TEST(DeadlineSocket, ADeadlineMovedEarlierFiresAtTheEarlierTime) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(arm_with_a_read(p, 10s));
  p.ours->expires_after(50ms);
  const auto r = read_once(p);
  EXPECT_EQ(r.ec, beast::error::timeout);
  EXPECT_LT(r.took, 2s);
}

TEST(DeadlineSocket, AnOperationStartedAfterTheDeadlinePassedTimesOutAtOnce) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(arm_with_a_read(p, 20ms));
  // Let the deadline pass with nothing pending: the timer fires and does nothing.
  asio::steady_timer wait(p.io, 80ms);
  wait.async_wait([](beast::error_code) {});
  p.io.restart();
  p.io.run();
  const auto r = read_once(p);
  EXPECT_EQ(r.ec, beast::error::timeout);
  EXPECT_LT(r.took, 500ms);
}

TEST(DeadlineSocket, NoDeadlineMeansNoTimeoutAndCancelIsNotATimeout) {
  Pair p;
  p.ours->expires_after(30ms);
  p.ours->expires_never();
  asio::steady_timer cancel_at(p.io, 100ms);
  cancel_at.async_wait([&](beast::error_code) { p.ours->cancel(); });
  const auto r = read_once(p);
  EXPECT_EQ(r.ec, asio::error::operation_aborted);
  EXPECT_GE(r.took, 90ms);
  EXPECT_TRUE(p.ours->socket().is_open());
}

TEST(DeadlineSocket, AHandoverOnOneThreadKeepsTheArmedWaitAndItStillServesTheNextOwner) {
  // A pooled upstream connection with one I/O thread: the kept wait, firing at 60 ms,
  // finds the next owner's later deadline and waits on for it: data at 200 ms is
  // read, and the read after it times out at 400 ms.
  Pair p;
  ASSERT_NO_FATAL_FAILURE(arm_with_a_read(p, 60ms));
  const auto armed = p.ours->armed_expiry();
  p.ours->expires_never_on_one_thread();
  p.ours->expires_after(400ms);
  send_later(p, 200ms, "b");
  const auto r = read_once(p);
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_GE(r.took, 150ms);
  EXPECT_NE(p.ours->armed_expiry(), armed);  // re-armed when the kept wait fired
  const auto late = read_once(p);
  EXPECT_EQ(late.ec, beast::error::timeout);
}

TEST(DeadlineSocket, AHandoverOnOneThreadNeedsNoNewWaitWhileTheKeptOneIsEarlier) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(arm_with_a_read(p, 10s));
  const auto armed = p.ours->armed_expiry();
  p.ours->expires_never_on_one_thread();
  p.ours->expires_after(20s);
  ASSERT_NO_FATAL_FAILURE(arm_with_a_read(p, 20s));
  EXPECT_EQ(p.ours->armed_expiry(), armed);
  // A handover to any thread drops the kept wait: the next operation arms its own.
  p.ours->expires_never();
  EXPECT_EQ(p.ours->armed_expiry(), Clock::time_point::max());
  ASSERT_NO_FATAL_FAILURE(arm_with_a_read(p, 20s));
  EXPECT_GT(p.ours->armed_expiry(), armed);
}

TEST(DeadlineSocket, AHandoverOnOneThreadStillTimesOutAnEarlierDeadline) {
  // The next owner's deadline is earlier than the kept wait's (a gRPC call's short
  // grpc-timeout): it re-arms, and the read times out at the earlier time.
  Pair p;
  ASSERT_NO_FATAL_FAILURE(arm_with_a_read(p, 10s));
  p.ours->expires_never_on_one_thread();
  p.ours->expires_after(50ms);
  const auto r = read_once(p);
  EXPECT_EQ(r.ec, beast::error::timeout);
  EXPECT_LT(r.took, 2s);
}

TEST(DeadlineSocket, ASocketDestroyedWithItsTimerArmedLeavesNothingBehind) {
  // The timer's completion holds only a weak reference: it runs after the socket is
  // gone and touches nothing (ASan would see a use after free).
  {
    Pair p;
    p.ours->expires_after(10ms);
    bool done = false;
    char buf[4];
    p.ours->async_read_some(asio::buffer(buf),
                            [&](beast::error_code, std::size_t) { done = true; });
    p.ours.reset();
    p.io.restart();
    p.io.run_for(50ms);
    EXPECT_TRUE(done);
  }
}

TEST(DeadlineSocket, WritesShareTheDeadline) {
  // A peer that never reads: the kernel's buffers fill and the write pends until the
  // deadline closes the socket.
  Pair p;
  p.ours->expires_after(100ms);
  std::string big(std::size_t{64} << 20, 'x');
  beast::error_code got;
  bool done = false;
  asio::async_write(*p.ours, asio::buffer(big), [&](beast::error_code ec, std::size_t) {
    got = ec;
    done = true;
  });
  p.io.restart();
  while (!done && p.io.run_one() > 0) {
  }
  EXPECT_EQ(got, beast::error::timeout);
}

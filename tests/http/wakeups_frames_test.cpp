// The pieces both directions share: HTTP/1.1 body framing (codec/http1/body_frames.hpp)
// and the one wake-up (http/signal.hpp).
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "codec/http1/body_frames.hpp"
#include "http/signal.hpp"

namespace idemproxy::http {
namespace {

std::string joined(const codec::http1::BodyFrames& frames) {
  std::string out;
  for (const auto& b : frames.buffers()) out.append(static_cast<const char*>(b.data()), b.size());
  return out;
}

TEST(BodyFrames, AChunkedPieceCarriesItsSizeLineAndTheLastChunkEndsTheBody) {
  const std::string head = "POST / HTTP/1.1\r\n\r\n";
  const std::string data(26, 'x');
  codec::http1::BodyFrames frames(true);
  frames.add_bytes(head);
  frames.add_piece(data);
  frames.add_end();
  EXPECT_EQ(joined(frames), head + "1a\r\n" + data + "\r\n0\r\n\r\n");
}

TEST(BodyFrames, AnEmptyPieceIsNoChunkSinceAnEmptyChunkWouldEndTheBody) {
  codec::http1::BodyFrames frames(true);
  frames.add_piece("");
  EXPECT_TRUE(frames.empty());
  frames.add_end("0\r\ngrpc-status: 0\r\n\r\n");
  EXPECT_EQ(joined(frames), "0\r\ngrpc-status: 0\r\n\r\n");
}

TEST(BodyFrames, ABodyFramedByItsLengthGoesOutAsItIs) {
  codec::http1::BodyFrames frames(false);
  frames.add_piece("hello");
  frames.add_end();
  EXPECT_EQ(joined(frames), "hello");
}

// Runs `body` as a coroutine on a fresh context, to its end.
template <class Body>
void run(Body body) {
  asio::io_context io;
  bool done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const asio::any_io_executor ex = io.get_executor();
        co_await body(ex);
        done = true;
      },
      asio::detached);
  io.run_for(std::chrono::seconds(5));
  EXPECT_TRUE(done);
}

TEST(Signal, ANotifyBeforeTheWaitIsKeptAndTakenByOneWait) {
  run([](asio::any_io_executor ex) -> asio::awaitable<void> {
    Signal signal(ex);
    signal.notify();
    const auto soon = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    EXPECT_TRUE(co_await signal.wait_until(soon));
    const auto later = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    EXPECT_FALSE(co_await signal.wait_until(later));  // taken: the time comes first
  });
}

TEST(Signal, ALatchStaysSetForEveryLaterWait) {
  run([](asio::any_io_executor ex) -> asio::awaitable<void> {
    Signal latch(ex, Signal::Reset::never);
    latch.notify();
    co_await latch.wait();
    co_await latch.wait();
    const auto soon = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    EXPECT_TRUE(co_await latch.wait_until(soon));
    EXPECT_TRUE(latch.pending());
  });
}

TEST(Signal, ClearForgetsANotifyNoWaitTook) {
  run([](asio::any_io_executor ex) -> asio::awaitable<void> {
    Signal signal(ex);
    signal.notify();
    signal.clear();
    const auto soon = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    EXPECT_FALSE(co_await signal.wait_until(soon));
  });
}

TEST(Signal, ANotifyPostedFromAnotherThreadWakesTheWait) {
  run([](asio::any_io_executor ex) -> asio::awaitable<void> {
    Signal signal(ex);
    std::thread other([&] { asio::post(ex, [&] { signal.notify(); }); });
    const auto later = std::chrono::steady_clock::now() + std::chrono::seconds(4);
    EXPECT_TRUE(co_await signal.wait_until(later));
    other.join();
  });
}

// An upstream link's readiness is a latch that every stream opening on the link waits
// for at once; one waiter's wait must not wake another with nothing pending.
TEST(Signal, ALatchHoldsEveryWaiterUntilItsNotifyAndThenWakesThemAll) {
  asio::io_context io;
  Signal latch(io.get_executor(), Signal::Reset::never);
  int woken = 0;
  for (int i = 0; i < 3; ++i) {
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          co_await latch.wait();
          ++woken;
        },
        asio::detached);
  }
  io.poll();
  EXPECT_EQ(woken, 0) << "a waiter woke before the notify";
  latch.notify();
  io.poll();
  EXPECT_EQ(woken, 3);
}

TEST(Signal, AWaitWokenWithNothingPendingSleepsAgain) {
  asio::io_context io;
  Signal signal(io.get_executor());
  bool done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await signal.wait();
        done = true;
      },
      asio::detached);
  io.poll();
  signal.notify();
  signal.clear();  // the wake-up stays, with nothing pending behind it
  io.poll();
  EXPECT_FALSE(done);
  signal.notify();
  io.poll();
  EXPECT_TRUE(done);
  EXPECT_FALSE(signal.pending()) << "the wait took the notify";
}

}  // namespace
}  // namespace idemproxy::http

// Reads through DeadlineSocket (http/draining_read.hpp) on real loopback sockets: a
// socket a read drained is not read again until bytes come (no speculative recv that
// fails), bytes that came with the end of the stream are read and then the end at
// once, and a read that fills its buffer leaves the rest to the next read at once.
#include "http/draining_read.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <optional>
#include <string>

#include "http/deadline_socket.hpp"

namespace idemproxy::http {
namespace {

struct DrainedPair {
  explicit DrainedPair(asio::io_context& io)
      : acceptor(io, {asio::ip::make_address("127.0.0.1"), 0}), peer(io) {
    tcp::socket s(io);
    s.connect(acceptor.local_endpoint());
    peer = acceptor.accept();
    ours.emplace(std::move(s));
  }
  tcp::acceptor acceptor;
  tcp::socket peer;
  std::optional<DeadlineSocket> ours;
};

// One read of up to `room` bytes, started now: its bytes and error once done.
struct PendingRead {
  PendingRead(DeadlineSocket& s, std::size_t room) : buffer(room, '\0') {
    s.expires_after(std::chrono::seconds{5});
    s.async_read_some(asio::buffer(buffer), [this](beast::error_code e, std::size_t n) {
      ec = e;
      got = n;
      done = true;
    });
  }
  std::string bytes() const { return buffer.substr(0, got); }
  std::string buffer;
  beast::error_code ec;
  std::size_t got = 0;
  bool done = false;
};

// Each test's loop and its connected pair.
class DrainingRead : public ::testing::Test {
 protected:
  asio::io_context io;
  DrainedPair p{io};
};

// Runs what `io` has ready now (an event that came included), without waiting.
void poll_ready(asio::io_context& io) {
  io.poll();
  io.restart();
}

// Runs `io`'s reactor once, so that it takes the socket's events now with nothing
// pending on it (as a proxy's loop, busy with other sockets, does).
void take_events(asio::io_context& io) {
  asio::steady_timer keep(io, std::chrono::hours{1});
  keep.async_wait([](beast::error_code) {});
  io.poll();
  keep.cancel();
  io.poll();
  io.restart();
}

// Runs `io` until `r` is done, for at most two seconds.
void run_until(asio::io_context& io, const PendingRead& r) {
  const auto by = std::chrono::steady_clock::now() + std::chrono::seconds{2};
  while (!r.done && std::chrono::steady_clock::now() < by) {
    io.run_one_for(std::chrono::milliseconds{50});
  }
  io.restart();
}

TEST_F(DrainingRead, ADrainedSocketIsNotReadAgainUntilBytesCome) {
  asio::write(p.peer, asio::buffer(std::string_view("GET / HTTP/1.1\r\n\r\n")));
  PendingRead first(*p.ours, 4096);
  run_until(io, first);
  ASSERT_TRUE(first.done);
  EXPECT_EQ(first.bytes(), "GET / HTTP/1.1\r\n\r\n");
  // The next request is not there: its read waits for an event, and tries no recv.
  const auto before = draining_recvs;
  PendingRead second(*p.ours, 4096);
  poll_ready(io);
  EXPECT_FALSE(second.done);
  EXPECT_EQ(draining_recvs, before) << "a drained socket was read again";
  asio::write(p.peer, asio::buffer(std::string_view("next")));
  run_until(io, second);
  ASSERT_TRUE(second.done);
  EXPECT_FALSE(second.ec) << second.ec.message();
  EXPECT_EQ(second.bytes(), "next");
  EXPECT_EQ(draining_recvs, before + 1);
}

TEST_F(DrainingRead, BytesThatCameWithTheEndAreReadAndThenTheEndAtOnce) {
  // The read waits first, so that the event of the bytes and the FIN is the one that
  // completes it (on loopback the FIN is queued by the time shutdown returns).
  PendingRead first(*p.ours, 4096);
  poll_ready(io);
  asio::write(p.peer, asio::buffer(std::string_view("last bytes")));
  p.peer.shutdown(tcp::socket::shutdown_send);
  run_until(io, first);
  ASSERT_TRUE(first.done);
  EXPECT_EQ(first.bytes(), "last bytes");
  // The FIN's edge came before the bytes were read: the end must still be read now,
  // not after a next event that never comes (the read would wait for its deadline).
  const auto started = std::chrono::steady_clock::now();
  PendingRead end(*p.ours, 4096);
  run_until(io, end);
  ASSERT_TRUE(end.done) << "the end of the stream was never read";
  EXPECT_EQ(end.ec, asio::error::eof);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds{1});
}

TEST_F(DrainingRead, AReadThatFillsItsBufferLeavesTheRestToTheNextAtOnce) {
  asio::write(p.peer, asio::buffer(std::string_view("0123456789")));
  PendingRead a(*p.ours, 4);
  run_until(io, a);
  EXPECT_EQ(a.bytes(), "0123");
  PendingRead b(*p.ours, 4);
  poll_ready(io);  // bytes are left: read at once, no event needed
  ASSERT_TRUE(b.done);
  EXPECT_EQ(b.bytes(), "4567");
  PendingRead c(*p.ours, 8);
  poll_ready(io);
  ASSERT_TRUE(c.done);
  EXPECT_EQ(c.bytes(), "89");
  const auto before = draining_recvs;
  PendingRead d(*p.ours, 8);  // drained by c's short read
  poll_ready(io);
  EXPECT_FALSE(d.done);
  EXPECT_EQ(draining_recvs, before);
  p.peer.shutdown(tcp::socket::shutdown_send);
  run_until(io, d);
  ASSERT_TRUE(d.done);
  EXPECT_EQ(d.ec, asio::error::eof);
}

TEST_F(DrainingRead, AReadAfterTheEndEndsAtOnce) {
  asio::write(p.peer, asio::buffer(std::string_view("x")));
  p.peer.shutdown(tcp::socket::shutdown_send);
  take_events(io);
  PendingRead bytes(*p.ours, 4096);
  run_until(io, bytes);
  EXPECT_EQ(bytes.bytes(), "x");
  PendingRead end(*p.ours, 4096);
  run_until(io, end);
  ASSERT_TRUE(end.done);
  EXPECT_EQ(end.ec, asio::error::eof);
  // Once more, as a TLS read does when it took the end while it was cancelled (it
  // reports operation_aborted, and the caller reads again): Asio's reactor tries no
  // read after one of 0 bytes until the next event, which never comes.
  PendingRead again(*p.ours, 4096);
  run_until(io, again);
  ASSERT_TRUE(again.done) << "a read after the end waited for an event";
  EXPECT_EQ(again.ec, asio::error::eof);
}

TEST_F(DrainingRead, AfterAWriteMetThePeersResetTheBytesLeftAreReadAndThenTheEnd) {
  asio::write(p.peer, asio::buffer(std::string_view("left")));
  p.peer.set_option(asio::socket_base::linger(true, 0));
  p.peer.close();   // a reset, "left" already in our socket
  take_events(io);  // the reset's event comes and goes with nothing pending
  // The write meets the reset (and takes its error from the socket)...
  beast::error_code wec;
  bool wrote = false;
  p.ours->async_write_some(asio::buffer(std::string_view("y")),
                           [&](beast::error_code e, std::size_t) {
                             wec = e;
                             wrote = true;
                           });
  poll_ready(io);
  ASSERT_TRUE(wrote);
  EXPECT_EQ(wec, asio::error::connection_reset);
  // ...then the bytes left are read, and the end. TCP_INQ says 0 left with the bytes
  // after a reset, as when nothing came: that read must not wait for another event.
  PendingRead bytes(*p.ours, 4096);
  run_until(io, bytes);
  EXPECT_EQ(bytes.bytes(), "left");
  PendingRead end(*p.ours, 4096);
  run_until(io, end);
  ASSERT_TRUE(end.done) << "the end after a reset was never read";
  EXPECT_TRUE(end.ec) << "no error after the bytes";
}

}  // namespace
}  // namespace idemproxy::http

// relay() (issue 26): a body framed by Content-Length is read straight into the relay's
// chunk once the bytes buffered with its head are used up, and no further: what
// follows it on the connection stays there. Real socket pairs on loopback.
#include "http/relay.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <optional>
#include <string>

using namespace idemproxy::http;
using namespace std::chrono_literals;

namespace {

// A connected pair on loopback: `ours` wrapped in a Stream, `peer` a plain socket.
struct Pair {
  Pair(asio::io_context& io, tcp::acceptor& acceptor) : peer(io) {
    tcp::socket client(io);
    client.connect(acceptor.local_endpoint());
    peer = acceptor.accept();
    ours.emplace(std::move(client));
  }
  std::optional<Stream> ours;
  tcp::socket peer;
};

struct Relayed {
  RelayError result = RelayError::write;
  beast::error_code error;
  std::string out;       // what the relay wrote
  std::size_t left = 0;  // bytes left in the input's buffer after the relay
  std::string unread;    // what a read of the input found after the relay
};

// Sends `head_and_start` and then `rest` (both before the relay reads), relays the
// answer from one pair to the other, and closes the writing end when `close` says.
Relayed relay_answer(const std::string& head_and_start, const std::string& rest, bool close) {
  asio::io_context io;
  tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  Pair upstream(io, acceptor);
  Pair client(io, acceptor);
  asio::write(upstream.peer, asio::buffer(head_and_start));
  Relayed r;
  beast::flat_buffer buffer;
  ResponseParser<bhttp::buffer_body> p;
  p.body_limit(boost::none);
  bhttp::read_header(upstream.ours->socket(), buffer, p);
  set_relay_framing(p.get(), p, true);
  asio::write(upstream.peer, asio::buffer(rest));
  if (close) upstream.peer.shutdown(tcp::socket::shutdown_send);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        r.result = co_await relay<false>(*upstream.ours, buffer, p, *client.ours, 5s, 5s, r.error);
        client.ours->socket().shutdown(tcp::socket::shutdown_send);
        io.stop();  // the sockets' timer waits (5 s deadlines) need not run out
      },
      [](const std::exception_ptr& e) {
        if (e) std::rethrow_exception(e);
      });
  io.run();
  r.left = buffer.size();
  beast::error_code ec;
  asio::read(client.peer, asio::dynamic_buffer(r.out), ec);  // to the relay's shutdown
  upstream.ours->socket().non_blocking(true);
  char unread[64];
  const auto n = upstream.ours->socket().read_some(asio::buffer(unread), ec);
  r.unread.assign(unread, ec ? 0 : n);
  return r;
}

std::string body_of(std::size_t n) {
  std::string b(n, '\0');
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<char>('a' + i % 26);
  return b;
}

}  // namespace

TEST(Relay, ALengthFramedBodyIsRelayedWholeAndWhatFollowsItStaysUnread) {
  const std::string body = body_of(300 * 1024);  // several chunks' worth
  const std::string head =
      "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  const std::string next = "HTTP/1.1 204 No Content\r\n\r\n";  // the connection's next answer
  // 1,000 body bytes arrive with the head (buffered with it); the rest and the next
  // answer arrive together, as one write.
  const auto r = relay_answer(head + body.substr(0, 1000), body.substr(1000) + next, false);
  EXPECT_EQ(r.result, RelayError::none) << r.error.message();
  ASSERT_EQ(r.out.size(), head.size() + body.size());
  EXPECT_EQ(r.out.substr(0, head.size()), head);
  EXPECT_TRUE(r.out.substr(head.size()) == body);
  // Read no further than the body: the next answer is still in the socket, not
  // swallowed into the buffer (a read through the parser took it with the body's end).
  EXPECT_EQ(r.left, 0U);
  EXPECT_EQ(r.unread, next);
}

TEST(Relay, ALengthFramedBodyCutShortIsAReadErrorAsBeastNamesIt) {
  const std::string body = body_of(200 * 1024);
  const std::string head =
      "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  // The upstream closes 50,000 bytes short.
  const auto r = relay_answer(head + body.substr(0, 1000), body.substr(1000, 149000), true);
  EXPECT_EQ(r.result, RelayError::read);
  EXPECT_EQ(r.error, bhttp::error::partial_message);
  EXPECT_LT(r.out.size(), head.size() + body.size());  // never a whole answer
}

TEST(Relay, AChunkedBodyStillGoesThroughTheParser) {
  const std::string head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string chunks = "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
  const auto r = relay_answer(head, chunks, false);
  EXPECT_EQ(r.result, RelayError::none) << r.error.message();
  // Re-framed by the proxy: the extension is not relayed (relay.hpp).
  EXPECT_EQ(r.out, head + "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
}

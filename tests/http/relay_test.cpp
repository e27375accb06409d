// The pump (proxy/pump.hpp) over an HTTP/1.1 upstream call (upstream/http1_call.hpp):
// a body framed by Content-Length is read straight into the relay's chunk once the
// bytes buffered with its head are used up, and no further: what follows it on the
// connection stays there. The client's side is a real HTTP/1.1 exchange; both sides
// are real socket pairs on loopback; the pool is a fake that counts what it gets back.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <optional>
#include <string>

#include "codec/http1/exchange.hpp"
#include "proxy/policy_document.hpp"
#include "proxy/pump.hpp"
#include "upstream/http1_call.hpp"

using namespace idemproxy;
using namespace idemproxy::http;
using namespace std::chrono_literals;

namespace {

// A connected pair on loopback: `ours` the proxy's end, `peer` a plain socket.
struct Pair {
  Pair(asio::io_context& io, tcp::acceptor& acceptor) : ours(io), peer(io) {
    ours.connect(acceptor.local_endpoint());
    peer = acceptor.accept();
  }
  tcp::socket ours;
  tcp::socket peer;
};

// A codec's view of the server, for one exchange: nothing is served through it.
class OneExchange final : public Service {
 public:
  OneExchange()
      : settings_(proxy::make_settings(
            config::parse_config("upstream: {url: 'http://127.0.0.1:9'}\nstore: {memory: {}}\n"
                                 "routes: [{name: any, path_prefix: /any}]\n",
                                 "relay.yaml", [](const std::string&) { return std::nullopt; }))) {}
  std::shared_ptr<const Settings> settings() const override { return settings_; }
  bool draining() const override { return false; }
  ops::Metrics& metrics() override { return metrics_; }
  asio::awaitable<void> serve(Exchange&) override { co_return; }

 private:
  std::shared_ptr<const Settings> settings_;
  ops::Metrics metrics_;
};

// The pool's side of a call: keeps what comes back, makes no new connection.
class KeepingHome final : public upstream::ConnectionHome {
 public:
  void give_back(std::unique_ptr<upstream::UpstreamConnection> conn) override {
    ++given;
    kept = std::move(conn);
  }
  asio::awaitable<std::pair<beast::error_code, std::unique_ptr<upstream::UpstreamConnection>>>
  fresh() override {
    co_return std::make_pair(beast::error_code(asio::error::connection_refused), nullptr);
  }
  int given = 0;
  std::unique_ptr<upstream::UpstreamConnection> kept;
};

struct Relayed {
  proxy::RelayError result = proxy::RelayError::write;
  beast::error_code error;
  std::string out;       // what the client read
  std::size_t left = 0;  // bytes left in the upstream connection's buffer after the relay
  std::string unread;    // what a read of the upstream connection found after the relay
  int answer_read = 0;   // how often the call gave its connection back (read whole)
};

// Sends `head_and_start` and then `rest` (both before the relay reads), relays the
// answer to a client that asked with a GET, and closes the upstream's writing end
// when `close` says.
Relayed relay_answer(const std::string& head_and_start, const std::string& rest, bool close) {
  asio::io_context io;
  tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  Pair up(io, acceptor);
  Pair down(io, acceptor);
  OneExchange service;
  auto client = std::make_shared<ClientConnection>(std::move(down.ours), nullptr);
  codec::http1::Exchange exchange(*client, service.settings(), service);
  asio::write(down.peer, asio::buffer(std::string_view("GET / HTTP/1.1\r\nHost: x\r\n\r\n")));
  asio::write(up.peer, asio::buffer(head_and_start));
  KeepingHome home;
  auto call = upstream::Http1Call::make(
      {}, home, std::make_unique<upstream::UpstreamConnection>(std::move(up.ours)));
  Relayed r;
  const auto run = [&io](auto step) {
    asio::co_spawn(io, std::move(step), [](const std::exception_ptr& e) {
      if (e) std::rethrow_exception(e);
    });
    io.run();
    io.restart();
  };
  // The head is read before the rest arrives, so that only the head and what came
  // with it can be in the connection's buffer.
  run([&]() -> asio::awaitable<void> {
    const std::optional<std::uint64_t> unbounded;
    const FieldsAllocator heap;
    const auto by = std::chrono::steady_clock::now() + 5s;
    const auto ec = co_await proxy::read_final_head(*call, nullptr, false, unbounded, heap, by);
    EXPECT_FALSE(ec) << ec.message();
    io.stop();
  });
  asio::write(up.peer, asio::buffer(rest));
  if (close) up.peer.shutdown(tcp::socket::shutdown_send);
  run([&]() -> asio::awaitable<void> {
    const bool read = co_await exchange.read_head(std::chrono::steady_clock::now());
    EXPECT_TRUE(read);
    const std::string_view prefix;
    r.result = co_await proxy::relay_answer(*call, exchange, prefix, false, 5s, r.error);
    client->stream.socket().shutdown(tcp::socket::shutdown_send);
    io.stop();  // the sockets' timer waits (5 s deadlines) need not run out
  });
  r.answer_read = home.given;
  upstream::UpstreamConnection& conn =
      home.kept ? *home.kept : *static_cast<upstream::Http1Call&>(*call).connection();
  r.left = conn.buffer.size();
  beast::error_code ec;
  asio::read(down.peer, asio::dynamic_buffer(r.out), ec);  // to the relay's shutdown
  conn.stream.socket().non_blocking(true);
  char unread[64];
  const auto n = conn.stream.socket().read_some(asio::buffer(unread), ec);
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
  EXPECT_EQ(r.result, proxy::RelayError::none) << r.error.message();
  ASSERT_EQ(r.out.size(), head.size() + body.size());
  EXPECT_EQ(r.out.substr(0, head.size()), head);
  EXPECT_TRUE(r.out.substr(head.size()) == body);
  // Read no further than the body: the next answer is still in the socket, not
  // swallowed into the buffer (a read through the parser took it with the body's end).
  EXPECT_EQ(r.left, 0U);
  EXPECT_EQ(r.unread, next);
  // The upstream connection was free for its pool before the client had the end.
  EXPECT_EQ(r.answer_read, 1);
}

TEST(Relay, ALengthFramedBodyCutShortIsAReadErrorAsBeastNamesIt) {
  const std::string body = body_of(200 * 1024);
  const std::string head =
      "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  // The upstream closes 50,000 bytes short.
  const auto r = relay_answer(head + body.substr(0, 1000), body.substr(1000, 149000), true);
  EXPECT_EQ(r.result, proxy::RelayError::read);
  EXPECT_EQ(r.error, bhttp::error::partial_message);
  EXPECT_LT(r.out.size(), head.size() + body.size());  // never a whole answer
  EXPECT_EQ(r.answer_read, 0);  // and its connection never goes back to the pool
}

TEST(Relay, AChunkedBodyStillGoesThroughTheParser) {
  const std::string head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string chunks = "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
  const auto r = relay_answer(head, chunks, false);
  EXPECT_EQ(r.result, proxy::RelayError::none) << r.error.message();
  // Re-framed by the proxy: the extension is not relayed.
  EXPECT_EQ(r.out, head + "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  EXPECT_EQ(r.answer_read, 1);
}

TEST(Relay, AChunkedAnswersTrailersReachOnlyAClientThatTakesThem) {
  // The client above sent no `TE: trailers` (RFC 9110 10.1.4): they are dropped.
  const std::string head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  const auto r = relay_answer(head, "2\r\nok\r\n0\r\nX-Sum: 7\r\n\r\n", false);
  EXPECT_EQ(r.result, proxy::RelayError::none) << r.error.message();
  EXPECT_EQ(r.out, head + "2\r\nok\r\n0\r\n\r\n");
}

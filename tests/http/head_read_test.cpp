// An HTTP/1.1 connection's loop (codec/http1/connection.hpp) reads each request head in
// up to three steps: the request's first bytes in the loop's own frame, a head that came
// whole with them at once (Exchange::take_head), and the rest of one still arriving in
// Exchange::read_head. Each path here over a real socket pair on loopback: a head in
// pieces, a head past server.max_header_size in pieces, two requests in one write, and
// a client that leaves mid-head.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <string>
#include <vector>

#include "codec/http1/connection.hpp"
#include "proxy/policy_document.hpp"

using namespace idemproxy;
using namespace idemproxy::http;
using namespace std::chrono_literals;

namespace {

// What the service saw of one request.
struct Seen {
  std::string target;
  std::string marker;  // the X-Marker field, sent in the head's last piece
  std::optional<HeadError::Kind> error;
};

// Answers every request 204 and notes what its head said.
class Noting final : public Service {
 public:
  Noting()
      : settings_(proxy::make_settings(config::parse_config(
            "upstream: {url: 'http://127.0.0.1:9'}\nstore: {memory: {}}\n"
            "server: {max_header_size: 1024}\nroutes: [{name: any, path_prefix: /any}]\n",
            "head_read.yaml", [](const std::string&) { return std::nullopt; }))) {}
  std::shared_ptr<const Settings> settings() const override { return settings_; }
  bool draining() const override { return false; }
  ops::Metrics& metrics() override { return metrics_; }
  asio::awaitable<void> serve(Exchange& exchange) override {
    const auto& error = exchange.head_error();
    seen.push_back({std::string(exchange.head().target()), std::string(exchange.head()["X-Marker"]),
                    error ? std::optional(error->kind) : std::nullopt});
    ResponseHeader head;
    head.result(error ? bhttp::status::bad_request : bhttp::status::no_content);
    co_await exchange.send_head(head, Framing::none());
  }
  std::vector<Seen> seen;

 private:
  std::shared_ptr<const Settings> settings_;
  ops::Metrics metrics_;
};

struct Served {
  std::vector<Seen> seen;
  std::string answers;  // what the client read, to the connection's end
};

// Serves one connection whose client writes `pieces` 20 ms apart, closes its writing
// end, and reads what comes back to the connection's end.
Served serve_pieces(const std::vector<std::string>& pieces) {
  asio::io_context io;
  tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  tcp::socket ours(io);
  ours.connect(acceptor.local_endpoint());
  tcp::socket peer = acceptor.accept();
  Noting service;
  auto conn = std::make_shared<ClientConnection>(std::move(ours), nullptr);
  const auto rethrow = [](const std::exception_ptr& e) {
    if (e) std::rethrow_exception(e);
  };
  asio::co_spawn(io, codec::http1::serve(conn, service), rethrow);
  Served out;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer pause(io);
        for (const auto& piece : pieces) {
          co_await asio::async_write(peer, asio::buffer(piece), asio::use_awaitable);
          pause.expires_after(20ms);
          co_await pause.async_wait(asio::use_awaitable);
        }
        peer.shutdown(tcp::socket::shutdown_send);
        auto [ec, n] = co_await asio::async_read(peer, asio::dynamic_buffer(out.answers),
                                                 asio::as_tuple(asio::use_awaitable));
        static_cast<void>(ec);
        static_cast<void>(n);
        io.stop();  // the connection's deadline waits need not run out
      },
      rethrow);
  io.run_for(5s);
  out.seen = std::move(service.seen);
  return out;
}

constexpr std::string_view kHead = "GET /any/thing HTTP/1.1\r\nHost: x\r\nX-Marker: last\r\n\r\n";

TEST(HeadRead, AHeadInPiecesIsReadWholeAcrossReads) {
  // Cut inside the request line, inside a field, and between the CRLFs of its end.
  const std::vector<std::string> pieces{std::string(kHead.substr(0, 9)),
                                        std::string(kHead.substr(9, 30)),
                                        std::string(kHead.substr(39, kHead.size() - 41)),
                                        std::string(kHead.substr(kHead.size() - 2))};
  const auto served = serve_pieces(pieces);
  ASSERT_EQ(served.seen.size(), 1U);
  EXPECT_EQ(served.seen[0].target, "/any/thing");
  EXPECT_EQ(served.seen[0].marker, "last");
  EXPECT_FALSE(served.seen[0].error);
  EXPECT_TRUE(served.answers.starts_with("HTTP/1.1 204")) << served.answers;
}

TEST(HeadRead, AHeadPastTheLimitInPiecesIsRefusedAsTooLarge) {
  // 1,024 bytes is the limit here: three pieces of 600 without the head's end.
  const std::string filler = "X-Filler: " + std::string(586, 'a') + "\r\n";
  const auto served = serve_pieces({"GET /any HTTP/1.1\r\n" + filler, filler, filler});
  ASSERT_EQ(served.seen.size(), 1U);
  EXPECT_EQ(served.seen[0].error, HeadError::Kind::too_large);
  EXPECT_TRUE(served.answers.starts_with("HTTP/1.1 400")) << served.answers;
}

TEST(HeadRead, TwoRequestsInOneWriteAreBothServedInOrder) {
  std::string two(kHead);
  two += "GET /any/second HTTP/1.1\r\nHost: x\r\nX-Marker: second\r\n\r\n";
  const auto served = serve_pieces({two});
  ASSERT_EQ(served.seen.size(), 2U);
  EXPECT_EQ(served.seen[0].target, "/any/thing");
  EXPECT_EQ(served.seen[1].target, "/any/second");
  EXPECT_EQ(served.seen[1].marker, "second");
}

TEST(HeadRead, TheSecondOfTwoRequestsMayArriveInPiecesBehindTheFirst) {
  // The first read holds one head whole and the start of the next: the next is read
  // from what is buffered, then from the socket.
  std::string first(kHead);
  first += "GET /any/sec";
  const auto served = serve_pieces({first, "ond HTTP/1.1\r\nHost: x\r\n", "X-Marker: 2\r\n\r\n"});
  ASSERT_EQ(served.seen.size(), 2U);
  EXPECT_EQ(served.seen[1].target, "/any/second");
  EXPECT_EQ(served.seen[1].marker, "2");
}

TEST(HeadRead, AClientThatLeavesMidHeadIsNotAnswered) {
  const auto served = serve_pieces({"GET /any HTTP/1.1\r\nHo"});
  EXPECT_TRUE(served.seen.empty());
  EXPECT_EQ(served.answers, "");
}

}  // namespace

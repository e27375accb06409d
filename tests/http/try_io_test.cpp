// try_send (http/try_io.hpp): what a socket takes now goes in one call that never
// waits, on real socket pairs on loopback; what it could not take is left to the
// caller; a connection the peer reset is an error, not a block.
#include "http/try_io.hpp"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace idemproxy::http {
namespace {

struct Pair {
  explicit Pair(asio::io_context& io)
      : acceptor(io, {asio::ip::make_address("127.0.0.1"), 0}), ours(io), peer(io) {
    ours.connect(acceptor.local_endpoint());
    peer = acceptor.accept();
  }
  tcp::acceptor acceptor;
  tcp::socket ours;
  tcp::socket peer;
};

TEST(TrySend, PiecesTheSocketTakesGoWholeInOrder) {
  asio::io_context io;
  Pair p(io);
  const std::string a = "HTTP/1.1 201 Created\r\n", b, c = "\r\n{\"id\":1}";
  const std::vector<asio::const_buffer> pieces = {asio::buffer(a), asio::buffer(b),
                                                  asio::buffer(c)};
  beast::error_code ec;
  EXPECT_EQ(try_send(p.ours, pieces, ec), a.size() + c.size());
  EXPECT_FALSE(ec);
  std::string got(a.size() + c.size(), '\0');
  asio::read(p.peer, asio::buffer(got));
  EXPECT_EQ(got, a + c);
  EXPECT_EQ(try_send(p.ours, std::vector<asio::const_buffer>{asio::buffer(b)}, ec), 0U);
  EXPECT_FALSE(ec);
}

TEST(TrySend, AFullSocketTakesPartThenNothingAndNeverWaits) {
  asio::io_context io;
  Pair p(io);
  const std::string big(16 << 20, 'x');  // more than loopback's buffers hold
  beast::error_code ec;
  const auto started = std::chrono::steady_clock::now();
  const std::size_t first = try_send(p.ours, asio::buffer(big), ec);
  EXPECT_FALSE(ec);
  EXPECT_GT(first, 0U);
  EXPECT_LT(first, big.size());
  // The kernel may find room again between two calls (it grows loopback's buffers under
  // load), so a second call may take a part too; what holds is that a call returns 0
  // once nothing fits, with no error, and that no call waits.
  std::size_t sent = first;
  bool refused = false;
  for (int call = 0; call < 64 && !refused && sent < big.size(); ++call) {
    const std::size_t n = try_send(p.ours, asio::buffer(big.data() + sent, big.size() - sent), ec);
    EXPECT_FALSE(ec) << ec.message();  // would block: not an error
    refused = n == 0;
    sent += n;
  }
  EXPECT_TRUE(refused) << "every call took a part of " << big.size() << " bytes: " << sent;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds{5});
  std::string got(sent, '\0');
  asio::read(p.peer, asio::buffer(got));
  EXPECT_EQ(got, big.substr(0, sent));
}

TEST(TrySend, AConnectionThePeerResetIsAnError) {
  asio::io_context io;
  Pair p(io);
  p.peer.set_option(asio::socket_base::linger(true, 0));  // close sends RST
  p.peer.close();
  const std::string bytes = "answer";
  beast::error_code ec;
  for (int attempt = 0; attempt < 100 && !ec; ++attempt) {
    try_send(p.ours, asio::buffer(bytes), ec);
    if (!ec) std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  EXPECT_TRUE(ec == asio::error::connection_reset || ec == asio::error::broken_pipe)
      << ec.message();
}

}  // namespace
}  // namespace idemproxy::http

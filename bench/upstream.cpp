// The benchmark's upstream: the same trivial service behind every variant.
//   bench_upstream PORT
// Any request gets 201 with a small fixed JSON body. A path ending in /64k or /1m gets
// a 64 KiB or 1 MiB body; one ending in /slow answers after 200 ms (the storm
// scenario). GET /count answers how many other requests were served, so a caller can
// tell how often the upstream really executed. One thread, keep-alive, request bodies
// discarded.
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

const std::string kSmall = R"({"id":"ord_1","status":"created","amount":1000})";
const std::string k64k(64 * 1024, 'x');
const std::string k1m(1024 * 1024, 'y');

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

long served = 0;

asio::awaitable<void> serve(tcp::socket socket) {
  beast::flat_buffer buffer;
  socket.set_option(tcp::no_delay(true));
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(16 * 1024 * 1024);
    auto [ec, n] =
        co_await http::async_read(socket, buffer, parser, asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    const auto& req = parser.get();
    const std::string_view target = req.target();
    http::response<http::string_body> res{http::status::created, 11};
    res.set(http::field::content_type, "application/json");
    if (target == "/count") {
      res.result(http::status::ok);
      res.body() = std::to_string(served);
    } else {
      ++served;
      if (ends_with(target, "/slow")) {
        asio::steady_timer delay(socket.get_executor(), std::chrono::milliseconds{200});
        co_await delay.async_wait(asio::as_tuple(asio::use_awaitable));
      }
      res.body() = ends_with(target, "/1m") ? k1m : ends_with(target, "/64k") ? k64k : kSmall;
    }
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    auto [wec, w] = co_await http::async_write(socket, res, asio::as_tuple(asio::use_awaitable));
    if (wec || !req.keep_alive()) co_return;
  }
}

asio::awaitable<void> listen(tcp::acceptor& acceptor) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
    if (ec) continue;
    asio::co_spawn(acceptor.get_executor(), serve(std::move(socket)), asio::detached);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: bench_upstream PORT\n";
    return 2;
  }
  asio::io_context io(1);
  tcp::acceptor acceptor(
      io, {asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(std::atoi(argv[1]))});
  acceptor.listen(asio::socket_base::max_listen_connections);
  asio::co_spawn(io, listen(acceptor), asio::detached);
  io.run();
}

#include "ops/admin.hpp"

namespace idemproxy::ops {

using http::asio::awaitable;
using http::bhttp::status;
namespace bhttp = http::bhttp;

awaitable<void> serve_admin(boost::asio::ip::tcp::socket socket, http::Runtime& rt) {
  http::beast::tcp_stream stream(std::move(socket));
  http::beast::flat_buffer buffer;
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(8 * 1024);
    parser.body_limit(64 * 1024);
    stream.expires_after(std::chrono::seconds{30});
    auto [ec, n] = co_await bhttp::async_read(stream, buffer, parser, http::use_nothrow);
    if (ec) break;
    const auto req = parser.release();
    const std::string_view target = req.target();
    const std::string_view path = target.substr(0, target.find('?'));

    http::StringResponse res{status::ok, req.version()};
    res.set(bhttp::field::content_type, "text/plain; charset=utf-8");
    if (req.method() != bhttp::verb::get && req.method() != bhttp::verb::head) {
      res.result(status::method_not_allowed);
      res.body() = "only GET\n";
    } else if (path == "/healthz") {
      res.body() = "ok\n";
    } else if (path == "/readyz") {
      auto& store = rt.engine.store();
      const auto ping = co_await rt.blocking([&store] { return store.ping(); });
      if (rt.draining) {
        res.result(status::service_unavailable);
        res.body() = "draining\n";
      } else if (!ping.ok()) {
        res.result(status::service_unavailable);
        res.body() = "store unavailable: " + ping.error().detail + "\n";
      } else {
        res.body() = "ready\n";
      }
    } else if (path == "/metrics") {
      res.set(bhttp::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res.body() = rt.metrics.render();
    } else {
      res.result(status::not_found);
      res.body() = "not found\n";
    }
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    auto [wec, wn] = co_await bhttp::async_write(stream, res, http::use_nothrow);
    if (wec || !res.keep_alive()) break;
  }
  http::beast::error_code ignored;
  stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_send, ignored);
}

}  // namespace idemproxy::ops

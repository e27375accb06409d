#pragma once
// The proxy as a codec sees it: one entry for every exchange, HTTP/1.1 or HTTP/2.
#include "http/exchange.hpp"
#include "proxy/http_names.hpp"
#include "proxy/runtime.hpp"

namespace idemproxy::proxy {

class Proxy {
 public:
  explicit Proxy(Runtime& rt) : rt_(rt) {}

  /// Route phase first (a head the codec found malformed is answered here), then
  /// pass-through or the idempotent path; then the request is counted and logged.
  asio::awaitable<void> serve(Exchange& exchange);
  /// serve() for a codec that offers the request's state room in its exchange
  /// (Exchange::request_room): a request answered at once takes no coroutine frame
  /// and gives nullopt; any other gives what serves it to its end, to be awaited.
  std::optional<asio::awaitable<void>> serve_now(Exchange& exchange);

 private:
  Runtime& rt_;
};

/// The service a codec needs, for the proxy alone: what the tests and the fuzz
/// targets drive codecs with (the server adds its connection limits).
class ProxyService : public Service {
 public:
  explicit ProxyService(Runtime& rt) : rt_(rt), proxy_(rt) {}
  std::shared_ptr<const Settings> settings() const override { return rt_.settings(); }
  std::uint64_t settings_version() const override { return rt_.settings_version(); }
  bool draining() const override { return rt_.draining.load(std::memory_order_relaxed); }
  ops::Metrics& metrics() override { return rt_.metrics; }
  asio::awaitable<void> serve(Exchange& exchange) override { return proxy_.serve(exchange); }
  std::optional<asio::awaitable<void>> serve_now(Exchange& exchange) override {
    return proxy_.serve_now(exchange);
  }

 protected:
  Runtime& rt_;
  Proxy proxy_;
};

}  // namespace idemproxy::proxy

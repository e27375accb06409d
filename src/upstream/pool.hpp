#pragma once
// Keep-alive connections to the one upstream, and the choice of HTTP/1.1, h2c or h2
// for each call (upstream.protocol).
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "http/beast.hpp"
#include "http/exchange.hpp"
#include "http/problem.hpp"
#include "http/stream.hpp"
#include "idemproxy/config/config.hpp"
#include "upstream/call.hpp"
#include "upstream/h2_upstream.hpp"
#include "upstream/http1_call.hpp"

namespace idemproxy::upstream {

class UpstreamPool final : public Upstream, public ConnectionHome {
 public:
  /// `strands`: give each connection its own strand (needed with several I/O
  /// threads; with one, the strand's locking is pure cost). Throws
  /// std::runtime_error when an https upstream's TLS settings cannot be loaded.
  UpstreamPool(asio::any_io_executor ex, const config::UpstreamConfig& config, bool strands);
  ~UpstreamPool();

  asio::awaitable<std::pair<beast::error_code, UpstreamCallPtr>> open_call(
      FieldsAllocator memory) override;
  UpstreamCallPtr open_call_now(FieldsAllocator memory) override;

  /// Keeps the connection for reuse, if there is room.
  void give_back(std::unique_ptr<UpstreamConnection> conn) override;
  /// A new HTTP/1.1 connection.
  asio::awaitable<std::pair<beast::error_code, std::unique_ptr<UpstreamConnection>>> fresh()
      override;

  const config::UpstreamConfig& config() const { return config_; }

 private:
  /// An idle connection that still looks open, if there is one (no coroutine frame:
  /// most calls take one).
  std::unique_ptr<UpstreamConnection> take_idle();
  /// A new connection. `h2`: set instead when ALPN chose h2 on it (auto): it becomes
  /// the first shared HTTP/2 connection.
  asio::awaitable<std::pair<beast::error_code, std::unique_ptr<UpstreamConnection>>> connect(
      std::unique_ptr<Stream>& h2);
  /// Whether requests go over HTTP/2 (h2c, h2, or auto once ALPN chose it).
  bool over_h2() const;

  asio::any_io_executor ex_;
  config::UpstreamConfig config_;
  std::unique_ptr<ssl::context> tls_;  // https upstreams
  bool strands_;
  std::unique_ptr<H2Upstream> h2_;  // upstream.protocol h2c, h2, auto
  /// auto: whether ALPN chose h2 on the last connection; HTTP/1.1 until it does.
  std::atomic<bool> auto_h2_{false};
  std::mutex mu_;
  std::vector<std::unique_ptr<UpstreamConnection>> idle_;
};

}  // namespace idemproxy::upstream

#pragma once
// HTTP/2 to the upstream (upstream.protocol h2c, h2, auto). The sessions still
// forward HTTP/1.1, onto a local socket pair that the upstream pool treats as one
// more keep-alive connection. A bridge reads each request from the pair, sends it
// as a stream on a shared HTTP/2 connection, and writes the answer back as
// HTTP/1.1: protocol translation, as nginx does between its two sides. Framing,
// HPACK and flow control are libnghttp2's.
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "http/beast.hpp"
#include "http/stream.hpp"
#include "idemproxy/config/config.hpp"

namespace idemproxy::http {

namespace h2 {
struct Registry;
}

class H2Upstream {
 public:
  /// `tls`: the upstream's TLS context (h2, auto), with ALPN offered; null for h2c.
  H2Upstream(asio::any_io_executor ex, const config::UpstreamConfig& config, ssl::context* tls,
             bool strands);
  ~H2Upstream();
  H2Upstream(const H2Upstream&) = delete;
  H2Upstream& operator=(const H2Upstream&) = delete;

  /// A socket on `ex` whose other end is bridged to an HTTP/2 connection with room
  /// for another stream (upstream.http2_max_streams); one is opened when none has.
  /// `established`: a TLS connection on which ALPN already chose h2 (auto), used
  /// as the new HTTP/2 connection.
  asio::awaitable<std::pair<beast::error_code, std::optional<tcp::socket>>> open(
      asio::any_io_executor ex, std::unique_ptr<Stream> established = nullptr);

 private:
  std::shared_ptr<h2::Registry> registry_;
};

}  // namespace idemproxy::http

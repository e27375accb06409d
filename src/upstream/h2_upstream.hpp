#pragma once
// HTTP/2 to the upstream (upstream.protocol h2c, h2, auto). Each request is a stream
// of one of a few shared connections: the proxy drives it through UpstreamCall, as
// it drives a pooled HTTP/1.1 connection, and the codec is libnghttp2's (framing,
// HPACK, flow control). A connection takes streams up to upstream.http2_max_streams
// and the upstream's SETTINGS_MAX_CONCURRENT_STREAMS; another opens when all are
// full, and one left idle for upstream.idle_timeout is closed.
#include <memory>
#include <utility>

#include "http/beast.hpp"
#include "http/stream.hpp"
#include "idemproxy/config/config.hpp"
#include "upstream/call.hpp"

namespace idemproxy::upstream {

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

  /// A stream on a connection with room for it; one is opened when none has.
  /// `established`: a TLS connection on which ALPN already chose h2 (auto), used as
  /// the new HTTP/2 connection.
  asio::awaitable<std::pair<beast::error_code, UpstreamCallPtr>> open_call(
      std::unique_ptr<Stream> established = nullptr);

 private:
  std::shared_ptr<h2::Registry> registry_;
};

}  // namespace idemproxy::upstream

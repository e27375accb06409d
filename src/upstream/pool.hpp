#pragma once
// Keep-alive connections to the one upstream, and the buffered exchange that the
// idempotent path uses. Pass-through streams over acquire()/give_back() directly.
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

namespace idemproxy::http {

struct UpstreamConnection {
  UpstreamConnection(asio::any_io_executor ex, ssl::context* tls)
      : stream(tls ? Stream(std::move(ex), *tls) : Stream(std::move(ex))) {}
  /// A socket already connected (the relay's tests hand it one end of a pair).
  explicit UpstreamConnection(tcp::socket connected) : stream(std::move(connected)) {}
  Stream stream;
  beast::flat_buffer buffer;
  bool reused = false;
};

using StreamingParser = ResponseParser<bhttp::buffer_body>;
/// Destroys a parser made by read_final_head and returns its memory to where its
/// fields' memory comes from (a client connection's arena, or the heap).
struct DeleteParser {
  void operator()(StreamingParser* parser) const noexcept {
    ArenaAllocator<StreamingParser> memory(parser->get().get_allocator());
    parser->~StreamingParser();
    memory.deallocate(parser, 1);
  }
};
using StreamingParserPtr = std::unique_ptr<StreamingParser, DeleteParser>;

/// The room an answer's body is read through (see relay.cpp's widen_for_body).
inline constexpr std::size_t kBodyReadSize = std::size_t{64} << 10;

/// Reads the upstream's response head into `parser`, past any interim responses:
/// each 1xx but 101 is forwarded to `sink` (except 100 Continue, which answers an
/// expectation the proxy handled itself and never forwards) and a fresh parser
/// reads on (RFC 9110 15.2: a 1xx is never the answer; taking it for one hands the
/// real answer to the next request on the connection). A 101 is an error: the proxy
/// never forwards Upgrade, and a server must not switch unasked (RFC 9110 7.8).
/// `head_request`: the answer to HEAD has no body (RFC 9110 9.3.2). `fields`: where
/// the answer's fields live (a client connection's arena, or by default the heap).
asio::awaitable<beast::error_code> read_final_head(UpstreamConnection& conn,
                                                   StreamingParserPtr& parser, bool head_request,
                                                   boost::optional<std::uint64_t> body_limit,
                                                   const InterimSink& sink,
                                                   FieldsAllocator fields = {});

class UpstreamPool {
 public:
  /// `strands`: give each connection its own strand (needed with several I/O
  /// threads; with one, the strand's locking is pure cost). Throws
  /// std::runtime_error when an https upstream's TLS settings cannot be loaded.
  UpstreamPool(asio::any_io_executor ex, const config::UpstreamConfig& config, bool strands);
  ~UpstreamPool();

  /// An exchange for one streamed request: on an idle connection that still looks
  /// open or a new one (HTTP/1.1), or on a stream of a shared HTTP/2 connection.
  /// `memory`: where the call lives (a client connection's arena).
  asio::awaitable<std::pair<beast::error_code, UpstreamCallPtr>> open_call(FieldsAllocator memory);

  /// Keeps the connection for reuse, if there is room.
  void give_back(std::unique_ptr<UpstreamConnection> conn);

  /// Sends a whole request and reads the whole response within `timeout`; a body
  /// larger than max_response_size stops being read and comes back as `oversized`.
  /// A stale pooled connection that fails before the request is written is retried
  /// once on a new one, as is an HTTP/2 stream the upstream refused unprocessed;
  /// nothing is retried once the request may have been processed.
  asio::awaitable<UpstreamAnswer> round_trip(StringRequest& request, const InterimSink& interim,
                                             Duration timeout);

  const config::UpstreamConfig& config() const { return config_; }

 private:
  /// An idle connection that still looks open, or a new one (`fresh`: a new one).
  /// `h2`: set instead when ALPN chose h2 on the new connection (auto): it becomes
  /// the first shared HTTP/2 connection.
  asio::awaitable<std::pair<beast::error_code, std::unique_ptr<UpstreamConnection>>> acquire(
      bool fresh, std::unique_ptr<Stream>& h2);
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

}  // namespace idemproxy::http

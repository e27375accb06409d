#pragma once
// One exchange with the upstream, whatever carries it: a pooled HTTP/1.1 connection
// (Http1Call, http1_call.cpp) or a stream of a shared HTTP/2 connection
// (h2::StreamCall, h2_call.cpp). The proxy drives it and never hands it the client's
// exchange: it sends the request's head and body pieces, then pulls the answer, its
// heads (interim ones, then the final one), then its body pieces and trailers. The
// pump between the two hops is the proxy's (proxy/pump.hpp), as Pingora's proxy_h1
// and Envoy's router keep it; backpressure holds both ways, since each side is read
// only as the other takes what was read.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "http/beast.hpp"
#include "http/exchange.hpp"
#include "upstream/http_names.hpp"

namespace idemproxy::upstream {

/// One piece of an upstream answer's body.
struct AnswerPiece {
  std::string_view data;    // valid until the next read_body() or the call's end
  bool end = false;         // the answer is whole: `trailers` are its trailer fields
  Trailers trailers;        // with `end`; valid while the call lives
  beast::error_code error;  // timeout, body_limit, partial_message (cut short), or I/O
};

/// What a request head says about the body that follows it.
struct RequestFraming {
  bool body = false;  // a body follows by send_body() (false: the request ends here)
  /// The client sent `te: trailers` (RFC 9110 10.1.4): it takes trailers, which a
  /// gRPC server requires. Each upstream codec decides what it makes of it: an
  /// HTTP/2 upstream gets `te: trailers` (RFC 9113 §8.2.2), an HTTP/1.1 one nothing.
  bool te_trailers = false;
  /// The request may go once more, whole, on a new connection when a kept-alive one
  /// ends before any byte of its answer: the upstream closed it as the request
  /// arrived, which a proxy cannot tell from a request it read and then failed on.
  /// Only for a request with no body, of a method a repeat cannot harm (RFC 9110
  /// 9.2.2), under no key (nginx's `proxy_next_upstream` does as much on a cached
  /// connection); never for a request that claimed a key.
  bool resendable = false;
};

class UpstreamCall {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  /// Destroys the call and frees its memory where it came from (a client
  /// connection's arena for a pooled HTTP/1.1 call: no heap call per request).
  virtual void destroy() noexcept = 0;

  // ---- The request.
  /// Sends `head`, prepared for forwarding, with the fields the proxy added to it
  /// (`extra`, after the head's own: its framing set from what the proxy read, the
  /// X-Forwarded-* fields, the request's ids: proxy/forward.hpp). The head may wait
  /// to go out with the first body bytes. Connection-specific fields are the codec's
  /// to drop.
  virtual asio::awaitable<beast::error_code> send_head(RequestHeader& head,
                                                       const ExtraFields& extra,
                                                       RequestFraming framing, TimePoint until) = 0;
  /// send_head()'s outcome when the head waits for the first body bytes, with no
  /// coroutine frame; none, having done nothing, when send_head() must be awaited.
  virtual std::optional<beast::error_code> send_head_now(RequestHeader& head,
                                                         const ExtraFields& extra,
                                                         RequestFraming framing) {
    return std::nullopt;
  }
  /// More of the request body; `last` ends it. `data` must stay valid until this
  /// returns. An error: the upstream cannot take it (gone, or its window stayed shut
  /// until `until`). A request's trailer fields are never relayed (RFC 9110 6.5.1).
  virtual asio::awaitable<beast::error_code> send_body(std::string_view data, bool last,
                                                       TimePoint until) = 0;
  /// send_body()'s outcome when the socket took the piece at once, with no coroutine
  /// frame; otherwise none, and send_body() must be awaited next with the same piece:
  /// it sends what this left (by default, having done nothing, all of it).
  virtual std::optional<beast::error_code> send_body_now(std::string_view data, bool last) {
    return std::nullopt;
  }
  /// Whether the upstream stopped taking the request before it took the whole body:
  /// it ended the stream or connection, or its answer came (HTTP/2: whole; a head
  /// alone may want the rest). The answer tells the rest, and the rest is not sent
  /// (RFC 9112 9.6, RFC 9113 §8.1).
  virtual bool answered_early() const { return false; }
  /// Whether the answer may be read while the request is still being sent, by another
  /// coroutine on the same executor (HTTP/2: each direction of a stream has its own
  /// flow control). An HTTP/1.1 connection is read after its request went whole.
  virtual bool full_duplex() const { return false; }
  /// Ends the exchange from the proxy's side (HTTP/2: RST_STREAM CANCEL): a send or a
  /// read under way, in either direction, returns, and later ones fail at once. For a
  /// full-duplex call whose other direction stops (the client's body broke off, or
  /// the answer is over).
  virtual void interrupt() {}

  // ---- The answer.
  /// Reads the next head, by `until`: an interim answer (1xx; never 100, which
  /// answers an expectation the proxy met itself, nor 101: an error) or the final
  /// one. `head_request`: the answer has no body (RFC 9110 9.3.2). `body_limit`: a
  /// body longer than this is an error. `fields`: where the answer's fields live.
  /// A stream the upstream refused unprocessed is sent again where that is safe.
  virtual asio::awaitable<beast::error_code> read_head(bool head_request,
                                                       std::optional<std::uint64_t> body_limit,
                                                       FieldsAllocator fields, TimePoint until) = 0;
  /// The head read last. The caller may change it (hop-by-hop fields out, the
  /// proxy's own in) before it sends it on.
  virtual ResponseHeader& head() = 0;
  /// Whether head() is an interim answer (the final one is still to come).
  bool interim() { return head().result_int() / 100 == 1; }
  /// How the final answer's body is framed, as the upstream framed it: none (HEAD,
  /// 204, 304), a length, or unknown; `trailers`: trailer fields may follow (a
  /// chunked HTTP/1.1 answer, an HTTP/2 one that announces them with Trailer).
  virtual Framing framing() const = 0;
  /// The next piece of the final answer's body, by `until`. Once the piece with
  /// `end` was read, the connection or stream is free for the next call (a client
  /// on HTTP/2 may open its next stream as soon as it has the last bytes), and
  /// every later read returns `end` again with no data.
  virtual asio::awaitable<AnswerPiece> read_body(TimePoint until) = 0;
  /// Whether the request may have been processed: false only when the upstream
  /// refused it unprocessed (RFC 9113 §8.7) and it was not sent again.
  virtual bool maybe_processed() const { return true; }
  /// Whether any of the request reached the upstream: false when a write failed before
  /// any of it went (a connection that could not take it, a stream never opened), so
  /// that nothing can have run. A write that fails after some went is a failure after
  /// sending: the upstream may have acted on what it read.
  virtual bool reached_upstream() const { return true; }

 protected:
  virtual ~UpstreamCall() = default;
};

struct DestroyCall {
  void operator()(UpstreamCall* call) const noexcept { call->destroy(); }
};
using UpstreamCallPtr = std::unique_ptr<UpstreamCall, DestroyCall>;

/// Where calls come from: the pool (upstream/pool.hpp), or a fake in tests.
class Upstream {
 public:
  virtual ~Upstream() = default;
  /// A call on an idle connection that still looks open or a new one (HTTP/1.1), or
  /// on a stream of a shared HTTP/2 connection. `memory`: where the call lives (a
  /// client connection's arena).
  virtual asio::awaitable<std::pair<beast::error_code, UpstreamCallPtr>> open_call(
      FieldsAllocator memory) = 0;
  /// open_call()'s call when an idle connection is at hand, with no coroutine frame;
  /// null, having taken nothing, when open_call() must be awaited.
  virtual UpstreamCallPtr open_call_now(FieldsAllocator memory) { return nullptr; }
};

}  // namespace idemproxy::upstream

#pragma once
// One exchange with the upstream, whatever carries it: a pooled HTTP/1.1 connection
// (Http1Call, pool.cpp) or a stream of a shared HTTP/2 connection (h2::StreamCall,
// h2_call.cpp). The phases drive both through this interface, as a client's exchange
// (http/exchange.hpp) hides its codec from them: the request goes out, the final
// answer's head comes back past any interim ones, and the body is relayed to the
// client as it arrives.
#include <boost/optional.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/exchange.hpp"
#include "http/problem.hpp"

namespace idemproxy::http {

/// Where a relay stopped: reading from its source or writing to its sink.
enum class RelayError { none, read, write };

/// Where interim (1xx) answers go while the final one is awaited: the client's
/// exchange (which sends none to an HTTP/1.0 client, RFC 9110 15.2). Null: dropped.
struct InterimSink {
  Exchange* client = nullptr;
};

class UpstreamCall {
 public:
  /// Destroys the call and frees its memory where it came from (a client
  /// connection's arena for a pooled HTTP/1.1 call: no heap call per request).
  virtual void destroy() noexcept = 0;

  /// Sends `head` (already prepared and framed for forwarding, frame_request), then
  /// the client's body as `from` delivers it. Reads wait at most `deadline`
  /// (server.body_timeout) in all; each write, or wait for the upstream's window,
  /// at most `timeout`. A request's trailer fields are never relayed (RFC 9110
  /// 6.5.1). `read_error` says why reading stopped.
  virtual asio::awaitable<RelayError> send_request(RequestHeader& head, Exchange& from,
                                                   Duration timeout,
                                                   std::optional<Exchange::TimePoint> deadline,
                                                   BodyPiece::Error& read_error,
                                                   beast::error_code& write_error) = 0;

  /// Reads the final answer's head, within `timeout`: each interim answer but 100
  /// goes to `sink` (100 Continue answers an expectation the proxy handled itself).
  /// `head_request`: the answer has no body (RFC 9110 9.3.2). `body_limit`: a body
  /// longer than this is an error. `fields`: where the answer's fields live.
  virtual asio::awaitable<beast::error_code> read_final_head(
      bool head_request, boost::optional<std::uint64_t> body_limit, const InterimSink& sink,
      FieldsAllocator fields, Duration timeout) = 0;

  /// The final answer's head, once read_final_head succeeded. The caller may change
  /// it (hop-by-hop fields out, the proxy's own in) before relay_answer sends it.
  virtual ResponseHeader& head() = 0;

  /// Writes the answer to `to`: head(), then `prefix` (body bytes already read), then
  /// the rest as it arrives, then its trailers. `grpc`: the call is gRPC (decided
  /// once, on the client's request), so its answer ends in trailers whatever its
  /// length. Each read from the upstream waits at most `timeout`. The connection or
  /// stream is given back once the answer is read, before its last bytes are written
  /// (a client on HTTP/2 may open its next stream as soon as it has them).
  virtual asio::awaitable<RelayError> relay_answer(std::string_view prefix, bool head_request,
                                                   bool grpc, Exchange& to, Duration timeout,
                                                   beast::error_code& read_error) = 0;

 protected:
  virtual ~UpstreamCall() = default;
};

struct DestroyCall {
  void operator()(UpstreamCall* call) const noexcept { call->destroy(); }
};
using UpstreamCallPtr = std::unique_ptr<UpstreamCall, DestroyCall>;

/// A buffered upstream answer, or the error that prevented one, or (over
/// max_response_size) what is needed to stream the answer on.
struct UpstreamAnswer {
  std::optional<ProxyError> error;
  bool sent = false;  // whether the request may have reached the upstream
  StringResponse response;
  std::vector<store::Header> trailers;  // of a chunked answer (RFC 9110 6.5)
  /// Set when the body outgrew max_response_size: `call` holds the head and the rest,
  /// `prefix` the body read so far. Never truncated: it is streamed.
  struct Oversized {
    UpstreamCallPtr call;
    std::string prefix;
  };
  std::optional<Oversized> oversized;
};

}  // namespace idemproxy::http

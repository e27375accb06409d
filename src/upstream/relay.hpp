#pragma once
// Streams one message body between a client's exchange and an HTTP/1.1 upstream
// connection as it arrives, in fixed-size chunks: pass-through both ways, and the
// idempotent path for answers too large to store.
#include <chrono>
#include <functional>
#include <optional>
#include <string_view>

#include "http/exchange.hpp"
#include "upstream/call.hpp"
#include "upstream/pool.hpp"

namespace idemproxy::http {

/// Sets the framing fields of a request the proxy forwards from what the codec read,
/// never from the sender's text (RFC 9112 6.3: a message's framing is the receiver's
/// reading of it; a proxy that copied it would pass on "Content-Length: 2, 2"): one
/// Content-Length when the length is declared, chunked otherwise (RFC 9112 7.1), with
/// the transfer codings before chunked kept; none for a request without a body.
void frame_request(RequestHeader& head, const Exchange& from);

/// Writes `head`, then the client's body as `from` delivers it, to `to`. The first
/// write carries the head with the first body bytes. Reads wait at most `deadline`
/// (server.body_timeout) in all; writes `timeout` each. A request's trailer fields
/// are never relayed (RFC 9110 6.5.1). `read_error` says why reading stopped.
asio::awaitable<RelayError> send_request(UpstreamConnection& to, RequestHeader& head,
                                         Exchange& from, Duration timeout,
                                         std::optional<Exchange::TimePoint> deadline,
                                         BodyPiece::Error& read_error,
                                         beast::error_code& write_error);

/// Writes the answer `parser` read the head of to `to`: that head (the caller has
/// made it the client's), then `prefix` (body bytes already read), then the rest as
/// `from` delivers it, then the trailers of a chunked answer. A body whose length is
/// known and fits one chunk goes out with its head in one write. Each read from the
/// upstream waits at most `timeout`. `answer_read` is called once the whole answer
/// has been read, before its last bytes are written: `from` is then no longer used,
/// and may go back to its pool while the client still takes the end (a client on
/// HTTP/2 may open its next stream as soon as it has it).
asio::awaitable<RelayError> relay_answer(UpstreamConnection& from, StreamingParser& parser,
                                         std::string_view prefix, bool head_request, Exchange& to,
                                         Duration timeout, beast::error_code& read_error,
                                         const std::function<void()>& answer_read);

}  // namespace idemproxy::http

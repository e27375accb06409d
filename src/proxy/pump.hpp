#pragma once
// The pump between the two hops: the client's exchange (http/exchange.hpp) on one
// side, an upstream call (upstream/call.hpp) on the other. Each side is read only as
// the other takes what was read, so a slow reader holds back its own writer and no
// one else (TCP's window, HTTP/2's stream window). Pass-through and covered routes
// alike use it; the upstream layer never sees a client's exchange.
#include <chrono>
#include <optional>
#include <string_view>

#include "http/exchange.hpp"
#include "proxy/http_names.hpp"
#include "upstream/call.hpp"

namespace idemproxy::proxy {

/// Where a relay stopped: reading from its source or writing to its sink.
enum class RelayError { none, read, write };

/// Sends `head` (prepared and framed for forwarding) with the fields the proxy added
/// (`extra`) to `call`, then the client's
/// body as `from` delivers it. Reads wait at most `deadline` (server.body_timeout) in
/// all; each write, or wait for the upstream's window, at most `timeout`. The client's
/// trailer fields are never relayed (RFC 9110 6.5.1). `read_error` says why reading
/// stopped, `write_error` why writing did. `te_trailers`: the client sent `te: trailers`.
/// For requests under no key only: one with no body and a method a repeat cannot harm
/// is sent as resendable (upstream::RequestFraming). `answer_over`, when given, makes
/// the request full duplex (RequestSide, proxy/duplex.hpp): its head went already
/// (send_request_head), its body is sent while another coroutine reads the answer,
/// and stops once that says the answer is over.
asio::awaitable<RelayError> send_request(upstream::UpstreamCall& call, RequestHeader& head,
                                         const ExtraFields& extra, Exchange& from, bool te_trailers,
                                         Duration timeout,
                                         std::optional<Exchange::TimePoint> deadline,
                                         BodyPiece::Error& read_error,
                                         beast::error_code& write_error,
                                         const bool* answer_over = nullptr);

/// The head alone, framed as send_request frames it: a full-duplex request's first
/// step, taken before its answer is read.
asio::awaitable<beast::error_code> send_request_head(upstream::UpstreamCall& call,
                                                     RequestHeader& head, const ExtraFields& extra,
                                                     const Exchange& from, bool te_trailers,
                                                     Duration timeout);

/// Reads the answer's heads by `until` until the final one: each interim one goes to
/// `interim_to` (hop-by-hop fields out; an HTTP/1.0 client gets none, RFC 9110 15.2),
/// or nowhere when it is null.
asio::awaitable<beast::error_code> read_final_head(upstream::UpstreamCall& call,
                                                   Exchange* interim_to, bool head_request,
                                                   std::optional<std::uint64_t> body_limit,
                                                   FieldsAllocator fields,
                                                   Exchange::TimePoint until);

/// Relays the final answer `call` read the head of to `to`: that head (the caller
/// made it the client's), then `prefix` (body bytes already read), then the rest as
/// it arrives, then its trailers. `expect_trailers`: the answer ends in trailers
/// whatever its length (gRPC, decided once on the client's request). Each read from
/// the upstream waits at most `timeout`.
asio::awaitable<RelayError> relay_answer(upstream::UpstreamCall& call, Exchange& to,
                                         std::string_view prefix, bool expect_trailers,
                                         Duration timeout, beast::error_code& read_error);

}  // namespace idemproxy::proxy

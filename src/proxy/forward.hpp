#pragma once
// What the proxy writes into a request on its way upstream, and the fields it owns.
#include <string>
#include <vector>

#include "http/beast.hpp"
#include "http/exchange.hpp"
#include "idemproxy/common/clock.hpp"
#include "idemproxy/config/config.hpp"
#include "idemproxy/store/store.hpp"
#include "proxy/http_names.hpp"

namespace idemproxy::proxy {

/// Prepares a client request for the upstream: HTTP/1.1 keep-alive, the upstream's
/// base path prefixed, hop-by-hop removed, Expect answered here, X-Forwarded-For
/// appended, X-Forwarded-Proto (https when the peer came over TLS) and -Host set when
/// absent. Host is kept as sent, or set to the upstream's authority when the client
/// sent none. te goes too; the return value says whether the client sent
/// `te: trailers`, for the upstream's codec to decide on (upstream/call.hpp). The
/// fields added go in `extra`, to be sent after the head's (upstream/call.hpp);
/// `peer` and the head's Host must outlive the send.
bool prepare_forward(RequestHeader& req, ExtraFields& extra, const Peer& peer,
                     const config::UpstreamConfig& upstream);

/// Sets the framing fields of a request the proxy forwards from what the codec read,
/// never from the sender's text (RFC 9112 6.3: a message's framing is the receiver's
/// reading of it; a proxy that copied it would pass on "Content-Length: 2, 2"): one
/// Content-Length when the length is declared, chunked otherwise (RFC 9112 7.1), with
/// the transfer codings before chunked kept; none for a request without a body. The
/// sender's framing fields are erased from `head`, the proxy's go in `extra`.
void frame_request(RequestHeader& head, ExtraFields& extra, const Exchange& from);

/// Frames a request whose body was read whole as Beast's prepare_payload does, leaving
/// alone a head framed so already (one Content-Length, the body's size as written, and
/// no Transfer-Encoding): nearly every request, where setting the field again cost
/// about 780 instructions. A body in transfer codings besides chunked goes chunked
/// with them, with no Content-Length.
void frame_whole(StringRequest& req);

std::vector<Header> to_headers(const Fields& fields);

/// An IMF-fixdate (RFC 9110 5.6.7), e.g. "Sun, 06 Nov 1994 08:49:37 GMT".
std::string http_date(TimePoint t);

/// Tells the client until when its key is honoured: Idempotency-Key-Expires.
inline constexpr const char* kExpiresHeader = "Idempotency-Key-Expires";
/// The claim's fencing token, to the upstream (forward_fencing_token). Only the proxy
/// sets it: a client's field of this name never reaches an upstream.
inline constexpr const char* kFencingTokenHeader = "Idempotency-Fencing-Token";

}  // namespace idemproxy::proxy

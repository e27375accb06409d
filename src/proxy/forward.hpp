#pragma once
// What the proxy writes into a request on its way upstream, and the fields it owns.
#include <string>
#include <vector>

#include "http/beast.hpp"
#include "http/exchange.hpp"
#include "idemproxy/common/clock.hpp"
#include "idemproxy/config/config.hpp"
#include "idemproxy/store/store.hpp"

namespace idemproxy::http {

/// Prepares a client request for the upstream: HTTP/1.1 keep-alive, the upstream's
/// base path prefixed, hop-by-hop removed, Expect answered here, X-Forwarded-For
/// appended, X-Forwarded-Proto (https when the peer came over TLS) and -Host set when
/// absent. Host is kept as sent, or set to the upstream's authority when the client
/// sent none.
void prepare_forward(RequestHeader& req, const Peer& peer, const config::UpstreamConfig& upstream);

std::vector<store::Header> to_headers(const Fields& fields);

/// An IMF-fixdate (RFC 9110 5.6.7), e.g. "Sun, 06 Nov 1994 08:49:37 GMT".
std::string http_date(TimePoint t);

/// Tells the client until when its key is honoured: Idempotency-Key-Expires.
inline constexpr const char* kExpiresHeader = "Idempotency-Key-Expires";
/// The claim's fencing token, to the upstream (forward_fencing_token). Only the proxy
/// sets it: a client's field of this name never reaches an upstream.
inline constexpr const char* kFencingTokenHeader = "Idempotency-Fencing-Token";

}  // namespace idemproxy::http

#pragma once
// Header rewriting at the proxy boundary.
#include <string>
#include <vector>

#include "http/beast.hpp"
#include "idemproxy/config/config.hpp"
#include "idemproxy/engine/replay_cache.hpp"
#include "idemproxy/store/store.hpp"

namespace idemproxy::http {

/// Removes hop-by-hop headers (RFC 9110 7.6.1), including those the Connection
/// header names. Framing headers stay: a streamed body still needs them.
void strip_hop_by_hop(bhttp::fields& fields);

/// Prepares a client request for the upstream: HTTP/1.1 keep-alive, the upstream's
/// base path prefixed, hop-by-hop removed, Expect answered here, X-Forwarded-For
/// appended, X-Forwarded-Proto (https when `tls`) and -Host set when absent. Host is
/// kept as sent, or set to the upstream's authority when the client sent none.
void prepare_forward(bhttp::request_header<>& req, const std::string& client_ip, bool tls,
                     const config::UpstreamConfig& upstream);

std::vector<store::Header> to_headers(const bhttp::fields& fields);

/// An IMF-fixdate (RFC 9110 5.6.7), e.g. "Sun, 06 Nov 1994 08:49:37 GMT".
std::string http_date(TimePoint t);

/// Tells the client until when its key is honoured: Idempotency-Key-Expires.
inline constexpr const char* kExpiresHeader = "Idempotency-Key-Expires";

/// A stored response, as sent to a retry, marked Idempotent-Replayed: true.
StringResponse replay_response(const store::StoredResponse& stored, TimePoint expires_at,
                               unsigned version, bool keep_alive);

/// A replay cache entry, with the head replay_response would send to an HTTP/1.1
/// client serialized once (not for 1xx, 204 and 304 answers, which have no
/// Content-Length: those replays are built per request).
/// `valid_until`: until when this process may replay it (ReplayCache::Entry).
engine::ReplayCache::Entry cache_entry(std::string fingerprint, store::StoredResponse stored,
                                       TimePoint expires_at,
                                       engine::ReplayCache::Deadline valid_until,
                                       engine::ReplayCache::Request request);

}  // namespace idemproxy::http

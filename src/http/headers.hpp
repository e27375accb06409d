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
void strip_hop_by_hop(Fields& fields);

/// Prepares a client request for the upstream: HTTP/1.1 keep-alive, the upstream's
/// base path prefixed, hop-by-hop removed, Expect answered here, X-Forwarded-For
/// appended, X-Forwarded-Proto (https when `tls`) and -Host set when absent. Host is
/// kept as sent, or set to the upstream's authority when the client sent none.
void prepare_forward(RequestHeader& req, const std::string& client_ip, bool tls,
                     const config::UpstreamConfig& upstream);

std::vector<store::Header> to_headers(const Fields& fields);

/// Names the fields of a buffered gRPC answer that arrived as trailers; the HTTP/2
/// bridge sends them as trailers again and drops this field.
inline constexpr const char* kTrailersField = "Idemproxy-Trailers";

/// The trailer fields of a chunked message whose head had `head_fields` fields:
/// Beast's parser appends trailers to the message's fields, after the head's.
/// Fields a trailer must not carry (RFC 9110 6.5.1: framing, routing, connection
/// control) are left out. Relayed on responses only: gRPC carries its status in
/// them (grpc-status, grpc-message).
std::vector<std::pair<std::string, std::string>> trailers_after(const Fields& fields,
                                                                std::size_t head_fields);

/// An IMF-fixdate (RFC 9110 5.6.7), e.g. "Sun, 06 Nov 1994 08:49:37 GMT".
std::string http_date(TimePoint t);

/// Tells the client until when its key is honoured: Idempotency-Key-Expires.
inline constexpr const char* kExpiresHeader = "Idempotency-Key-Expires";
/// The claim's fencing token, to the upstream (forward_fencing_token). A client's
/// field of this name is removed on every covered route: only the proxy sets it.
inline constexpr const char* kFencingTokenHeader = "Idempotency-Fencing-Token";

/// The trace id a stored response was executed under, or "" (records written before
/// 0.2, or answers too large to store).
std::string original_trace_id(const store::StoredResponse& stored);

/// A stored response, as sent to a retry, marked Idempotent-Replayed: true.
StringResponse replay_response(const store::StoredResponse& stored, TimePoint expires_at,
                               unsigned version, bool keep_alive);

/// Serializes, once, the head replay_response would send an HTTP/1.1 client with
/// keep-alive, without Connection, X-Request-Id and the blank line (send_cached adds
/// those per request). The coordinator calls it before it caches an entry.
void prepare_replay_head(engine::ReplayCache::Entry& entry);

}  // namespace idemproxy::http

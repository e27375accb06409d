#pragma once
// Errors caused by traffic, the upstream or the store, as values.
// problem_response() is the one place that turns them into RFC 9457 responses.
#include <optional>
#include <string>
#include <vector>

#include "http/beast.hpp"
#include "idemproxy/engine/coordinator.hpp"
#include "idemproxy/engine/policy.hpp"

namespace idemproxy::http {

enum class ProblemKind {
  malformed_request,      // 400: the HTTP framing or syntax is broken
  header_too_large,       // 431
  missing_key,            // 400
  bad_key,                // 400
  invalid_key,            // 400: key_json_pointer found no usable key in the body
  body_too_large,         // 413
  key_mismatch,           // 422
  request_in_flight,      // 409 + Retry-After
  outcome_unknown,        // 409: the holder vanished; use a new key
  outcome_indeterminate,  // 409: the upstream got it, no answer; use a new key
  store_unavailable,      // 503 + Retry-After
  upstream_unreachable,   // 502: nothing was sent
  upstream_failed,        // 502: sent, then the connection failed
  upstream_timeout,       // 504: sent, no answer in time
  response_not_stored,    // 409: executed, but the answer was too big to store
  record_unreadable,      // 500: a sealed record does not open
  expired,                // 409: the key's answer expired and it never executes twice
  quota_exceeded,         // 429: a new key of a tenant at a cap of its route's quota
  internal,               // 500: a defect in the proxy
};

struct ProxyError {
  ProblemKind kind = ProblemKind::malformed_request;
  std::string detail;
  std::optional<int> retry_after_seconds;
  /// The route's own status for this kind (`statuses`), instead of the usual one.
  std::optional<unsigned> status;
};

/// The status a route's `statuses` gives this kind of refusal, if it changes it.
std::optional<unsigned> route_status(const engine::RoutePolicy& route, ProblemKind kind);

/// The stable `type` URI of a problem kind.
std::string problem_type(ProblemKind kind);

/// One problem as the published policy lists it: what it is called, the status a
/// route answers it with (its `statuses` applied) and, for gRPC clients, the code.
struct ProblemEntry {
  std::string type;
  std::string title;
  unsigned status = 0;
  int grpc_code = 0;
};
/// Every problem a covered route can answer with, in ProblemKind order.
std::vector<ProblemEntry> problem_catalog(const engine::RoutePolicy& route);
/// The problem a coordinator's refusal is answered with.
ProxyError refusal_error(engine::Refusal why, std::string detail, std::optional<int> retry_after);

/// The problem+json answer (RFC 9457) to `error`: its head and body.
StringResponse problem_response(const ProxyError& error);

/// A refusal for a gRPC client: a trailers-only answer (HTTP 200, grpc-status,
/// grpc-message in its one HEADERS frame) with the gRPC status that means what the
/// problem means, never problem+json: INVALID_ARGUMENT for a missing or invalid key,
/// FAILED_PRECONDITION for another body, ABORTED in flight or when the outcome is
/// unknown, UNAVAILABLE when the store or the upstream is, RESOURCE_EXHAUSTED when
/// too large.
StringResponse grpc_refusal(const ProxyError& error);

}  // namespace idemproxy::http

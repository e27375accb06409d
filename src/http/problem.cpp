// Problem responses (RFC 9457) and gRPC refusals: the one place where an error from
// traffic, the upstream or the store becomes what the client is told.
#include "http/problem.hpp"

#include <nlohmann/json.hpp>

namespace idemproxy::http {
namespace {

struct ProblemInfo {
  const char* slug;
  unsigned status;
  const char* title;
};

ProblemInfo info(ProblemKind kind) {
  switch (kind) {
    case ProblemKind::malformed_request:
      return {"malformed-request", 400, "Malformed HTTP request"};
    case ProblemKind::header_too_large:
      return {"header-too-large", 431, "Request header fields too large"};
    case ProblemKind::missing_key:
      return {"missing-key", 400, "Idempotency-Key is required"};
    case ProblemKind::bad_key:
      return {"bad-key", 400, "Invalid Idempotency-Key"};
    case ProblemKind::invalid_key:
      return {"invalid-key", 400, "No usable idempotency key in the request body"};
    case ProblemKind::body_too_large:
      return {"body-too-large", 413, "Request body too large"};
    case ProblemKind::key_mismatch:
      return {"key-mismatch", 422, "Idempotency-Key reused with a different request"};
    case ProblemKind::request_in_flight:
      return {"request-in-flight", 409, "A request with this Idempotency-Key is in progress"};
    case ProblemKind::outcome_unknown:
      return {"outcome-unknown", 409,
              "The outcome of the request with this Idempotency-Key is unknown"};
    case ProblemKind::outcome_indeterminate:
      return {"outcome-indeterminate", 409,
              "The request with this Idempotency-Key may have executed"};
    case ProblemKind::store_unavailable:
      return {"store-unavailable", 503, "Idempotency store unavailable"};
    case ProblemKind::upstream_unreachable:
      return {"upstream-unreachable", 502, "Upstream unreachable"};
    case ProblemKind::upstream_failed:
      return {"upstream-failed", 502, "Upstream connection failed"};
    case ProblemKind::upstream_timeout:
      return {"upstream-timeout", 504, "Upstream timed out"};
    case ProblemKind::response_not_stored:
      return {"response-not-stored", 409, "Response too large to replay"};
    case ProblemKind::record_unreadable:
      return {"record-unreadable", 500, "Idempotency record unreadable"};
    case ProblemKind::expired:
      return {"expired", 409, "Idempotency-Key expired"};
    case ProblemKind::quota_exceeded:
      return {"quota-exceeded", 429, "Idempotency quota exceeded"};
    case ProblemKind::internal:
      break;
  }
  return {"internal", 500, "Internal error"};
}

}  // namespace

std::string problem_type(ProblemKind kind) {
  return std::string("https://idemproxy.dev/problems/") + info(kind).slug;
}

ProxyError refusal_error(engine::Refusal why, std::string detail, std::optional<int> retry_after) {
  using engine::Refusal;
  ProblemKind kind = ProblemKind::store_unavailable;
  switch (why) {
    case Refusal::key_mismatch:
      kind = ProblemKind::key_mismatch;
      break;
    case Refusal::request_in_flight:
      kind = ProblemKind::request_in_flight;
      break;
    case Refusal::outcome_unknown:
      kind = ProblemKind::outcome_unknown;
      break;
    case Refusal::outcome_indeterminate:
      kind = ProblemKind::outcome_indeterminate;
      break;
    case Refusal::store_unavailable:
      kind = ProblemKind::store_unavailable;
      break;
    case Refusal::response_not_stored:
      kind = ProblemKind::response_not_stored;
      break;
    case Refusal::record_unreadable:
      kind = ProblemKind::record_unreadable;
      break;
    case Refusal::expired:
      kind = ProblemKind::expired;
      break;
    case Refusal::quota_exceeded:
      kind = ProblemKind::quota_exceeded;
      break;
  }
  return {kind, std::move(detail), retry_after, std::nullopt};
}

std::optional<unsigned> route_status(const engine::RoutePolicy& route, ProblemKind kind) {
  const auto& s = route.statuses;
  switch (kind) {
    case ProblemKind::missing_key:
      return s.missing_key;
    case ProblemKind::key_mismatch:
      return s.mismatch;
    case ProblemKind::request_in_flight:
      return s.in_flight;
    case ProblemKind::store_unavailable:
      return s.store_unavailable;
    case ProblemKind::expired:
      return s.expired;
    default:
      return std::nullopt;
  }
}

StringResponse problem_response(const ProxyError& error) {
  const ProblemInfo i = info(error.kind);
  const unsigned status = error.status.value_or(i.status);
  nlohmann::json body = {{"type", problem_type(error.kind)},
                         {"title", i.title},
                         {"status", status},
                         {"detail", error.detail}};
  StringResponse res{static_cast<bhttp::status>(status), 11};
  res.set(bhttp::field::content_type, "application/problem+json");
  res.set(bhttp::field::cache_control, "no-store");
  if (error.retry_after_seconds) {
    res.set(bhttp::field::retry_after, std::to_string(*error.retry_after_seconds));
  }
  res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  return res;
}

namespace {

int grpc_code(ProblemKind kind) {
  switch (kind) {
    case ProblemKind::malformed_request:
    case ProblemKind::missing_key:
    case ProblemKind::bad_key:
    case ProblemKind::invalid_key:
      return 3;  // INVALID_ARGUMENT
    case ProblemKind::key_mismatch:
    case ProblemKind::expired:
      return 9;  // FAILED_PRECONDITION
    case ProblemKind::request_in_flight:
    case ProblemKind::outcome_unknown:
    case ProblemKind::outcome_indeterminate:
    case ProblemKind::response_not_stored:
      return 10;  // ABORTED
    case ProblemKind::header_too_large:
    case ProblemKind::body_too_large:
    case ProblemKind::quota_exceeded:
      return 8;  // RESOURCE_EXHAUSTED
    case ProblemKind::store_unavailable:
    case ProblemKind::upstream_unreachable:
    case ProblemKind::upstream_failed:
      return 14;  // UNAVAILABLE
    case ProblemKind::upstream_timeout:
      return 4;  // DEADLINE_EXCEEDED
    case ProblemKind::record_unreadable:
    case ProblemKind::internal:
      break;
  }
  return 13;  // INTERNAL
}

// grpc-message is percent-encoded UTF-8 (gRPC's HTTP/2 protocol): bytes outside
// printable ASCII, and '%', become %XX.
std::string grpc_message(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const unsigned char c : text) {
    if (c < 0x20 || c > 0x7e || c == '%') {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace

std::vector<ProblemEntry> problem_catalog(const engine::RoutePolicy& route) {
  std::vector<ProblemEntry> out;
  for (int k = 0; k <= static_cast<int>(ProblemKind::internal); ++k) {
    const auto kind = static_cast<ProblemKind>(k);
    const ProblemInfo i = info(kind);
    out.push_back({problem_type(kind), i.title, route_status(route, kind).value_or(i.status),
                   grpc_code(kind)});
  }
  return out;
}

StringResponse grpc_refusal(const ProxyError& error) {
  StringResponse res{bhttp::status::ok, 11};
  res.set(bhttp::field::content_type, "application/grpc");
  res.set("grpc-status", std::to_string(grpc_code(error.kind)));
  // The problem type's last segment names the refusal, as it does over HTTP.
  const auto type = problem_type(error.kind);
  res.set("grpc-message", grpc_message(type.substr(type.rfind('/') + 1) + ": " + error.detail));
  if (error.retry_after_seconds) {
    res.set(bhttp::field::retry_after, std::to_string(*error.retry_after_seconds));
  }
  return res;
}

}  // namespace idemproxy::http

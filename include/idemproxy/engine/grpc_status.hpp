#pragma once
// gRPC status codes (grpc/doc/statuscodes.md): names for configuration, and which
// of them say "try again" and so are never stored.
#include <optional>
#include <string_view>

#include "idemproxy/common/clock.hpp"

namespace idemproxy::engine {

/// The code of a status name ("NOT_FOUND" is 5), or nullopt for an unknown name.
std::optional<int> grpc_status_code(std::string_view name);
/// The name of a code ("NOT_FOUND" for 5), or "" past the last (16).
std::string_view grpc_status_name(int code);
/// UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED, CANCELLED, INTERNAL
/// and UNKNOWN: the call may succeed if tried again, so the claim is released, as
/// for an HTTP 5xx or 429.
bool grpc_status_retryable(int code);
/// Whether a content type is gRPC over HTTP/2: application/grpc, or +proto, +json or
/// any other subtype suffix. (gRPC-Web, application/grpc-web, frames its trailers
/// into the body and is not.)
bool is_grpc_content_type(std::string_view content_type);
/// A grpc-timeout value ("1S", "250m", "100u"; at most 8 digits, then H, M, S, m, u
/// or n), or nullopt when it is not one.
std::optional<Duration> parse_grpc_timeout(std::string_view text);

}  // namespace idemproxy::engine

#include "idemproxy/engine/grpc_status.hpp"

#include <array>
#include <cstdint>

#include "idemproxy/common/header.hpp"

namespace idemproxy::engine {
namespace {

constexpr std::array<std::string_view, 17> kNames = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

}  // namespace

std::optional<int> grpc_status_code(std::string_view name) {
  for (std::size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<int>(i);
  }
  return std::nullopt;
}

std::string_view grpc_status_name(int code) {
  if (code < 0 || static_cast<std::size_t>(code) >= kNames.size()) return {};
  return kNames[static_cast<std::size_t>(code)];
}

bool grpc_status_retryable(int code) {
  switch (code) {
    case 1:   // CANCELLED
    case 2:   // UNKNOWN
    case 4:   // DEADLINE_EXCEEDED
    case 8:   // RESOURCE_EXHAUSTED
    case 10:  // ABORTED
    case 13:  // INTERNAL
    case 14:  // UNAVAILABLE
      return true;
    default:
      return false;
  }
}

bool is_grpc_content_type(std::string_view content_type) {
  constexpr std::string_view kGrpc = "application/grpc";
  if (!equals_lower(content_type.substr(0, kGrpc.size()), kGrpc)) return false;
  const auto rest = content_type.substr(kGrpc.size());
  return rest.empty() || rest.front() == '+' || rest.front() == ';';
}

std::optional<Duration> parse_grpc_timeout(std::string_view text) {
  if (text.size() < 2 || text.size() > 9) return std::nullopt;
  std::int64_t value = 0;
  for (const char c : text.substr(0, text.size() - 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  switch (text.back()) {
    case 'H':
      return std::chrono::ceil<Duration>(std::chrono::hours{value});
    case 'M':
      return std::chrono::ceil<Duration>(std::chrono::minutes{value});
    case 'S':
      return std::chrono::ceil<Duration>(std::chrono::seconds{value});
    case 'm':
      return std::chrono::ceil<Duration>(std::chrono::milliseconds{value});
    case 'u':
      return std::chrono::ceil<Duration>(std::chrono::microseconds{value});
    case 'n':
      return std::chrono::ceil<Duration>(std::chrono::nanoseconds{value});
    default:
      return std::nullopt;
  }
}

}  // namespace idemproxy::engine

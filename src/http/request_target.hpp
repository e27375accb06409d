#pragma once
// The request target as routes see it and the upstream receives it.
#include <optional>
#include <string>
#include <string_view>

namespace idemproxy::http {

struct TargetRules {
  bool merge_slashes = true;           // server.merge_slashes
  bool reject_escaped_slashes = true;  // server.escaped_slashes: reject
};

struct RequestTarget {
  std::string forward;     // normalised origin-form path and the query: what is forwarded
  std::string route_path;  // the normalised path without ;parameters: what routes match
  std::string authority;   // the host of an absolute-form target; empty otherwise
};

/// Normalises a request target so that every spelling of one resource is routed,
/// fingerprinted and forwarded alike (an upstream's router would otherwise see a
/// protected route where idemproxy saw none):
/// - absolute-form (`http://host/p`) becomes origin-form; its authority is returned
///   for Host (RFC 9112 3.2.2: a server must accept it and ignore Host);
/// - percent-encoded unreserved characters are decoded and other escapes get upper
///   case hex (RFC 3986 6.2.2.1, 6.2.2.2); an encoded `/`, `\` or NUL, and a raw `\`,
///   are an error by default (two servers disagree on what they mean);
/// - runs of `/` are merged (when `merge_slashes`), then dot segments are removed
///   (RFC 3986 5.2.4, 6.2.2.3);
/// - routes match the path with `;parameters` removed from each segment, as Tomcat,
///   Spring and Jetty do before routing (`/v1/orders;x=1`, `/v1/a/..;/orders`).
/// The query is kept as sent. The result goes into `out`, whose strings' memory is
/// reused: a connection keeps one, so a long target allocates nothing per request.
/// Returns the reason when the target is not acceptable (`out` is then unspecified).
std::optional<std::string_view> normalize_target(std::string_view target, const TargetRules& rules,
                                                 RequestTarget& out);

/// A host (reg-name, IPv4 or IP-literal) with an optional port, in the characters
/// RFC 3986 3.2.2 allows (RFC 9110 4.2.1, 7.2).
bool valid_authority(std::string_view authority);

/// Removes dot segments from an absolute path (RFC 3986 5.2.4), in place.
void remove_dot_segments(std::string& path);

}  // namespace idemproxy::http

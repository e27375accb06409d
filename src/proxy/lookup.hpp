#pragma once
// A caller's lookup of its own key: GET <policy.path>/outcome?path=<the request's
// path>, with the key and the credentials of the request it asks about. What became
// of it (in flight, completed with its status, indeterminate, released, expired, or
// unknown), its times, and whether a retry would replay; never the stored answer.
#include "proxy/context.hpp"
#include "proxy/http_names.hpp"

namespace idemproxy::proxy {

/// The lookup's path under policy.path.
inline constexpr std::string_view kLookupSuffix = "/outcome";

/// Answers a lookup; `target` is the request's normalised target (path and query).
asio::awaitable<void> send_lookup(RequestContext& ctx, std::string_view target);

}  // namespace idemproxy::proxy

#include "idemproxy/engine/policy.hpp"

#include <strings.h>

#include <algorithm>

#include "idemproxy/engine/grpc_status.hpp"

namespace idemproxy::engine {

bool RoutePolicy::covers_method(std::string_view method) const {
  return std::any_of(methods.begin(), methods.end(),
                     [&](const std::string& m) { return m == method; });
}

bool RoutePolicy::stores_status(int status) const {
  if (status == 408 || status == 409 || status == 425 || status == 429) return false;
  return std::any_of(store_status.begin(), store_status.end(),
                     [&](const StatusRange& r) { return status >= r.low && status <= r.high; });
}

bool RoutePolicy::stores_grpc_status(int code) const {
  if (grpc_status_retryable(code)) return false;
  return std::find(store_grpc_status.begin(), store_grpc_status.end(), code) !=
         store_grpc_status.end();
}

bool RoutePolicy::denies_header(std::string_view name) const {
  return std::any_of(deny_headers.begin(), deny_headers.end(), [&](const std::string& d) {
    return d.size() == name.size() && strncasecmp(d.data(), name.data(), d.size()) == 0;
  });
}

const RoutePolicy* RouteTable::match(std::string_view target) const {
  const std::string_view path = target.substr(0, target.find('?'));
  for (const auto& route : routes_) {
    const std::string_view prefix = route.path_prefix;
    if (path.size() < prefix.size()) continue;
    if (route.case_sensitive ? !path.starts_with(prefix)
                             : strncasecmp(path.data(), prefix.data(), prefix.size()) != 0) {
      continue;
    }
    // Match whole segments: /v1/orders covers /v1/orders/7 but not /v1/ordersx.
    if (path.size() == prefix.size() || prefix.back() == '/' || path[prefix.size()] == '/') {
      return &route;
    }
  }
  return nullptr;
}

bool parse_status_range(std::string_view text, StatusRange& out) {
  if (text.size() != 3 || text[0] < '1' || text[0] > '5') return false;
  const int hundreds = (text[0] - '0') * 100;
  if (text.substr(1) == "xx" || text.substr(1) == "XX") {
    out = {hundreds, hundreds + 99};
    return true;
  }
  if (!std::isdigit(static_cast<unsigned char>(text[1])) ||
      !std::isdigit(static_cast<unsigned char>(text[2]))) {
    return false;
  }
  const int status = hundreds + (text[1] - '0') * 10 + (text[2] - '0');
  out = {status, status};
  return true;
}

std::vector<ops::TombstoneRoute> tombstone_routes(const std::vector<RoutePolicy>& routes) {
  std::vector<ops::TombstoneRoute> out;
  for (const auto& r : routes) {
    if (r.after_expiry_reject) out.push_back({r.name, r.ttl});
  }
  return out;
}

}  // namespace idemproxy::engine

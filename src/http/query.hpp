#pragma once
// A request target's query, as the proxy's own endpoints read it (the admin API, the
// key lookup).
#include <boost/url/url_view.hpp>
#include <string>
#include <string_view>

namespace idemproxy::http {

/// The percent-decoded value of the query parameter `name`; "" when it is absent.
inline std::string query_param(const boost::urls::url_view& url, std::string_view name) {
  const auto it = url.params().find(name);
  return it == url.params().end() ? std::string() : std::string((*it).value);
}

}  // namespace idemproxy::http

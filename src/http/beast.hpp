#pragma once
// Namespace aliases and completion tokens shared by the HTTP layer.
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace idemproxy::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

/// Expected errors (end of stream, timeouts) come back as values, not exceptions.
inline constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

using StringRequest = bhttp::request<bhttp::string_body>;
using StringResponse = bhttp::response<bhttp::string_body>;

}  // namespace idemproxy::http

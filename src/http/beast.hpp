#pragma once
// Namespace aliases and completion tokens shared by the HTTP layer.
#include <boost/asio.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "http/arena.hpp"
#include "idemproxy/common/header.hpp"

namespace idemproxy::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

/// Expected errors (end of stream, timeouts) come back as values, not exceptions.
/// `co_await op(use_nothrow)` awaits the operation in the caller's own frame: a deferred
/// operation, where use_awaitable would start a coroutine frame for each operation.
inline constexpr auto use_nothrow = asio::as_tuple(asio::deferred);

/// Every message's fields take their memory through ArenaAllocator: a client
/// connection's arena for its requests and their answers, the heap for the rest.
using FieldsAllocator = ArenaAllocator<char>;
using Fields = bhttp::basic_fields<FieldsAllocator>;
/// A field as the store keeps it and a replay sends it (common/header.hpp).
using idemproxy::Header;
using RequestHeader = bhttp::request_header<Fields>;
using ResponseHeader = bhttp::response_header<Fields>;
template <class Body>
using Request = bhttp::request<Body, Fields>;
template <class Body>
using Response = bhttp::response<Body, Fields>;
template <class Body>
using RequestParser = bhttp::request_parser<Body, FieldsAllocator>;
template <class Body>
using ResponseParser = bhttp::response_parser<Body, FieldsAllocator>;

using StringRequest = Request<bhttp::string_body>;
using StringResponse = Response<bhttp::string_body>;

}  // namespace idemproxy::http

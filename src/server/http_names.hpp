#pragma once
// What the server takes from the HTTP layer and the codecs below it, by the names its
// code uses. Written once here, so that each file of server/ reads as if in one
// namespace.
#include "http/beast.hpp"
#include "http/client_connection.hpp"
#include "http/exchange.hpp"
#include "http/tls.hpp"

// The codecs' namespaces, by their short names (declared here, defined by the codecs).
namespace idemproxy::codec::http1 {}
namespace idemproxy::codec::http2 {}

namespace idemproxy::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = boost::asio::ssl;
namespace h1 = codec::http1;
namespace h2 = codec::http2;
using http::alpn_chose_h2;
using http::ClientConnection;
using http::make_server_tls;
using http::offer_h2;
using http::peer_subject;
using http::RequestParser;
using http::Service;
using http::tcp;
using http::use_nothrow;

}  // namespace idemproxy::server

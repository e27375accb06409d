#pragma once
// An HTTP/1.1 client connection: read a request head, serve it, repeat while both
// sides keep the connection alive (RFC 9112 9.3).
#include <memory>

#include "codec/http_names.hpp"
#include "http/client_connection.hpp"
#include "http/exchange.hpp"

namespace idemproxy::codec::http1 {

/// Serves the connection's requests, one Exchange each, until it ends. Bytes
/// already read stay in conn->buffer.
asio::awaitable<void> serve(std::shared_ptr<ClientConnection> conn, Service& service);

}  // namespace idemproxy::codec::http1

#pragma once
// One accepted client connection, from its TLS handshake to the codec that serves it.
#include <exception>
#include <memory>

#include "codec/http2/connection.hpp"
#include "http/client_connection.hpp"
#include "http/exchange.hpp"
#include "server/http_names.hpp"
#include "server/session_tracker.hpp"

namespace idemproxy::server {

/// Serves a connection to its end: the TLS handshake (tls.cert_file), then HTTP/2
/// when ALPN chose h2 or the client starts with the preface (prior knowledge, RFC
/// 9113 §3.3) and server.http2 is on, HTTP/1.1 otherwise. HTTP/2 streams take their
/// slots from `slots`.
asio::awaitable<void> serve_client(std::shared_ptr<ClientConnection> conn, Service& service,
                                   SessionTracker& tracker,
                                   h2::StreamSlots& slots = h2::unbounded_slots());

/// The completion of a spawned session or task: sessions must never take the process
/// down, so an escaped exception is logged.
void log_exception(const std::exception_ptr& e);

}  // namespace idemproxy::server

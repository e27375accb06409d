#pragma once
// HTTP/2 from clients (RFC 9113) on the listen port. libnghttp2 does the framing,
// HPACK and flow control; each request stream is then served by the same session
// code as an HTTP/1.1 request (every phase, the coordinator, metrics and logs), over
// a local socket pair: the bridge (h2_bridge.cpp).
#include <memory>
#include <string_view>

#include "http/request_context.hpp"

namespace idemproxy::http {

/// RFC 9113 §3.4: the client connection preface; a connection that starts with it is
/// HTTP/2 with prior knowledge (§3.3).
inline constexpr std::string_view kH2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Serves one HTTP/2 connection, chosen by its preface (h2c) or by ALPN (h2); bytes
/// already read stay in conn->buffer. Returns when the connection and all its
/// streams are done.
asio::awaitable<void> serve_h2(std::shared_ptr<ClientConnection> conn, Runtime& rt);

/// Installs ALPN selection (RFC 7301) on the server TLS context: "h2" while
/// server.http2 is on, then "http/1.1"; a client offering neither gets no ALPN.
void offer_h2(ssl::context& tls, Runtime& rt);

/// Whether the TLS handshake on `stream` chose "h2".
bool alpn_chose_h2(Stream& stream);

}  // namespace idemproxy::http

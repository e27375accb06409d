#pragma once
// TLS contexts built from the configuration (OpenSSL 3 through Asio).
#include <functional>
#include <memory>

#include "http/stream.hpp"
#include "idemproxy/config/config.hpp"

namespace idemproxy::http {

/// Downstream termination: TLS 1.2+, the certificate chain and key, and with
/// client_ca_file, mandatory client certificates. Throws std::runtime_error naming
/// the file that failed.
std::unique_ptr<ssl::context> make_server_tls(const config::TlsConfig& tls);

/// Upstream https: verification on unless insecure_skip_verify, against ca_file
/// or the system trust store. Throws std::runtime_error naming the file that failed.
std::unique_ptr<ssl::context> make_upstream_tls(const config::UpstreamTls& tls);

/// Installs ALPN selection (RFC 7301) on the server TLS context: "h2" while
/// `http2()` says so (server.http2), then "http/1.1"; a client offering neither gets
/// no ALPN. `http2` must outlive the context.
void offer_h2(ssl::context& tls, const std::function<bool()>* http2);

/// Whether the TLS handshake on `stream` chose "h2".
bool alpn_chose_h2(Stream& stream);

/// Offers ALPN on an upstream TLS context: h2 alone, or h2 then http/1.1 (auto).
void offer_upstream_alpn(ssl::context& tls, bool with_http1);

/// Prepares a new upstream stream: SNI (unless the host is an IP address) and
/// verification of `host` against the certificate.
void prepare_upstream_tls(Stream& stream, const config::UpstreamConfig& upstream);

}  // namespace idemproxy::http

#pragma once
// TLS contexts built from the configuration (OpenSSL 3 through Asio).
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

/// Prepares a new upstream stream: SNI (unless the host is an IP address) and
/// verification of `host` against the certificate.
void prepare_upstream_tls(Stream& stream, const config::UpstreamConfig& upstream);

}  // namespace idemproxy::http

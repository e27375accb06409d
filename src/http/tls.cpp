#include "http/tls.hpp"

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <cstring>
#include <stdexcept>

namespace idemproxy::http {
namespace {

// Runs one context setup step; a failure names the setting and file involved.
template <class Step>
void step(const char* setting, const std::string& file, Step&& run) {
  beast::error_code ec;
  run(ec);
  if (ec) {
    throw std::runtime_error(std::string(setting) + " " + file + ": " + ec.message());
  }
}

void modern_only(ssl::context& ctx) {
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                  ssl::context::no_sslv3 | ssl::context::no_compression |
                  ssl::context::single_dh_use);
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
}

}  // namespace

std::unique_ptr<ssl::context> make_server_tls(const config::TlsConfig& tls) {
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
  modern_only(*ctx);
  step("tls.cert_file", tls.cert_file,
       [&](auto& ec) { ctx->use_certificate_chain_file(tls.cert_file, ec); });
  step("tls.key_file", tls.key_file,
       [&](auto& ec) { ctx->use_private_key_file(tls.key_file, ssl::context::pem, ec); });
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    throw std::runtime_error("tls.key_file " + tls.key_file +
                             ": the key does not match the certificate in tls.cert_file");
  }
  if (!tls.client_ca_file.empty()) {
    step("tls.client_ca_file", tls.client_ca_file,
         [&](auto& ec) { ctx->load_verify_file(tls.client_ca_file, ec); });
    // Also offer the CA's name to clients, so they know which certificate to send.
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.client_ca_file.c_str())) {
      SSL_CTX_set_client_CA_list(ctx->native_handle(), names);
    }
    ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  return ctx;
}

std::unique_ptr<ssl::context> make_upstream_tls(const config::UpstreamTls& tls) {
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
  modern_only(*ctx);
  if (tls.insecure_skip_verify) {
    ctx->set_verify_mode(ssl::verify_none);
    return ctx;
  }
  ctx->set_verify_mode(ssl::verify_peer);
  if (tls.ca_file.empty()) {
    step("the system trust store", "", [&](auto& ec) { ctx->set_default_verify_paths(ec); });
  } else {
    step("upstream.tls.ca_file", tls.ca_file,
         [&](auto& ec) { ctx->load_verify_file(tls.ca_file, ec); });
  }
  return ctx;
}

void prepare_upstream_tls(Stream& stream, const config::UpstreamConfig& upstream) {
  auto* tls = stream.tls();
  if (tls == nullptr) return;
  const std::string& name =
      upstream.tls.server_name.empty() ? upstream.host : upstream.tls.server_name;
  beast::error_code ec;
  asio::ip::make_address(name, ec);
  const bool is_ip = !ec;
  // SNI carries host names only (RFC 6066 3).
  if (!is_ip) SSL_set_tlsext_host_name(tls->native_handle(), name.c_str());
  if (!upstream.tls.insecure_skip_verify) {
    tls->set_verify_callback(ssl::host_name_verification(name));
  }
}

std::string peer_subject(Stream& stream) {
  auto* tls = stream.tls();
  if (tls == nullptr) return {};
  X509* cert = SSL_get0_peer_certificate(tls->native_handle());
  if (cert == nullptr || SSL_get_verify_result(tls->native_handle()) != X509_V_OK) return {};
  BIO* out = BIO_new(BIO_s_mem());
  if (out == nullptr) return {};
  X509_NAME_print_ex(out, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB);
  char* data = nullptr;
  const long size = BIO_get_mem_data(out, &data);
  std::string subject(data, static_cast<std::size_t>(size));
  BIO_free(out);
  return subject;
}

namespace {

int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                unsigned int inlen, void* arg) {
  const auto* http2 = static_cast<const std::function<bool()>*>(arg);
  static constexpr unsigned char kH2[] = {2, 'h', '2'};
  static constexpr unsigned char kH1[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* chosen = nullptr;
  if ((*http2)() && SSL_select_next_proto(&chosen, outlen, kH2, sizeof kH2, in, inlen) ==
                        OPENSSL_NPN_NEGOTIATED) {
    *out = chosen;
    return SSL_TLSEXT_ERR_OK;
  }
  if (SSL_select_next_proto(&chosen, outlen, kH1, sizeof kH1, in, inlen) ==
      OPENSSL_NPN_NEGOTIATED) {
    *out = chosen;
    return SSL_TLSEXT_ERR_OK;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

}  // namespace

void offer_h2(ssl::context& tls, const std::function<bool()>* http2) {
  SSL_CTX_set_alpn_select_cb(tls.native_handle(), select_alpn,
                             const_cast<std::function<bool()>*>(http2));
}

bool alpn_chose_h2(Stream& stream) {
  if (stream.tls() == nullptr) return false;
  const unsigned char* data = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(stream.tls()->native_handle(), &data, &len);
  return len == 2 && std::memcmp(data, "h2", 2) == 0;
}

void offer_upstream_alpn(ssl::context& tls, bool with_http1) {
  static constexpr unsigned char kH2[] = {2, 'h', '2'};
  static constexpr unsigned char kBoth[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  if (with_http1) {
    SSL_CTX_set_alpn_protos(tls.native_handle(), kBoth, sizeof kBoth);
  } else {
    SSL_CTX_set_alpn_protos(tls.native_handle(), kH2, sizeof kH2);
  }
}

}  // namespace idemproxy::http

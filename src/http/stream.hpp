#pragma once
// A TCP connection, optionally under TLS. Beast reads and writes either through
// the same calls, so the session, relay and upstream code is written once.
#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
#include <memory>
#include <optional>
#include <string>

#include "http/beast.hpp"
#include "http/deadline_socket.hpp"
#include "idemproxy/common/clock.hpp"

namespace idemproxy::http {

namespace ssl = asio::ssl;

class Stream {
 public:
  using executor_type = DeadlineSocket::executor_type;
  using TlsStream = beast::ssl_stream<DeadlineSocket>;

  /// Plain TCP, from an accepted socket or on an executor (to connect later).
  explicit Stream(tcp::socket socket) : plain_(std::in_place, std::move(socket)) {}
  explicit Stream(asio::any_io_executor ex) : plain_(std::in_place, std::move(ex)) {}
  /// TLS over TCP; the handshake is the caller's first operation.
  Stream(tcp::socket socket, ssl::context& tls)
      : tls_(std::make_unique<TlsStream>(std::move(socket), tls)) {}
  Stream(asio::any_io_executor ex, ssl::context& tls)
      : tls_(std::make_unique<TlsStream>(std::move(ex), tls)) {}

  DeadlineSocket& transport() { return tls_ ? tls_->next_layer() : *plain_; }
  tcp::socket& socket() { return transport().socket(); }
  executor_type get_executor() { return transport().get_executor(); }
  /// Null for plain TCP.
  TlsStream* tls() { return tls_.get(); }

  void expires_after(Duration d) { transport().expires_after(d); }
  void expires_at(std::chrono::steady_clock::time_point t) { transport().expires_at(t); }
  void expires_never() { transport().expires_never(); }
  void expires_never_on_one_thread() { transport().expires_never_on_one_thread(); }
  void cancel() { transport().cancel(); }

  // Each operation takes the path at run time, under one completion signature, so
  // any token can await it: `use_nothrow` (a deferred operation) as well as a handler.
  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(beast::error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& b) {
          if (tls_) {
            tls_->async_read_some(b, std::move(handler));
          } else {
            plain_->async_read_some(b, std::move(handler));
          }
        },
        token, buffers);
  }
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(beast::error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& b) {
          if (tls_) {
            tls_->async_write_some(b, std::move(handler));
          } else {
            plain_->async_write_some(b, std::move(handler));
          }
        },
        token, buffers);
  }
  /// The TLS handshake; the stream is a TLS one (tls() is not null).
  template <class Token>
  auto async_handshake(ssl::stream_base::handshake_type type, Token&& token) {
    return asio::async_initiate<Token, void(beast::error_code)>(
        [this, type](auto handler) { tls_->async_handshake(type, std::move(handler)); }, token);
  }

 private:
  std::optional<DeadlineSocket> plain_;
  std::unique_ptr<TlsStream> tls_;
};

/// The RFC 2253 subject of the peer's verified certificate; empty without one.
std::string peer_subject(Stream& stream);

}  // namespace idemproxy::http

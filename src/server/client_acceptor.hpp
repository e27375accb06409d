#pragma once
// The client listener: accepts connections within the connection limit
// (server.max_connections and what the open-files limit carries), closing idle ones
// to make room, and hands each to its codec; the drain's waiting for them.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

#include "codec/http2/connection.hpp"
#include "http/tls.hpp"
#include "proxy/serve.hpp"
#include "server/fd_limit.hpp"
#include "server/http_names.hpp"
#include "server/session_tracker.hpp"

namespace idemproxy::server {

/// Binds `acceptor` to `at` and listens; throws std::runtime_error naming `what`
/// ("proxy", "admin") and the cause when it cannot.
void listen_on(asio::io_context& io, tcp::acceptor& acceptor, const config::Endpoint& at,
               const char* what);

/// The connections (and HTTP/2 streams) served at once: server.max_connections as
/// now configured, within what the open-files limit carries (`cap`).
inline std::size_t connection_limit(const proxy::Runtime& rt, std::size_t cap) {
  return std::min(rt.settings()->config.server.max_connections, cap);
}

/// HTTP/2 streams within the server's connection limit.
class StreamBudget final : public h2::StreamSlots {
 public:
  StreamBudget(proxy::Runtime& rt, SessionTracker& tracker, const std::size_t& cap)
      : rt_(rt), tracker_(tracker), cap_(cap) {}
  bool reserve() override { return tracker_.reserve_stream(connection_limit(rt_, cap_)); }
  void release() override { tracker_.release_stream(); }

 private:
  proxy::Runtime& rt_;
  SessionTracker& tracker_;
  const std::size_t& cap_;
};

class ClientAcceptor {
 public:
  /// `threads`: server.threads; with more than one, each connection gets a strand.
  ClientAcceptor(asio::io_context& io, int threads, proxy::Runtime& runtime,
                 const config::Config& config);
  ClientAcceptor(const ClientAcceptor&) = delete;
  ClientAcceptor& operator=(const ClientAcceptor&) = delete;

  void bind(const config::Endpoint& at) { listen_on(io_, acceptor_, at, "proxy"); }
  /// Accepts until the listener closes (drain).
  asio::awaitable<void> accept();
  /// Stops accepting, closes idle connections, and waits up to `timeout` for the
  /// busy ones to finish their requests; returns how many are still open.
  asio::awaitable<std::size_t> drain(std::chrono::milliseconds timeout);

 private:
  /// False when the connection must be refused: at the limit with nothing idle.
  bool make_room();

  asio::io_context& io_;
  int threads_;
  proxy::Runtime& runtime_;
  tcp::acceptor acceptor_;
  SessionTracker tracker_;
  std::unique_ptr<ssl::context> tls_;  // downstream termination (tls.cert_file)
  std::size_t cap_ = 0;                // what the open-files limit carries
  proxy::ProxyService service_{runtime_};
  StreamBudget streams_{runtime_, tracker_, cap_};
  /// ALPN offers h2 while server.http2 is on (it may change on reload).
  std::function<bool()> http2_on_ = [this] { return runtime_.settings()->config.server.http2; };
  LogLimiter refused_log_;
  LogLimiter reclaim_log_;
  LogLimiter accept_error_log_;
};

}  // namespace idemproxy::server

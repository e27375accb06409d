#include "server/listener.hpp"

#include <spdlog/spdlog.h>

#include "codec/http1/connection.hpp"
#include "codec/http2/connection.hpp"
#include "http/tls.hpp"

namespace idemproxy::server {
namespace {

// RFC 9113 §3.3: a cleartext connection that starts with the HTTP/2 preface speaks
// HTTP/2 (prior knowledge); one that departs from it is HTTP/1.1. Reads only while
// what has arrived is a proper prefix of the preface; the bytes stay in the buffer
// for whichever codec serves them.
enum class Opening { http1, http2, gone };

asio::awaitable<Opening> sniff_preface(ClientConnection& conn, Duration idle_timeout) {
  for (;;) {
    const std::string_view seen(static_cast<const char*>(conn.buffer.data().data()),
                                conn.buffer.size());
    const auto n = std::min(seen.size(), h2::kPreface.size());
    if (seen.substr(0, n) != h2::kPreface.substr(0, n)) co_return Opening::http1;
    if (n == h2::kPreface.size()) co_return Opening::http2;
    conn.stream.expires_after(idle_timeout);
    auto [ec, got] = co_await conn.stream.async_read_some(conn.buffer.prepare(4096), use_nothrow);
    // A client gone, a timeout, or drain (or the connection limit) closing an idle
    // connection: nothing to serve.
    if (ec) co_return Opening::gone;
    conn.buffer.commit(got);
  }
}

}  // namespace

void log_exception(const std::exception_ptr& e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    spdlog::error("connection ended by an unexpected error: {}", ex.what());
  }
}

asio::awaitable<void> serve_client(std::shared_ptr<ClientConnection> conn, Service& service,
                                   SessionTracker& tracker, h2::StreamSlots& slots) {
  const auto tracked = tracker.track(conn);
  const auto settings = service.settings();  // the connection's, from its start
  const auto& server = settings->config.server;
  beast::error_code ec;
  const auto remote = conn->stream.socket().remote_endpoint(ec);
  conn->peer.ip = ec ? "unknown" : remote.address().to_string();
  if (conn->stream.tls() != nullptr) {
    // The handshake counts against header_timeout, like the request head it precedes.
    conn->stream.expires_after(server.header_timeout);
    auto [hec] = co_await conn->stream.async_handshake(ssl::stream_base::server, use_nothrow);
    if (hec) {
      service.metrics().count_tls_handshake_failure();
      spdlog::info("TLS handshake with {} failed: {}", conn->peer.ip, hec.message());
      conn->stream.socket().close(ec);
      co_return;
    }
    conn->peer.subject = peer_subject(conn->stream);
  }
  auto opening = Opening::http1;
  if (server.http2) {
    if (conn->stream.tls() != nullptr) {
      if (alpn_chose_h2(conn->stream)) opening = Opening::http2;
    } else {
      opening = co_await sniff_preface(*conn, server.idle_timeout);
    }
  }
  if (opening == Opening::gone) {
    conn->stream.socket().close(ec);
  } else if (opening == Opening::http2) {
    co_await h2::serve(conn, service, slots);
  } else {
    co_await h1::serve(conn, service);
  }
}

}  // namespace idemproxy::server

#include "codec/http1/connection.hpp"

#include "codec/http1/exchange.hpp"
#include "http/chunk.hpp"

namespace idemproxy::codec::http1 {
namespace {

// After a final answer on a connection whose request was not read to the end (413,
// 431, 400), closing at once would make a client that is still sending see a reset
// instead of the answer: data arriving at a closed socket draws an RST, which
// discards the answer the client has not read yet. RFC 9112 9.6: half-close, then
// read until the client closes. What arrives is discarded until the client closes,
// stops sending for 2 s, or 10 s have passed (nginx's lingering close; its defaults
// are 5 s and 30 s). Bounded by time only: a byte cap reset every client whose body
// outran it, however fast it sent.
asio::awaitable<void> linger_and_close(ClientConnection& conn) {
  beast::error_code ec;
  conn.stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  Chunk scratch;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  while (std::chrono::steady_clock::now() < until) {
    conn.stream.expires_after(std::min<std::chrono::milliseconds>(
        std::chrono::seconds{2}, std::chrono::duration_cast<std::chrono::milliseconds>(
                                     until - std::chrono::steady_clock::now())));
    auto [rec, n] = co_await conn.stream.async_read_some(
        asio::buffer(scratch.data(), scratch.size()), use_nothrow);
    if (rec) break;
  }
  conn.stream.socket().close(ec);
}

}  // namespace

asio::awaitable<void> serve(std::shared_ptr<ClientConnection> conn, Service& service) {
  // The clock is read as each request starts and as it ends; the deadlines of the
  // waits around a request are set from those readings, not from a reading of their own.
  auto last_end = std::chrono::steady_clock::now();
  bool linger = false;
  // The configuration, kept while the service's version stays: each request moves it
  // into its exchange and back, with no lock and no reference counted, and takes the
  // one in force when it starts only if a reload replaced it (Exchange::read_head).
  std::shared_ptr<const Settings> settings;
  std::uint64_t version = 0;
  service.keep_current(settings, version);
  for (;;) {
    Exchange exchange(*conn, std::move(settings), version, service);
    conn->idle = true;
    if (service.draining()) break;
    // The request's first bytes are awaited in this frame, and a head that came whole
    // with them is read with no frame of its own (Exchange::take_head).
    if (exchange.awaits_request(last_end)) {
      auto [ec, got] =
          co_await conn->stream.async_read_some(conn->buffer.prepare(4096), use_nothrow);
      conn->buffer.commit(got);
      exchange.arrived(ec);
    }
    std::optional<bool> head = exchange.take_head();
    if (!head) head = co_await exchange.read_head();
    if (!*head) break;
    // A request answered at once (a replay) takes no frame (Service::serve_now).
    if (auto rest = service.serve_now(exchange)) co_await std::move(*rest);
    last_end = std::chrono::steady_clock::now();
    if (!exchange.reusable()) {
      linger = exchange.answered() && exchange.linger();
      break;
    }
    settings = exchange.release_settings(version);
  }
  beast::error_code ec;
  if (linger) {
    co_await linger_and_close(*conn);
  } else {
    conn->stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  }
}

}  // namespace idemproxy::codec::http1

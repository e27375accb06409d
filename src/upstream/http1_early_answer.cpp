// Http1Call's write beside a watch for an answer that comes before the request's
// end (RFC 9112 9.6): an upstream that answers once the head came and keeps the
// connection open, the body unread.
#include <sys/socket.h>

#include <array>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <cerrno>

#include "codec/http1/answer_start.hpp"
#include "upstream/http1_call.hpp"

namespace idemproxy::upstream {

// An upstream may answer before it read the whole request and keep the connection
// open with the rest unread (RFC 9112 9.6): the write would wait for room until
// `until` while the answer waits in the socket. So the write runs beside a watch for
// that answer, and the first to end stops the other (nginx reads an upstream while it
// sends to it):
// - in cleartext once some of the request went and the socket took no more at once:
//   the watch peeks at the socket;
// - under TLS, where nothing goes at once, once the request's bytes written and to
//   write reach kTlsWatchFrom (a body that comes in pieces, too): the watch reads
//   (Asio's TLS stream takes a read beside a write), since the bytes in the socket
//   could be a record of any kind. What it reads stays in the connection's buffer for
//   the head's read.
asio::awaitable<bool> Http1Call::write_or_answer(Rest& rest, beast::error_code& ec) {
  using namespace asio::experimental::awaitable_operators;
  const bool tls = conn_->stream.tls() != nullptr;
  const bool watching = tls ? out_ + asio::buffer_size(rest) >= kTlsWatchFrom : out_ > 0;
  // Each side ends the other by cancelling what is pending on the socket. (The group
  // also cancels the side left: Asio's TLS read, told so after it took the
  // connection's end, reports operation_aborted; the socket keeps that end for the
  // head's read, http/deadline_socket.hpp.)
  bool answered = false;
  bool wrote = false;
  const auto write = [&]() -> asio::awaitable<void> {
    auto [wec, n] = co_await asio::async_write(conn_->stream, rest, use_nothrow);
    out_ += n;
    ec = wec;
    wrote = true;
    if (watching && !answered) conn_->stream.transport().cancel();  // the watch
  };
  if (!watching) {
    co_await write();
    co_return false;
  }
  // Stops the write: an answer came, or the upstream's end (the head's read finds it).
  const auto answer = [&] {
    answered = true;
    conn_->stream.transport().cancel();
  };
  if (tls ? answer_read() : answer_waiting()) co_return true;
  const auto peek = [&]() -> asio::awaitable<void> {
    for (;;) {
      auto [wec] = co_await conn_->stream.socket().async_wait(tcp::socket::wait_read, use_nothrow);
      if (wec || wrote) co_return;  // the write ended first, or the socket closed
      if (answer_waiting()) {
        answer();
        co_return;
      }
    }
  };
  const auto read = [&]() -> asio::awaitable<void> {
    for (;;) {
      auto [rec, n] =
          co_await conn_->stream.async_read_some(conn_->buffer.prepare(kTlsRecord), use_nothrow);
      conn_->buffer.commit(n);
      if (wrote) co_return;  // the write ended first; what came is kept
      // Interim heads past kTlsWatchFrom are more than the head's read takes
      // (kMaxInterim): the buffer stops there, and that read refuses them.
      if (rec || answer_read() || conn_->buffer.size() >= kTlsWatchFrom) {
        answer();
        co_return;
      }
    }
  };
  // Named: the conditional's temporary inside the co_await expression would be
  // destroyed twice by GCC 12 (docs/DEVELOPMENT.md).
  asio::awaitable<void> watch = tls ? read() : peek();
  co_await (write() || std::move(watch));
  co_return answered;
}

bool Http1Call::answer_read() const {
  const auto bytes = conn_->buffer.data();
  return codec::http1::final_answer_begins({static_cast<const char*>(bytes.data()), bytes.size()});
}

bool Http1Call::answer_waiting() {
  std::array<char, 512> bytes{};
  const ssize_t n = ::recv(conn_->stream.socket().native_handle(), bytes.data(), bytes.size(),
                           MSG_PEEK | MSG_DONTWAIT);
  // The upstream's end: no answer follows the rest, which the read will find.
  if (n == 0) return true;
  // A reset, too; nothing yet otherwise.
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  return codec::http1::final_answer_begins({bytes.data(), static_cast<std::size_t>(n)});
}

}  // namespace idemproxy::upstream

#pragma once
// A write that never waits: what a socket's send buffer takes now, in one system call,
// with no operation for the reactor to queue, run and complete. Most writes fit the
// send buffer whole: each then costs the system call alone, where asio::async_write's
// speculative send still took a reactor operation, the descriptor's lock, a queued
// completion and a coroutine resumption.
//
// Reads stay with the reactor. The next request's read starts right after an answer
// sent this way, before the client could send that request, so Asio's speculative recv
// failed once a request (strace: 0.94 failed recvfrom a replay); waiting for the client
// first (a post before the read) cost as much as it saved. A read that drained the
// socket now tells the reactor so (http/draining_read.hpp), and the next one waits for
// an event without trying.
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cerrno>
#include <cstddef>

#include "http/beast.hpp"
#include "http/stream.hpp"

namespace idemproxy::http {

/// Sends what `socket` takes now of `buffers` (their first 64 pieces at most) with one
/// sendmsg, or send for one piece (no message header and iovec array for the kernel
/// to copy in), that neither waits (MSG_DONTWAIT, whatever the socket's mode) nor
/// raises SIGPIPE: the bytes sent, 0 when the socket would block. A failure sets `ec`.
template <class ConstBuffers>
std::size_t try_send(tcp::socket& socket, const ConstBuffers& buffers, beast::error_code& ec) {
  std::array<iovec, 64> pieces;
  std::size_t count = 0;
  for (auto it = asio::buffer_sequence_begin(buffers);
       it != asio::buffer_sequence_end(buffers) && count < pieces.size(); ++it) {
    const asio::const_buffer b(*it);
    if (b.size() > 0) pieces[count++] = {const_cast<void*>(b.data()), b.size()};
  }
  if (count == 0) return 0;
  msghdr message{};
  message.msg_iov = pieces.data();
  message.msg_iovlen = count;
  for (;;) {
    const ssize_t n =
        count == 1 ? ::send(socket.native_handle(), pieces[0].iov_base, pieces[0].iov_len,
                            MSG_DONTWAIT | MSG_NOSIGNAL)
                   : ::sendmsg(socket.native_handle(), &message, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      ec.assign(errno, asio::error::get_system_category());
    }
    return 0;
  }
}

/// The first step of a whole write on `stream`: in cleartext, what the socket takes now
/// is sent (try_send) and consumed from `rest`. True when nothing is left to await:
/// all of it went, or the send failed (`ec`). Under TLS nothing goes here.
template <class Buffers>
bool sent_at_once(Stream& stream, beast::buffers_suffix<Buffers>& rest, beast::error_code& ec) {
  if (stream.tls() != nullptr) return false;
  rest.consume(try_send(stream.socket(), rest, ec));
  if (ec) [[unlikely]]
    stream.transport().write_failed(ec);
  return ec || asio::buffer_size(rest) == 0;
}

}  // namespace idemproxy::http

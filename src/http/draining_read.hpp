#pragma once
// One read of a TCP socket that tells the reactor when it drained the socket.
//
// Boost 1.81's epoll reactor reads speculatively: an operation started on a socket
// that has had an event first tries recv() at once, and only a read of 0 bytes (the
// end of the stream) stops the next one from trying too. So the read for a client's
// next request, started right after an answer written at once (http/try_io.hpp),
// fails with EAGAIN once a request: the client cannot have sent it yet (strace: 0.94
// failed recvfrom a replay); so does an upstream's answer, read right after its
// request is sent.
//
// A short read alone does not prove the socket drained: a FIN that came with the last
// bytes raised its edge already, and a read that waited for the next edge would wait
// for ever (nginx asks epoll for EPOLLRDHUP for this; Asio does not). Linux's TCP_INQ
// answers it: each recvmsg() says how many bytes are left to read, and never 0 after
// a FIN (tcp_inq_hint). A read through a DrainingBuffer on a socket with TCP_INQ set
// (enable_inq) reports a read that left 0 as done_and_exhausted, which makes the
// reactor, under the descriptor's lock, skip the next speculative try until an event
// says bytes came: the next read waits in the queue and costs no system call. Without
// the option's answer a read is reported as Asio's own is. A reset is no FIN to
// TCP_INQ: with the last bytes before it, it says 0 left too. DeadlineSocket reads the
// socket itself once a write met a reset, and ends every read after the end a read met.
//
// It is an explicit specialization of Asio's receive operation base for this buffer
// type; every other read in the process keeps Asio's own. The rest of the operation
// (allocation, work, cancellation, completion) is Asio's, unchanged.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/socket_base.hpp>
// After socket_base, which it uses without including.
#include <boost/asio/detail/reactive_socket_recv_op.hpp>
#include <boost/version.hpp>
#include <cerrno>
#include <cstdint>
#include <cstring>

static_assert(BOOST_VERSION == 108100,
              "http/draining_read.hpp specializes Boost 1.81's reactive_socket_recv_op_base; "
              "check it against this Boost's before changing the version");

namespace idemproxy::http {

/// A single buffer to read into, whose read says when it drained the socket.
struct DrainingBuffer : boost::asio::mutable_buffer {
  /// `left`, when given, gets what the kernel said was left to read after the read
  /// (bytes, or 1 for a FIN that came: tcp_inq_hint), or keeps its value when it
  /// said nothing.
  explicit DrainingBuffer(const boost::asio::mutable_buffer& b, int* left = nullptr)
      : boost::asio::mutable_buffer(b), left(left) {}
  int* left;
};

/// The reads this thread made through DrainingBuffers (recvmsg calls, the failed
/// ones too): what a test counts to see that a drained socket is not read again.
inline thread_local std::uint64_t draining_recvs = 0;

/// Asks the kernel to say, with every read of TCP socket `fd`, how many bytes are left
/// (TCP_INQ, Linux 4.18). False when it will not: reads then say nothing.
inline bool enable_inq(int fd) {
  const int on = 1;
  return ::setsockopt(fd, IPPROTO_TCP, TCP_INQ, &on, sizeof on) == 0;
}

}  // namespace idemproxy::http

namespace boost::asio::detail {

template <>
class reactive_socket_recv_op_base<idemproxy::http::DrainingBuffer> : public reactor_op {
 public:
  reactive_socket_recv_op_base(const boost::system::error_code& success_ec, socket_type socket,
                               socket_ops::state_type state,
                               const idemproxy::http::DrainingBuffer& buffer,
                               socket_base::message_flags flags, func_type complete_func)
      : reactor_op(success_ec, &reactive_socket_recv_op_base::do_perform, complete_func),
        socket_(socket),
        state_(state),
        buffer_(buffer),
        flags_(flags) {}

  static status do_perform(reactor_op* base) {
    auto* o = static_cast<reactive_socket_recv_op_base*>(base);
    iovec piece{o->buffer_.data(), o->buffer_.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &piece;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = 0;
    do {
      ++idemproxy::http::draining_recvs;
      n = ::recvmsg(o->socket_, &msg, o->flags_);
    } while (n < 0 && errno == EINTR);
    const bool stream = (o->state_ & socket_ops::stream_oriented) != 0;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return not_done;  // wait for an event
      o->ec_ = boost::system::error_code(errno, boost::asio::error::get_system_category());
      o->bytes_transferred_ = 0;
      return stream ? done_and_exhausted : done;  // Asio's rule: nothing read
    }
    o->bytes_transferred_ = static_cast<std::size_t>(n);
    if (n == 0 && stream) {
      o->ec_ = boost::asio::error::eof;
      return done_and_exhausted;
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_TCP && c->cmsg_type == TCP_CM_INQ) {
        int left = 0;
        std::memcpy(&left, CMSG_DATA(c), sizeof left);
        if (o->buffer_.left != nullptr) *o->buffer_.left = left;
        if (left == 0) return done_and_exhausted;  // nothing left, no FIN
      }
    }
    return done;
  }

 private:
  socket_type socket_;
  socket_ops::state_type state_;
  idemproxy::http::DrainingBuffer buffer_;
  socket_base::message_flags flags_;
};

}  // namespace boost::asio::detail

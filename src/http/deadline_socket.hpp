#pragma once
// A TCP socket with one deadline, in place of beast::tcp_stream's timer per operation.
//
// beast::tcp_stream arms a timer when each read or write starts and cancels it when
// the operation ends: two timer-queue updates under the reactor's lock and one more
// completion to dispatch (the cancelled wait's), four times per proxied request
// (issue 26, round three). Here a deadline is a time stored with the socket, and
// one timer per connection is armed lazily: a deadline that moves later, as it does
// from one request to the next, costs no timer work; the timer, when it fires
// early, re-arms for the deadline then in force. Only a deadline moved earlier than
// the armed one re-arms at once.
//
// What Beast promises is kept: an operation pending when the deadline passes fails
// with beast::error::timeout and the socket is closed; an operation started after
// the deadline passed fails the same way at once. One difference: the deadline
// applies to every pending operation, also one started before it was set. Every
// caller here sets a deadline with no operation pending (Beast asserts as much for
// the direction it sets).
#include <sys/socket.h>

#include <atomic>
#include <boost/asio/associator.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prepend.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "http/beast.hpp"
#include "http/draining_read.hpp"

namespace idemproxy::http {

class DeadlineSocket {
  using Clock = std::chrono::steady_clock;
  static constexpr auto kNever = Clock::time_point::max();

  /// A field the timer's completion reads and writes beside its owner's calls. The
  /// completion is bound to the executor of the operation that armed it, but under
  /// TSan with four I/O threads a pooled upstream connection's owner was seen running
  /// give_back() while the completion ran on the owner's strand (a coroutine resumed
  /// outside its strand after SIGSTOP/SIGCONT; test_faults.py): relaxed atomic loads
  /// and stores, plain moves on x86, make that no data race whatever the executors.
  template <class T>
  class Relaxed {
   public:
    explicit Relaxed(T v) : v_(v) {}
    T get() const { return v_.load(std::memory_order_relaxed); }
    void set(T v) { v_.store(v, std::memory_order_relaxed); }

   private:
    std::atomic<T> v_;
  };

  struct State {
    explicit State(tcp::socket s) : socket(std::move(s)), timer(socket.get_executor()) {}
    explicit State(const asio::any_io_executor& ex) : socket(ex), timer(ex) {}

    tcp::socket socket;
    asio::steady_timer timer;
    Relaxed<Clock::time_point> deadline{kNever};
    Relaxed<Clock::time_point> armed{kNever};  // the expiry the timer waits for; kNever: idle
    // Tells a stale timer completion from the current one; read by a completion that
    // may run on a previous owner's strand (expires_never).
    std::atomic<std::uint64_t> generation{0};
    Relaxed<int> pending{0};  // written by the owner only
    Relaxed<bool> timed_out{false};
    bool inq_asked = false;  // TCP_INQ asked for (draining_read.hpp): by the first read
    // The peer's end, for the reads after it (read_now).
    // Written by a completion, which may run beside its owner (Relaxed, above).
    Relaxed<bool> read_ended{false};  // a read met it (a FIN, a reset): later reads end at once
    Relaxed<bool> reset{false};       // a write met the peer's reset: TCP_INQ's 0 proves nothing
    int left = -1;                    // what the last read left (draining_read.hpp); -1: unknown
  };

 public:
  using executor_type = asio::any_io_executor;
  using lowest_layer_type = tcp::socket;

  explicit DeadlineSocket(tcp::socket socket)
      : state_(std::make_shared<State>(std::move(socket))) {}
  explicit DeadlineSocket(const asio::any_io_executor& ex) : state_(std::make_shared<State>(ex)) {}

  executor_type get_executor() noexcept { return state_->socket.get_executor(); }
  tcp::socket& socket() noexcept { return state_->socket; }
  lowest_layer_type& lowest_layer() noexcept { return state_->socket; }

  void expires_after(Clock::duration d) { state_->deadline.set(Clock::now() + d); }
  void expires_at(Clock::time_point t) { state_->deadline.set(t); }
  /// Also ends the armed wait's hold: a pooled upstream connection passes from one
  /// client's strand to another's, and the wait, bound to the strand that armed it,
  /// must then do nothing when it fires.
  void expires_never() {
    state_->deadline.set(kNever);
    if (state_->armed.get() == kNever) return;
    state_->armed.set(kNever);
    state_->generation.fetch_add(1, std::memory_order_release);
  }
  /// No deadline, handing the socket to an owner on the same thread as the last (one
  /// I/O thread, no strands): the armed wait is kept, since its completion cannot run
  /// beside the next owner. Fired, it finds no deadline and disarms, or the next
  /// owner's later deadline and waits for that; until then the next owner's
  /// operations need no timer work. A pooled upstream connection paid a cancelled
  /// wait and a new one per request for expires_never(). With several I/O threads,
  /// use expires_never().
  void expires_never_on_one_thread() { state_->deadline.set(kNever); }
  /// The expiry the timer waits for; time_point::max() when it waits for none.
  Clock::time_point armed_expiry() const { return state_->armed.get(); }
  /// Whether the kernel said, with the last read, that more was left to read: bytes,
  /// or the peer's end (a FIN that came with or after the bytes read: tcp_inq_hint
  /// counts it as one). False when it said nothing, or that nothing was left.
  bool more_after_last_read() const { return state_->left > 0; }
  /// A write on the socket (a send of the caller's own, too) failed with `ec`: a reset
  /// by the peer leaves bytes that came before it to read, then the end.
  /// Out of line: it stays out of every write path it is on.
  [[gnu::cold, gnu::noinline]] void write_failed(const beast::error_code& ec) {
    write_failed(*state_, ec);
  }
  /// Pending operations end with operation_aborted; the deadline stays.
  void cancel() {
    beast::error_code ignored;
    state_->socket.cancel(ignored);
  }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(beast::error_code, std::size_t)>(
        [](auto handler, const std::shared_ptr<State>& s, const MutableBuffers& b) {
          start(s, handler);
          using Done = ReadCompletion<decltype(handler)>;
          if constexpr (std::is_convertible_v<const MutableBuffers&, asio::mutable_buffer>) {
            if (s->read_ended.get() || s->reset.get()) [[unlikely]] {
              if (const auto now = read_now(*s, b)) {
                asio::post(s->socket.get_executor(),
                           asio::prepend(Done{{s, std::move(handler)}}, now->first, now->second));
                return;
              }
            }
            if (!s->inq_asked && s->socket.is_open()) {
              s->inq_asked = true;
              enable_inq(s->socket.native_handle());
            }
            s->left = -1;
            s->socket.async_read_some(DrainingBuffer(b, &s->left), Done{{s, std::move(handler)}});
            return;
          }
          s->socket.async_read_some(b, Done{{s, std::move(handler)}});
        },
        token, state_, buffers);
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(beast::error_code, std::size_t)>(
        [](auto handler, const std::shared_ptr<State>& s, const ConstBuffers& b) {
          start(s, handler);
          s->socket.async_write_some(b,
                                     WriteCompletion<decltype(handler)>{{s, std::move(handler)}});
        },
        token, state_, buffers);
  }

  /// Connects to the first endpoint that answers, within the deadline.
  template <class Endpoints, class Token>
  auto async_connect(const Endpoints& endpoints, Token&& token) {
    return asio::async_initiate<Token, void(beast::error_code, tcp::endpoint)>(
        [](auto handler, const std::shared_ptr<State>& s, const Endpoints& e) {
          start(s, handler);
          asio::async_connect(s->socket, e, Completion<decltype(handler)>{s, std::move(handler)});
        },
        token, state_, endpoints);
  }

  /// Wraps a completion handler: counts the operation done and reports a deadline
  /// that closed the socket as beast::error::timeout. The handler's executor,
  /// allocator and cancellation slot are its own (the associator below).
  // The implicit move of the caller's handler is what Asio moves in every composed
  // operation; clang-tidy cannot see that asio::async_connect's awaitable handler
  // does not throw when moved, and flags its instantiation.
  template <class Handler>
  struct Completion {  // NOLINT(bugprone-exception-escape)
    std::shared_ptr<State> state;
    Handler handler;

    template <class... Args>
    void operator()(beast::error_code ec, Args&&... args) {
      state->pending.set(state->pending.get() - 1);
      if (ec && state->timed_out.get()) ec = beast::error::timeout;
      // On the handler's own executor: inline when already there (one I/O thread, or
      // its strand), otherwise queued to it. With several I/O threads the socket's
      // completions ran the caller on another thread, outside its strand (found with
      // HTTP/2 clients, whose streams share their connection's strand and state:
      // TSan saw the races and nghttp2 asserted); tests/e2e/test_http2.py runs under
      // TSan with four I/O threads.
      // A handler on the socket's own executor, the io_context itself (one I/O
      // thread: no strands), is called at once, as asio::dispatch would call it:
      // dispatching through the type-erased executor wrapped it in an
      // executor_function, a recycled allocation and two indirect calls on each read
      // and write (6 % of a pass-through request's CPU, docs/PERFORMANCE.md).
      const auto own = state->socket.get_executor();
      const auto ex = asio::get_associated_executor(handler, own);
      if (ex == own && own.target<asio::io_context::executor_type>() != nullptr) {
        std::move(handler)(ec, std::forward<Args>(args)...);
        return;
      }
      asio::dispatch(ex, asio::prepend(std::move(handler), ec, std::forward<Args>(args)...));
    }
  };

  /// A read's Completion: a read that met the socket's end keeps it for the next.
  template <class Handler>
  struct ReadCompletion : Completion<Handler> {  // NOLINT(bugprone-exception-escape)
    void operator()(beast::error_code ec, std::size_t n) {
      if (ec && ec != asio::error::operation_aborted && !this->state->timed_out.get()) {
        this->state->read_ended.set(true);
      }
      Completion<Handler>::operator()(ec, n);
    }
  };
  /// A write's Completion: a write that met the peer's reset says so (write_failed).
  template <class Handler>
  struct WriteCompletion : Completion<Handler> {  // NOLINT(bugprone-exception-escape)
    void operator()(beast::error_code ec, std::size_t n) {
      write_failed(*this->state, ec);
      Completion<Handler>::operator()(ec, n);
    }
  };

 private:
  // Boost 1.81's reactor tries no read after one that drained the socket until the
  // socket's next event. Past the peer's end that event may have come already, or
  // never comes, and a read that waited for it waited out its deadline (an upstream's
  // 504 for a 502). So a read after the end ends at once (a TLS read that took the end
  // while it was cancelled reports operation_aborted, and the next read is the
  // caller's), and one after a write met the peer's reset reads the socket itself:
  // TCP_INQ said 0 left with the last bytes before it, as when more may come (a reset
  // is no FIN to it). Nothing, when the read must wait.
  [[gnu::cold, gnu::noinline]] static std::optional<std::pair<beast::error_code, std::size_t>>
  read_now(State& s, const asio::mutable_buffer& b) {
    if (s.read_ended.get()) return std::pair{beast::error_code(asio::error::eof), std::size_t{0}};
    const ssize_t n = ::recv(s.socket.native_handle(), b.data(), b.size(), MSG_DONTWAIT);
    if (n > 0) return std::pair{beast::error_code{}, static_cast<std::size_t>(n)};
    if (n == 0) return std::pair{beast::error_code(asio::error::eof), std::size_t{0}};
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return std::nullopt;
    return std::pair{beast::error_code(errno, asio::error::get_system_category()), std::size_t{0}};
  }

  static void write_failed(State& s, const beast::error_code& ec) {
    if (ec == asio::error::connection_reset || ec == asio::error::broken_pipe) s.reset.set(true);
  }

  // The timer's completion runs on the executor of the operation that armed it (as
  // Beast's timeout handler does): the owner's strand, never beside its operations.
  template <class Handler>
  static void start(const std::shared_ptr<State>& s, const Handler& handler) {
    s->pending.set(s->pending.get() + 1);
    if (s->deadline.get() == kNever || s->armed.get() <= s->deadline.get()) return;
    arm(s, asio::get_associated_executor(handler, s->socket.get_executor()));
  }

  // Makes sure the timer fires no later than the deadline.
  static void arm(const std::shared_ptr<State>& s, const asio::any_io_executor& owner) {
    const auto deadline = s->deadline.get();
    if (deadline == kNever || s->armed.get() <= deadline) return;
    s->armed.set(deadline);
    const auto generation = s->generation.fetch_add(1, std::memory_order_acq_rel) + 1;
    s->timer.expires_at(deadline);
    s->timer.async_wait(asio::bind_executor(
        owner, [weak = std::weak_ptr<State>(s), generation, owner](beast::error_code ec) {
          const auto state = weak.lock();
          if (ec || !state || state->generation.load(std::memory_order_acquire) != generation) {
            return;  // re-armed, handed over, or gone
          }
          state->armed.set(kNever);
          if (state->deadline.get() > Clock::now()) {
            arm(state, owner);  // the deadline moved on since: wait for it
          } else if (state->pending.get() > 0) {
            state->timed_out.set(true);
            beast::error_code ignored;
            state->socket.close(ignored);
          }
          // Passed with nothing pending: the next operation arms a timer already due.
        }));
  }

  std::shared_ptr<State> state_;
};

}  // namespace idemproxy::http

namespace boost::asio {

template <template <class, class> class Associator, class Handler, class Default>
struct associator<Associator, idemproxy::http::DeadlineSocket::Completion<Handler>, Default> {
  static typename Associator<Handler, Default>::type get(
      const idemproxy::http::DeadlineSocket::Completion<Handler>& c) noexcept {
    return Associator<Handler, Default>::get(c.handler);
  }
  static auto get(const idemproxy::http::DeadlineSocket::Completion<Handler>& c,
                  const Default& d) noexcept
      -> decltype(Associator<Handler, Default>::get(c.handler, d)) {
    return Associator<Handler, Default>::get(c.handler, d);
  }
};

template <template <class, class> class Associator, class Handler, class Default>
struct associator<Associator, idemproxy::http::DeadlineSocket::ReadCompletion<Handler>, Default>
    : associator<Associator, idemproxy::http::DeadlineSocket::Completion<Handler>, Default> {};

template <template <class, class> class Associator, class Handler, class Default>
struct associator<Associator, idemproxy::http::DeadlineSocket::WriteCompletion<Handler>, Default>
    : associator<Associator, idemproxy::http::DeadlineSocket::Completion<Handler>, Default> {};

}  // namespace boost::asio

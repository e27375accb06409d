#pragma once
// Wakes one waiting coroutine on its executor; nothing is locked, so the waker and
// the waiter run on the same executor (a connection's strand).
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <utility>

#include "http/beast.hpp"

namespace idemproxy::http {

/// A notify() before the wait() is not lost. The one wake-up of the HTTP side: a
/// connection's writer, a stream's room and news, an upstream link's readiness (a
/// signal that stays set) and a claim waiting for its key (notified across threads by
/// posting notify() to the waiter's executor).
///
/// A wait is an asynchronous operation that the caller's own frame awaits, not a
/// coroutine of its own: `co_await signal.wait()` takes no heap block for a frame
/// (docs/PERFORMANCE.md, the HTTP/2 replay row).
class Signal {
 public:
  using Clock = std::chrono::steady_clock;
  /// What a wait that was woken leaves behind: cleared for the next wait (on_wake),
  /// or set for good, so that every later wait returns at once (never: a latch).
  enum class Reset { on_wake, never };

  explicit Signal(const asio::any_io_executor& ex, Reset reset = Reset::on_wake)
      : timer_(ex, Clock::time_point::max()), reset_(reset) {}
  void notify() {
    pending_ = true;
    timer_.cancel();
  }
  /// Forgets a notify() that no wait has taken yet.
  void clear() { pending_ = false; }
  bool pending() const { return pending_; }
  asio::any_io_executor executor() { return timer_.get_executor(); }

  /// Until notified or until `until`; `co_await` gives false when the time came first
  /// (or when another wait on this signal moved the timer: one waiter at a time).
  auto wait_until(Clock::time_point until) {
    return asio::async_initiate<const asio::deferred_t, void(bool)>(
        [this, until](auto handler) {
          if (pending_) {
            std::move(handler)(take());
            return;
          }
          timer_.expires_at(until);
          const auto ex = asio::get_associated_executor(handler, timer_.get_executor());
          sleep(ex, [this, handler = std::move(handler)]() mutable {
            timer_.expires_at(Clock::time_point::max());
            std::move(handler)(take());
          });
        },
        asio::deferred);
  }

  /// Until notified, however many coroutines wait: a latch's waiters all wait here,
  /// and a wake-up that finds nothing pending (a clear(), another waiter's timer
  /// change) only sleeps again.
  auto wait() {
    return asio::async_initiate<const asio::deferred_t, void()>(
        [this](auto handler) {
          if (pending_) {
            take();
            std::move(handler)();
            return;
          }
          const auto ex = asio::get_associated_executor(handler, timer_.get_executor());
          sleep(ex, Again<decltype(handler), decltype(ex)>{this, ex, std::move(handler)});
        },
        asio::deferred);
  }

 private:
  // wait()'s completion: sleeps again until something is pending.
  template <class Handler, class Executor>
  struct Again {
    Signal* signal;
    Executor ex;
    Handler handler;
    void operator()() {
      if (!signal->pending_) {
        signal->sleep(ex, std::move(*this));
        return;
      }
      signal->take();
      std::move(handler)();
    }
  };

  // Waits on the timer and then calls `then` on `ex`, the awaiting coroutine's
  // executor, where use_awaitable would have resumed it.
  template <class Executor, class Then>
  void sleep(const Executor& ex, Then then) {
    timer_.async_wait(asio::bind_executor(
        ex, [then = std::move(then)](const beast::error_code&) mutable { std::move(then)(); }));
  }

  bool take() {
    const bool woken = pending_;
    if (reset_ == Reset::on_wake) pending_ = false;
    return woken;
  }

  asio::steady_timer timer_;
  bool pending_ = false;
  Reset reset_;
};

}  // namespace idemproxy::http

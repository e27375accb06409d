#pragma once
// Wakes one waiting coroutine on its executor; nothing is locked, so the waker and
// the waiter run on the same executor (a connection's strand).
#include <boost/asio/steady_timer.hpp>
#include <chrono>

#include "http/beast.hpp"

namespace idemproxy::http {

/// A notify() before the wait() is not lost. The one wake-up of the HTTP side: a
/// connection's writer, a stream's room and news, an upstream link's readiness (a
/// signal that stays set) and a claim waiting for its key (notified across threads by
/// posting notify() to the waiter's executor).
class Signal {
 public:
  /// What a wait that was woken leaves behind: cleared for the next wait (on_wake),
  /// or set for good, so that every later wait returns at once (never: a latch).
  enum class Reset { on_wake, never };

  explicit Signal(const asio::any_io_executor& ex, Reset reset = Reset::on_wake)
      : timer_(ex, std::chrono::steady_clock::time_point::max()), reset_(reset) {}
  void notify() {
    pending_ = true;
    timer_.cancel();
  }
  /// Forgets a notify() that no wait has taken yet.
  void clear() { pending_ = false; }
  bool pending() const { return pending_; }
  asio::any_io_executor executor() { return timer_.get_executor(); }

  asio::awaitable<void> wait() {
    while (!pending_) co_await timer_.async_wait(use_nothrow);
    if (reset_ == Reset::on_wake) pending_ = false;
  }
  /// Waits until notified or until `until`; false when the time came first.
  asio::awaitable<bool> wait_until(std::chrono::steady_clock::time_point until) {
    if (!pending_) {
      timer_.expires_at(until);
      co_await timer_.async_wait(use_nothrow);
      timer_.expires_at(std::chrono::steady_clock::time_point::max());
    }
    const bool woken = pending_;
    if (reset_ == Reset::on_wake) pending_ = false;
    co_return woken;
  }

 private:
  asio::steady_timer timer_;
  bool pending_ = false;
  Reset reset_;
};

}  // namespace idemproxy::http

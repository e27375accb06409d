#pragma once
// Wakes one waiting coroutine on its executor; nothing is locked, so the waker and
// the waiter run on the same executor (a connection's strand).
#include <boost/asio/steady_timer.hpp>
#include <chrono>

#include "http/beast.hpp"

namespace idemproxy::http {

/// A notify() before the wait() is not lost.
class Signal {
 public:
  explicit Signal(const asio::any_io_executor& ex)
      : timer_(ex, std::chrono::steady_clock::time_point::max()) {}
  void notify() {
    pending_ = true;
    timer_.cancel();
  }
  asio::awaitable<void> wait() {
    while (!pending_) co_await timer_.async_wait(use_nothrow);
    pending_ = false;
  }
  /// Waits until notified or until `until`; false when the time came first.
  asio::awaitable<bool> wait_until(std::chrono::steady_clock::time_point until) {
    if (!pending_) {
      timer_.expires_at(until);
      co_await timer_.async_wait(use_nothrow);
      timer_.expires_at(std::chrono::steady_clock::time_point::max());
    }
    const bool woken = pending_;
    pending_ = false;
    co_return woken;
  }

 private:
  asio::steady_timer timer_;
  bool pending_ = false;
};

}  // namespace idemproxy::http

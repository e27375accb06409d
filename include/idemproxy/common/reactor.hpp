#pragma once
// The event loop of the thread a call comes from, as the store sees it. An I/O
// thread of the proxy names its loop here (Reactor::Current), and a store that waits
// for its database's socket can then wait on that loop instead of waking a thread of
// its own: PostgreSQL's group commit sends and reads a batch there
// (src/store/pg/reactor_batch.cpp), with no thread hop on either side.
//
// As with common/handoff.hpp, neither side knows the other: the store knows no Asio,
// and the proxy no database. A thread that names no loop gets the store's threads.
#include <chrono>
#include <functional>
#include <utility>

namespace idemproxy::common {

class Reactor {
 public:
  virtual ~Reactor() = default;

  /// Runs `fn(true)` on the loop once what is ready now has run, or `fn(false)` (on
  /// whichever thread stops the loop) when the loop stops before it ran.
  virtual void post(std::function<void(bool running)> fn) = 0;
  /// Calls `fn(true)` on the loop once `fd` is readable (`write`: writable), or
  /// `fn(false)` on an error or when the loop stops first. The caller keeps `fd` open
  /// until `fn` is called.
  virtual void wait(int fd, bool write, std::function<void(bool ready)> fn) = 0;
  /// Calls `fn(true)` on the loop after `delay`, or `fn(false)` when the loop stops
  /// first.
  virtual void after(std::chrono::microseconds delay, std::function<void(bool running)> fn) = 0;

  /// The loop of the calling thread, or null.
  static Reactor* current() { return current_; }

  /// Names `loop` as the calling thread's for its lifetime; the earlier one after.
  class Current {
   public:
    explicit Current(Reactor* loop) : outer_(std::exchange(current_, loop)) {}
    ~Current() { current_ = outer_; }
    Current(const Current&) = delete;
    Current& operator=(const Current&) = delete;

   private:
    Reactor* outer_;
  };

 private:
  inline static thread_local Reactor* current_ = nullptr;
};

}  // namespace idemproxy::common

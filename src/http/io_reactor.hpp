#pragma once
// common::Reactor over an Asio io_context: what the proxy's I/O threads name as
// their loop, so that a store may wait for its database's socket there (the PostgreSQL
// store's group commit, src/store/pg/group_commit_reactor.cpp).
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "idemproxy/common/reactor.hpp"

namespace idemproxy::http {

class IoReactor final : public common::Reactor {
 public:
  explicit IoReactor(boost::asio::io_context& io) : io_(io) {}
  /// Calls stop(): destroy it before its io_context.
  ~IoReactor() override;
  IoReactor(const IoReactor&) = delete;
  IoReactor& operator=(const IoReactor&) = delete;

  void post(std::function<void(bool running)> fn) override;
  /// Registers `fd` with the loop's epoll for this one wait, and deregisters it (never
  /// closing it) before `fn` runs: a registration never outlives the caller's hold on
  /// `fd`, and readiness already there when the wait starts is seen.
  void wait(int fd, bool write, std::function<void(bool ready)> fn) override;
  void after(std::chrono::microseconds delay, std::function<void(bool running)> fn) override;

  /// Once the io_context has stopped running (its threads returned): calls everything
  /// still pending with false, on this thread, so no caller waits for a loop that will
  /// not run again. Later calls answer false at once.
  void stop();

 private:
  struct Op;
  /// Runs `op` with `ok`, unless stop() took it first.
  void fire(const std::shared_ptr<Op>& op, bool ok);
  /// `fn` as pending; once stopped, calls `fn(false)` at once and returns null.
  std::shared_ptr<Op> track(std::function<void(bool)> fn);

  boost::asio::io_context& io_;
  std::mutex mu_;
  bool stopped_ = false;
  std::unordered_map<Op*, std::shared_ptr<Op>> pending_;
};

}  // namespace idemproxy::http

#pragma once
// An event loop on a thread of its own, as the proxy's I/O threads run one: an Asio
// io_context with its common::Reactor (http::IoReactor) named as that thread's. The
// PostgreSQL store sends the batches of the claims and completions made on that thread
// there (src/store/pg/group_commit_reactor.cpp).
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <thread>
#include <utility>

#include "http/io_reactor.hpp"

namespace idemproxy::testing {

class TestLoop {
 public:
  TestLoop()
      : thread_([this] {
          const common::Reactor::Current named(&reactor_);
          io_.run();
        }) {}
  /// Stops the loop; what it still owed is answered as a stopped loop's (IoReactor::stop).
  ~TestLoop() {
    guard_.reset();
    io_.stop();
    thread_.join();
    reactor_.stop();
  }
  TestLoop(const TestLoop&) = delete;
  TestLoop& operator=(const TestLoop&) = delete;

  /// Runs `fn` on the loop's thread.
  template <class F>
  void run(F fn) {
    boost::asio::post(io_, std::move(fn));
  }
  common::Reactor& reactor() { return reactor_; }
  std::thread::id thread_id() const { return thread_.get_id(); }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_{
      io_.get_executor()};
  http::IoReactor reactor_{io_};
  std::thread thread_;
};

}  // namespace idemproxy::testing

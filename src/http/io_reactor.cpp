#include "http/io_reactor.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <optional>
#include <utility>
#include <vector>

namespace idemproxy::http {

namespace asio = boost::asio;

struct IoReactor::Op {
  std::function<void(bool)> fn;
  std::optional<asio::posix::stream_descriptor> fd;
  std::optional<asio::steady_timer> timer;

  /// Takes the fd out of epoll (never closing it) and drops the timer; then runs fn.
  void answer(bool ok) {
    if (fd) {
      fd->release();
      fd.reset();
    }
    timer.reset();
    std::exchange(fn, nullptr)(ok);
  }
};

IoReactor::~IoReactor() { stop(); }

std::shared_ptr<IoReactor::Op> IoReactor::track(std::function<void(bool)> fn) {
  auto op = std::make_shared<Op>();
  {
    std::lock_guard lock(mu_);
    if (!stopped_) {
      op->fn = std::move(fn);
      pending_.emplace(op.get(), op);
      return op;
    }
  }
  fn(false);  // the loop will not run again
  return nullptr;
}

void IoReactor::fire(const std::shared_ptr<Op>& op, bool ok) {
  {
    std::lock_guard lock(mu_);
    if (pending_.erase(op.get()) == 0) return;  // stop() answered it
  }
  try {
    op->answer(ok);
  } catch (const std::exception& e) {  // the loop goes on, as a store's thread would
    spdlog::error("a store's work on the event loop failed: {}", e.what());
  }
}

void IoReactor::post(std::function<void(bool running)> fn) {
  auto op = track(std::move(fn));
  if (!op) return;
  asio::post(io_, [this, op] { fire(op, true); });
}

void IoReactor::wait(int fd, bool write, std::function<void(bool ready)> fn) {
  auto op = track(std::move(fn));
  if (!op) return;
  boost::system::error_code ec;
  op->fd.emplace(io_);
  op->fd->assign(fd, ec);
  if (ec) {
    op->fd->release();
    op->fd.reset();
    asio::post(io_, [this, op] { fire(op, false); });
    return;
  }
  op->fd->async_wait(
      write ? asio::posix::descriptor_base::wait_write : asio::posix::descriptor_base::wait_read,
      [this, op](const boost::system::error_code& e) { fire(op, !e); });
}

void IoReactor::after(std::chrono::microseconds delay, std::function<void(bool running)> fn) {
  auto op = track(std::move(fn));
  if (!op) return;
  op->timer.emplace(io_, delay);
  op->timer->async_wait([this, op](const boost::system::error_code&) { fire(op, true); });
}

void IoReactor::stop() {
  std::vector<std::shared_ptr<Op>> left;
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    for (auto& [raw, op] : pending_) left.push_back(std::move(op));
    pending_.clear();
  }
  for (auto& op : left) op->answer(false);
}

}  // namespace idemproxy::http

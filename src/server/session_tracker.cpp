#include "server/session_tracker.hpp"

namespace idemproxy::server {

void SessionTracker::add(const std::shared_ptr<ClientConnection>& c) {
  std::lock_guard lock(mu_);
  live_.insert(c);
}

void SessionTracker::remove(const std::shared_ptr<ClientConnection>& c) {
  std::lock_guard lock(mu_);
  live_.erase(c);
}

std::size_t SessionTracker::connections() const {
  std::lock_guard lock(mu_);
  return live_.size();
}

std::size_t SessionTracker::size() const {
  return connections() + streams_.load(std::memory_order_relaxed);
}

bool SessionTracker::reserve_stream(std::size_t limit) {
  if (size() >= limit) return false;
  streams_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::size_t SessionTracker::reclaim_idle(std::size_t most) {
  std::lock_guard lock(mu_);
  std::size_t closed = 0;
  for (const auto& c : live_) {
    if (closed == most) break;
    // Each connection is chosen once: its close takes a moment, and choosing it
    // again would let a flood past the limit.
    if (!c->idle || c->reclaimed.exchange(true)) continue;
    ++closed;
    asio::post(c->stream.get_executor(), [c] {
      if (c->idle) c->stream.cancel();
    });
  }
  return closed;
}

void SessionTracker::close_idle() {
  std::lock_guard lock(mu_);
  for (const auto& c : live_) {
    // Runs on the connection's strand, so `idle` cannot change underneath it.
    asio::post(c->stream.get_executor(), [c] {
      if (c->idle) c->stream.cancel();
    });
  }
}

}  // namespace idemproxy::server

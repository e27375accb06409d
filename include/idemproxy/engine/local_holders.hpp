#pragma once
// Local wake-ups for requests waiting on a key (on_concurrent: wait).
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "http/beast.hpp"

namespace idemproxy::http {

/// Requests waiting (on_concurrent: wait) for a key held by this process sleep
/// until it finishes, without touching the database; keys held by other instances
/// are re-checked on a backoff.
class WaitList {
 public:
  /// This process now executes `id`.
  void hold(const std::string& id);
  /// It finished (or gave up): wakes every request waiting for `id`.
  void release(const std::string& id);
  /// Wakes every request waiting for `id` (a background completion landed).
  void notify(const std::string& id);
  /// Registers a waiter when this process holds `id` and returns true: the waiter
  /// sleeps until release() instead of polling. (One lock: a release cannot slip
  /// between.) False, and nothing kept, for a key held elsewhere.
  bool add(const std::string& id, const std::shared_ptr<asio::steady_timer>& timer);
  /// Keys with registered waiters (for tests: entries must not outlive their holder).
  std::size_t waiting_keys() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, int> held_;
  std::unordered_map<std::string, std::vector<std::weak_ptr<asio::steady_timer>>> waiting_;
};

}  // namespace idemproxy::http

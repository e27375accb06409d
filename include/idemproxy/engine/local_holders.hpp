#pragma once
// Which keys this process is executing, and who waits for them (on_concurrent: wait).
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "idemproxy/store/record.hpp"

namespace idemproxy::engine {

/// A request asleep until the key it waits for is released. The transport decides
/// how it sleeps (an Asio timer in http/); wake() may be called from any thread.
class Waiter {
 public:
  virtual ~Waiter() = default;
  virtual void wake() = 0;
};

/// Requests waiting for a key held by this process sleep until it finishes, without
/// touching the database; keys held by other instances are re-checked on a backoff.
class LocalHolders {
 public:
  /// This process now executes `id`.
  void hold(const store::RecordId& id);
  /// It finished (or gave up): wakes every request waiting for `id`.
  void release(const store::RecordId& id);
  /// Wakes every request waiting for `id` (a background completion landed).
  void notify(const store::RecordId& id);
  /// Registers a waiter when this process holds `id` and returns true: the waiter
  /// sleeps until release() instead of polling. (One lock: a release cannot slip
  /// between.) False, and nothing kept, for a key held elsewhere.
  bool add(const store::RecordId& id, const std::shared_ptr<Waiter>& waiter);
  bool held(const store::RecordId& id) const;

  /// Requests here waiting for a key another instance executes: woken by
  /// notify_remote (the store announced its finish), removed by remove_remote.
  void add_remote(const store::RecordId& id, const std::shared_ptr<Waiter>& waiter);
  void remove_remote(const store::RecordId& id, const Waiter* waiter);
  void notify_remote(const store::RecordId& id);
  /// Wakes every request waiting for a key held elsewhere.
  void notify_all_remote();
  /// Keys with registered waiters (entries must not outlive their holder).
  std::size_t waiting_keys() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, int> held_;
  std::unordered_map<std::string, std::vector<std::weak_ptr<Waiter>>> waiting_;
  std::unordered_map<std::string, std::vector<std::weak_ptr<Waiter>>> remote_;
};

}  // namespace idemproxy::engine

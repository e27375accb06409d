#pragma once
// LISTEN on a connection of its own: idemproxy_purge, so purges by any instance or
// the CLI reach this process's replay cache; idemproxy_done, so requests waiting here
// for a key another instance executes wake when it finishes.
#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "idemproxy/store/watches.hpp"

namespace idemproxy::store::pg {

class NotificationListener {
 public:
  explicit NotificationListener(std::string dsn) : dsn_(std::move(dsn)) {}
  ~NotificationListener() { stop(); }
  NotificationListener(const NotificationListener&) = delete;
  NotificationListener& operator=(const NotificationListener&) = delete;

  /// Calls the watchers from its own thread for every purged or finished (watched)
  /// record, reconnecting after failures, until stop() (one listener at a time:
  /// start() stops the last one).
  void start(Watches::Watchers watchers);
  void stop();

 private:
  std::string dsn_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace idemproxy::store::pg

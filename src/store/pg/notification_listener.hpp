#pragma once
// LISTEN idemproxy_purge on a connection of its own, so purges by any instance or
// the CLI reach this process's replay cache.
#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "idemproxy/store/store.hpp"

namespace idemproxy::store::pg {

class PurgeListener {
 public:
  explicit PurgeListener(std::string dsn) : dsn_(std::move(dsn)) {}
  ~PurgeListener() { stop(); }
  PurgeListener(const PurgeListener&) = delete;
  PurgeListener& operator=(const PurgeListener&) = delete;

  /// Calls `fn` from its own thread for every purged record, reconnecting after
  /// failures, until stop() (one listener at a time: start() stops the last one).
  void start(std::function<void(const RecordId&)> fn);
  void stop();

 private:
  std::string dsn_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace idemproxy::store::pg

#pragma once
// Local wake-ups for requests waiting on a key (on_concurrent: wait).
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "http/beast.hpp"

namespace idemproxy::http {

/// Requests waiting (on_concurrent: wait) for a key held by this process are woken
/// when it finishes; keys held by other instances are re-checked on a backoff.
class WaitList {
 public:
  void add(const std::string& id, const std::shared_ptr<asio::steady_timer>& timer);
  void notify(const std::string& id);

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::vector<std::weak_ptr<asio::steady_timer>>> waiting_;
};

}  // namespace idemproxy::http

#pragma once
// One client connection: read a request head, dispatch it, repeat while keep-alive.
#include <memory>
#include <mutex>
#include <unordered_set>

#include "http/request_context.hpp"

namespace idemproxy::http {

/// The live client connections, so drain can close the idle ones and wait for
/// the busy ones.
class SessionTracker {
 public:
  void add(const std::shared_ptr<ClientConnection>& c);
  void remove(const std::shared_ptr<ClientConnection>& c);
  std::size_t size() const;
  /// Cancels the read of every connection that is waiting for its next request.
  void close_idle();
  /// Closes up to `most` connections that wait for their next request, to make room
  /// for new clients at the connection limit (as nginx reuses idle keep-alive
  /// connections); returns how many it closes.
  std::size_t reclaim_idle(std::size_t most);

 private:
  mutable std::mutex mu_;
  std::unordered_set<std::shared_ptr<ClientConnection>> live_;
};

/// The completion of a spawned session or task: sessions must never take the process
/// down, so an escaped exception is logged.
void log_exception(const std::exception_ptr& e);

asio::awaitable<void> serve_connection(std::shared_ptr<ClientConnection> conn, Runtime& rt,
                                       SessionTracker& tracker);

}  // namespace idemproxy::http

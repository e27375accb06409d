#pragma once
// The live client connections, so drain can close the idle ones and wait for the
// busy ones, and the connection limit can make room.
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "http/client_connection.hpp"
#include "server/http_names.hpp"

namespace idemproxy::server {

class SessionTracker {
 public:
  /// A connection's place in the tracker: it leaves when this goes, whatever path
  /// its session ends by.
  class Entry {
   public:
    Entry(SessionTracker& tracker, std::shared_ptr<ClientConnection> conn)
        : tracker_(&tracker), conn_(std::move(conn)) {
      tracker_->add(conn_);
    }
    ~Entry() {
      if (tracker_ != nullptr) tracker_->remove(conn_);
    }
    Entry(Entry&& other) noexcept
        : tracker_(std::exchange(other.tracker_, nullptr)), conn_(std::move(other.conn_)) {}
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;
    Entry& operator=(Entry&&) = delete;

   private:
    SessionTracker* tracker_;
    std::shared_ptr<ClientConnection> conn_;
  };

  /// Tracks `c` until the returned entry goes.
  [[nodiscard]] Entry track(std::shared_ptr<ClientConnection> c) { return {*this, std::move(c)}; }

  /// Slots in use: the connections, and the HTTP/2 streams beyond one per connection
  /// (each may hold an upstream connection too).
  std::size_t size() const;
  /// Takes a slot for another concurrent HTTP/2 stream while fewer than `limit` are
  /// in use; gives it back with release_stream().
  bool reserve_stream(std::size_t limit);
  void release_stream() { streams_.fetch_sub(1, std::memory_order_relaxed); }
  /// Connections alone.
  std::size_t connections() const;
  /// Cancels the read of every connection that is waiting for its next request.
  void close_idle();
  /// Closes up to `most` connections that wait for their next request, to make room
  /// for new clients at the connection limit (as nginx reuses idle keep-alive
  /// connections); returns how many it closes.
  std::size_t reclaim_idle(std::size_t most);

 private:
  void add(const std::shared_ptr<ClientConnection>& c);
  void remove(const std::shared_ptr<ClientConnection>& c);

  mutable std::mutex mu_;
  std::unordered_set<std::shared_ptr<ClientConnection>> live_;
  std::atomic<std::size_t> streams_{0};
};

}  // namespace idemproxy::server

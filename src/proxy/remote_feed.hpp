#pragma once
// A stream that a retry on another instance follows (issue 44): that retry reads the
// store's chunks, woken by the store's announcements. Once a request anywhere
// watches the record (store::Watches::Watchers::watched), the holder's appends are
// announced, and the chunk the stream is filling is stored as it grows, so a slow
// stream of small events reaches the follower event by event, not a chunk at a time.
// One append in flight at a time; changes meanwhile go in the next. Streams nobody
// follows from elsewhere pay nothing.
#include <cstdint>
#include <memory>
#include <mutex>

#include "idemproxy/store/record.hpp"
#include "proxy/live_answer.hpp"
#include "proxy/runtime.hpp"

namespace idemproxy::proxy {

/// What this instance does with the store's announcements (store::Watches::watch),
/// once its store is ready: a purge drops the key's cached state, another instance's
/// finish or stream wakes the requests waiting for it here, a request waiting
/// elsewhere for a stream relayed here starts its RemoteFeed, and a listener that
/// resumed after a gap makes every waiter look again.
store::Store::Watchers announcement_watchers(Runtime& rt);

class RemoteFeed : public std::enable_shared_from_this<RemoteFeed> {
 public:
  /// The stream of `id` on this instance, if any, is followed from now on.
  static void start(Runtime& rt, const store::RecordId& id);

  RemoteFeed(Runtime& rt, store::RecordId id, const std::shared_ptr<LiveAnswer>& live)
      : rt_(rt), id_(std::move(id)), token_(live->token()), live_(live) {}
  /// The stream changed: stores what the store lacks, now or after the append in flight.
  void changed();

 private:
  struct Batch;
  /// Stores the window's chunks the store lacks; with running_ set.
  void run();
  void stored(const Batch& batch);

  Runtime& rt_;
  const store::RecordId id_;
  const std::int64_t token_;
  const std::weak_ptr<LiveAnswer> live_;
  std::mutex mu_;
  bool running_ = false;  // an append in flight
  bool dirty_ = false;    // changed since it started
  // The furthest the store has: chunk seq_, len_ bytes of it.
  std::int32_t seq_ = 0;
  std::size_t len_ = 0;
};

}  // namespace idemproxy::proxy

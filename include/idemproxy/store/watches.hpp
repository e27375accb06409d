#pragma once
// The waiters' role: what the store announces about records that any instance (or
// the CLI) changed, so a request waiting for another instance's key wakes when it
// finishes, and replay caches drop what was purged.
#include <functional>

#include "idemproxy/store/record.hpp"

namespace idemproxy::store {

/// Announcements of finished and purged records. A store that cannot announce
/// anything keeps the defaults: waiters then re-check on a backoff.
class Watches {
 public:
  virtual ~Watches() = default;

  /// Both are called from a background thread.
  struct Watchers {
    /// A record was purged: caches drop it.
    std::function<void(const RecordId&)> purged;
    /// A watched record (watch_record) changed: it finished (completed, released or
    /// marked indeterminate), or the answer its holder streams began or grew
    /// (Claims::start_stream, an announced append). Requests waiting for it on this
    /// instance wake.
    std::function<void(const RecordId&)> finished;
    /// A request on some instance began to wait for a record in flight
    /// (watch_record): the instance whose answer streams for it announces its
    /// chunks from now on, and stores them while they fill.
    std::function<void(const RecordId&)> watched;
    /// Announcements (re)started after a gap in which some may have been lost (the
    /// listener's connection broke): every waiter should look again.
    std::function<void()> resumed;
  };
  /// Starts announcing to `watchers`; empty watchers stop it. Stores that cannot
  /// announce anything ignore it.
  // NOLINTNEXTLINE(performance-unnecessary-value-param): a sink; overrides keep it.
  virtual void watch(Watchers /*watchers*/) {}
  /// Whether Watchers::finished is called for watched records. When it is not,
  /// requests waiting for another instance's key re-check it on a backoff.
  virtual bool announces_finishes() const { return false; }
  /// Asks for `id`'s finish to be announced: a request here waits for it while
  /// another instance executes it. Every instance hears of it (Watchers::watched).
  /// False when the waiter should look again at once: the record is no longer in
  /// flight, or its answer began to stream since the waiter looked (it is watched
  /// then all the same, and the waiter attaches to the stream).
  virtual Result<bool> watch_record(const RecordId& /*id*/) { return false; }
};

}  // namespace idemproxy::store

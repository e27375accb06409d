#pragma once
// Completed records kept in memory, so a replay needs neither the database nor the
// upstream. Bounded by bytes (least recently used goes first), each entry dropped at
// its record's expiry, and on purge. PostgreSQL stays the source of truth: a miss,
// or a fingerprint that differs, asks the store.
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "idemproxy/common/clock.hpp"
#include "idemproxy/common/once_string.hpp"
#include "idemproxy/store/record.hpp"

namespace idemproxy::engine {

class ReplayCache {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  /// The request a cached answer was given to, as fingerprinted. A retry with the
  /// very same bytes has the same fingerprint, so it replays without computing it
  /// again (canonical JSON and SHA-256 are most of a replay's own work).
  struct Request {
    std::string method, target, content_type, body;
    bool same(std::string_view m, std::string_view t, std::string_view ct,
              std::string_view b) const {
      return body == b && target == t && method == m && content_type == ct;
    }
  };

  struct Entry {
    std::string fingerprint;
    store::StoredResponse response;  // as stored: replayable headers only
    TimePoint expires_at;            // the store's clock: what Idempotency-Key-Expires says
    /// Until when this process may replay it, on its own monotonic clock: the store's
    /// remaining lifetime of the record, measured from when the store reported it.
    /// Only the store's clock decides expiry; the host's wall clock never does.
    Deadline valid_until{};
    Request request{};
    /// The replay's layout, made once, at the entry's first replay
    /// (proxy::replay_layout), not when it is cached: most fresh keys are never
    /// retried, and laying out each answer as it completed was 15 % of a fresh key's
    /// heap calls (bench/results/HISTORY.md).
    struct Layout {
      /// The replay's fields: the stored ones, Idempotent-Replayed and
      /// Idempotency-Key-Expires.
      std::vector<store::Header> fields;
      /// Kept for the codec that sends the replay, which lays out its own form there
      /// at its first replay (http::PreparedAnswer::codec_form): the HTTP/1.1
      /// codec's head.
      OnceString codec_form;
    };
    struct Later {
      std::once_flag once;
      Layout made;
    };
    std::shared_ptr<Later> layout = std::make_shared<Later>();
    /// The record's token: a body in chunks (response.chunked()) is read under it,
    /// from the store. Such an entry is never cached.
    std::int64_t token = 0;
  };

  /// max_bytes 0 turns the cache off.
  explicit ReplayCache(std::size_t max_bytes);
  ~ReplayCache();
  ReplayCache(const ReplayCache&) = delete;
  ReplayCache& operator=(const ReplayCache&) = delete;
  std::size_t max_bytes() const { return max_bytes_; }

  /// The entry for `id`, unless there is none or it is no longer valid at `now`.
  std::shared_ptr<const Entry> get(const store::RecordId& id, Deadline now);
  /// Keeps a completed, replayable record (one larger than the whole budget is not kept).
  void put(const store::RecordId& id, Entry entry);
  void put(const store::RecordId& id, std::shared_ptr<const Entry> entry);
  void erase(const store::RecordId& id);

  std::size_t bytes() const;
  std::size_t size() const;

 private:
  using Key = std::string;          // scope '\n' key (store::slot_key)
  using KeyHash = store::SlotHash;  // hashes a RecordId as its slot key, in place
  /// A cached record. The order of use runs through the nodes themselves.
  struct Node {
    Key key;
    std::size_t hash;
    std::shared_ptr<const Entry> entry;
    std::size_t bytes;
    Node* newer = nullptr;
    Node* older = nullptr;
  };
  /// The index: open addressing with linear probing, a power of two long and at most
  /// half full, each cell the node's hash beside it. A lookup reads one or two cells
  /// of one cache line; std::unordered_map followed three nodes across the heap for
  /// each, and its lookups were 4.4 % of a fresh key's CPU (bench/results/HISTORY.md,
  /// "The replay cache's index").
  struct Cell {
    std::size_t hash = 0;
    Node* node = nullptr;  // none: empty
  };
  /// The cell holding `key`, or the empty one where it would go.
  template <class K>
  std::size_t probe(const K& key, std::size_t hash) const {
    const std::size_t mask = cells_.size() - 1;
    for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
      const Cell& c = cells_[i];
      if (c.node == nullptr || (c.hash == hash && store::SlotEqual{}(c.node->key, key))) return i;
    }
  }
  /// Takes `node` out of the index and the order of use, and deletes it.
  void drop(Node* node);
  /// Empties cell `i`, moving later cells of its run back (no tombstones).
  void vacate(std::size_t i);
  void grow();
  void unlink(Node& n);
  void link_first(Node& n);

  const std::size_t max_bytes_;
  mutable std::mutex mu_;
  std::vector<Cell> cells_;
  std::size_t count_ = 0;
  Node* newest_ = nullptr;  // most recently used
  Node* oldest_ = nullptr;  // the next to go
  std::size_t bytes_ = 0;
};

}  // namespace idemproxy::engine

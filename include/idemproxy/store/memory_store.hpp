#pragma once
// A single-process, non-durable store: local development and unit tests. It keeps
// the same contract as PgStore (tests/store/store_contract.hpp), announcements
// included, so what passes against it holds against the database.
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "idemproxy/store/store.hpp"

namespace idemproxy::store {

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(const Clock& clock) : clock_(clock) {}

  Result<ClaimResult> claim(const ClaimRequest& request) override;
  Result<TimePoint> complete(const RecordId& id, std::int64_t token, const StoredResponse& response,
                             Retention keep) override;
  Result<Done> append(const RecordId& id, std::int64_t token, std::int32_t seq,
                      std::string_view bytes) override;
  /// append(), then the announcement to the record's watchers.
  void append_async(const RecordId& id, std::int64_t token, std::int32_t seq,
                    std::string_view bytes, bool announce, AppendDone done) override;
  Result<Done> start_stream(const RecordId& id, std::int64_t token,
                            const StoredResponse& head) override;
  Result<std::vector<Chunk>> read_chunks(const RecordId& id, std::int64_t token, std::int32_t from,
                                         int limit) override;
  Result<TimePoint> renew(const RecordId& id, std::int64_t token, Duration lease) override;
  Result<Done> release(const RecordId& id, std::int64_t token) override;
  Result<Done> mark_indeterminate(const RecordId& id, std::int64_t token) override;
  Result<bool> resolve(const RecordId& id) override;
  Result<std::optional<Record>> find(const RecordId& id) override;
  Result<std::vector<Record>> list(std::optional<RecordState> state, int limit) override;
  Result<bool> purge(const RecordId& id) override;
  Result<std::int64_t> delete_expired(int limit) override;
  Result<std::int64_t> sweep_chunks(int rows) override;
  Result<std::int64_t> drop_answers(const std::string& route, Duration ttl, int limit) override;
  Result<Done> ping() override { return Done{}; }
  Result<std::int64_t> count_indeterminate() override;
  Result<std::vector<ScopeUsage>> nearest_quota(int limit) override;
  Result<bool> counts_quotas() override { return true; }
  /// Announces on the calling thread, once the change is made: every purge, and the
  /// finish of every watched record.
  void watch(Watchers watchers) override;
  /// While watching (watch() with `finished` set).
  bool announces_finishes() const override;
  Result<bool> watch_record(const RecordId& id) override;

 private:
  using Key = std::pair<std::string, std::string>;
  struct Entry {
    Record record;
    bool watched = false;  // a waiter wants its finish announced; a new claim clears it
    bool counted = false;  // claimed under a quota: its scope's usage counts it
  };
  /// What `e` adds to its scope's usage (nothing when not counted).
  static Usage footprint(const Entry& e);
  /// Changes `e` with `change` and its scope's usage with it, as the database's
  /// triggers do (sql/011_quotas.sql).
  template <class Change>
  void accounted(Entry& e, Change change);
  void add_usage(const std::string& scope, const Usage& plus, const Usage& minus);
  /// Gives a record's share back before it is deleted (nothing when not counted).
  void give_back(const Entry& e);
  Entry* holder(const RecordId& id, std::int64_t token);
  /// Moves the holder's in-flight record to `next`; fenced if `token` no longer holds it.
  Result<Done> leave_flight(const RecordId& id, std::int64_t token, RecordState next);
  /// A copy of `r` as read at `now`: expired and stale judged then.
  static Record read(const Record& r, TimePoint now);
  void announce_finish(const RecordId& id);
  void announce_purge(const RecordId& id);

  const Clock& clock_;
  std::mutex mu_;
  /// Whether every chunk 1..n of `token` is stored for `key`, and no other.
  bool chunks_complete(const Key& key, std::int64_t token, std::int32_t n) const;
  /// Deletes the chunks no record reads: another token's, or a record's that is gone,
  /// neither in flight nor completed in chunks; returns how many.
  std::int64_t sweep_orphans();

  std::map<Key, Entry> records_;
  /// Each record's chunks by (token, seq).
  std::map<Key, std::map<std::pair<std::int64_t, std::int32_t>, std::string>> chunks_;
  std::map<std::string, ScopeUsage> usage_;  // by scope
  std::int64_t next_token_ = 1;
  // Announcements run under their own lock, never under mu_, so a watcher may call
  // the store; recursive, so it may also call watch().
  mutable std::recursive_mutex watch_mu_;
  // Every instance listening, as every PgStore's LISTEN hears each NOTIFY: one in a
  // proxy; two where a test runs two proxies over one store.
  std::vector<std::shared_ptr<const Watchers>> watchers_;
  /// Calls `call` with each instance's watchers, on a copy of the list: a watcher may
  /// call watch().
  template <class Call>
  void each_watcher(const Call& call) const {
    std::lock_guard lock(watch_mu_);
    const auto all = watchers_;
    for (const auto& w : all) call(*w);
  }
};

}  // namespace idemproxy::store

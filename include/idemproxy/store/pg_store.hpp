#pragma once
// PostgreSQL store: a pool of connections, statements prepared once per connection,
// reconnection after the server restarts, and group commit for claims and
// completions (see PgStore::Pending in pg_store.cpp).
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "idemproxy/store/sealer.hpp"
#include "idemproxy/store/store.hpp"

namespace pqxx {
class connection_base;
class result;
class row;
class transaction_base;
}  // namespace pqxx

namespace idemproxy::store {

struct PgOptions {
  std::string dsn;
  int pool_size = 8;
  Duration statement_timeout = std::chrono::seconds{5};
  /// Through a transaction-pooling PgBouncer: no prepared statements and no session
  /// settings (set statement_timeout on the role instead).
  bool transaction_pooling = false;
  /// store.encryption: seals fingerprints, stored headers and bodies. Records sealed
  /// under a key the ring lacks, or altered, read as StoreErrc::unreadable.
  std::shared_ptr<const Sealer> sealer{};
  /// Group commit: claims and completions that arrive while every connection is
  /// busy run together, up to this many in one transaction and one commit. Each
  /// caller gets its answer only after that commit. 1 commits each on its own.
  int batch_max = 64;
};

class PgStore final : public Store {
 public:
  explicit PgStore(PgOptions options);
  ~PgStore() override;

  Result<ClaimResult> claim(const ClaimRequest& request) override;
  Result<TimePoint> complete(const RecordId& id, std::int64_t token, const StoredResponse& response,
                             Duration ttl) override;
  Result<TimePoint> renew(const RecordId& id, std::int64_t token, Duration lease) override;
  Result<Done> release(const RecordId& id, std::int64_t token) override;
  Result<Done> mark_indeterminate(const RecordId& id, std::int64_t token) override;
  Result<bool> resolve(const RecordId& id) override;
  Result<std::optional<Record>> find(const RecordId& id) override;
  Result<std::vector<Record>> list(std::optional<RecordState> state, int limit) override;
  Result<bool> purge(const RecordId& id) override;
  Result<std::int64_t> delete_expired(int limit) override;
  Result<Done> ping() override;
  PoolStats pool_stats() override;
  /// Group-commit counters since start.
  struct BatchStats {
    std::int64_t batches = 0;     // transactions run for claims and completions
    std::int64_t operations = 0;  // claims and completions they carried
    std::int64_t fallbacks = 0;   // batches that failed and ran again one statement each
    int queued = 0;               // waiting for a connection now
  };
  BatchStats batch_stats();
  /// LISTENs on its own connection (not through a transaction-pooling PgBouncer,
  /// where sessions do not last: then purges elsewhere are not seen).
  void watch_purges(std::function<void(const RecordId&)> fn) override;

 private:
  class Connection;
  struct ClaimParams;
  struct CompleteParams;
  struct Answer;
  struct Pending;
  /// Completions with more stored bytes than this are not batched.
  static constexpr std::size_t kBatchedBodyMax = 64 * 1024;
  /// Queues `self` for the next batch and decodes its answer once committed.
  template <class T>
  Result<T> batched(Pending& self, const std::function<Result<T>(const Answer&)>& decode);
  void run_batch(const std::vector<Pending*>& batch);
  bool run_many(const std::vector<Pending*>& members);
  void run_alone(Pending& p);
  int batch_slots() const { return std::max(1, options_.pool_size / 4); }
  template <class T>
  Result<T> with_connection(const std::function<Result<T>(Connection&)>& work);
  std::unique_ptr<Connection> checkout();
  void give_back(std::unique_ptr<Connection> conn);
  /// `listing`: a sealed fingerprint that does not open is shown by its key id
  /// instead of failing the whole list (listings never include bodies).
  Record read_record(const pqxx::row& row, const RecordId& id, bool listing = false) const;
  /// The stored form of a field: sealed under the current key, or as it is.
  std::string stored(std::string_view value, const RecordId& id, std::string_view field) const;

  PgOptions options_;
  std::mutex mu_;
  std::condition_variable available_;
  std::vector<std::unique_ptr<Connection>> idle_;
  int open_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread watcher_;

  // Group commit (guarded by batch_mu_).
  std::mutex batch_mu_;
  std::deque<Pending*> queue_;
  int batches_running_ = 0;
  BatchStats batch_stats_;
};

}  // namespace idemproxy::store

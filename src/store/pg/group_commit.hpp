#pragma once
// Group commit for claims and completions (see group_commit.cpp for the design and
// its measurements).
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "store/pg/pool.hpp"

namespace idemproxy::store::pg {

/// A claim's statement parameters, as stored.
struct ClaimParams {
  const ClaimRequest& req;
  std::string fingerprint;  // as stored: sealed and hex-encoded under encryption
  const char* key_id;       // NULL in the clear
  long long nonce;          // claim_nonce: finds this claim again after a lost answer
};

/// A completion's statement parameters, as stored.
struct CompleteParams {
  const RecordId& id;
  long long token;
  int status;
  std::optional<std::string> headers, body;  // as stored; none when not kept
  long long ttl_ms;
  const char* key_id;
};

/// A member's rows: `row` indexes `rows` (-1: none came back); `repeat` says an
/// earlier claim of the same key in the batch went first.
struct Answer {
  pqxx::result rows;
  int row = -1;
  bool repeat = false;
};

/// One claim or completion waiting for its batch.
struct Pending {
  Pending(const RecordId& i, const ClaimParams* cl, const CompleteParams* co)
      : id(i), claim(cl), complete(co) {}
  const RecordId& id;
  const ClaimParams* claim;
  const CompleteParams* complete;
  Result<Answer> answer{StoreError{StoreErrc::unavailable, "not run"}};
  bool done = false;
  std::condition_variable wake;
};

class GroupCommit {
 public:
  GroupCommit(Pool& pool, const PgOptions& options) : pool_(pool), options_(options) {}

  /// Queues `self` for the next batch of its lane (leading it when a batch slot is
  /// free) and decodes its answer once committed. On plain PostgreSQL every call
  /// shares one lane; on Citus each worker is a lane.
  template <class T>
  Result<T> run(Pending& self, const std::function<Result<T>(const Answer&)>& decode);
  /// `self` alone, now: the single-row statement in autocommit.
  void run_alone(Pending& self);

  PgStore::BatchStats stats();

 private:
  /// Calls waiting to be batched together, and the batches of them running now.
  struct Lane {
    std::deque<Pending*> queue;
    int running = 0;
    int slots = 1;    // batches at once
    int worker = -1;  // the Citus worker whose keys this lane batches; -1: plain
  };
  /// Runs the next batch of `lane`: called with `lock` held; returns with it held.
  void lead(std::unique_lock<std::mutex>& lock, Lane& lane, Pending& self);
  /// `worker`: every member's key is on that Citus worker (-1: not on Citus).
  void run_batch(const std::vector<Pending*>& batch, int worker);
  bool run_many(const std::vector<Pending*>& members, int worker);
  bool run_worker_claims(const std::vector<Pending*>& members);
  bool run_worker_completions(const std::vector<Pending*>& members);
  static void hand_out(const std::vector<Pending*>& members, const pqxx::result& rows);
  static std::vector<Pending*> in_key_order(std::vector<Pending*> members);
  bool batch_succeeded(bool ok, std::size_t size, bool claims);
  static std::vector<const char*> completion_params(const std::vector<Pending*>& members,
                                                    std::vector<std::string>& texts);
  /// On plain PostgreSQL, batches run on a quarter of the pool's connections.
  int slots() const { return std::max(1, options_.pool_size / 4); }

  Pool& pool_;
  const PgOptions& options_;
  std::mutex mu_;
  std::map<int, Lane> lanes_;  // kPlainLane, or a Citus worker's group id
  PgStore::BatchStats stats_;
  static constexpr int kPlainLane = -1;
};

template <class T>
Result<T> GroupCommit::run(Pending& self, const std::function<Result<T>(const Answer&)>& decode) {
  const bool citus = pool_.distributed();
  const int worker = citus ? pool_.worker_of(self.id.key) : kPlainLane;
  if (citus && worker < 0) {
    run_alone(self);  // no shard map yet: one routed statement, on any free connection
  } else {
    std::unique_lock lock(mu_);
    Lane& lane = lanes_[worker];
    // On Citus, batches per worker, one at a time: a worker's claims and completions
    // queue behind its running batch, while other workers' batches run on the rest of
    // the pool. One slot per worker made bigger batches than a quarter of the pool:
    // 734 fresh keys/s against 721 with pool 8, and 734 against 569 with pool 16.
    lane.slots = citus ? 1 : slots();
    lane.worker = worker;
    lane.queue.push_back(&self);
    while (!self.done) {
      if (lane.running < lane.slots && !lane.queue.empty()) {
        lead(lock, lane, self);
        continue;
      }
      self.wake.wait(lock);
    }
  }
  if (!self.answer.ok()) return self.answer.error();
  try {
    return decode(self.answer.value());
  } catch (const UnreadableRecord& e) {
    return StoreError{StoreErrc::unreadable, e.what()};
  } catch (const std::exception& e) {
    return StoreError{StoreErrc::unavailable, std::string("database error: ") + e.what()};
  }
}

}  // namespace idemproxy::store::pg

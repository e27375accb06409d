#pragma once
// Group commit for claims and completions (see group_commit.cpp for the design and
// its measurements).
#include <condition_variable>
#include <deque>
#include <functional>
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

  /// Queues `self` for the next batch (leading it when a batch slot is free) and
  /// decodes its answer once committed.
  template <class T>
  Result<T> run(Pending& self, const std::function<Result<T>(const Answer&)>& decode);
  /// `self` alone, now: the single-row statement in autocommit.
  void run_alone(Pending& self);

  PgStore::BatchStats stats();

 private:
  void lead(std::unique_lock<std::mutex>& lock, Pending& self);
  void run_batch(const std::vector<Pending*>& batch);
  bool run_many(const std::vector<Pending*>& members);
  int slots() const { return std::max(1, options_.pool_size / 4); }

  Pool& pool_;
  const PgOptions& options_;
  std::mutex mu_;
  std::deque<Pending*> queue_;
  int running_ = 0;
  PgStore::BatchStats stats_;
};

template <class T>
Result<T> GroupCommit::run(Pending& self, const std::function<Result<T>(const Answer&)>& decode) {
  if (pool_.distributed()) {
    run_alone(self);  // on Citus: one routed statement each, on any free connection
  } else {
    std::unique_lock lock(mu_);
    queue_.push_back(&self);
    while (!self.done) {
      if (running_ < slots() && !queue_.empty()) {
        lead(lock, self);
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

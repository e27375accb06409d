#pragma once
// Group commit for claims and completions (see group_commit.cpp for the design and
// its measurements).
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "idemproxy/common/reactor.hpp"
#include "store/pg/array_binary.hpp"
#include "store/pg/pool.hpp"
#include "store/pg/row_codec.hpp"

namespace idemproxy::store::pg {

/// A claim's statement parameters, as stored.
/// They view the request, which outlives the call (store::Claims::claim_async).
struct ClaimParams {
  const ClaimRequest& req;
  const char* key_id;                // NULL in the clear
  long long nonce;                   // claim_nonce: finds this claim again after a lost answer
  std::optional<std::string> quota;  // the route's caps as an array's text; none without
  std::string sealed_fingerprint{};  // under encryption: sealed and hex-encoded
  /// The fingerprint as stored: the request's own in the clear.
  const std::string& fingerprint() const {
    return sealed_fingerprint.empty() ? req.fingerprint : sealed_fingerprint;
  }
};

/// A completion's statement parameters, as stored. They view the answer, which
/// outlives the call (store::Claims::complete_async).
struct CompleteParams {
  const RecordId& id;
  long long token;
  int status;
  std::optional<std::string> headers;  // as stored; none when not kept
  /// The body as stored: the answer's own in the clear, else `sealed_body`; none when
  /// not kept.
  const std::string* body = nullptr;
  long long ttl_ms;  // the record's retention (its tombstone's with after_expiry: reject)
  const char* key_id;
  long long answer_ms;  // the answer's: its replay window
  /// An answer in chunks (kCompleteChunked, never batched): how many, the body's
  /// length and its digest as stored; `body` is then none.
  int chunks = 0;
  long long body_length = 0;
  std::string digest{};
  std::string sealed_body{};
};

/// Where a result's record columns sit, found on first use and shared by every member
/// the result answers: a batch of 64 claims looks its columns up once, not 64 times.
/// The first `rows` given decides, so share one only among Answers of the same rows.
class SharedColumns {
 public:
  const Columns& of(const pqxx::result& rows) {
    std::call_once(once_, [&] { at_.emplace(rows); });
    return *at_;
  }

 private:
  std::once_flag once_;
  std::optional<Columns> at_;
};

/// A member's rows: `row` indexes `rows` (-1: none came back); `first_claim` is the
/// request of an earlier claim of the same key in the batch, which went first (its
/// row, when that claim won, holds only the token and the lease). `columns` is
/// shared by the members answered by the same `rows`.
struct Answer {
  pqxx::result rows;
  int row = -1;
  std::shared_ptr<SharedColumns> columns = std::make_shared<SharedColumns>();
  /// A claim refused by its quota (no row): the cap, and the scope's usage then.
  std::optional<OverQuota> over_quota{};
  std::optional<ClaimRequest> first_claim{};

  const Columns& at() const { return columns->of(rows); }
};

/// One claim or completion waiting for its batch.
struct Pending {
  Pending(const RecordId& i, const ClaimParams* cl, const CompleteParams* co)
      : id(i), claim(cl), complete(co) {}
  const RecordId& id;
  const ClaimParams* claim;
  const CompleteParams* complete;
  Result<Answer> answer{StoreError{StoreErrc::unavailable, "not run"}};
  /// Called once `answer` is final, on the runner thread that ran its batch, without
  /// GroupCommit's lock. It may end the Pending's life.
  std::function<void()> finished;
};

/// The threads that run batches: a caller only queues its claim or completion, so
/// no thread waits per call (a thread hop and a context switch each way, measured
/// as most of the proxy's CPU per fresh key; docs/PERFORMANCE.md).
class Runners {
 public:
  explicit Runners(int threads);
  /// Runs what is still queued, then joins.
  ~Runners();
  Runners(const Runners&) = delete;
  Runners& operator=(const Runners&) = delete;
  void post(std::function<void()> task);

 private:
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

class GroupCommit {
 public:
  GroupCommit(Pool& pool, const PgOptions& options)
      : pool_(pool), options_(options), runners_(std::max(1, options.pool_size)) {}
  /// Waits for the drains under way, on runners or on an event loop, to end.
  ~GroupCommit();
  GroupCommit(const GroupCommit&) = delete;
  GroupCommit& operator=(const GroupCommit&) = delete;

  /// Queues `self` for the next batch of its lane and returns; the batch runs (at once
  /// when a batch slot is free) and self.finished is called once it committed. On
  /// plain PostgreSQL every call shares one lane, and a caller on an event loop
  /// (common::Reactor::current) has the batch sent and read there
  /// (group_commit_reactor.cpp); otherwise, and on Citus, where each worker is a lane,
  /// a runner thread runs it.
  void submit(Pending& self);
  /// `self` alone, on a runner thread: the single-row statement in autocommit.
  /// Runs `self` on its own, never in a batch: what a claim with a quota does on Citus,
  /// counted first (counted_refusal).
  void submit_alone(Pending& self);

  PgStore::BatchStats stats();

 private:
  /// Calls waiting to be batched together, and the batches of them running now.
  struct Lane {
    std::deque<Pending*> queue;
    int running = 0;
    int slots = 1;              // batches at once
    int worker = -1;            // the Citus worker whose keys this lane batches; -1: plain
    std::size_t last_size = 0;  // members of the lane's last batch
    std::size_t expected = 0;   // a drain waits (batch_wait) until this many are queued; 0: none
    /// A drain on an event loop waiting for company (batch_wait): the loop, and the
    /// wait's end, which the submit that brings the company and the wait's timer race
    /// to set; the loser does nothing (a timer that lost never touches the lane, which
    /// may be gone by then).
    common::Reactor* waiting_on = nullptr;
    std::shared_ptr<std::atomic<bool>> wait_over;
  };
  /// A batch's members by the statement they go in (run_batch).
  struct Split {
    std::vector<Pending*> claims[2];  // by retake setting, each key once
    std::vector<Pending*> completions;
    /// Later claims of a key in the batch, each with the first claim of its key.
    std::vector<std::pair<Pending*, const Pending*>> repeats;
    /// The claims (one retake setting) and the completions go as one statement.
    bool together = false;
  };
  static Split split(const std::vector<Pending*>& batch, int worker);
  /// After the batch's statements: a claim that saw no row runs on its own, and a later
  /// claim of a key gets what the first left (blocking; on a runner thread).
  void settle(Split& s);
  /// Whether settle() has anything to do.
  static bool unsettled(const Split& s);
  /// Hands each member its answer, together (common/handoff.hpp).
  static void finish(const std::vector<Pending*>& batch);
  /// Runs `batch` here (run_batch), counts it, and hands out its answers.
  void run_and_finish(const std::vector<Pending*>& batch, int worker);
  /// Counts a batch of `members` run (on an event loop or not), taking mu_.
  void counted(std::size_t members, bool on_loop);
  /// Runs batches of `lane` on `loop` until its queue is empty, holding one of its
  /// slots; a batch that cannot go there goes to a runner, which drains on.
  void drain_on(Lane& lane, common::Reactor& loop);
  /// Sends `batch` on `loop` (reactor_statement.hpp) and goes on draining `lane` there
  /// once it is answered; false when it cannot (no idle connection, or a batch that
  /// needs two statements), having sent nothing.
  bool send_on_loop(const std::vector<Pending*>& batch, Lane& lane, common::Reactor& loop);
  /// Starts, or resumes, the drain of `lane` on `loop`, or on a runner when the loop
  /// stopped first.
  void start_on(Lane& lane, common::Reactor& loop);
  static std::vector<const RecordId*> watched_ids(const pqxx::result& rows, const Columns& at,
                                                  const std::vector<Pending*>& members, bool mixed);
  /// Tells other instances about `ids` (kAnnounce), on a pooled connection (blocking).
  void announce(const std::vector<const RecordId*>& ids);
  /// Gives a lane's slot back, under mu_.
  void stopped_draining(Lane& lane) {
    if (--lane.running == 0) drained_.notify_all();
  }
  /// Whether another batch of `lane` starts now (under mu_): at once when none runs;
  /// beside running ones only while a full batch waits, up to the lane's slots.
  bool may_start(const Lane& lane) const;
  /// Runs batches of `lane` until its queue is empty, holding one of its slots.
  void drain(Lane& lane);
  /// Under `lock` (on mu_): when the lane's last batch had company, waits up to
  /// batch_wait for as many members as it had (at most batch_max); after a batch of
  /// one, nothing waits, so a lone request's latency is unchanged.
  void wait_for_company(std::unique_lock<std::mutex>& lock, Lane& lane);
  /// `self` alone, now: the single-row statement in autocommit.
  void run_alone(Pending& self);
  static std::optional<OverQuota> counted_refusal(Connection& c, const ClaimParams& cl);
  static std::optional<OverQuota> refused_by_quota(Connection& c, pqxx::transaction_base& tx,
                                                   const ClaimParams& cl);
  /// `worker`: every member's key is on that Citus worker (-1: not on Citus).
  void run_batch(const std::vector<Pending*>& batch, int worker);
  bool run_many(const std::vector<Pending*>& members, int worker);
  bool run_together(const std::vector<Pending*>& claims, const std::vector<Pending*>& completions);
  using PlainStatement = std::function<pqxx::result(Connection&, pqxx::transaction_base&)>;
  Result<pqxx::result> run_plain(bool& routed, const PlainStatement& statement);
  /// A batch statement's arrays, each in its wire form (ArrayBinary::bytes): sent as
  /// they are on a loop, copied into pqxx::binarystring (binarystrings()) on a runner.
  using Arrays = std::vector<std::string>;
  static Arrays claim_arrays(const std::vector<Pending*>& members);
  static Arrays completion_arrays(const std::vector<Pending*>& members);
  static Arrays done(std::vector<ArrayBinary>& columns);
  static std::vector<pqxx::binarystring> binarystrings(const Arrays& arrays);
  static void announce_watched(Connection& c, pqxx::transaction_base& tx, const pqxx::result& rows,
                               const std::vector<Pending*>& members, bool mixed);
  bool run_worker_claims(const std::vector<Pending*>& members);
  bool run_worker_completions(const std::vector<Pending*>& members);
  static void hand_out(const std::vector<Pending*>& members, const pqxx::result& rows);
  /// Returns the columns of `rows`, which every member's answer shares.
  static const Columns& give_rows(const pqxx::result& rows, const std::vector<Pending*>& members,
                                  const std::vector<Pending*>* completions = nullptr);
  static std::vector<Pending*> in_key_order(std::vector<Pending*> members);
  bool batch_succeeded(bool ok, std::size_t size, const char* what);
  static std::vector<const char*> completion_params(const std::vector<Pending*>& members,
                                                    std::vector<std::string>& texts);
  /// The most members a batch takes (batch_max, at least one).
  std::size_t batch_limit() const {
    return static_cast<std::size_t>(std::max(options_.batch_max, 1));
  }
  /// On plain PostgreSQL, at most a quarter of the pool's connections run batches.
  int slots() const { return std::max(1, options_.pool_size / 4); }

  Pool& pool_;
  const PgOptions& options_;
  std::mutex mu_;
  std::condition_variable company_;  // a waiting lane's queue reached its expected size
  std::condition_variable drained_;  // a lane's last drain ended
  std::map<int, Lane> lanes_;        // kPlainLane, or a Citus worker's group id
  PgStore::BatchStats stats_;
  static constexpr int kPlainLane = -1;
  Runners runners_;  // last: its threads finish what is queued before the rest goes
};

}  // namespace idemproxy::store::pg

#include "store/pg/group_commit.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <utility>

#include "idemproxy/common/handoff.hpp"

namespace idemproxy::store::pg {

// Group commit. A claim or completion joins its lane's queue, and its caller goes on
// (an I/O thread, for the proxy's requests): the answer comes through the member's
// `finished`. If fewer batches are running than slots(), a drain starts at once: it
// takes everything queued (up to batch_max), runs it, hands each member its answer,
// and goes on while more queued meanwhile. Otherwise the member waits in the queue
// for the next batch of a running drain. A caller on an event loop has the drain run
// there, its statement sent and read with libpq's non-blocking calls
// (group_commit_reactor.cpp); otherwise a runner thread runs it, as described here.
// No thread waits per call: a thread per call cost three context switches per claim
// or completion (the hop to the database pool, the wait for the batch, the hop back),
// measured as most of the proxy's CPU per fresh key (docs/PERFORMANCE.md).
//
// With no load a batch holds one request and runs the single-row statements; under
// load the claims of a batch go as one multi-row statement (kClaimMany) and its
// completions as another (kCompleteMany): one parse, one plan, one round trip and
// one commit (one WAL flush) for many requests. A batch with both goes as one
// statement (kClaimCompleteMany), so one commit per batch: 1.10 × the fresh keys per
// second at 0.93 × the proxy's CPU per key (bench/ab.sh, 6 rounds). Every member's
// answer is handed over only after its statement has committed, so a claim is
// durable before its request goes upstream.
//
// One batch runs at a time; up to a quarter of the pool's connections (at least one)
// run batches at once only while a full batch (batch_max) waits. Fewer batches at once
// means larger ones, and the database spends its time on rows rather than on
// statements and commits. Until issue 26 a second batch started whenever one was
// running, which split the same load into smaller batches: bench/ab.sh, fresh keys,
// five runs of 7 to 9 rounds against that rule, measured 1.05 x the keys/s (0.89 to
// 1.12) at 0.84 x the proxy's CPU per key (0.77 to 0.88); bench/store_pipeline.sh
// (these statements alone, on the same PostgreSQL) 1.12 x the keys/s of two batches
// at once at 0.80 x the database's CPU per key. Two or four batches in flight on one
// connection in libpq's pipeline mode were slower than either (docs/PERFORMANCE.md).
// A full batch waiting means one cannot keep up (slow commits, a database with cores
// to spare); a smaller batch_max lets more run at once sooner. (Before one statement
// per batch, bench/ measured 5,500 fresh keys/s with 8 batches at once, 6,200 with 4,
// 6,400-6,900 with 2, 5,900 with 1.) The rest of the pool serves lookups, releases and
// garbage collection.
//
// A batch that follows one with company waits up to batch_wait (wait_for_company) for
// as many members as that one had. Without it, at 8 or 32 connections the requests
// split into cohorts that never met: the claims of some and the completions of others
// ran as separate small batches, each with its commit. bench/batch_wait.sh, fresh keys,
// one run each, at 8 / 32 / 64 connections: with no wait 3,400 / 7,920 / 10,733 keys/s
// at 135 / 65 / 49 µs of database CPU per key and a p99 of 4.9 / 7.1 / 9.0 ms; with
// 1 ms 4,318 / 10,373 / 12,013 keys/s at 112 / 46 / 40 µs and 3.4 / 4.8 / 8.2 ms. At
// one connection nothing waits (each batch is one): 0.99 ms p50 either way.
// (bench/results/HISTORY.md, "Batches that stay full", has the whole curve.)
//
// On Citus, an array cannot be routed to one shard, so the batches are per worker:
// each worker is a lane of its own, with one batch at a time. Its claims go as one
// multi-row INSERT … VALUES (claim_rows_sql), one task per shard, all on that worker;
// its completions as one UPDATE … FROM (VALUES …) per shard (complete_rows_sql) in
// one transaction. With citus.multi_shard_modify_mode = sequential, a batch uses one
// connection to its worker and commits there once, with no two-phase commit. Other
// workers' batches run meanwhile on the rest of the pool. Measured on the test
// cluster, one connection, 8 claims per statement: 225 µs of database CPU per key
// for one worker's keys, 140 µs for one shard's, 760 µs one statement each, and 700 µs
// across workers (docs/SCALING.md). With the default 32 shards, lanes per shard
// gathered too few requests to batch.
//
// Two claims of one key in one batch: the first goes into the statement, and the
// later one gets the record as the first left it, as if it had run just after. If a
// multi-row statement fails (an SQL error, a timeout, a deadlock), it changed
// nothing, and each of its members runs again on its own, so one bad request cannot
// fail its neighbours.

Runners::Runners(int threads) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      std::unique_lock lock(mu_);
      for (;;) {
        ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopping, and nothing is left
        auto task = std::move(tasks_.front());
        tasks_.pop_front();
        lock.unlock();
        try {
          task();
        } catch (const std::exception& e) {  // an answer's handler failed; the runner stays
          spdlog::error("store: a group-commit task failed: {}", e.what());
        }
        lock.lock();
      }
    });
  }
}

Runners::~Runners() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (auto& t : threads_) t.join();
}

void Runners::post(std::function<void()> task) {
  // Notified under the lock: a task may hand the last slot of a drain to a runner
  // (drain_on's fallback), whose finishing lets the store go, Runners too; the poster
  // must be done with ready_ by then.
  std::lock_guard lock(mu_);
  tasks_.push_back(std::move(task));
  ready_.notify_one();
}

void GroupCommit::submit(Pending& self) {
  const bool citus = pool_.distributed();
  const int worker = citus ? pool_.worker_of(self.id.key) : kPlainLane;
  if (citus && worker < 0) {
    submit_alone(self);  // no shard map yet: one routed statement, on any free connection
    return;
  }
  Lane* starts = nullptr;  // the lane a drain starts, or resumes, on
  // Plain PostgreSQL's batches go on the caller's event loop when it has one.
  common::Reactor* loop = citus ? nullptr : common::Reactor::current();
  {
    std::lock_guard lock(mu_);
    Lane& lane = lanes_[worker];
    // On Citus, batches per worker, one at a time: a worker's claims and completions
    // queue behind its running batch, while other workers' batches run on the rest of
    // the pool. One slot per worker made bigger batches than a quarter of the pool:
    // 734 fresh keys/s against 721 with pool 8, and 734 against 569 with pool 16.
    lane.slots = citus ? 1 : slots();
    lane.worker = worker;
    lane.queue.push_back(&self);
    if (lane.waiting_on != nullptr && lane.queue.size() >= lane.expected &&
        !lane.wait_over->exchange(true)) {
      // A drain on an event loop waited for this much company: it goes on now (its
      // timer finds the wait over).
      lane.expected = 0;
      lane.wait_over.reset();
      loop = std::exchange(lane.waiting_on, nullptr);
    } else {
      if (lane.expected != 0 && lane.queue.size() >= lane.expected) company_.notify_all();
      if (!may_start(lane)) return;  // a running drain takes it next
      ++lane.running;
    }
    starts = &lane;  // map nodes stay put
  }
  if (loop != nullptr) return start_on(*starts, *loop);
  runners_.post([this, starts] { drain(*starts); });
}

void GroupCommit::submit_alone(Pending& self) {
  runners_.post([this, &self] {
    run_alone(self);
    std::exchange(self.finished, nullptr)();
  });
}

// Takes everything queued in the lane (up to batch_max), runs it unlocked, then
// hands each member its answer; again while more queued meanwhile.
void GroupCommit::drain(Lane& lane) {
  std::unique_lock lock(mu_);
  auto& queue = lane.queue;
  while (!queue.empty()) {
    wait_for_company(lock, lane);
    const auto n = std::min(queue.size(), batch_limit());
    lane.last_size = n;
    std::vector<Pending*> batch(queue.begin(), queue.begin() + static_cast<long>(n));
    queue.erase(queue.begin(), queue.begin() + static_cast<long>(n));
    // A full batch still queued and another slot free: another runner takes it.
    const bool more = may_start(lane);
    if (more) ++lane.running;
    const int worker = lane.worker;
    lock.unlock();
    if (more) runners_.post([this, &lane] { drain(lane); });
    run_and_finish(batch, worker);
    lock.lock();
  }
  stopped_draining(lane);
}

GroupCommit::~GroupCommit() {
  std::unique_lock lock(mu_);
  drained_.wait(lock, [this] {
    return std::all_of(lanes_.begin(), lanes_.end(),
                       [](const auto& entry) { return entry.second.running == 0; });
  });
}

void GroupCommit::run_and_finish(const std::vector<Pending*>& batch, int worker) {
  run_batch(batch, worker);
  counted(batch.size(), false);
  finish(batch);
}

void GroupCommit::counted(std::size_t members, bool on_loop) {
  std::lock_guard lock(mu_);
  ++stats_.batches;
  if (on_loop) ++stats_.on_loop;
  stats_.operations += static_cast<std::int64_t>(members);
}

void GroupCommit::finish(const std::vector<Pending*>& batch) {
  // The members' callers take their answers together when it closes: one post per
  // I/O thread, not one per member (common/handoff.hpp).
  common::Handoff handoff;
  // Moved out first: `finished` may end its Pending's life.
  for (Pending* p : batch) std::exchange(p->finished, nullptr)();
}

void GroupCommit::wait_for_company(std::unique_lock<std::mutex>& lock, Lane& lane) {
  if (options_.batch_wait.count() <= 0 || lane.last_size < 2 || lane.expected != 0) return;
  lane.expected = std::min(lane.last_size, batch_limit());
  company_.wait_for(lock, options_.batch_wait, [&] { return lane.queue.size() >= lane.expected; });
  lane.expected = 0;
}

bool GroupCommit::may_start(const Lane& lane) const {
  if (lane.running >= lane.slots) return false;
  return lane.running == 0 || lane.queue.size() >= batch_limit();
}

namespace {
// The refusal of `cl` by its quota when `usage` is at one of its caps, or nothing.
std::optional<OverQuota> over_cap(const ClaimParams& cl, const Usage& usage) {
  const auto cap = reached(cl.req.quota, usage);
  if (!cap) return std::nullopt;
  return OverQuota{*cap, usage, cl.req.quota};
}
}  // namespace

// After a claim with a quota saw no row: the refusal, when the key is still absent
// and the scope is at a cap (the quota's trigger skipped it), or nothing.
std::optional<OverQuota> GroupCommit::refused_by_quota(Connection& c, pqxx::transaction_base& tx,
                                                       const ClaimParams& cl) {
  const pqxx::result u = c.exec(tx, kQuotaUsage, cl.req.id.scope, cl.req.id.key);
  if (u.empty() || u[0]["present"].as<bool>()) return std::nullopt;
  return over_cap(cl, usage_of(u[0]));
}

// On Citus, before a claim with a quota: the refusal when the key is absent and its
// scope, counted from its records, is at a cap (kQuotaCounted), or nothing.
std::optional<OverQuota> GroupCommit::counted_refusal(Connection& c, const ClaimParams& cl) {
  auto over = over_cap(cl, usage_of(c.run(kQuotaCounted, cl.req.id.scope)[0]));
  if (over && c.run(kKeyPresent, cl.req.id.scope, cl.req.id.key)[0][0].as<bool>()) return {};
  return over;
}

// One member on its own: the single-row statement, in a Write of its own.
void GroupCommit::run_alone(Pending& p) {
  p.answer = pool_.with_connection<Answer>([&p](Connection& c) -> Result<Answer> {
    if (p.claim != nullptr && p.claim->quota && c.distributed()) {
      if (auto over = counted_refusal(c, *p.claim)) {
        Answer refused{pqxx::result{}, -1};
        refused.over_quota = over;
        return refused;
      }
    }
    Write w(c);
    pqxx::transaction_base& tx = w.tx();
    pqxx::result r;
    if (const ClaimParams* cl = p.claim) {
      // Zero rows: a concurrent claim committed after our snapshot (or, routed, the
      // live row went between the claim and the lookup); it is visible now.
      const Statement& claim = c.distributed() ? kClaimRouted : kClaim;
      const char* quota = cl->quota ? cl->quota->c_str() : nullptr;
      for (int attempt = 0; attempt < 3 && r.empty(); ++attempt) {
        r = c.exec(tx, claim, cl->req.id.scope, cl->req.id.key, cl->fingerprint(), cl->req.route,
                   cl->req.method, cl->req.target, static_cast<long long>(cl->req.lease.count()),
                   static_cast<long long>(cl->req.ttl.count()), cl->req.retake_stale, cl->key_id,
                   cl->nonce, quota);
        if (r.empty() && c.distributed()) r = c.exec(tx, kFind, cl->req.id.scope, cl->req.id.key);
        if (r.empty() && quota != nullptr) {
          // No row: a new key its quota's trigger skipped, or a concurrent claim.
          if (auto over = refused_by_quota(c, tx, *cl)) {
            w.commit();
            Answer refused{r, -1};
            refused.over_quota = over;
            return refused;
          }
        }
      }
    } else {
      const CompleteParams& co = *p.complete;
      if (co.chunks > 0) {
        const pqxx::binarystring headers(co.headers.value_or(""));
        const pqxx::binarystring digest(co.digest);
        r = c.exec(tx, kCompleteChunked, co.id.scope, co.id.key, co.token, co.status, headers,
                   co.chunks, co.ttl_ms, co.key_id, co.answer_ms, co.body_length, digest);
      } else if (co.body) {
        const pqxx::binarystring headers(co.headers.value_or(""));
        const pqxx::binarystring body(*co.body);
        r = c.exec(tx, kComplete, co.id.scope, co.id.key, co.token, co.status, headers, body,
                   co.ttl_ms, co.key_id, co.answer_ms);
      } else {
        const char* none = nullptr;
        r = c.exec(tx, kComplete, co.id.scope, co.id.key, co.token, co.status, none, none,
                   co.ttl_ms, co.key_id, co.answer_ms);
      }
      if (!r.empty() && r[0]["watched"].as<bool>()) c.announce(tx, kDoneChannel, {&co.id});
    }
    w.commit();
    return Answer{r, r.empty() ? -1 : 0};
  });
}

// Counts a multi-row statement; false (and a fallback) when it failed.
bool GroupCommit::batch_succeeded(bool ok, std::size_t size, const char* what) {
  std::lock_guard lock(mu_);
  if (!ok) {
    // Not the error text: PostgreSQL may quote the arrays, and keys stay out of logs.
    spdlog::warn("store: a batch of {} {} failed; running each on its own", size, what);
    ++stats_.fallbacks;
    return false;
  }
  ++stats_.multi_row;
  return true;
}

void GroupCommit::run_batch(const std::vector<Pending*>& batch, int worker) {
  if (batch.size() == 1) return run_alone(*batch.front());
  if (pool_.distributed() && worker < 0) {
    // A batch that formed before the pool knew it was on Citus: its keys may span
    // shards, which Citus would not route to one (docs/SCALING.md).
    for (Pending* p : batch) run_alone(*p);
    return;
  }
  Split s = split(batch, worker);
  if (s.together) {
    auto& group = s.claims[0].empty() ? s.claims[1] : s.claims[0];
    if (!run_together(group, s.completions)) {
      for (auto* members : {&group, &s.completions}) {
        for (Pending* p : *members) run_alone(*p);
      }
    }
  } else {
    for (auto* group : {&s.claims[0], &s.claims[1], &s.completions}) {
      if (group->size() == 1 || (!group->empty() && !run_many(*group, worker))) {
        for (Pending* p : *group) run_alone(*p);
      }
    }
  }
  settle(s);
}

PgStore::BatchStats GroupCommit::stats() {
  std::lock_guard lock(mu_);
  PgStore::BatchStats s = stats_;
  for (const auto& [shard, lane] : lanes_) s.queued += static_cast<int>(lane.queue.size());
  return s;
}

}  // namespace idemproxy::store::pg

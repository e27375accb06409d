#pragma once
// A store for unit tests that fails on purpose, over the in-memory store.
#include <atomic>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "idemproxy/store/memory_store.hpp"

namespace idemproxy::testing {

// The memory store, with faults switched on by the test: a store that does not
// answer, a record that does not open, a write fenced by a takeover, a reply lost
// after the write committed.
class FaultyStore final : public store::Store {
 public:
  explicit FaultyStore(const Clock& clock) : inner(clock) {}

  bool claims_fail = false;
  bool claims_throw = false;  // as a store whose driver throws
  bool claims_unreadable = false;
  bool completes_fail = false;
  bool completes_fenced = false;
  bool complete_reply_lost = false;  // written, then the answer never arrives
  int completes = 0;
  bool announces = false;  // as PgStore with LISTEN; the memory store does not
  store::Result<bool> watch_answer = true;
  int watches = 0;

  // The memory store's own announcements instead (finishes of watched records).
  bool inner_watches = false;

  void watch(Watchers w) override {
    if (inner_watches) inner.watch(std::move(w));
  }
  bool announces_finishes() const override {
    return inner_watches ? inner.announces_finishes() : announces;
  }
  store::Result<bool> watch_record(const store::RecordId& id) override {
    ++watches;
    return inner_watches ? inner.watch_record(id) : watch_answer;
  }

  std::atomic<int> claims = 0;
  store::Result<store::ClaimResult> claim(const store::ClaimRequest& r) override {
    ++claims;
    if (claims_throw) throw std::runtime_error("driver threw");
    if (claims_unreadable) return store::StoreError{store::StoreErrc::unreadable, "no key 7"};
    if (claims_fail) return store::StoreError{store::StoreErrc::unavailable, "connection refused"};
    return inner.claim(r);
  }
  store::Result<TimePoint> complete(const store::RecordId& id, std::int64_t token,
                                    const store::StoredResponse& response,
                                    store::Retention keep) override {
    ++completes;
    if (completes_fail) return store::StoreError{store::StoreErrc::unavailable, "timeout"};
    if (completes_fenced) return store::StoreError{store::StoreErrc::fenced, "token 1 < 2"};
    auto r = inner.complete(id, token, response, keep);
    if (complete_reply_lost) return store::StoreError{store::StoreErrc::unavailable, "reset"};
    return r;
  }

  // With `queues`, claim_async and complete_async hold their calls until
  // run_queued(), as PgStore's group commit holds them until a batch runs. Each runs
  // the store call and gives back the hand-out of its answer.
  bool queues = false;
  using Queued = std::function<std::function<void()>()>;  // the call; gives its hand-out
  std::vector<Queued> queued;
  bool queues_calls() const override { return queues || claims_together > 0; }
  // Claims only, queued in groups of this many; each group runs once complete and
  // is answered last first (run_queued_answering_last_first), all on the thread
  // whose claim completed it.
  std::size_t claims_together = 0;
  // When set, every answer of a group but the first handed out goes through it (an
  // I/O context's post): the first one's caller runs before the rest are answered.
  std::function<void(std::function<void()>)> answer_later;
  std::atomic<int> claims_asked = 0;  // claim_async calls
  void claim_async(const store::ClaimRequest& r, ClaimDone done) override {
    ++claims_asked;
    if (claims_throw) throw std::runtime_error("driver threw");  // before it takes the call
    if (!queues && claims_together == 0) return Store::claim_async(r, std::move(done));
    // Shared: the queue's std::functions copy, and ClaimDone only moves.
    auto call = [this, &r,
                 done = std::make_shared<ClaimDone>(std::move(done))]() -> std::function<void()> {
      return [done, result = claim(r)]() mutable { (*done)(std::move(result)); };
    };
    if (claims_together > 0) {
      std::vector<Queued> group;
      {
        std::lock_guard lock(held_mu_);
        together_.emplace_back(std::move(call));
        if (together_.size() < claims_together) return;
        group.swap(together_);
      }
      return answer_last_first(std::move(group));
    }
    queued.emplace_back(std::move(call));
  }
  void complete_async(const store::RecordId& id, std::int64_t token,
                      const store::StoredResponse& response, store::Retention keep,
                      CompleteDone done) override {
    if (!queues) return Store::complete_async(id, token, response, keep, std::move(done));
    // By value: the caller's arguments need only live until the call is answered,
    // and PgStore copies them too.
    queued.emplace_back(
        [this, id, token, response, keep, done = std::move(done)]() -> std::function<void()> {
          return [done, result = complete(id, token, response, keep)]() mutable {
            done(std::move(result));
          };
        });
  }
  void run_queued() {
    auto calls = std::move(queued);
    queued.clear();
    for (auto& call : calls) call()();
  }
  // The queued calls run in order, as on two connections, and their answers are
  // handed out last first: the second connection's batch came back first.
  void run_queued_answering_last_first() { answer_last_first(std::exchange(queued, {})); }

  store::Result<TimePoint> renew(const store::RecordId& id, std::int64_t t, Duration l) override {
    return inner.renew(id, t, l);
  }
  store::Result<store::Done> release(const store::RecordId& id, std::int64_t t) override {
    return inner.release(id, t);
  }
  store::Result<store::Done> mark_indeterminate(const store::RecordId& id,
                                                std::int64_t t) override {
    return inner.mark_indeterminate(id, t);
  }
  store::Result<bool> resolve(const store::RecordId& id) override { return inner.resolve(id); }
  // Atomic: a completion retried in the background appends from the database pool.
  std::atomic<int> appends = 0;
  std::atomic<bool> appends_fail = false;
  store::Result<store::Done> append(const store::RecordId& id, std::int64_t token, std::int32_t seq,
                                    std::string_view bytes) override {
    ++appends;
    if (appends_fail) return store::StoreError{store::StoreErrc::unavailable, "timeout"};
    return inner.append(id, token, seq, bytes);
  }
  // With hold_appends, append_async holds each call (a commit that has not come back)
  // until release_appends(), which any thread may call; the store takes them then.
  void append_async(const store::RecordId& id, std::int64_t token, std::int32_t seq,
                    std::string_view bytes, bool announce, AppendDone done) override {
    {
      std::lock_guard lock(held_mu_);
      if (hold_appends) {
        // A copy, as a store that keeps the call must (Claims::append_async).
        held_.emplace_back([this, id, token, seq, bytes = std::string(bytes),
                            done = std::move(done)] { done(append(id, token, seq, bytes)); });
        return;
      }
    }
    Store::append_async(id, token, seq, bytes, announce, std::move(done));
  }
  bool hold_appends = false;  // set before the world runs; cleared by release_appends()
  std::size_t held_appends() {
    std::lock_guard lock(held_mu_);
    return held_.size();
  }
  void release_appends() {
    std::vector<std::function<void()>> calls;
    {
      std::lock_guard lock(held_mu_);
      hold_appends = false;
      calls.swap(held_);
    }
    for (auto& call : calls) call();
  }

  store::Result<store::Done> start_stream(const store::RecordId& id, std::int64_t token,
                                          const store::StoredResponse& head) override {
    return inner.start_stream(id, token, head);
  }
  store::Result<std::vector<store::Chunk>> read_chunks(const store::RecordId& id,
                                                       std::int64_t token, std::int32_t from,
                                                       int limit) override {
    ++chunk_reads;
    auto page = inner.read_chunks(id, token, from, limit);
    if (page.ok()) {
      std::erase_if(page.value(), [this](const store::Chunk& c) { return c.seq == chunk_lost; });
    }
    return page;
  }
  int chunk_lost = 0;  // read_chunks never returns this chunk (0: none)
  std::atomic<int> chunk_reads = 0;
  store::Result<std::optional<store::Record>> find(const store::RecordId& id) override {
    return inner.find(id);
  }
  store::Result<std::vector<store::Record>> list(std::optional<store::RecordState> s,
                                                 int limit) override {
    return inner.list(s, limit);
  }
  store::Result<bool> purge(const store::RecordId& id) override { return inner.purge(id); }
  store::Result<std::int64_t> drop_answers(const std::string& route, Duration ttl,
                                           int limit) override {
    return inner.drop_answers(route, ttl, limit);
  }
  store::Result<std::int64_t> delete_expired(int limit) override {
    return inner.delete_expired(limit);
  }
  store::Result<std::int64_t> sweep_chunks(int rows) override { return inner.sweep_chunks(rows); }
  store::Result<store::Done> ping() override { return inner.ping(); }
  store::Result<std::int64_t> count_indeterminate() override { return inner.count_indeterminate(); }
  store::Result<std::vector<ScopeUsage>> nearest_quota(int limit) override {
    return inner.nearest_quota(limit);
  }
  store::Result<bool> counts_quotas() override { return inner.counts_quotas(); }

  store::MemoryStore inner;

 private:
  std::mutex held_mu_;
  std::vector<std::function<void()>> held_;
  std::vector<Queued> together_;  // claims_together

  void answer_last_first(std::vector<Queued> calls) {
    std::vector<std::function<void()>> answers;
    answers.reserve(calls.size());
    for (auto& call : calls) answers.push_back(call());
    for (auto a = answers.rbegin(); a != answers.rend(); ++a) {
      if (answer_later && a != answers.rbegin()) {
        answer_later(std::move(*a));
      } else {
        (*a)();
      }
    }
  }
};

}  // namespace idemproxy::testing

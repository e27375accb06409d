// The protocol's decisions, without sockets or PostgreSQL: the coordinator over the
// in-memory store on fake clocks, and over a store that fails on purpose.
#include "idemproxy/engine/coordinator.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <optional>
#include <thread>

#include "faulty_store.hpp"

using namespace idemproxy;
using namespace idemproxy::engine;
using namespace std::chrono_literals;
using DKind = Decision::Kind;
using idemproxy::testing::FaultyStore;
using ops::Outcome;

namespace {

// Records what it saw when it was woken.
class ProbeWaiter final : public Waiter {
 public:
  explicit ProbeWaiter(std::function<void()> on_wake) : on_wake_(std::move(on_wake)) {}
  void wake() override {
    ++woken;
    on_wake_();
  }
  int woken = 0;

 private:
  std::function<void()> on_wake_;
};

class CoordinatorTest : public ::testing::Test {
 protected:
  using Steady = std::chrono::steady_clock;

  Coordinator::Hooks hooks() {
    Coordinator::Hooks h;
    h.steady_now = [this] { return steady; };
    h.prepare_replay = [](ReplayCache::Entry& e) {
      e.response.headers.push_back({"X-Readied", "yes"});
    };
    h.retry_completion = [this](const store::RecordId& id, std::int64_t token, const RoutePolicy&,
                                KeptAnswer kept) {
      retried.push_back({id.key, token, kept.answer.status, std::move(kept)});
      return true;
    };
    // Held, as the database pool holds them, until the test runs them.
    h.run_blocking = [this](std::function<void()> call) { blocking.push_back(std::move(call)); };
    return h;
  }
  store::ClaimRequest claim(std::string key, std::string fp = "fp-1") {
    return {{"", std::move(key)}, std::move(fp), route.lease,  route.ttl,
            route.name,           "POST",        "/v1/orders", route.on_stale == OnStale::retake};
  }
  static store::StoredResponse created() {
    return {201, {{"Content-Type", "application/json"}}, R"({"id":"ord_1"})"};
  }
  WaitBudget budget() const { return WaitBudget{steady + route.lease}; }
  Decision claim_and_decide(const store::ClaimRequest& c) {
    return coordinator.decide(route, c, coordinator.claim(c), budget(), form);
  }
  std::string metrics_text() const { return metrics.render(); }
  // complete_async() through a store that queues its calls, answered at once.
  std::optional<Completion> complete_queued(const store::ClaimRequest& c, std::int64_t token,
                                            store::StoredResponse answer) {
    store.queues = true;
    std::optional<Completion> done;
    coordinator.complete_async(c, token, route, std::move(answer), form,
                               [&](Completion d) { done = d; });
    store.run_queued();
    return done;
  }

  struct Retry {
    std::string key;
    std::int64_t token;
    int status;
    KeptAnswer kept;  // what the retry finishes with (Coordinator::finish_later)
  };

  FakeClock clock;  // the store's clock
  Steady::time_point steady{Steady::duration{std::chrono::hours{1}}};
  FaultyStore store{clock};
  ReplayCache cache{1 << 20};
  ops::Metrics metrics;
  std::vector<Retry> retried;
  std::vector<std::function<void()>> blocking;  // calls handed to Hooks::run_blocking
  void run_blocking_calls() {
    auto calls = std::move(blocking);
    blocking.clear();
    for (auto& call : calls) call();
  }
  Coordinator coordinator{store, store, cache, metrics, hooks()};
  RoutePolicy route;
  ReplayCache::Request form{"POST", "/v1/orders", "application/json", R"({"n":1})"};
};

}  // namespace

TEST_F(CoordinatorTest, AClaimMarksTheKeyHeldHereBeforeItReturns) {
  const auto c = claim("k");
  const Admission verdict = coordinator.claim(c);
  ASSERT_EQ(verdict.kind, Admission::Kind::execute);
  // A loser of the same group-commit batch, answered at this moment, must find the
  // key held here and sleep, not poll the store.
  auto waiter = std::make_shared<ProbeWaiter>([] {});
  EXPECT_EQ(coordinator.wait_here(c.id, waiter), Holder::here);
  EXPECT_EQ(coordinator.wait_here({"", "other"}, waiter), Holder::elsewhere);
}

// The storm rule: waiters wake only once the answer is in the cache, so none of them
// asks the store again. Releasing the waiters before the cache put fails this.
TEST_F(CoordinatorTest, WaitersWakeOnlyAfterTheAnswerIsInTheCache) {
  const auto c = claim("k");
  const auto first = claim_and_decide(c);
  ASSERT_EQ(first.kind, DKind::execute);
  std::vector<std::shared_ptr<ProbeWaiter>> waiters;
  int found_cached = 0;
  route.on_concurrent = OnConcurrent::wait;
  for (int i = 0; i < 63; ++i) {
    const auto retry = claim_and_decide(c);
    ASSERT_EQ(retry.kind, DKind::wait);
    waiters.push_back(std::make_shared<ProbeWaiter>([&] {
      const auto hit = coordinator.cached(route, c.id);
      if (hit && hit->fingerprint == c.fingerprint) ++found_cached;
    }));
    ASSERT_EQ(coordinator.wait_here(c.id, waiters.back()), Holder::here);
  }
  EXPECT_EQ(coordinator.waiting_keys(), 1u);
  const int completes_before = store.completes;
  const Completion done = coordinator.complete(c, first.token, route, created(), form);
  EXPECT_EQ(done.finish, Finish::stored);
  EXPECT_EQ(store.completes, completes_before + 1);
  EXPECT_EQ(found_cached, 63);
  for (const auto& w : waiters) EXPECT_EQ(w->woken, 1);
  EXPECT_EQ(coordinator.waiting_keys(), 0u);
  const auto hit = coordinator.cached(route, c.id);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->response.body, R"({"id":"ord_1"})");
  EXPECT_EQ(hit->response.headers.back().name, "X-Readied");  // by the transport's hook
  EXPECT_TRUE(hit->request.same("POST", "/v1/orders", "application/json", R"({"n":1})"));
}

// A store that queues its calls (PostgreSQL's group commit) answers a claim later,
// on a thread of its own. The verdict is the one claim() gives, and the key is
// marked held before the verdict is handed over, as claim() does it.
TEST_F(CoordinatorTest, AQueuedClaimMarksTheKeyHeldBeforeItsVerdictIsHandedOver) {
  store.queues = true;
  ASSERT_TRUE(coordinator.queues_store_calls());
  const auto c = claim("k");
  std::optional<Admission> verdict;
  bool held_when_answered = false;
  coordinator.claim_async(c, [&](Admission a) {
    held_when_answered =
        coordinator.wait_here(c.id, std::make_shared<ProbeWaiter>([] {})) == Holder::here;
    verdict = std::move(a);
  });
  EXPECT_FALSE(verdict);  // queued, not answered: on its way
  EXPECT_EQ(coordinator.wait_here(c.id, std::make_shared<ProbeWaiter>([] {})), Holder::claiming);
  store.run_queued();
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->kind, Admission::Kind::execute);
  EXPECT_TRUE(held_when_answered);
  // The second claim of the key, queued the same way, finds it in flight.
  std::optional<Admission> second;
  coordinator.claim_async(c, [&](Admission a) { second = std::move(a); });
  store.run_queued();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->kind, Admission::Kind::in_flight);
}

// Two claims of one key here, run on two connections: the loser's batch may come
// back before the winner's. The loser finds the winner's claim on its way and sleeps
// until the winner finishes, as for a key held here: no store call to watch it, and
// the cached answer when it wakes. Without the claims on their way counted, the
// loser finds the key held elsewhere and asks the store (the Citus storm's flake).
TEST_F(CoordinatorTest, ALoserAnsweredBeforeItsWinnerSleepsUntilTheWinnerFinishes) {
  store.queues = true;
  route.on_concurrent = OnConcurrent::wait;
  const auto c = claim("k");
  std::optional<Admission> won;
  std::optional<Admission> lost;
  std::optional<Holder> loser_found;
  int found_cached = 0;
  auto waiter = std::make_shared<ProbeWaiter>([&] {
    const auto hit = coordinator.cached(route, c.id);
    if (hit && hit->fingerprint == c.fingerprint) ++found_cached;
  });
  coordinator.claim_async(c, [&](Admission a) { won = std::move(a); });
  coordinator.claim_async(c, [&](Admission a) {
    EXPECT_FALSE(won);  // answered first
    loser_found = coordinator.wait_here(c.id, waiter);
    lost = std::move(a);
  });
  store.run_queued_answering_last_first();
  ASSERT_TRUE(won && lost);
  ASSERT_EQ(won->kind, Admission::Kind::execute);
  ASSERT_EQ(lost->kind, Admission::Kind::in_flight);
  EXPECT_EQ(loser_found, Holder::claiming);
  EXPECT_EQ(waiter->woken, 0);  // the winner's verdict keeps it asleep
  EXPECT_EQ(coordinator.wait_here(c.id, std::make_shared<ProbeWaiter>([] {})), Holder::here);
  store.queues = false;
  const Completion done = coordinator.complete(c, won->token, route, created(), form);
  EXPECT_EQ(done.finish, Finish::stored);
  EXPECT_EQ(waiter->woken, 1);
  EXPECT_EQ(found_cached, 1);
  EXPECT_EQ(coordinator.waiting_keys(), 0u);
}

// Claims here that all lose (another instance holds the key): a request that slept
// on them wakes at the last verdict, to wait for that instance instead.
TEST_F(CoordinatorTest, WaitersOnClaimsThatAllLoseWakeAtTheLastVerdict) {
  const auto c = claim("k");
  const auto elsewhere = store.claim(c);  // as another instance
  ASSERT_TRUE(elsewhere.ok() && std::holds_alternative<store::Claimed>(elsewhere.value()));
  store.queues = true;
  auto waiter = std::make_shared<ProbeWaiter>([] {});
  std::optional<Holder> first_found;
  std::vector<Admission::Kind> kinds;
  coordinator.claim_async(c, [&](Admission a) { kinds.push_back(a.kind); });
  coordinator.claim_async(c, [&](Admission a) {
    kinds.push_back(a.kind);
    first_found = coordinator.wait_here(c.id, waiter);
  });
  store.run_queued_answering_last_first();
  EXPECT_EQ(kinds, (std::vector{Admission::Kind::in_flight, Admission::Kind::in_flight}));
  EXPECT_EQ(first_found, Holder::claiming);
  EXPECT_EQ(waiter->woken, 1);
  EXPECT_EQ(coordinator.waiting_keys(), 0u);
  EXPECT_EQ(coordinator.wait_here(c.id, waiter), Holder::elsewhere);
}

// A claim whose store throws has no verdict to come: it is not left on its way, where
// it would keep the key's waiters asleep on it until their deadline.
TEST_F(CoordinatorTest, AClaimWhoseStoreThrowsIsNotLeftOnItsWay) {
  const auto c = claim("k");
  store.claims_throw = true;
  EXPECT_THROW(coordinator.claim(c), std::runtime_error);
  store.queues = true;
  EXPECT_THROW(coordinator.claim_async(c, [](Admission) {}), std::runtime_error);
  EXPECT_EQ(coordinator.wait_here(c.id, std::make_shared<ProbeWaiter>([] {})), Holder::elsewhere);
}

// The coordinator alone chooses between a queued store call and a blocking one: with
// a store that does not queue its calls, claim_async() and complete_async() hand
// claim() and complete() to Hooks::run_blocking (the database pool in http/), never
// running them on the caller's thread, and answer once those have run.
TEST_F(CoordinatorTest, AStoreThatDoesNotQueueIsCalledThroughRunBlocking) {
  ASSERT_FALSE(coordinator.queues_store_calls());
  const auto c = claim("k");
  std::optional<Admission> verdict;
  coordinator.claim_async(c, [&](Admission a) { verdict = std::move(a); });
  EXPECT_FALSE(verdict);
  ASSERT_EQ(blocking.size(), 1u);
  run_blocking_calls();
  ASSERT_TRUE(verdict);
  ASSERT_EQ(verdict->kind, Admission::Kind::execute);
  const auto first = coordinator.decide(route, c, std::move(*verdict), budget(), form);
  ASSERT_EQ(first.kind, DKind::execute);
  const auto answer = created();
  std::optional<Completion> done;
  coordinator.complete_async(c, first.token, route, answer, form, [&](Completion d) { done = d; });
  EXPECT_FALSE(done);
  ASSERT_EQ(blocking.size(), 1u);
  run_blocking_calls();
  ASSERT_TRUE(done);
  EXPECT_EQ(done->finish, Finish::stored);
  EXPECT_TRUE(coordinator.cached(route, c.id));
}

// A queued completion keeps complete()'s order: the store, then the replay cache,
// then the waiters, and only then the caller's answer.
TEST_F(CoordinatorTest, AQueuedCompletionCachesThenWakesThenAnswers) {
  const auto c = claim("k");
  const auto first = claim_and_decide(c);
  ASSERT_EQ(first.kind, DKind::execute);
  int found_cached = 0;
  auto waiter = std::make_shared<ProbeWaiter>([&] {
    if (coordinator.cached(route, c.id)) ++found_cached;
  });
  ASSERT_EQ(coordinator.wait_here(c.id, waiter), Holder::here);
  store.queues = true;
  const auto answer = created();
  std::optional<Completion> done;
  int woken_when_answered = -1;
  coordinator.complete_async(c, first.token, route, answer, form, [&](Completion d) {
    woken_when_answered = waiter->woken;
    done = d;
  });
  EXPECT_FALSE(done);
  EXPECT_TRUE(blocking.empty());  // queued with the store, not run on the pool
  EXPECT_EQ(waiter->woken, 0);
  EXPECT_FALSE(coordinator.cached(route, c.id));
  store.run_queued();
  ASSERT_TRUE(done);
  EXPECT_EQ(done->finish, Finish::stored);
  EXPECT_GT(done->expires_at, TimePoint{});
  EXPECT_EQ(found_cached, 1);
  EXPECT_EQ(woken_when_answered, 1);
  const auto hit = coordinator.cached(route, c.id);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->response.body, R"({"id":"ord_1"})");
  EXPECT_EQ(hit->response.headers.back().name, "X-Readied");
}

// A queued completion whose reply was lost is retried in the background and not
// cached, as complete() does; a status the route does not store releases the key,
// a blocking call, so it is not queued.
TEST_F(CoordinatorTest, AQueuedCompletionWhoseReplyIsLostIsRetriedNotCached) {
  const auto c = claim("k");
  const auto first = claim_and_decide(c);
  store.complete_reply_lost = true;
  const auto done = complete_queued(c, first.token, created());
  ASSERT_TRUE(done);
  EXPECT_EQ(done->finish, Finish::store_failed);
  EXPECT_TRUE(done->retrying);
  ASSERT_EQ(retried.size(), 1u);
  EXPECT_FALSE(coordinator.cached(route, c.id));

  // Not stored, or a store that does not queue: the call goes to the pool.
  store.complete_reply_lost = false;
  for (const bool queues : {true, false}) {
    const auto k = claim(queues ? "busy" : "plain");
    const auto held = claim_and_decide(k);
    store.queues = queues;
    std::optional<Completion> answered;
    coordinator.complete_async(k, held.token, route,
                               queues ? store::StoredResponse{503, {}, "busy"} : created(), form,
                               [&](Completion d) { answered = d; });
    store.run_queued();
    EXPECT_FALSE(answered);
    ASSERT_EQ(blocking.size(), 1u);
    run_blocking_calls();
    ASSERT_TRUE(answered);
    EXPECT_EQ(answered->finish, queues ? Finish::released : Finish::stored);
  }
}

TEST_F(CoordinatorTest, TheCachedAnswerLivesNoLongerThanTheRecordOnTheMonotonicClock) {
  const auto c = claim("k");
  const auto first = claim_and_decide(c);
  coordinator.complete(c, first.token, route, created(), form);
  steady += route.ttl - 1ms;
  EXPECT_TRUE(coordinator.cached(route, c.id));
  steady += 1ms;
  EXPECT_FALSE(coordinator.cached(route, c.id));
}

// Idempotency-Policy: max-age sets the answer's life in memory as in the store, on
// either completion path; the cached form keeps no Idempotency-Policy.
TEST_F(CoordinatorTest, AnUpstreamsMaxAgeBoundsTheCachedAnswerToo) {
  route.ttl = 1h;
  route.max_ttl = 2h;
  auto answer = created();
  answer.headers.push_back({"Idempotency-Policy", "max-age=600"});
  const auto c = claim("k");
  const auto first = claim_and_decide(c);
  const Completion done = coordinator.complete(c, first.token, route, answer, form);
  EXPECT_EQ(done.expires_at, clock.now() + 10min);
  const auto hit = coordinator.cached(route, c.id);
  ASSERT_TRUE(hit);
  for (const auto& h : hit->response.headers) EXPECT_NE(h.name, "Idempotency-Policy");
  steady += 10min - 1ms;
  EXPECT_TRUE(coordinator.cached(route, c.id));
  steady += 1ms;
  EXPECT_FALSE(coordinator.cached(route, c.id));

  // Queued, and longer than ttl: bounded by max_ttl.
  answer.headers.back().value = "max-age=86400";
  const auto q = claim("q");
  const auto queued = claim_and_decide(q);
  store.queues = true;
  std::optional<Completion> answered;
  coordinator.complete_async(q, queued.token, route, answer, form,
                             [&](Completion d) { answered = d; });
  store.run_queued();
  ASSERT_TRUE(answered);
  EXPECT_EQ(answered->finish, Finish::stored);
  EXPECT_EQ(answered->expires_at, clock.now() + 2h);
  steady += 2h - 1ms;
  EXPECT_TRUE(coordinator.cached(route, q.id));
  steady += 1ms;
  EXPECT_FALSE(coordinator.cached(route, q.id));
}

// A completion the store failed is retried in the form its record keeps: the
// upstream's Idempotency-Policy is gone from it, so the retention it asked for
// travels beside it, and the retry still keeps the answer for that long, not ttl.
TEST_F(CoordinatorTest, ACompletionRetriedLaterKeepsItsKeptFormAndTheUpstreamsRetention) {
  route.ttl = 1h;
  route.max_ttl = 2h;
  auto answer = created();
  answer.headers.push_back({"Idempotency-Policy", "max-age=600"});
  answer.headers.push_back({"X-Request-Id", "req-1"});
  const auto c = claim("k");
  const auto first = claim_and_decide(c);
  store.completes_fail = true;
  const auto done = complete_queued(c, first.token, answer);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->finish, Finish::store_failed);
  EXPECT_TRUE(done->retrying);
  ASSERT_EQ(retried.size(), 1u);
  const KeptAnswer& kept = retried[0].kept;
  EXPECT_TRUE(kept.stores);
  EXPECT_EQ(kept.keep.answer, 10min);
  EXPECT_EQ(kept.answer.body, R"({"id":"ord_1"})");
  ASSERT_EQ(kept.answer.headers.size(), 1u);
  EXPECT_EQ(kept.answer.headers[0].name, "Content-Type");

  store.queues = false;
  store.completes_fail = false;
  ASSERT_EQ(coordinator.finish_later(c.id, first.token, kept), Finish::stored);
  const Admission replay = coordinator.claim(c);
  ASSERT_EQ(replay.kind, Admission::Kind::replay);
  EXPECT_EQ(replay.expires_at, clock.now() + 10min);
  ASSERT_TRUE(replay.replay);
  EXPECT_EQ(replay.replay->headers.size(), 1u);
}

// An answer the route does not store, whose release failed, is retried as a release.
TEST_F(CoordinatorTest, AnAnswerNotStoredIsRetriedAsARelease) {
  const auto c = claim("k");
  const auto first = claim_and_decide(c);
  store::StoredResponse answer = created();
  answer.headers.push_back({"Idempotency-Policy", "no-store"});
  const Completion done = coordinator.complete(c, first.token, route, answer, form);
  EXPECT_EQ(done.finish, Finish::released);
  EXPECT_EQ(claim_and_decide(c).kind, DKind::execute);

  const auto d = claim("d");
  const auto held = claim_and_decide(d);
  KeptAnswer kept = Engine::keep(std::move(answer), route);
  EXPECT_FALSE(kept.stores);
  EXPECT_EQ(coordinator.finish_later(d.id, held.token, kept), Finish::released);
  EXPECT_EQ(claim_and_decide(d).kind, DKind::execute);
}

TEST_F(CoordinatorTest, AReplayFromTheStoreIsCachedForWhatTheStoreSaysIsLeft) {
  const auto c = claim("k");
  // Another instance (its own cache) executed and stored it.
  ReplayCache other_cache{1 << 20};
  Coordinator other{store, store, other_cache, metrics, hooks()};
  const auto first = other.decide(route, c, other.claim(c), budget(), form);
  other.complete(c, first.token, route, created(), form);
  clock.advance(route.ttl - 10s);  // 10 s of the record's life left, by the store's clock

  const auto retry = claim_and_decide(c);
  ASSERT_EQ(retry.kind, DKind::replay);
  EXPECT_EQ(retry.outcome, Outcome::replayed);
  EXPECT_EQ(retry.replay->response.status, 201);
  EXPECT_EQ(retry.replay->response.headers.back().name, "X-Readied");
  ASSERT_TRUE(coordinator.cached(route, c.id));
  steady += 10s;
  EXPECT_FALSE(coordinator.cached(route, c.id));
}

TEST_F(CoordinatorTest, AKeyInFlightIsRefusedOrWaitedForUpToTheLease) {
  const auto c = claim("k");
  ASSERT_EQ(claim_and_decide(c).kind, DKind::execute);

  const auto rejected = claim_and_decide(c);
  EXPECT_EQ(rejected.kind, DKind::refuse);
  EXPECT_EQ(rejected.refusal, Refusal::request_in_flight);
  EXPECT_EQ(rejected.retry_after, 1);
  EXPECT_EQ(rejected.outcome, Outcome::conflict);

  route.on_concurrent = OnConcurrent::wait;
  const WaitBudget b = budget();
  EXPECT_EQ(coordinator.decide(route, c, coordinator.claim(c), b, form).kind, DKind::wait);
  steady = b.deadline;
  const auto late = coordinator.decide(route, c, coordinator.claim(c), b, form);
  EXPECT_EQ(late.kind, DKind::refuse);
  EXPECT_EQ(late.refusal, Refusal::request_in_flight);
}

TEST_F(CoordinatorTest, BackoffForKeysHeldElsewhereDoublesAndStopsAtTheDeadline) {
  WaitBudget b{steady + 300ms};
  EXPECT_EQ(b.next_backoff(steady) - steady, 5ms);
  EXPECT_EQ(b.next_backoff(steady) - steady, 10ms);
  for (int i = 0; i < 10; ++i) b.next_backoff(steady);
  EXPECT_EQ(b.backoff, 250ms);
  EXPECT_EQ(b.next_backoff(steady + 200ms), b.deadline);  // 100 ms left, not 250
}

TEST_F(CoordinatorTest, AReusedKeyWithAnotherRequestIsAMismatch) {
  const auto c = claim("k");
  const auto first = claim_and_decide(c);
  coordinator.complete(c, first.token, route, created(), form);
  const auto other = claim_and_decide(claim("k", "fp-2"));
  EXPECT_EQ(other.kind, DKind::refuse);
  EXPECT_EQ(other.refusal, Refusal::key_mismatch);
  EXPECT_EQ(other.outcome, Outcome::mismatch);
}

TEST_F(CoordinatorTest, ShadowModeForwardsEverythingAndNamesWhatEnforceWouldHaveDone) {
  route.mode = Mode::shadow;
  const auto c = claim("k");
  const auto first = claim_and_decide(c);
  ASSERT_EQ(first.kind, DKind::execute);  // shadow still records

  const auto concurrent = claim_and_decide(c);
  EXPECT_EQ(concurrent.kind, DKind::forward_unprotected);
  EXPECT_EQ(concurrent.outcome, Outcome::shadow_would_conflict);

  coordinator.complete(c, first.token, route, created(), form);
  EXPECT_FALSE(coordinator.cached(route, c.id));  // shadow never replays
  const auto again = claim_and_decide(c);
  EXPECT_EQ(again.kind, DKind::forward_unprotected);
  EXPECT_EQ(again.outcome, Outcome::shadow_would_replay);
  const auto other = claim_and_decide(claim("k", "fp-2"));
  EXPECT_EQ(other.outcome, Outcome::shadow_would_mismatch);

  store.claims_fail = true;
  const auto down = claim_and_decide(claim("k2"));
  EXPECT_EQ(down.kind, DKind::forward_unprotected);
  EXPECT_EQ(down.outcome, Outcome::fail_open);
}

TEST_F(CoordinatorTest, AStoreThatDoesNotAnswerFailsClosedUnlessTheRouteFailsOpen) {
  store.claims_fail = true;
  const auto closed = claim_and_decide(claim("k"));
  EXPECT_EQ(closed.kind, DKind::refuse);
  EXPECT_EQ(closed.refusal, Refusal::store_unavailable);
  EXPECT_EQ(closed.retry_after, 1);
  EXPECT_EQ(closed.cause, "connection refused");

  route.store_unavailable = StoreUnavailable::fail_open;
  const auto open = claim_and_decide(claim("k"));
  EXPECT_EQ(open.kind, DKind::forward_unprotected);
  EXPECT_EQ(open.outcome, Outcome::fail_open);
  EXPECT_NE(metrics_text().find("idemproxy_store_errors_total 2"), std::string::npos);
}

// A record that exists but does not open is never an outage: fail_open must not
// forward it (that would execute it twice).
TEST_F(CoordinatorTest, AnUnreadableRecordIsNeverForwardedEvenWhenFailingOpen) {
  route.store_unavailable = StoreUnavailable::fail_open;
  store.claims_unreadable = true;
  const auto d = claim_and_decide(claim("k"));
  EXPECT_EQ(d.kind, DKind::refuse);
  EXPECT_EQ(d.refusal, Refusal::record_unreadable);
  EXPECT_EQ(d.cause, "no key 7");
}

TEST_F(CoordinatorTest, AFencedCompletionCachesNothingAndStillWakesTheWaiters) {
  const auto c = claim("k");
  const auto first = claim_and_decide(c);
  auto waiter = std::make_shared<ProbeWaiter>([] {});
  ASSERT_EQ(coordinator.wait_here(c.id, waiter), Holder::here);
  store.completes_fenced = true;
  const Completion done = coordinator.complete(c, first.token, route, created(), form);
  EXPECT_EQ(done.finish, Finish::fenced);
  EXPECT_FALSE(coordinator.cached(route, c.id));
  EXPECT_EQ(waiter->woken, 1);
  EXPECT_TRUE(retried.empty());
}

// The store wrote the completion but its reply was lost: the answer is retried in
// the background (the retry finds it written or fenced), never cached on a guess.
TEST_F(CoordinatorTest, ALostCompletionReplyIsRetriedInTheBackgroundNotCached) {
  const auto c = claim("k");
  const auto first = claim_and_decide(c);
  auto waiter = std::make_shared<ProbeWaiter>([] {});
  ASSERT_EQ(coordinator.wait_here(c.id, waiter), Holder::here);
  store.complete_reply_lost = true;
  const Completion done = coordinator.complete(c, first.token, route, created(), form);
  EXPECT_EQ(done.finish, Finish::store_failed);
  EXPECT_TRUE(done.retrying);
  ASSERT_EQ(retried.size(), 1u);
  EXPECT_EQ(retried[0].key, "k");
  EXPECT_EQ(retried[0].token, first.token);
  EXPECT_EQ(retried[0].status, 201);
  EXPECT_FALSE(coordinator.cached(route, c.id));
  EXPECT_EQ(waiter->woken, 1);
  // What the store kept is what a retry gets.
  store.complete_reply_lost = false;
  const auto retry = claim_and_decide(c);
  EXPECT_EQ(retry.kind, DKind::replay);
}

TEST_F(CoordinatorTest, AStatusThatIsNotStoredReleasesTheKeyForTheNextRetry) {
  const auto c = claim("k");
  const auto first = claim_and_decide(c);
  const Completion done = coordinator.complete(c, first.token, route, {503, {}, "busy"}, form);
  EXPECT_EQ(done.finish, Finish::released);
  EXPECT_FALSE(coordinator.cached(route, c.id));
  EXPECT_EQ(claim_and_decide(c).kind, DKind::execute);
}

TEST_F(CoordinatorTest, AbandoningBeforeSendingReleasesAfterSendingMarksIndeterminate) {
  const auto unsent = claim("a");
  const auto a = claim_and_decide(unsent);
  auto waiter = std::make_shared<ProbeWaiter>([] {});
  ASSERT_EQ(coordinator.wait_here(unsent.id, waiter), Holder::here);
  EXPECT_EQ(coordinator.abandon(unsent.id, a.token, false), Finish::released);
  EXPECT_EQ(waiter->woken, 1);
  EXPECT_EQ(claim_and_decide(unsent).kind, DKind::execute);

  const auto sent = claim("b");
  const auto b = claim_and_decide(sent);
  EXPECT_EQ(coordinator.abandon(sent.id, b.token, true), Finish::indeterminate);
  const auto retry = claim_and_decide(sent);
  EXPECT_EQ(retry.kind, DKind::refuse);
  EXPECT_EQ(retry.refusal, Refusal::outcome_indeterminate);
  EXPECT_EQ(coordinator.wait_here(sent.id, waiter), Holder::elsewhere);  // no longer held here
}

TEST_F(CoordinatorTest, AnAnswerTooLargeToStoreIsNotCachedAndRetriesAreToldSo) {
  const auto c = claim("k");
  const auto first = claim_and_decide(c);
  const Completion done = coordinator.complete(c, first.token, route, {201, {}, {}, false}, form);
  EXPECT_EQ(done.finish, Finish::stored);
  EXPECT_FALSE(coordinator.cached(route, c.id));
  const auto retry = claim_and_decide(c);
  EXPECT_EQ(retry.kind, DKind::refuse);
  EXPECT_EQ(retry.refusal, Refusal::response_not_stored);
  EXPECT_NE(retry.detail.find("upstream status 201"), std::string::npos);
}

// Many threads, one key: exactly one executes; everyone else waits here and replays
// the one answer from memory.
TEST_F(CoordinatorTest, AConcurrentStormExecutesOnceAndEveryoneElseGetsTheCachedAnswer) {
  route.on_concurrent = OnConcurrent::wait;
  const auto c = claim("k");
  std::atomic<int> executed{0}, waited{0};
  std::atomic<std::int64_t> token{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&] {
      const auto d = coordinator.decide(route, c, coordinator.claim(c), budget(), form);
      if (d.kind == DKind::execute) {
        ++executed;
        token = d.token;
      } else if (d.kind == DKind::wait) {
        ++waited;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(executed.load(), 1);
  EXPECT_EQ(waited.load(), 15);
  coordinator.complete(c, token, route, created(), form);
  for (int i = 0; i < 15; ++i) {
    const auto hit = coordinator.cached(route, c.id);
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->fingerprint, c.fingerprint);
  }
  EXPECT_EQ(store.completes, 1);
}

// A key another instance executes: with a store that announces finishes, a waiter
// registers, the record is watched, and it sleeps until the announcement (or until
// the listener resumes after a gap); without one, it polls.
TEST_F(CoordinatorTest, AKeyHeldElsewhereIsWaitedForByAnnouncementNotByPolling) {
  using Elsewhere = Coordinator::Elsewhere;
  const store::RecordId id{"", "k"}, other{"", "other"};
  auto waiter = std::make_shared<ProbeWaiter>([] {});
  EXPECT_EQ(coordinator.wait_elsewhere(id, waiter), Elsewhere::poll);
  EXPECT_EQ(store.watches, 0);  // nothing asked of a store that cannot announce

  store.announces = true;
  EXPECT_EQ(coordinator.wait_elsewhere(id, waiter), Elsewhere::announced);
  EXPECT_EQ(store.watches, 1);
  coordinator.finished_elsewhere(other);
  EXPECT_EQ(waiter->woken, 0);
  coordinator.finished_elsewhere(id);
  EXPECT_EQ(waiter->woken, 1);
  coordinator.stop_waiting_elsewhere(id, waiter.get());
  coordinator.finished_elsewhere(id);
  EXPECT_EQ(waiter->woken, 1);  // it stopped waiting: not woken again

  auto second = std::make_shared<ProbeWaiter>([] {});
  EXPECT_EQ(coordinator.wait_elsewhere(id, waiter), Elsewhere::announced);
  EXPECT_EQ(coordinator.wait_elsewhere(other, second), Elsewhere::announced);
  coordinator.announcements_resumed();  // a gap: every waiter looks again
  EXPECT_EQ(waiter->woken, 2);
  EXPECT_EQ(second->woken, 1);
  coordinator.stop_waiting_elsewhere(id, waiter.get());
  coordinator.stop_waiting_elsewhere(other, second.get());

  store.watch_answer = false;  // it finished before the watch: claim again at once
  EXPECT_EQ(coordinator.wait_elsewhere(id, waiter), Elsewhere::finished);
  coordinator.stop_waiting_elsewhere(id, waiter.get());
  store.watch_answer = store::StoreError{store::StoreErrc::unavailable, "timeout"};
  EXPECT_EQ(coordinator.wait_elsewhere(id, waiter), Elsewhere::poll);
  coordinator.stop_waiting_elsewhere(id, waiter.get());
}

TEST_F(CoordinatorTest, TheFallbackReCheckStartsAtFiveSecondsAndStopsAtTheDeadline) {
  WaitBudget budget{steady + std::chrono::seconds{12}};
  EXPECT_EQ(budget.next_fallback(steady) - steady, std::chrono::seconds{5});
  EXPECT_EQ(budget.next_fallback(steady) - steady, std::chrono::seconds{10});
  EXPECT_EQ(budget.next_fallback(steady) - steady, std::chrono::seconds{12});
}

// The waiting-keys gauge counts a key once: a waiter whose request moved on is
// dropped when the next comes, and the key is still one key, gone at its release.
TEST(LocalHoldersTest, AKeyWhoseWaitersLeftIsCountedOnceAndGoesAtItsRelease) {
  LocalHolders holders;
  const store::RecordId id{"tenant", "key"};
  holders.claiming(id);
  EXPECT_EQ(holders.add(id, std::make_shared<ProbeWaiter>([] {})), Holder::claiming);
  EXPECT_EQ(holders.waiting_keys(), 1u);  // that waiter is gone already
  holders.claimed(id, true);
  const auto waiter = std::make_shared<ProbeWaiter>([] {});
  EXPECT_EQ(holders.add(id, waiter), Holder::here);
  EXPECT_EQ(holders.waiting_keys(), 1u);
  holders.release(id);
  EXPECT_EQ(waiter->woken, 1);
  EXPECT_EQ(holders.waiting_keys(), 0u);
  EXPECT_EQ(holders.add(id, waiter), Holder::elsewhere);  // nothing of it is left here
}

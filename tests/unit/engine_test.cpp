// The idempotency state machine against the in-memory store, on a fake clock.
#include "idemproxy/engine/engine.hpp"

#include <gtest/gtest.h>

#include "idemproxy/store/memory_store.hpp"

using namespace idemproxy;
using namespace idemproxy::engine;
using namespace std::chrono_literals;
using Kind = Admission::Kind;

namespace {

class EngineTest : public ::testing::Test {
 protected:
  store::ClaimRequest request(std::string key, std::string fp = "fp-1", std::string scope = "") {
    return {{std::move(scope), std::move(key)},
            std::move(fp),
            policy.lease,
            policy.ttl,
            "orders",
            "POST",
            "/v1/orders",
            policy.on_stale == OnStale::retake,
            policy.after_expiry_reject};
  }
  store::StoredResponse created(std::string body = R"({"id":"ord_1"})") {
    return {201,
            {{"Content-Type", "application/json"},
             {"Set-Cookie", "session=secret"},
             {"Connection", "keep-alive"},
             {"Content-Length", "14"},
             {"X-Request-Cost", "3"}},
            std::move(body)};
  }

  FakeClock clock;
  store::MemoryStore memory{clock};
  Engine engine{memory};
  RoutePolicy policy;
};

}  // namespace

TEST_F(EngineTest, FirstRequestExecutesAndRetriesReplayTheStoredResponse) {
  const auto first = engine.admit(request("k"));
  ASSERT_EQ(first.kind, Kind::execute);
  EXPECT_EQ(engine.finish({"", "k"}, first.token, policy, created()), Finish::stored);

  const auto retry = engine.admit(request("k"));
  ASSERT_EQ(retry.kind, Kind::replay);
  EXPECT_EQ(retry.replay->status, 201);
  EXPECT_EQ(retry.replay->body, R"({"id":"ord_1"})");
}

TEST_F(EngineTest, FinishHandsBackTheStoredFormThatReplaysSend) {
  const auto first = engine.admit(request("k"));
  store::StoredResponse stored;
  TimePoint expires_at{};
  ASSERT_EQ(engine.finish({"", "k"}, first.token, policy, created(), &expires_at, &stored),
            Finish::stored);
  const auto retry = engine.admit(request("k"));
  ASSERT_EQ(retry.kind, Kind::replay);
  EXPECT_EQ(stored.headers, retry.replay->headers);  // what the replay cache keeps
  EXPECT_EQ(stored.body, retry.replay->body);
  EXPECT_EQ(expires_at, retry.expires_at);
}

TEST_F(EngineTest, StoredHeadersDropHopByHopAndDeniedOnes) {
  const auto first = engine.admit(request("k"));
  engine.finish({"", "k"}, first.token, policy, created());
  const auto retry = engine.admit(request("k"));
  ASSERT_EQ(retry.kind, Kind::replay);
  const std::vector<store::Header> expected = {{"Content-Type", "application/json"},
                                               {"X-Request-Cost", "3"}};
  EXPECT_EQ(retry.replay->headers, expected);
}

TEST_F(EngineTest, ConcurrentRequestSeesInFlight) {
  ASSERT_EQ(engine.admit(request("k")).kind, Kind::execute);
  const auto second = engine.admit(request("k"));
  EXPECT_EQ(second.kind, Kind::in_flight);
  EXPECT_EQ(second.locked_until, clock.now() + policy.lease);
}

TEST_F(EngineTest, DifferentFingerprintIsAMismatchInEveryState) {
  const auto first = engine.admit(request("k", "fp-1"));
  EXPECT_EQ(engine.admit(request("k", "fp-2")).kind, Kind::mismatch);  // in flight
  engine.finish({"", "k"}, first.token, policy, created());
  EXPECT_EQ(engine.admit(request("k", "fp-2")).kind, Kind::mismatch);  // completed
}

TEST_F(EngineTest, UnstorableStatusReleasesTheClaimSoARetryExecutes) {
  const auto first = engine.admit(request("k"));
  EXPECT_EQ(engine.finish({"", "k"}, first.token, policy, {503, {}, "busy"}), Finish::released);
  const auto retry = engine.admit(request("k"));
  ASSERT_EQ(retry.kind, Kind::execute);
  EXPECT_NE(retry.token, first.token);
}

TEST_F(EngineTest, AnUpstreamThatSaysNoStoreReleasesTheClaim) {
  const auto first = engine.admit(request("k"));
  auto answer = created();
  answer.headers.push_back({"Idempotency-Policy", "No-Store"});
  EXPECT_EQ(engine.finish({"", "k"}, first.token, policy, answer), Finish::released);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);  // the retry runs again

  // Any other value is stored, without the field (it speaks to the proxy).
  const auto again = engine.admit(request("k2"));
  answer.headers.back().value = "store";
  ASSERT_EQ(engine.finish({"", "k2"}, again.token, policy, answer), Finish::stored);
  const auto retry = engine.admit(request("k2"));
  ASSERT_EQ(retry.kind, Kind::replay);
  for (const auto& h : retry.replay->headers) EXPECT_NE(h.name, "Idempotency-Policy");
}

TEST(SaysNoStore, IsOneOfTheCommaSeparatedDirectivesCaseInsensitively) {
  EXPECT_TRUE(says_no_store("no-store"));
  EXPECT_TRUE(says_no_store("NO-STORE"));
  EXPECT_TRUE(says_no_store("x-other, no-store"));
  EXPECT_TRUE(says_no_store(" no-store ,x"));
  EXPECT_FALSE(says_no_store(""));
  EXPECT_FALSE(says_no_store("no-stores"));
  EXPECT_FALSE(says_no_store("store, no_store"));
  EXPECT_FALSE(says_no_store("\"no-store\""));
}

TEST_F(EngineTest, RetryableClientErrorsAreReleasedToo) {
  for (int status : {408, 409, 425, 429}) {
    const auto key = "k" + std::to_string(status);
    const auto first = engine.admit(request(key));
    EXPECT_EQ(engine.finish({"", key}, first.token, policy, {status, {}, ""}), Finish::released);
    EXPECT_EQ(engine.admit(request(key)).kind, Kind::execute) << status;
  }
}

TEST_F(EngineTest, ClientErrorsAreStoredByDefault) {
  const auto first = engine.admit(request("k"));
  EXPECT_EQ(engine.finish({"", "k"}, first.token, policy, {400, {}, "bad amount"}), Finish::stored);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::replay);
}

TEST_F(EngineTest, AbandonedClaimLetsTheRetryExecute) {
  const auto first = engine.admit(request("k"));
  EXPECT_EQ(engine.abandon({"", "k"}, first.token), Finish::released);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);
}

TEST_F(EngineTest, ExpiredRecordIsNeverReplayed) {
  const auto first = engine.admit(request("k"));
  engine.finish({"", "k"}, first.token, policy, created());
  clock.advance(policy.ttl - 1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::replay);
  clock.advance(1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);
}

TEST_F(EngineTest, ExpiredRecordDoesNotCauseAMismatch) {
  const auto first = engine.admit(request("k", "fp-1"));
  engine.finish({"", "k"}, first.token, policy, created());
  clock.advance(policy.ttl);
  EXPECT_EQ(engine.admit(request("k", "fp-2")).kind, Kind::execute);
}

TEST_F(EngineTest, LeaseTakeoverFencesTheOldHolder) {
  policy.on_stale = OnStale::retake;
  const auto old_holder = engine.admit(request("k"));
  clock.advance(policy.lease - 1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::in_flight);
  clock.advance(1ms);
  const auto new_holder = engine.admit(request("k"));
  ASSERT_EQ(new_holder.kind, Kind::execute);
  EXPECT_NE(new_holder.token, old_holder.token);

  // The old holder wakes up late: it must not overwrite or release anything.
  EXPECT_EQ(engine.finish({"", "k"}, old_holder.token, policy, created("stale")), Finish::fenced);
  EXPECT_EQ(engine.abandon({"", "k"}, old_holder.token), Finish::fenced);
  EXPECT_EQ(engine.finish({"", "k"}, new_holder.token, policy, created("fresh")), Finish::stored);
  const auto replay = engine.admit(request("k"));
  ASSERT_EQ(replay.kind, Kind::replay);
  EXPECT_EQ(replay.replay->body, "fresh");
}

TEST_F(EngineTest, VanishedHolderMeansOutcomeUnknownByDefault) {
  const auto holder = engine.admit(request("k"));
  clock.advance(policy.lease);
  // at most once: the retry is not executed, and learns the outcome is unknown
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::stale);
  EXPECT_EQ(engine.admit(request("k", "fp-2")).kind, Kind::mismatch);
  // a late completion by the holder is still accepted: nobody took over
  EXPECT_EQ(engine.finish({"", "k"}, holder.token, policy, created()), Finish::stored);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::replay);
}

TEST_F(EngineTest, StaleRecordBlocksTheKeyUntilItsTtl) {
  engine.admit(request("k"));
  clock.advance(policy.ttl - 1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::stale);
  clock.advance(1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);
}

TEST_F(EngineTest, IndeterminateOutcomeIsReportedAndNeverExecutedAgainByDefault) {
  const auto holder = engine.admit(request("k"));
  EXPECT_EQ(engine.mark_indeterminate({"", "k"}, holder.token), Finish::indeterminate);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::indeterminate);
  clock.advance(policy.lease * 2);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::indeterminate);
  // the holder cannot complete it afterwards with a body it never received
  EXPECT_EQ(engine.finish({"", "k"}, holder.token, policy, created()), Finish::fenced);
}

TEST_F(EngineTest, IndeterminateOutcomeIsRetakenAfterTheLeaseWithRetake) {
  policy.on_stale = OnStale::retake;
  const auto holder = engine.admit(request("k"));
  engine.mark_indeterminate({"", "k"}, holder.token);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::indeterminate);  // lease still running
  clock.advance(policy.lease);
  const auto retry = engine.admit(request("k"));
  ASSERT_EQ(retry.kind, Kind::execute);
  EXPECT_NE(retry.token, holder.token);
}

TEST_F(EngineTest, OperatorResolveReleasesIndeterminateAndStaleRecords) {
  const auto a = engine.admit(request("a"));
  engine.mark_indeterminate({"", "a"}, a.token);
  engine.admit(request("b"));
  EXPECT_FALSE(memory.resolve({"", "b"}).value());  // b's holder is still within its lease
  clock.advance(policy.lease);
  EXPECT_TRUE(memory.resolve({"", "a"}).value());
  EXPECT_TRUE(memory.resolve({"", "b"}).value());
  EXPECT_EQ(engine.admit(request("a")).kind, Kind::execute);
  EXPECT_EQ(engine.admit(request("b")).kind, Kind::execute);
  EXPECT_FALSE(memory.resolve({"", "missing"}).value());
}

TEST_F(EngineTest, ScopesIsolateKeys) {
  const auto a = engine.admit(request("k", "fp-a", "tenant-a"));
  engine.finish({"tenant-a", "k"}, a.token, policy, created("for a"));
  // Same key, other tenant, even another body: its own record, no mismatch.
  const auto b = engine.admit(request("k", "fp-b", "tenant-b"));
  ASSERT_EQ(b.kind, Kind::execute);
  engine.finish({"tenant-b", "k"}, b.token, policy, created("for b"));
  EXPECT_EQ(engine.admit(request("k", "fp-a", "tenant-a")).replay->body, "for a");
  EXPECT_EQ(engine.admit(request("k", "fp-b", "tenant-b")).replay->body, "for b");
}

TEST_F(EngineTest, CompletionRestartsTheTtl) {
  const auto first = engine.admit(request("k"));
  clock.advance(10s);
  engine.finish({"", "k"}, first.token, policy, created());
  clock.advance(policy.ttl - 5s);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::replay);
}

// Issue 10, defect 5, on the memory store: the TTL of an in-flight record never frees
// it while the holder's lease runs; a renewed lease keeps it; a lapsed one frees it.
TEST_F(EngineTest, AnInFlightRecordPastItsTtlIsHeldUntilItsLeaseLapses) {
  policy.ttl = 2s;
  policy.lease = 3s;
  const auto first = engine.admit(request("k"));
  ASSERT_EQ(first.kind, Kind::execute);
  clock.advance(2800ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::in_flight);
  EXPECT_TRUE(engine.renew({"", "k"}, first.token, 3s));
  clock.advance(2s);  // 4.8 s: past the first lease, within the renewed one
  policy.on_stale = OnStale::retake;
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::in_flight);
  clock.advance(2s);  // the renewed lease lapsed: the holder is gone
  const auto retaken = engine.admit(request("k"));
  ASSERT_EQ(retaken.kind, Kind::execute);
  EXPECT_FALSE(engine.renew({"", "k"}, first.token, 3s));  // fenced
  EXPECT_EQ(engine.finish({"", "k"}, first.token, policy, created()), Finish::fenced);
}

// Issue 24 item 6: after_expiry: reject. Past ttl the record is a tombstone until
// tombstone_ttl: never replayed, never executed again; a replay's expiry is ttl's.
TEST_F(EngineTest, PastTtlATombstoneRefusesUntilItExpiresThenTheKeyIsFree) {
  policy.ttl = 1h;
  policy.after_expiry_reject = true;
  policy.tombstone_ttl = 24h;
  const auto first = engine.admit(request("k"));
  ASSERT_EQ(first.kind, Kind::execute);
  TimePoint expires_at{};
  ASSERT_EQ(engine.finish({"", "k"}, first.token, policy, created(), &expires_at), Finish::stored);
  EXPECT_EQ(expires_at, clock.now() + 1h);  // the answer's expiry, not the tombstone's
  clock.advance(59min);
  const auto replay = engine.admit(request("k"));
  ASSERT_EQ(replay.kind, Kind::replay);
  EXPECT_EQ(replay.expires_at, expires_at);
  clock.advance(2min);
  const auto late = engine.admit(request("k"));
  ASSERT_EQ(late.kind, Kind::expired);
  EXPECT_EQ(late.completed_at, clock.now() - 61min);
  EXPECT_EQ(engine.admit(request("k", "fp-other")).kind, Kind::mismatch);
  // GC drops the answer; the tombstone still refuses.
  EXPECT_EQ(memory.drop_answers("orders", policy.ttl, 10).value(), 1);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::expired);
  clock.advance(23h);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);
}

TEST_F(EngineTest, WithoutTombstonesARetryPastTtlExecutesAgain) {
  policy.ttl = 1h;
  const auto first = engine.admit(request("k"));
  ASSERT_EQ(engine.finish({"", "k"}, first.token, policy, created()), Finish::stored);
  EXPECT_EQ(memory.drop_answers("orders", policy.ttl, 10).value(), 0);  // nothing past ttl
  clock.advance(61min);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);
}

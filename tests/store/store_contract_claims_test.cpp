// The request path's contract (store/claims.hpp): claim, conflict, fencing, lease
// expiry and takeover, completion, release and abandon (mark indeterminate).
#include <atomic>
#include <set>
#include <thread>

#include "store_contract.hpp"

namespace idemproxy::testing {
namespace {

using store::Claimed;
using store::Record;
using store::RecordState;
using store::StoredResponse;
using store::StoreErrc;

// Whether `result` is the store's refusal of a token that does not hold the record.
template <class T>
bool fenced(const store::Result<T>& result) {
  return !result.ok() && result.error().code == StoreErrc::fenced;
}

TEST_P(StoreContract, AClaimHoldsTheKeyUnderATokenForItsLease) {
  const Claimed c = claimed(request("k", 30s, 1h));
  EXPECT_GT(c.token, 0);
  EXPECT_FALSE(c.took_over);
  const Record r = found("k");
  EXPECT_EQ(r.id.scope, scope);
  EXPECT_EQ(r.id.key, "k");
  EXPECT_EQ(r.state, RecordState::in_flight);
  EXPECT_EQ(r.token, c.token);
  EXPECT_EQ(r.fingerprint, "fp-1");
  EXPECT_EQ(r.route, "orders");
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.target, "/v1/orders?x=1");
  // The lease and the TTL run from the claim, on the store's clock.
  EXPECT_EQ(r.locked_until, c.locked_until);
  EXPECT_EQ(c.locked_until - r.created_at, 30s);
  EXPECT_EQ(r.expires_at - r.created_at, 1h);
  EXPECT_GE(r.store_now, r.created_at);
  EXPECT_FALSE(r.expired);
  EXPECT_FALSE(r.stale);
  EXPECT_FALSE(r.response.has_value());
  EXPECT_FALSE(r.sealed_with.has_value());
}

TEST_P(StoreContract, ASecondClaimOfALiveKeyGetsTheRecordNotTheKey) {
  const auto token = claim_token(request("k"));
  for (const char* fingerprint : {"fp-1", "another request"}) {
    const Record r = existing(request("k", 30s, 1h, fingerprint));
    EXPECT_EQ(r.state, RecordState::in_flight);
    EXPECT_EQ(r.token, token);
    EXPECT_EQ(r.fingerprint, "fp-1");  // the holder's, whatever the second one sent
    EXPECT_EQ(r.target, "/v1/orders?x=1");
    EXPECT_EQ(r.locked_until - r.created_at, 30s);
    EXPECT_GE(r.store_now, r.created_at);
    EXPECT_FALSE(r.stale);
    EXPECT_FALSE(r.expired);
  }
}

TEST_P(StoreContract, ConcurrentClaimsOfOneKeyHaveExactlyOneWinner) {
  std::atomic<int> winners{0}, losers{0}, errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 32; ++i) {
    threads.emplace_back([&] {
      auto r = store->claim(request("storm"));
      if (!r.ok()) {
        ++errors;
      } else if (std::holds_alternative<Claimed>(r.value())) {
        ++winners;
      } else {
        ++losers;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(winners, 1);
  EXPECT_EQ(losers, 31);
  EXPECT_EQ(errors, 0);
}

TEST_P(StoreContract, OnlyTheCurrentTokenMayActOnAClaim) {
  const auto token = claim_token(request("k"));
  const auto other = token + 1000;
  EXPECT_TRUE(fenced(store->complete(id("k"), other, {200, {}, "x"}, 1h)));
  EXPECT_TRUE(fenced(store->renew(id("k"), other, 30s)));
  EXPECT_TRUE(fenced(store->release(id("k"), other)));
  EXPECT_TRUE(fenced(store->mark_indeterminate(id("k"), other)));
  EXPECT_TRUE(fenced(store->complete(id("missing"), token, {200, {}, "x"}, 1h)));
  EXPECT_EQ(found("k").state, RecordState::in_flight);

  ASSERT_TRUE(store->complete(id("k"), token, {200, {}, "x"}, 1h).ok());
  // Once the record is no longer in flight, its own token is refused too.
  EXPECT_TRUE(fenced(store->complete(id("k"), token, {200, {}, "y"}, 1h)));
  EXPECT_TRUE(fenced(store->renew(id("k"), token, 30s)));
  EXPECT_TRUE(fenced(store->release(id("k"), token)));
  EXPECT_TRUE(fenced(store->mark_indeterminate(id("k"), token)));
  EXPECT_EQ(found("k").response->body, "x");
}

TEST_P(StoreContract, TokensIncreaseAcrossTheClaimsOfAKeyAndDifferAcrossKeys) {
  const auto first = claim_token(request("k"));
  ASSERT_TRUE(store->release(id("k"), first).ok());
  const auto second = claim_token(request("k"));
  EXPECT_GT(second, first);
  std::set<std::int64_t> tokens{second};
  for (int i = 0; i < 5; ++i) tokens.insert(claim_token(request("other-" + std::to_string(i))));
  EXPECT_EQ(tokens.size(), 6U);
}

TEST_P(StoreContract, ALapsedLeaseIsReportedStaleOrTakenOverWithRetake) {
  const auto old = claim_token(request("k", kShort));
  age(kPastShort);
  // on_stale: fail. The record is left as it is, and says its holder vanished.
  const Record r = existing(request("k"));
  EXPECT_EQ(r.state, RecordState::in_flight);
  EXPECT_EQ(r.token, old);
  EXPECT_TRUE(r.stale);
  EXPECT_TRUE(found("k").stale);
  // on_stale: retake.
  const Claimed c = claimed(request("k", 30s, 1h, "fp-1", /*retake=*/true));
  EXPECT_TRUE(c.took_over);
  EXPECT_GT(c.token, old);
  EXPECT_FALSE(found("k").stale);
  EXPECT_TRUE(fenced(store->complete(id("k"), old, {200, {}, "stale"}, 1h)));
  EXPECT_TRUE(fenced(store->renew(id("k"), old, 30s)));
  EXPECT_TRUE(fenced(store->release(id("k"), old)));
  EXPECT_TRUE(fenced(store->mark_indeterminate(id("k"), old)));
  ASSERT_TRUE(store->complete(id("k"), c.token, {200, {}, "fresh"}, 1h).ok());
  EXPECT_EQ(found("k").response->body, "fresh");
}

// A TTL shorter than the upstream's work never frees the key of a holder whose lease
// runs; renewing the lease keeps it; only a lapsed lease does. (GC spares it too:
// GarbageCollectionDeletesExpiredRecordsInBatchesAndSparesLiveHolders.)
TEST_P(StoreContract, AnInFlightRecordPastItsTtlIsHeldWhileItsLeaseRuns) {
  // Leases of seconds: a store call may take a while (a pool opening connections).
  const auto token = claim_token(request("k", 2s, kShort));
  age(300ms);  // past the TTL, within the lease
  for (bool retake : {false, true}) {
    const Record r = existing(request("k", 30s, 1h, "fp-1", retake));
    EXPECT_EQ(r.token, token);
    EXPECT_FALSE(r.stale);
    EXPECT_TRUE(r.expired);
  }
  age(400ms);                                             // 0.7 s or later
  const auto renewed = store->renew(id("k"), token, 3s);  // the heartbeat
  ASSERT_TRUE(renewed.ok());
  EXPECT_EQ(found("k").locked_until, renewed.value());
  age(1500ms);  // 2.2 s or later: past the first lease, well within the renewed one
  EXPECT_EQ(existing(request("k", 30s, 1h, "fp-1", true)).token, token);
  ASSERT_TRUE(store->complete(id("k"), token, {201, {}, "done"}, 1h).ok());
}

TEST_P(StoreContract, ALapsedLeasePastItsTtlFreesTheKeyAndFencesItsHolder) {
  const auto old = claim_token(request("k", kShort, kShort));
  age(kPastShort);
  const Claimed c = claimed(request("k"));  // expired and no live holder: no retake needed
  EXPECT_GT(c.token, old);
  EXPECT_TRUE(c.took_over);
  EXPECT_TRUE(fenced(store->renew(id("k"), old, 30s)));
  EXPECT_TRUE(store->renew(id("k"), c.token, 30s).ok());
}

TEST_P(StoreContract, ACompletedAnswerIsKeptByteForByteAndReplayedToTheNextClaim) {
  const auto token = claim_token(request("k"));
  std::string body;
  for (int i = 0; i < 70000; ++i) body += static_cast<char>(i % 256);  // NULs and high bytes
  const StoredResponse answer{201,
                              {{"Content-Type", "application/octet-stream"},
                               {"X-Multi", "a"},
                               {"X-Multi", "b"},
                               {"X-Empty", ""},
                               {std::string(store::kTraceIdEntry), "4bf92f3577b34da6"}},
                              body};
  const auto done = store->complete(id("k"), token, answer, 1h);
  ASSERT_TRUE(done.ok()) << done.error().detail;
  for (const Record& r : {existing(request("k")), found("k")}) {
    EXPECT_EQ(r.state, RecordState::completed);
    EXPECT_EQ(r.token, token);
    ASSERT_TRUE(r.response.has_value());
    EXPECT_EQ(r.response->status, 201);
    EXPECT_EQ(r.response->headers, answer.headers);
    EXPECT_EQ(r.response->body, body);
    EXPECT_TRUE(r.response->body_stored);
    // The TTL starts again at the completion.
    EXPECT_EQ(r.expires_at, done.value());
    EXPECT_EQ(r.expires_at - r.completed_at, 1h);
    EXPECT_GE(r.completed_at, r.created_at);
    EXPECT_GE(r.store_now, r.completed_at);
    EXPECT_FALSE(r.expired);
    EXPECT_FALSE(r.stale);
  }
}

TEST_P(StoreContract, AnAnswerTooLargeToKeepIsRecordedByItsStatusAlone) {
  const auto token = claim_token(request("k"));
  ASSERT_TRUE(
      store->complete(id("k"), token, {201, {{"X-Part", "1"}}, "the first part", false}, 1h).ok());
  for (const Record& r : {existing(request("k")), found("k")}) {
    EXPECT_EQ(r.state, RecordState::completed);
    ASSERT_TRUE(r.response.has_value());
    EXPECT_EQ(r.response->status, 201);
    EXPECT_FALSE(r.response->body_stored);
    EXPECT_TRUE(r.response->headers.empty());
    EXPECT_TRUE(r.response->body.empty());
  }
}

TEST_P(StoreContract, AReleasedKeyIsClaimedAgainUnderANewToken) {
  const auto old = claim_token(request("k"));
  ASSERT_TRUE(store->release(id("k"), old).ok());
  const Record r = found("k");
  EXPECT_EQ(r.state, RecordState::released);
  EXPECT_FALSE(r.stale);
  const Claimed c = claimed(request("k", 30s, 1h, "a different request"));
  EXPECT_GT(c.token, old);
  EXPECT_FALSE(c.took_over);  // nobody held it
  EXPECT_EQ(found("k").fingerprint, "a different request");
  EXPECT_TRUE(fenced(store->complete(id("k"), old, {200, {}, "late"}, 1h)));
}

TEST_P(StoreContract, AnIndeterminateRecordKeepsItsKeyUntilRetakenOrResolved) {
  const auto old = claim_token(request("k", kShort));
  const Record before = found("k");
  ASSERT_TRUE(store->mark_indeterminate(id("k"), old).ok());
  const Record marked = found("k");
  EXPECT_EQ(marked.state, RecordState::indeterminate);
  EXPECT_EQ(marked.locked_until, before.locked_until);  // its lease and TTL stay
  EXPECT_EQ(marked.expires_at, before.expires_at);
  EXPECT_TRUE(fenced(store->mark_indeterminate(id("k"), old)));
  EXPECT_TRUE(fenced(store->complete(id("k"), old, {200, {}, "late"}, 1h)));
  EXPECT_TRUE(fenced(store->release(id("k"), old)));
  EXPECT_TRUE(fenced(store->renew(id("k"), old, 30s)));
  age(kPastShort);
  // on_stale: fail keeps it, lease or not: the outcome is unknown, never stale.
  const Record kept = existing(request("k"));
  EXPECT_EQ(kept.state, RecordState::indeterminate);
  EXPECT_FALSE(kept.stale);
  // on_stale: retake, once its lease is over.
  const Claimed c = claimed(request("k", 30s, 1h, "fp-1", /*retake=*/true));
  EXPECT_GT(c.token, old);
  EXPECT_TRUE(c.took_over);
}

TEST_P(StoreContract, AnIndeterminateRecordUnderALiveLeaseIsNotRetaken) {
  const auto token = claim_token(request("k", 30s));
  ASSERT_TRUE(store->mark_indeterminate(id("k"), token).ok());
  const Record r = existing(request("k", 30s, 1h, "fp-1", /*retake=*/true));
  EXPECT_EQ(r.state, RecordState::indeterminate);
  EXPECT_EQ(r.token, token);
}

}  // namespace
}  // namespace idemproxy::testing

// The store contract for per-tenant quotas (a route's `quota`): a scope's usage is
// counted with its claims, completions and deletions, a new key at a cap is refused,
// and a key the scope already has never is.
#include <algorithm>

#include "store_contract.hpp"

namespace idemproxy::testing {
namespace {

using store::OverQuota;
using store::QuotaCap;

class QuotaContract : public StoreContract {
 protected:
  void SetUp() override {
    StoreContract::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    const auto counts = store->counts_quotas();
    ASSERT_TRUE(counts.ok()) << counts.error().detail;
    if (!counts.value()) GTEST_SKIP() << "this store does not count quotas (Citus)";
  }

  store::ClaimRequest with_quota(const std::string& key, store::Quota quota, Duration lease = 30s,
                                 Duration ttl = 1h) {
    store::ClaimRequest r = request(key, lease, ttl);
    r.quota = quota;
    return r;
  }
  /// The claim of `r`, which must be refused by its quota.
  OverQuota refused(const store::ClaimRequest& r) {
    auto result = store->claim(r);
    EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().detail);
    if (!result.ok() || !std::holds_alternative<OverQuota>(result.value())) {
      ADD_FAILURE() << "the claim of " << r.id.key << " was not refused by its quota";
      return {};
    }
    return std::get<OverQuota>(result.value());
  }
  /// This test's scope's usage, as the admin view lists it.
  std::optional<store::Views::ScopeUsage> usage() {
    auto listed = store->nearest_quota(1000);
    EXPECT_TRUE(listed.ok()) << (listed.ok() ? "" : listed.error().detail);
    if (!listed.ok()) return std::nullopt;
    for (auto& u : listed.value()) {
      if (u.scope == scope) return u;
    }
    return std::nullopt;
  }
  /// This test's scope's usage: none when the view lists no entry for it (on Citus the
  /// view counts the records, so a scope whose records are all gone is not listed).
  store::Usage counted() {
    const auto u = usage();
    return u ? u->usage : store::Usage{};
  }
};

TEST_P(QuotaContract, ANewKeyPastTheRecordsCapIsRefusedAndAStoredKeyNeverIs) {
  const store::Quota quota{3, 0, 0};
  for (const char* key : {"a", "b"}) {
    const auto r = with_quota(key, quota);
    ASSERT_TRUE(store->complete(r.id, claim_token(r), {201, {}, "ok"}, 1h).ok());
  }
  claim_token(with_quota("c", quota));  // in flight: it counts as a record too
  const OverQuota over = refused(with_quota("d", quota));
  EXPECT_EQ(over.cap, QuotaCap::records);
  EXPECT_EQ(over.usage.records, 3);
  EXPECT_EQ(over.quota, quota);
  EXPECT_TRUE(gone("d"));
  // Retries of stored keys replay, and a retry of the one in flight meets it.
  const store::Record a = existing(with_quota("a", quota));
  ASSERT_TRUE(a.response.has_value());
  EXPECT_EQ(a.response->body, "ok");
  EXPECT_EQ(existing(with_quota("c", quota)).state, store::RecordState::in_flight);
  // Another tenant has its own three, whatever this one uses.
  const std::string mine = scope;
  scope += "-other";
  for (const char* key : {"a", "b", "d"}) claim_token(with_quota(key, quota));
  scope = mine;
  const auto u = usage();
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->usage.records, 3);
  EXPECT_EQ(u->usage.in_flight, 1);
  EXPECT_EQ(u->quota, quota);
}

TEST_P(QuotaContract, AReleasedKeyIsTakenAgainAtTheCapAndAPurgeGivesItsPlaceBack) {
  const store::Quota quota{2, 0, 0};
  const auto a = with_quota("a", quota);
  ASSERT_TRUE(store->release(a.id, claim_token(a)).ok());
  claim_token(with_quota("b", quota));
  refused(with_quota("c", quota));
  // The released key is the scope's already: its retry executes again.
  claim_token(with_quota("a", quota));
  EXPECT_EQ(counted().records, 2);
  EXPECT_EQ(counted().in_flight, 2);
  ASSERT_TRUE(store->purge(id("b")).value());
  EXPECT_EQ(counted().records, 1);
  EXPECT_EQ(counted().in_flight, 1);
  claim_token(with_quota("c", quota));
}

TEST_P(QuotaContract, ExpiredRecordsDeletedByGcGiveTheirPlaceBack) {
  const store::Quota quota{2, 0, 0};
  for (const char* key : {"a", "b"}) {
    const auto r = with_quota(key, quota, 30s, kShort);
    ASSERT_TRUE(store->complete(r.id, claim_token(r), {201, {}, "ok"}, kShort).ok());
  }
  refused(with_quota("c", quota));
  age(kPastShort);
  // Other tests share the table: GC works through their expired rows too.
  for (int calls = 0; calls < 2000 && !(gone("a") && gone("b")); ++calls) {
    const auto n = store->delete_expired(1000);
    ASSERT_TRUE(n.ok()) << n.error().detail;
    if (n.value() == 0) age(10ms);
  }
  ASSERT_TRUE(gone("a") && gone("b"));
  EXPECT_EQ(counted().records, 0);
  EXPECT_EQ(counted().bytes, 0);
  claim_token(with_quota("c", quota));
}

TEST_P(QuotaContract, TheInFlightCapCountsOnlyClaimsStillRunning) {
  const store::Quota quota{0, 0, 2};
  const auto a = with_quota("a", quota);
  const std::int64_t token_a = claim_token(a);
  const auto b = with_quota("b", quota);
  const std::int64_t token_b = claim_token(b);
  const OverQuota over = refused(with_quota("c", quota));
  EXPECT_EQ(over.cap, QuotaCap::in_flight);
  EXPECT_EQ(over.usage.in_flight, 2);
  ASSERT_TRUE(store->complete(a.id, token_a, {201, {}, "ok"}, 1h).ok());
  claim_token(with_quota("c", quota));
  refused(with_quota("d", quota));
  ASSERT_TRUE(store->mark_indeterminate(b.id, token_b).ok());
  claim_token(with_quota("d", quota));
  EXPECT_EQ(counted().records, 4);
  EXPECT_EQ(counted().in_flight, 2);
}

TEST_P(QuotaContract, StoredAnswersCountTowardTheBytesCapUntilTheirAnswersAreDropped) {
  const std::string body(100, 'x');
  const store::Quota quota{0, 64, 0};
  const auto a = with_quota("a", quota);
  ASSERT_TRUE(
      store->complete(a.id, claim_token(a), {201, {{"X-N", "1"}}, body}, {kShort, 1h}).ok());
  EXPECT_GE(counted().bytes, 100);
  const OverQuota over = refused(with_quota("b", quota));
  EXPECT_EQ(over.cap, QuotaCap::bytes);
  EXPECT_GE(over.usage.bytes, 100);
  // The stored key still replays.
  EXPECT_EQ(existing(with_quota("a", quota)).response->body, body);
  age(kPastShort);
  for (int calls = 0; calls < 200 && counted().bytes > 0; ++calls) {
    ASSERT_TRUE(store->drop_answers("orders", kShort, 1000).ok());
    if (counted().bytes > 0) age(10ms);
  }
  EXPECT_EQ(counted().bytes, 0);
  EXPECT_EQ(counted().records, 1);  // the tombstone stays a record
  claim_token(with_quota("b", quota));
}

TEST_P(QuotaContract, AStreamedAnswerCountsByItsLengthUntilItIsDropped) {
  const store::Quota quota{0, 1000, 0};
  const auto a = with_quota("a", quota);
  const auto token = claim_token(a);
  for (std::int32_t seq : {1, 2})
    ASSERT_TRUE(store->append(a.id, token, seq, std::string(600, 'x')).ok());
  store::StoredResponse answer{200, {}, "", true};
  answer.chunks = 2;
  answer.body_length = 1200;
  answer.body_digest = std::string(32, 'd');
  ASSERT_TRUE(store->complete(a.id, token, answer, {kShort, 1h}).ok());
  EXPECT_GE(counted().bytes, 1200);
  EXPECT_EQ(refused(with_quota("b", quota)).cap, QuotaCap::bytes);
  age(kPastShort);
  for (int calls = 0; calls < 200 && counted().bytes > 0; ++calls) {
    ASSERT_TRUE(store->drop_answers("orders", kShort, 1000).ok());
    if (counted().bytes > 0) age(10ms);
  }
  EXPECT_EQ(counted().bytes, 0);
  claim_token(with_quota("b", quota));
}

TEST_P(QuotaContract, RecordsClaimedWithoutAQuotaAreNeverCounted) {
  const store::Quota quota{1, 0, 0};
  claim_token(request("free-1"));
  claim_token(request("free-2"));
  claim_token(with_quota("a", quota));
  refused(with_quota("b", quota));
  EXPECT_EQ(counted().records, 1);
  ASSERT_TRUE(store->purge(id("free-1")).value());
  EXPECT_EQ(counted().records, 1);
  // A scope that never claimed under a quota has no usage, even after a purge.
  scope += "-free";
  claim_token(request("free-3"));
  ASSERT_TRUE(store->purge(id("free-3")).value());
  EXPECT_FALSE(usage().has_value());
  const auto listed = store->nearest_quota(1000);
  ASSERT_TRUE(listed.ok());
  for (const auto& u : listed.value()) EXPECT_TRUE(u.quota.any()) << "\"" << u.scope << "\"";
}

TEST_P(QuotaContract, TheFullestScopesAreListedFirst) {
  const std::string base = scope;
  const store::Quota quota{10, 0, 0};
  scope = base + "-half";
  for (int i = 0; i < 5; ++i) claim_token(with_quota("k" + std::to_string(i), quota));
  scope = base + "-full";
  for (int i = 0; i < 9; ++i) claim_token(with_quota("k" + std::to_string(i), quota));
  auto listed = store->nearest_quota(1000);
  ASSERT_TRUE(listed.ok());
  std::vector<std::string> order;
  for (const auto& u : listed.value()) {
    if (u.scope.starts_with(base)) order.push_back(u.scope);
  }
  EXPECT_EQ(order, (std::vector<std::string>{base + "-full", base + "-half"}));
}

INSTANTIATE_TEST_SUITE_P(Stores, QuotaContract,
                         ::testing::Values("memory", "postgres", "postgres_loop", "citus"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace idemproxy::testing

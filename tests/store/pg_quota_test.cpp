// Quotas on PostgreSQL under concurrency: the cap is exact however the claims
// arrive (one batch, many batches, two instances); on Citus a scope is counted before
// each claim, so claims made at once may pass the cap, each by at most one record.
#include <iostream>
#include <mutex>

#include "pg_store_fixture.hpp"

namespace {

ClaimRequest capped(ClaimRequest r, Quota quota) {
  r.quota = quota;
  return r;
}

struct Tally {
  std::mutex mu;
  int claimed = 0;
  int refused = 0;
  int other = 0;
  void add(const Result<ClaimResult>& r) {
    std::lock_guard lock(mu);
    if (!r.ok()) {
      ++other;
    } else if (std::holds_alternative<Claimed>(r.value())) {
      ++claimed;
    } else if (std::holds_alternative<OverQuota>(r.value())) {
      ++refused;
    } else {
      ++other;
    }
  }
};

std::int64_t rows_of(const std::string& scope) {
  pqxx::connection c(dsn());
  pqxx::nontransaction tx(c);
  return tx.exec_params("SELECT count(*) FROM idempotency_records WHERE scope = $1", scope)[0][0]
      .as<std::int64_t>();
}

}  // namespace

TEST_F(PgStoreTest, TwoHundredConcurrentFreshKeysFromTwoInstancesStoreExactlyTheCap) {
  if (citus()) GTEST_SKIP() << "exact on plain PostgreSQL only (OnCitusClaimsMadeAtOnce...)";
  // Two instances, each with its own pool and group commit, 100 keys each at once.
  PgStore a({dsn(), 8, 5s}), b({dsn(), 8, 5s});
  const Quota quota{100, 0, 0};
  std::vector<ClaimRequest> requests;
  for (int i = 0; i < 200; ++i) requests.push_back(capped(request("k" + std::to_string(i)), quota));
  Tally tally;
  std::vector<std::thread> threads;
  for (int t = 0; t < 20; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < 200; i += 20) tally.add((i % 2 ? a : b).claim(requests[i]));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(tally.claimed, 100);
  EXPECT_EQ(tally.refused, 100);
  EXPECT_EQ(tally.other, 0);
  EXPECT_EQ(rows_of(scope), 100);
  // Many claims went in shared batches, as without a quota.
  EXPECT_GT(a.batch_stats().operations + b.batch_stats().operations,
            a.batch_stats().batches + b.batch_stats().batches);
}

TEST_F(PgStoreTest, OneBatchOfClaimsPastTheCapAdmitsExactlyUpToIt) {
  if (citus()) GTEST_SKIP() << "exact on plain PostgreSQL only (OnCitusClaimsMadeAtOnce...)";
  PgStore one({dsn(), 1, 5s});
  HeldConnection held(one, request("gate"));
  const Quota quota{4, 0, 0};
  std::vector<ClaimRequest> requests;
  for (int i = 0; i < 10; ++i) requests.push_back(capped(request("k" + std::to_string(i)), quota));
  const auto before = one.batch_stats();
  Tally tally;
  held.queue_and_release(10, [&](int i) { tally.add(one.claim(requests[i])); });
  const auto after = one.batch_stats();
  EXPECT_EQ(tally.claimed, 4);
  EXPECT_EQ(tally.refused, 6);
  EXPECT_EQ(after.fallbacks - before.fallbacks, 0);
  EXPECT_GE(after.multi_row - before.multi_row, 1);  // the ten went as one statement
  EXPECT_EQ(rows_of(scope), 5);                      // the four, and the gate
  // The gate was claimed without a quota: not counted.
  const auto listed = one.nearest_quota(1000);
  ASSERT_TRUE(listed.ok());
  const auto mine = std::find_if(listed.value().begin(), listed.value().end(),
                                 [&](const auto& u) { return u.scope == scope; });
  ASSERT_NE(mine, listed.value().end());
  EXPECT_EQ(mine->usage.records, 4);
  EXPECT_EQ(mine->usage.in_flight, 4);
}

TEST_F(PgStoreTest, OnCitusClaimsMadeAtOnceOvershootTheCapByFewerThanTheyAre) {
  if (!citus()) GTEST_SKIP() << "plain PostgreSQL counts exactly (the tests above)";
  const auto counts = store->counts_quotas();
  ASSERT_TRUE(counts.ok()) << counts.error().detail;
  EXPECT_TRUE(counts.value());
  // One at a time, the cap is exact, and a stored key is never refused.
  const Quota five{5, 0, 0};
  int claimed = 0;
  for (int i = 0; i < 8; ++i) {
    const auto r = store->claim(capped(request("one-" + std::to_string(i)), five));
    ASSERT_TRUE(r.ok()) << r.error().detail;
    claimed += std::holds_alternative<Claimed>(r.value()) ? 1 : 0;
    if (i >= 5) {
      EXPECT_TRUE(std::holds_alternative<OverQuota>(r.value())) << i;
    }
  }
  EXPECT_EQ(claimed, 5);
  const auto again = store->claim(capped(request("one-0"), five));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(std::holds_alternative<OverQuota>(again.value()));
  // Two instances, 20 claimers, 200 fresh keys of one scope, a cap of 100: each claim
  // counted the scope before it was made, so those made at once may each pass.
  PgStore a({dsn(), 8, 5s}), b({dsn(), 8, 5s});
  const std::string wide = "wide-" + scope;
  std::vector<ClaimRequest> requests;
  for (int i = 0; i < 200; ++i) {
    ClaimRequest r = capped(request("k" + std::to_string(i)), Quota{100, 0, 0});
    r.id.scope = wide;
    requests.push_back(r);
  }
  constexpr int kClaimers = 20;
  Tally tally;
  std::vector<std::thread> threads;
  for (int t = 0; t < kClaimers; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < 200; i += kClaimers) tally.add((i % 2 ? a : b).claim(requests[i]));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(tally.other, 0);
  EXPECT_EQ(tally.claimed + tally.refused, 200);
  EXPECT_GE(tally.claimed, 100);
  EXPECT_LT(tally.claimed, 100 + kClaimers);  // each claimer passes it at most once
  EXPECT_EQ(rows_of(wide), tally.claimed);
  std::cout << "[ citus    ] cap 100, " << kClaimers
            << " claimers on two instances: " << tally.claimed << " stored, overshoot "
            << tally.claimed - 100 << "\n";
}

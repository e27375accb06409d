// Finishes announced across instances from a group-commit batch (LISTEN/NOTIFY on
// idemproxy_done): every watched member of a batch announces its finish, and no
// claim does. What every store announces is in store_contract_watch_test.cpp.
#include "pg_store_fixture.hpp"
#include "store_contract.hpp"

using idemproxy::testing::Heard;

class PgWatchTest : public PgStoreTest {
 protected:
  void SetUp() override {
    PgStoreTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    other = std::make_unique<PgStore>(PgOptions{dsn(), 2, 5s});
    other->watch(heard.watchers(scope));
    // LISTEN is in place once the listener says it resumed.
    const auto log = heard.until(":resumed");
    if (std::find(log.begin(), log.end(), ":resumed") == log.end()) {
      FAIL() << "the listener never started";
    }
  }
  void TearDown() override {
    if (other) other->watch({});
  }

  // Only finishes, in order.
  std::vector<std::string> finishes_until(const std::string& key) {
    std::vector<std::string> out;
    for (const auto& e : heard.until(key)) {
      if (!e.starts_with("purged:") && !e.starts_with(":")) out.push_back(e);
    }
    return out;
  }

  std::unique_ptr<PgStore> other;
  Heard heard;
};

TEST_F(PgWatchTest, ABatchOfCompletionsAnnouncesEveryWatchedMember) {
  if (citus()) GTEST_SKIP() << "on Citus only claims are batched, per shard (PgCitusTest)";
  PgStore one({dsn(), 1, 5s});
  std::vector<std::int64_t> tokens;
  for (int i = 0; i < 6; ++i) tokens.push_back(claim_token(request("k" + std::to_string(i))));
  for (int i = 0; i < 6; i += 2)
    ASSERT_TRUE(other->watch_record({scope, "k" + std::to_string(i)}).value());
  HeldConnection held(one, request("gate"));
  const auto before = one.batch_stats();
  held.queue_and_release(6, [&](int i) {
    EXPECT_TRUE(one.complete({scope, "k" + std::to_string(i)}, tokens[static_cast<std::size_t>(i)],
                             {201, {}, "ok"}, 1h)
                    .ok());
  });
  // The held completion was one batch; the six were one more (kCompleteMany).
  EXPECT_EQ(one.batch_stats().batches - before.batches, 2);
  EXPECT_EQ(one.batch_stats().fallbacks, 0);
  const auto heard_keys = finishes_until("k4");
  for (const char* key : {"k0", "k2", "k4"}) {
    auto log = heard.until(key);
    EXPECT_NE(std::find(log.begin(), log.end(), key), log.end()) << key;
  }
  for (const auto& k : heard_keys) EXPECT_TRUE(k == "k0" || k == "k2" || k == "k4") << k;
}

// Completions that share their batch's statement with claims (kClaimCompleteMany)
// announce their watched members too, and no claim is announced.
TEST_F(PgWatchTest, CompletionsBatchedWithClaimsAnnounceEveryWatchedMember) {
  if (citus()) GTEST_SKIP() << "on Citus only claims are batched, per shard (PgCitusTest)";
  PgStore one({dsn(), 1, 5s});
  std::vector<std::int64_t> tokens;
  for (int i = 0; i < 4; ++i) tokens.push_back(claim_token(request("m" + std::to_string(i))));
  for (int i = 1; i < 4; i += 2)
    ASSERT_TRUE(other->watch_record({scope, "m" + std::to_string(i)}).value());
  HeldConnection held(one, request("gate"));
  const auto before = one.batch_stats();
  held.queue_and_release(8, [&](int i) {
    if (i < 4) {
      EXPECT_TRUE(one.complete({scope, "m" + std::to_string(i)},
                               tokens[static_cast<std::size_t>(i)], {201, {}, "ok"}, 1h)
                      .ok());
    } else {
      EXPECT_TRUE(one.claim(request("claim-" + std::to_string(i))).ok());
    }
  });
  EXPECT_EQ(one.batch_stats().multi_row - before.multi_row, 1);
  EXPECT_EQ(one.batch_stats().fallbacks, 0);
  const auto marker = claim_token(request("marker"));
  ASSERT_TRUE(other->watch_record({scope, "marker"}).value());
  ASSERT_TRUE(store->release({scope, "marker"}, marker).ok());
  auto heard_keys = finishes_until("marker");
  std::sort(heard_keys.begin(), heard_keys.end());
  EXPECT_EQ(heard_keys, (std::vector<std::string>{"m1", "m3", "marker"}));
}

// Finishes announced across instances (LISTEN/NOTIFY on idemproxy_done): a record
// that another instance's request watches announces its completion, release or
// indeterminate mark, also from a group-commit batch; an unwatched one sends nothing.
#include <condition_variable>
#include <mutex>

#include "pg_store_fixture.hpp"

namespace {

// What one instance's notification listener heard about `scope`, in arrival order.
// Tests in other processes (ctest -j) notify on the same channels with scopes of
// their own: those are left out.
class Heard {
 public:
  Store::Watchers watchers(const std::string& scope) {
    Store::Watchers w;
    w.purged = [this, scope](const RecordId& id) {
      if (id.scope == scope) add("purged:" + id.key);
    };
    w.finished = [this, scope](const RecordId& id) {
      if (id.scope == scope) add(id.key);
    };
    return w;
  }
  // Waits until `entry` arrives; returns everything heard until then.
  std::vector<std::string> until(const std::string& entry) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 10s,
                 [&] { return std::find(log_.begin(), log_.end(), entry) != log_.end(); });
    return log_;
  }

 private:
  void add(std::string entry) {
    std::lock_guard lock(mu_);
    log_.push_back(std::move(entry));
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> log_;
};

}  // namespace

class PgWatchTest : public PgStoreTest {
 protected:
  void SetUp() override {
    PgStoreTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    other = std::make_unique<PgStore>(PgOptions{dsn(), 2, 5s});
    other->watch(heard.watchers(scope));
    // LISTEN is in place once a purge made after it is heard.
    for (int i = 0; i < 100; ++i) {
      const std::string probe = "probe-" + std::to_string(i);
      claim_token(request(probe));
      store->purge({scope, probe});
      const auto log = heard.until("purged:" + probe);
      if (std::find(log.begin(), log.end(), "purged:" + probe) != log.end()) return;
    }
    FAIL() << "the listener never heard a purge";
  }
  void TearDown() override {
    if (other) other->watch({});
  }

  // Only finishes, in order: the probes' purges are left out.
  std::vector<std::string> finishes_until(const std::string& key) {
    std::vector<std::string> out;
    for (const auto& e : heard.until(key)) {
      if (!e.starts_with("purged:")) out.push_back(e);
    }
    return out;
  }

  std::unique_ptr<PgStore> other;
  Heard heard;
};

TEST_F(PgWatchTest, AWatchedRecordAnnouncesItsFinishAndAnUnwatchedOneStaysSilent) {
  EXPECT_TRUE(other->announces_finishes());
  const auto done = claim_token(request("done"));
  const auto quiet = claim_token(request("quiet"));
  const auto released = claim_token(request("released"));
  const auto unknown = claim_token(request("unknown"));
  for (const char* key : {"done", "released", "unknown"}) {
    const auto watched = other->watch_record({scope, key});
    ASSERT_TRUE(watched.ok());
    EXPECT_TRUE(watched.value()) << key;
  }
  ASSERT_TRUE(store->complete({scope, "done"}, done, {201, {}, "ok"}, 1h).ok());
  ASSERT_TRUE(store->complete({scope, "quiet"}, quiet, {201, {}, "ok"}, 1h).ok());
  ASSERT_TRUE(store->release({scope, "released"}, released).ok());
  ASSERT_TRUE(store->mark_indeterminate({scope, "unknown"}, unknown).ok());
  // NOTIFY arrives in commit order: had "quiet" announced, it would come before "released".
  EXPECT_EQ(finishes_until("unknown"), (std::vector<std::string>{"done", "released", "unknown"}));
  // Finished, or never there: nothing to wait for.
  EXPECT_FALSE(other->watch_record({scope, "done"}).value());
  EXPECT_FALSE(other->watch_record({scope, "missing"}).value());
}

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

TEST_F(PgWatchTest, ATakeoverClearsTheWatch) {
  const auto first = claim_token(request("k", 1s));
  ASSERT_TRUE(other->watch_record({scope, "k"}).value());
  std::this_thread::sleep_for(1100ms);  // the lease runs out; a retry takes the record over
  const auto second = claim_token(request("k", 30s, 1h, "fp-1", true));
  EXPECT_NE(first, second);
  ASSERT_TRUE(store->complete({scope, "k"}, second, {201, {}, "ok"}, 1h).ok());
  const auto marker = claim_token(request("marker"));
  ASSERT_TRUE(other->watch_record({scope, "marker"}).value());
  ASSERT_TRUE(store->release({scope, "marker"}, marker).ok());
  EXPECT_EQ(finishes_until("marker"), (std::vector<std::string>{"marker"}));
}

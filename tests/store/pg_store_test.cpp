// PgStore against a real PostgreSQL: claims, leases, fencing, GC, migrations, the pool.
#include "pg_store_fixture.hpp"

TEST_F(PgStoreTest, ClaimThenExistingRecordIsReturned) {
  const auto token = claim_token(request("k"));
  auto again = store->claim(request("k"));
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(std::holds_alternative<Record>(again.value()));
  const auto& r = std::get<Record>(again.value());
  EXPECT_EQ(r.state, RecordState::in_flight);
  EXPECT_EQ(r.token, token);
  EXPECT_EQ(r.fingerprint, "fp-1");
  EXPECT_EQ(r.target, "/v1/orders?x=1");
  EXPECT_GT(r.locked_until, std::chrono::system_clock::now() + 20s);
}

TEST_F(PgStoreTest, CompletedResponseRoundTripsByteForByte) {
  const auto token = claim_token(request("k"));
  std::string body;
  for (int i = 0; i < 70000; ++i) body += static_cast<char>(i % 256);  // NULs and high bytes
  const StoredResponse response{201,
                                {{"Content-Type", "application/octet-stream"},
                                 {"X-Multi", "a"},
                                 {"X-Multi", "b"},
                                 {"X-Empty", ""}},
                                body};
  ASSERT_TRUE(store->complete({scope, "k"}, token, response, 1h).ok());

  auto replay = store->claim(request("k"));
  ASSERT_TRUE(replay.ok());
  const auto& r = std::get<Record>(replay.value());
  EXPECT_EQ(r.state, RecordState::completed);
  ASSERT_TRUE(r.response.has_value());
  EXPECT_EQ(r.response->status, 201);
  EXPECT_EQ(r.response->headers, response.headers);
  EXPECT_EQ(r.response->body, body);
}

TEST_F(PgStoreTest, OnlyTheCurrentTokenMayCompleteOrRelease) {
  const auto token = claim_token(request("k"));
  auto wrong = store->complete({scope, "k"}, token + 1000, {200, {}, "x"}, 1h);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code, StoreErrc::fenced);
  auto wrong_release = store->release({scope, "k"}, token + 1000);
  ASSERT_FALSE(wrong_release.ok());
  EXPECT_EQ(wrong_release.error().code, StoreErrc::fenced);
  EXPECT_TRUE(store->complete({scope, "k"}, token, {200, {}, "x"}, 1h).ok());
  // Completing twice is refused too: the record is no longer in flight.
  EXPECT_FALSE(store->complete({scope, "k"}, token, {200, {}, "y"}, 1h).ok());
}

TEST_F(PgStoreTest, ExpiredLeaseIsTakenOverAndTheOldHolderIsFenced) {
  const auto old_token = claim_token(request("k", 50ms));
  std::this_thread::sleep_for(120ms);
  const auto new_token = claim_token(request("k", 30s, 1h, "fp-1", /*retake=*/true));
  EXPECT_NE(new_token, old_token);
  EXPECT_EQ(store->complete({scope, "k"}, old_token, {200, {}, "stale"}, 1h).error().code,
            StoreErrc::fenced);
  ASSERT_TRUE(store->complete({scope, "k"}, new_token, {200, {}, "fresh"}, 1h).ok());
  auto found = store->find({scope, "k"});
  EXPECT_EQ(found.value()->response->body, "fresh");
}

TEST_F(PgStoreTest, ExpiredLeaseWithoutRetakeIsReportedStale) {
  const auto token = claim_token(request("k", 50ms));
  std::this_thread::sleep_for(120ms);
  auto again = store->claim(request("k", 30s));
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(std::holds_alternative<Record>(again.value()));
  EXPECT_TRUE(std::get<Record>(again.value()).stale);
  EXPECT_EQ(std::get<Record>(again.value()).token, token);
  ASSERT_TRUE(store->resolve({scope, "k"}).value());
  EXPECT_NE(claim_token(request("k")), token);
}

TEST_F(PgStoreTest, IndeterminateRecordIsKeptUntilRetakenOrResolved) {
  const auto token = claim_token(request("k", 50ms));
  ASSERT_TRUE(store->mark_indeterminate({scope, "k"}, token).ok());
  EXPECT_EQ(store->mark_indeterminate({scope, "k"}, token).error().code, StoreErrc::fenced);
  EXPECT_EQ(store->complete({scope, "k"}, token, {200, {}, "late"}, 1h).error().code,
            StoreErrc::fenced);
  std::this_thread::sleep_for(120ms);
  auto kept = store->claim(request("k"));  // on_stale: fail
  ASSERT_TRUE(std::holds_alternative<Record>(kept.value()));
  EXPECT_EQ(std::get<Record>(kept.value()).state, RecordState::indeterminate);
  EXPECT_NE(claim_token(request("k", 30s, 1h, "fp-1", /*retake=*/true)), token);
}

TEST_F(PgStoreTest, ReleasedRecordIsClaimedAgain) {
  const auto token = claim_token(request("k"));
  ASSERT_TRUE(store->release({scope, "k"}, token).ok());
  EXPECT_EQ(store->find({scope, "k"}).value()->state, RecordState::released);
  EXPECT_NE(claim_token(request("k")), token);
}

TEST_F(PgStoreTest, ExpiredRecordIsClaimedAgainNotReturned) {
  const auto token = claim_token(request("k"));
  ASSERT_TRUE(store->complete({scope, "k"}, token, {200, {}, "old"}, 50ms).ok());
  std::this_thread::sleep_for(120ms);
  EXPECT_TRUE(store->find({scope, "k"}).value()->expired);
  const auto fresh = claim_token(request("k", 30s, 1h, "another-fingerprint"));
  EXPECT_NE(fresh, token);
}

// Issue 10, defect 5: a TTL shorter than the upstream's work never frees the key of
// a holder whose lease runs; renewing the lease keeps it; only a lapsed lease does.
TEST_F(PgStoreTest, AnInFlightRecordPastItsTtlIsNotTakenOverWhileItsLeaseRuns) {
  const auto token = claim_token(request("k", 400ms, 50ms));
  std::this_thread::sleep_for(120ms);  // past the TTL, within the lease
  for (bool retake : {false, true}) {
    auto again = store->claim(request("k", 30s, 1h, "fp-1", retake));
    ASSERT_TRUE(again.ok());
    ASSERT_TRUE(std::holds_alternative<Record>(again.value()));
    EXPECT_EQ(std::get<Record>(again.value()).token, token);
    EXPECT_FALSE(std::get<Record>(again.value()).stale);
  }
  std::this_thread::sleep_for(200ms);
  ASSERT_TRUE(store->renew({scope, "k"}, token, 400ms).ok());  // the heartbeat
  std::this_thread::sleep_for(250ms);  // past the first lease, within the renewed one
  auto held = store->claim(request("k", 30s, 1h, "fp-1", true));
  ASSERT_TRUE(std::holds_alternative<Record>(held.value()));
  ASSERT_TRUE(store->delete_expired(100).ok());  // GC leaves a live holder alone
  ASSERT_TRUE(store->find({scope, "k"}).value().has_value());
  ASSERT_TRUE(store->complete({scope, "k"}, token, {201, {}, "done"}, 1h).ok());
}

TEST_F(PgStoreTest, ALapsedLeasePastItsTtlIsTakenOverAndRenewalIsFenced) {
  const auto token = claim_token(request("k", 50ms, 50ms));
  std::this_thread::sleep_for(120ms);
  const auto fresh = claim_token(request("k"));  // expired and no live holder
  EXPECT_NE(fresh, token);
  EXPECT_EQ(store->renew({scope, "k"}, token, 30s).error().code, StoreErrc::fenced);
  EXPECT_TRUE(store->renew({scope, "k"}, fresh, 30s).ok());
}

TEST_F(PgStoreTest, ConcurrentClaimsHaveExactlyOneWinner) {
  PgStore wide({dsn(), 16, 5s});
  std::atomic<int> winners{0}, losers{0}, errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 32; ++i) {
    threads.emplace_back([&] {
      auto r = wide.claim(request("storm"));
      if (!r.ok())
        ++errors;
      else if (std::holds_alternative<Claimed>(r.value()))
        ++winners;
      else
        ++losers;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(winners, 1);
  EXPECT_EQ(losers, 31);
  EXPECT_EQ(errors, 0);
}

TEST_F(PgStoreTest, PurgeAndFind) {
  claim_token(request("k"));
  EXPECT_TRUE(store->find({scope, "k"}).value().has_value());
  EXPECT_TRUE(store->purge({scope, "k"}).value());
  EXPECT_FALSE(store->purge({scope, "k"}).value());
  EXPECT_FALSE(store->find({scope, "k"}).value().has_value());
}

TEST_F(PgStoreTest, DeleteExpiredRemovesOnlyExpiredRecordsInBatches) {
  for (int i = 0; i < 5; ++i) {
    const auto key = "old" + std::to_string(i);
    ASSERT_TRUE(store->complete({scope, key}, claim_token(request(key)), {200, {}, ""}, 10ms).ok());
  }
  claim_token(request("live"));
  std::this_thread::sleep_for(50ms);
  const auto gone = [&] {
    for (int i = 0; i < 5; ++i) {
      if (store->find({scope, "old" + std::to_string(i)}).value().has_value()) return false;
    }
    return true;
  };
  // Other tests (ctest -j) share the table: one may hold the GC lock for a moment
  // (a call then deletes nothing, and the next tries again), or run GC itself and
  // delete these rows first. Either way every call stays within its batch.
  for (int calls = 0; calls < 500 && !gone(); ++calls) {
    const auto n = store->delete_expired(2).value();
    EXPECT_LE(n, 2);
    if (n == 0) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone());
  EXPECT_TRUE(store->find({scope, "live"}).value().has_value());
}

TEST_F(PgStoreTest, MigrationsAreSafeWhenManyInstancesStartAtOnce) {
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&] {
      try {
        apply_migrations(dsn());
      } catch (const std::exception&) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
}

TEST(PgStoreUnavailable, AnUnreachableServerIsAnErrorValueNotAnException) {
  PgStore down({"postgresql://postgres@127.0.0.1:1/none?connect_timeout=2", 2, 1s});
  auto ping = down.ping();
  ASSERT_FALSE(ping.ok());
  EXPECT_EQ(ping.error().code, StoreErrc::unavailable);
  auto claim = down.claim({{"", "k"}, "fp", 30s, 1h, "r", "POST", "/"});
  ASSERT_FALSE(claim.ok());
  EXPECT_EQ(claim.error().code, StoreErrc::unavailable);
}

TEST_F(PgStoreTest, FailedConnectsDoNotLetThePoolGrowPastItsSize) {
  const std::string role = "idemproxy_pool_test";
  const auto admin = [&](const std::string& sql) {
    pqxx::connection c(dsn());
    pqxx::nontransaction tx(c);
    tx.exec(sql);
  };
  admin("DO $$ BEGIN CREATE ROLE " + role + "; EXCEPTION WHEN duplicate_object THEN NULL; END $$");
  admin("ALTER ROLE " + role + " NOLOGIN");
  std::string role_dsn = dsn();
  role_dsn.replace(role_dsn.find("postgres@"), 9, role + "@");
  PgStore pool({role_dsn, 1, 5s});
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(pool.ping().ok());  // login refused
  admin("ALTER ROLE " + role + " LOGIN");

  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 20; ++j) EXPECT_TRUE(pool.ping().ok());
    });
  }
  for (auto& t : threads) t.join();
  pqxx::connection c(dsn());
  pqxx::nontransaction tx(c);
  const auto open = tx.exec("SELECT count(*) FROM pg_stat_activity WHERE usename = '" + role + "'");
  EXPECT_EQ(open[0][0].as<int>(), 1);  // pool_size
}

// --- encryption at rest (store.encryption) ---

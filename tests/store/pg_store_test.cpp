// PgStore against a real PostgreSQL. Set IDEMPROXY_TEST_DSN (scripts/test.sh does);
// with IDEMPROXY_REQUIRE_PG=1 a missing DSN fails instead of skipping.
#include "idemproxy/store/pg_store.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <optional>
#include <pqxx/pqxx>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "idemproxy/store/migrations.hpp"

using namespace idemproxy;
using namespace idemproxy::store;
using namespace std::chrono_literals;

namespace {

std::string dsn() {
  const char* v = std::getenv("IDEMPROXY_TEST_DSN");
  return v ? v : "";
}

class PgStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (dsn().empty()) {
      if (std::getenv("IDEMPROXY_REQUIRE_PG")) FAIL() << "IDEMPROXY_TEST_DSN is not set";
      GTEST_SKIP() << "IDEMPROXY_TEST_DSN is not set";
    }
    apply_migrations(dsn());
    store = std::make_unique<PgStore>(PgOptions{dsn(), 4, 5s});
    // A fresh scope per test keeps tests independent on a shared database.
    scope = "test-" + std::to_string(std::random_device{}()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  ClaimRequest request(const std::string& key, Duration lease = 30s, Duration ttl = 1h,
                       const std::string& fp = "fp-1", bool retake = false) {
    return {{scope, key}, fp, lease, ttl, "orders", "POST", "/v1/orders?x=1", retake};
  }

  std::int64_t claim_token(const ClaimRequest& r) {
    auto result = store->claim(r);
    EXPECT_TRUE(result.ok());
    EXPECT_TRUE(std::holds_alternative<Claimed>(result.value()));
    return std::get<Claimed>(result.value()).token;
  }

  std::unique_ptr<PgStore> store;
  std::string scope;
};

}  // namespace

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
  std::int64_t deleted = 0;
  for (auto n = store->delete_expired(2).value(); n > 0; n = store->delete_expired(2).value()) {
    EXPECT_LE(n, 2);
    deleted += n;
  }
  EXPECT_GE(deleted, 5);  // other tests' expired rows may go too
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(store->find({scope, "old" + std::to_string(i)}).value().has_value());
  }
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

namespace {

std::shared_ptr<const Sealer> ring(
    std::initializer_list<std::pair<const char*, unsigned char>> ks) {
  std::vector<SealingKey> keys;
  for (const auto& [id, fill] : ks) {
    SealingKey k;
    k.id = id;
    k.bytes.fill(fill);
    keys.push_back(k);
  }
  return std::make_shared<const Sealer>(std::move(keys));
}

const std::string kCard = "{\"card\":\"4242424242424242\",\"cvc\":\"123\"}";
const StoredResponse kSecret{201, {{"Set-Token", "tok_live_SECRET"}}, kCard};

// The raw row, as a database dump would show it.
pqxx::row raw_row(const RecordId& id) {
  pqxx::connection c(dsn());
  pqxx::nontransaction tx(c);
  return tx.exec_params1(
      "SELECT fingerprint, headers, body, key_id, encode(headers, 'escape') || "
      "encode(body, 'escape') FROM idempotency_records WHERE scope = $1 AND key = $2",
      id.scope, id.key);
}

}  // namespace

TEST_F(PgStoreTest, SealedRecordsHoldNoPlaintextAndReadBackWhole) {
  PgStore sealed({dsn(), 2, 5s, false, ring({{"k1", 1}})});
  const auto req = request("sealed", 30s, 1h, "fp-of-a-card-body");
  auto claimed = sealed.claim(req);
  ASSERT_TRUE(claimed.ok());
  const auto token = std::get<Claimed>(claimed.value()).token;
  ASSERT_TRUE(sealed.complete(req.id, token, kSecret, 1h).ok());

  const auto row = raw_row(req.id);
  EXPECT_EQ(row[3].as<std::string>(), "k1");
  EXPECT_EQ(row[0].as<std::string>().find("fp-of-a-card-body"), std::string::npos);
  const auto dump = row[4].as<std::string>();
  for (const char* secret : {"4242", "tok_live_SECRET", "cvc", "Set-Token"}) {
    EXPECT_EQ(dump.find(secret), std::string::npos) << secret;
  }

  auto again = sealed.claim(req);  // the replay path: same fingerprint, opened body
  ASSERT_TRUE(again.ok());
  const auto& r = std::get<Record>(again.value());
  EXPECT_EQ(r.fingerprint, "fp-of-a-card-body");
  ASSERT_TRUE(r.response.has_value());
  EXPECT_EQ(r.response->body, kCard);
  EXPECT_EQ(r.response->headers, kSecret.headers);
}

TEST_F(PgStoreTest, RotatedKeysKeepOldRecordsReadableAndSealNewOnesWithTheNewKey) {
  PgStore before({dsn(), 1, 5s, false, ring({{"2026-05", 5}})});
  const auto old_req = request("old");
  const auto t1 = std::get<Claimed>(before.claim(old_req).value()).token;
  ASSERT_TRUE(before.complete(old_req.id, t1, kSecret, 1h).ok());

  PgStore after({dsn(), 1, 5s, false, ring({{"2026-11", 11}, {"2026-05", 5}})});
  const auto new_req = request("new");
  const auto t2 = std::get<Claimed>(after.claim(new_req).value()).token;
  ASSERT_TRUE(after.complete(new_req.id, t2, kSecret, 1h).ok());
  EXPECT_EQ(raw_row(old_req.id)[3].as<std::string>(), "2026-05");
  EXPECT_EQ(raw_row(new_req.id)[3].as<std::string>(), "2026-11");
  EXPECT_EQ(after.find(old_req.id).value()->response->body, kCard);
  EXPECT_EQ(after.find(new_req.id).value()->response->body, kCard);

  // Once the old key is dropped from the ring, its records no longer open: an
  // error, never a wrong answer.
  PgStore dropped({dsn(), 1, 5s, false, ring({{"2026-11", 11}})});
  auto old_found = dropped.find(old_req.id);
  ASSERT_FALSE(old_found.ok());
  EXPECT_EQ(old_found.error().code, StoreErrc::unreadable);
  EXPECT_NE(old_found.error().detail.find("2026-05"), std::string::npos);
  auto old_claim = dropped.claim(old_req);
  ASSERT_FALSE(old_claim.ok());
  EXPECT_EQ(old_claim.error().code, StoreErrc::unreadable);
  EXPECT_TRUE(dropped.find(new_req.id).ok());
  EXPECT_TRUE(dropped.ping().ok());  // the unreadable row did not cost a connection
}

TEST_F(PgStoreTest, ASealedBodyMovedToAnotherRecordDoesNotOpen) {
  // An attacker with write access to the table copies one tenant's sealed response
  // into another tenant's record: the authenticated context (scope, key, field) differs.
  PgStore sealed({dsn(), 1, 5s, false, ring({{"k1", 1}})});
  const auto a = request("victim");
  const auto b = request("attacker");
  for (const auto& r : {a, b}) {
    const auto t = std::get<Claimed>(sealed.claim(r).value()).token;
    ASSERT_TRUE(sealed.complete(r.id, t, kSecret, 1h).ok());
  }
  {
    pqxx::connection c(dsn());
    pqxx::nontransaction tx(c);
    tx.exec_params(
        "UPDATE idempotency_records SET body = (SELECT body FROM idempotency_records"
        " WHERE scope = $1 AND key = $2) WHERE scope = $1 AND key = $3",
        a.id.scope, a.id.key, b.id.key);
  }
  auto found = sealed.find(b.id);
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.error().code, StoreErrc::unreadable);
  EXPECT_TRUE(sealed.find(a.id).ok());
}

TEST_F(PgStoreTest, PlainRecordsStayReadableAfterEncryptionIsTurnedOn) {
  const auto req = request("plain");
  const auto t = claim_token(req);
  ASSERT_TRUE(store->complete(req.id, t, kSecret, 1h).ok());
  PgStore sealed({dsn(), 1, 5s, false, ring({{"k1", 1}})});
  EXPECT_EQ(sealed.find(req.id).value()->response->body, kCard);
  // The reverse is refused: a sealed record read without the key is an error.
  const auto sreq = request("sealed-then-plain");
  const auto st = std::get<Claimed>(sealed.claim(sreq).value()).token;
  ASSERT_TRUE(sealed.complete(sreq.id, st, kSecret, 1h).ok());
  auto plain_read = store->find(sreq.id);
  ASSERT_FALSE(plain_read.ok());
  EXPECT_EQ(plain_read.error().code, StoreErrc::unreadable);
  // Listing (admin API, keys list) still works, and shows which key sealed the row.
  auto listed = store->list(RecordState::completed, 1000);
  ASSERT_TRUE(listed.ok()) << listed.error().detail;
  bool seen = false;
  for (const auto& r : listed.value()) {
    if (r.id.key == sreq.id.key && r.id.scope == sreq.id.scope) {
      seen = true;
      EXPECT_EQ(r.fingerprint, "(sealed with key k1)");
    }
  }
  EXPECT_TRUE(seen);
}

// Group commit. A store with one connection is held busy by a completion that waits
// on a row lock the test holds from outside; everything submitted meanwhile queues,
// and runs as one batch once the lock is let go.
namespace {

void wait_until_queued(PgStore& store, int n) {
  for (int i = 0; i < 500 && store.batch_stats().queued < n; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(store.batch_stats().queued, n);
}

class HeldConnection {
 public:
  // Claims `gate` on `store`, locks its row from another session, and starts a
  // completion of it, which then waits on that lock with the store's only connection.
  HeldConnection(PgStore& store, const ClaimRequest& gate)
      : store_(store), gate_(gate), outside_(dsn()), lock_(outside_) {
    const auto token = std::get<Claimed>(store.claim(gate).value()).token;
    lock_.exec_params("SELECT 1 FROM idempotency_records WHERE scope = $1 AND key = $2 FOR UPDATE",
                      gate.id.scope, gate.id.key);
    completion_ = std::thread([this, token] {
      completed_ = store_.complete(gate_.id, token, {201, {}, "gate"}, 1h).ok();
    });
    pqxx::connection watch(dsn());
    for (int i = 0; i < 500; ++i) {
      pqxx::nontransaction q(watch);
      if (q.exec("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                 " AND datname = current_database()")[0][0]
              .as<int>() > 0) {
        return;
      }
      std::this_thread::sleep_for(10ms);
    }
    ADD_FAILURE() << "the gate completion never waited on the lock";
  }

  // Lets the held completion finish; true when it succeeded.
  bool release() {
    lock_.commit();
    completion_.join();
    return completed_;
  }

  // Runs work(0) .. work(n - 1), each on its own thread; once all n are queued behind
  // the held connection, lets it go, and returns when all have finished.
  void queue_and_release(int n, const std::function<void(int)>& work) {
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) threads.emplace_back(work, i);
    wait_until_queued(store_, n);
    EXPECT_TRUE(release());
    for (auto& t : threads) t.join();
  }

 private:
  PgStore& store_;
  ClaimRequest gate_;
  pqxx::connection outside_;
  pqxx::work lock_;
  std::thread completion_;
  bool completed_ = false;
};

}  // namespace

TEST_F(PgStoreTest, ClaimsQueuedBehindABusyConnectionCommitTogether) {
  PgStore one({dsn(), 1, 5s});
  HeldConnection held(one, request("gate"));
  constexpr int kClaims = 24;
  std::vector<Result<ClaimResult>> results(kClaims, StoreError{});
  const auto before = one.batch_stats();
  held.queue_and_release(kClaims,
                         [&](int i) { results[i] = one.claim(request("k" + std::to_string(i))); });
  const auto after = one.batch_stats();
  // The held completion was one batch; the 24 claims were one more, not 24.
  EXPECT_EQ(after.batches - before.batches, 2);
  EXPECT_EQ(after.operations - before.operations, kClaims + 1);
  EXPECT_EQ(after.fallbacks, 0);
  std::set<std::int64_t> tokens;
  for (int i = 0; i < kClaims; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].error().detail;
    ASSERT_TRUE(std::holds_alternative<Claimed>(results[i].value())) << i;
    tokens.insert(std::get<Claimed>(results[i].value()).token);
    // Committed: another session sees every claim.
    auto found = store->find(request("k" + std::to_string(i)).id);
    ASSERT_TRUE(found.ok() && found.value());
    EXPECT_EQ(found.value()->state, RecordState::in_flight);
  }
  EXPECT_EQ(tokens.size(), static_cast<std::size_t>(kClaims));
}

TEST_F(PgStoreTest, OneKeyClaimedManyTimesInOneBatchHasExactlyOneWinner) {
  PgStore one({dsn(), 1, 5s});
  HeldConnection held(one, request("gate"));
  constexpr int kClaims = 16;
  std::vector<Result<ClaimResult>> results(kClaims, StoreError{});
  held.queue_and_release(kClaims, [&](int i) { results[i] = one.claim(request("storm")); });
  int winners = 0;
  std::int64_t token = 0;
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.error().detail;
    if (std::holds_alternative<Claimed>(r.value())) {
      ++winners;
      token = std::get<Claimed>(r.value()).token;
    }
  }
  ASSERT_EQ(winners, 1);
  for (const auto& r : results) {
    if (const auto* rec = std::get_if<Record>(&r.value())) {
      EXPECT_EQ(rec->state, RecordState::in_flight);
      EXPECT_EQ(rec->token, token);
    }
  }
}

TEST_F(PgStoreTest, AFailingStatementDoesNotFailTheRestOfItsBatch) {
  PgStore one({dsn(), 1, 5s});
  HeldConnection held(one, request("gate"));
  // A claim and a completion that will share the batch with one bad statement.
  const auto done_req = request("to-complete");
  const auto done_token = claim_token(done_req);
  std::optional<Result<ClaimResult>> good, bad;
  std::optional<Result<TimePoint>> completed;
  held.queue_and_release(3, [&](int i) {
    if (i == 0) good = one.claim(request("good"));
    if (i == 1) completed = one.complete(done_req.id, done_token, {200, {}, "ok"}, 1h);
    if (i == 2) bad = one.claim(request("not-utf8-\xff\xfe"));  // the server refuses it
  });
  EXPECT_EQ(one.batch_stats().fallbacks, 1);
  ASSERT_TRUE(good->ok()) << good->error().detail;
  EXPECT_TRUE(std::holds_alternative<Claimed>(good->value()));
  ASSERT_TRUE(completed->ok()) << completed->error().detail;
  EXPECT_EQ(store->find(done_req.id).value()->response->body, "ok");
  ASSERT_FALSE(bad->ok());
  EXPECT_EQ(bad->error().code, StoreErrc::unavailable);
  EXPECT_NE(bad->error().detail.find("UTF8"), std::string::npos) << bad->error().detail;
}

// Keys, headers and bodies that need quoting in an array literal, bytes that are not
// text, an empty body and a status-only record: all survive one multi-row claim and
// one multi-row completion byte for byte, in the clear and sealed.
TEST_F(PgStoreTest, BatchedClaimsAndCompletionsRoundTripAwkwardBytes) {
  std::string binary;
  for (int i = 0; i < 3000; ++i) binary += static_cast<char>(i % 256);
  const std::vector<std::string> keys = {
      "plain", "with \"quotes\"", "back\\slash", "{braces},comma", "NULL", "ünïcødé", " spaced "};
  const std::vector<StoredResponse> answers = {
      {201, {{"Content-Type", "application/json"}}, "{\"id\":1}"},
      {200, {{"X-Quote", "say \"hi\""}, {"X-Back", "a\\b"}}, binary},
      {204, {}, ""},
      {200, {{"X-Multi", "a"}, {"X-Multi", "b"}}, "\\x00 not hex"},
      {202, {}, "NULL"},
      {200, {}, std::string("nul\0inside", 10)},
      {500, {}, "too big to keep", false}};
  for (const bool sealed : {false, true}) {
    PgStore one({dsn(), 1, 5s, false, sealed ? ring({{"k1", 7}}) : nullptr});
    const std::string prefix = sealed ? "sealed/" : "clear/";
    std::vector<std::int64_t> tokens(keys.size());
    {
      HeldConnection held(one, request(prefix + "gate-claims"));
      held.queue_and_release(static_cast<int>(keys.size()), [&](int i) {
        auto r = one.claim(request(prefix + keys[i]));
        tokens[i] = r.ok() && std::holds_alternative<Claimed>(r.value())
                        ? std::get<Claimed>(r.value()).token
                        : -1;
      });
    }
    for (const auto t : tokens) ASSERT_GT(t, 0);
    const auto before = one.batch_stats();
    {
      HeldConnection held(one, request(prefix + "gate-completions"));
      std::vector<char> ok(keys.size());  // not vector<bool>: its bits share words
      held.queue_and_release(static_cast<int>(keys.size()), [&](int i) {
        ok[i] = one.complete(request(prefix + keys[i]).id, tokens[i], answers[i], 1h).ok();
      });
      for (std::size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(ok[i]) << keys[i];
    }
    // The gate's claim, the gate's completion, and one for all seven completions.
    EXPECT_EQ(one.batch_stats().batches - before.batches, 3);
    EXPECT_EQ(one.batch_stats().fallbacks, 0);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      auto found = one.find(request(prefix + keys[i]).id);
      ASSERT_TRUE(found.ok() && found.value()) << keys[i];
      const Record& r = *found.value();
      EXPECT_EQ(r.state, RecordState::completed) << keys[i];
      EXPECT_EQ(r.token, tokens[i]);
      EXPECT_EQ(r.fingerprint, "fp-1");
      ASSERT_TRUE(r.response) << keys[i];
      EXPECT_EQ(r.response->status, answers[i].status);
      EXPECT_EQ(r.response->body_stored, answers[i].body_stored) << keys[i];
      if (answers[i].body_stored) {
        EXPECT_EQ(r.response->body, answers[i].body) << keys[i];
        EXPECT_EQ(r.response->headers, answers[i].headers) << keys[i];
      }
    }
  }
}

#pragma once
// The fixture of the PgStore tests: a real PostgreSQL from IDEMPROXY_TEST_DSN
// (scripts/test.sh sets it); with IDEMPROXY_REQUIRE_PG=1 a missing DSN fails instead
// of skipping. Each test gets a scope of its own on the shared database.
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
#include "idemproxy/store/pg_store.hpp"
#include "idemproxy/store/sealer.hpp"

using namespace idemproxy;
using namespace idemproxy::store;
using namespace std::chrono_literals;

// Outside an anonymous namespace: gtest needs one fixture class for the suite
// across the test files.
namespace idemproxy::testing {

/// A key ring of keys filled with one byte each, newest first.
inline std::shared_ptr<const Sealer> ring(
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

inline std::string dsn() {
  const char* v = std::getenv("IDEMPROXY_TEST_DSN");
  return v ? v : "";
}

/// IDEMPROXY_TEST_CITUS=1: the DSN is a Citus coordinator (scripts/citus.sh), where
/// the table is distributed and claims and completions are not batched.
inline bool citus() { return std::getenv("IDEMPROXY_TEST_CITUS") != nullptr; }

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

inline void wait_until_queued(PgStore& store, int n) {
  for (int i = 0; i < 500 && store.batch_stats().queued < n; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(store.batch_stats().queued, n);
}

/// Waits (5 s at most) until a session is blocked by a lock `holder` holds; false if
/// none was. (Any session waiting on any lock, as HeldConnection once asked, could be
/// another test's when ctest runs two store tests at once.) On Citus the blocked
/// statement waits on a worker, which citus_stat_activity shows: any lock wait there.
inline bool wait_until_blocked_by(const pqxx::connection_base& holder) {
  pqxx::connection watch(dsn());
  const std::string blocked = "SELECT count(*) FROM pg_stat_activity WHERE " +
                              std::to_string(holder.backendpid()) + " = ANY(pg_blocking_pids(pid))";
  const std::string citus_waiting =
      "SELECT count(*) FROM citus_stat_activity"
      " WHERE wait_event_type = 'Lock' AND datname = current_database()";
  for (int i = 0; i < 500; ++i) {
    pqxx::nontransaction q(watch);
    if (q.exec(citus() ? citus_waiting : blocked)[0][0].as<int>() > 0) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

/// Holds a store's only connection busy, so the calls that follow queue up and run
/// as one group-commit batch. (A store of one connection has one runner thread,
/// which waits on the held call, so every call queues, whatever its lane.)
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
    // Only the gate's completion can wait on this lock's holder.
    if (!wait_until_blocked_by(outside_))
      ADD_FAILURE() << "the gate completion never waited on the lock";
  }

  // Lets the held completion finish; true when it succeeded.
  bool release() {
    lock_.commit();
    completion_.join();
    return completed_;
  }

  // Runs work(0) .. work(n - 1), each on its own thread; once `queued` of them (all n
  // by default) are queued behind the held connection, lets it go, and returns when
  // all have finished.
  void queue_and_release(int n, const std::function<void(int)>& work, int queued = -1) {
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) threads.emplace_back(work, i);
    wait_until_queued(store_, queued < 0 ? n : queued);
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

}  // namespace idemproxy::testing

using idemproxy::testing::citus;
using idemproxy::testing::dsn;
using idemproxy::testing::HeldConnection;
using idemproxy::testing::PgStoreTest;
using idemproxy::testing::ring;

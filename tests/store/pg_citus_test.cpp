// The store on a Citus cluster (scripts/citus.sh: a coordinator and two workers),
// run with IDEMPROXY_TEST_CITUS=1 and the coordinator's DSN; skipped otherwise. The
// rest of store_tests runs against the same cluster in that run.
#include <map>
#include <mutex>

#include "pg_store_fixture.hpp"
#include "store/pg/statements.hpp"

namespace {

class PgCitusTest : public PgStoreTest {
 protected:
  void SetUp() override {
    if (!citus()) GTEST_SKIP() << "IDEMPROXY_TEST_CITUS is not set";
    PgStoreTest::SetUp();
  }

  pqxx::result sql(const std::string& query) {
    pqxx::connection c(dsn());
    pqxx::nontransaction tx(c);
    return tx.exec(query);
  }

  std::size_t active_workers() {
    return sql("SELECT count(*) FROM citus_get_active_worker_nodes()")[0][0].as<std::size_t>();
  }

  // The worker ports holding the shards of `scope`'s records.
  std::set<int> workers_holding_scope() {
    pqxx::connection c(dsn());
    pqxx::nontransaction tx(c);
    std::set<int> ports;
    for (const auto& row :
         tx.exec_params("SELECT DISTINCT p.nodeport FROM idempotency_records r"
                        " JOIN pg_dist_shard_placement p ON p.shardid ="
                        "  get_shard_id_for_distribution_column('idempotency_records', r.key)"
                        " WHERE r.scope = $1",
                        scope)) {
      ports.insert(row[0].as<int>());
    }
    return ports;
  }
};

TEST_F(PgCitusTest, TheTableIsHashDistributedOnKeyNotScope) {
  const auto r =
      sql("SELECT partmethod, column_to_column_name(logicalrelid, partkey) FROM pg_dist_partition"
          " WHERE logicalrelid = 'idempotency_records'::regclass");
  ASSERT_EQ(r.size(), 1U);
  EXPECT_EQ(r[0][0].as<std::string>(), "h");
  EXPECT_EQ(r[0][1].as<std::string>(), "key");
  EXPECT_GE(sql("SELECT count(*) FROM citus_get_active_worker_nodes()")[0][0].as<int>(), 2);
}

// Each statement of a request's path, planned by Citus: one task on one shard, with
// no subplans (a subplan would be a second round trip from the coordinator, and for
// a data-modifying CTE a change of meaning: the parts run one after another).
TEST_F(PgCitusTest, EveryRecordStatementIsASingleShardRouterQuery) {
  using namespace idemproxy::store::pg;
  const std::string s = "'" + scope + "'";
  const std::map<std::string, std::pair<Statement, std::string>> cases = {
      {"claim", {kClaimRouted, s + ", 'k', 'fp', 'r', 'POST', '/', 30000, 60000, true, NULL, 42"}},
      {"complete", {kComplete, s + ", 'k', 1, 200, ''::bytea, ''::bytea, 60000, NULL"}},
      {"release", {kRelease, s + ", 'k', 1"}},
      {"withdraw", {kWithdraw, s + ", 'k', 42"}},
      {"renew", {kRenew, s + ", 'k', 1, 30000"}},
      {"mark_indeterminate", {kMarkIndeterminate, s + ", 'k', 1"}},
      {"watch", {kWatch, s + ", 'k'"}},
      {"resolve", {kResolve, s + ", 'k'"}},
      {"find", {kFind, s + ", 'k'"}},
      {"purge", {kPurge, s + ", 'k'"}},
  };
  pqxx::connection c(dsn());
  for (const auto& [name, statement] : cases) {
    pqxx::nontransaction tx(c);
    tx.exec("PREPARE " + std::string(statement.first.name) + " AS " + statement.first.sql);
    std::string plan;
    for (const auto& row :
         tx.exec("EXPLAIN (COSTS OFF) EXECUTE " + std::string(statement.first.name) + "(" +
                 statement.second + ")")) {
      plan += row[0].as<std::string>() + "\n";
    }
    EXPECT_NE(plan.find("Task Count: 1\n"), std::string::npos) << name << ":\n" << plan;
    EXPECT_EQ(plan.find("Subplan"), std::string::npos) << name << ":\n" << plan;
    EXPECT_EQ(plan.find("Task Count: 1\n"), plan.rfind("Task Count:")) << name << ":\n" << plan;
  }
  // Why the claim has a routed form: plain PostgreSQL's kClaim reads the live row in
  // the same statement (a data-modifying CTE), which Citus splits into subplans.
  pqxx::nontransaction tx(c);
  tx.exec("PREPARE plain_claim AS " + std::string(kClaim.sql));
  std::string plan;
  for (const auto& row :
       tx.exec("EXPLAIN (COSTS OFF) EXECUTE plain_claim(" + cases.at("claim").second + ")")) {
    plan += row[0].as<std::string>() + "\n";
  }
  EXPECT_NE(plan.find("Distributed Subplan"), std::string::npos) << plan;
}

TEST_F(PgCitusTest, RecordsOfOneScopeSpreadAcrossEveryWorker) {
  for (int i = 0; i < 64; ++i) claim_token(request("spread-" + std::to_string(i)));
  EXPECT_EQ(workers_holding_scope().size(), active_workers());
}

// The fencing sequence is the coordinator's: nextval() in the routed claim runs
// there, so tokens stay unique across shards and workers, also under concurrency.
TEST_F(PgCitusTest, FencingTokensStayUniqueAcrossShardsUnderConcurrency) {
  PgStore wide(PgOptions{dsn(), 8, 5s});
  std::mutex mu;
  std::set<std::int64_t> tokens;
  std::atomic<int> claimed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        auto r = wide.claim(request("tok-" + std::to_string(t) + "-" + std::to_string(i)));
        if (!r.ok() || !std::holds_alternative<Claimed>(r.value())) continue;
        ++claimed;
        std::lock_guard lock(mu);
        tokens.insert(std::get<Claimed>(r.value()).token);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(claimed.load(), 320);
  EXPECT_EQ(tokens.size(), 320U);
  EXPECT_EQ(workers_holding_scope().size(), active_workers());
}

// A store learns it is on Citus from its first connection, so claims that queue up
// before it exists may form a batch. They all succeed with no failed batch. (The
// batch runs routed, one statement each: kClaimMany does run on Citus, but as
// subplans through the coordinator, not as a router query. This test passes either
// way; EveryRecordStatementIsASingleShardRouterQuery covers the statements.)
TEST_F(PgCitusTest, ClaimsQueuedBeforeTheFirstConnectionRunRouted) {
  PgStore fresh(PgOptions{dsn(), 2, 5s});
  std::atomic<int> claimed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      auto r = fresh.claim(request("first-" + std::to_string(t)));
      if (r.ok() && std::holds_alternative<Claimed>(r.value())) ++claimed;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(claimed.load(), 16);
  EXPECT_EQ(fresh.batch_stats().fallbacks, 0);
}

// The routed claim reads what it replaced from the row it updated (taken_over).
TEST_F(PgCitusTest, ALeaseTakeoverIsToldApartFromAReclaimOfAReleasedRecord) {
  claim_token(request("stale", 50ms));
  std::this_thread::sleep_for(120ms);
  auto retaken = store->claim(request("stale", 30s, 1h, "fp-1", /*retake=*/true));
  ASSERT_TRUE(retaken.ok());
  ASSERT_TRUE(std::holds_alternative<Claimed>(retaken.value()));
  EXPECT_TRUE(std::get<Claimed>(retaken.value()).took_over);

  const auto token = claim_token(request("released"));
  ASSERT_TRUE(store->release({scope, "released"}, token).ok());
  auto again = store->claim(request("released"));
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(std::holds_alternative<Claimed>(again.value()));
  EXPECT_FALSE(std::get<Claimed>(again.value()).took_over);
}

TEST_F(PgCitusTest, GarbageCollectionReachesEveryShard) {
  for (int i = 0; i < 40; ++i) {
    const auto key = "gc-" + std::to_string(i);
    ASSERT_TRUE(store->complete({scope, key}, claim_token(request(key)), {200, {}, ""}, 1s).ok());
  }
  ASSERT_EQ(workers_holding_scope().size(), active_workers());
  std::this_thread::sleep_for(1100ms);
  const auto left = [&] {
    return sql("SELECT count(*) FROM idempotency_records WHERE scope = '" + scope + "'")[0][0]
        .as<int>();
  };
  // Other test processes may hold the GC lock for a moment or delete these first.
  for (int calls = 0; calls < 200 && left() > 0; ++calls) {
    if (store->delete_expired(1000).value() == 0) std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(left(), 0);
}

}  // namespace

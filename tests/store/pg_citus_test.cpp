// The store on a Citus cluster (scripts/citus.sh: a coordinator and two workers),
// run with IDEMPROXY_TEST_CITUS=1 and the coordinator's DSN; skipped otherwise. The
// rest of store_tests runs against the same cluster in that run.
#include <map>
#include <mutex>

#include "pg_store_fixture.hpp"
#include "store/pg/shard_map.hpp"
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

  // The shard of `key`, and the worker (group id) holding it, as Citus says.
  std::pair<long long, int> placement(const std::string& key) {
    pqxx::connection c(dsn());
    pqxx::nontransaction tx(c);
    const auto row = tx.exec_params1(
        "SELECT s, (SELECT groupid FROM pg_dist_placement WHERE shardid = s LIMIT 1)"
        " FROM get_shard_id_for_distribution_column('idempotency_records', $1::text) AS s",
        key);
    return {row[0].as<long long>(), row[1].as<int>()};
  }

  // n keys that Citus places in one shard.
  std::vector<std::string> keys_of_one_shard(const std::string& prefix, std::size_t n) {
    std::map<long long, std::vector<std::string>> by_shard;
    for (int i = 0; i < 40 * static_cast<int>(n); ++i) {
      const std::string key = prefix + std::to_string(i);
      auto& keys = by_shard[placement(key).first];
      keys.push_back(key);
      if (keys.size() == n) return keys;
    }
    ADD_FAILURE() << "no shard got " << n << " keys";
    return {};
  }

  // n keys that Citus places on one worker, in more than one shard.
  std::vector<std::string> keys_of_one_worker(const std::string& prefix, std::size_t n) {
    std::map<int, std::vector<std::string>> by_worker;
    std::map<int, std::set<long long>> shards;
    for (int i = 0; i < 40 * static_cast<int>(n); ++i) {
      const std::string key = prefix + std::to_string(i);
      const auto [shard, worker] = placement(key);
      auto& keys = by_worker[worker];
      keys.push_back(key);
      shards[worker].insert(shard);
      if (keys.size() == n && shards[worker].size() > 1) return keys;
    }
    ADD_FAILURE() << "no worker got " << n << " keys";
    return {};
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

// A streamed answer's chunks live on their record's shard: distributed by key in
// the records' co-location group, so a chunk statement is routed like its record's.
TEST_F(PgCitusTest, ChunksAreDistributedBesideTheirRecords) {
  const auto r =
      sql("SELECT logicalrelid::text, column_to_column_name(logicalrelid, partkey), colocationid"
          " FROM pg_dist_partition WHERE logicalrelid IN"
          " ('idempotency_records'::regclass, 'idempotency_chunks'::regclass) ORDER BY 1");
  ASSERT_EQ(r.size(), 2U);
  EXPECT_EQ(r[0][1].as<std::string>(), "key");
  EXPECT_EQ(r[1][1].as<std::string>(), "key");
  EXPECT_EQ(r[0][2].as<int>(), r[1][2].as<int>());
  // And the shard of a key's chunks is on the worker of its record's.
  const auto same =
      sql("SELECT (SELECT nodeport FROM pg_dist_shard_placement WHERE shardid ="
          " get_shard_id_for_distribution_column('idempotency_records', 'some-key')) ="
          " (SELECT nodeport FROM pg_dist_shard_placement WHERE shardid ="
          " get_shard_id_for_distribution_column('idempotency_chunks', 'some-key'))");
  EXPECT_TRUE(same[0][0].as<bool>());
}

// Each statement of a request's path, planned by Citus: one task on one shard, with
// no subplans (a subplan would be a second round trip from the coordinator, and for
// a data-modifying CTE a change of meaning: the parts run one after another).
TEST_F(PgCitusTest, EveryRecordStatementIsASingleShardRouterQuery) {
  using namespace idemproxy::store::pg;
  const std::string s = "'" + scope + "'";
  const std::map<std::string, std::pair<Statement, std::string>> cases = {
      {"claim",
       {kClaimRouted, s + ", 'k', 'fp', 'r', 'POST', '/', 30000, 60000, true, NULL, 42, NULL"}},
      {"complete", {kComplete, s + ", 'k', 1, 200, ''::bytea, ''::bytea, 60000, NULL, 60000"}},
      {"release", {kRelease, s + ", 'k', 1"}},
      {"withdraw", {kWithdraw, s + ", 'k', 42"}},
      {"renew", {kRenew, s + ", 'k', 1, 30000"}},
      {"mark_indeterminate", {kMarkIndeterminate, s + ", 'k', 1"}},
      {"watch", {kWatch, s + ", 'k'"}},
      {"resolve", {kResolve, s + ", 'k'"}},
      {"find", {kFind, s + ", 'k'"}},
      {"purge", {kPurge, s + ", 'k'"}},
      {"read_chunks", {kReadChunks, s + ", 'k', 1, 1, 16"}},
      {"complete_chunked",
       {kCompleteChunked, s + ", 'k', 1, 200, ''::bytea, 3, 60000, NULL, 60000, 9, ''::bytea"}},
      {"purge_chunks", {kPurgeChunks, s + ", 'k'"}},
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
  // A batch of one shard's claims (claim_rows_sql) is one task as well.
  {
    const auto keys = keys_of_one_shard("explain-", 3);
    std::string args;
    for (const auto& k : keys) {
      args += s + ", '" + k + "', 'fp', 'r', 'POST', '/', 30000, 60000, NULL, 7, ";
    }
    pqxx::nontransaction tx(c);
    tx.exec("PREPARE claim_rows AS " + idemproxy::store::pg::claim_rows_sql(3));
    std::string plan;
    for (const auto& row : tx.exec("EXPLAIN (COSTS OFF) EXECUTE claim_rows(" + args + "true)")) {
      plan += row[0].as<std::string>() + "\n";
    }
    EXPECT_NE(plan.find("Task Count: 1\n"), std::string::npos) << plan;
    EXPECT_EQ(plan.find("Subplan"), std::string::npos) << plan;
    // And so is a batch of its completions (complete_rows_sql).
    std::string done_args;
    for (const auto& k : keys)
      done_args += s + ", '" + k + "', 1, 201, ''::bytea, ''::bytea, 60000, NULL, 60000, ";
    done_args.resize(done_args.size() - 2);
    tx.exec("PREPARE complete_rows AS " + idemproxy::store::pg::complete_rows_sql(3));
    plan.clear();
    for (const auto& row :
         tx.exec("EXPLAIN (COSTS OFF) EXECUTE complete_rows(" + done_args + ")")) {
      plan += row[0].as<std::string>() + "\n";
    }
    EXPECT_NE(plan.find("Task Count: 1\n"), std::string::npos) << plan;
    EXPECT_EQ(plan.find("Subplan"), std::string::npos) << plan;
    // And a batch of chunks of keys on one shard (append_rows_sql).
    std::string chunk_args = "NULL, ";
    for (const auto& k : keys) chunk_args += s + ", '" + k + "', 1, 1, 'x'::bytea, ";
    chunk_args.resize(chunk_args.size() - 2);
    tx.exec("PREPARE append_rows AS " + idemproxy::store::pg::append_rows_sql(3));
    plan.clear();
    for (const auto& row : tx.exec("EXPLAIN (COSTS OFF) EXECUTE append_rows(" + chunk_args + ")")) {
      plan += row[0].as<std::string>() + "\n";
    }
    EXPECT_NE(plan.find("Task Count: 1\n"), std::string::npos) << plan;
    EXPECT_EQ(plan.find("Subplan"), std::string::npos) << plan;
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

// Group commit batches per worker, so the proxy computes each key's shard and worker
// itself: its hash must be Citus's (worker_hash), byte for byte, at every length
// around lookup3's 12-byte blocks and for UTF-8; its shard Citus's shard, and its
// worker the shard's placement.
TEST_F(PgCitusTest, TheProxysShardOfAKeyIsCitussOwn) {
  using idemproxy::store::pg::citus_hash;
  using idemproxy::store::pg::ShardMap;
  std::vector<ShardMap::Shard> shards;
  std::vector<long long> shard_ids;
  for (const auto& row :
       sql("SELECT s.shardid, s.shardminvalue::int, s.shardmaxvalue::int, p.groupid"
           " FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)"
           " WHERE s.logicalrelid = 'idempotency_records'::regclass ORDER BY 2")) {
    shard_ids.push_back(row[0].as<long long>());
    shards.push_back({row[1].as<std::int32_t>(), row[2].as<std::int32_t>(), row[3].as<int>()});
  }
  const ShardMap map(shards);
  ASSERT_EQ(map.size(), shard_ids.size());
  std::vector<std::string> keys = {"", "a", "order-42",
                                   "\xc3\xa9t\xc3\xa9-\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87"};
  for (int i = 0; i < 300; ++i) keys.push_back(std::string(i % 41, 'k') + std::to_string(i * 7919));
  pqxx::connection c(dsn());
  pqxx::nontransaction tx(c);
  for (const auto& key : keys) {
    const auto row = tx.exec_params1(
        "SELECT worker_hash($1::text), "
        "get_shard_id_for_distribution_column('idempotency_records', $1::text)",
        key);
    ASSERT_EQ(citus_hash(key), row[0].as<std::int32_t>()) << "key of " << key.size() << " bytes";
    const int shard = map.shard_of(key);
    ASSERT_GE(shard, 0) << key;
    EXPECT_EQ(shard_ids[static_cast<std::size_t>(shard)], row[1].as<long long>()) << key;
    EXPECT_EQ(map.worker_of(key), placement(key).second) << key;
  }
}

// Claims for one worker queued behind a busy connection commit as one multi-row
// INSERT, one commit on that worker, across its shards (measured: about 3 times less
// database CPU per key than one statement each; docs/SCALING.md). A claim of a live
// record in the batch gets that record, and a key claimed twice in the batch has one
// winner.
TEST_F(PgCitusTest, ClaimsForOneWorkerQueuedTogetherCommitTogether) {
  const auto keys = keys_of_one_worker("batched-", 21);
  ASSERT_EQ(keys.size(), 21U);
  const std::string& live = keys[20];  // completed before the batch
  ASSERT_TRUE(
      store->complete({scope, live}, claim_token(request(live)), {201, {}, "kept"}, 1h).ok());
  PgStore one({dsn(), 1, 5s});
  ASSERT_TRUE(one.ping().ok());  // the pool knows it is on Citus, and the shard map
  HeldConnection held(one, request("gate"));
  constexpr int kClaims = 22;  // keys[0..19], the live key, and keys[0] again
  std::vector<Result<ClaimResult>> results(kClaims, StoreError{});
  const auto before = one.batch_stats();
  held.queue_and_release(kClaims,
                         [&](int i) { results[i] = one.claim(request(keys[i < 21 ? i : 0])); });
  const auto after = one.batch_stats();
  EXPECT_EQ(after.multi_row - before.multi_row, 1);
  EXPECT_EQ(after.fallbacks, 0);
  std::set<std::int64_t> tokens;
  int winners_of_key0 = 0;
  for (int i = 0; i < kClaims; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].error().detail;
    const std::string& key = keys[i < 21 ? i : 0];
    if (key == live) {
      ASSERT_TRUE(std::holds_alternative<Record>(results[i].value()));
      EXPECT_EQ(std::get<Record>(results[i].value()).response->body, "kept");
      continue;
    }
    if (key == keys[0]) {
      if (std::holds_alternative<Claimed>(results[i].value())) ++winners_of_key0;
      continue;
    }
    ASSERT_TRUE(std::holds_alternative<Claimed>(results[i].value())) << i;
    tokens.insert(std::get<Claimed>(results[i].value()).token);
    auto found = store->find({scope, key});
    ASSERT_TRUE(found.ok() && found.value());
    EXPECT_EQ(found.value()->state, RecordState::in_flight);
  }
  EXPECT_EQ(winners_of_key0, 1);
  EXPECT_EQ(tokens.size(), 19U);

  // Their completions, queued the same way, commit together: one UPDATE per shard in
  // one transaction. One with a token that is not the holder's is fenced, and the
  // rest are stored, NULs and all.
  auto awkward = [](const std::string& key) { return std::string("body \0\xff ", 7) + key; };
  std::vector<std::pair<std::string, std::int64_t>> held_keys;
  for (int i = 1; i < 20; ++i) {
    held_keys.emplace_back(keys[i], std::get<Claimed>(results[i].value()).token);
  }
  held_keys.front().second += 100000;  // not the holder
  std::vector<std::optional<Result<TimePoint>>> done(held_keys.size());
  HeldConnection again(one, request("gate-2"));
  const auto mid = one.batch_stats();
  again.queue_and_release(static_cast<int>(held_keys.size()), [&](int i) {
    const auto& [key, token] = held_keys[i];
    done[i] = one.complete({scope, key}, token, {201, {{"X-N", key}}, awkward(key)}, 1h);
  });
  EXPECT_EQ(one.batch_stats().multi_row - mid.multi_row, 1);
  for (std::size_t i = 0; i < held_keys.size(); ++i) {
    const auto& key = held_keys[i].first;
    if (i == 0) {
      ASSERT_FALSE(done[i]->ok());
      EXPECT_EQ(done[i]->error().code, StoreErrc::fenced);
      continue;
    }
    ASSERT_TRUE(done[i]->ok()) << done[i]->error().detail;
    const auto found = store->find({scope, key}).value();
    ASSERT_TRUE(found && found->response);
    EXPECT_EQ(found->state, RecordState::completed);
    EXPECT_EQ(found->response->body, awkward(key));
    EXPECT_EQ(found->response->headers, (std::vector<Header>{{"X-N", key}}));
  }
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

// The store may know it is on Citus only once it also knows where the shards are.
// Claims arriving one after another while the first connection opens and reads the
// shard map all go through group commit, each counted there. Before the fix, the
// pool said "Citus" between opening that connection and reading the map, and the
// claims arriving then ran alone, outside group commit (CI saw 95 of 96 batched).
TEST_F(PgCitusTest, ClaimsArrivingWhileTheShardMapIsReadAreGroupCommitted) {
  for (int round = 0; round < 5; ++round) {
    PgStore fresh(PgOptions{dsn(), 4, 5s});
    constexpr int kClaims = 40;
    std::atomic<int> claimed{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kClaims; ++t) {
      threads.emplace_back([&, t] {
        std::this_thread::sleep_for(t * 200us);
        auto r =
            fresh.claim(request("arriving-" + std::to_string(round) + "-" + std::to_string(t)));
        if (r.ok() && std::holds_alternative<Claimed>(r.value())) ++claimed;
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(claimed.load(), kClaims);
    EXPECT_EQ(fresh.batch_stats().operations, kClaims) << "round " << round;
  }
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

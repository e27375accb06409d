// Garbage collection of streamed answers' chunks on PostgreSQL: a record's chunks go
// in the transaction that deletes it, and the sweep for the other orphans reads a
// page of the chunk table per call, never all of it. Each test runs in a
// database of its own: the sweep walks the whole table, and the collections of tests
// running beside it on the shared database would sweep the same rows meanwhile.
#include "pg_store_fixture.hpp"

namespace {

using idemproxy::testing::dsn;

std::string database_dsn(const std::string& dsn, const std::string& name) {
  const auto path = dsn.find('/', dsn.find("://") + 3);
  const auto query = dsn.find('?', path);
  return dsn.substr(0, path + 1) + name + (query == std::string::npos ? "" : dsn.substr(query));
}

void admin(const std::string& sql) {
  pqxx::connection c(dsn());
  pqxx::nontransaction tx(c);
  tx.exec(sql);
}

class PgChunkSweep : public ::testing::Test {
 protected:
  void SetUp() override {
    if (dsn().empty()) {
      if (std::getenv("IDEMPROXY_REQUIRE_PG")) FAIL() << "IDEMPROXY_TEST_DSN is not set";
      GTEST_SKIP() << "IDEMPROXY_TEST_DSN is not set";
    }
    name_ = "idemproxy_sweep_" + std::to_string(std::random_device{}());
    admin("CREATE DATABASE " + name_);
    own_ = database_dsn(dsn(), name_);
    apply_migrations(own_);
    store = std::make_unique<PgStore>(PgOptions{own_, 2, 5s});
  }
  void TearDown() override {
    store.reset();
    if (!name_.empty()) admin("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
  }

  void sql(const std::string& statement) {
    pqxx::connection c(own_);
    pqxx::nontransaction tx(c);
    tx.exec(statement);
  }
  long long chunks(const std::string& where = "true") {
    pqxx::connection c(own_);
    pqxx::nontransaction tx(c);
    return tx.exec("SELECT count(*) FROM idempotency_chunks WHERE " + where)[0][0].as<long long>();
  }
  /// `n` chunks of token 1 of keys with no record, from `prefix`-0001 on.
  void orphans(const std::string& prefix, int n) {
    sql("INSERT INTO idempotency_chunks (scope, key, token, seq, bytes)"
        " SELECT 's', '" +
        prefix + "-' || lpad(g::text, 4, '0'), 1, 1, '\\x00' FROM generate_series(1, " +
        std::to_string(n) + ") g");
  }
  ClaimRequest request(const std::string& key, Duration lease = 30s, Duration ttl = 1h) {
    return {{"s", key}, "fp", lease, ttl, "orders", "POST", "/", false};
  }
  std::int64_t claimed(const ClaimRequest& r) {
    const auto c = store->claim(r);
    EXPECT_TRUE(c.ok() && std::holds_alternative<Claimed>(c.value()));
    return c.ok() && std::holds_alternative<Claimed>(c.value()) ? std::get<Claimed>(c.value()).token
                                                                : -1;
  }
  void append(const std::string& key, std::int64_t token, std::int32_t seq) {
    ASSERT_TRUE(store->append({"s", key}, token, seq, "bytes").ok());
  }
  StoredResponse in_chunks(std::int32_t n) {
    StoredResponse answer{200, {{"Content-Type", "text/event-stream"}}, "", true, {}};
    answer.chunks = n;
    answer.body_length = 5 * n;
    answer.body_digest = std::string(32, '\x5a');
    return answer;
  }
  const std::string& own() const { return own_; }

  std::unique_ptr<PgStore> store;

 private:
  std::string name_, own_;
};

TEST_F(PgChunkSweep, ACollectionSweepsOnePageOfTheChunkTableNotAllOfIt) {
  orphans("o", 500);
  // Pages of 50, one after another.
  EXPECT_EQ(store->sweep_chunks(50).value(), 50);
  EXPECT_EQ(chunks(), 450);
  EXPECT_EQ(store->sweep_chunks(50).value(), 50);
  EXPECT_EQ(chunks(), 400);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(store->sweep_chunks(50).ok());
  EXPECT_EQ(chunks(), 0);
  // Expired records are deleted without reading the chunk table.
  orphans("p", 10);
  ASSERT_TRUE(store->delete_expired(1000).ok());
  EXPECT_EQ(chunks(), 10);
}

TEST_F(PgChunkSweep, TheSweepKeepsWhatRecordsReadAndStartsAgainFromTheTop) {
  // Read: an answer still streaming, and one completed in chunks.
  const auto streaming = claimed(request("m-streaming"));
  append("m-streaming", streaming, 1);
  const auto kept = claimed(request("m-kept"));
  append("m-kept", kept, 1);
  append("m-kept", kept, 2);
  ASSERT_TRUE(store->complete({"s", "m-kept"}, kept, in_chunks(2), 1h).ok());
  // Not read: a released record's, and a token that no longer holds its record.
  const auto released = claimed(request("m-released"));
  append("m-released", released, 1);
  ASSERT_TRUE(store->release({"s", "m-released"}, released).ok());
  sql("INSERT INTO idempotency_chunks (scope, key, token, seq, bytes)"
      " VALUES ('s', 'm-kept', " +
      std::to_string(kept - 1000) + ", 1, '\\x00')");
  orphans("z", 100);
  EXPECT_EQ(chunks(), 105);
  // Pages of 20 reach the end of the table within 7 calls.
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(store->sweep_chunks(20).ok());
  EXPECT_EQ(chunks(), 3);
  EXPECT_EQ(chunks("key = 'm-streaming'"), 1);
  EXPECT_EQ(chunks("key = 'm-kept' AND token = " + std::to_string(kept)), 2);
  // Orphans above where the sweep has been are found once it starts again at the top.
  orphans("a", 10);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(store->sweep_chunks(20).ok());
  EXPECT_EQ(chunks(), 3);
}

TEST_F(PgChunkSweep, AnExpiredRecordsChunksGoInTheTransactionThatDeletesIt) {
  const auto token = claimed(request("expiring", 30s, 100ms));
  append("expiring", token, 1);
  append("expiring", token, 2);
  ASSERT_TRUE(store->complete({"s", "expiring"}, token, in_chunks(2), 100ms).ok());
  orphans("o", 3);
  std::this_thread::sleep_for(250ms);
  const auto deleted = store->delete_expired(100);
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(deleted.value(), 1);
  EXPECT_EQ(chunks("key = 'expiring'"), 0);
  EXPECT_EQ(chunks(), 3);  // the orphans wait for the sweep
  // Another instance sweeping: this one sweeps nothing meanwhile.
  pqxx::connection other(own());
  pqxx::work held(other);
  ASSERT_TRUE(held.exec("SELECT pg_try_advisory_xact_lock(484558604)")[0][0].as<bool>());
  EXPECT_EQ(store->sweep_chunks(100).value(), 0);
  EXPECT_EQ(chunks(), 3);
  held.abort();
  EXPECT_EQ(store->sweep_chunks(100).value(), 3);
  EXPECT_EQ(chunks(), 0);
}

}  // namespace

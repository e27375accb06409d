// What only PgStore has, against a real PostgreSQL: migrations, the pool, a server
// that does not answer. What every store does is in store_contract_*_test.cpp.
#include "pg_store_fixture.hpp"
#include "store/pg/binary_rows.hpp"

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

// A record completed before migration 010 has no replay_until, and one an older
// binary took over and completed again keeps its previous one, from before its
// completion. Either way GC judges its answer by the route's ttl, as it always did,
// and a claim reads no window from it.
TEST_F(PgStoreTest, ARecordCompletedBeforeItsWindowWasKeptFallsBackToTheRoutesTtl) {
  for (const char* left : {"NULL", "now() - interval '1 day'"}) {
    SCOPED_TRACE(left);
    auto req = request(std::string("legacy-") + (left[0] == 'N' ? "null" : "stale"));
    req.route = req.id.key + "-" + scope;
    ASSERT_TRUE(store->complete(req.id, claim_token(req), {201, {}, "old"}, {1h, 2h}).ok());
    {
      pqxx::connection c(dsn());
      pqxx::work tx(c);
      tx.exec_params(std::string("UPDATE idempotency_records SET replay_until = ") + left +
                         ", completed_at = now() - interval '10 minutes'"
                         " WHERE scope = $1 AND key = $2",
                     scope, req.id.key);
      tx.commit();
    }
    const auto live = store->claim(req);
    ASSERT_TRUE(live.ok());
    ASSERT_TRUE(std::holds_alternative<Record>(live.value()));
    EXPECT_FALSE(std::get<Record>(live.value()).replay_until.has_value());
    // The route's 1 h ttl keeps it, and a 5 min ttl drops it.
    EXPECT_EQ(store->drop_answers(req.route, 1h, 100).value(), 0);
    std::int64_t dropped = 0;
    for (int calls = 0; calls < 50 && dropped == 0; ++calls) {
      dropped = store->drop_answers(req.route, 5min, 100).value();
      if (dropped == 0) std::this_thread::sleep_for(10ms);  // another test held the GC lock
    }
    EXPECT_EQ(dropped, 1);
  }
}

// --- encryption at rest (store.encryption) ---

// A replay reads its chunks a page at a time through read_binary_prepared: the
// statement is prepared once per connection (pg_prepared_statements shows it), and
// again on the handle a reconnect opens, which has none.
TEST_F(PgStoreTest, BinaryReadsArePreparedOncePerConnectionAndAgainAfterAReconnect) {
  idemproxy::store::pg::HandleConnection conn(dsn());
  idemproxy::store::pg::BinaryPrepared prepared;
  const char* sql = "SELECT $1::int + 1";
  for (int i = 1; i <= 3; ++i) {
    const auto rows = idemproxy::store::pg::read_binary_prepared(conn, prepared, "test_read_binary",
                                                                 sql, {std::to_string(i)});
    ASSERT_EQ(rows.size(), 1);
    EXPECT_EQ(rows.int4(0, 0), i + 1);
  }
  EXPECT_EQ(prepared.names.size(), 1U);
  {
    pqxx::nontransaction q(conn);
    EXPECT_EQ(
        q.exec("SELECT count(*) FROM pg_prepared_statements WHERE name = 'test_read_binary'")[0][0]
            .as<int>(),
        1);
  }
  const int first = PQbackendPID(conn.handle());
  conn.disconnect();
  {
    pqxx::nontransaction q(conn);  // libpqxx reconnects on use
    q.exec("SELECT 1");
  }
  ASSERT_NE(conn.handle(), nullptr);
  ASSERT_NE(PQbackendPID(conn.handle()), first);  // (the handle may be at the same address)
  const auto rows =
      idemproxy::store::pg::read_binary_prepared(conn, prepared, "test_read_binary", sql, {"41"});
  EXPECT_EQ(rows.int4(0, 0), 42);
  EXPECT_EQ(prepared.backend, PQbackendPID(conn.handle()));
  EXPECT_THROW(idemproxy::store::pg::read_binary_prepared(conn, prepared, "test_read_binary_bad",
                                                          "SELECT nonsense(", {}),
               pqxx::sql_error);
}

// What only PgStore has, against a real PostgreSQL: migrations, the pool, a server
// that does not answer. What every store does is in store_contract_*_test.cpp.
#include "pg_store_fixture.hpp"

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

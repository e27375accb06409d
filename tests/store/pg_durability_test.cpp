// Issue 22: the store's own writes never commit asynchronously, whatever the servers'
// default synchronous_commit is (pool.hpp, Write; docs/SCALING.md, "Shard moves").
// The sessions here start at synchronous_commit=off, as a server configured so would
// start them (the test clusters run so: scripts/citus.sh).
#include "pg_store_fixture.hpp"
#include "store/pg/pool.hpp"

namespace pg = idemproxy::store::pg;

namespace {

// dsn() with a startup setting, as postgresql.conf or ALTER ROLE would give.
std::string dsn_with(const std::string& setting) {
  const std::string base = dsn();
  return base + (base.find('?') == std::string::npos ? "?" : "&") + "options=-c%20" + setting;
}

std::string show(pqxx::transaction_base& tx) {
  return tx.exec("SHOW synchronous_commit")[0][0].as<std::string>();
}

}  // namespace

TEST_F(PgStoreTest, APooledSessionCommitsSynchronouslyWhenTheServersDefaultIsOff) {
  if (citus()) GTEST_SKIP() << "on Citus every Write sets it (PgCitusTest below)";
  pg::Connection c(PgOptions{dsn_with("synchronous_commit%3Doff")});
  EXPECT_TRUE(c.local_sync().empty());  // the session holds it: autocommit costs nothing
  pqxx::nontransaction tx(c.raw());
  EXPECT_EQ(show(tx), "on");
}

TEST_F(PgStoreTest, AStrongerSettingThanOnIsKept) {
  if (citus()) GTEST_SKIP() << "on Citus every Write sets it (PgCitusTest below)";
  pg::Connection c(PgOptions{dsn_with("synchronous_commit%3Dremote_apply")});
  pqxx::nontransaction tx(c.raw());
  EXPECT_EQ(show(tx), "remote_apply");
}

// Behind a transaction pooler sessions do not last, so each Write sets it for its own
// transaction, and leaves the session (the pooler's) as it found it.
TEST_F(PgStoreTest, BehindATransactionPoolerEachWriteSetsItForItsTransaction) {
  if (citus()) GTEST_SKIP() << "on Citus every Write sets it (PgCitusTest below)";
  PgOptions o{dsn_with("synchronous_commit%3Doff")};
  o.transaction_pooling = true;
  pg::Connection c(o);
  EXPECT_EQ(c.local_sync(), "on");
  {
    pg::Write w(c);
    EXPECT_EQ(show(w.tx()), "on");
    w.commit();
  }
  pqxx::nontransaction after(c.raw());
  EXPECT_EQ(show(after), "off");
}

// On Citus a routed statement commits on a worker, in a session the coordinator opened
// there with the worker's defaults: the coordinator session's setting does not reach
// it, so a Write's SET LOCAL does, propagated (citus.propagate_set_commands = local).
// Read on the worker by a router query that Citus sends there whole.
TEST_F(PgStoreTest, OnCitusAWriteCommitsSynchronouslyOnTheWorker) {
  if (!citus()) GTEST_SKIP() << "needs the Citus cluster (IDEMPROXY_TEST_CITUS=1)";
  ASSERT_TRUE(store->claim(request("sync-on-worker")).ok());
  pg::Connection c(PgOptions{dsn()});
  EXPECT_EQ(c.local_sync(), "on");
  const std::string on_worker =
      "SELECT current_setting('synchronous_commit') FROM idempotency_records"
      " WHERE key = 'sync-on-worker'";
  {
    pqxx::nontransaction plain(c.raw());
    EXPECT_EQ(plain.exec(on_worker)[0][0].as<std::string>(), "off");  // the worker's own
  }
  pg::Write w(c);
  EXPECT_EQ(w.tx().exec(on_worker)[0][0].as<std::string>(), "on");
  w.commit();
}

// A record read from a real server's row (store/pg/row_codec.hpp): the columns found
// by name in any order, the first of a repeated name, a name that only looks like one
// of them left alone, a missing one refused by name, and bigints read exactly.
#include <climits>
#include <string>

#include "pg_store_fixture.hpp"
#include "store/pg/row_codec.hpp"

using idemproxy::store::pg::Columns;
using idemproxy::store::pg::RowCodec;

namespace {

// A completed record's columns, in the reverse of the order RETURNING gives them, so
// the row is read back and forth.
constexpr const char* kRecordReversed =
    "SELECT 1700000000123::bigint AS store_now_ms, NULL::text AS key_id, '\\x6f6b'::bytea AS body,"
    " NULL::bytea AS headers, 201 AS status, false AS stale, true AS expired,"
    " 1700000300000::bigint AS expires_ms, -5::bigint AS locked_ms,"
    " 1700000000000::bigint AS created_ms, '/orders' AS target, 'POST' AS method,"
    " 'orders' AS route, 9223372036854775807::bigint AS token, 'completed' AS state,"
    " 'fp' AS fingerprint, false AS claimed, 1700000000100::bigint AS completed_ms";

pqxx::result run(const std::string& sql) {
  pqxx::connection c(idemproxy::testing::dsn());
  pqxx::nontransaction tx(c);
  return tx.exec(sql);
}

}  // namespace

TEST_F(PgStoreTest, ARecordIsReadWhateverTheOrderOfItsColumns) {
  const pqxx::result rows = run(kRecordReversed);
  const Columns at(rows);
  EXPECT_EQ(at.store_now_ms, 0);
  EXPECT_EQ(at.claimed, 16);
  EXPECT_EQ(at.completed_ms, 17);
  EXPECT_EQ(at.replay_ms, -1);
  EXPECT_EQ(at.in_n, -1);
  const Record r = RowCodec(nullptr).read(rows[0], at, {"s", "k"});
  EXPECT_EQ(r.fingerprint, "fp");
  EXPECT_EQ(r.state, RecordState::completed);
  EXPECT_EQ(r.token, LLONG_MAX);
  EXPECT_EQ(r.route, "orders");
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.target, "/orders");
  EXPECT_EQ(r.created_at, TimePoint{std::chrono::milliseconds{1700000000000}});
  EXPECT_EQ(r.locked_until, TimePoint{std::chrono::milliseconds{-5}});
  EXPECT_EQ(r.expires_at, TimePoint{std::chrono::milliseconds{1700000300000}});
  EXPECT_EQ(r.completed_at, TimePoint{std::chrono::milliseconds{1700000000100}});
  EXPECT_EQ(r.store_now, TimePoint{std::chrono::milliseconds{1700000000123}});
  EXPECT_TRUE(r.expired);
  EXPECT_FALSE(r.stale);
  ASSERT_TRUE(r.response.has_value());
  EXPECT_EQ(r.response->status, 201);
  EXPECT_EQ(r.response->body, "ok");
}

TEST_F(PgStoreTest, ColumnsTakeTheFirstOfANameAndLeaveLookalikesAlone) {
  // "stxte" and "iz_n" share "state"'s and "in_n"'s length and ends, which place a
  // column; the name itself decides.
  const pqxx::result rows = run(
      "SELECT 1 AS stxte, 2 AS iz_n, 3 AS in_n, 4 AS state, 5 AS state, 6 AS watched, 7 AS chunk");
  const Columns at(rows);
  EXPECT_EQ(at.state, 3);
  EXPECT_EQ(at.in_n, 2);
  EXPECT_EQ(at.watched, 5);
  EXPECT_EQ(at.chunks, -1);
  EXPECT_EQ(Columns::required(at.in_n, "in_n"), 2);
  EXPECT_THROW(Columns::required(at.completion, "completion"), pqxx::argument_error);
  // Not a record: reading one names what is missing.
  try {
    at.require_record();
    FAIL() << "a result without the record's columns was taken";
  } catch (const pqxx::argument_error& e) {
    EXPECT_NE(std::string(e.what()).find("'claimed'"), std::string::npos) << e.what();
  }
}

TEST_F(PgStoreTest, BigintsAreReadExactlyAndNothingElseIsTakenForOne) {
  const pqxx::result rows =
      run("SELECT 0::bigint, '-9223372036854775808'::bigint, 9223372036854775807::bigint,"
          " NULL::bigint, '12x'::text, ''::text, '99999999999999999999'::text");
  const pqxx::row row = rows[0];
  EXPECT_EQ(idemproxy::store::pg::number(row[0]), 0);
  EXPECT_EQ(idemproxy::store::pg::number(row[1]), LLONG_MIN);
  EXPECT_EQ(idemproxy::store::pg::number(row[2]), LLONG_MAX);
  for (int i = 3; i < 7; ++i) {
    EXPECT_THROW(idemproxy::store::pg::number(row[i]), pqxx::conversion_error) << i;
  }
}

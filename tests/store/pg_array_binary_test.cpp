// The batch statements' arrays in PostgreSQL's binary form (store/pg/array_binary.hpp),
// read back by a real server element by element: what array_recv takes, and what it
// refuses.
#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "pg_store_fixture.hpp"
#include "store/pg/array_binary.hpp"

using idemproxy::store::pg::ArrayBinary;
using Of = ArrayBinary::Of;

namespace {
// Each element of `array`, sent as `type`[], as the server reads it back in text
// (NULL: none), in order.
std::vector<std::optional<std::string>> read_back(ArrayBinary array, const std::string& type) {
  pqxx::connection c(idemproxy::testing::dsn());
  pqxx::nontransaction tx(c);
  const pqxx::binarystring sent = std::move(array).done();
  const auto rows = tx.exec_params(
      "SELECT x::text FROM unnest($1::" + type + "[]) WITH ORDINALITY AS a(x, n) ORDER BY n", sent);
  std::vector<std::optional<std::string>> out;
  for (const auto& row : rows) {
    out.push_back(row[0].is_null() ? std::nullopt : std::optional(row[0].as<std::string>()));
  }
  return out;
}
}  // namespace

TEST_F(PgStoreTest, TextArraysInBinaryKeepEveryByteAndEveryNull) {
  const std::vector<std::string> texts = {
      "plain", "with \"quotes\"", "back\\slash", "{braces},comma", "NULL", "", "ünïcødé", " sp "};
  ArrayBinary a(Of::text);
  for (const auto& t : texts) a.add(t);
  a.add(static_cast<const char*>(nullptr));
  a.add_or_null(std::nullopt);
  a.add("last");
  const auto back = read_back(std::move(a), "text");
  ASSERT_EQ(back.size(), texts.size() + 3);
  for (std::size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(back[i], texts[i]) << i;
  EXPECT_EQ(back[texts.size()], std::nullopt);
  EXPECT_EQ(back[texts.size() + 1], std::nullopt);
  EXPECT_EQ(back[texts.size() + 2], "last");
}

TEST_F(PgStoreTest, ByteaArraysInBinaryCarryRawBytesNotHex) {
  std::string every_byte;
  for (int i = 0; i < 256; ++i) every_byte += static_cast<char>(i);
  ArrayBinary a(Of::bytea);
  a.add(every_byte);
  a.add(std::string("\\x00"));  // four characters, not one byte
  a.add_null();
  pqxx::connection c(idemproxy::testing::dsn());
  pqxx::nontransaction tx(c);
  const pqxx::binarystring sent = std::move(a).done();
  const auto rows = tx.exec_params(
      "SELECT length(x), md5(x), x IS NULL FROM unnest($1::bytea[]) WITH ORDINALITY AS a(x, n) "
      "ORDER BY n",
      sent);
  ASSERT_EQ(rows.size(), 3U);
  EXPECT_EQ(rows[0][0].as<int>(), 256);
  EXPECT_EQ(rows[0][1].as<std::string>(),
            tx.exec_params("SELECT md5($1::bytea)", pqxx::binarystring(every_byte))[0][0]
                .as<std::string>());
  EXPECT_EQ(rows[1][0].as<int>(), 4);
  EXPECT_TRUE(rows[2][2].as<bool>());
}

TEST_F(PgStoreTest, IntegerArraysInBinaryKeepTheirSignsAndExtremes) {
  ArrayBinary big(Of::int8);
  for (long long n : {0LL, 1LL, -1LL, 86400000LL, LLONG_MAX, LLONG_MIN}) big.add(n);
  EXPECT_EQ(read_back(std::move(big), "bigint"),
            (std::vector<std::optional<std::string>>{
                "0", "1", "-1", "86400000", "9223372036854775807", "-9223372036854775808"}));
  ArrayBinary small(Of::int4);
  for (int n : {201, -7, INT_MAX, INT_MIN}) small.add(n);
  small.add_null();
  EXPECT_EQ(read_back(std::move(small), "int"),
            (std::vector<std::optional<std::string>>{"201", "-7", "2147483647", "-2147483648",
                                                     std::nullopt}));
}

TEST_F(PgStoreTest, AnEmptyArrayInBinaryIsEmptyAndAWrongElementTypeIsRefused) {
  EXPECT_TRUE(read_back(ArrayBinary(Of::text), "text").empty());
  ArrayBinary numbers(Of::int8);
  numbers.add(5LL);
  // array_recv checks the element type against the parameter's: an int8 array is
  // never read as text.
  EXPECT_THROW(read_back(std::move(numbers), "text"), pqxx::sql_error);
}

#include "store/pg/binary_rows.hpp"

#include <arpa/inet.h>

#include <cstring>

namespace idemproxy::store::pg {

std::int32_t BinaryRows::int4(int row, int column) const {
  const std::string_view value = bytes(row, column);
  if (value.size() != sizeof(std::uint32_t)) {
    throw pqxx::conversion_error("an int4 in binary is " + std::to_string(value.size()) +
                                 " bytes, not 4");
  }
  std::uint32_t network = 0;
  std::memcpy(&network, value.data(), sizeof network);
  return static_cast<std::int32_t>(ntohl(network));
}

BinaryRows read_binary(HandleConnection& conn, const char* sql,
                       const std::vector<std::string>& params) {
  PGconn* handle = conn.handle();
  if (handle == nullptr || PQstatus(handle) != CONNECTION_OK) {
    throw pqxx::broken_connection("the connection to the database is closed");
  }
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p.c_str());
  BinaryRows rows(PQexecParams(handle, sql, static_cast<int>(values.size()), nullptr, values.data(),
                               nullptr, nullptr, /*resultFormat=*/1));
  if (const PGresult* r = rows.result(); r == nullptr || PQresultStatus(r) != PGRES_TUPLES_OK) {
    const std::string why = r != nullptr ? PQresultErrorMessage(r) : PQerrorMessage(handle);
    if (PQstatus(handle) != CONNECTION_OK) throw pqxx::broken_connection(why);
    throw pqxx::sql_error(why, sql);
  }
  return rows;
}

}  // namespace idemproxy::store::pg

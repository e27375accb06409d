#include "store/pg/binary_rows.hpp"

#include <arpa/inet.h>

#include <algorithm>
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

namespace {

PGconn* open_handle(HandleConnection& conn) {
  PGconn* handle = conn.handle();
  if (handle == nullptr || PQstatus(handle) != CONNECTION_OK) {
    throw pqxx::broken_connection("the connection to the database is closed");
  }
  return handle;
}

std::vector<const char*> values_of(const std::vector<std::string>& params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p.c_str());
  return values;
}

// Throws unless `result` is a statement's rows.
void check(PGconn* handle, const PGresult* result, ExecStatusType expected, const char* sql) {
  if (result != nullptr && PQresultStatus(result) == expected) return;
  const std::string why = result != nullptr ? PQresultErrorMessage(result) : PQerrorMessage(handle);
  if (PQstatus(handle) != CONNECTION_OK) throw pqxx::broken_connection(why);
  throw pqxx::sql_error(why, sql);
}

}  // namespace

bool BinaryPrepared::has(PGconn* conn, std::string_view name) {
  const int pid = PQbackendPID(conn);
  if (handle != conn || backend != pid) {
    handle = conn;
    backend = pid;
    names.clear();
  }
  return std::find(names.begin(), names.end(), name) != names.end();
}

BinaryRows read_binary(HandleConnection& conn, const char* sql,
                       const std::vector<std::string>& params) {
  PGconn* handle = open_handle(conn);
  const auto values = values_of(params);
  BinaryRows rows(PQexecParams(handle, sql, static_cast<int>(values.size()), nullptr, values.data(),
                               nullptr, nullptr, /*resultFormat=*/1));
  check(handle, rows.result(), PGRES_TUPLES_OK, sql);
  return rows;
}

BinaryRows read_binary_prepared(HandleConnection& conn, BinaryPrepared& prepared, const char* name,
                                const char* sql, const std::vector<std::string>& params) {
  PGconn* handle = open_handle(conn);
  if (!prepared.has(handle, name)) {
    const std::unique_ptr<PGresult, void (*)(PGresult*)> made(
        PQprepare(handle, name, sql, static_cast<int>(params.size()), nullptr), &PQclear);
    check(handle, made.get(), PGRES_COMMAND_OK, sql);
    prepared.names.emplace_back(name);
  }
  const auto values = values_of(params);
  BinaryRows rows(PQexecPrepared(handle, name, static_cast<int>(values.size()), values.data(),
                                 nullptr, nullptr, /*resultFormat=*/1));
  check(handle, rows.result(), PGRES_TUPLES_OK, sql);
  return rows;
}

}  // namespace idemproxy::store::pg

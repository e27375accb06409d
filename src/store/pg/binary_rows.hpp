#pragma once
// Rows read with their values in binary (libpq's result format 1): a bytea arrives as
// its bytes, not as hex text that doubles it on the wire and must be decoded. libpqxx
// 6.4 reads every result as text, so these statements go to libpq directly, on the
// handle of the pool's own connection (HandleConnection).
#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <pqxx/pqxx>
#include <string>
#include <string_view>
#include <vector>

namespace idemproxy::store::pg {

/// A libpqxx connection whose libpq handle is at hand (libpqxx 6.4 keeps its own
/// private). Its policy connects as pqxx::connection's does (connect_direct) and notes
/// each handle it opens, reopens or drops.
class HandleConnection : public pqxx::connection_base {
 public:
  explicit HandleConnection(const std::string& dsn) : connection_base(policy_), policy_(dsn) {
    init();
  }
  ~HandleConnection() noexcept { close(); }
  HandleConnection(const HandleConnection&) = delete;
  HandleConnection& operator=(const HandleConnection&) = delete;

  /// libpq's connection now; nullptr while it is closed.
  PGconn* handle() const { return policy_.current; }

 private:
  struct Policy : pqxx::connect_direct {
    using connect_direct::connect_direct;
    handle do_startconnect(handle h) override {
      return current = connect_direct::do_startconnect(h);
    }
    handle do_completeconnect(handle h) override {
      return current = connect_direct::do_completeconnect(h);
    }
    handle do_dropconnect(handle h) noexcept override {
      return current = connect_direct::do_dropconnect(h);
    }
    handle do_disconnect(handle h) noexcept override {
      return current = connect_direct::do_disconnect(h);
    }
    handle current = nullptr;
  };
  Policy policy_;
};

/// The rows of a statement read in binary; owns libpq's result.
class BinaryRows {
 public:
  explicit BinaryRows(PGresult* result) : result_(result, &PQclear) {}
  int size() const { return PQntuples(result_.get()); }
  bool is_null(int row, int column) const { return PQgetisnull(result_.get(), row, column) != 0; }
  /// The value's bytes as the server sent them in binary: a bytea's own bytes, an
  /// integer in network byte order.
  std::string_view bytes(int row, int column) const {
    return {PQgetvalue(result_.get(), row, column),
            static_cast<std::size_t>(PQgetlength(result_.get(), row, column))};
  }
  /// An int4 column's value.
  std::int32_t int4(int row, int column) const;
  const PGresult* result() const { return result_.get(); }

 private:
  std::unique_ptr<PGresult, void (*)(PGresult*)> result_;
};

/// Runs `sql`, which only reads, on `conn` outside any transaction of libpqxx's, with
/// `params` sent as text, and returns its rows in binary. Sent unnamed (parsed each
/// time), so it also runs through a transaction-pooling PgBouncer. Throws
/// pqxx::broken_connection when the connection is lost, pqxx::sql_error otherwise.
BinaryRows read_binary(HandleConnection& conn, const char* sql,
                       const std::vector<std::string>& params);

/// The statements a connection has prepared for read_binary_prepared, in the server
/// session they were prepared in: a reconnect's session has none, and its libpq handle
/// may sit at the old one's address, so the server process's id tells them apart too.
struct BinaryPrepared {
  PGconn* handle = nullptr;
  int backend = 0;  // PQbackendPID
  std::vector<std::string> names;

  /// Whether `name` is prepared in `conn`'s session now; a session other than the one
  /// these names were prepared in has none of them, and they are forgotten.
  bool has(PGconn* conn, std::string_view name);
};

/// As read_binary, with `sql` prepared once per connection as `name` (PQprepare), then
/// run by name: a replay reads a page of chunks at a time, and parsing and planning
/// each page's statement again was a measurable part of PostgreSQL's work. Not behind
/// a transaction-pooling PgBouncer, where a session's statements do not last.
BinaryRows read_binary_prepared(HandleConnection& conn, BinaryPrepared& prepared, const char* name,
                                const char* sql, const std::vector<std::string>& params);

}  // namespace idemproxy::store::pg

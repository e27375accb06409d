#pragma once
// One prepared statement sent and read with libpq's non-blocking calls, waiting for
// the connection's socket on the calling thread's event loop (common/reactor.hpp)
// instead of in libpq's poll on a thread of the store's. Group commit sends a batch
// this way from the proxy's I/O thread (group_commit_reactor.cpp).
#include <libpq-fe.h>

#include <functional>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "idemproxy/common/reactor.hpp"
#include "store/pg/pool.hpp"

namespace idemproxy::store::pg {

/// A parameter as libpq takes it: `format` 1 is binary, 0 text; a null `value` is
/// SQL NULL. The bytes stay the caller's until the statement's answer.
struct WireParam {
  const char* value;
  int length;
  int format;
};

/// How a statement sent on the loop ended.
struct ReactorAnswer {
  /// Its rows (text format, as libpqxx reads them), when it ran.
  std::optional<pqxx::result> rows;
  /// When it did not: whether the connection broke (the statement may or may not have
  /// run), or an SQL error answered it (it changed nothing).
  bool broken = false;
  std::string error;
};

/// Sends `statement` with `params` on `c` (prepared there first, once per session, as
/// its name + "_reactor"), and calls `done` on `loop` with its answer. `c` and the
/// params must stay until then; `c` is in libpq's non-blocking mode meanwhile, and
/// back in blocking mode when `done` is called. Only for a Connection whose statements
/// run in autocommit on plain PostgreSQL (Connection::on_reactor).
void send_on(common::Reactor& loop, Connection& c, const Statement& statement,
             std::vector<WireParam> params, std::function<void(ReactorAnswer)> done);

/// libpq's result `r` as libpqxx's, which then owns it.
pqxx::result adopt_result(PGresult* r);

}  // namespace idemproxy::store::pg

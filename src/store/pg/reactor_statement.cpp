#include "store/pg/reactor_statement.hpp"

#include <pqxx/internal/gates/result-creation.hxx>
#include <utility>

namespace idemproxy::store::pg {

// libpqxx 6.4 makes a result from libpq's only inside itself (result_creation, a gate
// for its connection and pipeline classes). An explicit instantiation may name a
// private member, so this one hands the gate's factory out; the result's constructor
// it calls is exported by the library.
namespace {
using MakeResult = pqxx::result (*)(pqxx::internal::pq::PGresult*, const std::string&,
                                    pqxx::internal::encoding_group);
MakeResult make_result();
template <MakeResult F>
struct Grant {
  friend MakeResult make_result() { return F; }
};
template struct Grant<&pqxx::internal::gate::result_creation::create>;
}  // namespace

pqxx::result adopt_result(PGresult* r) {
  static const std::string kQuery = "(a batch sent on the I/O thread)";
  return make_result()(r, kQuery, pqxx::internal::encoding_group::MONOBYTE);
}

namespace {

// The statement's way through libpq: prepare (once per session), send, flush, read.
struct Sent : std::enable_shared_from_this<Sent> {
  Sent(common::Reactor& l, Connection& conn, const Statement& s, std::vector<WireParam> p,
       std::function<void(ReactorAnswer)> d)
      : loop(l),
        c(conn),
        handle(conn.handle()),
        name(std::string(s.name) + "_reactor"),
        sql(s.sql),
        params(std::move(p)),
        done(std::move(d)) {}

  void start() {
    if (handle == nullptr || PQstatus(handle) != CONNECTION_OK) return fail(true, "closed");
    if (PQsetnonblocking(handle, 1) != 0) return fail(true, PQerrorMessage(handle));
    if (!c.binary_prepared().has(handle, name)) {
      preparing = true;
      if (PQsendPrepare(handle, name.c_str(), sql, static_cast<int>(params.size()), nullptr) == 0) {
        return fail(true, PQerrorMessage(handle));
      }
      return flush();
    }
    send();
  }

  void send() {
    std::vector<const char*> values;
    std::vector<int> lengths, formats;
    values.reserve(params.size());
    for (const WireParam& p : params) {
      values.push_back(p.value);
      lengths.push_back(p.length);
      formats.push_back(p.format);
    }
    if (PQsendQueryPrepared(handle, name.c_str(), static_cast<int>(params.size()), values.data(),
                            lengths.data(), formats.data(), /*resultFormat=*/0) == 0) {
      return fail(true, PQerrorMessage(handle));
    }
    flush();
  }

  // Writes what libpq holds; then reads.
  void flush() {
    const int left = PQflush(handle);
    if (left < 0) return fail(true, PQerrorMessage(handle));
    if (left == 0) return read();
    loop.wait(PQsocket(handle), true, [self = shared_from_this()](bool ready) {
      if (!ready) return self->fail(true, "the event loop stopped");
      self->flush();
    });
  }

  // Takes what arrived; every result of the command, then the next step.
  void read() {
    if (PQconsumeInput(handle) == 0) return fail(true, PQerrorMessage(handle));
    while (PQisBusy(handle) == 0) {
      PGresult* r = PQgetResult(handle);
      if (r == nullptr) return answered();
      if (first == nullptr) {
        first = r;
      } else {
        PQclear(r);
      }
    }
    loop.wait(PQsocket(handle), false, [self = shared_from_this()](bool ready) {
      if (!ready) return self->fail(true, "the event loop stopped");
      self->read();
    });
  }

  void answered() {
    PGresult* r = std::exchange(first, nullptr);
    const ExecStatusType status = r != nullptr ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (preparing) {
      preparing = false;
      const bool made = status == PGRES_COMMAND_OK;
      const std::string why = r != nullptr ? PQresultErrorMessage(r) : PQerrorMessage(handle);
      PQclear(r);
      if (!made) return fail(PQstatus(handle) != CONNECTION_OK, why);
      c.binary_prepared().names.push_back(name);
      return send();
    }
    if (status != PGRES_TUPLES_OK) {
      const std::string why = r != nullptr ? PQresultErrorMessage(r) : PQerrorMessage(handle);
      PQclear(r);
      return fail(PQstatus(handle) != CONNECTION_OK, why);
    }
    ReactorAnswer a;
    a.rows = adopt_result(r);
    finish(std::move(a));
  }

  void fail(bool broken, std::string why) {
    if (first != nullptr) PQclear(std::exchange(first, nullptr));
    ReactorAnswer a;
    a.broken = broken;
    a.error = std::move(why);
    finish(std::move(a));
  }

  void finish(ReactorAnswer a) {
    if (handle != nullptr && PQsetnonblocking(handle, 0) != 0) a.broken = true;
    std::exchange(done, nullptr)(std::move(a));
  }

  common::Reactor& loop;
  Connection& c;
  PGconn* handle;
  std::string name;
  const char* sql;
  std::vector<WireParam> params;
  std::function<void(ReactorAnswer)> done;
  bool preparing = false;
  PGresult* first = nullptr;
};

}  // namespace

void send_on(common::Reactor& loop, Connection& c, const Statement& statement,
             std::vector<WireParam> params, std::function<void(ReactorAnswer)> done) {
  std::make_shared<Sent>(loop, c, statement, std::move(params), std::move(done))->start();
}

}  // namespace idemproxy::store::pg

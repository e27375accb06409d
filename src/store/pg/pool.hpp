#pragma once
// The PostgreSQL store's connections: a fixed-size pool of libpq connections, each
// with every statement prepared once, and reconnection after the server restarts.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <pqxx/pqxx>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "idemproxy/store/pg_store.hpp"
#include "store/pg/binary_rows.hpp"
#include "store/pg/shard_map.hpp"
#include "store/pg/statements.hpp"

namespace idemproxy::store::pg {

/// A row that exists but cannot be opened: not a database failure, so the
/// connection stays in the pool.
class UnreadableRecord : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The session settings of a pooled connection (not sent through a
/// transaction-pooling PgBouncer, where sessions do not last).
std::vector<std::string> session_settings(const PgOptions& options, bool distributed);

/// One libpq connection. Each statement runs in autocommit mode, or in a Write: prepared
/// once per connection, or sent unnamed when a transaction-pooling PgBouncer is in the
/// path (its server connections change between transactions).
class Connection {
 public:
  explicit Connection(const PgOptions& options);

  /// Runs `statement` inside `tx`, a transaction on this connection.
  template <class... Args>
  pqxx::result exec(pqxx::transaction_base& tx, const Statement& statement, Args&&... args) {
    return prepared_ ? tx.exec_prepared(statement.name, std::forward<Args>(args)...)
                     : tx.exec_params(statement.sql, std::forward<Args>(args)...);
  }

  /// Runs `statement`, which only reads, on its own.
  template <class... Args>
  pqxx::result run(const Statement& statement, Args&&... args) {
    pqxx::nontransaction tx(conn_);
    return exec(tx, statement, std::forward<Args>(args)...);
  }

  /// Runs `statement`, which changes records, on its own in a Write: committed, and
  /// durable, when it returns.
  template <class... Args>
  pqxx::result write(const Statement& statement, Args&&... args);

  /// Runs a statement made for `n` records (claim_rows_sql, complete_rows_sql) inside
  /// `tx`: prepared once per size as `name`_n, or sent unnamed through a
  /// transaction-pooling PgBouncer.
  pqxx::result exec_rows(pqxx::transaction_base& tx, const char* name, std::string (*sql)(int),
                         int n, const std::vector<const char*>& params);

  /// As exec_rows, with `first` (text, or nullptr for NULL) and then `rest` sent in
  /// binary: no bytea travels as hex.
  pqxx::result exec_rows_binary(pqxx::transaction_base& tx, const char* name,
                                std::string (*sql)(int), int n, const char* first,
                                const std::vector<pqxx::binarystring>& rest);

  /// Tells every listening instance about `ids` on `channel` (kAnnounce), inside `tx`.
  void announce(pqxx::transaction_base& tx, const char* channel,
                const std::vector<const RecordId*>& ids);

  /// Runs `statement`, which only reads, on its own, and returns its rows in binary:
  /// prepared once per connection where sessions last (read_binary_prepared, named
  /// apart from libpqxx's statements), else sent unnamed (read_binary).
  BinaryRows read(const Statement& statement, const std::vector<std::string>& params) {
    if (!prepared_) return read_binary(conn_, statement.sql, params);
    return read_binary_prepared(conn_, binary_prepared_,
                                (std::string(statement.name) + "_binary").c_str(), statement.sql,
                                params);
  }

  pqxx::connection_base& raw() { return conn_; }
  /// libpq's connection now; nullptr while it is closed.
  PGconn* handle() const { return conn_.handle(); }
  /// The statements prepared apart from libpqxx's on this connection's session (read's,
  /// and those sent on an event loop: reactor_statement.hpp).
  BinaryPrepared& binary_prepared() { return binary_prepared_; }
  /// Whether a claim or completion batch may be sent on an event loop with libpq's
  /// non-blocking calls: its statements run in autocommit, durably, on plain
  /// PostgreSQL with prepared statements (not on Citus, nor behind a transaction pooler).
  bool on_reactor() const { return prepared_ && !distributed_ && local_sync_.empty(); }
  /// What a Write sets synchronous_commit to for its transaction (SET LOCAL), or empty
  /// when this session's own setting already makes every commit durable.
  const std::string& local_sync() const { return local_sync_; }
  /// Whether idempotency_records is a Citus distributed table here (PgOptions::citus).
  bool distributed() const { return distributed_; }
  /// The shards' hash ranges and workers (pg_dist_shard, pg_dist_placement).
  ShardMap read_shards();

 private:
  HandleConnection conn_;
  bool prepared_;
  bool distributed_;
  std::string local_sync_;
  std::set<std::string> prepared_rows_;  // exec_rows statements prepared here
  BinaryPrepared binary_prepared_;       // read's, on this connection's libpq handle
};

/// The transaction of statements that change records: committed durably, whatever the
/// servers' default synchronous_commit is (docs/SCALING.md, "Shard moves"). A claim
/// committed asynchronously is visible before its commit record reaches the disk, so a
/// crash can forget it, and a Citus shard move's final catch-up, which waits for the
/// WAL's write position, can leave it behind on the old placement: either way its
/// retry executes a second time.
/// - On plain PostgreSQL the pooled session holds synchronous_commit (set to on when
///   it is off), and the statements run in autocommit: this costs nothing.
/// - On Citus the worker that commits a routed statement runs it in a session of the
///   coordinator's, with the worker's defaults, so the setting goes with each
///   transaction: BEGIN, SET LOCAL synchronous_commit, which Citus sends to every
///   worker the transaction writes on (citus.propagate_set_commands = 'local'), the
///   statements, COMMIT. Behind a transaction-pooling PgBouncer, where sessions do not
///   last, likewise.
class Write {
 public:
  /// `atomic`: its statements commit together on plain PostgreSQL too.
  explicit Write(Connection& c, bool atomic = false);
  /// A transaction whose commit does not wait for the WAL's flush, on plain PostgreSQL
  /// (SET LOCAL synchronous_commit = off; on Citus it is a Write as above). For rows
  /// that a later durable commit checks before it relies on them: a streamed answer's
  /// chunks, which its completion counts. That commit flushes the WAL past them (the
  /// WAL is written in order), so a completed record's chunks are durable; a chunk a
  /// crash forgot before it leaves the count short, and the completion refused.
  struct FlushLater {};
  Write(Connection& c, FlushLater);
  pqxx::transaction_base& tx() { return *tx_; }
  void commit() { tx_->commit(); }

 private:
  std::unique_ptr<pqxx::transaction_base> tx_;
};

template <class... Args>
pqxx::result Connection::write(const Statement& statement, Args&&... args) {
  Write w(*this);
  pqxx::result r = exec(w.tx(), statement, std::forward<Args>(args)...);
  w.commit();
  return r;
}

class Pool {
 public:
  explicit Pool(const PgOptions& options) : options_(options) {}

  /// Runs `work` on a pooled connection. A broken connection (server restarted) is
  /// dropped and the work tried once more on a fresh one: every statement here is
  /// safe to repeat, because claims and completions are fenced by token.
  template <class T>
  Result<T> with_connection(const std::function<Result<T>(Connection&)>& work);

  /// Work owed to the database that no caller waits for: the withdrawal of a claim
  /// whose answer was lost (PgStore::claim). It runs on the next connection that
  /// works, before that connection's own work, so it also runs before a retry's claim
  /// of the same key. `run` returns whether it is done; if not, it runs again a
  /// second later, until `until`. A broken connection keeps it queued.
  struct Repair {
    std::function<bool(Connection&)> run;
    std::chrono::steady_clock::time_point until;
    std::chrono::steady_clock::time_point next_try{};
  };
  void defer(Repair repair);

  struct Usage {
    int open = 0;            // connections open now
    int in_use = 0;          // running a statement now
    int owed = 0;            // repairs waiting for a connection that works (defer)
    long long repaired = 0;  // repairs that reported done
  };
  Usage usage() const;

  /// An idle connection, or none (never waits, never connects), with no repair owed
  /// and not on Citus: for a batch sent on an event loop, which cannot block. Given
  /// back with give_back.
  std::unique_ptr<Connection> try_checkout();
  /// Returns a connection; nullptr gives back the slot of one that was dropped.
  void give_back(std::unique_ptr<Connection> conn);
  /// What the last connection used found (Connection::distributed), set once the shard
  /// map is read on it; false before any.
  bool distributed() const { return distributed_.load(std::memory_order_relaxed); }
  /// On Citus, the shard of `key`, and the worker that holds it, by the shard map
  /// last read; -1 elsewhere, or before any connection. The map is read again once a
  /// minute, so a rebalance that moved shards is seen. Until then a batch may span
  /// two workers: slower (a two-phase commit), never wrong, since Citus places every
  /// row itself.
  int shard_of(std::string_view key) const;
  int worker_of(std::string_view key) const;

 private:
  std::unique_ptr<Connection> checkout();
  std::shared_ptr<const ShardMap> shards() const;
  /// Reads the shard map on `c` when it is older than kShardsTtl: on the first
  /// statement on Citus, then once a minute.
  void refresh_shards(Connection& c);
  static constexpr std::chrono::seconds kShardsTtl{60};
  /// Runs the repairs that are due on `c`; rethrows a broken connection.
  void run_repairs(Connection& c);

  const PgOptions& options_;
  mutable std::mutex mu_;
  std::condition_variable available_;
  std::vector<std::unique_ptr<Connection>> idle_;
  int open_ = 0;
  std::vector<Repair> repairs_;
  long long repaired_ = 0;
  std::atomic<bool> owed_{false};  // repairs_ is not empty; read without the lock
  std::atomic<bool> distributed_{false};
  std::shared_ptr<const ShardMap> shards_;  // under mu_
  std::chrono::steady_clock::time_point shards_read_{};
};

template <class T>
Result<T> Pool::with_connection(const std::function<Result<T>(Connection&)>& work) {
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<Connection> conn;
    try {
      conn = checkout();  // on failure it has already given its slot back
    } catch (const std::exception& e) {
      return StoreError{StoreErrc::unavailable, std::string("database unreachable: ") + e.what()};
    }
    try {
      if (owed_.load(std::memory_order_relaxed)) run_repairs(*conn);
      if (conn->distributed()) refresh_shards(*conn);
      // Only now: on Citus, a caller told "distributed" can place its key
      // (worker_of), so it joins its worker's batch instead of running alone.
      distributed_.store(conn->distributed(), std::memory_order_relaxed);
      Result<T> result = work(*conn);
      give_back(std::move(conn));
      return result;
    } catch (const UnreadableRecord& e) {
      give_back(std::move(conn));  // the connection is fine; the row is not
      return StoreError{StoreErrc::unreadable, e.what()};
    } catch (const pqxx::broken_connection& e) {
      give_back(nullptr);
      if (attempt == 0) continue;  // a pooled connection the server dropped: retry fresh
      return StoreError{StoreErrc::unavailable, std::string("database unreachable: ") + e.what()};
    } catch (const std::exception& e) {
      // An SQL error or timeout leaves the session usable only after a rollback;
      // dropping the connection is simpler and rare.
      give_back(nullptr);
      return StoreError{StoreErrc::unavailable, std::string("database error: ") + e.what()};
    }
  }
}

}  // namespace idemproxy::store::pg

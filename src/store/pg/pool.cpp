#include "store/pg/pool.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <iterator>

#include "store/pg/array_text.hpp"

namespace idemproxy::store::pg {

std::vector<std::string> session_settings(const PgOptions& options, bool distributed) {
  std::vector<std::string> out{"SET statement_timeout = " +
                               std::to_string(options.statement_timeout.count())};
  if (!distributed) {
    // The multi-row statements take arrays; with the default plan cache mode each
    // execution is planned again (the planner sees the array length), which costs
    // more than running it (measured: 1.2 ms against 0.5 ms per one-row batch).
    // Every statement here is a primary-key lookup, for which the generic plan is
    // the plan. Not on Citus: its multi-row claim takes no arrays, it caches its own
    // router plans, and it cannot plan a multi-shard statement (GC, list) generically
    // from its parameters.
    out.emplace_back("SET plan_cache_mode = force_generic_plan");
    // A generic plan is made once, from what the table looked like then: a proxy
    // whose connections first ran their statements on an empty table (a new
    // deployment, or a fresh bench database) planned sequential scans and kept them
    // as the table grew. Measured: 3,451, then 1,816, then 1,457 fresh keys/s in
    // three 4 s runs, reading 11.5 million rows in the first, while a proxy started
    // later on the same database ran 8,361 with index scans only. Every statement
    // finds its rows by primary key (GC by expires_at's index): with sequential
    // scans priced out, the planner takes the index whatever the table's size.
    out.emplace_back("SET enable_seqscan = off");
    // The two statements no index serves (kList, kDropAnswers) still scan, at the
    // price enable_seqscan puts on it, far past jit_above_cost: each execution was
    // JIT-compiled, about 120 ms of database CPU for a 2 ms scan (measured on a
    // table of 1,900 rows). None of these statements gains from JIT.
    out.emplace_back("SET jit = off");
  } else {
    // A batch's statement that spans shards of one worker runs their tasks one after
    // another on one connection to it, not in parallel on several: measured with 8
    // claims per statement, 225 µs of database CPU per key against 355 µs
    // (docs/SCALING.md). GC's multi-shard DELETE runs sequentially too.
    out.emplace_back("SET citus.multi_shard_modify_mode = 'sequential'");
    // A Write's SET LOCAL synchronous_commit reaches the workers it writes on.
    out.emplace_back("SET citus.propagate_set_commands = 'local'");
  }
  // Never an asynchronous commit of the proxy's own (Write).
  out.emplace_back(
      "SELECT set_config('synchronous_commit', 'on', false)"
      " WHERE current_setting('synchronous_commit') = 'off'");
  return out;
}

Connection::Connection(const PgOptions& options)
    : conn_(options.dsn), prepared_(!options.transaction_pooling) {
  pqxx::nontransaction tx(conn_);
  distributed_ = options.citus.value_or(
      tx.exec("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")[0][0]
          .as<bool>());
  if (distributed_ || !prepared_) {
    // The session's setting, or on when it is off: a stronger one (remote_apply, with
    // synchronous standbys) is kept.
    local_sync_ = tx.exec(
                        "SELECT CASE current_setting('synchronous_commit') WHEN 'off' THEN 'on'"
                        " ELSE current_setting('synchronous_commit') END")[0][0]
                      .as<std::string>();
  }
  if (!prepared_) return;
  for (const auto& setting : session_settings(options, distributed_)) tx.exec(setting);
  tx.commit();
  for (const auto& s : kAll) conn_.prepare(s.name, s.sql);
}

namespace {

std::unique_ptr<pqxx::transaction_base> begin_durable(Connection& c, bool atomic) {
  if (c.local_sync().empty() && !atomic) return std::make_unique<pqxx::nontransaction>(c.raw());
  auto tx = std::make_unique<pqxx::work>(c.raw());
  if (c.local_sync().empty()) return tx;
  // Behind a transaction pooler the session's propagation setting did not last.
  tx->exec((c.distributed() ? "SET LOCAL citus.propagate_set_commands = 'local'; " : "") +
           std::string("SET LOCAL synchronous_commit = ") + c.local_sync());
  return tx;
}

std::unique_ptr<pqxx::transaction_base> begin_flush_later(Connection& c) {
  auto tx = std::make_unique<pqxx::work>(c.raw());
  tx->exec("SET LOCAL synchronous_commit = off");
  return tx;
}

}  // namespace

Write::Write(Connection& c, bool atomic) : tx_(begin_durable(c, atomic)) {}

// Not on Citus: a shard move's catch-up waits for the WAL's write position (Write, pool.hpp),
// which an asynchronous commit may not have reached, and a chunk left behind on the old
// placement would make its record indeterminate.
Write::Write(Connection& c, FlushLater)
    : tx_(c.distributed() ? begin_durable(c, false) : begin_flush_later(c)) {}

ShardMap Connection::read_shards() {
  pqxx::nontransaction tx(conn_);
  std::vector<ShardMap::Shard> shards;
  // One placement per shard (replication factor 1); with more, the lowest group.
  for (const auto& row : tx.exec(
           "SELECT DISTINCT ON (s.shardid) s.shardminvalue::int, s.shardmaxvalue::int, p.groupid"
           " FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)"
           " WHERE s.logicalrelid = 'idempotency_records'::regclass ORDER BY s.shardid, "
           "p.groupid")) {
    shards.push_back({row[0].as<std::int32_t>(), row[1].as<std::int32_t>(), row[2].as<int>()});
  }
  return ShardMap(std::move(shards));
}

pqxx::result Connection::exec_rows(pqxx::transaction_base& tx, const char* name,
                                   std::string (*sql)(int), int n,
                                   const std::vector<const char*>& params) {
  const auto values = pqxx::prepare::make_dynamic_params(params);
  if (!prepared_) return tx.exec_params(sql(n), values);
  const std::string sized = std::string(name) + "_" + std::to_string(n);
  if (prepared_rows_.insert(sized).second) conn_.prepare(sized, sql(n));
  return tx.exec_prepared(sized, values);
}

pqxx::result Connection::exec_rows_binary(pqxx::transaction_base& tx, const char* name,
                                          std::string (*sql)(int), int n, const char* first,
                                          const std::vector<pqxx::binarystring>& rest) {
  const auto values = pqxx::prepare::make_dynamic_params(rest);
  if (!prepared_) return tx.exec_params(sql(n), first, values);
  const std::string sized = std::string(name) + "_" + std::to_string(n);
  if (prepared_rows_.insert(sized).second) conn_.prepare(sized, sql(n));
  return tx.exec_prepared(sized, first, values);
}

void Connection::announce(pqxx::transaction_base& tx, const char* channel,
                          const std::vector<const RecordId*>& ids) {
  if (ids.empty()) return;
  ArrayText scopes, keys;
  for (const RecordId* id : ids) {
    scopes.add(id->scope);
    keys.add(id->key);
  }
  exec(tx, kAnnounce, channel, std::move(scopes).done(), std::move(keys).done());
}

std::unique_ptr<Connection> Pool::checkout() {
  {
    std::unique_lock lock(mu_);
    available_.wait(lock, [&] { return !idle_.empty() || open_ < options_.pool_size; });
    if (!idle_.empty()) {
      auto conn = std::move(idle_.back());
      idle_.pop_back();
      return conn;
    }
    ++open_;
  }
  try {
    return std::make_unique<Connection>(options_);
  } catch (...) {
    std::lock_guard lock(mu_);
    --open_;
    available_.notify_one();
    throw;
  }
}

std::unique_ptr<Connection> Pool::try_checkout() {
  if (owed_.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard lock(mu_);
  if (idle_.empty() || !idle_.back()->on_reactor()) return nullptr;
  auto conn = std::move(idle_.back());
  idle_.pop_back();
  return conn;
}

void Pool::give_back(std::unique_ptr<Connection> conn) {
  std::lock_guard lock(mu_);
  if (conn) {
    idle_.push_back(std::move(conn));
  } else {
    --open_;
  }
  available_.notify_one();
}

void Pool::defer(Repair repair) {
  std::lock_guard lock(mu_);
  // Bounded: a database away for long enough that this many claims lost their
  // answers leaves the oldest to their leases.
  constexpr std::size_t kMaxOwed = 10000;
  if (repairs_.size() >= kMaxOwed) {
    spdlog::warn("store: {} repairs are owed to the database; dropping the oldest", kMaxOwed);
    repairs_.erase(repairs_.begin());
  }
  repairs_.push_back(std::move(repair));
  owed_.store(true, std::memory_order_relaxed);
}

void Pool::run_repairs(Connection& c) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<Repair> due;
  {
    std::lock_guard lock(mu_);
    const auto later = std::stable_partition(repairs_.begin(), repairs_.end(),
                                             [&](const Repair& r) { return r.next_try > now; });
    due.assign(std::make_move_iterator(later), std::make_move_iterator(repairs_.end()));
    repairs_.erase(later, repairs_.end());
    owed_.store(!repairs_.empty(), std::memory_order_relaxed);
  }
  std::vector<Repair> again;
  long long done = 0;
  auto requeue = [&] {
    std::lock_guard lock(mu_);
    repaired_ += done;
    for (auto& r : again) repairs_.push_back(std::move(r));
    owed_.store(!repairs_.empty(), std::memory_order_relaxed);
  };
  std::size_t i = 0;
  try {
    for (; i < due.size(); ++i) {
      bool finished = false;
      try {
        finished = due[i].run(c);
      } catch (const pqxx::broken_connection&) {
        throw;
      } catch (const std::exception& e) {
        spdlog::warn("store: a repair failed: {}", e.what());
      }
      if (finished) {
        ++done;
      } else if (now < due[i].until) {
        due[i].next_try = now + std::chrono::seconds(1);
        again.push_back(std::move(due[i]));
      }
    }
  } catch (...) {
    for (; i < due.size(); ++i) again.push_back(std::move(due[i]));
    requeue();
    throw;
  }
  requeue();
}

std::shared_ptr<const ShardMap> Pool::shards() const {
  std::lock_guard lock(mu_);
  return shards_;
}

int Pool::shard_of(std::string_view key) const {
  const auto shards = this->shards();
  return shards ? shards->shard_of(key) : -1;
}

int Pool::worker_of(std::string_view key) const {
  const auto shards = this->shards();
  return shards ? shards->worker_of(key) : -1;
}

void Pool::refresh_shards(Connection& c) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mu_);
    if (shards_ && now < shards_read_ + kShardsTtl) return;
    shards_read_ = now;  // one refresh at a time
  }
  auto shards = std::make_shared<const ShardMap>(c.read_shards());
  std::lock_guard lock(mu_);
  shards_ = std::move(shards);
}

Pool::Usage Pool::usage() const {
  std::lock_guard lock(mu_);
  return {open_, open_ - static_cast<int>(idle_.size()), static_cast<int>(repairs_.size()),
          repaired_};
}

}  // namespace idemproxy::store::pg

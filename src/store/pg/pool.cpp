#include "store/pg/pool.hpp"

#include "store/pg/array_text.hpp"

namespace idemproxy::store::pg {

Connection::Connection(const PgOptions& options)
    : conn_(options.dsn), prepared_(!options.transaction_pooling) {
  pqxx::nontransaction tx(conn_);
  distributed_ = options.citus.value_or(
      tx.exec("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")[0][0]
          .as<bool>());
  if (!prepared_) return;
  tx.exec("SET statement_timeout = " + std::to_string(options.statement_timeout.count()));
  // The multi-row statements take arrays; with the default plan cache mode each
  // execution is planned again (the planner sees the array length), which costs
  // more than running it (measured: 1.2 ms against 0.5 ms per one-row batch). Every
  // statement here is a primary-key lookup, for which the generic plan is the plan.
  // Not on Citus: it runs no multi-row statements, caches its own router plans, and
  // cannot plan a multi-shard statement (GC, list) generically from its parameters.
  if (!distributed_) tx.exec("SET plan_cache_mode = force_generic_plan");
  tx.commit();
  for (const auto& s : kAll) conn_.prepare(s.name, s.sql);
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
    auto conn = std::make_unique<Connection>(options_);
    distributed_.store(conn->distributed(), std::memory_order_relaxed);
    return conn;
  } catch (...) {
    std::lock_guard lock(mu_);
    --open_;
    available_.notify_one();
    throw;
  }
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

Pool::Usage Pool::usage() const {
  std::lock_guard lock(mu_);
  return {open_, open_ - static_cast<int>(idle_.size())};
}

}  // namespace idemproxy::store::pg

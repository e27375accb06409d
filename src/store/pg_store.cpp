#include "idemproxy/store/pg_store.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <tuple>

#include "idemproxy/engine/hex.hpp"
#include "store/pg_statements.hpp"

namespace idemproxy::store {
namespace {
/// A row that exists but cannot be opened: not a database failure, so the
/// connection stays in the pool.
class UnreadableRecord : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
}  // namespace

/// One libpq connection. Each statement runs in autocommit mode: prepared once per
/// connection, or sent unnamed when a transaction-pooling PgBouncer is in the path
/// (its server connections change between transactions).
class PgStore::Connection {
 public:
  explicit Connection(const PgOptions& options)
      : conn_(options.dsn), prepared_(!options.transaction_pooling) {
    if (!prepared_) return;
    pqxx::nontransaction tx(conn_);
    tx.exec("SET statement_timeout = " + std::to_string(options.statement_timeout.count()));
    tx.commit();
    for (const auto& s : pg::kAll) conn_.prepare(s.name, s.sql);
  }

  /// Runs `statement` inside `tx`, a transaction on this connection.
  template <class... Args>
  pqxx::result exec(pqxx::transaction_base& tx, const pg::Statement& statement, Args&&... args) {
    return prepared_ ? tx.exec_prepared(statement.name, std::forward<Args>(args)...)
                     : tx.exec_params(statement.sql, std::forward<Args>(args)...);
  }

  /// Runs `statement` on its own, committed when it returns.
  template <class... Args>
  pqxx::result run(const pg::Statement& statement, Args&&... args) {
    pqxx::nontransaction tx(conn_);
    return exec(tx, statement, std::forward<Args>(args)...);
  }

  pqxx::connection& raw() { return conn_; }

 private:
  pqxx::connection conn_;
  bool prepared_;
};

PgStore::PgStore(PgOptions options) : options_(std::move(options)) {}

PgStore::~PgStore() {
  stopping_ = true;
  if (watcher_.joinable()) watcher_.join();
}

void PgStore::watch_purges(std::function<void(const RecordId&)> fn) {
  stopping_ = true;  // one watcher at a time; an empty fn just stops it
  if (watcher_.joinable()) watcher_.join();
  stopping_ = false;
  if (!fn) return;
  if (options_.transaction_pooling) {
    spdlog::warn("store.postgres.transaction_pooling: LISTEN does not survive a transaction "
                 "pooler, so purges by other instances do not reach this one's replay cache "
                 "(set replay_cache.max_bytes: 0 if purges must act at once everywhere)");
    return;
  }
  watcher_ = std::thread([this, fn = std::move(fn)] {
    struct Receiver final : pqxx::notification_receiver {
      Receiver(pqxx::connection_base& c, std::function<void(const RecordId&)> f)
          : pqxx::notification_receiver(c, "idemproxy_purge"), fn(std::move(f)) {}
      void operator()(const std::string& payload, int) override {
        const auto nl = payload.find('\n');
        if (nl != std::string::npos) fn({payload.substr(0, nl), payload.substr(nl + 1)});
      }
      std::function<void(const RecordId&)> fn;
    };
    while (!stopping_) {
      try {
        pqxx::connection conn(options_.dsn);
        Receiver receiver(conn, fn);
        while (!stopping_) conn.await_notification(0, 200'000);
      } catch (const std::exception& e) {
        spdlog::warn("purge listener: {}; reconnecting", e.what());
        for (int i = 0; i < 10 && !stopping_; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds{100});
        }
      }
    }
  });
}

std::unique_ptr<PgStore::Connection> PgStore::checkout() {
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

Store::PoolStats PgStore::pool_stats() {
  std::lock_guard lock(mu_);
  return {options_.pool_size, open_, open_ - static_cast<int>(idle_.size())};
}

void PgStore::give_back(std::unique_ptr<Connection> conn) {
  std::lock_guard lock(mu_);
  if (conn) {
    idle_.push_back(std::move(conn));
  } else {
    --open_;
  }
  available_.notify_one();
}

// Runs `work` on a pooled connection. A broken connection (server restarted) is
// dropped and the work tried once more on a fresh one: every statement here is
// safe to repeat, because claims and completions are fenced by token.
template <class T>
Result<T> PgStore::with_connection(const std::function<Result<T>(Connection&)>& work) {
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<Connection> conn;
    try {
      conn = checkout();  // on failure it has already given its slot back
    } catch (const std::exception& e) {
      return StoreError{StoreErrc::unavailable, std::string("database unreachable: ") + e.what()};
    }
    try {
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

// Group commit. A claim or completion joins the queue. If fewer batches are running
// than the pool has connections, its caller leads at once: it takes everything
// queued (up to batch_max), runs it in one transaction with one commit, and then
// wakes each member. Otherwise it waits, and the next free connection carries it
// together with whatever queued behind it. With no load, a batch holds one
// statement, run in autocommit as before; under load one commit (one WAL flush)
// serves many requests. Every member's answer is handed over only after the commit,
// so a claim is durable before its request goes upstream.
//
// Members run in (scope, key) order, so two batches touching the same keys take
// their row locks in the same order and cannot deadlock each other. Two claims of
// one key in one batch see each other, as in separate transactions: the later one
// finds the earlier one's row. If a batch fails (an SQL error, a lock timeout, a
// deadlock with a non-batched statement), it was rolled back whole, and each member
// runs again on its own, so one bad statement cannot fail its neighbours.
struct PgStore::Pending {
  const RecordId* id;
  const std::function<pqxx::result(pqxx::transaction_base&, Connection&)>* statement;
  Result<pqxx::result> rows{StoreError{StoreErrc::unavailable, "not run"}};
  bool done = false;
  std::condition_variable wake;
};

template <class T>
Result<T> PgStore::batched(
    const RecordId& id,
    const std::function<pqxx::result(pqxx::transaction_base&, Connection&)>& statement,
    const std::function<Result<T>(const pqxx::result&)>& decode) {
  Pending self{&id, &statement, {StoreError{}}, false, {}};
  {
    std::unique_lock lock(batch_mu_);
    queue_.push_back(&self);
    while (!self.done) {
      if (batches_running_ < options_.pool_size && !queue_.empty()) {
        const auto n = std::min<std::size_t>(queue_.size(), static_cast<std::size_t>(
                                                                std::max(options_.batch_max, 1)));
        std::vector<Pending*> batch(queue_.begin(), queue_.begin() + static_cast<long>(n));
        queue_.erase(queue_.begin(), queue_.begin() + static_cast<long>(n));
        ++batches_running_;
        // More queued and another connection free: let the next in line lead too.
        if (!queue_.empty() && batches_running_ < options_.pool_size) queue_.front()->wake.notify_one();
        lock.unlock();
        run_batch(batch);
        lock.lock();
        --batches_running_;
        ++batch_stats_.batches;
        batch_stats_.operations += static_cast<std::int64_t>(batch.size());
        for (Pending* p : batch) {
          p->done = true;
          if (p != &self) p->wake.notify_one();
        }
        if (!queue_.empty()) queue_.front()->wake.notify_one();
        continue;
      }
      self.wake.wait(lock);
    }
  }
  if (!self.rows.ok()) return self.rows.error();
  try {
    return decode(self.rows.value());
  } catch (const UnreadableRecord& e) {
    return StoreError{StoreErrc::unreadable, e.what()};
  } catch (const std::exception& e) {
    return StoreError{StoreErrc::unavailable, std::string("database error: ") + e.what()};
  }
}

void PgStore::run_batch(const std::vector<Pending*>& batch) {
  auto alone = [this](Pending& p) {
    p.rows = with_connection<pqxx::result>([&p](Connection& c) -> Result<pqxx::result> {
      pqxx::nontransaction tx(c.raw());
      return (*p.statement)(tx, c);
    });
  };
  if (batch.size() == 1) return alone(*batch.front());
  std::vector<Pending*> ordered(batch);
  std::stable_sort(ordered.begin(), ordered.end(), [](const Pending* a, const Pending* b) {
    return std::tie(a->id->scope, a->id->key) < std::tie(b->id->scope, b->id->key);
  });
  std::vector<pqxx::result> rows(ordered.size());
  const Result<Done> together = with_connection<Done>([&](Connection& c) -> Result<Done> {
    pqxx::work tx(c.raw());
    for (std::size_t i = 0; i < ordered.size(); ++i) rows[i] = (*ordered[i]->statement)(tx, c);
    tx.commit();
    return Done{};
  });
  if (together.ok()) {
    for (std::size_t i = 0; i < ordered.size(); ++i) ordered[i]->rows = std::move(rows[i]);
    return;
  }
  spdlog::warn("store: a batch of {} failed ({}); running each on its own", ordered.size(),
               together.error().detail);
  {
    std::lock_guard lock(batch_mu_);
    ++batch_stats_.fallbacks;
  }
  for (Pending* p : ordered) alone(*p);
}

PgStore::BatchStats PgStore::batch_stats() {
  std::lock_guard lock(batch_mu_);
  BatchStats s = batch_stats_;
  s.queued = static_cast<int>(queue_.size());
  return s;
}

namespace {

TimePoint from_ms(const pqxx::field& f) {
  return TimePoint{std::chrono::milliseconds{f.as<long long>()}};
}

// The authenticated context of a sealed field: the record and the field it belongs to.
std::string seal_context(const RecordId& id, std::string_view field) {
  std::string c = "idemproxy/v1";
  c += '\0';
  c += id.scope;
  c += '\0';
  c += id.key;
  c += '\0';
  c += field;
  return c;
}

}  // namespace

std::string PgStore::stored(std::string_view value, const RecordId& id,
                            std::string_view field) const {
  if (!options_.sealer) return std::string(value);
  return options_.sealer->seal(value, seal_context(id, field));
}

// Reads the columns listed in pg_statements.hpp; column 0 is "claimed".
Record PgStore::read_record(const pqxx::row& row, const RecordId& id, bool listing) const {
  // Column 15: the id of the key that sealed the row, NULL when it is in the clear.
  std::optional<std::string> key_id;
  if (!row[15].is_null()) key_id = row[15].as<std::string>();
  auto opened = [&](std::string value, std::string_view field) {
    if (!key_id) return value;
    if (!options_.sealer) {
      throw UnreadableRecord("record is sealed with key \"" + *key_id +
                             "\" but store.encryption is not configured");
    }
    auto plain = options_.sealer->open(*key_id, value, seal_context(id, field));
    if (!plain) {
      throw UnreadableRecord("record " + std::string(field) + " does not open with key \"" +
                             *key_id + "\" (key missing from store.encryption.key_file, or the "
                             "row was altered)");
    }
    return std::move(*plain);
  };
  Record r;
  r.id = id;
  r.fingerprint = row[1].as<std::string>();
  if (key_id) {
    try {
      r.fingerprint = opened(engine::from_hex(r.fingerprint).value_or(""), "fingerprint");
    } catch (const UnreadableRecord&) {
      if (!listing) throw;
      r.fingerprint = "(sealed with key " + *key_id + ")";
    }
  }
  r.state = parse_state(row[2].as<std::string>()).value_or(RecordState::in_flight);
  r.token = row[3].as<long long>();
  r.route = row[4].as<std::string>();
  r.method = row[5].as<std::string>();
  r.target = row[6].as<std::string>();
  r.created_at = from_ms(row[7]);
  r.locked_until = from_ms(row[8]);
  r.expires_at = from_ms(row[9]);
  r.expired = row[10].as<bool>();
  r.stale = row[11].as<bool>();
  if (r.state == RecordState::completed && !row[12].is_null()) {
    StoredResponse resp;
    resp.status = row[12].as<int>();
    if (!row[13].is_null()) {
      resp.headers = decode_headers(opened(pqxx::binarystring(row[13]).str(), "headers"));
    }
    if (!row[14].is_null()) resp.body = opened(pqxx::binarystring(row[14]).str(), "body");
    resp.body_stored = !row[14].is_null();
    r.response = std::move(resp);
  }
  return r;
}

Result<ClaimResult> PgStore::claim(const ClaimRequest& req) {
  const char* key_id = options_.sealer ? options_.sealer->current_id().c_str() : nullptr;
  const std::string fingerprint = options_.sealer
                                      ? engine::to_hex(stored(req.fingerprint, req.id, "fingerprint"))
                                      : req.fingerprint;
  const std::function<pqxx::result(pqxx::transaction_base&, Connection&)> statement =
      [&](pqxx::transaction_base& tx, Connection& c) {
        // Zero rows: a concurrent claim committed after our snapshot; it is visible now.
        pqxx::result r;
        for (int attempt = 0; attempt < 3 && r.empty(); ++attempt) {
          r = c.exec(tx, pg::kClaim, req.id.scope, req.id.key, fingerprint, req.route, req.method,
                     req.target, static_cast<long long>(req.lease.count()),
                     static_cast<long long>(req.ttl.count()), req.retake_stale, key_id);
        }
        return r;
      };
  const std::function<Result<ClaimResult>(const pqxx::result&)> decode =
      [&](const pqxx::result& r) -> Result<ClaimResult> {
    if (r.empty()) return StoreError{StoreErrc::unavailable, "claim found no row after three attempts"};
    Record record = read_record(r[0], req.id);
    if (r[0][0].as<bool>()) {
      return ClaimResult{Claimed{record.token, record.locked_until, r[0][16].as<bool>()}};
    }
    return ClaimResult{std::move(record)};
  };
  return batched(req.id, statement, decode);
}

Result<TimePoint> PgStore::complete(const RecordId& id, std::int64_t token,
                                    const StoredResponse& response, Duration ttl) {
  const char* key_id = options_.sealer ? options_.sealer->current_id().c_str() : nullptr;
  // A response too large to keep is recorded by its status alone: NULL headers and body.
  const pqxx::binarystring headers(
      response.body_stored ? stored(encode_headers(response.headers), id, "headers") : "");
  const pqxx::binarystring body(response.body_stored ? stored(response.body, id, "body") : "");
  const char* none = nullptr;
  const std::function<pqxx::result(pqxx::transaction_base&, Connection&)> statement =
      [&](pqxx::transaction_base& tx, Connection& c) {
        const long long ttl_ms = ttl.count();
        return response.body_stored
                   ? c.exec(tx, pg::kComplete, id.scope, id.key, static_cast<long long>(token),
                            response.status, headers, body, ttl_ms, key_id)
                   : c.exec(tx, pg::kComplete, id.scope, id.key, static_cast<long long>(token),
                            response.status, none, none, ttl_ms, key_id);
      };
  const std::function<Result<TimePoint>(const pqxx::result&)> decode =
      [](const pqxx::result& r) -> Result<TimePoint> {
    if (r.empty()) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
    return from_ms(r[0][0]);
  };
  return batched(id, statement, decode);
}

Result<Done> PgStore::release(const RecordId& id, std::int64_t token) {
  return with_connection<Done>([&](Connection& c) -> Result<Done> {
    const pqxx::result r = c.run(pg::kRelease, id.scope, id.key, static_cast<long long>(token));
    if (r.affected_rows() == 0) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
    return Done{};
  });
}

Result<Done> PgStore::mark_indeterminate(const RecordId& id, std::int64_t token) {
  return with_connection<Done>([&](Connection& c) -> Result<Done> {
    const pqxx::result r =
        c.run(pg::kMarkIndeterminate, id.scope, id.key, static_cast<long long>(token));
    if (r.affected_rows() == 0) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
    return Done{};
  });
}

Result<bool> PgStore::resolve(const RecordId& id) {
  return with_connection<bool>([&](Connection& c) -> Result<bool> {
    return c.run(pg::kResolve, id.scope, id.key).affected_rows() > 0;
  });
}

Result<std::optional<Record>> PgStore::find(const RecordId& id) {
  return with_connection<std::optional<Record>>(
      [&](Connection& c) -> Result<std::optional<Record>> {
        const pqxx::result r = c.run(pg::kFind, id.scope, id.key);
        if (r.empty()) return std::optional<Record>{};
        return std::optional<Record>{read_record(r[0], id)};
      });
}

Result<std::vector<Record>> PgStore::list(std::optional<RecordState> state, int limit) {
  return with_connection<std::vector<Record>>([&](Connection& c) -> Result<std::vector<Record>> {
    const std::string filter = state ? std::string(to_string(*state)) : std::string();
    std::vector<Record> out;
    for (const auto& row : c.run(pg::kList, filter, limit)) {
      out.push_back(
          read_record(row, {row[16].as<std::string>(), row[17].as<std::string>()}, true));
    }
    return out;
  });
}

Result<bool> PgStore::purge(const RecordId& id) {
  return with_connection<bool>([&](Connection& c) -> Result<bool> {
    return !c.run(pg::kPurge, id.scope, id.key).empty();
  });
}

Result<std::int64_t> PgStore::delete_expired(int limit) {
  return with_connection<std::int64_t>([&](Connection& c) -> Result<std::int64_t> {
    return static_cast<std::int64_t>(c.run(pg::kDeleteExpired, limit).affected_rows());
  });
}

Result<Done> PgStore::ping() {
  return with_connection<Done>([&](Connection& c) -> Result<Done> {
    c.run(pg::kPing);
    return Done{};
  });
}

}  // namespace idemproxy::store

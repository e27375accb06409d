#include "idemproxy/store/pg_store.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <pqxx/pqxx>

#include "idemproxy/common/hex.hpp"
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
    // The multi-row statements take arrays; with the default plan cache mode each
    // execution is planned again (the planner sees the array length), which costs
    // more than running it (measured: 1.2 ms against 0.5 ms per one-row batch). Every
    // statement here is a primary-key lookup, for which the generic plan is the plan.
    tx.exec("SET plan_cache_mode = force_generic_plan");
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
    spdlog::warn(
        "store.postgres.transaction_pooling: LISTEN does not survive a transaction "
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
  const BatchStats b = batch_stats();
  std::lock_guard lock(mu_);
  return {options_.pool_size, open_,        open_ - static_cast<int>(idle_.size()),
          b.batches,          b.operations, b.fallbacks};
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
// than batch_slots(), its caller leads at once: it takes everything
// queued (up to batch_max) and runs it, then wakes each member. Otherwise it waits,
// and the next free connection carries it together with whatever queued behind it.
// With no load a batch holds one request and runs the single-row statements; under
// load the claims of a batch go as one multi-row statement (kClaimMany) and its
// completions as another (kCompleteMany): one parse, one plan, one round trip and
// one commit (one WAL flush) for many requests. Every member's answer is handed
// over only after its statement has committed, so a claim is durable before its
// request goes upstream.
//
// Batches run on a quarter of the pool's connections (at least one): fewer batches
// at once means larger ones, and the database spends its time on rows rather than on
// commits. Measured with bench/ (PostgreSQL on one core, 64 clients, pool of 8):
// 5,500 fresh keys/s with 8 batches at once, 6,200 with 4, 6,400-6,900 with 2,
// 5,900 with 1. The rest of the pool serves lookups, releases and garbage collection.
//
// Two claims of one key in one batch: the first goes into the statement, and the
// later one gets the record as the first left it, as if it had run just after. If a
// multi-row statement fails (an SQL error, a timeout, a deadlock), it changed
// nothing, and each of its members runs again on its own, so one bad request cannot
// fail its neighbours.
struct PgStore::ClaimParams {
  const ClaimRequest& req;
  std::string fingerprint;  // as stored: sealed and hex-encoded under encryption
  const char* key_id;       // NULL in the clear
};

struct PgStore::CompleteParams {
  const RecordId& id;
  long long token;
  int status;
  std::optional<std::string> headers, body;  // as stored; none when not kept
  long long ttl_ms;
  const char* key_id;
};

// A member's rows: `row` indexes `rows` (-1: none came back); `repeat` says an
// earlier claim of the same key in the batch went first.
struct PgStore::Answer {
  pqxx::result rows;
  int row = -1;
  bool repeat = false;
};

struct PgStore::Pending {
  Pending(const RecordId& i, const ClaimParams* cl, const CompleteParams* co)
      : id(i), claim(cl), complete(co) {}
  const RecordId& id;
  const ClaimParams* claim;
  const CompleteParams* complete;
  Result<Answer> answer{StoreError{StoreErrc::unavailable, "not run"}};
  bool done = false;
  std::condition_variable wake;
};

template <class T>
Result<T> PgStore::batched(Pending& self, const std::function<Result<T>(const Answer&)>& decode) {
  {
    std::unique_lock lock(batch_mu_);
    queue_.push_back(&self);
    while (!self.done) {
      if (batches_running_ < batch_slots() && !queue_.empty()) {
        const auto n = std::min<std::size_t>(
            queue_.size(), static_cast<std::size_t>(std::max(options_.batch_max, 1)));
        std::vector<Pending*> batch(queue_.begin(), queue_.begin() + static_cast<long>(n));
        queue_.erase(queue_.begin(), queue_.begin() + static_cast<long>(n));
        ++batches_running_;
        // More queued and another connection free: let the next in line lead too.
        if (!queue_.empty() && batches_running_ < batch_slots()) queue_.front()->wake.notify_one();
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
  if (!self.answer.ok()) return self.answer.error();
  try {
    return decode(self.answer.value());
  } catch (const UnreadableRecord& e) {
    return StoreError{StoreErrc::unreadable, e.what()};
  } catch (const std::exception& e) {
    return StoreError{StoreErrc::unavailable, std::string("database error: ") + e.what()};
  }
}

namespace {

// PostgreSQL's text form of an array; std::nullopt elements are NULL.
class ArrayText {
 public:
  void add(std::string_view text) {
    next();
    out_ += '"';
    for (char ch : text) {
      if (ch == '"' || ch == '\\') out_ += '\\';
      out_ += ch;
    }
    out_ += '"';
  }
  void add(long long n) {
    next();
    out_ += std::to_string(n);
  }
  void add(const char* text) { text ? add(std::string_view(text)) : add_null(); }
  void add(const std::optional<std::string>& bytes, bool bytea) {
    if (!bytes) return add_null();
    bytea ? add("\\x" + to_hex(*bytes)) : add(*bytes);
  }
  void add_null() {
    next();
    out_ += "NULL";
  }
  std::string done() && { return std::move(out_) + '}'; }

 private:
  void next() {
    if (out_.size() > 1) out_ += ',';
  }
  std::string out_ = "{";
};

}  // namespace

// One member on its own: the single-row statement, in autocommit.
void PgStore::run_alone(Pending& p) {
  p.answer = with_connection<Answer>([&p](Connection& c) -> Result<Answer> {
    pqxx::nontransaction tx(c.raw());
    pqxx::result r;
    if (const ClaimParams* cl = p.claim) {
      // Zero rows: a concurrent claim committed after our snapshot; it is visible now.
      for (int attempt = 0; attempt < 3 && r.empty(); ++attempt) {
        r = c.exec(tx, pg::kClaim, cl->req.id.scope, cl->req.id.key, cl->fingerprint, cl->req.route,
                   cl->req.method, cl->req.target, static_cast<long long>(cl->req.lease.count()),
                   static_cast<long long>(cl->req.ttl.count()), cl->req.retake_stale, cl->key_id);
      }
    } else {
      const CompleteParams& co = *p.complete;
      if (co.body) {
        const pqxx::binarystring headers(co.headers.value_or(""));
        const pqxx::binarystring body(*co.body);
        r = c.exec(tx, pg::kComplete, co.id.scope, co.id.key, co.token, co.status, headers, body,
                   co.ttl_ms, co.key_id);
      } else {
        const char* none = nullptr;
        r = c.exec(tx, pg::kComplete, co.id.scope, co.id.key, co.token, co.status, none, none,
                   co.ttl_ms, co.key_id);
      }
    }
    return Answer{r, r.empty() ? -1 : 0, false};
  });
}

// Runs `members` as one multi-row statement; false when it failed (nothing changed).
// Claims must have distinct keys and one retake setting.
bool PgStore::run_many(const std::vector<Pending*>& members) {
  const bool claims = members.front()->claim != nullptr;
  std::vector<ArrayText> columns(claims ? 9 : 8);
  for (const Pending* p : members) {
    if (claims) {
      const ClaimParams& cl = *p->claim;
      const ClaimRequest& r = cl.req;
      columns[0].add(r.id.scope);
      columns[1].add(r.id.key);
      columns[2].add(cl.fingerprint);
      columns[3].add(r.route);
      columns[4].add(r.method);
      columns[5].add(r.target);
      columns[6].add(static_cast<long long>(r.lease.count()));
      columns[7].add(static_cast<long long>(r.ttl.count()));
      columns[8].add(cl.key_id);
    } else {
      const CompleteParams& co = *p->complete;
      columns[0].add(co.id.scope);
      columns[1].add(co.id.key);
      columns[2].add(co.token);
      columns[3].add(static_cast<long long>(co.status));
      columns[4].add(co.body ? co.headers : std::nullopt, true);
      columns[5].add(co.body, true);
      columns[6].add(co.ttl_ms);
      columns[7].add(co.key_id);
    }
  }
  std::vector<std::string> a;
  for (auto& col : columns) a.push_back(std::move(col).done());
  const Result<pqxx::result> rows =
      with_connection<pqxx::result>([&](Connection& c) -> Result<pqxx::result> {
        pqxx::nontransaction tx(c.raw());
        if (claims) {
          return c.exec(tx, pg::kClaimMany, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8],
                        members.front()->claim->req.retake_stale);
        }
        return c.exec(tx, pg::kCompleteMany, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
      });
  if (!rows.ok()) {
    // Not the error text: PostgreSQL may quote the arrays, and keys stay out of logs.
    spdlog::warn("store: a batch of {} {} failed; running each on its own", members.size(),
                 claims ? "claims" : "completions");
    std::lock_guard lock(batch_mu_);
    ++batch_stats_.fallbacks;
    return false;
  }
  for (Pending* p : members) p->answer = Answer{rows.value(), -1, false};
  for (int i = 0; i < static_cast<int>(rows.value().size()); ++i) {
    const auto n = rows.value()[i]["in_n"].as<std::size_t>();
    if (n >= 1 && n <= members.size()) members[n - 1]->answer.value().row = i;
  }
  return true;
}

void PgStore::run_batch(const std::vector<Pending*>& batch) {
  if (batch.size() == 1) return run_alone(*batch.front());
  // Claims by retake setting, each key once; completions; later claims of a key,
  // each with the first claim of its key.
  std::vector<Pending*> claims[2], completions;
  std::vector<std::pair<Pending*, const Pending*>> repeats;
  std::map<std::pair<std::string_view, std::string_view>, const Pending*> first_claims;
  for (Pending* p : batch) {
    if (!p->claim) {
      completions.push_back(p);
    } else if (auto [at, fresh] = first_claims.try_emplace({p->id.scope, p->id.key}, p); fresh) {
      claims[p->claim->req.retake_stale ? 1 : 0].push_back(p);
    } else {
      repeats.emplace_back(p, at->second);
    }
  }
  for (auto* group : {&claims[0], &claims[1], &completions}) {
    if (group->size() == 1 || (!group->empty() && !run_many(*group))) {
      for (Pending* p : *group) run_alone(*p);
    }
  }
  // A claim that saw no row (a concurrent claim committed after the statement's
  // snapshot) runs on its own, and then sees that claim.
  for (auto* group : {&claims[0], &claims[1]}) {
    for (Pending* p : *group) {
      if (p->answer.ok() && p->answer.value().row < 0) run_alone(*p);
    }
  }
  // A later claim of a key gets what the first left: never a second claim.
  for (auto [p, first] : repeats) {
    if (first->answer.ok() && first->answer.value().row >= 0) {
      p->answer = first->answer;
      p->answer.value().repeat = true;
    } else {
      run_alone(*p);
    }
  }
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
                             *key_id +
                             "\" (key missing from store.encryption.key_file, or the "
                             "row was altered)");
    }
    return std::move(*plain);
  };
  Record r;
  r.id = id;
  r.fingerprint = row[1].as<std::string>();
  if (key_id) {
    try {
      r.fingerprint = opened(from_hex(r.fingerprint).value_or(""), "fingerprint");
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
  r.store_now = from_ms(row["store_now_ms"]);
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
  const ClaimParams params{
      req,
      options_.sealer ? to_hex(stored(req.fingerprint, req.id, "fingerprint")) : req.fingerprint,
      options_.sealer ? options_.sealer->current_id().c_str() : nullptr};
  Pending self{req.id, &params, nullptr};
  return batched<ClaimResult>(self, [&](const Answer& a) -> Result<ClaimResult> {
    if (a.row < 0)
      return StoreError{StoreErrc::unavailable, "claim found no row after three attempts"};
    const pqxx::row row = a.rows[a.row];
    Record record = read_record(row, req.id);
    if (row[0].as<bool>() && !a.repeat) {
      return ClaimResult{Claimed{record.token, record.locked_until, row["took_over"].as<bool>()}};
    }
    return ClaimResult{std::move(record)};
  });
}

Result<TimePoint> PgStore::complete(const RecordId& id, std::int64_t token,
                                    const StoredResponse& response, Duration ttl) {
  // A response too large to keep is recorded by its status alone: NULL headers and body.
  CompleteParams params{id,
                        static_cast<long long>(token),
                        response.status,
                        std::nullopt,
                        std::nullopt,
                        static_cast<long long>(ttl.count()),
                        options_.sealer ? options_.sealer->current_id().c_str() : nullptr};
  if (response.body_stored) {
    params.headers = stored(encode_headers(response.headers), id, "headers");
    params.body = stored(response.body, id, "body");
  }
  Pending self{id, nullptr, &params};
  auto decode = [](const Answer& a) -> Result<TimePoint> {
    if (a.row < 0) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
    return from_ms(a.rows[a.row][0]);
  };
  // Large bodies skip batching: in an array they would travel as hex text.
  if (params.body && params.body->size() + params.headers->size() > kBatchedBodyMax) {
    run_alone(self);
    if (!self.answer.ok()) return self.answer.error();
    return decode(self.answer.value());
  }
  return batched<TimePoint>(self, decode);
}

Result<Done> PgStore::release(const RecordId& id, std::int64_t token) {
  return with_connection<Done>([&](Connection& c) -> Result<Done> {
    const pqxx::result r = c.run(pg::kRelease, id.scope, id.key, static_cast<long long>(token));
    if (r.affected_rows() == 0) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
    return Done{};
  });
}

Result<TimePoint> PgStore::renew(const RecordId& id, std::int64_t token, Duration lease) {
  return with_connection<TimePoint>([&](Connection& c) -> Result<TimePoint> {
    const pqxx::result r =
        c.run(pg::kRenew, id.scope, id.key, static_cast<long long>(token),
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(lease).count()));
    if (r.empty()) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
    return TimePoint{std::chrono::milliseconds{r[0][0].as<long long>()}};
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
          read_record(row, {row["scope"].as<std::string>(), row["key"].as<std::string>()}, true));
    }
    return out;
  });
}

Result<bool> PgStore::purge(const RecordId& id) {
  return with_connection<bool>(
      [&](Connection& c) -> Result<bool> { return !c.run(pg::kPurge, id.scope, id.key).empty(); });
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

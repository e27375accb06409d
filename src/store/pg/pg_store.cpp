// The PostgreSQL store: each call is one statement (or one member of a group-commit
// batch) on a pooled connection. The parts: pool.hpp, group_commit.hpp,
// row_codec.hpp, notification_listener.hpp; every statement is in statements.hpp.
#include "idemproxy/store/pg_store.hpp"

#include <spdlog/spdlog.h>

#include <random>

#include "idemproxy/common/hex.hpp"
#include "store/pg/group_commit.hpp"
#include "store/pg/notification_listener.hpp"
#include "store/pg/row_codec.hpp"

namespace idemproxy::store {
namespace {

using pg::Connection;

/// A claim's claim_nonce: random, so a claim sent again finds its own row and no other.
long long claim_nonce() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  return static_cast<long long>(random());
}

}  // namespace

struct PgStore::Impl {
  explicit Impl(PgOptions o)
      : options(std::move(o)),
        pool(options),
        codec(options.sealer),
        batches(pool, options),
        listener(options.dsn) {}

  /// Runs one statement on a pooled connection.
  template <class T>
  Result<T> with(const std::function<Result<T>(Connection&)>& work) {
    return pool.with_connection<T>(work);
  }

  /// Runs `statement`, which ends the holder's claim; fenced when it changed no row.
  /// Announces the finish when another instance's request waits for it (watched).
  Result<Done> fenced_finish(const pg::Statement& statement, const RecordId& id,
                             std::int64_t token) {
    return with<Done>([&](Connection& c) -> Result<Done> {
      pqxx::nontransaction tx(c.raw());
      const pqxx::result r = c.exec(tx, statement, id.scope, id.key, static_cast<long long>(token));
      if (r.empty()) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
      if (r[0]["watched"].as<bool>()) c.announce(tx, pg::kDoneChannel, {&id});
      return Done{};
    });
  }

  /// Withdraws the claim of `id` with `nonce` (kWithdraw) on the pool's next working
  /// connection. Tried again while it finds nothing, until the lease is over: a
  /// connection that broke may leave its statement running a little longer.
  void withdraw(const RecordId& id, long long nonce, Duration lease) {
    spdlog::debug("store: a claim went unanswered; it is withdrawn once the database answers");
    pool.defer({[id, nonce](Connection& c) {
                  pqxx::nontransaction tx(c.raw());
                  const pqxx::result r = c.exec(tx, pg::kWithdraw, id.scope, id.key, nonce);
                  if (r.empty()) return false;
                  if (r[0]["watched"].as<bool>()) c.announce(tx, pg::kDoneChannel, {&id});
                  return true;
                },
                std::chrono::steady_clock::now() + lease});
  }

  PgOptions options;
  pg::Pool pool;
  pg::RowCodec codec;
  pg::GroupCommit batches;
  pg::NotificationListener listener;
};

PgStore::PgStore(PgOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

PgStore::~PgStore() = default;

void PgStore::watch(Watchers watchers) {
  impl_->listener.stop();  // one watcher at a time; empty watchers just stop it
  if (!watchers.purged && !watchers.finished) return;
  if (impl_->options.transaction_pooling) {
    spdlog::warn(
        "store.postgres.transaction_pooling: LISTEN does not survive a transaction "
        "pooler, so purges by other instances do not reach this one's replay cache "
        "(set replay_cache.max_bytes: 0 if purges must act at once everywhere), and "
        "requests waiting for another instance's key re-check it on a backoff");
    return;
  }
  impl_->listener.start(std::move(watchers));
}

bool PgStore::announces_finishes() const { return !impl_->options.transaction_pooling; }

Result<bool> PgStore::watch_record(const RecordId& id) {
  return impl_->with<bool>([&](Connection& c) -> Result<bool> {
    return c.run(pg::kWatch, id.scope, id.key).affected_rows() > 0;
  });
}

std::vector<Store::Sample> PgStore::stats() {
  const BatchStats b = batch_stats();
  const pg::Pool::Usage u = impl_->pool.usage();
  return {
      {"idemproxy_db_pool_connections{state=\"open\"}", "Database pool connections.",
       static_cast<double>(u.open)},
      {"idemproxy_db_pool_connections{state=\"in_use\"}", "Database pool connections.",
       static_cast<double>(u.in_use)},
      {"idemproxy_db_pool_size", "Configured database pool size.",
       static_cast<double>(impl_->options.pool_size)},
      {"idemproxy_db_withdrawals_pending",
       "Unanswered claims waiting to be withdrawn when the database answers.",
       static_cast<double>(u.owed)},
      {"idemproxy_db_withdrawals_total",
       "Unanswered claims found committed and withdrawn, so their retries could execute.",
       static_cast<double>(u.repaired), true},
      {"idemproxy_db_batches_total",
       "Transactions that carried claims and completions (group commit).",
       static_cast<double>(b.batches), true},
      {"idemproxy_db_batched_operations_total",
       "Claims and completions carried by those transactions.", static_cast<double>(b.operations),
       true},
      {"idemproxy_db_batch_fallbacks_total",
       "Multi-row statements that failed and ran again one statement each.",
       static_cast<double>(b.fallbacks), true},
  };
}

PgStore::BatchStats PgStore::batch_stats() { return impl_->batches.stats(); }

Result<ClaimResult> PgStore::claim(const ClaimRequest& req) {
  const pg::RowCodec& codec = impl_->codec;
  const pg::ClaimParams params{req,
                               codec.sealing()
                                   ? to_hex(codec.stored(req.fingerprint, req.id, "fingerprint"))
                                   : req.fingerprint,
                               codec.key_id(), claim_nonce()};
  pg::Pending self{req.id, &params, nullptr};
  auto decode = [&](const pg::Answer& a) -> Result<ClaimResult> {
    if (a.row < 0) {
      return StoreError{StoreErrc::unavailable, "claim found no row after three attempts"};
    }
    const pg::Columns at(a.rows);
    const pqxx::row row = a.rows[a.row];
    Record record = codec.read(row, at, req.id);
    if (row[at.claimed].as<bool>() && !a.repeat) {
      return ClaimResult{Claimed{record.token, record.locked_until, row[at.took_over].as<bool>()}};
    }
    return ClaimResult{std::move(record)};
  };
  Result<ClaimResult> result = impl_->batches.run<ClaimResult>(self, decode);
  // Unanswered: the claim may still have committed (its connection broke after
  // sending it, and sending it again failed too). The caller answers without the
  // upstream, so withdraw it once the database answers, or the client's retry would
  // find it in flight until its lease ran out. Withdrawing a claim that never
  // committed changes nothing.
  if (!result.ok() && result.error().code == StoreErrc::unavailable) {
    impl_->withdraw(req.id, params.nonce, req.lease);
  }
  return result;
}

Result<TimePoint> PgStore::complete(const RecordId& id, std::int64_t token,
                                    const StoredResponse& response, Duration ttl) {
  const pg::RowCodec& codec = impl_->codec;
  // A response too large to keep is recorded by its status alone: NULL headers and body.
  pg::CompleteParams params{
      id,           static_cast<long long>(token),       response.status, std::nullopt,
      std::nullopt, static_cast<long long>(ttl.count()), codec.key_id()};
  if (response.body_stored) {
    params.headers = codec.stored(encode_headers(response.headers), id, "headers");
    params.body = codec.stored(response.body, id, "body");
  }
  pg::Pending self{id, nullptr, &params};
  auto decode = [](const pg::Answer& a) -> Result<TimePoint> {
    if (a.row < 0) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
    return pg::from_ms(a.rows[a.row][0]);
  };
  // Large bodies skip batching: in an array they would travel as hex text.
  if (params.body && params.body->size() + params.headers->size() > kBatchedBodyMax) {
    impl_->batches.run_alone(self);
    if (!self.answer.ok()) return self.answer.error();
    return decode(self.answer.value());
  }
  return impl_->batches.run<TimePoint>(self, decode);
}

Result<Done> PgStore::release(const RecordId& id, std::int64_t token) {
  return impl_->fenced_finish(pg::kRelease, id, token);
}

Result<Done> PgStore::mark_indeterminate(const RecordId& id, std::int64_t token) {
  return impl_->fenced_finish(pg::kMarkIndeterminate, id, token);
}

Result<TimePoint> PgStore::renew(const RecordId& id, std::int64_t token, Duration lease) {
  return impl_->with<TimePoint>([&](Connection& c) -> Result<TimePoint> {
    const pqxx::result r =
        c.run(pg::kRenew, id.scope, id.key, static_cast<long long>(token),
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(lease).count()));
    if (r.empty()) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
    return pg::from_ms(r[0][0]);
  });
}

Result<bool> PgStore::resolve(const RecordId& id) {
  return impl_->with<bool>([&](Connection& c) -> Result<bool> {
    return c.run(pg::kResolve, id.scope, id.key).affected_rows() > 0;
  });
}

Result<std::optional<Record>> PgStore::find(const RecordId& id) {
  return impl_->with<std::optional<Record>>([&](Connection& c) -> Result<std::optional<Record>> {
    const pqxx::result r = c.run(pg::kFind, id.scope, id.key);
    if (r.empty()) return std::optional<Record>{};
    return std::optional<Record>{impl_->codec.read(r[0], pg::Columns(r), id)};
  });
}

Result<std::vector<Record>> PgStore::list(std::optional<RecordState> state, int limit) {
  return impl_->with<std::vector<Record>>([&](Connection& c) -> Result<std::vector<Record>> {
    const std::string filter = state ? std::string(to_string(*state)) : std::string();
    const pqxx::result rows = c.run(pg::kList, filter, limit);
    const pg::Columns at(rows);
    const auto scope = rows.column_number("scope");
    const auto key = rows.column_number("key");
    std::vector<Record> out;
    for (const auto& row : rows) {
      const RecordId id{row[scope].as<std::string>(), row[key].as<std::string>()};
      out.push_back(impl_->codec.read(row, at, id, true));
    }
    return out;
  });
}

Result<bool> PgStore::purge(const RecordId& id) {
  // The deletion and its announcement commit together (on Citus, the NOTIFY is the
  // coordinator's, where the listeners are).
  return impl_->with<bool>([&](Connection& c) -> Result<bool> {
    pqxx::work tx(c.raw());
    const bool purged = c.exec(tx, pg::kPurge, id.scope, id.key).affected_rows() > 0;
    if (purged) c.announce(tx, pg::kPurgeChannel, {&id});
    tx.commit();
    return purged;
  });
}

Result<std::int64_t> PgStore::delete_expired(int limit) {
  return impl_->with<std::int64_t>([&](Connection& c) -> Result<std::int64_t> {
    return static_cast<std::int64_t>(c.run(pg::kDeleteExpired, limit).affected_rows());
  });
}

Result<Done> PgStore::ping() {
  return impl_->with<Done>([&](Connection& c) -> Result<Done> {
    c.run(pg::kPing);
    return Done{};
  });
}

}  // namespace idemproxy::store

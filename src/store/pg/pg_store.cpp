// The PostgreSQL store: each call is one statement (or one member of a group-commit
// batch) on a pooled connection. The parts: pool.hpp, group_commit.hpp,
// chunk_commit.hpp, row_codec.hpp, notification_listener.hpp (held together in
// pg_store_impl.hpp); every statement is in statements.hpp. Streamed answers' chunks
// are in pg_store_chunks.cpp.
#include <random>

#include "idemproxy/common/hex.hpp"
#include "store/pg/pg_store_impl.hpp"

namespace idemproxy::store {
namespace {

using pg::Connection;

/// A claim's claim_nonce: random, so a claim sent again finds its own row and no other.
long long claim_nonce() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  return static_cast<long long>(random());
}

}  // namespace

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
    pg::Write w(c);
    const pqxx::result r = c.exec(w.tx(), pg::kWatch, id.scope, id.key);
    if (!r.empty()) c.announce(w.tx(), pg::kWatchChannel, {&id});
    w.commit();
    return !r.empty() && !r[0][0].as<bool>();
  });
}

std::vector<Store::Sample> PgStore::stats() {
  const BatchStats b = batch_stats();
  const pg::Pool::Usage u = impl_->pool.usage();
  const pg::ChunkCommit::Stats ch = impl_->chunks.stats();
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
      {"idemproxy_db_batches_on_loop_total",
       "Of those, batches sent and read on an I/O thread's event loop, with no thread of the "
       "store's woken.",
       static_cast<double>(b.on_loop), true},
      {"idemproxy_db_batch_fallbacks_total",
       "Multi-row statements that failed and ran again one statement each.",
       static_cast<double>(b.fallbacks), true},
      {"idemproxy_db_chunk_batches_total",
       "Transactions that stored chunks of streamed answers (group commit).",
       static_cast<double>(ch.batches), true},
      {"idemproxy_db_chunks_stored_total", "Chunks of streamed answers stored.",
       static_cast<double>(ch.chunks), true},
      {"idemproxy_db_chunk_bytes_stored_total",
       "Bytes of streamed answers stored in chunks (as stored: sealed under encryption).",
       static_cast<double>(ch.bytes), true},
  };
}

PgStore::BatchStats PgStore::batch_stats() { return impl_->batches.stats(); }

// The group-commit calls. Each is a heap object that lives until its answer is
// handed over: the caller may be an I/O thread that went on (claim_async).
struct PgStore::ClaimCall {
  ClaimCall(const ClaimRequest& req, const pg::RowCodec& codec, ClaimDone d)
      : params{req, codec.key_id(), claim_nonce(), pg::quota_text(req.quota)},
        self{req.id, &params, nullptr},
        done(std::move(d)) {
    if (codec.sealing()) {
      params.sealed_fingerprint = to_hex(codec.stored(req.fingerprint, req.id, "fingerprint"));
    }
  }
  pg::ClaimParams params;
  pg::Pending self;
  ClaimDone done;
};

struct PgStore::CompleteCall {
  CompleteCall(const RecordId& id, std::int64_t token, const StoredResponse& response,
               Retention keep, const pg::RowCodec& codec, CompleteDone d)
      : params{id,
               static_cast<long long>(token),
               response.status,
               std::nullopt,
               nullptr,
               static_cast<long long>(keep.record.count()),
               codec.key_id(),
               static_cast<long long>(keep.answer.count())},
        self{id, nullptr, &params},
        done(std::move(d)) {
    // A response too large to keep is recorded by its status alone: NULL headers and
    // body.
    if (response.body_stored) {
      params.headers =
          codec.stored(encode_headers(response.headers, response.trailers), id, "headers");
      if (response.chunked()) {
        params.chunks = response.chunks;
        params.body_length = static_cast<long long>(response.body_length);
        params.digest = codec.stored(response.body_digest, id, "digest");
      } else {
        params.body = &response.body;
        if (codec.sealing()) {
          params.sealed_body = codec.stored(response.body, id, "body");
          params.body = &params.sealed_body;
        }
      }
    }
  }
  pg::CompleteParams params;
  pg::Pending self;
  CompleteDone done;
};

namespace {

// Decodes a member's answer; a record that cannot be read, or a database error
// while reading it, is the store's error, as for every other call.
template <class T, class Decode>
Result<T> decoded(const pg::Pending& self, Decode decode) {
  if (!self.answer.ok()) return self.answer.error();
  try {
    return decode(self.answer.value());
  } catch (const pg::UnreadableRecord& e) {
    return StoreError{StoreErrc::unreadable, e.what()};
  } catch (const std::exception& e) {
    return StoreError{StoreErrc::unavailable, std::string("database error: ") + e.what()};
  }
}

}  // namespace

Result<ClaimResult> PgStore::claim(const ClaimRequest& req) {
  return pg::wait_for<ClaimResult>([&](ClaimDone done) { claim_async(req, std::move(done)); });
}

void PgStore::claim_async(const ClaimRequest& req, ClaimDone done) {
  auto* call = new ClaimCall(req, impl_->codec, std::move(done));
  call->self.finished = [this, call] {
    const std::unique_ptr<ClaimCall> own(call);
    const ClaimRequest& req = own->params.req;
    const pg::RowCodec& codec = impl_->codec;
    Result<ClaimResult> result =
        decoded<ClaimResult>(own->self, [&](const pg::Answer& a) -> Result<ClaimResult> {
          if (a.over_quota) return ClaimResult{*a.over_quota};
          if (a.row < 0) {
            return StoreError{StoreErrc::unavailable, "claim found no row after three attempts"};
          }
          const pg::Columns& at = a.at();
          const pqxx::row row = a.rows[a.row];
          using pg::Columns;
          if (row[Columns::required(at.claimed, "claimed")].as<bool>()) {
            // Ours: its holder needs the token and the lease, which are all the row
            // holds (IDEMPROXY_OWN_CLAIM_COLUMNS). A later claim of the key in the
            // batch finds the record the first claim made.
            const Claimed ours{pg::number(row[Columns::required(at.token, "token")]),
                               pg::from_ms(row[Columns::required(at.locked_ms, "locked_ms")]),
                               row[Columns::required(at.took_over, "took_over")].as<bool>()};
            if (!a.first_claim) return ClaimResult{ours};
            return ClaimResult{pg::claimed_record(req.id, *a.first_claim, ours, codec.key_id())};
          }
          return ClaimResult{codec.read(row, at, req.id)};
        });
    // Unanswered: the claim may still have committed (its connection broke after
    // sending it, and sending it again failed too). The caller answers without the
    // upstream, so withdraw it once the database answers, or the client's retry would
    // find it in flight until its lease ran out. Withdrawing a claim that never
    // committed changes nothing.
    if (!result.ok() && result.error().code == StoreErrc::unavailable) {
      impl_->withdraw(req.id, own->params.nonce, req.lease);
    }
    own->done(std::move(result));
  };
  // On Citus a claim with a quota goes alone, after its scope is counted (a batch
  // holds the keys of one worker; a scope's records span them all).
  if (req.quota.any() && impl_->pool.distributed()) return impl_->batches.submit_alone(call->self);
  impl_->batches.submit(call->self);
}

Result<TimePoint> PgStore::complete(const RecordId& id, std::int64_t token,
                                    const StoredResponse& response, Retention keep) {
  return pg::wait_for<TimePoint>(
      [&](CompleteDone done) { complete_async(id, token, response, keep, std::move(done)); });
}

void PgStore::complete_async(const RecordId& id, std::int64_t token, const StoredResponse& response,
                             Retention keep, CompleteDone done) {
  auto* call = new CompleteCall(id, token, response, keep, impl_->codec, std::move(done));
  call->self.finished = [call] {
    const std::unique_ptr<CompleteCall> own(call);
    own->done(decoded<TimePoint>(own->self, [](const pg::Answer& a) -> Result<TimePoint> {
      if (a.row < 0) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
      return pg::from_ms(a.rows[a.row][0]);
    }));
  };
  const pg::CompleteParams& p = call->params;
  // Large bodies skip batching: in an array they would travel as hex text. A
  // completion in chunks is counted by its own statement (once per stream).
  if (p.chunks > 0 || (p.body && p.body->size() + p.headers->size() > kBatchedBodyMax)) {
    impl_->batches.submit_alone(call->self);
  } else {
    impl_->batches.submit(call->self);
  }
}

bool PgStore::queues_calls() const { return true; }

Result<Done> PgStore::release(const RecordId& id, std::int64_t token) {
  return impl_->fenced_finish(pg::kRelease, id, token);
}

Result<Done> PgStore::mark_indeterminate(const RecordId& id, std::int64_t token) {
  return impl_->fenced_finish(pg::kMarkIndeterminate, id, token);
}

Result<TimePoint> PgStore::renew(const RecordId& id, std::int64_t token, Duration lease) {
  return impl_->with<TimePoint>([&](Connection& c) -> Result<TimePoint> {
    const pqxx::result r =
        c.write(pg::kRenew, id.scope, id.key, static_cast<long long>(token),
                static_cast<long long>(
                    std::chrono::duration_cast<std::chrono::milliseconds>(lease).count()));
    if (r.empty()) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
    return pg::from_ms(r[0][0]);
  });
}

Result<bool> PgStore::resolve(const RecordId& id) {
  return impl_->with<bool>([&](Connection& c) -> Result<bool> {
    return c.write(pg::kResolve, id.scope, id.key).affected_rows() > 0;
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
    pg::Write w(c, true);
    const bool purged = c.exec(w.tx(), pg::kPurge, id.scope, id.key).affected_rows() > 0;
    c.exec(w.tx(), pg::kPurgeChunks, id.scope, id.key);
    if (purged) c.announce(w.tx(), pg::kPurgeChannel, {&id});
    w.commit();
    return purged;
  });
}

// The expired records and their chunks go in one transaction, an index range each.
// Until then every batch also ran one anti-join over the whole chunk table
// (sweep_chunks now reads it a page at a time, once per collection).
Result<std::int64_t> PgStore::delete_expired(int limit) {
  return impl_->with<std::int64_t>([&](Connection& c) -> Result<std::int64_t> {
    pg::Write w(c, true);
    const pqxx::result gone = c.exec(w.tx(), pg::kDeleteExpired, limit);
    Impl::delete_chunks_of(c, w.tx(), gone);
    w.commit();
    return static_cast<std::int64_t>(gone.size());
  });
}

// A tombstoned answer's chunks go with it, in its transaction.
Result<std::int64_t> PgStore::drop_answers(const std::string& route, Duration ttl, int limit) {
  return impl_->with<std::int64_t>([&](Connection& c) -> Result<std::int64_t> {
    pg::Write w(c, true);
    const pqxx::result dropped =
        c.exec(w.tx(), pg::kDropAnswers, route, static_cast<long long>(ttl.count()), limit);
    Impl::delete_chunks_of(c, w.tx(), dropped);
    w.commit();
    return static_cast<std::int64_t>(dropped.size());
  });
}

Result<std::vector<Views::ScopeUsage>> PgStore::nearest_quota(int limit) {
  return impl_->with<std::vector<ScopeUsage>>([&](Connection& c) {
    std::vector<ScopeUsage> out;
    const auto& statement = c.distributed() ? pg::kNearestQuotaCounted : pg::kNearestQuota;
    for (const auto& row : c.run(statement, limit)) out.push_back(pg::scope_usage(row));
    return Result<std::vector<ScopeUsage>>(std::move(out));
  });
}

Result<bool> PgStore::counts_quotas() {
  return impl_->with<bool>(
      [&](Connection& c) -> Result<bool> { return c.run(pg::kCountsQuotas)[0][0].as<bool>(); });
}

Result<Done> PgStore::ping() {
  return impl_->with<Done>([&](Connection& c) -> Result<Done> {
    c.run(pg::kPing);
    return Done{};
  });
}

Result<std::int64_t> PgStore::count_indeterminate() {
  return impl_->with<std::int64_t>([&](Connection& c) -> Result<std::int64_t> {
    return c.run(pg::kIndeterminate)[0][0].as<std::int64_t>();
  });
}

}  // namespace idemproxy::store

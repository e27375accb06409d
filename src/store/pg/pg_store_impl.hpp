#pragma once
// What PgStore holds (its pool, group commits, row codec and listener), shared by the
// files that define its calls: pg_store.cpp, and pg_store_chunks.cpp for streamed
// answers' chunks.
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <string>

#include "idemproxy/store/pg_store.hpp"
#include "store/pg/chunk_commit.hpp"
#include "store/pg/group_commit.hpp"
#include "store/pg/notification_listener.hpp"
#include "store/pg/row_codec.hpp"

namespace idemproxy::store {

struct PgStore::Impl {
  explicit Impl(PgOptions o)
      : options(std::move(o)),
        pool(options),
        codec(options.sealer),
        batches(pool, options),
        chunks(pool, options, codec.key_id()),
        listener(options.dsn) {}

  /// Runs one statement on a pooled connection.
  template <class T>
  Result<T> with(const std::function<Result<T>(pg::Connection&)>& work) {
    return pool.with_connection<T>(work);
  }

  /// Runs `statement`, which ends the holder's claim; fenced when it changed no row.
  /// Announces the finish when another instance's request waits for it (watched).
  Result<Done> fenced_finish(const pg::Statement& statement, const RecordId& id,
                             std::int64_t token) {
    return with<Done>([&](pg::Connection& c) -> Result<Done> {
      pg::Write w(c);
      const pqxx::result r =
          c.exec(w.tx(), statement, id.scope, id.key, static_cast<long long>(token));
      if (r.empty()) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
      if (r[0]["watched"].as<bool>()) c.announce(w.tx(), pg::kDoneChannel, {&id});
      w.commit();
      return Done{};
    });
  }

  /// Withdraws the claim of `id` with `nonce` (kWithdraw) on the pool's next working
  /// connection. Tried again while it finds nothing, until the lease is over: a
  /// connection that broke may leave its statement running a little longer.
  void withdraw(const RecordId& id, long long nonce, Duration lease) {
    spdlog::debug("store: a claim went unanswered; it is withdrawn once the database answers");
    pool.defer({[id, nonce](pg::Connection& c) {
                  pg::Write w(c);
                  const pqxx::result r = c.exec(w.tx(), pg::kWithdraw, id.scope, id.key, nonce);
                  if (r.empty()) return false;
                  if (r[0]["watched"].as<bool>()) c.announce(w.tx(), pg::kDoneChannel, {&id});
                  w.commit();
                  return true;
                },
                std::chrono::steady_clock::now() + lease});
  }

  /// Deletes, inside `tx`, every chunk of the records in `gone` (rows of scope, key):
  /// those garbage collection just deleted or tombstoned (kDeleteChunksOf).
  static void delete_chunks_of(pg::Connection& c, pqxx::transaction_base& tx,
                               const pqxx::result& gone);
  /// Where the chunk sweep's next page starts (PgStore::sweep_chunks), in primary-key
  /// order: the top of the table at first and after the last page.
  struct SweepPlace {
    std::string scope, key;
    long long token = std::numeric_limits<long long>::min();
    int seq = std::numeric_limits<int>::min();
  };
  std::mutex sweep_mu;
  SweepPlace sweep_from;

  PgOptions options;
  pg::Pool pool;
  pg::RowCodec codec;
  pg::GroupCommit batches;
  pg::ChunkCommit chunks;
  pg::NotificationListener listener;
};

namespace pg {

// Starts an asynchronous call with `start` and waits for its answer.
template <class T, class Start>
Result<T> wait_for(Start start) {
  std::mutex mu;
  std::condition_variable answered;
  std::optional<Result<T>> out;
  start([&](Result<T> r) {
    std::lock_guard lock(mu);
    out.emplace(std::move(r));
    answered.notify_one();
  });
  std::unique_lock lock(mu);
  answered.wait(lock, [&] { return out.has_value(); });
  return std::move(*out);
}

}  // namespace pg
}  // namespace idemproxy::store

// PgStore's calls for streamed answers' chunks: appended through their own group
// commit (chunk_commit.hpp), read back a page at a time.
#include <algorithm>
#include <utility>
#include <vector>

#include "store/pg/array_binary.hpp"
#include "store/pg/pg_store_impl.hpp"

namespace idemproxy::store {

Result<Done> PgStore::append(const RecordId& id, std::int64_t token, std::int32_t seq,
                             std::string_view bytes) {
  return pg::wait_for<Done>(
      [&](AppendDone done) { append_async(id, token, seq, bytes, false, std::move(done)); });
}

void PgStore::append_async(const RecordId& id, std::int64_t token, std::int32_t seq,
                           std::string_view bytes, bool announce, AppendDone done) {
  auto* chunk = new pg::PendingChunk{id,       static_cast<long long>(token),
                                     seq,      impl_->codec.stored_chunk(bytes, id, seq),
                                     announce, StoreError{StoreErrc::unavailable, "not run"},
                                     nullptr};
  chunk->finished = [chunk, done = std::move(done)] {
    const std::unique_ptr<pg::PendingChunk> own(chunk);
    done(std::move(own->answer));
  };
  impl_->chunks.submit(*chunk);
}

// The head goes sealed as a completion's does; the record's watchers wake, and a
// request among them attaches to the stream.
Result<Done> PgStore::start_stream(const RecordId& id, std::int64_t token,
                                   const StoredResponse& head) {
  const pqxx::binarystring headers(
      impl_->codec.stored(encode_headers(head.headers, {}), id, "headers"));
  return impl_->with<Done>([&](pg::Connection& c) -> Result<Done> {
    pg::Write w(c);
    const pqxx::result r = c.exec(w.tx(), pg::kStartStream, id.scope, id.key,
                                  static_cast<long long>(token), head.status, headers);
    if (r.empty()) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
    if (r[0]["watched"].as<bool>()) c.announce(w.tx(), pg::kDoneChannel, {&id});
    w.commit();
    return Done{};
  });
}

Result<std::vector<Chunk>> PgStore::read_chunks(const RecordId& id, std::int64_t token,
                                                std::int32_t from, int limit) {
  return impl_->with<std::vector<Chunk>>([&](pg::Connection& c) -> Result<std::vector<Chunk>> {
    // In binary: a page of 256 KiB chunks read as hex text costs more than the rest of
    // the replay (docs/PERFORMANCE.md).
    const pg::BinaryRows rows = c.read(
        pg::kReadChunks,
        {id.scope, id.key, std::to_string(token), std::to_string(from), std::to_string(limit)});
    std::vector<Chunk> out;
    out.reserve(static_cast<std::size_t>(rows.size()));
    for (int row = 0; row < rows.size(); ++row) {
      const std::int32_t seq = rows.int4(row, 0);
      const std::string key_id(rows.is_null(row, 2) ? std::string_view{} : rows.bytes(row, 2));
      out.push_back(
          {seq, impl_->codec.open_chunk(std::string(rows.bytes(row, 1)),
                                        rows.is_null(row, 2) ? nullptr : key_id.c_str(), id, seq)});
    }
    return out;
  });
}

void PgStore::Impl::delete_chunks_of(pg::Connection& c, pqxx::transaction_base& tx,
                                     const pqxx::result& gone) {
  if (gone.empty()) return;
  using Of = pg::ArrayBinary::Of;
  std::vector<pg::ArrayBinary> ids = pg::arrays_of({Of::text, Of::text}, gone.size());
  for (const auto& row : gone) {
    ids[0].add(std::string_view(row[0].c_str(), row[0].size()));
    ids[1].add(std::string_view(row[1].c_str(), row[1].size()));
  }
  const pqxx::binarystring scopes = std::move(ids[0]).done();
  const pqxx::binarystring keys = std::move(ids[1]).done();
  c.exec(tx, pg::kDeleteChunksOf, scopes, keys);
}

// A page of the chunk table from where the last one ended (kSweepBound), and its
// orphans deleted (kSweepRange, or kSweepTail for the last page), one instance at a
// time (kSweepLock). Both ends are in the page: the next one starts at this one's
// last row, so a page moves on by rows - 1, and by at least one.
Result<std::int64_t> PgStore::sweep_chunks(int rows) {
  return impl_->with<std::int64_t>([&](pg::Connection& c) -> Result<std::int64_t> {
    const std::lock_guard lock(impl_->sweep_mu);
    pg::Write w(c, true);
    if (!c.exec(w.tx(), pg::kSweepLock)[0][0].as<bool>()) return std::int64_t{0};
    const Impl::SweepPlace& from = impl_->sweep_from;
    const pqxx::result bound = c.exec(w.tx(), pg::kSweepBound, from.scope, from.key, from.token,
                                      from.seq, std::max(rows, 2) - 1);
    Impl::SweepPlace next;  // the top of the table, after the last page
    pqxx::result swept;
    if (bound.empty()) {
      swept = c.exec(w.tx(), pg::kSweepTail, from.scope, from.key, from.token, from.seq);
    } else {
      const auto last = bound[0];
      next = {last[0].as<std::string>(), last[1].as<std::string>(), last[2].as<long long>(),
              last[3].as<int>()};
      swept = c.exec(w.tx(), pg::kSweepRange, from.scope, from.key, from.token, from.seq,
                     next.scope, next.key, next.token, next.seq);
    }
    w.commit();
    impl_->sweep_from = std::move(next);
    return static_cast<std::int64_t>(swept.affected_rows());
  });
}

}  // namespace idemproxy::store

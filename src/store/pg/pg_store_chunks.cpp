// PgStore's calls for streamed answers' chunks: appended through their own group
// commit (chunk_commit.hpp), read back a page at a time.
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

}  // namespace idemproxy::store

#include "store/pg/chunk_commit.hpp"

#include <algorithm>
#include <utility>

#include "idemproxy/common/handoff.hpp"

namespace idemproxy::store::pg {
namespace {

// A bigint or int parameter in PostgreSQL's binary form: big-endian.
template <class T>
pqxx::binarystring big_endian(T value) {
  unsigned char bytes[sizeof(T)];
  auto v = static_cast<std::make_unsigned_t<T>>(value);
  for (std::size_t i = sizeof(T); i-- > 0;) {
    bytes[i] = static_cast<unsigned char>(v & 0xff);
    v >>= 8;
  }
  return {bytes, sizeof(T)};
}

}  // namespace

// Up to kLaneBatches batches at a time per lane (plain PostgreSQL: one lane; Citus:
// one per worker, so a batch commits on one worker, with no two-phase commit). While
// they run, the chunks of every stream queue for the next: under load a transaction
// carries many streams' chunks, and a stream never waits for more than the batches
// before its. Two at once because a batch of 256 KiB chunks spends most of its time in
// its commit, waiting for the WAL's flush (sampled from pg_stat_activity while 1 GiB
// streamed: WALSync in 58% of the samples, the insert's own work in the rest); the
// second batch inserts meanwhile. A chunk's order among batches does not matter: the
// completion counts the token's chunks 1..n.
void ChunkCommit::submit(PendingChunk& chunk) {
  const int worker = pool_.distributed() ? pool_.worker_of(chunk.id.key) : -1;
  Lane* starts = nullptr;
  {
    std::lock_guard lock(mu_);
    Lane& lane = lanes_[worker];
    lane.queue.push_back(&chunk);
    if (lane.running >= kLaneBatches) return;
    ++lane.running;
    starts = &lane;  // map nodes stay put
  }
  runners_.post([this, starts] { drain(*starts); });
}

void ChunkCommit::drain(Lane& lane) {
  std::unique_lock lock(mu_);
  while (!lane.queue.empty()) {
    std::vector<PendingChunk*> batch;
    std::size_t bytes = 0;
    while (!lane.queue.empty() && batch.size() < kBatchChunks &&
           (batch.empty() || bytes + lane.queue.front()->stored.size() <= kBatchBytes)) {
      bytes += lane.queue.front()->stored.size();
      batch.push_back(lane.queue.front());
      lane.queue.pop_front();
    }
    lock.unlock();
    const Result<Done> answer = run(batch);
    lock.lock();
    if (answer.ok()) {
      ++stats_.batches;
      stats_.chunks += static_cast<std::int64_t>(batch.size());
      stats_.bytes += static_cast<std::int64_t>(bytes);
    }
    lock.unlock();
    {
      common::Handoff handoff;  // one post per I/O thread, as GroupCommit hands out
      for (PendingChunk* c : batch) {
        c->answer = answer;
        std::exchange(c->finished, nullptr)();  // may end its life
      }
    }
    lock.lock();
  }
  --lane.running;
}

Result<Done> ChunkCommit::run(const std::vector<PendingChunk*>& batch) {
  // One row per chunk: a chunk stored while it filled and again once full may meet
  // in one batch, and a statement changes a row once. The longest goes.
  std::vector<const PendingChunk*> rows;
  rows.reserve(batch.size());
  std::vector<const RecordId*> announced;
  for (const PendingChunk* p : batch) {
    const auto same = std::find_if(rows.begin(), rows.end(), [p](const PendingChunk* r) {
      return r->seq == p->seq && r->token == p->token && r->id.key == p->id.key &&
             r->id.scope == p->id.scope;
    });
    if (same == rows.end()) {
      rows.push_back(p);
    } else if (p->stored.size() > (*same)->stored.size()) {
      *same = p;
    }
    if (p->announce && std::none_of(announced.begin(), announced.end(), [p](const RecordId* id) {
          return id->key == p->id.key && id->scope == p->id.scope;
        })) {
      announced.push_back(&p->id);
    }
  }
  return pool_.with_connection<Done>([&](Connection& c) -> Result<Done> {
    std::vector<pqxx::binarystring> params;
    params.reserve(rows.size() * 5);
    for (const PendingChunk* p : rows) {
      params.emplace_back(p->id.scope.data(), p->id.scope.size());
      params.emplace_back(p->id.key.data(), p->id.key.size());
      params.push_back(big_endian<std::int64_t>(p->token));
      params.push_back(big_endian<std::int32_t>(p->seq));
      params.emplace_back(p->stored.data(), p->stored.size());
    }
    // Deferred: the completion's commit flushes them (PgOptions::defer_chunk_flush).
    auto w = flush_later_ ? Write(c, Write::FlushLater{}) : Write(c);
    c.exec_rows_binary(w.tx(), "idemproxy_append_chunks", append_rows_sql,
                       static_cast<int>(rows.size()), key_id_, params);
    c.announce(w.tx(), kDoneChannel, announced);
    w.commit();
    return Done{};
  });
}

ChunkCommit::Stats ChunkCommit::stats() {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace idemproxy::store::pg

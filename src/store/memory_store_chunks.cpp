// MemoryStore's streamed answers (store/claims.hpp): chunks kept by (token, seq), the
// head of a stream in flight, and the chunks no record reads swept away.
#include <iterator>
#include <utility>

#include "idemproxy/store/memory_store.hpp"

namespace idemproxy::store {

bool MemoryStore::chunks_complete(const Key& key, std::int64_t token, std::int32_t n) const {
  const auto it = chunks_.find(key);
  if (it == chunks_.end()) return false;
  std::int32_t expect = 1;
  for (auto c = it->second.lower_bound({token, 0});
       c != it->second.end() && c->first.first == token; ++c) {
    if (c->first.second != expect++) return false;
  }
  return expect - 1 == n;
}

Result<Done> MemoryStore::append(const RecordId& id, std::int64_t token, std::int32_t seq,
                                 std::string_view bytes) {
  std::lock_guard lock(mu_);
  auto [at, added] = chunks_[{id.scope, id.key}].try_emplace({token, seq}, bytes);
  if (!added && bytes.size() > at->second.size()) at->second = bytes;  // the longer stays
  return Done{};
}

void MemoryStore::append_async(const RecordId& id, std::int64_t token, std::int32_t seq,
                               std::string_view bytes, bool announce, AppendDone done) {
  Result<Done> r = append(id, token, seq, bytes);
  bool watched = false;
  if (announce) {
    std::lock_guard lock(mu_);
    const auto it = records_.find({id.scope, id.key});
    watched = it != records_.end() && it->second.watched;
  }
  if (watched) announce_finish(id);
  done(std::move(r));
}

Result<Done> MemoryStore::start_stream(const RecordId& id, std::int64_t token,
                                       const StoredResponse& head) {
  bool watched = false;
  {
    std::lock_guard lock(mu_);
    Entry* e = holder(id, token);
    if (e == nullptr) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
    e->record.streaming = StoredResponse{head.status, head.headers, {}, true};
    watched = e->watched;
  }
  if (watched) announce_finish(id);
  return Done{};
}

Result<std::vector<Chunk>> MemoryStore::read_chunks(const RecordId& id, std::int64_t token,
                                                    std::int32_t from, int limit) {
  std::lock_guard lock(mu_);
  std::vector<Chunk> out;
  const auto it = chunks_.find({id.scope, id.key});
  if (it == chunks_.end()) return out;
  for (auto c = it->second.lower_bound({token, from});
       c != it->second.end() && c->first.first == token && std::cmp_less(out.size(), limit); ++c) {
    out.push_back({c->first.second, c->second});
  }
  return out;
}

std::int64_t MemoryStore::sweep_orphans() {
  std::int64_t swept = 0;
  for (auto it = chunks_.begin(); it != chunks_.end();) {
    const auto record = records_.find(it->first);
    const Record* r = record == records_.end() ? nullptr : &record->second.record;
    const bool reads = r != nullptr && (r->state == RecordState::in_flight ||
                                        (r->state == RecordState::completed && r->response &&
                                         r->response->body_stored && r->response->chunked()));
    swept += static_cast<std::int64_t>(std::erase_if(
        it->second, [&](const auto& c) { return !reads || c.first.first != r->token; }));
    it = it->second.empty() ? chunks_.erase(it) : std::next(it);
  }
  return swept;
}

}  // namespace idemproxy::store

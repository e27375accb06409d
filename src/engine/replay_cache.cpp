#include "idemproxy/engine/replay_cache.hpp"

namespace idemproxy::engine {
namespace {

std::size_t footprint(const std::string& key, const ReplayCache::Entry& e) {
  // The replay's layout, made at its first replay, is counted from the start: each
  // stored field twice (the fields and the head) and the lines it adds.
  std::size_t n = key.size() * 2 + e.fingerprint.size() + e.response.body.size() + 128 + 192 +
                  e.request.method.size() + e.request.target.size() +
                  e.request.content_type.size() + e.request.body.size();
  for (const auto& h : e.response.headers) n += (h.name.size() + h.value.size()) * 2 + 64;
  return n;
}

}  // namespace

std::shared_ptr<const ReplayCache::Entry> ReplayCache::get(const store::RecordId& id,
                                                           Deadline now) {
  if (max_bytes_ == 0) return nullptr;
  std::lock_guard lock(mu_);
  auto it = slots_.find(id);
  if (it == slots_.end()) return nullptr;
  if (it->second.entry->valid_until <= now) {
    drop(it);
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.entry;
}

void ReplayCache::put(const store::RecordId& id, Entry entry) {
  if (max_bytes_ == 0 || !entry.response.body_stored || entry.response.chunked()) return;
  put(id, std::make_shared<const Entry>(std::move(entry)));
}

void ReplayCache::put(const store::RecordId& id, std::shared_ptr<const Entry> entry) {
  // A body in chunks is read from the store as it is sent: only small answers here.
  if (max_bytes_ == 0 || !entry->response.body_stored || entry->response.chunked()) return;
  Key key = store::slot_key(id);
  const std::size_t bytes = footprint(key, *entry);
  if (bytes > max_bytes_) return;
  std::lock_guard lock(mu_);
  if (auto old = slots_.find(key); old != slots_.end()) drop(old);
  while (bytes_ + bytes > max_bytes_ && !lru_.empty()) drop(slots_.find(lru_.back()));
  lru_.push_front(key);
  bytes_ += bytes;
  slots_.emplace(std::move(key), Slot{std::move(entry), bytes, lru_.begin()});
}

void ReplayCache::erase(const store::RecordId& id) {
  std::lock_guard lock(mu_);
  if (auto it = slots_.find(id); it != slots_.end()) drop(it);
}

void ReplayCache::drop(Slots::iterator it) {
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  slots_.erase(it);
}

std::size_t ReplayCache::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

std::size_t ReplayCache::size() const {
  std::lock_guard lock(mu_);
  return slots_.size();
}

}  // namespace idemproxy::engine

#include "idemproxy/engine/replay_cache.hpp"

#include <utility>

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

ReplayCache::ReplayCache(std::size_t max_bytes) : max_bytes_(max_bytes), cells_(16) {}

ReplayCache::~ReplayCache() {
  for (Node* n = newest_; n != nullptr;) delete std::exchange(n, n->older);
}

std::shared_ptr<const ReplayCache::Entry> ReplayCache::get(const store::RecordId& id,
                                                           Deadline now) {
  if (max_bytes_ == 0) return nullptr;
  const std::size_t hash = KeyHash{}(id);
  std::lock_guard lock(mu_);
  Node* node = cells_[probe(id, hash)].node;
  if (node == nullptr) return nullptr;
  if (node->entry->valid_until <= now) {
    drop(node);
    return nullptr;
  }
  unlink(*node);
  link_first(*node);
  return node->entry;
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
  const std::size_t hash = KeyHash{}(key);
  std::shared_ptr<const Entry> replaced;  // let go of outside the lock
  std::lock_guard lock(mu_);
  Cell& cell = cells_[probe(std::string_view(key), hash)];
  Node* node = cell.node;
  if (node == nullptr) {
    node = new Node{std::move(key), hash, std::move(entry), bytes};
    cell = Cell{hash, node};
    bytes_ += bytes;
    if (++count_ * 2 > cells_.size()) grow();
  } else {
    unlink(*node);
    bytes_ = bytes_ - node->bytes + bytes;
    node->bytes = bytes;
    replaced = std::exchange(node->entry, std::move(entry));
  }
  link_first(*node);
  // The least recently used go (never this one: it fits the budget on its own).
  while (bytes_ > max_bytes_ && oldest_ != node) drop(oldest_);
}

void ReplayCache::erase(const store::RecordId& id) {
  const std::size_t hash = KeyHash{}(id);
  std::lock_guard lock(mu_);
  if (Node* node = cells_[probe(id, hash)].node) drop(node);
}

void ReplayCache::drop(Node* node) {
  const std::size_t mask = cells_.size() - 1;
  std::size_t i = node->hash & mask;
  while (cells_[i].node != node) i = (i + 1) & mask;
  vacate(i);
  bytes_ -= node->bytes;
  unlink(*node);
  delete node;
}

void ReplayCache::vacate(std::size_t i) {
  const std::size_t mask = cells_.size() - 1;
  for (std::size_t j = (i + 1) & mask; cells_[j].node != nullptr; j = (j + 1) & mask) {
    // The cell at j may fill the hole at i when i lies on its way from its home to j.
    const std::size_t home = cells_[j].hash & mask;
    if (((j - home) & mask) >= ((j - i) & mask)) {
      cells_[i] = cells_[j];
      i = j;
    }
  }
  cells_[i] = Cell{};
  --count_;
}

void ReplayCache::grow() {
  std::vector<Cell> old(cells_.size() * 2);
  old.swap(cells_);
  const std::size_t mask = cells_.size() - 1;
  for (const Cell& c : old) {
    if (c.node == nullptr) continue;
    std::size_t i = c.hash & mask;
    while (cells_[i].node != nullptr) i = (i + 1) & mask;
    cells_[i] = c;
  }
}

void ReplayCache::unlink(Node& n) {
  (n.newer ? n.newer->older : newest_) = n.older;
  (n.older ? n.older->newer : oldest_) = n.newer;
  n.newer = n.older = nullptr;
}

void ReplayCache::link_first(Node& n) {
  n.older = newest_;
  n.newer = nullptr;
  (newest_ ? newest_->newer : oldest_) = &n;
  newest_ = &n;
}

std::size_t ReplayCache::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

std::size_t ReplayCache::size() const {
  std::lock_guard lock(mu_);
  return count_;
}

}  // namespace idemproxy::engine

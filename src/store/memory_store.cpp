#include "idemproxy/store/memory_store.hpp"

#include <algorithm>

namespace idemproxy::store {
namespace {

bool lease_over(const Record& r, TimePoint now) {
  return (r.state == RecordState::in_flight || r.state == RecordState::indeterminate) &&
         r.locked_until <= now;
}

// As kClaim's takeover clause: an in-flight record's TTL never frees it while its
// holder's lease runs.
bool reclaimable(const Record& r, TimePoint now, bool retake_stale) {
  const bool held = r.state == RecordState::in_flight || r.state == RecordState::indeterminate;
  return r.state == RecordState::released ||
         (r.expires_at <= now && (!held || lease_over(r, now))) ||
         (retake_stale && lease_over(r, now));
}

}  // namespace

Result<ClaimResult> MemoryStore::claim(const ClaimRequest& request) {
  std::lock_guard lock(mu_);
  const TimePoint now = clock_.now();
  const Key key{request.id.scope, request.id.key};
  auto it = records_.find(key);
  if (it != records_.end() && !reclaimable(it->second, now, request.retake_stale)) {
    Record copy = it->second;
    copy.expired = false;
    copy.store_now = now;
    copy.stale = copy.state == RecordState::in_flight && copy.locked_until <= now;
    return ClaimResult{std::move(copy)};
  }
  const bool took_over = it != records_.end() && (it->second.state == RecordState::in_flight ||
                                                  it->second.state == RecordState::indeterminate);
  Record r;
  r.id = request.id;
  r.fingerprint = request.fingerprint;
  r.state = RecordState::in_flight;
  r.token = next_token_++;
  r.route = request.route;
  r.method = request.method;
  r.target = request.target;
  r.created_at = now;
  r.locked_until = now + request.lease;
  r.expires_at = now + request.ttl;
  records_[key] = r;
  return ClaimResult{Claimed{r.token, r.locked_until, took_over}};
}

Record* MemoryStore::holder(const RecordId& id, std::int64_t token) {
  auto it = records_.find({id.scope, id.key});
  if (it == records_.end() || it->second.token != token ||
      it->second.state != RecordState::in_flight) {
    return nullptr;
  }
  return &it->second;
}

Result<TimePoint> MemoryStore::complete(const RecordId& id, std::int64_t token,
                                        const StoredResponse& response, Duration ttl) {
  std::lock_guard lock(mu_);
  Record* r = holder(id, token);
  if (r == nullptr) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
  r->state = RecordState::completed;
  r->response = response;
  r->completed_at = clock_.now();
  r->expires_at = r->completed_at + ttl;
  return r->expires_at;
}

Result<Done> MemoryStore::leave_flight(const RecordId& id, std::int64_t token, RecordState next) {
  std::lock_guard lock(mu_);
  Record* r = holder(id, token);
  if (r == nullptr) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
  r->state = next;
  return Done{};
}

Result<TimePoint> MemoryStore::renew(const RecordId& id, std::int64_t token, Duration lease) {
  std::lock_guard lock(mu_);
  Record* r = holder(id, token);
  if (r == nullptr) return StoreError{StoreErrc::fenced, "the claim is no longer held"};
  r->locked_until = clock_.now() + lease;
  return r->locked_until;
}

Result<Done> MemoryStore::release(const RecordId& id, std::int64_t token) {
  return leave_flight(id, token, RecordState::released);
}

Result<Done> MemoryStore::mark_indeterminate(const RecordId& id, std::int64_t token) {
  return leave_flight(id, token, RecordState::indeterminate);
}

Result<bool> MemoryStore::resolve(const RecordId& id) {
  std::lock_guard lock(mu_);
  auto it = records_.find({id.scope, id.key});
  if (it == records_.end()) return false;
  Record& r = it->second;
  const bool stale = r.state == RecordState::in_flight && r.locked_until <= clock_.now();
  if (r.state != RecordState::indeterminate && !stale) return false;
  r.state = RecordState::released;
  return true;
}

Result<std::optional<Record>> MemoryStore::find(const RecordId& id) {
  std::lock_guard lock(mu_);
  auto it = records_.find({id.scope, id.key});
  if (it == records_.end()) return std::optional<Record>{};
  Record copy = it->second;
  copy.expired = copy.expires_at <= clock_.now();
  copy.stale = copy.state == RecordState::in_flight && copy.locked_until <= clock_.now();
  return std::optional<Record>{std::move(copy)};
}

Result<std::vector<Record>> MemoryStore::list(std::optional<RecordState> state, int limit) {
  std::lock_guard lock(mu_);
  const TimePoint now = clock_.now();
  std::vector<Record> out;
  for (const auto& [k, r] : records_) {
    if (state && r.state != *state) continue;
    Record copy = r;
    if (copy.response) {
      copy.response = StoredResponse{copy.response->status, {}, {}, copy.response->body_stored};
    }
    copy.expired = copy.expires_at <= now;
    copy.stale = copy.state == RecordState::in_flight && copy.locked_until <= now;
    out.push_back(std::move(copy));
  }
  std::sort(out.begin(), out.end(),
            [](const Record& a, const Record& b) { return a.created_at > b.created_at; });
  if (out.size() > static_cast<std::size_t>(limit)) out.resize(static_cast<std::size_t>(limit));
  return out;
}

Result<std::int64_t> MemoryStore::count_indeterminate() {
  std::lock_guard lock(mu_);
  return static_cast<std::int64_t>(std::count_if(
      records_.begin(), records_.end(),
      [](const auto& entry) { return entry.second.state == RecordState::indeterminate; }));
}

Result<bool> MemoryStore::purge(const RecordId& id) {
  std::lock_guard lock(mu_);
  return records_.erase({id.scope, id.key}) > 0;
}

Result<std::int64_t> MemoryStore::drop_answers(const std::string& route, Duration ttl, int limit) {
  std::lock_guard lock(mu_);
  const TimePoint now = clock_.now();
  std::int64_t dropped = 0;
  for (auto& [id, r] : records_) {
    if (dropped >= limit) break;
    if (r.route != route || r.state != RecordState::completed || !r.response ||
        !r.response->body_stored || r.completed_at + ttl > now) {
      continue;
    }
    r.response->headers.clear();
    r.response->body.clear();
    r.response->body_stored = false;
    ++dropped;
  }
  return dropped;
}

Result<std::int64_t> MemoryStore::delete_expired(int limit) {
  std::lock_guard lock(mu_);
  const TimePoint now = clock_.now();
  std::int64_t deleted = 0;
  for (auto it = records_.begin(); it != records_.end() && deleted < limit;) {
    const Record& r = it->second;
    const bool held =
        (r.state == RecordState::in_flight || r.state == RecordState::indeterminate) &&
        r.locked_until > now;
    if (r.expires_at <= now && !held) {
      it = records_.erase(it);
      ++deleted;
    } else {
      ++it;
    }
  }
  return deleted;
}

}  // namespace idemproxy::store

#include "idemproxy/store/memory_store.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

namespace idemproxy::store {
namespace {

bool held(const Record& r) {
  return r.state == RecordState::in_flight || r.state == RecordState::indeterminate;
}

bool lease_over(const Record& r, TimePoint now) { return held(r) && r.locked_until <= now; }

// As kClaim's takeover clause: an in-flight record's TTL never frees it while its
// holder's lease runs.
bool reclaimable(const Record& r, TimePoint now, bool retake_stale) {
  return r.state == RecordState::released ||
         (r.expires_at <= now && (!held(r) || lease_over(r, now))) ||
         (retake_stale && lease_over(r, now));
}

const StoreError kFenced{StoreErrc::fenced, "the claim is no longer held"};

// The bytes an answer takes, as the database counts them: its fields and body.
std::int64_t stored_size(const std::optional<StoredResponse>& response) {
  if (!response || !response->body_stored) return 0;
  std::size_t n =
      response->chunked() ? static_cast<std::size_t>(response->body_length) : response->body.size();
  for (const auto* fields : {&response->headers, &response->trailers}) {
    for (const Header& h : *fields) n += h.name.size() + h.value.size();
  }
  return static_cast<std::int64_t>(n);
}

// The share of its fullest cap a scope uses (0 without caps).
double fullness(const Views::ScopeUsage& u) {
  double most = 0;
  const auto share = [&](std::int64_t used, std::int64_t cap) {
    if (cap > 0) most = std::max(most, static_cast<double>(used) / static_cast<double>(cap));
  };
  share(u.usage.records, u.quota.records);
  share(u.usage.bytes, u.quota.bytes);
  share(u.usage.in_flight, u.quota.in_flight);
  return most;
}

}  // namespace

Usage MemoryStore::footprint(const Entry& e) {
  if (!e.counted) return {};
  return {1, stored_size(e.record.response), e.record.state == RecordState::in_flight ? 1 : 0};
}

void MemoryStore::add_usage(const std::string& scope, const Usage& plus, const Usage& minus) {
  Usage& u = usage_[scope].usage;
  u.records += plus.records - minus.records;
  u.bytes += plus.bytes - minus.bytes;
  u.in_flight += plus.in_flight - minus.in_flight;
}

void MemoryStore::give_back(const Entry& e) {
  if (e.counted) add_usage(e.record.id.scope, {}, footprint(e));
}

template <class Change>
void MemoryStore::accounted(Entry& e, Change change) {
  const Usage before = footprint(e);
  change();
  if (e.counted) add_usage(e.record.id.scope, footprint(e), before);
}

Record MemoryStore::read(const Record& r, TimePoint now) {
  Record copy = r;
  copy.expired = r.expires_at <= now;
  copy.stale = r.state == RecordState::in_flight && r.locked_until <= now;
  copy.store_now = now;
  return copy;
}

Result<ClaimResult> MemoryStore::claim(const ClaimRequest& request) {
  std::lock_guard lock(mu_);
  const TimePoint now = clock_.now();
  const Key key{request.id.scope, request.id.key};
  auto it = records_.find(key);
  if (it != records_.end() && !reclaimable(it->second.record, now, request.retake_stale)) {
    return ClaimResult{read(it->second.record, now)};
  }
  const bool took_over = it != records_.end() && held(it->second.record);
  bool counted = it != records_.end() && it->second.counted;
  if (it == records_.end() && request.quota.any()) {
    // A key new to its scope: refused at a cap; otherwise counted from now on.
    ScopeUsage& u = usage_[request.id.scope];
    u.scope = request.id.scope;
    u.quota = request.quota;
    if (auto cap = reached(request.quota, u.usage))
      return ClaimResult{OverQuota{*cap, u.usage, u.quota}};
    counted = true;
  }
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
  Entry& e = it != records_.end() ? it->second : records_[key];
  accounted(e, [&] { e = Entry{r, false, counted}; });
  return ClaimResult{Claimed{r.token, r.locked_until, took_over}};
}

MemoryStore::Entry* MemoryStore::holder(const RecordId& id, std::int64_t token) {
  auto it = records_.find({id.scope, id.key});
  if (it == records_.end() || it->second.record.token != token ||
      it->second.record.state != RecordState::in_flight) {
    return nullptr;
  }
  return &it->second;
}

Result<TimePoint> MemoryStore::complete(const RecordId& id, std::int64_t token,
                                        const StoredResponse& response, Retention keep) {
  bool watched = false;
  TimePoint expires_at;
  {
    std::lock_guard lock(mu_);
    Entry* e = holder(id, token);
    if (e == nullptr) return kFenced;
    if (response.body_stored && response.chunked() &&
        !chunks_complete({id.scope, id.key}, token, response.chunks)) {
      return StoreError{StoreErrc::fenced, "a chunk of the streamed answer is missing"};
    }
    Record& r = e->record;
    r.streaming.reset();
    accounted(*e, [&] {
      r.state = RecordState::completed;
      // An answer too large to keep is recorded by its status alone.
      r.response = response.body_stored ? response : StoredResponse{response.status, {}, {}, false};
      r.completed_at = clock_.now();
      r.replay_until = r.completed_at + keep.answer;
      r.expires_at = r.completed_at + keep.record;
    });
    watched = e->watched;
    expires_at = r.expires_at;
  }
  if (watched) announce_finish(id);
  return expires_at;
}

Result<Done> MemoryStore::leave_flight(const RecordId& id, std::int64_t token, RecordState next) {
  bool watched = false;
  {
    std::lock_guard lock(mu_);
    Entry* e = holder(id, token);
    if (e == nullptr) return kFenced;
    e->record.streaming.reset();
    accounted(*e, [&] { e->record.state = next; });
    watched = e->watched;
  }
  if (watched) announce_finish(id);
  return Done{};
}

Result<TimePoint> MemoryStore::renew(const RecordId& id, std::int64_t token, Duration lease) {
  std::lock_guard lock(mu_);
  Entry* e = holder(id, token);
  if (e == nullptr) return kFenced;
  e->record.locked_until = clock_.now() + lease;
  return e->record.locked_until;
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
  Record& r = it->second.record;
  const bool stale = r.state == RecordState::in_flight && r.locked_until <= clock_.now();
  if (r.state != RecordState::indeterminate && !stale) return false;
  accounted(it->second, [&] { r.state = RecordState::released; });
  return true;
}

Result<std::optional<Record>> MemoryStore::find(const RecordId& id) {
  std::lock_guard lock(mu_);
  auto it = records_.find({id.scope, id.key});
  if (it == records_.end()) return std::optional<Record>{};
  return std::optional<Record>{read(it->second.record, clock_.now())};
}

Result<std::vector<Record>> MemoryStore::list(std::optional<RecordState> state, int limit) {
  std::lock_guard lock(mu_);
  const TimePoint now = clock_.now();
  std::vector<Record> out;
  for (const auto& [k, e] : records_) {
    if (state && e.record.state != *state) continue;
    Record copy = read(e.record, now);
    if (copy.response) {
      StoredResponse listed{copy.response->status, {}, {}, copy.response->body_stored};
      listed.chunks = copy.response->chunks;
      listed.body_length = copy.response->body_length;
      copy.response = std::move(listed);
    }
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
      [](const auto& entry) { return entry.second.record.state == RecordState::indeterminate; }));
}

Result<bool> MemoryStore::purge(const RecordId& id) {
  bool purged = false;
  {
    std::lock_guard lock(mu_);
    auto it = records_.find({id.scope, id.key});
    if (it != records_.end()) {
      give_back(it->second);
      records_.erase(it);
      chunks_.erase({id.scope, id.key});
      purged = true;
    }
  }
  if (purged) announce_purge(id);
  return purged;
}

Result<std::int64_t> MemoryStore::drop_answers(const std::string& route, Duration ttl, int limit) {
  std::lock_guard lock(mu_);
  const TimePoint now = clock_.now();
  std::int64_t dropped = 0;
  for (auto& [id, e] : records_) {
    if (dropped >= limit) break;
    Record& r = e.record;
    if (r.route != route || r.state != RecordState::completed || !r.response ||
        !r.response->body_stored || r.replay_until.value_or(r.completed_at + ttl) > now) {
      continue;
    }
    accounted(e, [&] {
      r.response->headers.clear();
      r.response->trailers.clear();
      r.response->body.clear();
      r.response->body_stored = false;
      r.response->chunks = 0;
      r.response->body_length = 0;
      r.response->body_digest.clear();
    });
    chunks_.erase(id);  // its answer's chunks go with it
    ++dropped;
  }
  return dropped;
}

Result<std::int64_t> MemoryStore::delete_expired(int limit) {
  std::lock_guard lock(mu_);
  const TimePoint now = clock_.now();
  std::int64_t deleted = 0;
  for (auto it = records_.begin(); it != records_.end() && deleted < limit;) {
    const Record& r = it->second.record;
    if (r.expires_at <= now && (!held(r) || lease_over(r, now))) {
      give_back(it->second);
      chunks_.erase(it->first);  // its chunks go with it
      it = records_.erase(it);
      ++deleted;
    } else {
      ++it;
    }
  }
  return deleted;
}

// The whole map at once: an instance's memory holds few enough.
Result<std::int64_t> MemoryStore::sweep_chunks(int) {
  std::lock_guard lock(mu_);
  return sweep_orphans();
}

Result<std::vector<Views::ScopeUsage>> MemoryStore::nearest_quota(int limit) {
  std::lock_guard lock(mu_);
  std::vector<ScopeUsage> out;
  for (const auto& [scope, u] : usage_) out.push_back(u);
  std::stable_sort(out.begin(), out.end(), [](const ScopeUsage& a, const ScopeUsage& b) {
    return fullness(a) > fullness(b);
  });
  if (out.size() > static_cast<std::size_t>(std::max(limit, 0))) {
    out.resize(static_cast<std::size_t>(std::max(limit, 0)));
  }
  return out;
}

// Empty watchers stop every instance's announcements (a proxy's shutdown); others
// join those listening.
void MemoryStore::watch(Watchers watchers) {
  std::lock_guard lock(watch_mu_);
  if (!watchers.purged && !watchers.finished && !watchers.watched && !watchers.resumed) {
    watchers_.clear();
    return;
  }
  watchers_.push_back(std::make_shared<const Watchers>(std::move(watchers)));
  // Listening from now on, and nothing was missed before: as PgStore says once its
  // LISTEN is in place.
  if (watchers_.back()->resumed) watchers_.back()->resumed();
}

bool MemoryStore::announces_finishes() const {
  std::lock_guard lock(watch_mu_);
  return std::any_of(watchers_.begin(), watchers_.end(),
                     [](const auto& w) { return static_cast<bool>(w->finished); });
}

Result<bool> MemoryStore::watch_record(const RecordId& id) {
  bool streaming = false;
  {
    std::lock_guard lock(mu_);
    auto it = records_.find({id.scope, id.key});
    if (it == records_.end() || it->second.record.state != RecordState::in_flight) return false;
    it->second.watched = true;
    streaming = it->second.record.streaming.has_value();
  }
  each_watcher([&id](const Watchers& w) {
    if (w.watched) w.watched(id);
  });
  return !streaming;
}

void MemoryStore::announce_finish(const RecordId& id) {
  each_watcher([&id](const Watchers& w) {
    if (w.finished) w.finished(id);
  });
}

void MemoryStore::announce_purge(const RecordId& id) {
  each_watcher([&id](const Watchers& w) {
    if (w.purged) w.purged(id);
  });
}

}  // namespace idemproxy::store

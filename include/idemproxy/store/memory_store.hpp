#pragma once
// A single-process, non-durable store: local development and unit tests.
#include <map>
#include <mutex>
#include <utility>

#include "idemproxy/store/store.hpp"

namespace idemproxy::store {

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(const Clock& clock) : clock_(clock) {}

  Result<ClaimResult> claim(const ClaimRequest& request) override;
  Result<TimePoint> complete(const RecordId& id, std::int64_t token, const StoredResponse& response,
                             Duration ttl) override;
  Result<TimePoint> renew(const RecordId& id, std::int64_t token, Duration lease) override;
  Result<Done> release(const RecordId& id, std::int64_t token) override;
  Result<Done> mark_indeterminate(const RecordId& id, std::int64_t token) override;
  Result<bool> resolve(const RecordId& id) override;
  Result<std::optional<Record>> find(const RecordId& id) override;
  Result<std::vector<Record>> list(std::optional<RecordState> state, int limit) override;
  Result<bool> purge(const RecordId& id) override;
  Result<std::int64_t> delete_expired(int limit) override;
  Result<std::int64_t> drop_answers(const std::string& route, Duration ttl, int limit) override;
  Result<Done> ping() override { return Done{}; }
  Result<std::int64_t> count_indeterminate() override;

 private:
  using Key = std::pair<std::string, std::string>;
  Record* holder(const RecordId& id, std::int64_t token);
  /// Moves the holder's in-flight record to `next`; fenced if `token` no longer holds it.
  Result<Done> leave_flight(const RecordId& id, std::int64_t token, RecordState next);

  const Clock& clock_;
  std::mutex mu_;
  std::map<Key, Record> records_;
  std::int64_t next_token_ = 1;
};

}  // namespace idemproxy::store

#pragma once
// When each claim this process holds is due for a lease renewal.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "idemproxy/common/clock.hpp"
#include "idemproxy/store/record.hpp"

namespace idemproxy::engine {

/// The claims held while their requests wait on the upstream, each renewed every
/// lease / 3: a holder that is alive never loses its key to a retry however long the
/// upstream takes, and a short lease still frees the key of a holder that crashed.
/// Registering costs no store call; most requests finish before their first renewal
/// is due. The transport runs the loop (http/lease_renewals.cpp) and the store call
/// (Coordinator::renew).
class LeaseSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  /// Registers a claim for as long as it lives. `id` must outlive it.
  class Hold {
   public:
    Hold(LeaseSchedule& schedule, const store::RecordId& id, std::int64_t token, Duration lease,
         Clock::time_point now = Clock::now());
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    LeaseSchedule& schedule_;
    std::uint64_t ticket_;
  };

  struct Due {
    store::RecordId id;  // copied: the request may finish during the renewal
    std::int64_t token;
    Duration lease;
  };

  /// Replaces `out` with the claims due at `now`; each is next due lease / 3 later.
  void take_due(Clock::time_point now, std::vector<Due>& out);
  std::size_t size() const;

 private:
  struct Held {
    const store::RecordId* id;
    std::int64_t token;
    Duration lease;
    Clock::time_point due;
  };

  mutable std::mutex mu_;
  std::uint64_t next_ticket_ = 0;
  std::unordered_map<std::uint64_t, Held> held_;
};

}  // namespace idemproxy::engine

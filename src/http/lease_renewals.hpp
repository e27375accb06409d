#pragma once
// The heartbeat of every claim this process holds while its upstream works.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "http/beast.hpp"
#include "idemproxy/common/clock.hpp"
#include "idemproxy/store/store.hpp"

namespace idemproxy::http {

class Runtime;

/// Keeps the leases of held claims running: each is renewed every lease / 3 while
/// its request waits on the upstream, so a holder that is alive never loses its key
/// to a retry however long the upstream takes, and a short lease still frees the key
/// of a holder that crashed. One loop serves every claim; a request only registers
/// (most finish long before their first renewal is due, and cost no store call).
class LeaseRenewals {
 public:
  /// Registers a claim for as long as it lives. `id` must outlive it.
  class Hold {
   public:
    Hold(LeaseRenewals& renewals, const store::RecordId& id, std::int64_t token, Duration lease);
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    LeaseRenewals& renewals_;
    std::uint64_t ticket_;
  };

  /// Renews the leases that are due, every `tick`, on the database pool; returns
  /// once the process drains and no claim is held.
  asio::awaitable<void> run(Runtime& rt, Duration tick);

  std::size_t size() const;

 private:
  struct Held {
    const store::RecordId* id;
    std::int64_t token;
    Duration lease;
    std::chrono::steady_clock::time_point due;
  };

  mutable std::mutex mu_;
  std::uint64_t next_ticket_ = 0;
  std::unordered_map<std::uint64_t, Held> held_;
};

}  // namespace idemproxy::http

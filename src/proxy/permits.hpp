#pragma once
// Calls that must be paired, as values whose destructors do the second half.
//
// ClaimPermit: a claim this request holds, as a value: the coordinator said execute, and until the
// answer is recorded (complete) or the claim given up (abandon), the permit holds it.
// Whatever way the request's coroutine ends first (an early return, an exception)
// the permit's destructor gives the claim up, so no path leaks one to its lease.
//
// Except one: past the drain timeout (Runtime::leave_claims_to_leases), the frames
// still running are destroyed with their upstream exchanges possibly under way, and
// perhaps after the Runtime itself. Those claims are left to their leases, as
// docs/RELIABILITY.md says: an abandon would let a retry execute while the first
// execution may still be running.
#include <atomic>
#include <cstdint>
#include <memory>

#include "idemproxy/engine/local_holders.hpp"
#include "idemproxy/store/record.hpp"
#include "proxy/http_names.hpp"

namespace idemproxy::proxy {

class Runtime;

class ClaimPermit {
 public:
  /// Holds `id` under `token`, and counts the claim in flight (metrics). `id` must
  /// outlive the permit (it is the request's claim); it is copied only to abandon.
  ClaimPermit(Runtime& rt, const store::RecordId& id, std::int64_t token);
  ClaimPermit(ClaimPermit&& other) noexcept;
  ClaimPermit(const ClaimPermit&) = delete;
  ClaimPermit& operator=(const ClaimPermit&) = delete;
  ClaimPermit& operator=(ClaimPermit&&) = delete;
  /// Still held: abandoned on the database pool, in the background (sent when
  /// mark_sent() was called: the record is then marked indeterminate).
  ~ClaimPermit();

  bool held() const { return rt_ != nullptr; }
  std::int64_t token() const { return token_; }
  /// The request may have reached the upstream from here on.
  void mark_sent() { sent_ = true; }
  /// The caller settles the claim itself now (complete or abandon): the permit lets
  /// go of it, and the claim stops counting as in flight.
  void settle() noexcept;

 private:
  Runtime* rt_;
  /// False once the runtime leaves claims to their leases (or is gone): rt_ is then
  /// never touched again.
  std::shared_ptr<const std::atomic<bool>> abandons_;
  const store::RecordId* id_;
  std::int64_t token_;
  bool sent_ = false;
};

/// A request registered with the coordinator as waiting for another instance to
/// finish `id` (Coordinator::wait_elsewhere): unregistered when this goes, so a
/// waiter whose coroutine ended is never woken (its timer may be gone with it).
class WaitingElsewhere {
 public:
  WaitingElsewhere(Runtime& rt, const store::RecordId& id, const engine::Waiter& waiter);
  ~WaitingElsewhere();
  WaitingElsewhere(const WaitingElsewhere&) = delete;
  WaitingElsewhere& operator=(const WaitingElsewhere&) = delete;

 private:
  Runtime& rt_;
  std::shared_ptr<const std::atomic<bool>> live_;
  const store::RecordId& id_;
  const engine::Waiter& waiter_;
};

}  // namespace idemproxy::proxy

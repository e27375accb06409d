#pragma once
// A claim this request holds, as a move-only permit (RAII). While it lives, the claim
// counts in idemproxy_claims_in_flight. It ends in one of two ways:
//   - settled(): its holder completed or abandoned it through the coordinator;
//   - its destructor, on any other way out (an early return, an exception, a coroutine
//     frame destroyed mid-way): the claim is abandoned on the database pool, as one
//     whose request may have reached the upstream once forwarding() was called
//     (engine::Coordinator::abandon: indeterminate, or left to its lease when the
//     store cannot be reached), and as one that never did before.
// Nothing can leak a claim or the in-flight gauge.
#include <cstdint>

#include "idemproxy/store/record.hpp"
#include "proxy/runtime.hpp"

namespace idemproxy::http {

class ClaimPermit {
 public:
  ClaimPermit(Runtime& rt, store::RecordId id, std::int64_t token)
      : rt_(&rt), id_(std::move(id)), token_(token) {
    rt_->metrics.claim_started();
  }
  ClaimPermit(ClaimPermit&& other) noexcept
      : rt_(std::exchange(other.rt_, nullptr)),
        id_(std::move(other.id_)),
        token_(other.token_),
        forwarded_(other.forwarded_) {}
  ClaimPermit& operator=(ClaimPermit&&) = delete;
  ClaimPermit(const ClaimPermit&) = delete;
  ClaimPermit& operator=(const ClaimPermit&) = delete;
  ~ClaimPermit() {
    if (rt_ == nullptr) return;
    rt_->metrics.claim_ended();
    Runtime* rt = rt_;
    asio::post(rt->db_pool, [rt, id = std::move(id_), token = token_, sent = forwarded_] {
      rt->coordinator.abandon(id, token, sent);
    });
  }

  std::int64_t token() const { return token_; }
  /// The request is about to go to the upstream: from here on it may have acted.
  void forwarding() { forwarded_ = true; }
  /// The claim was completed or abandoned through the coordinator: nothing is left to do.
  void settled() {
    if (rt_ == nullptr) return;
    rt_->metrics.claim_ended();
    rt_ = nullptr;
  }

 private:
  Runtime* rt_;  // null once settled or moved from
  store::RecordId id_;
  std::int64_t token_;
  bool forwarded_ = false;
};

}  // namespace idemproxy::http

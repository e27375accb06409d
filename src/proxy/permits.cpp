#include "proxy/permits.hpp"

#include <spdlog/spdlog.h>

#include <utility>

#include "proxy/runtime.hpp"

namespace idemproxy::proxy {

ClaimPermit::ClaimPermit(Runtime& rt, const store::RecordId& id, std::int64_t token)
    : rt_(&rt), abandons_(rt.abandons_allowed), id_(&id), token_(token) {
  rt.metrics.claim_started();
}

ClaimPermit::ClaimPermit(ClaimPermit&& other) noexcept
    : rt_(std::exchange(other.rt_, nullptr)),
      abandons_(std::move(other.abandons_)),
      id_(other.id_),
      token_(other.token_),
      sent_(other.sent_) {}

void ClaimPermit::settle() noexcept {
  if (rt_ == nullptr || !abandons_->load()) return;
  rt_->metrics.claim_ended();
  rt_ = nullptr;
}

ClaimPermit::~ClaimPermit() {
  if (rt_ == nullptr || !abandons_->load()) return;  // left to its lease
  Runtime& rt = *rt_;
  settle();
  try {
    spdlog::warn("a claim was let go without an answer recorded: abandoned ({})",
                 sent_ ? "the request may have been sent: marked indeterminate" : "not sent");
    // On the database pool, as every store call; nobody waits for it.
    asio::post(rt.db_pool, [&rt, id = *id_, token = token_, sent = sent_] {
      try {
        rt.coordinator.abandon(id, token, sent);
      } catch (const std::exception& e) {
        spdlog::error("abandoning a claim failed; it is left to its lease: {}", e.what());
      }
    });
  } catch (const std::exception& e) {  // no memory for the task: the lease ends it
    spdlog::error("abandoning a claim failed; it is left to its lease: {}", e.what());
  }
}

WaitingElsewhere::WaitingElsewhere(Runtime& rt, const store::RecordId& id,
                                   const engine::Waiter& waiter)
    : rt_(rt), live_(rt.abandons_allowed), id_(id), waiter_(waiter) {}

WaitingElsewhere::~WaitingElsewhere() {
  if (live_->load()) rt_.coordinator.stop_waiting_elsewhere(id_, &waiter_);
}

}  // namespace idemproxy::proxy

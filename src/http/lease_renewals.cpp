#include "http/lease_renewals.hpp"

#include <vector>

#include "http/runtime.hpp"

namespace idemproxy::http {

LeaseRenewals::Hold::Hold(LeaseRenewals& renewals, const store::RecordId& id, std::int64_t token,
                          Duration lease)
    : renewals_(renewals) {
  std::lock_guard lock(renewals_.mu_);
  ticket_ = renewals_.next_ticket_++;
  renewals_.held_.emplace(ticket_,
                          Held{&id, token, lease, std::chrono::steady_clock::now() + lease / 3});
}

LeaseRenewals::Hold::~Hold() {
  std::lock_guard lock(renewals_.mu_);
  renewals_.held_.erase(ticket_);
}

std::size_t LeaseRenewals::size() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

asio::awaitable<void> LeaseRenewals::run(Runtime& rt, Duration tick) {
  struct Due {
    store::RecordId id;
    std::int64_t token;
    Duration lease;
  };
  asio::steady_timer timer(co_await asio::this_coro::executor);
  std::vector<Due> due;
  for (;;) {
    timer.expires_after(tick);
    co_await timer.async_wait(use_nothrow);
    due.clear();
    {
      std::lock_guard lock(mu_);
      if (rt.draining && held_.empty()) co_return;
      const auto now = std::chrono::steady_clock::now();
      for (auto& [ticket, held] : held_) {
        if (held.due > now) continue;
        // Copied while registered: the request may finish during the renewal.
        due.push_back({*held.id, held.token, held.lease});
        held.due = now + held.lease / 3;
      }
    }
    for (const Due& d : due) {
      // A failed renewal (store down) is tried again at the next beat; a fenced one
      // means the claim is gone, and finishing will say so.
      const bool renewed =
          co_await rt.blocking([&rt, &d] { return rt.coordinator.renew(d.id, d.token, d.lease); });
      if (renewed) rt.metrics.count_lease_renewal();
    }
  }
}

}  // namespace idemproxy::http

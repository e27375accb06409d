#include "proxy/lease_renewals.hpp"

#include <vector>

#include "proxy/runtime.hpp"

namespace idemproxy::proxy {

asio::awaitable<void> renew_leases(Runtime& rt, Duration tick) {
  // Named first: GCC 12 may destroy a temporary inside a co_await expression twice.
  const auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer(ex);
  std::vector<engine::LeaseSchedule::Due> due;
  for (;;) {
    timer.expires_after(tick);
    co_await timer.async_wait(use_nothrow);
    if (rt.draining && rt.leases.size() == 0) co_return;
    rt.leases.take_due(std::chrono::steady_clock::now(), due);
    for (const auto& d : due) {
      // A failed renewal (store down) is tried again at the next beat; a fenced one
      // means the claim is gone, and finishing will say so.
      const bool renewed =
          co_await rt.blocking([&rt, &d] { return rt.coordinator.renew(d.id, d.token, d.lease); });
      if (renewed) rt.metrics.count_lease_renewal();
    }
  }
}

}  // namespace idemproxy::proxy

#pragma once
// The loop that renews the leases engine::LeaseSchedule says are due.
#include "http/beast.hpp"
#include "idemproxy/common/clock.hpp"
#include "proxy/http_names.hpp"

namespace idemproxy::proxy {

class Runtime;

/// Every `tick`, renews the leases that are due (on the database pool); returns once
/// the process drains and no claim is held.
asio::awaitable<void> renew_leases(Runtime& rt, Duration tick);

}  // namespace idemproxy::proxy

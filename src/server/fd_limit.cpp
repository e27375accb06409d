#include "server/fd_limit.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <utility>

namespace idemproxy::server {

std::size_t connection_capacity(const config::Config& config) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return config.server.max_connections;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY) return config.server.max_connections;
  const std::size_t reserve =
      64 + static_cast<std::size_t>(config.store.pool_size) + config.upstream.max_idle_connections;
  const std::size_t files = static_cast<std::size_t>(limit.rlim_cur);
  return files > reserve ? std::max<std::size_t>((files - reserve) / 2, 1) : 1;
}

std::size_t LogLimiter::admit() {
  std::lock_guard lock(mu_);
  ++held_;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::seconds{1}) return 0;
  last_ = now;
  return std::exchange(held_, 0);
}

}  // namespace idemproxy::server
